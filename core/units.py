"""Human-readable numbers shared by the CLI and the screens (NA prints as N/A)."""

from __future__ import annotations

from typing import Any

from .telemetry.samples import is_na

GIB = 1024**3


def gib(value: Any, digits: int = 1) -> str:
    # a plain int (bytes as NVML and psutil give them: the host list reads every host's every second)
    # is never N/A: its text without the N/A test
    if type(value) is int or not is_na(value):
        return f"{value / GIB:.{digits}f}"
    return "N/A"


def size(value: Any) -> str:
    """Bytes in the largest binary unit that keeps the number under 1024: every size gpuops shows
    (the screens and the command line) is written by this one, in KiB, MiB, GiB, TiB."""
    if is_na(value):
        return "N/A"
    n = float(value)
    for unit in ("B", "KiB", "MiB", "GiB", "TiB"):
        if abs(n) < 1024 or unit == "TiB":
            return f"{n:.0f} {unit}" if unit == "B" else f"{n:.1f} {unit}"
        n /= 1024
    return f"{n:.1f} PiB"  # pragma: no cover


def rate(bytes_per_s: Any) -> str:
    """A transfer rate in the units of `size`: "361.2 MiB/s"."""
    return f"{size(bytes_per_s)}/s"


def percent(value: Any, digits: int = 0) -> str:
    return "N/A" if is_na(value) else f"{value:.{digits}f}%"


def age(seconds: float | None) -> str:
    """How long ago, compactly: 0.4s, 12s, 3m05s, 2h10m."""
    if seconds is None:
        return "never"
    if seconds < 10:
        return f"{seconds:.1f}s"
    s = int(seconds)
    if s < 60:
        return f"{s}s"
    if s < 3600:
        return f"{s // 60}m{s % 60:02d}s"
    return f"{s // 3600}h{(s % 3600) // 60:02d}m"
