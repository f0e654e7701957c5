#!/usr/bin/env python3
"""Write the SGLang log fixtures in this folder from SGLang's own format strings.

    .venv/bin/python tests/data/logs/make_logs.py --wheel-dir /tmp/w      # needs both wheels
    .venv/bin/python tests/data/logs/make_logs.py --check --wheel-dir /tmp/w

Every SGLang-written line below comes from a template tagged with the wheel version and the
file it is logged from (``src(version, file, template)``). With ``--wheel-dir`` (holding
``sglang-0.5.10-*.whl`` and ``sglang-0.5.23-*.whl``, e.g. from ``pip download --no-deps
sglang==0.5.10 -d /tmp/w``) the script first checks that the literal text of every template
occurs in that file of that wheel (as rendered by core/engines/sglang/extract/log_lines.py: f-string
fields become ``{…}``), and takes the ``ServerArgs`` field names for the 20 KB ``server_args=``
line from the wheel. Numbers are made up but realistic for H200s. Lines that SGLang does not
write come from: tqdm (the default ``{l_bar}{bar}{r_bar}`` bar and SGLang's ``BAR_FORMAT``),
uvicorn (``INFO:     `` level prefix, its startup and access lines), NCCL (``NCCL INFO``),
CPython (tracebacks, warnings) and PyTorch (the CUDA OOM message).

``--check`` regenerates in memory and fails when a fixture on disk differs.
"""

from __future__ import annotations

import argparse
import ast
import datetime as dt
import importlib.util
import re
import sys
import zipfile
from pathlib import Path

HERE = Path(__file__).resolve().parent
REPO = HERE.parents[2]

SOURCES: list[tuple[str, str, str]] = []  # (version, file under sglang/, template)


def src(version: str, file: str, template: str) -> str:
    SOURCES.append((version, file, template))
    return template


# ---------------------------------------------------------------------------------------------
# Templates (python str.format fields; the comment-free tag is the source)
# ---------------------------------------------------------------------------------------------

V10, V23 = "0.5.10", "0.5.23"

# 0.5.10
A10_SERVER_ARGS = src(V10, "srt/entrypoints/engine.py", "server_args={args}")  # logger.info(f"{server_args=}")
A10_DIST_BEGIN = src(V10, "srt/model_executor/model_runner.py", "Init torch distributed begin.")
A10_NCCL = src(V10, "srt/distributed/device_communicators/pynccl.py", "sglang is using nccl=={v}")
A10_DIST_END = src(V10, "srt/model_executor/model_runner.py",
                   "Init torch distributed ends. elapsed={el:.2f} s, mem usage={mu:.2f} GB")
A10_LOAD_BEGIN = src(V10, "srt/model_executor/model_runner.py", "Load weight begin. avail mem={av:.2f} GB")
A10_LOAD_END = src(V10, "srt/model_executor/model_runner.py",
                   "Load weight end. elapsed={el:.2f} s, type={typ}, {quant}avail mem={av:.2f} GB, mem usage={mu:.2f} GB.")
A10_BAR = src(V10, "srt/utils/common.py",
              "{desc}: {percentage:3.0f}% Completed | {n_fmt}/{total_fmt} [{elapsed}<{remaining}, {rate_fmt}]")
A10_SHARDS = src(V10, "srt/model_loader/weight_utils.py", "Loading safetensors checkpoint shards")
A10_MT_SHARDS = src(V10, "srt/model_loader/weight_utils.py", "Multi-thread loading shards")
A10_KV = src(V10, "srt/mem_cache/memory_pool.py",
             "KV Cache is allocated. #tokens: {n}, K size: {k:.2f} GB, V size: {v:.2f} GB")
A10_MAMBA_SPEC = src(V10, "srt/mem_cache/memory_pool.py",
                     "Mamba Cache is allocated. max_mamba_cache_size: {n}, conv_state size: {c:.2f}GB, "
                     "ssm_state size: {s:.2f}GB intermediate_ssm_state_cache size: {i:.2f}GB "
                     "intermediate_conv_window_cache size: {w:.2f}GB ")
A10_POOL_END = src(V10, "srt/model_executor/model_runner_kv_cache_mixin.py", "Memory pool end. avail mem={av:.2f} GB")
A10_GRAPH_BEGIN = src(V10, "srt/model_executor/model_runner.py",
                      "Capture {backend} begin. This can take up to several minutes. avail mem={av:.2f} GB")
A10_GRAPH_BS = src(V10, "srt/model_executor/cuda_graph_runner.py", "Capture cuda graph bs {bs}")
A10_CAPTURING = src(V10, "srt/model_executor/cuda_graph_runner.py", "Capturing batches (bs={bs} avail_mem={av:.2f} GB)")
A10_GRAPH_END = src(V10, "srt/model_executor/model_runner.py",
                    "Capture {backend} end. Time elapsed: {el:.2f} s. mem usage={mu:.2f} GB. avail mem={av:.2f} GB.")
A10_DRAFT_BEGIN = src(V10, "srt/speculative/eagle_worker.py",
                      "Capture draft cuda graph begin. This can take up to several minutes. avail mem={av:.2f} GB")
A10_DRAFT_END = src(V10, "srt/speculative/eagle_worker.py",
                    "Capture draft cuda graph end. Time elapsed: {el:.2f} s. mem usage={mu:.2f} GB. avail mem={av:.2f} GB.")
A10_DRAFT_EXT_BEGIN = src(V10, "srt/speculative/eagle_worker.py",
                          "Capture draft extend cuda graph begin. This can take up to several minutes. avail mem={av:.2f} GB")
A10_DRAFT_EXT_END = src(V10, "srt/speculative/eagle_worker.py",
                        "Capture draft extend cuda graph end. Time elapsed: {el:.2f} s. mem usage={mu:.2f} GB. avail mem={av:.2f} GB.")
A10_MAX_TOKENS = src(V10, "srt/managers/scheduler.py",
                     "max_total_num_tokens={n}, chunked_prefill_size={cp}, max_prefill_tokens={mp}, "
                     "max_running_requests={mr}, context_len={cl}, {memkey}={av:.2f} GB")
A10_PREFILL = src(V10, "srt/observability/scheduler_metrics_mixin.py",
                  "Prefill batch{it}, #new-seq: {n}, #new-token: {t}, #cached-token: {c}, {usage}#running-req: {r}, "
                  "#queue-req: {q}, ")  # + "cuda graph: {b}, input throughput (token/s): {x:.2f}" (same file)
A10_READY = src(V10, "srt/entrypoints/http_server.py", "The server is fired up and ready to roll!")
A10_HIT = src(V10, "srt/managers/scheduler.py", "Scheduler hit an exception: {tb}")
A10_SIGQUIT = src(V10, "srt/entrypoints/engine.py",
                  "Received sigquit from a child process. It usually means the child failed.")
