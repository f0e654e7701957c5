"""`gpuops triage LOGFILE|- --json` on real-format logs (tests/data/logs, built from SGLang's wheels)."""

from __future__ import annotations

import json
import subprocess
from pathlib import Path

from tests.test_cli import GPUOPS, gpuops

LOGS = Path(__file__).parent / "data" / "logs"


def test_triage_json_for_a_file_and_for_stdin():
    out = gpuops("triage", str(LOGS / "sglang-0.5.23-hybrid-mtp-tp4.log"), "--json")
    assert out.returncode == 0, out.stderr
    assert json.loads(out.stdout) == {"schema": 1, "phase": "ready", "outcome": "ready", "findings": []}
    text = (LOGS / "incomplete-dist-init-0.5.10.log").read_text()
    out = subprocess.run([GPUOPS, "triage", "-", "--json"], input=text, capture_output=True, text=True)
    doc = json.loads(out.stdout)
    assert (doc["phase"], doc["outcome"]) == ("dist_init", "incomplete")
    out = gpuops("triage", str(LOGS / "crash-kv-not-enough-memory-0.5.23.log"))
    assert out.returncode == 0 and "phase: kv_cache" in out.stdout and "outcome: crashed" in out.stdout


def test_triage_missing_file_is_exit_2():
    out = gpuops("triage", "/no/such.log", "--json")
    assert out.returncode == 2 and out.stderr.strip() == "gpuops: /no/such.log: no such file"
