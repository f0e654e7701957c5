"""Where gpuops keeps its files on the operator's machine (XDG base directories)."""

from __future__ import annotations

import json
import os
from pathlib import Path
from typing import Any


def state_dir() -> Path:
    base = os.environ.get("XDG_STATE_HOME") or os.path.join(os.path.expanduser("~"), ".local", "state")
    return Path(base) / "gpuops"


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
    path.parent.mkdir(parents=True, exist_ok=True)
    tmp = path.with_suffix(".json.tmp")
    tmp.write_text(json.dumps(data, indent=2, sort_keys=True) + "\n")
    os.replace(tmp, path)
