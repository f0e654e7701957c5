"""The inventory: which hosts gpuops manages and their policy, read from a TOML file.

Where the file comes from: ``--config PATH`` > ``$GPUOPS_CONFIG`` >
``$XDG_CONFIG_HOME/gpuops/config.toml`` (``~/.config`` when XDG_CONFIG_HOME is unset). A path
given explicitly must exist; when the XDG default is missing the inventory is the single host
``localhost``.

Every problem in a file is a :class:`ConfigError` whose ``str()`` is one line,
``FILE:LINE: problem``, where LINE is the line that assigns the offending key (see
:class:`_KeyLocator`).

The ``validate_*`` functions are shared with the rest of gpuops for checking user input: each
returns the (possibly normalised) value or raises ``ValueError`` with a one-line message.
"""

from __future__ import annotations

import difflib
import ipaddress
import json
import math
import os
import re
from collections.abc import Callable, Collection, Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, NoReturn, TypeGuard, TypeVar

from .states import PHASES

__all__ = [
    "LAUNCHERS",
    "DEFAULT_LAUNCHER",
    "launcher_choices",
    "register_launcher_name",
    "unregister_launcher_name",
    "BenchProfile",
    "ConfigError",
    "HostConfig",
    "Inventory",
    "SshTarget",
    "default_config_path",
    "default_inventory",
    "load_inventory",
    "parse_inventory",
    "resolve_config_path",
    "validate_abs_path",
    "validate_env_name",
    "validate_env_value",
    "validate_host_name",
]

# The launchers' names an inventory's `launcher =` and a plan may name: gpuops.core.deploy.launchers
# registers each (register_launcher_name). The built-in ones are here from the start, so an inventory
# reads the same before any launcher module is imported.
LAUNCHERS: list[str] = ["systemd", "process"]
DEFAULT_LAUNCHER = LAUNCHERS[0]  # a host that names none
_LAUNCHER_NAME = re.compile(r"[a-z][a-z0-9_-]{0,31}")
# [stall] accepts the phases plus the download-stall threshold.
_STALL_KEYS = (*map(str, PHASES), "download")  # as text: an unknown key's hint quotes the close one
_DATASET_NAMES = ("random-ids", "random", "sharegpt", "custom")
_HOST_KEYS = (
    "ssh",
    "local",
    "python",
    "model_dirs",
    "forbidden_paths",
    "gpu_ids",
    "serve_host",
    "launcher",
    "journal_dir",
    "env",
    "node_addr",
    "nccl_interface",
    "first_port",
)
# The port the planner tries first on a host (then the next free one above it): the host's
# first_port, else this variable's, else DEFAULT_FIRST_PORT. On a machine several people or test
# processes share, each keeps a range of its own.
FIRST_PORT_VARIABLE = "GPUOPS_FIRST_PORT"
DEFAULT_FIRST_PORT = 30000
_PORT_RANGE = (1024, 65535)

KeyPath = tuple[str, ...]
_T = TypeVar("_T")


# --------------------------------------------------------------------------------------------------
# Errors and value validators


class ConfigError(Exception):
    """A problem with a config file; ``str(e)`` is ``FILE:LINE: problem`` on one line."""

    def __init__(self, path: str, line: int | None, problem: str) -> None:
        self.path = path
        self.line = line
        self.problem = problem
        where = path if line is None else f"{path}:{line}"
        super().__init__(f"{where}: {problem}")


def _show(value: object, limit: int = 60) -> str:
    """A one-line rendering of a (TOML) value for messages: strings quoted, newlines escaped."""
    text = json.dumps(value, ensure_ascii=False, default=str)
    return text if len(text) <= limit else text[: limit - 1] + "…"


_HOST_NAME_RE = re.compile(r"[a-z0-9][a-z0-9._-]*")
_ENV_NAME_RE = re.compile(r"[A-Za-z_][A-Za-z0-9_]*")
_PATH_CHAR_RE = re.compile(r"[A-Za-z0-9._/+@=,-]")
_MAX_PATH = 4096


def _require_str(value: object, what: str) -> str:
    if not isinstance(value, str):
        raise ValueError(f"{what}: expected a string, got {_show(value)}")
    return value


