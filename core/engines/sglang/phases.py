"""SGLang server log lines -> startup phases, progress, numbers and crashes.

Plain data and pure functions: no I/O, no asyncio, no UI. The deployment screen feeds a
:class:`PhaseTracker` line by line as the journal/log follower produces them; ``gpuops triage``
runs :func:`triage_log` over a finished log.

Phases (the stable vocabulary, in order): ``starting, dist_init, weights, kv_cache, cuda_graph,
draft, http, ready``. Outcomes of a finished log: ``ready, crashed, incomplete``.

Every string recognized here was read out of the SGLang wheels 0.5.10 and 0.5.23
(``extract/log_lines.py`` prints them with file and line; the paths below are
relative to ``sglang/``):

=========================================  ================================================================
message (after the ``[ts TPn]`` prefix)     where (0.5.10 | 0.5.23)
=========================================  ================================================================
``server_args=ServerArgs(...)`` /          srt/entrypoints/engine.py:648 ``{server_args=}`` | engine.py:1185
``server_args={...}``                      (0.5.23 logs a dict)
``Init torch distributed begin.``          srt/model_executor/model_runner.py:891 | (gone)
``Init torch distributed ends. elapsed=``  model_runner.py:1020 | (gone)
``Init parallel begin.`` / ``ends.``       (absent) | srt/distributed/bootstrap.py:115 / :190
``Memory baseline taken. mem usage=``      (absent) | bootstrap.py:219
``sglang is using nccl==%s``               srt/distributed/device_communicators/pynccl.py:79 | :87
``Load weight begin. avail mem=``          model_runner.py:1074 | model_runner.py:1273
``Load weight end. elapsed=, type=, …``    model_runner.py:1246 | model_runner.py:1372
``Load weight end. Committed real …``      (absent) | model_runner_components/startup_weight_load.py:537
``{desc}: {pct:3.0f}% Completed | n/N``    srt/utils/common.py:125 BAR_FORMAT | common.py:1414; descs
                                           ``Loading safetensors checkpoint shards``, ``Multi-thread
                                           loading shards`` (srt/model_loader/weight_utils.py)
``KV Cache is allocated. #tokens: …``      srt/mem_cache/memory_pool.py:695/:701 | memory_pool.py:2087/:2095
                                           (0.5.23 adds ``dtype: …,``; ``KV Cache VA upper bound.``)
``Post-capture KV sizing: KV cache …``     (absent) | model_runner_components/kv_pool_runtime.py:194/:203
``Mamba Cache is allocated. …``            memory_pool.py:310/:320 | memory_pool.py:983/:1004
``Memory pool end. avail mem=``            model_runner_kv_cache_mixin.py:905 | mem_cache/kv_cache_configurator.py:498
``Capture cuda graph begin./end.``         model_runner.py:2445/:2459 (``Capture {graph_backend} begin.``)
``Capture piecewise CUDA graph …``         model_runner.py:2565/:2573
``Capture cuda graph bs [..]``             srt/model_executor/cuda_graph_runner.py:570 | (gone)
``Capture {target|draft} {decode|verify|   (absent) | model_runner_components/cuda_graph_setup.py:684/:695
prefill} CUDA graph begin./end.``          (prefill), :758/:787 (decode/verify)
``Capture draft [extend] cuda graph …``    srt/speculative/eagle_worker.py:249-271, eagle_worker_v2.py:270-316
``Capture draft {decode|extend} CUDA …``   (absent) | srt/speculative/eagle_worker_v2.py:513-652
``Capturing batches (bs=… avail_mem=…)``   cuda_graph_runner.py:783 tqdm | model_executor/runner/decode_cuda_graph_runner.py:1342
``max_total_num_tokens=…, context_len=…``  srt/managers/scheduler.py:690 | scheduler.py:1268
uvicorn ``Uvicorn running on …``           uvicorn's own logger (``INFO:     `` level prefix)
``The server is fired up and ready …``     srt/entrypoints/http_server.py:1929 | http_server.py:2600
``Dummy health check server started …``   (node_rank > 0) srt/utils/common.py:3683 | the same
``{X} hit an exception: {traceback}``      srt/managers/scheduler.py:3620 (+ tokenizer/detokenizer/DP) | :6372
``Initialization failed. …``               http_server.py:1778/1904, engine.py:1211 | http_server.py:2384/2533, engine.py:2031
``Received sigquit from a child process``  engine.py:1152 | engine.py:1977
``{name} watchdog timeout (…)``            srt/utils/watchdog.py:153 | watchdog.py:153
=========================================  ================================================================

Use: ``tr = PhaseTracker()``; ``tr.feed(line)`` for each line (a str with or without its newline,
or a :class:`LogLine`) returns what that line changed; ``tr.idle()`` when a live stream has been
quiet for a few seconds; ``tr.finish()`` when a finished log ends. tqdm's ``\r`` updates may
arrive inside one line (a journal entry, a file read with ``newline=""``) or as separate lines;
both work.

Speed: every line costs one ``str.startswith(tuple)`` and a few substring tests before any
regex runs; the 20 KB ``server_args=`` line is never scanned by a regex.
"""

from __future__ import annotations

import functools
import re
from typing import Callable, Iterable, Mapping

from ..records import DRAFT_SHARDS, Change, Crash, JoinedLine, LogLine, Numbers, PhaseChange, Progress

__all__ = [
    "PHASES",
    "OUTCOMES",
    "LogLine",
    "JoinedLine",
    "clean",
    "PhaseChange",
    "Progress",
    "Numbers",
    "Crash",
    "PhaseTracker",
    "track_log",
]

PHASES: tuple[str, ...] = ("starting", "dist_init", "weights", "kv_cache", "cuda_graph", "draft", "http", "ready")
OUTCOMES: tuple[str, ...] = ("ready", "crashed", "incomplete")

_IDX = {p: i for i, p in enumerate(PHASES)}
_I_CUDA_GRAPH = _IDX["cuda_graph"]
_I_DRAFT = _IDX["draft"]
_I_HTTP = _IDX["http"]
_I_READY = _IDX["ready"]
# Steps a draft model repeats after the target finished graph capture (0.5.10 builds the draft's
# ModelRunner after the target's: dist init, weights, memory pool again, then its graphs).
_DRAFT_REPEATS = frozenset(("dist_init", "weights", "kv_cache"))


# The records it makes (LogLine, JoinedLine, PhaseChange, Progress, Numbers, Crash) are every
# engine's: core/engines/records.py.


# --------------------------------------------------------------------------------------------
# clean()
# --------------------------------------------------------------------------------------------

_ANSI_RE = re.compile(r"\x1b(?:\[[0-?]*[ -/]*[@-~]|\][^\x07\x1b]*(?:\x07|\x1b\\)|[@-Z\\-_])")
# docker compose: "sglang-1  | " (v2), "sglang_1  | " (v1)
_COMPOSE_RE = re.compile(r"[A-Za-z0-9][\w.-]*\s+\| ")
# journalctl -o short / short-precise / short-iso: "Nov 30 12:00:01 host python3[1234]: "
_JOURNAL_RE = re.compile(
    r"(?:[A-Z][a-z]{2} [ \d]\d \d\d:\d\d:\d\d(?:\.\d+)?|\d{4}-\d\d-\d\dT\d\d:\d\d:\d\d(?:[.,]\d+)?(?:Z|[+-]\d\d:?\d\d)?)"
    r" \S+ [^\s:\[]+(?:\[\d+\])?: "
)
_LEVELS = r"(?:TRACE|DEBUG|INFO|NOTICE|WARN|WARNING|ERROR|CRITICAL|FATAL)"
# A timestamp a program that relays the server's output puts first: docker logs -t, kubectl logs
# --timestamps, GitHub Actions ("2026-07-14T07:49:04.123456789Z "), docker's and others' "2026-07-14
# 07:49:04 ", with what Python logging ("… - name - INFO - ", "… - INFO - ") or Rust tracing
# ("…Z  INFO target::path: ") writes after it.
_TS_WRAP_RE = re.compile(
    r"\d{4}-\d\d-\d\d[T ]\d\d:\d\d:\d\d(?:[.,]\d+)?(?:Z|[+-]\d\d:?\d\d| ?UTC)?"
    r"(?: - (?:[\w.<>-]+ - )?" + _LEVELS + r" - |\s+" + _LEVELS + r"\s+(?:[\w.:<>-]+: )?|"
    r" \| " + _LEVELS + r" +\| (?:[\w.<>-]+ \| )?| \[" + _LEVELS + r"\] | )"
)
# Python logging's basicConfig default "INFO:root:" (uvicorn's "INFO:     " has spaces: kept)
_PYLOG_RE = re.compile(r"(?:DEBUG|INFO|WARNING|ERROR|CRITICAL):[\w.<>-]+:")
_PYLOG_HEADS = ("DEBU", "INFO", "WARN", "ERRO", "CRIT")
# srun --label "0: ", mpirun --tag-output "[1,0]<stdout>:" (with --timestamp-output a date before it),
# kubectl logs --prefix "[pod/name/container] ", Ray's "(WorkerDict pid=616, ip=10.0.0.1) "
_SLURM_RE = re.compile(r" {0,4}\d{1,5}: ")
_MPI_RE = re.compile(r"(?:[A-Z][a-z]{2} [A-Z][a-z]{2} [ \d]\d \d\d:\d\d:\d\d \d{4})?\[\d+,\d+\]<std(?:out|err)>:")
_KUBECTL_RE = re.compile(r"\[pod/[^\]\s]+\] ")
# a log collector's "[2025-11-06T02:10:00.702Z] "
_BRACKET_ISO_RE = re.compile(r"\[\d{4}-\d\d-\d\dT\d\d:\d\d:\d\d(?:[.,]\d+)?(?:Z|[+-]\d\d:?\d\d)?\] ")
# 0.1.x ModelRpcServer: "Rank 1: load weight begin."
_OLD_RANK_RE = re.compile(r"Rank (\d+): ")
_RAY_RE = re.compile(r"\((?:\w+ )?pid=\d+(?:, ip=[^)\s]*)?\) ")
# SGLang's configure_logger: "[%(asctime)s{.msecs}{prefix}] " with prefix " DP1 PP0 ATTN_CP0 MOE_DP0 TP1 EP1";
# 0.3.x printed the time only ("[10:00:00 TP0] "), the diffusion runtime "[12-16 14:27:08] "
_SGL_RE = re.compile(
    r"\[((?:\d{4}-\d\d-\d\d |\d\d-\d\d )?\d\d:\d\d:\d\d(?:[.,]\d+)?)((?: [A-Za-z_]+\d+)*)[^\]\n]{0,80}\] ?")