A10_SPEC_ERR = src(V10, "srt/server_args.py",
                   "Speculative decoding for {arch} is not compatible with radix cache when using "
                   "--mamba-scheduler-strategy no_buffer.To use radix cache with speculative decoding, please use "
                   "--mamba-scheduler-strategy extra_buffer and set SGLANG_ENABLE_SPEC_V2=1.")
A10_GRAPH_FAILED = src(V10, "srt/model_executor/cuda_graph_runner.py", "Capture cuda graph failed: {e}")
A10_GRAPH_FAILED_MSG = src(V10, "srt/model_executor/cuda_graph_runner.py", "Possible solutions:")  # CUDA_GRAPH_CAPTURE_FAILED_MSG
A10_NCCL_ERR = src(V10, "srt/distributed/device_communicators/pynccl_wrapper.py", "NCCL error: {e}")
A10_MAX_RUNNING = src(V10, "srt/server_args.py",
                      "Max running requests is reset to {n} for speculative decoding. You can override this by "
                      "explicitly setting --max-running-requests.")
A10_UNBALANCED = src(V10, "srt/model_executor/model_runner.py",
                     "The memory capacity is unbalanced. Some GPUs may be occupied by other processes. ")

# 0.5.23
A23_SERVER_ARGS = src(V23, "srt/entrypoints/engine.py", "server_args={args}")  # _server_args_for_logging() -> dict
A23_DIST_BEGIN = src(V23, "srt/distributed/bootstrap.py", "Init parallel begin.")
A23_NCCL = src(V23, "srt/distributed/device_communicators/pynccl.py", "sglang is using nccl=={v}")
A23_DIST_END = src(V23, "srt/distributed/bootstrap.py", "Init parallel ends. elapsed={el:.2f} s")
A23_BASELINE = src(V23, "srt/distributed/bootstrap.py", "Memory baseline taken. mem usage={mu:.2f} GB")
A23_LOAD_BEGIN = src(V23, "srt/model_executor/model_runner.py", "Load weight begin. avail mem={av:.2f} GB")
A23_LOAD_END = src(V23, "srt/model_executor/model_runner.py",
                   "Load weight end. elapsed={el:.2f} s, type={typ}, {quant}avail mem={av:.2f} GB, mem usage={mu:.2f} GB.")
A23_BAR = src(V23, "srt/utils/common.py",
              "{desc}: {percentage:3.0f}% Completed | {n_fmt}/{total_fmt} [{elapsed}<{remaining}, {rate_fmt}]")
A23_SHARDS = src(V23, "srt/model_loader/weight_utils.py", "Loading safetensors checkpoint shards")
A23_MT_SHARDS = src(V23, "srt/model_loader/weight_utils.py", "Multi-thread loading shards")
A23_KV = src(V23, "srt/mem_cache/memory_pool.py",
             "{cache_name} {state}. dtype: {dtype}, #tokens: {n}, K size: {k:.2f} GB, V size: {v:.2f} GB")
A23_MAMBA_SPEC = src(V23, "srt/mem_cache/memory_pool.py",
                     "Mamba Cache is allocated. max_mamba_cache_size: {n}, conv_state size: {c:.2f}GB, "
                     "ssm_state size: {s:.2f}GB intermediate_ssm_state_cache size: {i:.2f}GB "
                     "intermediate_conv_window_cache size: {w:.2f}GB ")
A23_POOL_END = src(V23, "srt/mem_cache/kv_cache_configurator.py", "Memory pool end. avail mem={av:.2f} GB")
A23_PREFILL_GRAPH_BEGIN = src(V23, "srt/model_executor/model_runner_components/cuda_graph_setup.py",
                              "Capture {name} CUDA graph begin. backend={be}, num_tokens={nt}, avail mem={av:.2f} GB")
A23_PREFILL_GRAPH_END = src(V23, "srt/model_executor/model_runner_components/cuda_graph_setup.py",
                            "Capture {name} CUDA graph end. elapsed={el:.2f} s, mem usage={mu:.2f} GB, avail mem={av:.2f} GB.")
A23_CAPTURING_PREFILL = src(V23, "srt/model_executor/runner/prefill_cuda_graph_runner.py",
                            "Capturing prefill shape (num_tokens={nt} avail_mem={av:.2f} GB)")
A23_GRAPH_BEGIN = src(V23, "srt/model_executor/model_runner_components/cuda_graph_setup.py",
                      "Capture {name} {backend} begin. backend={be}, num_tokens_per_req={ntr}, avail mem={av:.2f} GB")
A23_GRAPH_END = src(V23, "srt/model_executor/model_runner_components/cuda_graph_setup.py",
                    "Capture {name} {backend} end. bs={bs}, elapsed={el:.2f} s, mem usage={mu:.2f} GB, avail mem={av:.2f} GB.")
A23_CAPTURING = src(V23, "srt/model_executor/runner/decode_cuda_graph_runner.py",
                    "Capturing batches (bs={bs} avail_mem={av:.2f} GB)")
A23_DRAFT_BEGIN = src(V23, "srt/speculative/eagle_worker_v2.py",
                      "Capture draft decode CUDA graph begin. backend={be}, num_tokens_per_req={ntr}, bs={bs}, avail mem={av:.2f} GB")
A23_DRAFT_END = src(V23, "srt/speculative/eagle_worker_v2.py",
                    "Capture draft decode CUDA graph end. elapsed={el:.2f} s, mem usage={mu:.2f} GB, avail mem={av:.2f} GB.")
A23_DRAFT_EXT_BEGIN = src(V23, "srt/speculative/eagle_worker_v2.py",
                          "Capture draft extend CUDA graph begin. backend={be}, num_tokens_per_req={ntr}, bs={bs}, avail mem={av:.2f} GB")
A23_DRAFT_EXT_END = src(V23, "srt/speculative/eagle_worker_v2.py",
                        "Capture draft extend CUDA graph end. elapsed={el:.2f} s, mem usage={mu:.2f} GB, avail mem={av:.2f} GB.")
A23_MAX_TOKENS = src(V23, "srt/managers/scheduler.py",
                     "max_total_num_tokens={n}, chunked_prefill_size={cp}, max_prefill_tokens={mp}, "
                     "max_running_requests={mr}, context_len={cl}, {memkey}={av:.2f} GB")
A23_READY = src(V23, "srt/entrypoints/http_server.py", "The server is fired up and ready to roll!")
A23_HIT = src(V23, "srt/managers/scheduler.py", "Scheduler hit an exception: {tb}")
A23_SIGQUIT = src(V23, "srt/entrypoints/engine.py",
                  "Received sigquit from a child process. It usually means the child failed.")
A23_NOT_ENOUGH = src(V23, "srt/model_executor/pool_configurator.py",
                     "Not enough memory. Please try to increase --mem-fraction-static.")
A23_NOT_ENOUGH_CUR = src(V23, "srt/model_executor/pool_configurator.py", " Current value: mem_fraction_static={m}")

