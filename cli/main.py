"""The `gpuops` command line (a contract: docs/ARCHITECTURE.md § The command line).

Exit codes: 0 ok; 1 the operation failed; 2 bad input (one line on stderr, nothing changed).
Snapshot verbs (`hosts`, `gpus`, `models`) exit 0 when they report per-host errors inside the output.
A reader of stdout that goes away (`gpuops ... | head -1`) ends it quietly with 141 (128 + SIGPIPE).
Every path argument is checked once (``check_path_args``) before anything reads or writes it.
Textual is imported only by the verbs that draw a screen, so snapshot verbs start fast.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import sys
from typing import Any, Sequence

from ..core.config import ConfigError, HostConfig, Inventory, load_inventory
from ..core.literal import literal
from .common import UsageError, markup_literal  # (the verbs' own usage errors are UsageErrors too)
from .dashboard import run_dashboard

SCHEMA = 1


def gpuops_version() -> str:
    # (importlib.metadata, with the email and zipfile modules it brings, and its search of the
    # installed packages: read only for --version, not at every start)
    from importlib.metadata import PackageNotFoundError, version

    try:
        return version("gpuops")
    except PackageNotFoundError:  # pragma: no cover - running from a bare checkout
        return "0+unknown"


class _VersionAction(argparse.Action):
    """``--version``: argparse's, with the version looked up only when it is asked for."""

    def __init__(self, option_strings: Sequence[str], dest: str = argparse.SUPPRESS,
                 default: str = argparse.SUPPRESS, help: str = "show the version and exit"):
        super().__init__(option_strings=option_strings, dest=dest, default=default, nargs=0, help=help)

    def __call__(self, parser: argparse.ArgumentParser, namespace: argparse.Namespace, values: Any,
                 option_string: str | None = None) -> None:
        print(f"gpuops {gpuops_version()}")
        parser.exit()


def _common() -> argparse.ArgumentParser:
    common = argparse.ArgumentParser(add_help=False)
    common.add_argument("--config", metavar="FILE", default=argparse.SUPPRESS,
                        help="inventory file (default: $GPUOPS_CONFIG, then $XDG_CONFIG_HOME/gpuops/config.toml)")
    common.add_argument("--readonly", action="store_true", default=argparse.SUPPRESS,
                        help="disable every action that changes a host")
    return common


def _top_parser(common: argparse.ArgumentParser) -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(
        prog="gpuops", parents=[common],
        description="Plan, deploy, watch and benchmark SGLang servers on GPU hosts.",
    )
    parser.add_argument("--version", action=_VersionAction)
    return parser


def dashboard_args(argv: Sequence[str]) -> argparse.Namespace | None:
    """The arguments of a command line that opens the dashboard with nothing but the options every
    verb shares (``gpuops``, ``gpuops --readonly --config F``), as :func:`build_parser` reads them;
    None for any other (a verb, --help, --version, anything it does not know: the whole parser
    reads those). The dashboard's start then skips building every verb's parser (about 10 ms of
    a start that is measured against a bare Textual app's)."""
    i = 0
    while i < len(argv):
        token = argv[i]
        if token == "--readonly" or (token.startswith("--config=") and len(token) > len("--config=")):
            i += 1
        elif token == "--config" and i + 1 < len(argv) and not argv[i + 1].startswith("-"):
            i += 2
        else:
            return None
    args = _top_parser(_common()).parse_args(argv)
    args.verb = None
    return args


