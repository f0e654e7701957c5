"""`gpuops deploy`, `logs`, `stop` and `triage`: the command-line face of core/deploy.py."""

from __future__ import annotations

import argparse
import asyncio
import json
import sys
from pathlib import Path

from ..core.config import Inventory


class DeployUsageError(Exception):
    """Bad input or a refusal before anything changed: one line, exit 2."""


def add_deploy_parsers(sub: argparse._SubParsersAction, common: argparse.ArgumentParser) -> None:
    p = sub.add_parser("deploy", parents=[common], help="download, start and watch a model's server on a host")
    p.add_argument("model", metavar="MODEL|PLAN.json", help="a model (planned with defaults) or a plan from `gpuops plan --json`")
    p.add_argument("--host", metavar="H", required=True)
    p.add_argument("--name", metavar="N", help="deployment name (default: the plan's)")
    p.add_argument("--yes", action="store_true", help="don't ask (GPUs already in use, …)")
    p.add_argument("--json", action="store_true", help="one JSON object per event on stdout")

    p = sub.add_parser("logs", parents=[common], help="a deployment's server log")
    p.add_argument("name", metavar="NAME")
    p.add_argument("-f", "--follow", action="store_true", help="keep following")
    p.add_argument("--json", action="store_true", help="one JSON object per line")

    p = sub.add_parser("stop", parents=[common], help="stop a deployment's server (asks first)")
    p.add_argument("name", metavar="NAME")
    p.add_argument("--yes", action="store_true", help="don't ask")

    p = sub.add_parser("triage", parents=[common], help="where a server log got to, and why it stopped there; "
                       "for a deployment also the checks on its host")
    p.add_argument("logfile", metavar="LOGFILE|-", nargs="?", help="a log file, or - for stdin")
    p.add_argument("--deployment", metavar="NAME", help="a deployment's log and its host's checks (driver, NVML, "
                   "P2P, /dev/shm, ports, leftover GPU processes, py-spy stacks of the ranks)")
    p.add_argument("--json", action="store_true", help="one JSON document (schema 1)")


# ------------------------------------------------------------------ triage


def run_triage(args: argparse.Namespace) -> int:
    from ..core.hosts.host import HostError
    from ..core.diagnose.phases import triage_log

    if (args.logfile is None) == (args.deployment is None):
        raise DeployUsageError("triage wants a LOGFILE (- for stdin) or --deployment NAME, not both")
    if args.deployment is not None:
        try:
            doc = _triage_deployment(args)
        except HostError as exc:
            print(f"gpuops: {exc.message}", file=sys.stderr)
            return 1
    elif args.logfile == "-":
        doc = triage_log(sys.stdin)
    else:
        path = Path(args.logfile)
        if not path.is_file():
            raise DeployUsageError(f"{args.logfile}: no such file")
        with path.open(encoding="utf-8", errors="replace") as f:
            doc = triage_log(f)
    if args.json:
        print(json.dumps(doc, indent=2))
        return 0
    print(f"phase: {doc['phase'] or '-'}   outcome: {doc['outcome']}")
    if doc.get("log_error"):
        print(f"  the log could not be read: {doc['log_error']}")
    for finding in doc.get("findings") or []:
        print(f"  {finding.get('severity', '?')}: {finding.get('code')}: {finding.get('summary')}")
        for ev in finding.get("evidence") or []:
            print(f"      {ev.get('source')}: {ev.get('line') or ev.get('reading')}")
        fix = finding.get("fix") or {}
        if fix.get("summary"):
            print(f"    fix{' (applicable: gpuops TUI, deployment screen, f)' if fix.get('applicable') else ''}: "
                  f"{fix['summary']}")
    for check in doc.get("checks") or []:
        mark = {True: "ok", False: "FAIL", None: "n/a"}[check["ok"]]
        print(f"  [{mark:>4}] {check['name']}: {check['detail']}")
    for stack in doc.get("stacks") or []:
        print(f"--- py-spy {stack.get('rank') or 'server'} (pid {stack['pid']}) ---")
        print((stack.get("text") or stack.get("error") or "").rstrip())
    return 0


def _triage_deployment(args: argparse.Namespace) -> dict:
    """The deployment's log through the log triage, plus the host checks (core/diagnose.py)."""
    from ..core.config import load_inventory
    from ..core.diagnose.triage import triage_deployment
    from ..core.hosts.host import make_host

    d = _deployment(args.deployment)
    inv = load_inventory(getattr(args, "config", None))
    try:
        cfg = inv.host(d.host)
    except KeyError:
        raise DeployUsageError(f"deployment {d.name} is on {d.host!r}, which the inventory no longer has") from None

    async def go() -> dict:
        host = make_host(cfg)
        try:
            return await triage_deployment(host, d.plan, cfg.journal_dir)
        finally:
            await host.close()

    return asyncio.run(go())


# ------------------------------------------------------------------ deploy


def _load_plan(inv: Inventory, args: argparse.Namespace) -> dict:
    ref = args.model
    if ref.endswith(".json") and Path(ref).is_file():
        try:
            plan = json.loads(Path(ref).read_text())
        except ValueError as exc:
            raise DeployUsageError(f"{ref}: invalid JSON: {exc}") from None
        missing = [k for k in ("name", "argv", "port", "gpu_ids", "launcher", "model") if k not in plan]
        if missing:
            raise DeployUsageError(f"{ref}: not a gpuops plan (missing {', '.join(missing)})")
        if plan.get("host") not in (None, args.host):
            raise DeployUsageError(f"{ref} was planned for {plan['host']}, not {args.host}: plan again for it")
        return plan
    from .plan import PlanUsageError, run_plan_object

    ns = argparse.Namespace(model=ref, host=args.host, tp=None, gpus=None, gpu_memory=None, gpu_ids=None,
                            sglang_version=None, like=None, download_dir=None, no_mtp=False, name=args.name,
                            port=30000)
    try:
        plan = run_plan_object(inv, ns)
    except PlanUsageError as exc:
        raise DeployUsageError(str(exc)) from None
    if not plan.fit.fits:
        raise DeployUsageError(f"the plan does not fit: {plan.fit.verdict}")
    return plan.to_json()


