"""The gpuops Textual application."""

from __future__ import annotations

import gc
import os
from functools import cached_property
from typing import TYPE_CHECKING, Any, Callable, Iterable, cast

# What the imports below make (Textual's modules and classes, the screens', core's: tens of
# thousands of objects) lives as long as the process; the cyclic collector, left on, walked that
# growing heap again and again while they ran (tens of collections, as much as a few hundredths of
# a second of the start-up) and found nothing to free. It is off while they run, and their objects
# are set aside before it is back on: else the first allocation after would start a collection of
# all of them at once (about 60,000 objects, 20 to 30 ms on a slow machine).
_GC_WAS_ON = gc.isenabled()
gc.disable()
try:
    from textual.app import App, SystemCommand
    from textual.binding import Binding
    from textual.content import Content
    from textual.css.query import NoMatches
    from textual.screen import Screen
    from textual.theme import Theme

    from ..core.config import Inventory
    from ..core.api import Host
    from ..core.literal import literal, literal_lines
    from ..core.telemetry.monitor import Monitor
    from ..core.paths import load_ui_state, save_ui_state
    from ..core.states import State
    from ..screens.dashboard import DashboardScreen
    from ..themes import CSS_PATH, DEFAULT_THEME, SCREENS_CSS_PATH, THEMES, toggled
    from . import release_heap, settle_heap
    from .commands import DeploymentCommands, HostCommands
finally:
    if _GC_WAS_ON:
        gc.freeze()  # (a module runs once a process: so does this)
        gc.enable()

if TYPE_CHECKING:
    from ..core.ops import Ops



