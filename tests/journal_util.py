"""Real journal files for the tests, written by systemd's own `systemd-journal-remote`.

Entries go in as journal export format (KEY=value lines, a blank line after each entry; a
value with a newline or non-UTF-8 bytes uses the binary form KEY, newline, 64-bit
little-endian length, the bytes, newline). Each `append` is one run of
`systemd-journal-remote --output=DIR/x.journal -`, which appends to an existing file.
"""

from __future__ import annotations

import os
import re
import shutil
import struct
import subprocess
import tempfile
import time
import uuid
from pathlib import Path

JOURNAL_REMOTE = "/lib/systemd/systemd-journal-remote"
UNIT = "gpuops-test.service"


def have_journal_tools() -> bool:
    return os.access(JOURNAL_REMOTE, os.X_OK) and shutil.which("journalctl") is not None


def readable_tempdir(prefix: str) -> Path:
    """A directory every user can read (sshd's users included), unlike pytest's 0700 tmp dirs."""
    d = Path(tempfile.mkdtemp(prefix=prefix))
    d.chmod(0o755)
    return d


def _field(key: str, value: str | bytes) -> bytes:
    data = value.encode() if isinstance(value, str) else value
    try:
        text_ok = b"\n" not in data and data.decode("utf-8") is not None
    except UnicodeDecodeError:
        text_ok = False
    if text_ok:
        return key.encode() + b"=" + data + b"\n"
    return key.encode() + b"\n" + struct.pack("<Q", len(data)) + data + b"\n"


class JournalWriter:
    """Appends entries of one unit to `directory/x.journal` (mode 0644 after each write)."""

    def __init__(self, directory: Path, unit: str = UNIT, name: str = "x.journal"):
        if not name.endswith(".journal"):
            raise ValueError("systemd-journal-remote wants a name ending in .journal")
        self.directory = Path(directory)
        self.directory.mkdir(parents=True, exist_ok=True)
        self.path = self.directory / name
        self.unit = unit
        self.boot_id = uuid.uuid4().hex  # one boot: journalctl -f shows the current boot only
        self.written = 0
        self._last_us = 0

    def export(self, messages: list[str | bytes], priority: int = 6, pid: int = 4242,
               unit: str | None = None) -> bytes:
        out = bytearray()
        for msg in messages:
            now = max(time.time_ns() // 1000, self._last_us + 1)
            self._last_us = now
            self.written += 1
            out += _field("__REALTIME_TIMESTAMP", str(now))
            out += _field("__MONOTONIC_TIMESTAMP", str(self.written))
            out += _field("_BOOT_ID", self.boot_id)
            out += _field("_SYSTEMD_UNIT", unit or self.unit)
            out += _field("PRIORITY", str(priority))
            out += _field("_PID", str(pid))
            out += _field("SYSLOG_IDENTIFIER", "python3")
            out += _field("MESSAGE", msg)
            out += b"\n"
        return bytes(out)

    def append(self, messages: list[str | bytes], **kw) -> int:
        """Write the entries with one run of systemd-journal-remote; checks that all were written."""
        if not messages:
            return 0
        data = self.export(messages, **kw)
        res = subprocess.run(
            [JOURNAL_REMOTE, f"--output={self.path}", "-"], input=data, capture_output=True, timeout=60
        )
        err = res.stderr.decode(errors="replace")
        m = re.search(r"Finishing after writing (\d+) entries", err)
        # It exits 0 even when it rejects everything: the count is the only real check.
        if res.returncode != 0 or m is None or int(m.group(1)) != len(messages):
            raise RuntimeError(f"systemd-journal-remote wrote {m and m.group(1)} of {len(messages)}: {err}")
        self.path.chmod(0o644)
        return len(messages)
