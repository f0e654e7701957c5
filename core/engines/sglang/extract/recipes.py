#!/usr/bin/env python3
"""SGLang's official per-model commands (the cookbook of docs.sglang.io) as gpuops' data:
``core/engines/sglang/data/sglang_recipes.json``, read by ``gpuops.core.engines.sglang.recipes``.

Where they are: the repository ``sgl-project/sglang``, folder ``docs_new/src/snippets/configs/ORG/MODEL.jsx``
(one per model page; the ``*-benchmarks.jsx`` and ``*-srt-slurm.jsx`` beside them are not commands).
Each holds one ``export const config = { ... }``, a flat JavaScript literal by the docs' own rule (no
spreads, calls or functions): ``modelNames`` ("VARIANT|QUANT" or "HW|VARIANT|QUANT" -> checkpoint),
``supportedHardware``, ``cells`` (``match``: hw, variant, quant, strategy, nodes; ``verified``; ``env``;
``flags``, each "--flag value" as the page prints it) and ``playgroundFeatures`` (the parsers and the
speculative presets, which the docs keep out of the cells). The page's engine
(``docs_new/src/snippets/_deployment.jsx``) renders a cell as ``sglang serve FLAGS`` and selects
``cells[0]`` first.

How it is read: as data, never run. The literal's template strings (backticks) are turned into JSON
strings, then ``json5`` (PyPI; only this script needs it) reads comments, unquoted keys and trailing
commas. Each flag is split with ``shlex`` (a quoted JSON value stays whole).

    .venv/bin/python -m gpuops.core.engines.sglang.extract.recipes --docs DIR [--manifest FILE]

DIR: a checkout of sgl-project/sglang (a sparse one is enough: ``git clone --filter=blob:none --sparse``
then ``git sparse-checkout set docs_new``), or a folder holding the same paths. Each recipe cites the
commit of its file: ``git log -1 --format=%H -- PATH`` in a checkout, else the manifest's (a JSON list
of ``{"path", "commit", "complete"}``, as a copy made file by file writes it); a file marked incomplete
is left out and named.
"""

from __future__ import annotations

import argparse
import datetime
import json
import re
import shlex
import subprocess
import sys
from pathlib import Path
from typing import Any

REPO = "sgl-project/sglang"
CONFIGS = "docs_new/src/snippets/configs"
ENGINE = "docs_new/src/snippets/_deployment.jsx"
DEFAULT_OUTPUT = Path(__file__).resolve().parent.parent / "data" / "sglang_recipes.json"
_NOT_COMMANDS = ("-benchmarks.jsx", "-srt-slurm.jsx")
_EXPORT = re.compile(r"^export\s+const\s+config\s*=\s*", re.M)  # (at a line's start: not a comment's words)
_CATALOG = re.compile(r"^\s*const\s+HARDWARE_CATALOG\s*=\s*", re.M)
_NUMERIC_KEY = re.compile(r"(\d+(?:\.\d+)?)\s*:")
_VRAM = re.compile(r"(\d+(?:\.\d+)?)\s*GB")


class RecipeError(ValueError):
    """A config file that is not the flat literal the docs promise: the message says where."""


def template_strings_as_json(text: str) -> str:
    """`text` (JavaScript) with each template literal (`...`) written as a JSON string and each number
    used as an object's key quoted; strings, comments and everything else as they are. A template with a ``${...}`` is refused: it would be
    code, which the docs' configs do not have."""
    out: list[str] = []
    i, n = 0, len(text)
    while i < n:
        c = text[i]
        two = text[i:i + 2]
        if two == "//":
            j = text.find("\n", i)
            j = n if j < 0 else j
            out.append(text[i:j])
            i = j
        elif two == "/*":
            j = text.find("*/", i + 2)
            if j < 0:
                raise RecipeError(f"a comment opened at character {i} is never closed")
            out.append(text[i:j + 2])
            i = j + 2
        elif c in "'\"":
            j = i + 1
            while j < n and text[j] != c:
                j += 2 if text[j] == "\\" else 1
            if j >= n:
                raise RecipeError(f"a string opened at character {i} is never closed")
            out.append(text[i:j + 1])
            i = j + 1
        elif c == "`":
            j = i + 1
            chars: list[str] = []
            while j < n and text[j] != "`":
                if text.startswith("${", j):
                    raise RecipeError(f"a template string at character {i} computes a value (${{...}})")
                if text[j] == "\\" and j + 1 < n:
                    chars.append(_unescape(text[j + 1]))
                    j += 2
                else:
                    chars.append(text[j])
                    j += 1
            if j >= n:
                raise RecipeError(f"a template string opened at character {i} is never closed")
            out.append(json.dumps("".join(chars)))
            i = j + 1
        elif c.isdigit() and (m := _NUMERIC_KEY.match(text, i)) and "".join(out).rstrip()[-1:] in ("{", ","):
            out.append(json.dumps(m.group(1)))  # a number as a key ({ 1: 8 }): JSON5 takes names and strings only
            i = m.end(1)
        else:
            out.append(c)
            i += 1
    return "".join(out)


