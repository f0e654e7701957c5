"""What the programs gpuops sends to hosts share: defined once here. When a program is sent (``python
-c SOURCE``, :func:`gpuops.core.hosts.host.script_source`) its ``from .common import …`` line is
replaced by this file's body, so it stays one standalone file on the host; run in gpuops' own
process (a local host) it imports this module. Standard library only, Python 3.6 and newer."""

import re

# the NVIDIA kernel module's version in /proc/driver/nvidia/version ("Kernel Module for x86_64  590.48.01")
_MODULE_VERSION = re.compile(r"Kernel Module(?: for \S+)?\s+(\d+\.\d+(?:\.\d+)?)")
# where the driver's userspace libraries (libnvidia-ml, libcuda) live, on hosts and in containers
LIB_DIRS = (
    "/usr/lib/x86_64-linux-gnu",
    "/usr/lib/aarch64-linux-gnu",
    "/usr/lib64",
    "/usr/lib",
    "/usr/local/nvidia/lib64",
    "/usr/local/nvidia/lib",
    "/usr/lib/wsl/lib",
    "/usr/local/cuda/compat",
)


def _read(path):
    """A file's text (undecodable bytes replaced), None when it cannot be read."""
    try:
        with open(path, "rb") as f:
            return f.read().decode("utf-8", "replace")
    except OSError:
        return None
