"""The planner: rules, fit, storage, --like, the unit file, and the CLI contract."""

from __future__ import annotations

import json
import os
import subprocess
import tempfile
from pathlib import Path

import pytest

from gpuops.core.planning.hostfacts import offline_target
from gpuops.core.planning.model_facts import facts_from_config
from gpuops.core.domain import split_flags, systemd_quote
from gpuops.core.planning import PlanError
from gpuops.core.planning.like import Previous, previous_from_unit
from gpuops.core.planning.plan import GpuInfo, Target, Wishes, build_plan, with_deployment_ports
from tests.test_cli import gpuops

DATA = Path(__file__).parent / "data"
GIB = 1024**3
H200 = 143771 / 1024  # GiB


def config(name: str) -> dict:
    return json.loads((DATA / "configs" / f"{name}.json").read_text())


def facts(name: str, repo: str):
    return facts_from_config(config(name), id=repo, source="hub")


QWEN122 = ("qwen3_5__Qwen3.5-122B-A10B", "Qwen/Qwen3.5-122B-A10B")


def flags_of(plan) -> dict[str, tuple[str, ...]]:
    return dict(split_flags(plan.argv))


def rule_ids(plan) -> list[str]:
    return [r.id for r in plan.rules]


def test_qwen35_at_tp4_on_old_sglang_gets_the_two_flags_the_operator_missed():
    plan = build_plan(facts(*QWEN122), offline_target(4, H200), Wishes(tp=4, engine_version="0.5.10"))
    f = flags_of(plan)
    assert f["--tp-size"] == ("4",) and f["--model-path"] and f["--served-model-name"] == ("Qwen/Qwen3.5-122B-A10B",)
    assert f["--reasoning-parser"] == ("qwen3",) and f["--tool-call-parser"] == ("qwen3_coder",)
    # as SGLang's published command for H200s writes it (EAGLE over the MTP layers; NEXTN is its alias)
    assert f["--speculative-algorithm"] == ("EAGLE",) and f["--speculative-num-draft-tokens"] == ("4",)
    assert f["--mamba-scheduler-strategy"] == ("extra_buffer",)
    assert plan.env["SGLANG_ENABLE_SPEC_V2"] == "1"  # default off in 0.5.10
    assert plan.env["CUDA_VISIBLE_DEVICES"] == "0,1,2,3"
    assert f["--host"] == ("127.0.0.1",) and "--api-key" not in f
    assert "--enable-metrics" in f and f["--mem-fraction-static"] == ("0.8",)
    # every flag carries the rule that put it there
    added = {a for r in plan.rules for a in r.adds}
    for name, _values in split_flags(plan.argv):
        assert name in added, f"{name} has no rule"
    assert plan.fit.fits and plan.fit.max_total_tokens > 262144
    assert 55 * GIB < plan.fit.weights_per_gpu_bytes < 66 * GIB  # ~244 GB over 4 GPUs
    assert not plan.unknown_flags


def test_newer_sglang_names_the_mamba_flag_differently_and_needs_no_spec_v2_env():
    plan = build_plan(facts(*QWEN122), offline_target(4, H200), Wishes(tp=4, engine_version="0.5.23"))
    f = flags_of(plan)
    assert f["--mamba-radix-cache-strategy"] == ("extra_buffer",) and "--mamba-scheduler-strategy" not in f
    assert "SGLANG_ENABLE_SPEC_V2" not in plan.env
    assert "mamba-extra-buffer" in rule_ids(plan)


def test_no_mtp_drops_speculative_and_mamba_flags():
    plan = build_plan(facts(*QWEN122), offline_target(4, H200), Wishes(tp=4, mtp=False, engine_version="0.5.23"))
    f = flags_of(plan)
    assert not any(n.startswith("--speculative") or n.startswith("--mamba") for n in f)
    assert any("--no-mtp" in w for w in plan.warnings)


def test_like_a_previous_fp4_unit_drops_what_no_longer_applies():
    prev = previous_from_unit((DATA / "units" / "qwen397-nvfp4.service").read_text(), "qwen397.service")
    assert prev.argv[:3] == ("/opt/sglang/bin/python3", "-m", "sglang.launch_server")
    assert ("SGLANG_ENABLE_SPEC_V2", "1") in prev.env
    plan = build_plan(facts(*QWEN122), offline_target(4, H200), Wishes(tp=4, engine_version="0.5.23", like=prev))
    f = flags_of(plan)
    for gone in ("--quantization", "--moe-runner-backend", "--fp4-gemm-backend", "--mamba-scheduler-strategy"):
        assert gone not in f
    assert f["--watchdog-timeout"] == ("1200",)  # still valid: kept
    dropped = {r.removes[0]: r.why for r in plan.rules if r.id == "like-drop"}
    assert "FP4" in dropped["--quantization"] and "FP4" in dropped["--moe-runner-backend"]
    assert "renamed to --mamba-radix-cache-strategy" in dropped["--mamba-scheduler-strategy"]
    ops = {(c.op, c.text.split()[0]) for c in plan.like.diff}
    assert ("-", "--quantization") in ops and ("+", "--mamba-radix-cache-strategy") in ops
    assert ("~", "--model-path") in ops and ("~", "--host") in ops  # 0.0.0.0 → policy's loopback
    # the old server's memory fraction and served name are kept (the diff changed them without a reason)
    assert f["--mem-fraction-static"] == ("0.85",) and f["--served-model-name"] == ("qwen397",)