def _unescape(c: str) -> str:
    return {"n": "\n", "t": "\t", "r": "\r", "0": "\0"}.get(c, c)


def read_config(text: str) -> dict[str, Any]:
    """The object of a config file's ``export const config = {...}``."""
    return read_literal(text, _EXPORT, "export const config =")


def read_literal(text: str, anchor: re.Pattern[str], what: str) -> dict[str, Any]:
    """The object literal that follows `anchor` in `text`, read as data."""
    import json5  # (only this script reads JavaScript: pip install json5)

    m = anchor.search(text)
    if m is None:
        raise RecipeError(f"no `{what}`")
    raw = text[m.end():].strip()
    literal = template_strings_as_json(raw[:_matching_brace(raw) + 1])  # (what follows may be code)
    try:
        doc = json5.loads(literal)
    except ValueError as exc:
        raise RecipeError(f"the config literal does not read as data: {exc}") from None
    if not isinstance(doc, dict):
        raise RecipeError("the config is not an object")
    return doc


def _matching_brace(body: str) -> int:
    """The index of the brace that closes the literal `body` opens (strings, template strings and
    comments skipped)."""
    if not body.startswith("{"):
        raise RecipeError("the config is not an object literal")
    depth, i, n = 0, 0, len(body)
    while i < n:
        c, two = body[i], body[i:i + 2]
        if two == "//":
            i = body.find("\n", i)
            i = n if i < 0 else i
            continue
        if two == "/*":
            i = body.find("*/", i + 2) + 2
            continue
        if c in "'\"`":
            j = i + 1
            while j < n and body[j] != c:
                j += 2 if body[j] == "\\" else 1
            i = j + 1
            continue
        if c in "{[":
            depth += 1
        elif c in "}]":
            depth -= 1
            if depth == 0:
                return i
        i += 1
    raise RecipeError("the config literal is never closed")


def split_flag(text: str) -> list[str]:
    """A cell's "--flag value" as argv words (the value may be quoted: JSON in single quotes)."""
    words = shlex.split(text)
    if not words or not words[0].startswith("-"):
        raise RecipeError(f"not a flag: {text!r}")
    return words


def _flag_items(items: Any, where: str) -> list[list[str]]:
    if not isinstance(items, list) or not all(isinstance(f, str) for f in items):
        raise RecipeError(f"{where}: flags are not a list of strings")
    return [split_flag(f) for f in items]


def recipe_of(doc: dict[str, Any], name: str) -> dict[str, Any]:
    """gpuops' record of one config: what each cell runs, the parsers and speculative presets the page
    offers, the checkpoints by variant (flags split into words; placeholders such as {{MODEL_NAME}} kept)."""
    cells = []
    for k, cell in enumerate(doc.get("cells") or []):
        match = cell.get("match") or {}
        if not all(isinstance(match.get(key), str) for key in ("hw", "variant", "quant", "strategy", "nodes")):
            raise RecipeError(f"{name}: cell {k} does not match on hw, variant, quant, strategy and nodes")
        cells.append({**{key: match[key] for key in ("hw", "variant", "quant", "strategy", "nodes")},
                      "verified": bool(cell.get("verified", False)),
                      "env": [e for e in cell.get("env") or [] if isinstance(e, str)],
                      "flags": _flag_items(cell.get("flags") or [], f"{name} cell {k}")})
    features = doc.get("playgroundFeatures") or {}
    parsers: dict[str, str] = {}
    for item in ((features.get("parsers") or {}).get("items") or []):
        words = split_flag(item["flag"]) if isinstance(item, dict) and isinstance(item.get("flag"), str) else []
        if len(words) == 2 and words[0] in ("--reasoning-parser", "--tool-call-parser"):
            parsers["reasoning" if words[0] == "--reasoning-parser" else "tool_call"] = words[1]
    speculative = [{"id": str(o.get("id")), "flags": _flag_items(o.get("flags") or [], f"{name} speculative")}
                   for o in ((features.get("speculative") or {}).get("options") or []) if isinstance(o, dict)]
    names = {k: v for k, v in (doc.get("modelNames") or {}).items() if isinstance(k, str) and isinstance(v, str)}
    added = hardware_catalog(json.dumps(doc["hardware"]), vendor_lists=False) if isinstance(doc.get("hardware"), list) else {}
    return {"config": name, "models": names, "hardware_added": added,
            "hardware": [h for h in doc.get("supportedHardware") or [] if isinstance(h, str)],
            "parsers": parsers, "speculative": [s for s in speculative if s["flags"]], "cells": cells}


def hardware_catalog(text: str, vendor_lists: bool = True) -> dict[str, dict[str, Any]]:
    """{id: {label, vendor, memory_gb}} of the page engine's HARDWARE_CATALOG ({vendor: [{id, label,
    vram}]}), or (`vendor_lists` False) of a config's own ``hardware`` additions ([{id, label, vram}])."""
    entries: list[tuple[str, Any]]
    if vendor_lists:
        doc = read_literal(text, _CATALOG, "const HARDWARE_CATALOG =")
        entries = [(vendor, h) for vendor, items in doc.items() if isinstance(items, list) for h in items]
    else:
        entries = [(str(h.get("vendor", "")), h) for h in json.loads(text)]
    out: dict[str, dict[str, Any]] = {}
    for vendor, h in entries:
        if not isinstance(h, dict) or not isinstance(h.get("id"), str):
            continue
        m = _VRAM.search(str(h.get("vram", "")))
        out[h["id"]] = {"label": str(h.get("label", h["id"])), "vendor": vendor,
                        "memory_gb": float(m.group(1)) if m else None}
    return out


