"""A watch that relays another gpuops' run misses none of its events, whenever that gpuops ends.

In CI (and on a loaded machine here) a deployment screen showing a run that another gpuops was
deploying stayed at ``http`` after that gpuops had seen the run ready and exited: the relaying watch
had read the stored events, then the other gpuops stored ``ready`` and released its heartbeat, then
the watch found the heartbeat gone and took over from the stored position, past the ready line,
without the events stored in between.
"""

from __future__ import annotations

import asyncio
import shlex
import subprocess

from gpuops.core.config import HostConfig
from gpuops.core.deploy.launch import ProcessLauncher
from gpuops.core.deploy.store import Store
from gpuops.core.deploy.watch import Watch, WatchOptions
from gpuops.core.domain import PhaseEvent, StateEvent
from gpuops.core.hosts.host import LocalHost
from tests.plans import make_plan

LINES = [
    "[2026-12-01 10:00:00] Init torch distributed begin.",
    "[2026-12-01 10:00:01] Load weight begin. avail mem=21.12 GB",
    "[2026-12-01 10:00:05] Starting server at http://127.0.0.1:30000",
    "[2026-12-01 10:00:06] The server is fired up and ready to roll!",
]


async def _end(watch: Watch, tasks: list[asyncio.Task]) -> None:
    """End the watch as gpuops does (Watches.stop): told to stop, and cancelled until it is done
    (Python 3.11's wait_for can swallow a cancellation that lands as a line arrives: a single
    cancel left this test's relay running under load until pytest's timeout)."""
    watch.stopping = True
    for task in tasks:
        while not task.done():
            task.cancel()
            await asyncio.wait([task], timeout=1.0)


async def _until(check, timeout: float = 20.0) -> bool:
    loop = asyncio.get_running_loop()
    end = loop.time() + timeout
    while loop.time() < end:
        if check():
            return True
        await asyncio.sleep(0.05)
    return check()


async def test_a_relayed_run_that_ends_ready_just_before_its_watcher_leaves_is_seen_ready(tmp_path):
    host = LocalHost(HostConfig(name="local", local=True, ssh=None, python="python3"))
    store = Store(tmp_path / "store.db")
    store.add_deployment("local", make_plan("r"), state="starting")
    script = "\n".join([*(f"echo {shlex.quote(line)}" for line in LINES), "exec sleep 600"])
    launcher = ProcessLauncher(host, "r", ["sh", "-c", script], {}, str(tmp_path / "home"))
    await launcher.install({})
    store.begin_log("r", log_offset=0)
    other = subprocess.Popen(["sleep", "600"])  # the other gpuops (alive: its heartbeat is trusted)
    await launcher.start()
    tasks: list[asyncio.Task] = []
    watch: Watch | None = None
    try:
        log = tmp_path / "home/.local/state/gpuops/deployments/r/log"
        assert await _until(lambda: log.exists() and LINES[-1] in log.read_text())
        size = log.stat().st_size
        # what the other gpuops stored up to http, its position after the last line, its heartbeat
        for phase in ("dist_init", "weights", "http"):
            store.record("r", PhaseEvent(phase=phase))
        store.record("r", StateEvent(state="http"))
        store.set_position("r", log_offset=size, watcher=other.pid)

        real_events = store.events
        calls = {"n": 0}

        def events(name, **kw):
            got = list(real_events(name, **kw))
            calls["n"] += 1
            if calls["n"] == 2:  # the relay's first poll has read them: now the other gpuops ends
                store.record("r", PhaseEvent(phase="ready"))
                store.record("r", StateEvent(state="ready", endpoint="http://127.0.0.1:30000"))
                store.release_watch("r", other.pid)
            return iter(got)

        store.events = events  # type: ignore[method-assign]
        watch = Watch(host, store.deployment("r"), store,
                      options=WatchOptions(launcher=launcher, poll_s=0.2, quick_check=False, triage=False,
                                           until=("ready",)))
        seen: list[str] = []
        watch.bus.listen("r", lambda e: seen.append(getattr(e, "state", "")))
        task = asyncio.create_task(watch.run())
        tasks.append(task)
        assert await _until(lambda: watch.view.state == "ready"), (watch.view.state, watch.passive, calls)
        assert await asyncio.wait_for(task, 20) == "ready"
        assert "ready" in seen  # published to the screens too
        assert calls["n"] >= 2
    finally:
        if watch is not None:
            await _end(watch, tasks)
        other.kill()
        other.wait()
        await launcher.stop()
        store.close()


async def test_a_relay_applies_the_other_gpuops_events_while_the_log_never_goes_quiet(tmp_path):
    """The relay read the store only after a second without a log line: a server writing
    steadily (a progress bar, a busy scheduler) kept its screen from ever seeing a phase."""
    host = LocalHost(HostConfig(name="local", local=True, ssh=None, python="python3"))
    store = Store(tmp_path / "store.db")
    store.add_deployment("local", make_plan("f"), state="starting")
    script = f"echo {shlex.quote(LINES[0])}; while :; do echo busy; sleep 0.05; done"
    launcher = ProcessLauncher(host, "f", ["sh", "-c", script], {}, str(tmp_path / "home"))
    await launcher.install({})
    store.begin_log("f", log_offset=0)
    other = subprocess.Popen(["sleep", "600"])
    await launcher.start()
    tasks: list[asyncio.Task] = []
    watch: Watch | None = None
    try:
        store.record("f", PhaseEvent(phase="dist_init"))
        store.record("f", StateEvent(state="dist_init"))
        store.set_position("f", log_offset=0, watcher=other.pid)
        watch = Watch(host, store.deployment("f"), store,
                      options=WatchOptions(launcher=launcher, poll_s=0.2, quick_check=False, triage=False))
        tasks.append(asyncio.create_task(watch.run()))
        assert await _until(lambda: watch.passive and len(watch.log) > 20)  # relaying, the log flowing
        store.record("f", PhaseEvent(phase="weights"))
        store.record("f", StateEvent(state="weights"))
        store.set_position("f", watcher=other.pid)  # its heartbeat, fresh
        assert await _until(lambda: watch.view.state == "weights", timeout=10), watch.view.state
        assert watch.passive
    finally:
        if watch is not None:
            await _end(watch, tasks)
        other.kill()
        other.wait()
        await launcher.stop()
        store.close()
