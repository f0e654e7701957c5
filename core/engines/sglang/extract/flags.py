#!/usr/bin/env python3
"""Read SGLang's launch flags, parser names and a few defaults out of its wheels.

This is how ``core/engines/sglang/data/sglang_versions.json`` (read by ``gpuops.core.engines.sglang.versions``)
is made and refreshed (from the checkout, with its virtualenv)::

    .venv/bin/python -m gpuops.core.engines.sglang.extract.flags   # every release 0.5.9 .. newest
    .venv/bin/python -m gpuops.core.engines.sglang.extract.flags --versions 0.5.9,0.5.23 --wheel-dir /tmp/w
    .venv/bin/python -m gpuops.core.engines.sglang.extract.flags --offline --wheel-dir /tmp/w   # no network

For each version it runs ``pip download --no-deps sglang==V`` (a wheel already in the wheel
dir is reused), opens the wheel with zipfile (an sdist with tarfile) and reads the sources
statically with ``ast``. SGLang is never installed or imported. What it reads:

* every option string ``python -m sglang.launch_server`` accepts: the parser that
  ``sglang.launch_server`` builds through ``prepare_server_args`` -> ``ServerArgs.add_cli_args``,
  following helper functions that receive the parser, the ``add_argument(...)`` calls, and
  (0.5.14 on) the fields that ``add_cli_args_from_dataclass`` turns into arguments: annotated
  ``A[T, "help"]`` / ``A[T, Arg(...)]`` fields of ``ServerArgs``, its bases, and the namespace
  classes handed to ``collect_input_fields`` (0.5.20 on: ``srt/arg_groups/fields/``);
  per argument its option strings, whether it takes a value (nargs), its choices where they
  can be evaluated statically, and whether its help is suppressed;
* the choices of ``--tool-call-parser`` / ``--reasoning-parser`` (inline, or the
  ``TOOL_CALL_PARSER_NAMES`` / ``REASONING_PARSER_NAMES`` lists, or the keys of
  ``FunctionCallParser.ToolCallParserEnum`` / ``ReasoningParser.DetectorMap``);
* the default of ``SGLANG_ENABLE_SPEC_V2`` in ``srt/environ.py`` (null where the variable
  is gone) and whether the wheel warns that it was removed;
* which benchmark modules exist (``sglang.bench_serving``, ``sglang.benchmark.serving``).

The JSON stores the first version's arguments in full and, for each later version, the
arguments added (or changed) and removed. The summary printed at the end lists the flag
counts and the changes between versions.
"""

from __future__ import annotations

import argparse
import ast
import datetime
import hashlib
import json
import os
import re
import subprocess
import sys
import tarfile
import zipfile
from dataclasses import dataclass
from collections.abc import Iterator
from pathlib import Path

DEFAULT_OUTPUT = Path(__file__).resolve().parent.parent / "data" / "sglang_versions.json"  # the engine's data
DEFAULT_WHEEL_DIR = Path(os.environ.get("XDG_CACHE_HOME") or Path.home() / ".cache") / "gpuops" / "sglang-wheels"
DEFAULT_MIN_VERSION = "0.5.9"

SUPPRESS = "==SUPPRESS=="  # argparse.SUPPRESS

# Flags whose history the summary always prints (what gpuops' planner writes or reads).
WATCHED = [
    "--mamba-scheduler-strategy", "--mamba-radix-cache-strategy", "--speculative-algorithm",
    "--speculative-algo", "--speculative-num-steps", "--speculative-eagle-topk",
    "--speculative-num-draft-tokens", "--speculative-draft-model-path", "--tool-call-parser",
    "--reasoning-parser", "--enable-metrics", "--api-key", "--quantization", "--moe-runner-backend",
    "--fp4-gemm-backend", "--enable-flashinfer-allreduce-fusion", "--page-size",
    "--mem-fraction-static", "--context-length", "--tp-size", "--host", "--port",
    "--watchdog-timeout", "--model-loader-extra-config", "--disable-radix-cache",
]


# --------------------------------------------------------------------------- versions


def version_key(v: str) -> tuple[int, ...]:
    """Same ordering as gpuops.core.engines.sglang.versions.version_key (kept standalone on purpose)."""
    m = re.match(r"^v?(\d+(?:\.\d+)*)(?:[-_.]?(a|b|rc|dev)(\d*))?(?:[-_.]?post(\d*))?", v.strip())
    if not m:
        raise ValueError("not a version: %r" % v)
    rel = [int(x) for x in m.group(1).split(".")][:4]
    rel += [0] * (4 - len(rel))
    stage = {"dev": -4, "a": -3, "b": -2, "rc": -1}.get(m.group(2) or "", 0)
    n = int(m.group(3) or 0) if stage else (int(m.group(4) or 0) if m.group(4) is not None else 0)
    return (*rel, stage, n)


def pip_versions() -> list[str]:
    res = subprocess.run([sys.executable, "-m", "pip", "index", "versions", "sglang"],
                         capture_output=True, text=True, timeout=120)
    m = re.search(r"Available versions:\s*(.+)", res.stdout)
    if res.returncode != 0 or not m:
        raise SystemExit("pip index versions sglang failed:\n%s%s" % (res.stdout, res.stderr))
    return [v.strip() for v in m.group(1).split(",") if v.strip()]


def find_wheel(wheel_dir: Path, version: str, package: str = "sglang") -> Path | None:
    name = package.replace("-", "_")  # a wheel's file name spells the project's dashes as underscores
    for p in sorted(wheel_dir.glob("%s-%s-*.whl" % (name, version))) + \
            sorted(wheel_dir.glob("%s-%s.tar.gz" % (package, version))):
        return p
    return None


def download(version: str, wheel_dir: Path, offline: bool, package: str = "sglang") -> Path:
    """``pip download --no-deps PACKAGE==VERSION`` into `wheel_dir` (a wheel already there is reused)."""
    found = find_wheel(wheel_dir, version, package)
    if found or offline:
        if not found:
            raise SystemExit("no wheel for %s %s in %s (--offline)" % (package, version, wheel_dir))
        return found
    wheel_dir.mkdir(parents=True, exist_ok=True)
    res = subprocess.run([sys.executable, "-m", "pip", "download", "--no-deps", "--quiet",
                          "%s==%s" % (package, version), "-d", str(wheel_dir)],
                         capture_output=True, text=True, timeout=1800)
    found = find_wheel(wheel_dir, version, package)
    if res.returncode != 0 or not found:
        raise SystemExit("pip download %s==%s failed:\n%s%s" % (package, version, res.stdout, res.stderr))
    return found


