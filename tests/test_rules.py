"""The finding rules (core/rules.py) on real message text.

Every line a rule matches below is quoted from its source: SGLang's wheels (``pip download
--no-deps sglang==0.5.10`` / ``==0.5.23``, paths under ``sglang/``, cited at each constant), NCCL's
source (NVIDIA/nccl src/init.cc ncclGetErrorString, misc/socket.cc, misc/shmutils.cc,
misc/ibvwrap.cc, transport/p2p.cc) and NCCL lines from real logs, torch's
c10/cuda/CUDACachingAllocator.cpp, CUDA's and NVML's error strings, uvicorn/asyncio's bind error.
They are put into real-format logs: the fixtures in tests/data/logs (built from the wheels by
make_logs.py) cut where the failure happens, with every rank's ``Scheduler hit an exception``
traceback after them, or the simulated host's own output.
"""

from __future__ import annotations

import json
import re
import subprocess
from dataclasses import dataclass
from pathlib import Path
from typing import Callable

import pytest

from gpuops.core.engines.sglang import finding_rules as rules
from gpuops.core.diagnose.fixes import apply_patch as apply_to_plan
from gpuops.core.planning.hostfacts import offline_target
from gpuops.core.planning.model_facts import facts_from_config
from gpuops.core.engines.sglang.phases import PhaseTracker, track_log
from gpuops.core.domain import Plan, split_flags
from gpuops.core.planning.plan import Wishes, build_plan
from gpuops.core.engines.sglang.finding_rules import LINE_RULES, SILENCE_RULES, LogScanner
from gpuops.core.engines.sglang.finding_rules import findings_for_log as findings_for_typed
from gpuops.sim.host import setup_simhost
from tests.sshd import free_port
from tests.test_sglang_sim import Server



def findings_for_log(lines, plan: dict | None = None):
    """The rules' findings, with the plan (a plan document here) decoded as the Plan they take."""
    return findings_for_typed(lines, Plan.from_json(plan) if plan is not None else None)


def apply_patch(plan: dict, patch, **kw) -> tuple[dict, list]:
    new, diff = apply_to_plan(Plan.from_json(plan), patch, **kw)
    return new.to_json(), diff


LOGS = Path(__file__).parent / "data" / "logs"
CONFIGS = Path(__file__).parent / "data" / "configs"
PKG = "/usr/local/lib/python3.12/dist-packages/sglang/srt/"
TS = "2026-07-14 09:12:41"
H200 = 143771 / 1024  # GiB


def fixture(name: str) -> list[str]:
    return (LOGS / name).read_text().splitlines()


def upto(name: str, pattern: str) -> list[str]:
    """The fixture's lines through the last one matching PATTERN: the log of a start that
    failed right there."""
    lines = fixture(name)
    return lines[: max(i for i, x in enumerate(lines) if re.search(pattern, x)) + 1]


def before_ready(name: str, extra: list[str]) -> list[str]:
    """EXTRA inserted before the ready line of a fixture that gets to ready."""
    lines = fixture(name)
    i = next(i for i, x in enumerate(lines) if x.endswith("The server is fired up and ready to roll!"))
    return lines[:i] + extra + lines[i:]


def frames(*fs: tuple[str, int, str, str]) -> list[str]:
    out = []
    for path, line, func, code in fs:
        out += [f'  File "{PKG if not path.startswith("/") else ""}{path}", line {line}, in {func}', f"    {code}"]
    return out


# Call chains of SGLang 0.5.10 (line numbers from the wheel).
SCHEDULER = frames(
    ("managers/scheduler.py", 3600, "run_scheduler_process", "scheduler = Scheduler("),
    ("managers/scheduler.py", 385, "__init__", "self.init_model_worker()"),
    ("managers/scheduler.py", 632, "init_model_worker", "self.init_tp_model_worker()"),
    ("managers/scheduler.py", 600, "init_tp_model_worker", "self.tp_worker = TpModelWorker(**worker_kwargs)"),
    ("managers/tp_worker.py", 261, "__init__", "self._init_model_runner()"),
    ("managers/tp_worker.py", 344, "_init_model_runner", "self._model_runner = ModelRunner("),
)
DIST = SCHEDULER + frames(
    ("model_executor/model_runner.py", 403, "__init__", "pre_model_load_memory = self.init_torch_distributed()"),
    ("model_executor/model_runner.py", 964, "init_torch_distributed", "initialize_model_parallel("),
    ("distributed/parallel_state.py", 1790, "initialize_model_parallel", "_TP = init_model_parallel_group("),
    ("distributed/parallel_state.py", 356, "__init__", "self.pynccl_comm = PyNcclCommunicator("),
    ("distributed/device_communicators/pynccl.py", 109, "__init__",
     "self.comm: ncclComm_t = self.nccl.ncclCommInitRank("),
    ("distributed/device_communicators/pynccl_wrapper.py", 376, "NCCL_CHECK",
     'raise RuntimeError(f"NCCL error: {error_str}")'),
)
RUNNER = SCHEDULER + frames(
    ("model_executor/model_runner.py", 427, "__init__", "self.initialize(pre_model_load_memory)"))
WEIGHTS = RUNNER + frames(
    ("model_executor/model_runner.py", 507, "initialize", "self.load_model()"),
    ("model_executor/model_runner.py", 1159, "load_model", "self.model = self.loader.load_model("),
    ("model_loader/loader.py", 721, "load_model", "self.load_weights_and_postprocess("),
)
KV_POOL = RUNNER + frames(
    ("model_executor/model_runner.py", 623, "initialize", "self.init_memory_pool(pre_model_load_memory)"),
    ("model_executor/model_runner_kv_cache_mixin.py", 893, "init_memory_pool", "self.token_to_kv_pool = MHATokenToKVPool("),
    ("mem_cache/memory_pool.py", 647, "__init__", "self._create_buffers()"),
    ("mem_cache/memory_pool.py", 254, "_create_buffers", "torch.zeros("),
)
GRAPHS = RUNNER + frames(
    ("model_executor/model_runner.py", 655, "initialize", "self.init_device_graphs()"),
    ("model_executor/model_runner.py", 2455, "init_device_graphs", "self.graph_runner = graph_runners[self.device](self)"),
    ("model_executor/cuda_graph_runner.py", 653, "__init__", "self.capture()"),
)
RUNNING = frames(
    ("managers/scheduler.py", 3608, "run_scheduler_process", "scheduler.event_loop_overlap()"),
    ("managers/scheduler.py", 1121, "event_loop_overlap", "batch_result = self.run_batch(batch)"),
    ("managers/scheduler.py", 2339, "run_batch", "batch_result = self.model_worker.forward_batch_generation("),
)
# 0.5.23's pool sizing (srt/mem_cache/kv_cache_configurator.py)
KV_CONFIG_23 = frames(
    ("managers/scheduler.py", 6362, "run_scheduler_process", "scheduler = Scheduler(server_args, port_args)"),
    ("managers/scheduler.py", 1100, "init_memory_pools", "self.init_target_memory_pool()"),
    ("model_executor/model_runner.py", 982, "alloc_memory_pool", "result = self.kv_cache_configurator.configure("),
    ("mem_cache/kv_cache_configurator.py", 476, "configure", "config = self._resolve_memory_pool_config(pre_model_load_memory)"),
    ("mem_cache/kv_cache_configurator.py", 3183, "_resolve_memory_pool_config", "config = self.config_from_budget(available_bytes)"),
)


def crash(ranks: tuple[str, ...], tb: list[str], exc: str, sigquit: bool = True) -> list[str]:
    """Every rank's 'Scheduler hit an exception: <traceback>' (managers/scheduler.py:3620), then
    the main process's sigquit line (entrypoints/engine.py:1152)."""
    out: list[str] = []
    for r in ranks:
        out += [f"[{TS} {r}] Scheduler hit an exception: Traceback (most recent call last):", *tb, *exc.split("\n"), ""]
    if sigquit:
        out.append(f"[{TS}] Received sigquit from a child process. It usually means the child failed.")
    return out