# Not SGLang's: uvicorn's default LOGGING_CONFIG ("%(levelprefix)s %(message)s") and access log.
UVI = "INFO:     "
CUDA_GRAPH_CAPTURE_FAILED_MSG = (  # 0.5.10 srt/model_executor/cuda_graph_runner.py:1230
    "Possible solutions:\n"
    "1. set --mem-fraction-static to a smaller value (e.g., 0.8 or 0.7)\n"
    "2. set --cuda-graph-max-bs to a smaller value (e.g., 16)\n"
    "3. disable torch compile by not using --enable-torch-compile\n"
    "4. disable CUDA graph by --disable-cuda-graph. (Not recommended. Huge performance loss)\n"
    "Open an issue on GitHub https://github.com/sgl-project/sglang/issues/new/choose \n"
)
TORCH_OOM = (  # torch/cuda/memory: the c10 CUDACachingAllocator message, as torch 2.9 prints it
    "CUDA out of memory. Tried to allocate 1.50 GiB. GPU 0 has a total capacity of 139.81 GiB of which "
    "1.12 GiB is free. Process 48121 has 138.68 GiB memory in use. Of the allocated memory 135.02 GiB is "
    "allocated by PyTorch, with 1.91 GiB allocated in private pools (e.g., CUDA Graphs), and 1.13 GiB is "
    "reserved by PyTorch but unallocated. If reserved but unallocated memory is large try setting "
    "PYTORCH_CUDA_ALLOC_CONF=expandable_segments:True to avoid fragmentation.  See documentation for Memory "
    "Management  (https://pytorch.org/docs/stable/notes/cuda.html#environment-variables)"
)
SITE = "/usr/local/lib/python3.12/dist-packages"
BS_512 = [1, 2, 4, 8, 12, 16, 24, 32] + list(range(40, 257, 8)) + list(range(272, 513, 16))
BS_48 = [1, 2, 4, 8, 12, 16, 24, 32, 40, 48]


# ---------------------------------------------------------------------------------------------
# Helpers
# ---------------------------------------------------------------------------------------------


class Log:
    def __init__(self, start: str) -> None:
        self.t = dt.datetime.strptime(start, "%Y-%m-%d %H:%M:%S")
        self.lines: list[str] = []

    def wait(self, seconds: float) -> "Log":
        self.t += dt.timedelta(seconds=seconds)
        return self

    def sg(self, msg: str, ranks: str = "") -> None:
        """A line through SGLang's configure_logger: "[%(asctime)s{prefix}] %(message)s"."""
        pre = f"[{self.t:%Y-%m-%d %H:%M:%S}{(' ' + ranks) if ranks else ''}] "
        first, *rest = msg.split("\n")
        self.lines.append(pre + first)
        self.lines.extend(rest)

    def all_ranks(self, msg: str, ranks: list[str], step: float = 0.0) -> None:
        for r in ranks:
            self.sg(msg, r)
            self.wait(step)

    def raw(self, *lines: str) -> None:
        for text in lines:
            self.lines.extend(text.split("\n"))

    def text(self) -> str:
        return "\n".join(self.lines) + "\n"


def _hms(seconds: float) -> str:
    seconds = int(seconds)
    return f"{seconds // 60:02d}:{seconds % 60:02d}"


def sglang_bar(bar_format: str, desc: str, total: int, per_item: float) -> str:
    """tqdm with SGLang's BAR_FORMAT, every update "\\r"-joined in one physical line."""
    states = []
    for n in range(total + 1):
        el = n * per_item
        rem = "?" if n == 0 else _hms((total - n) * per_item)
        rate = "?it/s" if n == 0 else (f"{per_item:.2f}s/it" if per_item >= 1 else f"{1 / per_item:.2f}it/s")
        states.append(bar_format.format(desc=desc, percentage=100 * n / total, n_fmt=n, total_fmt=total,
                                        elapsed=_hms(el), remaining=rem, rate_fmt=rate))
    return "\r" + "\r".join(states)


def tqdm_bar(descs: list[str], per_item: float) -> str:
    """tqdm's default bar ('{l_bar}{bar}{r_bar}', 10 columns when not a tty); desc changes per item."""
    total = len(descs)
    blocks = " ▏▎▍▌▋▊▉█"
    states = []
    for n in range(total + 1):
        frac = n / total
        full = int(frac * 10)
        part = int((frac * 10 - full) * 8)
        bar = "█" * full + (blocks[part] if full < 10 else "")
        bar = bar.ljust(10)
        el = n * per_item
        rem = "?" if n == 0 else _hms((total - n) * per_item)
        rate = "?it/s" if n == 0 else (f"{per_item:.2f}s/it" if per_item >= 1 else f"{1 / per_item:5.2f}it/s")
        desc = descs[min(n, total - 1)]
        states.append(f"{desc}: {100 * frac:3.0f}%|{bar}| {n}/{total} [{_hms(el)}<{rem}, {rate}]")
    return "\r" + "\r".join(states)


def server_args_repr(fields: dict[str, object], overrides: dict[str, object], as_dict: bool) -> str:
    vals: dict[str, object] = dict(fields)
    vals.update(overrides)
    if as_dict:
        return "{" + ", ".join(f"{k!r}: {v!r}" for k, v in vals.items()) + "}"
    return "ServerArgs(" + ", ".join(f"{k}={v!r}" for k, v in vals.items()) + ")"


def tb_frames(*frames: tuple[str, int, str, str | None]) -> str:
    out = []
    for path, line, func, code in frames:
        out.append(f'  File "{path}", line {line}, in {func}')
        if code:
            out.append("    " + code)
    return "\n".join(out)


def S(rel: str) -> str:
    return f"{SITE}/sglang/{rel}"


# ---------------------------------------------------------------------------------------------
# Fixtures
# ---------------------------------------------------------------------------------------------

RANKS4 = ["TP0 EP0", "TP1 EP1", "TP2 EP2", "TP3 EP3"]
RANKS4_TP = ["TP0", "TP1", "TP2", "TP3"]
RANKS2 = ["TP0", "TP1"]


def uvicorn_up(log: Log, pid: int, port: int = 30000) -> None:
    log.raw(f"{UVI}Started server process [{pid}]", f"{UVI}Waiting for application startup.",
            f"{UVI}Application startup complete.",
            f"{UVI}Uvicorn running on http://0.0.0.0:{port} (Press CTRL+C to quit)")


