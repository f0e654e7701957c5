#!/usr/bin/env python3
"""Start to first painted dashboard: gpuops against a minimal Textual app, same run.

Each sample is a fresh process (imports included) that runs the `gpuops` command as it starts
with no arguments (its argument parsing, the config lookup, the default inventory: localhost), the
dashboard headless; the child prints the wall-clock time of its first paint, the parent subtracts
the moment it spawned the child. Runs alternate so that machine noise hits both alike.
Prints medians and their ratio; the fleet figure's goal (issue 14): first paint within 1.2x the
minimal app's, printed as met or MISSED.

    .venv/bin/python tests/perf/startup.py [--runs 10] [--instructions]

`--instructions` also counts, under valgrind's cachegrind (needs `valgrind`), the instructions each
start executes to its first paint, once each: on a shared machine the wall clock swings by tens of
per cent from run to run, this count by about 0.2%, so a change's effect on start-up can be told
apart from the noise (the goal itself stays the wall clock's).
"""

from __future__ import annotations

import argparse
import os
import re
import shutil
import statistics
import subprocess
import sys
import tempfile
import time

PAINTED = """
import time
def painted(app):
    # first paint done: report, then leave without waiting for anything else
    app.call_after_refresh(lambda: (print("PAINT", time.time(), time.process_time(), flush=True), app.exit()))
"""

GPUOPS = PAINTED + """
import sys
import gpuops.tui.app as tui_app

class Probe(tui_app.GpuopsApp):
    def on_mount(self):  # Textual runs GpuopsApp.on_mount too (handlers follow the MRO)
        self.call_after_refresh(painted, self)

    def run(self, **_):
        return super().run(headless=True, size=(160, 45))

tui_app.GpuopsApp = Probe  # what `gpuops` runs below, headless
from gpuops.cli.main import main
sys.exit(main([]))
"""

MINIMAL = PAINTED + """
from textual.app import App
from textual.widgets import Footer, Header, Static

class Minimal(App):
    def compose(self):
        yield Header()
        yield Static("hello")
        yield Footer()
    def on_mount(self):
        self.call_after_refresh(painted, self)

Minimal().run(headless=True, size=(160, 45))
"""

IMPORTS = ("import sys; import gpuops.cli.main, gpuops.tui.app; print(sorted(m for m in ('asyncssh', 'httpx', "
           "'huggingface_hub', 'pynvml', 'importlib.metadata') if m in sys.modules))")


def one(code: str, env: dict) -> tuple[float, float]:
    """(wall-clock seconds from spawn to first paint, the child's CPU seconds by then)."""
    t0 = time.time()
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, env=env, timeout=60)
    for line in out.stdout.splitlines():
        if line.startswith("PAINT"):
            _, painted, cpu = line.split()
            return float(painted) - t0, float(cpu)
    raise RuntimeError(f"no paint reported: rc={out.returncode}\n{out.stderr[-2000:]}")


def instructions(code: str, env: dict) -> int:
    """The instructions (user space, every thread) the child executes from its start to its first
    paint (where it exits), as cachegrind counts them."""
    out = subprocess.run(["valgrind", "--tool=cachegrind", "--cache-sim=no", "--cachegrind-out-file=/dev/null",
                          sys.executable, "-c", code], capture_output=True, text=True, env=env, timeout=600)
    m = re.search(r"I\s+refs:\s+([\d,]+)", out.stderr)
    if out.returncode != 0 or "PAINT" not in out.stdout or m is None:
        raise RuntimeError(f"cachegrind run failed: rc={out.returncode}\n{out.stderr[-2000:]}")
    return int(m.group(1).replace(",", ""))


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--runs", type=int, default=10)
    ap.add_argument("--instructions", action="store_true",
                    help="also count each start's instructions under cachegrind (steady where the clock is not)")
    args = ap.parse_args()
    if args.instructions and shutil.which("valgrind") is None:
        ap.error("--instructions needs valgrind (apt-get install valgrind)")
    with tempfile.TemporaryDirectory() as tmp:
        env = dict(os.environ, XDG_STATE_HOME=tmp, XDG_CONFIG_HOME=tmp)
        env.pop("GPUOPS_CONFIG", None)
        # Bytecode as an installed gpuops has it: with PYTHONDONTWRITEBYTECODE set (some shells and
        # CI images set it), gpuops' own modules (an editable install: no .pyc shipped) would be
        # compiled from source at every start while Textual's come compiled from its wheel. Both
        # apps' children write and read their bytecode under the run's own directory instead.
        env.pop("PYTHONDONTWRITEBYTECODE", None)
        env["PYTHONPYCACHEPREFIX"] = os.path.join(tmp, "pycache")
        one(MINIMAL, env), one(GPUOPS, env)  # warm the page cache and .pyc files
        g, m, gc, mc = [], [], [], []
        for _ in range(args.runs):
            wall, cpu = one(MINIMAL, env)
            m.append(wall)
            mc.append(cpu)
            wall, cpu = one(GPUOPS, env)
            g.append(wall)
            gc.append(cpu)
        heavy = subprocess.run([sys.executable, "-c", IMPORTS], capture_output=True, text=True, env=env).stdout.strip()
        counts = (instructions(MINIMAL, env), instructions(GPUOPS, env)) if args.instructions else None
    gm, mm = statistics.median(g), statistics.median(m)
    print(f"runs: {args.runs} each, alternating (bytecode cached for both, under the run's directory)")
    print(f"minimal Textual app: median {mm:.3f} s  (min {min(m):.3f}, max {max(m):.3f})")
    print(f"gpuops dashboard   : median {gm:.3f} s  (min {min(g):.3f}, max {max(g):.3f})")
    ratio = gm / mm
    # CPU time is steadier than the wall clock on a busy machine (other processes' load mostly
    # shows as waiting, not as the child's own CPU): printed beside it, the goal stays the wall clock's
    print(f"CPU time to first paint: minimal {statistics.median(mc):.3f} s, gpuops {statistics.median(gc):.3f} s "
          f"({statistics.median(gc) / statistics.median(mc):.2f}x)")
    print(f"heavy modules imported at start: {heavy}")
    if counts is not None:
        print(f"instructions to first paint (cachegrind): minimal {counts[0] / 1e6:,.0f} M, gpuops {counts[1] / 1e6:,.0f} M "
              f"({counts[1] / counts[0]:.3f}x)")
    print(f"fleet figure: start to first paint {gm:.3f} s, {ratio:.2f}x the minimal Textual app's {mm:.3f} s "
          f"(same run); goal <= 1.2x: {'met' if ratio <= 1.2 else 'MISSED'}")


if __name__ == "__main__":
    main()