TP4 = ("TP0 EP0", "TP1 EP1")  # the 0.5.10 TP4 fixtures' prefixes (two ranks' tracebacks are enough)
TP2 = ("TP0", "TP1")

# ------------------------------------------------------------------ the messages, quoted

# sglang 0.5.10 srt/server_args.py:2207 (f-string without a space after "no_buffer.")
SPEC_NO_BUFFER = ("ValueError: Speculative decoding for Qwen3_5MoeForConditionalGeneration is not compatible with radix "
                  "cache when using --mamba-scheduler-strategy no_buffer.To use radix cache with speculative decoding, "
                  "please use --mamba-scheduler-strategy extra_buffer and set SGLANG_ENABLE_SPEC_V2=1.")
# 0.5.10 srt/server_args.py:2159
GDN_NO_BUFFER = ("ValueError: FlashInfer GDN decode (--linear-attn-decode-backend flashinfer) is not compatible with "
                 "--mamba-scheduler-strategy no_buffer. Please use --mamba-scheduler-strategy extra_buffer instead. "
                 "See https://github.com/sgl-project/sglang/issues/20791")
# 0.5.10 srt/server_args.py:2168
EXTRA_NO_RADIX = ("ValueError: mamba extra_buffer is not compatible with --disable-radix-cache Overlap scheduling is "
                  "already supported with no_buffer + disable_radix_cache. Please use --mamba-scheduler-strategy "
                  "no_buffer instead.")
# 0.5.10 srt/server_args.py:2175, :2150
EXTRA_NO_FLA = "AssertionError: Mamba extra_buffer is only supported on CUDA devices with FLA backend"
EXTRA_NO_ARCH = "AssertionError: mamba extra_buffer is not supported for Qwen3NextForCausalLM model"
# 0.5.10 srt/server_args.py:2179
TRACK_INTERVAL = "AssertionError: mamba_track_interval 2 must be greater than or equal to speculative_num_draft_tokens 4"
# 0.5.10 srt/server_args.py:2189 (f"{FLA_CHUNK_SIZE=}, {self.page_size=}")
FLA_PAGE = ("AssertionError: For SSM models with extra buffer, either FLA_CHUNK_SIZE or page_size must be divisible by "
            "the other, got FLA_CHUNK_SIZE=64, self.page_size=48")
# 0.5.10 srt/server_args.py:3012
SPEC_V2_TOPK = "ValueError: Spec v2 currently only supports topk = 1 for speculative decoding."
# 0.5.10 srt/model_executor/model_runner_kv_cache_mixin.py:57-59 | 0.5.23 model_executor/pool_configurator.py:96
KV_NOT_ENOUGH = "RuntimeError: Not enough memory. Please try to increase --mem-fraction-static."
# 0.5.23 srt/mem_cache/kv_cache_configurator.py:3051 (suggested = ceil(min * 1000) / 1000)
KV_WEIGHTS_NO_ROOM = ("ValueError: Loaded weights leave no GPU memory for the KV cache under --mem-fraction-static=0.8. "
                      "Raise --mem-fraction-static above 0.874 (minimum viable = 1 - available/pre = 0.8731). If using "
                      "speculative decoding, draft weights are now counted.")
# 0.5.23 kv_cache_configurator.py:3154 and :3394
STATE_TOO_SMALL = ("RuntimeError: Hybrid (mamba/linear-attention) state cache is too small to serve any requests. "
                   "max_mamba_cache_size=0, mamba_ratio=2, resulting max_num_reqs=0. Try: (1) reduce "
                   "--max-running-requests, (2) increase --mem-fraction-static, or (3) use GPUs with more memory.")
STATE_NO_MEMORY = ("RuntimeError: Not enough GPU memory for hybrid (mamba/linear-attention) state cache. Computed "
                   "max_mamba_cache_size=-12 (total_rest_memory=1.52 GB, mamba_cache_per_req=176.25 MB). Try: (1) reduce "
                   "--max-running-requests, (2) increase --mem-fraction-static, (3) reduce --speculative-num-draft-tokens, "
                   "or (4) use GPUs with more memory.")
# 0.5.10 srt/managers/tp_worker.py:308
POOL_TOO_SMALL = "AssertionError: Memory pool size is too small"
# 0.5.10 srt/mem_cache/common.py:411 (logged, then raised)
DECODE_OOM = "Decode out of memory. Try to lower your batch size.\nTry to allocate 4096 tokens."
# 0.5.23 srt/managers/tp_worker.py:560
POOL_BELOW_CONTEXT = ("KV pool holds 131072 tokens, fewer than --context-length 262144. One full-length request cannot "
                      "fit, so long requests will be refused or truncated at serving time. Lower --context-length, raise "
                      "--mem-fraction-static, or free memory taken before the pool is sized.")
# torch c10/cuda/CUDACachingAllocator.cpp, torch 2.x (torch.OutOfMemoryError from 2.5; the simulated host writes it too)
TORCH_OOM = ("torch.OutOfMemoryError: CUDA out of memory. Tried to allocate 29.50 GiB. GPU 0 has a total capacity of "
             "139.72 GiB of which 21.13 GiB is free. Including non-PyTorch memory, this process has 118.57 GiB memory in "
             "use. Of the allocated memory 117.90 GiB is allocated by PyTorch, and 20.00 MiB is reserved by PyTorch but "
             "unallocated. If reserved but unallocated memory is large try setting "
             "PYTORCH_CUDA_ALLOC_CONF=expandable_segments:True to avoid fragmentation.  See documentation for Memory "
             "Management  (https://pytorch.org/docs/stable/notes/cuda.html#environment-variables)")
# the same allocator, torch 1.x (RuntimeError, "(GPU 0; … total capacity; …)")
TORCH_OOM_OLD = ("RuntimeError: CUDA out of memory. Tried to allocate 2.00 GiB (GPU 0; 139.72 GiB total capacity; "
                 "120.01 GiB already allocated; 1.12 GiB free; 125.30 GiB reserved in total by PyTorch) If reserved "
                 "memory is >> allocated memory try setting max_split_size_mb to avoid fragmentation.")
# C10_CUDA_CHECK on cudaErrorMemoryAllocation (its cudaGetErrorString is "out of memory")
CUDA_ERROR_OOM = ("RuntimeError: CUDA error: out of memory\nCUDA kernel errors might be asynchronously reported at some "
                  "other API call, so the stacktrace below might be incorrect.\nFor debugging consider passing "
                  "CUDA_LAUNCH_BLOCKING=1")
# CUDA runtime: cudaErrorInsufficientDriver's string; torch's lazy-init warning
DRIVER_TOO_OLD = "RuntimeError: CUDA driver version is insufficient for CUDA runtime version"
TORCH_DRIVER_OLD = ("/usr/local/lib/python3.12/dist-packages/torch/cuda/__init__.py:180: UserWarning: CUDA initialization: "
                    "The NVIDIA driver on your system is too old (found version 12080). Please update your GPU driver by "
                    "downloading and installing a new version from the URL: http://www.nvidia.com/Download/index.aspx "
                    "Alternatively, go to: https://pytorch.org to install a PyTorch version that has been compiled with "
                    "your version of the CUDA driver. (Triggered internally at /pytorch/c10/cuda/CUDAFunctions.cpp:119.)")
# pynvml (nvidia-ml-py: NVML_ERROR_LIB_RM_VERSION_MISMATCH's text), nvidia-smi, the kernel
NVML_MISMATCH = "pynvml.NVMLError_LibRmVersionMismatch: RM has detected an NVML/RM version mismatch."
SMI_MISMATCH = "Failed to initialize NVML: Driver/library version mismatch"
NVRM_MISMATCH = "NVRM: API mismatch: the client has the version 565.57.01, but"
# NCCL src/init.cc ncclGetErrorString, through sglang's pynccl_wrapper.py:376 RuntimeError(f"NCCL error: {error_str}")
NCCL_SYSTEM = "RuntimeError: NCCL error: unhandled system error (run with NCCL_DEBUG=INFO for details)"
NCCL_USAGE = "RuntimeError: NCCL error: invalid usage (run with NCCL_DEBUG=WARN for details)"
NCCL_REMOTE = "RuntimeError: NCCL error: remote process exited or there was a network error"
# torch c10d's wording of the same (ProcessGroupNCCL)
NCCL_INTERNAL_TORCH = ("torch.distributed.DistBackendError: NCCL error in: /pytorch/torch/csrc/distributed/c10d/"
                       "ProcessGroupNCCL.cpp:3356, internal error - please report this issue to the NCCL developers, "
                       "NCCL version 2.21.5\nncclInternalError: Internal check failed.\nLast error:\n"
                       "Proxy Call to rank 1 failed (Connect)")
