"""Triage of a log: where the server got to, and why it stopped there.

:func:`triage_log` runs the phase tracker and the finding rules over a finished log, in one pass:
``gpuops triage LOGFILE`` prints its :class:`~gpuops.core.domain.TriageReport`; for a deployment
the host checks are added (:func:`gpuops.core.deploy.watch.triage_deployment`).
"""

from __future__ import annotations

from typing import Iterable

from ..domain import Plan, TriageReport
from .finding_rules import LogScanner
from .phases import track_log


def triage_log(lines: Iterable[str], plan: Plan | None = None) -> TriageReport:
    """``phase`` is where the server got to, or, when it crashed, the phase it crashed in; None
    when the log says nothing. The findings are the rules' for the last start in the log; with
    the deployment's ``plan`` their fixes can patch it."""
    scanner = LogScanner()
    tr = track_log(lines, scanner.feed)
    phase = tr.phase
    if tr.outcome == "crashed" and tr.crash is not None and tr.crash.phase is not None:
        phase = tr.crash.phase
    return TriageReport(phase=phase, outcome=tr.outcome, findings=scanner.findings(tr, plan))  # type: ignore[arg-type]
