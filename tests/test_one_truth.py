"""One truth per deployment: one watch that every view observes, runs that never mix, a reattach
from the stored position, a status that reconciles with the host. The simulated host over a real
sshd, gpuops as a subprocess, the TUI through Textual's pilot."""

from __future__ import annotations

import json
import re
import shutil
import signal
import subprocess
import time
from datetime import datetime
from pathlib import Path

from gpuops.core.config import load_inventory
from gpuops.core.states import PHASES
from gpuops.core.deploy.view import parse_log_ts
from gpuops.screens.deployment import DeploymentScreen
from gpuops.tui.app import GpuopsApp
from tests.test_cli import GPUOPS
from tests.sshd import free_port, ssh_user_home
from tests.test_deploy import deploy, states
from tests.tui_helpers import until

SGLANG_TS = re.compile(r"^\[(\d{4}-\d\d-\d\d \d\d:\d\d:\d\d)")
# the first line of each phase as SGLang 0.5.23 (the simulator) prints it
PHASE_LINES = {"dist_init": "Init parallel begin.", "weights": "Load weight begin.",
               "kv_cache": "KV Cache is allocated.", "cuda_graph": "Capture target decode CUDA graph begin.",
               "http": "Uvicorn running on", "ready": "The server is fired up and ready to roll!"}


def gpuops(cfg: Path, env: dict, *args: str, timeout: float = 120) -> subprocess.CompletedProcess:
    return subprocess.run([GPUOPS, "--config", str(cfg), *args], capture_output=True, text=True, env=env,
                          timeout=timeout)


def status(cfg: Path, env: dict, name: str) -> dict:
    out = gpuops(cfg, env, "status", name, "--json")
    assert out.returncode == 0, out.stderr
    return json.loads(out.stdout)


def calls(sim) -> list[str]:
    """Every python the simulated host ran, one line each (its wrapper's log)."""
    log = Path(sim.directory) / "state" / "calls.log"
    return log.read_text().splitlines() if log.exists() else []


# the SSH user's home on the (loopback) host, where the process launcher keeps its files
HOST_HOME = ssh_user_home()  # the SSH user's HOME on the (loopback) host: this test process's own


def server_log(name: str) -> list[str]:
    """The process launcher's log of `name`, read where the host keeps it."""
    return (HOST_HOME / ".local/state/gpuops/deployments" / name / "log").read_text().splitlines()


def this_run(name: str) -> list[str]:
    """The last run's lines of `name`'s log (the log goes on across deployments of one name)."""
    lines = server_log(name)
    return lines[max((i for i, ln in enumerate(lines) if "server_args=" in ln), default=0):]


def phase_stamps(lines: list[str]) -> dict[str, datetime]:
    """When the server printed the first line of each phase (its own timestamps; uvicorn's line has
    none: the last timestamp before it)."""
    out: dict[str, datetime] = {}
    last = None
    for line in lines:
        m = SGLANG_TS.match(line)
        last = datetime.fromisoformat(m.group(1)) if m else last
        for phase, text in PHASE_LINES.items():
            if text in line and phase not in out and last is not None:
                out[phase] = last
    return out


def deploy_killed_at(cfg: Path, env: dict, name: str, state: str) -> subprocess.Popen:
    """`gpuops deploy` of Qwen3-8B on gpu1 as `name`, killed (-9) as soon as it says `state`: the
    server goes on with no watcher. The caller kills the (dead) process again and stops `name`."""
    proc = subprocess.Popen([GPUOPS, "--config", str(cfg), "deploy", "Qwen/Qwen3-8B", "--host", "gpu1", "--json",
                             "--yes", "--name", name, "--port", str(free_port())], stdout=subprocess.PIPE, text=True, env=env)
    assert proc.stdout is not None
    for line in proc.stdout:
        ev = json.loads(line)
        if ev["event"] == "state" and ev["state"] == state:
            proc.send_signal(signal.SIGKILL)
            break
    proc.wait(timeout=10)
    return proc


def app_for(cfg: Path, env: dict, monkeypatch) -> GpuopsApp:
    for key in ("HOME", "XDG_STATE_HOME", "XDG_CONFIG_HOME", "XDG_CACHE_HOME", "HF_HUB_CACHE", "HF_HUB_OFFLINE"):
        monkeypatch.setenv(key, env[key])
    return GpuopsApp(load_inventory(str(cfg)), interval=0.5)


async def open_dep(pilot, app, name: str) -> DeploymentScreen:
    await pilot.press("colon", *f"dep {name}", "enter")
    assert await until(pilot, lambda: isinstance(app.screen, DeploymentScreen))
    return app.screen


