"""`gpuops plan`: the command-line face of gpuops.core.planning."""

from __future__ import annotations

import argparse
import asyncio
import json
import re
from dataclasses import dataclass

from ..core.config import HostConfig, Inventory
from .common import UsageError


class PlanUsageError(UsageError):
    """Bad input: one line, exit 2."""


@dataclass(frozen=True)
class PlanRequest:
    """What the operator asks a plan for: `gpuops plan`'s options, which `deploy MODEL` shares (and
    `swap` fills in for the new model). :func:`make_plan` turns it into a checked plan."""

    model: str
    host: str | None = None
    hosts: str | None = None  # "H1,H2": one deployment over several hosts
    replicas: int | None = None
    tp: int | None = None
    gpus: int | None = None
    gpu_memory: float | None = None
    gpu_ids: str | None = None  # "0,1" as typed
    sglang_version: str | None = None
    like: str | None = None  # NAME|PLAN.json|UNIT
    download_dir: str | None = None
    mtp: bool = True
    name: str | None = None
    port: int | None = None  # never moved; None: the default port, or the next free one
    replacing: str | None = None  # the deployment a swap stops first: its port is no conflict

    @classmethod
    def from_args(cls, args: argparse.Namespace, model: str | None = None) -> "PlanRequest":
        """The planning options as :func:`add_planning_options` parsed them."""
        return cls(model=args.model if model is None else model, host=args.host, hosts=args.hosts,
                   replicas=args.replicas, tp=args.tp, gpus=args.gpus, gpu_memory=args.gpu_memory,
                   gpu_ids=args.gpu_ids, sglang_version=args.sglang_version, like=args.like,
                   download_dir=args.download_dir, mtp=not args.no_mtp, name=args.name, port=args.port)


# the planning options' destinations beside --host and --name (what a PLAN.json given to deploy refuses)
PLANNING_DESTS = ("hosts", "replicas", "tp", "gpus", "gpu_memory", "gpu_ids", "sglang_version", "like",
                  "download_dir", "no_mtp", "port")


def add_planning_options(p: argparse.ArgumentParser, *, host_help: str) -> None:
    """The options that make a plan: one definition for `plan MODEL` and `deploy MODEL`."""
    p.add_argument("--host", metavar="H", help=host_help)
    p.add_argument("--hosts", metavar="H1,H2,..", help="one deployment over several hosts (multi-node TP: node 0 "
                   "first, --tp split evenly over them)")
    p.add_argument("--replicas", type=int, metavar="K", help="K servers of the model on --host (or round "
                   "--hosts), each on GPUs and a port of its own, behind sglang-router on the (first) host")
    p.add_argument("--tp", type=int, help="tensor parallel size (default: the smallest that fits)")
    p.add_argument("--gpus", type=int, metavar="N", help="plan offline for N GPUs (or override the host's)")
    p.add_argument("--gpu-memory", type=float, metavar="GIB", help="memory per GPU when planning offline")
    p.add_argument("--gpu-ids", metavar="0,1,..", help="which GPUs the deployment gets (CUDA_VISIBLE_DEVICES)")
    p.add_argument("--sglang-version", metavar="V", help="plan for this SGLang version (default: the host's)")
    p.add_argument("--like", metavar="NAME|PLAN.json|UNIT", help="start from a previous deployment's flags")
    p.add_argument("--download-dir", metavar="PATH", help="where the weights go on the host")
    p.add_argument("--no-mtp", action="store_true", help="no speculative decoding even if the model has MTP layers")
    p.add_argument("--name", metavar="N", help="deployment name (default: from the model id)")
    p.add_argument("--port", type=int, default=None,
                   help="server port, never moved (default: 30000, or the next free one when the host uses it)")


def add_plan_parser(sub: argparse._SubParsersAction, common: argparse.ArgumentParser) -> None:
    p = sub.add_parser("plan", parents=[common], help="a checked, explained SGLang deployment plan for a model")
    p.add_argument("model", metavar="MODEL", help="an HF repo id (owner/name) or a local folder holding config.json")
    add_planning_options(p, host_help="plan for this inventory host (its GPUs, disks and SGLang are read)")
    p.add_argument("--json", action="store_true", help="one JSON document (schema 1)")