def test_does_not_fit_names_the_smallest_tp_that_does():
    # 250 GB of BF16 weights: at TP2 that is 116.5 GiB a GPU, more than 80% of an H200's
    # 140.4 GiB (112.3 GiB, what --mem-fraction-static 0.8 gives weights + KV): TP4 is the smallest.
    plan = build_plan(facts(*QWEN122), offline_target(8, H200), Wishes(tp=1, engine_version="0.5.23"))
    assert not plan.fit.fits and plan.fit.smallest_tp == 4
    assert "smallest TP that fits is 4" in plan.fit.verdict
    tp2 = build_plan(facts(*QWEN122), offline_target(8, H200), Wishes(tp=2, engine_version="0.5.23"))
    assert not tp2.fit.fits and tp2.fit.weights_per_gpu_bytes > 0.8 * H200 * GIB
    auto = build_plan(facts(*QWEN122), offline_target(8, H200), Wishes(engine_version="0.5.23"))
    assert auto.tp == 4 and auto.fit.fits and len(auto.gpu_ids) == 4


@pytest.mark.parametrize("wishes, message", [
    (Wishes(tp=3), "does not divide"),
    (Wishes(tp=16), "needs 16 GPUs"),
    (Wishes(tp=2, gpu_ids=(0, 1, 2)), "must match"),
    (Wishes(gpu_ids=(9,)), "not among"),
    (Wishes(tp=4, port=70000), "port must be 1..65535"),
])
def test_absurd_requests_are_refused(wishes, message):
    with pytest.raises(PlanError, match=message):
        build_plan(facts(*QWEN122), offline_target(8, H200), wishes)


def host_target(**kw) -> Target:
    base = dict(host="gpu1", gpus=tuple(GpuInfo(i, int(H200 * GIB)) for i in range(8)), engine_version="0.5.23",
                model_dirs=("/data/models", "/shared/models"), forbidden_paths=("/data",),
                free_bytes={"/data/models": 10**13, "/shared/models": 10**13})
    base.update(kw)
    return Target(**base)


def test_download_dir_never_under_a_forbidden_path():
    plan = build_plan(facts(*QWEN122), host_target(), Wishes(tp=4))
    assert plan.download_dir == "/shared/models"
    assert plan.model_path == "/shared/models/Qwen/Qwen3.5-122B-A10B"
    with pytest.raises(PlanError, match="forbidden path /data"):
        build_plan(facts(*QWEN122), host_target(), Wishes(tp=4, download_dir="/data/elsewhere"))
    small = host_target(free_bytes={"/shared/models": 100 * GIB}, model_dirs=("/shared/models", "/big"))
    assert build_plan(facts(*QWEN122), small, Wishes(tp=4)).download_dir == "/big"


def test_busy_gpus_are_avoided_and_policy_gpu_ids_respected():
    gpus = tuple(GpuInfo(i, int(H200 * GIB), processes=1 if i in (0, 1) else 0) for i in range(8))
    plan = build_plan(facts(*QWEN122), host_target(gpus=gpus, allowed_gpu_ids=(0, 1, 2, 3, 4, 5)), Wishes(tp=4))
    assert plan.gpu_ids == (2, 3, 4, 5)
    assert plan.env["CUDA_VISIBLE_DEVICES"] == "2,3,4,5"


def test_serving_beyond_loopback_needs_an_api_key_never_shown():
    plan = build_plan(facts(*QWEN122), host_target(serve_host="0.0.0.0"), Wishes(tp=4))
    f = flags_of(plan)
    assert f["--host"] == ("0.0.0.0",) and f["--api-key"] == ("${GPUOPS_API_KEY}",)
    assert "GPUOPS_API_KEY=<generated at deploy, never shown>" in plan.env_file_text()
    assert "ExecStart=" in plan.unit_text() and "${GPUOPS_API_KEY}" in plan.unit_text()
    assert "EnvironmentFile=/etc/gpuops/qwen3.5-122b-a10b.env" in plan.unit_text()


def test_the_default_port_moves_to_the_next_free_one_and_an_explicit_port_never_does():
    free = build_plan(facts(*QWEN122), host_target(ports_taken={22: ""}), Wishes(tp=4))
    assert free.port == 30000 and flags_of(free)["--port"] == ("30000",)
    assert not any("port" in w for w in free.warnings)
    holder = "pid 4242 (alice: python -m http.server 30000)"
    taken = host_target(ports_taken={30000: holder, 30001: ""})
    moved = build_plan(facts(*QWEN122), taken, Wishes(tp=4))
    assert moved.port == 30002 and flags_of(moved)["--port"] == ("30002",) and moved.endpoint.endswith(":30002")
    assert f"port 30000 is in use on gpu1 ({holder}); using 30002" in moved.warnings
    # the ports of the host's other stored deployments are taken too, even before they listen; a
    # stopped or crashed one, or another host's, holds nothing; a new run of a name takes over its own
    stored = with_deployment_ports(taken, [("qwen-a", "gpu1", "downloading", 30002), ("old", "gpu1", "stopped", 30003),
                                           ("gone", "gpu1", "crashed", 30004), ("far", "gpu2", "ready", 30003)])
    assert build_plan(facts(*QWEN122), stored, Wishes(tp=4)).port == 30003
    assert build_plan(facts(*QWEN122), stored, Wishes(tp=4, name="qwen-a")).port == 30002
    alone = with_deployment_ports(host_target(), [("qwen-a", "gpu1", "ready", 30000)])
    plan = build_plan(facts(*QWEN122), alone, Wishes(tp=4))
    assert plan.port == 30001 and "port 30000 is in use on gpu1 (deployment qwen-a (ready)); using 30001" in plan.warnings
    # --port is the operator's: kept as given, with a warning when the host uses it (deploy refuses it)
    kept = build_plan(facts(*QWEN122), taken, Wishes(tp=4, port=30000))
    assert kept.port == 30000 and flags_of(kept)["--port"] == ("30000",)
    assert f"port 30000 is in use on gpu1 ({holder}); choose another --port" in kept.warnings
    assert build_plan(facts(*QWEN122), taken, Wishes(tp=4, port=31000)).port == 31000
    with pytest.raises(PlanError, match="every port above it"):
        build_plan(facts(*QWEN122), host_target(ports_taken=dict.fromkeys(range(30000, 65536), "")), Wishes(tp=4))


