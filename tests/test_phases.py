"""The phase parser (core/phases.py) against SGLang startup logs built from the wheels' own
format strings (tests/data/logs/make_logs.py says which file of which version each came from).

``pytest tests/test_phases.py -q -s`` also prints the tracker's throughput (not asserted).
"""

from __future__ import annotations

import importlib.util
import json
import sys
import time
from pathlib import Path

import pytest

from gpuops.core.engines.sglang.phases import (
    OUTCOMES,
    PHASES,
    Crash,
    LogLine,
    Numbers,
    PhaseChange,
    PhaseTracker,
    Progress,
    clean,
    track_log,
)
from gpuops.core.diagnose.triage import triage_log as triage_report


def triage_log(lines, plan=None) -> dict:
    return triage_report(lines, plan).to_json()

LOGS = Path(__file__).parent / "data" / "logs"

BS_512 = (1, 2, 4, 8, 12, 16, 24, 32) + tuple(range(40, 257, 8)) + tuple(range(272, 513, 16))
BS_48 = (1, 2, 4, 8, 12, 16, 24, 32, 40, 48)


def lines_of(name: str) -> list[str]:
    # newline="": keep tqdm's "\r" updates inside their line, as a journal or file follower does
    with open(LOGS / name, encoding="utf-8", newline="") as f:
        text = f.read()
    return text.split("\n")


def run(lines) -> tuple[PhaseTracker, list]:
    tr = PhaseTracker()
    events: list = []
    for raw in lines:
        events.extend(tr.feed(raw))
    events.extend(tr.finish())
    return tr, events


def phases_of(events) -> list[str]:
    return [e.phase for e in events if isinstance(e, PhaseChange)]


def progress_of(events, phase: str) -> list[tuple[int, int | None, str]]:
    return [(e.done, e.total, e.what) for e in events if isinstance(e, Progress) and e.phase == phase]


# ---------------------------------------------------------------------------------------------
# Vocabulary
# ---------------------------------------------------------------------------------------------


def test_vocabularies_match_design():
    assert PHASES == ("starting", "dist_init", "weights", "kv_cache", "cuda_graph", "draft", "http", "ready")
    assert OUTCOMES == ("ready", "crashed", "incomplete")


# ---------------------------------------------------------------------------------------------
# Full startups, two versions
# ---------------------------------------------------------------------------------------------


def test_full_start_0_5_10_old_wording():
    tr, events = run(lines_of("sglang-0.5.10-dense-tp4.log"))
    assert phases_of(events) == ["starting", "dist_init", "weights", "kv_cache", "cuda_graph", "http", "ready"]
    assert tr.phase == "ready" and tr.outcome == "ready" and tr.crash is None
    assert not tr.ready_inferred
    assert tr.last_phase_line == "The server is fired up and ready to roll!"
    # phase events carry the line that moved the phase and SGLang's timestamp
    ev = {e.phase: e for e in events if isinstance(e, PhaseChange)}
    assert ev["dist_init"].text == "Init torch distributed begin." and ev["dist_init"].ts == "2026-07-14 07:48:16"
    assert ev["weights"].text.startswith("Load weight begin. avail mem=137.62 GB")
    assert ev["kv_cache"].text.startswith("KV Cache is allocated. #tokens: 1289216")
    assert ev["cuda_graph"].text.startswith("Capture cuda graph begin.")
    assert ev["http"].text == "INFO:     Started server process [2345]"
    assert [e.line_no for e in events if isinstance(e, PhaseChange)] == sorted(
        e.line_no for e in events if isinstance(e, PhaseChange))
    # shards n/N and CUDA-graph batch sizes
    assert progress_of(events, "weights") == [(24, 24, "shards")]
    assert progress_of(events, "cuda_graph") == [(0, 52, "batch sizes"), (52, 52, "batch sizes")]
    assert tr.graph_batch_sizes["graph"] == BS_512
    n = tr.numbers
    assert n["dist_init_elapsed_s"] == 12.41 and n["dist_init_mem_usage_gb"] == 1.27
    assert n["load_begin_avail_mem_gb"] == 137.62
    assert n["load_elapsed_s"] == 61.85 and n["weights_avail_mem_gb"] == 78.12 and n["weights_mem_usage_gb"] == 59.5
    assert n["kv_tokens"] == 1289216 and n["k_size_gb"] == 29.5 and n["v_size_gb"] == 29.5 and n["kv_size_gb"] == 59.0
    assert n["pool_avail_mem_gb"] == 17.93
    assert n["graph_begin_avail_mem_gb"] == 17.41 and n["graph_elapsed_s"] == 33.52
    assert n["graph_mem_usage_gb"] == 1.93 and n["graph_avail_mem_gb"] == 15.48
    assert n["graph_batch_sizes"] == 52 and n["graph_max_bs"] == 512
    assert n["max_total_num_tokens"] == 1289216 and n["context_len"] == 262144
    assert n["max_running_requests"] == 4096 and n["chunked_prefill_size"] == 16384
    assert n["available_gpu_mem_gb"] == 15.48 and n["avail_mem_gb"] == 15.48
    assert n["http_port"] == 30000
    assert tr.info == {"nccl_version": "2.27.3", "model_type": "Qwen3MoeForCausalLM", "quant": "fp8",
                       "url": "http://0.0.0.0:30000"}
    # every Numbers event reports only what changed
    assert all(isinstance(e.values, dict) and e.values for e in events if isinstance(e, Numbers))