def v10_dense(fields: list[str]) -> str:
    """0.5.10, Qwen3-235B-A22B FP8 at TP4/EP4: the plain start, old wording."""
    log = Log("2026-07-14 07:48:12")
    model = "Qwen/Qwen3-235B-A22B-Instruct-2507-FP8"
    log.sg(A10_SERVER_ARGS.format(args=server_args_repr(fields, {
        "model_path": model, "tokenizer_path": model, "tp_size": 4, "ep_size": 4, "port": 30000,
        "host": "0.0.0.0", "mem_fraction_static": 0.85, "context_length": 262144,
        "tool_call_parser": "qwen", "reasoning_parser": None, "cuda_graph_max_bs": 512}, as_dict=False)))
    log.wait(4.2).all_ranks(A10_DIST_BEGIN, RANKS4, 0.03)
    log.wait(3.1).all_ranks(A10_NCCL.format(v="2.27.3"), RANKS4)
    log.wait(9.3).all_ranks(A10_DIST_END.format(el=12.41, mu=1.27), RANKS4)
    log.all_ranks(A10_LOAD_BEGIN.format(av=137.62), RANKS4)
    log.raw(sglang_bar(A10_BAR, A10_SHARDS, 24, 2.43))
    log.raw("")
    log.wait(61.9).all_ranks(
        A10_LOAD_END.format(el=61.85, typ="Qwen3MoeForCausalLM", quant="quant=fp8, fmt=e4m3, ", av=78.12, mu=59.50),
        RANKS4, 0.2)
    log.wait(0.4).all_ranks(A10_KV.format(n=1289216, k=29.50, v=29.50), RANKS4)
    log.all_ranks(A10_POOL_END.format(av=17.93), RANKS4)
    log.wait(2.1).all_ranks(A10_GRAPH_BEGIN.format(backend="cuda graph", av=17.41), RANKS4)
    log.sg(A10_GRAPH_BS.format(bs=BS_512), "TP0 EP0")
    log.raw(tqdm_bar([A10_CAPTURING.format(bs=b, av=17.38 - 0.037 * i) for i, b in enumerate(reversed(BS_512))], 0.6))
    log.raw("")
    log.wait(33.5).all_ranks(A10_GRAPH_END.format(backend="cuda graph", el=33.52, mu=1.93, av=15.48), RANKS4)
    log.sg(A10_MAX_TOKENS.format(memkey="available_gpu_mem", n=1289216, cp=16384, mp=16384, mr=4096, cl=262144, av=15.48), "TP0 EP0")
    log.wait(1.2)
    uvicorn_up(log, 2345)
    log.wait(1.0).raw(f'{UVI}127.0.0.1:51234 - "GET /model_info HTTP/1.1" 200 OK')
    log.sg(A10_PREFILL.format(it="", n=1, t=6, c=0, usage="token usage: 0.00, ", r=0, q=0)
           + "cuda graph: False, input throughput (token/s): 0.00", "TP0 EP0")
    log.wait(0.9).raw(f'{UVI}127.0.0.1:51236 - "POST /generate HTTP/1.1" 200 OK')
    log.sg(A10_READY)
    return log.text()


def v23_dense(fields: list[str]) -> str:
    """0.5.23, Qwen3-32B at TP2: the new wording (Init parallel, Memory baseline, target CUDA graphs)."""
    log = Log("2026-11-02 14:03:51")
    model = "Qwen/Qwen3-32B"
    log.sg(A23_SERVER_ARGS.format(args=server_args_repr(fields, {
        "model_path": model, "tokenizer_path": model, "tp_size": 2, "port": 30000, "host": "127.0.0.1",
        "mem_fraction_static": 0.88, "reasoning_parser": "qwen3"}, as_dict=True)))
    log.wait(3.8).all_ranks(A23_DIST_BEGIN, RANKS2, 0.02)
    log.wait(2.2).all_ranks(A23_NCCL.format(v="2.28.9"), RANKS2)
    log.wait(2.9).all_ranks(A23_DIST_END.format(el=5.12), RANKS2)
    log.all_ranks(A23_BASELINE.format(mu=0.88), RANKS2)
    log.all_ranks(A23_LOAD_BEGIN.format(av=138.01), RANKS2)
    log.raw(sglang_bar(A23_BAR, A23_SHARDS, 17, 1.31))
    log.raw("")
    log.wait(22.7).all_ranks(
        A23_LOAD_END.format(el=22.65, typ="Qwen3ForCausalLM", quant="", av=107.42, mu=30.59), RANKS2, 0.1)
    log.wait(0.3).all_ranks(A23_KV.format(cache_name="KV Cache", state="is allocated", dtype="torch.bfloat16", n=1352704, k=41.28, v=41.28), RANKS2)
    log.all_ranks(A23_POOL_END.format(av=23.18), RANKS2)
    nts = [256, 512, 1024, 2048, 4096, 8192]
    log.wait(1.4).all_ranks(A23_PREFILL_GRAPH_BEGIN.format(name="target prefill", be="breakable", nt=nts, av=22.96), RANKS2)
    log.raw(tqdm_bar([A23_CAPTURING_PREFILL.format(nt=n, av=22.96 - 0.11 * i) for i, n in enumerate(reversed(nts))], 2.3))
    log.raw("")
    log.wait(14.0).all_ranks(A23_PREFILL_GRAPH_END.format(name="target prefill", el=14.02, mu=0.84, av=22.12), RANKS2)
    log.all_ranks(A23_GRAPH_BEGIN.format(backend="CUDA graph", name="target decode", be="full", ntr=1, av=22.12), RANKS2)
    log.raw(tqdm_bar([A23_CAPTURING.format(bs=b, av=22.10 - 0.03 * i) for i, b in enumerate(reversed(BS_512))], 0.45))
    log.raw("")
    log.wait(24.4).all_ranks(A23_GRAPH_END.format(backend="CUDA graph", name="target decode", bs=BS_512, el=24.37, mu=1.62, av=20.50), RANKS2)
    log.sg(A23_MAX_TOKENS.format(memkey="available_gpu_mem", n=1352704, cp=8192, mp=16384, mr=4096, cl=40960, av=20.50), "TP0")
    log.wait(0.8)
    uvicorn_up(log, 9121)
    log.wait(1.0).raw(f'{UVI}127.0.0.1:40712 - "GET /model_info HTTP/1.1" 200 OK')
    log.wait(1.1).raw(f'{UVI}127.0.0.1:40714 - "POST /generate HTTP/1.1" 200 OK')
    log.sg(A23_READY)
    return log.text()