class GpuopsApp(App):
    TITLE = "gpuops"
    CSS_PATH = CSS_PATH
    COMMANDS = App.COMMANDS | {HostCommands, DeploymentCommands}
    # below 120 columns every screen has the class -narrow (the stylesheet stacks panes there)
    HORIZONTAL_BREAKPOINTS = [(0, "-narrow"), (120, "-wide")]
    BINDINGS = [
        Binding("q", "quit", "Quit"),
        Binding("question_mark", "help", "Keys", key_display="?"),
        Binding("ctrl+t", "toggle_theme", "Theme", show=False),  # on ? (the footer keeps q Quit at 80 columns)
    ]

    def __init__(
        self,
        inventory: Inventory,
        *,
        readonly: bool = False,
        simulated: bool = False,
        interval: float = 1.0,
        hosts: Iterable[Host] | None = None,
        config_path: str | None = None,
    ):
        """`config_path`: the config.toml to follow (a change is picked up without a restart; a file
        that appears there later too); None: the inventory's own file, if it has one."""
        _freeze_startup_heap()
        super().__init__()
        self.inventory = inventory
        self.config_path = config_path or inventory.source
        self._config_seen = _file_stamp(self.config_path)
        self.readonly = readonly
        self.update_classes({"-readonly": readonly}, update=False)  # (the footer strikes its keys that are off)
        self.simulated = simulated
        self.interval = interval
        self.monitor = Monitor(inventory, interval=interval, hosts=hosts)
        if self.mode_label():  # in every screen's header
            self.title = f"gpuops · {self.mode_label()}"
        for theme in THEMES:
            self.register_theme(theme)
        # Before the first frame: a theme change later would restyle every widget.
        saved = load_ui_state().get("theme")
        self._set_first_theme(saved if saved in self.available_themes else DEFAULT_THEME)

    # ---------------------------------------------------------------- text shown

    def notify(self, message: str, *, title: str = "", severity: Any = "information", timeout: float | None = None,
               markup: bool = True) -> None:
        """Every notification (the screens' and widgets' `notify` come here) as literal text: never
        parsed as markup, control characters escaped (a host's error or a folder's name in it); a remedy
        the use cases put as a command-line flag ("choose another --port") names the TUI's way to do it
        (tui.wording)."""
        from .wording import in_tui

        super().notify(literal_lines(in_tui(message)), title=literal(title), severity=severity, timeout=timeout,
                       markup=False)

    def format_title(self, title: str, sub_title: str) -> Content:
        """Every screen's header (a deployment's model, a host's name in the subtitle) as literal text."""
        return super().format_title(literal(title), literal(sub_title))

    # ---------------------------------------------------------------- a crash

    crash_summary: str | None = None  # the error that ended the app, one line (None: it did not crash)
    crash_report: str | None = None  # the file its traceback was written to
    crash_traceback: str = ""  # the traceback (shown on stderr when no file could be written)
    crash_report_error: str | None = None  # why no file could be written

    def _handle_exception(self, error: Exception) -> None:
        """An error nothing caught ends the app (Textual's way, exit status 1), and its traceback is
        written to a file (0600, redacted, no local variables) that `gpuops` names in one line on
        exit (`crash_summary`, `crash_report`). Textual's own print of the traceback with every
        frame's locals onto the terminal is left out: a local may hold a secret."""
        if self.crash_summary is None:
            self.crash_summary, self.crash_traceback = _describe_crash(error)
            try:
                self.crash_report = _write_crash_report(self.crash_traceback)
            except OSError as exc:
                self.crash_report_error = exc.strerror or str(exc)
        super()._handle_exception(error)
        self._exit_renderables.clear()

    def _set_first_theme(self, name: str) -> None:
        """The theme the app starts with, as Textual's watcher of `theme` applies one (its classes,
        its ANSI colours, its CSS variables) less the re-parse and restyle of every stylesheet it
        queues: nothing is parsed or styled yet (the CSS is read when the app runs), and that
        re-parse was a whole extra parse of the stylesheet before the first frame."""
        self.set_reactive(App.theme, name)
        theme = self.current_theme
        classes = {c: False for c in self.classes if c.startswith("-theme-")}
        classes.update({f"-theme-{theme.name}": True, "-dark-mode": theme.dark, "-light-mode": not theme.dark})
        self.update_classes(classes, update=False)
        self._refresh_truecolor_filter(self.ansi_theme)
        self.stylesheet.set_variables(self.get_css_variables())

    def mode_label(self) -> str:
        return " · ".join(label for label, on in (("SIMULATED", self.simulated), ("READONLY", self.readonly)) if on)

    def get_default_screen(self) -> Screen:
        return DashboardScreen()

    _screens_css_read = False

    def _load_screen_css(self, screen: Screen) -> None:
        """(Textual's step before a screen is first styled.) The other screens' stylesheet is read
        when the first of them opens, not before the first frame. Only it is parsed then (the
        stylesheet keeps what it parsed), and nothing shown is restyled: its rules style only what
        those screens show."""
        if not self._screens_css_read and not isinstance(screen, DashboardScreen):
            self._screens_css_read = True
            self.stylesheet.read(SCREENS_CSS_PATH)
            self.stylesheet.parse()
            if self.css_monitor is not None:  # (textual --dev: followed like the others)
                self.css_monitor.add_paths([SCREENS_CSS_PATH])
        super()._load_screen_css(screen)

    def on_mount(self) -> None:
        self.theme_changed_signal.subscribe(self, self._remember_theme)
        # Sampling starts once the first frame is on screen: nothing delays that paint.
        self.call_after_refresh(self._start_watching)

    def _start_watching(self) -> None:
        settle_heap()  # (the first screen is drawn: what start-up made is set aside from the collector)
        self.monitor.start()
        self.set_interval(self.interval, self._tick)
        if self.config_path:
            self.set_interval(CONFIG_CHECK_S, self._check_config)

    # ---------------------------------------------------------------- config.toml, followed

    def _check_config(self) -> None:
        stamp = _file_stamp(self.config_path)
        if stamp != self._config_seen:
            self._config_seen = stamp
            self.run_worker(self.reload_config(), group="config", exclusive=True)

    async def reload_config(self) -> None:
        """Read config.toml again: hosts added, removed or changed are followed at once; a file
        with an error changes nothing (the one line says where)."""
        from ..core.config import ConfigError, default_inventory, load_inventory

        path = self.config_path
        try:
            inventory = load_inventory(path) if path and os.path.exists(path) else default_inventory()
        except ConfigError as exc:
            self.notify(f"config not reloaded: {exc} (the hosts stay as they were)", severity="error", timeout=15)
            return
        added, removed, changed = await self.monitor.set_inventory(inventory)
        self.inventory = inventory
        if "ops" in self.__dict__:
            self.ops.set_inventory(inventory, self.monitor.hosts)
        parts = ([f"+{n}" for n in added] + [f"-{n}" for n in removed] + [f"~{n}" for n in changed])
        self.notify(f"{path or 'config'} reloaded" + (f": hosts {' '.join(parts)}" if parts else ""))
        self._tick()

    def _tick(self) -> None:
        stack = self.screen_stack
        if not stack:  # the app is exiting: its screens are gone before its timers stop
            return
        screen = stack[-1]
        refresh = getattr(screen, "refresh_data", None)
        if refresh is None or not screen.is_mounted:
            return
        try:
            refresh()
        except NoMatches:  # the screen is being torn down (the app is exiting)
            pass

    def _remember_theme(self, theme: Theme) -> None:
        save_ui_state(theme=theme.name)

    @cached_property
    def ops(self) -> Ops:
        """The use cases, with this app's Monitor for the watches' GPU readings (made on first use:
        opening the store does not delay the first frame)."""
        from ..core.ops import Ops, Store, StoreError

        try:
            ops = Ops(self.inventory, readonly=self.readonly, hosts=self.monitor.hosts, monitor=self.monitor)
            ops.open_store()
            return ops
        except StoreError as exc:
            # the dashboard goes on (hosts, GPUs); deployments and benchmarks wait for a usable store
            self.notify(f"{exc} (until then nothing is deployed or recorded)", severity="error", timeout=30)
            ops = Ops(self.inventory, readonly=True, store=Store(":memory:"), hosts=self.monitor.hosts,
                      monitor=self.monitor)
            ops.readonly_why = f"the store cannot be used ({exc})"
            return ops

    async def on_unmount(self) -> None:
        if "ops" in self.__dict__:
            await self.ops.close()
        await self.monitor.close()
        release_heap()

    def _run_use_case(self, work: Any, group: str) -> None:
        """A use case in a worker: a refusal or a host error is a notification, never a crash."""
        from ..core.api import HostError
        from ..core.ops import NeedsConfirmation, Refused, StoreError

        async def guarded() -> None:
            try:
                await work
            except Refused as exc:
                self.notify(str(exc), severity="error", timeout=10)
            except NeedsConfirmation as exc:  # the screens ask before calling: a bug if it gets here
                self.notify(f"not done: {exc.question}", severity="error")
            except HostError as exc:
                self.notify(exc.message, severity="error", timeout=10)
            except StoreError as exc:  # a full disk mid-deploy, say: the server is left as it is
                self.notify(str(exc), severity="error", timeout=30)

        self.run_worker(guarded(), group=group, exit_on_error=False)

    def end_process(self, host_name: str, pid: int, shown_command: str | None, deployment: str | None = None) -> None:
        """End a process on a host (asked first by the screen: `deployment`, the one it said the pid
        is the server of, which is then stopped), reporting how it went."""
        async def work() -> None:
            result = await self.ops.end_process(host_name, pid, shown_command, confirmed=True, deployment=deployment)
            self.notify(result.message, severity="information" if result.ended else "error")

        self._run_use_case(work(), "end-process")

    # ---------------------------------------------------------------- actions

    async def action_quit(self) -> None:
        """Quit; while gpuops itself downloads a model (a deploy, a restart, a swap), ask first:
        quitting interrupts the download (deploying again resumes it from what is on disk)."""
        from ..screens.confirm import ConfirmScreen

        if isinstance(self.screen, ConfirmScreen) and getattr(self.screen, "quitting", False):
            return  # already asked
        try:
            downloads = self.ops.downloads() if "ops" in self.__dict__ else []
        except Exception:  # a store that cannot be read: nothing to say about it, quit
            downloads = []
        if not downloads:
            self.exit()
            return
        from ..core import units

        said = "; ".join(f"{name} ({units.size(done)} of {units.size(total)})" if done is not None and total
                         else name for name, done, total in downloads)
        ask = ConfirmScreen(f"Quit while gpuops downloads {said}?",
                            "Quitting interrupts the download: nothing goes on downloading on the host. Deploying "
                            "again (or r on the deployments view) resumes it from what is on disk.",
                            yes="Quit", no="Stay")
        ask.quitting = True  # type: ignore[attr-defined]
        self.push_screen(ask, lambda yes: self.exit() if yes is True else None)

    def action_toggle_theme(self) -> None:
        self.theme = toggled(self.theme)

    def action_help(self) -> None:
        from ..screens.help import HelpScreen

        if isinstance(self.screen, HelpScreen):
            return
        # The footer's keys first, then the rest: gpuops' own keys only (the screen's, the app's,
        # its widgets'), not Textual's built-ins (copy, page left, the palette's internals).
        shown: list[tuple[str, str]] = []
        rest: list[tuple[str, str]] = []
        seen: set[str] = set()
        off: list[tuple[str, str]] = []  # keys whose action is off now (read-only's)
        for active in self.screen.active_bindings.values():
            b = active.binding
            display = self.get_key_display(b)
            if not b.description or display in seen or not _own_binding(active.node, b):
                continue
            seen.add(display)
            if not active.enabled:
                off.append((display, f"{b.description}: off" + (", read-only" if self.readonly else "")))
            else:
                (shown if b.show else rest).append((display, b.description))
        screen = self.screen
        title = getattr(screen, "HELP_TITLE", "") or _spaced(type(screen).__name__.removesuffix("Screen")) or "gpuops"
        self.push_screen(HelpScreen(title, shown, rest, off=off))

    def on_plan_review_screen_deploy_requested(self, event: Any) -> None:
        """Deploy a reviewed plan: checks, then the deployment screen while it comes up (and on:
        the watch goes on after ready, so a crash then is seen)."""
        from ..screens.deployment import DeploymentScreen

        plan = event.plan
        if plan.host is None or plan.host not in self.monitor.hosts:
            self.notify("plan it for a host of the inventory first (offline plans can't be deployed)",
                        severity="error")
            return

        async def opened(deployment: Any) -> None:
            await self.push_screen(DeploymentScreen(deployment))

        async def work() -> None:
            # the operator confirmed the summary, which listed what runs on the plan's GPUs
            outcome = await self.ops.deploy(plan, plan.host, on_begin=opened, keep_on=True,
                                            yes=bool(getattr(event, "confirmed", False)))
            self.notify(f"{plan.name}: {outcome}", severity="information" if outcome == "ready" else "error")

        self._run_use_case(work(), "deploy")

    def begin_swap(self, name: str, model: str | None = None) -> None:
        """The swap's first step: pick the model that replaces ready deployment `name` (`model`:
        the one typed after it, planned at once); then its plan like `name`, reviewed; then the swap
        itself on its screen."""
        from ..core.ops import Refused
        from ..screens.model_picker import ModelPickerScreen

        if self.readonly:
            self.notify("read-only: a swap stops and starts servers", severity="error")
            return
        try:
            d = self.ops.deployment(name)
        except Refused as exc:
            self.notify(str(exc), severity="error")
            return
        if d.state != State.READY:
            self.notify(f"{name} is {d.state}: a swap replaces a ready deployment (deploy the new one instead)",
                        severity="error", timeout=8)
            return
        if d.host not in self.monitor.hosts:
            self.notify(f"{name} runs on {d.host}, which the inventory no longer has", severity="error")
            return
        if d.plan.replicas:
            self.notify(f"{name} is {len(d.plan.replicas)} replicas behind a router: a swap of it is not built yet "
                        "(p on the dashboard plans the new model, e then `replicas K` on its review; deploy it beside)",
                        severity="error", timeout=10)
            return
        self.push_screen(ModelPickerScreen(d.host, swap_from=name, model=model))

    def on_swap_review_screen_swap_requested(self, event: Any) -> None:
        from ..core.bench.runner import resolve_profile
        from ..screens.swap import SwapScreen

        self.push_screen(SwapScreen(event.old, event.plan, resolve_profile("smoke", self.inventory.bench_profiles),
                                    bench=getattr(event, "bench", True)))

    def apply_fix(self, name: str, patch: dict, *, code: str | None = None, summary: str | None = None) -> None:
        """A fix applied to deployment `name`: its plan patched, the server restarted with it and
        watched on a fresh deployment screen (callers have shown the diff and asked first)."""
        from ..screens.deployment import DeploymentScreen

        async def work() -> None:
            self.notify(f"{name}: restarting with the fix ({code or 'fix'})")
            deployment = self.ops.deployment(name)
            while len(self.screen_stack) > 1 and not isinstance(self.screen, DashboardScreen):
                await self.pop_screen()  # the restarted deployment's screen comes on the dashboard
            await self.push_screen(DeploymentScreen(deployment))  # it follows the new run as it begins
            outcome = await self.ops.apply_fix(name, patch, code=code, summary=summary, confirmed=True, keep_on=True)
            self.notify(f"{name}: {outcome}", severity="information" if outcome == "ready" else "error")

        self._run_use_case(work(), "fix")

    def open_deployment(self, name: str) -> bool:
        """Deployment `name`'s screen: the one already open on its current run when there is one
        (brought back, see `bring_back`), else a new one on top."""
        from ..core.ops import Refused
        from ..screens.deployment import DeploymentScreen

        try:
            deployment = self.ops.deployment(name)
        except Refused:
            return False
        if self.bring_back(lambda s: isinstance(s, DeploymentScreen) and s.deployment.name == name
                           and s.view.run == deployment.run) is None:
            self.push_screen(DeploymentScreen(deployment))
        return True

    def bring_back(self, match: Callable[[Screen], bool]) -> Screen | None:
        """The topmost screen of the stack that `match`es (the dashboard aside), made the current one
        again by closing the screens above it; None when there is none, or when one of the screens
        above it holds work that closing it would lose (`GpuopsScreen.holds_work`: a benchmark
        running there, a plan being reviewed): the caller opens a new one on top then. Opening a
        screen twice neither stacks copies without end (`:dep NAME`, `:dep`, Enter on NAME, ...)
        nor loses anything."""
        stack = self.screen_stack
        for i in range(len(stack) - 1, 0, -1):
            if match(stack[i]):
                above = stack[i + 1:]
                if any(getattr(screen, "holds_work", False) for screen in above):
                    return None
                for _ in above:
                    self.pop_screen()
                return stack[i]
        return None

    def jump_to_host(self, name: str) -> bool:
        """The dashboard, with host `name` selected (False: no such host)."""
        if name not in self.monitor.states:
            return False
        while len(self.screen_stack) > 1 and not isinstance(self.screen, DashboardScreen):
            self.pop_screen()
        screen = self.screen
        if isinstance(screen, DashboardScreen):
            return screen.select_host(name)
        return False

    def open_deployments(self, select: str | None = None) -> None:
        from ..screens.deployments import DeploymentsScreen

        screen = cast("DeploymentsScreen | None", self.bring_back(lambda s: isinstance(s, DeploymentsScreen)))
        if screen is None:
            screen = DeploymentsScreen()
            self.push_screen(screen)
        if select:
            self.call_after_refresh(screen.select, select)

    def _deployment_names(self) -> list[str]:
        return [d.name for d in self._deployments()]

    def _deployments(self) -> list[Any]:
        try:
            return self.ops.deployments()
        except Exception:  # a store that cannot be read: the command line still opens
            return []

    def stop_deployment(self, name: str) -> None:
        async def work() -> None:
            detail = await self.ops.stop(name, confirmed=True)
            self.notify(f"{name}: stopped ({detail})")

        self._run_use_case(work(), "stop")

    def restart_deployment(self, name: str) -> None:
        async def work() -> None:
            self.notify(f"{name}: restarting")
            outcome = await self.ops.restart(name, confirmed=True, keep_on=True)
            self.notify(f"{name}: {outcome}", severity="information" if outcome == "ready" else "error")

        self._run_use_case(work(), "restart")

    def forget_deployment(self, name: str) -> None:
        async def work() -> None:
            await self.ops.forget(name, confirmed=True)
            self.notify(f"{name}: forgotten")

        self._run_use_case(work(), "forget")

    # ---------------------------------------------------------------- the `:` command line

    def action_command(self) -> None:
        from ..screens.command import CommandScreen, suggestions

        completions = suggestions(self.monitor.states, self._deployment_names(), self.available_themes)
        placeholder = "host NAME · dep [NAME] · swap NAME [MODEL] · theme NAME · bench · help · quit"

        def done(text: str | None) -> None:
            if text:
                self.run_command(text)

        self.push_screen(CommandScreen(completions, placeholder), done)

    def run_command(self, text: str) -> None:
        """A `:` command: the screen's own first (`stop` on the deployments view, say), then
        `host NAME` (or just NAME), `dep [NAME]`, `deployments`, `theme NAME`, `bench`, `help`,
        `quit`."""
        word, _, arg = text.partition(" ")
        verb, arg = word.lower(), arg.strip()
        screen = self.screen
        if hasattr(screen, "run_screen_command") and screen.run_screen_command(verb, arg):
            return
        if verb in ("host", "h") and arg:
            if not self.jump_to_host(arg):
                self.notify(f"no host named {arg!r}", severity="error")
        elif verb in ("deployment", "dep", "d") and arg:
            if not self.open_deployment(arg):
                self.notify(f"no deployment named {arg!r}: :dep lists them", severity="error")
        elif verb in ("deployment", "dep", "d", "deployments", "deps"):
            self.open_deployments()
        elif verb == "swap":
            self._swap_command(arg)
        elif verb == "theme" and arg:
            if arg not in self.available_themes:
                self.notify(f"no theme named {arg!r}", severity="error")
            else:
                self.theme = arg
        elif verb == "bench":
            from ..screens.bench_runs import BenchRunsScreen

            if self.bring_back(lambda s: isinstance(s, BenchRunsScreen)) is None:
                self.push_screen(BenchRunsScreen())
        elif verb in ("help", "?"):
            self.action_help()
        elif verb in ("q", "quit"):
            self.run_worker(self.action_quit(), group="quit")
        elif word in self.monitor.states and not arg:  # `:gpu2` is `:host gpu2`
            self.jump_to_host(word)
        else:
            self.notify(f"unknown command {text!r}: try host NAME, dep [NAME], swap NAME [MODEL], theme NAME, bench, "
                        "help, quit", severity="error", markup=False)  # (its brackets are text)

    def _swap_command(self, arg: str) -> None:
        """`:swap NAME [MODEL]`; without NAME, which one? (on a deployment's screen, `:swap` is that
        one's: its screen says)."""
        if arg:
            name, _, model = arg.partition(" ")
            self.begin_swap(name, model.strip() or None)
            return
        ready = [d.name for d in self._deployments() if d.state == State.READY]
        self.notify(":swap NAME [MODEL]: NAME is the ready deployment to replace ("
                    + (f"ready now: {', '.join(ready[:6])}" if ready else "none is ready now") + "), MODEL the "
                    "one to put in its place (else pick it)", severity="warning", timeout=10, markup=False)

    def get_system_commands(self, screen: Screen) -> Iterable[SystemCommand]:
        yield from super().get_system_commands(screen)
        yield SystemCommand("Toggle dark/light theme", "switch between gpuops-dark and gpuops-light",
                            self.action_toggle_theme)


