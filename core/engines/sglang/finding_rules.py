"""Finding rules as data: SGLang server log lines -> findings (code, severity, cause, evidence, fix).

Two tables. ``LINE_RULES``: a line that matches one of a rule's cheap ``needles`` (substrings) is
searched with the rule's ``pattern``; the match's named groups fill the rule's one-sentence
``summary``, and its ``patch`` function (when the fix is a plan change) builds the plan_patch
(:mod:`gpuops.core.diagnose.fixes`) from the plan, the log's ``server_args=`` line and the match.
``SILENCE_RULES``: what a log that ends inside a phase (outcome ``incomplete``) suggests; a file
cannot say how long it has been silent, so these are warnings.

Every wording below was read from its source (paths relative to ``sglang/``; 0.5.10 | 0.5.23):

- SGLang ServerArgs checks (``_handle_mamba_radix_cache`` and friends), 0.5.10 srt/server_args.py:
  :2150 extra_buffer not supported for the arch, :2159 FlashInfer GDN decode + no_buffer, :2168
  extra_buffer + --disable-radix-cache, :2175 extra_buffer needs CUDA/FLA, :2179/:2184
  mamba_track_interval, :2189 FLA_CHUNK_SIZE/page_size, :2207 speculative decoding + no_buffer
  (no space after "no_buffer."), :3012 and speculative/eagle_worker_v2.py:951 "Spec v2 currently
  only supports topk = 1"; argparse's own "unrecognized arguments" / "invalid choice".
- KV cache: model_runner_kv_cache_mixin.py:57 | model_executor/pool_configurator.py:96 "Not enough
  memory. Please try to increase --mem-fraction-static." (the profiled token budget is <= 0);
  0.5.23 mem_cache/kv_cache_configurator.py:3051 "Loaded weights leave no GPU memory for the KV
  cache", :3154/:3394 the hybrid state cache; managers/tp_worker.py:308 | :425 "Memory pool size
  is too small"; 0.5.23 tp_worker.py:560 "KV pool holds %d tokens, fewer than --context-length";
  mem_cache/common.py:285/:411 | mem_cache/allocation.py:239/:613 "Prefill/Decode out of memory".
- CUDA graphs: model_executor/cuda_graph_runner.py:656 | runner/decode_cuda_graph_runner.py:603
  "Capture cuda graph failed: {e}" (and the draft runners).
- torch: c10/cuda/CUDACachingAllocator.cpp "CUDA out of memory. Tried to allocate X. GPU N has a
  total capacity of Y of which Z is free." (torch.OutOfMemoryError; torch.cuda.OutOfMemoryError and
  RuntimeError in older releases), C10_CUDA_CHECK's "CUDA error: out of memory"; "The NVIDIA driver
  on your system is too old (found version N)"; c10d's "The server socket has failed to listen on
  any local network address" and DistStoreError "Timed out after N seconds waiting for clients".
- CUDA runtime: cudaErrorMemoryAllocation, "CUDA driver version is insufficient for CUDA runtime
  version" (cudaErrorInsufficientDriver). NVML: "Failed to initialize NVML: Driver/library version
  mismatch", pynvml "RM has detected an NVML/RM version mismatch."; the kernel's "NVRM: API mismatch".
- NCCL (src/init.cc ncclGetErrorString, misc/socket.cc, misc/shmutils.cc, misc/ibvwrap.cc,
  transport/p2p.cc): "unhandled system error", "invalid usage", "internal error", "remote process
  exited or there was a network error", "socketPollConnect: connect ... returned Connection
  refused", "Error while creating shared memory segment /dev/shm/nccl-…", "failed to extend
  /dev/shm/…", "Call to ibv_… failed", "failed to peer with device"; the CUDA string "peer access is
  not supported between these two devices"; ``ncclCommInitRank… - Init START`` / ``Init COMPLETE``.
- uvicorn/asyncio: "[Errno 98] error while attempting to bind on address ('h', port): address
  already in use"; SGLang's utils/network.py:75 "{port_name} at {port} is not available in
  {timeout} seconds" and server_args.py:6630 "Port is already in use.".
- SGLang's other lines: model_executor/model_runner.py:1013 | distributed/bootstrap.py:445 "The
  memory capacity is unbalanced", distributed/device_communicators/custom_all_reduce_utils.py:466
  "... lacks GPU P2P capability or P2P test failed", model_loader/loader.py:469 "Cannot find any
  model weights", utils/watchdog.py:154 "{name} watchdog timeout (...)",
  entrypoints/http_server.py:1778 "Initialization failed. warmup error: ...".

Use: ``findings_for_log(lines, plan)`` for a finished log; live, feed a :class:`LogScanner`
next to the deployment's PhaseTracker (``scanner.feed(line, tracker)``) and ask
``scanner.findings(tracker, plan)`` when it matters. Speed: the running-state lines that make
up nearly all of a long log (``Decode batch``, uvicorn access lines, traceback frames) are
skipped by one ``startswith``; every other line costs a few substring tests (``_GATE``: keys every
needle holds one of) and only a line that holds a key is tested for each needle; patterns only run on
lines that hold a needle; ``server_args=`` is never scanned.
"""

from __future__ import annotations

import math
import re
from dataclasses import dataclass
from typing import Callable, Iterable

from . import versions as sv
from ...domain import SEVERITIES, Evidence, Finding, Fix, Severity
from ...diagnose.fixes import apply_patch, describe_patch
from .phases import Crash, JoinedLine, LogLine, PhaseTracker, clean, track_log
from ...diagnose.stall import nccl_init_fix
from ...domain import Plan, split_flags
from .flag_rules import MAMBA_FLAGS

__all__ = ["LineRule", "SilenceRule", "LINE_RULES", "SILENCE_RULES", "CODES", "LogScanner", "findings_for_log"]

# The stable vocabulary (docs/ARCHITECTURE.md), then the codes these rules added.
CODES: tuple[str, ...] = (
    "spec-config-invalid", "nccl-init-stall", "nccl-error", "driver-library-mismatch", "cuda-driver-too-old",
    "kv-cache-oom", "cuda-graph-oom", "cuda-oom", "weight-load-error", "port-in-use", "leftover-gpu-process",
    "shm-too-small", "p2p-unavailable", "download-stalled",
    "server-args-invalid", "kv-cache-small", "watchdog-timeout", "warmup-failed", "cuda-graph-stall",
    "server-crashed", "cuda-error", "python-module-missing",
)

_EVIDENCE_LINES = 4  # per finding: the first distinct matching lines
_HITS_KEPT = 32  # per rule; the rest are only counted
_SHORT = 500

PatchFn = Callable[["Ctx"], "dict | None"]


@dataclass(frozen=True)
class LineRule:
    """A finding that one log line shows. ``phases``: the crash phase (or, for a line outside
    the crash, the phase at that line) the rule applies to; None: any. ``covers``: codes or rule
    ids whose findings this one makes redundant (they are the symptom of this cause). ``fallback``:
    only lines from the crash on, and only when no other rule found an error (a generic reading
    of the crash's exception, better than none)."""

    id: str
    code: str
    severity: Severity
    needles: tuple[str, ...]
    pattern: re.Pattern[str]
    summary: str
    fix: str
    patch: PatchFn | None = None
    phases: tuple[str, ...] | None = None
    covers: tuple[str, ...] = ()
    fallback: bool = False


