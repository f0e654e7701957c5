"""SGLang's published commands as gpuops' data (core/engines/sglang/data/sglang_recipes.json, written by
extract/recipes.py from sgl-project/sglang's docs_new model configs): the reader takes the docs' JavaScript
literals as data, every recipe cites its file and commit, and the lookup finds a checkpoint's command for
the GPUs it is planned on."""

from __future__ import annotations

import json
import re

import pytest

from gpuops.core.engines.sglang import recipes
from gpuops.core.engines.sglang.extract.recipes import (
    RecipeError,
    read_config,
    recipe_of,
    split_flag,
    template_strings_as_json,
)

# A literal in the docs configs' shape, written here (not copied): comments that hold backticks,
# a template string over lines with an escaped backtick, a quoted JSON flag, unquoted keys and
# trailing commas.
LITERAL = r'''// `cells` are denormalized: the engine injects `--nnodes`.
import { thing } from "/src/x.jsx";
export const config = {
  modelNames: { "default|fp8": "org/Model-FP8", "h200|default|fp8": "org/Model-FP8-H200", },
  curl: `curl -d '{"a": 1}' \\
  http://x:1/v1 and a \` backtick`,
  /* a block comment with a ` backtick */
  playgroundFeatures: {
    parsers: { items: [ { id: "reasoning", flag: "--reasoning-parser glm45" },
                        { id: "toolCall", flag: "--tool-call-parser glm47" } ] },
    speculative: { options: [ { id: "mtp", flags: ["--speculative-algorithm EAGLE", "--speculative-num-steps 3"] },
                              { id: "off", flags: [] } ] },
  },
  cells: [
    { match: { hw: "h200", variant: "default", quant: "fp8", strategy: "balanced", nodes: "single" },
      verified: true, env: ["A=1"],
      flags: ["--model-path {{MODEL_NAME}}", "--tp 8", "--deepep-config '{\"normal_dispatch\":{\"num_sms\":96}}'"] },
    { match: { hw: "b200", variant: "default", quant: "fp8", strategy: "balanced", nodes: "single" },
      env: [], flags: ["--model-path {{MODEL_NAME}}", "--tp 4",], },
  ],
};
export default config;
'''


def test_the_docs_literal_is_read_as_data_with_its_template_strings_and_comments():
    doc = read_config(LITERAL)
    assert doc["curl"] == "curl -d '{\"a\": 1}' \\\n  http://x:1/v1 and a ` backtick"
    recipe = recipe_of(doc, "org/model")
    assert recipe["models"] == {"default|fp8": "org/Model-FP8", "h200|default|fp8": "org/Model-FP8-H200"}
    assert recipe["parsers"] == {"reasoning": "glm45", "tool_call": "glm47"}
    assert recipe["speculative"] == [{"id": "mtp", "flags": [["--speculative-algorithm", "EAGLE"],
                                                             ["--speculative-num-steps", "3"]]}]
    first, second = recipe["cells"]
    assert first["verified"] and not second["verified"] and first["env"] == ["A=1"]
    assert first["flags"][2] == ["--deepep-config", '{"normal_dispatch":{"num_sms":96}}']
    assert second["flags"] == [["--model-path", "{{MODEL_NAME}}"], ["--tp", "4"]]


def test_what_is_not_a_flat_literal_is_refused_in_one_line():
    with pytest.raises(RecipeError, match="computes a value"):
        template_strings_as_json("x = `a ${b} c`")
    with pytest.raises(RecipeError, match="never closed"):
        template_strings_as_json('x = "open')
    with pytest.raises(RecipeError, match="no `export const config =`"):
        read_config("const other = {}")
    with pytest.raises(RecipeError, match="does not read as data"):
        read_config("export const config = { cells: [f()] };")
    with pytest.raises(RecipeError, match="not a flag"):
        split_flag("tp 8")
    with pytest.raises(RecipeError, match="does not match on"):
        recipe_of({"cells": [{"match": {"hw": "h200"}, "flags": []}]}, "x")


