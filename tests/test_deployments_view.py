"""The deployments view (`:dep` without a name, `d` on the dashboard) and the `:` command line on
every screen, through Textual's pilot against the simulated host over a real sshd."""

from __future__ import annotations

import json
import subprocess

from gpuops.core.config import load_inventory
from gpuops.screens.command import CommandScreen
from gpuops.screens.confirm import ConfirmScreen
from gpuops.screens.deployment import DeploymentScreen
from gpuops.screens.deployments import DeploymentsScreen
from gpuops.tui.app import GpuopsApp
from gpuops.tui.logview import LogView
from tests.test_cli import GPUOPS
from tests.test_deploy import deploy
from tests.tui_helpers import screen_text, until


def status(cfg, env, name: str) -> dict | None:
    out = subprocess.run([GPUOPS, "--config", str(cfg), "status", name, "--json"], capture_output=True, text=True,
                         env=env)
    return json.loads(out.stdout)["deployment"] if out.returncode == 0 else None


async def test_the_deployments_view_lists_opens_stops_and_forgets(world, monkeypatch):
    make, env = world
    cfg, sim = make("ok")
    assert deploy(cfg, env, "--name", "alpha")[0] == 0
    assert deploy(cfg, env, "--name", "beta")[0] == 0
    assert subprocess.run([GPUOPS, "--config", str(cfg), "stop", "beta", "--yes"], env=env,
                          capture_output=True).returncode == 0
    for var in ("HOME", "XDG_STATE_HOME", "XDG_CONFIG_HOME", "XDG_CACHE_HOME"):
        monkeypatch.setenv(var, env[var])
    app = GpuopsApp(load_inventory(str(cfg)), interval=0.5)
    try:
        async with app.run_test(size=(160, 45)) as pilot:
            await pilot.press("d")  # the dashboard's key
            assert await until(pilot, lambda: isinstance(app.screen, DeploymentsScreen))
            view = app.screen
            assert await until(pilot, lambda: set(view.rows) == {"alpha", "beta"})
            text = screen_text(app)
            for word in ("alpha", "beta", "gpu1", "Qwen/Qwen3-8B", "ready", "stopped", "GPU mem"):
                assert word in text, word
            assert view.select("beta")
            await pilot.press("enter")  # opens it
            assert await until(pilot, lambda: isinstance(app.screen, DeploymentScreen))
            assert app.screen.deployment.name == "beta"
            await pilot.press("escape")
            assert await until(pilot, lambda: isinstance(app.screen, DeploymentsScreen))
            # stop asks first; n keeps it running
            view.select("alpha")
            await pilot.press("s")
            assert await until(pilot, lambda: isinstance(app.screen, ConfirmScreen))
            await pilot.press("n")
            await pilot.pause(0.3)
            assert status(cfg, env, "alpha")["state"] == "ready"
            await pilot.press("s")
            assert await until(pilot, lambda: isinstance(app.screen, ConfirmScreen))
            await pilot.press("y")
            assert await until(pilot, lambda: (status(cfg, env, "alpha") or {}).get("state") == "stopped",
                               timeout=90)
            # forget asks first too, then the row goes
            view.select("beta")
            await pilot.press("delete")
            assert await until(pilot, lambda: isinstance(app.screen, ConfirmScreen))
            await pilot.press("y")
            assert await until(pilot, lambda: status(cfg, env, "beta") is None, timeout=30)
            assert await until(pilot, lambda: set(view.rows) == {"alpha"}, timeout=10)
    finally:
        subprocess.run([GPUOPS, "--config", str(cfg), "stop", "alpha", "--yes"], capture_output=True, env=env)