def test_a_plan_without_port_starts_at_its_hosts_first_port():
    """A host's first_port (or GPUOPS_FIRST_PORT) is where a plan without --port starts, then the next free
    port above it; --port is still kept as given."""
    own = host_target(first_port=31500, ports_taken={30000: ""})
    assert build_plan(facts(*QWEN122), own, Wishes(tp=4)).port == 31500  # 30000 taken is no matter here
    taken = host_target(first_port=31500, ports_taken={31500: "pid 7 (bob: nc -l 31500)"})
    moved = build_plan(facts(*QWEN122), taken, Wishes(tp=4))
    assert moved.port == 31501 and "port 31500 is in use on gpu1 (pid 7 (bob: nc -l 31500)); using 31501" in moved.warnings
    assert build_plan(facts(*QWEN122), taken, Wishes(tp=4, port=30000)).port == 30000


# zai-org/GLM-4.5's shapes (96 attention heads, 8 KV heads, 160 routed experts of intermediate size
# 1536, 92 layers, 131,072 context), as a public test quotes its config.json (search index id 19810911295)
GLM45 = {"architectures": ["Glm4MoeForCausalLM"], "model_type": "glm4_moe", "head_dim": 128, "hidden_size": 5120,
         "intermediate_size": 12288, "max_position_embeddings": 131072, "moe_intermediate_size": 1536,
         "n_routed_experts": 160, "n_shared_experts": 1, "num_attention_heads": 96, "num_experts_per_tok": 8,
         "first_k_dense_replace": 3, "num_hidden_layers": 92, "num_key_value_heads": 8, "torch_dtype": "bfloat16",
         "vocab_size": 151552, "tie_word_embeddings": False}


def test_a_tp_that_splits_the_kv_heads_unevenly_is_refused_and_never_chosen():
    """The issue's case: TP6 divides GLM-4.5's 96 attention heads but not its 8 KV heads (nor is it a
    multiple of them), which SGLang's QKVParallelLinear asserts at start-up."""
    from gpuops.core.planning.fit import tp_choices, tp_refusal

    glm = facts_from_config(GLM45, id="zai-org/GLM-4.5", source="hub")
    assert tp_refusal(glm, 6) == ("TP 6 neither divides the model's 8 KV heads nor is a multiple of them (each "
                                  "rank holds a share of them, or one of them copied whole)")
    assert tp_refusal(glm, 16) is None  # 16 ranks: each KV head copied to two
    assert tp_refusal(glm, 5) == "TP 5 does not divide the model's 96 attention heads"
    assert tp_choices(glm, 8) == [1, 2, 4, 8]
    with pytest.raises(PlanError, match=r"^TP 6 neither divides the model's 8 KV heads .* \(try 1, 2, 4, 8\)$"):
        build_plan(glm, host_target(), Wishes(tp=6))
    # six free GPUs: the TP is one the engine can run (the old choice, 'the smallest that fits' among
    # those dividing the attention heads, could be 6)
    six = build_plan(glm, host_target(gpus=tuple(GpuInfo(i, int(H200 * GIB)) for i in range(6))), Wishes())
    assert six.tp in (1, 2, 4) and tp_refusal(glm, six.tp) is None
    # MLA keeps its latent whole on every rank: no KV-head condition (DeepSeek-V3: 128 heads)
    deepseek = facts("deepseek_v3__DeepSeek-V3", "deepseek-ai/DeepSeek-V3")
    assert deepseek.mla is not None and tp_refusal(deepseek, 16) is None and tp_refusal(deepseek, 3)


def test_a_tp_whose_expert_share_is_not_whole_quantization_blocks_is_refused():
    """Qwen3-235B-A22B-FP8 (its BF16 config's shapes with the FP8 checkpoint's 128x128 blocks): at TP8
    each rank's share of the 1536-wide experts is 192, not a whole number of 128-wide blocks; SGLang's
    fp8.py raises 'The output_size of gate's and up's weight = 192 is not divisible by weight
    quantization block_n = 128' (Qwen's model card for the FP8 checkpoint: lower TP or use expert
    parallelism). The BF16 checkpoint runs at TP8."""
    from gpuops.core.planning.fit import tp_choices, tp_refusal

    bf16 = config("qwen3_moe__Qwen3-235B-A22B-Instruct-2507")
    fp8 = dict(bf16, quantization_config={"activation_scheme": "dynamic", "fmt": "e4m3", "quant_method": "fp8",
                                          "weight_block_size": [128, 128]})
    f = facts_from_config(fp8, id="Qwen/Qwen3-235B-A22B-Instruct-2507-FP8", source="hub")
    assert tp_refusal(f, 8) == ("at TP 8 each rank's share of the experts' intermediate size (192) is not a whole "
                                "number of the checkpoint's 128x128 quantization blocks")
    assert tp_choices(f, 8) == [1, 2, 4]
    assert tp_refusal(facts_from_config(bf16, id="Qwen/Qwen3-235B-A22B-Instruct-2507", source="hub"), 8) is None


