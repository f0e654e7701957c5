"""The log pipeline's fast paths change nothing: the finding rules' gate (``finding_rules._GATE``)
and the tracker's first-character prefix table (``phases._STARTS_BY_CHAR``) give exactly what the
full tests give, over every log in tests/data (the real-log corpus)."""

from __future__ import annotations

import json
import random
import re
import typing
from pathlib import Path

import msgspec
import pytest

from gpuops.core.deploy import journal
from gpuops.core.engines.sglang import finding_rules, phases
from gpuops.core.engines.sglang.finding_rules import LogScanner
from gpuops.core.engines.sglang.phases import PhaseTracker, clean

DATA = Path(__file__).parent / "data"
LOGS = sorted(p for p in DATA.rglob("*.log"))


def _lines(path: Path) -> list[str]:
    return path.read_text(errors="replace").splitlines()


def test_every_needle_holds_a_gate_key():
    for needle in finding_rules._LOOKED_FOR:
        assert any(key in needle for key in finding_rules._GATE), needle


def test_starts_by_char_is_starts():
    assert sorted(p for ps in phases._STARTS_BY_CHAR.values() for p in ps) == sorted(phases._STARTS)
    for path in LOGS:
        for raw in _lines(path):
            t = clean(raw).text
            by_char = phases._STARTS_BY_CHAR.get(t[:1])
            assert t.startswith(phases._STARTS) == bool(by_char and t.startswith(by_char)), t


def test_no_step_line_of_the_corpus_holds_a_needle():
    """The scanner skips SGLang's start-up step lines (finding_rules._STEP_STARTS) before its gate: no
    such line in any log of tests/data holds a needle of any rule."""
    steps = 0
    for path in LOGS:
        for raw in _lines(path):
            t = clean(raw).text
            if t.startswith(finding_rules._STEP_STARTS):
                steps += 1
                assert not [n for n in finding_rules._LOOKED_FOR if n in t], t
    assert steps > 200


def _scan(path: Path) -> tuple:
    tracker, scanner = PhaseTracker(), LogScanner()
    for raw in _lines(path):
        ln = clean(raw)
        tracker.feed(ln)
        scanner.feed(ln, tracker)
    tracker.finish()
    hits = {k: [(h.line_no, h.line, h.groups, h.phase) for h in v] for k, v in scanner._hits.items()}
    found = [(f.code, f.summary) for f in scanner.findings(tracker)]
    return hits, dict(scanner._counts), dict(scanner._nccl_started), scanner.nccl_info, dict(scanner._tb_starts), found


@pytest.mark.parametrize("path", LOGS, ids=lambda p: str(p.relative_to(DATA)))
def test_gated_scan_equals_full_scan(path, monkeypatch):
    gated = _scan(path)
    monkeypatch.setattr(finding_rules, "_GATE", ("",))  # "" is in every line: every line takes the full test
    assert _scan(path) == gated


# The lazy pattern phases._bar stands for (a search for its tail instead of a try at every character)
_LAZY_BAR = re.compile(r"(.*?):\s+(\d+)%(?: Completed \||\|[^|]{0,80}\|) (\d+)/(\d+)")


def _lazy_bar(t: str) -> tuple[str, str, str] | None:
    m = _LAZY_BAR.match(t)
    return m.group(1, 3, 4) if m else None


def test_bar_is_the_lazy_pattern_over_the_corpus_and_random_bars():
    for path in LOGS:
        for raw in _lines(path):
            t = clean(raw).text
            assert phases._bar(t) == _lazy_bar(t), t
    rng = random.Random(14)
    parts = ["Capturing batches (bs=8 avail_mem=1.5 GB)", "Loading shards", ":", ": ", ":  ", "\t", "\n", " ",
             "73%", "50%", "٣%", "|", "|███▎  |", " Completed |", " 12/52", " ٣/٤", "/", "5", "x", "\u00a0", "%|"]
    for _ in range(20_000):
        t = "".join(rng.choice(parts) for _ in range(rng.randint(1, 12)))
        assert phases._bar(t) == _lazy_bar(t), repr(t)