# NCCL misc/socket.cc, as a real SGLang log shows it (NCCL 2.28: ncclOsSocketPollConnect)
NCCL_REFUSED = ("tpgds-aihub0003:2387398:2387398 [3] os/linux.cc:200 NCCL WARN ncclOsSocketPollConnect: connect to "
                "10.82.101.249<37857> returned Connection refused, exceeded error retry count after 35 attempts")
NCCL_REFUSED_OLD = ("vae-bc5a469e-2296-0:10209:10243 [1] misc/socket.cc:544 NCCL WARN socketPollConnect: connect returned "
                    "Connection refused, exceeded error retry count (35)")
# NCCL misc/ibvwrap.cc
NCCL_IBV = "gpu1:4101:4188 [0] misc/ibvwrap.cc:203 NCCL WARN Call to ibv_create_cq failed with error Cannot allocate memory"
# NCCL transport/p2p.cc ("failed to peer with device %d(=%lx): %d %s"; 217 is cudaErrorPeerAccessUnsupported)
NCCL_PEER = ("gpu1:4101:4188 [0] transport/p2p.cc:275 NCCL WARN failed to peer with device 1(=19000): 217 peer access is "
             "not supported between these two devices")
# NCCL misc/shmutils.cc (in the crash-nccl-dist-init fixture) and torch's rendering of it
TORCH_SHM = ("torch.distributed.DistBackendError: NCCL error in: /pytorch/torch/csrc/distributed/c10d/NCCLUtils.cpp:94, "
             "unhandled system error (run with NCCL_DEBUG=INFO for details), NCCL version 2.21.5\n"
             "ncclSystemError: System call (e.g. socket, malloc) or external library call failed or device error. \n"
             "Last error:\nError while creating shared memory segment /dev/shm/nccl-cjY8K5 (size 10617216), error: No "
             "space left on device (28)")
# torch c10d TCPStore; as a real 2x H200 rendezvous that never completed printed it
STORE_TIMEOUT = ("torch.distributed.DistStoreError: Timed out after 26 seconds waiting for clients. 1/2 clients joined.")
# torch 2.14.1 (CPU, gloo) as seen on these machines: a rank whose peer process was killed after every
# rank had joined, and a rank whose TCPStore server (node 0) was killed before all had joined
GLOO_PEER_LOST = ("RuntimeError: [/__w/pytorch/pytorch/third_party/gloo/gloo/transport/tcp/pair.cc:561] Connection "
                  "closed by peer [127.0.0.1]:45873. This is typically caused by a remote worker crashing. Check the "
                  "logs of the remote worker before reporting an error. GLHF! \U0001f3d6\ufe0f")
STORE_LOST = ("torch.distributed.DistNetworkError: Failed to recv, got 0 bytes. Connection was likely closed. Did "
              "the remote server shutdown or crash?")
ADDR_IN_USE_C10D = ("torch.distributed.DistNetworkError: The server socket has failed to listen on any local network "
                    "address. port: 29500, useIpv6: false, code: -98, name: EADDRINUSE, message: address already in use")
# CPython asyncio/base_events.py create_server, logged by uvicorn
UVICORN_IN_USE = ("ERROR:    [Errno 98] error while attempting to bind on address ('0.0.0.0', 30000): address already "
                  "in use")
# sglang 0.5.10 srt/model_loader/loader.py:469; safetensors; FileNotFoundError under load_model
NO_WEIGHTS = "RuntimeError: Cannot find any model weights with `/models/Qwen3-235B-A22B-Instruct-2507-FP8`"
SAFETENSORS = "safetensors_rust.SafetensorError: Error while deserializing header: MetadataIncompleteBuffer"
SHARD_MISSING = ("FileNotFoundError: [Errno 2] No such file or directory: "
                 "'/models/Qwen3-235B-A22B-Instruct-2507-FP8/model-00007-of-00024.safetensors'")
# 0.5.10 srt/model_executor/model_runner.py:1013 (the graph-OOM fixture's first line shows it too)
UNBALANCED = ("The memory capacity is unbalanced. Some GPUs may be occupied by other processes. "
              "pre_model_load_memory=96.12, local_gpu_memory=137.91, local_gpu_memory * 0.9=124.119")
# 0.5.10 srt/distributed/device_communicators/custom_all_reduce_utils.py:466 (cls_name from custom_all_reduce.py:87)
NO_P2P = ("CustomAllreduce is disabled because your platform lacks GPU P2P capability or P2P test failed. To silence "
          "this warning, specify disable_custom_all_reduce=True explicitly.")
# 0.5.10 srt/utils/watchdog.py:154
WATCHDOG = "Scheduler watchdog timeout (self.watchdog_timeout=300, self.soft=False)"
# 0.5.10 srt/entrypoints/http_server.py:1778, with the warmup request's own traceback
WARMUP = [f"[{TS}] Initialization failed. warmup error: Traceback (most recent call last):",
          f'  File "{PKG}entrypoints/http_server.py", line 1760, in _execute_server_warmup',
          "    res = requests.post(",
          "requests.exceptions.ReadTimeout: HTTPConnectionPool(host='0.0.0.0', port=30000): Read timed out. (read "
          "timeout=600)"]


def server_args_error(exc: str, raise_line: int) -> list[str]:
    """A ServerArgs check failing while the launcher builds it (no server_args= line yet): the
    crash-spec-config fixture's traceback with another check's exception."""
    lines = fixture("crash-spec-config-0.5.10.log")[:-1]
    lines[-2] = lines[-2].replace("line 2206,", f"line {raise_line},")
    lines[-1] = "    assert (" if exc.startswith("AssertionError") else lines[-1]
    return lines + [exc]


def nccl_init_lines(ranks: int, complete: int = 0) -> list[str]:
    """NCCL_DEBUG=INFO's communicator init lines (as a real 2x H200 run printed them, NCCL 2.28.9)."""
    out = [f"gpu1:{4101 + r}:{4101 + r} [{r}] NCCL INFO ncclCommInitRankConfig comm 0x55d4c0a{r}0000 rank {r} nranks "
           f"{ranks} cudaDev {r} nvmlDev {r} busId {r + 1}8000 commId 0x8f2c11d07a3b4e21 - Init START" for r in range(ranks)]
    out += [f"gpu1:{4101 + r}:{4101 + r} [{r}] NCCL INFO ncclCommInitRankConfig comm 0x55d4c0a{r}0000 rank {r} nranks "
            f"{ranks} cudaDev {r} nvmlDev {r} busId {r + 1}8000 commId 0x8f2c11d07a3b4e21 - Init COMPLETE"
            for r in range(complete)]
    return out


# ------------------------------------------------------------------ every rule, on its real text


@dataclass
class Case:
    rule: str
    code: str
    severity: str
    log: Callable[[], list[str]]
    quote: str  # the real text, as it must show in the evidence
    outcome: str = "crashed"


D10 = "sglang-0.5.10-dense-tp4.log"
D23 = "sglang-0.5.23-dense-tp2.log"
K23 = "crash-kv-not-enough-memory-0.5.23.log"
READY10 = lambda extra: before_ready(D10, extra)  # noqa: E731

