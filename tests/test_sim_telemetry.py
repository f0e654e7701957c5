"""Telemetry end to end: gpuops' own reporter, run by a simulated host's python (fake
pynvml, fake nvidia-smi), locally and over real SSH, into the CLI and the dashboard."""

from __future__ import annotations

from contextlib import aclosing
import json
import subprocess
import tempfile
from pathlib import Path

import pytest

from gpuops.core.config import parse_inventory
from gpuops.core.hosts.host import LocalHost, SshHost
from gpuops.sim.host import setup_simhost
from gpuops.core.telemetry.samples import MIB, Sampler, snapshot
from gpuops.screens.confirm import ConfirmScreen
from gpuops.screens.dashboard import GpuRow
from gpuops.tui.app import GpuopsApp
from gpuops.tui.widgets import RowTable
from tests.test_cli import gpuops
from tests.tui_helpers import screen_text, until

GIB = 1024**3


@pytest.fixture
def simdir():
    # sshd's users must be able to reach it: not under pytest's 0700 tmp dir
    d = Path(tempfile.mkdtemp(prefix="gpuops-sim-"))
    d.chmod(0o755)
    yield d
    subprocess.run(["rm", "-rf", str(d)])


@pytest.fixture
def sleeper():
    """A real process to stand for a GPU user (the reporter reads its /proc entry)."""
    proc = subprocess.Popen(["sleep", "3003.5"])
    yield proc
    proc.kill()
    proc.wait()


def host_from(block: str, sshd=None):
    cfg = parse_inventory(block, source="t.toml").hosts[0]
    return SshHost(cfg, connect_options=sshd.options()) if sshd else LocalHost(cfg)


@pytest.mark.parametrize("over", ["local", "ssh"])
async def test_reporter_reads_the_simulated_gpus(simdir, sleeper, sshd, over):
    sim = setup_simhost(simdir / "h", gpus=4, gpu_memory_gib=141)
    sim.set_gpu(2, memory_used=61 * GIB, util=97, processes=[{"pid": sleeper.pid, "used": 60 * GIB}])
    host = host_from(sim.host_block("sim", ssh=sshd.target() if over == "ssh" else None), sshd if over == "ssh" else None)
    try:
        snap = await snapshot(host)
        assert snap.nvml.ok and snap.source == "nvml" and snap.nvml.driver_version == "580.159.04"
        assert [g.index for g in snap.gpus] == [0, 1, 2, 3]
        g = snap.gpus[2]
        # v2 "used" (what nvidia-smi prints), reserved apart
        assert g.memory_used == 61 * GIB and g.memory_reserved == 644_939_776
        assert g.memory_total == 141 * GIB and g.util == 97 and g.name == "NVIDIA H200"
        (p,) = g.processes
        assert (p.pid, p.used_bytes, p.user) == (sleeper.pid, 60 * GIB, "root")
        assert p.command == "sleep 3003.5"
        # the stream sees a change at the next sample
        got = []
        async with aclosing(Sampler(host, interval=0.2).samples()) as samples:
            async for s in samples:
                got.append(s.gpus[0].memory_used)
                if len(got) == 1:
                    sim.set_gpu(0, memory_used=5 * GIB)
                if got[-1] == 5 * GIB or len(got) > 20:
                    break
        assert got[0] == 0 and got[-1] == 5 * GIB
    finally:
        await host.close()


async def test_without_pynvml_the_rows_come_from_nvidia_smi(simdir, sshd):
    sim = setup_simhost(simdir / "h", gpus=2, nvml="absent")
    sim.set_gpu(1, memory_used=1000 * MIB, util=12, power_mw=123450)
    host = host_from(sim.host_block("sim", ssh=sshd.target()), sshd)
    try:
        snap = await snapshot(host)
        assert snap.source == "nvidia-smi" and snap.nvml.ok
        assert "pynvml" in snap.nvml.hint and "nvidia-smi" in snap.nvml.hint
        assert [g.index for g in snap.gpus] == [0, 1]
        assert snap.gpus[1].memory_used == 1000 * MIB and snap.gpus[1].util == 12
        assert snap.gpus[1].power_w == pytest.approx(123.45)
        # streaming: `nvidia-smi … -lms` on its own channel
        seen = []
        async with aclosing(Sampler(host, interval=0.2).samples()) as samples:
            async for s in samples:
                seen.append((s.source, len(s.gpus)))
                if s.gpus:
                    break
                assert len(seen) < 40
        assert seen[-1] == ("nvidia-smi", 2)
    finally:
        await host.close()


@pytest.mark.parametrize("mode, code, needles", [
    ("no-driver", "no-driver", ["no NVIDIA driver"]),
    ("mismatch", "driver-library-mismatch", ["kernel module 580.159.04", "565.57.01"]),
])
async def test_nvml_failures_become_hints(simdir, mode, code, needles):
    sim = setup_simhost(simdir / "h", gpus=2, nvml=mode)
    host = host_from(sim.host_block("sim"))
    snap = await snapshot(host)
    assert not snap.nvml.ok and snap.nvml.code == code and snap.gpus == []
    for needle in needles:
        assert needle in snap.nvml.hint
    assert snap.host is not None and snap.host.mem_total > 0  # the host itself still reports


