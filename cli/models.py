"""`gpuops models [--host H] [--json]` and `gpuops models rm MODEL --host H [--yes]`.

Wired into the command line by ``gpuops.cli.main``: ``add_models_parser(sub, common)`` in
``build_parser`` and ``run_models(inventory, args)`` for the ``models`` verb. Exit codes
as everywhere: 0 ok (the listing also when a host reports an error inside the JSON),
1 the removal failed, 2 bad input or a refusal (one line on stderr, nothing changed).
"""

from __future__ import annotations

import argparse
import asyncio
import json
import sys
from typing import Any, Callable, Mapping, Sequence, TextIO

from ..core.config import HostConfig, Inventory
from ..core.literal import exact, literal

SCHEMA = 1


class _Refused(Exception):
    """Exit 2 with this one-line message."""


def add_models_parser(subparsers: Any, common_parent: argparse.ArgumentParser) -> argparse.ArgumentParser:
    p = subparsers.add_parser(
        "models", parents=[common_parent],
        help="models on the hosts' disks (model dirs, HF cache): size, complete, in use; rm one",
        description="List the models in each host's model_dirs and HF hub cache, with the free space of "
                    "the mounts holding them; `models rm MODEL --host H` removes one.",
    )
    p.add_argument("--host", metavar="H", help="only this host")
    p.add_argument("--json", action="store_true", help="one JSON document (schema 1)")
    sub = p.add_subparsers(dest="models_verb", metavar="VERB")
    rm = sub.add_parser(
        "rm", parents=[common_parent], help="remove a model from a host (asks first)",
        description="Remove a model folder (or an HF cache entry) from a host. MODEL is what `gpuops models` "
                    "lists as id: a repo id or a path (a folder name or owner/name works when it is unique).",
    )
    rm.add_argument("model", metavar="MODEL")
    rm.add_argument("--host", metavar="H", default=argparse.SUPPRESS, required=False, help="the host (required)")
    rm.add_argument("--yes", action="store_true", help="do not ask (needed when stdin is not a terminal)")
    rm.add_argument("--json", action="store_true", default=argparse.SUPPRESS,
                    help="print the outcome as one JSON document")
    return p


def run_models(inventory: Inventory, args: argparse.Namespace) -> int:
    try:
        if getattr(args, "models_verb", None) == "rm":
            return _rm(inventory, args)
        return _list(inventory, args)
    except _Refused as exc:
        print(f"gpuops: {literal(str(exc))}", file=sys.stderr)  # (one line: a folder's name in it escaped)
        return 2


def _host_config(inventory: Inventory, name: str | None) -> HostConfig:
    try:
        return inventory.host(name or "")
    except KeyError:
        raise _Refused(f"unknown host {name!r} (known: {', '.join(inventory.names())})") from None


def _deployments(inventory: Inventory, host: str) -> Mapping[str, str]:
    """Stored deployments on ``host`` whose server may run (name → model path or repo id)."""
    from ..core.ops import Ops

    ops = Ops(inventory)
    try:
        return ops.stored_model_users(host)
    finally:
        ops.store.close()


# ------------------------------------------------------------------ listing


def _list(inventory: Inventory, args: argparse.Namespace) -> int:
    from ..core.ops import Ops

    configs = inventory.hosts if args.host is None else (_host_config(inventory, args.host),)
    users = {cfg.name: _deployments(inventory, cfg.name) for cfg in configs}

    async def every():
        ops = Ops(inventory)  # its hosts, closed with it
        try:
            return await asyncio.gather(*(ops.scan_storage(c.name, users[c.name]) for c in configs))
        finally:
            await ops.close()

    results = asyncio.run(every())
    doc = {"schema": SCHEMA, "hosts": [r.to_json() for r in results]}
    if args.json:
        print(json.dumps(doc, indent=2))
    else:
        print_models(doc)
    return 0


def _used_label(used_by: list[dict]) -> str:
    return ", ".join(f"deployment {u['deployment']}" if "deployment" in u else f"pid {u['pid']}" for u in used_by)


def print_models(doc: dict) -> None:
    from rich.table import Table

    from ..core import units
    from .common import console as make_console
    from .common import markup_literal as escape  # (control characters escaped, then the markup's brackets)

    console = make_console()
    for h in doc["hosts"]:
        console.print(f"[bold]{escape(h['name'])}[/]")
        if h["error"]:
            console.print(f"  [red]{escape(h['error'])}[/]" + (f"\n  [i]hint: {escape(h['hint'])}[/]" if h["hint"] else ""))
            continue
        for m in h["mounts"]:
            holds = ", ".join(m.get("paths") or [])
            console.print(f"  {escape(m['mount'])}: {units.size(m['free_bytes'])} free of "
                          f"{units.size(m['total_bytes'])}" + (f"  [dim]({escape(holds)})[/]" if holds else ""))
        if h.get("hf_cache"):
            console.print(f"  [dim]HF cache: {escape(h['hf_cache'])}[/]")
        if not h["models"]:
            console.print("  [dim]no models found[/]")
            continue
        table = Table(box=None, header_style="bold", padding=(0, 1))
        table.add_column("MODEL", overflow="fold", ratio=1)
        for col in ("KIND", "SIZE", "MODIFIED (UTC)", "COMPLETE"):
            table.add_column(col, no_wrap=True)
        table.add_column("USED BY", overflow="fold")
        for m in h["models"]:
            complete = {True: "yes", False: "[red]NO[/]", None: "?"}[m["complete"]]
            modified = (m["modified"] or "-").replace("T", " ")[:16]
            kind = m["kind"] + (" [yellow]forbidden[/]" if m.get("forbidden") else "")  # kept or deleted, never reused
            table.add_row(escape(m["id"]), kind, units.size(m["size_bytes"]), modified, complete,
                          escape(_used_label(m["used_by"])) or "-")
        console.print(table)


