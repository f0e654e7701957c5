"""A watch that relays another gpuops' run misses none of its events, whenever that gpuops ends.

In CI (and on a loaded machine here) a deployment screen showing a run that another gpuops was
deploying stayed at ``http`` after that gpuops had seen the run ready and exited: the relaying watch
had read the stored events, then the other gpuops stored ``ready`` and released its heartbeat, then
the watch found the heartbeat gone and took over from the stored position, past the ready line,
without the events stored in between.
"""

from __future__ import annotations

import asyncio
import contextlib
import shlex
import subprocess
from dataclasses import dataclass
from typing import AsyncIterator

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


@dataclass
class _Relay:
    """A server the process launcher started, its deployment recorded, a live process standing for
    the other gpuops (its heartbeat is trusted while it lives), and the relaying watch once started."""

    host: LocalHost
    store: Store
    launcher: ProcessLauncher
    other: subprocess.Popen
    watch: Watch | None = None
    task: asyncio.Task | None = None

    def start(self, name: str, **options) -> Watch:
        self.watch = Watch(self.host, self.store.deployment(name), self.store, options=WatchOptions(
            launcher=self.launcher, poll_s=0.2, quick_check=False, triage=False, **options))
        self.task = asyncio.create_task(self.watch.run())
        return self.watch

    async def end(self) -> None:
        """End the watch as gpuops does (Watches.stop): told to stop, and cancelled until it is done
        (Python 3.11's wait_for can swallow a cancellation that lands as a line arrives: a single
        cancel left this test's relay running under load until pytest's timeout); then the rest."""
        if self.watch is not None and self.task is not None:
            self.watch.stopping = True
            while not self.task.done():
                self.task.cancel()
                await asyncio.wait([self.task], timeout=1.0)
        self.other.kill()
        self.other.wait()
        await self.launcher.stop()
        self.store.close()


@contextlib.asynccontextmanager
async def _relay(tmp_path, name: str, script: str) -> AsyncIterator[_Relay]:
    host = LocalHost(HostConfig(name="local", local=True, ssh=None, python="python3"))
    store = Store(tmp_path / "store.db")
    store.add_deployment("local", make_plan(name), state="starting")
    launcher = ProcessLauncher(host, name, ["sh", "-c", script], {}, str(tmp_path / "home"))
    await launcher.install({})
    store.begin_log(name, log_offset=0)
    relay = _Relay(host, store, launcher, subprocess.Popen(["sleep", "600"]))
    await launcher.start()
    try:
        yield relay
    finally:
        await relay.end()


async def _until(check, timeout: float = 20.0) -> bool:
    loop = asyncio.get_running_loop()
    end = loop.time() + timeout
    while loop.time() < end:
        if check():
            return True
        await asyncio.sleep(0.05)
    return check()


async def test_a_relayed_run_that_ends_ready_just_before_its_watcher_leaves_is_seen_ready(tmp_path):
    script = "\n".join([*(f"echo {shlex.quote(line)}" for line in LINES), "exec sleep 600"])
    async with _relay(tmp_path, "r", script) as r:
        store, other = r.store, r.other
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
        watch = r.start("r", until=("ready",))
        seen: list[str] = []
        watch.bus.listen("r", lambda e: seen.append(getattr(e, "state", "")))
        assert await _until(lambda: watch.view.state == "ready"), (watch.view.state, watch.passive, calls)
        assert r.task is not None and await asyncio.wait_for(r.task, 20) == "ready"
        assert "ready" in seen  # published to the screens too
        assert calls["n"] >= 2


async def test_a_relay_applies_the_other_gpuops_events_while_the_log_never_goes_quiet(tmp_path):
    """The relay read the store only after a second without a log line: a server writing
    steadily (a progress bar, a busy scheduler) kept its screen from ever seeing a phase."""
    script = f"echo {shlex.quote(LINES[0])}; while :; do echo busy; sleep 0.05; done"
    async with _relay(tmp_path, "f", script) as r:
        store, other = r.store, r.other
        store.record("f", PhaseEvent(phase="dist_init"))
        store.record("f", StateEvent(state="dist_init"))
        store.set_position("f", log_offset=0, watcher=other.pid)
        watch = r.start("f")
        assert await _until(lambda: watch.passive and len(watch.log) > 20)  # relaying, the log flowing
        store.record("f", PhaseEvent(phase="weights"))
        store.record("f", StateEvent(state="weights"))
        store.set_position("f", watcher=other.pid)  # its heartbeat, fresh
        assert await _until(lambda: watch.view.state == "weights", timeout=10), watch.view.state
        assert watch.passive


_BEGIN_AND_HOLD = """
import sys, time
sys.path.insert(0, sys.argv[2])
from gpuops.core.config import HostConfig
from gpuops.core.deploy.deployer import Deployer
from gpuops.core.deploy.store import Store
from gpuops.core.deploy.watch import Bus
from gpuops.core.hosts.host import LocalHost
from tests.plans import make_plan

Deployer.beat = lambda self: None  # its first separate heartbeat never comes: the window held open
host = LocalHost(HostConfig(name="local", local=True, ssh=None, python="python3"))
Deployer(host, make_plan(sys.argv[3]), Store(sys.argv[1]), Bus()).begin()
print("begun", flush=True)
time.sleep(600)
"""


async def test_a_screen_opening_a_run_just_begun_by_another_gpuops_relays_it(tmp_path):
    """Deployer.begin recorded the run, then wrote its heartbeat in a second transaction: a
    screen of another gpuops opening the run between the two saw a planned run with no live
    watcher, took it for a deploy that had ended before its server started, and stopped
    watching (its view stayed at planned while the deploy went on). The run and its heartbeat
    are one write now."""
    import sys
    from pathlib import Path

    db = tmp_path / "store.db"
    Store(db).close()
    other = subprocess.Popen([sys.executable, "-c", _BEGIN_AND_HOLD, str(db), str(Path(__file__).parents[1]), "b"],
                             stdout=subprocess.PIPE, text=True)
    store = Store(db)
    task = None
    try:
        assert other.stdout is not None and other.stdout.readline().strip() == "begun"
        d = store.deployment("b")
        assert d is not None and d.state == "planned"
        host = LocalHost(HostConfig(name="local", local=True, ssh=None, python="python3"))
        launcher = ProcessLauncher(host, "b", ["true"], {}, str(tmp_path / "home"))
        watch = Watch(host, d, store, options=WatchOptions(launcher=launcher, poll_s=0.2, quick_check=False,
                                                           triage=False))
        task = asyncio.create_task(watch.run())
        assert await _until(lambda: watch.passive or task.done(), timeout=10)
        assert watch.passive and not task.done(), "the watch gave up on a run being deployed"
        other.kill()
        other.wait()
        # the deploy died before its server started: the relay ends, nothing left to watch
        assert await asyncio.wait_for(task, 20) == "planned"
    finally:
        if task is not None and not task.done():
            task.cancel()
            await asyncio.gather(task, return_exceptions=True)
        if other.poll() is None:
            other.kill()
            other.wait()
        store.close()