def register_launcher_name(name: str) -> None:
    """Let inventories and plans name the launcher `name` (a registered launcher's kind)."""
    if not isinstance(name, str) or not _LAUNCHER_NAME.fullmatch(name):
        raise ValueError(f"a launcher's name is 1-32 of a-z, 0-9, '-' and '_' (starting with a letter): {name!r}")
    if name not in LAUNCHERS:
        LAUNCHERS.append(name)


def unregister_launcher_name(name: str) -> None:
    if name in LAUNCHERS:
        LAUNCHERS.remove(name)


def launcher_choices() -> str:
    """The launchers' names as an error says them: '"a" or "b"', '"a", "b" or "c"'."""
    quoted = [f'"{n}"' for n in LAUNCHERS]
    return quoted[0] if len(quoted) == 1 else ", ".join(quoted[:-1]) + " or " + quoted[-1]


def validate_host_name(s: object) -> str:
    """A host (or profile) name: ``[a-z0-9][a-z0-9._-]*``, at most 63 characters."""
    name = _require_str(s, "host name")
    if len(name) > 63 or not _HOST_NAME_RE.fullmatch(name):
        raise ValueError(
            f"invalid name {_show(name)}: use lowercase letters, digits, '.', '_' and '-', "
            "starting with a letter or digit, at most 63 characters"
        )
    return name


def validate_abs_path(s: object, what: str = "path") -> str:
    """An absolute path made of safe characters; returns it with ``//``, ``/./`` and a trailing
    ``/`` collapsed. Rejects ``..`` components, ``~``, whitespace and shell metacharacters."""
    path = _require_str(s, what)
    if not path.startswith("/"):
        raise ValueError(f'{what}: must be an absolute path (starting with "/"), got {_show(path)}')
    if len(path) > _MAX_PATH:
        raise ValueError(f"{what}: longer than {_MAX_PATH} characters")
    for ch in path:
        if not _PATH_CHAR_RE.fullmatch(ch):
            raise ValueError(
                f"{what}: {_show(path)} contains {ch!r}; "
                "only letters, digits and . _ / + @ = , - are allowed"
            )
    parts = [part for part in path.split("/") if part not in ("", ".")]
    if ".." in parts:
        raise ValueError(f"{what}: {_show(path)} must not contain '..' components")
    return "/" + "/".join(parts)


def validate_env_name(s: object) -> str:
    """An environment variable name: ``[A-Za-z_][A-Za-z0-9_]*``."""
    name = _require_str(s, "environment variable name")
    if not _ENV_NAME_RE.fullmatch(name):
        raise ValueError(
            f"invalid environment variable name {_show(name)}: "
            "use letters, digits and '_', not starting with a digit"
        )
    return name


def validate_env_value(s: object) -> str:
    """An environment variable value: any string without NUL or line breaks."""
    value = _require_str(s, "environment variable value")
    for bad, label in (("\0", "NUL"), ("\n", "a newline"), ("\r", "a carriage return")):
        if bad in value:
            raise ValueError(f"environment variable value {_show(value)} contains {label}")
    return value


# --------------------------------------------------------------------------------------------------
# Data


_SSH_USER = r"[A-Za-z0-9_.][A-Za-z0-9._-]*"
_SSH_HOST = r"[A-Za-z0-9_][A-Za-z0-9._-]*"
_SSH_RE = re.compile(
    rf"(?:(?P<user>{_SSH_USER})@)?"
    rf"(?:\[(?P<ipv6>[0-9A-Fa-f:.]+(?:%[A-Za-z0-9._-]+)?)\]|(?P<host>{_SSH_HOST}))"
    r"(?::(?P<port>[0-9]{1,5}))?"
)