def extractor_main(argv: list[str] | None, description: str, build, default_output: Path) -> int:
    """The command line the data extractors beside this one share: ``build(versions, wheel_dir,
    offline)`` (a JSON document) written to ``--output``; the versions by default those this
    extractor's data (``sglang_versions.json``) has."""
    ap = argparse.ArgumentParser(description=description)
    ap.add_argument("--versions", help="comma-separated sglang versions (default: those data/sglang_versions.json has)")
    ap.add_argument("--wheel-dir", type=Path, default=DEFAULT_WHEEL_DIR)
    ap.add_argument("--offline", action="store_true", help="use only the wheels already in --wheel-dir")
    ap.add_argument("--output", type=Path, default=default_output)
    args = ap.parse_args(argv)
    versions = (args.versions.split(",") if args.versions
                else sorted(json.loads(DEFAULT_OUTPUT.read_text())["versions"], key=version_key))
    doc = build(versions, args.wheel_dir, args.offline)
    args.output.write_text(json.dumps(doc, indent=1) + "\n")
    print(f"wrote {args.output}", file=sys.stderr)
    return 0


# --------------------------------------------------------------------------- archive and modules


class Archive:
    """The files of a wheel or an sdist, by path inside the installed package ("sglang/...")."""

    def __init__(self, path: Path):
        self.path = path
        self.files: dict[str, bytes] = {}
        if path.suffix == ".whl":
            with zipfile.ZipFile(path) as z:
                for name in z.namelist():
                    if name.startswith("sglang/") and name.endswith(".py"):
                        self.files[name] = z.read(name)
        else:
            with tarfile.open(path) as t:
                for m in t.getmembers():
                    parts = m.name.split("/")
                    # sglang-V/sglang/... or sglang-V/python/sglang/...
                    for i, part in enumerate(parts[:-1]):
                        if part == "sglang" and m.isfile() and m.name.endswith(".py"):
                            self.files["/".join(parts[i:])] = t.extractfile(m).read()
                            break

    def has_module(self, dotted: str) -> bool:
        return self.module_path(dotted) is not None

    def module_path(self, dotted: str) -> str | None:
        base = dotted.replace(".", "/")
        for cand in (base + ".py", base + "/__init__.py"):
            if cand in self.files:
                return cand
        return None


class Unresolved(Exception):
    pass


@dataclass
class ClassRef:
    module: "Module"
    node: ast.ClassDef


@dataclass
class FuncRef:
    module: "Module"
    node: ast.FunctionDef
    owner: ClassRef | None = None


@dataclass
class ModuleRef:
    module: "Module"


@dataclass
class EnumMember:
    """A member of a class iterated like an Enum: its name, and its value's expression."""
    name: str
    value: ast.AST
    cls: ClassRef


class Module:
    def __init__(self, extractor: "Extractor", name: str, source: str):
        self.x = extractor
        self.name = name
        self.tree = ast.parse(source)
        self.assigns: dict[str, list[ast.AST]] = {}
        self.mutations: dict[str, list[tuple[str, ast.AST]]] = {}
        self.imports: dict[str, tuple[str, str | None]] = {}
        self.classes: dict[str, ast.ClassDef] = {}
        self.functions: dict[str, ast.FunctionDef] = {}
        for node in self.tree.body:
            self._index(node)

    def _index(self, node: ast.AST) -> None:
        if isinstance(node, ast.If):  # TYPE_CHECKING / version blocks: index both arms
            for n in node.body + node.orelse:
                self._index(n)
        elif isinstance(node, ast.Try):
            for n in node.body:
                self._index(n)
        elif isinstance(node, ast.Assign):
            for t in node.targets:
                if isinstance(t, ast.Name):
                    self.assigns.setdefault(t.id, []).append(node.value)
        elif isinstance(node, ast.AnnAssign) and isinstance(node.target, ast.Name) and node.value is not None:
            self.assigns.setdefault(node.target.id, []).append(node.value)
        elif isinstance(node, ast.AugAssign) and isinstance(node.target, ast.Name):
            self.mutations.setdefault(node.target.id, []).append(("extend", node.value))
        elif isinstance(node, ast.Expr) and isinstance(node.value, ast.Call):
            f = node.value.func
            if isinstance(f, ast.Attribute) and isinstance(f.value, ast.Name) and f.attr in ("extend", "append") \
                    and node.value.args:
                self.mutations.setdefault(f.value.id, []).append((f.attr, node.value.args[0]))
        elif isinstance(node, ast.ImportFrom):
            mod = self.resolve_relative(node)
            for a in node.names:
                self.imports[a.asname or a.name] = (mod, a.name)
        elif isinstance(node, ast.Import):
            for a in node.names:
                if a.asname:
                    self.imports[a.asname] = (a.name, None)
                else:
                    self.imports[a.name.split(".")[0]] = (a.name.split(".")[0], None)
        elif isinstance(node, ast.ClassDef):
            self.classes[node.name] = node
        elif isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef)):
            self.functions[node.name] = node

    def resolve_relative(self, node: ast.ImportFrom) -> str:
        if not node.level:
            return node.module or ""
        pkg = self.name.split(".")
        is_pkg = self.x.archive.module_path(self.name) or ""
        if not is_pkg.endswith("__init__.py"):
            pkg = pkg[:-1]
        pkg = pkg[: len(pkg) - (node.level - 1)] if node.level > 1 else pkg
        return ".".join(pkg + ([node.module] if node.module else []))


# --------------------------------------------------------------------------- static evaluation


_ITER_BUILTINS = {"list", "tuple", "sorted", "set", "frozenset"}


class Scope:
    """Names bound in a function body: simple assignments and function-level imports."""

    def __init__(self, module: Module, func: ast.FunctionDef | None = None, parent: "Scope | None" = None,
                 cls: ast.ClassDef | None = None, values: dict | None = None):
        self.module = module
        self.parent = parent
        self.names: dict[str, list] = {k: [("value", v)] for k, v in (values or {}).items()}
        if cls is not None:
            for node in cls.body:
                if isinstance(node, ast.Assign):
                    for t in node.targets:
                        if isinstance(t, ast.Name):
                            self.names.setdefault(t.id, []).append(("expr", node.value))
                elif isinstance(node, ast.AnnAssign) and isinstance(node.target, ast.Name) and node.value is not None:
                    self.names.setdefault(node.target.id, []).append(("expr", node.value))
        if func is not None:
            for node in ast.walk(func):
                if isinstance(node, ast.Assign):
                    for t in node.targets:
                        if isinstance(t, ast.Name):
                            self.names.setdefault(t.id, []).append(("expr", node.value))
                elif isinstance(node, ast.ImportFrom):
                    mod = module.resolve_relative(node)
                    for a in node.names:
                        self.names.setdefault(a.asname or a.name, []).append(("import", (mod, a.name)))


