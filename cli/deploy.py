"""`gpuops deploy`, `status`, `logs`, `stop`, `forget` and `triage`: the command-line face of the use cases."""

from __future__ import annotations

import argparse
import asyncio
import json
import sys
from dataclasses import replace
from pathlib import Path
from typing import Any

from ..core import units
from ..core.config import Inventory
from ..core.states import State
from ..core.domain import (BenchEvent, BenchResultEvent, BenchStateEvent, SwapBenchNew, SwapBenchOld, SwapCompare,
                           SwapDeployNew, SwapFetch, SwapKept, SwapNewState, SwapOldState, SwapPlanned, SwapRollback,
                           SwapStep, SwapStopOld, flag_value)
from ..core.literal import literal, literal_lines
from .common import OperationFailed, UsageError, minute, run_use_case
from .plan import add_planning_options

SCHEMA = 1


def add_deploy_parsers(sub: argparse._SubParsersAction, common: argparse.ArgumentParser) -> None:
    p = sub.add_parser("deploy", parents=[common], help="download, start and watch a model's server on a host")
    p.add_argument("model", metavar="MODEL|PLAN.json", help="a model (planned here, with the options `gpuops plan` "
                   "takes) or a plan from `gpuops plan --json`")
    add_planning_options(p, host_help="the inventory host it runs on")
    p.add_argument("--yes", action="store_true", help="don't ask (GPUs already in use, …)")
    p.add_argument("--json", action="store_true", help="one JSON object per event on stdout")

    p = sub.add_parser("status", parents=[common], help="the stored deployments and their state")
    p.add_argument("name", metavar="NAME", nargs="?", help="one deployment (reconciled with its host; its recent events)")
    p.add_argument("--json", action="store_true", help="one JSON document (schema 1)")

    p = sub.add_parser("logs", parents=[common], help="a deployment's server log")
    p.add_argument("name", metavar="NAME")
    p.add_argument("-f", "--follow", action="store_true", help="keep following")
    p.add_argument("--json", action="store_true", help="one JSON object per line")

    p = sub.add_parser("stop", parents=[common], help="stop a deployment's server (asks first)")
    p.add_argument("name", metavar="NAME")
    p.add_argument("--yes", action="store_true", help="don't ask")

    p = sub.add_parser("restart", parents=[common], help="stop a deployment's server and start it again with its "
                       "plan, as a new run, watched until ready, crashed or stalled (asks first)")
    p.add_argument("name", metavar="NAME")
    p.add_argument("--yes", action="store_true", help="don't ask")
    p.add_argument("--json", action="store_true", help="one JSON object per event on stdout")

    p = sub.add_parser("fix", parents=[common], help="apply a finding's fix to a deployment (the TUI's f): its plan "
                       "patched, the server restarted with it and watched (shows the change and asks first)")
    p.add_argument("name", metavar="NAME")
    p.add_argument("code", metavar="CODE", nargs="?", help="the finding's code (default: the run's only applicable "
                   "fix; on a terminal, pick one from the list)")
    p.add_argument("--yes", action="store_true", help="don't ask")
    p.add_argument("--json", action="store_true", help="one JSON object per event on stdout")

    p = sub.add_parser("forget", parents=[common], help="remove a deployment whose server is not running from "
                       "the store, with its history (asks first)")
    p.add_argument("name", metavar="NAME")
    p.add_argument("--yes", action="store_true", help="don't ask")

    p = sub.add_parser("swap", parents=[common], help="replace a ready deployment by another model as one action: "
                       "plan the new one like it, fetch its weights while OLD serves, benchmark OLD, stop it, start "
                       "the new one, benchmark, compare, keep or roll back")
    p.add_argument("old", metavar="OLD", help="the ready deployment to replace")
    p.add_argument("model", metavar="MODEL", help="the new model (an HF repo id or a folder on the host)")
    p.add_argument("--name", metavar="N", help="the new deployment's name (default: from the model id)")
    p.add_argument("--profile", metavar="P", default="smoke", help="the benchmark both run (default: smoke)")
    p.add_argument("--bench-old", choices=("reuse", "run", "none"), default=None,
                   help="OLD's benchmark: reuse its latest ok run of the profile, else run one (default); run one "
                   "anyway; or none (no comparison)")
    p.add_argument("--no-bench", action="store_true", help="benchmark neither (no comparison): fetch, stop, start, keep")
    p.add_argument("--rollback-on-failure", action="store_true",
                   help="when the new one crashes or stalls, restart OLD at once (without asking)")
    p.add_argument("--yes", action="store_true", help="don't ask before starting (and keep the new one)")
    p.add_argument("--json", action="store_true", help="one JSON object per step on stdout")

    p = sub.add_parser("triage", parents=[common], help="where a server log got to, and why it stopped there; "
                       "for a deployment also the checks on its host")
    p.add_argument("logfile", metavar="LOGFILE|-", nargs="?", help="a log file, or - for stdin")
    p.add_argument("--deployment", metavar="NAME", help="a deployment's log and its host's checks (driver, NVML, "
                   "P2P, /dev/shm, ports, leftover GPU processes, py-spy stacks of the ranks)")
    p.add_argument("--json", action="store_true", help="one JSON document (schema 1)")


