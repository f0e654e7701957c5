"""What the demo's small simulated server says: SGLang's start-up lines in order, the text of the
crash it can show, the lines of its HTTP server and the metrics it exports. Data only (the engine
owns its words); ``gpuops.sim`` writes it next to the small server on a simulated host, which
replays it (``demo_script``). The texts are those of the newest release gpuops has data for
(0.5.23): the phase grammar (``phases.py``) reads them like a real start.

A step is ``(phase, real seconds before it, lines)``; a line is ``(where, text)``: ``main`` (a logged
line of the main process), ``rank`` (one logged line per rank, with its `` TPn`` prefix), ``rank0`` (TP
rank 0 only), ``out``/``err`` (bare, on stdout/stderr). Texts are ``str.format`` templates over the
server's figures (``{avail}``, ``{weights_gb}``, ``{port}``, …)."""

from __future__ import annotations

from typing import Any

from ..base import Engine

__all__ = ["demo_script"]

Line = tuple[str, str]
Step = tuple[str, float, tuple[Line, ...]]

_PKG = "{package_dir}/srt"

STARTUP: tuple[Step, ...] = (
    ("args", 0.0, (
        ("err", "{package_dir}/launch_server.py:71: UserWarning: 'python -m sglang.launch_server' is still "
                "supported, but 'sglang serve' is the recommended entrypoint.\n  Example: sglang serve "
                "--model-path <model> [options]\n  warnings.warn("),
        ("main", "server_args={server_args}"),
    )),
    ("dist-init", 25.0, (("rank", "Init parallel begin."), ("rank0", "sglang is using nccl==2.27.5"))),
    ("dist-init-end", 3.0, (
        ("rank", "Init parallel ends. elapsed={dist_s:.2f} s"),
        ("rank", "Memory baseline taken. mem usage=0.00 GB"),
    )),
    ("weights", 2.0, (
        ("rank", "Load weight begin. avail mem={avail:.2f} GB"),
        ("out", "Loading safetensors checkpoint shards:   0% Completed | 0/{shards} [00:00<?, ?it/s]"),
    )),
    ("weights-end", 60.0, (
        ("out", "Loading safetensors checkpoint shards: 100% Completed | {shards}/{shards} [{load_t}<00:00, "
                "{shard_rate:.2f}it/s]"),
        ("rank", "Load weight end. elapsed={load_s:.2f} s, type={arch}, avail mem={avail:.2f} GB, "
                 "mem usage={weights_gb:.2f} GB."),
    )),
    ("kv-cache", 2.0, (
        ("rank", "KV Cache is allocated. dtype: torch.bfloat16, #tokens: {kv_tokens}, K size: {kv_half_gb:.2f} GB, "
                 "V size: {kv_half_gb:.2f} GB"),
        ("rank", "Memory pool end. avail mem={avail:.2f} GB"),
    )),
    ("cuda-graph", 1.0, (
        ("rank", "Capture target decode CUDA graph begin. backend=full, num_tokens_per_req=1, "
                 "avail mem={avail:.2f} GB"),
    )),
    ("cuda-graph-end", 20.0, (
        ("rank", "Capture target decode CUDA graph end. bs=[1, 2, 4, 8], elapsed={graph_s:.2f} s, "
                 "mem usage={graph_gb:.2f} GB. avail mem={avail:.2f} GB."),
        ("rank0", "max_total_num_tokens={kv_tokens}, chunked_prefill_size=8192, max_prefill_tokens=16384, "
                  "max_running_requests=4096, context_len={context}, available_gpu_mem={avail:.2f} GB"),
    )),
    ("http", 5.0, (
        ("out", "INFO:     Started server process [{pid}]"),
        ("out", "INFO:     Waiting for application startup."),
        ("out", "INFO:     Application startup complete."),
        ("out", "INFO:     Uvicorn running on http://{host}:{port} (Press CTRL+C to quit)"),
    )),
    ("warmup", 0.5, (
        ("out", 'INFO:     127.0.0.1:{client_port} - "GET /model_info HTTP/1.1" 200 OK'),
        ("rank0", "Prefill batch, #new-seq: 1, #new-token: 6, #cached-token: 0, token usage: 0.00, "
                  "#running-req: 0, #queue-req: 0, #pending-token: 0, cuda graph: False, "
                  "input throughput (token/s): 10.62"),
        ("out", 'INFO:     127.0.0.1:{client_port} - "POST /generate HTTP/1.1" 200 OK'),
        ("main", "The server is fired up and ready to roll!"),
    )),
)

# Where the KV cache does not fit (kv-cache-oom): each rank's scheduler traceback, then the main
# process's sigquit lines; the process tree is killed (SIGKILL) after them.
_KV_FRAMES = (
    ("managers/scheduler.py", 6362, "run_scheduler_process", "scheduler = Scheduler(server_args, port_args)"),
    ("managers/scheduler.py", 568, "__init__", "self.init_model_worker()"),
    ("managers/scheduler.py", 1137, "init_model_worker", "self.init_memory_pools()"),
    ("managers/scheduler.py", 1100, "init_memory_pools", "self.init_target_memory_pool()"),
    ("managers/scheduler.py", 1090, "init_target_memory_pool", "self.tp_worker.alloc_memory_pool("),
    ("managers/tp_worker.py", 409, "alloc_memory_pool", "self.model_runner.alloc_memory_pool("),
    ("model_executor/model_runner.py", 982, "alloc_memory_pool", "result = self.kv_cache_configurator.configure("),
    ("model_executor/pool_configurator.py", 647, "calculate_pool_sizes",
     "return MemoryPoolConfig(max_total_num_tokens=max_total_num_tokens)"),
    ("model_executor/pool_configurator.py", 99, "__post_init__", "raise RuntimeError(msg)"),
)
KV_CRASH: tuple[Line, ...] = (
    ("rank", "Scheduler hit an exception: Traceback (most recent call last):\n"
             + "".join('  File "%s/%s", line %d, in %s\n    %s\n' % (_PKG, f, n, fn, src) for f, n, fn, src in _KV_FRAMES)
             + "RuntimeError: Not enough memory. Please try to increase --mem-fraction-static.\n"),
    ("main", "Received sigquit from a child process. It usually means the child failed."),
    ("main", "kill_process_tree called: parent_pid={pid}, include_parent=True, pid={pid}"),
)
# SIGTERM while serving: uvicorn's shutdown.
SHUTDOWN: tuple[Line, ...] = (
    ("out", "INFO:     Shutting down"),
    ("out", "INFO:     Waiting for application shutdown."),
    ("out", "INFO:     Application shutdown complete."),
    ("out", "INFO:     Finished server process [{pid}]"),
)


def demo_script(engine: Engine) -> dict[str, Any]:
    """The small server's script as JSON-ready data: start-up steps, the KV crash, the ready line's
    phase, and the metric names the dashboard reads (`engine`'s: SGLang's adapter)."""
    return {
        "engine": engine.name,
        "startup": [{"phase": p, "before_s": s, "lines": [list(x) for x in lines]} for p, s, lines in STARTUP],
        "kv_crash": [list(x) for x in KV_CRASH],
        "shutdown": [list(x) for x in SHUTDOWN],
        "metrics": dict(engine.metrics),
        "module": engine.server_module(),
    }