@dataclass(frozen=True)
class SilenceRule:
    """What a log that ends (outcome incomplete) in one of ``phases`` (None: any) suggests, when
    its last phase line matches ``last_line`` (None: any) and, with ``nccl_pending``, when an NCCL
    communicator logged ``Init START`` and never ``Init COMPLETE``."""

    id: str
    code: str
    phases: tuple[str, ...] | None
    last_line: re.Pattern[str] | None
    summary: str
    fix: str
    patch: PatchFn | None = None
    nccl_pending: bool = False
    severity: Severity = "warning"
    fix_of: "Callable[[Ctx], Fix] | None" = None  # the whole fix from the evidence (then ``fix`` and ``patch`` are unused)


# --------------------------------------------------------------------------------------------
# What a fix needs to know: the plan, the log's server_args, the match
# --------------------------------------------------------------------------------------------


class Ctx:
    """What a rule's patch function sees. ``value(flag)`` is the value the plan gives a flag,
    else the one the server logged in ``server_args=``; ``groups`` the match's named groups."""

    def __init__(self, plan: Plan | None, groups: dict[str, str], scan: "LogScanner", tracker: PhaseTracker | None):
        self.plan = plan
        self.groups = groups
        self.scan = scan
        self.tracker = tracker
        self.version: str | None = plan.engine_version if plan is not None else None
        self.plan_flags = dict(split_flags(plan.argv if plan is not None else []))

    def flags(self) -> frozenset[str] | None:
        return sv.flags_for(self.version) if self.version else None

    def value(self, flag: str) -> str | None:
        if flag in self.plan_flags:
            vals = self.plan_flags[flag]
            return vals[0] if vals else ""
        return self.scan.server_arg(flag[2:].replace("-", "_"))

    def number(self, flag: str) -> float | None:
        return _num(self.value(flag))

    def env(self, key: str) -> str | None:
        return self.plan.env.get(key) if self.plan is not None else None

    def has_flag(self, flag: str) -> bool:
        flags = self.flags()
        return flags is None or flag in flags

    def nccl_debug_on(self) -> bool:
        return self.scan.nccl_info or (self.env("NCCL_DEBUG") or "").upper() in ("INFO", "TRACE")

    def port(self) -> int | None:
        return self.plan.port if self.plan is not None else _int(self.value("--port"))


def _num(s: str | None) -> float | None:
    try:
        return float(s) if s not in (None, "") else None
    except ValueError:
        return None


def _int(s: str | None) -> int | None:
    n = _num(s)
    return int(n) if n is not None and n == int(n) else None


def _frac(x: float) -> str:
    return f"{x:.2f}".rstrip("0").rstrip(".")


# ------------------------------------------------------------------ patch builders


def _mamba_flag(ctx: Ctx) -> str | None:
    """The mamba strategy flag under the name the plan's SGLang wants (plan.MAMBA_FLAGS: the new
    name first), else the name SGLang's own message used."""
    flags = ctx.flags()
    if flags is not None:
        return next((f for f in MAMBA_FLAGS if f in flags), None)
    return ctx.groups.get("flag")


def _extra_buffer(ctx: Ctx) -> dict | None:
    flag = _mamba_flag(ctx)
    if flag is None:
        return None
    patch: dict = {"set_flags": {flag: ["extra_buffer"]}}
    other = [f for f in MAMBA_FLAGS if f != flag and f in ctx.plan_flags]
    if other:
        patch["remove_flags"] = other
    spec_v2 = sv.spec_v2_default(ctx.version) is False if ctx.version else "SGLANG_ENABLE_SPEC_V2=1" in ctx.groups.get("all", "")
    if spec_v2 and ctx.env("SGLANG_ENABLE_SPEC_V2") != "1":
        patch["set_env"] = {"SGLANG_ENABLE_SPEC_V2": "1"}
    return patch


def _set(flag: str, *values: str) -> PatchFn:
    def build(ctx: Ctx) -> dict | None:
        return {"set_flags": {flag: list(values)}} if ctx.has_flag(flag) else None
    return build


def _remove(flag: str) -> PatchFn:
    def build(ctx: Ctx) -> dict | None:
        return {"remove_flags": [flag]} if ctx.value(flag) is not None else None
    return build


MEM_FRACTION_STEP = 0.05
MEM_FRACTION_MAX = 0.95  # above this, nothing is left for activations and NCCL buffers
MEM_FRACTION_MIN = 0.5


def _raise_mem_fraction(ctx: Ctx) -> dict | None:
    """More static memory: the weights left the KV cache no room within --mem-fraction-static."""
    cur = _num(ctx.groups.get("current")) or ctx.number("--mem-fraction-static")
    if cur is None:
        return None
    new = cur + MEM_FRACTION_STEP
    floor = _num(ctx.groups.get("suggested"))
    if floor is not None:
        new = max(new, math.ceil(floor * 100) / 100 + 0.01)
    new = min(MEM_FRACTION_MAX, round(new, 2))
    return {"set_flags": {"--mem-fraction-static": [_frac(new)]}} if new > cur else None


def _lower_mem_fraction(ctx: Ctx) -> dict | None:
    """Less static memory: more left for activations and CUDA graphs."""
    cur = ctx.number("--mem-fraction-static")
    if cur is None:
        return None
    new = max(MEM_FRACTION_MIN, round(cur - MEM_FRACTION_STEP, 2))
    return {"set_flags": {"--mem-fraction-static": [_frac(new)]}} if new < cur else None


# The largest CUDA-graph batch size: the new name first (0.5.14 added it and deprecated the old
# one, which 0.5.20 dropped).
GRAPH_BS_FLAGS = ("--cuda-graph-max-bs-decode", "--cuda-graph-max-bs")


def _graph_bs_flag(ctx: Ctx) -> str:
    """The name the plan uses, else the one its SGLang knows, else the one the server logged."""
    in_plan = [f for f in GRAPH_BS_FLAGS if f in ctx.plan_flags]
    if in_plan:
        return in_plan[0]
    flags = ctx.flags()
    if flags is not None:
        return next((f for f in GRAPH_BS_FLAGS if f in flags), GRAPH_BS_FLAGS[-1])
    return GRAPH_BS_FLAGS[0] if ctx.scan.has_server_arg("cuda_graph_max_bs_decode") else GRAPH_BS_FLAGS[1]


