#!/usr/bin/env python3
"""Read, for each SGLang version, which model configs and tokenizers it can load without
``--trust-remote-code``: the config types SGLang registers itself and those of the transformers
release it pins, and that release's tokenizer classes.

This is how ``core/engines/sglang/data/sglang_configs.json`` (read by
``gpuops.core.engines.sglang.remote_code``) is made and refreshed (from the checkout, with its
virtualenv)::

    .venv/bin/python -m gpuops.core.engines.sglang.extract.remote_code   # the versions the flags data has
    .venv/bin/python -m gpuops.core.engines.sglang.extract.remote_code --wheel-dir /tmp/w --offline

SGLang reads a model's config with ``transformers.AutoConfig`` after registering its own config
classes with it (``_CONFIG_REGISTRY``: ``srt/utils/hf_transformers_utils.py`` up to 0.5.2x,
``srt/utils/hf_transformers/common.py`` later), and its tokenizer with ``AutoTokenizer``; transformers
runs the checkpoint's own Python (its ``auto_map``) only with ``trust_remote_code``, and only for what
it cannot read itself. So a checkpoint needs ``--trust-remote-code`` where its ``model_type`` is in
neither set, or its ``tokenizer_class`` is no transformers class, and its ``auto_map`` names the code.

What it reads, statically (``ast``; neither package is installed or imported):

* from each sglang wheel (``pip download --no-deps sglang==V``, the flags extractor's wheels): the
  transformers pin in its METADATA (``Requires-Dist: transformers==X``) and the ``model_type`` of every
  config class ``_CONFIG_REGISTRY`` names (the classes in its list or comprehension, the lists it
  unpacks, the ``_CONFIG_REGISTRY["name"] = …`` keys) plus every ``AutoConfig.register("name", …)``;
* from each pinned transformers wheel (``pip download --no-deps transformers==X``): the keys of
  ``CONFIG_MAPPING_NAMES`` (``models/auto/configuration_auto.py``, and ``auto_mappings.py`` where it
  lives from 5.x), the class names its ``tokenization_*.py`` modules define (aliases included) and
  those ``TOKENIZER_MAPPING_NAMES`` maps model types to.

The JSON stores each package's first version in full and each later one's additions and removals.
"""

from __future__ import annotations

import ast
import datetime
import hashlib
import re
import sys
import zipfile
from pathlib import Path

from .flags import download, extractor_main, version_key

DEFAULT_OUTPUT = Path(__file__).resolve().parent.parent / "data" / "sglang_configs.json"
CONFIG_AUTO = ("transformers/models/auto/configuration_auto.py", "transformers/models/auto/auto_mappings.py")
TOKENIZER_AUTO = "transformers/models/auto/tokenization_auto.py"


def _strings(node: ast.AST) -> list[str]:
    return [n.value for n in ast.walk(node) if isinstance(n, ast.Constant) and isinstance(n.value, str)]


def _class_model_types(sources: dict[str, str]) -> tuple[dict[str, str], dict[str, list[str]]]:
    """Across the wheel: {class name: its ``model_type = "…"``} and {list name: the names it holds}
    (module-level lists and tuples of names: a registry may unpack one)."""
    types: dict[str, str] = {}
    lists: dict[str, list[str]] = {}
    for source in sources.values():
        if "model_type" not in source and "_CLASSES" not in source:
            continue
        try:
            tree = ast.parse(source)
        except SyntaxError:
            continue
        for node in ast.walk(tree):
            if isinstance(node, ast.ClassDef):
                for item in node.body:  # model_type = "…" or model_type: str = "…"
                    targets = item.targets if isinstance(item, ast.Assign) else \
                        [item.target] if isinstance(item, ast.AnnAssign) else []
                    value = getattr(item, "value", None)
                    if (any(isinstance(t, ast.Name) and t.id == "model_type" for t in targets)
                            and isinstance(value, ast.Constant) and isinstance(value.value, str)):
                        types.setdefault(node.name, value.value)
        for node in tree.body:
            if (isinstance(node, ast.Assign) and len(node.targets) == 1 and isinstance(node.targets[0], ast.Name)
                    and isinstance(node.value, (ast.List, ast.Tuple))):
                names = [e.id for e in node.value.elts if isinstance(e, ast.Name)]
                if names:
                    lists.setdefault(node.targets[0].id, names)
    return types, lists


