"""The fleet's cheap paths (issue 14): an SSH stream's lines split from the channel's chunks and handed
over from its data callback, the lazily re-armed keepalive, the Monitor's silence watch that moves
no timer per sample, and a reporter line whose GPU rows did not change decoded without them. Each
behaves as the plain way did: same lines, same snapshots, a dead host still found."""

from __future__ import annotations

import asyncio
import json
import sys

import pytest

import gpuops.core.hosts.host as hostmod
from gpuops.core.config import HostConfig, Inventory, SshTarget
from gpuops.core.hosts.host import HostUnreachable, SshHost, _LineSession
from gpuops.core.telemetry.monitor import HostState, Monitor
from gpuops.core.telemetry.samples import _ReportReader, parse_report_line
from tests.sshd import TcpProxy
from tests.test_hosts import wait_until


class FakeChan:
    def __init__(self) -> None:
        self.calls: list[str] = []

    def pause_reading(self) -> None:
        self.calls.append("pause")

    def resume_reading(self) -> None:
        self.calls.append("resume")


def session() -> tuple[_LineSession, FakeChan]:
    s, chan = _LineSession(), FakeChan()
    s.connection_made(chan)
    return s, chan


async def drain(s: _LineSession) -> list[str]:
    out = []
    while (line := await s.next_line()) is not None:
        out.append(line)
    return out


# ------------------------------------------------------------------ lines from chunks


async def test_lines_split_across_chunk_boundaries():
    s, _ = session()
    for chunk in (b"ab", b"c\nde", b"f\n\ng", b"h\r\n", "é\n".encode()[:1], "é\n".encode()[1:], b"tail"):
        s.data_received(chunk, None)
    s.data_received(b"warn", 1)  # stderr, in pieces too
    s.data_received(b"ing\nlast words", 1)
    s.eof_received()
    s.connection_lost(None)
    assert await drain(s) == ["abc", "def", "", "gh\r", "é", "tail"]  # the last line without its newline too
    assert list(s.stderr_tail) == ["warning", "last words"]
    assert s.lost is None


async def test_undecodable_bytes_are_replaced_and_a_lost_connection_is_told():
    s, _ = session()
    s.data_received(b"ok\n\xff\xfe bad\npart", None)
    s.connection_lost(ConnectionResetError("gone"))
    assert await drain(s) == ["ok", "\ufffd\ufffd bad", "part"]
    assert isinstance(s.lost, ConnectionResetError)


async def test_a_line_longer_than_the_limit_comes_in_pieces(monkeypatch):
    monkeypatch.setattr(hostmod, "LINE_LIMIT", 8)
    s, _ = session()
    s.data_received(b"0123456", None)
    s.data_received(b"789abc", None)  # 13 bytes without a newline: handed over as they are
    s.data_received(b"d\nxy\n", None)
    s.eof_received()
    assert await drain(s) == ["0123456789abc", "d", "xy"]


async def test_a_slow_reader_pauses_the_channel_and_resumes_it(monkeypatch):
    monkeypatch.setattr(hostmod, "STREAM_HIGH_WATER", 20)
    monkeypatch.setattr(hostmod, "STREAM_LOW_WATER", 5)
    s, chan = session()
    s.data_received(b"aaaaaaaaa\n" * 3, None)  # 30 bytes waiting: over the high water mark
    assert chan.calls == ["pause"]
    assert await s.next_line() == "aaaaaaaaa"
    assert chan.calls == ["pause"]  # 20 left: still above the low water mark
    assert await s.next_line() == "aaaaaaaaa"
    assert await s.next_line() == "aaaaaaaaa"
    assert chan.calls == ["pause", "resume"]


