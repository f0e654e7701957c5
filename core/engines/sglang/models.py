"""SGLang's model registry per version: the architectures each version serves itself, read from its
wheels (``data/sglang_models.json``, written by ``extract/models.py``)."""

from __future__ import annotations

import functools
import json
from pathlib import Path
from typing import Any

from .versions import resolve_version, version_key

DATA = Path(__file__).resolve().parent / "data" / "sglang_models.json"


@functools.cache
def _data() -> dict[str, Any]:
    data: dict[str, Any] = json.loads(DATA.read_text(encoding="utf-8"))
    return data


@functools.cache
def registry(version: str) -> dict[str, dict[str, Any]]:
    """{architecture: {"file": its module in the wheel, "multimodal": bool}} of the known version whose
    data applies to `version` (as the flags' data resolves it)."""
    target = version_key(resolve_version(version))
    out: dict[str, dict[str, Any]] = {}
    for v in sorted(_data()["versions"], key=version_key):
        if version_key(v) > target:
            break
        entry = _data()["versions"][v]
        out.update(entry.get("archs_added", {}))
        for name in entry.get("archs_removed", ()):
            out.pop(name, None)
    return out


def served(architecture: str, version: str) -> dict[str, Any] | None:
    """Where `version` registers `architecture` (its module, whether multimodal); None when it does not."""
    return registry(version).get(architecture)
