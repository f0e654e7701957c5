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
    """`gpuops triage LOG --json` as a process of its own (one case: the command a user runs)."""
    out = subprocess.run([GPUOPS, "triage", str(log), "--json"], capture_output=True, text=True, timeout=120)
    assert out.returncode == 0, out.stderr
    return json.loads(out.stdout)


def triage_here(log: Path, capsys) -> dict:
    """The same command line through the CLI's own dispatch in this process: the same parser, checks
    and document, without starting an interpreter for each of the corpus' logs."""
    from gpuops.cli.main import dispatch

    capsys.readouterr()
    assert dispatch(["triage", str(log), "--json"]) == 0
    return json.loads(capsys.readouterr().out)


def _case(meta_path: Path):
    meta = json.loads(meta_path.read_text())
    marks = []
    if meta.get("known_miss"):
        marks.append(pytest.mark.xfail(strict=True, reason=meta["known_miss"]))
    return pytest.param(meta_path, meta, id=meta_path.stem, marks=marks)


@pytest.mark.parametrize("meta_path,meta", [_case(p) for p in METAS])
def test_real_log(meta_path: Path, meta: dict, capsys):
    doc = triage_here(meta_path.with_suffix(".log"), capsys)
    want = meta["expected"]
    codes = [f["code"] for f in doc["findings"]]
    got = {"outcome": doc["outcome"], "phase": doc["phase"], "missing": sorted(set(want["findings"]) - set(codes))}
    assert got == {"outcome": want["outcome"], "phase": want["phase"], "missing": []}, f"reported codes: {codes}"


def test_the_command_a_user_runs_says_what_the_corpus_tests_see(capsys):
    """The corpus runs through the CLI's dispatch in-process; the installed `gpuops` command, a process
    of its own, prints the same document for a case with a crash and findings."""
    crashed = next(p for p in METAS if json.loads(p.read_text())["expected"]["findings"]
                   and json.loads(p.read_text())["expected"]["outcome"] == "crashed"
                   and not json.loads(p.read_text()).get("known_miss"))
    log = crashed.with_suffix(".log")
    doc = triage(log)
    assert doc["schema"] == 1 and doc["outcome"] == "crashed" and doc["findings"]
    assert triage_here(log, capsys) == doc


def test_the_corpus_is_well_formed():
    from gpuops.core.engines.sglang.finding_rules import CODES

    assert len(METAS) >= 40
    stems = [p.stem for p in METAS]
    assert len({s[:3] for s in stems}) == len(stems), "case numbers are unique"
    assert {p.stem for p in REAL.glob("*.log")} == set(stems), "every log has its meta and every meta its log"
    for p in METAS:
        meta = json.loads(p.read_text())
        assert set(meta) >= META_KEYS, p.name
        assert meta["source"].startswith("https://"), p.name
        exp = meta["expected"]
        assert exp["outcome"] in OUTCOMES and (exp["phase"] is None or exp["phase"] in PHASES), p.name
        assert set(exp["findings"]) <= set(CODES), p.name
        assert meta["classes"] and all(isinstance(c, str) for c in meta["classes"]), p.name
        assert "known_miss" not in meta or meta["known_miss"].strip(), p.name
        log = p.with_suffix(".log").read_bytes()
        assert log and len(log) < 128 * 1024, p.name
