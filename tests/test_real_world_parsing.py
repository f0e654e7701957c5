"""The log parser and the finding rules on log lines people posted publicly (issue "Meet the real
world", part 3): the wrappers other programs put around SGLang's lines, tracebacks as they get
pasted, SGLang's own endings, the causes the rules missed, old wordings.

Every line below is quoted verbatim from the thread named in the comment above it (GitHub issue
threads; where a thread holds only one line of a crash, the lines around it are SGLang's own real
lines from the same thread or its neighbours, said so at the case). The cases assert what
``gpuops triage`` reports: outcome, phase and finding codes.
"""

from __future__ import annotations

from gpuops.core.engines.sglang.phases import clean, track_log
from gpuops.core.diagnose.triage import triage_log


def triage(lines: list[str]) -> tuple[str, str | None, list[str]]:
    r = triage_log(lines)
    return r.outcome, r.phase, [f.code for f in r.findings]


# ---------------------------------------------------------------------------------------------
# Wrappers
# ---------------------------------------------------------------------------------------------

# https://github.com/ai-dynamo/dynamo/issues/4121 (dynamo's Rust tracing relays SGLang's records)
DYNAMO = [
    "2025-11-05T01:56:54.281615Z  INFO model_runner.init_device_graphs: Capture cuda graph end. Time elapsed: 12.80 s."
    " mem usage=4.69 GB. avail mem=20.31 GB.   ",
    "2025-11-05T01:56:54.286620Z  INFO scheduler.__init__: max_total_num_tokens=9415616, chunked_prefill_size=8192, "
    "max_prefill_tokens=16384, max_running_requests=4096, context_len=163840, available_gpu_mem=20.31 GB   ",
    "2025-11-05T01:56:54.290150Z  INFO kv_events.__init__: Starting ZMQ publisher thread   ",
]


def test_rust_tracing_prefix():
    assert clean(DYNAMO[0]).text.startswith("Capture cuda graph end. Time elapsed: 12.80 s.")
    tr = track_log(DYNAMO)
    assert tr.phase == "cuda_graph" and tr.numbers["max_total_num_tokens"] == 9415616
    assert triage(DYNAMO) == ("incomplete", "cuda_graph", [])


# https://github.com/allenai/olmocr/issues/105 (olmOCR relays the server's output through Python logging)
OLMOCR = [
    "2025-03-07 23:50:27,532 - __main__ - INFO - [2025-03-07 23:50:27 TP0] Init torch distributed begin.",
    "2025-03-07 23:50:27,532 - __main__ - WARNING - Attempt 13: Please wait for sglang server to become ready...",
    "2025-03-07 23:50:27,727 - __main__ - INFO - [2025-03-07 23:50:27 TP0] Load weight begin. avail mem=22.46 GB",
]


def test_python_logging_prefix():
    ln = clean(OLMOCR[2])
    assert (ln.text, ln.ts, ln.ranks) == ("Load weight begin. avail mem=22.46 GB", "2025-03-07 23:50:27", {"TP": 0})
    tr = track_log(OLMOCR)
    assert [e.phase for e in tr.phase_events] == ["starting", "dist_init", "weights"]
    assert tr.numbers["load_begin_avail_mem_gb"] == 22.46


# https://github.com/sgl-project/sglang/issues/543 (0.1.x logging: "ts | LEVEL | logger | ")
def test_old_logging_format_and_serving_frames():
    lines = [
        "2024-06-14 08:36:05 | ERROR | srt.tp_worker | Exception in ModelTpServer:",
        "Traceback (most recent call last):",
        '  File "/sglang/python/sglang/srt/managers/controller/tp_worker.py", line 443, in forward_fill_batch',
        "    ) = self.model_runner.forward(batch, ForwardMode.EXTEND)",
    ]
    assert clean(lines[0]).text == "Exception in ModelTpServer:"
    assert triage(lines) == ("crashed", "ready", ["server-crashed"])