# ------------------------------------------------------------------ runs never mix


async def test_a_reused_name_never_shows_the_previous_runs_phases(world, monkeypatch):
    make, env = world
    cfg, sim = make("ok")
    rc, events, err = deploy(cfg, env, "--name", "again")
    assert rc == 0, err + "\n".join(map(json.dumps, events[-8:]))
    assert gpuops(cfg, env, "stop", "again", "--yes").returncode == 0
    # the copy is gone and the next download is slow: run 2 sits in `downloading` for a while
    shutil.rmtree(Path(sim.directory) / "models" / "Qwen")
    sim.set_sim(download_rate=40 << 20)  # / PACE: ~0.8 GB/s, 16.4 GB take ~20 s
    proc = subprocess.Popen([GPUOPS, "--config", str(cfg), "deploy", "Qwen/Qwen3-8B", "--host", "gpu1", "--json",
                             "--yes", "--name", "again", "--port", str(free_port())], stdout=subprocess.PIPE, text=True, env=env)
    app = app_for(cfg, env, monkeypatch)
    try:
        for line in proc.stdout:  # the new run is downloading
            ev = json.loads(line)
            if ev["event"] == "progress" and ev["phase"] == "downloading" and ev["done"] > 0:
                break
        doc = status(cfg, env, "again")
        assert (doc["deployment"]["state"], doc["deployment"]["run"]) == ("downloading", 2)
        assert all(e["run"] == 2 for e in doc["events"]) and not [e for e in doc["events"] if e["event"] == "phase"]
        async with app.run_test(size=(170, 50)) as pilot:
            screen = await open_dep(pilot, app, "again")
            await pilot.pause(1.2)
            shown = screen.query_one("#dep-phases").text.plain
            assert screen.view.run == 2 and screen.view.state == "downloading" and screen.view.phases == {}
            assert "✔" not in shown and "ready:" not in shown and "downloading" in shown
            # another gpuops watches it (the CLI's deploy, its heartbeat fresh): this one relays
            watch = app.ops.watches.watches["again"]
            assert await until(pilot, lambda: watch.passive, timeout=10)
            assert await until(pilot, lambda: screen.view.state == "ready", timeout=90)
            shown = screen.query_one("#dep-phases").text.plain
            assert all(f"✔ {p}" in shown for p in ("dist_init", "weights", "kv_cache", "cuda_graph", "http"))
            assert watch.lines_parsed == 0  # it never parsed the log: the CLI's watch did
        assert proc.wait(timeout=60) == 0
        runs = {e["run"] for e in status(cfg, env, "again")["events"]}
        assert runs == {2}
    finally:
        proc.kill()
        gpuops(cfg, env, "stop", "again", "--yes")


# ------------------------------------------------------------------ kill -9, status, the screen


async def test_kill_9_during_weights_then_status_says_ready_and_the_screen_has_real_times(world, monkeypatch):
    make, env = world
    cfg, sim = make("ok")
    sim.set_sim(pace=12.0, download_rate=20 << 30)  # a start of ~25 s: weights alone several seconds
    proc = deploy_killed_at(cfg, env, "killed", "weights")
    try:
        assert status(cfg, env, "killed")["deployment"]["state"] == "weights"  # the server is still loading
        deadline = time.monotonic() + 120
        while time.monotonic() < deadline:  # the server goes on alone; each status reconciles
            doc = status(cfg, env, "killed")
            if doc["deployment"]["state"] == "ready":
                break
            time.sleep(1)
        assert doc["deployment"]["state"] == "ready", doc["events"][-5:]
        seen = [e["phase"] for e in doc["events"] if e["event"] == "phase"]
        assert seen == [p for p in PHASES if p in seen] and len(seen) == len(set(seen))  # each once, in order
        assert set(seen) >= {"dist_init", "weights", "kv_cache", "cuda_graph", "http", "ready"}
        stamps = phase_stamps(server_log("killed"))
        app = app_for(cfg, env, monkeypatch)
        async with app.run_test(size=(170, 50)) as pilot:
            screen = await open_dep(pilot, app, "killed")
            await pilot.pause(1.2)
            shown = screen.query_one("#dep-phases").text.plain
            times = dict(screen.view.phase_times(datetime.now().astimezone()))
            for phase in ("dist_init", "weights", "kv_cache", "cuda_graph", "http"):
                assert f"✔ {phase}" in shown
                nxt = next(p for p in PHASES[PHASES.index(phase) + 1:] if p in stamps)  # no draft here
                real = (stamps[nxt] - stamps[phase]).total_seconds()
                # what the server's own clock says (to its one-second resolution), not when the
                # reconciling status happened to read the lines
                assert abs(times[phase] - real) <= 1.5, (phase, times[phase], real)
            assert times["cuda_graph"] >= 2 and f"{times['cuda_graph']:6.1f}s" in shown
    finally:
        proc.kill()
        gpuops(cfg, env, "stop", "killed", "--yes")