_SGL_IN_RE = re.compile(r"\[(?:\d{4}-)?\d\d-\d\d \d\d:\d\d:\d\d")
_RANK_RE = re.compile(r"([A-Za-z_]+)(\d+)")


# " TP3 EP3" -> {"TP": 3, "EP": 3}: a handful of distinct prefixes per log, parsed once each.
# The dicts are shared between LogLines: read them, never change them.
_RANKS: dict[str, dict[str, int]] = {}
# The ranks of every line clean() finds none in (read-only too): one dict for all of them, so the
# tracker's per-rank key of the last line's dict holds across them (PhaseTracker._rank_key).
_NO_RANKS: dict[str, int] = {}


# SGLang's progress bars (nearly half of a start-up's lines) start as no relay's prefix can: two words,
# the first not followed by a date's or Python logging's shape, the second not by compose's "| ". So
# clean() takes them as they are, without trying each prefix in _unwrap (which would leave them as
# they are: tests/test_pipeline_fastpath.py checks it).
_PLAIN_STARTS = ("Capturing batches", "Capturing num tokens", "Multi-thread loading", "Loading safetensors")


# What _SGL_RE reads at the start of a line, by the line's text up to its first "]" and the character
# after it: nothing the pattern matches passes a "]", so that text decides the match, its groups and
# its end. A rank's lines within one second share it ("[2026-07-14 07:49:04 TP0] "): the pattern runs
# once for them all. Bounded: emptied when full.
_PREFIXES: dict[str, tuple[str, dict[str, int], int] | None] = {}
_PREFIXES_KEPT = 4096
# Those of them that clean() reads so whatever follows: no relay's prefix (its test reads the first
# 12 characters, which the text holds), and the pattern matched. clean() looks a line up here first.
_SGL_PREFIXES: dict[str, tuple[str, dict[str, int], int]] = {}


def _relayed(s: str) -> bool:
    """A line starting with "[" that another program's prefix may start (clean() unwraps it first):
    mpirun's "[1,0]<stdout>:", a collector's "[2025-11-06T02:10:00Z] ", kubectl's "[pod/…] "."""
    if s[1:2].isdigit():
        return s[5:6] != "-" or s[11:12] == "T"
    return s[:5] == "[pod/"


def _ranks_of(tags: str) -> dict[str, int]:
    """The ranks of a prefix's tags (" TP3 EP3" -> {"TP": 3, "EP": 3}), each distinct tags' once."""
    if not tags:
        return _NO_RANKS
    ranks = _RANKS.get(tags)
    if ranks is None:
        ranks = {k: int(v) for k, v in _RANK_RE.findall(tags)}
        if len(_RANKS) < 1024:
            _RANKS[tags] = ranks
    return ranks


def _read_prefix(key: str) -> tuple[str, dict[str, int], int] | None:
    """(timestamp, ranks, end of the prefix) of a line that starts with `key`, else None; kept."""
    m = _SGL_RE.match(key)
    read = None
    if m:
        ts, tags = m.group(1, 2)
        read = (ts, _ranks_of(tags), m.end())
    if len(_PREFIXES) >= _PREFIXES_KEPT:
        _PREFIXES.clear()
        _SGL_PREFIXES.clear()
    _PREFIXES[key] = read
    if read is not None and len(key) >= 12 and not _relayed(key):
        _SGL_PREFIXES[key] = read
    return read


def _unwrap(s: str) -> str:
    """Remove what programs that relay the server's output put before each line (a few at most,
    in any order: docker compose's name, then docker's timestamp, …)."""
    for _ in range(4):
        c = s[:1]
        m = None
        if c == "[":
            m = _bracket_wrap(s)
        elif c == ">":  # a Markdown quote
            if s[1:2] in (" ", ""):
                s = s[2:]
                continue
        elif c.isdigit():
            m = _digit_wrap(s)
        elif c == " ":
            if s[1:5].strip()[:1].isdigit():
                m = _SLURM_RE.match(s)
        elif c.isupper():
            m = _upper_wrap(s)
        elif c == "(":
            m = _RAY_RE.match(s)
        if m is None and c != "[":
            bar = s.find("| ", 0, 64)
            # "name  | ": one word before the bar (a progress bar's "…: 50% Completed | 1/2" has several)
            if bar > 0 and " " not in s[:bar].rstrip():
                m = _COMPOSE_RE.match(s)
        if m is None:
            return s
        s = s[m.end():]
    return s


def _bracket_wrap(s: str) -> re.Match[str] | None:
    """kubectl's "[pod/…] ", a collector's "[2026-07-14T…] ", mpirun's "[1,0]<stdout>:"."""
    if s.startswith("[pod/"):
        return _KUBECTL_RE.match(s)
    if s[1:2].isdigit():
        if s[11:12] == "T":
            return _BRACKET_ISO_RE.match(s)
        if s.find("]<std", 2, 14) > 0:
            return _MPI_RE.match(s)
    return None


def _digit_wrap(s: str) -> re.Match[str] | None:
    """A journal's ISO time, docker's timestamp, Slurm's "0: " task label."""
    if s[4:5] == "-" and s[13:14] == ":":
        m = _JOURNAL_RE.match(s) if s[10:11] == "T" else None
        return m or _TS_WRAP_RE.match(s)
    return _SLURM_RE.match(s)


def _upper_wrap(s: str) -> re.Match[str] | None:
    """A journal's "Jul 14 07:49:04 host unit[pid]: ", mpirun's dated tag, Python logging's "INFO:name:"."""
    if s[3:4] == " ":
        if s[9:10] == ":":
            return _JOURNAL_RE.match(s)
        if s[7:8] == " " and s.find("]<std", 20, 40) > 0:
            return _MPI_RE.match(s)
        return None
    if s[:4] in _PYLOG_HEADS and s[s.find(":", 4, 9) + 1:][:1] not in (" ", ""):
        return _PYLOG_RE.match(s)
    return None


def _sgl(s: str, raw: str) -> LogLine:
    """The LogLine of one message that may carry SGLang's "[ts TPn] " prefix."""
    if s[:1] == "[":
        m = _SGL_RE.match(s)
        if m:
            return LogLine(raw, s[m.end():], m.group(1), _ranks_of(m.group(2)))
    elif s[:5] == "Rank " and s[5:6].isdigit():
        m = _OLD_RANK_RE.match(s)
        if m:
            return LogLine(raw, s[m.end():], None, {"TP": int(m.group(1))})
    return LogLine(raw, s, None, {})