def v10_hybrid_mtp(fields: list[str]) -> str:
    """0.5.10, Qwen3.5-122B-A10B BF16 at TP4 with MTP (NEXTN, extra_buffer, SGLANG_ENABLE_SPEC_V2=1):
    Mamba cache; the draft ModelRunner repeats dist init / weights / pool after the target's graphs."""
    log = Log("2026-07-14 09:12:40")
    model = "Qwen/Qwen3.5-122B-A10B"
    log.sg(A10_SERVER_ARGS.format(args=server_args_repr(fields, {
        "model_path": model, "tokenizer_path": model, "tp_size": 4, "port": 30000, "host": "0.0.0.0",
        "mem_fraction_static": 0.8, "context_length": 262144, "speculative_algorithm": "EAGLE",
        "speculative_num_steps": 3, "speculative_eagle_topk": 1, "speculative_num_draft_tokens": 4,
        "mamba_scheduler_strategy": "extra_buffer", "tool_call_parser": "qwen3_coder",
        "reasoning_parser": "qwen3"}, as_dict=False)))
    log.sg(A10_MAX_RUNNING.format(n=48))
    log.wait(4.0).all_ranks(A10_DIST_BEGIN, RANKS4_TP, 0.02)
    log.wait(2.6).all_ranks(A10_NCCL.format(v="2.27.3"), RANKS4_TP)
    log.wait(7.3).all_ranks(A10_DIST_END.format(el=9.87, mu=1.12), RANKS4_TP)
    log.all_ranks(A10_LOAD_BEGIN.format(av=137.71), RANKS4_TP)
    log.raw(sglang_bar(A10_BAR, A10_MT_SHARDS, 40, 2.2))
    log.raw("")
    log.wait(88.3).all_ranks(
        A10_LOAD_END.format(el=88.34, typ="Qwen3_5MoeForConditionalGeneration", quant="", av=76.52, mu=61.19),
        RANKS4_TP, 0.1)
    log.wait(0.5).all_ranks(A10_KV.format(n=1048576, k=6.00, v=6.00), RANKS4_TP)
    log.all_ranks(A10_MAMBA_SPEC.format(n=144, c=0.42, s=12.66, i=16.88, w=0.56), RANKS4_TP)
    log.all_ranks(A10_POOL_END.format(av=37.96), RANKS4_TP)
    log.wait(1.8).all_ranks(A10_GRAPH_BEGIN.format(backend="cuda graph", av=37.42), RANKS4_TP)
    log.sg(A10_GRAPH_BS.format(bs=BS_48), "TP0")
    log.raw(tqdm_bar([A10_CAPTURING.format(bs=b, av=37.40 - 0.26 * i) for i, b in enumerate(reversed(BS_48))], 2.1))
    log.raw("")
    log.wait(21.4).all_ranks(A10_GRAPH_END.format(backend="cuda graph", el=21.37, mu=2.61, av=34.81), RANKS4_TP)
    # the draft worker (EAGLEWorker builds a second ModelRunner with is_draft_worker=True)
    log.wait(0.2).all_ranks(A10_DIST_BEGIN, RANKS4_TP)
    log.all_ranks(A10_DIST_END.format(el=0.01, mu=0.00), RANKS4_TP)
    log.all_ranks(A10_LOAD_BEGIN.format(av=34.81), RANKS4_TP)
    log.raw(sglang_bar(A10_BAR, A10_MT_SHARDS, 40, 0.48))
    log.raw("")
    log.wait(19.9).all_ranks(
        A10_LOAD_END.format(el=19.92, typ="Qwen3_5ForCausalLMMTP", quant="", av=33.02, mu=1.79), RANKS4_TP)
    log.all_ranks(A10_KV.format(n=1048576, k=0.50, v=0.50), RANKS4_TP)
    log.all_ranks(A10_POOL_END.format(av=31.98), RANKS4_TP)
    log.wait(0.6).all_ranks(A10_DRAFT_BEGIN.format(av=31.98), RANKS4_TP)
    log.raw(tqdm_bar([A10_CAPTURING.format(bs=b, av=31.97 - 0.07 * i) for i, b in enumerate(reversed(BS_48))], 0.98))
    log.raw("")
    log.wait(9.8).all_ranks(A10_DRAFT_END.format(el=9.81, mu=0.72, av=31.26), RANKS4_TP)
    log.all_ranks(A10_DRAFT_EXT_BEGIN.format(av=31.26), RANKS4_TP)
    log.raw(tqdm_bar([A10_CAPTURING.format(bs=b, av=31.25 - 0.04 * i) for i, b in enumerate(reversed(BS_48))], 0.61))
    log.raw("")
    log.wait(6.1).all_ranks(A10_DRAFT_EXT_END.format(el=6.12, mu=0.41, av=30.85), RANKS4_TP)
    log.sg(A10_MAX_TOKENS.format(memkey="available_gpu_mem", n=1048576, cp=16384, mp=16384, mr=48, cl=262144, av=30.85), "TP0")
    log.wait(1.0)
    uvicorn_up(log, 3310)
    log.wait(1.0).raw(f'{UVI}127.0.0.1:53100 - "GET /model_info HTTP/1.1" 200 OK')
    log.sg(A10_PREFILL.format(it="", n=1, t=6, c=0, usage="full token usage: 0.00, mamba usage: 0.01, ", r=0, q=0)
           + "cuda graph: False, input throughput (token/s): 0.00", "TP0")
    log.wait(1.3).raw(f'{UVI}127.0.0.1:53102 - "POST /generate HTTP/1.1" 200 OK')
    log.sg(A10_READY)
    return log.text()


