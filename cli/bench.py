"""`gpuops bench`: run the engine's benchmark against a deployment (or a URL), and the stored runs'
list, show, compare, import and export — the command-line face of gpuops.core.bench."""

from __future__ import annotations

import argparse
import asyncio
import json
import sys
import time
from pathlib import Path

from ..core.config import Inventory
from ..core.domain import (BenchChecksEvent, BenchEvent, BenchProgressEvent, BenchQualityEvent, BenchResultEvent,
                           BenchStateEvent, BenchStepEvent)
from ..core.literal import literal, literal_lines
from .common import UsageError, markup_literal, minute

VERBS = ("list", "show", "compare", "import", "export")


class BenchUsageError(UsageError):
    """Bad input or a refusal before anything ran: one line, exit 2."""


def add_bench_parser(sub: argparse._SubParsersAction, common: argparse.ArgumentParser) -> None:
    p = sub.add_parser(
        "bench", parents=[common], help="run SGLang's benchmark against a deployment; list, show, compare, "
        "import, export runs",
        description="gpuops bench NAME|--url URL [--profile P] [--json]: run a profile (smoke, latency, throughput, "
                    "sweep, quality, or one of config.toml's [bench.profiles.NAME]) on the deployment's host. "
                    "gpuops bench list | show RUN | compare RUN RUN... | import FILE.jsonl | "
                    "export RUN... --format md|csv|json [-o F]: the stored runs (RUN: the store's integer id).")
    p.add_argument("target", metavar="NAME|VERB", nargs="?", help="a deployment, or one of: " + ", ".join(VERBS))
    p.add_argument("args", metavar="ARG", nargs="*", help="the verb's runs or file")
    p.add_argument("--url", metavar="URL", help="benchmark this server instead of a deployment")
    p.add_argument("--host", metavar="H", help="with --url: the host that runs the benchmark (default: the only one)")
    p.add_argument("--profile", metavar="P", default="smoke", help="default: smoke")
    p.add_argument("--format", metavar="F", help="export: md, csv or json")
    p.add_argument("-o", "--output", metavar="F", help="export: write to F instead of stdout")
    p.add_argument("--json", action="store_true", help="one JSON document (schema 1); a run: one object per event")


def run_bench(inv: Inventory, args: argparse.Namespace) -> int:
    verb = args.target if args.target in VERBS else None
    if verb is None:
        return _run(inv, args)
    from ..core.bench.runner import BenchInputError
    from ..core.ops import Ops

    store = Ops(inv).store  # the runs' verbs read and write the store alone (no host)
    try:
        return {"list": _list, "show": _show, "compare": _compare, "import": _import,
                "export": _export}[verb](store, args)
    except BenchInputError as exc:
        raise BenchUsageError(str(exc)) from None
    finally:
        store.close()


def _print_json(doc: dict) -> None:
    print(json.dumps(doc, indent=2, allow_nan=False))


def _runs(store, args: argparse.Namespace, least: int, most: int | None = None) -> list:
    what = args.args
    if not least <= len(what) <= (most if most is not None else len(what)):
        need = f"{least}" + ("" if most == least else " or more" if most is None else f" to {most}")
        raise BenchUsageError(f"bench {args.target} takes {need} RUN id(s), got {len(what)}")
    runs = []
    for word in what:
        if not word.isdigit() or int(word) < 1:
            raise BenchUsageError(f"RUN is a run id (a positive integer), got {word!r}")
        run = store.bench_run(int(word))
        if run is None:
            raise BenchUsageError(f"no benchmark run #{word} (gpuops bench list shows them)")
        runs.append(run)
    return runs


def _table(header: list[str], rows: list[list[str]]) -> None:
    from rich.table import Table

    from .common import console

    table = Table(box=None, header_style="bold", padding=(0, 1))
    for col in header:
        # a narrow terminal (80 columns) wraps a cell rather than cutting it to "/tmp/ex…"
        table.add_column(markup_literal(col), overflow="fold")
    for row in rows:
        table.add_row(*map(markup_literal, row))  # (names and figures from the store: no markup)
    console().print(table)


def _short_model(model: str | None) -> str:
    """A model for a list: a repo id as it is, a folder by its name (`bench show` has the path)."""
    if not model:
        return "-"
    return (model.rstrip("/").rsplit("/", 1)[-1] or model) if model.startswith("/") else model