def _split_cr(s: str, raw: str) -> LogLine:
    """A line with tqdm's carriage returns: the bar's states, and log lines the bar's output
    joined (``…it/s]\\r[2026-07-14 07:49:04 TP0] Load weight end.``). The last part is the line;
    the earlier log lines (and the bar's state just before each) are its ``extra``."""
    parts: list[str] = []
    for p in s.split("\r"):
        if not p.strip():
            continue
        k = _SGL_IN_RE.search(p, 1) if p[:1] != "[" else None
        if k is not None:  # "…| 4/4 [00:05<00:00][2026-07-14 …] …": the bar, then the log line
            parts.append(p[:k.start()])
            p = p[k.start():]
        parts.append(p)
    if not parts:
        return LogLine(raw, "")
    lines = [_sgl(p, p) for p in parts]
    extra = tuple(ln for i, ln in enumerate(lines[:-1]) if ln.ts is not None or lines[i + 1].ts is not None)
    last = lines[-1]
    if not extra:
        return LogLine(raw, last.text, last.ts, last.ranks)
    return JoinedLine(raw, last.text, last.ts, last.ranks, extra)


def clean(raw: str) -> LogLine:
    """Split a raw log line into message text, SGLang timestamp and rank tags."""
    s = raw
    if s and s[-1] in "\r\n":
        s = s.rstrip("\r\n")
    if "\x1b" in s:
        s = _ANSI_RE.sub("", s)
    if s[:1] == "[":
        read = _SGL_PREFIXES.get(s[:s.find("]") + 2])
        if read is not None and "\r" not in s:  # SGLang's prefix, read before: what the steps below give
            ts, ranks, end = read
            return LogLine(raw, s[end:], ts, ranks)
        if _relayed(s):  # not SGLang's "[2026-07-14 …": mpirun's, a collector's, kubectl's
            s = _unwrap(s)
    elif s and not s.startswith(_PLAIN_STARTS):
        s = _unwrap(s)
    if "\r" in s:
        return _split_cr(s, raw)
    if s[:1] == "[":  # SGLang's prefix: nearly every line takes this path
        key = s[:s.find("]") + 2]  # (no "]": "[", which no prefix matches)
        try:
            read = _PREFIXES[key]
        except KeyError:
            read = _read_prefix(key)
        if read is not None:
            ts, ranks, end = read
            return LogLine(raw, s[end:], ts, ranks)
        return LogLine(raw, s, None, _NO_RANKS)
    if s[:5] == "Rank ":
        return _sgl(s, raw)
    return LogLine(raw, s, None, _NO_RANKS)


# --------------------------------------------------------------------------------------------
# Patterns used after the cheap prefilter
# --------------------------------------------------------------------------------------------

_NUM = r"(-?\d+(?:\.\d+)?)"
# (each literal first, then a look back: the regex engine then scans for the literal, where a leading
# alternation or \b is tried at every character; the same matches, tested on random texts)
_ELAPSED_RE = re.compile(r"elapsed(?:=|(?<=Time elapsed): )" + _NUM)  # "elapsed=" or "Time elapsed: "
_MEM_USAGE_RE = re.compile(r"mem usage=" + _NUM)
_AVAIL_RE = re.compile(r"avail mem=" + _NUM)
_TYPE_RE = re.compile(r"type=([\w.]+)")
_QUANT_RE = re.compile(r"quant=([\w.-]+)")
_KV_RE = re.compile(r"#tokens: (\d+), (?:K size: " + _NUM + r" GB, V size: " + _NUM + r" GB|KV size: " + _NUM + r" GB)")
_DTYPE_RE = re.compile(r"dtype: ([\w.]+)")
_MAMBA_RE = re.compile(
    r"max_mamba_cache_size: (\d+), conv_state size: " + _NUM + r" ?GB, ssm_state size: " + _NUM + r" ?GB"
    r"(?: intermediate_ssm_state_cache size: " + _NUM + r" ?GB intermediate_conv_window_cache size: " + _NUM + r" ?GB)?"
)
_KEYVAL_RE = re.compile(r"(\w+)=" + _NUM)
_BS_RE = re.compile(r"bs(?<!\wbs)[= ]\[([\d,\s]*)\]")  # \bbs[= ]\[…\]
_CAPTURE_RE = re.compile(r"Capture (.*?)\s*\b(\w+) graph (begin|end)\b")
# a tqdm bar: "DESC:  73%|███████▎  | 38/52 [...]" or "DESC:  50% Completed | 2/4 [...]", DESC up to the
# first colon after which the rest follows (see _bar)
_TQDM_TAIL_RE = re.compile(r":\s+(\d+)%(?: Completed \||\|[^|]{0,80}\|) (\d+)/(\d+)")
_NCCL_RE = re.compile(r"nccl==(\S+)")
_URL_RE = re.compile(r"Uvicorn running on (\S+)")
_PORT_RE = re.compile(r":(\d+)/?$")
_ACCESS_RE = re.compile(r'"(GET|POST) (\S+) HTTP/[\d.]+" (\d{3})')
_FRAME_RE = re.compile(r'\s*File "([^"]*)", line (\d+), in (.+)$')
_EXC_RE = re.compile(
    r"(?:[A-Za-z_]\w*\.)*(?=[A-Za-z_])\w*(?:Error|Exception|Exit|Interrupt|Timeout|Failure|Warning|Abort)(?::|$)"
)

_TB_MARK = "Traceback (most recent call last)"
_TB_ENDS_LOG = "(the log ends inside this traceback)"
_TB_CUT = "(the traceback stops before its exception line)"
_TB_NO_EXC = (_TB_ENDS_LOG, _TB_CUT)
_FRAME_STARTS = ('  File "', 'File "')
_INLINE_FRAME_SPLIT = re.compile(r"\s+(?=File \")")
_INLINE_FRAME_RE = re.compile(r'File "[^"]*", line \d+, in [\w<>.]+')
_INLINE_EXC_RE = re.compile(
    r"(?:(?<=\s)|^)(?:[A-Za-z_]\w*\.)*[A-Za-z_]\w*(?:Error|Exception|Exit|Interrupt|Timeout|Failure|Abort)(?::|$)")
_PROFILED_RE = re.compile(r"profiled value (-?\d+)")
_RUNNING = ("Decode batch", "Prefill batch")
_WARNING_RE = re.compile(r"(?:[A-Za-z_]\w*\.)*\w*Warning:")
_ORPHAN_REACH = 40  # lines from an orphan exception line to the fatal line it explains
# Exception messages that say where the server was, when no frame does.
_EXC_HINTS: tuple[tuple[str, str], ...] = (
    ("Capture cuda graph failed", "cuda_graph"),
    ("Not enough memory. Please try to increase --mem-fraction-static", "kv_cache"),
    ("Cannot find any model weights", "weights"),
    ("atchdog timeout (", "ready"),  # SGLang's watchdog guards the event loop's batches
)
# Lines that say the server (or one of its processes) is gone, without a traceback: SGLang's own
# (engine.py "Received sigquit from a child process" (0.4.x: "…child proces."), the watchdog
# (0.4.x "Watchdog timeout (…)", 0.5.x "{name} watchdog timeout (…)"), http_server.py "Initialization
# failed", multimodal_gen launch_server.py "Rank N scheduler is dead" and "Exit code: N"), the
# shell's "Killed" (the OOM killer's SIGKILL) and faulthandler's "Fatal Python error".
_FATAL_STARTS = ("Received sigquit", "Initialization failed", "Watchdog timeout", "Fatal Python error")
_READY_GRACE = 5  # lines to wait for the ready line after a successful warmup request
_CHAIN_MARKS = (
    "During handling of the above exception",
    "The above exception was the direct cause",
)
# Lines that end an exception message's continuation lines.
_NOT_CONTINUATION = ("INFO:", "WARNING:", "ERROR:", "DEBUG:", "CRITICAL:", "Loading ", "Capturing", "Multi-thread", "[")

# The prefilter: a message that starts with none of these (and contains none of the few
# substrings checked after it) cannot change anything.
_STARTS = (
    "server_args=",
    "Init torch distributed",
    "Init parallel",
    "Memory baseline taken",
    "sglang is using nccl",
    "Load weight",
    "Loading ",
    "Multi-thread loading",
    "KV Cache ",
    "Mamba Cache is allocated",
    "Memory pool end",
    "Post-capture KV sizing:",
    "Capture",
    "Capturing",
    "max_total_num_tokens=",
    "The server is fired up",
    "Dummy health check server started",
    "Initialization failed",
    "Received sigquit",
    "Rank ",
    "Exit code: ",
    "Killed",
    "Watchdog timeout",
    "Fatal Python error",
    "max_total_tokens=",
    "load weight ",
    "INFO:",
    "WARNING:",
    "ERROR:",
)
# The same prefixes by their first character (the fast path: every line tests the few that can match
# its first character instead of all of them; a line starts with one of _STARTS exactly when it
# starts with one of its first character's).
_STARTS_BY_CHAR: dict[str, tuple[str, ...]] = {}
for _p in _STARTS:
    _STARTS_BY_CHAR[_p[0]] = _STARTS_BY_CHAR.get(_p[0], ()) + (_p,)