def _git_commit(root: Path, path: str) -> str | None:
    try:
        out = subprocess.run(["git", "-C", str(root), "log", "-1", "--format=%H", "--", path],
                             capture_output=True, text=True, timeout=60)
    except (OSError, subprocess.TimeoutExpired):
        return None
    sha = out.stdout.strip()
    return sha if out.returncode == 0 and re.fullmatch(r"[0-9a-f]{40}", sha) else None


def extract(docs: Path, manifest: list[dict[str, Any]] | None = None) -> dict[str, Any]:
    """Every model config under `docs` as gpuops' recipes data (with where each came from)."""
    listed = {m["path"]: m for m in manifest or []}
    recipes, skipped = [], []
    for f in sorted((docs / CONFIGS).rglob("*.jsx")):
        rel = f.relative_to(docs).as_posix()
        if rel.endswith(_NOT_COMMANDS):
            continue
        entry = listed.get(rel, {})
        if entry and not entry.get("complete", True):
            skipped.append({"path": rel, "why": entry.get("note") or "the copy is incomplete"})
            continue
        commit = _git_commit(docs, rel) or entry.get("commit")
        if not commit:
            skipped.append({"path": rel, "why": "no commit known for it"})
            continue
        name = rel[len(CONFIGS) + 1:-len(".jsx")]
        try:
            recipe = recipe_of(read_config(f.read_text(encoding="utf-8")), name)
        except RecipeError as exc:
            skipped.append({"path": rel, "why": str(exc)})
            continue
        recipe["source"] = {"repo": REPO, "path": rel, "commit": commit,
                            "url": f"https://github.com/{REPO}/blob/{commit}/{rel}"}
        recipes.append(recipe)
    engine = docs / ENGINE
    if not engine.is_file():
        raise RecipeError(f"{ENGINE} is not under {docs}: its hardware catalog names the GPUs")
    catalog = hardware_catalog(engine.read_text(encoding="utf-8"))
    engine_commit = _git_commit(docs, ENGINE) or listed.get(ENGINE, {}).get("commit")
    for r in recipes:
        for hw_id, h in r.pop("hardware_added", {}).items():
            catalog.setdefault(hw_id, {**h, "from": r["config"]})
    return {
        "about": ("SGLang's official per-model commands (docs.sglang.io cookbook), one record per model config of "
                  f"{REPO}/{CONFIGS}, each with the file and commit it was read from. Written by "
                  "core/engines/sglang/extract/recipes.py; do not edit by hand."),
        "generated": datetime.datetime.now(datetime.timezone.utc).strftime("%Y-%m-%d"),
        "hardware": catalog,
        "hardware_source": {"repo": REPO, "path": ENGINE, "commit": engine_commit},
        "recipes": recipes,
        "skipped": skipped,
    }


def dump(data: dict[str, Any]) -> str:
    """The data as JSON with a recipe's fields and each of its cells on a line of their own (a refresh's
    diff then shows what changed, cell by cell)."""
    def line(value: Any) -> str:
        return json.dumps(value, ensure_ascii=False)

    out = ["{"]
    for key, value in data.items():
        if key != "recipes":
            out.append(f" {line(key)}: {line(value)},")
    out.append(' "recipes": [')
    for i, r in enumerate(data["recipes"]):
        out.append("  {" + ", ".join(f"{line(k)}: {line(v)}" for k, v in r.items() if k != "cells") + ', "cells": [')
        out += [f"   {line(c)}{',' if j < len(r['cells']) - 1 else ''}" for j, c in enumerate(r["cells"])]
        out.append("  ]}" + ("," if i < len(data["recipes"]) - 1 else ""))
    out.append(" ]")
    out.append("}")
    return "\n".join(out) + "\n"


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--docs", required=True, type=Path, help="a checkout of sgl-project/sglang (or a copy of its paths)")
    ap.add_argument("--manifest", type=Path, help="JSON list of {path, commit, complete} for a copy that is no checkout")
    ap.add_argument("--output", type=Path, default=DEFAULT_OUTPUT)
    args = ap.parse_args(argv)
    manifest = json.loads(args.manifest.read_text()) if args.manifest else None
    data = extract(args.docs, manifest)
    if not data["recipes"]:
        print(f"no model configs under {args.docs / CONFIGS}", file=sys.stderr)
        return 1
    args.output.write_text(dump(data))
    print(f"{len(data['recipes'])} recipes -> {args.output}; skipped {len(data['skipped'])}"
          + "".join(f"\n  {s['path']}: {s['why']}" for s in data["skipped"]))
    return 0


if __name__ == "__main__":
    sys.exit(main())