def _gpu_ids(text: str | None) -> tuple[int, ...] | None:
    if text is None:
        return None
    if not re.fullmatch(r"\d+(,\d+)*", text.strip()):
        raise PlanUsageError(f"--gpu-ids must look like 0,1,2,3, got {text!r}")
    return tuple(int(x) for x in text.split(","))


def _version(text: str | None) -> str | None:
    if text is None:
        return None
    if not re.fullmatch(r"\d+\.\d+(\.\d+)?([.-]?(post|rc|dev)\d*)?", text):
        raise PlanUsageError(f"--sglang-version must look like 0.5.23, got {text!r}")
    return text


def load_like(ref: str):
    """A previous launch: a stored deployment's plan (by name), a plan JSON or a systemd unit."""
    from ..core.deploy.store import Store, StoreError
    from ..core.planning import PlanError
    from ..core.planning.like import load_previous

    def stored(name: str):
        store = Store()
        try:
            d = store.deployment(name)
        except StoreError as exc:
            raise PlanUsageError(f"--like {name}: {exc}") from None
        finally:
            store.close()
        return d.plan if d is not None else None

    try:
        return load_previous(ref, stored)
    except PlanError as exc:
        raise PlanUsageError(str(exc)) from None


async def _host_target(cfg: HostConfig):
    from ..core.planning.hostfacts import read_target
    from ..core.hosts.host import make_host

    host = make_host(cfg)
    try:
        return await read_target(host)
    finally:
        await host.close()


async def _host_sglang(cfg: HostConfig) -> tuple[str | None, frozenset[str] | None, bool]:
    """(SGLang version, its --help flags, asked): what the host's SGLang is when its GPUs could not
    be read; asked False when the host could not be asked at all."""
    from ..core.hosts.host import HostError, make_host
    from ..core.planning.hostfacts import help_flags, sglang_version

    host = make_host(cfg)
    try:
        version = await sglang_version(host)
        return version, (await help_flags(host, version) if version else None), True
    except HostError:
        return None, None, False
    finally:
        await host.close()


def _stored_ports() -> list[tuple[str, str, str, int]]:
    """(name, host, state, port) of each stored deployment: their ports are taken on their hosts
    even before their servers listen. A store that cannot be read says nothing."""
    import sqlite3

    from ..core.deploy.store import Store, StoreError, default_path

    if not default_path().is_file():  # nothing deployed from here: planning creates no store
        return []
    try:
        store = Store()
    except (StoreError, OSError, sqlite3.Error):
        return []
    try:
        return [(d.name, d.host, d.state, d.plan.port) for d in store.deployments()]
    except (StoreError, OSError, sqlite3.Error):
        return []
    finally:
        store.close()