del _p
# tqdm's progress bars, nearly half of a start-up's lines: read before the other line starts
_BARS = ("Capturing", "Multi-thread loading", "Loading ")
_UVICORN_LEVELS = ("INFO:", "WARNING:", "ERROR:", "DEBUG:", "CRITICAL:")
_UVICORN_HTTP = (
    "Started server process",
    "Waiting for application startup",
    "Application startup complete",
    "Uvicorn running on",
)

# Traceback frames -> phase, searched from the outermost frame inwards: the outermost frame
# that names a startup step is the step that was running (inner frames such as pynccl or
# memory_pool are also used by later steps).
_FRAME_RULES: tuple[tuple[str, tuple[str, ...], tuple[str, ...]], ...] = (
    (
        # the scheduler's event loop runs batches: the server was serving (0.1.x: ModelRpcServer's
        # exposed_step, ModelTpServer's forward_step / forward_fill_batch / forward_decode_batch)
        "ready",
        ("event_loop_overlap", "event_loop_normal", "event_loop_pp", "exposed_step", "forward_fill_batch", "forward_thread_func",
         "forward_decode_batch", "process_batch_result", "run_batch"),
        (),
    ),
    (
        "cuda_graph",
        ("init_device_graphs", "init_cuda_graphs", "init_all_cuda_graphs", "capture_cuda_graphs",
         "capture_decode_graph", "capture_prefill_graph", "init_piecewise_cuda_graphs", "_capture_cuda_graphs",
         "capture_one_batch_size", "_capture_one_stream", "_capture_graph"),
        ("cuda_graph_runner", "cuda_graph_setup", "graph_runner.py"),
    ),
    (
        "weights",
        ("load_model", "load_weights", "finalize_startup_weight_load"),
        ("model_loader/", "startup_weight_load", "weight_utils"),
    ),
    (
        "kv_cache",
        ("init_memory_pool", "profile_max_num_token", "_resolve_memory_pool_config", "alloc_memory_pool"),
        ("memory_pool", "kv_cache_configurator", "pool_configurator", "kv_cache_mixin"),
    ),
    (
        "dist_init",
        ("init_torch_distributed", "init_distributed_environment", "initialize_model_parallel",
         "ncclCommInitRank", "init_parallel_runtime", "init_model_parallel_group"),
        ("pynccl", "distributed/bootstrap"),
    ),
    ("starting", ("prepare_server_args",), ("server_args.py",)),
)
# Frames that say a phase only by a function of a file together: building a process group's
# coordinator and its shared-memory broadcast queue (GroupCoordinator.__init__ makes the
# MessageQueue) is dist_init; the same files' other functions run while serving too.
_FRAME_PAIRS: tuple[tuple[str, str, str], ...] = (
    ("dist_init", "distributed/parallel_state.py", "__init__"),
    ("dist_init", "device_communicators/shm_broadcast.py", "__init__"),
)
_DRAFT_FUNCS = ("draft",)
_DRAFT_PATHS = ("eagle_worker", "draft", "mtp_worker", "uno_worker", "standalone_worker", "dflash_worker")


def _infer_from_frames(frames: list[tuple[str, str, str, str]]) -> tuple[str | None, tuple[str, str, str, str] | None]:
    """(phase, frame that said so) from frames listed outermost first."""
    found: tuple[str | None, tuple[str, str, str, str] | None] = (None, None)
    for fr in frames:
        _, path, func, _ = fr
        for phase, funcs, paths in _FRAME_RULES:
            if any(n in func for n in funcs) or any(n in path for n in paths):
                found = (phase, fr)
                break
        else:
            found = next(((phase, fr) for phase, where, name in _FRAME_PAIRS if func == name and path.endswith(where)),
                         found)
        if found[0] is not None:
            break
    if found[0] == "ready":  # a draft model's frames inside a serving loop are a serving crash
        return found
    for fr in frames:
        _, path, func, _ = fr
        base = path.rsplit("/", 1)[-1]
        if any(n in func for n in _DRAFT_FUNCS) or any(n in base for n in _DRAFT_PATHS):
            return "draft", fr
    return found


def _hint_phase(text: str) -> str | None:
    return next((phase for needle, phase in _EXC_HINTS if needle in text), None)


def _is_fatal_line(t: str) -> bool:
    if t.startswith("Killed"):
        return t.rstrip() == "Killed"
    if t.startswith(_FATAL_STARTS):
        return True
    if t.startswith("Rank ") and " is dead" in t:
        return True
    if t.startswith("Exit code: "):
        return t[11:].strip() not in ("0", "")
    return "watchdog timeout (" in t


def _bar(t: str) -> tuple[str, str, str] | None:
    """(description, done, total) of a tqdm bar's line, else None. The same as matching
    ``(.*?)`` then the tail at the start, by searching for the tail (one scan for its colon, where the
    lazy ``.*?`` tried the tail at every character): the leftmost place it matches is the first colon
    the lazy form would take, unless a newline comes before it, which ``.`` would not cross."""
    m = _TQDM_TAIL_RE.search(t)
    if m is None:
        return None
    desc = t[:m.start()]
    if "\n" in desc:
        return None
    return desc, m.group(2), m.group(3)


def _short(text: str, limit: int = 500) -> str:
    return text if len(text) <= limit else text[:limit] + "…"


def _f(rx: re.Pattern, text: str) -> float | None:
    m = rx.search(text)
    return float(m.group(1)) if m else None


# batch-size lists as written ("1, 2, 4, …, 512") read: every rank, every start writes the same few
_BS_READ: dict[str, tuple[int, ...]] = {}


def _bs_list(text: str) -> tuple[int, ...] | None:
    m = _BS_RE.search(text)
    if not m:
        return None
    written = m.group(1)
    bs = _BS_READ.get(written)
    if bs is None:
        bs = tuple(int(x) for x in written.replace(",", " ").split())
        if len(_BS_READ) >= 256:
            _BS_READ.clear()
        _BS_READ[written] = bs
    return bs


@functools.lru_cache(maxsize=64)
def _graph_key(name: str) -> tuple[bool, str]:
    """'target verify' -> (False, 'graph'); 'draft extend' -> (True, 'extend_graph'); 'piecewise' -> 'piecewise_graph'."""
    words = name.lower().replace("-", "_").split()
    draft = "draft" in words
    rest = [w for w in words if w not in ("target", "draft", "decode", "verify")]
    return draft, ("_".join(rest) + "_graph") if rest else "graph"


# --------------------------------------------------------------------------------------------
# Traceback state
# --------------------------------------------------------------------------------------------

_TB_FRAMES, _TB_AFTER, _TB_CHAIN = 0, 1, 2


class _Part:
    __slots__ = ("frames", "exc")

    def __init__(self) -> None:
        self.frames: list[tuple[str, str, str, str]] = []  # (File line, path, func, code)
        self.exc: list[str] = []


class _Tb:
    __slots__ = ("start", "sglang", "parts", "state", "miss", "cont", "fatal", "flat", "headless")

    def __init__(self, start: int, sglang: str | None, fatal: bool) -> None:
        self.start = start
        self.sglang = sglang
        self.parts = [_Part()]
        self.state = _TB_FRAMES
        self.miss = 0
        self.cont = 0
        self.fatal = fatal
        self.flat = False  # frames without their indentation (a paste lost it)
        self.headless = False  # frames without a "Traceback" header (a paste cut it)


# --------------------------------------------------------------------------------------------
# The tracker
# --------------------------------------------------------------------------------------------