def _print(doc: Any) -> None:
    print(json.dumps(doc, indent=2))


def _failed(exc: OperationFailed) -> int:
    print(f"gpuops: {literal_lines(str(exc))}", file=sys.stderr)  # (a host's message, and its hint line)
    return 1


# ------------------------------------------------------------------ triage


def triage_target(args: argparse.Namespace) -> None:
    """`gpuops triage NAME`, NAME no file but a stored deployment: the deployment NAME."""
    if args.deployment is None and args.logfile not in (None, "-") and not Path(args.logfile).exists() \
            and _stored(args.logfile):
        args.deployment, args.logfile = args.logfile, None


def _stored(name: str) -> bool:
    """Whether `name` is a stored deployment (a store that cannot be read: no)."""
    from ..core.config import validate_host_name
    from ..core.deploy.store import Store, StoreError

    try:
        validate_host_name(name)
    except ValueError:
        return False
    try:
        store = Store()
    except StoreError:
        return False
    try:
        return store.deployment(name) is not None
    except StoreError:
        return False
    finally:
        store.close()


def run_triage(inv: Inventory, args: argparse.Namespace) -> int:
    from ..core.diagnose.triage import triage_log

    if (args.logfile is None) == (args.deployment is None):
        raise UsageError("triage wants a LOGFILE (- for stdin) or --deployment NAME, not both")
    if args.deployment is not None:
        try:
            report = run_use_case(inv, args, lambda ops, _yes: ops.triage(args.deployment))
        except OperationFailed as exc:
            return _failed(exc)
    elif args.logfile == "-":
        report = triage_log(sys.stdin)
    else:
        path = Path(args.logfile)
        if not path.is_file():
            raise UsageError(f"{args.logfile}: no such file (nor a deployment: gpuops status lists them)")
        with path.open(encoding="utf-8", errors="replace") as f:
            report = triage_log(f)
    if args.json:
        _print(report.to_json())
        return 0
    # (what the log and the host said, as literal text: one line each, a stack's lines kept)
    print(f"phase: {literal(report.phase or '-')}   outcome: {report.outcome}")
    if report.log_error:
        print(f"  the log could not be read: {literal(report.log_error)}")
    for finding in report.findings:
        print(f"  {finding.severity}: {literal(finding.code)}: {literal(finding.summary)}")
        for ev in finding.evidence:
            print(f"      {literal(ev.source)}: {literal(ev.line or ev.reading)}")
        if finding.fix is not None and finding.fix.summary:
            where = " (applicable: gpuops TUI, deployment screen, f)" if finding.fix.applicable else ""
            print(f"    fix{where}: {literal(finding.fix.summary)}")
    for check in report.checks or []:
        mark = {True: "ok", False: "FAIL", None: "n/a"}[check.ok]
        print(f"  [{mark:>4}] {literal(check.name)}: {literal(check.detail)}")
    for stack in report.stacks or []:
        print(f"--- py-spy {literal(stack.get('rank') or 'server')} (pid {stack['pid']}) ---")
        print(literal_lines((stack.get("text") or stack.get("error") or "").rstrip()))
    return 0