@dataclass(frozen=True)
class SshTarget:
    """Where to SSH: ``user@host:port``, user and port optional; host may be an ssh_config alias."""

    user: str | None
    host: str
    port: int | None

    @classmethod
    def parse(cls, s: object) -> SshTarget:
        """Parse ``host``, ``user@host``, ``user@host:port``, ``[::1]:22`` or an ssh_config alias.

        User and host must not start with '-' (they could be read as ssh options)."""
        text = _require_str(s, "ssh target")
        m = _SSH_RE.fullmatch(text)
        if m is None:
            raise ValueError(
                f'invalid ssh target {_show(text)}: expected "host", "user@host", '
                '"user@host:port" or "[ipv6]:port"'
            )
        host = m["host"]
        if host is not None and (len(host) > 253 or any(len(label) > 63 for label in host.split("."))):
            # what the resolver would refuse later (as a traceback from the IDNA codec)
            raise ValueError(f"invalid ssh target {_show(text)}: the host name is {len(host)} characters long; "
                             "a host name is at most 253, each dot-separated part at most 63")
        if m["user"] is not None and len(m["user"]) > 255:
            raise ValueError(f"invalid ssh target {_show(text)}: the user name is {len(m['user'])} characters long "
                             "(at most 255)")
        if m["ipv6"] is not None:
            try:
                ipaddress.IPv6Address(m["ipv6"])
            except ValueError:
                raise ValueError(f"invalid ssh target {_show(text)}: bad IPv6 address") from None
            host = m["ipv6"]
        port = None
        if m["port"] is not None:
            port = int(m["port"])
            if not 1 <= port <= 65535:
                raise ValueError(f"invalid ssh target {_show(text)}: port must be 1..65535")
        return cls(user=m["user"], host=host, port=port)

    def display(self) -> str:
        """Back to ``user@host:port`` form (IPv6 hosts bracketed), omitting missing parts."""
        host = f"[{self.host}]" if ":" in self.host else self.host
        user = f"{self.user}@" if self.user is not None else ""
        port = f":{self.port}" if self.port is not None else ""
        return f"{user}{host}{port}"


_PATH_SUFFIXES = (":$PATH", ":${PATH}")
_DNS_NAME_RE = re.compile(r"[A-Za-z0-9](?:[A-Za-z0-9-]{0,61}[A-Za-z0-9])?(?:\.[A-Za-z0-9](?:[A-Za-z0-9-]{0,61}[A-Za-z0-9])?)*")
_IFACE_RE = re.compile(r"[A-Za-z0-9][A-Za-z0-9_.:-]{0,14}")


@dataclass(frozen=True)
class HostConfig:
    """One ``[hosts.NAME]`` entry, validated."""

    name: str
    local: bool
    ssh: SshTarget | None
    python: str | None
    model_dirs: tuple[str, ...] = ()
    forbidden_paths: tuple[str, ...] = ()
    gpu_ids: tuple[int, ...] | None = None  # None: all GPUs of the host
    serve_host: str = "127.0.0.1"
    launcher: str = DEFAULT_LAUNCHER
    journal_dir: str | None = None
    env: tuple[tuple[str, str], ...] = ()  # ordered (name, value) pairs, exactly as configured
    node_addr: str | None = None  # where the other nodes of a multi-node deployment reach this host
    nccl_interface: str | None = None  # the network interface NCCL and gloo use there (NCCL_SOCKET_IFNAME)
    first_port: int = DEFAULT_FIRST_PORT  # the planner's first try for a server port (see FIRST_PORT_VARIABLE)

    @property
    def reachable_addr(self) -> str:
        """The address other hosts reach this one at, for a multi-node rendezvous: ``node_addr``,
        else the ssh target's host (an ssh_config alias may not resolve elsewhere: set node_addr),
        else loopback for a local host."""
        if self.node_addr:
            return self.node_addr
        if self.ssh is not None and not self.local:
            return self.ssh.host
        return "127.0.0.1"

    @property
    def address(self) -> str:
        """``"local"`` for a local host, else the ssh target."""
        if self.local or self.ssh is None:
            return "local"
        return self.ssh.display()

    def path_prefix(self) -> str | None:
        """The directories to put in front of PATH when env sets ``PATH = "X:$PATH"``, i.e. ``"X"``.

        None when PATH is unset or set without ``$PATH`` (a replacement, kept in env_dict())."""
        for name, value in self.env:
            if name == "PATH":
                for suffix in _PATH_SUFFIXES:
                    if value.endswith(suffix):
                        return value[: -len(suffix)]
        return None

    def env_dict(self) -> dict[str, str]:
        """The variables to set literally. A prefixing ``PATH = "X:$PATH"`` is left out: callers
        prepend :meth:`path_prefix` to the PATH of the host instead."""
        prefixed = self.path_prefix() is not None
        return {name: value for name, value in self.env if not (prefixed and name == "PATH")}