class Extractor:
    def __init__(self, archive: Archive):
        self.archive = archive
        self.modules: dict[str, Module | None] = {}
        self.notes: list[str] = []
        self._active: set = set()

    def note(self, text: str) -> None:
        if text not in self.notes:
            self.notes.append(text)

    def module(self, dotted: str) -> Module | None:
        if dotted not in self.modules:
            path = self.archive.module_path(dotted)
            self.modules[dotted] = Module(self, dotted, self.archive.files[path].decode("utf-8")) if path else None
        return self.modules[dotted]

    # -- names

    def lookup(self, name: str, module: Module, scope: Scope | None = None):
        while scope is not None:
            for kind, what in reversed(scope.names.get(name, [])):
                try:
                    if kind == "value":
                        return what
                    if kind == "expr":
                        return self.ev(what, module, scope)
                    return self.import_value(*what)
                except Unresolved:
                    continue
            scope = scope.parent
        if name in module.assigns:
            key = ("name", module.name, name)
            if key in self._active:
                raise Unresolved(name)
            self._active.add(key)
            try:
                value = self.ev(module.assigns[name][-1], module)
                for how, node in module.mutations.get(name, []):
                    extra = self.ev(node, module)
                    if isinstance(value, list):
                        value = value + (list(extra) if how == "extend" else [extra])
                return value
            except Unresolved:
                # e.g. `ServerArgs = msgspec.defstruct(...)` rebinding a class: use the class
                if name not in module.classes and name not in module.functions and name not in module.imports:
                    raise
            finally:
                self._active.discard(key)
        if name in module.classes:
            return ClassRef(module, module.classes[name])
        if name in module.functions:
            return FuncRef(module, module.functions[name])
        if name in module.imports:
            return self.import_value(*module.imports[name])
        if name in ("True", "False", "None"):
            return {"True": True, "False": False, "None": None}[name]
        raise Unresolved(name)

    def import_value(self, mod: str, name: str | None):
        if name is None:
            m = self.module(mod)
            if m is None:
                raise Unresolved(mod)
            return ModuleRef(m)
        if mod == "argparse" and name == "SUPPRESS":
            return SUPPRESS
        m = self.module(mod)
        if m is None:
            sub = self.module(mod + "." + name)
            if sub is not None:
                return ModuleRef(sub)
            raise Unresolved("%s.%s" % (mod, name))
        try:
            return self.lookup(name, m)
        except Unresolved:
            sub = self.module(mod + "." + name)
            if sub is not None:
                return ModuleRef(sub)
            raise

    def class_attr(self, ref: ClassRef, attr: str):
        body = Scope(ref.module, cls=ref.node)
        for node in ref.node.body:
            if isinstance(node, ast.Assign) and any(isinstance(t, ast.Name) and t.id == attr for t in node.targets):
                return self.ev(node.value, ref.module, body)
            if isinstance(node, ast.AnnAssign) and isinstance(node.target, ast.Name) and node.target.id == attr \
                    and node.value is not None:
                return self.ev(node.value, ref.module, body)
            if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef)) and node.name == attr:
                return FuncRef(ref.module, node, ref)
        for b in self.bases(ref):
            try:
                return self.class_attr(b, attr)
            except Unresolved:
                pass
        raise Unresolved("%s.%s" % (ref.node.name, attr))

    def bases(self, ref: ClassRef) -> Iterator[ClassRef]:
        """`ref`'s bases that are classes of the wheel, in their order."""
        for base in ref.node.bases:
            try:
                b = self.ev(base, ref.module)
            except Unresolved:
                continue
            if isinstance(b, ClassRef):
                yield b

    # -- expressions

    def ev(self, node: ast.AST, module: Module, scope: Scope | None = None):
        if isinstance(node, ast.Constant):
            return node.value
        if isinstance(node, (ast.List, ast.Tuple, ast.Set)):
            out = []
            for e in node.elts:
                if isinstance(e, ast.Starred):
                    out.extend(self.iterate(self.ev(e.value, module, scope)))
                else:
                    out.append(self.ev(e, module, scope))
            return out
        if isinstance(node, ast.Dict):
            out = {}
            for k, v in zip(node.keys, node.values):
                if k is None:
                    inner = self.ev(v, module, scope)
                    if not isinstance(inner, dict):
                        raise Unresolved("** of a non-dict")
                    out.update(inner)
                else:
                    out[self.ev(k, module, scope)] = None  # only the keys are wanted
            return out
        if isinstance(node, ast.Name):
            return self.lookup(node.id, module, scope)
        if isinstance(node, ast.Attribute):
            if isinstance(node.value, ast.Name) and node.value.id == "argparse" and node.attr == "SUPPRESS":
                return SUPPRESS
            base = self.ev(node.value, module, scope)
            if isinstance(base, ClassRef):
                return self.class_attr(base, node.attr)
            if isinstance(base, ModuleRef):
                return self.lookup(node.attr, base.module)
            if isinstance(base, EnumMember):
                if node.attr == "name":
                    return base.name
                if node.attr == "value":
                    return self.ev(base.value, base.cls.module, Scope(base.cls.module, cls=base.cls.node))
            raise Unresolved(ast.unparse(node))
        if isinstance(node, ast.BinOp) and isinstance(node.op, (ast.Add, ast.BitOr)):
            left, right = self.ev(node.left, module, scope), self.ev(node.right, module, scope)
            if isinstance(left, dict) and isinstance(right, dict):
                return {**left, **right}
            if isinstance(left, (list, tuple)) and isinstance(right, (list, tuple)):
                return list(left) + list(right)
            if isinstance(left, str) and isinstance(right, str):
                return left + right
            raise Unresolved(ast.unparse(node))
        if isinstance(node, ast.JoinedStr):
            raise Unresolved("f-string")
        if isinstance(node, ast.ListComp) and len(node.generators) == 1 and not node.generators[0].ifs \
                and isinstance(node.generators[0].target, ast.Name):
            gen = node.generators[0]
            out = []
            for item in self.iterate(self.ev(gen.iter, module, scope)):
                inner = Scope(module, parent=scope, values={gen.target.id: item})
                out.append(self.ev(node.elt, module, inner))
            return out
        if isinstance(node, ast.Call):
            f = node.func
            if isinstance(f, ast.Name) and f.id in _ITER_BUILTINS and len(node.args) == 1 and not node.keywords:
                items = self.iterate(self.ev(node.args[0], module, scope))
                if f.id == "sorted":
                    return sorted(items)
                if f.id in ("set", "frozenset"):
                    return list(dict.fromkeys(items))
                return items
            if isinstance(f, ast.Attribute) and f.attr in ("lower", "upper", "strip") and not node.args:
                base = self.ev(f.value, module, scope)
                if isinstance(base, str):
                    return getattr(base, f.attr)()
                raise Unresolved(ast.unparse(node))
            if isinstance(f, ast.Attribute) and f.attr == "keys" and not node.args:
                base = self.ev(f.value, module, scope)
                if isinstance(base, dict):
                    return list(base)
                raise Unresolved(ast.unparse(node))
            if not node.args and not node.keywords:
                target = self.ev(f, module, scope)
                if isinstance(target, FuncRef):
                    return self.call_returns(target)
            raise Unresolved(ast.unparse(node))
        raise Unresolved(ast.unparse(node))

    def iterate(self, value) -> list:
        if isinstance(value, ClassRef):  # an Enum: its members in order
            members = []
            for node in value.node.body:
                if isinstance(node, ast.Assign) and len(node.targets) == 1 and isinstance(node.targets[0], ast.Name) \
                        and not node.targets[0].id.startswith("_"):
                    members.append(EnumMember(node.targets[0].id, node.value, value))
            if not members:
                raise Unresolved("class %s has no members" % value.node.name)
            return members
        if isinstance(value, dict):
            return list(value)
        if isinstance(value, (list, tuple)):
            return list(value)
        raise Unresolved("not iterable")

    def call_returns(self, ref: FuncRef):
        """The value of a no-argument function: its first return statement that evaluates."""
        key = ("call", ref.module.name, ref.node.name, ref.node.lineno)
        if key in self._active:
            raise Unresolved("recursion")
        self._active.add(key)
        try:
            scope = Scope(ref.module, ref.node)
            for node in ast.walk(ref.node):
                if isinstance(node, ast.Return) and node.value is not None:
                    try:
                        return self.ev(node.value, ref.module, scope)
                    except Unresolved:
                        continue
            raise Unresolved("no return of %s evaluates" % ref.node.name)
        finally:
            self._active.discard(key)


