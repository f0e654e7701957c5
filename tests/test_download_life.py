"""A deployment's download when gpuops goes away in the middle of it, on the simulated host, locally
and over a real sshd: `kill -9` of the deployer ends the host's downloader with it; `status` (the
list and NAME) and the deployment screen say the download was interrupted (not "downloading"
forever); a restart (the deployments view's r, a fix) resumes the download before it starts the
server; and `q` in the TUI asks first while gpuops itself downloads."""

from __future__ import annotations

import json
import os
import re
import shutil
import signal
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from types import SimpleNamespace

import pytest

from gpuops.core.config import load_inventory
from gpuops.core.domain import Plan
from gpuops.core.ops import Refused
from gpuops.sim.host import setup_simhost
from tests.sshd import free_port
from tests.conftest import PACE, kill_marked, operator_hub, restart_deployment
from tests.tui_helpers import screen_text, until
from tests.test_cli import GPUOPS
from tests.test_hosts import processes_matching
from gpuops.screens.confirm import ConfirmScreen
from gpuops.tui.app import GpuopsApp

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
    else:  # the process launcher's files (~/.local/state/gpuops/deployments/dl) this test's own, not /root's
        env["HOME"] = str(tmp_path / "home")
    sim = setup_simhost(root / "sim", gpus=4, engine_version="0.5.23", pace=PACE)
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


def deploy_and_kill_mid_download(box, running: list | None = None) -> int:
    """`gpuops deploy` until a few hundred MB are on the host's disk, then kill -9: the bytes then
    (and into `running`, the host's downloaders seen just before the kill)."""
    proc = subprocess.Popen([GPUOPS, "--config", str(box.cfg), "deploy", "Qwen/Qwen3-8B", "--host", "gpu1",
                             "--name", "dl", "--yes", "--json", "--port", str(free_port())],
                            stdout=subprocess.PIPE, text=True, env=box.env)
    done = 0
    try:
        assert proc.stdout is not None
        for line in proc.stdout:
            ev = json.loads(line)
            if ev["event"] == "progress" and ev["phase"] == "downloading" and ev["done"] >= 200e6:
                done = ev["done"]
                if running is not None:
                    running.extend(processes_matching(box.hf))
                break
    finally:
        proc.send_signal(signal.SIGKILL)
        proc.wait()
    assert done, "the download never began"
    return done


def events(box, name: str = "dl") -> tuple[dict, list[dict]]:
    out = gpuops(box, "status", name, "--json")
    assert out.returncode == 0, out.stderr
    doc = json.loads(out.stdout)
    return doc["deployment"], doc["events"]


def on_disk(folder: Path) -> int:
    return sum(f.stat().st_size for f in folder.rglob("*") if f.is_file())


def test_a_killed_deployer_takes_its_download_along(box):
    running: list = []
    deploy_and_kill_mid_download(box, running)
    # seen before the kill: after it, over SSH, the closed channel may end it before a look could see it
    assert running, "the host's download was not running"
    # the host's downloader ends with the deployer (local: its parent is gone; ssh: the channel closed)
    assert wait_for(lambda: not processes_matching(box.hf), timeout=15), processes_matching(box.hf)
    size = on_disk(box.folder)
    time.sleep(1.0)  # nothing may grow the folder now: a second later it is as it was
    assert on_disk(box.folder) == size


def test_a_download_whose_deployer_was_killed_says_interrupted(box):
    killed_at = deploy_and_kill_mid_download(box)
    # the list says what is true: nothing downloads, the deployment is not stuck "downloading"
    listing = gpuops(box, "status")
    assert listing.returncode == 0 and "dl  stopped" in listing.stdout and "downloading" not in listing.stdout, \
        listing.stdout
    d, evs = events(box)
    assert d["state"] == "stopped"
    (finding,) = [e for e in evs if e["event"] == "finding"]
    assert finding["code"] == "download-interrupted" and finding["severity"] == "warning"
    assert re.search(r"stopped at \d+\.\d [MG]iB of 15\.3 GiB: the gpuops that ran it was closed or killed$",
                     finding["summary"]), finding["summary"]
    assert finding["data"]["done_bytes"] >= killed_at
    assert "deploy again" in finding["fix"]["summary"]
    last = [e for e in evs if e["event"] == "state"][-1]
    assert last["state"] == "stopped" and last["reason"] == "download interrupted: deploy again to resume"
    human = gpuops(box, "status", "dl")
    assert "dl: stopped" in human.stdout and "download interrupted: deploy again to resume" in human.stdout
    # reconciled once: asking again records nothing more
    assert len(events(box)[1]) == len(evs)