@dataclass(frozen=True)
class BenchProfile:
    """A named ``[bench.profiles.NAME]`` table; settings validated (see ``BENCH_VALUES``)."""

    name: str
    settings: dict[str, Any]


@dataclass(frozen=True)
class Inventory:
    hosts: tuple[HostConfig, ...]
    stall: dict[str, float] = field(default_factory=dict)  # only the thresholds the file gives
    bench_profiles: dict[str, dict[str, Any]] = field(default_factory=dict)
    source: str | None = None  # the file read; None for the built-in default

    def host(self, name: str) -> HostConfig:
        for host in self.hosts:
            if host.name == name:
                return host
        raise KeyError(name)

    def names(self) -> list[str]:
        return [host.name for host in self.hosts]

    def bench_profile(self, name: str) -> BenchProfile:
        """The profile called ``name``; KeyError if the config has none."""
        return BenchProfile(name=name, settings=self.bench_profiles[name])


def _localhost() -> HostConfig:
    return HostConfig(name="localhost", local=True, ssh=None, python=None, first_port=first_port_from_environment())


def first_port_from_environment() -> int:
    """GPUOPS_FIRST_PORT's port, DEFAULT_FIRST_PORT when it is unset or empty; ConfigError on
    anything but a port number 1024..65535."""
    raw = os.environ.get(FIRST_PORT_VARIABLE, "").strip()
    if not raw:
        return DEFAULT_FIRST_PORT
    low, high = _PORT_RANGE
    if not (raw.isascii() and raw.isdigit() and low <= int(raw) <= high):
        raise ConfigError(FIRST_PORT_VARIABLE, None, f"expected a port number {low}..{high}, got {_show(raw)}")
    return int(raw)


def default_inventory() -> Inventory:
    """The inventory without a config file: one local host named ``localhost``."""
    return Inventory(hosts=(_localhost(),), stall={}, bench_profiles={}, source=None)


# --------------------------------------------------------------------------------------------------
# Finding the line of a key


_BARE_KEY = r"[A-Za-z0-9_-]+"
_BASIC_STR = r'"(?:[^"\\\n]|\\.)*"'
_LITERAL_STR = r"'[^'\n]*'"
_KEY_SEG = rf"(?:{_BARE_KEY}|{_BASIC_STR}|{_LITERAL_STR})"
_DOTTED_KEY = rf"{_KEY_SEG}(?:[ \t]*\.[ \t]*{_KEY_SEG})*"
_HEADER_RE = re.compile(rf"[ \t]*\[\[?[ \t]*({_DOTTED_KEY})[ \t]*\]\]?[ \t]*(?:#.*)?")
_KEY_ASSIGN_RE = re.compile(rf"[ \t]*({_DOTTED_KEY})[ \t]*=[ \t]*")
_STRING_RE = re.compile(rf"{_BASIC_STR}|{_LITERAL_STR}")


def _split_key(dotted: str) -> KeyPath:
    """The parts of a TOML (dotted, possibly quoted) key, decoded exactly as tomllib does."""
    import tomllib

    node: Any = tomllib.loads(f"{dotted} = 0")
    parts: list[str] = []
    while isinstance(node, dict):
        ((key, node),) = node.items()
        parts.append(key)
    return tuple(parts)


def _skip_value(line: str, pos: int, depth: int) -> tuple[int, str | None]:
    """Read value text from ``pos`` to the end of the line, counting open ``[``/``{`` from
    ``depth``; returns the new depth and the delimiter of a multi-line string left open, if any."""
    while pos < len(line):
        ch = line[pos]
        if ch == "#":
            break
        if line.startswith(('"""', "'''"), pos):
            delim = line[pos : pos + 3]
            end = line.find(delim, pos + 3)
            if end < 0:
                return depth, delim
            pos = end + 3
        elif ch in "\"'":
            string = _STRING_RE.match(line, pos)
            pos = string.end() if string else len(line)
        else:
            depth += (ch in "[{") - (ch in "]}")
            pos += 1
    return depth, None


