#!/usr/bin/env python3
"""Pull the exact startup/failure log strings that ``gpuops.core.engines.sglang.phases`` recognizes out of SGLang wheels.

This is how the phase parser's patterns and the fixtures in ``tests/data/logs/`` were checked::

    .venv/bin/python -m gpuops.core.engines.sglang.extract.log_lines       # 0.5.10 and 0.5.23
    .venv/bin/python -m gpuops.core.engines.sglang.extract.log_lines --versions 0.5.10 --wheel-dir /tmp/w
    .venv/bin/python -m gpuops.core.engines.sglang.extract.log_lines --offline --wheel-dir /tmp/w --json

For each version it runs ``pip download --no-deps sglang==V`` (a wheel already in the wheel dir
is reused), opens the wheel with zipfile and reads the sources statically with ``ast``: SGLang is
never installed or imported. It collects every message given to ``logger.<level>(...)``,
``log_info_on_rank0(logger, ...)``, ``tqdm(desc=...)``, ``.set_description(...)``, ``raise X(...)``
and the module constants ``BAR_FORMAT`` / ``msg = ...``, renders each as a template (f-string
fields become ``{expr:fmt}``), and prints, per needle below, where it is logged (file:line) and
the template. A needle that a version lacks is reported as ``(absent)`` (e.g. the 0.5.16+
``Init parallel begin.`` wording in 0.5.10). Exit status 1 when a needle marked ``required`` is
absent from every version asked for.
"""

from __future__ import annotations

import argparse
import ast
import json
import os
import re
import subprocess
import sys
import zipfile
from dataclasses import dataclass
from pathlib import Path

DEFAULT_WHEEL_DIR = Path(os.environ.get("XDG_CACHE_HOME") or Path.home() / ".cache") / "gpuops" / "sglang-wheels"
DEFAULT_VERSIONS = ["0.5.10", "0.5.23"]

# (name, regex on the rendered template, required in at least one version)
NEEDLES: list[tuple[str, str, bool]] = [
    ("server_args", r"^\{?server_args=", True),
    ("dist_begin_old", r"^Init torch distributed begin\.", False),
    ("dist_end_old", r"^Init torch distributed ends\.", False),
    ("dist_begin_new", r"^Init parallel begin\.", False),
    ("dist_end_new", r"^Init parallel ends\.", False),
    ("mem_baseline", r"^Memory baseline taken\.", False),
    ("nccl_version", r"^sglang is using nccl==", True),
    ("mem_unbalanced", r"^The memory capacity is unbalanced", True),
    ("load_begin", r"^Load weight begin\.", True),
    ("load_end", r"^Load weight end\.", True),
    ("bar_format", r"Completed \| \{n_fmt\}/\{total_fmt\}", True),
    ("shards_desc", r"(checkpoint shards|loading shards)$", True),
    ("kv_alloc", r"(KV Cache|cache_name\}) (is allocated|\{'VA upper bound')|KV cache allocated", True),
    ("mamba_alloc", r"^Mamba Cache is allocated\.", True),
    ("pool_end", r"^Memory pool end\.", True),
    ("not_enough_memory", r"^Not enough memory\.", True),
    ("graph_begin_end", r"^Capture .*(graph|\]\}) (begin|end)", True),
    ("graph_bs", r"^Capture cuda graph bs ", False),
    ("graph_tqdm", r"^Capturing (batches|num tokens|prefill shape)", True),
    ("graph_failed", r"^Capture cuda graph failed", True),
    ("max_total_num_tokens", r"^max_total_num_tokens=", True),
    ("ready", r"^The server is fired up and ready to roll!", True),
    ("hit_exception", r" hit an exception: ", True),
    ("init_failed", r"^Initialization failed\.", True),
    ("sigquit", r"^Received sigquit from a child process", True),
    ("scheduler_died", r"scheduler died during initialization", True),
    ("watchdog", r"watchdog timeout", True),
    ("nccl_error", r"^NCCL error: ", True),
    ("spec_radix_error", r"is not compatible with radix cache when using", True),
]

LOG_LEVELS = {"info", "warning", "error", "debug", "exception", "critical", "warn"}
RAISE_TYPES = re.compile(r"(Error|Exception)$")


@dataclass
class Found:
    path: str
    line: int
    kind: str
    template: str


def render(node: ast.AST) -> str | None:
    """A string-ish expression as a template; None when it is not a string expression."""
    if isinstance(node, ast.Constant) and isinstance(node.value, str):
        return node.value
    if isinstance(node, ast.JoinedStr):
        out = []
        for v in node.values:
            if isinstance(v, ast.Constant):
                out.append(str(v.value))
            elif isinstance(v, ast.FormattedValue):
                expr = ast.unparse(v.value)
                spec = ""
                if v.format_spec is not None:
                    spec = ":" + (render(v.format_spec) or "")
                conv = "" if v.conversion in (-1, None) else "!" + chr(v.conversion)
                out.append("{" + expr + conv + spec + "}")
        return "".join(out)
    if isinstance(node, ast.BinOp) and isinstance(node.op, ast.Add):
        left, right = render(node.left), render(node.right)
        if left is None and right is None:
            return None
        return (left if left is not None else "{" + ast.unparse(node.left) + "}") + (
            right if right is not None else "{" + ast.unparse(node.right) + "}"
        )
    if isinstance(node, ast.BinOp) and isinstance(node.op, ast.Mod):
        return render(node.left)
    return None