# ------------------------------------------------------------------ deploy


def _load_plan(inv: Inventory, args: argparse.Namespace) -> Any:
    """The plan to deploy: a plan JSON (decoded and validated as a Plan), or one made here from
    the model and the planning options `plan` takes (--tp, --gpu-ids, --port, --download-dir, …)."""
    from ..core.domain import Invalid, Plan
    from .plan import PLANNING_DESTS, make_plan, request_from_args

    ref = args.model
    if ref.endswith(".json") and Path(ref).is_file():
        given = [f"--{'no-' if getattr(args, dest) is False else ''}{dest.replace('_', '-')}" for dest in PLANNING_DESTS
                 if getattr(args, dest) is not None]
        if given:
            raise UsageError(f"{ref} is a plan already: {', '.join(given)} plan a MODEL (give the model instead, or "
                             "plan again with them: gpuops plan MODEL … --json)")
        try:
            doc = json.loads(Path(ref).read_text())
        except (OSError, UnicodeDecodeError, ValueError) as exc:
            raise UsageError(f"{ref}: not a plan JSON: {exc}") from None
        try:
            return Plan.from_json(doc, ref)
        except Invalid as exc:
            raise UsageError(str(exc)) from None
    plan = make_plan(inv, request_from_args(args))[1]
    if plan.fit is not None and not plan.fit.fits:
        raise UsageError(f"the plan does not fit: {plan.fit.verdict}")
    return plan


def describe_event(event: Any) -> str | None:
    """One line for a deployment event, as a person reads it (None: not worth a line)."""
    from ..core.domain import ChecksEvent, FindingEvent, LogEvent, NumbersEvent, PhaseEvent, PlanEvent, ProgressEvent, StateEvent

    when = event.ts[11:19]
    if isinstance(event, (LogEvent, NumbersEvent, PhaseEvent)):
        return None
    if isinstance(event, ProgressEvent):
        if event.phase == "downloading" and event.total:
            return f"{when}  downloading {units.size(event.done)}/{units.size(event.total)}"
        total = f"/{event.total}" if event.total else ""
        return f"{when}  {event.phase}: {literal(event.what or '')} {event.done}{total}".rstrip()
    if isinstance(event, StateEvent):
        extra = [f"{k} {literal(v)}" for k, v in (("phase", event.phase), ("into", event.into),
                                                  ("endpoint", event.endpoint), ("reason", event.reason),
                                                  ("detail", event.detail), ("launcher", event.launcher)) if v]
        line = f"{when}  {event.state}" + (f" ({', '.join(extra)})" if extra else "")
        if event.summary:
            line += f": {literal(event.summary)}"
        if event.quick_check and event.quick_check.get("content") is not None:
            line += f"\n          quick check {event.quick_check.get('seconds')} s: {event.quick_check['content']!r}"
        return line
    if isinstance(event, FindingEvent):
        fix = f"\n          fix: {literal(event.fix.summary)}" if event.fix is not None else ""
        return f"{when}  {event.severity}: {literal(event.code)}: {literal(event.summary)}{fix}"
    if isinstance(event, ChecksEvent):
        failed = [c.name for c in event.checks if c.ok is False]
        return f"{when}  host checks: " + (f"failed {', '.join(failed)}" if failed else "all passed")
    if isinstance(event, PlanEvent):
        return f"{when}  plan changed ({event.code}): " + "; ".join(f"{op}{t}" for op, t in event.diff)
    return None


