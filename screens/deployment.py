"""A deployment, watched: the phase stepper, progress and numbers from the log, the GPUs'
memory beside them, and the log itself below. Reattaches to a running server: it reads
the server's log from the start and catches up, so closing gpuops loses nothing.

Why it is stuck: a crash shows the finding rules' findings at once; a stall (the stall
watcher, fed by the log and the sampler's GPU memory) shows a banner and starts triage on its
own. `f` applies the top finding's fix (diff first), `x` opens the triage screen."""

from __future__ import annotations

import time
from typing import Any

from rich.text import Text
from textual import work
from textual.app import ComposeResult
from textual.binding import Binding
from textual.containers import Horizontal, Vertical
from textual.css.query import NoMatches
from textual.widgets import Footer, Header, Input

from ..core.config import PHASES
from ..core.deploy.store import Deployment
from ..core.telemetry.samples import memory_used
from .base import GpuopsScreen
from ..tui.logview import LogView
from ..tui.widgets import TextView

GIB = 1024**3


class DeploymentScreen(GpuopsScreen):
    BINDINGS = [
        Binding("k", "quick_check", "Quick check"),
        Binding("b", "bench", "Bench"),
        Binding("f", "apply_fix", "Apply fix"),
        Binding("x", "triage", "Triage"),
        Binding("slash", "filter", "Filter", key_display="/"),
        Binding("escape", "back", "Back", key_display="esc"),
    ]

    def __init__(self, deployment: Deployment):
        super().__init__(id="deployment")
        self.deployment = deployment
        from ..core.diagnose.phases import PhaseTracker

        self.tracker: Any = PhaseTracker()  # from the start: a caller may look before the mount (new_run)
        self.phase_started: dict[str, float] = {}
        self.phase_lines: dict[str, str] = {}
        self.started = time.monotonic()
        self.check_result: str | None = None
        self.scanner: Any = None
        self.watcher: Any = None
        self.findings: list[dict] = []  # the crash's or the stall's, most important first
        self.triage_doc: dict | None = None

    def compose(self) -> ComposeResult:
        yield Header()
        with Horizontal(id="dep-top"):
            with Vertical(id="dep-main"):
                yield TextView(id="dep-phases")
                yield TextView(id="dep-banner")
            with Vertical(id="dep-side"):
                yield TextView(id="dep-numbers")
                yield TextView(id="dep-gpus")
        yield LogView(id="dep-log")
        yield Input(placeholder="filter the log (esc clears)", id="dep-filter")
        yield Footer()

    def on_mount(self) -> None:
        self.new_run()
        d = self.deployment
        self.sub_title = f"{d.name} · {d.model} on {d.host} · {d.launcher}"
        self.query_one("#dep-filter", Input).display = False
        self.query_one(LogView).focus()
        self.follow_log()
        self.set_interval(1.0, self.refresh_view)
        self.set_interval(5.0, self.sample_processes)
        self.refresh_view()
        self.sample_processes()

    def new_run(self) -> None:
        """A server start: a fresh tracker, scanner and stall watcher (a restart in the same log
        begins a new run at its server_args= line)."""
        from ..core.diagnose.phases import PhaseTracker
        from ..core.diagnose.finding_rules import LogScanner
        from ..core.diagnose.stall import StallWatcher

        self.tracker = PhaseTracker()
        self.scanner = LogScanner()
        self.watcher = StallWatcher(self.app.inventory.stall)  # type: ignore[attr-defined]
        self.phase_started.clear()
        self.phase_lines.clear()
        self.findings = []
        self.triage_doc = None

    # ---------------------------------------------------------------- the log

    @work(exclusive=True, group="deployment-log")
    async def follow_log(self) -> None:
        from ..core.deploy.deployer import log_follower, open_launcher
        from ..core.hosts.host import HostError
        from ..core.diagnose.phases import PhaseEvent, Progress, clean

        d = self.deployment
        host = self.app.monitor.hosts.get(d.host)  # type: ignore[attr-defined]
        view = self.query_one(LogView)
        if host is None:
            view.append(f"gpuops: host {d.host} is not in the inventory")
            return
        try:
            follower = log_follower(host, await open_launcher(host, d.plan), host.config.journal_dir)
            async for rec in follower.records():
                view.append(rec.text, rec.ts)
                if rec.notice:  # truncated/rotated/missing: shown, not parsed
                    continue
                line = clean(rec.text)
                if line.text.startswith("server_args=") and (self.tracker.phase not in (None, "starting")
                                                             or self.tracker.crash is not None):
                    self.new_run()
                crashed = self.tracker.outcome == "crashed"
                for ev in self.tracker.feed(line):
                    if isinstance(ev, (PhaseEvent, Progress)):
                        self.watcher.progress(ev.phase if isinstance(ev, PhaseEvent) else None)
                self.scanner.feed(line, self.tracker)
                if self.tracker.outcome == "crashed" and not crashed:
                    self.set_timer(0.5, self.crash_findings)  # the rest of the traceback first
                phase = self.tracker.phase
                if phase and phase not in self.phase_started:
                    self.phase_started[phase] = time.monotonic()
                    self.phase_lines[phase] = rec.text
        except HostError as exc:
            view.append(f"gpuops: {exc.message}")

    # ---------------------------------------------------------------- why it is stuck

    def crash_findings(self) -> None:
        self.findings = [f.to_json() for f in self.scanner.findings(self.tracker, self.deployment.plan)]
        self.refresh_view()

    def watch_stall(self, gpus: dict[int, int | None]) -> None:
        """One sampler reading for the stall watcher; a new stall starts triage on its own."""
        if self.tracker.outcome in ("ready", "crashed") or self.deployment.state == "stopped":
            return
        if gpus:
            self.watcher.gpus(gpus)
        stall = self.watcher.check()
        if self.watcher.stall is None and self.findings and self.tracker.outcome != "crashed":
            self.findings, self.triage_doc = [], None  # progress again: the stall and its findings clear
        if stall is not None:
            from ..core.diagnose.stall import stall_finding

            self.findings = [stall_finding(stall).to_json()]
            self.auto_triage()

    @work(exclusive=True, group="deployment-processes")
    async def sample_processes(self) -> None:
        """The server's processes for the stall watcher: a dead server is not stalled, and a
        stall says how many ranks are alive."""
        from ..core.deploy.deployer import open_launcher
        from ..core.hosts.host import HostError, host_python
        from ..core.hosts.procs import process_tree

        d = self.deployment
        host = self.app.monitor.hosts.get(d.host)  # type: ignore[attr-defined]
        if host is None or self.watcher is None:
            return
        try:
            st = await (await open_launcher(host, d.plan)).status()
            if not st.running or not st.pid:
                self.watcher.processes(0)
                return
            tree = await process_tree(host, st.pid, host_python(host))
        except HostError:
            return  # unknown: the last reading stands
        self.watcher.processes(len(tree.pids), len(tree.ranks) or None)

    @work(exclusive=True, group="deployment-triage")
    async def auto_triage(self) -> None:
        from ..core.diagnose.triage import triage_deployment
        from ..core.hosts.host import HostError

        d = self.deployment
        host = self.app.monitor.hosts.get(d.host)  # type: ignore[attr-defined]
        if host is None:
            return
        try:
            doc = await triage_deployment(host, d.plan, host.config.journal_dir)
        except HostError as exc:
            self.notify(f"triage failed: {exc.message}", severity="error")
            return
        self.triage_doc = doc
        stall = self.findings[:1]
        self.findings = stall + [f for f in doc["findings"] if not (stall and f["code"] == stall[0]["code"])]
        self.refresh_view()

    def banner(self) -> tuple[Text, str]:
        out = Text()
        kind = ""
        stall = self.watcher.stall if self.watcher is not None else None
        if stall is not None and self.tracker.outcome not in ("ready", "crashed"):
            kind = "stalled"
            out.append(f"STALLED: {stall.summary}\n", style="bold red")
            if self.triage_doc is None:
                out.append("triage running…\n", style="dim")
        elif self.tracker.outcome == "crashed":
            kind = "crashed"
        for f in self.findings[:4]:
            out.append(f"{f.get('severity', '?')}: {f.get('code')}: ", style="bold red" if f.get("severity") == "error"
                       else "yellow")
            out.append(f"{f.get('summary')}\n")
        first_fix = next((f for f in self.findings if (f.get("fix") or {}).get("applicable")), None)
        if first_fix is not None:
            out.append(f"f: {first_fix['fix']['summary']}", style="green")
            out.append("   x: triage\n")
        elif self.findings:
            out.append("x: triage (evidence, host checks, fixes)\n")
        return out, kind

    # ---------------------------------------------------------------- the view

    def refresh_view(self) -> None:
        try:
            self._refresh_view()
        except NoMatches:  # the app is closing: the screen's widgets are already gone
            pass

    def _refresh_view(self) -> None:
        if self.watcher is None:  # not mounted yet
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
        gpu_used: dict[int, int | None] = {}
        if state is not None and state.snapshot is not None:
            gpu_used = memory_used(state.snapshot.gpus, wanted)
            for g in state.snapshot.gpus:
                if g.index in wanted:
                    used = g.memory_used / GIB if isinstance(g.memory_used, (int, float)) else float("nan")
                    total = g.memory_total / GIB if isinstance(g.memory_total, (int, float)) else float("nan")
                    gpus.append(f"  GPU{g.index}: {used:6.1f} / {total:.1f} GiB\n")
        self.query_one("#dep-gpus", TextView).set(gpus)
        self.watch_stall(gpu_used)
        text, kind = self.banner()
        box = self.query_one("#dep-banner", TextView)
        box.set(text)
        box.set_class(kind == "stalled", "stalled")
        box.set_class(kind == "crashed", "crashed")

    # ---------------------------------------------------------------- actions

    def action_apply_fix(self) -> None:
        from .triage import ask_and_apply

        first = next((f for f in self.findings if (f.get("fix") or {}).get("applicable")), None)
        if first is None:
            self.notify("no finding with a fix gpuops can apply (x: triage)", severity="warning")
            return
        ask_and_apply(self, self.deployment, first)

    def action_triage(self) -> None:
        from .triage import TriageScreen

        self.app.push_screen(TriageScreen(self.deployment, self.triage_doc))

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

    def action_bench(self) -> None:
        from .bench_launch import open_launcher

        open_launcher(self.app, self.deployment)

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
        from ..core.deploy.deployer import Deployer, open_launcher
        from ..core.deploy.store import Store

        if self.tracker.outcome != "ready":
            self.notify("the server is not ready yet", severity="warning")
            return
        d = self.deployment
        host = self.app.monitor.hosts[d.host]  # type: ignore[attr-defined]
        store = Store()
        try:
            deployer = Deployer(host, d.plan, store, emit=lambda e: None)
            deployer.launcher = await open_launcher(host, d.plan)
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