def test_a_restart_after_an_interrupted_download_resumes_it_before_starting(box):
    """The deployments view's r (Ops.restart in a process of its own): the copy on the host is checked
    first; the rest is downloaded (from what is on disk) as a new run, then the server starts on a
    complete folder."""
    killed_at = deploy_and_kill_mid_download(box)
    assert wait_for(lambda: not processes_matching(box.hf), timeout=15)
    box.sim.set_sim(download_rate=FAST)
    out = restart_deployment(box.cfg, box.env, "dl", timeout=300)
    assert out.stdout.strip() == "ready", out.stdout + out.stderr
    d, evs = events(box)
    assert d["run"] == 2
    states = [e["state"] for e in evs if e["event"] == "state"]
    assert states.index("downloading") < states.index("starting"), states
    downloads = [e for e in evs if e["event"] == "progress" and e["phase"] == "downloading"]
    assert downloads[0]["done"] >= killed_at and downloads[-1]["done"] >= 0.99 * downloads[-1]["total"]
    models = json.loads(gpuops(box, "models", "--host", "gpu1", "--json").stdout)
    (copy,) = [m for m in models["hosts"][0]["models"] if m["path"] == str(box.folder)]
    assert copy["complete"] is True
    # a second restart finds the copy complete: no download this time (no hf run, nothing recorded)
    assert restart_deployment(box.cfg, box.env, "dl", timeout=300).stdout.strip() == "ready"
    d, evs = events(box)
    assert d["run"] == 3 and "downloading" not in [e["state"] for e in evs if e["event"] == "state"]


FIX = ("import asyncio, sys\n"
       "from gpuops.core.config import load_inventory\n"
       "from gpuops.core.ops import Ops\n"
       "async def main():\n"
       "    ops = Ops(load_inventory(sys.argv[1]))\n"
       "    try:\n"
       "        print(await ops.apply_fix('dl', {'set_env': {'NCCL_DEBUG': 'INFO'}}, code='nccl-init-stall',\n"
       "                                  confirmed=True))\n"
       "    finally:\n"
       "        await ops.close()\n"
       "asyncio.run(main())\n")


def test_a_fix_applied_after_an_interrupted_download_resumes_it_too(box):
    """A fix begins a new run with the patched plan: the same check and download come first."""
    if box.kind == "ssh":
        pytest.skip("the restart's own path: over SSH the restart test covers it")
    deploy_and_kill_mid_download(box)
    assert wait_for(lambda: not processes_matching(box.hf), timeout=15)
    box.sim.set_sim(download_rate=FAST)
    out = subprocess.run([sys.executable, "-c", FIX, str(box.cfg)], capture_output=True, text=True, env=box.env,
                         timeout=300)
    assert out.stdout.strip() == "ready", out.stdout + out.stderr
    d, evs = events(box)
    assert d["run"] == 2
    kinds = [e.get("state") or e["event"] for e in evs if e["event"] in ("state", "plan")]
    assert kinds.index("plan") < kinds.index("downloading") < kinds.index("starting"), kinds


def _tui_env(box, monkeypatch) -> None:
    for var in ("HOME", "XDG_STATE_HOME", "XDG_CONFIG_HOME", "XDG_CACHE_HOME", "HF_HUB_CACHE", "HF_HUB_OFFLINE"):
        if var in box.env:
            monkeypatch.setenv(var, box.env[var])


def _plan(box) -> Plan:
    out = gpuops(box, "plan", "Qwen/Qwen3-8B", "--host", "gpu1", "--name", "dl", "--json")
    assert out.returncode == 0, out.stderr
    return Plan.from_json(json.loads(out.stdout))


