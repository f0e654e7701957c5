"""What every gpuops screen shares: `:` opens the command line, and `--readonly` disables the
actions that change a host."""

from __future__ import annotations

from typing import Any

from textual._context import active_app
from textual.binding import Binding
from textual.screen import Screen

# Actions that change a host; `--readonly` disables every one of them.
MUTATING_ACTIONS: frozenset[str] = frozenset({"end_process", "delete_model", "apply_fix", "nccl_debug",
                                              "stop", "restart", "forget", "swap"})


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
            app = active_app.get()
        except LookupError:  # made outside a running app: the Resize sets them
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

    def action_command(self) -> None:
        self.app.action_command()  # type: ignore[attr-defined]

    def run_screen_command(self, verb: str, arg: str) -> bool:
        """A `:` command of this screen (True: it was one); the app's commands come after."""
        return False

    def check_action(self, action: str, parameters: tuple[object, ...]) -> bool | None:
        if action in MUTATING_ACTIONS and getattr(self.app, "readonly", False):
            return None  # shown disabled in the footer; pressing it does nothing
        return True
