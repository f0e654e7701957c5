"""The planner over every published config the tests hold (issue 25: at least 40 models across the
engine's families): model facts against the size each model's name states (and the published byte
count where one was found: tests/test_models.py), the architecture against SGLang's model registry,
a TP the engine can run, and --trust-remote-code where the version needs it.

Where gpuops is still wrong about a model the gap is listed below with why; the test pins each gap,
so one that closes must come off the list. Run this file directly for the figures
(``python tests/test_corpus.py``).
"""

from __future__ import annotations

import json
import re
import sys
from dataclasses import dataclass
from pathlib import Path

import pytest

if __name__ == "__main__":  # the figures, run as a script from the checkout
    sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from gpuops.core import engines
from gpuops.core.engines.sglang import models as sglang_models
from gpuops.core.engines.sglang.remote_code import remote_code
from gpuops.core.planning.hostfacts import offline_target
from gpuops.core.planning.model_facts import ModelFacts, facts_from_config
from gpuops.core.planning.plan import PlanError, Wishes, build_plan

CONFIGS = Path(__file__).parent / "data" / "configs"
VERSION = "0.5.23"
H200_GIB = 143771 / 1024

# Where gpuops' model facts are still wrong, and why (the test checks each is still wrong).
SIZE_GAPS = {
    "Llama-3_3-Nemotron-Super-49B-v1": "DeciLM (nemotron-nas) sets each layer's attention and FFN width in "
                                       "block_configs; gpuops reads the model as uniform layers",
}
ACTIVE_GAPS = {
    "gemma-4-26B-A4B": "Gemma 4's MoE layers also run a dense MLP beside the experts (enable_moe_block): not counted",
}
# The registry's answer where SGLang serves the architecture only through its transformers fallback.
NOT_SERVED = {"Olmo-3.1-32B-Instruct": "SGLang 0.5.23 registers Olmo3's config but has no Olmo3ForCausalLM"}


@dataclass(frozen=True)
class Model:
    name: str
    path: Path

    def facts(self) -> ModelFacts:
        tok = CONFIGS / "tokenizers" / self.path.name
        return facts_from_config(json.loads(self.path.read_text()), id=f"corpus/{self.name}", source="hub",
                                 tokenizer_config=json.loads(tok.read_text()) if tok.is_file() else None)


def corpus() -> list[Model]:
    """Every config, once: the main folder (with real sizes), the recipes' and the wider corpus."""
    seen: dict[str, Model] = {}
    for folder in (CONFIGS, CONFIGS / "recipes", CONFIGS / "corpus"):
        for p in sorted(folder.glob("*.json")):
            name = p.stem.split("__", 1)[1]
            seen.setdefault(name, Model(name, p))
    return list(seen.values())


MODELS = corpus()
CASES = [pytest.param(m, id=m.name) for m in MODELS]


def stated(name: str) -> tuple[float | None, float | None]:
    """(total, active) billions of parameters the model's name states: "…-35B-A3B", "gpt-oss-20b";
    None where it states none (a count of experts, 8x22B, is not read as a size)."""
    total = re.search(r"(?<![\dxA.])(\d+(?:\.\d+)?)[Bb](?![a-z])", name)
    active = re.search(r"-A(\d+(?:\.\d+)?)B", name)
    return (float(total.group(1)) if total else None), (float(active.group(1)) if active else None)


def within(value: float, stated_b: float, tolerance: float) -> bool:
    return abs(value / 1e9 - stated_b) <= tolerance * stated_b


def active_without_embeddings(model: Model, facts: ModelFacts) -> int:
    """The active parameters as MoE names count them ("A3B": Qwen's "3B activated"): without the
    embedding table and the output head."""
    config = json.loads(model.path.read_text())
    text = config.get("text_config") if isinstance(config.get("text_config"), dict) else config
    tied = bool(text.get("tie_word_embeddings", config.get("tie_word_embeddings")))
    return (facts.active_params or 0) - (facts.vocab_size or 0) * (facts.hidden_size or 0) * (1 if tied else 2)


def test_the_corpus_is_wide():
    assert len(MODELS) >= 40
    families = {m.facts().model_type for m in MODELS}
    assert len(families) >= 20, sorted(f or "?" for f in families)
    for p in (CONFIGS / "corpus").glob("*.json"):  # each has its source
        assert f"`{p.name}`" in (CONFIGS / "corpus" / "SOURCES.md").read_text(), p.name


