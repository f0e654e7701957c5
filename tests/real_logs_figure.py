"""Figures for the real-log corpus (tests/data/logs/real): run the real CLI on every case and print
outcome+phase right / total, cause right / cases with a known cause, and per-class counts.

    .venv/bin/python tests/real_logs_figure.py [--misses]

"Cause right" counts the cases whose meta names at least one finding code: right when every expected
code is among the reported ones. --misses lists what is wrong per case (to fill "known_miss").
"""

from __future__ import annotations

import collections
import json
import subprocess
import sys
from pathlib import Path

REAL = Path(__file__).resolve().parent / "data" / "logs" / "real"
GPUOPS = str(Path(sys.executable).with_name("gpuops"))


def triage(log: Path) -> dict:
    out = subprocess.run([GPUOPS, "triage", str(log), "--json"], capture_output=True, text=True, timeout=120)
    if out.returncode != 0:
        return {"outcome": None, "phase": None, "findings": [], "error": out.stderr.strip()}
    return json.loads(out.stdout)


def main(argv: list[str]) -> int:
    metas = sorted(REAL.glob("[0-9][0-9][0-9]-*.json"))
    total = op_right = cause_known = cause_right = 0
    per_class: dict[str, list[int]] = collections.defaultdict(lambda: [0, 0, 0, 0])  # cases, op right, causes, right
    misses = []
    for p in metas:
        meta = json.loads(p.read_text())
        want = meta["expected"]
        doc = triage(p.with_suffix(".log"))
        codes = {f["code"] for f in doc["findings"]}
        ok_op = (doc["outcome"], doc["phase"]) == (want["outcome"], want["phase"])
        has_cause = bool(want["findings"])
        ok_cause = has_cause and set(want["findings"]) <= codes
        total += 1
        op_right += ok_op
        cause_known += has_cause
        cause_right += ok_cause
        for c in meta["classes"]:
            row = per_class[c]
            row[0] += 1
            row[1] += ok_op
            row[2] += has_cause
            row[3] += ok_cause
        if not ok_op or (has_cause and not ok_cause):
            wrong = []
            if doc["outcome"] != want["outcome"]:
                wrong.append(f"outcome {doc['outcome']} (expected {want['outcome']})")
            if doc["phase"] != want["phase"]:
                wrong.append(f"phase {doc['phase']} (expected {want['phase']})")
            missing = sorted(set(want["findings"]) - codes)
            if missing:
                wrong.append(f"missing {', '.join(missing)} (reported {sorted(codes) or 'none'})")
            misses.append((p.stem, "; ".join(wrong)))
    print(f"real SGLang logs: {total} cases")
    print(f"outcome+phase right: {op_right}/{total}")
    print(f"cause right: {cause_right}/{cause_known} (cases with a known cause)")
    print("per class: cases, outcome+phase right, cause right/known")
    for c in sorted(per_class):
        n, o, k, r = per_class[c]
        print(f"  {c:30} {n:3}  {o:3}/{n:<3}  {r}/{k}")
    if "--misses" in argv:
        print("misses:")
        for stem, why in misses:
            print(f"  {stem}: {why}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main(sys.argv[1:]))
