"""What SGLang keeps outside --mem-fraction-static at start-up (core/engines/sglang/memory.py), checked
against the genuine SGLang resolving its own default fraction for the same command line and GPU size
(tests/sglang_memory_probe.py: 0.5.23 from the host venv, 0.5.10's code beside it); and what the
planner does with it: a warning before a plan whose static share leaves less, the draft's KV cache
counted in the fit."""

from __future__ import annotations

import itertools
import json
import os
import subprocess
from pathlib import Path

import pytest

from gpuops.core import engines
from gpuops.core.domain import split_flags
from gpuops.core.engines.sglang import memory
from gpuops.core.planning.fit import compute_fit, kv_bytes_per_token_per_gpu
from gpuops.core.planning.hostfacts import offline_target
from gpuops.core.planning.like import Previous
from gpuops.core.planning.model_facts import facts_from_config
from gpuops.core.planning.plan import Wishes, build_plan

CONFIGS = Path(__file__).parent / "data" / "configs"
PROBE = Path(__file__).parent / "sglang_memory_probe.py"
MIB = 1 << 20
# real cards' memory as torch reports it (MiB): each of SGLang's GPU-memory bands
GPUS = {"T4": 15095, "RTX 4090": 24564, "L40S": 46068, "H100": 81559, "H200": 143771, "B200": 183359}
MODELS = {"llama": "llama3__Llama-3.1-8B-Instruct", "deepseek": "deepseek_v3__DeepSeek-V3",
          "qwen35": "qwen3_5__Qwen3.5-122B-A10B"}
SPEC = ["--speculative-algorithm", "NEXTN", "--speculative-num-steps", "3", "--speculative-eagle-topk", "1",
        "--speculative-num-draft-tokens", "4"]
def settings_for(version: str) -> dict[str, list[str]]:
    """Each setting the reserve reads, as `version` spells it."""
    return {
        "defaults": [],
        "running 48": ["--max-running-requests", "48"],
        "chunk 2048": ["--chunked-prefill-size", "2048"],
        "no graphs": ["--disable-cuda-graph"],
        # (0.5.10 serves a hybrid model's MTP only with the Mamba state's extra buffer and spec v2, as plans do)
        "speculative": SPEC + (["--mamba-scheduler-strategy", "extra_buffer"] if version == "0.5.10" else []),
        # the decode graphs' largest batch: 0.5.14 renamed the flag, 0.5.20 dropped the old name
        "graph bs 64": ["--cuda-graph-max-bs" if version == "0.5.10" else "--cuda-graph-max-bs-decode", "64"],
        "dp attention 2": ["--enable-dp-attention", "--dp-size", "2"],
        "attn dp 2": ["--attn-dp-size", "2"],  # 0.5.22's spelling
        "attn dp 2, no graphs": ["--attn-dp-size", "2", "--disable-cuda-graph"],
    }


def facts(model: str):
    config = json.loads((CONFIGS / f"{MODELS[model]}.json").read_text())
    return facts_from_config(config, id=MODELS[model], source="local", local_path=None)


def cases(version: str) -> list[tuple[str, str, int, str]]:
    """(model, GPU, TP, setting) over every band, model shape and setting the reserve reads."""
    grid = [(model, gpu, tp, setting)
            for model, gpu, tp, setting in itertools.product(MODELS, GPUS, (1, 2, 4, 8),
                                                             ("defaults", "running 48", "chunk 2048", "no graphs",
                                                              "speculative"))
            if not (setting == "speculative" and model == "llama")  # (no MTP layers)
            # 0.5.10's own Qwen3.5 config class, under this venv's newer transformers (not the one 0.5.10
            # shipped with), loses the vision tower's sizes, so its multimodal share is not 0.5.10's as
            # released: the vision factor is checked against 0.5.23 only
            and not (version == "0.5.10" and model == "qwen35")]
    grid += [(m, g, 2, "graph bs 64") for m in MODELS for g in ("RTX 4090", "H100")
             if not (version == "0.5.10" and m == "qwen35")]
    grid += [("llama", g, 2, "dp attention 2") for g in ("L40S", "H100", "B200")]
    if version != "0.5.10":
        grid += [("llama", g, 4, s) for g in ("H100", "B200") for s in ("attn dp 2", "attn dp 2, no graphs")]
    return grid