def test_full_start_0_5_23_new_wording():
    tr, events = run(lines_of("sglang-0.5.23-dense-tp2.log"))
    assert phases_of(events) == ["starting", "dist_init", "weights", "kv_cache", "cuda_graph", "http", "ready"]
    assert tr.outcome == "ready"
    ev = {e.phase: e for e in events if isinstance(e, PhaseChange)}
    assert ev["dist_init"].text == "Init parallel begin."
    assert ev["cuda_graph"].text.startswith("Capture target prefill CUDA graph begin. backend=breakable")
    assert progress_of(events, "weights") == [(17, 17, "shards")]
    assert progress_of(events, "cuda_graph") == [
        (6, 6, "prefill shapes"), (0, None, "batch sizes"), (52, 52, "batch sizes")]
    assert tr.graph_batch_sizes == {"graph": BS_512}
    n = tr.numbers
    assert n["dist_init_elapsed_s"] == 5.12 and n["dist_init_mem_usage_gb"] == 0.88  # Init parallel ends / Memory baseline
    assert n["load_begin_avail_mem_gb"] == 138.01 and n["load_elapsed_s"] == 22.65
    assert n["kv_tokens"] == 1352704 and n["k_size_gb"] == 41.28
    assert n["pool_avail_mem_gb"] == 23.18
    assert n["prefill_graph_elapsed_s"] == 14.02 and n["prefill_graph_mem_usage_gb"] == 0.84
    assert n["graph_elapsed_s"] == 24.37 and n["graph_batch_sizes"] == 52 and n["graph_avail_mem_gb"] == 20.5
    assert n["max_total_num_tokens"] == 1352704 and n["context_len"] == 40960
    assert tr.info["kv_dtype"] == "torch.bfloat16" and tr.info["model_type"] == "Qwen3ForCausalLM"
    assert "quant" not in tr.info


def test_hybrid_mtp_0_5_10_draft_after_graphs():
    tr, events = run(lines_of("sglang-0.5.10-hybrid-mtp-tp4.log"))
    assert phases_of(events) == ["starting", "dist_init", "weights", "kv_cache", "cuda_graph", "draft", "http", "ready"]
    ev = {e.phase: e for e in events if isinstance(e, PhaseChange)}
    # the draft ModelRunner's own "Init torch distributed begin." (0.5.10) opens the draft phase
    assert ev["draft"].text == "Init torch distributed begin."
    assert ev["draft"].line_no > ev["cuda_graph"].line_no
    n = tr.numbers
    assert n["mamba_cache_size"] == 144 and n["mamba_conv_state_gb"] == 0.42 and n["mamba_ssm_state_gb"] == 12.66
    assert n["mamba_intermediate_ssm_gb"] == 16.88 and n["mamba_intermediate_conv_gb"] == 0.56
    # the target's numbers stay; the draft's get their own keys
    assert n["load_elapsed_s"] == 88.34 and n["draft_load_elapsed_s"] == 19.92
    assert n["weights_mem_usage_gb"] == 61.19 and n["draft_weights_mem_usage_gb"] == 1.79
    assert n["kv_tokens"] == 1048576 and n["k_size_gb"] == 6.0 and n["draft_k_size_gb"] == 0.5
    assert n["pool_avail_mem_gb"] == 37.96 and n["draft_pool_avail_mem_gb"] == 31.98
    assert n["graph_elapsed_s"] == 21.37
    assert n["draft_graph_elapsed_s"] == 9.81 and n["draft_extend_graph_elapsed_s"] == 6.12
    assert n["max_running_requests"] == 48
    assert tr.info["model_type"] == "Qwen3_5MoeForConditionalGeneration"
    assert tr.info["draft_model_type"] == "Qwen3_5ForCausalLMMTP"
    assert tr.graph_batch_sizes == {"graph": BS_48}
    assert progress_of(events, "weights") == [(40, 40, "shards")]
    assert progress_of(events, "cuda_graph") == [(0, 10, "batch sizes"), (10, 10, "batch sizes")]
    assert progress_of(events, "draft") == [
        (40, 40, "shards"), (0, None, "batch sizes"), (10, 10, "batch sizes"),
        (0, None, "batch sizes"), (10, 10, "batch sizes")]
    assert tr.outcome == "ready"


def test_hybrid_mtp_0_5_23_draft_loads_with_target():
    tr, events = run(lines_of("sglang-0.5.23-hybrid-mtp-tp4.log"))
    assert phases_of(events) == ["starting", "dist_init", "weights", "kv_cache", "cuda_graph", "draft", "http", "ready"]
    ev = {e.phase: e for e in events if isinstance(e, PhaseChange)}
    assert ev["cuda_graph"].text.startswith("Capture target verify CUDA graph begin.")
    assert ev["draft"].text.startswith("Capture draft decode CUDA graph begin.")
    # 0.5.23 loads the draft right after the target (weights phase): its numbers are the draft's
    assert tr.numbers["load_elapsed_s"] == 41.02 and tr.numbers["draft_load_elapsed_s"] == 7.77
    assert tr.info["draft_model_type"] == "Qwen3_5ForCausalLMMTP"
    assert progress_of(events, "weights") == [(40, 40, "shards"), (40, 40, "draft shards")]
    assert tr.numbers["mamba_cache_size"] == 144
    assert tr.graph_batch_sizes == {"graph": BS_48, "draft_graph": BS_48, "draft_extend_graph": BS_48}
    assert tr.numbers["draft_graph_elapsed_s"] == 7.93 and tr.numbers["draft_extend_graph_elapsed_s"] == 5.06
    assert progress_of(events, "draft") == [
        (0, 10, "batch sizes"), (10, 10, "batch sizes"), (0, 10, "batch sizes"), (10, 10, "batch sizes")]
    assert tr.outcome == "ready"