async def test_readonly_disables_stop_restart_forget(world, monkeypatch):
    make, env = world
    cfg, sim = make("ok")
    assert deploy(cfg, env, "--name", "ro")[0] == 0
    for var in ("HOME", "XDG_STATE_HOME", "XDG_CONFIG_HOME", "XDG_CACHE_HOME"):
        monkeypatch.setenv(var, env[var])
    app = GpuopsApp(load_inventory(str(cfg)), interval=0.5, readonly=True)
    try:
        async with app.run_test(size=(160, 45)) as pilot:
            await pilot.press("colon", *"dep", "enter")  # `:dep` without a name: the list
            assert await until(pilot, lambda: isinstance(app.screen, DeploymentsScreen))
            assert await until(pilot, lambda: "ro" in app.screen.rows)
            for key in ("s", "r", "delete"):
                await pilot.press(key)
                await pilot.pause(0.2)
                assert isinstance(app.screen, DeploymentsScreen), key  # no question: the action is off
            assert status(cfg, env, "ro")["state"] == "ready"
            # the palette and `:` complete deployment names
            await pilot.press("escape", "ctrl+p")
            await pilot.pause(0.2)
            await pilot.press(*"Deployment: ro")
            await pilot.pause(0.5)
            await pilot.press("enter")
            assert await until(pilot, lambda: isinstance(app.screen, DeploymentScreen))
            assert app.screen.deployment.name == "ro"
            await pilot.press("colon", *"dep r")
            assert await until(pilot, lambda: isinstance(app.screen, CommandScreen))
            from textual.widgets import Input
            box = app.screen.query_one(Input)
            assert await until(pilot, lambda: box._suggestion == "dep ro")
            await pilot.press("right")  # takes the completion
            assert box.value == "dep ro"
            await pilot.press("escape")
    finally:
        subprocess.run([GPUOPS, "--config", str(cfg), "stop", "ro", "--yes"], capture_output=True, env=env)


async def test_colon_on_the_deployment_screen_never_fires_its_keys(world, monkeypatch):
    """`:stop` typed on the deployment screen used to toggle Follow (s) and Times (t); `:bench⏎`
    started a benchmark (b). The command line owns the keyboard while it is open."""
    make, env = world
    cfg, sim = make("ok")
    assert deploy(cfg, env, "--name", "typed")[0] == 0
    for var in ("HOME", "XDG_STATE_HOME", "XDG_CONFIG_HOME", "XDG_CACHE_HOME"):
        monkeypatch.setenv(var, env[var])
    app = GpuopsApp(load_inventory(str(cfg)), interval=0.5)
    try:
        async with app.run_test(size=(160, 45)) as pilot:
            await pilot.press("colon", *"dep typed", "enter")
            assert await until(pilot, lambda: isinstance(app.screen, DeploymentScreen))
            log = app.screen.query_one(LogView)
            await pilot.resize_terminal(80, 24)  # usable at 80x24: the log keeps most of the screen
            assert await until(pilot, lambda: app.screen.has_class("-narrow") and log.size.height >= 8)
            await pilot.resize_terminal(160, 45)
            before = (log.follow, log.show_timestamps)
            await pilot.press("colon")
            assert await until(pilot, lambda: isinstance(app.screen, CommandScreen))
            await pilot.press(*"stop")
            assert (log.follow, log.show_timestamps) == before
            await pilot.press("escape")
            assert await until(pilot, lambda: isinstance(app.screen, DeploymentScreen))
            await pilot.press("colon", *"bench", "enter")  # the runs list, not a benchmark of this deployment
            from gpuops.screens.bench_runs import BenchRunsScreen
            assert await until(pilot, lambda: isinstance(app.screen, BenchRunsScreen))
            await pilot.press("escape", "colon", *"host gpu1", "enter")  # back to the dashboard, gpu1 selected
            from gpuops.screens.dashboard import DashboardScreen
            assert await until(pilot, lambda: isinstance(app.screen, DashboardScreen) and app.screen.selected == "gpu1")
    finally:
        subprocess.run([GPUOPS, "--config", str(cfg), "stop", "typed", "--yes"], capture_output=True, env=env)