def probe(python: Path, version: str, version_path: Path | None, model_dirs: dict[str, Path],
          grid: list[tuple[str, str, int, str]]) -> list[dict]:
    doc = [{"gpu_mib": GPUS[gpu], "argv": ["--model-path", str(model_dirs[model]), "--tp-size", str(tp),
                                          *settings_for(version)[setting]]} for model, gpu, tp, setting in grid]
    env = dict(os.environ, PYTHONPATH=str(version_path), SGLANG_ENABLE_SPEC_V2="1") if version_path else {
        k: v for k, v in os.environ.items() if k != "PYTHONPATH"}
    out = subprocess.run([str(python), str(PROBE), json.dumps(doc)], capture_output=True, text=True, env=env,
                         timeout=900, cwd=model_dirs["llama"].parent)
    assert out.returncode == 0, out.stderr[-3000:]
    return json.loads(out.stdout.strip().splitlines()[-1])


@pytest.fixture(scope="module")
def model_dirs(tmp_path_factory) -> dict[str, Path]:
    root = tmp_path_factory.mktemp("models")
    dirs = {}
    for model, name in MODELS.items():
        (root / model).mkdir()
        (root / model / "config.json").write_text((CONFIGS / f"{name}.json").read_text())
        dirs[model] = root / model
    return dirs


@pytest.mark.parametrize("version", ["0.5.23", "0.5.10"])
def test_the_reserve_is_the_fraction_sglang_chooses_itself(version, sglang_server_venv, sglang_0510, model_dirs):
    grid = cases(version)
    got = probe(sglang_server_venv / "bin" / "python", version, sglang_0510 if version == "0.5.10" else None, model_dirs,
                grid)
    assert len(got) == len(grid)
    wrong, refused = [], []
    for (model, gpu, tp, setting), theirs in zip(grid, got):
        if "error" in theirs:
            refused.append(f"{model} {gpu} TP{tp} {setting}: {theirs['error']}")
            continue
        f = facts(model)
        ours = memory.reserve(version, GPUS[gpu] * MIB, tp, dict(split_flags(settings_for(version)[setting])),
                              mla=f.mla is not None, vision=memory.vision_of(f.vision_tower))
        if abs(ours.fraction - theirs["mem_fraction_static"]) > 1e-9:
            wrong.append(f"{model} {gpu} TP{tp} {setting}: ours {ours.fraction} SGLang's "
                         f"{theirs['mem_fraction_static']} ({ours.why()})")
    # every case resolved (a refusal would hide a case the grid means to check), and each agrees
    assert not refused, "\n".join(refused[:20])
    assert not wrong, f"{len(wrong)} of {len(grid)} differ:\n" + "\n".join(wrong[:30])
    assert len(grid) > 100


def test_a_plan_whose_static_share_leaves_less_than_start_up_allocates_is_warned_and_no_other():
    f = facts("llama")
    h100 = offline_target(1, GPUS["H100"] / 1024)
    plan = build_plan(f, h100, Wishes(tp=1, engine_version="0.5.23"))  # gpuops' default 0.8 leaves 15.9 GiB
    assert plan.fit.startup_reserve_bytes == int(81559 * (1 - 0.83) * MIB)
    assert "decode CUDA graphs" in plan.fit.startup_reserve_why
    assert not any("CUDA graphs and buffers" in w for w in plan.warnings)
    # 0.92 leaves 6.4 GiB, less than SGLang's whole default reserve (13.5 GiB) but more than its graphs
    # and buffers (1.6 GiB): SGLang's own commands run so (0.88 on H100s), so it is not warned of
    snug = build_plan(f, h100, Wishes(tp=1, engine_version="0.5.23", mem_fraction_static=0.92))
    assert not any("CUDA graphs and buffers" in w for w in snug.warnings), snug.warnings
    # a previous deployment's graphs up to batch 4096 (8 GiB of decode graphs) at 0.92: warned
    prev = Previous(source="old-unit", argv=("--model-path", "/m", "--cuda-graph-max-bs-decode", "4096",
                                             "--mem-fraction-static", "0.92"))
    liked = build_plan(f, h100, Wishes(tp=1, engine_version="0.5.23", like=prev))
    assert "decode CUDA graphs (batch <= 4096) 8.0 GiB" in liked.fit.startup_reserve_why
    assert any(w.startswith("--mem-fraction-static 0.92 leaves 6.4 GiB of each GPU outside weights and KV cache, "
                            "less than the 9.1 GiB of CUDA graphs and buffers SGLang 0.5.23 allocates there")
               for w in liked.warnings), liked.warnings


def test_speculative_decoding_counts_the_drafts_kv_cache_in_the_fit():
    f = facts("qwen35")
    assert f.mtp_layers == 1 and f.hybrid is not None
    plain, drafted = kv_bytes_per_token_per_gpu(f, 4), kv_bytes_per_token_per_gpu(f, 4, spec=True)
    # one MTP layer beside 12 full-attention layers: a token costs 13/12 as much
    assert drafted == pytest.approx(plain * 13 / 12, rel=0.01)
    off = compute_fit(f, 4, 143771 * MIB, 0.8, spec=False)
    on = compute_fit(f, 4, 143771 * MIB, 0.8, spec=True)
    assert on.max_total_tokens < off.max_total_tokens
    llama = facts("llama")
    assert kv_bytes_per_token_per_gpu(llama, 2, spec=True) == kv_bytes_per_token_per_gpu(llama, 2)  # no MTP layers


