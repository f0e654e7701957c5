"""A deployment, watched: the phase stepper, progress and numbers from the log, the GPUs'
memory beside them, and the log itself below. Reattaches to a running server: it reads
the server's log from the start and catches up, so closing gpuops loses nothing."""

from __future__ import annotations

import time
from typing import Any

from rich.text import Text
from textual import work
from textual.app import ComposeResult
from textual.binding import Binding
from textual.containers import Horizontal, Vertical
from textual.widgets import Footer, Header, Input

from gpuops.core.config import PHASES
from gpuops.core.store import Deployment
from gpuops.screens.base import GpuopsScreen
from gpuops.tui.logview import LogView
from gpuops.tui.widgets import TextView

GIB = 1024**3


class DeploymentScreen(GpuopsScreen):
    BINDINGS = [
        Binding("k", "quick_check", "Quick check"),
        Binding("slash", "filter", "Filter", key_display="/"),
        Binding("escape", "back", "Back", key_display="esc"),
    ]

    def __init__(self, deployment: Deployment):
        super().__init__(id="deployment")
        self.deployment = deployment
        self.tracker: Any = None
        self.phase_started: dict[str, float] = {}
        self.phase_lines: dict[str, str] = {}
        self.started = time.monotonic()
        self.check_result: str | None = None

    def compose(self) -> ComposeResult:
        yield Header()
        with Horizontal(id="dep-top"):
            yield TextView(id="dep-phases")
            with Vertical(id="dep-side"):
                yield TextView(id="dep-numbers")
                yield TextView(id="dep-gpus")
        yield LogView(id="dep-log")
        yield Input(placeholder="filter the log (esc clears)", id="dep-filter")
        yield Footer()

    def on_mount(self) -> None:
        from gpuops.core.phases import PhaseTracker

        self.tracker = PhaseTracker()
        d = self.deployment
        self.sub_title = f"{d.name} · {d.model} on {d.host} · {d.launcher}"
        self.query_one("#dep-filter", Input).display = False
        self.query_one(LogView).focus()
        self.follow_log()
        self.set_interval(1.0, self.refresh_view)
        self.refresh_view()

    # ---------------------------------------------------------------- the log

    @work(exclusive=True, group="deployment-log")
    async def follow_log(self) -> None:
        from gpuops.core.deploy import launcher_for
        from gpuops.core.hosts import HostError
        from gpuops.core.journal import FileFollower, JournalFollower
        from gpuops.core.launch import ProcessLauncher, remote_home

        d = self.deployment
        host = self.app.monitor.hosts.get(d.host)  # type: ignore[attr-defined]
        view = self.query_one(LogView)
        if host is None:
            view.append(f"gpuops: host {d.host} is not in the inventory")
            return
        try:
            home = None if d.launcher == "systemd" else await remote_home(host)
            launcher = launcher_for(host, d.plan, home)
            if isinstance(launcher, ProcessLauncher):
                follower: Any = FileFollower(host, launcher.log_path)
            else:
                follower = JournalFollower(host, launcher.unit, directory=host.config.journal_dir)
            async for rec in follower.records():
                view.append(rec.text, rec.ts)
                if rec.notice:  # truncated/rotated/missing: shown, not parsed
                    continue
                self.tracker.feed(rec.text)
                phase = self.tracker.phase
                if phase and phase not in self.phase_started:
                    self.phase_started[phase] = time.monotonic()
                    self.phase_lines[phase] = rec.text
        except HostError as exc:
            view.append(f"gpuops: {exc.message}")

    # ---------------------------------------------------------------- the view

    def refresh_view(self) -> None:
        if self.tracker is None:
            return
        now = time.monotonic()
        t = self.tracker
        out = Text()
        current = t.phase
        crashed = t.outcome == "crashed"
        reached = PHASES.index(current) if current in PHASES else -1
        for i, phase in enumerate(PHASES):
            if i < reached or (phase == current and t.outcome == "ready"):
                mark, style = "✔", "green"
            elif phase == current:
                mark, style = ("✖", "bold red") if crashed else ("▶", "bold yellow")
            else:
                mark, style = "·", "dim"
            started = self.phase_started.get(phase)
            nxt = next((self.phase_started[p] for p in PHASES[i + 1:] if p in self.phase_started), None)
            elapsed = "" if started is None else f"{((nxt or now) - started):6.1f}s"
            out.append(f"{mark} {phase:<11}{elapsed:>9}", style=style)
            prog = t.progress.get(phase)
            if prog is not None:
                total = f"/{prog.total}" if prog.total else ""
                out.append(f"  {prog.what} {prog.done}{total}", style="cyan")
            out.append("\n")
        if crashed and t.crash is not None:
            out.append(f"\ncrashed in {t.crash.phase or '?'}: {t.crash.summary}\n", style="bold red")
        if t.outcome == "ready":
            plan = self.deployment.plan
            argv = plan.get("argv") or []
            bind = argv[argv.index("--host") + 1] if "--host" in argv else "127.0.0.1"
            out.append(f"\nready: http://{bind}:{plan.get('port')}  (k: quick check)\n", style="bold green")
            if self.check_result:
                out.append(self.check_result + "\n")
        self.query_one("#dep-phases", TextView).set(out)

        nums = Text("From the log\n", style="bold")
        for key, value in sorted(t.numbers.items()):
            nums.append(f"  {key}: {value:g}\n")
        self.query_one("#dep-numbers", TextView).set(nums)

        gpus = Text("GPUs (sampler)\n", style="bold")
        state = self.app.monitor.states.get(self.deployment.host)  # type: ignore[attr-defined]
        wanted = set(self.deployment.plan.get("gpu_ids") or [])
        if state is not None and state.snapshot is not None:
            for g in state.snapshot.gpus:
                if g.index in wanted:
                    used = g.memory_used / GIB if isinstance(g.memory_used, (int, float)) else float("nan")
                    total = g.memory_total / GIB if isinstance(g.memory_total, (int, float)) else float("nan")
                    gpus.append(f"  GPU{g.index}: {used:6.1f} / {total:.1f} GiB\n")
        self.query_one("#dep-gpus", TextView).set(gpus)

    # ---------------------------------------------------------------- actions

    def action_filter(self) -> None:
        box = self.query_one("#dep-filter", Input)
        box.display = True
        box.focus()

    def on_input_changed(self, event: Input.Changed) -> None:
        if event.input.id == "dep-filter":
            self.query_one(LogView).set_filter(event.value)

    def on_input_submitted(self, event: Input.Submitted) -> None:
        if event.input.id == "dep-filter":
            event.input.display = False
            self.query_one(LogView).focus()

    def action_back(self) -> None:
        box = self.query_one("#dep-filter", Input)
        if box.display:
            box.value = ""
            box.display = False
            self.query_one(LogView).set_filter("")
            self.query_one(LogView).focus()
        else:
            self.app.pop_screen()

    @work(exclusive=True, group="quick-check")
    async def action_quick_check(self) -> None:
        from gpuops.core.deploy import Deployer, launcher_for
        from gpuops.core.launch import remote_home
        from gpuops.core.store import Store

        if self.tracker is None or self.tracker.outcome != "ready":
            self.notify("the server is not ready yet", severity="warning")
            return
        d = self.deployment
        host = self.app.monitor.hosts[d.host]  # type: ignore[attr-defined]
        store = Store()
        try:
            deployer = Deployer(host, d.plan, store, emit=lambda e: None)
            home = None if d.launcher == "systemd" else await remote_home(host)
            deployer.launcher = launcher_for(host, d.plan, home)
            result = await deployer.quick_check()
        finally:
            store.close()
        if result is None:
            self.check_result = "quick check failed"
            self.notify("quick check failed", severity="error")
        else:
            self.check_result = f"quick check: {result['seconds']}s → {str(result.get('content'))[:60]!r}"
            self.notify(self.check_result)
        self.refresh_view()
