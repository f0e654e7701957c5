#!/usr/bin/env python3
"""Read the routing policies each SGLang router accepts, from its wheel: ``--policy``'s choices and
default in the router's own argument parser (``PACKAGE/router_args.py``: ``add_argument(f"--{prefix}
policy", choices=…, default=RouterArgs.policy)``; the choices a list literal or a module-level list
it names, the default ``RouterArgs``' field).

This is how ``core/engines/sglang/data/sglang_routers.json`` (read by
``gpuops.core.engines.sglang.routers``) is made and refreshed::

    .venv/bin/python -m gpuops.core.engines.sglang.extract.routers            # the versions below, from PyPI
    .venv/bin/python -m gpuops.core.engines.sglang.extract.routers --wheel-dir /tmp/w --offline

Read statically (``ast``); nothing is installed or imported.
"""

from __future__ import annotations

import argparse
import ast
import datetime
import hashlib
import json
import sys
from pathlib import Path

from .flags import DEFAULT_WHEEL_DIR, download

DEFAULT_OUTPUT = Path(__file__).resolve().parent.parent / "data" / "sglang_routers.json"
# (package on PyPI, its import name, the version read): the routers core/engines/sglang/engine.py runs
ROUTERS = (("smg", "smg", "1.13.0"), ("sglang-router", "sglang_router", "0.3.2"))


def _flag_name(node: ast.AST) -> str | None:
    """``"--policy"`` for the literal parts of ``f"--{prefix}policy"`` (or a plain string)."""
    if isinstance(node, ast.Constant) and isinstance(node.value, str):
        return node.value
    if isinstance(node, ast.JoinedStr):
        return "".join(v.value for v in node.values if isinstance(v, ast.Constant) and isinstance(v.value, str))
    return None


def _strings(node: ast.AST | None, lists: dict[str, ast.AST]) -> list[str]:
    """The strings of a list literal, a name of a module-level list, or one that unpacks such lists."""
    if isinstance(node, ast.Name) and node.id in lists:
        return _strings(lists[node.id], lists)
    out: list[str] = []
    if isinstance(node, (ast.List, ast.Tuple)):
        for item in node.elts:
            if isinstance(item, ast.Constant) and isinstance(item.value, str):
                out.append(item.value)
            elif isinstance(item, ast.Starred):
                out += _strings(item.value, lists)
    return out


def read_policies(source: str) -> tuple[list[str], str | None]:
    """(--policy's choices, its default) in a router_args.py."""
    tree = ast.parse(source)
    lists = {t.id: node.value for node in tree.body if isinstance(node, ast.Assign)
             for t in node.targets if isinstance(t, ast.Name)}
    fields = {node.target.id: node.value for cls in tree.body if isinstance(cls, ast.ClassDef) and cls.name == "RouterArgs"
              for node in cls.body if isinstance(node, ast.AnnAssign) and isinstance(node.target, ast.Name)}
    for call in ast.walk(tree):
        if not (isinstance(call, ast.Call) and isinstance(call.func, ast.Attribute) and call.func.attr == "add_argument"
                and call.args and _flag_name(call.args[0]) == "--policy"):
            continue
        kw = {k.arg: k.value for k in call.keywords}
        default = kw.get("default")
        if isinstance(default, ast.Attribute) and default.attr in fields:
            default = fields[default.attr]
        value = default.value if isinstance(default, ast.Constant) and isinstance(default.value, str) else None
        return _strings(kw.get("choices"), lists), value
    raise ValueError("no --policy argument")


def build(wheel_dir: Path, offline: bool) -> dict:
    import zipfile

    routers = {}
    for package, module, version in ROUTERS:
        wheel = download(version, wheel_dir, offline, package=package)
        path = f"{module}/router_args.py"
        with zipfile.ZipFile(wheel) as z:
            source = z.read(path).decode()
        choices, default = read_policies(source)
        if not choices or default not in choices:
            raise SystemExit(f"{wheel.name}: --policy's choices {choices!r} and default {default!r} make no sense")
        routers[package] = {"version": version, "policies": choices, "default_policy": default,
                            "source": f"{wheel.name} {path}",
                            "sha256": hashlib.sha256(wheel.read_bytes()).hexdigest()}
    return {"about": "The routing policies (--policy) each SGLang router accepts and its default, read from its wheel "
                     "by gpuops.core.engines.sglang.extract.routers (rerun it to refresh).",
            "generated": datetime.date.today().isoformat(), "schema": 1, "routers": routers}


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--wheel-dir", type=Path, default=DEFAULT_WHEEL_DIR)
    ap.add_argument("--offline", action="store_true", help="use only the wheels already in --wheel-dir")
    ap.add_argument("--output", type=Path, default=DEFAULT_OUTPUT)
    args = ap.parse_args(argv)
    args.output.write_text(json.dumps(build(args.wheel_dir, args.offline), indent=1) + "\n")
    print(f"wrote {args.output}", file=sys.stderr)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
