"""Tests for gpuops.core.planning.model_facts on real published configs (tests/data/configs, sources in
SOURCES.md), real HF cache layouts, and real huggingface_hub code against a local fake Hub."""

from __future__ import annotations

import http.server
import json
import os
import subprocess
import sys
import threading
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from tests.ports import free_port
from gpuops.core.planning.model_facts import (
    ModelError,
    ModelFacts,
    facts_from_config,
    load_model_facts,
    validate_model_ref,
)

CONFIGS = Path(__file__).parent / "data" / "configs"

# Real checkpoint sizes in bytes; where each figure comes from is in data/configs/SOURCES.md.
REAL_BYTES = {
    "llama3__Llama-3.1-8B-Instruct": 16_060_522_496,
    "llama3__Llama-3.1-70B-Instruct": 141_107_412_992,
    "qwen2_5__Qwen2.5-7B-Instruct": 15_231_233_024,
    "qwen2_5__Qwen2.5-72B-Instruct": 145_412_407_296,
    "qwen3__Qwen3-8B": 16_381_470_720,
    "qwen3__Qwen3-32B": 65_524_246_528,
    "qwen3_moe__Qwen3-30B-A3B": 61_064_245_248,
    "qwen3_moe__Qwen3-235B-A22B-Instruct-2507": 470_187_269_120,
    "qwen3_next__Qwen3-Next-80B-A3B-Instruct": 81_324_862_720 * 2,
    "qwen3_5__Qwen3.5-122B-A10B": 250_170_000_000,
    "mixtral__Mixtral-8x7B-v0.1": 93_405_585_408,
    "deepseek_v3__DeepSeek-V3": 688_586_727_753,
    "kimi_k2__Kimi-K2-Instruct": 1_029_170_800_885,
    "gpt_oss__gpt-oss-120b": 65_248_815_744,
    "nemotron_h__NVIDIA-Nemotron-3-Nano-30B-A3B-BF16": 63_200_000_000,  # 31.6B (rounded) x 2 bytes
}


def real_config(name: str) -> dict[str, Any]:
    config: dict[str, Any] = json.loads((CONFIGS / f"{name}.json").read_text())
    return config


def facts(name: str) -> ModelFacts:
    return facts_from_config(real_config(name), id=name.split("__")[1])


def test_every_collected_config_has_a_real_size() -> None:
    assert sorted(p.stem for p in CONFIGS.glob("*.json")) == sorted(REAL_BYTES)


@pytest.mark.parametrize("name", sorted(REAL_BYTES))
def test_computed_size_is_within_half_a_percent_of_the_real_checkpoint(name: str) -> None:
    f = facts(name)
    assert f.checkpoint_bytes_source == "computed"
    real = REAL_BYTES[name]
    error = (f.checkpoint_bytes - real) / real * 100
    print(f"{name}: computed {f.checkpoint_bytes:,} real {real:,} error {error:+.3f}%")
    assert abs(error) < 0.5  # (the largest today: Nemotron-3-Nano's 0.07%, against a rounded published count)
    assert f.missing == ()
    assert f.known_architecture


# --------------------------------------------------------------------------- traits


def test_llama_dense_traits_and_kv_bytes() -> None:
    f = facts("llama3__Llama-3.1-8B-Instruct")
    assert (f.family, f.architecture, f.model_type) == ("llama3", "LlamaForCausalLM", "llama")
    assert (f.num_layers, f.num_kv_heads, f.head_dim) == (32, 8, 128)
    assert f.moe is None and f.mla is None and f.hybrid is None and f.quant is None
    assert f.mtp_layers == 0 and f.mtp_bytes == 0
    assert f.dtype == "bfloat16"
    assert f.context_length == 131072
    assert f.params == f.active_params == 8_030_261_248
    assert f.kv_bytes_per_token() == 32 * 2 * 8 * 128 * 2 == 131072
    assert f.kv_bytes_per_token(dtype_bytes=1) == 65536


