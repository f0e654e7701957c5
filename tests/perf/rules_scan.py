#!/usr/bin/env python3
"""What the finding rules' scanner costs beside the phase tracker, on a long serving log.

The log (tests/test_rules.py's long_serving_log): 200 copies of a real 20 KB server_args line, a real
SGLang start, then 200,000 serving lines (batch, access, NCCL). The tracker is the same-run baseline:
both passes run alternately, best of --rounds, and the figures are printed with their ratio. The goal
(issue 12): the scanner's pass costs less than the tracker's own (ratio < 1); printed as met or MISSED.

    .venv/bin/python tests/perf/rules_scan.py [--rounds 3] [--serving 40000]
"""

from __future__ import annotations

import argparse
import sys
import time
from pathlib import Path

REPO = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(REPO))

from gpuops.core.engines.sglang.finding_rules import LogScanner  # noqa: E402
from gpuops.core.engines.sglang.phases import clean, track_log  # noqa: E402
from tests.test_rules import long_serving_log  # noqa: E402


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--rounds", type=int, default=3)
    ap.add_argument("--serving", type=int, default=40_000, help="groups of five serving lines")
    args = ap.parse_args()
    lines = long_serving_log(serving=args.serving)
    cleaned = [clean(x) for x in lines]
    tracker_s, scanner_s = [], []
    for _ in range(args.rounds):  # alternated: the machine's noise hits both alike
        t0 = time.perf_counter()
        track_log(lines)
        tracker_s.append(time.perf_counter() - t0)
        scanner = LogScanner()
        t0 = time.perf_counter()
        for ln in cleaned:
            scanner.feed(ln)
        scanner_s.append(time.perf_counter() - t0)
    t, s = min(tracker_s), min(scanner_s)
    print(f"{len(lines):,} lines, best of {args.rounds}")
    print(f"tracker (baseline)  {len(lines) / t:>12,.0f} lines/s")
    print(f"rules' scanner      {len(lines) / s:>12,.0f} lines/s")
    print(f"scanner / tracker   {s / t:.2f}  goal < 1: {'met' if s < t else 'MISSED'}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
