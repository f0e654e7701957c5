"""A deployment, watched: the phase stepper with each phase's real time, progress and numbers from
the log, the GPUs' memory beside them, and the log itself below.

The screen only subscribes: the deployment's one watch (gpuops.core.deploy.watch, started by the
use cases when none runs) reads the log, tracks the phases, runs the finding rules and the stall
watcher and records every transition; its events arrive here on the bus. Opened later (``:dep
NAME``, a new gpuops, after a ``kill -9``) the view is rebuilt from the stored events of the
current run, so phases keep their real times and a stall or a crash shows with its findings.

Why it is stuck: a crash shows the findings at once; a stall shows a banner, and the watch's
triage adds the host checks. `f` applies the top finding's fix (diff first), `x` opens triage."""

from __future__ import annotations

from datetime import datetime, timezone
from typing import Any

from rich.text import Text
from textual import work
from textual.app import ComposeResult
from textual.binding import Binding
from textual.containers import Horizontal, Vertical
from textual.css.query import NoMatches
from textual.message import Message
from textual.widgets import Header, Input

from ..core.deploy.view import RunView
from ..core.diagnose.triage import top_fix
from ..core.domain import Deployment, Finding, LogEvent, member_name
from ..core.states import State
from ..core.literal import literal
from ..tui.deployment_view import gpu_lines, numbers_text, phases_text
from ..tui.logview import LogView
from ..tui.widgets import KeyFooter, TextView
from .base import GpuopsScreen

LOG_KEYS = "/ filter  s follow  t times  w wrap  e next error  c copy line"


class DeploymentLog(LogView):
    """The deployment's log. Its keys are listed on its top border, not in the footer: there they
    came before the screen's own and pushed k, b, f, x, n and esc out of view at 80 columns (the
    footer lists the focused widget's keys first). They still work, and `?` lists them."""

    BINDINGS = [Binding(b.key, b.action, b.description, show=False)
                for b in LogView.BINDINGS if isinstance(b, Binding) and b.show]