def v23_hybrid_mtp(fields: list[str]) -> str:
    """0.5.23, the same deployment: the draft loads right after the target (still the weights phase),
    one memory pool, then target verify + draft decode/extend CUDA graphs."""
    log = Log("2026-11-02 16:40:05")
    model = "Qwen/Qwen3.5-122B-A10B"
    log.sg(A23_SERVER_ARGS.format(args=server_args_repr(fields, {
        "model_path": model, "tokenizer_path": model, "tp_size": 4, "port": 30000, "host": "0.0.0.0",
        "mem_fraction_static": 0.8, "context_length": 262144, "speculative_algorithm": "EAGLE",
        "speculative_num_steps": 3, "speculative_eagle_topk": 1, "speculative_num_draft_tokens": 4,
        "mamba_radix_cache_strategy": "extra_buffer", "tool_call_parser": "qwen3_coder",
        "reasoning_parser": "qwen3"}, as_dict=True)))
    log.wait(3.9).all_ranks(A23_DIST_BEGIN, RANKS4_TP, 0.02)
    log.wait(2.4).all_ranks(A23_NCCL.format(v="2.28.9"), RANKS4_TP)
    log.wait(6.4).all_ranks(A23_DIST_END.format(el=8.76), RANKS4_TP)
    log.all_ranks(A23_BASELINE.format(mu=1.21), RANKS4_TP)
    log.all_ranks(A23_LOAD_BEGIN.format(av=137.62), RANKS4_TP)
    log.raw(sglang_bar(A23_BAR, A23_MT_SHARDS, 40, 1.02))
    log.raw("")
    log.wait(41.0).all_ranks(
        A23_LOAD_END.format(el=41.02, typ="Qwen3_5MoeForConditionalGeneration", quant="", av=76.41, mu=61.21),
        RANKS4_TP, 0.1)
    log.all_ranks(A23_LOAD_BEGIN.format(av=76.41), RANKS4_TP)
    log.raw(sglang_bar(A23_BAR, A23_MT_SHARDS, 40, 0.19))
    log.raw("")
    log.wait(7.8).all_ranks(
        A23_LOAD_END.format(el=7.77, typ="Qwen3_5ForCausalLMMTP", quant="", av=74.62, mu=1.79), RANKS4_TP)
    log.wait(0.4).all_ranks(A23_KV.format(cache_name="KV Cache", state="is allocated", dtype="torch.bfloat16", n=1048576, k=6.00, v=6.00), RANKS4_TP)
    log.all_ranks(A23_MAMBA_SPEC.format(n=144, c=0.42, s=12.66, i=16.88, w=0.56), RANKS4_TP)
    log.all_ranks(A23_POOL_END.format(av=37.80), RANKS4_TP)
    log.wait(1.6).all_ranks(A23_GRAPH_BEGIN.format(backend="CUDA graph", name="target verify", be="full", ntr=4, av=37.26), RANKS4_TP)
    log.raw(tqdm_bar([A23_CAPTURING.format(bs=b, av=37.25 - 0.25 * i) for i, b in enumerate(reversed(BS_48))], 1.8))
    log.raw("")
    log.wait(18.4).all_ranks(A23_GRAPH_END.format(backend="CUDA graph", name="target verify", bs=BS_48, el=18.42, mu=2.58, av=34.68), RANKS4_TP)
    log.sg(A23_DRAFT_BEGIN.format(be="full", ntr=1, bs=BS_48, av=34.68), "TP0")
    log.raw(tqdm_bar([A23_CAPTURING.format(bs=b, av=34.67 - 0.07 * i) for i, b in enumerate(reversed(BS_48))], 0.79))
    log.raw("")
    log.wait(7.9).sg(A23_DRAFT_END.format(el=7.93, mu=0.70, av=33.98), "TP0")
    log.sg(A23_DRAFT_EXT_BEGIN.format(be="full", ntr=4, bs=BS_48, av=33.98), "TP0")
    log.raw(tqdm_bar([A23_CAPTURING.format(bs=b, av=33.97 - 0.04 * i) for i, b in enumerate(reversed(BS_48))], 0.5))
    log.raw("")
    log.wait(5.1).sg(A23_DRAFT_EXT_END.format(el=5.06, mu=0.39, av=33.59), "TP0")
    log.sg(A23_MAX_TOKENS.format(memkey="available_gpu_mem", n=1048576, cp=16384, mp=16384, mr=48, cl=262144, av=33.59), "TP0")
    log.wait(0.9)
    uvicorn_up(log, 7702)
    log.wait(1.0).raw(f'{UVI}127.0.0.1:33904 - "GET /model_info HTTP/1.1" 200 OK')
    log.wait(1.2).raw(f'{UVI}127.0.0.1:33906 - "POST /generate HTTP/1.1" 200 OK')
    log.sg(A23_READY)
    return log.text()


def crash_spec_config() -> str:
    """0.5.10: MTP on Qwen3.5 without extra_buffer. ServerArgs.__post_init__ raises in the launching
    process before logging is configured: only CPython's warning and traceback reach the log."""
    log = Log("2026-07-14 08:30:02")
    log.raw(
        f"{SITE}/sglang/launch_server.py:51: UserWarning: 'python -m sglang.launch_server' is still supported, "
        "but 'sglang serve' is the recommended entrypoint.",
        "  Example: sglang serve --model-path <model> [options]",
        "  warnings.warn(",
        "Traceback (most recent call last):",
        tb_frames(
            ("<frozen runpy>", 198, "_run_module_as_main", None),
            ("<frozen runpy>", 88, "_run_code", None),
            (S("launch_server.py"), 59, "<module>", "server_args = prepare_server_args(sys.argv[1:])"),
            (S("srt/server_args.py"), 6539, "prepare_server_args", "return ServerArgs.from_cli_args(raw_args)"),
            (S("srt/server_args.py"), 5975, "from_cli_args", "return cls(**{attr: getattr(args, attr) for attr in attrs})"),
            ("<string>", 361, "__init__", None),
            (S("srt/server_args.py"), 787, "__post_init__", "self._handle_model_specific_adjustments()"),
            (S("srt/server_args.py"), 2000, "_handle_model_specific_adjustments", "self._handle_mamba_radix_cache("),
            (S("srt/server_args.py"), 2206, "_handle_mamba_radix_cache", "raise ValueError("),
        ),
        "ValueError: " + A10_SPEC_ERR.format(arch="Qwen3_5MoeForConditionalGeneration"),
    )
    return log.text()


def crash_graph_oom() -> str:
    """0.5.10 with --log-level warning: no phase line at all, only the scheduler's traceback of a
    CUDA OOM inside graph capture (torch OOM, re-raised as 'Capture cuda graph failed')."""
    log = Log("2026-07-14 10:05:44")
    log.sg(A10_UNBALANCED + "pre_model_load_memory=131.28, local_gpu_memory=137.91, "
           "local_gpu_memory * 0.9=124.119", "TP2 EP2")
    inner = tb_frames(
        (S("srt/model_executor/cuda_graph_runner.py"), 653, "__init__", "self.capture()"),
        (S("srt/model_executor/cuda_graph_runner.py"), 809, "capture", "_capture_one_stream()"),
        (S("srt/model_executor/cuda_graph_runner.py"), 796, "_capture_one_stream",
         ") = self.capture_one_batch_size(bs, forward, stream_idx)"),
        (S("srt/model_executor/cuda_graph_runner.py"), 1024, "capture_one_batch_size", "run_once()"),
        (S("srt/model_executor/cuda_graph_runner.py"), 1011, "run_once",
         "logits_output_or_pp_proxy_tensors = forward("),
        (f"{SITE}/torch/utils/_contextlib.py", 120, "decorate_context", "return func(*args, **kwargs)"),
        (S("srt/models/qwen3_moe.py"), 1021, "forward", "hidden_states = self.model("),
        (f"{SITE}/torch/nn/modules/module.py", 1775, "_wrapped_call_impl", "return self._call_impl(*args, **kwargs)"),
        (S("srt/layers/moe/fused_moe_triton/fused_moe.py"), 412, "fused_experts_impl",
         "intermediate_cache1 = torch.empty("),
    )
    outer = tb_frames(
        (S("srt/managers/scheduler.py"), 3600, "run_scheduler_process", "scheduler = Scheduler("),
        (S("srt/managers/scheduler.py"), 385, "__init__", "self.init_model_worker()"),
        (S("srt/managers/scheduler.py"), 632, "init_model_worker", "self.init_tp_model_worker()"),
        (S("srt/managers/scheduler.py"), 600, "init_tp_model_worker", "self.tp_worker = TpModelWorker(**worker_kwargs)"),
        (S("srt/managers/tp_worker.py"), 261, "__init__", "self._init_model_runner()"),
        (S("srt/managers/tp_worker.py"), 344, "_init_model_runner", "self._model_runner = ModelRunner("),
        (S("srt/model_executor/model_runner.py"), 427, "__init__", "self.initialize(pre_model_load_memory)"),
        (S("srt/model_executor/model_runner.py"), 655, "initialize", "self.init_device_graphs()"),
        (S("srt/model_executor/model_runner.py"), 2455, "init_device_graphs",
         "self.graph_runner = graph_runners[self.device](self)"),
        (S("srt/model_executor/cuda_graph_runner.py"), 655, "__init__", "raise Exception("),
    )
    block = ("Traceback (most recent call last):\n" + inner + "\ntorch.OutOfMemoryError: " + TORCH_OOM
             + "\n\nDuring handling of the above exception, another exception occurred:\n\n"
             + "Traceback (most recent call last):\n" + outer + "\nException: "
             + A10_GRAPH_FAILED.format(e=TORCH_OOM) + "\n" + CUDA_GRAPH_CAPTURE_FAILED_MSG)
    log.wait(96.0).sg(A10_HIT.format(tb=block), "TP0 EP0")
    log.wait(0.3).sg(A10_SIGQUIT)
    log.raw("Killed")
    return log.text()


