#!/usr/bin/env python3
"""Render the README's dashboard screenshot (docs/dashboard.svg) from a simulated host.

    .venv/bin/python scripts/screenshot.py
"""

from __future__ import annotations

import asyncio
import os
import subprocess
import sys
import tempfile
from pathlib import Path

from gpuops.core.config import parse_inventory
from gpuops.sim.host import setup_simhost
from gpuops.tui.app import GpuopsApp

OUT = Path(__file__).resolve().parents[1] / "docs" / "dashboard.svg"
GIB = 1024**3


async def main() -> None:
    with tempfile.TemporaryDirectory() as tmp:
        os.environ["XDG_STATE_HOME"] = tmp
        sim = setup_simhost(Path(tmp) / "gpu1", gpus=8)
        server = subprocess.Popen(["sleep", "600"])
        for i in range(4):
            sim.set_gpu(i, memory_used=int((118.2 + i * 0.4) * GIB), util=93 + i, power_mw=598000 + i * 9000,
                        temp_c=61 + i, processes=[{"pid": server.pid, "used": int(117.9 * GIB)}])
        spare = setup_simhost(Path(tmp) / "gpu2", gpus=4)
        inv = parse_inventory(
            sim.host_block("gpu1") + "\n" + spare.host_block("gpu2") + '\n[hosts.gpu3]\nssh = "root@127.0.0.1:1"\n',
            source="demo.toml",
        )
        app = GpuopsApp(inv, interval=0.5, simulated=True)
        try:
            async with app.run_test(size=(150, 42)) as pilot:
                while app.monitor.states["gpu1"].updates < 12 or app.monitor.states["gpu3"].reachable is not False:
                    await pilot.pause(0.2)
                await pilot.pause(6)  # let the sparklines redraw with some history
                OUT.parent.mkdir(exist_ok=True)
                OUT.write_text(app.export_screenshot(title="gpuops"))
        finally:
            server.kill()
    print(f"wrote {OUT}", file=sys.stderr)


if __name__ == "__main__":
    asyncio.run(main())