# ------------------------------------------------------------------ removing


def _ask(question: str, stdin: TextIO, stderr: TextIO) -> bool:
    stderr.write(f"{question} [y/N] ")
    stderr.flush()
    answer = stdin.readline()
    if not answer.endswith("\n"):
        stderr.write("\n")
    return answer.strip().lower() in ("y", "yes")


def _rm(inventory: Inventory, args: argparse.Namespace,
        ask: Callable[[str], bool] | None = None) -> int:
    from ..core import units
    from ..core.hosts.host import HostError
    from ..core.hosts.model_copies import matches, refusal_for, scan
    from ..core.ops import Ops, Refused

    name = getattr(args, "host", None)
    if name is None:
        raise _Refused("models rm needs --host H (the host the model is on)")
    cfg = _host_config(inventory, name)
    query = args.model
    if not query.strip() or any(ch in query for ch in "\0\n\r"):
        raise _Refused(f"invalid MODEL {query!r}")
    readonly = bool(getattr(args, "readonly", False))
    if readonly:
        raise _Refused(f"refused (readonly): gpuops runs read-only (--readonly); {query} on {name} not deleted")
    as_json = bool(getattr(args, "json", False))
    deployments = _deployments(inventory, name)
    ask = ask or (lambda q: _ask(q, sys.stdin, sys.stderr))

    async def work() -> int:
        ops = Ops(inventory, readonly=readonly)  # its hosts and store, closed with it
        host = ops.host(cfg.name)
        assert host is not None  # (cfg is the inventory's)
        try:
            storage = await scan(host, deployments)
            found = matches(storage, query)
            if not found:
                raise _Refused(f"no model {query!r} on {name} (see: gpuops models --host {name})")
            if len(found) > 1:
                listed = "; ".join(f"{m.id} ({m.kind}, {exact(m.path)})" for m in found)
                raise _Refused(f"{query!r} is ambiguous on {name}: {listed}; give the path")
            model = found[0]
            refused = refusal_for(model, readonly)
            if refused is not None:
                raise _Refused(f"refused ({refused.rule}): {refused.message}; nothing deleted")
            if not args.yes:
                if not sys.stdin.isatty():
                    raise _Refused(f"refusing without --yes (stdin is not a terminal): {model.id} on {name}")
                # the very path: quoted, escapes and all, when its plain form could read as another
                shown = exact(model.path) if model.id == model.path else f"{literal(model.id)} ({exact(model.path)})"
                question = f"Delete {shown} on {name}, {model.kind}, {units.size(model.size_bytes)}?"
                if not await asyncio.to_thread(ask, question):
                    print("gpuops: not deleted", file=sys.stderr)
                    return 2
            try:
                done = await ops.delete_model(name, model, confirmed=True)
            except Refused as exc:
                raise _Refused(str(exc)) from None
            if as_json:
                print(json.dumps({"schema": SCHEMA, **done.to_json()}, indent=2))
            else:
                print(f"deleted {literal(model.id)} on {name} ({exact(model.path)}), freed "
                      f"{units.size(done.freed_bytes)}")
            return 0
        except HostError as exc:
            print(f"gpuops: {literal(exc.message)}" + (f"\nhint: {literal(exc.hint)}" if exc.hint else ""),
                  file=sys.stderr)
            return 1
        finally:
            await ops.close()

    return asyncio.run(work())


# ------------------------------------------------------------------ standalone (tests, before wiring)


def main(argv: Sequence[str] | None = None) -> int:
    """``python -m gpuops.cli.models [--config F] [--readonly] [--host H] [--json] [rm MODEL --host H --yes]``:
    the verb on its own, as ``gpuops models`` runs it."""
    from ..core.config import ConfigError, load_inventory

    common = argparse.ArgumentParser(add_help=False)
    common.add_argument("--config", metavar="FILE", default=argparse.SUPPRESS)
    common.add_argument("--readonly", action="store_true", default=argparse.SUPPRESS)
    parser = argparse.ArgumentParser(prog="gpuops", parents=[common])
    sub = parser.add_subparsers(dest="verb", required=True)
    add_models_parser(sub, common)
    args = parser.parse_args(argv)
    try:
        inv = load_inventory(getattr(args, "config", None))
    except ConfigError as exc:
        print(f"gpuops: {exc}", file=sys.stderr)
        return 2
    try:
        return run_models(inv, args)
    except KeyboardInterrupt:
        return 130


if __name__ == "__main__":  # pragma: no cover
    sys.exit(main())
