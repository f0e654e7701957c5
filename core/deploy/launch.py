"""Starting and stopping a deployment's server on its host: the launchers' public face (they live in
:mod:`gpuops.core.deploy.launchers`, one module each, registered by name)."""

from __future__ import annotations

from .launchers import (
    STOP_GRACE_S,
    Launcher,
    LaunchError,
    LaunchStatus,
    launcher_for,
    open_launcher,
)
from .launchers.process import ProcessLauncher
from .launchers.systemd import SystemdLauncher

__all__ = ["STOP_GRACE_S", "LaunchError", "LaunchStatus", "Launcher", "ProcessLauncher", "SystemdLauncher",
           "launcher_for", "open_launcher"]
