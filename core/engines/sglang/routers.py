"""The routing policies each of SGLang's routers accepts (``--policy``) and its default, read from the
routers' wheels (``data/sglang_routers.json``, written by ``extract/routers.py``)."""

from __future__ import annotations

import functools
import json
from pathlib import Path
from typing import Any

DATA = Path(__file__).resolve().parent / "data" / "sglang_routers.json"


@functools.cache
def _data() -> dict[str, Any]:
    data: dict[str, Any] = json.loads(DATA.read_text(encoding="utf-8"))
    if data.get("schema") != 1:
        raise RuntimeError(f"{DATA}: unexpected content (schema {data.get('schema')!r})")
    return data


def policies(package: str) -> tuple[str, ...]:
    """The policies `package` (smg, sglang-router) accepts; () for a router the data does not know."""
    return tuple(_data()["routers"].get(package, {}).get("policies", ()))


def default_policy(package: str) -> str | None:
    value = _data()["routers"].get(package, {}).get("default_policy")
    return value if isinstance(value, str) else None
