"""`gpuops deploy`, `status`, `logs`, `stop`, `forget` and `triage`: the command-line face of the use cases."""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import sys
from pathlib import Path
from typing import Any

from ..core.config import Inventory
from ..core.literal import literal, literal_lines
from .common import OperationFailed, UsageError, minute, run_use_case

SCHEMA = 1


def add_deploy_parsers(sub: argparse._SubParsersAction, common: argparse.ArgumentParser) -> None:
    p = sub.add_parser("deploy", parents=[common], help="download, start and watch a model's server on a host")
    p.add_argument("model", metavar="MODEL|PLAN.json", help="a model (planned with defaults) or a plan from `gpuops plan --json`")
    p.add_argument("--host", metavar="H", required=True)
    p.add_argument("--name", metavar="N", help="deployment name (default: the plan's)")
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

    p = sub.add_parser("forget", parents=[common], help="remove a deployment whose server is not running from "
                       "the store, with its history (asks first)")
    p.add_argument("name", metavar="NAME")
    p.add_argument("--yes", action="store_true", help="don't ask")

    p = sub.add_parser("swap", parents=[common], help="replace a ready deployment by another model as one action: "
                       "benchmark it, plan the new one like it, stop it, deploy, benchmark, compare, keep or roll back")
    p.add_argument("old", metavar="OLD", help="the ready deployment to replace")
    p.add_argument("model", metavar="MODEL", help="the new model (an HF repo id or a folder on the host)")
    p.add_argument("--name", metavar="N", help="the new deployment's name (default: from the model id)")
    p.add_argument("--profile", metavar="P", default="smoke", help="the benchmark both run (default: smoke)")
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
    """The plan to deploy: a plan JSON (decoded and validated as a Plan), or one made here with
    the defaults for the model."""
    from ..core.domain import Invalid, Plan

    ref = args.model
    if ref.endswith(".json") and Path(ref).is_file():
        try:
            doc = json.loads(Path(ref).read_text())
        except (OSError, UnicodeDecodeError, ValueError) as exc:
            raise UsageError(f"{ref}: not a plan JSON: {exc}") from None
        try:
            return Plan.from_json(doc, ref)
        except Invalid as exc:
            raise UsageError(str(exc)) from None
    plan = _plan_here(inv, ref, args.host, args.name)
    if plan.fit is not None and not plan.fit.fits:
        raise UsageError(f"the plan does not fit: {plan.fit.verdict}")
    return plan


def _plan_here(inv: Inventory, model: str, host: str, name: str | None, *, gpu_ids: str | None = None,
               like: str | None = None, hosts: str | None = None, tp: int | None = None) -> Any:
    """`gpuops plan`'s plan of `model` on `host` with its defaults (the default port or the next free
    one; `like` a stored deployment, `gpu_ids` "0,1"; `hosts` "H0,H1" with `tp`: over those nodes),
    for the verbs that plan on their own. (Its bad input is plan's PlanUsageError, a UsageError.)"""
    from .plan import run_plan_object

    ns = argparse.Namespace(model=model, host=None if hosts else host, hosts=hosts, tp=tp, gpus=None,
                            gpu_memory=None, gpu_ids=gpu_ids, sglang_version=None, like=like, download_dir=None,
                            no_mtp=False, name=name, explicit_port=None)
    return run_plan_object(inv, ns)[1]


def _hf_token() -> str | None:
    token = os.environ.get("HF_TOKEN")
    if token:
        return token
    try:
        from huggingface_hub import get_token

        return get_token()
    except Exception:
        return None