def _list(store, args: argparse.Namespace) -> int:
    from ..core.bench.runner import engine_title, fmt, summary

    _runs(store, args, 0, 0)
    runs = store.bench_runs()
    if args.json:
        _print_json({"schema": 1, "runs": [{**r.to_json(full=False), "results": [summary(x) for x in r.records]}
                                          for r in runs]})
        return 0
    if not runs:
        print("no benchmark runs yet (gpuops bench NAME runs one)")
        return 0
    rows = []
    for r in runs:
        best = max((x.get("output_throughput") or 0 for x in r.records), default=None)
        rows.append([f"#{r.id}", r.status, r.profile, r.deployment or r.url or r.settings.get("file") or "-",
                     _short_model(r.model), r.engine_version or "-", minute(r.started_at or r.created_at),
                     fmt(best) if r.records else "-", fmt((r.quality or {}).get("score"))])
    # (the default engine's name heads the version column: every run so far is of it)
    _table(["RUN", "STATUS", "PROFILE", "TARGET", "MODEL", engine_title(None).upper(), "STARTED",
            "OUT TOK/S", "QUALITY"], rows)
    return 0


def _show(store, args: argparse.Namespace) -> int:
    from ..core.bench.runner import CHECK_WORDS, compare, compare_rows, describe_run

    (run,) = _runs(store, args, 1, 1)
    if args.json:
        _print_json({"schema": 1, "run": run.to_json()})
        return 0
    print(literal(describe_run(run)))
    if run.error:
        print(f"error: {literal(run.error)}")
    if run.records or run.quality:
        _table(*compare_rows(compare([run])))
    for c in run.checks or []:
        print(f"check {c.name}: {CHECK_WORDS[c.ok]}" + (f": {literal(c.reason)}" if c.reason else ""))
    return 0


def _compare(store, args: argparse.Namespace) -> int:
    from ..core.bench.runner import compare, compare_rows, describe_run

    runs = _runs(store, args, 2)
    doc = compare(runs)
    if args.json:
        _print_json(doc)
        return 0
    for run in runs:
        print(literal(describe_run(run)))
    print(f"deltas: against #{runs[0].id}'s record of the same concurrency")
    _table(*compare_rows(doc))
    if doc.get("note"):
        print(f"note: {doc['note']}")
    return 0


def _import(store, args: argparse.Namespace) -> int:
    from ..core.bench.runner import import_jsonl

    if len(args.args) != 1:
        raise BenchUsageError(f"bench import takes one FILE.jsonl, got {len(args.args)}")
    path = Path(args.args[0])
    try:
        text = path.read_text(encoding="utf-8")
    except (OSError, UnicodeDecodeError) as exc:
        raise BenchUsageError(f"{path}: cannot read it ({getattr(exc, 'strerror', None) or exc})") from None
    run = import_jsonl(store, text, path.name)
    if args.json:
        _print_json({"schema": 1, "run": run.to_json(full=False)})
    else:
        print(f"imported #{run.id}: {len(run.records)} record(s) from {path}")
    return 0


def _export(store, args: argparse.Namespace) -> int:
    from ..core.bench.runner import export

    if args.format not in ("md", "csv", "json"):
        raise BenchUsageError(f"bench export needs --format md, csv or json (got {args.format!r})")
    text = export(_runs(store, args, 1), args.format)
    if args.output:
        try:
            Path(args.output).write_text(text, encoding="utf-8")
        except OSError as exc:
            raise BenchUsageError(f"-o {args.output}: {exc.strerror or exc}") from None
    else:
        sys.stdout.write(text)
    return 0


# ------------------------------------------------------------------ a run


def _host_for(inv: Inventory, args: argparse.Namespace, name: str | None):
    if name is None:
        if len(inv.hosts) != 1:
            raise BenchUsageError(f"--url needs --host H: the host whose python runs the benchmark "
                                  f"(known: {', '.join(inv.names())})")
        return inv.hosts[0]
    try:
        return inv.host(name)
    except KeyError:
        raise BenchUsageError(f"unknown host {name!r} (known: {', '.join(inv.names())})") from None


