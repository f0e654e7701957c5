"""Journal and log-file followers that survive dropped connections, and a bounded ring buffer.

Every record keeps where it came from: a journal entry its ``__CURSOR``, a log-file line the
byte offset just after its newline. A follower remembers the position of the last record it
handed out (``JournalFollower.cursor``, ``FileFollower.offset`` and ``file_id``); when the
connection drops (``HostUnreachable``, or the stream ending without an exit status) it starts
the command again from there, with a backoff, so no line is lost and none is repeated.

- ``JournalFollower``: ``journalctl [--directory=D | --file=F] --unit=U --output=json --all
  [-f] [--lines=all | --after-cursor=C]``. ``--all`` matters: without it journalctl prints any
  field over 4096 bytes (an engine's ``server_args=…`` line) as ``null``. ``-f`` also limits the
  output to the journal's current boot (journalctl's own rule).
- ``FileFollower``: a small stdlib Python loop run with the host's python (``programs/tail.py``)
  that reads the file by byte offset and prints one JSON frame per line with its end offset;
  long lines travel as several frames. A truncated file (size below the offset) or a replaced
  one (rotation: another inode) is read again from 0, and the follower says so with a notice
  record. A partial last line is held until its newline arrives.

Every record's text is redacted (``gpuops.core.redact``): a secret in a log line never reaches a
view, the store or a relay.

Callers that keep records keep them in a ``RingBuffer``: the last N, and a count of what fell
off the front.

Consume ``records()`` with ``contextlib.aclosing`` (or let the task be cancelled): closing the
generator closes the stream, which ends the remote command (see ``hosts._GUARD``).
"""

from __future__ import annotations

import asyncio
import json
import re
import time
from collections import deque
from itertools import islice
from typing import Any, AsyncIterator, Generic, Iterator, Optional, TypeVar

import msgspec

from ..config import validate_abs_path
from ..hosts.host import Host, HostError, HostUnreachable, host_python, script_source
from ..hosts.programs import tail as tail_program
from ..redact import redact

__all__ = [
    "FileFollower",
    "FollowError",
    "JournalFollower",
    "Record",
    "RingBuffer",
    "journal_argv",
    "parse_journal_line",
    "validate_cursor",
    "validate_unit",
]

_UNIT_RE = re.compile(r"[A-Za-z0-9@._:-]+")
_CURSOR_RE = re.compile(r"[A-Za-z0-9=;]+")
_FILE_ID_RE = re.compile(r"[0-9]+:[0-9]+")
_MAX_UNIT = 256
_MAX_CURSOR = 1024

# A follower whose stream lived at least this long (or delivered a record) starts its
# backoff again from zero after the next drop.
_HEALTHY_S = 5.0
_FIRST_DELAY_S = 0.1
# An entry read before its writer finished it (see :class:`_Unsettled`) is read again this many times
# at most, after a pause that doubles from the first; then it is taken as it is.
UNSETTLED_TRIES = 4
_UNSETTLED_PAUSE_S = 0.05


class FollowError(HostError):
    """The followed command failed by itself (bad file, no permission, no journalctl):
    retrying would not help."""


class _Unsettled(Exception):
    """A record read while its writer was still writing it: read it again from the last delivered
    position. (``journalctl -f`` on a journal file being written gives, about once in 500,000
    entries here, an entry with its cursor and timestamps but no MESSAGE: the entry's fields were
    not all in the file yet. Read again a moment later, it has its MESSAGE.)"""


class Record(msgspec.Struct, frozen=True, gc=False):
    """One journal entry or one line of a log file (immutable; made once per line, so cheap to make,
    and of text and numbers only: the garbage collector never needs to look at one).

    ``text`` has no trailing newline (a journal MESSAGE may contain newlines of its own).
    ``ts`` is the entry's wall-clock time in seconds (journal only). ``cursor`` is the
    journal cursor, ``offset`` the file offset just after this line: where a resumed follower
    starts. ``notice`` is None for real lines; followers use notice records to say something
    about the stream itself (``"truncated"``, ``"rotated"``, ``"missing"``, ``"partial"``).
    """

    text: str
    ts: float | None
    cursor: str | None
    offset: int | None
    source: str  # "journal" | "file"
    priority: int | None = None  # syslog priority 0 (emerg) … 7 (debug), journal only
    notice: str | None = None


T = TypeVar("T")


