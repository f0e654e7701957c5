"""What the TUI shows is true, and every key says what it does (issue 23, second pass): through
Textual's pilot against a local simulated host (its GPUs' memory, its processes) and deployments
recorded in a store of the test's own."""

from __future__ import annotations

import subprocess

import pytest

from gpuops.core.config import parse_inventory
from gpuops.core.deploy.store import Store
from gpuops.screens.deployment import DeploymentScreen
from gpuops.screens.deployments import DeploymentsScreen
from gpuops.sim.host import setup_simhost
from gpuops.tui.app import GpuopsApp
from tests.plans import make_plan
from tests.tui_helpers import screen_text, until

GIB = 1024**3


@pytest.fixture
def box(tmp_path, monkeypatch):
    """A local simulated host `sim` (2 GPUs) and a store of the test's own; `add(name, state)` records a
    deployment of Qwen3-8B on GPU0 in that state."""
    for var, sub in (("HOME", "home"), ("XDG_STATE_HOME", "state"), ("XDG_CACHE_HOME", "cache"),
                     ("XDG_CONFIG_HOME", "config")):
        (tmp_path / sub).mkdir()
        monkeypatch.setenv(var, str(tmp_path / sub))
    sim = setup_simhost(tmp_path / "sim", gpus=2)
    inv = parse_inventory(sim.host_block("sim"), source=str(tmp_path / "config.toml"))

    class Box:
        pass

    b = Box()
    b.sim, b.inv, b.tmp = sim, inv, tmp_path

    def add(name: str, state: str, **fields):
        store = Store()
        try:
            plan = make_plan(name, host="sim", python=str(sim.python), **fields)
            return store.add_deployment("sim", plan, state=state)
        finally:
            store.close()

    b.add = add
    b.holders = []

    def hold(gpu: int, gib: int) -> int:
        """A process of this test (its pid on GPU `gpu`, holding `gib` GiB there: the simulator drops
        the processes that do not exist)."""
        proc = subprocess.Popen(["sleep", "600"])
        b.holders.append(proc)
        sim.set_gpu(gpu, memory_used=gib * GIB, processes=[{"pid": proc.pid, "used": gib * GIB}])
        return proc.pid

    b.hold = hold
    yield b
    for proc in b.holders:
        proc.kill()
        proc.wait()
    sim.shutdown()


def shown_in(screen, selector: str) -> str:
    """A TextView's text ("" until the screen has mounted it)."""
    found = screen.query(selector)
    return found.first().text.plain if found else ""


# ------------------------------------------------------------------ GPU memory is a running server's only


async def test_a_stopped_or_crashed_deployment_shows_no_gpu_memory_of_another(box):
    """Three deployments recorded on GPU0, which holds 50 GiB of the one that runs: only that one shows
    it; the stopped and the crashed one show "—" (the deployments view and their deployment screens)."""
    box.hold(0, 50)
    box.add("running", "ready")
    box.add("halted", "stopped")
    box.add("broken", "crashed")
    app = GpuopsApp(box.inv, interval=0.5)
    async with app.run_test(size=(160, 40)) as pilot:
        assert await until(pilot, lambda: app.monitor.states["sim"].snapshot is not None)
        app.open_deployments()
        assert await until(pilot, lambda: isinstance(app.screen, DeploymentsScreen))
        view = app.screen
        assert await until(pilot, lambda: set(view.rows) == {"running", "halted", "broken"})
        assert await until(pilot, lambda: "50.0 GiB on 0" in str(view._cells["running"][6]))
        assert view._cells["halted"][6] == "—" and view._cells["broken"][6] == "—"
        assert screen_text(app).count("50.0 GiB on 0") == 1
        for name in ("halted", "broken"):
            assert app.open_deployment(name)
            assert await until(pilot, lambda: isinstance(app.screen, DeploymentScreen))
            screen = app.screen
            assert await until(pilot, lambda: "GPUs (sampler)" in shown_in(screen, "#dep-gpus"))
            shown = screen.query_one("#dep-gpus").text.plain
            assert "50.0" not in shown and "GPU0" not in shown and "— (no server" in shown, shown
            await pilot.press("escape")
            assert await until(pilot, lambda: isinstance(app.screen, DeploymentsScreen))