def _call_name(func: ast.AST) -> str:
    if isinstance(func, ast.Name):
        return func.id
    if isinstance(func, ast.Attribute):
        return func.attr
    return ""


def scan_source(path: str, source: str) -> list[Found]:
    try:
        tree = ast.parse(source)
    except SyntaxError:
        return []
    found: list[Found] = []

    def add(node: ast.AST, kind: str, expr: ast.AST | None) -> None:
        if expr is None:
            return
        t = render(expr)
        if t:
            found.append(Found(path, getattr(node, "lineno", 0), kind, t))

    for node in ast.walk(tree):
        if isinstance(node, ast.Call):
            name = _call_name(node.func)
            owner = ast.unparse(node.func.value) if isinstance(node.func, ast.Attribute) else ""
            if name in LOG_LEVELS and "log" in owner.lower() and node.args:
                add(node, "logger." + name, node.args[0])
            elif name == "log_info_on_rank0" and len(node.args) >= 2:
                add(node, "log_info_on_rank0", node.args[1])
            elif name == "set_description" and node.args:
                add(node, "tqdm.set_description", node.args[0])
            elif name == "tqdm":
                for kw in node.keywords:
                    if kw.arg == "desc":
                        add(node, "tqdm(desc=)", kw.value)
            elif RAISE_TYPES.search(name) and node.args:
                add(node, "raise " + name, node.args[0])
        elif isinstance(node, ast.Assign):
            for tgt in node.targets:
                if isinstance(tgt, ast.Name) and tgt.id in ("BAR_FORMAT", "_BAR_FORMAT", "msg"):
                    add(node, tgt.id + " =", node.value)
        elif isinstance(node, ast.AugAssign) and isinstance(node.target, ast.Name) and node.target.id == "msg":
            add(node, "msg +=", node.value)
    return found


def wheel_for(version: str, wheel_dir: Path, offline: bool) -> Path:
    wheel_dir.mkdir(parents=True, exist_ok=True)
    have = sorted(wheel_dir.glob(f"sglang-{version}-*.whl"))
    if have:
        return have[0]
    if offline:
        raise SystemExit(f"no wheel for sglang=={version} in {wheel_dir} (offline)")
    subprocess.run(
        [sys.executable, "-m", "pip", "download", "--no-deps", "--only-binary", ":all:",
         f"sglang=={version}", "-d", str(wheel_dir)],
        check=True,
    )
    have = sorted(wheel_dir.glob(f"sglang-{version}-*.whl"))
    if not have:
        raise SystemExit(f"pip did not leave a wheel for sglang=={version} in {wheel_dir}")
    return have[0]


def scan_wheel(wheel: Path) -> list[Found]:
    out: list[Found] = []
    with zipfile.ZipFile(wheel) as zf:
        for name in zf.namelist():
            if not name.endswith(".py") or not name.startswith("sglang/"):
                continue
            if "/multimodal_gen/" in name or "/test/" in name:
                continue
            src = zf.read(name).decode("utf-8", "replace")
            out.extend(scan_source(name[len("sglang/"):], src))
    return out


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--versions", default=",".join(DEFAULT_VERSIONS))
    ap.add_argument("--wheel-dir", type=Path, default=DEFAULT_WHEEL_DIR)
    ap.add_argument("--offline", action="store_true", help="never call pip; use the wheels in --wheel-dir")
    ap.add_argument("--json", action="store_true", help="print one JSON document instead of text")
    args = ap.parse_args(argv)
    versions = [v.strip() for v in args.versions.split(",") if v.strip()]

    compiled = [(n, re.compile(rx), req) for n, rx, req in NEEDLES]
    report: dict[str, dict[str, list[dict]]] = {n: {} for n, _, _ in NEEDLES}
    for v in versions:
        found = scan_wheel(wheel_for(v, args.wheel_dir, args.offline))
        for name, rx, _ in compiled:
            hits = [f for f in found if rx.search(f.template)]
            report[name][v] = [
                {"file": f.path, "line": f.line, "kind": f.kind, "template": f.template} for f in hits
            ]

    missing = [n for n, _, req in NEEDLES if req and not any(report[n][v] for v in versions)]
    if args.json:
        print(json.dumps({"versions": versions, "needles": report, "missing_required": missing}, indent=1))
    else:
        for name, _, _ in NEEDLES:
            print(f"== {name}")
            for v in versions:
                hits = report[name][v]
                if not hits:
                    print(f"  {v}: (absent)")
                for h in hits[:8]:
                    print(f"  {v}: {h['file']}:{h['line']} [{h['kind']}] {h['template']!r}")
                if len(hits) > 8:
                    print(f"  {v}: … {len(hits) - 8} more")
        if missing:
            print("required but absent everywhere: " + ", ".join(missing))
    return 1 if missing else 0


if __name__ == "__main__":
    sys.exit(main())
