"""The stall watcher: a start-up that stopped making progress, said within its threshold.

A phase is *stalled* when, for its threshold, no phase line and no progress line arrived,
the GPUs' memory stayed flat (within :data:`MEMORY_STEP` of the reading at the last
progress) and the server's processes are alive (a dead server is a crash, not a stall).
The motivating case: ``Init torch distributed begin.`` and then nothing for ten minutes,
0 MiB on every GPU, every rank alive.

Pure and clocked from outside: feed it with :meth:`StallWatcher.progress` (phase and progress
events), :meth:`StallWatcher.gpus` (the sampler's memory readings) and
:meth:`StallWatcher.processes`, and ask :meth:`StallWatcher.check` on every poll. It fires
once per stall (``check`` returns the :class:`Stall` once, then None) and clears on progress,
so a deployment that resumes can stall again later and be told again.

Thresholds: seconds per phase (config.toml's ``[stall]``). The defaults fit real start-ups:
``dist_init`` finishes in seconds on a healthy box (0.33 s for a 2-rank NCCL init on H200s),
so two minutes of silence there is a hang; weight loading can take many minutes but prints
shard progress as it goes, so its threshold bounds the gap between two progress lines.
"""

from __future__ import annotations

import time
from dataclasses import dataclass, field
from typing import Callable, Mapping

import msgspec

from ..domain import Evidence, Finding, Fix

# Seconds without progress before a phase counts as stalled (config [stall] overrides).
DEFAULT_STALL: dict[str, float] = {
    "starting": 300.0, "dist_init": 120.0, "weights": 900.0, "kv_cache": 300.0,
    "cuda_graph": 900.0, "draft": 900.0, "http": 300.0, "download": 120.0,
}
# A GPU whose used memory moved by more than this since the last progress is busy, not stalled
# (weights streaming in, a KV pool being allocated): 64 MiB is far above NVML's jitter (0 B on an
# idle H200) and far below what any loading step moves.
MEMORY_STEP = 64 * 1024 * 1024
MIB = 1024 * 1024


@dataclass(frozen=True, slots=True)
class Stall:
    """A stall, as the banner and the finding say it."""

    phase: str
    silent_s: float
    threshold_s: float
    gpu_used: dict[int, int | None] = field(default_factory=dict)  # GPU index -> bytes used (None: N/A)
    processes: int | None = None  # server processes alive (None: not known)
    ranks: int | None = None  # of those, the engine's rank processes (Engine.rank_title), when named

    @property
    def summary(self) -> str:
        parts = [f"{self.phase} silent {format_duration(self.silent_s)}"]
        if self.gpu_used:
            parts.append(_memory_phrase(self.gpu_used))
        if self.ranks:
            parts.append(f"{self.ranks} rank{'s' if self.ranks != 1 else ''} alive")
        elif self.processes:
            parts.append(f"{self.processes} server process{'es' if self.processes != 1 else ''} alive")
        return ", ".join(parts)


def format_duration(seconds: float) -> str:
    """``2m10s``, ``45s``, ``1h02m``."""
    s = int(round(seconds))
    if s < 60:
        return f"{s}s"
    if s < 3600:
        return f"{s // 60}m{s % 60:02d}s"
    return f"{s // 3600}h{(s % 3600) // 60:02d}m"


def _memory_phrase(used: Mapping[int, int | None]) -> str:
    known = {i: v for i, v in used.items() if v is not None}
    if not known:
        return f"GPU memory N/A on {len(used)} GPU{'s' if len(used) != 1 else ''}"
    mib = {i: round(v / MIB) for i, v in known.items()}
    values = set(mib.values())
    if len(values) == 1 and len(known) == len(used):
        n = len(used)
        return f"{values.pop()} MiB used on {'all ' + str(n) + ' GPUs' if n > 1 else 'GPU' + str(next(iter(used)))}"
    return "used " + ", ".join(f"GPU{i} {mib[i]} MiB" if i in mib else f"GPU{i} N/A" for i in sorted(used))