class RingBuffer(Generic[T]):
    """The last ``capacity`` items; ``dropped`` counts the ones that fell off the front.

    ``total`` is how many were ever appended, so item ``i`` of the buffer is number
    ``dropped + i`` of the whole stream (stable line numbers for a view).
    """

    def __init__(self, capacity: int = 100_000):
        if not isinstance(capacity, int) or capacity < 1:
            raise ValueError(f"ring buffer capacity must be a positive integer, got {capacity!r}")
        self.capacity = capacity
        self._items: deque[T] = deque(maxlen=capacity)
        # what was appended, and emptied by clear(): the drops follow from them and the length (an
        # append, one a log line, is a count and the deque's own, which drops the first when full)
        self._appended = 0
        self._cleared = 0

    def append(self, item: T) -> None:
        self._appended += 1
        self._items.append(item)

    def extend(self, items: Any) -> None:
        for item in items:
            self.append(item)

    @property
    def dropped(self) -> int:
        return self._appended - self._cleared - len(self._items)

    @property
    def total(self) -> int:
        return self._appended - self._cleared

    def __len__(self) -> int:
        return len(self._items)

    def __iter__(self) -> Iterator[T]:
        return iter(self._items)

    def __getitem__(self, index: int) -> T:
        return self._items[index]

    def tail(self, n: int) -> list[T]:
        """The last ``n`` items, oldest first."""
        if n <= 0:
            return []
        out = list(islice(reversed(self._items), n))
        out.reverse()
        return out

    def clear(self) -> None:
        self._cleared += len(self._items)
        self._items.clear()


# ------------------------------------------------------------------ validation


def validate_unit(unit: object) -> str:
    """A systemd unit name: ``[A-Za-z0-9@._:-]+``, not starting with ``-``."""
    if not isinstance(unit, str) or not unit:
        raise ValueError(f"unit name: expected a non-empty string, got {unit!r}")
    if len(unit) > _MAX_UNIT or not _UNIT_RE.fullmatch(unit) or unit.startswith("-"):
        raise ValueError(
            f"unit name {unit[:80]!r}: only letters, digits and @ . _ : - are allowed "
            "(and it may not start with -)"
        )
    return unit


def validate_cursor(cursor: object) -> str:
    """A journal cursor as journalctl prints it (``s=…;i=…;b=…;m=…;t=…;x=…``)."""
    if not isinstance(cursor, str) or not cursor:
        raise ValueError(f"journal cursor: expected a non-empty string, got {cursor!r}")
    if len(cursor) > _MAX_CURSOR or not _CURSOR_RE.fullmatch(cursor):
        raise ValueError(f"journal cursor {cursor[:80]!r}: not a cursor journalctl printed")
    return cursor


# ------------------------------------------------------------------ the retry loop


