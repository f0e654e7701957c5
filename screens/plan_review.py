"""Plan review: the fit per GPU, every flag with its reason, the diff against `--like`; change
TP, features, the name, port, GPUs, memory fraction, bind address, flags and env (`e`: one line,
validated, see gpuops.core.planning.edits) and see the verdict update; `nodes H2,…` makes it one
server over several hosts (this one node 0), `replicas K [H2,…]` K servers behind the engine's router
(on this host, or round it and the others). Ends in Deploy, which shows what will happen (fits?, the
download, port, bind, what runs on those GPUs, the nodes or replicas) and asks first."""

from __future__ import annotations

from dataclasses import replace
from typing import Any

from rich.text import Text
from textual.app import ComposeResult
from textual.binding import Binding
from textual.containers import VerticalScroll
from textual.message import Message
from textual import on, work
from textual.widgets import Header, Input, Static

from ..core.planning.model_facts import ModelFacts
from ..core.domain import Plan
from ..core.planning import PlanError
from ..core import engines, units
from ..core.planning.fit import tp_refusal
from ..core.planning.edits import Edit, apply as apply_edits, parse as parse_edit, with_edit
from ..core.planning.like import load_previous
from ..core.planning.inputs import Target, Wishes
from ..core.planning.plan import Node
from ..core.planning.request import build as build_plan
from .base import GpuopsScreen
from .confirm import ConfirmScreen
from ..core.literal import literal
from ..tui.plan_view import facts_line, fit_bars, launch_text, launch_title, parts_text, rules_table, where_text
from ..tui.widgets import KeyFooter, TextView
from ..tui.wording import in_tui