class DeploymentScreen(GpuopsScreen):
    BINDINGS = [
        Binding("k", "quick_check", "Quick check"),
        Binding("b", "bench", "Bench"),
        Binding("f", "apply_fix", "Apply fix"),
        Binding("x", "triage", "Triage"),
        Binding("n", "swap", "Swap…"),
        Binding("slash", "filter", "Filter", key_display="/", show=False),  # on the log's border
        Binding("escape", "back", "Back", key_display="esc"),
    ]

    class Changed(Message):
        """Events of this deployment (or log lines of its other nodes) arrived on the bus: the
        screen takes every one heard since, in order (_heard). One message for a burst, not one a
        line: 20,000 log lines a second were as many messages, each through the screen's queue."""

    def __init__(self, deployment: Deployment):
        super().__init__()
        self.deployment = deployment
        self.view = RunView(deployment.name, deployment.run)
        self.check_result: str | None = None
        self._unlisten: Any = None
        # what the bus said since the screen last took it: (a node's label or None, the event)
        self._heard: list[tuple[str | None, Any]] = []

    def compose(self) -> ComposeResult:
        yield Header()
        with Horizontal(id="dep-top"):
            with Vertical(id="dep-main"):
                yield TextView(id="dep-phases")
                yield TextView(id="dep-banner")
            with Vertical(id="dep-side"):
                yield TextView(id="dep-gpus")  # first: the many numbers from the log must not push it out of view
                yield TextView(id="dep-numbers")
        log = DeploymentLog(id="dep-log")
        log.border_title = LOG_KEYS
        yield log
        yield Input(placeholder="filter the log (esc clears)", id="dep-filter")
        yield KeyFooter()

    @property
    def ops(self) -> Any:
        return self.gapp.ops

    def on_mount(self) -> None:
        d = self.deployment
        self.sub_title = f"{d.name} · {d.model} on {d.host} · {d.launcher}"
        self.query_one("#dep-filter", Input).display = False
        self.query_one(LogView).focus()
        self._unlisten = self.ops.bus.listen(d.name, lambda e: self._hear(None, e))
        self.view = RunView.of(d.name, self.ops.events(d.name, run=d.run))
        watch = self.ops.watch(d.name)  # the one watch: started when none runs in this gpuops
        view = self.query_one(LogView)
        if self.ops.host(d.host) is None:
            view.append(f"gpuops: host {d.host} is not in the inventory")
        elif watch is not None:
            for event in watch.log:  # what it has read already (a reattach's backlog)
                view.append(event.line, _log_ts(event))
        self._node_unlisten = [self._follow_node(rank, member)
                               for rank, member in enumerate(d.plan.member_names, start=1)]
        self.set_interval(1.0, self._tick)
        self.set_interval(2.0, self._reconcile)
        self.refresh_view()

    def _reconcile(self) -> None:
        """A run whose server has not started (planned, downloading) while no gpuops deploys it any
        more (the one that did was closed or killed) is recorded as interrupted by the use cases:
        its events come here on the bus (the download's last figures do not stay on screen)."""
        from ..core.ops import UNSTARTED, Refused

        if self.view.state in UNSTARTED:
            try:
                self.ops.deployment(self.deployment.name)
            except Refused:
                pass

    def _follow_node(self, rank: int, member: str) -> Any:
        """A multi-node deployment's node `rank`: its watch (the one of this gpuops) and its log lines
        merged into this screen's log, each labelled with its node."""
        label = f"[node {rank}] "
        watch = self.ops.watch(member)
        if watch is not None:
            view = self.query_one(LogView)
            for event in watch.log:
                view.append(label + event.line, _log_ts(event))

        def heard(event: Any) -> None:
            if isinstance(event, LogEvent):
                self._hear(label, event)

        return self.ops.bus.listen(member, heard)

    def _hear(self, label: str | None, event: Any) -> None:
        """An event from the bus (the watch runs in this event loop): kept, and one message posted
        for all that come before the screen takes them."""
        self._heard.append((label, event))
        if len(self._heard) == 1:
            self.post_message(self.Changed())

    def on_unmount(self) -> None:
        if self._unlisten is not None:
            self._unlisten()
        for unlisten in getattr(self, "_node_unlisten", []):
            unlisten()

    def on_deployment_screen_changed(self, message: Changed) -> None:
        heard, self._heard = self._heard, []
        log = self.query_one(LogView)
        applied = False
        for label, event in heard:
            if label is not None:  # another node's line
                log.append(label + event.line, _log_ts(event))
                continue
            if event.run > self.view.run:  # a restart or a fix here: the new run (its own plan)
                self._follow_run()
            if isinstance(event, LogEvent):
                if event.run >= self.view.run:
                    log.append(event.line, _log_ts(event))
                continue
            self.view.apply(event)
            applied = True
        if applied:  # (once for the burst: what the view shows after its last event)
            self.refresh_view()

    def _follow_run(self) -> None:
        """A newer run of the deployment than the one shown (a restart, a fix, a deploy of its name,
        here or by another gpuops): show that one, from its stored events on, said in the log and a
        notice; its watch (this gpuops' own, or relaying another's) carries it on."""
        from ..core.ops import Refused, StoreError

        try:
            d = self.ops.deployment(self.deployment.name)
        except (Refused, StoreError):  # forgotten meanwhile, or the store unreadable now: the view stays
            return
        if d.run <= self.view.run:
            return
        self.deployment = d
        self.view = RunView.of(d.name, self.ops.events(d.name, run=d.run))
        self.check_result = None
        self.query_one(LogView).append(f"── run {d.run} started ──")
        self.notify(f"{d.name}: run {d.run} started (shown now)")
        try:
            self.ops.watch(d.name)
        except StoreError as exc:
            self.notify(str(exc), severity="error")

    # ---------------------------------------------------------------- the view

    def _tick(self) -> None:
        """Once a second: a newer run started by another gpuops (it comes through the store, not
        this gpuops' bus), then the view (its times go on)."""
        try:
            self._follow_run()
        except NoMatches:  # the app is closing
            return
        self.refresh_view()

    def refresh_view(self) -> None:
        try:
            self._refresh_view()
        except NoMatches:  # the app is closing: the screen's widgets are already gone
            pass

    def _refresh_view(self) -> None:
        v = self.view
        plan = self.deployment.plan
        self.query_one("#dep-phases", TextView).set(
            phases_text(v, plan, datetime.now(timezone.utc), narrow=self.has_class("-narrow"),
                        check_result=self.check_result))
        self.query_one("#dep-numbers", TextView).set(numbers_text(v.numbers))
        state = self.gapp.monitor.states.get(self.deployment.host)
        snapshot = state.snapshot if state is not None else None
        gpus = gpu_lines(self._parts() or Text(), plan, v.state, snapshot.gpus if snapshot is not None else None)
        self.query_one("#dep-gpus", TextView).set(gpus)
        text, kind = self.banner()
        box = self.query_one("#dep-banner", TextView)
        box.set(text)
        box.set_class(kind == "stalled", "stalled")
        box.set_class(kind == "crashed", "crashed")
        box.set_class(kind == "notice", "notice")
        self.query_one("#dep-top").set_class(bool(kind), "-alert")  # more room for the findings (80x24)

    def _parts(self) -> Text | None:
        """A router's replicas (each one's state, and whether the router counts it healthy) or a
        multi-node deployment's nodes (each one's state); None for a one-host server."""
        plan = self.deployment.plan
        if not (plan.replicas or plan.members):
            return None
        if plan.replicas:
            out = Text(f"Replicas ({len(plan.replicas) - len(self.view.replicas_lost)} of {len(plan.replicas)} "
                       "healthy by the router)\n", style="bold")
            rows = [(r.name, f"{r.host}:{r.port}", r.name in self.view.replicas_lost) for r in plan.replicas]
        else:
            out = Text(f"Nodes ({plan.nnodes}, rendezvous {plan.dist_init_addr})\n", style="bold")
            rows = [(member_name(plan.name, m.node_rank), f"node {m.node_rank} {m.host}", False) for m in plan.members]
        wide = max(len(name) for name, _, _ in rows), max(len(where) for _, where, _ in rows)
        for name, where, lost in rows:  # (as wide as the names and places are: the pane is narrow)
            state = self.view.state if name == plan.name else self._state_of(name)
            out.append(f"  {name:<{wide[0]}}  {where:<{wide[1]}}  ")
            out.append(state, style="green" if state == State.READY else "red" if state in (State.CRASHED, State.STALLED) else "")
            if name in self.view.in_flight:
                out.append(f"  {self.view.in_flight[name]:.0f} in flight")
            if lost:
                out.append("  lost (router)", style="bold red")
            elif name in self.view.circuits_open:
                out.append("  cut off (router's circuit breaker)", style="bold yellow")
            out.append("\n")
        return out

    def _state_of(self, name: str) -> str:
        """Another part's stored state, through the use cases ("forgotten" once it is gone)."""
        from ..core.ops import Refused

        try:
            return str(self.ops.deployment(name).state)
        except Refused:
            return "forgotten"

    def banner(self) -> tuple[Text, str]:
        v = self.view
        out = Text()
        kind = ""
        said = ""  # the stall as the finding recorded it (its silence then): not said twice
        if v.stall is not None:
            kind = "stalled"
            said = f"{v.stall.summary}: " if v.stall.summary else ""
            out.append(f"STALLED: {literal(v.stall_summary())}\n", style="bold red")  # silent for as long as it lasts
            if v.checks is None:
                out.append("triage running…\n", style="dim")
        elif v.state == State.CRASHED:
            kind = "crashed"
        elif v.state == State.STOPPED and v.findings:  # why it stopped on its own (a download interrupted)
            kind = "notice"
        findings = Text()
        for f in v.findings[:4]:
            findings.append(f"{f.severity}: {literal(f.code)}: ", style="bold red" if f.severity == "error" else "yellow")
            findings.append(f"{literal(f.summary.removeprefix(said) if said else f.summary)}\n")
        what_to_do = self._what_to_do()
        # under 120 columns what to do comes before the findings: the banner's last lines are the ones
        # cut when the findings are long (80x24 lost the fix line of a stall)
        parts = (what_to_do, findings) if self.has_class("-narrow") else (findings, what_to_do)
        for part in parts:
            out.append_text(part)
        out.rstrip()  # (no blank row under it)
        return out, kind

    def _what_to_do(self) -> Text:
        """The banner's line of what to do: `f` and the fix it applies, or the top finding's own
        advice, and `x` triage."""
        v = self.view
        out = Text()
        first_fix = self.first_fix()
        if first_fix is not None and first_fix.fix is not None:
            out.append(f"f: {literal(first_fix.fix.summary)}", style="green")
            out.append("   x: triage\n")
        elif v.findings:
            top = v.findings[0]
            if top.fix is not None:  # the top finding's own advice, not a lesser finding's fix
                out.append(f"{literal(top.code)}: {literal(top.fix.summary)}", style="yellow")
                out.append("   x: triage\n")
            else:
                out.append("x: triage (evidence, host checks, fixes)\n")
        return out

    def first_fix(self) -> Finding | None:
        """The top finding (errors first, causes before the stall's generic advice) when gpuops can
        apply its fix: `f` never applies a lesser finding's fix in its place."""
        return top_fix(self.view.findings)

    # ---------------------------------------------------------------- actions

    def action_apply_fix(self) -> None:
        from .triage import ask_and_apply

        first = self.first_fix()
        if first is None:
            top = self.view.findings[0] if self.view.findings else None
            self.notify(f"the top finding ({top.code}) has no fix gpuops can apply: "
                        f"{top.fix.summary if top.fix else 'see x: triage'}" if top is not None
                        else "no finding with a fix gpuops can apply (x: triage)", severity="warning")
            return
        ask_and_apply(self, self.deployment, first)

    def action_triage(self) -> None:
        from .triage import TriageScreen

        self.app.push_screen(TriageScreen(self.deployment))

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

    def action_swap(self) -> None:
        self.gapp.begin_swap(self.deployment.name)

    def run_screen_command(self, verb: str, arg: str) -> bool:
        if verb == "swap" and not arg:  # `:swap` here: this deployment's
            if not self.refused_readonly("swap"):
                self.gapp.begin_swap(self.deployment.name)
            return True
        return False

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
        from ..core.api import HostError

        if self.view.state != State.READY:
            self.notify("the server is not ready yet", severity="warning")
            return
        try:
            result = await self.ops.quick_check(self.deployment.name)
        except HostError as exc:
            self.check_result = "quick check failed"
            self.notify(exc.message, severity="error")
        else:
            self.check_result = f"quick check: {result['seconds']}s → {str(result.get('content'))[:60]!r}"
            self.notify(self.check_result)
        self.refresh_view()


def _log_ts(event: LogEvent) -> float | None:
    return event.log_ts