class _Follower:
    """Runs a command on a host, parses its lines into records, and starts it again from the
    last delivered position when the connection drops."""

    source = ""
    binary = True  # the command's lines as bytes: its JSON is read by msgspec straight from them

    def __init__(self, host: Host, follow: bool, retry_max: float):
        if not retry_max > 0:
            raise ValueError(f"retry_max must be positive, got {retry_max!r}")
        self.host = host
        self.follow = bool(follow)
        self.retry_max = float(retry_max)
        self.reconnects = 0  # times the command was started again after a drop
        self.skipped = 0  # lines that could not be parsed (never a whole record lost to a drop)
        self.torn = 0  # runs that ended inside a record (read again whole by the next run)
        self.rereads = 0  # runs ended at a record still being written, to read it again (_Unsettled)
        self.last_error: str | None = None  # why the last run ended (None until one did)
        self.connected = False  # a run is in progress
        self.stderr_tail: Any = ()  # the current run's last stderr lines (journalctl's hints)

    # subclasses
    def _argv(self) -> list[str]:  # pragma: no cover - abstract
        raise NotImplementedError

    def _begin_run(self) -> None:
        """A new run starts: forget half-received state."""

    def _incomplete(self) -> bool:
        """Part of a record has arrived (and the run ended before the rest)."""
        return False

    def _parse(self, line: bytes) -> Record | None:  # pragma: no cover - abstract
        """A record, None for a line that is no record, ValueError for one that cannot be read."""
        raise NotImplementedError

    def _unsettled_pause(self) -> float:
        """How long to let a writer finish before reading its record again."""
        return _UNSETTLED_PAUSE_S

    def _deliver(self, rec: Record) -> None:  # pragma: no cover - abstract
        """Remember ``rec``'s position: it is being handed to the caller."""
        raise NotImplementedError

    def _failure(self, rc: int, stderr: str) -> FollowError:  # pragma: no cover - abstract
        raise NotImplementedError

    def _why_ended(self, rc: int | None, stderr_tail: Any) -> str:
        """Why a run that should have gone on ended (to retry); FollowError when retrying would not help."""
        if rc is None:
            return f"{self.host.name}: connection lost"
        if rc < 0 or 128 < rc < 160:
            return f"{self.host.name}: the command was killed (exit {rc})"
        if rc == 0:
            return f"{self.host.name}: the command ended while following"
        raise self._failure(rc, " ".join(stderr_tail).strip())

    async def records(self) -> AsyncIterator[Record]:
        delay = 0.0
        while True:
            self._begin_run()
            stream = self.host.stream(self._argv(), binary=self.binary)
            started = time.monotonic()
            delivered = 0
            unsettled = False
            bad: bytes | None = None  # an unreadable line is only garbage if more lines follow it
            try:
                async with stream:
                    self.connected = True
                    self.stderr_tail = stream.stderr_tail
                    while True:
                        try:
                            line = await stream.__anext__()
                        except StopAsyncIteration:
                            break
                        except ValueError:
                            # a local pipe's line over asyncio's 64 KiB limit: that line is lost
                            self.skipped += 1
                            continue
                        try:
                            rec = self._parse(line)
                        except _Unsettled:
                            unsettled = True
                            break
                        except ValueError:
                            if bad is not None:
                                self.skipped += 1
                            bad = line
                            continue
                        if bad is not None:
                            self.skipped += 1
                            bad = None
                        if rec is None:
                            continue
                        delivered += 1
                        self._deliver(rec)
                        yield rec
            except HostUnreachable as exc:
                error = exc.message
            else:
                if unsettled:  # read on from the last delivered record once its writer is done
                    self.rereads += 1
                    await asyncio.sleep(self._unsettled_pause())
                    continue
                rc = stream.returncode
                if rc == 0 and not self.follow:
                    if bad is not None or self._incomplete():
                        self.skipped += 1  # the output ended inside a line
                    return
                error = self._why_ended(rc, stream.stderr_tail)
            finally:
                self.connected = False
            if bad is not None or self._incomplete():
                self.torn += 1
            self.last_error = error
            if delivered or time.monotonic() - started >= _HEALTHY_S:
                delay = 0.0
            if delay:
                await asyncio.sleep(delay)
            delay = min(self.retry_max, max(_FIRST_DELAY_S, delay * 2))
            self.reconnects += 1


# ------------------------------------------------------------------ journal


def _field_text(value: Any) -> str:
    """A journal JSON field as text: a string, an array of byte values (binary data), an array
    of values (a field that occurs several times: joined with newlines) or null."""
    if value is None:
        return ""
    if isinstance(value, str):
        return value
    if isinstance(value, list):
        if all(isinstance(x, int) and not isinstance(x, bool) for x in value):
            try:
                return bytes(value).decode("utf-8", "replace")
            except ValueError:  # a number over 255: not bytes after all
                pass
        return "\n".join(_field_text(x) for x in value)
    return str(value)


_decode = json.JSONDecoder().decode  # json.loads minus its per-call argument checks
# A terminal's control sequences (colours and the like: ESC [ … final byte, and two-byte escapes): a
# server that colours its log (a router may, through tracing) writes them into the journal too
_ESCAPES = re.compile(r"\x1b(?:\[[0-?]*[ -/]*[@-~]|[@-Z\\-_])")


def shown(text: str) -> str:
    """A log line as gpuops keeps and shows it: terminal escape sequences dropped (before the
    secrets are looked for: a colour code inside a secret would hide it), secrets masked."""
    return redact(_ESCAPES.sub("", text) if "\x1b" in text else text)


class _Entry(msgspec.Struct, gc=False):
    """The fields of a `journalctl -o json` entry a Record needs (the others are skipped unread; of
    decoded JSON only, never in a cycle: the garbage collector need not track one a line)."""

    cursor: Any = msgspec.field(name="__CURSOR", default=None)
    realtime: Any = msgspec.field(name="__REALTIME_TIMESTAMP", default=None)
    priority: Any = msgspec.field(name="PRIORITY", default=None)
    message: Any = msgspec.field(name="MESSAGE", default=None)


