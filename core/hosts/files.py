"""Files on a host: written with a mode through stdin (never argv), one value read back, the home."""

from __future__ import annotations

import re
import secrets
import shlex

from .host import Host, HostError


class FileError(HostError):
    pass


def env_file_text(env: dict[str, str], header: str) -> str:
    """KEY=VALUE lines a POSIX shell and systemd's EnvironmentFile= both read."""
    lines = [f"# {header}"]
    for key, value in sorted(env.items()):
        if not re.fullmatch(r"[A-Za-z_][A-Za-z0-9_]*", key):
            raise FileError(f"invalid environment variable name {key!r}")
        if "\n" in value or "\0" in value:
            raise FileError(f"environment variable {key} holds a newline")
        lines.append(f"{key}={shlex.quote(value)}")
    return "\n".join(lines) + "\n"


def new_api_key() -> str:
    return "sk-gpuops-" + secrets.token_urlsafe(32)


async def write_private_file(host: Host, path: str, text: str) -> None:
    """Write `text` to `path` on the host with mode 0600, via stdin (never argv)."""
    script = 'umask 077; mkdir -p "$(dirname "$1")"; cat > "$1.tmp" && chmod 600 "$1.tmp" && mv -f "$1.tmp" "$1"'
    res = await host.run(["sh", "-c", script, "gpuops-write", path], timeout=30, input=text)
    if not res.ok:
        raise FileError(f"{host.name}: cannot write {path}: {res.stderr.strip() or res.returncode}")


async def write_file(host: Host, path: str, text: str) -> None:
    script = 'mkdir -p "$(dirname "$1")"; cat > "$1.tmp" && mv -f "$1.tmp" "$1"'
    res = await host.run(["sh", "-c", script, "gpuops-write", path], timeout=30, input=text)
    if not res.ok:
        raise FileError(f"{host.name}: cannot write {path}: {res.stderr.strip() or res.returncode}")


async def read_env_value(host: Host, path: str, key: str) -> str | None:
    """One value of an env file on the host (to keep an API key across restarts)."""
    script = 'test -r "$1" && sed -n "s/^$2=//p" "$1" | tail -n 1'
    res = await host.run(["sh", "-c", script, "gpuops-read", path, key], timeout=15)
    value = res.stdout.strip()
    if not value:
        return None
    try:
        parts = shlex.split(value)
    except ValueError:
        return None
    return parts[0] if parts else None


async def remote_home(host: Host) -> str:
    res = await host.run(["sh", "-c", 'printf %s "$HOME"'], timeout=15)
    home = res.stdout.strip()
    if not res.ok or not home.startswith("/"):
        raise FileError(f"{host.name}: cannot find the home directory")
    return home