def test_literal_first_patterns_match_as_their_plain_forms():
    """_ELAPSED_RE and _BS_RE, written literal first with a look back (the engine then scans for the
    literal), find what their plain forms find, where they find it: over the corpus and random text."""
    plain = {phases._ELAPSED_RE: re.compile(r"(?:elapsed=|Time elapsed: )" + phases._NUM),
             phases._BS_RE: re.compile(r"\bbs[= ]\[([\d,\s]*)\]")}
    rng = random.Random(11)
    frags = ["bs", "bs=", "bs ", "[", "]", "1", "2.5", ",", " ", "abs", "_bs", "ébs=[", "elapsed=", "Time elapsed: ",
             "time elapsed: ", "elapsed: ", "Time ", "-", "\n", "x", "é"]
    texts = [line for path in LOGS for line in _lines(path)]
    texts += ["".join(rng.choice(frags) for _ in range(rng.randint(1, 14))) for _ in range(100_000)]
    for fast, slow in plain.items():
        for t in texts:
            a, b = fast.search(t), slow.search(t)
            assert (a and (a.group(1), a.end())) == (b and (b.group(1), b.end())), (slow.pattern, t)


def test_plain_starts_are_left_as_they_are_by_unwrap():
    """clean() skips _unwrap for SGLang's progress bars: _unwrap leaves every such line as it is."""
    rng = random.Random(15)
    tails = [" (bs=8 avail_mem=1.5 GB):  73%|███  | 38/52", "  | x", " | ", ": 1", "\t| y", " shards:  50% Completed | 2/4",
             " INFO: x", "", " 2026-07-14T07:49:04Z INFO x: "]
    for start in phases._PLAIN_STARTS:
        for _ in range(500):
            s = start + "".join(rng.choice(tails) for _ in range(rng.randint(0, 4)))
            assert phases._unwrap(s) == s, s
    for path in LOGS:
        for raw in _lines(path):
            if raw.startswith(phases._PLAIN_STARTS):
                assert phases._unwrap(raw) == raw, raw


def test_plain_journal_entries_read_as_the_general_way_reads_them():
    """parse_journal_line's typed fast path gives what the general way (any shape) gives, or hands
    the entry to it."""
    rng = random.Random(16)
    values = {
        "__CURSOR": ["s=1;i=2", "", "x", 5, None],
        "__REALTIME_TIMESTAMP": ["1700000000123456", "0", "", "12a", "+5", "-5", "1e3", "٣", " 7", 17, None],
        "PRIORITY": ["0", "6", "7", "8", "9", " 4 ", "-1", "", "٣", 3, ["3"], None],
        "MESSAGE": ["hello", "", "ünï ███", "\ud800 x", [104, 105], ["a", [98]], 7, None, "api_key=sk-gpuops-abc1"],
    }
    for _ in range(5_000):
        entry = {k: rng.choice(v) for k, v in values.items() if rng.random() < 0.93}
        line = json.dumps(entry)
        try:
            want = msgspec.to_builtins(journal._parse_entry(line))
        except ValueError:
            with pytest.raises(ValueError):
                journal.parse_journal_line(line)
            continue
        assert msgspec.to_builtins(journal.parse_journal_line(line)) == want, line
        # and from the bytes a binary stream hands over
        assert msgspec.to_builtins(journal.parse_journal_line(line.encode())) == want, line


def test_a_journal_line_of_bytes_that_are_no_utf8_reads_as_a_text_stream_decoded_it():
    raw = (b'{"__CURSOR":"s=1;i=2","__REALTIME_TIMESTAMP":"1700000000123456","PRIORITY":"6",'
           b'"MESSAGE":"bad \xff\xfe utf8 \xe2\x96\x88"}')
    rec = journal.parse_journal_line(raw)
    assert rec == journal.parse_journal_line(raw.decode("utf-8", "replace"))
    assert rec.text == "bad \ufffd\ufffd utf8 \u2588" and rec.cursor == "s=1;i=2" and rec.priority == 6


def test_a_log_event_holds_only_text_and_numbers():
    """LogEvent (one a log line) is left out of the garbage collector's tracking (gc=False), which is
    safe only while no field can hold a container: a reference cycle through one would never be freed."""
    from gpuops.core.domain import LogEvent

    atomic = {str, int, float, type(None)}
    for field in msgspec.structs.fields(LogEvent):
        kinds = set(typing.get_args(field.type)) or {field.type}
        assert kinds <= atomic, (field.name, field.type)
    assert LogEvent.__struct_config__.gc is False  # (what the above makes safe)