def test_without_tp_the_plan_takes_the_smallest_tp_that_holds_a_full_context_and_says_the_others():
    """The issue's other case: the smallest TP that fits left a large MoE 0.2x its context (a server that
    refuses long prompts). Qwen3-235B on 8 H200s: TP4 fits with 0.2x, TP8 holds 4.9x."""
    qwen = facts("qwen3_moe__Qwen3-235B-A22B-Instruct-2507", "Qwen/Qwen3-235B-A22B-Instruct-2507")
    plan = build_plan(qwen, host_target(), Wishes())
    assert plan.tp == 8 and plan.fit.fits
    assert ("TP not chosen: TP8, the smallest that holds a full 262,144-token context (KV cache per context, of the "
            "TPs that fit: TP4: 0.2x, TP8: 4.9x; --tp N for another)") in plan.warnings
    # four free GPUs: none holds a whole context, the one that holds the most is taken, and said
    four = build_plan(qwen, host_target(gpus=tuple(GpuInfo(i, int(H200 * GIB)) for i in range(4))), Wishes())
    assert four.tp == 4 and any(w.startswith("TP not chosen: TP4, the one that holds the most KV cache (none holds "
                                             "a full 262,144-token context)") for w in four.warnings)
    # a small model: TP1 already holds many contexts
    assert build_plan(facts("qwen3__Qwen3-8B", "Qwen/Qwen3-8B"), host_target(), Wishes()).tp == 1


def test_a_flag_the_version_deprecated_is_warned_of_with_what_its_notice_says():
    """--like of a server started with --enable-dp-attention (deprecated in 0.5.23 for --attn-dp-size
    <dp-size>, a replacement with a value gpuops cannot know: kept as it was) and
    --enable-flashinfer-allreduce-fusion (renamed by --like): the plan warns of the first only."""
    prev = Previous(source="old-unit", argv=("--model-path", "/m", "--enable-dp-attention", "--dp", "2",
                                             "--enable-flashinfer-allreduce-fusion"))
    plan = build_plan(facts(*QWEN122), host_target(), Wishes(tp=4, like=prev, engine_version="0.5.23"))
    f = flags_of(plan)
    assert "--enable-dp-attention" in f and "--enable-flashinfer-allreduce-fusion" not in f
    assert ("--enable-dp-attention is deprecated in SGLang 0.5.23 (its notice: use --attn-dp-size <dp-size>); a later "
            "version may refuse it") in plan.warnings
    assert not any("allreduce" in w and "deprecated" in w for w in plan.warnings)
    # 0.5.21 had not deprecated it (0.5.22 did)
    older = build_plan(facts(*QWEN122), host_target(engine_version="0.5.21"),
                       Wishes(tp=4, like=prev, engine_version="0.5.21"))
    assert not any("deprecated" in w for w in older.warnings)


def test_like_renames_a_flag_the_version_removed_as_its_last_notice_said_and_drops_one_none_replaced():
    """--like of a server that ran 0.5.19 with --cuda-graph-max-bs (deprecated in 0.5.14 for
    --cuda-graph-max-bs-decode, gone in 0.5.20) and --enable-double-sparsity (gone in 0.5.11, no
    notice), planned for 0.5.23: the first under its new name, the second dropped, each said why."""
    from gpuops.core import engines

    sv = engines.get("sglang").versions
    assert sv.removed_flag("--cuda-graph-max-bs", "0.5.23") == ("0.5.19", "--cuda-graph-max-bs-decode")
    assert sv.removed_flag("--enable-double-sparsity", "0.5.23") == ("0.5.10", None)
    assert sv.removed_flag("--cuda-graph-max-bs", "0.5.19") is None  # still there
    assert sv.removed_flag("--no-such-flag", "0.5.23") is None  # never was
    # as a refusal (the plan's warning, the deploy's check) names them
    assert sv.removal_note("--cuda-graph-max-bs", "0.5.23") == ("--cuda-graph-max-bs (gone after 0.5.19, whose notice "
                                                                "said: use --cuda-graph-max-bs-decode)")
    assert sv.removal_note("--enable-double-sparsity", "0.5.23") == "--enable-double-sparsity (gone after 0.5.10)"
    assert sv.removal_note("--no-such-flag", "0.5.23") == "--no-such-flag"
    prev = Previous(source="old-unit", argv=("--model-path", "/m", "--cuda-graph-max-bs", "64",
                                             "--enable-double-sparsity"))
    plan = build_plan(facts(*QWEN122), host_target(), Wishes(tp=4, like=prev, engine_version="0.5.23"))
    f = flags_of(plan)
    assert f["--cuda-graph-max-bs-decode"] == ("64",) and "--cuda-graph-max-bs" not in f
    assert "--enable-double-sparsity" not in f
    renamed = {r.removes[0]: r.why for r in plan.rules if r.id == "like-rename"}
    assert renamed["--cuda-graph-max-bs"] == ("--cuda-graph-max-bs is gone from SGLang 0.5.23 (after 0.5.19, whose "
                                              "notice said: use --cuda-graph-max-bs-decode)")
    dropped = {r.removes[0]: r.why for r in plan.rules if r.id == "like-drop"}
    assert dropped["--enable-double-sparsity"] == "SGLang 0.5.23 has no --enable-double-sparsity"
    assert not plan.unknown_flags


