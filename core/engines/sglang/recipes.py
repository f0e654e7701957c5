"""SGLang's official command for a checkpoint on some GPUs: the cookbook's recipes as data
(``data/sglang_recipes.json``, written by ``extract/recipes.py`` from sgl-project/sglang's
``docs_new`` model configs, each with its file and commit).

A recipe has cells, each the command for one (hardware, variant, quantization, strategy, nodes). For a
checkpoint, :func:`official` finds the recipe whose ``modelNames`` list it (the checkpoint id, case
aside), the hardware the GPUs are (their name, or offline their memory), and the one-node cell the
page shows first for it: the strategy of the page's first cell where that hardware has it, else the
hardware's first cell. The cell holds only what it runs; the page's parsers and speculative presets
(kept out of its cells by the docs' convention) come with it.
"""

from __future__ import annotations

import functools
import json
import re
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from ...planning.inputs import mem_fraction_of

DATA = Path(__file__).resolve().parent / "data" / "sglang_recipes.json"
# the flags of speculative decoding (a plan's, a published command's, a previous deployment's)
SPEC_FLAGS = frozenset({"--speculative-algorithm", "--speculative-algo", "--speculative-num-steps",
                        "--speculative-eagle-topk", "--speculative-num-draft-tokens", "--speculative-draft-model-path"})
# the docs' spellings of a flag gpuops writes under another of its names (the server's own aliases)
_ALIASES = {"--tp": "--tp-size", "--dp": "--dp-size", "--ep": "--ep-size", "--pp": "--pp-size", "--model": "--model-path",
            "--speculative-algo": "--speculative-algorithm"}


@dataclass(frozen=True)
class Official:
    """The cookbook's command for a checkpoint on some hardware: one cell of its recipe."""

    config: str  # the recipe (ORG/MODEL of the docs' configs)
    hw: str
    variant: str
    quant: str
    strategy: str
    verified: bool
    flags: tuple[tuple[str, tuple[str, ...]], ...]  # as gpuops names them (--tp-size for --tp)
    env: tuple[str, ...]
    parsers: dict[str, str] = field(default_factory=dict)  # "reasoning", "tool_call" -> the page's parser
    path: str = ""
    commit: str = ""

    @property
    def source(self) -> str:
        """Where it is written: FILE@COMMIT (short), the strategy and hardware."""
        return f"{self.path.rsplit('/', 1)[-1]}@{self.commit[:10]}, {self.hw} {self.strategy}"

    def value(self, flag: str) -> tuple[str, ...] | None:
        """The values the cell gives `flag` (gpuops' name), None when it leaves it out."""
        return next((v for f, v in self.flags if f == flag), None)

    @property
    def tp(self) -> int:
        tp = self.value("--tp-size")
        return int(tp[0]) if tp and tp[0].isdigit() else 1

    @property
    def speculative(self) -> bool:
        return any(f in SPEC_FLAGS for f, _ in self.flags)

    @property
    def mem_fraction(self) -> float | None:
        """The cell's --mem-fraction-static (one a plan may pass), None when it leaves SGLang to choose."""
        v = self.value("--mem-fraction-static")
        return mem_fraction_of(v[0] if v else None)

    @property
    def expert_parallel(self) -> int | None:
        """The cell's expert-parallel size (--ep, --ep-size), None when it has none."""
        v = self.value("--ep-size") or self.value("--expert-parallel-size")
        return int(v[0]) if v and v[0].isdigit() and int(v[0]) > 1 else None


@functools.cache
def _data() -> dict[str, Any]:
    data: dict[str, Any] = json.loads(DATA.read_text(encoding="utf-8"))
    return data


def recipes() -> list[dict[str, Any]]:
    return list(_data()["recipes"])


def hardware_of(name: str | None, memory_bytes: int = 0) -> str | None:
    """The docs' hardware id of a GPU: by its name (NVIDIA H200 -> h200), or, for a GPU known only by its
    memory (an offline plan), the one NVIDIA id of that size; None when neither tells."""
    catalog: dict[str, dict[str, Any]] = _data().get("hardware", {})
    if name:
        words = re.findall(r"[a-z0-9]+", name.lower())
        hits = [hw for hw in catalog if hw in words]
        return hits[0] if len(hits) == 1 else max(hits, key=len) if hits else None
    gib = memory_bytes / 1024**3
    sized = [hw for hw, h in catalog.items()
             if h.get("vendor") == "nvidia" and h.get("memory_gb") and abs(gib - h["memory_gb"]) <= 0.06 * h["memory_gb"]]
    return sized[0] if len(sized) == 1 else None


