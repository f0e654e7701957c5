"""Where gpuops keeps its files on the operator's machine (XDG base directories)."""

from __future__ import annotations

import json
import os
import stat
from pathlib import Path
from typing import Any


def state_dir() -> Path:
    base = os.environ.get("XDG_STATE_HOME") or os.path.join(os.path.expanduser("~"), ".local", "state")
    return Path(base) / "gpuops"


def _tighten(path: Path, keep: int) -> None:
    """Drop every permission bit of `path` outside `keep` (never adds one: a folder made read-only on
    purpose stays so); only what this user owns; a failure leaves it as it was."""
    try:
        st = path.lstat()
        mode = stat.S_IMODE(st.st_mode)
        if st.st_uid == os.geteuid() and not stat.S_ISLNK(st.st_mode) and mode & ~keep:
            os.chmod(path, mode & keep)
    except OSError:
        pass


def private_dir(path: Path) -> Path:
    """gpuops' own folder on this machine (the state folder): made 0700, and kept so: a folder
    made earlier 0755, and every file in it (the store, its -wal and -shm, ui.json), loses what
    other users could read or run (its owner's bits stay: 0644 becomes 0600, 0755 0700) (the store holds every plan and log line gpuops recorded). Called again
    once files were made in it: a new file takes the umask's mode (0644), which only this user can
    reach inside the 0700 folder until it is tightened too."""
    path.mkdir(mode=0o700, parents=True, exist_ok=True)
    _tighten(path, 0o700)
    try:
        entries = list(path.iterdir())
    except OSError:
        return path
    for entry in entries:
        _tighten(entry, 0o700)  # group's and others' bits gone; the owner's kept (a program stays runnable)
    return path


def ui_state_path() -> Path:
    return state_dir() / "ui.json"


def load_ui_state() -> dict[str, Any]:
    """UI choices (theme, …); a missing or unreadable file is an empty dict."""
    try:
        data = json.loads(ui_state_path().read_text())
    except (OSError, ValueError):
        return {}
    return data if isinstance(data, dict) else {}


def save_ui_state(**changes: Any) -> None:
    """Merge changes into ui.json atomically (a crash never leaves half a file)."""
    data = load_ui_state()
    data.update(changes)
    path = ui_state_path()
    private_dir(path.parent)
    tmp = path.with_suffix(".json.tmp")
    fd = os.open(tmp, os.O_WRONLY | os.O_CREAT | os.O_TRUNC | os.O_CLOEXEC, 0o600)
    with os.fdopen(fd, "w") as f:
        f.write(json.dumps(data, indent=2, sort_keys=True) + "\n")
    os.chmod(tmp, 0o600)  # a tmp file left 0644 by an older gpuops
    os.replace(tmp, path)


# ------------------------------------------------------------------ path arguments

PATH_MAX = 4096  # bytes, the terminating NUL included (Linux limits.h)
NAME_MAX = 255  # bytes of one component
_REFUSED_CATEGORIES = frozenset({"Cc", "Cf", "Cs", "Zl", "Zp"})  # controls, format, surrogates, line breaks
_SHOW_LIMIT = 80


def show_path(value: str) -> str:
    """``value`` quoted for a one-line message: ``ascii()`` (every control or non-ASCII character
    escaped), shortened to about 80 characters with its length when longer."""
    text = ascii(value)
    if len(text) <= _SHOW_LIMIT:
        return text
    return f"{text[:_SHOW_LIMIT - 4]}...{text[0]} ({len(value)} characters)"


def check_path(value: object, what: str, *, dotdot: bool = True) -> str:
    """A path argument, refused (``ValueError``, one line naming ``what``) when it is absurd: not a
    string, empty, with a control, format, surrogate or line-break character, over ``PATH_MAX``
    bytes, or with a component over ``NAME_MAX`` bytes; with ``dotdot=False`` also with a ``..``
    segment (a path that climbs out of where it seems to point). Returns it unchanged.

    One function for every path the command line takes (files it reads or writes, local model
    folders, the simulated host's directory), so each is refused the same way, before any use."""
    import unicodedata

    if not isinstance(value, str):
        raise ValueError(f"{what}: expected a path, got {type(value).__name__}")
    if not value:
        raise ValueError(f"{what}: an empty path")
    for ch in value:
        if unicodedata.category(ch) in _REFUSED_CATEGORIES:
            raise ValueError(f"{what}: {show_path(value)} contains the control character {ascii(ch)}")
    raw = os.fsencode(value)
    if len(raw) >= PATH_MAX:
        raise ValueError(f"{what}: {show_path(value)} is {len(raw)} bytes long; a path is at most "
                         f"{PATH_MAX - 1} (PATH_MAX {PATH_MAX})")
    for part in raw.split(b"/"):
        if len(part) > NAME_MAX:
            raise ValueError(f"{what}: {show_path(value)} has a component of {len(part)} bytes; "
                             f"one is at most {NAME_MAX} (NAME_MAX)")
    if not dotdot and ".." in value.split("/"):
        raise ValueError(f"{what}: {show_path(value)} has a '..' segment: give the canonical path "
                         "(`realpath PATH` prints it)")
    return value