# --------------------------------------------------------------------------- arguments


@dataclass
class ArgSpec:
    opts: list[str]
    nargs: object = None  # None: one value; 0: none (flags); "?", "*", "+", or an int
    choices: list | None = None
    hidden: bool = False
    deprecated: object = None  # None; True; or the option that replaces it
    required: bool = False
    source: str = ""

    def to_json(self) -> dict:
        d: dict = {}
        if len(self.opts) > 1:
            d["opts"] = self.opts
        if self.nargs is not None:
            d["nargs"] = self.nargs
        if self.choices is not None:
            d["choices"] = self.choices
        if self.hidden:
            d["hidden"] = True
        if self.deprecated:
            d["deprecated"] = self.deprecated
        if self.required:
            d["required"] = True
        return d


_UNRESOLVED = object()


def _help_text(node: ast.AST | None) -> str:
    """The help's text, f-string holes dropped: enough to spot a deprecation notice."""
    if node is None:
        return ""
    parts = []
    for n in ast.walk(node):
        if isinstance(n, ast.Constant) and isinstance(n.value, str):
            parts.append(n.value)
    return "".join(parts)


def deprecation(help_node: ast.AST | None, action_node: ast.AST | None, new_flag: object) -> object:
    """None, or the replacement option (True when the notice names none)."""
    text = _help_text(help_node)
    head = text.strip().lower()[:40]
    action = ast.unparse(action_node) if action_node is not None else ""
    if not ("Deprecated" in action or "deprecated" in head):
        return None
    if isinstance(new_flag, str) and new_flag.startswith("--"):
        return new_flag
    m = re.search(r"[Uu]se (--[A-Za-z0-9][\w-]*(?:=[\w{},-]+)?)", text)
    return m.group(1) if m else True

_NARGS0_ACTIONS = {"store_true", "store_false", "store_const", "count", "help", "version",
                   "append_const"}