def build_parser() -> argparse.ArgumentParser:
    # (the verbs' modules: read when a verb's parser is built, not for the dashboard's start)
    from .bench import add_bench_parser
    from .deploy import add_deploy_parsers
    from .models import add_models_parser
    from .plan import add_plan_parser

    common = _common()
    parser = _top_parser(common)
    sub = parser.add_subparsers(dest="verb", metavar="VERB")

    p = sub.add_parser("hosts", parents=[common], help="one snapshot of every host: reachability, CPU, RAM, disks")
    p.add_argument("--json", action="store_true", help="one JSON document (schema 1)")

    p = sub.add_parser("gpus", parents=[common], help="one snapshot of the GPUs of every host (or one)")
    p.add_argument("--host", metavar="H", help="only this host")
    p.add_argument("--json", action="store_true", help="one JSON document (schema 1)")

    add_plan_parser(sub, common)
    add_models_parser(sub, common)
    add_deploy_parsers(sub, common)
    add_bench_parser(sub, common)

    p = sub.add_parser("demo", parents=[common], help="the dashboard against a simulated GPU host (labelled SIMULATED)")
    p.add_argument("--scenario", default="ok", metavar="S",
                   help="what the simulated host's server does: ok, slow-download, hang-at-dist-init, "
                        "kv-cache-oom")
    p.add_argument("--gpus", type=int, default=8, help="number of simulated GPUs")

    sim = sub.add_parser("sim", parents=[common], help="the simulated GPU host")
    sim_sub = sim.add_subparsers(dest="sim_verb", metavar="VERB", required=True)
    p = sim_sub.add_parser("setup", parents=[common], help="write a simulated host into DIR and print its [hosts.NAME] block")
    p.add_argument("dir", metavar="DIR")
    p.add_argument("--gpus", type=int, default=8)
    p.add_argument("--gpu-memory", type=float, default=None, metavar="GIB", help="per GPU (default: an H200's 140.4)")
    p.add_argument("--nvml", default="ok", choices=["ok", "absent", "no-driver", "mismatch"],
                   help="what NVML does there (absent: no pynvml, so gpuops reads nvidia-smi)")
    p.add_argument("--sglang-version", metavar="V", help="the SGLang version it presents (default: the newest known; "
                   "'none': no SGLang)")
    p.add_argument("--name", default="sim", help="host name in the printed block")
    p.add_argument("--ssh", metavar="TARGET", help="print an SSH entry (user@host:port) instead of a local one")
    p.add_argument("--scenario", default="ok", metavar="S",
                   help="what its SGLang server and hf do: ok, slow-download, hang-at-dist-init, kv-cache-oom "
                        "(default: ok)")
    p.add_argument("--sglang-venv", metavar="PATH", help="a virtualenv with the real SGLang: its benchmark and eval "
                   "modules (bench_serving, run_eval) run from it (scripts/sglang-host-venv.sh builds one)")
    p.add_argument("--pace", type=float, default=1.0, metavar="F",
                   help="multiplies the simulated delays: 1 (default) starts a big model in ~5-10 s, 60 is about "
                        "real time")
    return parser


# ------------------------------------------------------------------ snapshot verbs


async def _snapshots(inv: Inventory, hosts: Sequence[HostConfig]) -> list[tuple[HostConfig, Any, Exception | None]]:
    from ..core.hosts.host import HostError
    from ..core.ops import Ops
    from ..core.telemetry.samples import snapshot

    ops = Ops(inv)  # its hosts, closed with it (it opens no store for this)

    async def one(cfg: HostConfig) -> tuple[HostConfig, Any, Exception | None]:
        host = ops.host(cfg.name)
        assert host is not None  # (cfg is the inventory's)
        try:
            return cfg, await snapshot(host), None
        except HostError as exc:
            return cfg, None, exc

    try:
        return await asyncio.gather(*(one(c) for c in hosts))
    finally:
        await ops.close()


def _error_fields(exc: Exception | None) -> tuple[str | None, str | None]:
    if exc is None:
        return None, None
    return getattr(exc, "message", str(exc)), getattr(exc, "hint", None)