class PlanReviewScreen(GpuopsScreen):
    """Review one plan; `+`/`-` TP, `m` MTP, `d` deploy."""

    BINDINGS = [
        Binding("plus,equals_sign", "tp(1)", "TP+", key_display="+"),
        Binding("minus", "tp(-1)", "TP-", key_display="-"),
        Binding("m", "toggle_mtp", "MTP on/off"),
        Binding("l", "like", "Like…"),
        Binding("e", "edit", "Edit…"),
        Binding("d", "deploy", "Deploy"),
        Binding("escape", "back", "Back", key_display="esc"),
    ]

    class DeployRequested(Message):
        """Deploy `plan`: the operator saw the summary (and what runs on its GPUs) and said yes."""

        def __init__(self, plan: Plan, confirmed: bool = True) -> None:
            super().__init__()
            self.plan = plan
            self.confirmed = confirmed

    def __init__(self, facts: ModelFacts, target: Target, wishes: Wishes):
        super().__init__()
        self.facts = facts
        self.target = target
        self.wishes = wishes
        self.plan: Plan | None = None
        self.error: str | None = None
        self.edits: list[Edit] = []  # the operator's flag/env changes, applied to every rebuild
        self.nodes: tuple[Node, ...] = ()  # the other nodes of a multi-node plan (node 0: this target), or
        # with replicas the other hosts the replicas go round
        self.replicas = 0  # K servers behind the engine's router (0: one server, or one over the nodes)
        self._input_mode = "like"

    holds_work = True  # the plan being reviewed, and the operator's edits to it

    def compose(self) -> ComposeResult:
        yield Header()
        with VerticalScroll(id="plan-body"):
            yield TextView(id="plan-facts")
            yield TextView(id="plan-verdict")
            yield Static(id="plan-bars")
            yield Static("Launch", classes="section", id="plan-launch-title")
            yield Static(id="plan-launch")
            yield Static("", classes="section", id="plan-parts-title")
            yield TextView(id="plan-parts")
            yield Static("Why each flag", classes="section")
            yield Static(id="plan-rules")
            yield Static("Against the previous deployment", classes="section", id="plan-diff-title")
            yield TextView(id="plan-diff")
            yield TextView(id="plan-warnings")
        yield Input(placeholder="--like: path of a plan JSON or systemd unit file (esc cancels)", id="like-input")
        yield KeyFooter()

    def on_mount(self) -> None:
        self.query_one("#like-input", Input).display = False
        self.sub_title = self.heading()
        self.rebuild()

    def heading(self) -> str:
        """The header's subtitle (a subclass's own; Textual runs every class's on_mount)."""
        return f"plan for {self.target.host or 'offline'}"

    def rebuild(self) -> None:
        try:
            self.plan = apply_edits(self._build(self.target, self.wishes, self.nodes, self.replicas), self.edits,
                                    self.facts)
            self.error = None
        except PlanError as exc:
            self.error = str(exc)
        self.show()

    def show(self) -> None:
        self.query_one("#plan-facts", TextView).set(facts_line(self.facts))
        verdict = self.query_one("#plan-verdict", TextView)
        if self.error or self.plan is None:
            verdict.set(Text(literal(in_tui(self.error or "no plan")), style="bold red"))
            return
        plan = self.plan
        fit = plan.fit
        verdict.set(Text(f"TP{plan.tp} on {where_text(plan)} · {engines.get(plan.engine).title} {plan.engine_version}: "
                         f"{fit.verdict if fit else '?'}", style="bold green" if fit and fit.fits else "bold red"))
        self.query_one("#plan-bars", Static).update(fit_bars(plan))
        title = launch_title(plan)
        self.query_one("#plan-launch-title", Static).update(Text(literal(title[:1].upper() + title[1:])))
        self.query_one("#plan-launch", Static).update(launch_text(plan))
        self.query_one("#plan-rules", Static).update(rules_table(plan))
        parts = parts_text(plan)
        self.query_one("#plan-parts-title", Static).update(Text(literal(parts[0]) if parts else ""))
        self.query_one("#plan-parts-title").display = parts is not None
        self.query_one("#plan-parts", TextView).set(parts[1] if parts else Text())
        diff = Text()
        changes = plan.like.diff if plan.like is not None else ()
        for change in changes:
            diff.append(f"{change.op} {change.text}\n", style={"+": "green", "-": "red", "~": "yellow"}[change.op])
        self.query_one("#plan-diff", TextView).set(diff)
        self.query_one("#plan-diff-title").display = bool(changes)
        warnings = Text()
        for w in plan.warnings:
            warnings.append(f"warning: {literal(in_tui(w))}\n", style="yellow")
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
        # over several nodes TP goes in steps of the node count (the engine splits it evenly); a replica's
        # TP is on one host
        n = 1 if self.replicas else 1 + len(self.nodes)
        gpus = n * min(len(t.gpus) for t in (self.target, *(node.target for node in self.nodes))) or 1
        tp = current
        while True:
            tp += step * n
            if tp < 1 or tp > gpus:
                self.notify(f"TP stays {current}: {'no fewer than ' + str(n) if tp < 1 else f'only {gpus} GPUs'}")
                return
            if tp_refusal(self.facts, tp, self.wishes.engine) is None:  # a TP the engine can shard the model over
                break
        self.wishes = replace(self.wishes, tp=tp, gpu_ids=None)
        self.rebuild()

    def action_toggle_mtp(self) -> None:
        on = self.wishes.mtp
        if on is None:  # as the engine decided: what the plan shown has
            shown = self.plan.replicas[0] if self.plan is not None and self.plan.replicas else self.plan
            on = shown is not None and any(r.id == "mtp" for r in shown.rules)
        self.wishes = replace(self.wishes, mtp=not on)
        self.rebuild()
        self.notify("MTP " + ("on" if self.wishes.mtp else "off"))

    def _open_input(self, mode: str, placeholder: str) -> None:
        box = self.query_one("#like-input", Input)
        self._input_mode = mode
        box.placeholder = placeholder
        box.border_title = mode
        box.value = ""
        box.display = True
        box.focus()

    def action_like(self) -> None:
        self._open_input("like", "--like: a deployment's name, a plan JSON or a systemd unit file (esc cancels)")

    def action_edit(self) -> None:
        self._open_input("edit", "name N · port N · tp N · gpus 0,1 · mem 0.85 · bind ADDR · nodes H2,… · "
                         "replicas K [H2,…] · policy P · flag --X [V] · -flag --X · env K=V · -env K")

    @on(Input.Submitted, "#like-input")
    def _line_given(self, event: Input.Submitted) -> None:
        box = self.query_one("#like-input", Input)
        box.display = False
        text = event.value.strip()
        if not text:
            return
        if self._input_mode == "edit":
            self.apply_edit(text)
        else:
            self._like(text)

    def apply_edit(self, text: str) -> bool:
        """One typed change; on an error a notification, and the plan as it was."""
        known = self.target.help_flags
        try:
            kind, value = parse_edit(text, known)
            wishes, target, edits = self.wishes, self.target, self.edits
            if kind == "nodes":
                self.read_nodes(value, text)
                return True
            if kind == "replicas":
                count, hosts = value
                self.read_nodes(hosts, text, replicas=count)
                return True
            if kind == "wish" and self.replicas and value.get("gpu_ids") is not None:
                raise PlanError("gpus: each replica's GPUs are the planner's (tp N sets how many; replicas - for "
                                "one server)")
            if kind == "wish":
                wishes = replace(wishes, **value)
            elif kind == "bind":
                target = replace(target, serve_host=value)
            else:
                if self.plan is None:
                    raise PlanError("no plan to change: fix the error above first")
                edits = with_edit(self.plan, edits, value)
            plan = apply_edits(self._build(target, wishes, self.nodes, self.replicas), edits, self.facts)
        except PlanError as exc:
            self.notify(str(exc), severity="error", timeout=8)
            return False
        self.wishes, self.target, self.edits, self.plan, self.error = wishes, target, edits, plan, None
        self.show()
        self.notify(f"changed: {text}")
        return True

    def _build(self, target: Target, wishes: Wishes, nodes: tuple[Node, ...], replicas: int) -> Plan:
        every = [self._node(target), *nodes] if nodes or replicas else []  # this host first
        return build_plan(self.facts, target, wishes, every, replicas)

    def _node(self, target: Target) -> Node:
        """A host as a node: its target and what the inventory says of it (its address for the
        other nodes, its NCCL interface)."""
        try:
            cfg = self.gapp.inventory.host(str(target.host))
        except KeyError:
            raise PlanError(f"{target.host or 'an offline plan'} is not a host of the inventory: plan for "
                            "one to add nodes") from None
        return Node(target, cfg.reachable_addr, cfg.nccl_interface)

    @work(exclusive=True, group="nodes")
    async def read_nodes(self, names: tuple[str, ...], text: str, tp: int | None = None, replicas: int = 0) -> None:
        """`nodes H2,…` (or `replicas K H2,…`): read each host as the model picker reads this one (its
        GPUs, disks, engine, the ports its deployments hold), then plan over them all (one server over
        the nodes, or K replicas round the hosts); on any error the plan stays."""
        from ..core.api import HostError
        word = "replicas" if replicas else "nodes"
        nodes: list[Node] = []
        try:
            self._node(self.target)  # this host first: an offline plan has no hosts to add
            if replicas and self.wishes.like is not None:
                raise PlanError("replicas: a plan like an earlier deployment is one server (plan it, deploy, then "
                                "replicas of a new plan)")
            for name in names:
                if name == self.target.host:
                    raise PlanError(f"{word}: {name} is {'this host' if replicas else 'node 0'} already (name the "
                                    "other hosts)")
                host = self.gapp.monitor.hosts.get(name)
                if host is None:
                    known = ", ".join(h for h in self.gapp.monitor.hosts if h != self.target.host)
                    raise PlanError(f"{word}: unknown host {name!r} (others in the inventory: {known or 'none'})")
                self.notify(f"reading {name}'s GPUs, disks and {engines.get(self.wishes.engine).title}…")
                nodes.append(self._node(await self.gapp.ops.read_target(host)))
            # a new layout (one server, nodes, replicas) starts from the planner's own TP and GPUs
            changed = bool(nodes) != bool(self.nodes) or bool(replicas) != bool(self.replicas)
            wishes = replace(self.wishes, gpu_ids=None, tp=tp) if changed or tp else self.wishes
            if replicas and wishes.gpu_ids is not None:
                wishes = replace(wishes, gpu_ids=None)
            plan = apply_edits(self._build(self.target, wishes, tuple(nodes), replicas), self.edits, self.facts)
        except PlanError as exc:
            self.notify(str(exc), severity="error", timeout=8)
            return
        except HostError as exc:
            self.notify(f"{exc.message}" + (f" — {exc.hint}" if exc.hint else ""), severity="error", timeout=8)
            return
        self.nodes, self.replicas, self.wishes, self.plan, self.error = tuple(nodes), replicas, wishes, plan, None
        self.show()
        if replicas:
            self.notify(f"changed: {text} ({replicas} replicas of TP{plan.tp} behind {engines.get(plan.engine).router_title(plan.router)} on {plan.host})")
        else:
            self.notify(f"changed: {text} (TP{plan.tp} over {plan.nnodes} nodes)" if nodes else f"changed: {text} (one host)")

    def _like(self, text: str) -> None:
        if self.replicas:
            self.notify("like: replicas are planned afresh (replicas - for one server, then l)", severity="error")
            return
        try:
            previous = load_previous(text, self._stored_plan)
        except PlanError as exc:
            self.notify(str(exc), severity="error")
            return
        self.wishes = replace(self.wishes, like=previous)
        self.rebuild()
        self.notify(f"planned like {previous.source}")

    def _stored_plan(self, name: str) -> Plan | None:
        from ..core.ops import Refused

        try:
            return self.gapp.ops.deployment(name).plan
        except Refused:
            return None

    def action_deploy(self) -> None:
        """What would refuse the deploy (a name or port taken, …) is said first; only a deploy that
        would go on is summarised and asked for."""
        if self.plan is None:
            self.notify("no valid plan to deploy", severity="error")
            return
        plan = self.plan
        host = plan.host
        if host is None or host not in self.gapp.monitor.hosts:
            self._ask_to_deploy(plan)  # an offline plan: the summary, then the app says where to plan it
            return

        async def check() -> None:
            refusal = await self.gapp.ops.deploy_refusal(plan, host)
            if refusal:
                self.notify(f"not deployed: {refusal}", severity="error", timeout=12, markup=False)
            elif self.is_current and self.plan is plan:  # still on this plan: ask
                self._ask_to_deploy(plan)

        self.notify(f"checking {plan.host} before deploying {plan.name} …", timeout=3)
        self.run_worker(check(), group="deploy-check", exclusive=True, exit_on_error=False)

    def _ask_to_deploy(self, plan: Plan) -> None:
        busy = self._gpu_processes(plan)
        free = self._free_gpus(plan) if busy and not plan.replicas else []
        other = None
        question, detail = deploy_summary(plan, busy)
        if busy and plan.replicas:
            detail += "\nend what runs there (ctrl+k on the dashboard's processes), fewer replicas, or deploy beside it"
        elif busy and len(free) >= plan.tp:
            other = f"Use free GPUs {','.join(map(str, free[:plan.tp]))}"
        elif busy:
            detail += (f"\nonly {len(free)} of the GPUs are free for TP {plan.tp}: end what runs there (ctrl+k on "
                       "the dashboard's processes), lower TP (-), or deploy beside it")

        def answered(answer: bool | str | None) -> None:
            if answer == "other":
                self.wishes = replace(self.wishes, gpu_ids=tuple(free[:plan.tp]), tp=plan.tp)
                self.rebuild()
                self.notify(f"GPUs {','.join(map(str, free[:plan.tp]))}: d deploys there")
            elif answer is True:
                self.post_message(self.DeployRequested(plan))

        self.app.push_screen(ConfirmScreen(question, detail, yes="Deploy", other=other), answered)

    def _snapshot(self, plan: Plan):  # type: ignore[no-untyped-def]
        monitor = getattr(self.app, "monitor", None)
        state = monitor.states.get(plan.host) if monitor is not None and plan.host else None
        return state.snapshot if state is not None else None

    def _gpu_processes(self, plan: Plan) -> list[str]:
        """What runs on the plan's GPUs now, from the dashboard's samples of the host (a router's
        plan: of each replica's host, the host named)."""
        if plan.replicas:
            return [f"{r.host} {line}" for r in plan.replicas for line in self._gpu_processes(r)]
        snap = self._snapshot(plan)
        if snap is None:
            return []
        return [f"GPU{g.index}: pid {p.pid} {literal(p.user or '?')} {literal(p.command or '?')[:60]} "
                f"({units.size(p.used_bytes)})"
                for g in snap.gpus if g.index in plan.gpu_ids for p in g.processes]

    def _free_gpus(self, plan: Plan) -> list[int]:
        """The host's GPUs for gpuops that run nothing now (the dashboard's samples: no process,
        and under 1 GiB used, so a process of another container that NVML cannot name counts too)."""
        from ..core.telemetry.samples import is_na

        snap = self._snapshot(plan)
        allowed = {g.index for g in self.target.gpus}
        if snap is None:
            return []
        return sorted(g.index for g in snap.gpus if g.index in allowed and not g.processes
                      and (is_na(g.memory_used) or g.memory_used < units.GIB))