def test_the_30b_hybrid_moe_fits_on_one_gpu_as_its_official_command_runs_it():
    """Issue 25: Nemotron-3-Nano-30B-A3B 'did not fit' on one 141 GB GPU (205 GB counted), where its
    official command serves the BF16 checkpoint on one. On one H200: TP1, with whole contexts of KV cache."""
    nemotron = facts("nemotron_h__NVIDIA-Nemotron-3-Nano-30B-A3B-BF16", "nvidia/NVIDIA-Nemotron-3-Nano-30B-A3B-BF16")
    plan = build_plan(nemotron, host_target(gpus=(GpuInfo(0, int(H200 * GIB)),)), Wishes())
    assert plan.tp == 1 and plan.fit.fits, plan.fit.verdict
    assert plan.fit.max_total_tokens >= nemotron.context_length


def test_the_engines_model_registry_says_which_architectures_a_version_serves():
    """data/sglang_models.json, read from the wheels by extract/models.py: each version's architectures
    (the EntryClass of each module of srt/models/) and which are multimodal."""
    from gpuops.core.engines.sglang import models

    assert len(models.registry("0.5.23")) == 290 and len(models.registry("0.5.10")) == 193
    assert models.served("NemotronHForCausalLM", "0.5.23") == {"file": "srt/models/nemotron_h.py", "multimodal": False}
    assert models.served("Gemma4ForConditionalGeneration", "0.5.10") is None  # added in 0.5.11
    assert models.served("Gemma4ForConditionalGeneration", "0.5.11") == {"file": "srt/models/gemma4_mm.py",
                                                                       "multimodal": True}
    assert models.registry("0.9.0") == models.registry("0.5.23")  # a newer version: the newest known's


def test_a_plan_says_when_the_engines_version_has_no_model_for_the_architecture():
    llama = config("llama3__Llama-3.1-8B-Instruct")
    gemma4 = facts_from_config(dict(llama, architectures=["Gemma4ForConditionalGeneration"]), id="google/gemma-4-x")
    old = build_plan(gemma4, host_target(engine_version="0.5.10"), Wishes(tp=1, engine_version="0.5.10"))
    assert ("SGLang 0.5.10 has no model of its own for Gemma4ForConditionalGeneration (its model registry): it would "
            "try its transformers fallback, if it starts at all; plan for a version that has it") in old.warnings
    new = build_plan(gemma4, host_target(), Wishes(tp=1, engine_version="0.5.23"))
    assert not any("has no model of its own" in w for w in new.warnings)
    assert ("unknown architecture Gemma4ForConditionalGeneration (SGLang 0.5.23 serves it): generic rules only (no "
            "parsers, no quantization flags); check the launch before deploying") in new.warnings
    made_up = facts_from_config(dict(llama, architectures=["MadeUpForCausalLM"]), id="x/made-up")
    plan = build_plan(made_up, host_target(), Wishes(tp=1, engine_version="0.5.23"))
    assert any(w.startswith("SGLang 0.5.23 has no model of its own for MadeUpForCausalLM") for w in plan.warnings)
    assert any(w.startswith("unknown architecture MadeUpForCausalLM: generic rules only") for w in plan.warnings)
    known = build_plan(facts("llama3__Llama-3.1-8B-Instruct", "meta-llama/Llama-3.1-8B-Instruct"), host_target(),
                       Wishes(tp=1))
    assert not any("model of its own" in w or "unknown architecture" in w for w in known.warnings)


def test_systemd_quoting():
    assert systemd_quote("--tp") == "--tp"
    assert systemd_quote("a b") == '"a b"'
    assert systemd_quote("50%") == "50%%"
    assert systemd_quote('{"x": "$HOME"}') == '"{\\"x\\": \\"$$HOME\\"}"'


def test_unknown_architecture_gets_generic_rules_and_a_warning():
    cfg = config("llama3__Llama-3.1-8B-Instruct")
    cfg["architectures"] = ["FancyNewForCausalLM"]
    cfg["model_type"] = "fancy"
    plan = build_plan(facts_from_config(cfg, id="acme/fancy"), offline_target(1, H200), Wishes(tp=1))
    assert any("unknown architecture" in w for w in plan.warnings)
    assert "--tool-call-parser" not in flags_of(plan)


# ------------------------------------------------------------------ the CLI


@pytest.fixture
def model_dir():
    d = Path(tempfile.mkdtemp(prefix="gpuops-model-")) / "Qwen3.5-122B-A10B"
    d.mkdir()
    (d / "config.json").write_text(json.dumps(config(QWEN122[0])))
    yield d
    subprocess.run(["rm", "-rf", str(d.parent)])


@pytest.fixture
def env(tmp_path):
    e = dict(os.environ, XDG_CONFIG_HOME=str(tmp_path / "cfg"), XDG_STATE_HOME=str(tmp_path / "state"),
             XDG_CACHE_HOME=str(tmp_path / "cache"), HF_HUB_OFFLINE="1", HF_HUB_CACHE=str(tmp_path / "hub"))
    e.pop("GPUOPS_CONFIG", None)
    return e


