"""gpuops' plans against the commands SGLang publishes (sgl-cookbook), one case per model.

The recipe data is tests/data/recipes.json: for each model its cookbook source (file + commit), the
cookbook's command, the flags the plan must carry (parsers, speculative decoding, hybrid-model
settings: values, not just presence), the flags it must not carry, and every place where gpuops
differs on purpose ("deliberate") or cannot follow yet ("gap"), with the reason. The test pins
gpuops' side of each difference, so none is allowed silently.

Run this file directly (``python tests/test_recipes.py``) for the figure: models checked / matching.
"""

from __future__ import annotations

import json
import sys
from pathlib import Path
from typing import Any

import pytest

if __name__ == "__main__":  # the figure, run as a script from the checkout
    sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from gpuops.core.domain import split_flags
from gpuops.core.engines.sglang import versions as sv
from gpuops.core.planning.hostfacts import offline_target
from gpuops.core.planning.model_facts import facts_from_config
from gpuops.core.planning.plan import Wishes, build_plan

DATA = Path(__file__).parent / "data"
RECIPES: dict[str, Any] = json.loads((DATA / "recipes.json").read_text())
H200_GIB = 143771 / 1024
VERSION = RECIPES["sglang_version"]


def canonical(flag: str, value: str) -> str:
    """A cookbook value spelled the way gpuops spells the same thing (NEXTN for EAGLE, qwen for qwen25)."""
    same = RECIPES["equivalent"].get(flag, {})
    return str(same.get(value, value))


def plan_for(recipe: dict[str, Any]):
    config = json.loads((DATA / "configs" / f"{recipe['config']}.json").read_text())
    tokenizer = DATA / "configs" / "tokenizers" / f"{recipe['config']}.json"  # (what is published of it)
    facts = facts_from_config(config, id=recipe["model"], source="hub",
                              tokenizer_config=json.loads(tokenizer.read_text()) if tokenizer.is_file() else None)
    return facts, build_plan(facts, offline_target(8, H200_GIB), Wishes(tp=recipe["tp"], engine_version=VERSION))


def mismatches(recipe: dict[str, Any]) -> list[str]:
    """What in gpuops' plan disagrees with the recipe (empty: it follows the cookbook, differences as listed)."""
    facts, plan = plan_for(recipe)
    flags = dict(split_flags(plan.argv))
    bad: list[str] = []
    if facts.thinking != recipe["thinking"]:
        bad.append(f"thinking: gpuops says {facts.thinking!r}, the recipe {recipe['thinking']!r}")
    for flag, value in recipe["flags"].items():
        want = () if value is True else (canonical(flag, value),)
        if flags.get(flag) != want:
            bad.append(f"{flag}: cookbook {value!r}, gpuops {flags.get(flag)!r}")
    for flag in recipe["absent"]:
        if flag in flags:
            bad.append(f"{flag}: not in the cookbook's command, gpuops plans {flags[flag]!r}")
    for diff in recipe["differences"]:
        if "env" in diff:
            got = plan.env.get(diff["env"])
            if got != diff["gpuops"]:
                bad.append(f"{diff['env']}: the listed difference says gpuops plans {diff['gpuops']!r}, it plans {got!r}")
            continue
        got_flag = flags.get(diff["flag"])
        expect = None if diff["gpuops"] is None else (diff["gpuops"],)
        if got_flag != expect:
            bad.append(f"{diff['flag']}: the listed difference says gpuops plans {diff['gpuops']!r}, it plans {got_flag!r}")
    return bad


CASES = [pytest.param(r, id=r["model"]) for r in RECIPES["recipes"]]


def test_the_recipe_data_is_complete():
    assert len(RECIPES["recipes"]) >= 12
    assert len({r["model"] for r in RECIPES["recipes"]}) == len(RECIPES["recipes"])
    for r in RECIPES["recipes"]:
        assert r["source"] and all(s["repo"] == "sgl-project/sgl-cookbook" and len(s["commit"]) == 40 and s["path"]
                                   for s in r["source"]), r["model"]
        assert r["command"] and (DATA / "configs" / f"{r['config']}.json").is_file(), r["model"]
        for diff in r["differences"]:
            assert diff["kind"] in ("deliberate", "gap") and diff["why"], (r["model"], diff)
            # a difference is never also a flag the plan must match
            assert diff.get("flag") not in r["flags"], (r["model"], diff)
        # every cookbook flag the recipe checks is one the target SGLang knows
        for flag in list(r["flags"]) + r["absent"]:
            assert flag in sv.flags_for(VERSION), (r["model"], flag)


@pytest.mark.parametrize("recipe", CASES)
def test_plan_follows_the_cookbook(recipe):
    assert mismatches(recipe) == []


@pytest.mark.parametrize("recipe", CASES)
def test_reasoning_parser_only_for_models_that_think(recipe):
    _, plan = plan_for(recipe)
    flags = dict(split_flags(plan.argv))
    rule = next((r for r in plan.rules if r.id == "reasoning-parser"), None)
    if recipe["thinking"] == "none":
        assert "--reasoning-parser" not in flags and rule is None
    else:
        assert "--reasoning-parser" in flags and rule is not None
        # the reason the rule list prints says how this model thinks, and names it
        assert recipe["model"] in rule.why
        assert ("always reasons" in rule.why) == (recipe["thinking"] == "thinking")


def test_same_config_different_release_decides_thinking_by_name():
    """Instruct and Thinking checkpoints share one config: the name decides."""
    by_model = {r["model"]: r for r in RECIPES["recipes"]}
    _, instruct = plan_for(by_model["Qwen/Qwen3-Next-80B-A3B-Instruct"])
    _, thinking = plan_for(by_model["Qwen/Qwen3-Next-80B-A3B-Thinking"])
    assert "--reasoning-parser" not in dict(split_flags(instruct.argv))
    assert dict(split_flags(thinking.argv))["--reasoning-parser"] == ("qwen3",)
    # a local folder is named by its last component
    facts = facts_from_config(json.loads((DATA / "configs" / "qwen3_moe__Qwen3-235B-A22B-Instruct-2507.json").read_text()),
                              id="/models/Qwen3-235B-A22B-Instruct-2507", source="local")
    assert facts.thinking == "none"


def figure() -> tuple[int, int, list[str]]:
    """(models checked, models matching the cookbook with no gap left, lines to print)."""
    lines, matching = [], 0
    for r in RECIPES["recipes"]:
        bad = mismatches(r)
        gaps = [d.get("flag") or d.get("env") for d in r["differences"] if d["kind"] == "gap"]
        deliberate = [d.get("flag") or d.get("env") for d in r["differences"] if d["kind"] == "deliberate"]
        ok = not bad and not gaps
        matching += ok
        note = "; ".join(bad + [f"gap: {g}" for g in gaps] + [f"deliberate: {d}" for d in deliberate])
        lines.append(f"{'match' if ok else 'DIFF ':5}  {r['model']:40} {note}")
    return len(RECIPES["recipes"]), matching, lines


def test_figure(capsys):
    checked, matching, lines = figure()
    with capsys.disabled():
        print(f"\nrecipes: {matching}/{checked} models match SGLang's cookbook (no gap; deliberate differences listed)")
    assert checked >= 12 and matching <= checked


if __name__ == "__main__":
    checked, matching, lines = figure()
    print("\n".join(lines))
    print(f"\nmodels checked: {checked}, matching: {matching} (against sgl-cookbook@{RECIPES['cookbook']['commit'][:12]}, "
          f"SGLang {VERSION})")