DATA = json.loads(recipes.DATA.read_text())


def test_every_recipe_cites_the_file_and_commit_it_was_read_from():
    assert len(DATA["recipes"]) >= 20, len(DATA["recipes"])
    for r in DATA["recipes"]:
        src = r["source"]
        assert src["repo"] == "sgl-project/sglang" and re.fullmatch(r"[0-9a-f]{40}", src["commit"]), src
        assert src["path"] == f"docs_new/src/snippets/configs/{r['config']}.jsx"
        assert src["url"] == f"https://github.com/sgl-project/sglang/blob/{src['commit']}/{src['path']}"
        assert r["models"] and r["cells"], r["config"]
        for cell in r["cells"]:
            assert all(words[0].startswith("--") for words in cell["flags"]), (r["config"], cell)
    assert {"h100", "h200", "b200"} <= set(DATA["hardware"])


# ------------------------------------------------------------------ the lookup


def test_a_gpu_is_the_docs_hardware_by_its_name_or_offline_by_its_memory():
    assert recipes.hardware_of("NVIDIA H100 80GB HBM3") == "h100"
    assert recipes.hardware_of("NVIDIA H200") == "h200"
    assert recipes.hardware_of("NVIDIA GB200") == "gb200"  # not b200
    assert recipes.hardware_of("AMD Instinct MI300X") == "mi300x"
    assert recipes.hardware_of("NVIDIA L40S") is None  # in no recipe
    assert recipes.hardware_of(None, 141 * 1024**3) == "h200"
    assert recipes.hardware_of(None, 192 * 1024**3) is None  # B200 and GB200 alike: memory cannot tell
    assert recipes.hardware_of(None, 24 * 1024**3) is None


def test_a_checkpoints_command_is_its_hardwares_first_cell_of_the_pages_first_strategy():
    h200 = recipes.official("zai-org/GLM-5.2-FP8", "NVIDIA H200", 141 * 1024**3, 8)
    assert h200 is not None and (h200.config, h200.hw, h200.quant) == ("zai-org/glm-5.2", "h200", "fp8")
    data = next(r for r in DATA["recipes"] if r["config"] == "zai-org/glm-5.2")
    assert h200.strategy == data["cells"][0]["strategy"]  # the page's first cell's strategy, on this hardware
    assert h200.tp == 8 and h200.source.startswith("glm-5.2.jsx@" + data["source"]["commit"][:10])
    # the same id in another case is the same checkpoint; too few GPUs or a multi-node only hardware: none
    assert recipes.official("ZAI-ORG/glm-5.2-fp8", "NVIDIA H200", 0, 8) == h200
    assert recipes.official("zai-org/GLM-5.2-FP8", "NVIDIA H200", 0, 4) is None
    assert recipes.official("nvidia/NVIDIA-Nemotron-3-Ultra-550B-A55B-BF16", "NVIDIA H200", 0, 8) is None
    assert recipes.official("Qwen/Qwen3-8B", "NVIDIA H200", 0, 8) is None  # in no recipe


# ------------------------------------------------------------------ gpuops' plans against them

from pathlib import Path  # noqa: E402

from gpuops.core.domain import split_flags  # noqa: E402
from gpuops.core.planning.inputs import GpuInfo, Target, Wishes  # noqa: E402
from gpuops.core.planning.model_facts import facts_from_config  # noqa: E402
from gpuops.core.planning.plan import build_plan  # noqa: E402
from gpuops.core.engines.sglang import versions as sv  # noqa: E402