class _KeyLocator:
    """Maps key paths to the line (1-based) where they are assigned or their table is opened.

    Runs only on text tomllib has accepted. It follows table headers (``[hosts.gpu1]``,
    ``[hosts."gpu1"]``), dotted keys (``hosts.gpu1.ssh = ...``), and skips what a value holds
    (arrays over several lines, multi-line strings, brackets and ``#`` inside strings). What it
    does not locate falls back to the nearest located parent, then to line 1:
    - keys inside inline tables map to the key holding the table (TOML keeps an inline table on
      one line, so that is the same line unless a multi-line string sits inside it);
    - list elements map to the line of their key;
    - every ``[[array.of.tables]]`` entry maps to the first one (paths carry no index).
    """

    def __init__(self, text: str) -> None:
        self._lines: dict[KeyPath, int] = {}
        table: KeyPath = ()
        depth = 0  # brackets of a value left open on earlier lines (a multi-line array)
        open_string: str | None = None  # delimiter of a multi-line string left open
        # TOML lines end in LF or CRLF only (str.splitlines would also split at U+2028 etc.).
        for lineno, crlf_line in enumerate(text.split("\n"), start=1):
            line = crlf_line.removesuffix("\r")
            pos = 0
            if open_string is not None:
                end = line.find(open_string)
                if end < 0:
                    continue
                pos, open_string = end + 3, None
            elif depth == 0:
                if header := _HEADER_RE.fullmatch(line):
                    table = _split_key(header[1])
                    self._record(table, lineno)
                    continue
                assign = _KEY_ASSIGN_RE.match(line)
                if assign is None:
                    continue
                self._record(table + _split_key(assign[1]), lineno)
                pos = assign.end()
            depth, open_string = _skip_value(line, pos, depth)

    def _record(self, path: KeyPath, lineno: int) -> None:
        for n in range(1, len(path) + 1):
            self._lines.setdefault(path[:n], lineno)

    def line_of(self, path: KeyPath) -> int:
        for n in range(len(path), 0, -1):
            if path[:n] in self._lines:
                return self._lines[path[:n]]
        return 1


# --------------------------------------------------------------------------------------------------
# Validation of the parsed document


_AT_RE = re.compile(r"\s*\(at line (\d+), column \d+\)$")
_AT_END_RE = re.compile(r"\s*\(at end of document\)$")


def _dotted(path: KeyPath) -> str:
    return ".".join(p if re.fullmatch(_BARE_KEY, p) else json.dumps(p) for p in path)


