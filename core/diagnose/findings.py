"""Findings: what triage says about a deployment, in DESIGN.md's shape.

A finding has a stable ``code`` (DESIGN.md § Vocabularies), a ``severity``, one sentence of
cause (``summary``), the ``evidence`` (log lines and readings, each with where it came from) and
a ``fix``. A fix that is a plan change carries a ``plan_patch`` (see :mod:`gpuops.core.diagnose.fixes`)
and is ``applicable``: one key applies it, shows the diff and restarts.

Plain data; the rules that produce findings from log lines live in :mod:`gpuops.core.diagnose.finding_rules`,
the checks that produce them from host readings in :mod:`gpuops.core.diagnose.host_checks`.
"""

from __future__ import annotations

from dataclasses import dataclass, field

SEVERITIES: tuple[str, ...] = ("error", "warning", "info")


@dataclass(frozen=True, slots=True)
class Evidence:
    """One piece of evidence: a log ``line`` or a ``reading`` (exactly one of them), and its
    ``source`` (``"log:123"`` for a log line number, ``"nvml"``, ``"/proc/driver/nvidia/version"``, …)."""

    source: str
    line: str | None = None
    reading: str | None = None

    def to_json(self) -> dict:
        out: dict = {"source": self.source}
        if self.line is not None:
            out["line"] = self.line
        if self.reading is not None:
            out["reading"] = self.reading
        return out


@dataclass(frozen=True, slots=True)
class Fix:
    """What to do. ``plan_patch`` (None when the fix is not a plan change) is what
    :func:`gpuops.core.fixes.apply_patch` applies; ``applicable`` says one key can do it."""

    summary: str
    applicable: bool = False
    plan_patch: dict | None = None

    def to_json(self) -> dict:
        return {"summary": self.summary, "applicable": self.applicable, "plan_patch": self.plan_patch}


@dataclass(frozen=True, slots=True)
class Finding:
    code: str
    severity: str
    summary: str
    evidence: tuple[Evidence, ...] = ()
    fix: Fix | None = None
    data: dict = field(default_factory=dict)  # rule-specific numbers (e.g. silent_s), grown freely

    def __post_init__(self) -> None:
        if self.severity not in SEVERITIES:
            raise ValueError(f"severity must be one of {SEVERITIES}, not {self.severity!r}")

    def to_json(self) -> dict:
        out = {
            "code": self.code,
            "severity": self.severity,
            "summary": self.summary,
            "evidence": [e.to_json() for e in self.evidence],
            "fix": self.fix.to_json() if self.fix is not None else None,
        }
        if self.data:
            out["data"] = dict(self.data)
        return out
