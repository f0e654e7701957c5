"""A server that stops answering after it was ready: ``hang-after-ready``.

Once a deployment is ready its watch asks the server's health path on its host (every 15 s). A server
whose scheduler deadlocked (a first request that never finishes, a collective stuck on one rank)
logs nothing more and keeps its processes: only its health check says so (an engine's health path
may run a one-token request and answer 503 when it does not finish in time). The :class:`HangWatch`
turns health answers that keep failing for ``threshold_s`` (``[stall] ready``; default
:data:`HANG_AFTER_S`) into a :class:`Hang`; one answer that succeeds again ends it.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from ..domain import Evidence, Finding, Fix

# How long (seconds) the health check may keep failing after ready before the server counts hung:
# three 20-s health-check timeouts (an engine's own check of a request may take that long), four asks.
HANG_AFTER_S = 60.0
# What a hang's finding quotes of the failed answers (the last ones).
SHOWN_PROBES = 5


@dataclass(frozen=True, slots=True)
class Probe:
    """One answer of the health path: `status` (None: no HTTP answer), `detail` (the status, or why
    there was none: refused, timed out), how long it took, and when it was asked (the watch's clock)."""

    status: int | None
    detail: str
    seconds: float
    at: float

    @property
    def ok(self) -> bool:
        return self.status == 200


@dataclass(frozen=True, slots=True)
class Hang:
    failing_s: float  # since the first failed answer of this run of them
    failures: int
    probes: tuple[Probe, ...]  # the last failed answers
    threshold_s: float

    @property
    def summary(self) -> str:
        return (f"the server stopped answering after it was ready: its health check failed {self.failures} times "
                f"over {self.failing_s:.0f}s")


@dataclass
class HangWatch:
    threshold_s: float = HANG_AFTER_S
    _failed: list[Probe] = field(default_factory=list)
    hung: Hang | None = None  # the hang said, until an answer succeeds

    def probe(self, p: Probe) -> None:
        if p.ok:
            self._failed.clear()
            self.hung = None
        else:
            self._failed.append(p)

    def check(self) -> Hang | None:
        """A hang not said yet (then said: once until it ends), else None."""
        if self.hung is not None or len(self._failed) < 2:
            return None
        failing = self._failed[-1].at - self._failed[0].at
        if failing < self.threshold_s:
            return None
        self.hung = Hang(failing, len(self._failed), tuple(self._failed[-SHOWN_PROBES:]), self.threshold_s)
        return self.hung


def hang_finding(hang: Hang, *, path: str, last_line: str | None, quiet_s: float | None,
                 processes: int | None) -> Finding:
    """The finding: the failed answers, the log's silence and the live processes as evidence; the fix
    is to look at the ranks' stacks before restarting (a restart loses them)."""
    evidence = [Evidence(f"GET {path}", reading=f"{p.detail} after {p.seconds:.1f}s") for p in hang.probes]
    if last_line:
        evidence.append(Evidence("log", line=last_line[:400]))
    if quiet_s is not None:
        evidence.append(Evidence("log", reading=f"no new log line for {quiet_s:.0f}s"))
    if processes is not None:
        evidence.append(Evidence("ps", reading=f"{processes} server processes alive"))
    return Finding(
        "hang-after-ready", "error",
        f"{hang.summary} (alive, {'silent' if quiet_s and quiet_s >= hang.failing_s else 'still logging'}): "
        "a scheduler deadlocked or a rank is stuck",
        tuple(evidence),
        Fix("look at the ranks' stacks first (x: triage takes py-spy dumps), then restart; raise [stall] ready "
            "if the server is only slow to answer under load"),
        data={"failing_s": round(hang.failing_s, 1), "failures": hang.failures, "threshold_s": hang.threshold_s},
    )
