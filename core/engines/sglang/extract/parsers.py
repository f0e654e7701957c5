#!/usr/bin/env python3
"""Read, for each SGLang version, what each reasoning and tool-call parser recognises: the tokens
its detector looks for in the model's output, with the class, file and line they come from.

This is how ``core/engines/sglang/data/sglang_parsers.json`` (read by
``gpuops.core.engines.sglang.parsers``) is made and refreshed (from the checkout, with its
virtualenv)::

    .venv/bin/python -m gpuops.core.engines.sglang.extract.parsers   # the versions the flags data has
    .venv/bin/python -m gpuops.core.engines.sglang.extract.parsers --wheel-dir /tmp/w --offline

What it reads, statically (``ast``; SGLang is never installed or imported), from each wheel
(``pip download --no-deps sglang==V``, the flags extractor's wheels):

* ``ReasoningParser.DetectorMap`` (``srt/parser/reasoning_parser.py``, or ``srt/reasoning_parser.py``
  in older releases): each name's detector class, and the ``think_start_token``,
  ``think_end_token`` and ``tool_start_token`` its ``__init__`` chain finally
  hands ``BaseReasoningFormatDetector`` (positional or keyword, a parameter's default, a constant of
  the module or one it imports);
* ``FunctionCallParser.ToolCallParserEnum`` (``srt/function_call/function_call_parser.py``): each
  name's detector class, the marker its ``has_tool_call`` looks for (``return self.X in text``: X as
  its ``__init__``, or a base's, sets it; else its ``bot_token``) and its ``eot_token``.

A token computed at run time (from the tokenizer, a request's reasoning effort) is stored as null
with ``"computed": true``: that parser is not judged by its tokens. Each record holds the versions
it is true for (``since`` .. ``until``), so the JSON stays small across releases.
"""

from __future__ import annotations

import ast
import datetime
import sys
from pathlib import Path

from .flags import Archive, ClassRef, Extractor, Module, Scope, Unresolved, download, extractor_main, version_key

DEFAULT_OUTPUT = Path(__file__).resolve().parent.parent / "data" / "sglang_parsers.json"
REASONING_MAPS = (("sglang.srt.parser.reasoning_parser", "ReasoningParser", "DetectorMap"),
                  ("sglang.srt.reasoning_parser", "ReasoningParser", "DetectorMap"))
TOOL_MAPS = (("sglang.srt.function_call.function_call_parser", "FunctionCallParser", "ToolCallParserEnum"),)
REASONING_BASE = "BaseReasoningFormatDetector"
REASONING_FIELDS = ("think_start_token", "think_end_token", "tool_start_token")


def _detector_map(x: Extractor, places: tuple[tuple[str, str, str], ...]) -> tuple[dict[str, ClassRef], str]:
    """{parser name: its detector class} from the first of `places` the wheel has, and where."""
    for mod_name, cls_name, attr in places:
        m = x.module(mod_name)
        if m is None or cls_name not in m.classes:
            continue
        for node in m.classes[cls_name].body:
            target = node.target if isinstance(node, ast.AnnAssign) else \
                node.targets[0] if isinstance(node, ast.Assign) and len(node.targets) == 1 else None
            if isinstance(target, ast.Name) and target.id == attr and isinstance(node.value, ast.Dict):
                out: dict[str, ClassRef] = {}
                for k, v in zip(node.value.keys, node.value.values):
                    if k is None:
                        continue
                    try:
                        name, ref = x.ev(k, m), x.ev(v, m)
                    except Unresolved:
                        x.note(f"{cls_name}.{attr}: {ast.unparse(k) if k else '**'} not resolved")
                        continue
                    if isinstance(name, str) and isinstance(ref, ClassRef):
                        out[name] = ref
                return out, f"{mod_name}.{cls_name}.{attr}"
    x.note("no parser map at " + ", ".join(p[0] for p in places))
    return {}, ""


def _init(ref: ClassRef) -> ast.FunctionDef | None:
    return next((n for n in ref.node.body if isinstance(n, ast.FunctionDef) and n.name == "__init__"), None)


def _chain(x: Extractor, ref: ClassRef) -> list[ClassRef]:
    """`ref` and its first bases, the leaf first."""
    out = [ref]
    while len(out) < 20 and (b := next(x.bases(out[-1]), None)) is not None:
        out.append(b)
    return out