def run_deploy(inv: Inventory, args: argparse.Namespace) -> int:
    from ..core.config import validate_host_name

    if getattr(args, "readonly", False):
        raise UsageError("read-only: deploy changes a host")
    if args.hosts and args.host:
        raise UsageError("give --host (one host) or --hosts (several: node 0 is the first), not both")
    if not args.hosts and not args.host:
        raise UsageError("deploy: name the host it runs on (--host H, or --hosts H1,H2 for several)")
    if args.host:
        try:
            inv.host(args.host)
        except KeyError:
            raise UsageError(f"unknown host {args.host!r} (known: {', '.join(inv.names())})") from None
    if args.name:
        try:
            validate_host_name(args.name)
        except ValueError as exc:
            raise UsageError(f"--name: {exc}") from None
    plan = _load_plan(inv, args)
    if args.name:
        plan = plan.replace(name=args.name)
    host_name = args.host or plan.host  # --hosts: the plan's node 0

    made_here = not args.model.endswith(".json")

    async def use(ops: Any, yes: bool) -> tuple[str, Any]:
        # what the plan made here chose on its own (a moved port, say) is said once it is recorded
        # (a refusal before that stays one line)
        _listen(ops, plan, args, warnings=plan.warnings if made_here else ())
        state = await ops.deploy(plan, host_name, yes=args.yes,
                                 ask=lambda q: sys.stdin.isatty() and input(f"{q}\ncontinue? [y/N] ").strip().lower()
                                 in ("y", "yes"))
        return state, _after(ops, plan.name, state)

    return _ended(inv, args, use)


def _stored_warnings(ops: Any, name: str) -> list[str]:
    """The stored plan's warnings (what the deploy recorded), [] when it cannot be read."""
    try:
        return list(ops.deployment(name).plan.warnings)
    except Exception:  # (a line less on the screen, never a failed deploy)
        return []


def _listen(ops: Any, plan: Any, args: argparse.Namespace, warnings: Any = ()) -> None:
    """Print the events of `plan`'s deployment as they come (one JSON object a line with --json):
    its own, and each other node's or replica's, each human line labelled with its part."""
    from ..core.domain import event_json

    # beside its other nodes' (or its replicas') labelled lines, the deployment's own are labelled too
    own = "[node 0] " if plan.members else "[router] " if plan.replicas else ""

    def emit(event: Any) -> None:
        if args.json:
            print(json.dumps(event_json(event)), flush=True)
            return
        line = describe_event(event)
        if line is not None:
            print(own + line, flush=True)
        if getattr(event, "state", None) == State.PLANNED:
            # the plan's own (when made here) and what the deploy's checks added to the stored plan
            stored = _stored_warnings(ops, plan.name)
            for warning in [*warnings, *(w for w in stored if w not in plan.warnings)]:
                print(f"          plan: {warning}", flush=True)

    def emit_part(label: str) -> Any:
        def out(event: Any) -> None:
            if args.json:
                print(json.dumps(event_json(event)), flush=True)
            elif (line := describe_event(event)) is not None:
                print(f"[{label}] {line}", flush=True)
        return out

    ops.bus.listen(plan.name, emit)
    for rank, member in enumerate(plan.member_names, start=1):
        ops.bus.listen(member, emit_part(f"node {rank}"))
    for index, replica in enumerate(plan.replica_names, start=1):
        ops.bus.listen(replica, emit_part(f"replica {index}"))


def _after(ops: Any, name: str, state: str) -> str | None:
    """What an operator needs to hear when a deploy, restart or fix ended stalled: what still
    holds the GPUs and what to do next (None for any other outcome)."""
    if state != State.STALLED:
        return None
    d = ops.deployment(name)
    stall = next((e for e in reversed(ops.events(name, run=d.run)) if getattr(e, "state", None) == State.STALLED), None)
    phase = getattr(stall, "phase", None)
    if phase is None:  # the download stalled: no server was started
        return (f"{name}: the download stalled; no server runs and no GPU is held: `gpuops stop {name}`, then deploy "
                "it again: the download resumes from the disk (the finding above says what the disk and network show)")
    gpus = ",".join(map(str, d.plan.gpu_ids))
    parts = ops.parts(d)
    also = f" (and its {len(parts)} other part{'s' if len(parts) > 1 else ''} theirs)" if parts else ""
    fixable = applicable_fixes(ops.findings(name))
    fix = (f"gpuops fix {name} (restart with the fix for {fixable[0].code}"
           + (f"; {len(fixable)} to choose from" if len(fixable) > 1 else "") + ") · ") if fixable else ""
    return (f"{name} is stalled in {phase}: its server still runs on {d.host} and holds GPU"
            f"{'s' if len(d.plan.gpu_ids) > 1 else ''} {gpus}{also}.\n"
            f"next: gpuops triage --deployment {name} (why, with the host's checks) · {fix}"
            f"gpuops stop {name} (frees the GPUs)")