def test_draft_load_after_cuda_graph_is_phase_draft():
    tr = PhaseTracker()
    for line in [
        "[2026-07-14 09:12:44 TP0] Load weight begin. avail mem=137.71 GB",
        "[2026-07-14 09:14:22 TP0] Load weight end. elapsed=88.34 s, type=Qwen3_5MoeForConditionalGeneration, avail mem=76.52 GB, mem usage=61.19 GB.",
        "[2026-07-14 09:14:24 TP0] Capture cuda graph begin. This can take up to several minutes. avail mem=37.42 GB",
        "[2026-07-14 09:14:46 TP0] Capture cuda graph end. Time elapsed: 21.37 s. mem usage=2.61 GB. avail mem=34.81 GB.",
    ]:
        tr.feed(line)
    assert tr.phase == "cuda_graph"
    out = tr.feed("[2026-07-14 09:14:46 TP0] Load weight begin. avail mem=34.81 GB")
    assert [e.phase for e in out if isinstance(e, PhaseChange)] == ["draft"]
    assert tr.phase == "draft" and tr.numbers["draft_load_begin_avail_mem_gb"] == 34.81


def test_phase_never_goes_backwards_with_lagging_ranks():
    tr = PhaseTracker()
    tr.feed("[2026-07-14 07:50:01 TP0] Memory pool end. avail mem=17.93 GB")
    tr.feed("[2026-07-14 07:50:03 TP0] Capture cuda graph begin. This can take up to several minutes. avail mem=17.41 GB")
    # TP3 is a little behind in the journal: its pool line is no draft and moves nothing back
    out = tr.feed("[2026-07-14 07:50:03 TP3] Memory pool end. avail mem=17.90 GB")
    assert not [e for e in out if isinstance(e, PhaseChange)]
    assert tr.phase == "cuda_graph"
    assert "draft_pool_avail_mem_gb" not in tr.numbers
    assert tr.numbers["pool_avail_mem_gb"] == 17.93  # the lowest rank's number wins
    tr.feed("[2026-07-14 07:49:04 TP1] Init torch distributed begin.")
    assert tr.phase == "cuda_graph"


# ---------------------------------------------------------------------------------------------
# Tolerance
# ---------------------------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("raw", "text", "ts", "ranks"),
    [
        ("[2026-07-14 07:49:04 TP3 EP3] Init torch distributed begin.", "Init torch distributed begin.",
         "2026-07-14 07:49:04", {"TP": 3, "EP": 3}),
        ("[2026-07-14 07:49:04 DP1 TP1] Load weight begin. avail mem=137.62 GB", "Load weight begin. avail mem=137.62 GB",
         "2026-07-14 07:49:04", {"DP": 1, "TP": 1}),
        ("[2026-07-14 07:49:04 PP0 TP0] Memory pool end. avail mem=17.93 GB", "Memory pool end. avail mem=17.93 GB",
         "2026-07-14 07:49:04", {"PP": 0, "TP": 0}),
        ("[2026-07-14 07:49:04 DP0 PP1 ATTN_CP0 MOE_DP0 TP5 EP5] x", "x", "2026-07-14 07:49:04",
         {"DP": 0, "PP": 1, "ATTN_CP": 0, "MOE_DP": 0, "TP": 5, "EP": 5}),
        ("[2026-07-14 07:49:04.123 TP0] x\n", "x", "2026-07-14 07:49:04.123", {"TP": 0}),  # SGLANG_LOG_MS
        ("[2026-07-14 07:49:04] The server is fired up and ready to roll!",
         "The server is fired up and ready to roll!", "2026-07-14 07:49:04", {}),
        ("sglang-1  | [2026-07-14 07:49:04 TP3 EP3] Init parallel begin.", "Init parallel begin.",
         "2026-07-14 07:49:04", {"TP": 3, "EP": 3}),
        ("\x1b[36msglang-1  |\x1b[0m \x1b[32m[2026-07-14 07:49:04 TP0]\x1b[0m Load weight end. elapsed=1.00 s",
         "Load weight end. elapsed=1.00 s", "2026-07-14 07:49:04", {"TP": 0}),
        ("Nov 30 12:00:01 gpu1 python3[4101]: [2026-11-30 12:00:01 TP0] Init parallel begin.",
         "Init parallel begin.", "2026-11-30 12:00:01", {"TP": 0}),
        ("2026-11-30T12:00:01.123456789Z [2026-11-30 12:00:01 TP0] Init parallel begin.",
         "Init parallel begin.", "2026-11-30 12:00:01", {"TP": 0}),
        ("INFO:     Uvicorn running on http://0.0.0.0:30000 (Press CTRL+C to quit)",
         "INFO:     Uvicorn running on http://0.0.0.0:30000 (Press CTRL+C to quit)", None, {}),
        ("\rLoading safetensors checkpoint shards:   0% Completed | 0/40 [00:00<?, ?it/s]"
         "\rLoading safetensors checkpoint shards:  45% Completed | 18/40 [00:39<00:48, 2.20s/it]",
         "Loading safetensors checkpoint shards:  45% Completed | 18/40 [00:39<00:48, 2.20s/it]", None, {}),
        ("", "", None, {}),
    ],
)
def test_clean(raw, text, ts, ranks):
    ln = clean(raw)
    assert isinstance(ln, LogLine)
    assert (ln.raw, ln.text, ln.ts, ln.ranks) == (raw, text, ts, ranks)