# ------------------------------------------------------------------ a stall, reopened


async def test_dep_on_a_stalled_deployment_shows_the_stall_its_findings_and_real_times(world, monkeypatch):
    make, env = world
    cfg, sim = make("hang-at-dist-init", "\n[stall]\ndist_init = 3\n")
    rc, events, err = deploy(cfg, env, "--name", "stuck")
    assert rc == 1 and states(events)[-1] == "stalled", err
    probes = sum("--gpuops-triage-probe" in c for c in calls(sim))
    assert probes == 1  # the CLI's watch triaged its stall once
    began = next(e for e in events if e["event"] == "state" and e["state"] == "dist_init")["ts"]
    time.sleep(2)
    app = app_for(cfg, env, monkeypatch)
    try:
        async with app.run_test(size=(170, 50)) as pilot:
            screen = await open_dep(pilot, app, "stuck")
            await pilot.pause(1.5)
            banner = screen.query_one("#dep-banner").text.plain
            assert banner.startswith("STALLED: dist_init silent ") and "nccl-init-stall" in banner
            assert "triage running" not in banner  # its checks came back with it, from the store
            assert "f: restart with NCCL_DEBUG=INFO" in banner
            elapsed = dict(screen.view.phase_times(datetime.now().astimezone()))["dist_init"]
            since = (datetime.now().astimezone() - datetime.fromisoformat(began.replace("Z", "+00:00"))).total_seconds()
            assert since - 2 <= elapsed <= since + 1  # the real time since dist_init began, not since :dep
            watch = app.ops.watches.watches["stuck"]
            assert await until(pilot, lambda: watch.lines_parsed >= 0 and watch.parsed_from is not None, timeout=10)
            await pilot.pause(6)  # more than a poll: the stall goes on; it is not said (nor triaged) again
            assert watch.triages == 0
            assert sum("--gpuops-triage-probe" in c for c in calls(sim)) == probes
    finally:
        gpuops(cfg, env, "stop", "stuck", "--yes")


# ------------------------------------------------------------------ one watch in the TUI


async def test_a_tui_deploy_runs_one_log_follower_and_one_triage_per_stall(world, monkeypatch):
    from gpuops.core.planning.hostfacts import read_target
    from gpuops.core.planning.model_facts import load_model_facts
    from gpuops.core.planning.plan import Wishes
    from gpuops.screens.plan_review import PlanReviewScreen

    make, env = world
    cfg, sim = make("hang-at-dist-init", "\n[stall]\ndist_init = 3\n")
    app = app_for(cfg, env, monkeypatch)
    try:
        async with app.run_test(size=(170, 50)) as pilot:
            target = await read_target(app.monitor.hosts["gpu1"])
            await app.push_screen(PlanReviewScreen(load_model_facts("Qwen/Qwen3-8B"), target,
                                                   Wishes(tp=1, name="onewatch")))
            assert await until(pilot, lambda: getattr(app.screen, "plan", None) is not None)
            await pilot.press("d")  # the deploy summary, confirmed
            from gpuops.screens.confirm import ConfirmScreen
            assert await until(pilot, lambda: isinstance(app.screen, ConfirmScreen))
            await pilot.press("y")
            assert await until(pilot, lambda: isinstance(app.screen, DeploymentScreen), timeout=30)
            screen = app.screen
            assert await until(pilot, lambda: screen.view.state == "starting", timeout=60)
            reporters = sum("--interval" in c for c in calls(sim))
            assert await until(pilot, lambda: screen.view.stall is not None and screen.view.checks is not None,
                               timeout=60)
            await pilot.pause(6)  # a poll more while stalled
            log = "/.local/state/gpuops/deployments/onewatch/log"
            followers = [c for c in calls(sim) if log in c]
            assert len(followers) == 1, "\n".join(c[:300] for c in followers)  # the deploy's watch is the screen's too
            assert sum("--gpuops-triage-probe" in c for c in calls(sim)) == 1
            # GPU readings come from the App's Monitor: the watch starts no reporter of its own
            assert sum("--interval" in c for c in calls(sim)) == reporters
            assert "STALLED" in screen.query_one("#dep-banner").text.plain
    finally:
        gpuops(cfg, env, "stop", "onewatch", "--yes")