def _ended(inv: Inventory, args: argparse.Namespace, use: Any, *, yes: bool = False) -> int:
    """Run a use case that ends in a deployment's state (deploy, restart, fix): 0 when it is ready,
    1 otherwise, with what holds the GPUs after a stall on stderr."""
    try:
        state, said = run_use_case(inv, args, use, yes=yes)
    except OperationFailed as exc:
        return _failed(exc)
    except KeyboardInterrupt:
        return 130
    if said:
        print("gpuops: " + said, file=sys.stderr, flush=True)
    return 0 if state == State.READY else 1


# ------------------------------------------------------------------ restart, fix


def run_restart(inv: Inventory, args: argparse.Namespace) -> int:
    """`gpuops restart NAME`: the deployment stopped and started again with its plan, as a new run
    (Ops.restart, as the deployments view's r), watched until ready, crashed or stalled."""
    if getattr(args, "readonly", False):
        raise UsageError("read-only: a restart changes a host")

    listening: list[bool] = []

    async def use(ops: Any, yes: bool) -> tuple[str, Any]:
        if not listening:  # once (asked first: the use case is called again, confirmed)
            listening.append(True)
            _listen(ops, ops.deployment(args.name).plan, args)
        state = await ops.restart(args.name, confirmed=yes)
        return state, _after(ops, args.name, state)

    return _ended(inv, args, use, yes=args.yes)


def applicable_fixes(findings: list) -> list:
    """The findings whose fix gpuops can apply (a plan patch), in the order `f` takes them."""
    return [f for f in findings if f.fix is not None and f.fix.applicable and f.fix.plan_patch]


def run_fix(inv: Inventory, args: argparse.Namespace) -> int:
    """`gpuops fix NAME [CODE]`: a finding's fix applied as the TUI's `f` applies it (Ops.apply_fix:
    the plan patched, its diff recorded, the server restarted with it). Without CODE: the only
    applicable fix of the current run, or, on a terminal, the one picked from the list."""
    if getattr(args, "readonly", False):
        raise UsageError("read-only: a fix restarts the server")
    from ..core.ops import Refused

    async def pick(ops: Any) -> Any:
        d = ops.deployment(args.name)
        findings = ops.findings(d.name)
        fixable = applicable_fixes(findings)
        if args.code is not None:
            chosen = [f for f in fixable if f.code == args.code]
            if not chosen:
                known = ", ".join(f.code for f in fixable) or "none"
                seen = " (its fix is not one gpuops can apply)" if any(f.code == args.code for f in findings) else ""
                raise Refused(f"{d.name}'s run {d.run} has no applicable fix for {args.code}{seen}; applicable: {known}")
            return chosen[0]
        if not fixable:
            said = f" (findings: {', '.join(f.code for f in findings)})" if findings else ""
            raise Refused(f"{d.name}'s run {d.run} has no fix gpuops can apply{said}: `gpuops triage --deployment "
                          f"{d.name}` says what to look at")
        if len(fixable) == 1:
            return fixable[0]
        if not sys.stdin.isatty():
            raise Refused(f"{d.name} has {len(fixable)} applicable fixes ({', '.join(f.code for f in fixable)}): "
                          f"name one: gpuops fix {d.name} CODE")
        out = sys.stderr if args.json else sys.stdout
        for i, f in enumerate(fixable, start=1):
            print(f"{i}. {f.severity}: {f.code}: {f.summary}\n   fix: {f.fix.summary}", file=out)
        answer = (await asyncio.to_thread(input, f"which fix? [1-{len(fixable)}, empty: none] ")).strip()
        if not answer.isdigit() or not 1 <= int(answer) <= len(fixable):
            raise Refused("not done (no fix chosen)")
        return fixable[int(answer) - 1]

    chosen: list[Any] = []

    async def use(ops: Any, yes: bool) -> tuple[str, Any]:
        if not chosen:
            finding = await pick(ops)
            chosen.append(finding)
            diff = ops.fix_diff(args.name, finding.fix.plan_patch)
            if yes or sys.stdin.isatty():  # what it changes, before the question (without either: refused)
                out = sys.stderr if args.json else sys.stdout
                print(f"fix for {finding.code}: {finding.fix.summary}", file=out)
                for op, text in diff:
                    print(f"  {op} {text}", file=out, flush=True)
            _listen(ops, ops.deployment(args.name).plan, args)  # once (the use case is called again, confirmed)
        finding = chosen[0]
        state = await ops.apply_fix(args.name, finding.fix.plan_patch, code=finding.code, summary=finding.fix.summary,
                                    confirmed=yes)
        return state, _after(ops, args.name, state)

    return _ended(inv, args, use, yes=args.yes)


