"""The real terminal: gpuops in tmux renders the dashboard and answers keys."""

from __future__ import annotations

import shutil
import subprocess
import sys
import time
import uuid
from pathlib import Path

import pytest

from gpuops.sim.host import setup_simhost

GPUOPS = str(Path(sys.executable).with_name("gpuops"))


def capture(session: str) -> str:
    return subprocess.run(["tmux", "capture-pane", "-t", session, "-p"], capture_output=True, text=True).stdout


def wait_for_screen(session: str, needle: str, timeout: float = 20.0) -> str:
    deadline = time.monotonic() + timeout
    text = ""
    while time.monotonic() < deadline:
        text = capture(session)
        if needle in text:
            return text
        time.sleep(0.1)
    raise AssertionError(f"{needle!r} never appeared on the terminal:\n{text}")


def test_dashboard_renders_in_a_real_terminal(tmp_path):
    if not shutil.which("tmux"):
        pytest.fail("tmux is not installed: run the README's test command (it installs tmux)")
    sim = setup_simhost(tmp_path / "sim", gpus=2)
    cfg = tmp_path / "config.toml"
    cfg.write_text(sim.host_block("rack7-gpu3") + "\n[hosts.localhost]\nlocal = true\n")
    session = f"gpuops-{uuid.uuid4().hex[:8]}"
    env = f"TERM=xterm-256color XDG_STATE_HOME={tmp_path / 'state'} XDG_CONFIG_HOME={tmp_path / 'cfg'}"
    cmd = f"env {env} {GPUOPS} --config {cfg}"
    subprocess.run(["tmux", "new-session", "-d", "-s", session, "-x", "160", "-y", "45", cmd], check=True)
    try:
        wait_for_screen(session, "Quit")  # the footer is drawn
        screen = wait_for_screen(session, "rack7-gpu3")
        assert "localhost" in screen
        wait_for_screen(session, "GPU1")  # the simulated host's GPUs are drawn
        wait_for_screen(session, "H200")
        subprocess.run(["tmux", "send-keys", "-t", session, "?"], check=True)
        wait_for_screen(session, "Keys: dashboard")
        subprocess.run(["tmux", "send-keys", "-t", session, "Escape"], check=True)
        # ESC then q at once would read as alt+q: wait until the help is gone
        deadline = time.monotonic() + 10
        while "Keys: dashboard" in capture(session) and time.monotonic() < deadline:
            time.sleep(0.1)
        subprocess.run(["tmux", "send-keys", "-t", session, "q"], check=True)
        deadline = time.monotonic() + 10
        while time.monotonic() < deadline:
            alive = subprocess.run(["tmux", "has-session", "-t", session], capture_output=True).returncode == 0
            if not alive:
                break
            time.sleep(0.1)
        assert not alive, "gpuops did not quit on q"
    finally:
        subprocess.run(["tmux", "kill-session", "-t", session], capture_output=True)


def test_the_dashboard_at_80x24(tmp_path):
    """80x24, in a real terminal: the hosts above the detail, each GPU row with its memory bar and
    figures, and the footer down to q Quit."""
    if not shutil.which("tmux"):
        pytest.fail("tmux is not installed: run the README's test command (it installs tmux)")
    sim = setup_simhost(tmp_path / "sim", gpus=2)
    cfg = tmp_path / "config.toml"
    cfg.write_text(sim.host_block("rack7-gpu3"))
    session = f"gpuops-{uuid.uuid4().hex[:8]}"
    env = f"TERM=xterm-256color XDG_STATE_HOME={tmp_path / 'state'} XDG_CONFIG_HOME={tmp_path / 'cfg'}"
    subprocess.run(["tmux", "new-session", "-d", "-s", session, "-x", "80", "-y", "24",
                    f"env {env} {GPUOPS} --config {cfg}"], check=True)
    try:
        screen = wait_for_screen(session, "GiB   ")  # a GPU row's memory figures are drawn
        rows = [ln for ln in screen.splitlines() if "GPU0" in ln or "GPU1" in ln]
        assert len(rows) == 2 and all("mem " in r and "/140.4 GiB" in r for r in rows), screen
        assert "q Quit" in screen.splitlines()[-1] or "q Quit" in screen, screen
        assert "rack7-gpu3" in screen and "Processes holding GPU memory" in screen
    finally:
        subprocess.run(["tmux", "kill-session", "-t", session], capture_output=True)
