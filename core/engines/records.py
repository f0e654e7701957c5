"""What an engine's phase grammar reads and says, the same for every engine: the log line it is
fed (:class:`LogLine`) and the changes it returns (:class:`PhaseChange`, :class:`Progress`,
:class:`Numbers`, :class:`Crash`), which the watch turns into a deployment's events. Phases here
are gpuops' (``core/states.py``): an engine's tracker names them through ``Engine.state_of``."""

from __future__ import annotations

from typing import Union

import msgspec

__all__ = ["LogLine", "JoinedLine", "PhaseChange", "Progress", "Numbers", "Crash", "Change", "DRAFT_SHARDS"]

# Progress.what of a draft model's shards read in the weights phase (not the model's own count)
DRAFT_SHARDS = "draft shards"


# --------------------------------------------------------------------------------------------
# Data
# --------------------------------------------------------------------------------------------
# Immutable records, made for every line (a log line, a progress bar's step): msgspec Structs,
# cheap to make and never looked at by the garbage collector (they hold text, numbers, tuples of
# them and the rank dicts, never a reference back: no cycles), so a long log does not make the
# collector's rounds longer.


class LogLine(msgspec.Struct, frozen=True, gc=False):
    """One log line. ``text`` is the message: ANSI codes, what a relaying program put first (a
    container prefix ``name  | ``, journald's, docker's/kubectl's/GitHub Actions' timestamps, Python
    logging's or Rust tracing's timestamp and level, srun's ``0: ``, mpirun's and kubectl's tags),
    tqdm's ``\\r`` history (the last state is kept) and an engine's ``[2026-07-14 07:49:04 TP3 EP3] ``
    prefix removed. ``ts`` is the engine's timestamp as printed; ``ranks`` the rank tags of that prefix
    (``{"TP": 3, "EP": 3}``). A raw line that holds several log lines is a :class:`JoinedLine`."""

    raw: str
    text: str
    ts: str | None = None
    ranks: dict[str, int] = msgspec.field(default_factory=dict)


class JoinedLine(LogLine, frozen=True, gc=False):
    """A raw line in which tqdm's ``\\r`` joined log lines to a progress bar: ``extra`` are the log
    lines before ``text`` (each a LogLine, in order); the tracker and the rules read them first."""

    extra: tuple[LogLine, ...] = ()


class PhaseChange(msgspec.Struct, frozen=True, gc=False):
    """The tracker entered ``phase`` at line ``line_no`` (1-based count of fed lines)."""

    phase: str
    line_no: int
    text: str
    ts: str | None


class Progress(msgspec.Struct, frozen=True, gc=False):
    """Progress inside a phase: weight shards (``what="shards"``), CUDA-graph batch sizes
    (``"batch sizes"``), piecewise/prefill graph shapes. ``total`` is None when unknown."""

    phase: str
    done: int
    total: int | None
    what: str


class Numbers(msgspec.Struct, frozen=True, gc=False):
    """Numbers a line reported (only the keys this line set or changed). Keys (GB are the engine's
    GiB-based "GB"; ``draft_`` prefixes the same keys for the draft model):

    ``avail_mem_gb``/``mem_usage_gb`` (the latest reported), ``dist_init_elapsed_s``,
    ``dist_init_mem_usage_gb``, ``load_begin_avail_mem_gb``, ``load_elapsed_s``,
    ``weights_avail_mem_gb``, ``weights_mem_usage_gb``, ``weights_commit_elapsed_s``,
    ``kv_tokens``, ``k_size_gb``, ``v_size_gb``, ``kv_size_gb``, ``mamba_cache_size``,
    ``mamba_conv_state_gb``, ``mamba_ssm_state_gb``, ``mamba_intermediate_ssm_gb``,
    ``mamba_intermediate_conv_gb``, ``pool_avail_mem_gb``, ``graph_begin_avail_mem_gb``,
    ``graph_elapsed_s``, ``graph_mem_usage_gb``, ``graph_avail_mem_gb``, ``graph_batch_sizes``,
    ``graph_max_bs`` (``graph`` is the decode/verify capture; ``piecewise_graph_*``,
    ``prefill_graph_*``, ``draft_graph_*``, ``draft_extend_graph_*`` the others),
    ``max_total_num_tokens``, ``chunked_prefill_size``, ``max_prefill_tokens``,
    ``max_running_requests``, ``context_len``, ``available_gpu_mem_gb``, ``http_port``.
    With several ranks in one log the lowest rank's value wins."""

    values: dict[str, float]


class Crash(msgspec.Struct, frozen=True, gc=False):
    """Why the server died. ``phase``: where (None when nothing says); ``line_no``: the first
    line of the crash (the engine's error line or ``Traceback``); ``summary``: the final exception
    line (or the fatal line itself); ``evidence``: the few lines that matter (the engine's error line,
    the frame that placed it, the innermost frames, the chained exception lines, the final
    exception); ``inferred_from``: ``"phase"`` (the phase lines said where) or ``"traceback"``
    (the frames did)."""

    phase: str | None
    line_no: int
    summary: str
    evidence: tuple[str, ...]
    inferred_from: str


Change = Union[PhaseChange, Progress, Numbers, Crash]