class PhaseTracker:
    """Feed lines; keeps the current phase (never goes backwards; a draft model's second
    ``Load weight begin`` after cuda_graph is phase ``draft``), progress, the numbers seen,
    whether it crashed (and the crash lines + inferred phase), and ready.

    Attributes: ``phase`` (None before the first line), ``outcome``, ``crash``, ``numbers``,
    ``progress`` (by phase), ``last_phase_line`` (text of the last line that moved or confirmed
    the current phase), ``phase_events`` (every PhaseChange so far), ``info`` (strings:
    ``model_type``, ``draft_model_type``, ``quant``, ``kv_dtype``, ``nccl_version``, ``url``),
    ``graph_batch_sizes`` (capture name -> batch sizes), ``ready_line_no``, ``ready_inferred``
    (ready taken from uvicorn + a successful warmup request because the ready line was missing),
    ``line_no`` (lines fed).
    """

    def __init__(self) -> None:
        self.phase: str | None = None
        self.crash: Crash | None = None
        self.numbers: dict[str, float] = {}
        self.progress: dict[str, Progress] = {}
        self.last_phase_line: str | None = None
        self.phase_events: list[PhaseChange] = []
        self.info: dict[str, str] = {}
        self.graph_batch_sizes: dict[str, tuple[int, ...]] = {}
        self.ready_line_no: int | None = None
        self.ready_inferred = False
        self.line_no = 0
        self._pi = -1  # index of self.phase
        self._open = False  # the current phase's last line was a "begin" (not an "end")
        self._uvicorn_up = False
        self._warmup_ok: tuple[int, LogLine] | None = None
        self._rank_phase: dict[tuple, int] = {}
        self._counts: dict[tuple, int] = {}
        self._owner: dict[str, tuple] = {}
        self._draft_loading = False
        self._tb: _Tb | None = None
        self._crash_tb: _Tb | None = None
        self._last_fatal: tuple[int, str] | None = None
        self._orphan_exc: tuple[int, str] | None = None
        self._resumed = -1  # the phase a resumed tracker starts in, for every rank
        self._rk_of: dict[str, int] | None = None  # the ranks dict _rank_key saw last, and its key
        self._rk: tuple = ()

    def resume(self, phase: str) -> None:
        """Continue a run whose earlier lines another tracker read (a watch reattached at its
        stored position): start in `phase`, emitting nothing for it."""
        self._pi = self._resumed = _IDX[phase]
        self.phase = phase
        self._open = True

    # -- public ------------------------------------------------------------------------------

    @property
    def outcome(self) -> str:
        if self.crash is not None and (self.ready_line_no is None or self.crash.line_no > self.ready_line_no):
            return "crashed"
        if self.ready_line_no is not None:
            return "ready"
        return "incomplete"

    def feed(self, raw: str | LogLine) -> list[Change]:
        """Process one line; return what it changed (phase events, progress, numbers, crash)."""
        self.line_no += 1
        ln = raw if isinstance(raw, LogLine) else clean(raw)
        out: list[Change] = []
        if type(ln) is JoinedLine:  # log lines tqdm's \r joined before this one
            for part in ln.extra:
                self._line(part, out)
        self._line(ln, out)
        return out

    def _line(self, ln: LogLine, out: list[Change]) -> None:
        """One logical line (a raw line's text, or one of its ``extra`` lines)."""
        t = ln.text
        if self._pi < 0 and t.strip():
            self._enter(ln, "starting", None, out)
        if self._warmup_ok is not None and self.line_no - self._warmup_ok[0] >= _READY_GRACE:
            self._infer_ready(out)
        if self._tb is not None and self._tb_feed(ln, out):
            return
        if t.startswith(_BARS):  # (each begins with one of _STARTS: _dispatch's first step for them)
            self._bar_line(ln, t, out)
            return
        starts = _STARTS_BY_CHAR.get(t[:1])
        if starts is not None and t.startswith(starts):  # t.startswith(_STARTS), by its first character
            self._dispatch(ln, t, out)
        else:
            self._unstarted(ln, t, out)

    def _unstarted(self, ln: LogLine, t: str, out: list[Change]) -> None:
        """A line that starts with none of _STARTS: a crash's, a pool's, a headless frame, a batch
        line, torch's rendezvous client, or an exception line with no traceback open."""
        # (each substring test behind a one-character test of a letter it holds, a memchr: the lines
        # that get here, a running server's batch lines among them, mostly lack the letter)
        if ("T" in t and "Traceback (most recent" in t) or ("x" in t and " hit an exception" in t) \
                or ("m" in t and "atchdog timeout" in t):
            self._fatal(ln, t, out)
        elif "C" in t and ("Cache is allocated" in t or "Cache VA upper bound" in t):
            # labelled pools: "{label} KV Cache is allocated." (0.5.23 memory_pool.py:2087)
            self._kv_line(ln, t, out)
        elif t.startswith(_FRAME_STARTS) and ln.ts is None:
            self._headless_frame(ln, t, out)
        elif self.ready_line_no is None and t.startswith(_RUNNING):
            # The server runs batches: it was up (a log excerpt that starts while it serves). A
            # Prefill batch is also the warmup request's, so only it alone, with no start seen, says so.
            if t[0] == "D" or self._pi <= 0:
                self._ready(ln, out, inferred=True)
        elif t[:1] == "[" and "[c10d]" in t and ("client socket has timed out" in t or "failed to connect" in t):
            self._enter(ln, "dist_init", "open", out)  # torch's TCPStore client, at the rendezvous
        elif ln.ts is None and self._pi < _I_HTTP and _EXC_RE.match(t) and not _WARNING_RE.match(t):
            # an exception line with no traceback open: a paste that cut the traceback above it
            self._orphan_exc = (self.line_no, t.strip())

    def idle(self) -> list[Change]:
        """The stream has been quiet for a while (a follower's timer, a few seconds): settle a
        ready that only uvicorn and a successful warmup request announced (the ready line is
        missing from some servers' logs). Without it that happens _READY_GRACE lines later."""
        out: list[Change] = []
        if self._warmup_ok is not None:
            self._infer_ready(out)
        return out

    def finish(self) -> list[Change]:
        """The log ended: settle a traceback that was cut off and a pending inferred ready."""
        out: list[Change] = []
        tb = self._tb
        if tb is not None and tb.state == _TB_FRAMES and tb.parts[-1].frames and tb.fatal:
            tb.parts[-1].exc.append(_TB_ENDS_LOG)
            self._tb_exception(tb, out)
        elif tb is not None and tb.sglang is not None and not tb.parts[-1].frames and len(tb.parts) == 1 \
                and _is_fatal_line(tb.sglang) and self._crash_open():
            # the log ends on a fatal line's "Traceback" header (a paste cut there): SGLang kills
            # itself after that line (warmup's "Initialization failed", a scheduler's sigquit), so it
            # says the server died, as it does with no traceback after it
            phase, src = self._crash_phase(_hint_phase(tb.sglang))
            self.crash = Crash(phase, tb.start, tb.sglang, (tb.sglang,), src)
            self._crash_tb = None
            out.append(self.crash)
        self._tb = None
        if self._warmup_ok is not None:
            self._infer_ready(out)
        return out

    # -- phases ------------------------------------------------------------------------------

    def _enter(self, ln: LogLine, phase: str, state: str | None, out: list[Change], line_no: int | None = None) -> str:
        """A line that belongs to ``phase`` (state "open"/"close"/None). Returns the phase it was
        taken as (a draft model's repeat of dist_init/weights/kv_cache becomes ``draft``)."""
        ranks = ln.ranks
        rk = self._rk if ranks is self._rk_of else self._rank_key(ranks)  # _rank_key(), its fast path inline
        rp = self._rank_phase.get(rk, self._resumed)
        if phase in _DRAFT_REPEATS and rp >= _I_CUDA_GRAPH:
            phase = "draft"
        i = _IDX[phase]
        if i > rp:
            self._rank_phase[rk] = i
        if i > self._pi:
            self._pi = i
            self.phase = phase
            ev = PhaseChange(phase, line_no or self.line_no, _short(ln.text), ln.ts)
            self.phase_events.append(ev)
            out.append(ev)
            self._open = True
        if i == self._pi:
            t = ln.text
            self.last_phase_line = t if len(t) <= 500 else _short(t)  # _short(t), minus a call for a short line
            if state is not None:
                self._open = state == "open"
        return phase

    def _rank_key(self, ranks: dict[str, int]) -> tuple:
        """``tuple(ranks.items())``: the key of a line's ranks in the per-rank tables. The fast path:
        clean() gives every line of one rank prefix the same (read-only) dict, so the key of the
        last dict seen is kept and reused while the next lines carry that same dict."""
        if ranks is self._rk_of:
            return self._rk
        self._rk_of = ranks
        self._rk = rk = tuple(ranks.items())
        return rk

    def _count(self, ln: LogLine, marker: str) -> int:
        key = (self._rank_key(ln.ranks), marker)
        n = self._counts.get(key, 0) + 1
        self._counts[key] = n
        return n

    def _numbers(self, ln: LogLine, vals: Mapping[str, float | None], out: list[Change]) -> None:
        rk = self._rank_key(ln.ranks)
        changed: dict[str, float] = {}
        for k, v in vals.items():
            if v is None:
                continue
            own = self._owner.get(k)
            if own is not None and rk > own:
                continue
            self._owner[k] = rk
            if self.numbers.get(k) != v:
                self.numbers[k] = v
                changed[k] = v
        if changed:
            out.append(Numbers(changed))

    def _progress(self, key: str, done: int, total: int | None, what: str, out: list[Change]) -> None:
        old = self.progress.get(key)
        if old is not None and old.done == done and old.total == total and old.what == what:
            return  # the bar redrawn at the same count (no Progress made for it)
        p = Progress(key, done, total, what)
        self.progress[key] = p
        out.append(p)

    def _complete_progress(self, key: str, out: list[Change]) -> None:
        p = self.progress.get(key)
        if p is not None and p.total is not None and p.done < p.total:
            self._progress(key, p.total, p.total, p.what, out)

    # -- dispatch ----------------------------------------------------------------------------

    def _dispatch(self, ln: LogLine, t: str, out: list[Change]) -> None:
        """A line that starts with one of _STARTS: the first rule of its first character's row in
        _DISPATCH whose prefix it starts with reads it (none: the line says nothing here)."""
        c = t[0]
        if c == "l":  # 0.1.x "load weight begin." / "load weight end."
            t = "L" + t[1:]
            c = "L"
        for prefix, handler in _DISPATCH.get(c, _DISPATCH_OTHER):
            if t.startswith(prefix):
                handler(self, ln, t, out)
                return

    # -- the lines _dispatch hands on (each names its line in _DISPATCH) -----------------------

    def _mamba(self, ln: LogLine, t: str, out: list[Change]) -> None:
        p = self._enter(ln, "kv_cache", "open", out)
        pre = "draft_" if (p == "draft" or self._count(ln, "mamba") > 1) else ""
        m = _MAMBA_RE.search(t)
        if m:
            g = m.groups()
            self._numbers(
                ln,
                {
                    pre + "mamba_cache_size": float(g[0]),
                    pre + "mamba_conv_state_gb": float(g[1]),
                    pre + "mamba_ssm_state_gb": float(g[2]),
                    pre + "mamba_intermediate_ssm_gb": float(g[3]) if g[3] else None,
                    pre + "mamba_intermediate_conv_gb": float(g[4]) if g[4] else None,
                },
                out,
            )

    def _pool_end(self, ln: LogLine, t: str, out: list[Change]) -> None:
        p = self._enter(ln, "kv_cache", "close", out)
        pre = "draft_" if (p == "draft" or self._count(ln, "pool") > 1) else ""
        av = _f(_AVAIL_RE, t)
        self._numbers(ln, {pre + "pool_avail_mem_gb": av, "avail_mem_gb": av}, out)

    def _baseline(self, ln: LogLine, t: str, out: list[Change]) -> None:
        p = self._enter(ln, "dist_init", "close", out)
        pre = "draft_" if (p == "draft" or self._count(ln, "baseline") > 1) else ""
        self._numbers(ln, {pre + "dist_init_mem_usage_gb": _f(_MEM_USAGE_RE, t)}, out)

    def _dist_begin(self, ln: LogLine, t: str, out: list[Change]) -> None:
        self._enter(ln, "dist_init", "open", out)

    def _dist_end(self, ln: LogLine, t: str, out: list[Change]) -> None:
        p = self._enter(ln, "dist_init", "close", out)
        pre = "draft_" if (p == "draft" or self._count(ln, "dist_end") > 1) else ""
        vals: dict[str, float | None] = {pre + "dist_init_elapsed_s": _f(_ELAPSED_RE, t)}
        mu = _f(_MEM_USAGE_RE, t)
        if mu is not None:
            vals[pre + "dist_init_mem_usage_gb"] = mu
        self._numbers(ln, vals, out)

    def _load_begin(self, ln: LogLine, t: str, out: list[Change]) -> None:
        n = self._count(ln, "load")
        p = self._enter(ln, "weights", "open", out)
        draft = p == "draft" or n > 1
        self._draft_loading = draft
        pre = "draft_" if draft else ""
        av = _f(_AVAIL_RE, t)
        self._numbers(ln, {pre + "load_begin_avail_mem_gb": av, "avail_mem_gb": av}, out)

    def _load_end(self, ln: LogLine, t: str, out: list[Change]) -> None:
        if "Committed real weights" in t:
            m = re.search(r"in " + _NUM + " s", t)
            self._numbers(ln, {"weights_commit_elapsed_s": float(m.group(1)) if m else None}, out)
            return
        n = self._count(ln, "load_end")
        p = self._enter(ln, "weights", "close", out)
        pre = "draft_" if (p == "draft" or n > 1) else ""
        av, mu = _f(_AVAIL_RE, t), _f(_MEM_USAGE_RE, t)
        self._numbers(
            ln,
            {
                pre + "load_elapsed_s": _f(_ELAPSED_RE, t),
                pre + "weights_avail_mem_gb": av,
                pre + "weights_mem_usage_gb": mu,
                "avail_mem_gb": av,
                "mem_usage_gb": mu,
            },
            out,
        )
        m = _TYPE_RE.search(t)
        if m:
            self.info[pre + "model_type"] = m.group(1)
        m = _QUANT_RE.search(t)
        if m:
            self.info[pre + "quant"] = m.group(1)
        self._complete_progress("draft" if p == "draft" else "weights", out)

    def _nccl(self, ln: LogLine, t: str, out: list[Change]) -> None:
        self._enter(ln, "dist_init", None, out)
        m = _NCCL_RE.search(t)
        if m:
            self.info["nccl_version"] = m.group(1)

    def _post_capture(self, ln: LogLine, t: str, out: list[Change]) -> None:
        m = _KV_RE.search(t)
        if m:
            pre = "draft_" if "draft KV cache" in t else ""
            g = m.groups()
            vals = {pre + "kv_tokens": float(g[0]), pre + "kv_size_gb": float(g[3]) if g[3] else None}
            av = _f(_AVAIL_RE, t)
            if av is not None:
                vals["avail_mem_gb"] = av
            self._numbers(ln, vals, out)

    def _max_total_tokens(self, ln: LogLine, t: str, out: list[Change]) -> None:
        # "max_total_tokens=N is larger than the profiled value P" (model_runner_kv_cache_mixin.py:817,
        # 0.4.x model_runner.py): the memory pool is being sized
        self._enter(ln, "kv_cache", "open", out)
        m = _PROFILED_RE.search(t)
        if m:
            self._numbers(ln, {"profiled_max_tokens": float(m.group(1))}, out)

    def _key_values(self, ln: LogLine, t: str, out: list[Change]) -> None:
        """``max_total_num_tokens=…, chunked_prefill_size=…, …`` (the scheduler's line)."""
        vals = {}
        for k, v in _KEYVAL_RE.findall(t):
            if k in ("available_gpu_mem", "available_cpu_mem"):
                k += "_gb"
            vals[k] = float(v)
        self._numbers(ln, vals, out)

    def _fired_up(self, ln: LogLine, t: str, out: list[Change]) -> None:
        # also "Dummy health check server started": a node beyond node 0 of a multi-node server
        # (engine.py: its schedulers run, it serves only /health): as ready as that node gets
        self._ready(ln, out, inferred=False)

    # -- line kinds --------------------------------------------------------------------------

    def _bar_line(self, ln: LogLine, t: str, out: list[Change]) -> None:
        """A tqdm bar's line (one of _BARS): the CUDA graphs' capture ("Capturing …": batch sizes,
        token counts, prefill shapes) or the weights' shards ("Multi-thread loading shards",
        "Loading safetensors checkpoint shards")."""
        bar = _bar(t)
        if bar is None:
            return
        desc, done, total = bar
        if t[0] == "C":
            phase = "draft" if self._pi == _I_DRAFT else "cuda_graph"
            self._enter(ln, phase, None, out)
            what = "batch sizes" if desc.startswith("Capturing batches") else (
                "num tokens" if desc.startswith("Capturing num tokens") else "prefill shapes")
            self._progress(phase, int(done), int(total), what, out)
        elif "shards" in desc:
            p = self._enter(ln, "weights", None, out)
            key = "draft" if (p == "draft" or self._pi == _I_DRAFT) else "weights"
            what = DRAFT_SHARDS if (key == "weights" and self._draft_loading) else "shards"
            self._progress(key, int(done), int(total), what, out)

    def _kv_line(self, ln: LogLine, t: str, out: list[Change]) -> None:
        if "Cache is allocated" not in t and "Cache VA upper bound" not in t:
            return
        m = _KV_RE.search(t)
        if not m:
            return
        p = self._enter(ln, "kv_cache", "open", out)
        pre = "draft_" if (p == "draft" or self._count(ln, "kv") > 1) else ""
        g = m.groups()
        if g[3] is not None:
            vals = {pre + "kv_tokens": float(g[0]), pre + "kv_size_gb": float(g[3])}
        else:
            k, v = float(g[1]), float(g[2])
            vals = {pre + "kv_tokens": float(g[0]), pre + "k_size_gb": k, pre + "v_size_gb": v,
                    pre + "kv_size_gb": round(k + v, 2)}
        self._numbers(ln, vals, out)
        d = _DTYPE_RE.search(t)
        if d:
            self.info[pre + "kv_dtype"] = d.group(1)

    def _capture(self, ln: LogLine, t: str, out: list[Change]) -> None:
        if t.startswith("Capture cuda graph bs"):
            bs = _bs_list(t)
            phase = self._enter(ln, "cuda_graph", None, out)
            if phase == "draft":  # never logged by the draft runners, but stay consistent
                return
            if bs:
                self.graph_batch_sizes["graph"] = bs
                self._numbers(ln, {"graph_batch_sizes": float(len(bs)), "graph_max_bs": float(max(bs))}, out)
                cur = self.progress.get("cuda_graph")
                if cur is None or cur.total != len(bs):
                    self._progress("cuda_graph", 0, len(bs), "batch sizes", out)
            return
        m = _CAPTURE_RE.match(t)
        if not m:
            return
        draft, base = _graph_key(m.group(1))
        begin = m.group(3) == "begin"
        phase = self._enter(ln, "draft" if draft else "cuda_graph", "open" if begin else "close", out)
        key = ("draft_" + base) if phase == "draft" else base
        av = _f(_AVAIL_RE, t)
        bs = _bs_list(t)
        vals: dict[str, float | None]
        if begin:
            vals = {key + "_begin_avail_mem_gb": av, "avail_mem_gb": av}
        else:
            mu = _f(_MEM_USAGE_RE, t)
            vals = {key + "_elapsed_s": _f(_ELAPSED_RE, t), key + "_mem_usage_gb": mu, key + "_avail_mem_gb": av,
                    "avail_mem_gb": av, "mem_usage_gb": mu}
        if begin:
            cur = self.progress.get(phase)
            if bs:
                self._progress(phase, 0, len(bs), "batch sizes", out)
            elif cur is not None and cur.done == cur.total:
                self._progress(phase, 0, None, "batch sizes", out)  # a new capture started
        if bs:
            self.graph_batch_sizes[key] = bs
            vals[key + "_batch_sizes"] = float(len(bs))
            vals[key + "_max_bs"] = float(max(bs))
        self._numbers(ln, vals, out)
        if not begin:
            self._complete_progress(phase, out)

    def _uvicorn(self, ln: LogLine, t: str, out: list[Change]) -> None:
        msg = t[t.index(":") + 1:].lstrip()
        if msg.startswith(_UVICORN_HTTP):
            self._uvicorn_up = True
            self._enter(ln, "http", "open", out)
            if msg.startswith("Uvicorn running on"):
                m = _URL_RE.search(msg)
                if m:
                    self.info["url"] = m.group(1)
                    pm = _PORT_RE.search(m.group(1))
                    if pm:
                        self._numbers(ln, {"http_port": float(pm.group(1))}, out)
            return
        if msg.startswith("The server is fired up"):  # the http_server logger routed through uvicorn's
            self._ready(ln, out, inferred=False)
            return
        if self._uvicorn_up and self.ready_line_no is None and self._warmup_ok is None and '" 200' in msg:
            m = _ACCESS_RE.search(msg)
            if m and m.group(3) == "200" and (m.group(1) == "POST" or m.group(2).startswith("/health")):
                # The warmup request (or /health: 503 until warmup is done) succeeded. The ready
                # line normally follows at once; when it has not come _READY_GRACE lines later
                # (or when the log ends), it is missing from this log, not the readiness.
                self._warmup_ok = (self.line_no, ln)

    def _ready(self, ln: LogLine, out: list[Change], inferred: bool) -> None:
        self._warmup_ok = None
        self._enter(ln, "ready", "open", out)
        if self.ready_line_no is None:
            self.ready_line_no = self.line_no
            self.ready_inferred = inferred

    def _infer_ready(self, out: list[Change]) -> None:
        assert self._warmup_ok is not None
        line_no, ln = self._warmup_ok
        self._warmup_ok = None
        if self.ready_line_no is not None or (self.crash is not None and self.crash.line_no > line_no):
            return
        self._enter(ln, "ready", "open", out, line_no=line_no)
        self.ready_line_no = line_no
        self.ready_inferred = True

    # -- crashes -----------------------------------------------------------------------------

    def _fatal(self, ln: LogLine, t: str, out: list[Change]) -> None:
        """An SGLang fatal line, or any line that starts a traceback."""
        k = t.find(_TB_MARK)
        if k >= 0:
            head = t[:k].strip()
            sglang = head or None
            start = self.line_no
            if sglang is None and self._last_fatal is not None and self.line_no - self._last_fatal[0] <= 3:
                start, sglang = self._last_fatal
            # Before uvicorn is up every traceback that ends in an exception is taken as fatal
            # (the launcher's own, e.g. a ServerArgs ValueError, has no SGLang line). After it,
            # only one that an SGLang fatal line introduces: warnings logged with exc_info and
            # failed requests ("Exception in ASGI application") leave the server running.
            fatal = self._pi < _I_HTTP or sglang is not None
            self._tb = _Tb(start, sglang, fatal)
            rest = t[k + len(_TB_MARK):].lstrip(":").strip()
            if rest:
                self._inline_tb(rest, out)
            return
        if " hit an exception" in t:
            # the traceback follows on the next line(s)
            self._last_fatal = (self.line_no, t)
            return
        if _is_fatal_line(t):
            self._last_fatal = (self.line_no, t)
            if self._crash_open():
                orphan = self._orphan_exc
                if orphan is not None and self.line_no - orphan[0] <= _ORPHAN_REACH:
                    # "…Error: why" then "Rank 0 scheduler is dead": the exception says why
                    phase, src = self._crash_phase(_hint_phase(orphan[1]))
                    self.crash = Crash(phase, orphan[0], orphan[1], (orphan[1], t.strip()), src)
                else:
                    phase, src = self._crash_phase(_hint_phase(t))
                    self.crash = Crash(phase, self.line_no, t.strip(), (t.strip(),), src)
                self._crash_tb = None
                out.append(self.crash)

    def _crash_open(self) -> bool:
        """Whether a crash now is the first one: none yet, or the one before the server got ready
        (a server that was up and then died crashed, whatever happened before its ready line)."""
        c = self.crash
        return c is None or (self.ready_line_no is not None and c.line_no <= self.ready_line_no)

    def _headless_frame(self, ln: LogLine, t: str, out: list[Change]) -> None:
        """A traceback frame with no traceback open: the paste was cut before the ``Traceback``
        header. Frames that end in an exception are a traceback like any other."""
        if not _FRAME_RE.match(t):
            return
        start, sglang = self.line_no, None
        if self._last_fatal is not None and self.line_no - self._last_fatal[0] <= 3:
            start, sglang = self._last_fatal
        tb = _Tb(start, sglang, self._pi < _I_HTTP or sglang is not None)
        tb.headless = True
        self._tb = tb
        self._tb_feed(ln, out)

    def _inline_tb(self, rest: str, out: list[Change]) -> None:
        """A traceback pasted on the line of its header (newlines lost, or escaped as ``\\n``)."""
        if "\\n" in rest:
            pieces = rest.split("\\n")
        else:
            pieces = []
            for chunk in _INLINE_FRAME_SPLIT.split(rest):
                m = _INLINE_FRAME_RE.match(chunk)
                if not m:
                    if chunk.strip():
                        pieces.append(chunk.strip())
                    continue
                pieces.append("  " + m.group(0).rstrip())
                tail = chunk[m.end():].strip()
                exc = None
                for exc in _INLINE_EXC_RE.finditer(tail):  # noqa: B007  (the last one: read after the loop)
                    pass
                code, final = (tail[:exc.start()].strip(), tail[exc.start():].strip()) if exc else (tail, "")
                if code:
                    pieces.append("    " + code)
                if final:
                    pieces.append(final)
        for piece in pieces:
            if self._tb is None:
                return
            self._tb_feed(LogLine(piece, piece), out)

    def _crash_phase(self, frames_phase: str | None) -> tuple[str | None, str]:
        cur = self.phase
        if cur is not None and cur != "starting" and self._open:
            return cur, "phase"
        if frames_phase is not None:
            return frames_phase, "traceback"
        return cur, "phase"

    def _tb_feed(self, ln: LogLine, out: list[Change]) -> bool:
        """Feed a line to the open traceback; False when the line is not part of it."""
        tb = self._tb
        assert tb is not None
        if tb.state == _TB_FRAMES:
            return self._tb_frames(tb, ln, out)
        t = ln.text
        if tb.state == _TB_AFTER:
            if t.startswith(_CHAIN_MARKS):
                tb.state = _TB_CHAIN
                return True
            if not t.strip():
                return True
            if _TB_MARK in t or ln.ts is not None or t.startswith(_NOT_CONTINUATION) or tb.cont >= 40:
                self._tb = None
                return False
            tb.cont += 1  # the rest of a multi-line exception message ("Possible solutions: ...")
            return True
        # _TB_CHAIN
        if t.startswith(_TB_MARK):
            tb.parts.append(_Part())
            tb.state = _TB_FRAMES
            tb.miss = 0
            tb.cont = 0
            return True
        if not t.strip():
            return True
        self._tb = None
        return False

    def _tb_frames(self, tb: _Tb, ln: LogLine, out: list[Change]) -> bool:
        """A line of the traceback's frames (a frame, its source line, the exception line)."""
        t = ln.text
        part = tb.parts[-1]
        if t[:1] in (" ", "\t"):
            if t.startswith('  File "'):
                m = _FRAME_RE.match(t)
                if m:
                    part.frames.append((t.strip(), m.group(1), m.group(3).strip(), ""))
                    tb.miss = 0
            elif part.frames and not part.frames[-1][3]:
                self._tb_code(part, t)
            return True
        if not t.strip():
            return True
        if ln.ts is None and self._tb_unindented(tb, part, t, out):
            return True
        tb.miss += 1
        if tb.miss > 5 or t.startswith(_TB_MARK):
            self._tb_dropped(tb, out)
        return False

    def _tb_unindented(self, tb: _Tb, part: _Part, t: str, out: list[Change]) -> bool:
        """An unindented line without a timestamp that belongs to the frames: a frame or its source
        line whose indentation the paste lost, or the exception line (which ends them)."""
        if t.startswith('File "'):  # indentation lost in the paste
            m = _FRAME_RE.match(t)
            if m:
                part.frames.append(("  " + t.strip(), m.group(1), m.group(3).strip(), ""))
                tb.flat = True
                tb.miss = 0
                return True
        if _EXC_RE.match(t):
            part.exc.append(t.strip())
            tb.state = _TB_AFTER
            self._tb_exception(tb, out)
            return True
        if tb.flat and part.frames and not part.frames[-1][3] and not t.startswith(_TB_MARK):
            self._tb_code(part, t)  # the frame's source line, unindented
            return True
        return False

    @staticmethod
    def _tb_code(part: _Part, t: str) -> None:
        code = t.strip()
        if code and code.strip("^~ ") and not code.startswith("[Previous line"):
            f = part.frames[-1]
            part.frames[-1] = (f[0], f[1], f[2], code)

    def _tb_dropped(self, tb: _Tb, out: list[Change]) -> None:
        """The traceback's frames stopped without an exception line (the paste cut it, other output
        took over): with a header, what its frames say is the crash; frames alone (a stack
        printed on purpose) are not."""
        self._tb = None
        if tb.fatal and not tb.headless and tb.parts[-1].frames and not tb.parts[-1].exc:
            tb.parts[-1].exc.append(_TB_CUT)
            self._tb_exception(tb, out)

    def _tb_exception(self, tb: _Tb, out: list[Change]) -> None:
        if not tb.fatal or not self._tb_is_cause(tb):
            # the first crash is the cause; later ones (other ranks, the parent) follow from it; a
            # traceback cut before its exception line gives way to one that has it
            return
        frames_outer_first = [f for part in reversed(tb.parts) for f in part.frames]
        fphase, fframe = _infer_from_frames(frames_outer_first)
        if fphase is None:
            fphase = _hint_phase(" ".join(e for part in tb.parts for e in part.exc[:1]))
        if self._crash_tb is tb and self.crash is not None:
            phase, src = self.crash.phase, self.crash.inferred_from
            if src == "traceback" and fphase is not None:
                phase = fphase
        else:
            phase, src = self._crash_phase(fphase)
        final = tb.parts[-1].exc[0]
        ev = _tb_evidence(tb, fframe if src == "traceback" else None)
        start = self.crash.line_no if (self._crash_tb is tb and self.crash is not None) else tb.start
        self.crash = Crash(phase, start, final, tuple(ev[-12:]), src)
        self._crash_tb = tb
        out.append(self.crash)

    def _tb_is_cause(self, tb: _Tb) -> bool:
        """Whether traceback `tb` says what the crash is: there is none yet, or it is the crash's
        own, or the crash so far is one that gives way to it."""
        cur = self.crash
        return (self._crash_open() or self._crash_tb is tb or cur is None
                or (self._crash_tb is None and len(cur.evidence) <= 1)
                or (cur.summary in _TB_NO_EXC and tb.parts[-1].exc[0] not in _TB_NO_EXC))