_heap_frozen = False


def _freeze_startup_heap() -> None:
    """What the imports made (modules, classes, functions: tens of thousands of objects, all alive
    until the process ends) is set aside from the cyclic garbage collector, once per process
    (gc.freeze). Otherwise each full collection walks all of it again: the app's first frame
    allocates enough to bring one, which alone was tens of milliseconds of the start-up. Garbage
    made from here on is collected as before."""
    global _heap_frozen
    if not _heap_frozen:
        _heap_frozen = True
        gc.freeze()


def _describe_crash(error: BaseException) -> tuple[str, str]:
    """(one line: the error's type and message, as literal text; its whole traceback, redacted)."""
    import traceback

    from ..core.literal import literal
    from ..core.redact import redact

    message = str(error).strip().splitlines()
    line = literal(redact(f"{type(error).__name__}: {message[0]}" if message else type(error).__name__))
    if len(line) > 200:
        line = line[:197] + "..."
    return line, redact("".join(traceback.format_exception(error)))


def _write_crash_report(text: str) -> str:
    """The traceback of a crash in a new file of the state folder's crashes/ (folder 0700, file
    0600); its path."""
    import sys
    import time

    from ..core.paths import state_dir

    folder = state_dir() / "crashes"
    folder.mkdir(mode=0o700, parents=True, exist_ok=True)
    stamp = time.strftime("%Y%m%dT%H%M%SZ", time.gmtime())
    path = folder / f"dashboard-{stamp}-{os.getpid()}.txt"
    fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o600)
    with os.fdopen(fd, "w", encoding="utf-8", errors="replace") as f:
        f.write(f"gpuops dashboard crash, {time.strftime('%Y-%m-%d %H:%M:%S UTC', time.gmtime())}\n"
                f"command: {' '.join(sys.argv)}\n\n{text}")
    return str(path)