def _params(fn: ast.FunctionDef) -> tuple[list[str], dict[str, ast.AST]]:
    """The parameters after self, and the defaults of those that have one."""
    a = fn.args
    positional = [p.arg for p in a.posonlyargs + a.args][1:]
    defaults = dict(zip(positional[len(positional) - len(a.defaults):], a.defaults)) if a.defaults else {}
    for p, d in zip(a.kwonlyargs, a.kw_defaults):
        if d is not None:
            defaults[p.arg] = d
    return positional + [p.arg for p in a.kwonlyargs], defaults


def _super_call(fn: ast.FunctionDef, base: str) -> ast.Call | None:
    for n in ast.walk(fn):
        if isinstance(n, ast.Call) and ast.unparse(n.func) in ("super().__init__", f"{base}.__init__"):
            return n
    return None


# what a parameter is bound to: (the expression, its module, its function, the caller's bindings)
_Binding = tuple[ast.AST, Module, "ast.FunctionDef | None", "dict[str, _Binding] | None"]


def _value(x: Extractor, b: _Binding) -> object:
    node, module, fn, outer = b
    if isinstance(node, ast.Name) and outer is not None and node.id in outer:
        return _value(x, outer[node.id])  # a parameter of the caller's: what its own caller passed
    return x.ev(node, module, Scope(module, fn) if fn is not None else None)


def reasoning_record(x: Extractor, ref: ClassRef) -> dict:
    """The tokens `ref`'s constructor finally hands BaseReasoningFormatDetector (as ReasoningParser
    builds it: no arguments beyond its defaults)."""
    chain = [c for c in _chain(x, ref) if _init(c) is not None]
    leaf = _init(chain[0]) if chain else None
    if leaf is None:
        return {"computed": True}
    _, defaults = _params(leaf)
    env: dict[str, _Binding] = {p: (d, chain[0].module, None, None) for p, d in defaults.items()}
    for child, parent in zip(chain, chain[1:]):
        fn, parent_fn = _init(child), _init(parent)
        assert fn is not None and parent_fn is not None
        call = _super_call(fn, parent.node.name)
        if call is None:
            break
        names, parent_defaults = _params(parent_fn)
        bound: dict[str, _Binding] = {p: (d, parent.module, None, None) for p, d in parent_defaults.items()}
        for name, arg in zip(names, call.args):
            bound[name] = (arg, child.module, fn, env)
        for kw in call.keywords:
            if kw.arg:
                bound[kw.arg] = (kw.value, child.module, fn, env)
        env = bound
        if parent.node.name == REASONING_BASE:
            break
    rec: dict = {}
    if "think_start_token" not in env:  # (a required argument of the base: its value was not followed there)
        rec["computed"] = True
    for field in REASONING_FIELDS:
        if field not in env:
            rec[field] = None
            continue
        try:
            value = _value(x, env[field])
        except Unresolved:
            rec[field], rec["computed"] = None, True
            continue
        ok = value is None or isinstance(value, str)
        rec[field] = value if ok else None
        if not ok:
            rec["computed"] = True
    return rec


def _self_attr(x: Extractor, chain: list[ClassRef], attr: str) -> str | None:
    """The value the constructors of `chain` (the leaf first) set ``self.<attr>`` to (or a class
    attribute of that name); Unresolved when it is computed; None when nothing sets it."""
    for c in chain:
        fn = _init(c)
        node = None
        for n in ast.walk(fn) if fn is not None else ():
            targets = n.targets if isinstance(n, ast.Assign) else [n.target] if isinstance(n, ast.AnnAssign) else []
            if getattr(n, "value", None) is not None and any(
                    isinstance(t, ast.Attribute) and t.attr == attr and isinstance(t.value, ast.Name)
                    and t.value.id == "self" for t in targets):
                node = n.value  # (the last assignment in the constructor)
        if node is not None:
            value = x.ev(node, c.module, Scope(c.module, fn))
            if not isinstance(value, str):
                raise Unresolved(attr)
            return value
        try:
            value = x.class_attr(c, attr)
        except Unresolved:
            continue
        if isinstance(value, str):
            return value
    return None