# https://github.com/sgl-project/sglang/issues/3065 (mpirun --tag-output --timestamp-output)
def test_mpirun_tags():
    ln = clean("Thu Jan 23 11:55:50 2025[1,1]<stderr>:    scheduler.event_loop_overlap()")
    assert ln.text == "    scheduler.event_loop_overlap()"
    ln = clean('Thu Jan 23 11:55:50 2025[1,1]<stderr>:  File "/usr/local/lib/python3.10/dist-packages/torch/utils/'
               '_contextlib.py", line 116, in decorate_context')
    assert ln.text.startswith('  File "/usr/local/lib/python3.10/dist-packages/torch/utils/_contextlib.py"')


# https://github.com/verl-project/verl/issues/1691 (Ray's worker prefix, pasted as a Markdown quote)
def test_ray_prefix_in_a_markdown_quote():
    ln = clean("> (WorkerDict pid=1216, ip=train-1328222047368962304-a3a7fgd5t0jk-worker-0) [2025-05-26 15:54:41 TP1] "
               "Scheduler hit an exception: Traceback (most recent call last):")
    assert (ln.text, ln.ts, ln.ranks) == ("Scheduler hit an exception: Traceback (most recent call last):",
                                          "2025-05-26 15:54:41", {"TP": 1})


# https://github.com/sgl-project/sglang/pull/12031 (a log collector's bracketed timestamp, a quote)
def test_bracketed_iso_timestamp_and_a_weight_loader_error():
    lines = [
        '> [2025-11-06T02:10:00.702Z]   File "/sgl-workspace/sglang/python/sglang/srt/models/deepseek_vl2.py", '
        "line 252, in load_weights",
        "> ",
        "> [2025-11-06T02:10:00.702Z]     param = params_dict[name]",
        "> ",
        "> [2025-11-06T02:10:00.702Z] KeyError: 'lm_head.weight'",
        "> ",
        "> [2025-11-06T02:10:00.703Z] [2025-11-06 02:10:00] Received sigquit from a child process. It usually means "
        "the child failed.",
    ]
    assert clean(lines[4]).text == "KeyError: 'lm_head.weight'"
    assert triage(lines) == ("crashed", "weights", ["weight-load-error"])


def test_tqdm_carriage_returns_joined_to_log_lines():
    # https://github.com/sgl-project/sglang/issues/4895: the bar's last state and the line after it,
    # joined by the bar's carriage return as a file read with newline="" keeps them
    raw = ("Loading safetensors checkpoint shards: 100% Completed | 4/4 [05:42<00:00, 85.53s/it]\r"
           "[2025-03-29 18:18:34 TP0] Load weight end. type=Gemma3ForConditionalGeneration, dtype=torch.bfloat16, "
           "avail mem=3.64 GB, mem usage=18.82 GB.")
    ln = clean(raw)
    assert ln.text.startswith("Load weight end.") and ln.ts == "2025-03-29 18:18:34"
    assert [e.text for e in ln.extra] == ["Loading safetensors checkpoint shards: 100% Completed | 4/4 "
                                          "[05:42<00:00, 85.53s/it]"]
    # https://github.com/sgl-project/sglang/pull/15426: a log line, then the bar that began after it
    raw = ("[2025-12-23 14:18:01] Load weight begin. avail mem=46.81 GB\r"
           "Loading safetensors checkpoint shards:  25% Completed | 1/4 [00:00<00:01,  2.32it/s]")
    tr = track_log([raw])
    assert tr.phase == "weights" and tr.numbers["load_begin_avail_mem_gb"] == 46.81
    assert (tr.progress["weights"].done, tr.progress["weights"].total) == (1, 4)


# ---------------------------------------------------------------------------------------------
# Tracebacks as people paste them
# ---------------------------------------------------------------------------------------------


def test_traceback_cut_before_its_header():
    # https://github.com/sgl-project/sglang/issues/1274
    lines = [
        '  File "/data/redacted/py_env/sglang/lib/python3.10/site-packages/sglang/srt/layers/logits_processor.py", '
        "line 268, in forward",
        '    torch.cat([pruned_input_ids[1:], torch.tensor([0], device="cuda")]),',
        "RuntimeError: CUDA error: device-side assert triggered",
        "CUDA kernel errors might be asynchronously reported at some other API call, so the stacktrace below might "
        "be incorrect.",
    ]
    out, phase, codes = triage(lines)
    assert out == "crashed" and codes == ["cuda-error"]


