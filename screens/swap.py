"""The swap, the afternoon as one action: OLD benchmarked (or its latest run of the profile reused),
stopped, NEW deployed like it and watched, benchmarked the same way, compared; then NEW kept or
OLD rolled back. `core.ops.Ops.swap` does all of it in an app worker (leaving this screen does not
stop it); the screen shows its steps, both deployments' states as they change, the benchmark's
progress and the comparison, and asks the two questions the swap has: roll back after a failure,
and keep NEW after the comparison. `o` opens NEW's deployment screen (its log, phases, findings)."""

from __future__ import annotations

import time
from typing import Any

from rich.text import Text
from textual.app import ComposeResult
from textual.binding import Binding
from textual.message import Message
from textual.widgets import DataTable, Header, Static

from ..core.domain import Plan, StateEvent
from ..core.literal import literal
from ..tui.widgets import KeyFooter, LiteralTable, TextView
from .base import GpuopsScreen
from .confirm import ConfirmScreen

OUTCOME_TEXT = {
    "swapped": ("{new} kept: it serves in {old}'s place", "bold green"),
    "rolled-back": ("rolled back: {old} serves again ({reason})", "bold yellow"),
    "rollback-failed": ("the rollback did not bring {old} back ({reason}): open it (:dep {old})", "bold red"),
    "failed": ("{new} did not come up ({reason}); {old} stays stopped: r on the deployments view restarts it",
               "bold red"),
    "not-swapped": ("nothing was changed: {reason}", "bold yellow"),
}


def step_text(step: dict) -> str | None:
    """One line for a step of Ops.swap (None: not worth a line)."""
    name = step.get("step", "")
    if name == "plan":
        return f"planned {step['new']} ({step['model']}) like {step['old']}"
    if name == "bench-old":
        if step.get("reused"):
            return f"benchmark of {step.get('old', 'the old one')}: run #{step['run']} reused"
        if step.get("run") is None:
            return "benchmarking the old one…"
        return f"benchmark of the old one: run #{step['run']} {step.get('status', '')}".rstrip()
    if name == "stop-old":
        return f"stopping {step['old']}"
    if name == "deploy-new":
        return f"deploying {step['new']} (o opens it)"
    if name == "bench-new":
        return f"benchmark of {step.get('new', 'the new one')}: run #{step['run']} {step.get('status', '')}".rstrip()
    if name == "compare":
        return f"compared runs #{step['before']} and #{step['after']}"
    if name == "rollback":
        return f"rolling back to {step['old']}: {step['why']}"
    if name == "kept":
        return f"kept {step['new']}"
    if name.startswith(("new-", "old-")):
        who, _, state = name.partition("-")
        return f"{step.get(who, who)}: {state}"
    return None