CONFIGS = Path(__file__).parent / "data" / "configs"
VERSION = "0.5.23"
# The GPUs planned on, as nvidia-smi names them and the memory it reports (MiB): H100 and H200 as this
# project's device runs saw them, B200 as its "180GB" (the docs' catalog says 192GB: the units differ).
# The others' memory as nvidia-smi reports it is not known here: left out rather than guessed.
GPUS = {"h100": ("NVIDIA H100 80GB HBM3", 81559), "h200": ("NVIDIA H200", 143771), "b200": ("NVIDIA B200", 183359)}
# Where gpuops' plan differs from the published command on purpose, with why (the test pins each).
DIFFERENT = {
    ("Qwen/Qwen3.6-35B-A3B", "h100", "tp"): "its BF16 weights (~70 GB) do not fit one 80 GB H100 at the command's "
                                           "--mem-fraction-static 0.8 (64 GB): gpuops takes TP2 and says why",
}


def corpus_models() -> list[tuple[str, Path]]:
    """(checkpoint id, config file) of the configs in tests/data/configs whose checkpoint a recipe lists."""
    out = []
    for f in sorted(CONFIGS.glob("*.json")) + sorted((CONFIGS / "corpus").glob("*.json")):
        name = f.stem.split("__", 1)[-1].lower()
        ids = {v for r in DATA["recipes"] for v in r["models"].values() if v.rsplit("/", 1)[-1].lower() == name}
        if len(ids) == 1:
            out.append((ids.pop(), f))
    return out


def cases() -> list[tuple[str, Path, str]]:
    out = []
    for model, f in corpus_models():
        recipe, variant, quant = recipes.for_model(model)
        hws = sorted({c["hw"] for c in recipe["cells"] if (c["variant"], c["quant"], c["nodes"]) == (variant, quant, "single")
                      and c["hw"] in GPUS})
        out += [(model, f, hw) for hw in hws]
    return out


def compare(model: str, config: Path, hw: str) -> dict[str, tuple[object, object]]:
    """{what: (the published command's, gpuops' plan's)} for one checkpoint on one node of `hw`."""
    name, mib = GPUS[hw]
    official = recipes.official(model, name, mib * 1024**2, 8)
    assert official is not None
    facts = facts_from_config(json.loads(config.read_text()), id=model, source="hub")
    target = Target(host=None, gpus=tuple(GpuInfo(i, mib * 1024**2, name=name) for i in range(8)), engine_version=None)
    plan = build_plan(facts, target, Wishes(engine_version=VERSION))
    flags = dict(split_flags(plan.argv))
    out: dict[str, tuple[object, object]] = {"tp": (official.tp, plan.tp)}
    if facts.mtp_layers and official.value("--speculative-draft-model-path") is None:
        out["speculative"] = (official.speculative, "--speculative-algorithm" in flags)
    out["trust-remote-code"] = (official.value("--trust-remote-code") is not None, "--trust-remote-code" in flags)
    if official.mem_fraction is not None:
        out["mem-fraction"] = (official.mem_fraction, float(flags["--mem-fraction-static"][0]))
    if official.expert_parallel is not None:
        out["expert-parallel"] = (official.expert_parallel, int(flags["--ep-size"][0]) if "--ep-size" in flags else None)
    for which, flag in (("reasoning", "--reasoning-parser"), ("tool_call", "--tool-call-parser")):
        published = recipes.parser_for(model, which)
        known = sv.reasoning_parsers(VERSION) if which == "reasoning" else sv.tool_call_parsers(VERSION)
        if published is not None and published[0] in known:
            out[which] = (published[0], (flags.get(flag) or (None,))[0])
    return out


CASES = cases()


def test_the_corpus_has_checkpoints_of_the_recipes_on_several_gpus():
    assert len({m for m, _, _ in CASES}) >= 7 and len(CASES) >= 15, CASES


@pytest.mark.parametrize("model,config,hw", CASES, ids=[f"{m.rsplit('/', 1)[-1]}-{hw}" for m, _, hw in CASES])
def test_the_plan_follows_the_published_command_or_says_why_not(model, config, hw):
    got = compare(model, config, hw)
    differ = {what: pair for what, pair in got.items() if pair[0] != pair[1]}
    assert set(differ) == {what for (m, h, what) in DIFFERENT if (m, h) == (model, hw)}, differ