def test_traceback_with_its_indentation_lost():
    # https://github.com/sgl-project/sglang/issues/8974 (kubectl's copy lost every leading space and the header)
    lines = [
        'File "/sgl-workspace/sglang/python/sglang/srt/model_executor/model_runner.py", line 235, in __init__',
        "min_per_gpu_memory = self.init_torch_distributed()",
        'File "/sgl-workspace/sglang/python/sglang/srt/model_executor/model_runner.py", line 559, in '
        "init_torch_distributed",
        "initialize_model_parallel(",
        'File "/sgl-workspace/sglang/python/sglang/srt/distributed/device_communicators/pynccl_wrapper.py", line 350, '
        "in NCCL_CHECK",
        'raise RuntimeError(f"NCCL error: {error_str}")',
        "RuntimeError: NCCL error: unhandled system error (run with NCCL_DEBUG=INFO for details)",
    ]
    tr = track_log(lines)
    assert tr.crash is not None and tr.crash.summary == lines[-1]
    assert [f[2] for f in tr._crash_tb.parts[0].frames] == ["__init__", "init_torch_distributed", "NCCL_CHECK"]
    assert triage(lines) == ("crashed", "dist_init", ["nccl-error"])


def test_scheduler_exception_with_its_traceback_on_one_line():
    # https://github.com/sgl-project/sglang/issues/4503, the newlines lost (as a log viewer copies it)
    line = ('[2025-03-17 17:15:55 TP1] Scheduler hit an exception: Traceback (most recent call last):   File '
            '"/sgl-workspace/sglang/python/sglang/srt/managers/scheduler.py", line 1748, in run_scheduler_process     '
            'scheduler = Scheduler(server_args, port_args, gpu_id, tp_rank, dp_rank)   File '
            '"/sgl-workspace/sglang/python/sglang/srt/model_executor/model_runner.py", line 417, in load_model     '
            'raise ValueError( ValueError: TP rank 1 could finish the model loading, but there are other ranks th')
    tr = track_log([line])
    assert tr.crash is not None and tr.crash.summary.startswith("ValueError: TP rank 1 could finish the model loading")
    assert triage([line])[:2] == ("crashed", "weights")


def test_log_ending_inside_a_cuda_graph_capture_traceback():
    # https://github.com/sgl-project/sglang/issues/1751 (0.3.x): the capture's frames, the paste cut inside them
    lines = [
        "[2024-10-22 06:31:49 TP0] Memory pool end. avail mem=8.38 GB",
        "[2024-10-22 06:31:49 TP0] Traceback (most recent call last):",
        '  File "/home/ubuntu/.local/lib/python3.10/site-packages/sglang/srt/model_executor/cuda_graph_runner.py", '
        "line 162, in __init__",
        "    self.capture()",
    ]
    assert triage(lines) == ("crashed", "cuda_graph", ["server-crashed"])
    tr = track_log(lines)
    assert tr.crash.inferred_from == "traceback" and tr.crash.summary == "(the log ends inside this traceback)"


# ---------------------------------------------------------------------------------------------
# SGLang's own endings
# ---------------------------------------------------------------------------------------------


def test_old_watchdog_sigquit_killed_is_a_crash_while_serving():
    # https://github.com/sgl-project/sglang/issues/3752 (0.4.x: "Watchdog timeout", "child proces.")
    lines = [
        "[2025-03-09 00:57:16 TP3] Watchdog timeout (self.watchdog_timeout=300)",
        "[2025-03-09 00:57:16 TP0] Watchdog timeout (self.watchdog_timeout=300)",
        "[2025-03-09 00:57:20] Received sigquit from a child proces. It usually means the child failed.",
        "Killed",
    ]
    assert triage(lines) == ("crashed", "ready", ["watchdog-timeout"])
    assert triage(lines[2:]) == ("crashed", "starting", ["server-crashed"])
    assert triage(lines[3:])[0] == "crashed"


