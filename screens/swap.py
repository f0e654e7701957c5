"""The swap, the afternoon as one action: NEW's weights fetched on the host while OLD still serves,
OLD benchmarked (or its latest run of the profile reused), stopped, NEW started like it and watched,
benchmarked the same way, compared; then NEW kept or OLD rolled back (the outage, from the stop of
OLD until a server is ready again, is measured and shown). `core.ops.Ops.swap` does all of it in an
app worker (leaving this screen does not stop it); the screen shows its steps, both deployments' states as they change, the benchmark's
progress and the comparison, and asks the two questions the swap has: roll back after a failure,
and keep NEW after the comparison. `o` opens NEW's deployment screen (its log, phases, findings)."""

from __future__ import annotations

import time
from functools import partial
from typing import Any

from rich.text import Text
from textual.app import ComposeResult
from textual.binding import Binding
from textual.message import Message
from textual.widgets import DataTable, Header, Static

from ..core import units
from ..core.states import State
from ..core.domain import (BenchEvent, BenchProgressEvent, BenchStateEvent, Plan, ProgressEvent, StateEvent,
                           SwapBenchNew, SwapBenchOld, SwapCompare, SwapDeployNew, SwapFetch, SwapKept, SwapNewState,
                           SwapOldState, SwapPlanned, SwapRollback, SwapStep, SwapStopOld)
from ..core.literal import literal
from ..tui.widgets import KeyFooter, LiteralTable, TextView
from .base import GpuopsScreen
from .confirm import ConfirmScreen

STATE_STYLE: dict[str, str] = {State.READY: "green", State.CRASHED: "red", State.STALLED: "yellow"}
OUTCOME_TEXT = {
    "swapped": ("{new} kept: it serves in {old}'s place{outage}", "bold green"),
    "rolled-back": ("rolled back: {old} serves again ({reason}){outage}", "bold yellow"),
    "rollback-failed": ("the rollback did not bring {old} back ({reason}): open it (:dep {old})", "bold red"),
    "failed": ("{new} did not come up ({reason}); {old} stays stopped: r on the deployments view restarts it",
               "bold red"),
    "not-swapped": ("nothing was changed: {reason}", "bold yellow"),
}


def step_text(step: SwapStep) -> str | None:
    """One line for a step of Ops.swap (None: not worth a line)."""
    match step:
        case SwapPlanned():
            return f"planned {step.new} ({step.model}) like {step.old}"
        case SwapFetch():
            return _fetch_text(step)
        case SwapBenchOld() | SwapBenchNew():
            return _bench_text(step)
        case SwapStopOld():
            return f"stopping {step.old}"
        case SwapDeployNew():
            return f"deploying {step.new} (o opens it)"
        case SwapCompare():
            return f"compared runs #{step.before} and #{step.after}"
        case SwapRollback():
            return f"rolling back to {step.old}: {step.why}"
        case SwapKept():
            return f"kept {step.new}"
        case SwapNewState() | SwapOldState():
            who = step.new if isinstance(step, SwapNewState) else step.old
            outage = step.outage_s if isinstance(step.outage_s, float) else None
            return f"{who}: {step.state}" + (f" (outage {outage:.1f} s)" if outage is not None else "")
    return None


def _fetch_text(step: SwapFetch) -> str:
    if not isinstance(step.status, str):
        return f"fetching {step.model} for {step.new} ({step.old} serves meanwhile)"
    if step.status != "ok":
        return f"fetching {step.new}'s weights: {step.status} (nothing was stopped)"
    if step.present:
        return f"{step.new}'s weights: already on the host"
    return f"{step.new}'s weights fetched: {units.size(step.bytes or 0)} in {step.seconds or 0:.0f} s"


def _bench_text(step: SwapBenchOld | SwapBenchNew) -> str:
    if step.skipped:
        who = step.old if isinstance(step, SwapBenchOld) else step.new
        return f"benchmark of {who or 'it'}: skipped"
    if isinstance(step, SwapBenchNew):
        return f"benchmark of {step.new or 'the new one'}: run #{step.run} {step.status or ''}".rstrip()
    if step.reused:
        return f"benchmark of {step.old or 'the old one'}: run #{step.run} reused"
    if step.run is None:
        return "benchmarking the old one…"
    return f"benchmark of the old one: run #{step.run} {step.status or ''}".rstrip()