# ------------------------------------------------------------------ status, logs, stop


def run_status(inv: Inventory, args: argparse.Namespace) -> int:
    from ..core.domain import event_json

    if args.name is None:
        async def listing(ops: Any, _yes: bool) -> list:
            return ops.deployments()

        deployments = run_use_case(inv, args, listing)
        if args.json:
            _print({"schema": SCHEMA, "deployments": [d.to_json() for d in deployments]})
        elif not deployments:
            print("no deployments yet (gpuops deploy … creates them)")
        shown = [] if args.json else deployments
        # one line each (`| head`, `grep` rely on it), its columns as wide as the longest name, state, host
        widths = [max((len(x) for x in col), default=0) for col in
                  zip(*[(d.name, str(d.state), d.host) for d in shown])] or [0, 0, 0]
        for d in shown:
            print(f"{d.name:{widths[0]}}  {str(d.state):{widths[1]}}  {d.host:{widths[2]}}  {d.model}  "
                  f"(run {d.run}, since {minute(d.updated_at)})")
        return 0

    async def use(ops: Any, _yes: bool) -> tuple[Any, list, list]:
        try:
            d = await ops.status(args.name)
        except Exception as exc:  # a host that cannot be reached: what the store says
            from ..core.hosts.host import HostError
            from ..core.ops import Refused

            if isinstance(exc, Refused) or not isinstance(exc, HostError):
                raise
            d = ops.deployment(args.name)
        return d, ops.events(d.name, run=d.run), ops.parts(d)

    d, events, parts = run_use_case(inv, args, use)
    if args.json:
        _print({"schema": SCHEMA, "deployment": d.to_json(), "events": [event_json(e) for e in events[-50:]],
                "parts": [{"name": p.name, "state": p.state, "host": p.host} for p in parts]})
    else:
        policy = flag_value(d.plan.argv, "--policy") if d.plan.replicas else None
        router = (f", router {d.plan.router}" if d.plan.router else "") + (f" ({literal(policy)})" if policy else "")
        print(f"{d.name}: {d.state} on {d.host} — {d.model} (launcher {d.launcher}{router}, run {d.run}, since {d.updated_at})")
        kind = "node" if d.plan.members else "replica"
        for i, p in enumerate(parts, start=1):  # the other nodes (node 0 is d) or the router's replicas
            print(f"  {kind} {i}: {p.name} {p.state} on {p.host} (run {p.run}, since {minute(p.updated_at)})")
        lines = [line for e in latest_progress(events) if (line := describe_event(e)) is not None]
        for line in lines[-50:]:
            print("  " + line.replace("\n", "\n  "))
    return 0


def latest_progress(events: list) -> list:
    """The run's events with only the latest progress of each kind (a phase's shards, its graph batch
    sizes, the download): where it got to, not every step on the way (one run had 48 such lines)."""
    from ..core.domain import ProgressEvent

    last: dict[tuple[str, str | None], int] = {}
    for i, e in enumerate(events):
        if isinstance(e, ProgressEvent):
            last[(e.phase, e.what)] = i
    kept = set(last.values())
    return [e for i, e in enumerate(events) if not isinstance(e, ProgressEvent) or i in kept]