def test_clean_keeps_indentation_and_pipes_in_messages():
    assert clean("  File \"/x.py\", line 1, in f").text == "  File \"/x.py\", line 1, in f"
    t = "Capturing batches (bs=512 avail_mem=17.38 GB):   2%|▏         | 1/52 [00:01<01:02,  1.22s/it]"
    assert clean(t).text == t


def _compose(lines: list[str]) -> list[str]:
    """What `docker compose logs` prints: a colored "name  | " prefix; SGLang's output colored too."""
    out = []
    for line in lines:
        colored = line.replace("] ", "]\x1b[0m ", 1) if line.startswith("[") else line
        out.append("\x1b[36msglang-1  |\x1b[0m " + ("\x1b[32m" + colored if line.startswith("[") else colored))
    return out


@pytest.mark.parametrize("name", ["sglang-0.5.10-dense-tp4.log", "sglang-0.5.23-hybrid-mtp-tp4.log"])
def test_container_prefix_and_ansi_give_the_same_result(name):
    lines = [x for x in lines_of(name) if x]
    plain, pe = run(lines)
    boxed, be = run(_compose(lines))
    assert phases_of(be) == phases_of(pe)
    assert [(e.phase, e.done, e.total, e.what) for e in be if isinstance(e, Progress)] == \
        [(e.phase, e.done, e.total, e.what) for e in pe if isinstance(e, Progress)]
    assert boxed.numbers == plain.numbers
    assert boxed.outcome == plain.outcome == "ready"


def test_dp_and_pp_rank_prefixes_drive_the_tracker():
    tr = PhaseTracker()
    tr.feed("[2026-07-14 07:49:04 DP0 TP0] Init torch distributed begin.")
    tr.feed("[2026-07-14 07:49:04 DP1 TP1] Init torch distributed begin.")
    tr.feed("[2026-07-14 07:49:14 DP1 TP1] Init torch distributed ends. elapsed=10.50 s, mem usage=1.40 GB")
    tr.feed("[2026-07-14 07:49:14 DP0 TP0] Init torch distributed ends. elapsed=10.20 s, mem usage=1.30 GB")
    assert tr.phase == "dist_init"
    assert tr.numbers["dist_init_elapsed_s"] == 10.2  # DP0 TP0's, though DP1 TP1 logged first
    tr.feed("[2026-07-14 07:49:15 PP1 TP0] Load weight begin. avail mem=130.00 GB")
    tr.feed("[2026-07-14 07:49:15 PP0 TP0] Load weight begin. avail mem=131.00 GB")
    assert tr.phase == "weights" and "draft_load_begin_avail_mem_gb" not in tr.numbers


def test_tqdm_updates_in_one_line_give_the_latest_state():
    tr = PhaseTracker()
    tr.feed("[2026-07-14 07:49:04 TP0] Load weight begin. avail mem=137.62 GB")
    states = [f"Loading safetensors checkpoint shards: {100 * n / 40:3.0f}% Completed | {n}/40 [00:{n:02d}<00:40, 2.20s/it]"
              for n in range(19)]
    out = tr.feed("\r" + "\r".join(states))
    assert [e for e in out if isinstance(e, Progress)] == [Progress("weights", 18, 40, "shards")]
    out = tr.feed("Multi-thread loading shards:  50% Completed | 20/40 [00:10<00:10, 2.00it/s]")
    assert [e for e in out if isinstance(e, Progress)] == [Progress("weights", 20, 40, "shards")]
    # a bar without "\r" history (one state per line, as a line-splitting reader gives it)
    out = tr.feed("Loading safetensors checkpoint shards:  53% Completed | 21/40 [00:46<00:41, 2.20s/it]")
    assert tr.progress["weights"] == Progress("weights", 21, 40, "shards")


def test_graph_progress_from_capture_lines():
    tr = PhaseTracker()
    tr.feed("[2026-07-14 07:50:03 TP0] Capture cuda graph begin. This can take up to several minutes. avail mem=17.41 GB")
    tr.feed("[2026-07-14 07:50:03 TP0] Capture cuda graph bs [1, 2, 4, 8]")
    assert tr.progress["cuda_graph"] == Progress("cuda_graph", 0, 4, "batch sizes")
    tr.feed("\rCapturing batches (bs=8 avail_mem=17.38 GB):   0%|          | 0/4 [00:00<?, ?it/s]"
            "\rCapturing batches (bs=4 avail_mem=17.30 GB):  25%|██▌       | 1/4 [00:01<00:03,  1.00s/it]"
            "\rCapturing batches (bs=2 avail_mem=17.29 GB):  50%|█████     | 2/4 [00:02<00:02,  1.00s/it]")
    assert tr.progress["cuda_graph"] == Progress("cuda_graph", 2, 4, "batch sizes")
    assert tr.graph_batch_sizes["graph"] == (1, 2, 4, 8)


