"""The serving engines gpuops knows, by name: ``engines.get(plan.engine)`` is that engine's adapter.

An adapter is a subclass of :class:`Engine` (``core/engines/base.py``). The built-in ones are the
packages beside this module: each package's ``__init__`` names its engine (``NAME``) and its adapter
(``ADAPTER``, ``module:Class`` within the package), and the adapter is imported the first time it
is asked for (as entry points are), so the domain can ask a plan's engine for its command line
without importing what the engine's phase grammar and finding rules import. One of them says it is
the ``DEFAULT``: the engine of a plan that names none (every plan made before engines had names),
whose ``PLAN_KEYS`` name the plan's fields that kept its words in the JSON and the store
(:func:`plan_key`). ``register`` adds one at run time (a test's toy engine, a plug-in)."""

from __future__ import annotations

import importlib
import pkgutil
from collections.abc import Mapping

from .base import Engine, NoSimHost, Router, Scanner, SimHostPart, Tracker, VersionData

__all__ = ["Engine", "Router", "Scanner", "Tracker", "VersionData", "SimHostPart", "NoSimHost", "UnknownEngine", "DEFAULT", "get", "names", "register",
           "plan_key"]


def _builtin() -> tuple[dict[str, str], str, Mapping[str, str]]:
    """({name: "module:Class"} of the engine packages here, the default engine's name, its PLAN_KEYS)."""
    found: dict[str, str] = {}
    default: str = ""
    keys: Mapping[str, str] = {}
    for info in sorted(pkgutil.iter_modules(__path__), key=lambda m: m.name):
        if not info.ispkg:
            continue
        package = importlib.import_module(f"{__name__}.{info.name}")  # (its __init__ only: names)
        name, adapter = getattr(package, "NAME", None), getattr(package, "ADAPTER", None)
        if not isinstance(name, str) or not isinstance(adapter, str):
            continue
        found[name] = f"{package.__name__}.{adapter}"
        if getattr(package, "DEFAULT", False):
            default, keys = name, getattr(package, "PLAN_KEYS", {})
    return found, default, keys


_BUILTIN, DEFAULT, _PLAN_KEYS = _builtin()
_LOADED: dict[str, Engine] = {}


def plan_key(field: str) -> str:
    """The JSON and store key of the plan's field `field`: its own name, or the name the first
    engine gave it (the CLI contract keeps names: they only grow, never renamed)."""
    return _PLAN_KEYS.get(field, field)


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