class _PlainEntry(msgspec.Struct, gc=False):
    """The same fields as nearly every entry has them: four strings, each there. An entry of another
    shape (a MESSAGE of bytes as an array of numbers, a field missing or null, text msgspec refuses)
    fails to decode here and takes the general way, :class:`_Entry`. Typed, the checks are msgspec's."""

    cursor: str = msgspec.field(name="__CURSOR")
    realtime: str = msgspec.field(name="__REALTIME_TIMESTAMP")
    priority: str = msgspec.field(name="PRIORITY")
    message: str = msgspec.field(name="MESSAGE")


_decode_entry = msgspec.json.Decoder(_Entry).decode
_decode_plain = msgspec.json.Decoder(_PlainEntry).decode
_PRIORITIES = {str(i): i for i in range(8)}


def parse_journal_line(line: str | bytes) -> Record:
    """One line of ``journalctl -o json``; ValueError when it is not a whole entry. (Hot: a
    start-up's journal goes through here line by line: an entry of plain strings, nearly all, is
    read straight into the four fields a record needs and checked by msgspec; anything else takes
    :func:`_parse_entry`.)"""
    try:
        e = _decode_plain(line)
    except msgspec.DecodeError:  # another shape (binary MESSAGE, a field missing), or no JSON msgspec reads
        return _parse_entry(line)
    cursor, raw_ts = e.cursor, e.realtime
    priority = _PRIORITIES.get(e.priority)
    if not cursor or priority is None or not raw_ts.isdigit():  # (each a rare case the general way says)
        return _parse_entry(line)
    text = e.message
    if "\x1b" in text:  # shown(), its test inline (nearly every line has no escape)
        text = _ESCAPES.sub("", text)
    return Record(redact(text), int(raw_ts) / 1e6, cursor, None, "journal", priority)


def _parse_entry(line: str | bytes) -> Record:
    """:func:`parse_journal_line` for an entry of any shape journalctl writes."""
    try:
        entry = _decode_entry(line)
    except msgspec.DecodeError:  # not an object, or JSON only the standard decoder reads: its way
        return _parse_journal_json(line)
    cursor = entry.cursor
    if not isinstance(cursor, str) or not cursor:
        raise ValueError("a journal entry without __CURSOR")
    ts: Optional[float] = None
    raw_ts = entry.realtime
    if isinstance(raw_ts, str) and raw_ts.isdigit():
        ts = int(raw_ts) / 1e6
    raw_prio = entry.priority
    priority = _PRIORITIES.get(raw_prio) if type(raw_prio) is str else None
    if priority is None:
        raw_prio = (raw_prio if type(raw_prio) is str else _field_text(raw_prio)).strip()
        if raw_prio.isdigit():
            priority = int(raw_prio)
    message = entry.message
    return Record(shown(message if type(message) is str else _field_text(message)), ts, cursor, None, "journal",
                  priority)


def _parse_journal_json(line: str | bytes) -> Record:
    # (bytes that are no UTF-8 read with replacement, as a text stream would have decoded them)
    obj = _decode(line if isinstance(line, str) else line.decode("utf-8", "replace"))
    if not isinstance(obj, dict):
        raise ValueError("a journal JSON line is an object")
    cursor = obj.get("__CURSOR")
    if not isinstance(cursor, str) or not cursor:
        raise ValueError("a journal entry without __CURSOR")
    ts: float | None = None
    raw_ts = obj.get("__REALTIME_TIMESTAMP")
    if isinstance(raw_ts, str) and raw_ts.isdigit():
        ts = int(raw_ts) / 1e6
    priority: int | None = None
    raw_prio = obj.get("PRIORITY")
    raw_prio = (raw_prio if type(raw_prio) is str else _field_text(raw_prio)).strip()
    if raw_prio.isdigit():
        priority = int(raw_prio)
    message = obj.get("MESSAGE")
    return Record(
        text=shown(message if type(message) is str else _field_text(message)),
        ts=ts,
        cursor=cursor,
        offset=None,
        source="journal",
        priority=priority,
    )