class _Checker:
    def __init__(self, text: str, source: str) -> None:
        self.source = source
        self.locator = _KeyLocator(text)

    def fail(self, path: KeyPath, problem: str) -> NoReturn:
        """Raise a ConfigError at the line of ``path``, the problem prefixed with the key's name."""
        self.error(path, f"{_dotted(path)}: {problem}" if path else problem)

    def error(self, path: KeyPath, message: str) -> NoReturn:
        """Raise a ConfigError at the line of ``path`` with a message that already names the key."""
        raise ConfigError(self.source, self.locator.line_of(path), message)

    def table(self, value: object, path: KeyPath) -> dict[str, Any]:
        if not isinstance(value, dict):
            self.fail(path, f"expected a table, got {_show(value)}")
        return value

    def known_keys(self, table: dict[str, Any], path: KeyPath, allowed: Collection[str]) -> None:
        for key in table:
            if key in allowed:
                continue
            close = difflib.get_close_matches(key, list(allowed), n=1)
            hint = (
                f" (did you mean {close[0]!r}?)" if close else f" (known: {', '.join(allowed)})"
            )
            self.fail((*path, key), f"unknown key {key!r}{hint}")

    def check(self, value: object, path: KeyPath, validator: Callable[[object], _T]) -> _T:
        """Run a ``validate_*``-style function, turning its ValueError into a ConfigError."""
        try:
            return validator(value)
        except ValueError as e:
            self.fail(path, str(e))

    def abs_path(self, value: object, path: KeyPath, what: str | None = None) -> str:
        """validate_abs_path, its message naming ``what`` (default: the key)."""
        try:
            return validate_abs_path(value, what or _dotted(path))
        except ValueError as e:
            self.error(path, str(e))

    def optional_path(self, table: dict[str, Any], path: KeyPath) -> str | None:
        """The absolute path at key ``path[-1]`` of ``table``, or None when absent."""
        value = table.get(path[-1])
        return None if value is None else self.abs_path(value, path)

    def abs_paths(self, value: object, path: KeyPath) -> tuple[str, ...]:
        if not isinstance(value, list):
            self.fail(path, f"expected a list of absolute paths, got {_show(value)}")
        return tuple(
            self.abs_path(item, path, f"{_dotted(path)}[{i}]") for i, item in enumerate(value)
        )

    # --- sections

    def inventory(self, doc: dict[str, Any]) -> Inventory:
        self.known_keys(doc, (), ("hosts", "stall", "bench"))
        hosts = tuple(self.hosts(doc.get("hosts", {})))
        return Inventory(
            hosts=hosts or (_localhost(),),
            stall=self.stall(doc.get("stall", {})),
            bench_profiles=self.bench(doc.get("bench", {})),
            source=self.source,
        )

    def hosts(self, value: object) -> Iterator[HostConfig]:
        for name, entry in self.table(value, ("hosts",)).items():
            path = ("hosts", name)
            self.check(name, path, validate_host_name)
            yield self.host(name, self.table(entry, path), path)

    def host(self, name: str, t: dict[str, Any], path: KeyPath) -> HostConfig:
        self.known_keys(t, path, _HOST_KEYS)
        local = t.get("local", False)
        if not isinstance(local, bool):
            self.fail((*path, "local"), f"expected true or false, got {_show(local)}")
        ssh = None
        if "ssh" in t:
            if local:
                self.fail((*path, "ssh"), "give either ssh or local = true, not both")
            if not isinstance(t["ssh"], str) or not t["ssh"]:
                self.fail((*path, "ssh"), f"expected a non-empty string, got {_show(t['ssh'])}")
            ssh = self.check(t["ssh"], (*path, "ssh"), SshTarget.parse)
        elif not local:
            self.fail(path, 'needs ssh = "user@host[:port]" (or an ssh alias), or local = true')

        model_dirs = self.abs_paths(t.get("model_dirs", []), (*path, "model_dirs"))
        forbidden = self.abs_paths(t.get("forbidden_paths", []), (*path, "forbidden_paths"))
        # a model dir may be under a forbidden path (a retiring volume): its models are listed
        # and may be deleted; the planner puts nothing new there

        launcher = t.get("launcher", DEFAULT_LAUNCHER)
        if launcher not in LAUNCHERS:
            self.fail(
                (*path, "launcher"), f"expected {launcher_choices()}, got {_show(launcher)}"
            )
        return HostConfig(
            name=name,
            local=local,
            ssh=ssh,
            python=self.optional_path(t, (*path, "python")),
            model_dirs=model_dirs,
            forbidden_paths=forbidden,
            gpu_ids=self.gpu_ids(t["gpu_ids"], (*path, "gpu_ids")) if "gpu_ids" in t else None,
            serve_host=self.serve_host(t.get("serve_host", "127.0.0.1"), (*path, "serve_host")),
            launcher=launcher,
            journal_dir=self.optional_path(t, (*path, "journal_dir")),
            env=self.env(t.get("env", {}), (*path, "env")),
            node_addr=self.node_addr(t["node_addr"], (*path, "node_addr")) if "node_addr" in t else None,
            nccl_interface=(self.interface(t["nccl_interface"], (*path, "nccl_interface"))
                            if "nccl_interface" in t else None),
            first_port=(self.port(t["first_port"], (*path, "first_port"))
                        if "first_port" in t else first_port_from_environment()),
        )

    def port(self, value: object, path: KeyPath) -> int:
        low, high = _PORT_RANGE
        if _is_int(value) and low <= value <= high:
            return value
        self.fail(path, f"expected a port number {low}..{high}, got {_show(value)}")

    def gpu_ids(self, value: object, path: KeyPath) -> tuple[int, ...]:
        if (
            not isinstance(value, list)
            or not value
            or not all(_is_int(i) and i >= 0 for i in value)
        ):
            self.fail(
                path,
                f"expected a non-empty list of GPU indices (integers >= 0), got {_show(value)}",
            )
        seen: set[int] = set()
        for index in value:
            if index in seen:
                self.fail(path, f"GPU index {index} is listed twice")
            seen.add(index)
        return tuple(value)

    def node_addr(self, value: object, path: KeyPath) -> str:
        """An IP address or a DNS name (it goes into --dist-init-addr HOST:PORT)."""
        text = value if isinstance(value, str) else None
        if text is not None:
            try:
                return str(ipaddress.ip_address(text))
            except ValueError:
                if _DNS_NAME_RE.fullmatch(text) and len(text) <= 253:
                    return text
        self.fail(path, f'expected an IP address or a host name such as "10.0.0.5", got {_show(value)}')

    def interface(self, value: object, path: KeyPath) -> str:
        """A network interface name (Linux: at most 15 characters, no '/' or whitespace)."""
        if isinstance(value, str) and _IFACE_RE.fullmatch(value):
            return value
        self.fail(path, f'expected a network interface name such as "eth0" or "ib0", got {_show(value)}')

    def serve_host(self, value: object, path: KeyPath) -> str:
        try:
            return str(ipaddress.ip_address(_require_str(value, "serve_host")))
        except ValueError:
            self.fail(
                path, f'expected an IP address such as "127.0.0.1" or "0.0.0.0", got {_show(value)}'
            )

    def env(self, value: object, path: KeyPath) -> tuple[tuple[str, str], ...]:
        pairs = []
        for name, raw in self.table(value, path).items():
            key = (*path, name)
            self.check(name, key, validate_env_name)
            env_value = self.check(raw, key, validate_env_value)
            if name == "PATH":
                self.path_value(env_value, key)
            pairs.append((name, env_value))
        return tuple(pairs)

    def path_value(self, value: str, path: KeyPath) -> None:
        """PATH is either a list of absolute directories or such a list followed by ``:$PATH``."""
        dirs = value
        for suffix in _PATH_SUFFIXES:
            if value.endswith(suffix):
                dirs = value[: -len(suffix)]
        for directory in dirs.split(":"):
            if "$" in directory:
                self.fail(path, 'PATH may only be extended at the end, as "DIR:$PATH"')
            self.abs_path(directory, path)

    def stall(self, value: object) -> dict[str, float]:
        t = self.table(value, ("stall",))
        self.known_keys(t, ("stall",), _STALL_KEYS)
        result = {}
        for phase, seconds in t.items():
            if not _is_number(seconds) or not math.isfinite(seconds) or seconds <= 0:
                self.fail(
                    ("stall", phase), f"expected a positive number of seconds, got {_show(seconds)}"
                )
            result[phase] = float(seconds)
        return result

    def bench(self, value: object) -> dict[str, dict[str, Any]]:
        t = self.table(value, ("bench",))
        self.known_keys(t, ("bench",), ("profiles",))
        profiles = {}
        for name, entry in self.table(t.get("profiles", {}), ("bench", "profiles")).items():
            path = ("bench", "profiles", name)
            self.check(name, path, validate_host_name)
            profiles[name] = self.bench_settings(self.table(entry, path), path)
        return profiles

    def bench_settings(self, t: dict[str, Any], path: KeyPath) -> dict[str, Any]:
        self.known_keys(t, path, (*BENCH_VALUES, *BENCH_PATHS))
        settings: dict[str, Any] = {}
        for key, value in t.items():
            if key in BENCH_PATHS:
                settings[key] = self.abs_path(value, (*path, key))
                continue
            check, expected = BENCH_VALUES[key]
            checked = check(value)
            if checked is None:
                self.fail((*path, key), f"expected {expected}, got {_show(value)}")
            settings[key] = checked
        return settings