def describe_event(event: Any) -> str | None:
    """One line for a deployment event, as a person reads it (None: not worth a line)."""
    from ..core.domain import ChecksEvent, FindingEvent, LogEvent, NumbersEvent, PhaseEvent, PlanEvent, ProgressEvent, StateEvent

    when = event.ts[11:19]
    if isinstance(event, (LogEvent, NumbersEvent, PhaseEvent)):
        return None
    if isinstance(event, ProgressEvent):
        if event.phase == "downloading" and event.total:
            return f"{when}  downloading {event.done / 1e9:.1f}/{event.total / 1e9:.1f} GB"
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
    from ..core.domain import event_json

    if getattr(args, "readonly", False):
        raise UsageError("read-only: deploy changes a host")
    try:
        inv.host(args.host)
    except KeyError:
        raise UsageError(f"unknown host {args.host!r} (known: {', '.join(inv.names())})") from None
    plan = _load_plan(inv, args)
    if args.name:
        try:
            plan = plan.replace(name=validate_host_name(args.name))
        except ValueError as exc:
            raise UsageError(f"--name: {exc}") from None

    made_here = not args.model.endswith(".json")
    # beside its other nodes' (or its replicas') labelled lines, the deployment's own are labelled too
    own = "[node 0] " if plan.members else "[router] " if plan.replicas else ""

    def emit(event: Any) -> None:
        if args.json:
            print(json.dumps(event_json(event)), flush=True)
        else:
            line = describe_event(event)
            if line is not None:
                print(own + line, flush=True)
            if made_here and getattr(event, "state", None) == "planned":
                # what the plan made here chose on its own (a moved port, say), once it is recorded
                # (a refusal before that stays one line)
                for warning in plan.warnings:
                    print(f"          plan: {warning}", flush=True)

    def emit_part(label: str) -> Any:
        """A multi-node deployment's node, a replicated one's replica: its events too, each human
        line labelled with it."""
        def out(event: Any) -> None:
            if args.json:
                print(json.dumps(event_json(event)), flush=True)
            elif (line := describe_event(event)) is not None:
                print(f"[{label}] {line}", flush=True)
        return out

    async def use(ops: Any, yes: bool) -> str:
        ops.bus.listen(plan.name, emit)
        for rank, member in enumerate(plan.member_names, start=1):
            ops.bus.listen(member, emit_part(f"node {rank}"))
        for index, replica in enumerate(plan.replica_names, start=1):
            ops.bus.listen(replica, emit_part(f"replica {index}"))
        return await ops.deploy(plan, args.host, yes=args.yes,
                                ask=lambda q: sys.stdin.isatty() and input(f"{q}\ncontinue? [y/N] ").strip().lower()
                                in ("y", "yes"), hf_token=_hf_token())

    try:
        outcome = run_use_case(inv, args, use)
    except OperationFailed as exc:
        return _failed(exc)
    return 0 if outcome == "ready" else 1


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

    async def use(ops: Any, _yes: bool) -> tuple[Any, list]:
        try:
            d = await ops.status(args.name)
        except Exception as exc:  # a host that cannot be reached: what the store says
            from ..core.hosts.host import HostError
            from ..core.ops import Refused

            if isinstance(exc, Refused) or not isinstance(exc, HostError):
                raise
            d = ops.deployment(args.name)
        return d, ops.events(d.name, run=d.run)[-50:], ops.parts(d)

    d, events, parts = run_use_case(inv, args, use)
    if args.json:
        _print({"schema": SCHEMA, "deployment": d.to_json(), "events": [event_json(e) for e in events],
                "parts": [{"name": p.name, "state": p.state, "host": p.host} for p in parts]})
    else:
        print(f"{d.name}: {d.state} on {d.host} — {d.model} (launcher {d.launcher}, run {d.run}, since {d.updated_at})")
        kind = "node" if d.plan.members else "replica"
        for i, p in enumerate(parts, start=1):  # the other nodes (node 0 is d) or the router's replicas
            print(f"  {kind} {i}: {p.name} {p.state} on {p.host} (run {p.run}, since {minute(p.updated_at)})")
        for e in events:
            line = describe_event(e)
            if line is not None:
                print("  " + line.replace("\n", "\n  "))
    return 0


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
        detail = run_use_case(inv, args, lambda ops, yes: ops.stop(args.name, confirmed=yes), yes=args.yes)
    except OperationFailed as exc:
        return _failed(exc)
    print(f"{args.name}: stopped ({detail})")
    return 0