def _run(inv: Inventory, args: argparse.Namespace) -> int:
    from ..core.bench.runner import BenchInputError, resolve_profile
    from .common import OperationFailed, run_use_case

    if args.args:
        raise BenchUsageError(f"unexpected argument(s): {' '.join(args.args)}")
    if args.target is None and args.url is None:
        raise BenchUsageError("bench needs a deployment NAME, --url URL, or one of: " + ", ".join(VERBS))
    if args.target is not None and args.url is not None:
        raise BenchUsageError("give a deployment NAME or --url, not both")
    if args.target is not None and args.host is not None:
        raise BenchUsageError("--host goes with --url (a deployment knows its host)")
    if getattr(args, "readonly", False):
        raise BenchUsageError("read-only: a benchmark loads a server and writes on its host")
    try:
        profile = resolve_profile(args.profile, inv.bench_profiles)
    except BenchInputError as exc:
        raise BenchUsageError(str(exc)) from None
    host = None if args.target is not None else _host_for(inv, args, args.host).name
    live = not args.json and sys.stdout.isatty()
    quiet = _Heartbeat()  # not a terminal: a line at least every HEARTBEAT_S while it runs

    def emit(event: BenchEvent) -> None:
        if args.json:
            print(json.dumps(event.to_json(), allow_nan=False), flush=True)
        elif live:
            _print_event(event, live)
        else:
            quiet.saw(event)
            if not isinstance(event, BenchProgressEvent):
                _print_event(event, live)
                quiet.printed()

    async def use(ops, _yes):
        target = await ops.bench_target(deployment=args.target, url=args.url, host_name=host)
        if live or args.json:
            return await ops.bench(target, profile, emit=emit)
        beat = asyncio.create_task(quiet.run())
        try:
            return await ops.bench(target, profile, emit=emit)
        finally:
            beat.cancel()

    try:
        run = run_use_case(inv, args, use)
    except BenchInputError as exc:
        raise BenchUsageError(str(exc)) from None
    except OperationFailed as exc:
        print(f"gpuops: {literal_lines(str(exc))}", file=sys.stderr)
        return 1
    except KeyboardInterrupt:
        print("gpuops: benchmark cancelled (stopped on the host)", file=sys.stderr)
        return 130
    return 0 if run.status == "ok" else 1


HEARTBEAT_S = 10.0


class _Heartbeat:
    """Output that is not a terminal gets no progress bar: a line of progress instead, whenever
    HEARTBEAT_S pass without one (a 1000-request run was silent for 97 s)."""

    def __init__(self) -> None:
        self.last = time.monotonic()
        self.started = self.last
        self.progress: tuple[int, int] | None = None

    def saw(self, event: BenchEvent) -> None:
        if isinstance(event, BenchProgressEvent):
            self.progress = (event.done, event.total)
        elif isinstance(event, BenchStepEvent):
            self.progress = None

    def printed(self) -> None:
        self.last = time.monotonic()

    async def run(self) -> None:
        while True:
            await asyncio.sleep(min(1.0, HEARTBEAT_S / 2))
            now = time.monotonic()
            if now - self.last >= HEARTBEAT_S:
                done = f"{self.progress[0]}/{self.progress[1]} requests" if self.progress else "no request done yet"
                print(f"  running {now - self.started:.0f} s: {done}", flush=True)
                self.last = now


def _print_event(event: BenchEvent, live: bool) -> None:
    from ..core.bench.runner import CHECK_WORDS, engine_title, fmt

    match event:
        case BenchStateEvent(state="running"):
            name = event.profile["name"] if isinstance(event.profile, dict) else "?"
            print(f"bench #{event.run}: {name} against {event.deployment or event.url} on {event.host} "
                  f"({engine_title(None)} {event.engine_version}, {event.module})", flush=True)
        case BenchStateEvent():
            if live:
                print()
            print(f"#{event.run}: {event.state}" + (f": {literal(event.error)}" if event.error else ""), flush=True)
        case BenchStepEvent():
            n = event.num_prompts or event.num_examples
            print(f"step {event.step + 1}/{event.steps}: concurrency {event.max_concurrency or 'unlimited'}, "
                  f"{n} requests", flush=True)
        case BenchProgressEvent() if live:
            print(f"\r  {event.done}/{event.total} requests, {event.elapsed_s:.1f} s", end="", flush=True)
        case BenchResultEvent(summary=s):
            if live:
                print()
            print(f"  {fmt(s['output_throughput'])} tok/s out, {fmt(s['request_throughput'])} req/s, TTFT median "
                  f"{fmt(s['median_ttft_ms'])} ms, ITL median {fmt(s['median_itl_ms'])} ms, "
                  f"{s['completed']} completed in {fmt(s['duration'])} s", flush=True)
        case BenchQualityEvent():
            if live:
                print()
            print(f"  {event.eval} score {fmt(event.score)} ({event.num_examples} examples)", flush=True)
        case BenchChecksEvent():
            for c in event.checks:
                print(f"  check {c['name']}: {CHECK_WORDS[c['ok']]}"
                      + (f": {literal(c['reason'])}" if c["reason"] else ""), flush=True)
