"""The gpuops Textual application."""

from __future__ import annotations

import dataclasses
from typing import Iterable

from textual.app import App, SystemCommand
from textual.binding import Binding
from textual.css.query import NoMatches
from textual.screen import Screen
from textual.theme import Theme

from ..core.config import Inventory
from ..core.hosts.host import Host
from ..core.telemetry.monitor import Monitor
from ..core.paths import load_ui_state, save_ui_state
from ..screens.dashboard import DashboardScreen
from ..screens.help import HelpScreen
from ..themes import CSS_PATH, DEFAULT_THEME, THEMES, toggled
from .commands import HostCommands



class GpuopsApp(App):
    TITLE = "gpuops"
    CSS_PATH = CSS_PATH
    COMMANDS = App.COMMANDS | {HostCommands}
    BINDINGS = [
        Binding("q", "quit", "Quit"),
        Binding("question_mark", "help", "Keys", key_display="?"),
        Binding("ctrl+t", "toggle_theme", "Theme"),
    ]

    def __init__(
        self,
        inventory: Inventory,
        *,
        readonly: bool = False,
        simulated: bool = False,
        interval: float = 1.0,
        hosts: Iterable[Host] | None = None,
    ):
        super().__init__()
        self.inventory = inventory
        self.readonly = readonly
        self.simulated = simulated
        self.interval = interval
        self.monitor = Monitor(inventory, interval=interval, hosts=hosts)
        if self.mode_label():  # in every screen's header
            self.title = f"gpuops · {self.mode_label()}"
        for theme in THEMES:
            self.register_theme(theme)
        # Before the first frame: a theme change later would restyle every widget.
        saved = load_ui_state().get("theme")
        self.theme = saved if saved in self.available_themes else DEFAULT_THEME

    def mode_label(self) -> str:
        return " · ".join(label for label, on in (("SIMULATED", self.simulated), ("READONLY", self.readonly)) if on)

    def get_default_screen(self) -> Screen:
        return DashboardScreen()

    def on_mount(self) -> None:
        self.theme_changed_signal.subscribe(self, self._remember_theme)
        # Sampling starts once the first frame is on screen: nothing delays that paint.
        self.call_after_refresh(self._start_watching)

    def _start_watching(self) -> None:
        self.monitor.start()
        self.set_interval(self.interval, self._tick)

    def _tick(self) -> None:
        refresh = getattr(self.screen, "refresh_data", None)
        if refresh is None or not self.screen.is_mounted:
            return
        try:
            refresh()
        except NoMatches:  # the screen is being torn down (the app is exiting)
            pass

    def _remember_theme(self, theme: Theme) -> None:
        save_ui_state(theme=theme.name)

    async def on_unmount(self) -> None:
        await self.monitor.close()

    def end_process(self, host_name: str, pid: int, shown_command: str | None) -> None:
        """End a process on a host (asked first by the screen), reporting how it went."""
        if self.readonly:
            self.notify("read-only: gpuops changes nothing on the hosts", severity="error")
            return
        from ..core.hosts.procs import end_process

        async def work() -> None:
            try:
                result = await end_process(self.monitor.hosts[host_name], pid, shown_command)
            except Exception as exc:  # HostError, timeout: say it, don't crash the UI
                self.notify(f"could not end pid {pid} on {host_name}: {exc}", severity="error")
                return
            self.notify(result.message, severity="information" if result.ended else "error")

        self.run_worker(work(), group="end-process", exit_on_error=False)

    # ---------------------------------------------------------------- actions

    def action_toggle_theme(self) -> None:
        self.theme = toggled(self.theme)

    def action_help(self) -> None:
        if isinstance(self.screen, HelpScreen):
            return
        # The footer's keys first, then the rest (widget keys such as cursor movement).
        shown: list[tuple[str, str]] = []
        rest: list[tuple[str, str]] = []
        seen: set[str] = set()
        for key, active in self.screen.active_bindings.items():
            b = active.binding
            display = self.get_key_display(b)
            if not b.description or display in seen:
                continue
            seen.add(display)
            (shown if b.show else rest).append((display, b.description))
        title = type(self.screen).__name__.removesuffix("Screen").lower() or "gpuops"
        self.push_screen(HelpScreen(title, shown, rest))

    def on_plan_review_screen_deploy_requested(self, event) -> None:
        """Deploy a reviewed plan: checks, then the deployment screen while it comes up."""
        if self.readonly:
            self.notify("read-only: deploy changes a host", severity="error")
            return
        plan = event.plan.to_json()
        host = self.monitor.hosts.get(plan.get("host") or "")
        if host is None:
            self.notify("plan it for a host of the inventory first (offline plans can't be deployed)",
                        severity="error")
            return
        from ..core.deploy.deployer import DeployError, Deployer
        from ..core.deploy.store import Store, StoreError
        from ..screens.deployment import DeploymentScreen

        async def work() -> None:
            store = Store()
            deployer = Deployer(host, plan, store, emit=lambda e: None, stall=dict(self.inventory.stall),
                                journal_dir=host.config.journal_dir)
            try:
                await deployer.prepare()
            except (DeployError, StoreError) as exc:
                self.notify(f"deploy refused: {exc}", severity="error", timeout=10)
                store.close()
                return
            deployment = store.deployment(plan["name"])
            if deployment is not None:
                await self.push_screen(DeploymentScreen(deployment))
            try:
                outcome = await deployer.execute()
            finally:
                store.close()
            self.notify(f"{plan['name']}: {outcome}", severity="information" if outcome == "ready" else "error")

        self.run_worker(work(), group="deploy", exit_on_error=False)

    def apply_fix(self, name: str, patch: dict, why: dict) -> None:
        """A fix applied to deployment `name`: its plan patched, the server restarted with it and
        watched on a fresh deployment screen (callers have shown the diff and asked first)."""
        if self.readonly:
            self.notify("read-only: a fix restarts the server", severity="error")
            return
        from ..core.deploy.deployer import Deployer
        from ..core.diagnose.fixes import apply_patch
        from ..core.deploy.store import Store
        from ..screens.deployment import DeploymentScreen

        async def work() -> None:
            store = Store()
            try:
                d = store.deployment(name)
                host = self.monitor.hosts.get(d.host) if d is not None else None
                if d is None or host is None:
                    self.notify(f"{name}: no such deployment on a host of the inventory", severity="error")
                    return
                try:
                    new_plan, diff = apply_patch(d.plan, patch)
                except ValueError as exc:
                    self.notify(f"fix refused: {exc}", severity="error")
                    return
                deployer = Deployer(host, d.plan, store, emit=lambda e: None, stall=dict(self.inventory.stall),
                                    journal_dir=host.config.journal_dir)
                self.notify(f"{name}: restarting with the fix ({why.get('code', 'fix')})")
                while len(self.screen_stack) > 1 and not isinstance(self.screen, DashboardScreen):
                    await self.pop_screen()  # gone before its successor (same id) is pushed
                # the screen reads the whole log; a new server_args= line starts its new run
                await self.push_screen(DeploymentScreen(dataclasses.replace(d, plan=new_plan)))
                outcome = await deployer.apply_plan(new_plan, {**why, "diff": [list(x) for x in diff]})
            finally:
                store.close()
            self.notify(f"{name}: {outcome}", severity="information" if outcome == "ready" else "error")

        self.run_worker(work(), group="fix", exit_on_error=False)

    def open_deployment(self, name: str) -> bool:
        from ..core.deploy.store import Store
        from ..screens.deployment import DeploymentScreen

        store = Store()
        try:
            deployment = store.deployment(name)
        finally:
            store.close()
        if deployment is None:
            return False
        self.push_screen(DeploymentScreen(deployment))
        return True

    def jump_to_host(self, name: str) -> None:
        screen = self.screen
        if isinstance(screen, DashboardScreen):
            screen.select_host(name)

    def get_system_commands(self, screen: Screen) -> Iterable[SystemCommand]:
        yield from super().get_system_commands(screen)
        yield SystemCommand("Toggle dark/light theme", "switch between gpuops-dark and gpuops-light",
                            self.action_toggle_theme)