def crash_nccl() -> str:
    """0.5.10 at TP4: ncclCommInitRank fails during dist init (NCCL_DEBUG=INFO on)."""
    log = Log("2026-07-14 11:20:09")
    model = "Qwen/Qwen3-235B-A22B-Instruct-2507-FP8"
    log.sg(A10_SERVER_ARGS.format(args=f"ServerArgs(model_path={model!r}, tokenizer_path={model!r}, tp_size=4)"))
    log.wait(4.0).all_ranks(A10_DIST_BEGIN, RANKS4, 0.02)
    for r in range(4):
        log.raw(f"gpu1:{4101 + r}:{4101 + r} [{r}] NCCL INFO Bootstrap: Using eth0:10.0.0.5<0>",
                f"gpu1:{4101 + r}:{4101 + r} [{r}] NCCL INFO cudaDriverVersion 12080",
                f"gpu1:{4101 + r}:{4101 + r} [{r}] NCCL INFO NCCL version 2.27.3+cuda12.9")
    log.raw("gpu1:4101:4101 [0] NCCL INFO Comm config Blocking set to 1",
            "gpu1:4101:4188 [0] misc/shmutils.cc:87 NCCL WARN Error: failed to extend /dev/shm/nccl-Qx0dsp to 9637892 bytes, error: No space left on device (28)",
            "gpu1:4101:4188 [0] NCCL INFO transport/shm.cc:114 -> 2")
    tb = "Traceback (most recent call last):\n" + tb_frames(
        (S("srt/managers/scheduler.py"), 3600, "run_scheduler_process", "scheduler = Scheduler("),
        (S("srt/managers/scheduler.py"), 385, "__init__", "self.init_model_worker()"),
        (S("srt/managers/scheduler.py"), 632, "init_model_worker", "self.init_tp_model_worker()"),
        (S("srt/managers/scheduler.py"), 600, "init_tp_model_worker", "self.tp_worker = TpModelWorker(**worker_kwargs)"),
        (S("srt/managers/tp_worker.py"), 261, "__init__", "self._init_model_runner()"),
        (S("srt/managers/tp_worker.py"), 344, "_init_model_runner", "self._model_runner = ModelRunner("),
        (S("srt/model_executor/model_runner.py"), 403, "__init__", "pre_model_load_memory = self.init_torch_distributed()"),
        (S("srt/model_executor/model_runner.py"), 964, "init_torch_distributed", "initialize_model_parallel("),
        (S("srt/distributed/parallel_state.py"), 1790, "initialize_model_parallel", "_TP = init_model_parallel_group("),
        (S("srt/distributed/parallel_state.py"), 1411, "init_model_parallel_group", "return GroupCoordinator("),
        (S("srt/distributed/parallel_state.py"), 356, "__init__", "self.pynccl_comm = PyNcclCommunicator("),
        (S("srt/distributed/device_communicators/pynccl.py"), 109, "__init__",
         "self.comm: ncclComm_t = self.nccl.ncclCommInitRank("),
        (S("srt/distributed/device_communicators/pynccl_wrapper.py"), 401, "ncclCommInitRank", "self.NCCL_CHECK("),
        (S("srt/distributed/device_communicators/pynccl_wrapper.py"), 376, "NCCL_CHECK",
         'raise RuntimeError(f"NCCL error: {error_str}")'),
    ) + "\nRuntimeError: " + A10_NCCL_ERR.format(e="unhandled system error (run with NCCL_DEBUG=INFO for details)") + "\n"
    log.wait(2.4).sg(A10_HIT.format(tb=tb), "TP0 EP0")
    log.wait(0.1).sg(A10_HIT.format(tb=tb), "TP2 EP2")
    log.wait(0.2).sg(A10_SIGQUIT)
    return log.text()


def crash_kv() -> str:
    """0.5.23 at TP2: the weights leave no room for the KV cache (mem_fraction_static too low)."""
    log = Log("2026-11-02 18:11:30")
    log.sg(A23_SERVER_ARGS.format(args="{'model_path': 'Qwen/Qwen3-32B', 'tp_size': 2, 'mem_fraction_static': 0.42}"))
    log.wait(3.6).all_ranks(A23_DIST_BEGIN, RANKS2)
    log.wait(2.0).all_ranks(A23_NCCL.format(v="2.28.9"), RANKS2)
    log.wait(2.8).all_ranks(A23_DIST_END.format(el=4.97), RANKS2)
    log.all_ranks(A23_BASELINE.format(mu=0.88), RANKS2)
    log.all_ranks(A23_LOAD_BEGIN.format(av=138.01), RANKS2)
    log.raw(sglang_bar(A23_BAR, A23_SHARDS, 17, 1.29))
    log.raw("")
    log.wait(22.0).all_ranks(
        A23_LOAD_END.format(el=21.96, typ="Qwen3ForCausalLM", quant="", av=107.40, mu=30.61), RANKS2)
    tb = "Traceback (most recent call last):\n" + tb_frames(
        (S("srt/managers/scheduler.py"), 6362, "run_scheduler_process", "scheduler = Scheduler(server_args, port_args)"),
        (S("srt/managers/scheduler.py"), 568, "__init__", "self.init_model_worker()"),
        (S("srt/managers/scheduler.py"), 1137, "init_model_worker", "self.init_memory_pools()"),
        (S("srt/managers/scheduler.py"), 1100, "init_memory_pools", "self.init_target_memory_pool()"),
        (S("srt/managers/scheduler.py"), 1090, "init_target_memory_pool", "self.tp_worker.alloc_memory_pool("),
        (S("srt/managers/tp_worker.py"), 409, "alloc_memory_pool", "self.model_runner.alloc_memory_pool("),
        (S("srt/model_executor/model_runner.py"), 982, "alloc_memory_pool", "result = self.kv_cache_configurator.configure("),
        (S("srt/mem_cache/kv_cache_configurator.py"), 476, "configure",
         "config = self._resolve_memory_pool_config(pre_model_load_memory)"),
        (S("srt/mem_cache/kv_cache_configurator.py"), 3183, "_resolve_memory_pool_config",
         "config = self.config_from_budget(available_bytes)"),
        (S("srt/mem_cache/kv_cache_configurator.py"), 3204, "config_from_budget", "config = configurator.calculate_pool_sizes("),
        (S("srt/model_executor/pool_configurator.py"), 647, "calculate_pool_sizes",
         "return MemoryPoolConfig(max_total_num_tokens=max_total_num_tokens)"),
        ("<string>", 19, "__init__", None),
        (S("srt/model_executor/pool_configurator.py"), 98, "__post_init__", "raise RuntimeError(msg)"),
    ) + "\nRuntimeError: " + A23_NOT_ENOUGH + A23_NOT_ENOUGH_CUR.format(m=0.42) + "\n"
    log.wait(0.6).sg(A23_HIT.format(tb=tb), "TP0")
    log.wait(0.1).sg(A23_HIT.format(tb=tb), "TP1")
    log.wait(0.2).sg(A23_SIGQUIT)
    return log.text()