CASES = [
    Case("spec-mamba-no-buffer", "spec-config-invalid", "error", lambda: fixture("crash-spec-config-0.5.10.log"),
         SPEC_NO_BUFFER),
    Case("gdn-flashinfer-no-buffer", "spec-config-invalid", "error", lambda: server_args_error(GDN_NO_BUFFER, 2158),
         GDN_NO_BUFFER),
    Case("extra-buffer-without-radix", "spec-config-invalid", "error",
         lambda: server_args_error(EXTRA_NO_RADIX, 2167), EXTRA_NO_RADIX),
    Case("extra-buffer-unsupported", "spec-config-invalid", "error", lambda: server_args_error(EXTRA_NO_FLA, 2173),
         EXTRA_NO_FLA),
    Case("extra-buffer-unsupported", "spec-config-invalid", "error", lambda: server_args_error(EXTRA_NO_ARCH, 2148),
         EXTRA_NO_ARCH),
    Case("mamba-track-interval", "spec-config-invalid", "error", lambda: server_args_error(TRACK_INTERVAL, 2177),
         TRACK_INTERVAL),
    Case("fla-page-size", "spec-config-invalid", "error", lambda: server_args_error(FLA_PAGE, 2185), FLA_PAGE),
    Case("spec-v2-topk", "spec-config-invalid", "error", lambda: server_args_error(SPEC_V2_TOPK, 3011), SPEC_V2_TOPK),
    Case("graph-capture-oom", "cuda-graph-oom", "error", lambda: fixture("crash-graph-oom-traceback-only-0.5.10.log"),
         "Exception: Capture cuda graph failed: CUDA out of memory. Tried to allocate 1.50 GiB."),
    Case("oom-in-graph-capture", "cuda-graph-oom", "error",
         lambda: upto(D10, r"Capturing batches") + crash(TP4, GRAPHS, TORCH_OOM), TORCH_OOM[:80]),
    Case("kv-not-enough-memory", "kv-cache-oom", "error", lambda: fixture(K23),
         KV_NOT_ENOUGH + " Current value: mem_fraction_static=0.42"),
    Case("kv-weights-leave-no-room", "kv-cache-oom", "error",
         lambda: upto(K23, "Load weight end") + crash(TP2, KV_CONFIG_23, KV_WEIGHTS_NO_ROOM), KV_WEIGHTS_NO_ROOM),
    Case("kv-state-cache-too-small", "kv-cache-oom", "error",
         lambda: upto(K23, "Load weight end") + crash(TP2, KV_CONFIG_23, STATE_TOO_SMALL), STATE_TOO_SMALL),
    Case("kv-state-cache-too-small", "kv-cache-oom", "error",
         lambda: upto(K23, "Load weight end") + crash(TP2, KV_CONFIG_23, STATE_NO_MEMORY), STATE_NO_MEMORY),
    Case("kv-pool-too-small", "kv-cache-oom", "error",
         lambda: upto(D10, "Memory pool end") + crash(TP4, SCHEDULER + frames(
             ("managers/tp_worker.py", 307, "__init__", "assert (")), POOL_TOO_SMALL), POOL_TOO_SMALL),
    Case("kv-runtime-oom", "kv-cache-oom", "error",
         lambda: fixture(D10) + [f"[{TS} TP0 EP0] " + DECODE_OOM] + crash(TP4, RUNNING, "RuntimeError: " + DECODE_OOM),
         "Decode out of memory. Try to lower your batch size."),
    Case("kv-pool-below-context", "kv-cache-small", "warning",
         lambda: before_ready(D23, [f"[{TS} TP0] " + POOL_BELOW_CONTEXT]), POOL_BELOW_CONTEXT, "ready"),
    Case("oom-in-kv-cache", "kv-cache-oom", "error",
         lambda: upto(D10, "Load weight end") + crash(TP4, KV_POOL, TORCH_OOM), TORCH_OOM[:80]),
    Case("oom-loading-weights", "cuda-oom", "error",
         lambda: upto(D10, "Load weight begin") + crash(TP4, WEIGHTS, TORCH_OOM), TORCH_OOM[:80]),
    Case("cuda-oom", "cuda-oom", "error", lambda: fixture(D10) + crash(TP4, RUNNING, TORCH_OOM_OLD), TORCH_OOM_OLD),
    Case("cuda-oom", "cuda-oom", "error", lambda: fixture(D10) + crash(TP4, RUNNING, CUDA_ERROR_OOM),
         "RuntimeError: CUDA error: out of memory"),
    Case("cuda-oom", "cuda-oom", "error", lambda: fixture(D10) + crash(TP4, RUNNING, "RuntimeError: CUDA driver error: "
                                                                      "cudaErrorMemoryAllocation"),
         "cudaErrorMemoryAllocation"),
    Case("cuda-driver-too-old", "cuda-driver-too-old", "error",
         lambda: upto(D10, "Init torch distributed begin") + crash(TP4, DIST[:-4], DRIVER_TOO_OLD), DRIVER_TOO_OLD),
    Case("cuda-driver-too-old", "cuda-driver-too-old", "error",
         lambda: [TORCH_DRIVER_OLD, "  warnings.warn("] + upto(D10, "Init torch distributed begin")
         + crash(TP4, DIST[:-4], "RuntimeError: No CUDA GPUs are available"), TORCH_DRIVER_OLD),
    Case("driver-library-mismatch", "driver-library-mismatch", "error",
         lambda: upto(D10, "Init torch distributed begin") + crash(TP4, DIST[:-4], NVML_MISMATCH), NVML_MISMATCH),
    Case("driver-library-mismatch", "driver-library-mismatch", "error",
         lambda: [SMI_MISMATCH, "NVML library version: 565.57"] + upto(D10, "Init torch distributed begin")
         + crash(TP4, DIST, "RuntimeError: NCCL error: unhandled cuda error (run with NCCL_DEBUG=INFO for details)"),
         SMI_MISMATCH),
    Case("driver-library-mismatch", "driver-library-mismatch", "error",
         lambda: ["Jul 14 09:12:40 gpu1 kernel: " + NVRM_MISMATCH, "Jul 14 09:12:40 gpu1 kernel: NVRM: this kernel "
                  "module has the version 590.48.01.  Please"] + upto(D10, "Init torch distributed begin"),
         NVRM_MISMATCH, "incomplete"),
    Case("shm-exhausted", "shm-too-small", "error", lambda: fixture("crash-nccl-dist-init-0.5.10.log"),
         "NCCL WARN Error: failed to extend /dev/shm/nccl-Qx0dsp to 9637892 bytes"),
    Case("shm-exhausted", "shm-too-small", "error",
         lambda: upto(D10, "Init torch distributed begin") + crash(TP4, DIST[:-4], TORCH_SHM),
         "Error while creating shared memory segment /dev/shm/nccl-cjY8K5 (size 10617216)"),
    Case("shm-exhausted", "shm-too-small", "error",
         lambda: upto(D10, "sglang is using nccl") + [
             "Jul 14 09:12:41 gpu1 systemd[1]: gpuops-qwen3.service: Main process exited, code=killed, status=7/BUS"],
         "status=7/BUS", "incomplete"),
    Case("p2p-peer-failed", "p2p-unavailable", "error",
         lambda: upto(D10, "sglang is using nccl") + [NCCL_PEER] + crash(TP4, DIST, "RuntimeError: NCCL error: internal "
                                                                          "error - please report this issue to the NCCL developers"),
         NCCL_PEER),
    Case("p2p-custom-allreduce", "p2p-unavailable", "warning",
         lambda: before_ready(D10, [f"[{TS} TP0 EP0] " + NO_P2P]), NO_P2P, "ready"),
    Case("nccl-ib", "nccl-error", "error",
         lambda: upto(D10, "sglang is using nccl") + [NCCL_IBV] + crash(TP4, DIST, NCCL_SYSTEM), NCCL_IBV),
    Case("nccl-socket-refused", "nccl-error", "error",
         lambda: upto(D10, "Init torch distributed begin") + [f"[{TS}] " + NCCL_REFUSED] + crash(TP4, DIST, NCCL_REMOTE),
         NCCL_REFUSED),
    Case("nccl-socket-refused", "nccl-error", "error",
         lambda: upto(D10, "Init torch distributed begin") + [NCCL_REFUSED_OLD] + crash(TP4, DIST, NCCL_REMOTE),
         NCCL_REFUSED_OLD),
    Case("nccl-store-timeout", "nccl-init-stall", "error",
         lambda: upto(D10, "Init torch distributed begin") + crash(TP4, DIST[:-4], STORE_TIMEOUT), STORE_TIMEOUT),
    Case("peer-node-lost", "nccl-error", "error",
         lambda: fixture(D10) + crash(TP4, RUNNING, GLOO_PEER_LOST), "Connection closed by peer [127.0.0.1]:45873"),
    Case("rendezvous-store-lost", "nccl-init-stall", "error",
         lambda: upto(D10, "Init torch distributed begin") + crash(TP4, DIST[:-4], STORE_LOST), STORE_LOST),
    Case("nccl-error-code", "nccl-error", "error",
         lambda: upto(D10, "sglang is using nccl") + crash(TP4, DIST, NCCL_SYSTEM), NCCL_SYSTEM),
    Case("nccl-error-code", "nccl-error", "error",
         lambda: upto(D10, "sglang is using nccl") + crash(TP4, DIST, NCCL_USAGE), NCCL_USAGE),
    Case("nccl-error-code", "nccl-error", "error",
         lambda: fixture(D10) + crash(TP4, RUNNING, NCCL_INTERNAL_TORCH), NCCL_INTERNAL_TORCH.split("\n")[0]),
    Case("weights-missing", "weight-load-error", "error",
         lambda: upto(D10, "Load weight begin") + crash(TP4, WEIGHTS + frames(
             ("model_loader/loader.py", 468, "_prepare_weights", "raise RuntimeError(")), NO_WEIGHTS), NO_WEIGHTS),
    Case("weights-missing", "weight-load-error", "error",
         lambda: upto(D10, "Loading safetensors") + crash(TP4, WEIGHTS + frames(
             ("model_loader/weight_utils.py", 724, "safetensors_weights_iterator",
              'with safetensors.safe_open(st_file, framework="pt", device="cpu") as f:')), SAFETENSORS), SAFETENSORS),
    Case("weights-missing", "weight-load-error", "error",
         lambda: upto(D10, "Loading safetensors") + crash(TP4, WEIGHTS + frames(
             ("model_loader/weight_utils.py", 724, "safetensors_weights_iterator",
              'with safetensors.safe_open(st_file, framework="pt", device="cpu") as f:')), SHARD_MISSING), SHARD_MISSING),
    Case("port-in-use", "port-in-use", "error",
         lambda: upto(D10, "Application startup complete") + [UVICORN_IN_USE, "INFO:     Waiting for application "
                                                              "shutdown.", "INFO:     Application shutdown complete."],
         UVICORN_IN_USE, "incomplete"),
    Case("port-in-use", "port-in-use", "error",
         lambda: upto(D10, "Init torch distributed begin") + crash(TP4, DIST[:-4], ADDR_IN_USE_C10D), ADDR_IN_USE_C10D),
    Case("leftover-memory", "leftover-gpu-process", "warning", lambda: READY10([f"[{TS} TP2 EP2] " + UNBALANCED]),
         UNBALANCED, "ready"),
    Case("watchdog-timeout", "watchdog-timeout", "error", lambda: fixture(D10) + [f"[{TS} TP0 EP0] " + WATCHDOG],
         WATCHDOG),
    Case("warmup-failed", "warmup-failed", "error", lambda: upto(D10, "Uvicorn running") + WARMUP,
         "Initialization failed. warmup error"),
    Case("dist-init-silent", "nccl-init-stall", "warning", lambda: fixture("incomplete-dist-init-0.5.10.log"),
         "Init torch distributed begin.", "incomplete"),
    Case("nccl-init-pending", "nccl-init-stall", "warning",
         lambda: upto("sglang-0.5.10-hybrid-mtp-tp4.log", r"TP3\] Init torch distributed begin") + nccl_init_lines(4, 1),
         "Init START", "incomplete"),
    Case("graph-capture-silent", "cuda-graph-stall", "warning", lambda: upto(D10, "Capturing batches"),
         "Capturing batches (bs=1 avail_mem=15.49 GB): 100%", "incomplete"),
    # an exception the weight loader raised is the checkpoint and the model code disagreeing, not an
    # unknown crash (the generic rule's finding, under the crash rule's id)
    Case("crash", "weight-load-error", "error",
         lambda: upto(D10, "Loading safetensors") + crash(TP4, WEIGHTS, "KeyError: 'model.layers.0.mlp.experts.w13_weight'"),
         "KeyError: 'model.layers.0.mlp.experts.w13_weight'"),
    # SGLang 0.5.23 on a CPU, as it ends (tests/test_real_sglang.py runs it): the rotary path imports vllm
    Case("python-module-missing", "python-module-missing", "error",
         lambda: upto(D10, "Loading safetensors") + crash(TP4, WEIGHTS, "ModuleNotFoundError: No module named 'vllm'"),
         "ModuleNotFoundError: No module named 'vllm'"),
    Case("cuda-kernel-error", "cuda-error", "error",
         lambda: upto(D10, "Capture cuda graph end") + crash(TP4, RUNNER,
                                                             "torch.AcceleratorError: CUDA error: unspecified launch failure"),
         "unspecified launch failure", "crashed"),
    Case("crash", "server-crashed", "error",
         lambda: server_args_error("ValueError: --tool-call-parser qwen3_coder is not supported", 1520),
         "Traceback (most recent call last):"),
]