def sglang_config_types(sources: dict[str, str]) -> list[str]:
    """The model types SGLang registers with transformers' AutoConfig (see the module docstring)."""
    types, lists = _class_model_types(sources)
    found: set[str] = set()

    def names_in(node: ast.AST) -> None:
        for n in ast.walk(node):
            if isinstance(n, ast.Name):
                if n.id in types:
                    found.add(types[n.id])
                for member in lists.get(n.id, ()):
                    if member in types:
                        found.add(types[member])

    for source in sources.values():
        if "_CONFIG_REGISTRY" not in source and "AutoConfig.register" not in source and "CONFIG_MAPPING" not in source:
            continue
        tree = ast.parse(source)
        for node in ast.walk(tree):
            if isinstance(node, (ast.Assign, ast.AnnAssign)):
                targets = node.targets if isinstance(node, ast.Assign) else [node.target]
                for t in targets:
                    if isinstance(t, ast.Name) and t.id == "_CONFIG_REGISTRY" and node.value is not None:
                        names_in(node.value)
                    elif (isinstance(t, ast.Subscript) and isinstance(t.slice, ast.Constant)
                          and isinstance(t.slice.value, str) and _registry(t.value)):
                        found.add(t.slice.value)  # _CONFIG_REGISTRY["name"] = …, CONFIG_MAPPING._extra_content["name"] = …
            elif isinstance(node, ast.Call) and isinstance(node.func, ast.Attribute):
                owner = node.func.value
                if node.func.attr == "update" and isinstance(owner, ast.Name) and owner.id == "_CONFIG_REGISTRY":
                    for arg in node.args:
                        names_in(arg)
                elif node.func.attr == "register" and isinstance(owner, ast.Name) \
                        and owner.id in ("AutoConfig", "CONFIG_MAPPING") and node.args:
                    _registered(tree, node.args[0], types, lists, found)
    return sorted(found)


def _registry(node: ast.expr) -> bool:
    """`node` is ``_CONFIG_REGISTRY`` or ``CONFIG_MAPPING._extra_content``."""
    return (isinstance(node, ast.Name) and node.id == "_CONFIG_REGISTRY") or \
        (isinstance(node, ast.Attribute) and node.attr == "_extra_content")


def _registered(tree: ast.Module, key: ast.expr, types: dict[str, str], lists: dict[str, list[str]],
                found: set[str]) -> None:
    """The model types a ``register(KEY, …)`` call registers: KEY a string, ``SomeConfig.model_type``,
    or a loop's variable (``for cls in (A, B): register(cls.model_type, cls)``, ``for name, cls in
    {"a": A}.items(): register(name, cls)``): the loop's classes' types, or its strings."""
    if isinstance(key, ast.Constant) and isinstance(key.value, str):
        found.add(key.value)
        return
    var = key.value if isinstance(key, ast.Attribute) and key.attr == "model_type" else key
    if not isinstance(var, ast.Name):
        return
    if var.id in types:
        found.add(types[var.id])
        return
    for loop in ast.walk(tree):
        if not isinstance(loop, ast.For) or var.id not in {n.id for n in ast.walk(loop.target) if isinstance(n, ast.Name)}:
            continue
        for n in ast.walk(loop.iter):
            if isinstance(n, ast.Name):
                for cls in [n.id, *lists.get(n.id, ())]:
                    if cls in types and key is not var:  # (…).model_type of the loop's classes
                        found.add(types[cls])
            elif isinstance(n, ast.Dict) and key is var:  # {"name": Class}.items(): the names
                found.update(k.value for k in n.keys if isinstance(k, ast.Constant) and isinstance(k.value, str))


def read_sglang(path: Path) -> tuple[str | None, list[str]]:
    """(the transformers version the wheel pins, the config types it registers)."""
    with zipfile.ZipFile(path) as z:
        meta = next((n for n in z.namelist() if n.endswith(".dist-info/METADATA")), None)
        pin = None
        if meta:
            m = re.search(r"^Requires-Dist: transformers\s*==\s*([\w.]+)", z.read(meta).decode("utf-8", "replace"), re.M)
            pin = m.group(1) if m else None
        sources = {n: z.read(n).decode("utf-8-sig", "replace") for n in z.namelist()
                   if n.startswith("sglang/srt/") and n.endswith(".py")}
    return pin, sglang_config_types(sources)