class ArgCollector:
    def __init__(self, x: Extractor):
        self.x = x
        self.args: dict[str, ArgSpec] = {}
        self.order: list[str] = []
        self.prog: str | None = None
        self.allow_abbrev = True
        self.visited: set = set()

    def add(self, spec: ArgSpec) -> None:
        for o in spec.opts:
            if o in self.args:
                # argparse would raise on a conflict; the later one wins here and we say so
                self.x.note("option %s registered twice (%s, %s)" % (o, self.args[o].source, spec.source))
        key = spec.opts[0]
        if key not in self.args:
            self.order.append(key)
        self.args[key] = spec

    # -- the entry point

    def collect(self) -> None:
        launch = self.x.module("sglang.launch_server")
        target = None
        if launch is not None and "prepare_server_args" in launch.imports:
            try:
                target = self.x.import_value(*launch.imports["prepare_server_args"])
            except Unresolved:
                target = None
        if not isinstance(target, FuncRef):
            sa = self.x.module("sglang.srt.server_args")
            if sa is None:
                raise SystemExit("no sglang/srt/server_args.py in %s" % self.x.archive.path)
            target = FuncRef(sa, sa.functions["prepare_server_args"])
        self.walk_function(target)

    def walk_function(self, ref: FuncRef) -> None:
        key = (ref.module.name, ref.node.name, ref.node.lineno)
        if key in self.visited:
            return
        self.visited.add(key)
        scope = Scope(ref.module, ref.node)
        for node in self.calls_in_order(ref.node):
            self.visit_call(node, ref, scope)

    @staticmethod
    def calls_in_order(func: ast.AST) -> list[ast.Call]:
        calls = [n for n in ast.walk(func) if isinstance(n, ast.Call)]
        return sorted(calls, key=lambda n: (n.lineno, n.col_offset))

    def visit_call(self, node: ast.Call, ref: FuncRef, scope: Scope) -> None:
        f = node.func
        name = f.attr if isinstance(f, ast.Attribute) else f.id if isinstance(f, ast.Name) else None
        if name == "ArgumentParser":
            for kw in node.keywords:
                if kw.arg == "allow_abbrev":
                    try:
                        self.allow_abbrev = bool(self.x.ev(kw.value, ref.module, scope))
                    except Unresolved:
                        self.x.note("ArgumentParser(allow_abbrev=...) not static")
                if kw.arg == "prog":
                    try:
                        self.prog = self.x.ev(kw.value, ref.module, scope)
                    except Unresolved:
                        self.x.note("ArgumentParser(prog=...) not static")
            return
        if name == "add_argument":
            self.add_argument(node, ref, scope)
            return
        if name == "add_cli_args_from_dataclass":
            self.from_dataclass(node, ref, scope)
            return
        if name in ("add_argument_group", "add_mutually_exclusive_group", "parse_args", "parse_known_args"):
            return
        # A helper that receives the parser: follow it.
        passes_parser = any(isinstance(a, ast.Name) and a.id in ("parser", "group", "p") for a in node.args) or any(
            isinstance(k.value, ast.Name) and k.value.id == "parser" for k in node.keywords)
        if not passes_parser:
            return
        try:
            target = self.resolve_callable(f, ref, scope)
        except Unresolved as e:
            self.x.note("not followed: %s (%s) in %s" % (ast.unparse(node)[:80], e, ref.node.name))
            return
        if isinstance(target, FuncRef):
            self.walk_function(target)

    def resolve_callable(self, f: ast.AST, ref: FuncRef, scope: Scope):
        if isinstance(f, ast.Attribute) and isinstance(f.value, ast.Name) and f.value.id in ("cls", "self") \
                and ref.owner is not None:
            return self.x.class_attr(ref.owner, f.attr)
        return self.x.ev(f, ref.module, scope)

    def add_argument(self, node: ast.Call, ref: FuncRef, scope: Scope) -> None:
        where = "%s:%d" % (ref.module.name, node.lineno)
        opts = []
        for a in node.args:
            try:
                value = self.x.ev(a, ref.module, scope)
            except Unresolved as e:
                self.x.note("add_argument with a non-static name at %s: %s (%s)" % (where, ast.unparse(a), e))
                return
            opts.extend(value if isinstance(value, list) else [value])
        opts = [o for o in opts if isinstance(o, str)]
        if not opts or not all(o.startswith("-") for o in opts):
            self.x.note("positional or odd argument at %s: %r" % (where, opts))
            return
        kw = {k.arg: k.value for k in node.keywords if k.arg}
        spec = ArgSpec(opts=opts, source=where)
        spec.nargs = self.nargs_of(kw, ref.module, scope, where)
        if "choices" in kw:
            spec.choices = self.choices_of(kw["choices"], ref.module, scope, opts[0], where)
        if "help" in kw:
            try:
                spec.hidden = self.x.ev(kw["help"], ref.module, scope) == SUPPRESS
            except Unresolved:
                pass
        new_flag = None
        if "new_flag" in kw:
            try:
                new_flag = self.x.ev(kw["new_flag"], ref.module, scope)
            except Unresolved:
                pass
        spec.deprecated = deprecation(kw.get("help"), kw.get("action"), new_flag)
        if "required" in kw:
            try:
                spec.required = self.x.ev(kw["required"], ref.module, scope) is True
            except Unresolved:
                pass
        self.add(spec)

    def choices_of(self, node: ast.AST, module: Module, scope: Scope | None, flag: str, where: str):
        try:
            values = self.x.ev(node, module, scope)
            values = self.x.iterate(values)
        except Unresolved as e:
            self.x.note("choices of %s not static at %s (%s)" % (flag, where, e))
            return None
        if not all(isinstance(v, (str, int, float)) for v in values):
            self.x.note("choices of %s are not plain values at %s" % (flag, where))
            return None
        return [str(v) if not isinstance(v, str) else v for v in values]

    def nargs_of(self, kw: dict, module: Module, scope: Scope | None, where: str):
        if "nargs" in kw:
            try:
                return self.x.ev(kw["nargs"], module, scope)
            except Unresolved:
                self.x.note("nargs not static at %s" % where)
                return "?"
        if "action" not in kw:
            return None
        action = kw["action"]
        if isinstance(action, ast.Constant):
            return 0 if action.value in _NARGS0_ACTIONS else None
        if isinstance(action, ast.Attribute) and action.attr == "BooleanOptionalAction":
            return 0
        try:
            cls = self.x.ev(action, module, scope)
        except Unresolved:
            self.x.note("action %s not found at %s" % (ast.unparse(action), where))
            return None
        if isinstance(cls, ClassRef):
            return self.action_default_nargs(cls)
        return None

    def action_default_nargs(self, cls: ClassRef):
        """nargs an argparse.Action subclass passes on by default (its __init__'s nargs=...)."""
        for node in cls.node.body:
            if isinstance(node, ast.FunctionDef) and node.name == "__init__":
                args = node.args
                pos = args.posonlyargs + args.args
                for a, d in zip(pos[len(pos) - len(args.defaults):], args.defaults):
                    if a.arg == "nargs":
                        return self.x.ev(d, cls.module)
                for a, d in zip(args.kwonlyargs, args.kw_defaults):
                    if a.arg == "nargs" and d is not None:
                        return self.x.ev(d, cls.module)
                for n in ast.walk(node):
                    if isinstance(n, ast.Call) and isinstance(n.func, ast.Attribute) and n.func.attr == "__init__":
                        for k in n.keywords:
                            if k.arg == "nargs":
                                try:
                                    return self.x.ev(k.value, cls.module)
                                except Unresolved:
                                    return None
                return None
        for base in cls.node.bases:
            try:
                b = self.x.ev(base, cls.module)
            except Unresolved:
                if isinstance(base, ast.Attribute) and base.attr in ("_StoreTrueAction", "_StoreConstAction"):
                    return 0
                continue
            if isinstance(b, ClassRef):
                return self.action_default_nargs(b)
        return None

    # -- dataclass / namespace fields (0.5.14 on)

    def from_dataclass(self, node: ast.Call, ref: FuncRef, scope: Scope) -> None:
        if len(node.args) < 2:
            self.x.note("add_cli_args_from_dataclass without a class at %s" % ref.node.name)
            return
        only = None
        for k in node.keywords:
            if k.arg == "fields":
                try:
                    only = set(self.x.ev(k.value, ref.module, scope))
                except Unresolved:
                    self.x.note("add_cli_args_from_dataclass(fields=...) not static")
        cls_node = node.args[1]
        if isinstance(cls_node, ast.Name) and cls_node.id == "cls" and ref.owner is not None:
            cls = ref.owner
        else:
            cls = self.x.ev(cls_node, ref.module, scope)
        if not isinstance(cls, ClassRef):
            self.x.note("add_cli_args_from_dataclass: class not found")
            return
        for fname, ann, module, has_default in self.record_fields(cls):
            if only is not None and fname not in only:
                continue
            self.field_argument(fname, ann, module, has_default)

    def record_fields(self, cls: ClassRef, seen=None) -> list[tuple[str, ast.AST, Module, bool]]:
        """(name, annotation, module, has a default) for each field, bases first, then the class, then the
        namespace classes given to collect_input_fields in the class's module."""
        seen = seen if seen is not None else set()
        key = (cls.module.name, cls.node.name)
        if key in seen:
            return []
        seen.add(key)
        out: list[tuple[str, ast.AST, Module, bool]] = []
        for base in cls.node.bases:
            try:
                b = self.x.ev(base, cls.module)
            except Unresolved:
                continue
            if isinstance(b, ClassRef):
                out.extend(self.record_fields(b, seen))
        for node in cls.node.body:
            if isinstance(node, ast.AnnAssign) and isinstance(node.target, ast.Name):
                out.append((node.target.id, node.annotation, cls.module, node.value is not None))
        # msgspec-era ServerArgs: fields collected from namespace classes at module level.
        for node in ast.walk(cls.module.tree):
            if isinstance(node, ast.Call) and isinstance(node.func, ast.Name) and node.func.id == "collect_input_fields" \
                    and node.args and cls.node in cls.module.tree.body:
                try:
                    sources = self.x.ev(node.args[0], cls.module)
                except Unresolved as e:
                    self.x.note("collect_input_fields sources not static (%s)" % e)
                    continue
                for src in sources:
                    if isinstance(src, ClassRef) and src.node is not cls.node:
                        out.extend(self.record_fields(src, seen))
        dedup: dict[str, tuple[str, ast.AST, Module, bool]] = {}
        for item in out:
            dedup[item[0]] = item
        return list(dedup.values())

    def field_argument(self, fname: str, ann: ast.AST, module: Module, has_default: bool = True) -> None:
        where = "%s field %s" % (module.name, fname)
        if not (isinstance(ann, ast.Subscript) and self.is_annotated(ann.value)):
            return
        elts = ann.slice.elts if isinstance(ann.slice, ast.Tuple) else [ann.slice]
        inner, meta = elts[0], None
        for m in elts[1:]:
            if isinstance(m, ast.Constant) and isinstance(m.value, str):
                meta = {"help": m}
                break
            if isinstance(m, ast.Call) and self.callee_name(m.func) == "Arg":
                meta = {k.arg: k.value for k in m.keywords if k.arg}
                break
            if isinstance(m, ast.Name):
                try:
                    v = module.assigns.get(m.id, [None])[-1]
                except IndexError:
                    v = None
                if isinstance(v, ast.Call) and self.callee_name(v.func) == "Arg":
                    meta = {k.arg: k.value for k in v.keywords if k.arg}
                    break
        if meta is None:
            return

        def value(key, default=None):
            if key not in meta:
                return default
            try:
                return self.x.ev(meta[key], module)
            except Unresolved as e:
                self.x.note("Arg(%s=...) not static for %s (%s)" % (key, where, e))
                return default

        if value("no_cli", False):
            return
        cli_name = value("cli_name") or "--" + fname.replace("_", "-")
        opts = [cli_name] + list(value("aliases") or [])
        spec = ArgSpec(opts=opts, source=where)
        try:
            spec.hidden = "help" in meta and self.x.ev(meta["help"], module) == SUPPRESS
        except Unresolved:
            spec.hidden = False
        new_flag = None
        if isinstance(meta.get("action_kwargs"), ast.Dict):
            for k, v in zip(meta["action_kwargs"].keys, meta["action_kwargs"].values):
                if isinstance(k, ast.Constant) and k.value == "new_flag":
                    try:
                        new_flag = self.x.ev(v, module)
                    except Unresolved:
                        pass
        spec.deprecated = deprecation(meta.get("help"), meta.get("action"), new_flag)
        choices_node = meta.get("choices")
        if "action" in meta:
            # add_cli_args_from_dataclass passes action, help, dest, default and action_kwargs
            akw = {"action": meta["action"]}
            if isinstance(meta.get("action_kwargs"), ast.Dict):
                for k, v in zip(meta["action_kwargs"].keys, meta["action_kwargs"].values):
                    if isinstance(k, ast.Constant) and k.value in ("nargs", "choices"):
                        akw[k.value] = v
            spec.nargs = self.nargs_of(akw, module, None, where)
            if "choices" in akw:
                spec.choices = self.choices_of(akw["choices"], module, None, cli_name, where)
            self.add(spec)
            return
        typ, _optional = self.unwrap_optional(inner)
        literal = self.literal_values(typ, module)
        if literal is not None:
            if choices_node is not None:
                spec.choices = self.choices_of(choices_node, module, None, cli_name, where)
            elif literal is not _UNRESOLVED:
                spec.choices = [str(v) if not isinstance(v, str) else v for v in literal]
            self.add(spec)
            return
        if self.is_list(typ) and "type_parser" not in meta:
            spec.nargs = value("nargs") or "+"
            if choices_node is not None:
                spec.choices = self.choices_of(choices_node, module, None, cli_name, where)
            self.add(spec)
            return
        if isinstance(typ, ast.Name) and typ.id == "bool" or isinstance(typ, ast.Constant) and typ.value == "bool":
            spec.nargs = 0
            self.add(spec)
            return
        if choices_node is not None:
            spec.choices = self.choices_of(choices_node, module, None, cli_name, where)
        if "nargs" in meta:
            spec.nargs = value("nargs")
        required = value("required")
        spec.required = required is True or (required is None and not has_default)
        self.add(spec)

    @staticmethod
    def callee_name(f: ast.AST) -> str | None:
        return f.attr if isinstance(f, ast.Attribute) else f.id if isinstance(f, ast.Name) else None

    @staticmethod
    def is_annotated(node: ast.AST) -> bool:
        return (isinstance(node, ast.Name) and node.id in ("A", "Annotated")) or (
            isinstance(node, ast.Attribute) and node.attr == "Annotated")

    @staticmethod
    def unwrap_optional(node: ast.AST):
        if isinstance(node, ast.Constant) and isinstance(node.value, str):  # "Optional[int]" as a string
            try:
                node = ast.parse(node.value, mode="eval").body
            except SyntaxError:
                return node, False
        if isinstance(node, ast.Subscript) and ArgCollector.callee_name(node.value) == "Optional":
            return node.slice, True
        if isinstance(node, ast.Subscript) and ArgCollector.callee_name(node.value) == "Union":
            elts = node.slice.elts if isinstance(node.slice, ast.Tuple) else [node.slice]
            rest = [e for e in elts if not (isinstance(e, ast.Constant) and e.value is None)]
            if len(rest) == 1 and len(elts) == 2:
                return rest[0], True
        if isinstance(node, ast.BinOp) and isinstance(node.op, ast.BitOr):
            parts = []

            def flat(n):
                if isinstance(n, ast.BinOp) and isinstance(n.op, ast.BitOr):
                    flat(n.left)
                    flat(n.right)
                else:
                    parts.append(n)

            flat(node)
            rest = [p for p in parts if not (isinstance(p, ast.Constant) and p.value is None)]
            if len(rest) == 1 and len(parts) == 2:
                return rest[0], True
        return node, False

    def literal_values(self, node: ast.AST, module: Module):
        if isinstance(node, ast.Subscript) and self.callee_name(node.value) == "Literal":
            elts = node.slice.elts if isinstance(node.slice, ast.Tuple) else [node.slice]
            try:
                return [self.x.ev(e, module) for e in elts]
            except Unresolved:
                self.x.note("Literal[...] not static in %s" % module.name)
                return _UNRESOLVED
        if isinstance(node, ast.Name) and node.id not in ("str", "int", "float", "bool"):
            # a type alias: Foo = Literal[...]
            v = module.assigns.get(node.id)
            if v and isinstance(v[-1], ast.Subscript) and self.callee_name(v[-1].value) == "Literal":
                return self.literal_values(v[-1], module)
        return None

    def is_list(self, node: ast.AST) -> bool:
        return isinstance(node, ast.Subscript) and self.callee_name(node.value) in ("List", "list")