class StallWatcher:
    """See the module docstring. ``clock`` returns seconds (monotonic in production; a test's
    own counter in tests)."""

    def __init__(self, thresholds: Mapping[str, float] | None = None, *,
                 clock: Callable[[], float] = time.monotonic, memory_step: int = MEMORY_STEP):
        self.thresholds = {**DEFAULT_STALL, **(thresholds or {})}
        self.clock = clock
        self.memory_step = memory_step
        self.phase: str | None = None
        self.last_progress = clock()
        self._mark: dict[int, int | None] = {}  # memory at the last progress
        self._gpu_used: dict[int, int | None] = {}
        self._processes: int | None = None
        self._ranks: int | None = None
        self._alive = True
        self.stall: Stall | None = None  # the stall in force, if any

    # -- inputs ---------------------------------------------------------------------------------

    def progress(self, phase: str | None = None, at: float | None = None) -> None:
        """A phase line or a progress line: the phase moves on, any stall clears."""
        if phase is not None:
            self.phase = phase
        self.last_progress = self.clock() if at is None else at
        self._mark = dict(self._gpu_used)
        self.stall = None

    def resume(self, phase: str, *, silent_s: float = 0.0, stall: bool = False) -> None:
        """Continue a run another watcher began: in `phase`, silent for `silent_s` already;
        `stall`: a stall was already said (not said again until progress clears it)."""
        self.phase = phase
        self.last_progress = self.clock() - silent_s
        if stall:
            self.stall = Stall(phase, silent_s, self.threshold(phase))

    def gpus(self, used: Mapping[int, int | None]) -> None:
        """A sampler reading: bytes used per GPU index (None where NVML said N/A). Memory that
        moved by more than ``memory_step`` since the last progress counts as progress."""
        self._gpu_used = dict(used)
        for index, value in used.items():
            before = self._mark.get(index)
            if value is None or before is None:
                continue
            if abs(value - before) > self.memory_step:
                self.progress()
                return
        for index, value in used.items():  # a GPU seen for the first time sets its mark
            self._mark.setdefault(index, value)

    def processes(self, alive: int | None, ranks: int | None = None) -> None:
        """How many server processes are alive (0: the server is gone: never a stall)."""
        self._processes = alive
        self._ranks = ranks
        self._alive = alive is None or alive > 0

    # -- output ---------------------------------------------------------------------------------

    def threshold(self, phase: str | None = None) -> float:
        return self.thresholds.get(phase or self.phase or "starting", 600.0)

    def silent_for(self) -> float:
        return max(0.0, self.clock() - self.last_progress)

    def check(self) -> Stall | None:
        """The stall when one has just begun (once per stall); None otherwise. ``self.stall``
        stays set while the stall lasts."""
        phase = self.phase or "starting"
        if phase == "ready" or not self._alive:
            return None
        silent = self.silent_for()
        limit = self.threshold(phase)
        if silent <= limit:
            return None
        begun = self.stall is None
        self.stall = Stall(phase, silent, limit, dict(self._gpu_used), self._processes, self._ranks)
        return self.stall if begun else None


# What a stall in each phase suggests (the finding's code, its cause in one sentence, the fix).
_SUGGESTS: dict[str, tuple[str, str]] = {
    "dist_init": ("nccl-init-stall",
                  "the ranks never finished NCCL/torch.distributed initialisation: a peer that never "
                  "joined, a driver/userspace library mismatch or broken P2P/IOMMU (see the host checks)"),
}
NCCL_DEBUG_PATCH = {"set_env": {"NCCL_DEBUG": "INFO", "NCCL_DEBUG_SUBSYS": "INIT,P2P"}}
P2P_OFF_PATCH = {"set_env": {"NCCL_P2P_DISABLE": "1"}}