def run_logs(inv: Inventory, args: argparse.Namespace) -> int:
    async def use(ops: Any, _yes: bool) -> None:
        async for rec in ops.logs(args.name, follow=args.follow):
            if rec.notice:
                print(f"gpuops: log {rec.notice}: {literal(rec.text)}", file=sys.stderr, flush=True)
            elif args.json:
                print(json.dumps({"ts": rec.ts, "event": "log", "line": rec.text}), flush=True)
            else:
                print(literal(rec.text), flush=True)  # (a log line as literal text: no terminal control)

    try:
        run_use_case(inv, args, use)
    except OperationFailed as exc:
        return _failed(exc)
    except KeyboardInterrupt:
        return 130
    return 0


def run_stop(inv: Inventory, args: argparse.Namespace) -> int:
    if getattr(args, "readonly", False):
        raise UsageError("read-only: stop changes a host")
    try:
        detail = run_use_case(inv, args, lambda ops, yes: ops.stop(args.name, confirmed=yes), yes=args.yes,
                              store_read_only=True)  # a full disk never keeps a server running
    except OperationFailed as exc:
        return _failed(exc)
    print(f"{args.name}: stopped ({detail})")
    return 0


def run_swap(inv: Inventory, args: argparse.Namespace) -> int:
    """`gpuops swap OLD MODEL`: the afternoon as one action (core/ops.py Ops.swap does it)."""
    from ..core.bench.runner import BenchInputError, resolve_profile
    from ..core.ops import Ops
    from .bench import _print_event

    if getattr(args, "readonly", False):
        raise UsageError("read-only: a swap stops and starts servers")
    if args.no_bench and args.bench_old not in (None, "none"):
        raise UsageError(f"--no-bench benchmarks neither: not with --bench-old {args.bench_old}")
    bench_old = "none" if args.no_bench else args.bench_old or "reuse"
    try:
        profile = resolve_profile(args.profile, inv.bench_profiles)
    except BenchInputError as exc:
        raise UsageError(str(exc)) from None
    store = Ops(inv).store  # (opened here: the swap's own Ops opens it again)
    try:
        old = store.deployment(args.old)
    finally:
        store.close()
    if old is None:
        raise UsageError(f"no deployment named {args.old!r}")
    if old.plan.replicas:
        raise UsageError(f"{old.name} is {len(old.plan.replicas)} replicas behind a router: a swap of it is not built "
                         "yet (plan the new model with --replicas and deploy it beside, or stop the old one first)")
    # the new one like the old: same host, GPUs, port, bind, served name (planning keeps them); a
    # multi-node one over the same nodes at the same TP
    from ..core.planning.request import PlanRequest
    from .plan import make_plan

    nodes = [m.host for m in old.plan.members]
    where = (PlanRequest(args.model, hosts=",".join(nodes), tp=old.plan.tp) if nodes else
             PlanRequest(args.model, host=old.host, gpu_ids=",".join(map(str, old.plan.gpu_ids))))
    plan = make_plan(inv, replace(where, name=args.name, like=old.name, replacing=old.name))[1]
    if plan.fit is not None and not plan.fit.fits:
        raise UsageError(f"{plan.model.id} does not fit on {old.name}'s GPUs: {plan.fit.verdict}")
    # the old server's GPUs: freed by the stop (its port is no conflict for the planner: `replacing`)
    warnings = [w for w in plan.warnings if "already run processes" not in w]

    def emit(step: SwapStep) -> None:
        if args.json:
            print(json.dumps({"event": "swap", **step.to_json()}, allow_nan=False), flush=True)
            return
        line = _swap_step_line(step, args.old, profile.name, warnings)
        if line is not None:
            print(line, flush=True)

    def bench_emit(event: BenchEvent) -> None:
        if args.json:
            print(json.dumps({"event": "bench", **event.to_json()}, allow_nan=False), flush=True)
        elif isinstance(event, (BenchStateEvent, BenchResultEvent)):
            _print_event(event, False)

    async def keep(what: dict) -> bool:
        if args.yes or not sys.stdin.isatty():
            return True  # headless: kept (a failure rolls back only with --rollback-on-failure)
        question = (f"{plan.name} {what['failed']}: keep it (n restarts {args.old})?" if "failed" in what
                    else f"keep {plan.name} (n restarts {args.old})?")
        answer = await asyncio.to_thread(input, f"{question} [Y/n] ")
        return answer.strip().lower() not in ("n", "no")

    async def use(ops: Any, yes: bool) -> dict:
        ops.bus.listen(plan.name, lambda e: None if args.json else (
            print(line, flush=True) if (line := describe_event(e)) is not None else None))
        return await ops.swap(args.old, plan, profile, confirmed=yes, rollback_on_failure=args.rollback_on_failure,
                              keep=keep, emit=emit, bench_emit=bench_emit, bench_old=bench_old,
                              bench_new=not args.no_bench)

    try:
        result = run_use_case(inv, args, use, yes=args.yes)
    except OperationFailed as exc:
        return _failed(exc)
    except KeyboardInterrupt:
        return 130
    if args.json:
        print(json.dumps({"event": "swap-result", **{k: v for k, v in result.items() if k != "compare"}}), flush=True)
    else:
        outage = result.get("outage_s")
        print(f"{result['outcome']}: " + {"swapped": f"{result['new']} serves in {result['old']}'s place",
                                          "rolled-back": f"{result['old']} is back ({literal(str(result.get('reason')))})",
                                          }.get(result["outcome"], literal(str(result.get("reason"))))
              + (f"; outage {outage:.1f} s (from the stop of {result['old']} until a server was ready again)"
                 if outage else "; no outage" if outage == 0 else "; the outage goes on: no server is ready"))
    return 0 if result["outcome"] in ("swapped", "rolled-back") else 1