def _tb_evidence(tb: _Tb, frame: tuple[str, str, str, str] | None) -> list[str]:
    """A traceback's evidence: SGLang's own line, the frame that told the phase (`frame`), the
    root's last two frames with their source, each chained exception, the final one."""
    ev: list[str] = []
    if tb.sglang:
        ev.append(tb.sglang[:400])
    if frame is not None:
        ev.append(frame[0])
        if frame[3]:
            ev.append(frame[3])
    for fr in tb.parts[0].frames[-2:]:
        if fr[0] not in ev:
            ev.append(fr[0])
            if fr[3]:
                ev.append(fr[3])
    for part in tb.parts[:-1]:
        ev.extend(part.exc[:1])
    ev.append(tb.parts[-1].exc[0])
    return ev


# --------------------------------------------------------------------------------------------
# Whole logs
# --------------------------------------------------------------------------------------------


# _dispatch's table: a line's first character -> its rules, (prefix, handler) in order; the first
# whose prefix the line starts with reads it ("" matches every line). "server_args=…" (first
# character "s", no rule of its own): the first line already entered "starting"; never regexed.
_Handler = Callable[[PhaseTracker, LogLine, str, "list[Change]"], None]
_T = PhaseTracker
_DISPATCH_OTHER: tuple[tuple[str | tuple[str, ...], _Handler], ...] = ((_UVICORN_LEVELS, _T._uvicorn),)
_DISPATCH: dict[str, tuple[tuple[str | tuple[str, ...], _Handler], ...]] = {
    "C": (("", _T._capture),),
    "M": (("Mamba Cache is allocated", _T._mamba), ("Memory pool end", _T._pool_end),
          ("Memory baseline taken", _T._baseline)),
    "I": ((("Init torch distributed begin", "Init parallel begin"), _T._dist_begin),
          (("Init torch distributed ends", "Init parallel ends"), _T._dist_end),
          ("Initialization failed", _T._fatal), (_UVICORN_LEVELS, _T._uvicorn)),
    "L": (("Load weight begin", _T._load_begin), ("Load weight end", _T._load_end)),
    "K": (("Killed", _T._fatal), ("", _T._kv_line)),
    "s": (("sglang is using nccl", _T._nccl),),
    "P": (("Post-capture KV sizing:", _T._post_capture),),
    "m": (("max_total_tokens=", _T._max_total_tokens), ("", _T._key_values)),
    "T": (("The server is fired up", _T._fired_up),),
    "D": (("Dummy health check server started", _T._fired_up), (_UVICORN_LEVELS, _T._uvicorn)),
    **{c: ((_UVICORN_LEVELS, _T._uvicorn), ("", _T._fatal)) for c in "RWFE"},
}
del _T