def _hf_token() -> str | None:
    import os

    token = os.environ.get("HF_TOKEN")
    if token:
        return token
    try:
        from huggingface_hub import get_token

        return get_token()
    except Exception:
        return None


def run_deploy(inv: Inventory, args: argparse.Namespace) -> int:
    from ..core.deploy.deployer import DeployError, Deployer
    from ..core.hosts.host import HostError, make_host
    from ..core.deploy.store import Store, StoreError

    if getattr(args, "readonly", False):
        raise DeployUsageError("read-only: deploy changes a host")
    try:
        cfg = inv.host(args.host)
    except KeyError:
        raise DeployUsageError(f"unknown host {args.host!r} (known: {', '.join(inv.names())})") from None
    plan = _load_plan(inv, args)
    if args.name:
        from ..core.config import validate_host_name

        try:
            plan["name"] = validate_host_name(args.name)
        except ValueError as exc:
            raise DeployUsageError(f"--name: {exc}") from None

    def emit(event) -> None:
        if args.json:
            print(json.dumps(event.to_json()), flush=True)
        elif event.kind == "log":
            pass
        elif event.kind == "progress":
            d = event.data
            total = f"/{d['total']}" if d.get("total") else ""
            print(f"  {d.get('phase')}: {d.get('done')}{total} {d.get('what') or ''}".rstrip(), flush=True)
        else:
            print(f"{event.ts}  {event.kind}: {json.dumps(event.data)}", flush=True)

    def ask(question: str) -> bool:
        if not sys.stdin.isatty():
            return False
        return input(f"{question}\ncontinue? [y/N] ").strip().lower() in ("y", "yes")

    async def go() -> str:
        host = make_host(cfg)
        store = Store()
        try:
            deployer = Deployer(host, plan, store, emit=emit, yes=args.yes, ask=ask, stall=dict(inv.stall),
                                hf_token=_hf_token(), journal_dir=cfg.journal_dir)
            return await deployer.run()
        finally:
            store.close()
            await host.close()

    try:
        outcome = asyncio.run(go())
    except (DeployError, StoreError) as exc:
        raise DeployUsageError(str(exc)) from None
    except HostError as exc:
        print(f"gpuops: {exc.message}", file=sys.stderr)
        return 1
    return 0 if outcome == "ready" else 1


# ------------------------------------------------------------------ logs, stop


def _deployment(name: str):
    from ..core.deploy.store import Store

    store = Store()
    d = store.deployment(name)
    store.close()
    if d is None:
        raise DeployUsageError(f"no deployment named {name!r}")
    return d


def run_logs(inv: Inventory, args: argparse.Namespace) -> int:
    from ..core.deploy.deployer import log_follower, open_launcher
    from ..core.hosts.host import HostError, make_host

    d = _deployment(args.name)
    try:
        cfg = inv.host(d.host)
    except KeyError:
        raise DeployUsageError(f"deployment {d.name} is on {d.host!r}, which the inventory no longer has") from None

    async def go() -> None:
        host = make_host(cfg)
        try:
            follower = log_follower(host, await open_launcher(host, d.plan), cfg.journal_dir, follow=args.follow)
            async for rec in follower.records():
                if rec.notice:
                    print(f"gpuops: log {rec.notice}: {rec.text}", file=sys.stderr, flush=True)
                    continue
                if args.json:
                    print(json.dumps({"ts": rec.ts, "event": "log", "line": rec.text}), flush=True)
                else:
                    print(rec.text, flush=True)
        finally:
            await host.close()

    try:
        asyncio.run(go())
    except HostError as exc:
        print(f"gpuops: {exc.message}", file=sys.stderr)
        return 1
    except KeyboardInterrupt:
        return 130
    return 0


def run_stop(inv: Inventory, args: argparse.Namespace) -> int:
    from ..core.deploy.deployer import open_launcher
    from ..core.hosts.host import HostError, make_host
    from ..core.deploy.store import Store

    if getattr(args, "readonly", False):
        raise DeployUsageError("read-only: stop changes a host")
    d = _deployment(args.name)
    try:
        cfg = inv.host(d.host)
    except KeyError:
        raise DeployUsageError(f"deployment {d.name} is on {d.host!r}, which the inventory no longer has") from None
    if not args.yes:
        if not sys.stdin.isatty():
            raise DeployUsageError(f"stopping {d.name} on {d.host} needs confirmation: add --yes")
        if input(f"stop {d.name} ({d.model}) on {d.host}? [y/N] ").strip().lower() not in ("y", "yes"):
            raise DeployUsageError("not stopped")

    async def go() -> str:
        host = make_host(cfg)
        try:
            status = await (await open_launcher(host, d.plan)).stop()
            return status.detail
        finally:
            await host.close()

    try:
        detail = asyncio.run(go())
    except HostError as exc:
        print(f"gpuops: {exc.message}", file=sys.stderr)
        return 1
    store = Store()
    store.set_state(d.name, "stopped", detail=detail)
    store.close()
    print(f"{d.name}: stopped ({detail})")
    return 0