def test_the_bus_delivers_in_order_and_drops_only_a_failing_listener():
    from gpuops.core.deploy.watch import Bus

    bus = Bus()
    got: list[tuple[str, int]] = []

    def failing(event: int) -> None:
        got.append(("failing", event))
        raise RuntimeError("a broken screen")

    def once(event: int) -> None:
        got.append(("once", event))
        stop_once()  # a listener that leaves while the event is delivered

    bus.listen("d", lambda e: got.append(("a", e)))
    bus.listen("d", failing)
    stop_once = bus.listen("d", once)
    stop_b = bus.listen("d", lambda e: got.append(("b", e)))
    bus.listen("other", lambda e: got.append(("other", e)))
    bus.publish("d", 1)
    assert got == [("a", 1), ("failing", 1), ("once", 1), ("b", 1)]
    got.clear()
    bus.publish("d", 2)  # the failing listener and the one that left are gone; the others stay
    assert got == [("a", 2), ("b", 2)]
    stop_b()
    stop_b()  # twice: nothing more
    got.clear()
    bus.publish("d", 3)
    bus.publish("nobody", 4)
    assert got == [("a", 3)]


def test_a_prefix_read_once_reads_as_the_pattern_reads_each_line():
    """clean() keeps what SGLang's prefix pattern found by the line's text up to its first "]" and the
    character after: the same as the pattern on the whole line, for every corpus line and random ones."""
    def direct(s: str) -> tuple:
        m = phases._SGL_RE.match(s)
        if not m:
            return None, {}, s
        ranks = {k: int(v) for k, v in phases._RANK_RE.findall(m.group(2))}
        return m.group(1), ranks, s[m.end():]

    rng = random.Random(17)
    parts = ["[", "]", "] ", "2026-07-14 ", "07-14 ", "07:49:04", ".123", ",5", " TP0", " EP3", " DP1 PP0", " x", "\n",
             "x" * 90, "Decode batch", "  ", ":", "9", "[2026-07-14 07:49:04 TP0] "]
    lines = [rng.choice(["[", "[2026-07-14 07:49:04"]) + "".join(rng.choice(parts) for _ in range(rng.randint(0, 8)))
             for _ in range(20_000)]
    lines += [raw for path in LOGS for raw in _lines(path) if raw.startswith("[")]
    for s in lines * 2:  # the second time from what was kept
        if "\r" in s or "\x1b" in s or s[1:2].isdigit() and (s[5:6] != "-" or s[11:12] == "T"):
            continue  # (other ways through clean)
        ln = clean(s)
        assert (ln.ts, dict(ln.ranks), ln.text) == direct(s.rstrip("\r\n")), repr(s)


def test_a_line_read_from_a_kept_prefix_reads_as_read_afresh():
    """clean() looks a line's prefix up first among those read before (SGLang's own, no relay's):
    every line, relayed ones (mpirun's, a collector's, kubectl's prefix before SGLang's) among them,
    reads the same from what was kept as with nothing kept."""
    rng = random.Random(18)
    starts = ["[2026-07-14 07:49:04 TP0] ", "[2026-07-14 07:49:04] ", "[1,0]<stdout>:", "[2026-07-14T07:49:04Z] ",
              "[pod/sglang-0/server] ", "[07-14 07:49:04] ", "[10:00:00 TP1] ", "[x] ", "[", "[2026-07-14 07:49"]
    parts = ["[2026-07-14 07:49:04 TP3 EP3] ", "Decode batch", "\r", "]", " ", "x", "\x1b[31m", "\n"]
    lines = [rng.choice(starts) + "".join(rng.choice(parts) for _ in range(rng.randint(0, 5))) for _ in range(20_000)]
    lines += [raw for path in LOGS for raw in _lines(path)]

    def fields(ln):
        return type(ln), ln.raw, ln.text, ln.ts, dict(ln.ranks), [(x.text, x.ts, dict(x.ranks)) for x in getattr(ln, "extra", ())]

    for s in lines:
        phases._PREFIXES.clear()
        phases._SGL_PREFIXES.clear()
        afresh = fields(clean(s))
        assert fields(clean(s)) == afresh, repr(s)  # (the second time from what the first kept)