def test_nemotron_h_one_mixer_a_layer_hybrid_moe() -> None:
    """Nemotron-3-Nano-30B-A3B (issue 25: counted as 102B parameters and 205 GB, as if each of its 52
    layers were attention plus gated experts): a layer holds one mixer, by its hybrid_override_pattern,
    23 Mamba-2, 23 of relu2 experts (up and down only), 6 attention. NVIDIA: 31.6B total, 3.6B active
    with the embeddings."""
    f = facts("nemotron_h__NVIDIA-Nemotron-3-Nano-30B-A3B-BF16")
    assert f.known_architecture and f.missing == ()
    assert abs(f.params - 31.6e9) / 31.6e9 < 0.002  # the published figure is rounded to 0.1B
    assert f.active_params is not None and 3.5e9 < f.active_params < 3.7e9
    assert f.hybrid is not None
    assert (f.hybrid.full_attention_layers, f.hybrid.linear_attention_layers) == (6, 23)
    # the KV cache of the 6 attention layers only: 2 KV heads of 128, K and V, BF16
    assert f.kv_bytes_per_token() == 6 * 2 * 2 * 128 * 2
    # each request's Mamba-2 state: the convolution's (x, B, C: 4096 + 2*8*128, 3 steps, BF16) and the
    # SSM's (64 heads x 64 x 128 state, float32), in each of the 23 Mamba layers
    assert f.hybrid.state_bytes_per_request == 23 * ((4096 + 2 * 8 * 128) * 3 * 2 + 64 * 64 * 128 * 4)
    assert f.moe is not None and (f.moe.num_experts, f.moe.active_experts) == (128, 6)
    assert f.moe.dense_layers == 29  # the layers without experts: Mamba and attention
    # a pattern that does not name every layer is said, and the layers are counted the usual way
    short = dict(real_config("nemotron_h__NVIDIA-Nemotron-3-Nano-30B-A3B-BF16"), hybrid_override_pattern="MEM*")
    assert "hybrid_override_pattern" in facts_from_config(short, id="x").missing


def test_qwen_dense_families() -> None:
    assert facts("qwen2_5__Qwen2.5-72B-Instruct").family == "qwen2_5"
    qwen3 = facts("qwen3__Qwen3-8B")
    assert qwen3.family == "qwen3"
    assert qwen3.head_dim == 128  # not in this copy of the config: hidden / heads
    assert qwen3.context_length == 40960


def test_mixtral_moe_traits() -> None:
    f = facts("mixtral__Mixtral-8x7B-v0.1")
    assert f.family == "mixtral"
    assert f.moe is not None
    assert (f.moe.num_experts, f.moe.active_experts, f.moe.shared_experts) == (8, 2, 0)
    assert f.moe.dense_layers == 0
    assert f.active_params is not None and 12.5e9 < f.active_params < 13.2e9  # "12.9B active"


def test_qwen3_moe_traits() -> None:
    small = facts("qwen3_moe__Qwen3-30B-A3B")
    big = facts("qwen3_moe__Qwen3-235B-A22B-Instruct-2507")
    assert small.family == big.family == "qwen3_moe"
    assert small.moe is not None and big.moe is not None
    assert (small.moe.num_experts, small.moe.active_experts, small.moe.shared_experts) == (128, 8, 0)
    assert big.moe.moe_intermediate_size == 1536
    assert small.params == 30_532_122_624 and small.active_params == 3_353_032_704
    assert big.active_params is not None and 21.5e9 < big.active_params < 22.5e9  # "A22B"
    assert big.context_length == 262144
    assert facts_from_config(
        real_config("qwen3_moe__Qwen3-30B-A3B"), id="Qwen/Qwen3-Coder-30B-A3B-Instruct"
    ).family == "qwen3_coder"


def test_qwen3_next_is_flat_hybrid_with_an_mtp_layer() -> None:
    f = facts("qwen3_next__Qwen3-Next-80B-A3B-Instruct")
    assert f.family == "qwen3_next"
    assert f.hybrid is not None
    assert (f.hybrid.full_attention_layers, f.hybrid.linear_attention_layers) == (12, 36)
    # per linear layer: conv (8192 channels x 3 taps, bf16) + ssm (32 heads x 128 x 128, fp32)
    assert f.hybrid.state_bytes_per_request == 36 * (8192 * 3 * 2 + 32 * 128 * 128 * 4)
    assert f.moe is not None
    assert (f.moe.num_experts, f.moe.active_experts, f.moe.shared_experts) == (512, 10, 1)
    assert f.mtp_layers == 1  # the checkpoint ships mtp.* although the config has no field
    assert f.params == 81_324_862_720
    assert f.kv_bytes_per_token() == 12 * 2 * 2 * 256 * 2