def test_cli_plan_json_contract(model_dir, env):
    out = gpuops("plan", str(model_dir), "--gpus", "4", "--gpu-memory", "140.4", "--tp", "4",
                 "--sglang-version", "0.5.23", "--json", env=env)
    assert out.returncode == 0, out.stderr
    doc = json.loads(out.stdout)
    for key in ("schema", "name", "host", "model", "tp", "gpu_ids", "port", "launcher", "sglang_version", "env",
                "argv", "download_dir", "fit", "rules", "unit", "warnings"):
        assert key in doc, key
    assert doc["schema"] == 1 and doc["tp"] == 4 and doc["gpu_ids"] == [0, 1, 2, 3]
    assert set(doc["model"]) >= {"id", "architecture", "params", "active_params", "checkpoint_bytes", "dtype",
                                 "quant", "moe", "hybrid_linear_attention", "mtp_layers", "context_length"}
    assert doc["model"]["hybrid_linear_attention"] is True and doc["model"]["mtp_layers"] == 1
    assert set(doc["fit"]) >= {"weights_per_gpu_bytes", "kv_cache_per_gpu_bytes", "max_total_tokens", "fits"}
    assert doc["unit"]["name"] == "gpuops-qwen3.5-122b-a10b.service"
    assert all(set(r) == {"id", "why", "adds", "removes"} for r in doc["rules"])
    assert doc["argv"][doc["argv"].index("--model-path") + 1] == str(model_dir)
    human = gpuops("plan", str(model_dir), "--gpus", "4", "--gpu-memory", "140.4", "--tp", "4", env=env)
    assert human.returncode == 0 and "fits at TP4" in human.stdout and "why each flag" in human.stdout


@pytest.mark.parametrize("args, message", [
    (["Qwen/Qwen 3"], "MODEL"),
    (["Qwen/x;rm -rf /"], "MODEL"),
    (["../relative"], "MODEL"),
    (["{model}", "--tp", "3"], "does not divide"),
    (["{model}", "--tp", "16"], "needs 16 GPUs"),
    (["{model}", "--download-dir", "/a b"], "--download-dir"),
    (["{model}", "--gpu-ids", "0;1"], "--gpu-ids"),
    (["{model}", "--sglang-version", "latest"], "--sglang-version"),
    (["/nonexistent/folder"], "config.json"),
])
def test_cli_bad_input_is_exit_2_one_line(model_dir, env, args, message):
    args = [a.replace("{model}", str(model_dir)) for a in args]
    out = gpuops("plan", *args, "--gpus", "8", "--gpu-memory", "140", env=env)
    assert out.returncode == 2, out.stdout + out.stderr
    lines = out.stderr.strip().splitlines()
    assert len(lines) == 1 and message in lines[0] and out.stdout == ""


def test_cli_needs_a_host_or_offline_gpus(model_dir, env):
    out = gpuops("plan", str(model_dir), env=env)
    assert out.returncode == 2 and "--gpus" in out.stderr


def test_cli_like_unit_shows_the_diff(model_dir, env):
    out = gpuops("plan", str(model_dir), "--gpus", "4", "--gpu-memory", "140.4", "--tp", "4", "--sglang-version",
                 "0.5.23", "--like", str(DATA / "units" / "qwen397-nvfp4.service"), env=env)
    assert out.returncode == 0, out.stderr
    assert "against" in out.stdout and "--quantization modelopt_fp4" in out.stdout


def test_plan_against_the_simulated_host_over_ssh(model_dir, env, sshd, ssh_home, tmp_path):
    """GPU facts and the SGLang version (and its --help flags) are read from the host."""
    from gpuops.sim.host import setup_simhost

    root = Path(tempfile.mkdtemp(prefix="gpuops-plan-sim-"))
    root.chmod(0o755)
    try:
        sim = setup_simhost(root / "h", gpus=4, engine_version="0.5.10")
        busy = subprocess.Popen(["sleep", "777.5"])
        sim.set_gpu(0, memory_used=20 * GIB, processes=[{"pid": busy.pid, "used": 20 * GIB}])
        cfg = tmp_path / "c.toml"
        cfg.write_text(sim.host_block("gpu1", ssh="simbox") + f'model_dirs = ["{root}/models"]\n')
        e = dict(env, HOME=str(ssh_home))
        out = gpuops("--config", str(cfg), "plan", str(model_dir), "--host", "gpu1", "--tp", "2", "--json", env=e)
        assert out.returncode == 0, out.stderr
        doc = json.loads(out.stdout)
        assert doc["host"] == "gpu1" and doc["sglang_version"] == "0.5.10"
        assert doc["sglang_version_source"] == "host"
        assert "--help" in doc["flags_checked_against"] and doc["unknown_flags"] == []
        assert doc["gpu_ids"] == [1, 2]  # GPU 0 is busy
        assert doc["fit"]["gpu_memory_bytes"] == 143771 * 1024 * 1024
        assert "--mamba-scheduler-strategy" in doc["argv"] and doc["env"]["SGLANG_ENABLE_SPEC_V2"] == "1"
        assert (Path(e["XDG_CACHE_HOME"]) / "gpuops" / "sglang-help" / "0.5.10.json").is_file()  # cached
        busy.kill()
        busy.wait()
        # a host without SGLang still gets a plan, with a warning that deploy will refuse
        bare = setup_simhost(root / "bare", gpus=2, engine_version="none")
        cfg.write_text(bare.host_block("gpu2", ssh="simbox"))
        out = gpuops("--config", str(cfg), "plan", str(model_dir), "--host", "gpu2", "--tp", "2", "--json", env=e)
        assert out.returncode == 0, out.stderr
        doc = json.loads(out.stdout)
        assert doc["sglang_version_source"] == "newest known"
        assert any("not installed" in w and "deploy will refuse" in w for w in doc["warnings"])
    finally:
        subprocess.run(["rm", "-rf", str(root)])


