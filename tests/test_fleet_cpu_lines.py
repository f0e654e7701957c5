"""The fleet's per-sample path, cheaper (issue 14): a chunk of whole lines decoded at once, and a
reporter line's disks and NVML state shared with the last line's when they did not change. Each is
held to the plain way: the same lines as decoding each line on its own, the same snapshots as
parsing each line alone."""

from __future__ import annotations

import json
import random

from gpuops.core.hosts.host import _LineSession
from gpuops.core.telemetry.samples import _ReportReader, parse_report_line


def _reference_lines(chunks: list[bytes]) -> tuple[list[str], bytes]:
    """What the session hands over, done the plain way: split the bytes, decode each line alone."""
    data = b"".join(chunks)
    *done, partial = data.split(b"\n")
    return [line.decode("utf-8", "replace") for line in done], partial


def _session_lines(chunks: list[bytes], binary: bool = False) -> tuple[list, bytes]:
    s = _LineSession(binary)
    got: list = []
    s._sink = got.append
    for chunk in chunks:
        s.data_received(chunk, None)
    return got, s._partial


def test_whole_line_chunks_decode_as_each_line_alone():
    cases = [
        [b"one\n"],
        [b"one\ntwo\n"],
        [b"par", b"tial\n"],
        [b"a\n\n\nb\n"],  # empty lines
        [b"bad \xe2\x82\n", b"\xff\xfe ok\n"],  # a sequence cut by the newline, invalid bytes
        [b"\xe2\x82", b"\xac euro\n"],  # a character split across chunks, completed
        [b"caf\xc3", b"\xa9\nnext \xc3\n"],
        [b"x" * 10 + b"\xf0\x9f\x98\n" + b"\xf0\x9f\x98\x80\n"],
    ]
    for chunks in cases:
        assert _session_lines(chunks) == _reference_lines(chunks), chunks


def _random_chunkings(seed: int) -> list[list[bytes]]:
    """500 random byte strings (newlines, cut and bad UTF-8) cut into chunks at random places."""
    rnd = random.Random(seed)
    alphabet = [b"a", b"{", b"\n", b"\xc3", b"\xa9", b"\xe2", b"\x82", b"\xac", b"\xff", b"\xf0", b"\x9f"]
    out = []
    for _ in range(500):
        data = b"".join(rnd.choice(alphabet) for _ in range(rnd.randrange(1, 60)))
        cuts = sorted(rnd.sample(range(1, len(data) + 1), k=min(len(data), rnd.randrange(1, 5))))
        out.append([data[a:b] for a, b in zip([0, *cuts], cuts) if b > a])
    return out


def test_random_chunks_decode_as_each_line_alone():
    for chunks in _random_chunkings(14):
        assert _session_lines(chunks) == _reference_lines(chunks), chunks


def test_a_binary_session_hands_over_each_lines_bytes_as_they_came():
    """A binary stream (a journal's JSON lines, read by msgspec from bytes): the same lines, undecoded."""
    for chunks in _random_chunkings(15):
        *done, partial = b"".join(chunks).split(b"\n")
        assert _session_lines(chunks, binary=True) == (done, partial), chunks
    s = _LineSession(True)
    s.data_received(b"one\ntwo", None)
    s.eof_received()
    assert list(s.lines) == [b"one", b"two"]  # the last line without its newline, as bytes too


def test_the_queue_counts_a_whole_line_chunk_as_the_plain_way_did():
    s = _LineSession()
    s.data_received(b"ab", None)
    s.data_received(b"c\nde\n", None)
    assert list(s.lines) == ["abc", "de"] and s._queued == 7 and s._partial == b""


def _line(t=1.0, cpu=5.0, free=5, driver="580", ok=True, util=10, disks=1) -> str:
    gpus = [{"index": i, "uuid": f"GPU-{i}", "name": "NVIDIA H200", "memory_total_bytes": 8 * 2**30,
             "memory_used_bytes": i * 2**30, "memory_reserved_bytes": 2**29, "util_percent": util,
             "power_w": 75.0, "temp_c": 31, "sm_clock_mhz": 345, "processes": []} for i in range(4)]
    report = {"v": 1, "t": t, "host": {"hostname": "h", "cpu_percent": cpu, "mem_total_bytes": 8, "mem_used_bytes": 4,
                                       "disks": [{"mount": f"/d{k}", "total_bytes": 10, "free_bytes": free}
                                                 for k in range(disks)]},
              "nvml": {"ok": ok, "driver_version": driver}, "gpus": gpus}
    return json.dumps(report, separators=(",", ":"))  # as the reporter writes it


def test_unchanged_disks_and_nvml_state_are_shared_and_read_the_same():
    reader = _ReportReader(host=None, interval=1.0)  # type: ignore[arg-type]
    first = reader.snapshot(_line())
    second = reader.snapshot(_line(t=2.0, cpu=9.0))
    assert second.host.disks is first.host.disks and second.nvml is first.nvml
    assert second == parse_report_line(_line(t=2.0, cpu=9.0))
    disk = reader.snapshot(_line(t=3.0, free=4))  # a disk's free space changed
    assert disk.host.disks is not first.host.disks and disk.host.disks[0].free_bytes == 4
    assert disk.nvml is first.nvml and disk == parse_report_line(_line(t=3.0, free=4))
    nvml = reader.snapshot(_line(t=4.0, free=4, driver="581"))
    assert nvml.nvml is not first.nvml and nvml.nvml.driver_version == "581"
    assert nvml.host.disks is disk.host.disks and nvml == parse_report_line(_line(t=4.0, free=4, driver="581"))


def test_a_stream_of_changing_lines_reads_as_each_line_alone():
    rnd = random.Random(7)
    reader = _ReportReader(host=None, interval=1.0)  # type: ignore[arg-type]
    for t in range(300):
        line = _line(t=float(t + 1), cpu=rnd.choice([1.0, 2.5]), free=rnd.choice([5, 5, 5, 4]),
                     driver=rnd.choice(["580"] * 5 + ["581"]), ok=rnd.random() > 0.05,
                     util=rnd.choice([10] * 4 + [90]), disks=rnd.choice([1] * 6 + [0, 2]))
        if rnd.random() < 0.03:
            line = line.replace('{"v":1', '{"v":2', 1)  # not a line of the reporter's: no snapshot
        assert reader.snapshot(line) == parse_report_line(line), line


def test_units_gib_of_a_plain_int_reads_as_the_general_way():
    """units.gib's short way for a plain int (no N/A test) gives the text the general way gives."""
    from gpuops.core import units
    from gpuops.core.telemetry.samples import NA, is_na

    gib = 2**30
    values = [0, 1, gib // 2, gib // 2 + 1, 3 * gib // 2, 5 * gib // 2, 25275990016, 608870400, 2**62, -gib // 2,
              NA, None, 1.5 * gib, float("nan"), True]
    values += [random.Random(3).randrange(0, 2**45) for _ in range(2000)]
    for digits in (0, 1):
        for v in values:
            assert units.gib(v, digits) == ("N/A" if is_na(v) else f"{v / units.GIB:.{digits}f}"), (v, digits)