def test_qwen3_5_nested_config_hybrid_mtp_and_vision() -> None:
    f = facts("qwen3_5__Qwen3.5-122B-A10B")
    assert (f.family, f.architecture, f.model_type) == (
        "qwen3_5", "Qwen3_5MoeForConditionalGeneration", "qwen3_5_moe")
    assert (f.hidden_size, f.num_layers, f.vocab_size) == (3072, 48, 248320)
    assert f.hybrid is not None
    assert f.hybrid.full_attention_layers == 12  # the model card: 12 of 48 layers full attention
    assert f.hybrid.linear_attention_layers == 36
    assert f.moe is not None
    assert (f.moe.num_experts, f.moe.active_experts, f.moe.shared_experts) == (256, 8, 1)
    assert f.mtp_layers == 1
    assert 2.4e9 < f.mtp_bytes < 5.5e9
    assert f.dtype == "bfloat16"
    assert f.context_length == 262144
    assert f.kv_bytes_per_token() == 24576
    assert f.active_params is not None and 9e9 < f.active_params < 11e9  # "A10B"
    without_vision = dict(real_config("qwen3_5__Qwen3.5-122B-A10B"))
    del without_vision["vision_config"]
    assert facts_from_config(without_vision, id="x").params < f.params - 4e8


def test_deepseek_v3_mla_moe_fp8_blocks_and_mtp() -> None:
    f = facts("deepseek_v3__DeepSeek-V3")
    assert f.family == "deepseek_v3"
    assert f.mla is not None
    assert (f.mla.kv_lora_rank, f.mla.qk_rope_head_dim, f.mla.q_lora_rank) == (512, 64, 1536)
    assert (f.mla.qk_nope_head_dim, f.mla.v_head_dim) == (128, 128)
    assert f.moe is not None
    assert (f.moe.num_experts, f.moe.active_experts, f.moe.shared_experts) == (256, 8, 1)
    assert f.moe.dense_layers == 3
    assert f.quant is not None
    assert (f.quant.method, f.quant.block_size, f.quant.quantization) == ("fp8", (128, 128), None)
    assert f.mtp_layers == 1
    assert 11e9 < f.mtp_bytes < 16e9  # one MoE layer + its embed/head copies
    assert 684e9 < f.params < 686e9  # "685B" on the Hub: 671B + 14B MTP
    assert f.active_params is not None and 36e9 < f.active_params < 38e9  # "37B activated"
    assert f.context_length == 163840
    assert f.kv_bytes_per_token() == 61 * (512 + 64) * 2
    assert f.to_json()["quant"] == "fp8"


def test_kimi_k2_is_its_own_family() -> None:
    f = facts("kimi_k2__Kimi-K2-Instruct")
    assert (f.family, f.architecture) == ("kimi_k2", "DeepseekV3ForCausalLM")
    assert f.moe is not None
    assert (f.moe.num_experts, f.moe.active_experts, f.moe.dense_layers) == (384, 8, 1)
    assert f.mtp_layers == 0 and f.mtp_bytes == 0
    assert f.mla is not None and f.quant is not None and f.quant.method == "fp8"
    assert 1.02e12 < f.params < 1.04e12  # "1T parameters"


def test_gpt_oss_mxfp4_experts() -> None:
    f = facts("gpt_oss__gpt-oss-120b")
    assert f.family == "gpt_oss"
    assert f.quant is not None and f.quant.method == "mxfp4"
    assert f.dtype is None  # the config does not say; the unquantized parts are priced as bf16
    assert f.moe is not None and (f.moe.num_experts, f.moe.active_experts) == (128, 4)
    assert f.hybrid is None  # sliding-window layers are not linear attention
    assert 116.5e9 < f.params < 117.1e9  # "116.8B parameters"
    assert f.checkpoint_bytes < f.params * 0.6  # 4.25 bits per expert weight


# --------------------------------------------------------------------------- partial and odd configs


def test_partial_config_lists_what_is_missing_and_does_not_crash() -> None:
    config = real_config("llama3__Llama-3.1-8B-Instruct")
    del config["hidden_size"], config["torch_dtype"]
    f = facts_from_config(config, id="x")
    assert f.missing == ("hidden_size", "torch_dtype")
    assert f.hidden_size is None
    assert f.checkpoint_bytes_source == "computed"
    assert facts_from_config({}, id="empty").missing == (
        "hidden_size", "num_hidden_layers", "vocab_size", "num_attention_heads",
        "torch_dtype", "intermediate_size")
    assert facts_from_config({"text_config": "junk", "architectures": [3]}, id="odd").family == "unknown"