def test_very_long_lines_are_cheap():
    server_args = lines_of("sglang-0.5.23-hybrid-mtp-tp4.log")[0]
    assert len(server_args) > 15_000 and "server_args={" in server_args
    tr = PhaseTracker()
    t0 = time.perf_counter()
    for _ in range(200):
        tr.feed(server_args)
    # adversarial: a megabyte of brackets, pipes, digits and "Capture"-like text in one line
    nasty = "[2026-07-14 07:49:04 TP0] Capture " + ("| 1/2 [x] 9% Completed " * 45_000)
    tr.feed(nasty)
    tr.feed("Capturing " + "(bs=1: 50%|" * 100_000)
    tr.feed("sglang-1  | " + "a |" * 300_000)
    elapsed = time.perf_counter() - t0
    assert tr.phase == "starting" and tr.crash is None
    assert elapsed < 2.0, f"long lines took {elapsed:.2f} s"


def test_uvicorn_routed_ready_line_and_inferred_ready():
    base = lines_of("sglang-0.5.10-dense-tp4.log")
    ready = [x for x in base if x.endswith("The server is fired up and ready to roll!")]
    assert len(ready) == 1
    # --tokenizer-worker-num > 1: the http_server logger goes through uvicorn's handler
    routed = [("INFO:     The server is fired up and ready to roll!" if x in ready else x) for x in base]
    tr, _ = run(routed)
    assert tr.outcome == "ready" and not tr.ready_inferred
    # no ready line at all: uvicorn is up and the warmup request succeeded
    missing = [x for x in base if x not in ready]
    tr, events = run(missing)
    assert tr.outcome == "ready" and tr.ready_inferred and tr.phase == "ready"
    warm = next(i for i, x in enumerate(missing, 1) if '"POST /generate HTTP/1.1" 200' in x)
    assert tr.ready_line_no == warm and [e for e in events if isinstance(e, PhaseChange)][-1].line_no == warm
    # ...but only uvicorn, no successful warmup: not ready
    tr, _ = run([x for x in missing if "POST /generate" not in x])
    assert tr.outcome == "incomplete" and tr.phase == "http"


def test_inferred_ready_waits_for_the_real_ready_line():
    tr = PhaseTracker()
    tr.feed("INFO:     Uvicorn running on http://0.0.0.0:30000 (Press CTRL+C to quit)")
    tr.feed('INFO:     127.0.0.1:51236 - "POST /generate HTTP/1.1" 200 OK')
    assert tr.outcome == "incomplete"
    out = tr.feed("[2026-07-14 07:50:44] The server is fired up and ready to roll!")
    assert [e.line_no for e in out if isinstance(e, PhaseChange)] == [3]
    assert tr.ready_line_no == 3 and not tr.ready_inferred
    # a live follower whose stream went quiet settles it with idle()
    tr = PhaseTracker()
    tr.feed("INFO:     Uvicorn running on http://0.0.0.0:30000 (Press CTRL+C to quit)")
    tr.feed('INFO:     127.0.0.1:51236 - "POST /generate HTTP/1.1" 200 OK')
    assert tr.idle() and tr.outcome == "ready" and tr.ready_inferred and tr.ready_line_no == 2
    assert tr.idle() == []
    # a failed warmup after a 200 elsewhere is no ready
    tr = PhaseTracker()
    tr.feed("INFO:     Uvicorn running on http://0.0.0.0:30000 (Press CTRL+C to quit)")
    tr.feed('INFO:     127.0.0.1:51236 - "GET /health HTTP/1.1" 503 Service Unavailable')
    tr.finish()
    assert tr.outcome == "incomplete"


# ---------------------------------------------------------------------------------------------
# Crashes
# ---------------------------------------------------------------------------------------------

def test_a_log_cut_on_a_fatal_lines_traceback_header_is_a_crash_and_a_requests_is_not():
    """SGLang kills itself after "Initialization failed. warmup error: <traceback>": a paste cut right
    after the header still says the server died (in http, by that line). A failed request's
    traceback cut the same way after ready leaves the server ready."""
    up = ["[2025-10-22 10:27:27] INFO:     Uvicorn running on http://127.0.0.1:9316 (Press CTRL+C to quit)"]
    cut = "[2025-10-22 10:29:28] Initialization failed. warmup error: Traceback (most recent call last):"
    tr = track_log(up + [cut])
    assert tr.outcome == "crashed" and tr.crash.phase == "http" and tr.crash.line_no == 2
    assert tr.crash.summary == "Initialization failed. warmup error:"
    tr = PhaseTracker()
    for line in up + [cut]:
        tr.feed(line)
    assert tr.outcome == "incomplete"  # (still being written: the frames may follow)
    ready = up + ["[2025-10-22 10:27:28] The server is fired up and ready to roll!",
                  "[2025-10-22 10:29:28] ERROR:    Exception in ASGI application",
                  "Traceback (most recent call last):"]
    assert track_log(ready).outcome == "ready"