# Bench settings: key -> (check returning the value to keep or None when invalid, what it expects).
def _is_int(v: object) -> TypeGuard[int]:
    return isinstance(v, int) and not isinstance(v, bool)


def _is_number(v: object) -> TypeGuard[int | float]:
    return isinstance(v, (int, float)) and not isinstance(v, bool)


def _positive_int(v: object) -> int | None:
    return v if _is_int(v) and v > 0 else None


def _non_negative_int(v: object) -> int | None:
    return v if _is_int(v) and v >= 0 else None


def _positive_ints(v: object) -> list[int] | None:
    if isinstance(v, list) and v and all(_positive_int(i) is not None for i in v):
        return list(v)
    return None


def _request_rate(v: object) -> float | str | None:
    if v == "inf" or (isinstance(v, float) and v == math.inf):
        return "inf"
    return v if _is_number(v) and math.isfinite(v) and v > 0 else None


def _ratio(v: object) -> float | None:
    return v if _is_number(v) and 0 <= v <= 1 else None


def _text(v: object) -> str | None:
    return v if isinstance(v, str) and v and "\n" not in v and "\0" not in v else None


def _dataset_name(v: object) -> str | None:
    return v if isinstance(v, str) and v in _DATASET_NAMES else None


BENCH_VALUES: dict[str, tuple[Callable[[object], object | None], str]] = {
    "num_prompts": (_positive_int, "an integer > 0"),
    "max_concurrency": (_positive_int, "an integer > 0"),
    "concurrencies": (_positive_ints, "a non-empty list of integers > 0"),
    "request_rate": (_request_rate, 'a number > 0 or "inf"'),
    "random_input_len": (_positive_int, "an integer > 0"),
    "random_output_len": (_positive_int, "an integer > 0"),
    "random_range_ratio": (_ratio, "a number from 0 to 1"),
    "dataset_name": (_dataset_name, "one of " + ", ".join(_DATASET_NAMES)),
    "eval_name": (_text, "a non-empty one-line string"),
    "num_examples": (_positive_int, "an integer > 0"),
    "warmup_requests": (_non_negative_int, "an integer >= 0"),
    "backend": (_text, "a non-empty one-line string"),
}
BENCH_PATHS = ("dataset_path", "eval_data_path")