def make_target(inv: Inventory, req: PlanRequest):
    from dataclasses import replace

    from ..core.planning.hostfacts import offline_target
    from ..core.hosts.host import HostError
    from ..core.planning.plan import GpuInfo, with_deployment_ports

    if req.gpus is not None and not 1 <= req.gpus <= 64:
        raise PlanUsageError(f"--gpus must be 1..64, got {req.gpus}")
    if req.gpu_memory is not None and not 1 <= req.gpu_memory <= 4096:
        raise PlanUsageError(f"--gpu-memory must be 1..4096 GiB, got {req.gpu_memory:g}")
    if req.host is None:
        if req.gpus is None or req.gpu_memory is None:
            raise PlanUsageError("give --host H (its GPUs are read) or --gpus N and --gpu-memory GIB to plan offline")
        return offline_target(req.gpus, req.gpu_memory)
    try:
        cfg = inv.host(req.host)
    except KeyError:
        raise PlanUsageError(f"unknown host {req.host!r} (known: {', '.join(inv.names())})") from None
    try:
        target = with_deployment_ports(asyncio.run(_host_target(cfg)), _stored_ports())
    except HostError as exc:
        if req.gpus is None or req.gpu_memory is None:
            hint = f" ({exc.hint})" if exc.hint else ""
            raise PlanUsageError(f"{exc.message}{hint}; to plan without it give --gpus N --gpu-memory GIB") from None
        # its GPUs could not be read, its SGLang may still be there: ask (the plan would otherwise
        # say "SGLang is not installed" where it is)
        version, flags, asked = asyncio.run(_host_sglang(cfg))
        target = replace(offline_target(req.gpus, req.gpu_memory, launcher=cfg.launcher), host=cfg.name,
                         python=cfg.python or "python3", model_dirs=cfg.model_dirs,
                         forbidden_paths=cfg.forbidden_paths, serve_host=cfg.serve_host,
                         allowed_gpu_ids=cfg.gpu_ids, sglang_version=version, help_flags=flags,
                         sglang_asked=asked)
        return target
    if req.gpus is not None or req.gpu_memory is not None:
        count = req.gpus if req.gpus is not None else len(target.gpus)
        mem = int(req.gpu_memory * 1024**3) if req.gpu_memory is not None else min(
            (g.memory_total for g in target.gpus), default=0)
        target = replace(target, gpus=tuple(GpuInfo(i, mem) for i in range(count)))
    return target


def run_plan(inv: Inventory, args: argparse.Namespace) -> int:
    facts, plan = make_plan(inv, PlanRequest.from_args(args))
    if args.json:
        print(json.dumps(plan.to_json(), indent=2))
    else:
        print_plan(facts, plan)
    return 0


def make_plan(inv: Inventory, req: PlanRequest):
    """(the model's facts, the plan) that `req` asks for: the planning use case of `plan`, `deploy
    MODEL` and `swap` (PlanUsageError on bad input, nothing changed)."""
    from ..core.planning import PlanError
    from ..core.planning.model_facts import ModelError, load_model_facts, validate_model_ref
    from ..core.planning.plan import Wishes, build_plan

    try:
        ref = validate_model_ref(req.model)
    except ValueError as exc:
        raise PlanUsageError(f"MODEL: {exc}") from None
    if req.download_dir is not None:
        from ..core.config import validate_abs_path

        try:
            validate_abs_path(req.download_dir, "--download-dir")
        except ValueError as exc:
            raise PlanUsageError(str(exc)) from None
    wishes = Wishes(
        tp=req.tp, gpu_ids=_gpu_ids(req.gpu_ids), mtp=req.mtp, download_dir=req.download_dir,
        port=req.port, name=req.name, sglang_version=_version(req.sglang_version),
        like=load_like(req.like) if req.like else None, replacing=req.replacing,
    )
    hosts = req.hosts
    if hosts and req.host:
        raise PlanUsageError("give --host (one host) or --hosts (several), not both")
    if hosts and (req.gpus is not None or req.gpu_memory is not None):
        raise PlanUsageError("--hosts reads every node's GPUs: --gpus/--gpu-memory plan one host offline")
    replicas = req.replicas
    if replicas is not None:
        if req.gpus is not None or req.gpu_memory is not None:
            raise PlanUsageError("--replicas reads the hosts' GPUs: --gpus/--gpu-memory plan one server offline")
        if not hosts and not req.host:
            raise PlanUsageError("--replicas: name the host (--host) or hosts (--hosts) they run on")
    nodes = _nodes(inv, hosts or req.host, least=1 if replicas is not None else 2) \
        if hosts or replicas is not None else None
    target = make_target(inv, req) if nodes is None else None
    try:
        facts = load_model_facts(ref)
    except ModelError as exc:
        raise PlanUsageError(str(exc)) from None
    try:
        if replicas is not None:
            from ..core.planning.plan import build_replicated_plan

            assert nodes is not None
            return facts, build_replicated_plan(facts, nodes, wishes, replicas)
        if nodes is not None:
            from ..core.planning.plan import build_multinode_plan

            return facts, build_multinode_plan(facts, nodes, wishes)
        return facts, build_plan(facts, target, wishes)
    except PlanError as exc:
        raise PlanUsageError(str(exc)) from None


