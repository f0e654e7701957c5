#!/usr/bin/env python3
"""Read SGLang's model registry out of its wheels: which architectures each version serves itself.

This is how ``core/engines/sglang/data/sglang_models.json`` (read by
``gpuops.core.engines.sglang.models``) is made and refreshed (from the checkout, with its virtualenv)::

    .venv/bin/python -m gpuops.core.engines.sglang.extract.models   # the versions the flags data has
    .venv/bin/python -m gpuops.core.engines.sglang.extract.models --versions 0.5.10,0.5.23 --wheel-dir /tmp/w
    .venv/bin/python -m gpuops.core.engines.sglang.extract.models --offline --wheel-dir /tmp/w

It shares the flags extractor's wheels (``pip download --no-deps sglang==V``, reused when present) and,
like it, reads the sources with ``ast``: SGLang is never installed or imported. What it reads:

* the architectures: SGLang's registry (``srt/models/registry.py``) imports every module of
  ``srt/models/`` and registers each class its ``EntryClass`` names (a class, a list of them, ``+=``)
  under the class's own name; a name the module imported is the imported class's;
* the multimodal ones: ``multimodal_model_archs`` in ``srt/configs/model_config.py`` (with the lists
  it unpacks, ``*NAME_ARCHS``).

The JSON stores the first version's registry in full and, for each later version, the architectures
added (or moved to another module, or made multimodal) and removed, each with its module's file.
"""

from __future__ import annotations

import ast
import datetime
import hashlib
import sys
import zipfile
from pathlib import Path

from .flags import download, extractor_main, version_key

DEFAULT_OUTPUT = Path(__file__).resolve().parent.parent / "data" / "sglang_models.json"
MODELS_DIR = "sglang/srt/models/"
MODEL_CONFIG = "sglang/srt/configs/model_config.py"


def _names(node: ast.expr) -> list[str]:
    """The class names an EntryClass value holds: a name, an attribute's last part, a list or tuple
    of them, or a sum of lists."""
    if isinstance(node, ast.Name):
        return [node.id]
    if isinstance(node, ast.Attribute):
        return [node.attr]
    if isinstance(node, (ast.List, ast.Tuple)):
        return [n for e in node.elts for n in _names(e)]
    if isinstance(node, ast.BinOp):
        return _names(node.left) + _names(node.right)
    return []


def entry_classes(source: str) -> list[tuple[str, int]]:
    """(registered name, line) of each class a models/ module's EntryClass names."""
    tree = ast.parse(source)
    imported = {a.asname or a.name: a.name for n in ast.walk(tree) if isinstance(n, ast.ImportFrom) for a in n.names}
    defined = {n.name for n in ast.walk(tree) if isinstance(n, ast.ClassDef)}
    out = []
    for node in tree.body:
        targets = node.targets if isinstance(node, ast.Assign) else [node.target] if isinstance(node, ast.AugAssign) else []
        if any(isinstance(t, ast.Name) and t.id == "EntryClass" for t in targets):
            value = node.value  # type: ignore[attr-defined]
            out += [(name if name in defined else imported.get(name, name), node.lineno) for name in _names(value)]
    return out


def multimodal_archs(source: str) -> set[str]:
    """The names in model_config.py's `multimodal_model_archs` list, the `*X_ARCHS` lists it unpacks included."""
    tree = ast.parse(source)
    lists: dict[str, ast.expr] = {}
    for node in tree.body:
        if isinstance(node, ast.Assign) and len(node.targets) == 1 and isinstance(node.targets[0], ast.Name):
            lists[node.targets[0].id] = node.value

    def strings(node: ast.expr | None, seen: frozenset[str] = frozenset()) -> set[str]:
        if isinstance(node, ast.Call) and node.args:  # frozenset([...]), set(...)
            return strings(node.args[0], seen)
        if not isinstance(node, (ast.List, ast.Tuple, ast.Set)):
            return set()
        out: set[str] = set()
        for e in node.elts:
            if isinstance(e, ast.Constant) and isinstance(e.value, str):
                out.add(e.value)
            elif isinstance(e, ast.Starred) and isinstance(e.value, ast.Name) and e.value.id not in seen:
                out |= strings(lists.get(e.value.id), seen | {e.value.id})
        return out

    return strings(lists.get("multimodal_model_archs"))


def read_wheel(path: Path) -> dict[str, dict]:
    """{architecture: {"file": …, "multimodal": bool}} of one wheel (the module under srt/models/ whose
    EntryClass names it: where to read it in that version's wheel)."""
    with zipfile.ZipFile(path) as z:
        names = z.namelist()
        multimodal = multimodal_archs(z.read(MODEL_CONFIG).decode("utf-8")) if MODEL_CONFIG in names else set()
        archs: dict[str, dict] = {}
        for name in sorted(names):
            if not (name.startswith(MODELS_DIR) and name.endswith(".py")) or "/" in name[len(MODELS_DIR):]:
                continue
            source = z.read(name).decode("utf-8-sig", errors="replace")
            if "EntryClass" not in source:
                continue
            try:
                found = entry_classes(source)
            except SyntaxError:
                continue
            for arch, _line in found:
                archs.setdefault(arch, {"file": name[len("sglang/"):], "multimodal": arch in multimodal})
    return archs


def build(versions: list[str], wheel_dir: Path, offline: bool) -> dict:
    doc: dict = {
        "about": ("SGLang's model registry per version (the architectures each serves itself, from the EntryClass "
                  "of each module of srt/models/, and which are multimodal), read from the sglang wheels on PyPI by "
                  "gpuops.core.engines.sglang.extract.models (rerun it to refresh). The first version lists them "
                  "all; each later one the architectures added (with where) and removed."),
        "generated": datetime.date.today().isoformat(),
        "versions": {},
    }
    previous: dict[str, dict] | None = None
    for v in sorted(versions, key=version_key):
        wheel = download(v, wheel_dir, offline)
        archs = read_wheel(wheel)
        entry: dict = {"wheel": wheel.name, "sha256": hashlib.sha256(wheel.read_bytes()).hexdigest()}
        if previous is None:
            entry["archs_added"] = archs
        else:
            entry["archs_added"] = {a: s for a, s in archs.items() if previous.get(a) != s}
            entry["archs_removed"] = sorted(set(previous) - set(archs))
        doc["versions"][v] = entry
        previous = archs
        print(f"{v}: {len(archs)} architectures ({sum(s['multimodal'] for s in archs.values())} multimodal)",
              file=sys.stderr)
    return doc


def main(argv: list[str] | None = None) -> int:
    return extractor_main(argv, __doc__.splitlines()[0], build, DEFAULT_OUTPUT)


if __name__ == "__main__":
    sys.exit(main())