# --------------------------------------------------------------------------- one version


def extract(path: Path) -> tuple[dict, list[str]]:
    archive = Archive(path)
    x = Extractor(archive)
    col = ArgCollector(x)
    col.collect()

    args = {k: col.args[k] for k in col.order}
    data: dict = {"wheel": path.name, "sha256": hashlib.sha256(path.read_bytes()).hexdigest()}
    data["prog"] = col.prog  # None: argparse's default, the script name (launch_server.py)
    if not col.allow_abbrev:
        data["allow_abbrev"] = False
    data["args"] = {k: v.to_json() for k, v in sorted(args.items())}

    # parsers
    def parser_names(flag: str, names_mod: str, names_var: str, registry_mod: str, cls: str, attr: str):
        spec = args.get(flag)
        if spec is not None and spec.choices:
            return sorted(spec.choices), "choices of %s" % flag
        m = x.module(names_mod)
        if m is not None and names_var in m.assigns:
            try:
                return sorted(x.iterate(x.lookup(names_var, m))), "%s.%s" % (names_mod, names_var)
            except Unresolved:
                pass
        m = x.module(registry_mod)
        if m is not None and cls in m.classes:
            try:
                keys = x.iterate(x.class_attr(ClassRef(m, m.classes[cls]), attr))
                return sorted(keys), "%s.%s.%s" % (registry_mod, cls, attr)
            except Unresolved:
                pass
        x.note("no names found for %s" % flag)
        return [], None

    data["tool_call_parsers"], tsrc = parser_names(
        "--tool-call-parser", "sglang.srt.function_call.parser_names", "TOOL_CALL_PARSER_NAMES",
        "sglang.srt.function_call.function_call_parser", "FunctionCallParser", "ToolCallParserEnum")
    data["reasoning_parsers"], rsrc = parser_names(
        "--reasoning-parser", "sglang.srt.parser.reasoning_parser_names", "REASONING_PARSER_NAMES",
        "sglang.srt.parser.reasoning_parser", "ReasoningParser", "DetectorMap")
    # cross-check: registry keys vs what the CLI offers
    for flag, mod, cls, attr, have in (
        ("--tool-call-parser", "sglang.srt.function_call.function_call_parser", "FunctionCallParser",
         "ToolCallParserEnum", data["tool_call_parsers"]),
        ("--reasoning-parser", "sglang.srt.parser.reasoning_parser", "ReasoningParser", "DetectorMap",
         data["reasoning_parsers"]),
    ):
        m = x.module(mod)
        if m is not None and cls in m.classes:
            try:
                keys = set(x.iterate(x.class_attr(ClassRef(m, m.classes[cls]), attr)))
                diff = keys.symmetric_difference(set(have) - {"auto"})
                if diff:
                    x.note("%s: CLI choices and %s.%s differ: %s" % (flag, cls, attr, sorted(diff)))
            except Unresolved:
                pass
    if tsrc:
        data["_tool_src"] = tsrc
    if rsrc:
        data["_reasoning_src"] = rsrc

    # SGLANG_ENABLE_SPEC_V2
    spec_v2 = None
    env = x.module("sglang.srt.environ")
    if env is not None:
        for node in ast.walk(env.tree):
            target, value = None, None
            if isinstance(node, ast.Assign) and len(node.targets) == 1 and isinstance(node.targets[0], ast.Name):
                target, value = node.targets[0].id, node.value
            elif isinstance(node, ast.AnnAssign) and isinstance(node.target, ast.Name):
                target, value = node.target.id, node.value
            if target == "SGLANG_ENABLE_SPEC_V2" and isinstance(value, ast.Call) and value.args:
                try:
                    spec_v2 = bool(x.ev(value.args[0], env))
                except Unresolved:
                    x.note("SGLANG_ENABLE_SPEC_V2 default not static")
    data["spec_v2_default"] = spec_v2
    retired = any(b"SGLANG_ENABLE_SPEC_V2 has been removed" in src for src in archive.files.values())
    data["spec_v2_env_retired"] = retired

    data["bench_modules"] = [m for m in ("sglang.bench_serving", "sglang.benchmark.serving") if archive.has_module(m)]
    return data, x.notes