def incomplete_dist_init() -> str:
    """0.5.10 at TP4: the journal stops after 'Init torch distributed begin.' (the NCCL hang)."""
    log = Log("2026-07-14 07:49:01")
    model = "Qwen/Qwen3.5-397B-A17B-FP4"
    log.sg(A10_SERVER_ARGS.format(args=f"ServerArgs(model_path={model!r}, tokenizer_path={model!r}, tp_size=4)"))
    log.wait(3.0).all_ranks(A10_DIST_BEGIN, RANKS4, 0.01)
    return log.text()


NEEDS_WHEEL_FIELDS = {
    "sglang-0.5.10-dense-tp4.log", "sglang-0.5.23-dense-tp2.log",
    "sglang-0.5.10-hybrid-mtp-tp4.log", "sglang-0.5.23-hybrid-mtp-tp4.log",
}

FIXTURES = {
    "sglang-0.5.10-dense-tp4.log": lambda f: v10_dense(f[V10]),
    "sglang-0.5.23-dense-tp2.log": lambda f: v23_dense(f[V23]),
    "sglang-0.5.10-hybrid-mtp-tp4.log": lambda f: v10_hybrid_mtp(f[V10]),
    "sglang-0.5.23-hybrid-mtp-tp4.log": lambda f: v23_hybrid_mtp(f[V23]),
    "crash-spec-config-0.5.10.log": lambda f: crash_spec_config(),
    "crash-graph-oom-traceback-only-0.5.10.log": lambda f: crash_graph_oom(),
    "crash-nccl-dist-init-0.5.10.log": lambda f: crash_nccl(),
    "crash-kv-not-enough-memory-0.5.23.log": lambda f: crash_kv(),
    "incomplete-dist-init-0.5.10.log": lambda f: incomplete_dist_init(),
}


# ---------------------------------------------------------------------------------------------
# Wheel checks
# ---------------------------------------------------------------------------------------------


def _extractor():
    spec = importlib.util.spec_from_file_location("extract_sglang_log_lines", REPO / "core" / "engines" / "sglang" / "extract" / "log_lines.py")
    mod = importlib.util.module_from_spec(spec)
    assert spec.loader is not None
    sys.modules[spec.name] = mod
    spec.loader.exec_module(mod)
    return mod


def _wheel(wheel_dir: Path, version: str) -> Path:
    have = sorted(wheel_dir.glob(f"sglang-{version}-*.whl"))
    if not have:
        raise SystemExit(f"no sglang-{version} wheel in {wheel_dir}: pip download --no-deps sglang=={version} -d {wheel_dir}")
    return have[0]


def check_sources(wheel_dir: Path) -> list[str]:
    """Each template's literal chunks must occur in a message rendered from its file."""
    ex = _extractor()
    problems = []
    cache: dict[tuple[str, str], list[str]] = {}
    for version, file, template in SOURCES:
        key = (version, file)
        if key not in cache:
            with zipfile.ZipFile(_wheel(wheel_dir, version)) as zf:
                source = zf.read("sglang/" + file).decode("utf-8", "replace")
            rendered = [f.template for f in ex.scan_source(file, source)]
            # plain string constants too (CUDA_GRAPH_CAPTURE_FAILED_MSG, literals in expressions)
            rendered += [n.value for n in ast.walk(ast.parse(source)) if isinstance(n, ast.Constant) and isinstance(n.value, str)]
            cache[key] = rendered
        chunks = [c for c in re.split(r"\{[^{}]*\}", template) if len(c.strip()) >= 3]
        for chunk in chunks:
            if not any(chunk in r for r in cache[key]):
                problems.append(f"{version} {file}: {chunk!r} (from {template!r})")
    return problems


def server_args_fields(wheel_dir: Path | None, version: str) -> dict[str, object]:
    """ServerArgs' fields and their literal defaults (None where the default is computed)."""
    if wheel_dir is None:
        return {k: None for k in ("model_path", "tokenizer_path", "tp_size", "port", "host")}
    names: dict[str, object] = {}
    with zipfile.ZipFile(_wheel(wheel_dir, version)) as zf:
        files = ["sglang/srt/server_args.py"] + sorted(
            n for n in zf.namelist() if n.startswith("sglang/srt/arg_groups/fields/") and n.endswith(".py"))
        for name in files:
            tree = ast.parse(zf.read(name).decode("utf-8", "replace"))
            for node in ast.walk(tree):
                if isinstance(node, ast.ClassDef) and (node.name == "ServerArgs" or "fields/" in name):
                    for st in node.body:
                        if isinstance(st, ast.AnnAssign) and isinstance(st.target, ast.Name) and not st.target.id.startswith("_"):
                            if st.target.id not in names:
                                default: object = None
                                if st.value is not None:
                                    try:
                                        default = ast.literal_eval(st.value)
                                    except ValueError:
                                        default = None
                                names[st.target.id] = default
    return names


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--wheel-dir", type=Path, default=None)
    ap.add_argument("--check", action="store_true", help="compare with the files on disk instead of writing")
    args = ap.parse_args(argv)
    if args.wheel_dir is not None:
        problems = check_sources(args.wheel_dir)
        if problems:
            print("templates not found in the wheels:\n  " + "\n  ".join(problems))
            return 1
        print(f"{len(SOURCES)} templates found in the wheels")
    fields = {V10: server_args_fields(args.wheel_dir, V10), V23: server_args_fields(args.wheel_dir, V23)}
    status = 0
    for name, make in FIXTURES.items():
        text = make(fields)
        path = HERE / name
        if args.check:
            if args.wheel_dir is None and name in NEEDS_WHEEL_FIELDS:
                continue  # their server_args= line lists the wheel's ServerArgs fields
            old = None
            if path.exists():
                with open(path, encoding="utf-8", newline="") as f:  # keep tqdm's "\r"
                    old = f.read()
            if old != text:
                print(f"differs: {name}")
                status = 1
        else:
            path.write_text(text, encoding="utf-8", newline="")
            print(f"wrote {name} ({len(text.splitlines())} lines, {len(text)} bytes)")
    return status


if __name__ == "__main__":
    sys.exit(main())