def test_index_total_size_then_file_sizes_then_computed() -> None:
    config = real_config("qwen3__Qwen3-8B")
    index = {"metadata": {"total_size": 16_381_470_720}, "weight_map": {}}
    by_index = facts_from_config(config, id="x", index=index, file_sizes={"a.safetensors": 5})
    assert (by_index.checkpoint_bytes, by_index.checkpoint_bytes_source) == (16_381_470_720, "index")
    by_files = facts_from_config(
        config, id="x", index={"weight_map": {}},
        file_sizes={"model-1.safetensors": 10, "model-2.safetensors": 20, "README.md": 99})
    assert (by_files.checkpoint_bytes, by_files.checkpoint_bytes_source) == (30, "files")


def test_unknown_architecture_counts_params_from_the_checkpoint() -> None:
    config = {"architectures": ["FancyNewForCausalLM"], "model_type": "fancy", "torch_dtype": "bfloat16",
              "hidden_size": 1024, "num_hidden_layers": 2, "vocab_size": 1000,
              "num_attention_heads": 8, "intermediate_size": 4096}
    f = facts_from_config(config, id="x", file_sizes={"model.safetensors": 2_000_000})
    assert not f.known_architecture and f.family == "unknown"
    assert f.params == f.active_params == 1_000_000


def test_quantization_methods() -> None:
    base = real_config("qwen3__Qwen3-32B")
    nvfp4 = facts_from_config(
        {**base, "quantization_config": {"quant_method": "modelopt", "quant_algo": "NVFP4",
                                         "exclude_modules": ["lm_head", "model.layers.*.self_attn*"]}},
        id="nvidia/Qwen3-32B-FP4")
    assert nvfp4.quant is not None
    assert (nvfp4.quant.method, nvfp4.quant.quantization) == ("nvfp4", "modelopt_fp4")
    awq = facts_from_config(
        {**base, "quantization_config": {"quant_method": "awq", "bits": 4, "group_size": 128}}, id="x")
    gptq = facts_from_config(
        {**base, "quantization_config": {"quant_method": "gptq", "bits": 4, "group_size": 128}}, id="x")
    ct = facts_from_config(
        {**base, "quantization_config": {
            "quant_method": "compressed-tensors", "ignore": ["lm_head"],
            "config_groups": {"group_0": {"weights": {"num_bits": 8, "group_size": None}}}}}, id="x")
    assert [q.quant.method for q in (awq, gptq, ct) if q.quant] == ["awq", "gptq", "compressed-tensors"]
    bf16 = facts("qwen3__Qwen3-32B").checkpoint_bytes
    # 4-bit weights shrink the layers ~3.5x; embeddings and the head stay 16-bit
    assert 0.25 * bf16 < awq.checkpoint_bytes == gptq.checkpoint_bytes < 0.35 * bf16
    assert 0.25 * bf16 < nvfp4.checkpoint_bytes < 0.45 * bf16  # attention excluded: bf16
    assert 0.5 * bf16 < ct.checkpoint_bytes < 0.55 * bf16
    assert nvfp4.params == awq.params == facts("qwen3__Qwen3-32B").params


def test_context_length_follows_sglang_rope_rules() -> None:
    base = real_config("qwen3__Qwen3-8B")
    yarn_with_original = {**base, "rope_scaling": {"type": "yarn", "factor": 4.0,
                                                  "original_max_position_embeddings": 32768}}
    assert facts_from_config(yarn_with_original, id="x").context_length == 40960
    linear = {**base, "rope_scaling": {"type": "linear", "factor": 2.0}}
    assert facts_from_config(linear, id="x").context_length == 81920
    assert facts_from_config({}, id="x").context_length is None


def test_to_json_has_exactly_the_plan_fields() -> None:
    doc = facts("qwen3_5__Qwen3.5-122B-A10B").to_json()
    assert list(doc) == ["id", "architecture", "params", "active_params", "checkpoint_bytes", "dtype",
                         "quant", "moe", "hybrid_linear_attention", "mtp_layers", "context_length"]
    assert doc["moe"] == {"num_experts": 256, "active_experts": 8, "shared_experts": 1}
    assert doc["hybrid_linear_attention"] is True and doc["quant"] is None
    assert facts("llama3__Llama-3.1-8B-Instruct").to_json()["moe"] is None
    json.dumps(doc)