CONFIG_CHECK_S = 2.0  # how often config.toml is looked at (its mtime and size; nothing is read unless they change)


def _file_stamp(path: str | None) -> tuple[int, int] | None:
    try:
        st = os.stat(path) if path else None
    except OSError:
        return None
    return (st.st_mtime_ns, st.st_size) if st is not None else None


def _own_binding(node: Any, binding: Binding) -> bool:
    """A binding one of gpuops' classes declares (on the node's class or a gpuops base of it)."""
    for cls in type(node).__mro__:
        if not cls.__module__.startswith(("gpuops.", "__main__")):
            continue
        for declared in cls.__dict__.get("BINDINGS", ()):
            key = declared.key if isinstance(declared, Binding) else declared[0]
            action = declared.action if isinstance(declared, Binding) else declared[1]
            if action == binding.action and binding.key in key.split(","):
                return True
    return False


def _spaced(name: str) -> str:
    """PlanReview -> "plan review"."""
    import re

    return re.sub(r"(?<!^)(?=[A-Z])", " ", name).lower()


if TYPE_CHECKING:
    from ..screens.base import ScreensApp
    from .commands import PaletteApp

    def _what_the_screens_use(app: GpuopsApp) -> ScreensApp:
        return app  # mypy: the app is everything the screens use of it (screens.base.ScreensApp)

    def _what_the_palette_uses(app: GpuopsApp) -> PaletteApp:
        return app  # mypy: the app is everything the palette's commands use of it (tui.commands.PaletteApp)
