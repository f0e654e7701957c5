"""80x24: the deployment screen of a stalled deployment keeps its banner's fix line in view, and no
footer cuts a key (the issue saw "q Q"): through the pilot at size=(80, 24) and through the real
gpuops in tmux at 80x24."""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
import tempfile
import time
import uuid
from pathlib import Path

import pytest

from gpuops.screens.bench_runs import BenchRunsScreen
from gpuops.screens.deployment import DeploymentScreen
from gpuops.screens.deployments import DeploymentsScreen
from gpuops.screens.storage import StorageScreen
from gpuops.screens.triage import TriageScreen
from gpuops.sim.host import setup_simhost
from gpuops.tui.app import GpuopsApp
from gpuops.tui.widgets import KeyFooter
from tests.sshd import free_port
from tests.conftest import kill_marked
from tests.test_rules import sim_plan
from tests.test_sglang_sim import QWEN3, model_dir
from tests.test_triage_screen import deploy_until_done, sim_world  # noqa: F401 (a fixture)
from tests.tui_helpers import app_with_a_stopped_deployment, screen_text, until

GPUOPS = str(Path(sys.executable).with_name("gpuops"))
FIX = "f: restart with NCCL_DEBUG=INFO"


def footer_line(app) -> str:
    return "".join(segment.text for segment in app.screen.query_one(KeyFooter).render_line(0)).rstrip()


def whole_keys(app) -> list[str]:
    """The footer's keys as drawn: nothing but whole keys ("q Quit", never "q Q"), and `?` last (with
    its description where it fits: the key that lists every key)."""
    line = footer_line(app)
    assert line.endswith("?") or line.endswith("? Keys"), line
    rest = line.removesuffix("? Keys") if line.endswith("? Keys") else line.removesuffix("?")
    keys, _ = app.screen.query_one(KeyFooter)._shows()
    drawn = [label for label in (f"{h.display} {h.description}" for h in keys if h.key != "question_mark")
             if label in rest]
    for label in drawn:
        rest = rest.replace(label, "", 1)
    assert not rest.strip(), (rest, line)
    return drawn


async def test_a_stall_at_80x24_shows_its_fix_line_and_whole_keys(sim_world, models):  # noqa: F811
    sim, inv = sim_world("hang-at-dist-init", "\n[stall]\ndist_init = 2\n")
    plan = sim_plan(models["qwen3"], "0.5.10", 1, name="hung")
    plan.update(host="sim", launcher="process", python=str(sim.python))
    assert await deploy_until_done(inv, plan) == "stalled"
    app = GpuopsApp(inv, interval=0.5)
    async with app.run_test(size=(80, 24)) as pilot:
        assert app.open_deployment("hung")
        assert await until(pilot, lambda: isinstance(app.screen, DeploymentScreen))
        screen = app.screen
        assert await until(pilot, lambda: screen.is_mounted and bool(screen.query("#dep-banner")))
        assert await until(pilot, lambda: FIX in screen.query_one("#dep-banner").text.plain, timeout=20)
        # in view: the stall, what to do about it, and x (its line comes right after the stall's)
        assert await until(pilot, lambda: FIX in screen_text(app) and "x: triage" in screen_text(app))
        text = screen_text(app)
        assert "STALLED: dist_init silent" in text and "nccl-init-stall" in text
        assert {"f Apply fix", "x Triage", "esc Back"} <= set(whole_keys(app))
        await pilot.press("x")
        assert await until(pilot, lambda: isinstance(app.screen, TriageScreen) and app.screen.is_mounted)
        await pilot.pause(0.3)
        assert {"f Apply fix", "r Re-run", "esc Back"} <= set(whole_keys(app))  # it drew "… esc Back q Q"


async def test_every_screens_footer_at_80_columns_draws_whole_keys(tmp_path, monkeypatch):
    app = app_with_a_stopped_deployment(tmp_path, monkeypatch)
    async with app.run_test(size=(80, 24)) as pilot:
        assert await until(pilot, lambda: "Quit" in footer_line(app))
        assert "q Quit" in whole_keys(app)  # the dashboard (it drew "… q Quit ?")
        screens = [lambda: DeploymentsScreen(), lambda: TriageScreen(app.ops.deployment("alpha")),
                   lambda: DeploymentScreen(app.ops.deployment("alpha")), lambda: StorageScreen("localhost"),
                   lambda: BenchRunsScreen()]
        for make in screens:
            screen = make()
            await app.push_screen(screen)
            assert await until(pilot, lambda: screen.is_mounted and bool(screen.query(KeyFooter)))
            await pilot.pause(0.3)
            assert "esc Back" in whole_keys(app), (type(screen).__name__, footer_line(app))
            await app.pop_screen()