def hosts_document(results: list[tuple[HostConfig, Any, Exception | None]]) -> dict:
    from ..core.hosts.host import HostUnreachable
    from ..core.telemetry.samples import plain

    rows = []
    for cfg, snap, exc in results:
        error, hint = _error_fields(exc)
        h = snap.host if snap else None
        rows.append({
            "name": cfg.name,
            "kind": "local" if cfg.local else "ssh",
            "address": cfg.address,
            "reachable": snap is not None or (exc is not None and not isinstance(exc, HostUnreachable)),
            "cpu_percent": plain(h.cpu_percent) if h else None,
            "mem_total_bytes": plain(h.mem_total) if h else None,
            "mem_used_bytes": plain(h.mem_used) if h else None,
            "disks": [d.to_json() for d in h.disks] if h else [],
            "error": error,
            "hint": hint,
        })
    return {"schema": SCHEMA, "hosts": rows}


def gpus_document(results: list[tuple[HostConfig, Any, Exception | None]]) -> dict:
    rows = []
    for cfg, snap, exc in results:
        error, hint = _error_fields(exc)
        if snap is not None and not snap.nvml.ok:
            error, hint = snap.nvml.error, snap.nvml.hint
        rows.append({
            "name": cfg.name,
            "error": error,
            "hint": hint,
            "driver_version": snap.nvml.driver_version if snap else None,
            "gpus": [g.to_json() for g in snap.gpus] if snap else [],
        })
    return {"schema": SCHEMA, "hosts": rows}


def _print_hosts(doc: dict) -> None:
    from rich.table import Table

    from .common import console

    from ..core import units

    table = Table(box=None, header_style="bold")
    for col in ("HOST", "KIND", "ADDRESS", "UP", "CPU", "RAM", "DISKS (free)"):
        table.add_column(col)
    lit = markup_literal  # (what the hosts said, as literal text)
    for h in doc["hosts"]:
        disks = ", ".join(f"{lit(d['mount'])} {units.size(d['free_bytes'])}" for d in h["disks"])
        ram = f"{units.gib(h['mem_used_bytes'])}/{units.gib(h['mem_total_bytes'])} GiB" if h["mem_total_bytes"] else "-"
        table.add_row(lit(h["name"]), h["kind"], lit(h["address"]), "yes" if h["reachable"] else "NO",
                      units.percent(h["cpu_percent"]) if h["cpu_percent"] is not None else "-", ram,
                      disks or (lit(h["error"]) if h["error"] else "-"))
        if h["error"]:
            table.add_row("", "", f"[red]{lit(h['error'])}[/]" + (f"\n[i]hint: {lit(h['hint'])}[/]" if h["hint"] else ""))
    console().print(table)


def _print_gpus(doc: dict) -> None:
    from rich.table import Table

    from ..core import units
    from .common import console as make_console

    console = make_console()
    lit = markup_literal  # (what the hosts said, as literal text)
    for h in doc["hosts"]:
        head = f"[bold]{lit(h['name'])}[/]" + (f"  driver {lit(h['driver_version'])}" if h["driver_version"] else "")
        console.print(head)
        if h["error"]:
            console.print(f"  [red]{lit(h['error'])}[/]" + (f"\n  [i]hint: {lit(h['hint'])}[/]" if h["hint"] else ""))
        if not h["gpus"]:
            continue
        table = Table(box=None, header_style="bold", padding=(0, 1))
        for col in ("GPU", "NAME", "MEM USED", "MEM TOTAL", "UTIL", "POWER", "TEMP", "PROCESSES"):
            table.add_column(col)
        for g in h["gpus"]:
            procs = ", ".join(f"{p['pid']} {lit(p['user'] or '?')} {units.size(p['used_bytes'])}" for p in g["processes"])
            na = "N/A"
            table.add_row(
                str(g["index"]), lit(g["name"]) if g["name"] else na, units.size(g["memory_used_bytes"] if g["memory_used_bytes"] is not None else None),
                units.size(g["memory_total_bytes"] if g["memory_total_bytes"] is not None else None),
                f"{g['util_percent']}%" if g["util_percent"] is not None else na,
                f"{g['power_w']:.0f} W" if g["power_w"] is not None else na,
                f"{g['temp_c']}°C" if g["temp_c"] is not None else na,
                procs or "-",
            )
        console.print(table)


