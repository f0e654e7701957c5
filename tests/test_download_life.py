"""A deployment's download when gpuops goes away in the middle of it, on the simulated host, locally
and over a real sshd: `kill -9` of the deployer ends the host's downloader with it."""

from __future__ import annotations

import json
import os
import shutil
import signal
import subprocess
import tempfile
import time
from pathlib import Path
from types import SimpleNamespace

import pytest

from gpuops.sim.host import setup_simhost
from tests.conftest import PACE, kill_marked, operator_hub
from tests.test_cli import GPUOPS
from tests.test_hosts import processes_matching

SLOW = 4 << 20  # bytes/s of the simulated hf, / PACE: ~80 MB/s, 16.4 GB would take minutes
FAST = 400 << 20  # ~8 GB/s: the rest of the download in a couple of seconds


@pytest.fixture(params=["local", "ssh"])
def box(request, tmp_path):
    """A simulated 4-GPU host reached locally or over the real sshd, Qwen3-8B's config in the
    operator's HF cache, the host's downloads slow."""
    root = Path(tempfile.mkdtemp(prefix="gpuops-dl-"))
    root.chmod(0o755)
    hub = operator_hub(tmp_path / "hub")
    env = dict(os.environ, XDG_STATE_HOME=str(tmp_path / "state"), XDG_CONFIG_HOME=str(tmp_path / "cfg"),
               XDG_CACHE_HOME=str(tmp_path / "cache"), HF_HUB_CACHE=str(hub), HF_HUB_OFFLINE="1")
    for key in ("GPUOPS_CONFIG", "HF_TOKEN"):
        env.pop(key, None)
    ssh = None
    if request.param == "ssh":
        env["HOME"] = str(request.getfixturevalue("ssh_home"))
        ssh = "simbox"
    sim = setup_simhost(root / "sim", gpus=4, sglang_version="0.5.23", pace=PACE)
    sim.set_sim(download_rate=SLOW)
    cfg = tmp_path / "gpuops.toml"
    cfg.write_text(sim.host_block("gpu1", ssh=ssh) + f'model_dirs = ["{root / "models"}"]\n')
    try:
        yield SimpleNamespace(cfg=cfg, env=env, sim=sim, root=root, kind=request.param,
                              hf=str(sim.directory / "bin" / "hf"), folder=root / "models" / "Qwen" / "Qwen3-8B")
    finally:
        subprocess.run([GPUOPS, "--config", str(cfg), "stop", "dl", "--yes"], capture_output=True, env=env,
                       timeout=120)
        sim.shutdown()
        kill_marked(str(root))
        shutil.rmtree(root, ignore_errors=True)


def gpuops(box, *args: str, timeout: float = 120) -> subprocess.CompletedProcess:
    return subprocess.run([GPUOPS, "--config", str(box.cfg), *args], capture_output=True, text=True, env=box.env,
                          timeout=timeout, stdin=subprocess.DEVNULL)


def wait_for(predicate, timeout: float, step: float = 0.1) -> bool:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if predicate():
            return True
        time.sleep(step)
    return False


def deploy_and_kill_mid_download(box) -> int:
    """`gpuops deploy` until a few hundred MB are on the host's disk, then kill -9: the bytes then."""
    proc = subprocess.Popen([GPUOPS, "--config", str(box.cfg), "deploy", "Qwen/Qwen3-8B", "--host", "gpu1",
                             "--name", "dl", "--yes", "--json"], stdout=subprocess.PIPE, text=True, env=box.env)
    done = 0
    try:
        assert proc.stdout is not None
        for line in proc.stdout:
            ev = json.loads(line)
            if ev["event"] == "progress" and ev["phase"] == "downloading" and ev["done"] >= 200e6:
                done = ev["done"]
                break
    finally:
        proc.send_signal(signal.SIGKILL)
        proc.wait()
    assert done, "the download never began"
    return done


def on_disk(folder: Path) -> int:
    return sum(f.stat().st_size for f in folder.rglob("*") if f.is_file())


def test_a_killed_deployer_takes_its_download_along(box):
    deploy_and_kill_mid_download(box)
    assert processes_matching(box.hf), "the host's download was not running"
    # the host's downloader ends with the deployer (local: its parent is gone; ssh: the channel closed)
    assert wait_for(lambda: not processes_matching(box.hf), timeout=15), processes_matching(box.hf)
    size = on_disk(box.folder)
    time.sleep(1.0)  # nothing may grow the folder now: a second later it is as it was
    assert on_disk(box.folder) == size
