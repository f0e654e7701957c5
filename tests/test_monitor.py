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


def test_history_shares_the_entry_of_a_gpu_whose_figures_did_not_change():
    """HostState.record: a GPU reported with the very same figures as its last sample (an unchanged
    row's GpuSample) appends the same history entry again, nothing new; new figures a new entry.
    The history reads as before either way."""
    from gpuops.core.telemetry.monitor import HostState
    from gpuops.core.telemetry.samples import NA, GpuSample, HostSample, NvmlStatus, Snapshot

    def snap(*gpus: GpuSample) -> Snapshot:
        return Snapshot(1.0, HostSample("h", 1.0, 8, 4, []), NvmlStatus(ok=True), list(gpus))

    big = 10**12 + 1  # not a small int: the same value made again is another object
    g0 = GpuSample(0, "u0", "H200", 2 * big, big, 0, 50, 70.0, 30)
    g1 = GpuSample(1, "u1", "H200", 2 * big, NA, 0, NA, 70.0, 30)
    state = HostState("h", "ssh", "x", history_len=5)
    state.record(snap(g0, g1), 1.0)
    state.record(snap(g0, g1), 2.0)
    h0, h1 = state.gpu_history[0], state.gpu_history[1]
    assert h0[0] is h0[1] and h1[0] is h1[1]
    again = GpuSample(0, "u0", "H200", 2 * big, int(str(big)), 0, 50, 70.0, 30)  # equal, not the same objects
    state.record(snap(again, g1), 3.0)
    assert h0[2] == h0[1] and h0[2] is not h0[1]
    state.record(snap(GpuSample(0, "u0", "H200", 2 * big, big - 1, 0, 60, 70.0, 30), g1), 4.0)
    assert list(h0) == [(big, 50), (big, 50), (big, 50), (big - 1, 60)]
    assert len(h1) == 4 and all(m is NA and u is NA for m, u in h1)
    for t in range(5, 10):
        state.record(snap(g0, g1), float(t))
    assert len(h0) == 5 and list(h0)[-1] == (big, 50)