def test_cli_gpus_json_over_ssh(simdir, sshd, ssh_home, sleeper, tmp_path):
    sim = setup_simhost(simdir / "h", gpus=8)
    sim.set_gpu(7, memory_used=11_289_821_184, processes=[{"pid": sleeper.pid, "used": 11_280_580_608}])
    cfg = tmp_path / "c.toml"
    cfg.write_text(sim.host_block("gpu1", ssh="simbox"))
    env = {"HOME": str(ssh_home), "PATH": "/usr/bin:/bin", "XDG_STATE_HOME": str(tmp_path)}
    out = gpuops("--config", str(cfg), "gpus", "--host", "gpu1", "--json", env=env)
    assert out.returncode == 0, out.stderr
    doc = json.loads(out.stdout)
    (h,) = doc["hosts"]
    assert h["error"] is None and h["driver_version"] == "580.159.04" and len(h["gpus"]) == 8
    g7 = h["gpus"][7]
    assert set(g7) == {"index", "uuid", "name", "memory_total_bytes", "memory_used_bytes",
                       "memory_reserved_bytes", "util_percent", "power_w", "temp_c", "processes"}
    assert g7["memory_used_bytes"] == 11_289_821_184
    assert g7["processes"] == [{"pid": sleeper.pid, "user": "root", "command": "sleep 3003.5",
                                "used_bytes": 11_280_580_608}]
    out = gpuops("--config", str(cfg), "gpus", env=env)  # the human view
    assert out.returncode == 0 and "NVIDIA H200" in out.stdout and str(sleeper.pid) in out.stdout


async def test_dashboard_shows_gpus_filters_processes_and_ends_one(simdir, sshd):
    sim = setup_simhost(simdir / "h", gpus=3)
    victim = subprocess.Popen(["sleep", "4004.25"])
    bystander = subprocess.Popen(["sleep", "5005.75"])
    sim.set_gpu(0, memory_used=70 * GIB, util=88, processes=[{"pid": victim.pid, "used": 70 * GIB}])
    sim.set_gpu(1, memory_used=20 * GIB, processes=[{"pid": bystander.pid, "used": 20 * GIB}])
    host = host_from(sim.host_block("sim", ssh=sshd.target()), sshd)
    inv = parse_inventory(sim.host_block("sim", ssh=sshd.target()), source="t.toml")
    app = GpuopsApp(inv, interval=0.25, hosts=[host])
    try:
        async with app.run_test(size=(170, 50)) as pilot:
            assert await until(pilot, lambda: len(app.screen.query(GpuRow)) == 3)
            assert await until(pilot, lambda: "70.0/140.4 GiB" in screen_text(app))
            procs = app.screen.query_one("#procs", RowTable)
            assert await until(pilot, lambda: procs.row_count == 2)
            assert "4004.25" in screen_text(app) and "5005.75" in screen_text(app)
            await pilot.press("slash", *"4004")
            assert await until(pilot, lambda: procs.row_count == 1)
            assert procs.get_row_at(0)[1] == str(victim.pid)
            await pilot.press("enter")  # keep the filter, back to the tables
            procs.focus()
            await pilot.press("ctrl+k")
            assert isinstance(app.screen, ConfirmScreen)
            await pilot.press("n")  # declined: nothing happens
            await pilot.pause(0.3)
            assert victim.poll() is None
            await pilot.press("ctrl+k")
            await pilot.press("y")
            assert await until(pilot, lambda: victim.poll() is not None, timeout=15)
            assert bystander.poll() is None
            await pilot.press("escape")  # clears the filter
            assert await until(pilot, lambda: app.screen.filter_text == "")
    finally:
        for p in (victim, bystander):
            p.kill()
            p.wait()


async def test_readonly_refuses_to_end_a_process(simdir):
    sim = setup_simhost(simdir / "h", gpus=1)
    victim = subprocess.Popen(["sleep", "6006.5"])
    sim.set_gpu(0, memory_used=GIB, processes=[{"pid": victim.pid, "used": GIB}])
    inv = parse_inventory(sim.host_block("sim"), source="t.toml")
    app = GpuopsApp(inv, interval=0.25, readonly=True)
    try:
        async with app.run_test(size=(170, 50)) as pilot:
            assert await until(pilot, lambda: app.screen.query("#procs"))  # mounted after the first frame
            procs = app.screen.query_one("#procs", RowTable)
            assert await until(pilot, lambda: procs.row_count == 1)
            procs.focus()
            await pilot.press("ctrl+k")
            await pilot.pause(0.3)
            assert not isinstance(app.screen, ConfirmScreen)
            app.end_process("sim", victim.pid, None)  # even if something calls it directly
            assert await until(pilot, lambda: any("read-only" in str(n.message) for n in app._notifications))
            assert victim.poll() is None
    finally:
        victim.kill()
        victim.wait()