def test_a_process_groups_coordinator_being_built_places_a_crash_in_dist_init_and_its_later_use_does_not():
    def crash_phase(func: str) -> str:
        return track_log([
            "Traceback (most recent call last):",
            '  File "/x/sglang/srt/distributed/parallel_state.py", line 464, in ' + func,
            "    self.mq_broadcaster = MessageQueue.create_from_process_group(self.cpu_group, 1 << 22, 6)",
            '  File "/x/sglang/srt/distributed/device_communicators/shm_broadcast.py", line 214, in ' + func,
            "    self.local_socket.bind(socket_addr)",
            "zmq.error.ZMQError: Address already in use (addr='tcp://127.0.0.1:50000')",
        ]).crash.phase

    assert crash_phase("__init__") == "dist_init"  # GroupCoordinator.__init__ making its MessageQueue
    assert crash_phase("broadcast_object") == "starting"  # the same files while serving: not a start-up step


SPEC_ERROR = (
    "ValueError: Speculative decoding for Qwen3_5MoeForConditionalGeneration is not compatible with radix cache "
    "when using --mamba-scheduler-strategy no_buffer.To use radix cache with speculative decoding, please use "
    "--mamba-scheduler-strategy extra_buffer and set SGLANG_ENABLE_SPEC_V2=1."
)


def test_crash_spec_config_value_error():
    tr, events = run(lines_of("crash-spec-config-0.5.10.log"))
    assert tr.outcome == "crashed"
    c = tr.crash
    assert isinstance(c, Crash)
    assert c.summary == SPEC_ERROR  # SGLang 0.5.10's server_args.py, verbatim: no space after "no_buffer."
    assert "no_buffer.To use radix cache" in c.summary
    assert c.phase == "starting" and c.inferred_from == "traceback"
    assert c.evidence[-1] == SPEC_ERROR
    assert any("_handle_mamba_radix_cache" in e for e in c.evidence)
    assert c.line_no == 4  # the "Traceback (most recent call last):" line
    assert [e for e in events if isinstance(e, Crash)] == [c]
    doc = triage_log(lines_of("crash-spec-config-0.5.10.log"))
    assert (doc["phase"], doc["outcome"]) == ("starting", "crashed")
    assert [f["code"] for f in doc["findings"]] == ["spec-config-invalid"]  # tests/test_rules.py: the rules


def test_crash_cuda_graph_oom_inferred_from_traceback():
    tr, events = run(lines_of("crash-graph-oom-traceback-only-0.5.10.log"))
    assert tr.phase == "starting"  # --log-level warning: no phase line said anything
    assert tr.outcome == "crashed"
    c = tr.crash
    assert c.phase == "cuda_graph" and c.inferred_from == "traceback"
    assert c.summary.startswith("Exception: Capture cuda graph failed: CUDA out of memory. Tried to allocate 1.50 GiB.")
    assert c.evidence[0] == "Scheduler hit an exception:"
    assert any(e.endswith("in init_device_graphs") for e in c.evidence)
    assert any(e.startswith("torch.OutOfMemoryError: CUDA out of memory.") for e in c.evidence)
    assert c.evidence[-1] == c.summary
    assert c.line_no == 2
    crashes = [e for e in events if isinstance(e, Crash)]
    assert crashes[0].summary.startswith("torch.OutOfMemoryError")  # emitted at once, then refined
    assert crashes[-1] == c
    assert triage_log(lines_of("crash-graph-oom-traceback-only-0.5.10.log"))["phase"] == "cuda_graph"


def test_crash_nccl_error_during_dist_init():
    lines = lines_of("crash-nccl-dist-init-0.5.10.log")
    tr, events = run(lines)
    assert tr.phase == "dist_init" and tr.outcome == "crashed"
    c = tr.crash
    assert c.phase == "dist_init" and c.inferred_from == "phase"
    assert c.summary == "RuntimeError: NCCL error: unhandled system error (run with NCCL_DEBUG=INFO for details)"
    assert "Scheduler hit an exception:" in c.evidence[0]
    assert any("ncclCommInitRank" in e for e in c.evidence)
    assert lines[c.line_no - 1].startswith("[2026-07-14 11:20:15 TP0 EP0] Scheduler hit an exception:")
    # TP2's identical traceback and the parent's sigquit follow from the first crash
    assert len([e for e in events if isinstance(e, Crash)]) == 1
    # the frames alone would say the same
    frames_only = [x for x in lines if "Init torch distributed" not in x]
    tr2, _ = run(frames_only)
    assert tr2.crash.phase == "dist_init" and tr2.crash.inferred_from == "traceback"


def test_crash_kv_cache_not_enough_memory():
    tr, _ = run(lines_of("crash-kv-not-enough-memory-0.5.23.log"))
    assert tr.phase == "weights"  # the last phase line was "Load weight end."
    c = tr.crash
    assert c.phase == "kv_cache" and c.inferred_from == "traceback"
    assert c.summary == ("RuntimeError: Not enough memory. Please try to increase --mem-fraction-static. "
                         "Current value: mem_fraction_static=0.42")
    assert any(e.endswith("in init_memory_pools") for e in c.evidence)
    doc = triage_log(lines_of("crash-kv-not-enough-memory-0.5.23.log"))
    assert (doc["phase"], doc["outcome"]) == ("kv_cache", "crashed")
    assert [f["code"] for f in doc["findings"]] == ["kv-cache-oom"]


