"""Triage of a log: where the server got to, and why it stopped there.

:func:`triage_log` runs the phase tracker and the finding rules over a finished log, in one pass:
``gpuops triage LOGFILE`` prints its :class:`~gpuops.core.domain.TriageReport`; for a deployment
the host checks are added (:func:`gpuops.core.deploy.watch.triage_deployment`).
"""

from __future__ import annotations

from typing import Iterable

from ..domain import Finding, Plan, TriageReport

# The stall watcher's generic advice (it names the silence, not its cause): a finding of the same
# severity that explains the stall (a host check's, say) comes before it.
STALL_ADVICE = frozenset({"nccl-init-stall", "startup-stall", "cuda-graph-stall", "download-stalled"})
_SEVERITY = ("error", "warning", "info")


def ranked(findings: Iterable[Finding]) -> list[Finding]:
    """Findings in the order an operator acts on them: errors, then warnings, then info; within
    one severity, causes before the stall watcher's generic advice; otherwise as they came. The
    first is the one `f` applies (when its fix is applicable)."""
    return sorted(findings, key=lambda f: (_SEVERITY.index(f.severity) if f.severity in _SEVERITY else 3,
                                           f.code in STALL_ADVICE))


def top_fix(findings: Iterable[Finding]) -> Finding | None:
    """The top finding when its fix is one gpuops can apply; None when there is none or the top
    one's fix is not (a red herring's fix is never offered in its place)."""
    order = ranked(findings)
    top = order[0] if order else None
    return top if top is not None and top.fix is not None and top.fix.applicable else None
from .. import engines


def triage_log(lines: Iterable[str], plan: Plan | None = None) -> TriageReport:
    """``phase`` is where the server got to, or, when it crashed, the phase it crashed in; None
    when the log says nothing. The findings are the rules' for the last start in the log; with
    the deployment's ``plan`` their fixes can patch it."""
    engine = engines.get(plan.engine if plan is not None else engines.DEFAULT)
    scanner = engine.scanner()
    tr = engine.track_log(lines, scanner.feed)
    phase = tr.phase
    if tr.outcome == "crashed" and tr.crash is not None and tr.crash.phase is not None:
        phase = tr.crash.phase
    return TriageReport(phase=phase, outcome=tr.outcome, findings=scanner.findings(tr, plan))  # type: ignore[arg-type]