async def test_each_hands_waiting_lines_first_then_each_as_it_arrives():
    s, _ = session()
    s.data_received(b"one\ntwo\n", None)
    got: list[str] = []
    task = asyncio.ensure_future(s.each(got.append))
    await asyncio.sleep(0)
    assert got == ["one", "two"]
    s.data_received(b"three\nfo", None)
    assert got == ["one", "two", "three"]  # from the data callback itself: no task in between
    s.data_received(b"ur\n", None)
    s.eof_received()
    await task
    assert got == ["one", "two", "three", "four"]


async def test_what_the_callback_raises_stops_reading_and_is_raised():
    s, chan = session()
    got: list[str] = []

    def handle(line: str) -> None:
        if line == "boom":
            raise ValueError(line)
        got.append(line)

    task = asyncio.ensure_future(s.each(handle))
    await asyncio.sleep(0)
    s.data_received(b"a\nboom\nb\n", None)
    with pytest.raises(ValueError):
        await task
    assert got == ["a"] and chan.calls == ["pause"]
    s.data_received(b"c\n", None)  # (what comes after is not handed over)
    assert got == ["a"]


# ------------------------------------------------------------------ over SSH


def ssh_host(sshd, port: int, **kw) -> SshHost:
    cfg = HostConfig(name="box", local=False, ssh=SshTarget(sshd.user, "127.0.0.1", port), python=sys.executable)
    return SshHost(cfg, connect_options=sshd.options(), connect_timeout=2, **kw)


async def test_each_line_over_ssh_reads_as_async_for(sshd):
    host = ssh_host(sshd, sshd.port)
    script = "printf 'a'; sleep 0.05; printf 'b\\nc\\n'; echo err >&2; printf 'no newline'; exit 3"
    try:
        async with host.stream(["sh", "-c", script]) as s:
            pulled = [line async for line in s]
        got: list[str] = []
        async with host.stream(["sh", "-c", script]) as t:
            await t.each_line(got.append)
        assert pulled == got == ["ab", "c", "no newline"]
        assert s.returncode == t.returncode == 3
        assert list(s.stderr_tail) == list(t.stderr_tail) == ["err"]
    finally:
        await host.close()


async def test_reads_do_not_rearm_the_keepalive_timer(sshd):
    host = ssh_host(sshd, sshd.port, keepalive_interval=30)
    try:
        got: list[str] = []
        async with host.stream(["sh", "-c", "for i in $(seq 40); do echo $i; sleep 0.01; done"]) as s:
            await s.__anext__()
            timer = host._conn._keepalive_timer
            assert timer is not None
            await s.each_line(got.append)
        assert len(got) == 39
        assert host._conn._keepalive_timer is timer  # 40 reads, the one timer armed
    finally:
        await host.close()


async def test_a_streaming_connection_that_dies_is_still_found_by_the_keepalive(sshd):
    """Lines arrive (each a read that only marks the connection heard from), then the network
    becomes a black hole: the lazily re-armed keepalive still closes the connection as lost, and the
    stream ends with HostUnreachable rather than waiting for ever."""
    proxy = await TcpProxy(sshd.port).start(sshd)
    host = ssh_host(sshd, proxy.port, keepalive_interval=0.5, keepalive_count_max=2)
    got: list[str] = []
    try:
        stream = host.stream(["sh", "-c", "while :; do echo tick; sleep 0.05; done"])
        task = asyncio.ensure_future(stream.each_line(got.append))
        assert await wait_until(lambda: len(got) >= 10, timeout=15)
        proxy.freeze()
        with pytest.raises(HostUnreachable):
            await asyncio.wait_for(task, 30)
        assert not host.connected
        await stream.aclose()
    finally:
        await host.close()
        await proxy.close()


