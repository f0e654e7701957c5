"""A crash is recorded with the last lines the dying server wrote, not only those read by then."""

from __future__ import annotations

import shlex
from pathlib import Path

from gpuops.core.config import HostConfig
from gpuops.core.deploy.launch import LaunchStatus, ProcessLauncher
from gpuops.core.deploy.store import Store
from gpuops.core.deploy.watch import Watch, WatchOptions
from gpuops.core.domain import FindingEvent, StateEvent
from gpuops.core.hosts.host import LocalHost
from tests.plans import make_plan

# SGLang 0.5.23's crash on the CPU (tests/test_real_sglang.py) and the parent's last line. In CI on a
# loaded machine the watch learned that the server had exited before its follower had read that
# line, and recorded the crash without it.
CRASH = [
    "[2026-12-01 10:00:00] Init torch distributed begin.",
    "[2026-12-01 10:00:01] Load weight begin. avail mem=21.12 GB",
    "[2026-12-01 10:00:02] Scheduler hit an exception: Traceback (most recent call last):",
    '  File "/venv/lib/python3.11/site-packages/sglang/srt/layers/rotary_embedding.py", line 9, in <module>',
    "ModuleNotFoundError: No module named 'vllm'",
]
LAST = "[2026-12-01 10:00:04] Received sigquit from a child process. It usually means the child failed."


class ExitFirst(ProcessLauncher):
    """The server's last line is written only once the watch has been told the server exited: the
    order that lost the line under load, made certain."""

    go: Path

    async def status(self) -> LaunchStatus:
        st = await super().status()
        if not st.running:
            self.go.touch()
        return st


async def test_a_server_found_exited_is_recorded_crashed_with_the_lines_it_wrote_last(tmp_path):
    go = tmp_path / "go"
    writer = f"while [ ! -e {shlex.quote(str(go))} ]; do sleep 0.02; done; echo {shlex.quote(LAST)}"
    script = "\n".join([*(f"echo {shlex.quote(line)}" for line in CRASH), f"( {writer} ) &", "exit 1"])
    host = LocalHost(HostConfig(name="local", local=True, ssh=None, python="python3"))
    store = Store(tmp_path / "store.db")
    store.add_deployment("local", make_plan("c"), state="starting")
    launcher = ExitFirst(host, "c", ["sh", "-c", script], {}, str(tmp_path / "home"))
    launcher.go = go
    await launcher.install({})
    store.begin_log("c", log_offset=0)
    await launcher.start()
    try:
        watch = Watch(host, store.deployment("c"), store,
                      options=WatchOptions(launcher=launcher, poll_s=0.2, quick_check=False, triage=False))
        assert await watch.run() == "crashed"
        assert go.exists()  # (the watch asked, and was told: exited)
        shown = [e.line for e in watch.log]
        assert LAST in shown and shown.index(LAST) > shown.index(CRASH[-1]), shown
        events = list(store.events("c"))
        crashed = [e for e in events if isinstance(e, StateEvent)][-1]
        assert crashed.state == "crashed" and crashed.phase == "weights", crashed
        assert [e for e in events if isinstance(e, FindingEvent) and e.code == "python-module-missing"]
    finally:
        await launcher.stop()
        store.close()
