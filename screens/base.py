"""What every gpuops screen shares: `:` opens the command line, and `--readonly` turns off the
actions that change a host: the footer shows them struck through (off), `?` lists them as off, and
their key says why (one notice a press) instead of doing nothing."""

from __future__ import annotations

from typing import TYPE_CHECKING, Any, Protocol, cast

from textual import events
from textual.binding import Binding
from textual.message_pump import NoActiveAppError
from textual.screen import Screen

if TYPE_CHECKING:
    from ..core.config import Inventory
    from ..core.ops import Ops
    from ..core.telemetry.monitor import Monitor

# Actions that change a host (or the store), and what a press of one says in `--readonly` (the
# use cases refuse them there too: core/ops.py). A screen's action of another name that only looks
# (the dashboard's `b`: the benchmark runs) is named otherwise.
READONLY_SAYS: dict[str, str] = {
    "end_process": "ending a process changes a host",
    "delete_model": "deleting a model changes a host",
    "apply_fix": "a fix restarts the server",
    "nccl_debug": "a restart with NCCL's logging restarts the server",
    "stop": "stopping a server changes a host",
    "restart": "a restart changes a host",
    "forget": "forgetting a deployment changes the store",
    "swap": "a swap stops and starts servers",
    "deploy": "a deploy starts a server",
    "bench": "a benchmark loads the server and writes on its host",
    "new_run": "a benchmark loads the server and writes on its host",
}
MUTATING_ACTIONS: frozenset[str] = frozenset(READONLY_SAYS)


def readonly_notice(action: str) -> str:
    """What pressing `action`'s key says in a read-only gpuops."""
    return f"read-only: {READONLY_SAYS.get(action, 'it changes a host')}; this gpuops changes nothing"


class ScreensApp(Protocol):
    """What the screens use of the app (`tui.app.GpuopsApp`, which mypy checks against this): the
    screens sit below the app, so they name this instead of importing it. `GpuopsScreen.gapp`."""

    inventory: Inventory
    monitor: Monitor
    readonly: bool

    @property
    def ops(self) -> Ops: ...
    def action_command(self) -> None: ...
    def apply_fix(self, name: str, patch: dict, *, code: str | None = None, summary: str | None = None) -> None: ...
    def begin_swap(self, name: str, model: str | None = None) -> None: ...
    def end_process(self, host_name: str, pid: int, shown_command: str | None,
                    deployment: str | None = None) -> None: ...
    def open_deployment(self, name: str) -> bool: ...
    def open_deployments(self, select: str | None = None) -> None: ...
    def stop_deployment(self, name: str) -> None: ...
    def restart_deployment(self, name: str) -> None: ...
    def forget_deployment(self, name: str) -> None: ...


class GpuopsScreen(Screen):
    BINDINGS = [Binding("colon", "command", "Cmd", key_display=":")]
    HELP_TITLE = ""  # what `?` calls the screen (its class name, spaced, when empty)

    def __init__(self, *args: Any, **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        self._start_with_breakpoints()

    def _start_with_breakpoints(self) -> None:
        """The breakpoint classes (`-narrow`/`-wide`) for the terminal's size, set before the screen
        is first styled. Textual sets them on the screen's first Resize, which comes after its first
        frame: a class changed then restyles every widget of the screen and repaints each (on the
        dashboard, its tables drawn twice, most of a frame). The Resize then finds them set."""
        try:
            app = self.app
        except NoActiveAppError:  # made outside a running app: the Resize sets them
            return
        width, height = app.size
        classes: dict[str, bool] = {}
        for size, breakpoints in ((width, self.HORIZONTAL_BREAKPOINTS), (height, self.VERTICAL_BREAKPOINTS)):
            if breakpoints is None:
                breakpoints = app.HORIZONTAL_BREAKPOINTS if size is width else app.VERTICAL_BREAKPOINTS
            breakpoints = breakpoints or []
            classes.update({name: False for _, name in breakpoints})
            classes.update({name: True for name in self._get_breakpoint_classes(size, breakpoints)})
        self.update_classes(classes, update=False)

    @property
    def holds_work(self) -> bool:
        """Whether closing this screen unasked would lose something (a benchmark running there, a
        plan being reviewed, a form being filled): the app then opens a screen asked for again on
        top rather than closing this one to bring back the one below (`GpuopsApp.bring_back`)."""
        return False

    @property
    def gapp(self) -> ScreensApp:
        """The app, typed as what the screens use of it (`self.app` is Textual's `App`)."""
        return cast("ScreensApp", self.app)

    def action_command(self) -> None:
        self.gapp.action_command()

    def run_screen_command(self, verb: str, arg: str) -> bool:
        """A `:` command of this screen (True: it was one); the app's commands come after."""
        return False

    @property
    def readonly(self) -> bool:
        return bool(getattr(self.app, "readonly", False))

    def check_action(self, action: str, parameters: tuple[object, ...]) -> bool | None:
        if action in MUTATING_ACTIONS and self.readonly:
            return None  # off: struck through in the footer, `?` lists it as off, its key says why
        return True

    def refused_readonly(self, action: str) -> bool:
        """True (and the operator told why, once) when `action` changes a host and this gpuops is
        read-only: for the ways to an action that are not its key (a `:` command, a button)."""
        if action in MUTATING_ACTIONS and self.readonly:
            self.app.notify(readonly_notice(action), severity="warning", timeout=6)
            return True
        return False

    def on_key(self, event: events.Key) -> None:
        """In read-only, the key of an action that changes a host says so (its binding is off: it
        would do nothing, silently), unless a widget in focus has a key of its own there (an
        input's ctrl+k)."""
        if not self.readonly:
            return
        actions = [b.action for b in self._bindings.key_to_bindings.get(event.key, ()) if b.action in MUTATING_ACTIONS]
        if not actions:
            return
        node = self.focused
        while node is not None and node is not self:
            if event.key in node._bindings.key_to_bindings:
                return
            node = node.parent  # type: ignore[assignment]
        event.stop()
        event.prevent_default()
        self.refused_readonly(actions[0])