def test_scheduler_is_dead_and_exit_code():
    # https://github.com/sgl-project/sglang/issues/15235 (the diffusion runtime's "[MM-DD HH:MM:SS]")
    lines = [
        "[12-16 14:27:08] Rank 0 scheduler is dead. Please check if there are relevant logs.",
        "[12-16 14:27:10] Exit code: -9",
    ]
    assert clean(lines[1]).text == "Exit code: -9"
    assert triage(lines) == ("crashed", "starting", ["server-crashed"])
    # https://github.com/sgl-project/sglang/issues/23769: the capture's OOM (its traceback cut), then the ending
    lines = [
        "Exception: Capture cuda graph failed: CUDA out of memory.",
        "Tried to allocate 672.00 MiB.",
        "[2026-04-26 14:38:11] Rank 0 scheduler is dead. Please check if there are relevant logs.",
        "[2026-04-26 14:38:11] Exit code: -3",
    ]
    assert triage(lines) == ("crashed", "cuda_graph", ["cuda-graph-oom"])


def test_crash_after_the_server_served():
    # https://github.com/sgl-project/sglang/issues/14694
    lines = [
        "[2025-12-09 03:39:32 DP3 TP3] Prefill batch, #new-seq: 1, #new-token: 64, #cached-token: 0, token usage: "
        "0.10, #running-req: 0, #queue-req: 0,",
        "[2025-12-09 03:39:34 DP0 TP0] Decode batch, #running-req: 1, #token: 65664, token usage: 0.10, accept len: "
        "2.92, accept rate: 0.73, cuda graph: True, gen throughput (token/s): 5.76, #queue-req: 0,",
        "[2025-12-09 03:39:35 DP0 TP0] Scheduler hit an exception: Traceback (most recent call last):",
        '  File "/sgl-workspace/sglang/python/sglang/srt/managers/scheduler.py", line 2685, in run_scheduler_process',
        "    scheduler.event_loop_normal()",
    ]
    assert triage(lines) == ("crashed", "ready", ["server-crashed"])
    assert triage(lines[:2]) == ("ready", "ready", [])


def test_launch_failure_after_ready_is_a_cuda_error():
    # https://github.com/ormandj/sglang-glm53-flash-sm120/issues/11 (the paste elides frames with "...")
    lines = [
        "[2026-09-21 05:21:24 TP0] Prefill batch, #new-seq: 1, #new-token: 4096, #cached-token: 0,",
        "  full token usage: 0.66, mamba usage: 0.14, #queue-req: 1, #pending-token: 183287, ...",
        "[2026-09-21 05:21:24 TP0] Scheduler hit an exception: Traceback (most recent call last):",
        "  ...",
        '  File ".../sglang/srt/mem_cache/memory_pool.py", line 1463, in alloc',
        "    self.req_index_to_mamba_index_mapping[select_index] = mamba_index_tensor",
        "torch.AcceleratorError: CUDA error: unspecified launch failure",
        "Search for `cudaErrorLaunchFailure' in ...",
    ]
    assert triage(lines) == ("crashed", "ready", ["cuda-error"])
    # https://github.com/sgl-project/sglang/issues/15132: no startup line at all, the frames say it was serving
    lines = [
        "[2025-12-15 00:02:05 DP1 TP1] Scheduler hit an exception: Traceback (most recent call last):",
        '  File "/sgl-workspace/sglang/python/sglang/srt/managers/scheduler.py", line 2740, in run_scheduler_process',
        "    scheduler.event_loop_overlap()",
        '  File "/sgl-workspace/sglang/python/sglang/srt/managers/scheduler.py", line 1072, in event_loop_overlap',
        "    pop_and_process()",
    ]
    assert triage(lines) == ("crashed", "ready", ["server-crashed"])


# ---------------------------------------------------------------------------------------------
# Causes
# ---------------------------------------------------------------------------------------------


def test_negative_profiled_kv_budget():
    # https://github.com/sgl-project/sglang/issues/7691 (ROCm, 0.4.8)
    lines = [
        "[2025-07-02 07:41:58 DP0 TP0] Load weight end. type=DeepseekV3ForCausalLM, dtype=torch.bfloat16, avail "
        "mem=21.73 GB, mem usage=166.59 GB.",
        "[2025-07-02 07:41:59 DP0 TP0] max_total_tokens=131072 is larger than the profiled value -561981. Use the "
        "profiled value instead.",
    ]
    assert triage(lines) == ("incomplete", "kv_cache", ["kv-cache-oom"])
    assert triage(lines[:1] + [lines[1].replace("-561981", "561981")])[2] == []  # a positive budget is fine