def _paste_indent(first: str) -> str:
    """The whitespace a paste nested in an indented block (a Markdown list item or tab) put before
    every line, read off the log's first line: only when that line is SGLang's own ``[2025-… TP0]``
    line or a traceback's start, which a server never indents itself."""
    n = len(first) - len(first.lstrip(" \t"))
    if n and (_SGL_IN_RE.match(first, n) or first.startswith("Traceback (most recent call last)", n)):
        return first[:n]
    return ""


def track_log(lines: Iterable[str], observer: Callable[[LogLine, PhaseTracker], object] | None = None) -> PhaseTracker:
    """Run a tracker over a finished log and return it. When the log holds several server
    starts (a journal across restarts), the tracker of the last start is returned: a new
    ``server_args=`` line after the previous start got past ``starting`` begins a new run.
    ``observer(line, tracker)`` sees every cleaned line after the tracker did (a new run shows
    as a new tracker): the finding rules' scanner reads the same pass."""
    tr = PhaseTracker()
    indent: str | None = None  # a paste nested in an indented Markdown block: every line shifted
    for raw in lines:
        if indent is None and raw.strip():
            indent = _paste_indent(raw)
        if indent and raw.startswith(indent):
            raw = raw[len(indent):]
        ln = clean(raw)
        if ln.text.startswith("server_args=") and (tr._pi > 0 or tr.crash is not None):
            tr.finish()
            tr = PhaseTracker()
        tr.feed(ln)
        if observer is not None:
            observer(ln, tr)
    tr.finish()
    return tr