@pytest.mark.parametrize("model", CASES)
def test_the_parameters_agree_with_the_size_the_name_states(model: Model):
    """Names round (120B for 124.7B): 10% for the total; 20% for the active part, counted as such names
    count it (without the embeddings)."""
    total, active = stated(model.name)
    if total is None and active is None:
        pytest.skip("its name states no size (its published byte count is checked in test_models where known)")
    facts = model.facts()
    if total is not None:
        assert within(facts.params, total, 0.10) != (model.name in SIZE_GAPS), \
            (facts.params, total, SIZE_GAPS.get(model.name, "a new gap: find why, or list it"))
    if active is not None:
        counted = active_without_embeddings(model, facts)
        assert within(counted, active, 0.20) != (model.name in ACTIVE_GAPS), \
            (counted, active, ACTIVE_GAPS.get(model.name, "a new gap: find why, or list it"))


@pytest.mark.parametrize("model", CASES)
def test_sglang_serves_the_architecture_or_the_plan_says_it_does_not(model: Model):
    facts = model.facts()
    served = sglang_models.served(facts.architecture or "", VERSION) is not None
    assert served != (model.name in NOT_SERVED), (facts.architecture, NOT_SERVED.get(model.name))
    if not served:
        plan = build_plan(facts, offline_target(8, H200_GIB), Wishes(engine_version=VERSION))
        assert any("has no model of its own" in w for w in plan.warnings), plan.warnings


@pytest.mark.parametrize("model", CASES)
def test_the_tp_chosen_is_one_the_engine_can_run(model: Model):
    facts = model.facts()
    try:
        plan = build_plan(facts, offline_target(8, H200_GIB), Wishes(engine_version=VERSION))
    except PlanError as e:  # too big for 8 of them: said so, nothing planned
        assert "fit" in str(e), str(e)
        return
    assert engines.get("sglang").tp_refusal(facts, plan.tp) is None, (plan.tp, facts.num_attention_heads,
                                                                        facts.num_kv_heads)
    assert plan.tp in (1, 2, 4, 8)


def test_trust_remote_code_goes_to_the_checkpoints_that_need_it():
    need = sorted(m.name for m in MODELS if remote_code(m.facts(), VERSION).needed)
    # Kimi-K2's tokenizer is tokenization_kimi.py; DeciLM's model_type nemotron-nas is no transformers 5.19 type
    assert need == ["Kimi-K2-Instruct", "Llama-3_3-Nemotron-Super-49B-v1"], need


def figures() -> list[str]:
    sized = [(m, stated(m.name)) for m in MODELS]
    total_checked = [(m, t) for m, (t, _) in sized if t is not None]
    total_ok = sum(within(m.facts().params, t, 0.10) for m, t in total_checked)
    active_checked = [(m, a) for m, (_, a) in sized if a is not None]
    active_ok = sum(within(active_without_embeddings(m, m.facts()), a, 0.20) for m, a in active_checked)
    served = sum(sglang_models.served(m.facts().architecture or "", VERSION) is not None for m in MODELS)
    families = len({m.facts().model_type for m in MODELS})
    return [f"corpus: {len(MODELS)} published configs, {families} model types",
            f"parameters within 10% of the size the name states: {total_ok}/{len(total_checked)}; "
            f"active (without embeddings) within 20%: {active_ok}/{len(active_checked)}",
            f"architectures SGLang {VERSION} serves itself: {served}/{len(MODELS)}",
            "needing --trust-remote-code on " + VERSION + ": "
            + ", ".join(m.name for m in MODELS if remote_code(m.facts(), VERSION).needed)]


def test_figures(capsys):
    lines = figures()
    with capsys.disabled():
        print("\n" + "\n".join(lines))
    assert lines[0].startswith(f"corpus: {len(MODELS)}")



def test_new_shapes_are_read_from_their_own_keys():
    """Gemma 4 names its active experts top_k_experts; Nemotron 3 Ultra lists its layers
    (layers_block_type) without a count; Nemotron 3 Super's experts work in moe_latent_size."""
    by_name = {m.name: m for m in MODELS}
    gemma = by_name["gemma-4-26B-A4B"].facts()
    assert gemma.moe is not None and gemma.moe.active_experts == 8 and "num_experts_per_tok" not in gemma.missing
    ultra = by_name["NVIDIA-Nemotron-3-Ultra-550B-A55B-BF16"].facts()
    assert ultra.num_layers == 108 and ultra.hybrid is not None and not ultra.missing
    super_ = by_name["NVIDIA-Nemotron-3-Super-120B-A12B-FP8"]
    config = json.loads(super_.path.read_text())
    wide = facts_from_config({k: v for k, v in config.items() if k != "moe_latent_size"}, id="x")
    assert super_.facts().params < wide.params / 3  # 512 experts of 1024 wide, not 4096


if __name__ == "__main__":
    print("\n".join(figures()))