def test_the_engine_says_its_reserve_and_a_fraction_that_leaves_less():
    sglang = engines.get("sglang")
    f = facts("llama")
    leaves_enough = sglang.startup_reserve(f, "0.5.23", GPUS["H100"] * MIB, 1, {"--mem-fraction-static": ("0.8",)})
    assert leaves_enough is not None and leaves_enough.warning is None
    # 0.5.23 on an H100 at TP1: 512 + 8192 * 1.5 + 128 + 256 * 2 + 58 prefill graphs * 8 MiB; it picks 0.83
    assert leaves_enough.bytes == int(81559 * (1 - 0.83) * MIB)
    assert "activations (8,192-token prefill chunks) 12.0 GiB" in leaves_enough.why
    # what SGLang publishes for H100s (0.88) leaves less than its own default reserve: not warned of
    published = sglang.startup_reserve(f, "0.5.23", GPUS["H100"] * MIB, 1, {"--mem-fraction-static": ("0.88",)})
    assert published is not None and published.warning is None
    # graphs to batch 1024 (2 GiB) at 0.97 (2.4 GiB left) do not fit beside the rest start-up allocates
    tight = sglang.startup_reserve(f, "0.5.23", GPUS["H100"] * MIB, 1, {"--mem-fraction-static": ("0.97",),
                                                                        "--cuda-graph-max-bs-decode": ("1024",)})
    assert tight is not None and tight.warning is not None
    assert tight.warning.startswith("--mem-fraction-static 0.97 leaves 2.4 GiB of each GPU outside weights and KV "
                                    "cache, less than the 3.1 GiB of CUDA graphs and buffers SGLang 0.5.23"), \
        tight.warning
    assert "--mem-fraction-static 0.811 is SGLang's own choice here" in tight.warning
    # an older SGLang counts the draft model in its reserve: speculative decoding moves its choice
    old = sglang.startup_reserve(f, "0.5.10", GPUS["H100"] * MIB, 1, {"--mem-fraction-static": ("0.8",),
                                                                     "--speculative-algorithm": ("EAGLE",)})
    assert old is not None and "EAGLE draft and its graphs 4.0 GiB" in old.why


def test_the_plans_memory_bars_say_what_sglangs_default_keeps_beside_what_is_kept_free():
    from rich.console import Console

    from gpuops.tui.plan_view import fit_bars

    plan = build_plan(facts("llama"), offline_target(1, GPUS["H100"] / 1024), Wishes(tp=1, engine_version="0.5.23"))
    console = Console(width=160, record=True)
    console.print(fit_bars(plan))
    assert "kept free 20% (SGLang's default keeps 17%)" in console.export_text()


def test_a_flag_edit_the_reserve_reads_is_checked_again_and_its_warning_replaced():
    from gpuops.core.planning.edits import Edit, apply

    f = facts("llama")
    plan = build_plan(f, offline_target(1, GPUS["H100"] / 1024), Wishes(tp=1, engine_version="0.5.23",
                                                                       mem_fraction_static=0.9))
    big = apply(plan, [Edit("flag", "--cuda-graph-max-bs-decode", ("4096",))], f)
    assert "decode CUDA graphs (batch <= 4096) 8.0 GiB" in big.fit.startup_reserve_why
    warned = [w for w in big.warnings if w.startswith("--mem-fraction-static 0.9 leaves 8.0 GiB")]
    assert len(warned) == 1
    assert plan.fit.startup_reserve_why != big.fit.startup_reserve_why  # the plan it came from is left as it was
    # an edit on top of that one: the warning the big graphs gave goes, none comes
    small = apply(big, [Edit("flag", "--cuda-graph-max-bs-decode", ("256",))], f)
    assert not any("CUDA graphs and buffers" in w for w in small.warnings), small.warnings
    assert "decode CUDA graphs (batch <= 256)" in small.fit.startup_reserve_why
    # an edit the reserve does not read leaves the plan's warnings as they were
    env = apply(big, [Edit("env", "NCCL_DEBUG", ("INFO",))], f)
    assert env.warnings == big.warnings
    # without the facts (a caller that has none), the edit is applied and the reserve left as it was
    assert apply(plan, [Edit("flag", "--cuda-graph-max-bs-decode", ("4096",))]).fit.startup_reserve_why == \
        plan.fit.startup_reserve_why
