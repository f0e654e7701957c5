"""The serving engines gpuops knows, by name: ``engines.get("sglang")`` is SGLang's adapter.

An adapter is a subclass of :class:`Engine` (``core/engines/base.py``). The built-in ones are
listed here as ``module:Class`` and imported the first time they are asked for (as entry points
are), so the domain can ask a plan's engine for its command line without importing what the
engine's phase grammar and finding rules import; ``register`` adds one at run time (a test's toy
engine, a plug-in)."""

from __future__ import annotations

import importlib

from .base import Engine, Scanner, Tracker, VersionData

__all__ = ["Engine", "Scanner", "Tracker", "VersionData", "UnknownEngine", "DEFAULT", "get", "names", "register"]

DEFAULT = "sglang"  # the engine of a plan that names none (every plan made before engines had names)

_BUILTIN: dict[str, str] = {"sglang": "gpuops.core.engines.sglang.engine:SGLang"}
_LOADED: dict[str, Engine] = {}


class UnknownEngine(ValueError):
    """A name no engine answers to (one line)."""


def register(engine: type[Engine] | Engine) -> Engine:
    """Make `engine` (an adapter class or instance) known by its ``name``; returns the instance."""
    inst = engine() if isinstance(engine, type) else engine
    if not isinstance(inst, Engine):
        raise TypeError(f"{inst!r} is not an Engine")
    _LOADED[inst.name] = inst
    return inst


def names() -> list[str]:
    """Every engine's name, the built-in ones first."""
    return list(dict.fromkeys([*_BUILTIN, *_LOADED]))


def get(name: str = DEFAULT) -> Engine:
    """The adapter of the engine called `name`; :class:`UnknownEngine` when none is."""
    inst = _LOADED.get(name)
    if inst is not None:
        return inst
    where = _BUILTIN.get(name)
    if where is None:
        raise UnknownEngine(f"no engine called {name!r} (known: {', '.join(names())})")
    module, _, attr = where.partition(":")
    return register(getattr(importlib.import_module(module), attr))
