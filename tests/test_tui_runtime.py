"""The dashboard's runtime settings: Textual's frame pacing (up to 500 frames a second, so a key's
frame starts within 4 ms, unless the operator's TEXTUAL_FPS says otherwise) and the start-up heap set aside from the cyclic
collector while the app runs, given back when it ends."""

from __future__ import annotations

import gc
import os
import subprocess
import sys

from gpuops.core.config import parse_inventory
from gpuops.tui.app import GpuopsApp


def _max_fps(env: dict[str, str]) -> str:
    code = "import gpuops.tui, textual.constants as c; print(c.MAX_FPS)"
    done = subprocess.run([sys.executable, "-c", code], env=env, capture_output=True, text=True, timeout=60)
    assert done.returncode == 0, done.stderr
    return done.stdout.strip()


def test_gpuops_asks_textual_for_500_frames_a_second_unless_told_otherwise():
    env = {k: v for k, v in os.environ.items() if k != "TEXTUAL_FPS"}
    assert _max_fps(env) == "500"
    assert _max_fps(dict(env, TEXTUAL_FPS="30")) == "30"  # the operator's own setting is kept


async def test_the_start_up_heap_is_set_aside_while_the_app_runs_and_given_back_after(tmp_path, monkeypatch):
    monkeypatch.setenv("XDG_STATE_HOME", str(tmp_path / "state"))
    gc.unfreeze()  # (what an earlier test's app or an import set aside)
    made_before = [[object()] for _ in range(1000)]  # container objects the collector tracks
    app = GpuopsApp(parse_inventory("[hosts.h]\nlocal = true\n", source="t.toml"), interval=0.5)
    async with app.run_test(size=(120, 40)) as pilot:
        for _ in range(100):
            if gc.get_freeze_count() >= len(made_before):
                break
            await pilot.pause(0.05)
        assert gc.get_freeze_count() >= len(made_before)
    assert gc.get_freeze_count() == 0
