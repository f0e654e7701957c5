"""`gpuops plan`: the command-line face of gpuops.core.planning."""

from __future__ import annotations

import argparse
import asyncio
import json
from typing import TYPE_CHECKING

from ..core.config import Inventory
from .common import UsageError


if TYPE_CHECKING:  # the planning modules load when a plan is made, not with every command
    from ..core.planning.request import PlanRequest


class PlanUsageError(UsageError):
    """Bad input: one line, exit 2."""


def request_from_args(args: argparse.Namespace, model: str | None = None) -> PlanRequest:
    """The planning options as :func:`add_planning_options` parsed them."""
    from ..core.planning.request import PlanRequest

    return PlanRequest(model=args.model if model is None else model, host=args.host, hosts=args.hosts,
                       replicas=args.replicas, router_policy=args.router_policy, tp=args.tp, gpus=args.gpus, gpu_memory=args.gpu_memory,
                       gpu_ids=args.gpu_ids, engine_version=args.sglang_version, like=args.like,
                       download_dir=args.download_dir, mtp=args.mtp, name=args.name, port=args.port)


# the planning options' destinations beside --host and --name (what a PLAN.json given to deploy refuses)
PLANNING_DESTS = ("hosts", "replicas", "router_policy", "tp", "gpus", "gpu_memory", "gpu_ids", "sglang_version", "like",
                  "download_dir", "mtp", "port")


def add_planning_options(p: argparse.ArgumentParser, *, host_help: str) -> None:
    """The options that make a plan: one definition for `plan MODEL` and `deploy MODEL`."""
    p.add_argument("--host", metavar="H", help=host_help)
    p.add_argument("--hosts", metavar="H1,H2,..", help="one deployment over several hosts (multi-node TP: node 0 "
                   "first, --tp split evenly over them)")
    p.add_argument("--replicas", type=int, metavar="K", help="K servers of the model on --host (or round "
                   "--hosts), each on GPUs and a port of its own, behind the engine's router on the (first) host (the first of its routers the host has)")
    p.add_argument("--router-policy", metavar="P", help="with --replicas: how the router spreads the requests "
                   "(its --policy: cache_aware by default; round_robin, power_of_two, least_load, … as the router "
                   "accepts; one only smg has makes the plan smg's)")
    p.add_argument("--tp", type=int, help="tensor parallel size (default: the smallest the engine can run that holds "
                   "a full context; the plan says the others)")
    p.add_argument("--gpus", type=int, metavar="N", help="plan offline for N GPUs (or override the host's)")
    p.add_argument("--gpu-memory", type=float, metavar="GIB", help="memory per GPU when planning offline")
    p.add_argument("--gpu-ids", metavar="0,1,..", help="which GPUs the deployment gets (CUDA_VISIBLE_DEVICES)")
    p.add_argument("--sglang-version", metavar="V", help="plan for this SGLang version (default: the host's)")
    p.add_argument("--like", metavar="NAME|PLAN.json|UNIT", help="start from a previous deployment's flags")
    p.add_argument("--download-dir", metavar="PATH", help="where the weights go on the host")
    p.add_argument("--mtp", dest="mtp", action="store_const", const=True, default=None,
                   help="speculative decoding with the model's MTP layers, even where the engine's published command "
                   "for these GPUs leaves it off (default: as that command has it, else on)")
    p.add_argument("--no-mtp", dest="mtp", action="store_const", const=False,
                   help="no speculative decoding even if the model has MTP layers")
    p.add_argument("--name", metavar="N", help="deployment name (default: from the model id)")
    p.add_argument("--port", type=int, default=None,
                   help="server port, never moved (default: the host's first_port, else $GPUOPS_FIRST_PORT, else 30000; "
                   "or the next free one above it when the host uses it)")


def add_plan_parser(sub: argparse._SubParsersAction, common: argparse.ArgumentParser) -> None:
    p = sub.add_parser("plan", parents=[common], help="a checked, explained SGLang deployment plan for a model")
    p.add_argument("model", metavar="MODEL", help="an HF repo id (owner/name) or a local folder holding config.json")
    add_planning_options(p, host_help="plan for this inventory host (its GPUs, disks and SGLang are read)")
    p.add_argument("--json", action="store_true", help="one JSON document (schema 1)")


def run_plan(inv: Inventory, args: argparse.Namespace) -> int:
    facts, plan = make_plan(inv, request_from_args(args))
    if args.json:
        print(json.dumps(plan.to_json(), indent=2))
    else:
        print_plan(facts, plan)
    return 0


def make_plan(inv: Inventory, req: PlanRequest):
    """(the model's facts, the plan) that `req` asks for: the planning use case (``Ops.plan``) for
    `plan`, `deploy MODEL` and `swap`, with the hosts opened for the reading and the store read only
    when there is one (planning creates none); PlanUsageError on bad input, nothing changed."""
    from ..core.ops import Ops
    from ..core.planning import PlanError

    async def go():
        ops = Ops(inv)
        try:
            return await ops.plan(req)
        finally:
            await ops.close()

    try:
        return asyncio.run(go())
    except PlanError as exc:
        raise PlanUsageError(str(exc)) from None


def print_plan(facts, plan) -> None:
    from rich.console import Console, Group
    from rich.panel import Panel
    from rich.syntax import Syntax
    from rich.text import Text

    from ..core import engines
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
    checked = Text(f"{engines.get(plan.engine).title} {plan.engine_version} ({plan.engine_version_source}); flags checked against "
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
