"""Launchers: how a deployment's server is started, stopped, found and its log read on a host.

Each launcher is a module here that defines a :class:`Launcher` subclass and registers it by name
(:mod:`.registry`); :func:`open_launcher` builds the plan's launcher. ``systemd`` and ``process`` are
the built-in ones (see their modules); another registers the same way, from anywhere."""

from __future__ import annotations

from ...domain import Plan
from ...hosts.host import Host
from . import process as _process  # noqa: F401  (registers "process")
from . import systemd as _systemd  # noqa: F401  (registers "systemd")
from .base import STOP_GRACE_S, Artifact, Launcher, LaunchError, LaunchStatus, WatchLog
from .registry import get, names, register, unregister

__all__ = ["STOP_GRACE_S", "Artifact", "LaunchError", "LaunchStatus", "Launcher", "WatchLog", "get", "launcher_for",
           "names", "open_launcher", "register", "unregister"]


def launcher_for(host: Host, plan: Plan, home: str | None) -> Launcher:
    """The plan's launcher on `host`, `home` being the host user's home (a launcher may need it)."""
    return get(plan.launcher).for_plan(host, plan, home)


async def open_launcher(host: Host, plan: Plan) -> Launcher:
    """The deployment's launcher on `host` (it may ask the host what it needs, e.g. the user's home)."""
    return await get(plan.launcher).open(host, plan)