def test_driver_api_symbol_missing_means_an_old_driver():
    # https://github.com/sgl-project/sglang/issues/8131
    lines = [
        "Traceback (most recent call last):",
        '  File "/opt/conda/lib/python3.10/site-packages/sgl_kernel/__init__.py", line 13, in <module>',
        "    from sgl_kernel import common_ops",
        "ImportError: /opt/conda/lib/python3.10/site-packages/sgl_kernel/common_ops.abi3.so: undefined symbol: "
        "cuGreenCtxStreamCreate",
    ]
    assert triage(lines) == ("crashed", "starting", ["cuda-driver-too-old"])
    # the TMA descriptor API (CUDA 12.0's driver) that FlashInfer/DeepGEMM kernels call
    tma = lines[:3] + [lines[3].replace("cuGreenCtxStreamCreate", "cuTensorMapEncodeTiled")]
    assert triage(tma)[2] == ["cuda-driver-too-old"]


def test_zmq_port_in_use():
    # https://github.com/jina-ai/clip-as-service/issues/84 (pyzmq's own lines)
    lines = [
        "Traceback (most recent call last):",
        '  File "zmq/backend/cython/socket.pyx", line 547, in zmq.backend.cython.socket.Socket.bind',
        '  File "zmq/backend/cython/checkrc.pxd", line 25, in zmq.backend.cython. checkrc._check_rc',
        "zmq.error.ZMQError: Address already in use",
    ]
    assert triage(lines) == ("crashed", "starting", ["port-in-use"])


def test_tcpstore_client_timeout_at_dist_init():
    # https://github.com/sgl-project/sglang/issues/2561 (SLURM, two nodes)
    lines = [
        "[W1226 15:44:31.548330712 TCPStore.cpp:358] [c10d] TCP client failed to connect/validate to host "
        "sws-8h100grid-05:8000 - retrying (try=0, timeout=600000ms, delay=77116ms): The client socket has timed out "
        "after 600000ms while trying to connect to (sws-8h100grid-05, 8000).",
        "Exception raised from throwTimeoutError at ../torch/csrc/distributed/c10d/socket.cpp:1013 (most recent call "
        "first):",
    ]
    r = triage_log(lines)
    assert (r.outcome, r.phase, [f.code for f in r.findings]) == ("incomplete", "dist_init", ["nccl-init-stall"])
    assert "sws-8h100grid-05:8000" in r.findings[0].summary


def test_device_side_assert_lines():
    # https://github.com/sgl-project/sglang/issues/271 (0.1.x ModelRpcServer)
    lines = [
        '../aten/src/ATen/native/cuda/IndexKernel.cu:92: operator(): block: [0,0,0], thread: [4,0,0] Assertion '
        '`-sizes[i] <= index && index < sizes[i] && "index out of bounds"` failed.',
        "Exception in ModelRpcClient:",
        "Traceback (most recent call last):",
        '  File "/usr/local/lib/python3.11/site-packages/sglang/srt/managers/router/model_rpc.py", line 196, in '
        "exposed_step",
        "    self.forward_step()",
    ]
    assert triage(lines) == ("crashed", "ready", ["cuda-error"])


# ---------------------------------------------------------------------------------------------
# Old and other wordings
# ---------------------------------------------------------------------------------------------


def test_old_rank_lines():
    # https://github.com/sgl-project/sglang/issues/99 (0.1.x: "Rank N: load weight begin.")
    lines = ["Rank 1: load weight begin.", "Rank 0: load weight begin.", "Rank 1: load weight end.",
             "router init state: Traceback (most recent call last):",
             '  File "/home/data2/likai/sglang/python/sglang/srt/managers/router/manager.py", line 68, in '
             "start_router_process",
             "    model_client = ModelRpcClient(server_args, port_args)"]
    assert (clean(lines[0]).text, clean(lines[0]).ranks) == ("load weight begin.", {"TP": 1})
    assert triage(lines) == ("crashed", "weights", ["server-crashed"])