# argparse's errors come from the simulated host's launch_server: test_unknown_flags_are_dropped_or_renamed
ON_THE_SIM = {"argparse-unrecognized", "argparse-invalid"}


def test_every_rule_has_a_case_on_real_text():
    assert {c.rule for c in CASES} | ON_THE_SIM == {r.id for r in LINE_RULES} | {r.id for r in SILENCE_RULES} | {"crash"}
    assert len({r.id for r in LINE_RULES}) == len(LINE_RULES)
    for r in LINE_RULES + SILENCE_RULES:
        assert r.code in rules.CODES and r.severity in ("error", "warning", "info")


@pytest.mark.parametrize("case", CASES, ids=lambda c: c.rule)
def test_rule_on_real_text(case: Case):
    lines = case.log()
    tracker = track_log(lines)
    assert tracker.outcome == case.outcome
    found = findings_for_log(lines)
    mine = [f for f in found if f.data["rule"] == case.rule]
    assert len(mine) == 1, [(f.code, f.data["rule"]) for f in found]
    f = mine[0]
    assert (f.code, f.severity) == (case.code, case.severity)
    assert f.summary and "{" not in f.summary and "\n" not in f.summary
    # the evidence quotes the real line, and its source is that line's number in the log
    ev = [e for e in f.evidence if e.line is not None]
    assert any(case.quote in e.line for e in ev), ev
    for e in ev:
        n = int(e.source.removeprefix("log:"))
        assert e.line.rstrip("…") in lines[n - 1] or lines[n - 1].endswith(e.line.rstrip("…"))
    if case.severity == "error":  # one cause: what followed from it is covered, and it leads the list
        assert [x for x in found if x.severity == "error"] == [f] and found[0] is f
    json.dumps([x.to_json() for x in found])


def test_a_ready_log_has_no_findings_and_a_recovered_error_is_none():
    for name in ("sglang-0.5.10-dense-tp4.log", "sglang-0.5.10-hybrid-mtp-tp4.log", "sglang-0.5.23-dense-tp2.log",
                 "sglang-0.5.23-hybrid-mtp-tp4.log"):
        assert findings_for_log(fixture(name)) == []
    # an NCCL error line before the server got to ready did not stop it
    assert findings_for_log(READY10([NCCL_REFUSED_OLD])) == []
    # a log that says nothing
    assert findings_for_log([]) == []


