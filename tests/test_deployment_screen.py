"""The deployment screen reattaches to a server that gpuops started earlier and shows its phases."""

from __future__ import annotations

import subprocess

from gpuops.core.config import load_inventory
from gpuops.screens.deployment import DeploymentScreen
from gpuops.tui.app import GpuopsApp
from gpuops.tui.logview import LogView
from tests.test_cli import GPUOPS
from tests.test_deploy import deploy, served_port
from tests.tui_helpers import app_with_a_stopped_deployment, until


async def test_reattach_shows_phases_numbers_and_the_log(world, monkeypatch):
    make, env = world
    cfg, sim = make("ok")
    rc, events, err = deploy(cfg, env, "--name", "qwen8b")
    assert rc == 0, err
    for key in ("HOME", "XDG_STATE_HOME", "XDG_CONFIG_HOME", "XDG_CACHE_HOME"):
        monkeypatch.setenv(key, env[key])
    app = GpuopsApp(load_inventory(str(cfg)), interval=0.5)
    try:
        async with app.run_test(size=(170, 50)) as pilot:
            await pilot.press("colon", *"dep qwen8b", "enter")
            assert await until(pilot, lambda: isinstance(app.screen, DeploymentScreen))
            screen = app.screen
            assert await until(pilot, lambda: screen.view.state == "ready", timeout=30)
            await pilot.pause(1.2)  # one refresh of the view
            phases = screen.query_one("#dep-phases").text.plain
            for phase in ("dist_init", "weights", "kv_cache", "cuda_graph", "http"):
                assert f"✔ {phase}" in phases
            assert f"ready: http://127.0.0.1:{served_port(env, 'qwen8b')}" in phases
            assert "kv_tokens" in screen.query_one("#dep-numbers").text.plain
            log = screen.query_one(LogView)
            assert any("fired up and ready" in line for line in log.plain_lines())
            await pilot.press("k")  # the quick check
            assert await until(pilot, lambda: (screen.check_result or "").startswith("quick check:"), timeout=30)
    finally:
        subprocess.run([GPUOPS, "--config", str(cfg), "stop", "qwen8b", "--yes"], capture_output=True, env=env)


async def test_deploy_from_plan_review_opens_the_deployment_screen_until_ready(world, monkeypatch):
    from gpuops.core.planning.hostfacts import read_target
    from gpuops.core.planning.model_facts import load_model_facts
    from gpuops.core.planning.plan import Wishes
    from gpuops.screens.plan_review import PlanReviewScreen

    make, env = world
    cfg, sim = make("ok")
    for key in ("HOME", "XDG_STATE_HOME", "XDG_CONFIG_HOME", "XDG_CACHE_HOME", "HF_HUB_CACHE", "HF_HUB_OFFLINE"):
        monkeypatch.setenv(key, env[key])
    app = GpuopsApp(load_inventory(str(cfg)), interval=0.5)
    try:
        async with app.run_test(size=(170, 50)) as pilot:
            host = app.monitor.hosts["gpu1"]
            facts = load_model_facts("Qwen/Qwen3-8B")
            target = await read_target(host)
            await app.push_screen(PlanReviewScreen(facts, target, Wishes(tp=1, name="fromtui")))
            assert await until(pilot, lambda: getattr(app.screen, "plan", None) is not None)
            await pilot.press("d")  # the summary first, then yes
            from gpuops.screens.confirm import ConfirmScreen
            assert await until(pilot, lambda: isinstance(app.screen, ConfirmScreen))
            await pilot.press("y")
            assert await until(pilot, lambda: isinstance(app.screen, DeploymentScreen), timeout=30)
            screen = app.screen
            assert screen.deployment.name == "fromtui"
            assert await until(pilot, lambda: screen.view.state == "ready", timeout=60)
            assert await until(pilot, lambda: any("fromtui: ready" in str(n.message) for n in app._notifications),
                               timeout=60)
    finally:
        subprocess.run([GPUOPS, "--config", str(cfg), "stop", "fromtui", "--yes"], capture_output=True, env=env)


async def test_a_burst_of_log_lines_reaches_the_screen_in_order_as_one_message(tmp_path, monkeypatch):
    """What the bus says comes to the deployment screen as it was said (log lines, a phase, a state,
    more lines), but a burst as one message: 2,000 lines were 2,000 messages through the screen's
    queue (at 20,000 lines a second, a key press waited behind them)."""
    from gpuops.core.domain import LogEvent, PhaseEvent, StateEvent

    app = app_with_a_stopped_deployment(tmp_path, monkeypatch)
    async with app.run_test(size=(120, 40)) as pilot:
        screen = DeploymentScreen(app.ops.deployment("alpha"))
        await app.push_screen(screen)
        assert await until(pilot, lambda: screen.is_mounted and bool(screen.query(LogView)))
        run = screen.view.run
        messages: list[str] = []
        post = screen.post_message

        def counted(message):
            messages.append(type(message).__name__)
            return post(message)

        screen.post_message = counted
        log = screen.query_one(LogView)
        # (the burst's own lines: the screen's watch may add a line of its own meanwhile, late under load)
        burst = lambda: [ln for ln in log.plain_lines() if ln.startswith("line ")]  # noqa: E731
        assert burst() == []
        for i in range(1000):
            app.ops.bus.publish("alpha", LogEvent(line=f"line {i}", run=run, deployment="alpha"))
        app.ops.bus.publish("alpha", PhaseEvent(phase="weights", run=run, deployment="alpha"))
        app.ops.bus.publish("alpha", StateEvent(state="crashed", run=run, deployment="alpha"))
        for i in range(1000, 2000):
            app.ops.bus.publish("alpha", LogEvent(line=f"line {i}", run=run, deployment="alpha"))
        # what the burst itself posted (published at once: nothing else runs in between; the screen's
        # own watch may post one more later, for an event of its own, under load)
        posted = list(messages)
        assert await until(pilot, lambda: len(burst()) == 2000), len(burst())
        assert burst() == [f"line {i}" for i in range(2000)]
        assert screen.view.state == "crashed" and "weights" in screen.view.phases
        assert posted.count("Changed") <= 1  # was 2,002 (0: joined one the watch had just posted)
        assert screen.banner()[1] == "crashed"
