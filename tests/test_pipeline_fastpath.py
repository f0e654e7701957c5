"""The log pipeline's fast paths change nothing: the finding rules' gate (``finding_rules._GATE``)
and the tracker's first-character prefix table (``phases._STARTS_BY_CHAR``) give exactly what the
full tests give, over every log in tests/data (the real-log corpus)."""

from __future__ import annotations

from pathlib import Path

import pytest

from gpuops.core.diagnose import finding_rules, phases
from gpuops.core.diagnose.finding_rules import LogScanner
from gpuops.core.diagnose.phases import PhaseTracker, clean

DATA = Path(__file__).parent / "data"
LOGS = sorted(p for p in DATA.rglob("*.log"))


def _lines(path: Path) -> list[str]:
    return path.read_text(errors="replace").splitlines()


def test_every_needle_holds_a_gate_key():
    for needle in finding_rules._LOOKED_FOR:
        assert any(key in needle for key in finding_rules._GATE), needle


def test_starts_by_char_is_starts():
    assert sorted(p for ps in phases._STARTS_BY_CHAR.values() for p in ps) == sorted(phases._STARTS)
    for path in LOGS:
        for raw in _lines(path):
            t = clean(raw).text
            by_char = phases._STARTS_BY_CHAR.get(t[:1])
            assert t.startswith(phases._STARTS) == bool(by_char and t.startswith(by_char)), t


def _scan(path: Path) -> tuple:
    tracker, scanner = PhaseTracker(), LogScanner()
    for raw in _lines(path):
        ln = clean(raw)
        tracker.feed(ln)
        scanner.feed(ln, tracker)
    tracker.finish()
    hits = {k: [(h.line_no, h.line, h.groups, h.phase) for h in v] for k, v in scanner._hits.items()}
    found = [(f.code, f.summary) for f in scanner.findings(tracker)]
    return hits, dict(scanner._counts), dict(scanner._nccl_started), scanner.nccl_info, dict(scanner._tb_starts), found


@pytest.mark.parametrize("path", LOGS, ids=lambda p: str(p.relative_to(DATA)))
def test_gated_scan_equals_full_scan(path, monkeypatch):
    gated = _scan(path)
    monkeypatch.setattr(finding_rules, "_GATE", ("",))  # "" is in every line: every line takes the full test
    assert _scan(path) == gated