def figures() -> str:
    """How many of the corpus' plans match the published command, per check."""
    return (f"published commands: {len(CASES)} plans ({len({m for m, _, _ in CASES})} checkpoints, one node of each GPU "
            "their recipe has) — " + ", ".join(f"{what} {a}/{b}" for what, (a, b) in tally().items()))


def test_the_readme_gives_the_figures_the_corpus_computes():
    readme = " ".join((Path(__file__).parents[1] / "README.md").read_text().split())  # (its lines rewrapped)
    checkpoints = len({m for m, _, _ in CASES})
    assert f"{len(CASES)} plans of the {checkpoints} corpus checkpoints" in readme
    names = {"tp": "TP", "speculative": "speculative decoding", "trust-remote-code": "`--trust-remote-code`",
             "reasoning": "reasoning parser", "tool_call": "tool-call parser",
             "mem-fraction": "`--mem-fraction-static`", "expert-parallel": "expert parallelism"}
    for what, (a, b) in tally().items():
        assert f"{names[what]} **{a}/{b}**" in readme, (what, a, b)
    assert f"{len(DATA['recipes'])} models' recipes" in readme


def tally() -> dict[str, tuple[int, int]]:
    """{check: (plans that match the published command, plans checked)} over the corpus' cases."""
    out: dict[str, list[int]] = {}
    for model, config, hw in CASES:
        for what, (want, have) in compare(model, config, hw).items():
            t = out.setdefault(what, [0, 0])
            t[0] += want == have
            t[1] += 1
    return {what: (a, b) for what, (a, b) in out.items()}


if __name__ == "__main__":
    print(figures())


# ------------------------------------------------------------------ speculative decoding: who decides

from dataclasses import replace  # noqa: E402

from gpuops.core import engines  # noqa: E402
from gpuops.core.planning.inputs import Previous  # noqa: E402

QWEN122 = ("Qwen/Qwen3.5-122B-A10B", CONFIGS / "qwen3_5__Qwen3.5-122B-A10B.json")
H200 = GPUS["h200"]


def h200_target(n: int = 8) -> Target:
    return Target(host=None, gpus=tuple(GpuInfo(i, H200[1] * 1024**2, name=H200[0]) for i in range(n)), engine_version=None)


def test_speculative_decoding_is_the_operators_then_the_previous_deployments_then_the_published_commands():
    model, config = QWEN122
    facts = facts_from_config(json.loads(config.read_text()), id=model, source="hub")
    sglang = engines.get("sglang")
    on = recipes.official(model, H200[0], H200[1] * 1024**2, 8)
    assert on is not None and on.speculative
    # the same command without its speculative flags: a page that leaves it off for these GPUs
    off = replace(on, flags=tuple((f, v) for f, v in on.flags if f not in recipes.SPEC_FLAGS))
    assert sglang.mtp_default(facts, Wishes(), on) is True
    assert sglang.mtp_default(facts, Wishes(), off) is False
    assert sglang.mtp_default(facts, Wishes(), None) is True  # no published command: on
    ran_it = Previous("old-unit", ("--model-path", "/m", "--speculative-algorithm=NEXTN"))
    assert sglang.mtp_default(facts, Wishes(like=ran_it), off) is True  # --like ran it: as before


