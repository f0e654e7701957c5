"""A very large inventory degrades gracefully (the issue: 10,000 hosts held 733 MiB and a core and took
23 s to quit). Structural facts through the pilot, against hosts that cannot be reached: connection
attempts are bounded at once (`MAX_CONNECTING`) and over time (`ATTEMPT_BURST`, then
`ATTEMPTS_PER_S`), seen from outside (the sockets this process holds, the connections a listener is
offered); the host list is one widget whatever the number of hosts. tests/perf/fleet_scale.py
prints the figures (RSS, idle CPU, q to exit) against a baseline."""

from __future__ import annotations

import asyncio
import socket
import time

import psutil
import pytest

from gpuops.core.config import parse_inventory
from gpuops.core.telemetry import monitor
from gpuops.tui.app import GpuopsApp
from tests.tui_helpers import until


@pytest.fixture(autouse=True)
def _isolated(tmp_path, monkeypatch):
    monkeypatch.setenv("XDG_STATE_HOME", str(tmp_path / "state"))
    monkeypatch.setenv("HOME", str(tmp_path / "home"))
    monkeypatch.delenv("SSH_AUTH_SOCK", raising=False)


def inventory(n: int, port: int):
    return parse_inventory("\n".join(f'[hosts.h{i:04d}]\nssh = "root@127.0.0.1:{port}"\n' for i in range(n)),
                           source="fleet.toml")


def sockets_to(port: int) -> int:
    return sum(1 for c in psutil.Process().net_connections(kind="tcp") if c.raddr and c.raddr.port == port)


async def test_hosts_that_never_answer_are_connected_to_a_bounded_number_at_once():
    """400 hosts behind a listener that never accepts (its queue fills, later connections hang until
    gpuops' connect timeout, as a fleet whose network is down): this process never holds more than
    MAX_CONNECTING sockets to them (it held one per host, 3522 of 10,000 at once)."""
    hole = socket.socket()
    hole.bind(("127.0.0.1", 0))
    hole.listen(0)
    port = hole.getsockname()[1]
    app = GpuopsApp(inventory(400, port), interval=1.0)
    try:
        async with app.run_test(size=(120, 40)) as pilot:
            most = 0
            deadline = time.monotonic() + 12
            while time.monotonic() < deadline:
                most = max(most, sockets_to(port))
                await pilot.pause(0.2)
            assert 0 < most <= monitor.MAX_CONNECTING, most
            # one host list, however many hosts: no widget per host
            assert len(app.screen.query("RowTable")) == 2 and len(list(app.screen.walk_children())) < 60
    finally:
        hole.close()


async def test_retries_of_hosts_that_fail_take_turns_over_the_whole_inventory():
    """400 hosts whose connection is closed as soon as it is made (each attempt fails at once): the
    attempts over the first seconds stay within the first burst and the rate a second, whatever the
    number of hosts (each host retrying on its own backoff, 1 2 4 8 s, was about 1600 in 10 s)."""
    accepted = 0

    async def hang_up(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        nonlocal accepted
        accepted += 1
        writer.close()

    server = await asyncio.start_server(hang_up, "127.0.0.1", 0, backlog=1024)
    port = server.sockets[0].getsockname()[1]
    # the time the limiter has had, from before the app (and its limiter) exists: every attempt it
    # allowed is within the burst and the rate over that (timed from the first attempt seen instead,
    # a loaded machine's late look at it counted attempts from before as the rate's: 323 > 321)
    began = time.monotonic()
    app = GpuopsApp(inventory(400, port), interval=1.0)
    try:
        async with app.run_test(size=(120, 40)) as pilot:
            assert await until(pilot, lambda: accepted > 0, timeout=30)
            await pilot.pause(10)
            elapsed = time.monotonic() - began
            bound = monitor.ATTEMPT_BURST + monitor.ATTEMPTS_PER_S * elapsed
            assert accepted <= bound, (accepted, bound)
            states = app.monitor.states.values()
            assert sum(1 for s in states if s.reachable is False) > monitor.ATTEMPT_BURST  # they did fail
            # a failing host says when its turn comes (the list's order, not every second)
            turns = sorted(s.retry_at for s in states if s.retry_at is not None)
            assert turns[-1] - turns[0] > 5
    finally:
        server.close()