def journal_argv(
    unit: str,
    *,
    directory: str | None = None,
    file: str | None = None,
    cursor: str | None = None,
    follow: bool = True,
    lines: int | None = None,
) -> list[str]:
    """The journalctl command line (inputs validated here too)."""
    argv = ["journalctl"]
    if directory is not None:
        argv.append(f"--directory={validate_abs_path(directory, 'journal directory')}")
    if file is not None:
        argv.append(f"--file={validate_abs_path(file, 'journal file')}")
    argv += [
        f"--unit={validate_unit(unit)}",
        "--output=json",
        "--output-fields=MESSAGE,PRIORITY",  # __CURSOR and the timestamps always come along
        "--all",
        "--no-pager",
    ]
    if follow:
        argv.append("--follow")
    if cursor is not None:
        argv += [f"--after-cursor={validate_cursor(cursor)}", "--lines=all"]
    elif lines is not None:
        argv.append(f"--lines={lines}")
    elif follow:
        argv.append("--lines=all")  # -f alone starts with the last 10
    return argv


class JournalFollower(_Follower):
    """``journalctl [--directory D | --file F] -u UNIT -o json --no-pager [-f] [--after-cursor C]``
    on a host, as Records carrying their ``__CURSOR``.

    With no ``directory``/``file`` the host's ``journal_dir`` (if configured) is used. With
    no cursor it starts at the unit's first entry (of the current boot when following), or
    ``lines`` entries from the end. After a dropped connection it reconnects with backoff
    (``retry_max`` caps the delay) and resumes after ``cursor``: the last delivered entry.
    """

    source = "journal"

    def __init__(
        self,
        host: Host,
        unit: str,
        *,
        directory: str | None = None,
        file: str | None = None,
        cursor: str | None = None,
        follow: bool = True,
        retry_max: float = 10.0,
        lines: int | None = None,
    ):
        super().__init__(host, follow, retry_max)
        if directory is not None and file is not None:
            raise ValueError("journal: give a directory or a file, not both")
        if directory is None and file is None and host.config.journal_dir:
            directory = host.config.journal_dir
        if lines is not None and (not isinstance(lines, int) or isinstance(lines, bool) or lines < 0):
            raise ValueError(f"journal: lines must be a non-negative integer, got {lines!r}")
        self.unit = validate_unit(unit)
        self.directory = validate_abs_path(directory, "journal directory") if directory else None
        self.file = validate_abs_path(file, "journal file") if file else None
        self.cursor: str | None = validate_cursor(cursor) if cursor is not None else None
        self.lines = lines
        # the entry last read without its MESSAGE (its cursor) and how often: read again, a few times
        self._unsettled_tries: dict[str, int] = {}

    def _argv(self) -> list[str]:
        return journal_argv(
            self.unit,
            directory=self.directory,
            file=self.file,
            cursor=self.cursor,
            follow=self.follow,
            lines=self.lines,
        )

    def _parse(self, line: bytes) -> Record | None:
        if not line.strip():
            return None
        rec = parse_journal_line(line)
        if not rec.text and b'"MESSAGE"' not in line:  # (a server's empty line has MESSAGE "")
            tries = self._unsettled_tries.get(rec.cursor or "", 0)
            if tries < UNSETTLED_TRIES:
                self._unsettled_tries = {rec.cursor or "": tries + 1}
                raise _Unsettled(rec.cursor)
        return rec

    def _unsettled_pause(self) -> float:
        tries = max(self._unsettled_tries.values(), default=1)
        return float(_UNSETTLED_PAUSE_S * 2 ** max(0, tries - 1))

    def _deliver(self, rec: Record) -> None:
        self.cursor = rec.cursor
        if self._unsettled_tries:
            self._unsettled_tries = {}

    def _failure(self, rc: int, stderr: str) -> FollowError:
        where = self.file or self.directory or "the system journal"
        return FollowError(
            f"{self.host.name}: journalctl for {self.unit} ({where}) failed (exit {rc})"
            + (f": {stderr[:300]}" if stderr else ""),
            "check the unit name and the journal path, and that the SSH user may read the journal "
            "(root, or the systemd-journal/adm group)",
        )


# ------------------------------------------------------------------ log files


_decode_frame = msgspec.json.Decoder().decode
_PIECE = 8192  # characters per frame: at most ~48 KiB of JSON, under asyncio's 64 KiB line limit