# --------------------------------------------------------------------------- JSON and summary


def compact(per_version: dict[str, dict]) -> dict:
    versions = sorted(per_version, key=version_key)
    out = {
        "schema": 1,
        "about": "SGLang launch flags, parser names and defaults per version, read from the sglang wheels on "
                 "PyPI by gpuops.core.engines.sglang.extract.flags (rerun it to refresh). Each version lists the "
                 "arguments added (or changed) and removed against the version before it; the first one "
                 "lists them all. An argument: its first option string, and opts (all option strings), "
                 "nargs (absent: one value; 0: none), choices (where static), hidden (help suppressed), "
                 "deprecated (true, or the option the deprecation notice names instead), required.",
        "generated": datetime.date.today().isoformat(),
        "versions": {},
    }
    prev: dict | None = None
    for v in versions:
        d = dict(per_version[v])
        d.pop("_tool_src", None)
        d.pop("_reasoning_src", None)
        args = d.pop("args")
        if prev is None:
            d["args"] = args
        else:
            d["args_added"] = {k: s for k, s in args.items() if prev.get(k) != s}
            d["args_removed"] = sorted(k for k in prev if k not in args)
        prev = args
        out["versions"][v] = d
    return out


def expand(data: dict) -> dict[str, dict]:
    """Full argument dicts per version from the compact form (same as the library's loader)."""
    full: dict[str, dict] = {}
    args: dict = {}
    for v in sorted(data["versions"], key=version_key):
        d = data["versions"][v]
        if "args" in d:
            args = dict(d["args"])
        else:
            args = dict(args)
            for k in d.get("args_removed", []):
                args.pop(k, None)
            args.update(d.get("args_added", {}))
        full[v] = args
    return full