async def test_quit_asks_while_gpuops_downloads(box, monkeypatch):
    """q while this gpuops downloads: a question (n stays, the download goes on); y quits, and the
    host's download ends with it."""
    if box.kind == "ssh":
        pytest.skip("the question is the TUI's own: one host kind is enough")
    _tui_env(box, monkeypatch)
    plan = _plan(box)
    app = GpuopsApp(load_inventory(str(box.cfg)), interval=0.5)
    async with app.run_test(size=(160, 45)) as pilot:
        app.run_worker(app.ops.deploy(plan, "gpu1", yes=True, keep_on=True), group="deploy", exit_on_error=False)
        assert await until(pilot, lambda: any(done for _, done, _ in app.ops.downloads()), timeout=60)
        with pytest.raises(Refused, match="dl is being deployed by this gpuops \\(downloading\\)"):
            await app.ops.restart("dl", confirmed=True)  # a restart beside its own download: refused
        await pilot.press("q")
        assert await until(pilot, lambda: isinstance(app.screen, ConfirmScreen))
        assert app.screen.question.startswith("Quit while gpuops downloads dl (")
        assert "resumes it from what is on disk" in app.screen.detail
        await pilot.press("q")  # asked already: not asked twice
        await pilot.press("n")  # stay: nothing was interrupted
        assert await until(pilot, lambda: not isinstance(app.screen, ConfirmScreen))
        assert app.is_running and not app._exit and processes_matching(box.hf)
        await pilot.press("q")
        assert await until(pilot, lambda: isinstance(app.screen, ConfirmScreen))
        await pilot.press("y")
        assert await until(pilot, lambda: app._exit or not app.is_running)
    assert wait_for(lambda: not processes_matching(box.hf), timeout=15)
    listing = gpuops(box, "status")
    assert "dl  stopped" in listing.stdout, listing.stdout


async def test_the_deployment_screen_says_when_the_download_lost_its_downloader(box, monkeypatch):
    """A CLI deploy downloads; the TUI's deployment screen shows its progress; kill -9 of the deploy:
    the screen says the download was interrupted instead of a frozen "x / y GB"."""
    _tui_env(box, monkeypatch)
    proc = subprocess.Popen([GPUOPS, "--config", str(box.cfg), "deploy", "Qwen/Qwen3-8B", "--host", "gpu1",
                             "--name", "dl", "--yes", "--json", "--port", str(free_port())],
                            stdout=subprocess.PIPE, text=True, env=box.env)
    try:
        assert proc.stdout is not None
        for line in proc.stdout:
            if json.loads(line).get("phase") == "downloading":
                break
        app = GpuopsApp(load_inventory(str(box.cfg)), interval=0.5)
        async with app.run_test(size=(160, 45)) as pilot:
            assert app.open_deployment("dl")
            assert await until(pilot, lambda: "downloading" in screen_text(app) and "iB/s" in screen_text(app),
                               timeout=30), screen_text(app)
            with pytest.raises(Refused, match=f"dl is being deployed by gpuops pid {proc.pid} \\(downloading\\)"):
                await app.ops.restart("dl", confirmed=True)  # the CLI's download goes on: not restarted beside it
            assert processes_matching(box.hf)
            proc.send_signal(signal.SIGKILL)
            proc.wait()
            # the state's banner and the finding are two events: under load one frame may show the first alone
            assert await until(pilot, lambda: "stopped: download interrupted: deploy again to resume"
                               in screen_text(app) and "download-interrupted" in screen_text(app),
                               timeout=30), screen_text(app)
            assert "iB/s" not in screen_text(app), screen_text(app)
    finally:
        proc.kill()
        proc.wait()


async def test_r_on_the_deployments_view_resumes_an_interrupted_download_first(box, monkeypatch):
    """The operator's way: kill -9 mid-download, then r on the deployments view (it asks): the rest of
    the weights come down as run 2 (the screen shows them downloading) before the server starts."""
    if box.kind == "ssh":
        pytest.skip("the view's r is Ops.restart: over SSH the restart test covers it")
    killed_at = deploy_and_kill_mid_download(box)
    assert wait_for(lambda: not processes_matching(box.hf), timeout=15)
    box.sim.set_sim(download_rate=FAST // 8)  # a few seconds of it: seen on the screen
    _tui_env(box, monkeypatch)
    app = GpuopsApp(load_inventory(str(box.cfg)), interval=0.5)
    async with app.run_test(size=(160, 45)) as pilot:
        app.open_deployments(select="dl")
        assert await until(pilot, lambda: "dl" in screen_text(app) and "stopped" in screen_text(app))
        await pilot.press("r")
        assert await until(pilot, lambda: isinstance(app.screen, ConfirmScreen))
        assert "weights are checked on the host first" in app.screen.detail
        await pilot.press("y")
        assert await until(pilot, lambda: app.ops.deployment("dl").run == 2 and
                           app.ops.deployment("dl").state == "downloading", timeout=60)
        assert await until(pilot, lambda: app.ops.deployment("dl").state == "ready", timeout=240)
    d, evs = events(box)
    states = [e["state"] for e in evs if e["event"] == "state"]
    assert d["run"] == 2 and states.index("downloading") < states.index("starting"), states
    downloads = [e for e in evs if e["event"] == "progress" and e["phase"] == "downloading"]
    assert downloads[0]["done"] >= killed_at