def test_the_cause_covers_its_symptom():
    # /dev/shm full: NCCL's "unhandled system error" follows from it (the fixture has both)
    assert [f.code for f in findings_for_log(fixture("crash-nccl-dist-init-0.5.10.log"))] == ["shm-too-small"]
    # P2P failure under NCCL's internal error, a driver mismatch under NCCL's unhandled cuda error
    lines = upto(D10, "sglang is using nccl") + [NCCL_PEER] + crash(TP4, DIST, NCCL_SYSTEM)
    assert [f.code for f in findings_for_log(lines)] == ["p2p-unavailable"]
    # SGLang's graph-capture exception and torch's OOM under it: one finding, both lines
    [f] = findings_for_log(fixture("crash-graph-oom-traceback-only-0.5.10.log"))[:1]
    assert f.code == "cuda-graph-oom" and f.data["lines"] == 2
    assert [e.line.split(":")[0] for e in f.evidence[:2]] == ["torch.OutOfMemoryError", "Exception"]


def test_oom_becomes_what_its_phase_says():
    oom = crash(TP4, RUNNING, TORCH_OOM)
    assert [f.code for f in findings_for_log(upto(D10, "Capturing batches") + oom)] == ["cuda-graph-oom"]
    assert [f.code for f in findings_for_log(upto(D10, "KV Cache is allocated") + oom)] == ["kv-cache-oom"]
    assert [f.code for f in findings_for_log(upto(D10, "Load weight begin") + oom)] == ["cuda-oom"]
    [f] = findings_for_log(fixture(D10) + oom)
    assert f.code == "cuda-oom" and f.summary == ("CUDA ran out of GPU memory (tried to allocate 29.50 GiB) in ready.")
    assert f.data["free"] == "21.13 GiB" and f.data["gpu"] == "0"
    # a warning that merely mentions memory is no OOM (srt/layers/deep_gemm_wrapper/compile_utils.py:188)
    assert findings_for_log(READY10([f"[{TS} TP0 EP0] Available memory 12GB is less than required memory 16GB for "
                                     "warmup, reducing max_m to 4096 to avoid out of memory"])) == []


# ------------------------------------------------------------------ fixes, with and without a plan


def plan_for(config: str, model_id: str, version: str, gpus: int = 4, **wishes) -> dict:
    facts = facts_from_config(json.loads((CONFIGS / f"{config}.json").read_text()), id=model_id, source="hub")
    return build_plan(facts, offline_target(gpus, H200), Wishes(tp=gpus, engine_version=version, **wishes)).to_json()


QWEN122 = ("qwen3_5__Qwen3.5-122B-A10B", "Qwen/Qwen3.5-122B-A10B")


def without(plan: dict, *flags: str, env: tuple[str, ...] = ()) -> dict:
    new, diff = apply_patch(plan, {"remove_flags": list(flags), "unset_env": list(env)})
    assert diff
    return new


def fix_of(lines: list[str], plan: dict | None = None, rule: str | None = None):
    found = findings_for_log(lines, plan)
    return next(f for f in found if rule is None or f.data["rule"] == rule).fix


def test_spec_fix_names_the_flag_the_version_wants():
    lines = fixture("crash-spec-config-0.5.10.log")
    # no plan: what SGLang's own message asks for
    fix = fix_of(lines)
    assert fix.applicable and fix.plan_patch == {"set_flags": {"--mamba-scheduler-strategy": ["extra_buffer"]},
                                                 "set_env": {"SGLANG_ENABLE_SPEC_V2": "1"}}
    # a 0.5.10 plan that lacks both: the same, and applying it gives the planner's own plan back
    good = plan_for(*QWEN122, "0.5.10")
    broken = without(good, "--mamba-scheduler-strategy", env=("SGLANG_ENABLE_SPEC_V2",))
    fix = fix_of(lines, broken)
    fixed, diff = apply_patch(broken, fix.plan_patch)
    assert diff == [("+", "--mamba-scheduler-strategy extra_buffer"), ("+", "SGLANG_ENABLE_SPEC_V2=1")]
    assert sorted(fixed["argv"]) == sorted(good["argv"]) and fixed["env"] == good["env"]
    # 0.5.23 names it --mamba-radix-cache-strategy and has no SGLANG_ENABLE_SPEC_V2 any more
    broken = without(plan_for(*QWEN122, "0.5.23"), "--mamba-radix-cache-strategy")
    assert fix_of(lines, broken).plan_patch == {"set_flags": {"--mamba-radix-cache-strategy": ["extra_buffer"]}}
    # a 0.5.10 plan carrying the new name (from --like of a newer unit): renamed
    plan = good | {"argv": [("--mamba-radix-cache-strategy" if a == "--mamba-scheduler-strategy" else a)
                            for a in good["argv"]]}
    plan["argv"] = [a if a != "extra_buffer" else "no_buffer" for a in plan["argv"]]
    assert fix_of(lines, plan).plan_patch == {"set_flags": {"--mamba-scheduler-strategy": ["extra_buffer"]},
                                              "remove_flags": ["--mamba-radix-cache-strategy"]}
    # a plan that already has it: the fix is not a plan change
    fix = fix_of(lines, good)
    assert not fix.applicable and fix.plan_patch is None


def test_server_args_fixes():
    plan = plan_for(*QWEN122, "0.5.10")
    with_flags, _ = apply_patch(plan, {"set_flags": {"--disable-radix-cache": [], "--mamba-track-interval": ["2"],
                                                     "--page-size": ["48"], "--speculative-eagle-topk": ["4"]}})
    expect = {
        EXTRA_NO_RADIX: {"remove_flags": ["--disable-radix-cache"]},
        TRACK_INTERVAL: {"remove_flags": ["--mamba-track-interval"]},
        FLA_PAGE: {"set_flags": {"--page-size": ["64"]}},
        SPEC_V2_TOPK: {"set_flags": {"--speculative-eagle-topk": ["1"]}},
        GDN_NO_BUFFER: {"set_flags": {"--mamba-scheduler-strategy": ["extra_buffer"]}},
        EXTRA_NO_FLA: None,
    }
    for exc, patch in expect.items():
        fix = fix_of(server_args_error(exc, 2170), with_flags if exc != GDN_NO_BUFFER else without(
            plan, "--mamba-scheduler-strategy"))
        assert fix.plan_patch == patch and fix.applicable == (patch is not None), exc
    # without a plan nothing says --disable-radix-cache was set: no patch to offer
    assert fix_of(server_args_error(EXTRA_NO_RADIX, 2167)).plan_patch is None


def test_kv_fixes_follow_sglang_and_the_plan():
    # "Not enough memory ... Current value: mem_fraction_static=0.42": raise it a step
    fix = fix_of(fixture(K23))
    assert fix.plan_patch == {"set_flags": {"--mem-fraction-static": ["0.47"]}}
    assert fix.summary == "Raise --mem-fraction-static (or plan a larger TP) (set --mem-fraction-static 0.47)"
    # SGLang 0.5.23 names the minimum: above it
    lines = upto(K23, "Load weight end") + crash(TP2, KV_CONFIG_23, KV_WEIGHTS_NO_ROOM)
    assert fix_of(lines).plan_patch == {"set_flags": {"--mem-fraction-static": ["0.89"]}}
    # at the ceiling there is no step left
    at_max = [x.replace("'mem_fraction_static': 0.42", "'mem_fraction_static': 0.95") for x in upto(K23, "Load weight end")]
    fix = fix_of(at_max + crash(TP2, KV_CONFIG_23, STATE_TOO_SMALL))
    assert not fix.applicable and fix.summary == "Raise --mem-fraction-static (or lower --max-running-requests)"
    # a torch OOM while the pool is allocated: less than profiled was free, lower it
    assert fix_of(upto(D10, "Load weight end") + crash(TP4, KV_POOL, TORCH_OOM)).plan_patch == {
        "set_flags": {"--mem-fraction-static": ["0.8"]}}  # the log's server_args: 0.85
    # the pool ran dry while serving: half the running requests the scheduler logged (4096)
    lines = fixture(D10) + crash(TP4, RUNNING, "RuntimeError: " + DECODE_OOM)
    assert fix_of(lines).plan_patch == {"set_flags": {"--max-running-requests": ["2048"]}}
    # the pool is smaller than a context: the context to what it holds
    assert fix_of(before_ready(D23, [f"[{TS} TP0] " + POOL_BELOW_CONTEXT])).plan_patch == {
        "set_flags": {"--context-length": ["131072"]}}