def test_like_translates_deprecated_flags_and_drops_unknown_ones():
    from gpuops.core.engines.sglang import versions as sv

    assert sv.deprecated_flags("0.5.15").get("--cuda-graph-max-bs") == "--cuda-graph-max-bs-decode"
    prev = Previous("old.json", ("--model-path", "/m", "--tp", "4", "--cuda-graph-max-bs", "256",
                                 "--enable-flashinfer-allreduce-fusion", "--no-such-flag-anywhere", "1"))
    plan = build_plan(facts(*QWEN122), offline_target(4, H200), Wishes(tp=4, engine_version="0.5.15", like=prev))
    f = flags_of(plan)
    assert f["--cuda-graph-max-bs-decode"] == ("256",) and "--cuda-graph-max-bs" not in f
    assert f["--flashinfer-allreduce-fusion-backend"] == ("auto",)  # the plan's own rule, new spelling
    assert "--enable-flashinfer-allreduce-fusion" not in f and "--no-such-flag-anywhere" not in f
    assert "--tp" not in f and f["--tp-size"] == ("4",)  # `--tp` was argparse's prefix for --tp-size
    reasons = {r.removes[0]: r.why for r in plan.rules if r.id == "like-drop"}
    assert "has no --no-such-flag-anywhere" in reasons["--no-such-flag-anywhere"]
    assert not plan.unknown_flags


def test_cli_plan_from_the_hf_cache_offline(env, tmp_path):
    hub = Path(env["HF_HUB_CACHE"])
    sha = "0123456789abcdef0123456789abcdef01234567"
    repo = hub / "models--Qwen--Qwen3.5-122B-A10B"
    (repo / "refs").mkdir(parents=True)
    (repo / "refs" / "main").write_text(sha)
    (repo / "snapshots" / sha).mkdir(parents=True)
    (repo / "snapshots" / sha / "config.json").write_text(json.dumps(config(QWEN122[0])))
    out = gpuops("plan", "Qwen/Qwen3.5-122B-A10B", "--gpus", "4", "--gpu-memory", "140.4", "--json", env=env)
    assert out.returncode == 0, out.stderr
    doc = json.loads(out.stdout)
    assert doc["model"]["id"] == "Qwen/Qwen3.5-122B-A10B" and doc["tp"] == 4  # the smallest TP that fits
    assert doc["argv"][doc["argv"].index("--served-model-name") + 1] == "Qwen/Qwen3.5-122B-A10B"
    out = gpuops("plan", "Qwen/Not-Cached", "--gpus", "4", "--gpu-memory", "140.4", env=env)
    assert out.returncode == 2 and "not in the local HF cache" in out.stderr and len(out.stderr.splitlines()) == 1


def test_like_keeps_what_the_old_servers_clients_use_or_says_why_not():
    """--like keeps the port, the served model name, the bind address (where the host allows it)
    and the memory fraction; every other change says why; a bind the host's serve_host does not
    allow is a warning that says how to keep it (moving to loopback silently broke clients)."""
    unit = ("[Service]\nExecStart=/usr/bin/python3 -m sglang.launch_server --model-path /models/old "
            "--served-model-name prod --host 0.0.0.0 --port 31000 --tp-size 4 --mem-fraction-static 0.85\n")
    prev = previous_from_unit(unit, "old.service")
    open_host = build_plan(facts(*QWEN122), host_target(serve_host="0.0.0.0"), Wishes(tp=4, like=prev))
    flags = dict(split_flags(open_host.argv))
    assert flags["--port"] == ("31000",) and open_host.port == 31000
    assert flags["--served-model-name"] == ("prod",) and flags["--host"] == ("0.0.0.0",)
    assert flags["--mem-fraction-static"] == ("0.85",)
    kept = next(r for r in open_host.rules if r.id == "like-clients")
    assert set(kept.adds) >= {"--port 31000", "--served-model-name prod", "--mem-fraction-static 0.85"}
    for change in open_host.like.diff:
        if change.op in "~-":
            assert change.text.endswith(")") and "  (" in change.text, change.text  # each with its reason
    assert not any(c.text.startswith(("--host", "--port", "--served-model-name", "--mem-fraction"))
                   for c in open_host.like.diff)
    loopback = build_plan(facts(*QWEN122), host_target(serve_host="127.0.0.1"), Wishes(tp=4, like=prev))
    assert dict(split_flags(loopback.argv))["--host"] == ("127.0.0.1",)
    (warning,) = [w for w in loopback.warnings if "listened on 0.0.0.0" in w]
    assert 'set serve_host = "0.0.0.0" in [hosts.' in warning and "clients on other machines lose it" in warning
    mine = build_plan(facts(*QWEN122), host_target(serve_host="0.0.0.0"), Wishes(tp=4, like=prev, port=32000))
    assert mine.port == 32000  # what the operator gives wins


def test_a_local_folder_without_its_weights_is_not_a_complete_copy(tmp_path):
    """A folder with only config.json was planned as "reuse the complete copy": the plan now says it
    holds no weights (and a folder short of its index's shards, how much is there)."""
    from gpuops.core.planning.model_facts import load_model_facts

    folder = tmp_path / "Qwen3-8B"
    folder.mkdir()
    (folder / "config.json").write_text((DATA / "configs" / "qwen3__Qwen3-8B.json").read_text())
    plan = build_plan(load_model_facts(str(folder)), offline_target(1, H200), Wishes())
    assert any("holds no weights" in w for w in plan.warnings), plan.warnings
    (folder / "model.safetensors.index.json").write_text(json.dumps(
        {"metadata": {"total_size": 16_000_000_000}, "weight_map": {"a": "model-00001-of-00002.safetensors",
                                                                    "b": "model-00002-of-00002.safetensors"}}))
    with open(folder / "model-00001-of-00002.safetensors", "wb") as f:
        f.truncate(8_000_000_000)  # sparse: half the index's bytes
    plan = build_plan(load_model_facts(str(folder)), offline_target(1, H200), Wishes())
    assert any("holds 7.5 GiB of its index's 14.9 GiB" in w and "incomplete" in w for w in plan.warnings), plan.warnings