def test_a_command_that_leaves_it_off_is_followed_and_the_plan_says_what_turning_it_on_costs(monkeypatch):
    model, config = QWEN122
    facts = facts_from_config(json.loads(config.read_text()), id=model, source="hub")
    on = recipes.official(model, H200[0], H200[1] * 1024**2, 8)
    off = replace(on, flags=tuple((f, v) for f, v in on.flags if f not in recipes.SPEC_FLAGS))
    # (the corpus' checkpoints have no such command on these GPUs: the lookup gives this one instead)
    monkeypatch.setattr(recipes, "official", lambda *a: off)
    plan = build_plan(facts, h200_target(), Wishes(engine_version=VERSION))
    assert "--speculative-algorithm" not in plan.argv and plan.tp == off.tp
    (offer,) = [w for w in plan.warnings if w.startswith("speculative decoding off")]
    assert offer.startswith(f"speculative decoding off, as the published command for these GPUs has it ({off.source}); "
                            "the checkpoint has 1 MTP layer(s): --mtp (plan review: m) turns it on (then at most 48 "
                            "requests run at once, not 128; KV cache ")
    with_it, without = (int(n.replace(",", "")) for n in re.findall(r"KV cache ([\d,]+) tokens instead of ([\d,]+)\)", offer)[0])
    assert without == plan.fit.max_total_tokens and with_it > 0  # (the fit's own figures for each)
    assert not any("speculative decoding is off (" in w for w in plan.warnings)  # said once, with why
    forced = build_plan(facts, h200_target(), Wishes(engine_version=VERSION, mtp=True))
    assert "--speculative-algorithm" in forced.argv and not any(w.startswith("speculative decoding off") for w in forced.warnings)
    refused = build_plan(facts, h200_target(), Wishes(engine_version=VERSION, mtp=False))
    assert "--speculative-algorithm" not in refused.argv
    assert "the checkpoint has MTP layers but speculative decoding is off (--no-mtp)" in refused.warnings


def test_mtp_and_no_mtp_on_the_command_line_are_one_choice():
    from gpuops.cli.main import build_parser
    from gpuops.cli.plan import request_from_args

    parser = build_parser()
    for words, want in (([], None), (["--mtp"], True), (["--no-mtp"], False), (["--mtp", "--no-mtp"], False)):
        args = parser.parse_args(["plan", "Qwen/Qwen3.5-122B-A10B", *words])
        assert request_from_args(args).mtp is want, words


def test_the_published_commands_expert_parallelism_and_memory_share_are_followed_at_its_tp():
    """Qwen3.5-397B-A17B-FP8 on eight H200s: SGLang's command is --tp 8 --ep 8 --mem-fraction-static 0.8
    (qwen3.5.jsx, h200 low-latency); the plan takes all three, each rule naming it. At TP4 (--tp 4, which
    the command does not run) neither its --ep nor its share is the plan's."""
    config = json.loads((CONFIGS / "corpus" / "qwen3_5_moe__Qwen3.5-397B-A17B.json").read_text())
    config["quantization_config"] = {"quant_method": "fp8", "fmt": "e4m3", "weight_block_size": [128, 128],
                                     "activation_scheme": "dynamic"}
    facts = facts_from_config(config, id="Qwen/Qwen3.5-397B-A17B-FP8", source="hub")
    official = recipes.official(facts.id, H200[0], H200[1] * 1024**2, 8)
    assert official is not None and (official.tp, official.expert_parallel, official.mem_fraction) == (8, 8, 0.8)
    plan = build_plan(facts, h200_target(), Wishes(engine_version=VERSION))
    flags = dict(split_flags(plan.argv))
    assert plan.tp == 8 and flags["--ep-size"] == ("8",) and flags["--mem-fraction-static"] == ("0.8",)
    why = {r.id: r.why for r in plan.rules}
    assert why["expert-parallel"].startswith("the experts spread over 8 GPUs (expert parallelism), as SGLang's "
                                             "published command for these GPUs runs them (qwen3.5.jsx@")
    assert "(as SGLang's published command for these GPUs has it: qwen3.5.jsx@" in why["mem-fraction"]
    at_tp4 = build_plan(facts, h200_target(), Wishes(tp=4, engine_version=VERSION))
    flags4 = dict(split_flags(at_tp4.argv))
    assert "--ep-size" not in flags4
    assert not any(r.id == "mem-fraction" and "published" in r.why for r in at_tp4.rules)