class FileFollower(_Follower):
    """A log file on a host followed by byte offset.

    Each Record is a whole line with ``offset`` = the byte offset just after its newline (a
    line longer than ``max_line`` bytes is cut into pieces of that size, each with its own
    offset). ``offset`` and ``file_id`` (``"device:inode"``) are the position of the last
    delivered line: a follower created with them continues exactly there. A file truncated
    below the offset, or replaced by another file (rotation), is read again from 0 and a
    notice record (``"truncated"``/``"rotated"``) says so; ``"missing"`` says the file does not
    exist yet (following waits for it). Without ``follow`` it reads to the end and stops, and
    a last line without newline comes as a ``"partial"`` notice (``offset`` stays before it).
    Needs a python (3.6+) on the host: its ``python`` key, else ``python3``.
    """

    source = "file"

    def __init__(
        self,
        host: Host,
        path: str,
        *,
        offset: int = 0,
        follow: bool = True,
        retry_max: float = 10.0,
        file_id: str | None = None,
        max_line: int = 1 << 20,
    ):
        super().__init__(host, follow, retry_max)
        if not isinstance(offset, int) or isinstance(offset, bool) or offset < 0:
            raise ValueError(f"log file offset must be a non-negative integer, got {offset!r}")
        if file_id is not None and (not isinstance(file_id, str) or not _FILE_ID_RE.fullmatch(file_id)):
            raise ValueError(f"log file id must look like DEVICE:INODE, got {file_id!r}")
        if not isinstance(max_line, int) or max_line < 1024:
            raise ValueError(f"max_line must be an integer of at least 1024, got {max_line!r}")
        self.path = validate_abs_path(path, "log file")
        self.offset = offset
        self.file_id = file_id
        self.max_line = max_line
        self.truncations = 0  # truncated or rotated files seen
        self._pieces: list[str] = []
        self._missing = False

    def _argv(self) -> list[str]:
        return [
            host_python(self.host), "-c", script_source(tail_program), self.path, str(self.offset),
            self.file_id or "-", "1" if self.follow else "0", str(self.max_line), str(_PIECE),
        ]

    def _begin_run(self) -> None:
        self._pieces = []

    def _incomplete(self) -> bool:
        return bool(self._pieces)

    def _parse(self, line: bytes) -> Record | None:
        try:
            obj = _decode_frame(line)
        except msgspec.DecodeError:
            obj = json.loads(line)  # what only the standard decoder reads (or its ValueError)
        if isinstance(obj, list):
            if len(obj) != 2 or not isinstance(obj[0], int) or not isinstance(obj[1], str):
                raise ValueError("a line frame is [offset, text]")
            text = obj[1]
            if self._pieces:
                text = "".join(self._pieces) + text
                self._pieces = []
            self._missing = False
            return Record(text=shown(text), ts=None, cursor=None, offset=obj[0], source="file")
        if not isinstance(obj, dict):
            raise ValueError("a frame is a list or an object")
        if "c" in obj:
            piece = obj["c"]
            if not isinstance(piece, str):
                raise ValueError("a piece frame holds text")
            self._pieces.append(piece)
            return None
        event = obj.get("e")
        if event == "open":
            if isinstance(obj.get("id"), str) and _FILE_ID_RE.fullmatch(obj["id"]):
                self.file_id = obj["id"]
            return None
        if event in ("truncated", "rotated"):
            self._pieces = []
            self._missing = False
            was = obj.get("offset")
            if event == "truncated":
                text = (
                    f"{self.path} was truncated (now {obj.get('size')} bytes, we were at {was}); "
                    "reading it again from the start"
                )
            else:
                text = f"{self.path} was replaced by a new file (rotated at {was}); reading the new one from the start"
            return Record(text=text, ts=None, cursor=None, offset=0, source="file", notice=event)
        if event == "missing":
            if self._missing:
                return None
            self._missing = True
            return Record(
                text=f"{self.path} does not exist (yet); waiting for it",
                ts=None, cursor=None, offset=self.offset, source="file", notice="missing",
            )
        if event == "partial":
            part, at = obj.get("text"), obj.get("offset")
            if not isinstance(part, str) or not isinstance(at, int):
                raise ValueError("a partial frame holds offset and text")
            return Record(text=shown(part), ts=None, cursor=None, offset=at, source="file", notice="partial")
        raise ValueError(f"unknown frame {line[:80]!r}")

    def _deliver(self, rec: Record) -> None:
        if rec.notice in ("truncated", "rotated"):
            self.truncations += 1
            self.offset = 0
        elif rec.notice is None and rec.offset is not None:
            self.offset = rec.offset

    def _failure(self, rc: int, stderr: str) -> FollowError:
        return FollowError(
            f"{self.host.name}: cannot follow {self.path} (exit {rc})" + (f": {stderr[:300]}" if stderr else ""),
            "check the path and that the SSH user may read it; the host needs python3 "
            "(or the host's python key)",
        )