def cmd_hosts(inv: Inventory, args: argparse.Namespace) -> int:
    doc = hosts_document(asyncio.run(_snapshots(inv, inv.hosts)))
    print(json.dumps(doc, indent=2)) if args.json else _print_hosts(doc)
    return 0


def cmd_gpus(inv: Inventory, args: argparse.Namespace) -> int:
    hosts = inv.hosts
    if args.host is not None:
        try:
            hosts = (inv.host(args.host),)
        except KeyError:
            raise UsageError(f"unknown host {args.host!r} (known: {', '.join(inv.names())})") from None
    doc = gpus_document(asyncio.run(_snapshots(inv, hosts)))
    print(json.dumps(doc, indent=2)) if args.json else _print_gpus(doc)
    return 0


# ------------------------------------------------------------------ checks and dispatch (the dashboard: cli/dashboard.py)


def check_path_args(args: argparse.Namespace) -> None:
    """Every path the command line takes, through one check (gpuops.core.paths.check_path) before
    anything reads or writes it: UsageError (one line, the path shown escaped, exit 2) for a control
    character, a path over PATH_MAX or a component over NAME_MAX. Paths that name a model folder,
    a folder to delete or the folder to write a simulated host into also must not climb with
    ``..`` (give the canonical path); files the operator hands in (a config, a plan JSON, a log, a
    benchmark file, an output file) may be relative to anywhere."""
    from ..core.paths import check_path

    verb = getattr(args, "verb", None)
    checks: list[tuple[object, str, bool]] = []  # (value, what, '..' allowed)
    if getattr(args, "config", None) is not None:
        checks.append((args.config, "--config", True))
    if verb in ("plan", "deploy"):  # deploy MODEL plans with plan's options
        checks.append((args.like, "--like", True))
        checks.append((args.download_dir, "--download-dir", False))
    if verb == "deploy" and args.model.endswith(".json"):
        checks.append((args.model, "PLAN.json", True))
    elif verb == "triage" and args.logfile not in (None, "-"):
        checks.append((args.logfile, "LOGFILE", True))
    elif verb == "bench":
        checks.append((getattr(args, "output", None), "-o", True))
        if args.target == "import":
            checks.extend((a, "FILE", True) for a in args.args)
    elif verb == "models" and getattr(args, "models_verb", None) == "rm":
        checks.append((args.model, "MODEL", False))
    elif verb == "sim":
        checks.append((args.dir, "DIR", False))
        checks.append((args.sglang_venv, "--sglang-venv", True))
    for value, what, dotdot in checks:
        if value is not None:
            try:
                check_path(value, what, dotdot=dotdot)
            except ValueError as exc:
                raise UsageError(str(exc)) from None
    if verb == "plan" or (verb == "deploy" and not args.model.endswith(".json")):
        from ..core.planning.model_facts import validate_model_ref

        try:
            validate_model_ref(args.model)
        except ValueError as exc:
            raise UsageError(f"MODEL: {exc}") from None


BROKEN_PIPE_EXIT = 141  # 128 + SIGPIPE: what a shell reports for `gpuops ... | head -1`


def _end_on_broken_pipe() -> int:
    """The reader of stdout went away (``| head``): no traceback, the conventional exit status.
    stdout is pointed at /dev/null so that the flush at interpreter shutdown finds nowhere to fail
    (docs.python.org/3/library/signal.html, note on SIGPIPE)."""
    try:
        devnull = os.open(os.devnull, os.O_WRONLY)
        os.dup2(devnull, sys.stdout.fileno())
    except (OSError, ValueError, AttributeError):
        pass
    return BROKEN_PIPE_EXIT


def quiet_library_warnings() -> None:
    """No warning a library raises reaches gpuops' output. A dependency's deprecation notice
    (cryptography 51 deprecating DSA printed ten lines from asyncssh's import on every SSH verb)
    broke one-line errors and JSON read with stderr, and would draw over the dashboard. This holds
    whatever ``-W``/``PYTHONWARNINGS`` say: gpuops' output is a contract. Warnings raised from
    gpuops' own modules still show."""
    import warnings

    warnings.filterwarnings("ignore")
    warnings.filterwarnings("default", module=r"gpuops(\.|$)")


