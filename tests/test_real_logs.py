"""`gpuops triage FILE --json` on real SGLang server logs people posted publicly (tests/data/logs/real).

Each case is NNN-slug.log (verbatim, trimmed only at line boundaries) with NNN-slug.json: where it
came from, what the source says happened, and the expected outcome, phase and finding codes (from the
source and an expert reading of the log, never from gpuops). A case gpuops gets wrong today carries
"known_miss" and is a strict xfail: when the parser learns it, the test fails until the meta drops
"known_miss". tests/data/logs/real/README.md says how to add one; tests/real_logs_figure.py prints
the figures.
"""

from __future__ import annotations

import json
import subprocess
from pathlib import Path

import pytest

from tests.test_cli import GPUOPS

REAL = Path(__file__).parent / "data" / "logs" / "real"
METAS = sorted(REAL.glob("[0-9][0-9][0-9]-*.json"))

PHASES = ("starting", "dist_init", "weights", "kv_cache", "cuda_graph", "draft", "http", "ready")
OUTCOMES = ("ready", "crashed", "incomplete")
META_KEYS = {"source", "retrieved", "what_happened", "expected", "classes"}


def triage(log: Path) -> dict:
    out = subprocess.run([GPUOPS, "triage", str(log), "--json"], capture_output=True, text=True, timeout=120)
    assert out.returncode == 0, out.stderr
    return json.loads(out.stdout)


def _case(meta_path: Path):
    meta = json.loads(meta_path.read_text())
    marks = []
    if meta.get("known_miss"):
        marks.append(pytest.mark.xfail(strict=True, reason=meta["known_miss"]))
    return pytest.param(meta_path, meta, id=meta_path.stem, marks=marks)


@pytest.mark.parametrize("meta_path,meta", [_case(p) for p in METAS])
def test_real_log(meta_path: Path, meta: dict):
    doc = triage(meta_path.with_suffix(".log"))
    want = meta["expected"]
    codes = [f["code"] for f in doc["findings"]]
    got = {"outcome": doc["outcome"], "phase": doc["phase"], "missing": sorted(set(want["findings"]) - set(codes))}
    assert got == {"outcome": want["outcome"], "phase": want["phase"], "missing": []}, f"reported codes: {codes}"


def test_the_corpus_is_well_formed():
    from gpuops.core.engines.sglang.finding_rules import CODES

    assert len(METAS) >= 40
    stems = [p.stem for p in METAS]
    assert len({s[:3] for s in stems}) == len(stems), "case numbers are unique"
    assert {p.stem for p in REAL.glob("*.log")} == set(stems), "every log has its meta and every meta its log"
    for p in METAS:
        meta = json.loads(p.read_text())
        assert META_KEYS <= set(meta), p.name
        assert meta["source"].startswith("https://"), p.name
        exp = meta["expected"]
        assert exp["outcome"] in OUTCOMES and (exp["phase"] is None or exp["phase"] in PHASES), p.name
        assert set(exp["findings"]) <= set(CODES), p.name
        assert meta["classes"] and all(isinstance(c, str) for c in meta["classes"]), p.name
        assert "known_miss" not in meta or meta["known_miss"].strip(), p.name
        log = p.with_suffix(".log").read_bytes()
        assert log and len(log) < 128 * 1024, p.name
