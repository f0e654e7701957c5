"""Why is it stuck, in the TUI: the motivating MTP crash on the simulated host (SGLang 0.5.10, a
plan without the two flags) shows its finding on the deployment screen; `f` shows the fix's diff,
asks, restarts with the patched plan and the new run comes up; `x` opens triage with the host
checks. A stall shows its banner and triage starts on its own."""

from __future__ import annotations

import json
import subprocess
import sys

import pytest
from textual.widgets import OptionList

from gpuops.core.config import parse_inventory
from gpuops.core.deploy.store import Store
from gpuops.core.domain import Plan, ProgressEvent, TriageReport
from gpuops.core.hosts.host import make_host
from gpuops.core.ops import Ops
from gpuops.sim.host import setup_simhost
from gpuops.screens.confirm import ConfirmScreen
from gpuops.screens.deployment import DeploymentScreen
from gpuops.screens.triage import TriageScreen
from gpuops.tui.app import GpuopsApp
from tests.test_rules import sim_plan, without
from tests.tui_helpers import until


async def deploy_until_done(inv, plan: dict) -> str:
    ops = Ops(inv, poll_s=1.0)
    try:
        return await ops.deploy(Plan.from_json(plan), "sim", yes=True)
    finally:
        await ops.close()


@pytest.fixture
def sim_world(tmp_path, monkeypatch):
    """make(scenario, stall) -> (simulated host, inventory); every server started under tmp_path
    (the deployments' process launcher runs them in their own sessions) ends with the test."""
    monkeypatch.setenv("HOME", str(tmp_path / "home"))
    monkeypatch.setenv("XDG_STATE_HOME", str(tmp_path / "state"))
    monkeypatch.setenv("XDG_CACHE_HOME", str(tmp_path / "cache"))
    (tmp_path / "home").mkdir()

    def make(scenario: str, stall: str = ""):
        sim = setup_simhost(tmp_path / "sim", gpus=4, engine_version="0.5.10", scenario=scenario, pace=0.02)
        return sim, parse_inventory(sim.host_block("sim") + stall, source=str(tmp_path / "config.toml"))

    yield make
    subprocess.run(["pkill", "-f", str(tmp_path)])


async def test_a_crash_shows_its_finding_and_f_applies_the_fix_after_showing_the_diff(sim_world, models):
    sim, inv = sim_world("spec-config-crash")
    good = sim_plan(models["qwen35"], "0.5.10", 4, name="fixme")
    broken = without(good, "--mamba-scheduler-strategy", env=("SGLANG_ENABLE_SPEC_V2",))
    broken.update(host="sim", launcher="process", python=str(sim.python))
    try:
        assert await deploy_until_done(inv, broken) == "crashed"
        app = GpuopsApp(inv, interval=0.5)
        said = []
        real_notify = app.notify
        app.notify = lambda msg, **kw: (said.append(msg), real_notify(msg, **kw))[1]
        async with app.run_test(size=(170, 50)) as pilot:
            assert app.open_deployment("fixme")
            assert await until(pilot, lambda: isinstance(app.screen, DeploymentScreen))
            screen = app.screen
            assert await until(pilot, lambda: any(f.code == "spec-config-invalid" for f in screen.view.findings))
            banner = screen.query_one("#dep-banner").text.plain
            assert "spec-config-invalid" in banner and "f: " in banner
            await pilot.press("f")
            assert await until(pilot, lambda: isinstance(app.screen, ConfirmScreen))
            detail = str(app.screen.detail)
            assert "+ --mamba-scheduler-strategy extra_buffer" in detail and "+ SGLANG_ENABLE_SPEC_V2=1" in detail
            await pilot.press("y")
            # a fresh deployment screen watches the restarted server come up with the fixed plan
            assert await until(pilot, lambda: isinstance(app.screen, DeploymentScreen) and app.screen is not screen,
                               timeout=30), (said, app.screen_stack,
                                             [(w.name, w.state, w.error) for w in app.workers])
            fresh = app.screen
            assert await until(pilot, lambda: fresh.view.state == "ready", timeout=90)
            assert fresh.view.findings == [] and fresh.view.run == 2
            assert await until(pilot, lambda: any("fixme: ready" in str(n.message) for n in app._notifications),
                               timeout=60)
        store = Store()
        try:
            d = store.deployment("fixme")
            plan_events = list(store.events("fixme", kinds=("plan",)))
        finally:
            store.close()
        assert d.state == "ready" and "--mamba-scheduler-strategy" in d.plan.argv
        assert d.plan.env["SGLANG_ENABLE_SPEC_V2"] == "1"
        (ev,) = plan_events
        assert ev.code == "spec-config-invalid" and ev.run == 2  # the fix opened the new run
        assert ("+", "--mamba-scheduler-strategy extra_buffer") in ev.diff
    finally:
        sim.shutdown()


