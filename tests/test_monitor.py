"""The monitor over real SSH: a black-holed host goes stale without stalling the others."""

from __future__ import annotations

import sys
import time

from gpuops.core.config import HostConfig, SshTarget
from gpuops.core.hosts.host import SshHost
from gpuops.core.config import Inventory
from gpuops.core.telemetry.monitor import Monitor
from tests.sshd import TcpProxy
from tests.test_hosts import wait_until


def ssh_host(sshd, name: str, port: int) -> SshHost:
    cfg = HostConfig(name=name, local=False, ssh=SshTarget(sshd.user, "127.0.0.1", port), python=sys.executable)
    return SshHost(cfg, connect_options=sshd.options(), connect_timeout=2, keepalive_interval=1, keepalive_count_max=2)


async def test_black_hole_goes_stale_others_keep_updating(sshd):
    proxy = await TcpProxy(sshd.port).start(sshd)
    hosts = [ssh_host(sshd, "healthy", sshd.port), ssh_host(sshd, "stuck", proxy.port)]
    mon = Monitor(Inventory(hosts=tuple(h.config for h in hosts)), interval=0.25, hosts=hosts, stale_after=2.0)
    mon.start()
    healthy, stuck = mon.states["healthy"], mon.states["stuck"]
    try:
        assert await wait_until(lambda: healthy.updates >= 2 and stuck.updates >= 2, timeout=20)
        assert stuck.reachable and stuck.snapshot.host.mem_total > 0
        proxy.freeze()
        frozen_at, before = time.monotonic(), healthy.updates
        stuck_updates = stuck.updates
        # the stuck host ages while the healthy one keeps getting samples at 4 Hz
        assert await wait_until(lambda: stuck.age() > 1.5, timeout=5)
        assert healthy.updates >= before + 4 and healthy.age() < 1.0
        assert await wait_until(lambda: stuck.reachable is False, timeout=10)
        assert "no data" in stuck.error or "no answer" in stuck.error or "connect" in stuck.error
        assert stuck.updates <= stuck_updates + 1
        assert time.monotonic() - frozen_at < 10
        # the network comes back: retried with backoff, fresh again
        proxy.thaw()
        assert await wait_until(lambda: stuck.updates > stuck_updates + 1 and stuck.reachable, timeout=40)
        assert stuck.error is None or "NVML" in stuck.error
        # ten minutes of history at most, per GPU and for the CPU
        assert stuck.cpu_history.maxlen == int(600 / 0.25)
    finally:
        await mon.close()
        await proxy.close()