def deploy_summary(plan: Plan, busy: list[str]) -> tuple[str, str]:
    """The question and what the operator should see before a deploy: does it fit, where the
    weights come from and how much downloads, the port and bind, what already runs on the GPUs."""
    fit = plan.fit
    fits = fit is None or fit.fits
    lines = [f"fit: {fit.verdict if fit else 'not checked'}"]
    size = units.size(plan.model.checkpoint_bytes or 0)
    # a router's weights: each host's first replica's (the replicas on one host share its copy)
    firsts: dict[str | None, Plan] = {}
    for r in plan.replicas:
        firsts.setdefault(r.host, r)
    for server in list(firsts.values()) or [plan]:
        on = f" on {server.host}" if plan.replicas else ""
        if server.reuse_existing:
            lines.append(f"weights{on}: {server.model_path} (already there, nothing to download)")
        elif not server.download_dir:
            lines.append(f"weights{on}: download {size} into {server.host}'s HF cache (no model dir takes it)")
        else:
            lines.append(f"weights{on}: download {size} into {server.model_path}")
    lines.append(f"serves {plan.endpoint} (bind {plan.bind_host}"
                 + (", API key in its 0600 env file" if plan.uses_api_key else ", this host only") + ")")
    if plan.replicas:
        lines.append(f"{len(plan.replicas)} replicas behind {engines.get(plan.engine).router_title(plan.router)} on {plan.host}, started one after the other, "
                     "then the router:")
        lines += [f"  {r.name}: {r.host} GPUs {','.join(map(str, r.gpu_ids))} (TP {r.tp}) · port {r.port} · "
                  f"{r.launcher} launcher" for r in plan.replicas]
    elif plan.members:
        lines.append(f"TP {plan.tp} over {plan.nnodes} nodes, started node 0 first (rendezvous {plan.dist_init_addr}):")
        lines += [f"  node {m.node_rank}: {m.host} GPUs {','.join(map(str, m.gpu_ids))} · {m.launcher} launcher"
                  for m in plan.members]
    else:
        lines.append(f"GPUs {','.join(map(str, plan.gpu_ids))} (TP {plan.tp}) · {plan.launcher} launcher")
    if busy:
        lines.append("already on those GPUs (deploying anyway shares them; e then `gpus …` picks others):")
        lines += [f"  {b}" for b in busy[:6]] + ([f"  … {len(busy) - 6} more"] if len(busy) > 6 else [])
    lines += [f"warning: {in_tui(w)}" for w in plan.warnings]
    warn = [] if fits else ["DOES NOT FIT"]
    if busy:
        warn.append("GPUs in use")
    what = f"{len(plan.replicas)} replicas of {plan.model.id} and their router" if plan.replicas else plan.model.id
    question = f"Deploy {plan.name} ({what}) on {plan.host}?" + (f"  [{', '.join(warn)}]" if warn else "")
    return question, "\n".join(lines)