def test_graph_oom_fix_halves_the_largest_graph_the_version_names():
    lines = upto(D10, "Capturing batches") + crash(TP4, GRAPHS, TORCH_OOM)
    assert fix_of(lines).plan_patch == {"set_flags": {"--cuda-graph-max-bs": ["256"]}}  # server_args said 512
    plan23 = plan_for("qwen3__Qwen3-8B", "Qwen/Qwen3-8B", "0.5.23", gpus=2)
    assert fix_of(lines, plan23).plan_patch == {"set_flags": {"--cuda-graph-max-bs-decode": ["256"]}}
    # nothing says the batch sizes (--log-level warning): give the graphs memory instead
    plan10 = plan_for("qwen3__Qwen3-8B", "Qwen/Qwen3-8B", "0.5.10", gpus=2)
    graph_only = fixture("crash-graph-oom-traceback-only-0.5.10.log")
    assert not fix_of(graph_only).applicable
    fix = fix_of(graph_only, plan10)
    assert fix.plan_patch == {"set_flags": {"--mem-fraction-static": ["0.75"]}}
    new, diff = apply_patch(plan10, fix.plan_patch)
    assert diff == [("-", "--mem-fraction-static 0.8"), ("+", "--mem-fraction-static 0.75")]


def test_port_nccl_and_watchdog_fixes():
    lines = upto(D10, "Application startup complete") + [UVICORN_IN_USE]
    assert fix_of(lines).plan_patch == {"port": 30001}  # the server's port, from server_args
    plan = plan_for("qwen3__Qwen3-8B", "Qwen/Qwen3-8B", "0.5.10", gpus=2)
    new, diff = apply_patch(plan, fix_of(lines, plan).plan_patch)
    assert new["port"] == 30001 and diff == [("-", "--port 30000"), ("+", "--port 30001")]
    # a port that is not the server's (torch's rendezvous store) is not the plan's to move
    assert not fix_of(upto(D10, "Init torch distributed begin") + crash(TP4, DIST[:-4], ADDR_IN_USE_C10D)).applicable
    # NCCL errors: see NCCL's reason first; with NCCL's INFO lines already there, nothing to add
    lines = upto(D10, "sglang is using nccl") + crash(TP4, DIST, NCCL_USAGE)
    assert fix_of(lines).plan_patch == {"set_env": {"NCCL_DEBUG": "INFO"}}
    assert fix_of(lines[:-3] + nccl_init_lines(2) + lines[-3:]).plan_patch is None
    with_debug, _ = apply_patch(plan, {"set_env": {"NCCL_DEBUG": "INFO"}})
    assert not fix_of(lines, with_debug).applicable
    # InfiniBand on one host: keep NCCL off it; P2P: the experiment without it
    assert fix_of(upto(D10, "sglang is using nccl") + [NCCL_IBV] + crash(TP4, DIST, NCCL_SYSTEM)).plan_patch == {
        "set_env": {"NCCL_IB_DISABLE": "1"}}
    assert fix_of(upto(D10, "sglang is using nccl") + [NCCL_PEER]).plan_patch == {"set_env": {"NCCL_P2P_DISABLE": "1"}}
    # the watchdog: SGLang's Qwen3.5 doc recommends 1200 s
    assert fix_of(fixture(D10) + [f"[{TS} TP0 EP0] " + WATCHDOG]).plan_patch == {
        "set_flags": {"--watchdog-timeout": ["1200"]}}
    # unknown causes come with no patch
    for rule in ("weights-missing", "crash", "warmup-failed", "leftover-memory"):
        case = next(c for c in CASES if c.rule == rule)
        assert not fix_of(case.log(), rule=rule).applicable


def test_silence_fixes():
    # the operator's hang: no NCCL lines yet, so first see where NCCL waits
    lines = fixture("incomplete-dist-init-0.5.10.log")
    [f] = findings_for_log(lines)
    assert f.fix.plan_patch == {"set_env": {"NCCL_DEBUG": "INFO", "NCCL_DEBUG_SUBSYS": "INIT,P2P"}}  # the stall's
    assert f.evidence[0].source == "log:5" and f.evidence[0].line == lines[4]
    assert f.evidence[-1].reading == "the log ends at line 5, 0 line(s) later"
    # with NCCL's INFO lines there and Init START pending: the P2P experiment, the pending ranks as evidence
    [f] = findings_for_log(lines + nccl_init_lines(4, complete=1))
    assert f.code == "nccl-init-stall" and f.fix.plan_patch == {"set_env": {"NCCL_P2P_DISABLE": "1"}}
    assert [e.line.endswith("rank %d nranks 4 cudaDev %d nvmlDev %d busId %d8000 commId 0x8f2c11d07a3b4e21 - Init START"
                            % (r, r, r, r + 1)) for r, e in zip((1, 2, 3), f.evidence[1:4])] == [True] * 3
    # every rank completed: the rendezvous is over, so no pending NCCL init is reported
    assert [x.data["rule"] for x in findings_for_log(
        upto("sglang-0.5.10-hybrid-mtp-tp4.log", r"TP3\] Init torch distributed begin") + nccl_init_lines(4, 4)
    )] == []
    # graph capture silent: the custom all-reduce experiment, under the name the plan's version has
    plan = plan_for("qwen3__Qwen3-8B", "Qwen/Qwen3-8B", "0.5.23", gpus=2)
    fix = fix_of(upto(D10, "Capturing batches"), plan)
    assert fix.plan_patch == {"set_flags": {"--disable-custom-all-reduce": []}}
    # a log cut after the capture ended says nothing
    assert findings_for_log(upto(D10, "Capture cuda graph end")) == []


def test_unknown_flags_are_dropped_or_renamed(tmp_path):
    """argparse's own errors, as the simulated host's launch_server prints them."""
    host = setup_simhost(tmp_path / "sim", gpus=1, engine_version="0.5.23", pace=0.02)
    res = subprocess.run([str(host.python), "-m", "sglang.launch_server", "--model-path", "m",
                          "--mamba-scheduler-strategy", "extra_buffer", "--bogus-flag", "3"],
                         capture_output=True, text=True, timeout=30)
    assert res.returncode == 2
    lines = res.stderr.splitlines()
    [f] = findings_for_log(lines)
    assert f.code == "server-args-invalid" and f.evidence[0].line == lines[-1]
    assert f.fix.plan_patch == {"remove_flags": ["--bogus-flag", "--mamba-scheduler-strategy"]}
    # a 0.5.23 plan still carrying the old mamba name: renamed, with its value
    plan = plan_for(*QWEN122, "0.5.23")
    plan["argv"] = [("--mamba-scheduler-strategy" if a == "--mamba-radix-cache-strategy" else a) for a in plan["argv"]]
    patch = fix_of(lines, plan).plan_patch
    assert patch == {"remove_flags": ["--bogus-flag", "--mamba-scheduler-strategy"],
                     "set_flags": {"--mamba-radix-cache-strategy": ["extra_buffer"]}}
    # argparse's invalid choice (0.5.10)
    host = setup_simhost(tmp_path / "sim10", gpus=1, engine_version="0.5.10", pace=0.02)
    res = subprocess.run([str(host.python), "-m", "sglang.launch_server", "--model-path", "m",
                          "--mamba-scheduler-strategy", "x"], capture_output=True, text=True, timeout=30)
    [f] = findings_for_log(res.stderr.splitlines())
    assert f.data["rule"] == "argparse-invalid" and f.summary == (
        "SGLang refused --mamba-scheduler-strategy: invalid choice: 'x' (choose from 'auto', 'no_buffer', "
        "'extra_buffer').")


# ------------------------------------------------------------------ the simulated host's failures