# --------------------------------------------------------------------------- references


@pytest.mark.parametrize("ref", [
    "Qwen/Qwen3.5-122B-A10B", "meta-llama/Llama-3.1-8B-Instruct", "a/b", "org_1/model.v2_x",
    "/models/Qwen3.5-122B-A10B", "/shared/hf/models--Qwen--Qwen3-8B/snapshots/abc123",
    "/srv/m+x@v=1,2",
])
def test_valid_refs(ref: str) -> None:
    assert validate_model_ref(ref) == ref


@pytest.mark.parametrize("ref", [
    "", "Qwen", "Qwen/", "Qwen/Qwen3 8B", "Qwen/Qwen3;rm -rf", "Qwen/$(id)", "a/b/c",
    "models/../etc", "owner/na..me", "own--er/name", "-owner/name", "owner/name-", ".x/y",
    "relative/path/", "./models/x", "~/models/x", "/models/my model", "/models/x;ls", "/models/$HOME",
    "/models/`id`", "o/" + "x" * 97,
])
def test_invalid_refs(ref: str) -> None:
    with pytest.raises(ValueError) as e:
        validate_model_ref(ref)
    assert "\n" not in str(e.value)
    with pytest.raises(ModelError):
        load_model_facts(ref)


# --------------------------------------------------------------------------- local folders


def test_local_folder_with_index(tmp_path: Path) -> None:
    (tmp_path / "config.json").write_text((CONFIGS / "qwen3__Qwen3-8B.json").read_text())
    (tmp_path / "model.safetensors.index.json").write_text(
        json.dumps({"metadata": {"total_size": 16_381_470_720}, "weight_map": {}}))
    f = load_model_facts(str(tmp_path))
    assert (f.source, f.local_path, f.id) == ("local", str(tmp_path), str(tmp_path))
    assert (f.checkpoint_bytes, f.checkpoint_bytes_source) == (16_381_470_720, "index")


def test_local_folder_sums_safetensors_files(tmp_path: Path) -> None:
    (tmp_path / "config.json").write_text((CONFIGS / "qwen3__Qwen3-8B.json").read_text())
    (tmp_path / "model-00001-of-00002.safetensors").write_bytes(b"\0" * 300)
    (tmp_path / "model-00002-of-00002.safetensors").write_bytes(b"\0" * 200)
    (tmp_path / "tokenizer.json").write_bytes(b"{}" * 1000)
    f = load_model_facts(str(tmp_path))
    assert (f.checkpoint_bytes, f.checkpoint_bytes_source) == (500, "files")


def test_local_folder_errors(tmp_path: Path) -> None:
    with pytest.raises(ModelError, match=f"^{tmp_path} has no config.json: not a model folder$"):
        load_model_facts(str(tmp_path))
    with pytest.raises(ModelError, match=r"^no such model folder: /nonexistent/model \(a local model is a folder holding config.json\)$"):
        load_model_facts("/nonexistent/model")
    (tmp_path / "config.json").write_text('{"hidden_size": 4096,\n  oops}')
    with pytest.raises(ModelError, match=r"config.json is not valid JSON \(line 2"):
        load_model_facts(str(tmp_path))
    (tmp_path / "config.json").write_text("[1, 2]")
    with pytest.raises(ModelError, match="config.json is not a JSON object$"):
        load_model_facts(str(tmp_path))


# --------------------------------------------------------------------------- the Hub, for real
#
# huggingface_hub reads HF_HUB_OFFLINE, HF_HUB_CACHE and HF_ENDPOINT when it is imported, so each
# Hub test runs load_model_facts in a fresh interpreter with exactly the environment it needs
# (but one, which checks that gpuops itself reads the cache and offline mode at call time).

LOAD = """
import json, sys
from gpuops.core.planning.model_facts import ModelError, load_model_facts
try:
    f = load_model_facts(sys.argv[1])
except ModelError as e:
    print(json.dumps({"error": str(e)}))
else:
    print(json.dumps({**f.to_json(), "source": f.source, "local_path": f.local_path,
                      "bytes_source": f.checkpoint_bytes_source,
                      "full_attention_layers": f.hybrid.full_attention_layers if f.hybrid else None}))
"""