async def test_readonly_refuses_the_fix(sim_world, models):
    sim, inv = sim_world("spec-config-crash")
    broken = without(sim_plan(models["qwen35"], "0.5.10", 4, name="ro"), "--mamba-scheduler-strategy",
                     env=("SGLANG_ENABLE_SPEC_V2",))
    broken.update(host="sim", launcher="process", python=str(sim.python))
    try:
        assert await deploy_until_done(inv, broken) == "crashed"
        app = GpuopsApp(inv, interval=0.5, readonly=True)
        async with app.run_test(size=(170, 50)) as pilot:
            assert app.open_deployment("ro")
            assert await until(pilot, lambda: isinstance(app.screen, DeploymentScreen)
                               and any(f.code == "spec-config-invalid" for f in app.screen.view.findings))
            assert app.screen.check_action("apply_fix", ()) is None  # off: struck through in the footer
            await pilot.press("f")  # handled (pilot waits for it): nothing asked, nothing restarted
            assert await until(pilot, lambda: any(str(n.message).startswith("read-only: a fix restarts the server")
                                                  for n in app._notifications))
            assert isinstance(app.screen, DeploymentScreen) and len(app.screen_stack) == 2
    finally:
        sim.shutdown()


async def test_a_stall_shows_its_banner_and_triage_runs_on_its_own(sim_world, models):
    sim, inv = sim_world("hang-at-dist-init", "\n[stall]\ndist_init = 2\n")
    plan = sim_plan(models["qwen3"], "0.5.10", 1, name="hung")
    plan.update(host="sim", launcher="process", python=str(sim.python))
    try:
        assert await deploy_until_done(inv, plan) == "stalled"
        app = GpuopsApp(inv, interval=0.5)
        async with app.run_test(size=(170, 50)) as pilot:
            assert app.open_deployment("hung")
            assert await until(pilot, lambda: isinstance(app.screen, DeploymentScreen))
            screen = app.screen
            assert await until(pilot, lambda: screen.is_mounted)
            # the stall as the deploy's watch recorded it: its banner, readings and triage, from the store
            assert await until(pilot, lambda: "STALLED: dist_init silent" in screen.query_one("#dep-banner").text.plain,
                               timeout=20)
            banner = screen.query_one("#dep-banner").text.plain
            assert "0 MiB used on GPU0" in banner and "1 server process alive" in banner, banner
            assert screen.view.checks is not None and "triage running" not in banner
            assert {c.name for c in screen.view.checks} >= {"driver-library-mismatch", "port-in-use"}
            assert screen.view.findings[0].code == "nccl-init-stall"
            await pilot.press("x")
            assert await until(pilot, lambda: isinstance(app.screen, TriageScreen))
            triage = app.screen
            assert await until(pilot, lambda: triage.doc is not None, timeout=30)
            options = triage.query_one(OptionList)
            assert options.option_count == len(triage.doc.findings) >= 1
            assert "Host checks" in triage.query_one("#triage-checks").text.plain
            await pilot.press("n")  # restart with NCCL_DEBUG=INFO: asks first, with the diff
            assert await until(pilot, lambda: isinstance(app.screen, ConfirmScreen))
            assert "+ NCCL_DEBUG=INFO" in str(app.screen.detail)
            await pilot.press("n")  # no: nothing changes
            assert await until(pilot, lambda: app.screen is triage)
            await pilot.press("escape")
            assert await until(pilot, lambda: app.screen is screen)
            watch = app.ops.watches.watches["hung"]
            watch.record(ProgressEvent(phase="dist_init", done=1, total=2, what="ranks"))  # as a progress line would
            assert await until(pilot, lambda: screen.view.findings == [] and
                               "STALLED" not in screen.query_one("#dep-banner").text.plain)
        store = Store()
        try:
            assert json.dumps(store.deployment("hung").plan.to_json()).count("NCCL_DEBUG") == 0
        finally:
            store.close()
    finally:
        sim.shutdown()