def _swap_step_line(step: SwapStep, old: str, profile: str, warnings: list[str]) -> str | None:
    """What `gpuops swap` prints for a step of Ops.swap (None: nothing)."""
    match step:
        case SwapPlanned():
            return "\n".join([f"swap {step.old} → {step.new} ({step.model})", *(f"  {literal(line)}" for line in step.diff),
                              *(f"  warning: {literal(w)}" for w in warnings)])
        case SwapFetch() if not isinstance(step.status, str):
            return f"fetching {literal(str(step.model))} for {step.new} ({old} serves meanwhile)"
        case SwapFetch():
            return f"{step.new}'s weights: " + ("already on the host" if step.present else
                                               f"{units.size(step.bytes or 0)} in {step.seconds or 0:.0f} s"
                                               if step.status == "ok" else literal(str(step.status)))
        case SwapBenchOld() if step.skipped:
            return f"benchmark of {old}: skipped"
        case SwapBenchNew() if step.skipped:
            return f"benchmark of {step.new or 'the new one'}: skipped"
        case SwapBenchOld() if step.reused:
            return f"benchmark of {old}: run #{step.run} ({profile}), reused"
        case SwapCompare():
            from ..core.bench.runner import compare_rows

            header, rows = compare_rows(step.compare)
            widths = [max(len(literal(r[i])) for r in [header, *rows]) for i in range(len(header))]
            return "\n".join("  " + "  ".join(literal(c).ljust(w) for c, w in zip(row, widths))
                             for row in [header, *rows])
        case SwapStopOld():
            return f"stopping {step.old}"
        case SwapDeployNew():
            return f"deploying {step.new}"
        case SwapKept():
            return f"kept {step.new}"
        case SwapRollback():
            return f"rolling back to {step.old}: {literal(step.why)}"
        case SwapNewState() | SwapOldState():
            return step.name.replace("-", ": ", 1)
    return None


def run_forget(inv: Inventory, args: argparse.Namespace) -> int:
    try:
        run_use_case(inv, args, lambda ops, yes: ops.forget(args.name, confirmed=yes), yes=args.yes)
    except OperationFailed as exc:
        return _failed(exc)
    print(f"{args.name}: forgotten")
    return 0