# --------------------------------------------------------------------------------------------------
# Entry points


def parse_inventory(text: str, source: str) -> Inventory:
    """Parse and validate config text; ``source`` names the file in errors and in the result."""
    import tomllib  # (here: a start with no config file, the dashboard's default, never reads TOML)

    too_deep = "invalid TOML: arrays or inline tables nested too deeply"
    try:
        doc = tomllib.loads(text)
    except RecursionError:  # tomllib descends once per level: thousands of `[` exhaust the stack
        raise ConfigError(source, None, too_deep) from None
    except tomllib.TOMLDecodeError as e:
        message = str(e)
        if at := _AT_RE.search(message):
            line = int(at[1])
        else:
            at = _AT_END_RE.search(message)
            line = text.rstrip().count("\n") + 1
        problem = message[: at.start()] if at else message
        raise ConfigError(source, line, f"invalid TOML: {problem}") from None
    try:
        return _Checker(text, source).inventory(doc)
    except RecursionError:  # a value nested just shallow enough for tomllib, too deep to show
        raise ConfigError(source, None, too_deep) from None


def default_config_path() -> Path:
    """``$XDG_CONFIG_HOME/gpuops/config.toml``; XDG_CONFIG_HOME unset, empty or relative means
    ``~/.config`` (as the XDG spec says)."""
    xdg = os.environ.get("XDG_CONFIG_HOME", "")
    base = Path(xdg) if os.path.isabs(xdg) else Path.home() / ".config"
    return base / "gpuops" / "config.toml"


def resolve_config_path(explicit: str | None) -> tuple[Path | None, bool]:
    """The file to read and whether it must exist: ``explicit`` (``--config``), else
    ``$GPUOPS_CONFIG``, else the XDG default (which may be missing). The path is None only when
    there is nowhere to look (no explicit path and no home directory)."""
    given = explicit or os.environ.get("GPUOPS_CONFIG")
    if given:
        return Path(given).expanduser(), True
    try:
        return default_config_path(), False
    except RuntimeError:  # Path.home() without HOME or a passwd entry
        return None, False


def load_inventory(explicit: str | None = None) -> Inventory:
    """The inventory from the file chosen by :func:`resolve_config_path`, or the default one."""
    path, must_exist = resolve_config_path(explicit)
    if path is None or (not must_exist and not path.exists()):
        return default_inventory()
    source = str(path)
    try:
        data = path.read_bytes()
    except FileNotFoundError:
        raise ConfigError(source, None, "config file not found") from None
    except OSError as e:
        raise ConfigError(source, None, f"cannot read: {e.strerror or e}") from None
    try:
        text = data.decode("utf-8")
    except UnicodeDecodeError as e:
        line = data.count(b"\n", 0, e.start) + 1
        raise ConfigError(source, line, "invalid TOML: not UTF-8 text") from None
    return parse_inventory(text, source)