async def test_triage_screen_ends_a_leftover_gpu_process_after_asking(sim_world, models):
    from gpuops.core.diagnose.host_checks import findings, run_checks

    sim, inv = sim_world("ok")
    doc = sim_plan(models["qwen3"], "0.5.10", 1, name="left")
    doc.update(host="sim", launcher="process", python=str(sim.python))
    plan = Plan.from_json(doc)
    leftover = subprocess.Popen([sys.executable, "-c", "import time; time.sleep(600)"], start_new_session=True)
    try:
        sim.set_gpu(0, processes=[{"pid": leftover.pid, "used": 3 << 30}])
        store = Store()
        store.add_deployment("sim", plan)
        d = store.deployment("left")
        store.close()
        host = make_host(inv.host("sim"))
        try:
            results = await run_checks(host, plan, py_spy=False)
        finally:
            await host.close()
        doc = TriageReport(phase=None, outcome="incomplete", findings=findings(results),
                           checks=[r.summary() for r in results], stacks=[])
        assert [f.code for f in doc.findings] == ["leftover-gpu-process"]
        app = GpuopsApp(inv, interval=0.5)
        async with app.run_test(size=(170, 50)) as pilot:
            await app.push_screen(TriageScreen(d, doc))
            triage = app.screen
            assert await until(pilot, lambda: f"pid {leftover.pid}" in triage.query_one("#triage-detail").text.plain)
            await pilot.press("ctrl+k")
            assert await until(pilot, lambda: isinstance(app.screen, ConfirmScreen))
            assert f"pid {leftover.pid}" in str(app.screen.detail) and "time.sleep(600)" in str(app.screen.detail)
            await pilot.press("y")
            assert await until(pilot, lambda: leftover.poll() is not None, timeout=20)  # SIGTERM, after asking
            assert leftover.returncode == -15
            # triage runs again by itself: the leftover is gone from the findings (this deployment
            # never started: no log, which triage says, and the host checks still run)
            assert await until(pilot, lambda: triage.doc is not doc and all(
                f.code != "leftover-gpu-process" for f in triage.doc.findings), timeout=30)
            assert triage.doc.log_error and "The log could not be read" in \
                triage.query_one("#triage-checks").text.plain
            await pilot.press("escape")
    finally:
        if leftover.poll() is None:
            leftover.kill()
        leftover.wait()
        sim.shutdown()


async def test_a_triage_screen_closed_while_its_triage_runs_does_not_crash_the_app(tmp_path, monkeypatch):
    """Esc on the triage screen before its triage answers: the answer comes to a screen that is gone
    (it queried the closed screen's list: NoMatches, the worker failed and took the app down; seen
    once in a full run under load, at 80x24)."""
    import asyncio

    from tests.tui_helpers import app_with_a_stopped_deployment

    app = app_with_a_stopped_deployment(tmp_path, monkeypatch)
    async with app.run_test(size=(80, 24)) as pilot:
        asked, answer = asyncio.Event(), asyncio.Event()
        real = app.ops.triage

        async def slow_triage(name: str, **kw):
            asked.set()
            await answer.wait()
            return await real(name, **kw)

        monkeypatch.setattr(app.ops, "triage", slow_triage)
        screen = TriageScreen(app.ops.deployment("alpha"))
        await app.push_screen(screen)
        assert await until(pilot, asked.is_set)
        await app.pop_screen()
        assert await until(pilot, lambda: not screen.is_attached)
        answer.set()
        await pilot.pause(1.0)
        assert app.is_running and app.return_code is None