def run_swap(inv: Inventory, args: argparse.Namespace) -> int:
    """`gpuops swap OLD MODEL`: the afternoon as one action (core/ops.py Ops.swap does it)."""
    from ..core.bench.runner import BenchInputError, compare_rows, resolve_profile
    from ..core.deploy.store import Store
    from .bench import _print_event

    if getattr(args, "readonly", False):
        raise UsageError("read-only: a swap stops and starts servers")
    try:
        profile = resolve_profile(args.profile, inv.bench_profiles)
    except BenchInputError as exc:
        raise UsageError(str(exc)) from None
    store = Store()
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
    nodes = [m.host for m in old.plan.members]
    plan = _plan_here(inv, args.model, old.host, args.name, like=old.name,
                      **({"hosts": ",".join(nodes), "tp": old.plan.tp} if nodes else
                         {"gpu_ids": ",".join(map(str, old.plan.gpu_ids))}))
    if plan.fit is not None and not plan.fit.fits:
        raise UsageError(f"{plan.model.id} does not fit on {old.name}'s GPUs: {plan.fit.verdict}")
    held = (f"port {old.plan.port} is in use", "already run processes")  # the old server's own: freed by the stop
    warnings = [w for w in plan.warnings if not any(h in w for h in held)]

    def emit(step: dict) -> None:
        if args.json:
            print(json.dumps({"event": "swap", **step}, allow_nan=False), flush=True)
            return
        name = step["step"]
        if name == "plan":
            print(f"swap {step['old']} → {step['new']} ({step['model']})")
            for line in step["diff"]:
                print(f"  {literal(line)}")
            for w in warnings:
                print(f"  warning: {literal(w)}")
        elif name == "bench-old" and step.get("reused"):
            print(f"benchmark of {args.old}: run #{step['run']} ({profile.name}), reused")
        elif name == "compare":
            header, rows = compare_rows(step["compare"])
            widths = [max(len(literal(r[i])) for r in [header, *rows]) for i in range(len(header))]
            for row in [header, *rows]:
                print("  " + "  ".join(literal(c).ljust(w) for c, w in zip(row, widths)))
        elif name in ("stop-old", "deploy-new", "kept", "rollback") or name.startswith(("new-", "old-")):
            print({"stop-old": f"stopping {step.get('old')}", "deploy-new": f"deploying {step.get('new')}",
                   "kept": f"kept {step.get('new')}", "rollback": f"rolling back to {step.get('old')}: "
                   f"{literal(step.get('why'))}"}.get(name, f"{name.replace('-', ': ', 1)}"), flush=True)

    def bench_emit(event: Any) -> None:
        if args.json:
            print(json.dumps({"event": "bench", **event.to_json()}, allow_nan=False), flush=True)
        elif event.kind in ("state", "result"):
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
                              keep=keep, emit=emit, bench_emit=bench_emit)

    try:
        result = run_use_case(inv, args, use, yes=args.yes)
    except OperationFailed as exc:
        return _failed(exc)
    except KeyboardInterrupt:
        return 130
    if args.json:
        print(json.dumps({"event": "swap-result", **{k: v for k, v in result.items() if k != "compare"}}), flush=True)
    else:
        print(f"{result['outcome']}: " + {"swapped": f"{result['new']} serves in {result['old']}'s place",
                                          "rolled-back": f"{result['old']} is back ({literal(str(result.get('reason')))})",
                                          }.get(result["outcome"], literal(str(result.get("reason")))))
    return 0 if result["outcome"] in ("swapped", "rolled-back") else 1


def run_forget(inv: Inventory, args: argparse.Namespace) -> int:
    try:
        run_use_case(inv, args, lambda ops, yes: ops.forget(args.name, confirmed=yes), yes=args.yes)
    except OperationFailed as exc:
        return _failed(exc)
    print(f"{args.name}: forgotten")
    return 0