class SwapReviewScreen(PlanReviewScreen):
    """Plan review of the new deployment of a swap: planned like OLD (its GPUs, port, bind, served
    name); `d` asks to swap (benchmark OLD, stop it, deploy this, benchmark, compare, keep or roll
    back) instead of deploying beside it."""

    HELP_TITLE = "swap: plan review"
    BINDINGS = [Binding("d", "deploy", "Swap")]

    class SwapRequested(Message):
        def __init__(self, old: str, plan: Plan, bench: bool = True) -> None:
            super().__init__()
            self.old = old
            self.plan = plan
            self.bench = bench  # False: neither is benchmarked

    def __init__(self, facts: ModelFacts, target: Target, wishes: Wishes, old: Any):
        super().__init__(facts, target, wishes)
        self.old = old  # the stored Deployment being replaced

    def heading(self) -> str:
        return f"swap {self.old.name} on {self.old.host}: the new deployment's plan"

    def on_mount(self) -> None:  # (after plan review's own on_mount, which Textual runs too)
        nodes = tuple(m.host for m in self.old.plan.members[1:])
        if nodes:  # the new one over the old one's nodes, at its TP
            self.read_nodes(nodes, f"nodes {','.join(nodes)}", tp=self.old.plan.tp)

    def _held_by_old(self, warning: str) -> bool:
        """A warning about what OLD holds (its GPUs): freed by the swap's stop. (Its port is no
        conflict for the planner: the plan is made `replacing` it.)"""
        return "already run processes" in warning

    def action_deploy(self) -> None:
        from ..core.bench.runner import BenchInputError, resolve_profile

        if self.plan is None:
            self.notify("no valid plan to swap in", severity="error")
            return
        if self.old.plan.members and not self.nodes:
            self.notify(f"{self.old.name} runs on {self.old.plan.nnodes} nodes: the new plan waits for the other nodes "
                        "to be read", severity="error")
            return
        plan = self.plan
        if plan.name == self.old.name:
            self.notify(f"the new deployment needs its own name ({self.old.name} is the one a rollback restarts): "
                        "e then `name NEW`", severity="error", timeout=10)
            return
        if plan.fit is not None and not plan.fit.fits:
            self.notify(f"{plan.model.id} does not fit on {self.old.name}'s GPUs: {plan.fit.verdict}",
                        severity="error", timeout=10)
            return
        try:
            profile = resolve_profile("smoke", self.gapp.inventory.bench_profiles)
        except BenchInputError as exc:
            self.notify(str(exc), severity="error")
            return
        shown = plan.replace(warnings=[w for w in plan.warnings if not self._held_by_old(w)])
        _, summary = deploy_summary(shown, [])
        diff = [f"{c.op} {c.text}" for c in (plan.like.diff if plan.like is not None else ())]
        fetch = (f"{plan.model.id}: on the host already" if plan.reuse_existing
                 else f"fetch {plan.model.id} while {self.old.name} serves")
        detail = "\n".join([f"{fetch}; then", f"benchmark {self.old.name} ({profile.name}; its latest ok run of it is "
                            f"reused), stop it, start {plan.name}, benchmark it, compare, then keep it or roll back "
                            "(o: the same without benchmarks)", summary,
                            *(["against " + self.old.name + ":"] + [f"  {d}" for d in diff[:10]] if diff else [])])
        question = f"Swap {self.old.name} ({self.old.model}) for {plan.name} ({plan.model.id}) on {self.old.host}?"

        def answered(yes: bool | str | None) -> None:
            if yes is True or yes == "other":
                self.post_message(self.SwapRequested(self.old.name, plan, bench=yes is True))

        self.app.push_screen(ConfirmScreen(question, detail, yes="Swap", other="No benchmarks"), answered)