async def test_the_monitor_finds_a_silent_host_without_keepalives(sshd):
    """The samples move no deadline: the Monitor's own watch finds a host whose stream falls silent
    (here the connection's keepalive is off, so nothing else would)."""
    proxy = await TcpProxy(sshd.port).start(sshd)
    host = ssh_host(sshd, proxy.port, keepalive_interval=0)
    mon = Monitor(Inventory(hosts=(host.config,)), interval=0.25, hosts=[host], stale_after=2.0)
    mon.start()
    state = mon.states["box"]
    try:
        assert await wait_until(lambda: state.updates >= 3, timeout=20)
        assert host._conn._keepalive_timer is None  # (no keepalive at all)
        proxy.freeze()
        assert await wait_until(lambda: state.reachable is False, timeout=15)
        assert "no data for 2s" in state.error
        proxy.thaw()
        before = state.updates
        assert await wait_until(lambda: state.updates > before and state.reachable, timeout=40)
    finally:
        await mon.close()
        await proxy.close()


# ------------------------------------------------------------------ a reporter's unchanged rows


def _line(util: int = 10, cpu: float = 5.0, t: float = 1.0) -> str:
    gpus = [{"index": i, "uuid": f"GPU-{i}", "name": "NVIDIA H200", "memory_total_bytes": 150 * 2**30,
             "memory_used_bytes": i * 2**30, "memory_reserved_bytes": 2**29, "util_percent": util, "power_w": 75.0,
             "temp_c": 31, "sm_clock_mhz": 345, "processes": []} for i in range(4)]
    report = {"v": 1, "t": t, "host": {"hostname": "h", "cpu_percent": cpu, "mem_total_bytes": 8, "mem_used_bytes": 4,
                                       "disks": [{"mount": "/", "total_bytes": 10, "free_bytes": 5}]},
              "nvml": {"ok": True, "driver_version": "580"}, "gpus": gpus}
    return json.dumps(report, separators=(",", ":"))  # as the reporter writes it


def test_a_line_with_the_same_gpu_rows_shares_the_last_list_and_reads_the_same():
    reader = _ReportReader(host=None, interval=1.0)  # type: ignore[arg-type]
    first = reader.snapshot(_line())
    second = reader.snapshot(_line(cpu=7.5, t=2.0))  # host stats changed, GPU rows not
    assert second.gpus is first.gpus
    assert second == parse_report_line(_line(cpu=7.5, t=2.0))  # what a line parsed alone gives
    assert second.host.cpu_percent == 7.5 and second.t == 2.0
    changed = reader.snapshot(_line(util=90, t=3.0))
    assert changed.gpus is not first.gpus and changed == parse_report_line(_line(util=90, t=3.0))
    assert changed.gpus[0].util == 90


def test_a_line_that_only_looks_alike_is_parsed_in_full():
    reader = _ReportReader(host=None, interval=1.0)  # type: ignore[arg-type]
    reader.snapshot(_line())
    tail = _line()[_line().index(',"gpus":'):]
    odd = '{"v":1,"t":2.0,"host":{"hostname":"x"' + tail  # the rows' text, but an unclosed host object
    assert reader.snapshot(odd) is None and parse_report_line(odd) is None
    nested = odd + "}"  # "gpus" inside the host object: another text after it, so parsed in full
    assert reader.snapshot(nested) == parse_report_line(nested) and reader.snapshot(nested).gpus == []
    v2 = _line().replace('{"v":1', '{"v":2', 1)
    assert reader.snapshot(v2) is None


def test_history_of_a_shared_gpu_list_repeats_its_entries():
    reader = _ReportReader(host=None, interval=1.0)  # type: ignore[arg-type]
    state = HostState("h", "ssh", "x", history_len=4)
    for t in range(3):
        state.record(reader.snapshot(_line(t=float(t))), float(t))
    state.record(reader.snapshot(_line(util=50, t=3.0)), 3.0)
    state.record(reader.snapshot(_line(util=50, t=4.0)), 4.0)
    h = state.gpu_history[1]
    assert list(h) == [(2**30, 10), (2**30, 10), (2**30, 50), (2**30, 50)]
    assert h[0] is h[1] and h[2] is h[3]
    assert list(state.cpu_history) == [5.0] * 5