def _has_tool_call_marker(chain: list[ClassRef]) -> ast.AST | None:
    """What ``has_tool_call`` looks for, where it is ``return <marker> in text``: the marker's
    expression (``self.bot_token``, ``self.tool_call_start_token``, a literal); else None."""
    for c in chain:
        fn = next((n for n in c.node.body if isinstance(n, ast.FunctionDef) and n.name == "has_tool_call"), None)
        if fn is None:
            continue
        body = [n for n in fn.body if not (isinstance(n, ast.Expr) and isinstance(n.value, ast.Constant))]
        if len(body) == 1 and isinstance(body[0], ast.Return) and isinstance(body[0].value, ast.Compare):
            cmp = body[0].value
            if len(cmp.ops) == 1 and isinstance(cmp.ops[0], ast.In):
                return cmp.left
        return None
    return None


def tool_record(x: Extractor, ref: ClassRef) -> dict:
    """The marker the detector's ``has_tool_call`` looks for in the output (its ``bot_token`` when
    that method is not a plain ``marker in text``), and its ``eot_token``."""
    chain = _chain(x, ref)
    rec: dict = {}
    marker = _has_tool_call_marker(chain)
    try:
        if isinstance(marker, ast.Attribute) and isinstance(marker.value, ast.Name) and marker.value.id == "self":
            rec["start"], rec["start_from"] = _self_attr(x, chain, marker.attr), f"has_tool_call: self.{marker.attr}"
        elif marker is not None:
            value = x.ev(marker, chain[0].module)
            rec["start"], rec["start_from"] = (value if isinstance(value, str) else None), "has_tool_call"
        else:
            rec["start"], rec["start_from"] = _self_attr(x, chain, "bot_token"), "bot_token"
    except Unresolved:
        rec["start"], rec["computed"] = None, True
    try:
        rec["end"] = _self_attr(x, chain, "eot_token")
    except Unresolved:
        rec["end"] = None
    if not rec["start"]:  # "" or None: a format with no marker of its own (pythonic calls)
        rec["start"] = None
    return rec


def _where(x: Extractor, ref: ClassRef) -> str:
    return f"{x.archive.module_path(ref.module.name)}:{ref.node.lineno}"


def extract(path: Path) -> tuple[dict, list[str]]:
    """{"reasoning": {name: record}, "tools": {name: record}} of one wheel, and notes."""
    x = Extractor(Archive(path))
    data: dict = {}
    for key, places, read in (("reasoning", REASONING_MAPS, reasoning_record), ("tools", TOOL_MAPS, tool_record)):
        found, source = _detector_map(x, places)
        data[key] = {}
        for name, ref in sorted(found.items()):
            try:
                rec = read(x, ref)
            except (Unresolved, RecursionError) as e:
                x.note(f"{key} {name}: {e}")
                rec = {"computed": True}
            data[key][name] = {"class": ref.node.name, "source": _where(x, ref), **rec}
        data[key + "_map"] = source
    return data, x.notes


def compact(per_version: dict[str, dict]) -> dict:
    """Each parser's records with the versions each is true for (since .. until, inclusive)."""
    out: dict[str, dict[str, list[dict]]] = {"reasoning": {}, "tools": {}}
    versions = sorted(per_version, key=version_key)
    for kind in out:
        for v in versions:
            for name, rec in per_version[v][kind].items():
                spans = out[kind].setdefault(name, [])
                last = spans[-1] if spans else None
                same = last is not None and last["until"] == versions[versions.index(v) - 1] and \
                    {k: w for k, w in last.items() if k not in ("since", "until")} == rec
                if same:
                    assert last is not None
                    last["until"] = v
                else:
                    spans.append({"since": v, "until": v, **rec})
    return out


def build(versions: list[str], wheel_dir: Path, offline: bool) -> dict:
    per_version: dict[str, dict] = {}
    wheels: dict[str, str] = {}
    for v in sorted(versions, key=version_key):
        path = download(v, wheel_dir, offline)
        data, notes = extract(path)
        per_version[v] = data
        wheels[v] = path.name
        print(f"{v}: {len(data['reasoning'])} reasoning parsers, {len(data['tools'])} tool-call parsers"
              + "".join(f"\n  note: {n}" for n in notes), file=sys.stderr)
    return {
        "_comment": "Generated by gpuops.core.engines.sglang.extract.parsers from the sglang wheels; do not edit.",
        "generated": datetime.date.today().isoformat(),
        "wheels": wheels,
        "maps": {v: [d["reasoning_map"], d["tools_map"]] for v, d in per_version.items()},
        **compact(per_version),
    }


def main(argv: list[str] | None = None) -> int:
    return extractor_main(argv, __doc__.splitlines()[1], build, DEFAULT_OUTPUT)


if __name__ == "__main__":
    raise SystemExit(main())