def test_incomplete_after_dist_init_begin():
    tr, events = run(lines_of("incomplete-dist-init-0.5.10.log"))
    assert phases_of(events) == ["starting", "dist_init"]
    assert tr.phase == "dist_init" and tr.outcome == "incomplete" and tr.crash is None
    assert tr.last_phase_line == "Init torch distributed begin."
    doc = triage_log(lines_of("incomplete-dist-init-0.5.10.log"))
    assert (doc["phase"], doc["outcome"]) == ("dist_init", "incomplete")
    assert [(f["code"], f["severity"]) for f in doc["findings"]] == [("nccl-init-stall", "warning")]


def test_fatal_lines_without_traceback():
    tr, _ = run(lines_of("sglang-0.5.10-dense-tp4.log") + [
        "[2026-07-14 09:01:02 TP0 EP0] Scheduler watchdog timeout (self.watchdog_timeout=300, self.soft=False)"])
    assert tr.outcome == "crashed" and tr.crash.phase == "ready" and tr.crash.inferred_from == "phase"
    assert tr.crash.summary == "Scheduler watchdog timeout (self.watchdog_timeout=300, self.soft=False)"
    tr, _ = run(["[2026-07-14 07:49:04 TP0] Init torch distributed begin.",
                 "[2026-07-14 07:49:09] Received sigquit from a child process. It usually means the child failed."])
    assert tr.outcome == "crashed" and tr.crash.phase == "dist_init"


def test_request_traceback_after_ready_is_not_a_crash():
    tail = [
        "ERROR:    Exception in ASGI application",
        "Traceback (most recent call last):",
        '  File "/usr/local/lib/python3.12/dist-packages/uvicorn/protocols/http/httptools_impl.py", line 409, in run_asgi',
        "    result = await app(  # type: ignore[func-returns-value]",
        "json.decoder.JSONDecodeError: Expecting value: line 1 column 1 (char 0)",
    ]
    tr, _ = run(lines_of("sglang-0.5.23-dense-tp2.log") + tail)
    assert tr.outcome == "ready" and tr.crash is None


def test_traceback_then_ready_is_ready():
    lines = lines_of("sglang-0.5.23-dense-tp2.log")
    noise = ["[2026-11-02 14:05:00 TP0] a warning logged with exc_info", "Traceback (most recent call last):",
             '  File "/x/gc_utils.py", line 3, in freeze', "    gc.freeze()", "RuntimeError: boom"]
    # before uvicorn: recorded as a crash, but the ready line after it wins
    i = next(i for i, x in enumerate(lines) if "Started server process" in x)
    tr, _ = run(lines[:i] + noise + lines[i:])
    assert tr.crash is not None and tr.crash.summary == "RuntimeError: boom" and tr.outcome == "ready"
    # after uvicorn, a traceback without an SGLang fatal line is not a crash at all
    i = next(i for i, x in enumerate(lines) if "Uvicorn running" in x)
    tr, _ = run(lines[: i + 1] + noise + lines[i + 1:])
    assert tr.crash is None and tr.outcome == "ready"
    # ...while the warmup's own failure is
    tr, _ = run(lines[: i + 1] + [
        "[2026-11-02 14:05:00] Initialization failed. warmup error: Traceback (most recent call last):",
        '  File "/s/sglang/srt/entrypoints/http_server.py", line 2380, in _execute_server_warmup',
        "    res = requests.post(",
        "requests.exceptions.ReadTimeout: HTTPConnectionPool(host='127.0.0.1', port=30000): Read timed out.",
    ])
    assert tr.outcome == "crashed" and tr.crash.phase == "http"
    assert tr.crash.evidence[0] == "Initialization failed. warmup error:"


def test_log_ending_inside_a_traceback():
    tr, _ = run(["[2026-07-14 07:49:04 TP0] Load weight begin. avail mem=137.62 GB",
                 "[2026-07-14 07:49:30 TP0] Scheduler hit an exception: Traceback (most recent call last):",
                 '  File "/s/sglang/srt/model_executor/model_runner.py", line 507, in initialize',
                 "    self.load_model()"])
    assert tr.outcome == "crashed" and tr.crash.phase == "weights"
    assert tr.crash.summary == "(the log ends inside this traceback)"


def test_frames_place_a_draft_crash():
    tr, _ = run([
        "[2026-07-14 09:14:46 TP0] Capture cuda graph end. Time elapsed: 21.37 s. mem usage=2.61 GB. avail mem=34.81 GB.",
        "[2026-07-14 09:14:47 TP0] Scheduler hit an exception: Traceback (most recent call last):",
        '  File "/s/sglang/srt/managers/scheduler.py", line 633, in init_model_worker',
        "    self.maybe_init_draft_worker()",
        '  File "/s/sglang/srt/speculative/eagle_worker.py", line 131, in __init__',
        "    super().__init__(",
        '  File "/s/sglang/srt/model_executor/model_runner.py", line 507, in initialize',
        "    self.load_model()",
        "safetensors_rust.SafetensorError: Error while deserializing header: HeaderTooLarge",
    ])
    assert tr.crash.phase == "draft" and tr.crash.inferred_from == "traceback"
    assert tr.crash.summary.startswith("safetensors_rust.SafetensorError")


# ---------------------------------------------------------------------------------------------
# triage_log
# ---------------------------------------------------------------------------------------------