class SwapScreen(GpuopsScreen):
    HELP_TITLE = "swap"
    BINDINGS = [
        Binding("o", "open_new", "Open new"),
        Binding("escape", "back", "Back", key_display="esc"),
    ]

    class Step(Message):
        def __init__(self, step: SwapStep) -> None:
            super().__init__()
            self.step = step

    class Outcome(Message):
        """Ops.swap's result (``outcome``, ``reason``, ``outage_s``, …)."""

        def __init__(self, result: dict) -> None:
            super().__init__()
            self.result = result

    class State(Message):
        def __init__(self, name: str, state: str) -> None:
            super().__init__()
            self.name = name
            self.state = state

    class Progress(Message):
        def __init__(self, text: str) -> None:
            super().__init__()
            self.text = text

    def __init__(self, old: str, plan: Plan, profile: Any, *, bench: bool = True):
        super().__init__()
        self.old = old
        self.plan = plan
        self.profile = profile
        self.bench = bench  # False: neither is benchmarked (no comparison)
        self.lines: list[tuple[str, str]] = []  # (clock, text)
        self._going: str | None = None  # the step whose start is the last line (its end replaces it)
        self.states: dict[str, str] = {}
        self.progress = ""
        self.outcome: dict | None = None
        self._unlisten: list[Any] = []

    def compose(self) -> ComposeResult:
        yield Header()
        yield Static(id="swap-title")
        yield TextView(id="swap-outcome")  # first: what happened, or what the operator can do now
        yield Static(id="swap-live")
        yield TextView(id="swap-steps")
        yield LiteralTable(id="swap-compare", show_cursor=False)
        yield KeyFooter()

    def on_mount(self) -> None:
        self.sub_title = f"swap {self.old} → {self.plan.name}"
        self.query_one("#swap-title", Static).update(Text.assemble(
            ("swap ", "bold"), (self.old, "bold"), " → ", (self.plan.name, "bold"),
            f"  {literal(self.plan.model.id)} on {self.plan.host}, GPUs {','.join(map(str, self.plan.gpu_ids))}, "
            f"port {self.plan.port} · " + (f"benchmark {self.profile.name}" if self.bench else "no benchmark")))
        self.query_one("#swap-compare", DataTable).display = False
        bus = self.gapp.ops.bus
        for name in (self.old, self.plan.name):
            self._unlisten.append(bus.listen(name, partial(self._event, name)))
        self.app.run_worker(self._swap(), group="swap", exit_on_error=False)
        self._show()

    def on_unmount(self) -> None:
        for unlisten in self._unlisten:
            unlisten()

    def _event(self, name: str, event: Any) -> None:
        if isinstance(event, StateEvent):
            self.post_message(self.State(name, event.state))
            if event.state != State.DOWNLOADING and name == self.plan.name:
                self.post_message(self.Progress(""))
        elif isinstance(event, ProgressEvent) and event.phase == "downloading" and event.total:
            rate = f" at {units.rate(event.rate_bps)}" if event.rate_bps else ""
            self.post_message(self.Progress(f"fetching: {units.size(event.done)} / {units.size(event.total)}{rate}"))

    # ---------------------------------------------------------------- the swap

    async def _swap(self) -> None:
        from ..core.api import HostError
        from ..core.ops import Refused, StoreError

        ops = self.gapp.ops
        try:
            result = await ops.swap(self.old, self.plan, self.profile, confirmed=True, keep=self._keep,
                                    emit=lambda step: self.post_message(self.Step(step)),
                                    bench_emit=self._bench_event, bench_old="reuse" if self.bench else "none",
                                    bench_new=self.bench)
        except (Refused, StoreError, HostError) as exc:
            result = {"outcome": "not-swapped", "reason": getattr(exc, "message", None) or str(exc),
                      "old": self.old, "new": self.plan.name}
        self.post_message(self.Outcome(result))
        self.app.notify(f"swap {self.old} → {self.plan.name}: {result['outcome']}",
                        severity="information" if result["outcome"] == "swapped" else "warning")

    def _bench_event(self, event: BenchEvent) -> None:
        if isinstance(event, BenchProgressEvent):
            done, total = event.done, event.total
            self.post_message(self.Progress(f"benchmark: {done}/{total} requests" if total else "benchmark running"))
        elif isinstance(event, BenchStateEvent) and event.state != "running":
            self.post_message(self.Progress(""))

    async def _keep(self, what: dict) -> bool:
        """The swap's question, asked on top of whatever screen is showing. After a failure: roll
        back now? (y rolls back, what the question proposes; n and esc leave it). After the
        comparison: keep the new one? y keeps it (goes ahead, as y does everywhere), r rolls back,
        n and esc keep it too (nothing is stopped)."""
        import asyncio

        answer: asyncio.Future[bool] = asyncio.get_running_loop().create_future()
        new, old = self.plan.name, self.old

        def answered(keep: bool) -> None:
            if not answer.done():
                answer.set_result(keep)

        if "failed" in what:
            question = f"{what['failed']}: roll back to {old} now?"  # 'NEW crashed'
            detail = (f"y stops {new} and restarts {old} with its plan on port {self.plan.port}; "
                      f"n leaves {new} as it is (its log and triage tell why) and {old} stopped")
            dialog = ConfirmScreen(question, detail, yes=f"Roll back to {old}", no="Leave it")
            self.app.push_screen(dialog, lambda rollback: answered(rollback is not True))
        else:
            question = f"Keep {new}, or roll back to {old}?"
            detail = "\n".join(self._compare_lines(what.get("compare") or {})
                               + [f"y keeps {new} serving in {old}'s place; r stops {new} and restarts {old}; "
                                  "esc keeps it too (nothing is stopped)"])
            dialog = ConfirmScreen(question, detail, yes=f"Keep {new}", other=f"Roll back to {old}", other_key="r",
                                   no=None)
            self.app.push_screen(dialog, lambda choice: answered(choice != "other"))
        return await answer

    @staticmethod
    def _compare_lines(doc: dict) -> list[str]:
        from ..core.bench.runner import compare_rows

        if not doc.get("metrics"):
            return []
        header, rows = compare_rows(doc)
        widths = [max(len(literal(r[i])) for r in [header, *rows]) for i in range(len(header))]
        return ["  ".join(literal(c).ljust(w) for c, w in zip(row, widths)) for row in [header, *rows[:8]]]

    # ---------------------------------------------------------------- showing it

    def on_swap_screen_outcome(self, message: Outcome) -> None:
        self.outcome = message.result
        self._show()

    def on_swap_screen_step(self, message: Step) -> None:
        step = message.step
        if isinstance(step, SwapCompare):
            self._fill_compare(step.compare)
        text = step_text(step)
        if text:
            line = (time.strftime("%H:%M:%S"), text)
            if self._going is not None and step.name == self._going and self.lines:
                self.lines[-1] = line  # the step's end in place of its start: the list stays short (80x24)
            else:
                self.lines.append(line)
            started = ((isinstance(step, SwapFetch) and not isinstance(step.status, str))
                       or (isinstance(step, SwapBenchOld) and step.run is None and not step.skipped))
            self._going = step.name if started else None
        self._show()

    def on_swap_screen_state(self, message: State) -> None:
        self.states[message.name] = message.state
        self._show()

    def on_swap_screen_progress(self, message: Progress) -> None:
        self.progress = message.text
        self._show()

    def _fill_compare(self, doc: dict) -> None:
        from ..core.bench.runner import compare_rows

        table = self.query_one("#swap-compare", DataTable)
        header, rows = compare_rows(doc)
        table.clear(columns=True)
        table.add_columns(*header)
        for row in rows:
            table.add_row(*row)
        table.display = True

    def _show(self) -> None:
        steps = Text()
        room = 8 if self.has_class("-narrow") else 14  # the view's rows (themes: #swap-steps): the latest show
        shown = self.lines if len(self.lines) <= room else self.lines[-(room - 1):]
        if len(shown) < len(self.lines):
            steps.append(f"… {len(self.lines) - len(shown)} earlier step(s)\n", style="dim")
        for clock, text in shown:
            steps.append(f"{clock}  ", style="dim")
            steps.append(literal(text) + "\n")
        if not self.lines:
            steps.append("starting…", style="dim")
        self.query_one("#swap-steps", TextView).set(steps)
        live = Text()
        for name in (self.old, self.plan.name):
            if name in self.states:
                live.append(f"{name}: ", style="bold")
                live.append(self.states[name] + "   ", style=STATE_STYLE.get(self.states[name], ""))
        if self.progress:
            live.append(self.progress, style="cyan")
        self.query_one("#swap-live", Static).update(live)
        out = self.query_one("#swap-outcome", TextView)
        if self.outcome is None:
            out.set(Text("o opens the new deployment · esc leaves (the swap goes on)", style="dim"))
            return
        template, style = OUTCOME_TEXT.get(self.outcome["outcome"], ("{outcome}", "bold"))
        outage = self.outcome.get("outage_s")
        said = f" (outage {outage:.1f} s)" if outage else ""
        out.set(Text(literal(template.format(**{"reason": "", **self.outcome, "outage": said})), style=style))

    # ---------------------------------------------------------------- keys

    def action_open_new(self) -> None:
        if not self.gapp.open_deployment(self.plan.name):
            self.notify(f"{self.plan.name} is not deployed yet", severity="warning")

    def action_back(self) -> None:
        self.app.pop_screen()
