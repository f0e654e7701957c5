"""What gpuops starts on a host dies with it: `gpuops logs NAME -f` ended by SIGTERM, SIGHUP (its
terminal closed) or SIGKILL leaves no follower behind, on the local host (the guard's lifeline
pipe) and over a real sshd (the channel's close), as root and as a second OS user."""

from __future__ import annotations

import os
import select
import shutil
import signal
import subprocess
import tempfile
import time
from pathlib import Path

import pytest

from gpuops.core.deploy.store import Store
from tests.plans import make_plan
from tests.test_cli import GPUOPS
from tests.test_launch import own_pids


def wait_for(predicate, timeout: float) -> bool:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if predicate():
            return True
        time.sleep(0.05)
    return predicate()


@pytest.mark.parametrize("where", ["local", "ssh-root", "ssh-user"])
@pytest.mark.parametrize("sig", [signal.SIGTERM, signal.SIGHUP, signal.SIGKILL], ids=["TERM", "HUP", "KILL"])
def test_logs_follow_ends_its_follower_when_gpuops_is_ended(tmp_path, sshd, ssh_home, where, sig):
    if where == "ssh-user" and sshd.other_user is None:
        pytest.skip("needs root to make a second user")
    name = f"follow{os.getpid()}{where[-1]}{int(sig)}"
    home = Path(tempfile.mkdtemp(prefix="gpuops-lifeline-"))  # the host user's HOME (readable by the 2nd user)
    home.chmod(0o755)
    try:
        folder = home / ".local/state/gpuops/deployments" / name
        folder.mkdir(parents=True)
        (folder / "log").write_text("first line\n")
        for path in (home, *home.rglob("*")):
            path.chmod(0o755 if path.is_dir() else 0o644)
        state = tmp_path / "state"
        store = Store(state / "gpuops" / "gpuops.db")
        store.add_deployment("box", make_plan(name, launcher="process"))
        store.set_state(name, "ready")
        store.release_lease(name)
        store.close()
        reach = {"local": "local = true", "ssh-root": 'ssh = "simbox"',
                 "ssh-user": f'ssh = "{sshd.other_user}@127.0.0.1:{sshd.port}"'}[where]
        cfg = tmp_path / "config.toml"
        cfg.write_text(f'[hosts.box]\n{reach}\nenv = {{ HOME = "{home}" }}\n')
        env = dict(os.environ, HOME=str(ssh_home), XDG_STATE_HOME=str(state), XDG_CACHE_HOME=str(tmp_path / "c"))
        env.pop("GPUOPS_CONFIG", None)
        proc = subprocess.Popen([GPUOPS, "--config", str(cfg), "logs", name, "-f"], stdout=subprocess.PIPE,
                                stderr=subprocess.PIPE, env=env, stdin=subprocess.DEVNULL)
        try:
            assert select.select([proc.stdout], [], [], 60)[0], "no line within 60 s"
            assert proc.stdout.readline() == b"first line\n"
            followers = own_pids(str(folder / "log"))
            assert followers, "the follower runs"
            proc.send_signal(sig)
            proc.wait(30)
            assert wait_for(lambda: not own_pids(str(folder / "log")), timeout=15), \
                f"left running after {sig.name}: {own_pids(str(folder / 'log'))}"
        finally:
            if proc.poll() is None:
                proc.kill()
                proc.wait()
            for pid in own_pids(str(folder / "log")):
                os.kill(pid, signal.SIGKILL)
    finally:
        shutil.rmtree(home, ignore_errors=True)