def test_triage_log_shape():
    doc = triage_log(lines_of("sglang-0.5.10-hybrid-mtp-tp4.log"))
    assert doc == {"schema": 1, "phase": "ready", "outcome": "ready", "findings": []}
    assert list(doc) == ["schema", "phase", "outcome", "findings"]
    json.dumps(doc)
    assert triage_log([]) == {"schema": 1, "phase": None, "outcome": "incomplete", "findings": []}
    # lines with their newlines, as iterating a file gives them
    with open(LOGS / "sglang-0.5.23-dense-tp2.log", encoding="utf-8", newline="") as f:
        assert triage_log(f)["outcome"] == "ready"


def test_triage_log_reports_the_last_start_of_a_journal():
    lines = lines_of("crash-nccl-dist-init-0.5.10.log") + lines_of("sglang-0.5.10-dense-tp4.log")
    assert triage_log(lines)["outcome"] == "ready"
    lines = lines_of("sglang-0.5.10-dense-tp4.log") + lines_of("incomplete-dist-init-0.5.10.log")
    doc = triage_log(lines)
    assert (doc["phase"], doc["outcome"]) == ("dist_init", "incomplete")
    # the finding's evidence counts lines from the top of the whole journal
    n = len(lines_of("sglang-0.5.10-dense-tp4.log"))
    assert [f["code"] for f in doc["findings"]] == ["nccl-init-stall"]
    assert doc["findings"][0]["evidence"][0]["source"] == f"log:{n + 5}"
    assert track_log(lines).line_no == len(lines_of("incomplete-dist-init-0.5.10.log"))


def test_feed_accepts_a_logline():
    tr = PhaseTracker()
    out = tr.feed(clean("[2026-07-14 07:49:04 TP0] Init parallel begin."))
    assert phases_of(out) == ["starting", "dist_init"]


# ---------------------------------------------------------------------------------------------
# The fixtures are what the generator writes
# ---------------------------------------------------------------------------------------------


def test_fixtures_match_their_generator():
    spec = importlib.util.spec_from_file_location("make_logs", LOGS / "make_logs.py")
    mod = importlib.util.module_from_spec(spec)
    sys.modules[spec.name] = mod
    spec.loader.exec_module(mod)
    try:
        # the fixtures whose text does not depend on the wheels' ServerArgs field list
        names = sorted(set(mod.FIXTURES) - mod.NEEDS_WHEEL_FIELDS)
        assert len(names) == 5 and set(mod.FIXTURES) == {p.name for p in LOGS.glob("*.log")}
        for name in names:
            with open(LOGS / name, encoding="utf-8", newline="") as f:
                assert f.read() == mod.FIXTURES[name]({}), name
    finally:
        sys.modules.pop(spec.name, None)


# ---------------------------------------------------------------------------------------------
# Throughput (printed with -s, not asserted)
# ---------------------------------------------------------------------------------------------


def _ordinary_lines(n: int) -> list[str]:
    kinds = [
        "[2026-07-14 10:{m:02d}:{s:02d} TP0] Decode batch, #running-req: {i}, #token: 51{i:03d}, token usage: 0.04, "
        "accept len: 3.12, accept rate: 0.78, cuda graph: True, gen throughput (token/s): 1843.{i:02d}, #queue-req: 0",
        "[2026-07-14 10:{m:02d}:{s:02d} TP0] Prefill batch, #new-seq: 1, #new-token: 2{i:03d}, #cached-token: 512, "
        "full token usage: 0.05, mamba usage: 0.12, #running-req: {i}, #queue-req: 0, cuda graph: False, "
        "input throughput (token/s): 9211.{i:02d}",
        'INFO:     10.0.0.7:{i}5 - "POST /v1/chat/completions HTTP/1.1" 200 OK',
        "gpu1:4101:4188 [0] NCCL INFO Channel {i:02d}/24 : 0[0] -> 1[1] via P2P/CUMEM/read",
        "sglang-1  | [2026-07-14 10:{m:02d}:{s:02d} TP1 EP1] Decode batch, #running-req: {i}, #token: 7{i:03d}, "
        "token usage: 0.01, cuda graph: True, gen throughput (token/s): 812.55, #queue-req: 0",
    ]
    return [kinds[i % len(kinds)].format(i=i % 97, m=(i // 60) % 60, s=i % 60) for i in range(n)]


def test_throughput_benchmark():
    ordinary = _ordinary_lines(200_000)
    start = lines_of("sglang-0.5.10-hybrid-mtp-tp4.log")
    tr = PhaseTracker()
    t0 = time.perf_counter()
    for raw in start:
        tr.feed(raw)
    for raw in ordinary:
        tr.feed(raw)
    dt = time.perf_counter() - t0
    rate = (len(start) + len(ordinary)) / dt
    t0 = time.perf_counter()
    for raw in ordinary:
        clean(raw)
    clean_rate = len(ordinary) / (time.perf_counter() - t0)
    print(f"\nphase tracker: {rate:,.0f} lines/s ({len(ordinary):,} ordinary lines + one MTP startup, "
          f"{dt:.2f} s); clean() alone: {clean_rate:,.0f} lines/s")
    assert tr.outcome == "ready" and tr.phase == "ready" and tr.crash is None
    assert tr.line_no == len(start) + len(ordinary)