def _graph_oom(ctx: Ctx) -> dict | None:
    """Halve the largest captured batch size when the log or the plan says it; else give the
    graphs more room by lowering --mem-fraction-static."""
    flag = _graph_bs_flag(ctx)
    bs = ctx.number(flag)
    if bs is None and ctx.tracker is not None:
        bs = ctx.tracker.numbers.get("graph_max_bs")
    if bs is not None and bs >= 2 and ctx.has_flag(flag):
        return {"set_flags": {flag: [str(int(bs) // 2)]}}
    return _lower_mem_fraction(ctx)


def _fewer_running(ctx: Ctx) -> dict | None:
    cur = ctx.number("--max-running-requests")
    if cur is None and ctx.tracker is not None:
        cur = ctx.tracker.numbers.get("max_running_requests")
    if cur is None or cur < 2:
        return None
    return {"set_flags": {"--max-running-requests": [str(int(cur) // 2)]}}


def _context_to_pool(ctx: Ctx) -> dict | None:
    tokens = _int(ctx.groups.get("tokens"))
    if not tokens or tokens < 1024:
        return None
    return {"set_flags": {"--context-length": [str(tokens // 1024 * 1024)]}}


def _next_port(ctx: Ctx) -> dict | None:
    """The server's port was taken: the next one. Another port (NCCL's, dist init's) is not the
    plan's to move."""
    taken = _int(ctx.groups.get("port") or ctx.groups.get("port2") or ctx.groups.get("port3")
                 or ctx.groups.get("port4"))
    port = ctx.port()
    if port is None or (taken is not None and taken != port) or port >= 65535:
        return None
    return {"port": port + 1}


def _without_unknown_flags(ctx: Ctx) -> dict | None:
    named = re.findall(r"(?<!\S)(--[a-z0-9][a-z0-9-]*)", ctx.groups.get("args") or "")
    if not named:
        return None
    patch: dict = {"remove_flags": sorted(set(named))}
    renamed = _mamba_flag(ctx) if ctx.version else None
    for flag in named:
        if flag in MAMBA_FLAGS and renamed and renamed != flag and flag in ctx.plan_flags:
            patch.setdefault("set_flags", {})[renamed] = list(ctx.plan_flags[flag])
    return patch


def _nccl_debug(ctx: Ctx) -> dict | None:
    return None if ctx.nccl_debug_on() else {"set_env": {"NCCL_DEBUG": "INFO"}}


def _nccl_init_fix(ctx: Ctx) -> Fix:
    """A log that ends in NCCL's initialisation: the stall watcher's fix, from what the log shows
    (NCCL's own log on or not); P2P is not checked by reading a log (triage of a deployment revises
    it with the host's P2P check)."""
    return nccl_init_fix(ctx.nccl_debug_on(), None, p2p_off=(ctx.env("NCCL_P2P_DISABLE") or "") == "1")


def nccl_log_on(scanner: "LogScanner", plan: Plan | None) -> bool:
    """Whether NCCL's own INFO log is on for the lines `scanner` read: its lines are there, or the
    plan sets NCCL_DEBUG=INFO (or TRACE)."""
    return Ctx(plan, {}, scanner, None).nccl_debug_on()


def _env(key: str, value: str) -> PatchFn:
    def build(ctx: Ctx) -> dict | None:
        return {"set_env": {key: value}}
    return build


def _watchdog(ctx: Ctx) -> dict | None:
    cur = _num(ctx.groups.get("timeout")) or ctx.number("--watchdog-timeout")
    recommended = 1200  # sglang docs/basic_usage/qwen3_5.md
    if cur is not None and cur >= recommended:
        return None
    return {"set_flags": {"--watchdog-timeout": [str(recommended)]}}


# --------------------------------------------------------------------------------------------
# The rules
# --------------------------------------------------------------------------------------------

_B = r"[\d.]+ ?[KMGT]?i?B"
_OOM_NEEDLES = ("CUDA out of memory", "CUDA error: out of memory", "cudaErrorMemoryAllocation", "OutOfMemoryError",
                "Cuda failure 2 'out of memory'", "Cuda failure 'out of memory'")
_OOM_RE = re.compile(
    r"(?:CUDA out of memory\.(?: Tried to allocate (?P<want>" + _B + r"))?"
    r"(?:.*? GPU (?P<gpu>\d+) has a total capac(?:i)?ty of (?P<total>" + _B + r") of which (?P<free>" + _B + r") is free)?"
    r"|CUDA error: out of memory|cudaErrorMemoryAllocation|OutOfMemoryError(?!: CUDA out of memory)"
    r"|Cuda failure (?:2 )?'out of memory')"
)
_OOM_WHAT = "CUDA ran out of GPU memory{want_text}"


def _rule(id: str, code: str, severity: Severity, needles: tuple[str, ...], pattern: str | re.Pattern[str], summary: str,
          fix: str, patch: PatchFn | None = None, phases: tuple[str, ...] | None = None,
          covers: tuple[str, ...] = (), fallback: bool = False) -> LineRule:
    rx = pattern if isinstance(pattern, re.Pattern) else re.compile(pattern)
    return LineRule(id, code, severity, needles, rx, summary, fix, patch, phases, covers, fallback)


_NCCL_CAUSES = ("nccl-error",)

LINE_RULES: tuple[LineRule, ...] = (
    # -- SGLang refuses the configuration (ServerArgs, argparse) ------------------------------
    _rule("spec-mamba-no-buffer", "spec-config-invalid", "error", ("not compatible with radix cache",),
          r"Speculative decoding for (?P<arch>\S+) is not compatible with radix cache when using "
          r"(?P<flag>--mamba-[a-z-]+) no_buffer\.(?P<all>.*)",
          "Speculative decoding (MTP) on the hybrid model {arch} needs the extra_buffer mamba cache: SGLang "
          "refused {flag} no_buffer with the radix cache on.",
          "Set the mamba strategy to extra_buffer under the name this SGLang knows, with SGLANG_ENABLE_SPEC_V2=1 "
          "where the version needs it", _extra_buffer),
    _rule("gdn-flashinfer-no-buffer", "spec-config-invalid", "error", ("FlashInfer GDN decode",),
          r"FlashInfer GDN decode \(--linear-attn-decode-backend flashinfer\) is not compatible with "
          r"(?P<flag>--mamba-[a-z-]+) no_buffer",
          "FlashInfer's GDN decode kernel does not work with the no_buffer mamba cache ({flag} no_buffer).",
          "Set the mamba strategy to extra_buffer", _extra_buffer),
    _rule("extra-buffer-without-radix", "spec-config-invalid", "error", ("extra_buffer is not compatible with",),
          r"mamba extra_buffer is not compatible with --disable-radix-cache",
          "The extra_buffer mamba cache needs the radix cache, which --disable-radix-cache turns off.",
          "Drop --disable-radix-cache (keeps extra_buffer, which speculative decoding needs)",
          _remove("--disable-radix-cache")),
    _rule("extra-buffer-unsupported", "spec-config-invalid", "error",
          ("only supported on CUDA devices with FLA", "extra_buffer is not supported for"),
          r"Mamba extra_buffer is only supported on CUDA devices with FLA backend|"
          r"mamba extra_buffer is not supported for (?P<arch>\S+) model",
          "SGLang cannot use the extra_buffer mamba cache here (this device or model does not support it).",
          "Plan without MTP (--no-mtp) or with --disable-radix-cache and the no_buffer strategy"),
    _rule("mamba-track-interval", "spec-config-invalid", "error", ("mamba_track_interval",),
          r"mamba_track_interval (?P<interval>\d+) must be (?:greater than or equal to speculative_num_draft_tokens "
          r"(?P<draft>\d+)|divisible by page_size (?P<page>\d+))",
          "--mamba-track-interval {interval} does not fit the speculative draft tokens / page size.",
          "Drop --mamba-track-interval (SGLang's default fits)", _remove("--mamba-track-interval")),
    _rule("fla-page-size", "spec-config-invalid", "error", ("FLA_CHUNK_SIZE or page_size",),
          r"either FLA_CHUNK_SIZE or page_size must be divisible by the other, got FLA_CHUNK_SIZE=(?P<chunk>\d+), "
          r"self\.page_size=(?P<page>\d+)",
          "--page-size {page} does not divide (and is not divided by) FLA's chunk size {chunk}.",
          "Set --page-size 64, the size SGLang's cookbook pairs with extra_buffer", _set("--page-size", "64")),
    _rule("spec-v2-topk", "spec-config-invalid", "error", ("only supports topk = 1",),
          r"Spec v2 currently only supports topk = 1",
          "Spec V2 speculative decoding only supports --speculative-eagle-topk 1.",
          "Set --speculative-eagle-topk 1", _set("--speculative-eagle-topk", "1")),
    _rule("argparse-unrecognized", "server-args-invalid", "error", ("error: unrecognized arguments:",),
          r"error: unrecognized arguments: (?P<args>.*)",
          "This SGLang does not know these arguments: {args}.",
          "Drop them (a renamed mamba flag gets the name this version knows)", _without_unknown_flags),
    _rule("argparse-invalid", "server-args-invalid", "error", (": error: argument ",),
          r": error: argument (?P<flag>--[\w-]+)(?:/[^:]*)?: (?P<why>.*)",
          "SGLang refused {flag}: {why}.",
          "Give {flag} a value this SGLang accepts (`python -m sglang.launch_server --help`)"),
    # -- memory -------------------------------------------------------------------------------
    _rule("graph-capture-oom", "cuda-graph-oom", "error", ("Capture cuda graph failed",),
          r"Capture cuda graph failed: .*(?:out of memory|OutOfMemoryError)",
          "CUDA-graph capture ran out of GPU memory.",
          "Capture smaller graphs (lower the largest CUDA-graph batch size) or leave them more memory",
          _graph_oom),
    _rule("oom-in-graph-capture", "cuda-graph-oom", "error", _OOM_NEEDLES, _OOM_RE,
          _OOM_WHAT + " while capturing CUDA graphs.",
          "Capture smaller graphs (lower the largest CUDA-graph batch size) or leave them more memory",
          _graph_oom, phases=("cuda_graph",)),
    _rule("kv-not-enough-memory", "kv-cache-oom", "error",
          ("Not enough memory. Please try to increase", "is larger than the profiled value"),
          r"Not enough memory\. Please try to increase --mem-fraction-static\.(?: Current value: "
          r"mem_fraction_static=(?P<current>[\d.]+))?|"
          # --max-total-tokens given and the profile came out at or below zero (0.4.x+ model_runner.py,
          # 0.5.10 model_runner_kv_cache_mixin.py:817): SGLang goes on with the profiled value and fails later
          r"max_total_tokens=(?P<asked>\d+) is larger than the profiled value (?P<profiled>-\d+|0)\.",
          "No room was left for the KV cache: the weights fill the --mem-fraction-static budget, so the profiled "
          "token budget came out at zero or below.",
          "Raise --mem-fraction-static (or plan a larger TP)", _raise_mem_fraction),
    _rule("kv-weights-leave-no-room", "kv-cache-oom", "error", ("Loaded weights leave no GPU memory",),
          r"Loaded weights leave no GPU memory for the KV cache under --mem-fraction-static=(?P<current>[\d.]+)\. "
          r"Raise --mem-fraction-static above (?P<suggested>[\d.]+)",
          "The loaded weights leave no GPU memory for the KV cache at --mem-fraction-static {current}.",
          "Raise --mem-fraction-static above {suggested} (or plan a larger TP)", _raise_mem_fraction),
    _rule("kv-state-cache-too-small", "kv-cache-oom", "error",
          ("state cache is too small to serve", "Not enough GPU memory for hybrid"),
          r"(?:Hybrid \(mamba/linear-attention\) state cache is too small to serve any requests|"
          r"Not enough GPU memory for hybrid \(mamba/linear-attention\) state cache)",
          "The hybrid model's mamba state cache got no room for a single request.",
          "Raise --mem-fraction-static (or lower --max-running-requests)", _raise_mem_fraction),
    _rule("kv-pool-too-small", "kv-cache-oom", "error", ("Memory pool size is too small",),
          r"Memory pool size is too small",
          "The KV pool cannot hold a single request.",
          "Raise --mem-fraction-static (or plan a larger TP)", _raise_mem_fraction),
    _rule("kv-runtime-oom", "kv-cache-oom", "error", ("Prefill out of memory", "Decode out of memory"),
          r"(?P<stage>Prefill|Decode) out of memory\. Try to lower your batch size",
          "The KV cache ran out of tokens during {stage}.",
          "Run fewer requests at once (halve --max-running-requests)", _fewer_running),
    _rule("kv-pool-below-context", "kv-cache-small", "warning", ("fewer than --context-length",),
          r"KV pool holds (?P<tokens>\d+) tokens, fewer than --context-length (?P<context>\d+)",
          "The KV pool holds {tokens} tokens, fewer than the context length {context}: one full-length request "
          "cannot fit.",
          "Lower --context-length to what the pool holds (or raise --mem-fraction-static)", _context_to_pool),
    _rule("oom-in-kv-cache", "kv-cache-oom", "error", _OOM_NEEDLES, _OOM_RE,
          _OOM_WHAT + " while allocating the KV cache: less was free than SGLang profiled.",
          "Lower --mem-fraction-static (and look for other processes on the GPUs)", _lower_mem_fraction,
          phases=("kv_cache",)),
    _rule("oom-loading-weights", "cuda-oom", "error", _OOM_NEEDLES, _OOM_RE,
          _OOM_WHAT + " while loading the weights: they do not fit in what is free on the GPU.",
          "Free the GPUs (other processes?) or plan a larger TP", phases=("weights", "starting", "dist_init")),
    _rule("cuda-oom", "cuda-oom", "error", _OOM_NEEDLES, _OOM_RE,
          _OOM_WHAT + " {phase}.",
          "Lower --mem-fraction-static to leave more for activations", _lower_mem_fraction),
    # -- drivers --------------------------------------------------------------------------------
    _rule("cuda-driver-too-old", "cuda-driver-too-old", "error",
          ("driver version is insufficient", "driver on your system is too old", "cudaErrorInsufficientDriver",
           "undefined symbol: cuTensorMap", "undefined symbol: cuGreenCtx"),
          r"CUDA driver version is insufficient for CUDA runtime version|cudaErrorInsufficientDriver|"
          r"The NVIDIA driver on your system is too old \(found version (?P<found>\d+)\)|"
          r"undefined symbol: (?P<symbol>cuTensorMap\w+|cuGreenCtx\w+)",
          "The NVIDIA driver is older than the CUDA runtime this SGLang was built with.",
          "Upgrade the host's NVIDIA driver, or use an SGLang/torch build for the CUDA the driver supports",
          covers=_NCCL_CAUSES),
    _rule("driver-library-mismatch", "driver-library-mismatch", "error",
          ("Driver/library version mismatch", "NVML/RM version mismatch", "API mismatch", "LibRmVersionMismatch"),
          r"Driver/library version mismatch|NVML/RM version mismatch|NVMLError_LibRmVersionMismatch|"
          r"NVRM: API mismatch: the client has the version (?P<client>[\d.]+), but",
          "The NVIDIA kernel module and the user-space driver libraries the server loads are different versions.",
          "Reboot the host after a driver upgrade, or recreate the container so it mounts the host's libraries",
          covers=_NCCL_CAUSES),
    # -- NCCL -----------------------------------------------------------------------------------
    _rule("shm-exhausted", "shm-too-small", "error",
          ("shared memory segment", "/dev/shm", "ncclShmOpen", "Bus error", "bus error", "status=7/BUS"),
          r"(?:Error while creating shared memory segment|failed to extend) (?P<path>/dev/shm/\S+)|"
          r"ncclShmOpen|No space left on device.*?/dev/shm|/dev/shm.*?No space left on device|"
          r"^Bus error|(?i:unexpected bus error.*insufficient shared memory)|status=7/BUS",
          "/dev/shm is too small for NCCL's shared-memory transport.",
          "Give the server a larger /dev/shm (docker --shm-size 32g or --ipc=host); NCCL_SHM_DISABLE=1 works "
          "around it at lower speed", covers=_NCCL_CAUSES),
    _rule("p2p-peer-failed", "p2p-unavailable", "error",
          ("failed to peer with device", "peer access is not supported", "cudaErrorPeerAccessUnsupported"),
          r"failed to peer with device (?P<peer>\d+)|peer access is not supported between these two devices|"
          r"cudaErrorPeerAccessUnsupported",
          "GPU peer-to-peer access failed between the server's GPUs (IOMMU/ACS or topology).",
          "Try without P2P as an experiment (NCCL falls back to shared memory, slower); check IOMMU/ACS with host "
          "triage", _env("NCCL_P2P_DISABLE", "1"), covers=_NCCL_CAUSES),
    _rule("p2p-custom-allreduce", "p2p-unavailable", "warning", ("lacks GPU P2P capability",),
          r"(?P<what>\w+) is disabled because your platform lacks GPU P2P capability or P2P test failed",
          "SGLang's P2P test failed between the GPUs, so {what} is off (slower all-reduce).",
          "Check the GPU topology and IOMMU/ACS settings (host triage)"),
    _rule("nccl-ib", "nccl-error", "error", ("Call to ibv_",),
          r"Call to (?P<call>ibv_\w+) failed(?: with error (?P<err>.*))?",
          "NCCL's InfiniBand verbs call {call} failed.",
          "Raise the memlock limit for RDMA (LimitMEMLOCK=infinity), or keep NCCL off InfiniBand on a single host",
          _env("NCCL_IB_DISABLE", "1"), covers=("nccl-error-code",)),
    _rule("nccl-socket-refused", "nccl-error", "error", ("returned Connection refused",),
          r"[sS]ocketPollConnect: connect (?:to (?P<peer>\S+) )?returned Connection refused, exceeded error retry count",
          "NCCL could not connect to a peer rank: connection refused until it gave up.",
          "See whether every rank started; restart with NCCL_DEBUG=INFO", _nccl_debug, covers=("nccl-error-code",)),
    _rule("nccl-store-timeout", "nccl-init-stall", "error", ("waiting for clients", "client socket has timed out after"),
          r"Timed out after (?P<secs>\d+) seconds waiting for clients\. (?P<joined>\d+)/(?P<world>\d+) clients joined|"
          # the other side: a rank's TCPStore client never reached the store at --dist-init-addr
          r"The client socket has timed out after (?P<ms>\d+)ms while trying to connect to "
          r"\((?P<host>[^,()]+), (?P<store_port>\d+)\)",
          "The distributed rendezvous timed out: {rendezvous_text}.",
          "Find the rank that never joined (py-spy, host triage; check --dist-init-addr, that node 0 started and "
          "that this host reaches its port); restart with NCCL_DEBUG=INFO", _nccl_debug,
          covers=("nccl-error-code",)),
    # -- another node of a multi-node deployment went away --------------------------------------
    _rule("peer-node-lost", "nccl-error", "error", ("Connection closed by peer",),
          r"Connection closed by peer \[?(?P<peer>[0-9A-Fa-f.:]+)\]?:(?P<peer_port>\d+)\. This is typically caused by "
          r"a remote worker crashing",
          "A peer rank at {peer} closed its connection (gloo): another node of this deployment crashed or was "
          "stopped, and this node's ranks stopped with it.",
          "Read the other nodes' logs for the first error (the node at {peer}); restart the deployment on every "
          "node once that is fixed"),
    _rule("rendezvous-store-lost", "nccl-init-stall", "error", ("Failed to recv, got 0 bytes",),
          r"Failed to recv, got 0 bytes\. Connection was likely closed\. Did the remote server shutdown or crash\?",
          "The rendezvous store (node 0's --dist-init-addr) went away while this node waited for the others: "
          "node 0 crashed or was stopped before every node joined.",
          "Read node 0's log for why it stopped; start node 0 first, then the other nodes"),
    _rule("nccl-error-code", "nccl-error", "error",
          ("NCCL error", "ncclInternalError", "ncclSystemError", "ncclUnhandledCudaError", "ncclInvalidUsage",
           "ncclRemoteError"),
          r"NCCL error(?: in: \S+)?:? ?(?P<what>unhandled system error|unhandled cuda error|internal error|"
          r"invalid usage|invalid argument|remote process exited or there was a network error)|"
          r"(?P<code>ncclInternalError|ncclSystemError|ncclUnhandledCudaError|ncclInvalidUsage|ncclRemoteError)",
          "NCCL failed: {what}{code}.",
          "Restart with NCCL_DEBUG=INFO to see NCCL's reason, and run host triage", _nccl_debug),
    # -- the rest ---------------------------------------------------------------------------------
    _rule("weights-missing", "weight-load-error", "error",
          ("Cannot find any model weights", "SafetensorError", "FileNotFoundError", "incomplete metadata"),
          r"Cannot find any model weights with `?(?P<path>[^`]*)|SafetensorError: (?P<what>.*)|"
          r"FileNotFoundError: (?P<missing>.*)|incomplete metadata, file not fully covered",
          "The checkpoint could not be read{detail}.",
          "Download the model again (a shard is missing or truncated) or check --model-path",
          phases=("weights", "draft", "starting")),
    _rule("port-in-use", "port-in-use", "error",
          ("ddress already in use", "Port is already in use", "is not available in", "EADDRINUSE"),
          r"bind on address \((?:'[^']*'|\"[^\"]*\"), (?P<port>\d+)[^)]*\): address already in use|"
          r"ZMQError: Address already in use \(addr='\w+://[^']*?:(?P<port4>\d+)'\)|"
          r"ZMQError: Address already in use|\[Errno 98\] Address already in use|"
          r"(?:failed to (?:bind|listen) (?:to|on) \[[^\]]*\]:|port: )(?P<port2>\d+).*?(?:Address already in use|"
          r"EADDRINUSE)|(?P<name>\w+_port) at (?P<port3>\d+) is not available in \d+ seconds|Port is already in use\.",
          "A port the server needs is taken{port_text}.",
          "Use another port (and look for a leftover server holding it)", _next_port),
    _rule("leftover-memory", "leftover-gpu-process", "warning", ("The memory capacity is unbalanced",),
          r"The memory capacity is unbalanced\. Some GPUs may be occupied by other processes\. "
          r"pre_model_load_memory=(?P<low>[\d.]+), local_gpu_memory=(?P<local>[\d.]+)",
          "Some of the server's GPUs have less free memory than others ({low} vs {local} GB): other processes "
          "may hold them.",
          "List the GPUs' processes (gpuops gpus) and end the leftovers"),
    _rule("watchdog-timeout", "watchdog-timeout", "error", ("watchdog timeout", "Watchdog timeout ("),
          r"(?:(?P<name>\w+) watchdog|^Watchdog) timeout \(self\.watchdog_timeout=(?P<timeout>[\d.]+)",
          "The {name} made no progress for {timeout} s and SGLang's watchdog killed it.",
          "Read the py-spy dump above the line; if the step is merely slow, raise --watchdog-timeout", _watchdog),
    # an import the server's Python cannot satisfy: a serving dependency not installed, or a module
    # this hardware's build lacks (SGLang on CPU reaches for vllm's rotary kernels, say)
    _rule("python-module-missing", "python-module-missing", "error", ("No module named",),
          r"(?:ModuleNotFoundError|ImportError): No module named '?(?P<module>[\w.]+)'?",
          "The server's Python has no module {module}: SGLang imported it and stopped.",
          "Install the package that provides {module} into the server's Python (the host's `python` in "
          "config.toml), or, for a GPU-only module (vllm, sgl_kernel, flashinfer), run on hardware this SGLang "
          "build supports"),
    _rule("warmup-failed", "warmup-failed", "error", ("Initialization failed. warmup error",),
          r"Initialization failed\. warmup error",
          "The server started but its warmup request failed.",
          "Read the warmup traceback that follows the line"),
    # torch/Triton surface a failed kernel as "CUDA error: …" (c10/cuda/CUDAException.cpp), the driver API
    # as CUDA_ERROR_* (cuGetErrorName), the runtime as cudaError*; a device-side assert also prints the
    # kernel's own "file.cu:N: …: Assertion `…` failed."
    _rule("cuda-kernel-error", "cuda-error", "error",
          ("device-side assert", "unspecified launch failure", "illegal memory access", "CUDA_ERROR_LAUNCH_FAILED",
           "CUDA_ERROR_ILLEGAL_ADDRESS", "CUDA_ERROR_ASSERT", "cudaErrorLaunchFailure", "cudaErrorIllegalAddress",
           "cudaErrorAssert", "Assertion `"),
          r"(?:CUDA error|Triton Error \[CUDA\]): (?P<what>device-side assert triggered|unspecified launch failure|"
          r"an illegal memory access was encountered)|(?P<code>CUDA_ERROR_LAUNCH_FAILED|CUDA_ERROR_ILLEGAL_ADDRESS|"
          r"CUDA_ERROR_ASSERT|cudaErrorLaunchFailure|cudaErrorIllegalAddress|cudaErrorAssert)|"
          r"\.cu:\d+: .*Assertion `(?P<assertion>.{0,200})` failed",
          "A CUDA kernel failed on the GPU{phase}: {what}{code}{assert_text}.",
          "Rerun with CUDA_LAUNCH_BLOCKING=1 to see the kernel that failed: a device-side assert is usually an input "
          "out of range (a prompt longer than the context, a bad token id), a launch failure or an illegal access "
          "a kernel bug or a failing GPU (look for Xid errors in the host's kernel log)", covers=_NCCL_CAUSES),
)

SILENCE_RULES: tuple[SilenceRule, ...] = (
    # the stall watcher's nccl-init-stall as a log shows it, with its fix (stall.nccl_init_fix); a warning: a
    # log that ends here may still be starting (a deployment's triage shows the watcher's error in force)
    SilenceRule("dist-init-silent", "nccl-init-stall", ("dist_init",),
                re.compile(r"Init torch distributed begin|Init parallel begin|sglang is using nccl"),
                "The log ends in dist_init after '{last}': a start that stays silent here (with no GPU memory "
                "used) is stuck in NCCL's communicator setup (driver/library mismatch, P2P, a rank that never "
                "joined).", "", fix_of=_nccl_init_fix),
    SilenceRule("nccl-init-pending", "nccl-init-stall", None, None,
                "NCCL began setting up {pending} communicator rank(s) (Init START) that never completed (no Init "
                "COMPLETE) before the log ended.", "", nccl_pending=True, fix_of=_nccl_init_fix),
    SilenceRule("graph-capture-silent", "cuda-graph-stall", ("cuda_graph", "draft"),
                re.compile(r"Capture .*\bbegin\b|Capture cuda graph bs|Capturing "),
                "The log ends inside CUDA-graph capture after '{last}': a capture that stays silent is often an "
                "error hidden by the custom all-reduce (sgl-project/sglang#11275).",
                "Restart with --disable-custom-all-reduce as an experiment", _set("--disable-custom-all-reduce")),
)

_NEEDLES = tuple(dict.fromkeys(n for r in LINE_RULES for n in r.needles))
_TB_START = "Traceback (most recent call last)"
# What _scan looks for, NCCL's INFO chatter first: a substring test each is twice as fast as one
# regex of them all (which tries every alternative at every position) and gives every one present.
_LOOKED_FOR = tuple(dict.fromkeys((" NCCL INFO ",) + _NEEDLES + (_TB_START,)))
# The gate before those tests (the fast path: ordinary lines, a start-up's phase lines among them,
# pay ~30 substring tests instead of one per needle). Every needle holds at least one gate key: the
# hints below cover most of them, and a needle that holds none of the hints is a key itself (so a new
# rule's needle is always covered). A line that holds no key therefore holds no needle, and skipping
# it changes nothing (tests/test_pipeline_fastpath.py checks it over every log in tests/data). The
# hints are chosen to be absent from a healthy server's lines: a line that holds one only pays the
# full test of every needle, as it would without the gate.
_GATE_HINTS = ("rror", " memory", "too ", "ailure", "ismatch", "upported", "ompatible", "river", "symbol",
               "atchdog", "timed out", "in use", "onnection", "ssert", "CUDA_ERROR", "than ", "ailed to ")
_GATE = _GATE_HINTS + tuple(n for n in _LOOKED_FOR if not any(h in n for h in _GATE_HINTS))
# SGLang's start-up lines of a fixed form (a step begun or ended, with its numbers): no rule is about
# them (a failed step is told by lines of their own: an exception, an error); without this each paid
# the gate's every test (tests/test_pipeline_fastpath.py: no corpus line so started holds a needle).
_STEP_STARTS = ("Init torch distributed ", "Init parallel ", "Memory pool end", "Memory baseline taken",
                "sglang is using nccl", "Mamba Cache is allocated", "max_total_num_tokens=", "Capture cuda graph begin",
                "Capture cuda graph end", "Capture cuda graph bs", "Capture target ", "Capture draft ")
# Lines no rule is about, skipped before the gate: the running server's batch lines, uvicorn's
# INFO lines, progress bars, the start-up's step lines, and a traceback's frame and source lines.
_SKIP = ("Decode batch", "Prefill batch", "INFO:     ", "Loading safetensors", "Multi-thread loading", "Capturing ",
         "Load weight", "KV Cache is", '  File "', "    ", *_STEP_STARTS)
_LOADER_EXC_RE = re.compile(r"(?:[A-Za-z_]\w*\.)*[A-Za-z_]\w*(?:Error|Exception)\b")
_NCCL_INIT_RE = re.compile(r"ncclCommInit\w* comm (0x[0-9a-f]+) rank (\d+) .*- Init (START|COMPLETE)$")


def _first(t: str, found: list[str]) -> bool:
    """Whether found[0] comes first in `t`: no other of them starts before it (one that starts at the
    same place is a longer needle, and NCCL's chatter still wins)."""
    at = t.find(found[0])
    return all(t.find(n) >= at for n in found[1:])


def _shown(ln: LogLine) -> str:
    """A line as evidence: as logged (prefixes and all) unless it carries ANSI codes or tqdm's
    carriage returns, then its message; at most _SHORT characters."""
    raw = ln.raw.rstrip("\r\n")
    s = raw if "\x1b" not in raw and "\r" not in raw else ln.text
    return s if len(s) <= _SHORT else s[:_SHORT] + "…"


class _Vals(dict):
    """str.format_map values: a group that did not take part reads as empty."""

    def __missing__(self, key: str) -> str:
        return ""


@dataclass
class _Hit:
    rule: LineRule
    line_no: int
    line: str
    groups: dict[str, str]
    phase: str | None


# --------------------------------------------------------------------------------------------
# The scanner
# --------------------------------------------------------------------------------------------


class LogScanner:
    """Collects what the rules need while a log goes by: matching lines (with their absolute
    line numbers, counted from 1 over everything fed), the ``server_args=`` line, NCCL's
    communicator init lines, and where the tracker's crash ended. Feed it the same lines as the
    PhaseTracker, after the tracker (``track_log(lines, scanner.feed)`` does). When a different
    tracker comes (a restart in a journal), what belonged to the previous run is dropped."""

    def __init__(self) -> None:
        self.line_no = 0
        self.run_start = 1
        self.server_args: str | None = None
        self.nccl_info = False
        self._hits: dict[str, list[_Hit]] = {}
        self._counts: dict[str, int] = {}
        self._nccl_started: dict[tuple[str, str], tuple[int, str]] = {}  # (comm, rank) -> (line no, line)
        self._tracker: PhaseTracker | None = None
        self._crash: Crash | None = None
        self._crash_end: int | None = None
        # tracker.last_phase_line, its line no, its line (made evidence only when a finding shows it:
        # a progress bar moves last_phase_line every line)
        self._last_phase: tuple[str | None, int, LogLine | None] = (None, 0, None)
        self._tb_starts: dict[int, str] = {}  # line no -> the line, of the last few tracebacks' first lines
        self._server_args_cache: dict[str, str | None] = {}

    def _reset(self) -> None:
        self.run_start = self.line_no
        self.server_args = None
        self._hits.clear()
        self._counts.clear()
        self._nccl_started.clear()
        self._crash = None
        self._crash_end = None
        self._last_phase = (None, 0, None)
        self._tb_starts.clear()
        self._server_args_cache.clear()

    def feed(self, line: str | LogLine, tracker: PhaseTracker | None = None) -> None:
        self.line_no += 1
        ln = line if isinstance(line, LogLine) else clean(line)
        if tracker is not None:
            if tracker is not self._tracker:
                if self._tracker is not None:
                    self._reset()
                self._tracker = tracker
            if tracker.crash is not self._crash:
                self._crash = tracker.crash
                self._crash_end = self.line_no
            if tracker.last_phase_line is not self._last_phase[0]:
                self._last_phase = (tracker.last_phase_line, self.line_no, ln)
        if type(ln) is JoinedLine:  # log lines tqdm's \r joined before this one
            for part in ln.extra:
                self._scan(part, tracker)
        elif not ln.text or ln.text.startswith(_SKIP):  # _scan's first tests, minus a call for the lines it skips (most)
            return
        self._scan(ln, tracker)

    def _scan(self, ln: LogLine, tracker: PhaseTracker | None) -> None:
        t = ln.text
        if not t or t.startswith(_SKIP):  # (an empty line holds no gate key)
            return
        if t.startswith("server_args="):
            self.server_args = t
            self._server_args_cache.clear()
            return
        for gate_key in _GATE:  # the fast path (see _GATE): a line that holds no key holds no needle
            if gate_key in t:
                break
        else:
            return
        looked = [n for n in _LOOKED_FOR if n in t]
        if not looked:
            return
        if looked[0] == " NCCL INFO " and _first(t, looked):  # NCCL_DEBUG=INFO's chatter: only its communicator init matters
            self.nccl_info = True
            if t.endswith(("Init START", "Init COMPLETE")):
                init = _NCCL_INIT_RE.search(t)
                if init:
                    key = (init.group(1), init.group(2))
                    if init.group(3) == "START":
                        self._nccl_started[key] = (self.line_no, _shown(ln))
                    else:
                        self._nccl_started.pop(key, None)
            return
        if _TB_START in t:  # where a crash begins, for a crash no rule knows
            self._tb_starts[self.line_no] = _shown(ln)
            if len(self._tb_starts) > 16:
                del self._tb_starts[min(self._tb_starts)]
        phase = tracker.phase if tracker is not None else None
        present = set(looked)
        for rule in LINE_RULES:
            if present.isdisjoint(rule.needles):
                continue
            found = rule.pattern.search(t)
            if found is None:
                continue
            n = self._counts.get(rule.id, 0)
            self._counts[rule.id] = n + 1
            if n < _HITS_KEPT:
                groups = {k: v for k, v in found.groupdict().items() if v is not None}
                self._hits.setdefault(rule.id, []).append(_Hit(rule, self.line_no, _shown(ln), groups, phase))

    def server_arg(self, field: str) -> str | None:
        """A field of the logged ``server_args=`` (``ServerArgs(a=1, …)`` or ``{'a': 1, …}``) as
        text; None when absent or None (``has_server_arg`` tells them apart)."""
        raw = self._server_arg_raw(field)
        return None if raw in (None, "None") else raw

    def has_server_arg(self, field: str) -> bool:
        return self._server_arg_raw(field) is not None

    def _server_arg_raw(self, field: str) -> str | None:
        if field not in self._server_args_cache:
            m = None
            if self.server_args:
                m = re.search(r"[(,{ ]'?" + re.escape(field) + r"'?(?:=|: )('[^']*'|\"[^\"]*\"|[^,)}]+)",
                              self.server_args)
            self._server_args_cache[field] = m.group(1).strip().strip("'\"") if m else None
        return self._server_args_cache[field]

    # -- findings ----------------------------------------------------------------------------

    def findings(self, tracker: PhaseTracker, plan: Plan | None = None) -> list[Finding]:
        """The findings for what was fed, given the tracker of the same lines and, when known,
        the deployment's plan (for fixes that patch it): errors first, then by line."""
        crash = tracker.crash
        crash_at = self.run_start + crash.line_no - 1 if crash is not None else None
        ready_at = self.run_start + tracker.ready_line_no - 1 if tracker.ready_line_no is not None else None
        claimed: set[int] = set()
        merged: dict[tuple[str, PatchFn | None], _Found] = {}
        for rule in LINE_RULES:
            hits = self._rule_hits(rule, crash, crash_at, ready_at, claimed)
            if not hits:
                continue
            claimed.update(h.line_no for h, _ in hits)
            key = (rule.code, rule.patch)
            if key in merged:  # e.g. SGLang's "Capture cuda graph failed" and torch's OOM line under it
                merged[key].add(hits, self._counts[rule.id] - len(self._hits[rule.id]))
            else:
                merged[key] = _Found(rule, hits, self._counts[rule.id] - len(self._hits[rule.id]))
        found = [(f.hits[0][0].line_no, f.finding(self, tracker, plan), f.rule) for f in merged.values()]
        out = _uncovered(found)
        if tracker.outcome == "incomplete":
            out.extend(self._silence(tracker, plan, {f.code for _, f in out}))
        if tracker.outcome == "crashed" and crash is not None and crash_at is not None and not any(
                f.severity == "error" for _, f in out):
            out.append((crash_at, self._crashed(crash, crash_at)))
        order = {s: i for i, s in enumerate(SEVERITIES)}
        out.sort(key=lambda x: (order[x[1].severity], x[0]))
        return [f for _, f in out]

    def _rule_hits(self, rule: LineRule, crash: Crash | None, crash_at: int | None, ready_at: int | None,
                   claimed: set[int]) -> list[tuple[_Hit, str | None]]:
        """A line rule's hits that count, each with its phase (a line at or after the crash: the
        crash's): not a line an earlier rule claimed, in the rule's phases, a fallback's only from
        the crash on, an error's only after the last ready (the server got past what came before)."""
        hits = []
        for h in self._hits.get(rule.id, ()):
            phase = crash.phase if crash is not None and crash_at is not None and h.line_no >= crash_at else h.phase
            if h.line_no in claimed or (rule.phases is not None and phase not in rule.phases):
                continue
            if rule.fallback and (crash_at is None or h.line_no < crash_at):
                continue
            if rule.severity == "error" and ready_at is not None and h.line_no < ready_at:
                continue  # the server got to ready after it: not what stopped it
            hits.append((h, phase))
        return hits

    def fix(self, summary: str, build: PatchFn | None, ctx: Ctx) -> Fix:
        """A rule's fix: with its plan_patch when the rule builds one that changes the plan."""
        patch = build(ctx) if build is not None else None
        if patch is not None and ctx.plan is not None and not apply_patch(ctx.plan, patch)[1]:
            patch = None  # the plan already has it: not the fix
        if patch is None:
            return Fix(summary)
        return Fix(f"{summary} ({describe_patch(patch)})", True, patch)

    def _silence(self, tracker: PhaseTracker, plan: Plan | None, codes: set[str]) -> list[tuple[int, Finding]]:
        out: list[tuple[int, Finding]] = []
        last = tracker.last_phase_line or ""
        _, last_at, last_ln = self._last_phase
        last_shown = _shown(last_ln) if last_ln is not None else ""
        pending = sorted(self._nccl_started.values())
        for rule in SILENCE_RULES:
            if rule.code in codes or (rule.phases is not None and tracker.phase not in rule.phases):
                continue
            if (rule.last_line is not None and not rule.last_line.match(last)) or (
                    rule.nccl_pending and not self._nccl_started):
                continue
            at = pending[0][0] if rule.nccl_pending else last_at
            evidence: tuple[Evidence, ...] = () if rule.nccl_pending else (Evidence(f"log:{last_at}", last_shown),)
            evidence += tuple(Evidence(f"log:{n}", line) for n, line in pending[:_EVIDENCE_LINES])
            evidence += (Evidence("log", reading=f"the log ends at line {self.line_no}, {self.line_no - at} line(s) "
                                                 "later"),)
            vals = _Vals(last=last, pending=str(len(self._nccl_started)))
            ctx = Ctx(plan, {}, self, tracker)
            fix = rule.fix_of(ctx) if rule.fix_of is not None else self.fix(rule.fix, rule.patch, ctx)
            out.append((at, Finding(rule.code, rule.severity, rule.summary.format_map(vals), evidence, fix,
                                    {"rule": rule.id, "phase": tracker.phase})))
            codes.add(rule.code)
        return out

    def _crashed(self, crash: Crash, crash_at: int) -> Finding:
        """No rule knows this crash: say where it happened and what it said."""
        first = self._tb_starts.get(crash_at) or (crash.evidence[0] if crash.evidence else crash.summary)
        evidence = [Evidence(f"log:{crash_at}", first)]
        if crash.summary != evidence[0].line:
            end = self._crash_end if self._crash is crash and self._crash_end else self.line_no
            evidence.append(Evidence(f"log:{end}", crash.summary))
        if crash.phase in ("weights", "draft") and _LOADER_EXC_RE.match(crash.summary) and any(
                "load_weights" in e or "model_loader" in e or "weight_utils" in e for e in crash.evidence):
            # an exception the weight loader raised (a checkpoint key it does not know, a shape it
            # does not expect): the checkpoint and this SGLang's model code disagree
            return Finding("weight-load-error", "error", f"Loading the weights failed: {crash.summary[:300]}",
                           tuple(evidence), Fix("The checkpoint does not match what this SGLang's model loader "
                                                "expects: check --model-path and the quantization flags, or use "
                                                "an SGLang release that supports this model"),
                           {"rule": "crash", "phase": crash.phase})
        where = f"in {crash.phase}" if crash.phase else "before any phase"
        return Finding("server-crashed", "error", f"The server crashed {where}: {crash.summary[:300]}",
                       tuple(evidence), Fix("No known signature: read the traceback (gpuops logs NAME)"),
                       {"rule": "crash", "phase": crash.phase})


def _uncovered(found: list[tuple[int, Finding, LineRule]]) -> list[tuple[int, Finding]]:
    """The findings no other one covers (by its code or rule), and a fallback's only when no rule
    that is not a fallback found an error."""
    return [(n, f) for n, f, r in found
            if not any(f.code in o.covers or r.id in o.covers for _, _, o in found if o is not r)
            and not (r.fallback and any(o.severity == "error" and not o.fallback for _, _, o in found))]


class _Found:
    """One finding in the making: the hits of one rule (and of later rules with its code and fix)."""

    def __init__(self, rule: LineRule, hits: list[tuple[_Hit, str | None]], dropped: int) -> None:
        self.rule = rule
        self.hits = list(hits)
        self.dropped = dropped

    def add(self, hits: list[tuple[_Hit, str | None]], dropped: int) -> None:
        self.hits = sorted(self.hits + hits, key=lambda x: x[0].line_no)
        self.dropped += dropped

    def finding(self, scan: LogScanner, tracker: PhaseTracker, plan: Plan | None) -> Finding:
        rule = self.rule
        first, phase = next(((h, p) for h, p in self.hits if h.rule is rule), self.hits[0])
        groups: dict[str, str] = {}
        for h, _ in self.hits:  # the rule's own match first, then what the others add
            for k, v in h.groups.items():
                groups.setdefault(k, v)
        for k, v in first.groups.items():
            groups[k] = v
        evidence: list[Evidence] = []
        for h, _ in self.hits:
            if len(evidence) < _EVIDENCE_LINES and all(e.line != h.line for e in evidence):
                evidence.append(Evidence(f"log:{h.line_no}", h.line))
        vals = _texts(groups, phase)
        data = {"rule": rule.id, "lines": len(self.hits) + self.dropped, "phase": phase}
        data.update({k: v for k, v in groups.items() if k != "all"})
        fix = scan.fix(rule.fix.format_map(vals), rule.patch, Ctx(plan, groups, scan, tracker))
        summary = " ".join(rule.summary.format_map(vals).split()).replace(" .", ".")
        return Finding(rule.code, rule.severity, summary, tuple(evidence), fix, data)


def _texts(groups: dict[str, str], phase: str | None) -> _Vals:
    """What a rule's summary and fix are formatted with: its match's groups, and the phrases made of
    them (the phase, the allocation tried, the rendezvous, the assert, the port, the detail)."""
    vals = _Vals(groups)
    vals["phase"] = f"in {phase}" if phase else ""
    vals["want_text"] = f" (tried to allocate {groups['want']})" if groups.get("want") else ""
    vals["rendezvous_text"] = (f"{groups['joined']} of {groups['world']} ranks joined" if groups.get("world") else
                               f"a rank could not reach the store at {groups.get('host', '?')}:"
                               f"{groups.get('store_port', '?')}")
    vals["assert_text"] = "" if groups.get("what") or groups.get("code") or not groups.get("assertion") else (
        f"device-side assert `{groups['assertion']}`")
    port = groups.get("port") or groups.get("port2") or groups.get("port3") or groups.get("port4")
    vals["port_text"] = (f": {port}" + (f" ({groups['name']})" if groups.get("name") else "")) if port else ""
    detail = next((groups[k] for k in ("path", "what", "missing") if groups.get(k)), "")
    vals["detail"] = f": {detail}" if detail else ""
    return vals


def findings_for_log(lines: Iterable[str], plan: Plan | None = None) -> list[Finding]:
    """The findings for a finished log (raw lines, e.g. an open file), for the last server start
    in it; ``plan`` lets fixes patch it."""
    scanner = LogScanner()
    tracker = track_log(lines, scanner.feed)
    return scanner.findings(tracker, plan)