def test_a_stall_in_a_real_terminal_at_80x24(tmp_path):
    """The real gpuops in tmux at 80x24: a deployment the CLI left stalled, opened with :dep, shows the
    stall and its fix line; its footer and triage's draw whole keys."""
    if not shutil.which("tmux"):
        pytest.fail("tmux is not installed: run the README's test command (it installs tmux)")
    root = Path(tempfile.mkdtemp(prefix="g80s-"))
    sim = setup_simhost(root / "sim", gpus=2, engine_version="0.5.10", scenario="hang-at-dist-init", pace=0.02)
    model = model_dir(root / "models", QWEN3, 16_381_470_720, shards=5)
    cfg = tmp_path / "config.toml"
    cfg.write_text(sim.host_block("gpu1") + f'model_dirs = ["{root / "models"}"]\n\n[stall]\ndist_init = 2\n')
    (tmp_path / "home").mkdir()
    env = {"HOME": str(tmp_path / "home"), "XDG_STATE_HOME": str(tmp_path / "state"),
           "XDG_CONFIG_HOME": str(tmp_path / "cfg"), "XDG_CACHE_HOME": str(tmp_path / "cache"),
           "HF_HUB_OFFLINE": "1", "TERM": "xterm-256color"}
    socket = f"gpuops80s-{uuid.uuid4().hex[:8]}"

    def tmux(*args: str) -> str:
        return subprocess.run(["tmux", "-L", socket, "-f", "/dev/null", *args], capture_output=True,
                              text=True).stdout

    def wait_for(*needles: str, timeout: float = 60) -> str:
        deadline = time.monotonic() + timeout
        while True:
            text = tmux("capture-pane", "-t", "s", "-p")
            if all(n in text for n in needles):
                return text
            if time.monotonic() > deadline:
                raise AssertionError(f"{[n for n in needles if n not in text]} never on the terminal:\n{text}")
            time.sleep(0.1)

    def footer(text: str) -> str:
        return text.rstrip("\n").splitlines()[-1].rstrip()

    try:
        res = subprocess.run([GPUOPS, "--config", str(cfg), "deploy", str(model), "--host", "gpu1", "--name", "hung",
                              "--port", str(free_port()), "--yes"], capture_output=True, text=True, timeout=300,
                             env={**{k: v for k, v in os.environ.items()
                                     if k not in ("GPUOPS_CONFIG", "SSH_AUTH_SOCK")}, **env})
        assert res.returncode == 1 and "stalled" in res.stdout, res.stdout + res.stderr
        exports = " ".join(f"{k}={v}" for k, v in env.items())
        tmux("new-session", "-d", "-s", "s", "-x", "80", "-y", "24",
             f"env -u COLUMNS -u LINES {exports} {GPUOPS} --config {cfg}")
        text = wait_for("GPU0", "q Quit")
        assert footer(text).endswith(("?", "? Keys")) and "q Quit" in footer(text), footer(text)
        tmux("send-keys", "-t", "s", ":")
        wait_for("host NAME · dep [NAME]")
        tmux("send-keys", "-t", "s", "-l", "dep hung")
        tmux("send-keys", "-t", "s", "Enter")
        text = wait_for("STALLED: dist_init silent", FIX, "x: triage", "/ filter  s follow")
        assert footer(text).endswith(("?", "? Keys")) and "esc Back" in footer(text), footer(text)
        tmux("send-keys", "-t", "s", "x")
        text = wait_for("triage · hung on gpu1", "Host checks")
        assert footer(text).endswith(("?", "? Keys")) and "esc Back" in footer(text), footer(text)
        assert "q Q" not in footer(text).replace("q Quit", ""), footer(text)  # (it drew "… esc Back q Q")
    finally:
        tmux("kill-server")
        subprocess.run([GPUOPS, "--config", str(cfg), "stop", "hung", "--yes"], capture_output=True, timeout=120,
                       env={**{k: v for k, v in os.environ.items() if k != "GPUOPS_CONFIG"}, **env})
        kill_marked(str(root))
        kill_marked(str(tmp_path))
        shutil.rmtree(root, ignore_errors=True)
