"""The launchers gpuops knows, by name: ``register`` a :class:`~.base.Launcher` subclass (its ``kind``),
``get(name)`` it, ``names()`` for choices and validation. A name registered here is one an inventory's
``launcher =`` and a plan may name (it is added to :data:`gpuops.core.config.LAUNCHERS`)."""

from __future__ import annotations

from typing import TypeVar

from ...config import register_launcher_name, unregister_launcher_name
from .base import Launcher

_LAUNCHERS: dict[str, type[Launcher]] = {}

L = TypeVar("L", bound=type[Launcher])


def register(cls: L) -> L:
    """Register `cls` under its ``kind`` (a class decorator); a name already taken is refused."""
    name = cls.kind
    if name in _LAUNCHERS and _LAUNCHERS[name] is not cls:
        raise ValueError(f"a launcher named {name!r} is registered already")
    register_launcher_name(name)
    _LAUNCHERS[name] = cls
    return cls


def unregister(name: str) -> None:
    """Forget the launcher `name` (a plug-in going away; a test's own)."""
    if _LAUNCHERS.pop(name, None) is not None:
        unregister_launcher_name(name)


def get(name: str) -> type[Launcher]:
    """The launcher registered as `name`; KeyError naming the known ones otherwise."""
    try:
        return _LAUNCHERS[name]
    except KeyError:
        raise KeyError(f"no launcher named {name!r} (known: {', '.join(names())})") from None


def names() -> tuple[str, ...]:
    """The registered launchers' names, in registration order."""
    return tuple(_LAUNCHERS)