def read_transformers(path: Path) -> tuple[list[str], list[str]]:
    """(the model types CONFIG_MAPPING_NAMES holds, the tokenizer classes transformers defines)."""
    types: set[str] = set()
    tokenizers: set[str] = set()
    with zipfile.ZipFile(path) as z:
        for name in z.namelist():
            if name in CONFIG_AUTO:
                tree = ast.parse(z.read(name).decode("utf-8"))
                for node in ast.walk(tree):
                    value: ast.AST | None = None
                    if isinstance(node, (ast.Assign, ast.AnnAssign)):
                        targets = node.targets if isinstance(node, ast.Assign) else [node.target]
                        if any(isinstance(t, ast.Name) and t.id == "CONFIG_MAPPING_NAMES" for t in targets):
                            value = node.value
                    elif (isinstance(node, ast.Call) and isinstance(node.func, ast.Attribute)
                          and node.func.attr == "update" and isinstance(node.func.value, ast.Name)
                          and node.func.value.id == "CONFIG_MAPPING_NAMES"):
                        value = node
                    if value is None:
                        continue
                    for n in ast.walk(value):
                        if (isinstance(n, ast.Tuple) and len(n.elts) == 2 and isinstance(n.elts[0], ast.Constant)
                                and isinstance(n.elts[0].value, str)):
                            types.add(n.elts[0].value)
                        elif isinstance(n, ast.Dict):
                            types.update(k.value for k in n.keys if isinstance(k, ast.Constant) and isinstance(k.value, str))
            base = name.rsplit("/", 1)[-1]
            if name.startswith("transformers/") and base.startswith("tokenization_") and base.endswith(".py"):
                try:
                    tree = ast.parse(z.read(name).decode("utf-8", "replace"))
                except SyntaxError:
                    continue
                tokenizers.update(n.name for n in tree.body if isinstance(n, ast.ClassDef))
                # aliases: BartTokenizer = RobertaTokenizer
                tokenizers.update(t.id for n in tree.body if isinstance(n, ast.Assign) and isinstance(n.value, ast.Name)
                                  for t in n.targets if isinstance(t, ast.Name) and t.id[:1].isupper())
            if name == TOKENIZER_AUTO:  # the class names AutoTokenizer maps model types to
                tree = ast.parse(z.read(name).decode("utf-8"))
                for node in ast.walk(tree):
                    if isinstance(node, (ast.Assign, ast.AnnAssign)) and any(
                            isinstance(t, ast.Name) and t.id == "TOKENIZER_MAPPING_NAMES"
                            for t in (node.targets if isinstance(node, ast.Assign) else [node.target])):
                        tokenizers.update(v for v in _strings(node.value) if v[:1].isupper() and v.isidentifier())
    return sorted(types), sorted(tokenizers)


def _diffed(entries: list[tuple[str, dict[str, list[str]]]]) -> dict[str, dict]:
    """{version: {key: all (first version) | key_added / key_removed}} for lists of names."""
    out: dict[str, dict] = {}
    previous: dict[str, list[str]] | None = None
    for version, lists in entries:
        entry: dict = {}
        for key, names in lists.items():
            if previous is None:
                entry[key] = names
            else:
                entry[f"{key}_added"] = sorted(set(names) - set(previous[key]))
                entry[f"{key}_removed"] = sorted(set(previous[key]) - set(names))
        out[version] = entry
        previous = lists
    return out


def build(versions: list[str], wheel_dir: Path, offline: bool) -> dict:
    sglang_entries, pins = [], {}
    wheels: dict[str, dict] = {}
    for v in sorted(versions, key=version_key):
        wheel = download(v, wheel_dir, offline)
        pin, types = read_sglang(wheel)
        pins[v] = pin
        sglang_entries.append((v, {"config_types": types}))
        wheels[f"sglang {v}"] = {"wheel": wheel.name, "sha256": hashlib.sha256(wheel.read_bytes()).hexdigest()}
        print(f"sglang {v}: transformers {pin}, {len(types)} config types of its own", file=sys.stderr)
    tf_entries = []
    for t in sorted({p for p in pins.values() if p}, key=version_key):
        wheel = download(t, wheel_dir, offline, package="transformers")
        types, tokenizers = read_transformers(wheel)
        tf_entries.append((t, {"model_types": types, "tokenizer_classes": tokenizers}))
        wheels[f"transformers {t}"] = {"wheel": wheel.name, "sha256": hashlib.sha256(wheel.read_bytes()).hexdigest()}
        print(f"transformers {t}: {len(types)} model types, {len(tokenizers)} tokenizer classes", file=sys.stderr)
    sglang = _diffed(sglang_entries)
    for v, pin in pins.items():
        sglang[v] = {"transformers": pin, **sglang[v]}
    return {
        "about": ("What each SGLang version reads without --trust-remote-code: the config types it registers "
                  "itself, the transformers release it pins, and that release's config types and tokenizer "
                  "classes; read from the wheels on PyPI by gpuops.core.engines.sglang.extract.remote_code "
                  "(rerun it to refresh). Each package's first version lists them all; each later one what "
                  "was added and removed."),
        "generated": datetime.date.today().isoformat(),
        "wheels": wheels,
        "sglang": sglang,
        "transformers": _diffed(tf_entries),
    }


def main(argv: list[str] | None = None) -> int:
    return extractor_main(argv, __doc__.splitlines()[0], build, DEFAULT_OUTPUT)


if __name__ == "__main__":
    sys.exit(main())