def hub_load(repo: str, home: Path, **env: str) -> dict[str, Any]:
    clean = {k: v for k, v in os.environ.items() if not k.startswith(("HF_", "HUGGINGFACE"))}
    clean.update({"HOME": str(home), "HF_HOME": str(home / "hf"), **env})
    done = subprocess.run([sys.executable, "-c", LOAD, repo], env=clean, capture_output=True,
                          text=True, timeout=120)
    assert done.returncode == 0, done.stderr
    doc: dict[str, Any] = json.loads(done.stdout.strip().splitlines()[-1])
    return doc


def make_cache(cache: Path, repo: str, files: dict[str, str]) -> Path:
    sha = "0123456789abcdef0123456789abcdef01234567"
    root = cache / ("models--" + repo.replace("/", "--"))
    (root / "refs").mkdir(parents=True)
    (root / "refs" / "main").write_text(sha)
    snapshot = root / "snapshots" / sha
    snapshot.mkdir(parents=True)
    for name, text in files.items():
        (snapshot / name).write_text(text)
    return snapshot


def test_hub_offline_from_a_hand_made_cache(tmp_path: Path) -> None:
    cache = tmp_path / "cache"
    snapshot = make_cache(cache, "Qwen/Qwen3.5-122B-A10B", {
        "config.json": (CONFIGS / "qwen3_5__Qwen3.5-122B-A10B.json").read_text(),
        "model.safetensors.index.json": json.dumps(
            {"metadata": {"total_size": 250_170_000_000}, "weight_map": {}}),
    })
    doc = hub_load("Qwen/Qwen3.5-122B-A10B", tmp_path, HF_HUB_CACHE=str(cache), HF_HUB_OFFLINE="1")
    assert doc["source"] == "hub" and doc["local_path"] == str(snapshot)
    assert (doc["checkpoint_bytes"], doc["bytes_source"]) == (250_170_000_000, "index")
    assert doc["full_attention_layers"] == 12 and doc["mtp_layers"] == 1
    assert doc["architecture"] == "Qwen3_5MoeForConditionalGeneration"


def test_hub_offline_without_index_computes(tmp_path: Path) -> None:
    cache = tmp_path / "cache"
    make_cache(cache, "meta-llama/Llama-3.1-8B-Instruct",
               {"config.json": (CONFIGS / "llama3__Llama-3.1-8B-Instruct.json").read_text()})
    doc = hub_load("meta-llama/Llama-3.1-8B-Instruct", tmp_path,
                   HF_HUB_CACHE=str(cache), HF_HUB_OFFLINE="1")
    assert (doc["checkpoint_bytes"], doc["bytes_source"]) == (16_060_522_496, "computed")


def test_hub_offline_and_not_cached(tmp_path: Path) -> None:
    doc = hub_load("Qwen/Qwen3-8B", tmp_path, HF_HUB_CACHE=str(tmp_path / "empty"), HF_HUB_OFFLINE="1")
    assert doc == {"error": "Qwen/Qwen3-8B is not in the local HF cache and the Hub can't be reached (offline)"}


def test_hub_unreachable_and_not_cached_is_told_at_once(tmp_path: Path) -> None:
    """A Hub that refuses connections (an air-gapped host's): one look, no retries (huggingface_hub's
    own download retries five times over 23 s, logging each to stderr), and the reason in the line."""
    closed = f"http://127.0.0.1:{free_port()}"  # a port of this machine that nothing listens on
    clean = {k: v for k, v in os.environ.items() if not k.startswith(("HF_", "HUGGINGFACE"))}
    clean.update({"HOME": str(tmp_path), "HF_HOME": str(tmp_path / "hf"), "HF_ENDPOINT": closed,
                  "HF_HUB_CACHE": str(tmp_path / "empty")})
    done = subprocess.run([sys.executable, "-c", LOAD, "Qwen/Qwen3-8B"], env=clean, capture_output=True,
                          text=True, timeout=120)
    assert done.returncode == 0, done.stderr
    error = json.loads(done.stdout.strip().splitlines()[-1])["error"]
    assert error.startswith(f"Qwen/Qwen3-8B is not in the local HF cache and the Hub can't be reached ({closed}: ")
    assert "\n" not in error and "Retrying" not in done.stderr and "thrown while requesting" not in done.stderr