class SwapScreen(GpuopsScreen):
    HELP_TITLE = "swap"
    BINDINGS = [
        Binding("o", "open_new", "Open new"),
        Binding("escape", "back", "Back", key_display="esc"),
    ]

    class Step(Message):
        def __init__(self, step: dict) -> None:
            super().__init__()
            self.step = step

    class State(Message):
        def __init__(self, name: str, state: str) -> None:
            super().__init__()
            self.name = name
            self.state = state

    class Progress(Message):
        def __init__(self, text: str) -> None:
            super().__init__()
            self.text = text

    def __init__(self, old: str, plan: Plan, profile: Any):
        super().__init__()
        self.old = old
        self.plan = plan
        self.profile = profile
        self.lines: list[tuple[str, str]] = []  # (clock, text)
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
            f"port {self.plan.port} · benchmark {self.profile.name}"))
        self.query_one("#swap-compare", DataTable).display = False
        bus = self.app.ops.bus  # type: ignore[attr-defined]
        for name in (self.old, self.plan.name):
            self._unlisten.append(bus.listen(name, lambda e, n=name: self._event(n, e)))
        self.app.run_worker(self._swap(), group="swap", exit_on_error=False)
        self._show()

    def on_unmount(self) -> None:
        for unlisten in self._unlisten:
            unlisten()

    def _event(self, name: str, event: Any) -> None:
        if isinstance(event, StateEvent):
            self.post_message(self.State(name, event.state))

    # ---------------------------------------------------------------- the swap

    async def _swap(self) -> None:
        from ..core.hosts.host import HostError
        from ..core.ops import Refused, StoreError

        ops = self.app.ops  # type: ignore[attr-defined]
        try:
            result = await ops.swap(self.old, self.plan, self.profile, confirmed=True, keep=self._keep,
                                    emit=lambda step: self.post_message(self.Step(step)),
                                    bench_emit=self._bench_event)
        except (Refused, StoreError, HostError) as exc:
            result = {"outcome": "not-swapped", "reason": getattr(exc, "message", None) or str(exc),
                      "old": self.old, "new": self.plan.name}
        self.post_message(self.Step({"step": "outcome", **result}))
        self.app.notify(f"swap {self.old} → {self.plan.name}: {result['outcome']}",
                        severity="information" if result["outcome"] == "swapped" else "warning")

    def _bench_event(self, event: Any) -> None:
        if event.kind == "progress":
            done, total = event.data.get("done"), event.data.get("total")
            self.post_message(self.Progress(f"benchmark: {done}/{total} requests" if total else "benchmark running"))
        elif event.kind == "state" and event.data.get("state") != "running":
            self.post_message(self.Progress(""))

    async def _keep(self, what: dict) -> bool:
        """The swap's question, asked on top of whatever screen is showing: after a failure, roll
        back now?; after the comparison, roll back or keep? (n and esc keep: nothing is stopped)."""
        import asyncio

        answer: asyncio.Future[bool] = asyncio.get_running_loop().create_future()
        new, old = self.plan.name, self.old
        if "failed" in what:
            question, no = f"{what['failed']}: roll back to {old} now?", "Leave it"  # 'NEW crashed'
            detail = (f"y stops {new} and restarts {old} with its plan on port {self.plan.port}; "
                      f"n leaves {new} as it is (its log and triage tell why) and {old} stopped")
        else:
            question, no = f"Roll back to {old}, or keep {new}?", f"Keep {new}"
            detail = "\n".join(self._compare_lines(what.get("compare") or {})
                               + [f"y stops {new} and restarts {old}; n keeps {new}"])
        self.app.push_screen(ConfirmScreen(question, detail, yes="Roll back", no=no),
                             lambda yes: answer.set_result(not yes) if not answer.done() else None)
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

    def on_swap_screen_step(self, message: Step) -> None:
        step = message.step
        if step.get("step") == "outcome":
            self.outcome = step
        elif step.get("step") == "compare":
            self._fill_compare(step["compare"])
        text = step_text(step)
        if text:
            self.lines.append((time.strftime("%H:%M:%S"), text))
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
        for clock, text in self.lines:
            steps.append(f"{clock}  ", style="dim")
            steps.append(literal(text) + "\n")
        if not self.lines:
            steps.append("starting…", style="dim")
        self.query_one("#swap-steps", TextView).set(steps)
        live = Text()
        for name in (self.old, self.plan.name):
            if name in self.states:
                live.append(f"{name}: ", style="bold")
                live.append(self.states[name] + "   ", style={"ready": "green", "crashed": "red",
                                                            "stalled": "yellow"}.get(self.states[name], ""))
        if self.progress:
            live.append(self.progress, style="cyan")
        self.query_one("#swap-live", Static).update(live)
        out = self.query_one("#swap-outcome", TextView)
        if self.outcome is None:
            out.set(Text("o opens the new deployment · esc leaves (the swap goes on)", style="dim"))
            return
        template, style = OUTCOME_TEXT.get(self.outcome["outcome"], ("{outcome}", "bold"))
        out.set(Text(literal(template.format(**{"reason": "", **self.outcome})), style=style))

    # ---------------------------------------------------------------- keys

    def action_open_new(self) -> None:
        if not self.app.open_deployment(self.plan.name):  # type: ignore[attr-defined]
            self.notify(f"{self.plan.name} is not deployed yet", severity="warning")

    def action_back(self) -> None:
        self.app.pop_screen()