def _nodes(inv: Inventory, hosts: str, least: int = 2) -> list:
    """The hosts of a multi-node or replicated plan: each host of `--hosts H1,H2` read as `--host`
    reads one."""
    from ..core.config import validate_host_name
    from ..core.planning.plan import Node

    names = [h.strip() for h in hosts.split(",") if h.strip()]
    if len(names) < least:
        raise PlanUsageError("--hosts: name two or more hosts, comma-separated (one host: --host)")
    if len(set(names)) != len(names):
        raise PlanUsageError(f"--hosts: each host once, not {hosts}")
    nodes = []
    for name in names:
        try:
            validate_host_name(name)
            cfg = inv.host(name)
        except ValueError as exc:
            raise PlanUsageError(f"--hosts: {exc}") from None
        except KeyError:
            raise PlanUsageError(f"--hosts: unknown host {name!r} (known: {', '.join(inv.names())})") from None
        nodes.append(Node(make_target(inv, PlanRequest(model="", host=name)), cfg.reachable_addr,
                          cfg.nccl_interface))
    return nodes


def print_plan(facts, plan) -> None:
    from rich.console import Console, Group
    from rich.panel import Panel
    from rich.syntax import Syntax
    from rich.text import Text

    from ..core.literal import literal
    from ..tui.plan_view import facts_line, fit_bars, launch_text, launch_title, parts_text, rules_table, where_text

    console = Console()
    console.print(Panel(facts_line(facts), title=Text(literal(facts.id), style="bold"), title_align="left"))
    verdict_style = "green" if plan.fit.fits else "red"
    console.print(Panel(Group(Text(plan.fit.verdict, style=f"bold {verdict_style}"), fit_bars(plan)),
                        title=f"fit on {plan.host or 'offline'}: TP{plan.tp}, {where_text(plan)}"
                        if not (plan.members or plan.replicas) else f"fit: TP{plan.tp} on {where_text(plan)}",
                        title_align="left"))
    where = (f"reuse the complete copy at {literal(plan.model_path)}" if plan.reuse_existing
             else f"download into {plan.download_dir}" if plan.download_dir else "download into the host's HF cache")
    console.print(Text.assemble(("weights: ", "bold"), where))
    # where the version and the flags come from inside the panel: a title is cut at 80 columns
    checked = Text(f"SGLang {plan.sglang_version} ({plan.sglang_version_source}); flags checked against "
                   f"{plan.flags_checked_against}", style="dim")
    console.print(Panel(Group(checked, launch_text(plan)), title=launch_title(plan),
                        title_align="left"))
    parts = parts_text(plan)
    if parts is not None:
        console.print(Panel(parts[1], title=parts[0], title_align="left"))
    rules = rules_table(plan)
    console.print(Panel(rules, title="why each flag", title_align="left"))
    if plan.like is not None and plan.like.diff:
        diff = Text()
        for change in plan.like.diff:
            diff.append(f"{change.op} {change.text}\n", style={"+": "green", "-": "red", "~": "yellow"}[change.op])
        console.print(Panel(diff, title=Text(f"against {literal(plan.like.source)}"), title_align="left"))
    from ..core.deploy.launchers import get as launcher
    from ..tui.plan_view import HOST_PYTHON

    for art in launcher(plan.launcher).artifacts(plan, HOST_PYTHON):  # the unit and env file it writes, if any
        body = Syntax(art.text, art.syntax, theme="ansi_dark", word_wrap=True) if art.syntax else Text(art.text)
        console.print(Panel(body, title=Text(art.title), title_align="left"))
    for w in plan.warnings:  # plain text: a warning may hold brackets ([hosts.NAME]) that are no markup
        console.print(Text.assemble(("warning: ", "yellow"), literal(w)))
