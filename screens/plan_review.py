"""Plan review: the fit per GPU, every flag with its reason, the diff against `--like`;
change TP or features and see the verdict update. Ends in Deploy."""

from __future__ import annotations

from dataclasses import replace

from rich.text import Text
from textual.app import ComposeResult
from textual.binding import Binding
from textual.containers import VerticalScroll
from textual.message import Message
from textual import on
from textual.widgets import Footer, Header, Input, Static

from ..core.planning.model_facts import ModelFacts
from ..core.domain import Plan
from ..core.planning import PlanError
from ..core.planning.like import load_previous
from ..core.planning.plan import Target, Wishes, build_plan
from .base import GpuopsScreen
from ..tui.plan_view import facts_line, fit_bars, launch_text, rules_table
from ..tui.widgets import TextView


class PlanReviewScreen(GpuopsScreen):
    """Review one plan; `+`/`-` TP, `m` MTP, `d` deploy."""

    BINDINGS = [
        Binding("plus,equals_sign", "tp(1)", "TP+", key_display="+"),
        Binding("minus", "tp(-1)", "TP-", key_display="-"),
        Binding("m", "toggle_mtp", "MTP on/off"),
        Binding("l", "like", "Like…"),
        Binding("d", "deploy", "Deploy"),
        Binding("escape", "back", "Back", key_display="esc"),
    ]

    class DeployRequested(Message):
        def __init__(self, plan: Plan) -> None:
            super().__init__()
            self.plan = plan

    def __init__(self, facts: ModelFacts, target: Target, wishes: Wishes):
        super().__init__(id="plan-review")
        self.facts = facts
        self.target = target
        self.wishes = wishes
        self.plan: Plan | None = None
        self.error: str | None = None

    def compose(self) -> ComposeResult:
        yield Header()
        with VerticalScroll(id="plan-body"):
            yield TextView(id="plan-facts")
            yield TextView(id="plan-verdict")
            yield Static(id="plan-bars")
            yield Static("Launch", classes="section")
            yield Static(id="plan-launch")
            yield Static("Why each flag", classes="section")
            yield Static(id="plan-rules")
            yield Static("Against the previous deployment", classes="section", id="plan-diff-title")
            yield TextView(id="plan-diff")
            yield TextView(id="plan-warnings")
        yield Input(placeholder="--like: path of a plan JSON or systemd unit file (esc cancels)", id="like-input")
        yield Footer()

    def on_mount(self) -> None:
        self.query_one("#like-input", Input).display = False
        self.sub_title = f"plan for {self.target.host or 'offline'}"
        self.rebuild()

    def rebuild(self) -> None:
        try:
            self.plan = build_plan(self.facts, self.target, self.wishes)
            self.error = None
        except PlanError as exc:
            self.error = str(exc)
        self.show()

    def show(self) -> None:
        self.query_one("#plan-facts", TextView).set(facts_line(self.facts))
        verdict = self.query_one("#plan-verdict", TextView)
        if self.error or self.plan is None:
            verdict.set(Text(self.error or "no plan", style="bold red"))
            return
        plan = self.plan
        fit = plan.fit
        verdict.set(Text(f"TP{plan.tp} on GPUs {','.join(map(str, plan.gpu_ids))} · SGLang {plan.sglang_version}: "
                         f"{fit.verdict if fit else '?'}", style="bold green" if fit and fit.fits else "bold red"))
        self.query_one("#plan-bars", Static).update(fit_bars(plan))
        self.query_one("#plan-launch", Static).update(launch_text(plan))
        self.query_one("#plan-rules", Static).update(rules_table(plan))
        diff = Text()
        changes = plan.like.diff if plan.like is not None else ()
        for change in changes:
            diff.append(f"{change.op} {change.text}\n", style={"+": "green", "-": "red", "~": "yellow"}[change.op])
        self.query_one("#plan-diff", TextView).set(diff)
        self.query_one("#plan-diff-title").display = bool(changes)
        warnings = Text()
        for w in plan.warnings:
            warnings.append(f"warning: {w}\n", style="yellow")
        self.query_one("#plan-warnings", TextView).set(warnings)

    # ---------------------------------------------------------------- actions

    def action_back(self) -> None:
        box = self.query_one("#like-input", Input)
        if box.display:
            box.display = False
            self.query_one("#plan-body").focus()
        else:
            self.app.pop_screen()

    def action_tp(self, step: int) -> None:
        current = self.plan.tp if self.plan else (self.wishes.tp or 1)
        heads = self.facts.num_attention_heads
        gpus = len(self.target.gpus) or 1
        tp = current
        while True:
            tp += step
            if tp < 1 or tp > gpus:
                self.notify(f"TP stays {current}: {'no fewer than 1' if tp < 1 else f'only {gpus} GPUs'}")
                return
            if not heads or heads % tp == 0:
                break
        self.wishes = replace(self.wishes, tp=tp, gpu_ids=None)
        self.rebuild()

    def action_toggle_mtp(self) -> None:
        self.wishes = replace(self.wishes, mtp=not self.wishes.mtp)
        self.rebuild()
        self.notify("MTP " + ("on" if self.wishes.mtp else "off"))

    def action_like(self) -> None:
        box = self.query_one("#like-input", Input)
        box.display = True
        box.focus()

    @on(Input.Submitted, "#like-input")
    def _like_given(self, event: Input.Submitted) -> None:
        box = self.query_one("#like-input", Input)
        box.display = False
        try:
            previous = load_previous(event.value.strip(), self._stored_plan)
        except PlanError as exc:
            self.notify(str(exc), severity="error")
            return
        self.wishes = replace(self.wishes, like=previous)
        self.rebuild()
        self.notify(f"planned like {previous.source}")

    def _stored_plan(self, name: str) -> Plan | None:
        from ..core.ops import Refused

        try:
            return self.app.ops.deployment(name).plan  # type: ignore[attr-defined]
        except Refused:
            return None

    def action_deploy(self) -> None:
        if self.plan is None:
            self.notify("no valid plan to deploy", severity="error")
            return
        self.post_message(self.DeployRequested(self.plan))