def test_a_plan_like_a_stored_one_derives_its_rules_companions_again():
    """A plan like a previous *plan* (a stored deployment, a plan JSON) carries the operator's own
    choices, but what the previous plan's rules added for its model is derived again for the new one:
    Qwen3.5's reasoning parser, its mamba cache's page size and its all-reduce fusion are not carried
    to a dense Instruct model that never thinks (each dropped with the rule that had added it)."""
    from gpuops.core.planning.like import previous_from_plan

    old = build_plan(facts(*QWEN122), offline_target(4, H200), Wishes(tp=4, engine_version="0.5.23", name="q122"))
    old_flags = flags_of(old)
    assert old_flags["--reasoning-parser"] == ("qwen3",) and old_flags["--page-size"] == ("64",)
    assert old_flags["--flashinfer-allreduce-fusion-backend"] == ("auto",)
    old = old.replace(argv=[*old.argv, "--watchdog-timeout", "1200"])  # the operator's own flag
    prev = previous_from_plan(old, "deployment q122")
    instruct = ("qwen3_moe__Qwen3-235B-A22B-Instruct-2507", "Qwen/Qwen3-235B-A22B-Instruct-2507")
    new = build_plan(facts(*instruct), offline_target(8, H200), Wishes(tp=8, engine_version="0.5.23", like=prev))
    f = flags_of(new)
    for gone in ("--reasoning-parser", "--page-size", "--flashinfer-allreduce-fusion-backend"):
        assert gone not in f, (gone, new.argv)
    assert f["--watchdog-timeout"] == ("1200",)  # the operator's choice is carried
    assert f["--tool-call-parser"] == ("qwen",)  # the new model's own parser (its rule), not qwen3_coder
    dropped = {r.removes[0]: r.why for r in new.rules if r.id == "like-drop"}
    assert dropped["--reasoning-parser"].startswith("the planner added it for deployment q122 (rule reasoning-parser")
    assert "its rule does not apply to Qwen/Qwen3-235B-A22B-Instruct-2507" in dropped["--reasoning-parser"]
    assert "rule mamba-extra-buffer" in dropped["--page-size"]
    assert "rule allreduce-fusion" in dropped["--flashinfer-allreduce-fusion-backend"]
    assert any(c.op == "-" and c.text.startswith("--page-size 64  (the planner added it") for c in new.like.diff)
    # a value the operator changed is theirs: carried
    edited = old.replace(argv=[a if a != "64" else "32" for a in old.argv])
    again = build_plan(facts(*instruct), offline_target(8, H200),
                       Wishes(tp=8, engine_version="0.5.23", like=previous_from_plan(edited, "deployment q122")))
    assert flags_of(again)["--page-size"] == ("32",)
    # the same model again: its rules add the same, nothing is dropped or changed
    same = build_plan(facts(*QWEN122), offline_target(4, H200), Wishes(tp=4, engine_version="0.5.23", like=prev))
    assert flags_of(same) == flags_of(old) and not [c for c in same.like.diff if c.op == "-"]


def test_a_rules_env_is_derived_again_too():
    """SGLANG_ENABLE_SPEC_V2=1 was the mamba rule's (hybrid attention + MTP on 0.5.10): a plan like it for
    DeepSeek-V3 (MTP, no linear attention) does not carry it, though the variable exists there."""
    from gpuops.core.planning.like import previous_from_plan

    old = build_plan(facts(*QWEN122), offline_target(8, H200), Wishes(tp=8, engine_version="0.5.10", name="q122"))
    assert old.env["SGLANG_ENABLE_SPEC_V2"] == "1"
    new = build_plan(facts("deepseek_v3__DeepSeek-V3", "deepseek-ai/DeepSeek-V3"), offline_target(8, H200),
                     Wishes(tp=8, engine_version="0.5.10", like=previous_from_plan(old, "deployment q122")))
    assert "SGLANG_ENABLE_SPEC_V2" not in new.env
    assert any(c.op == "-" and c.text.startswith("SGLANG_ENABLE_SPEC_V2=1  (the planner added it for deployment q122 "
                                                 "(rule mamba-extra-buffer") for c in new.like.diff), new.like.diff


def test_a_swap_plan_does_not_warn_about_the_port_it_takes_over():
    """Planned like OLD to replace it (a swap), the new plan takes OLD's port: OLD's server listens
    there now and is stopped first, so that is no conflict (it warned "port N is in use"); another
    deployment's port still is."""
    from gpuops.core.planning.like import previous_from_plan

    old = build_plan(facts(*QWEN122), host_target(), Wishes(tp=4, name="oldie", port=31000))
    target = with_deployment_ports(host_target(ports_taken={31000: "pid 42 (root: python -m sglang.launch_server)"}),
                                   [("oldie", "gpu1", "ready", 31000), ("other", "gpu1", "ready", 31001)])
    like = previous_from_plan(old, "deployment oldie")
    beside = build_plan(facts(*QWEN122), target, Wishes(tp=4, name="newbie", like=like))
    assert any(w.startswith("port 31000 is in use on gpu1") for w in beside.warnings)  # beside it: a conflict
    swap = build_plan(facts(*QWEN122), target, Wishes(tp=4, name="newbie", like=like, replacing="oldie"))
    assert swap.port == 31000 and not [w for w in swap.warnings if "is in use" in w], swap.warnings
    other = build_plan(facts(*QWEN122), target, Wishes(tp=4, name="newbie", like=like, replacing="oldie", port=31001))
    assert any(w.startswith("port 31001 is in use on gpu1 (deployment other (ready))") for w in other.warnings)