def main(argv: Sequence[str] | None = None) -> int:
    """The command line (and the dashboard): :func:`dispatch` with a reader that went away ending it
    quietly, exit 141."""
    quiet_library_warnings()
    try:
        code = dispatch(argv)
        sys.stdout.flush()  # here, not at shutdown, so that a broken pipe is seen
        return code
    except BrokenPipeError:
        return _end_on_broken_pipe()
    except SystemExit as exc:
        # rich's Console turns a broken pipe into SystemExit(1) (Console.on_broken_pipe); argparse's
        # --help exits after writing into the buffer
        if isinstance(exc.__context__, BrokenPipeError):
            return _end_on_broken_pipe()
        try:
            sys.stdout.flush()
        except BrokenPipeError:
            return _end_on_broken_pipe()
        except (OSError, ValueError, AttributeError):
            pass
        raise


def dispatch(argv: Sequence[str] | None = None) -> int:
    argv = sys.argv[1:] if argv is None else list(argv)
    args = dashboard_args(argv) or build_parser().parse_args(argv)
    try:
        check_path_args(args)
        if args.verb in ("sim", "demo"):
            from . import sim

            return sim.cmd_sim_setup(args) if args.verb == "sim" else sim.cmd_demo(args)
        if args.verb == "triage":
            from .deploy import triage_target

            triage_target(args)
        if (args.verb == "triage" and args.deployment is None) or (args.verb == "status" and args.name is None):
            from ..core.config import default_inventory
            from . import deploy as cli_deploy

            # a log file or the store alone: no inventory needed (a broken config.toml does not stop them)
            run = cli_deploy.run_triage if args.verb == "triage" else cli_deploy.run_status
            return run(default_inventory(), args)
        inv = load_inventory(getattr(args, "config", None))
        if args.verb == "hosts":
            return cmd_hosts(inv, args)
        if args.verb == "gpus":
            return cmd_gpus(inv, args)
        if args.verb == "models":
            from .models import run_models

            return run_models(inv, args)
        if args.verb in ("deploy", "logs", "stop", "restart", "fix", "forget", "swap", "status", "triage"):
            from . import deploy as cli_deploy

            return {"deploy": cli_deploy.run_deploy, "logs": cli_deploy.run_logs, "stop": cli_deploy.run_stop,
                    "restart": cli_deploy.run_restart, "fix": cli_deploy.run_fix, "forget": cli_deploy.run_forget,
                    "swap": cli_deploy.run_swap, "status": cli_deploy.run_status,
                    "triage": cli_deploy.run_triage}[args.verb](inv, args)
        if args.verb == "bench":
            from .bench import run_bench

            return run_bench(inv, args)
        if args.verb == "plan":
            from .plan import run_plan

            return run_plan(inv, args)
        if args.verb is not None:  # pragma: no cover - every verb is dispatched above
            raise UsageError(f"unknown verb {args.verb!r}")
        return run_dashboard(inv, readonly=getattr(args, "readonly", False), config=getattr(args, "config", None))
    except (ConfigError, UsageError) as exc:
        print(f"gpuops: {literal(str(exc))}", file=sys.stderr)  # (one line, whatever a file or a host put in it)
        return 2
    except Exception as exc:
        # the store damaged, locked, read-only, full: one line naming the file and what to do (a
        # StoreError can only come from the store module once a verb has imported it)
        store = sys.modules.get(__name__.rsplit(".", 2)[0] + ".core.deploy.store")
        if store is None or not isinstance(exc, store.StoreError):
            raise
        print(f"gpuops: {literal(str(exc))}", file=sys.stderr)
        return 2 if isinstance(exc, store.NameTaken) else 1
    except KeyboardInterrupt:
        return 130


if __name__ == "__main__":  # pragma: no cover
    sys.exit(main())