async def test_a_reattach_reads_the_log_from_the_stored_position(world, monkeypatch):
    """A ready deployment whose server has written a megabyte since: `gpuops status` reconciles it
    (reading those lines once); a new gpuops then parses only what came after the stored position
    and reads just a bounded window before it, for display."""
    from gpuops.core.deploy.store import Store
    from gpuops.core.deploy.watch import BACKLOG_BYTES

    make, env = world
    cfg, sim = make("ok")
    rc, events, err = deploy(cfg, env, "--name", "longlog")
    assert rc == 0, err
    log = HOST_HOME / ".local/state/gpuops/deployments/longlog/log"

    def chatter(n: int, start: int) -> None:  # the server's request lines
        with log.open("a") as f:
            for i in range(start, start + n):
                f.write(f"[2026-12-01 10:00:00] INFO:     127.0.0.1:{i} - \"POST /generate HTTP/1.1\" 200 OK\n")

    def stored() -> int:
        store = Store(Path(env["XDG_STATE_HOME"]) / "gpuops" / "gpuops.db")
        try:
            return store.deployment("longlog").log_offset
        finally:
            store.close()

    chatter(12_000, 0)
    assert status(cfg, env, "longlog")["deployment"]["state"] == "ready"  # reconciled: read to the end
    position = stored()
    assert position == log.stat().st_size > 1_000_000
    chatter(500, 12_000)
    app = app_for(cfg, env, monkeypatch)
    try:
        async with app.run_test(size=(170, 50)) as pilot:
            screen = await open_dep(pilot, app, "longlog")
            watch = app.ops.watches.watches["longlog"]
            assert await until(pilot, lambda: watch.lines_parsed >= 500, timeout=30)
            await pilot.pause(1.5)
            assert (watch.parsed_from, watch.read_from) == (position, position - BACKLOG_BYTES)
            # the new lines only: never the start-up or the first megabyte (and the access lines of the
            # watch's own /health asks after ready, if one came by then)
            asked = log.read_bytes()[position:].count(b'"GET /health ')
            assert watch.lines_parsed == 500 + asked, asked
            assert screen.view.state == "ready" and screen.view.run == 1
            shown = screen.query_one("#dep-log").plain_lines()
            assert any("127.0.0.1:11999 " in ln for ln in shown) and any("127.0.0.1:12499 " in ln for ln in shown)
            assert not any("127.0.0.1:100 " in ln for ln in shown)  # outside the window: not read at all
    finally:
        gpuops(cfg, env, "stop", "longlog", "--yes")


async def test_a_watch_killed_mid_start_leaves_a_position_that_agrees_with_its_phases(world):
    """The CLI's watch, killed just after it recorded cuda_graph: the stored position is past that
    phase's line (one write), so the next `gpuops status` resumes in cuda_graph and reads the
    memory pool's line before it as nothing new (not as a draft model's repeat). And uvicorn's
    line, which has no SGLang timestamp, is as late as the last line that had one, even when it is
    the first line a status parses: that one comes from the lines shown before the position."""
    from gpuops.core.deploy.store import Store

    make, env = world
    cfg, sim = make("ok")
    sim.set_sim(pace=12.0, download_rate=20 << 30)  # the capture alone several seconds
    proc = deploy_killed_at(cfg, env, "uvicorn", "cuda_graph")
    try:
        doc = status(cfg, env, "uvicorn")
        assert doc["deployment"]["state"] == "cuda_graph", doc["events"][-3:]
        assert "draft" not in {e.get("phase") for e in doc["events"]}
        deadline = time.monotonic() + 120
        while time.monotonic() < deadline and not any(PHASE_LINES["ready"] in ln for ln in this_run("uvicorn")):
            time.sleep(0.2)
        # a watch that had read up to the line before uvicorn's first, then died: its position
        data = (HOST_HOME / ".local/state/gpuops/deployments/uvicorn/log").read_bytes()
        at = data.index(b"INFO:     Started server process", data.rindex(b"server_args="))
        store = Store(Path(env["XDG_STATE_HOME"]) / "gpuops" / "gpuops.db")
        try:
            store.set_position("uvicorn", log_offset=at)
        finally:
            store.close()
        doc = status(cfg, env, "uvicorn")
        assert doc["deployment"]["state"] == "ready", doc["events"][-3:]
        phases = {e["phase"]: e for e in doc["events"] if e["event"] == "phase"}
        stamps = phase_stamps(this_run("uvicorn"))
        assert parse_log_ts(phases["http"]["log_ts"]) == stamps["http"]
        assert parse_log_ts(phases["cuda_graph"]["log_ts"]) == stamps["cuda_graph"]
    finally:
        proc.kill()
        gpuops(cfg, env, "stop", "uvicorn", "--yes")