def option_strings(args: dict) -> set[str]:
    out = {"-h", "--help"}
    for k, s in args.items():
        out.update(s.get("opts", [k]))
    return out


def summary(data: dict, notes: dict[str, list[str]]) -> str:
    lines = []
    full = expand(data)
    versions = sorted(full, key=version_key)
    lines.append("%-8s %6s %6s  %-9s %-8s %-8s %s" % ("version", "args", "opts", "spec_v2", "tools", "reason",
                                                       "bench module"))
    for v in versions:
        d = data["versions"][v]
        lines.append("%-8s %6d %6d  %-9s %-8d %-8d %s" % (
            v, len(full[v]), len(option_strings(full[v])),
            {True: "on", False: "off", None: "retired" if d.get("spec_v2_env_retired") else "absent"}[d["spec_v2_default"]],
            len(d["tool_call_parsers"]), len(d["reasoning_parsers"]), " ".join(d["bench_modules"])))
    lines.append("")
    prev = None
    for v in versions:
        if prev is not None:
            a, b = option_strings(full[prev]), option_strings(full[v])
            added, removed = sorted(b - a), sorted(a - b)
            changed = sorted(k for k in full[v] if k in full[prev] and full[v][k] != full[prev][k])
            dv, dp = data["versions"][v], data["versions"][prev]
            tools_added = sorted(set(dv["tool_call_parsers"]) - set(dp["tool_call_parsers"]))
            tools_removed = sorted(set(dp["tool_call_parsers"]) - set(dv["tool_call_parsers"]))
            rea_added = sorted(set(dv["reasoning_parsers"]) - set(dp["reasoning_parsers"]))
            rea_removed = sorted(set(dp["reasoning_parsers"]) - set(dv["reasoning_parsers"]))
            lines.append("%s -> %s: +%d -%d options, %d arguments changed" % (prev, v, len(added), len(removed),
                                                                               len(changed)))
            for label, items in (("added", added), ("removed", removed), ("changed", changed),
                                 ("tool parsers +", tools_added), ("tool parsers -", tools_removed),
                                 ("reasoning parsers +", rea_added), ("reasoning parsers -", rea_removed)):
                if items:
                    lines.append("    %-20s %s" % (label, " ".join(items)))
        prev = v
    lines.append("")
    lines.append("watched flags (version: present / details):")
    for flag in WATCHED:
        history = []
        last = None
        for v in versions:
            spec = None
            for k, s in full[v].items():
                if flag in s.get("opts", [k]):
                    spec = dict(s, key=k)
                    break
            state = "absent" if spec is None else json.dumps(
                {k: spec[k] for k in ("key", "nargs", "choices", "hidden", "deprecated") if k in spec}, sort_keys=True)
            if state != last:
                history.append("%s: %s" % (v, state))
                last = state
        lines.append("  %s" % flag)
        for h in history:
            lines.append("      " + h)
    lines.append("")
    for v in versions:
        for n in notes.get(v, []):
            lines.append("note %s: %s" % (v, n))
    return "\n".join(lines)


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--versions", help="comma-separated versions (default: every final release from --min on)")
    ap.add_argument("--min", default=DEFAULT_MIN_VERSION, help="oldest version (default %(default)s)")
    ap.add_argument("--include-post", action="store_true", help="also .postN releases")
    ap.add_argument("--wheel-dir", type=Path, default=DEFAULT_WHEEL_DIR, help="download cache (default %(default)s)")
    ap.add_argument("--offline", action="store_true", help="only use wheels already in --wheel-dir")
    ap.add_argument("-o", "--output", type=Path, default=DEFAULT_OUTPUT, help="JSON to write (default %(default)s)")
    ap.add_argument("--dry-run", action="store_true", help="print the summary, write nothing")
    opts = ap.parse_args(argv)

    if opts.versions:
        versions = [v.strip() for v in opts.versions.split(",") if v.strip()]
    elif opts.offline:
        versions = sorted({p.name.split("-")[1].removesuffix(".tar.gz") for p in opts.wheel_dir.glob("sglang-*")},
                          key=version_key)
    else:
        versions = pip_versions()
    low = version_key(opts.min)
    picked = []
    for v in versions:
        if not re.fullmatch(r"\d+(\.\d+)*(\.post\d+)?", v):
            continue  # pre-releases, dev builds
        if ".post" in v and not opts.include_post and not opts.versions:
            continue
        if version_key(v) >= low or opts.versions:
            picked.append(v)
    picked = sorted(set(picked), key=version_key)
    if not picked:
        raise SystemExit("no versions to read")

    per_version, notes = {}, {}
    for v in picked:
        path = download(v, opts.wheel_dir, opts.offline)
        print("reading %s" % path.name, file=sys.stderr)
        per_version[v], notes[v] = extract(path)
    data = compact(per_version)
    text = json.dumps(data, sort_keys=True, separators=(",", ":")) + "\n"
    print(summary(data, notes))
    if not opts.dry_run:
        opts.output.parent.mkdir(parents=True, exist_ok=True)
        tmp = opts.output.with_name(".%s.tmp" % opts.output.name)
        tmp.write_text(text)
        os.replace(tmp, opts.output)
        print("\nwrote %s (%d bytes, %d versions: %s .. %s)" % (opts.output, len(text), len(picked), picked[0],
                                                               picked[-1]))
    return 0


if __name__ == "__main__":
    sys.exit(main())