class FakeHub(http.server.BaseHTTPRequestHandler):
    """Answers like the Hub does for a missing repo (404 RepoNotFound) and for a gated repo
    asked without a token (401 GatedRepo); records what was asked."""

    requests: list[str] = []

    def _answer(self) -> None:
        FakeHub.requests.append(f"{self.command} {self.path}")
        gated = self.path.startswith("/acme-gated/")
        self.send_response(401 if gated else 404)
        self.send_header("X-Error-Code", "GatedRepo" if gated else "RepoNotFound")
        self.send_header("X-Error-Message", "Access to model is restricted" if gated else "Repository not found")
        self.send_header("Content-Length", "0")
        self.end_headers()

    do_GET = do_HEAD = _answer

    def log_message(self, format: str, *args: object) -> None:
        pass


@pytest.fixture
def fake_hub() -> Iterator[str]:
    server = http.server.ThreadingHTTPServer(("127.0.0.1", 0), FakeHub)
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    FakeHub.requests = []
    yield f"http://127.0.0.1:{server.server_port}"
    server.shutdown()
    server.server_close()


def test_hub_no_such_repo(tmp_path: Path, fake_hub: str) -> None:
    doc = hub_load("acme/nope", tmp_path, HF_ENDPOINT=fake_hub, HF_HUB_CACHE=str(tmp_path / "c"))
    assert doc == {"error": "no such repo on the Hub: acme/nope"}
    assert "HEAD /acme/nope/resolve/main/config.json" in FakeHub.requests


def test_hub_gated_without_token(tmp_path: Path, fake_hub: str) -> None:
    doc = hub_load("acme-gated/model", tmp_path, HF_ENDPOINT=fake_hub, HF_HUB_CACHE=str(tmp_path / "c"))
    assert doc["error"].startswith("acme-gated/model is a gated repo: accept its terms on the Hub")
    assert "HF_TOKEN" in doc["error"] and "\n" not in doc["error"]
    assert "HEAD /acme-gated/model/resolve/main/config.json" in FakeHub.requests


def test_malformed_fields_never_crash() -> None:
    config = real_config("qwen3_5__Qwen3.5-122B-A10B")
    config["text_config"]["layer_types"] = ["linear_attention"] * 3  # shorter than 48 layers
    config["text_config"]["mlp_only_layers"] = [[1], "x"]
    config["vision_config"]["deepstack_visual_indexes"] = 7
    del config["vision_config"]["depth"]
    f = facts_from_config(config, id="x", index={"metadata": "junk"})
    assert f.hybrid is not None and f.hybrid.linear_attention_layers == 3
    assert f.missing == ("vision_config.depth",)
    assert f.checkpoint_bytes_source == "computed"


def test_modelopt_mixed_precision_with_nvfp4_layers() -> None:
    config = {**real_config("qwen3__Qwen3-8B"), "quantization_config": {
        "quant_method": "modelopt", "quant_algo": "MIXED_PRECISION",
        "quantized_layers": {"model.layers.0.mlp.down_proj": {"quant_algo": "NVFP4"},
                             "model.layers.0.self_attn.o_proj": {"quant_algo": "FP8"}}}}
    quant = facts_from_config(config, id="x").quant
    assert quant is not None and (quant.method, quant.quantization) == ("nvfp4", "modelopt_fp4")


def test_the_cache_and_offline_mode_are_read_when_asked_not_when_huggingface_hub_was_imported(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    # in-process on purpose: huggingface_hub's constants are loaded here before the environment
    # names the cache (the dashboard's process, whose tests set it per test, met exactly this)
    from huggingface_hub import constants

    cache = tmp_path / "late-cache"
    make_cache(cache, "Qwen/Qwen3-32B", {"config.json": (CONFIGS / "qwen3__Qwen3-32B.json").read_text()})
    assert str(cache) != constants.HF_HUB_CACHE
    monkeypatch.setenv("HF_HUB_CACHE", str(cache))
    monkeypatch.setenv("HF_HUB_OFFLINE", "1")
    facts = load_model_facts("Qwen/Qwen3-32B")
    assert facts.source == "hub" and facts.local_path is not None and facts.local_path.startswith(str(cache))
    monkeypatch.setenv("HF_HUB_CACHE", str(tmp_path / "empty"))
    with pytest.raises(ModelError, match="not in the local HF cache"):  # offline: no minutes of retries
        load_model_facts("Qwen/Qwen3-32B")