def sim_plan(folder: Path, version: str, gpus: int, **wishes) -> dict:
    facts = facts_from_config(json.loads((folder / "config.json").read_text()), id=str(folder), source="local")
    return build_plan(facts, offline_target(gpus, 140.4), Wishes(tp=gpus, engine_version=version, port=free_port(),
                                                                 **wishes)).to_json()


def serve(host, plan: dict) -> Server:
    return Server(host, *plan["argv"], env=plan["env"])


def test_sim_spec_config_crash_ends_with_the_fix_that_makes_it_start(tmp_path, models):
    """The motivating crash on the simulated host: a 0.5.10 plan without the two flags crashes;
    triage names spec-config-invalid with a fix; the fixed plan starts."""
    host = setup_simhost(tmp_path / "sim", gpus=4, engine_version="0.5.10", scenario="spec-config-crash", pace=0.02)
    good = sim_plan(models["qwen35"], "0.5.10", 4)
    broken = without(good, "--mamba-scheduler-strategy", env=("SGLANG_ENABLE_SPEC_V2",))
    srv = serve(host, broken)
    assert srv.wait(30) == 1
    [f] = findings_for_log(srv.text, broken)
    assert (f.code, f.severity) == ("spec-config-invalid", "error")
    assert f.evidence[0].line == SPEC_NO_BUFFER and f.evidence[0].source == f"log:{len(srv.text)}"
    assert f.fix.applicable and f.fix.plan_patch == {"set_flags": {"--mamba-scheduler-strategy": ["extra_buffer"]},
                                                     "set_env": {"SGLANG_ENABLE_SPEC_V2": "1"}}
    fixed, diff = apply_patch(broken, f.fix.plan_patch, why=f.summary)
    assert diff == [("+", "--mamba-scheduler-strategy extra_buffer"), ("+", "SGLANG_ENABLE_SPEC_V2=1")]
    assert "--mamba-scheduler-strategy extra_buffer" in fixed["unit"]["text"]
    srv = serve(host, fixed)
    try:
        srv.wait_for("fired up", timeout=60)
    finally:
        srv.stop()
    assert findings_for_log(srv.text, fixed) == []


def test_sim_kv_cache_oom(tmp_path, models):
    host = setup_simhost(tmp_path / "sim", gpus=2, engine_version="0.5.10", scenario="kv-cache-oom", pace=0.02)
    plan = sim_plan(models["qwen3"], "0.5.10", 2)
    srv = serve(host, plan)
    srv.wait(30)
    doc_findings = findings_for_log(srv.text, plan)
    assert [(f.code, f.severity) for f in doc_findings] == [("kv-cache-oom", "error")]
    f = doc_findings[0]
    assert f.evidence[0].line == KV_NOT_ENOUGH + " Current value: mem_fraction_static=0.8"
    assert f.fix.plan_patch == {"set_flags": {"--mem-fraction-static": ["0.85"]}}
    new, diff = apply_patch(plan, f.fix.plan_patch)
    assert diff == [("-", "--mem-fraction-static 0.8"), ("+", "--mem-fraction-static 0.85")]
    assert dict(split_flags(new["argv"]))["--mem-fraction-static"] == ("0.85",)


def test_sim_hang_at_dist_init_cut_while_hanging(tmp_path, models):
    host = setup_simhost(tmp_path / "sim", gpus=2, engine_version="0.5.10", scenario="hang-at-dist-init", pace=0.02)
    plan = sim_plan(models["qwen3"], "0.5.10", 2)
    plan["env"]["NCCL_DEBUG"] = "INFO"  # NCCL's INFO lines (its Init START) come only with it, as from NCCL
    srv = serve(host, plan)
    try:
        srv.wait_for(r"rank 1 nranks 2 .* - Init START$")
        assert srv.proc.poll() is None  # still hanging when the log is read
        lines = srv.text
    finally:
        srv.stop()
    [f] = findings_for_log(lines, plan)
    assert (f.code, f.severity) == ("nccl-init-stall", "warning")
    assert f.evidence[0].line.endswith("] sglang is using nccl==2.27.5")
    assert [e.line.endswith("- Init START") for e in f.evidence[1:3]] == [True, True]
    # NCCL's INFO lines are already in the log: the next experiment is the one without P2P
    assert f.fix.plan_patch == {"set_env": {"NCCL_P2P_DISABLE": "1"}}
    new, diff = apply_patch(plan, f.fix.plan_patch)
    assert diff == [("+", "NCCL_P2P_DISABLE=1")] and new["env"]["NCCL_P2P_DISABLE"] == "1"


def test_sim_weights_that_do_not_fit(tmp_path, models):
    host = setup_simhost(tmp_path / "sim", gpus=1, engine_version="0.5.10", pace=0.02)
    srv = Server(host, "--model-path", models["qwen35"])  # 245 GB on one 140 GiB GPU
    srv.wait(30)
    [f] = findings_for_log(srv.text)
    assert (f.code, f.data["rule"]) == ("cuda-oom", "oom-loading-weights") and not f.fix.applicable
    assert f.evidence[0].line.startswith("torch.OutOfMemoryError: CUDA out of memory. Tried to allocate ")


# ------------------------------------------------------------------ the scanner itself


def test_a_journal_with_restarts_reports_the_last_start_with_absolute_line_numbers():
    first = fixture("crash-spec-config-0.5.10.log")
    second = fixture(K23)
    found = findings_for_log(first + second)
    assert [f.code for f in found] == ["kv-cache-oom"]
    n = int(found[0].evidence[0].source.removeprefix("log:"))
    assert (first + second)[n - 1] == found[0].evidence[0].line


def test_live_scanner_next_to_a_tracker():
    lines = fixture("crash-nccl-dist-init-0.5.10.log")
    tracker, scanner = PhaseTracker(), LogScanner()
    seen = []
    for i, raw in enumerate(lines):
        tracker.feed(raw)
        scanner.feed(raw, tracker)
        if i == 19:  # the NCCL WARN line has arrived, no crash yet
            seen = scanner.findings(tracker)
    assert [(f.code, f.severity) for f in seen] == [("shm-too-small", "error"), ("nccl-init-stall", "warning")]
    tracker.finish()
    assert [f.code for f in scanner.findings(tracker)] == ["shm-too-small"]


def long_serving_log(copies: int = 200, serving: int = 40_000) -> list[str]:
    """A real start with its 20 KB server_args line repeated, then a day of serving: batch, access and
    NCCL lines (tests/perf/rules_scan.py measures the scanner's cost on it)."""
    start = fixture(D10)
    running = []
    for i in range(serving):
        running += [f"[2026-07-14 10:00:{i % 60:02d} TP0 EP0] Decode batch, #running-req: {i % 97}, #token: 7{i:05d}, "
                    "token usage: 0.01, cuda graph: True, gen throughput (token/s): 812.55, #queue-req: 0",
                    f"[2026-07-14 10:00:{i % 60:02d} TP0 EP0] Prefill batch, #new-seq: 1, #new-token: 2048, "
                    "#cached-token: 512, token usage: 0.05, #running-req: 3, #queue-req: 0",
                    f'INFO:     10.0.0.7:{i % 60000} - "POST /v1/chat/completions HTTP/1.1" 200 OK',
                    f"gpu1:4101:4188 [0] NCCL INFO Channel {i % 24:02d}/24 : 0[0] -> 1[1] via P2P/CUMEM/read",
                    f"[2026-07-14 10:00:{i % 60:02d}] Cache flushed successfully!"]
    return [start[0]] * copies + start + running


def test_a_long_serving_log_raises_nothing_and_stays_ready():
    """200 copies of the 20 KB server_args line, a real start, then 200,000 serving lines: no finding,
    the outcome ready, every line seen. (Its cost beside the tracker's is measured, not asserted, by
    tests/perf/rules_scan.py.)"""
    lines = long_serving_log()
    scanner = LogScanner()
    tracker = track_log(lines, scanner.feed)
    assert scanner.findings(tracker) == [] and tracker.outcome == "ready" and scanner.line_no == len(lines)