def nccl_init_fix(nccl_log: bool, p2p_ok: bool | None = None, p2p_off: bool = False) -> Fix:
    """The fix of a start stuck in NCCL's initialisation (nccl-init-stall), from the evidence:
    without NCCL's own log, a restart with it on (it names the step NCCL waits in); with it on,
    NCCL_P2P_DISABLE=1 when the P2P check failed, or as an experiment when P2P was not checked
    (a log read alone); never when the P2P check passed or P2P is off already: then there is
    nothing to patch, and the fix says where to look. One function for the stall watcher's
    finding and the log's silence rules, so the deployment screen and triage say the same."""
    if not nccl_log:
        return Fix("restart with NCCL_DEBUG=INFO (NCCL_DEBUG_SUBSYS=INIT,P2P) to see where NCCL waits",
                   applicable=True, plan_patch=NCCL_DEBUG_PATCH)
    if p2p_ok is False and not p2p_off:
        return Fix("restart with NCCL_P2P_DISABLE=1: the P2P check failed (NCCL then moves data through shared "
                   "memory)", applicable=True, plan_patch=P2P_OFF_PATCH)
    if p2p_ok is None and not p2p_off:
        return Fix("restart with NCCL_P2P_DISABLE=1 as an experiment (NCCL's log is on; P2P was not checked: "
                   "`gpuops triage --deployment NAME` checks it)", applicable=True, plan_patch=P2P_OFF_PATCH)
    why = "P2P is off already" if p2p_off else "the P2P check passed (disabling P2P would not help)"
    return Fix(f"NCCL's log is on and {why}: its last INFO lines name the step it waits in, and the ranks' "
               "stacks (py-spy, in triage) where each one waits; a rank that never started points at its GPU, "
               "a driver/library mismatch at the host checks")


SILENCE_RULES_OF_THE_STALL = ("dist-init-silent", "nccl-init-pending")  # a log's nccl-init-stall (finding_rules)


def with_p2p_check(finding: Finding, p2p_ok: bool | None, p2p_off: bool = False) -> Finding:
    """A log's nccl-init-stall finding, read before the host's P2P check was known, with its fix
    made again from that check (a deployment's triage): no P2P experiment once P2P passed."""
    if (finding.code != "nccl-init-stall" or finding.data.get("rule") not in SILENCE_RULES_OF_THE_STALL
            or finding.fix is None or finding.fix.plan_patch == NCCL_DEBUG_PATCH):
        return finding  # not the stall's, or NCCL's log was off: the fix does not depend on P2P
    return msgspec.structs.replace(finding, fix=nccl_init_fix(True, p2p_ok, p2p_off))


def stall_finding(stall: Stall, last_line: str | None = None, last_line_no: int | None = None, *,
                  nccl_log: bool = False, p2p_ok: bool | None = None, p2p_off: bool = False) -> Finding:
    """The finding a live stall raises: the phase's likely cause, the readings that show it
    (GPU memory per GPU, processes alive) and the last log line; for a dist_init stall the fix
    follows the evidence (:func:`nccl_init_fix`: NCCL's own log on or not, the P2P check)."""
    code, cause = _SUGGESTS.get(stall.phase, ("startup-stall", f"the server stopped making progress in {stall.phase}"))
    evidence: list[Evidence] = []
    if last_line:
        evidence.append(Evidence(f"log:{last_line_no}" if last_line_no else "log", line=last_line[:400]))
    for index, used in sorted(stall.gpu_used.items()):
        evidence.append(Evidence("nvml", reading=f"GPU{index} memory used "
                                 + ("N/A" if used is None else f"{used / MIB:.0f} MiB")))
    if stall.processes is not None:
        evidence.append(Evidence("ps", reading=f"{stall.processes} server processes alive"
                                 + (f", {stall.ranks} of them ranks" if stall.ranks else "")))
    if code == "nccl-init-stall":
        fix = nccl_init_fix(nccl_log, p2p_ok, p2p_off)
    else:
        fix = Fix(f"read the last lines of the log and the host checks; raise [stall] {stall.phase} "
                  "if this phase is legitimately slow on this host")
    return Finding(code, "error", f"{stall.summary}: {cause}", tuple(evidence), fix,
                   data={"phase": stall.phase, "silent_s": round(stall.silent_s, 1),
                         "threshold_s": stall.threshold_s})