def _find(model_id: str) -> tuple[dict[str, Any], str, str, str | None] | None:
    """(recipe, variant, quant, the hardware its name is for or None) of the checkpoint `model_id`."""
    want = model_id.lower()
    for recipe in recipes():
        for key, name in recipe["models"].items():
            if name.lower() == want:
                parts = key.split("|")
                if len(parts) == 2:
                    return recipe, parts[0], parts[1], None
                if len(parts) == 3:
                    return recipe, parts[1], parts[2], parts[0]
    return None


def _canonical(words: list[str]) -> tuple[str, tuple[str, ...]]:
    flag = words[0].split("=", 1)[0]
    values = tuple(words[1:]) if "=" not in words[0] else (words[0].split("=", 1)[1], *words[1:])
    return _ALIASES.get(flag, flag), values


def official(model_id: str, gpu_name: str | None, gpu_memory: int, gpus: int) -> Official | None:
    """The cookbook's one-node command for `model_id` on `gpus` GPUs like this one, None when it has
    none (no recipe lists the checkpoint, none for that hardware, or its command needs more GPUs)."""
    found = _find(model_id)
    hw = hardware_of(gpu_name, gpu_memory)
    if found is None or hw is None:
        return None
    recipe, variant, quant, only_hw = found
    if only_hw is not None and only_hw != hw:
        return None
    cells = [c for c in recipe["cells"] if (c["variant"], c["quant"], c["nodes"]) == (variant, quant, "single")]
    here = [c for c in cells if c["hw"] == hw]
    if not here:
        return None
    page_default = recipe["cells"][0]["strategy"] if recipe["cells"] else None
    cell = next((c for c in here if c["strategy"] == page_default), here[0])
    out = Official(config=recipe["config"], hw=hw, variant=variant, quant=quant, strategy=cell["strategy"],
                   verified=cell["verified"], flags=tuple(_canonical(w) for w in cell["flags"]), env=tuple(cell["env"]),
                   parsers=dict(recipe.get("parsers", {})), path=recipe["source"]["path"],
                   commit=recipe["source"]["commit"])
    pp = out.value("--pp-size")
    need = out.tp * (int(pp[0]) if pp and pp[0].isdigit() else 1)
    return out if need <= gpus else None


def for_model(model_id: str) -> tuple[dict[str, Any], str, str] | None:
    """(recipe, variant, quant) of a checkpoint any recipe lists, whatever the GPUs."""
    found = _find(model_id)
    return None if found is None else found[:3]


def source_of(recipe: dict[str, Any]) -> str:
    return f"{recipe['source']['path'].rsplit('/', 1)[-1]}@{recipe['source']['commit'][:10]}"


def _variant_cells(model_id: str) -> tuple[dict[str, Any], list[dict[str, Any]]] | None:
    """(recipe, the cells of the checkpoint's variant and quantization, any hardware) of `model_id`."""
    found = for_model(model_id)
    if found is None:
        return None
    recipe, variant, quant = found
    return recipe, [c for c in recipe["cells"] if (c["variant"], c["quant"]) == (variant, quant)]


def trusts_remote_code(model_id: str) -> str | None:
    """Where the recipe runs the checkpoint with --trust-remote-code (every cell of its variant and
    quantization does), or None."""
    found = _variant_cells(model_id)
    if found is None:
        return None
    recipe, cells = found
    if cells and all(any(w[0] == "--trust-remote-code" for w in c["flags"]) for c in cells):
        return source_of(recipe)
    return None


def parser_for(model_id: str, which: str) -> tuple[str, str] | None:
    """(the parser, where it is written) the recipe of `model_id` names for `which` ("reasoning" or
    "tool_call"): the page's parsers card, else the flag every cell of its variant carries."""
    found = _variant_cells(model_id)
    if found is None:
        return None
    recipe, cells = found
    if which in recipe.get("parsers", {}):
        return recipe["parsers"][which], source_of(recipe)
    flag = "--reasoning-parser" if which == "reasoning" else "--tool-call-parser"
    values = {tuple(w[1:]) for c in cells for w in c["flags"] if w[0] == flag}
    if cells and len(values) == 1 and all(any(w[0] == flag for w in c["flags"]) for c in cells):
        (value,) = values
        if len(value) == 1:
            return value[0], source_of(recipe)
    return None
