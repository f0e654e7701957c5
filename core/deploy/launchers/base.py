"""What a launcher is to gpuops: the seam every launcher (``systemd``, ``process``, a plug-in) fills.

A launcher starts and stops one deployment's server on its host, independent of gpuops, and owns
everything that depends on how it does so:

- its artifacts on the host (a unit, an env file, a pid file) and how it installs, starts, stops
  and inspects the server (:meth:`Launcher.status`: the server's main pid, for the process
  sampling and the host checks);
- its log: where a run's log begins (:meth:`Launcher.log_end`, stored as the deployment's
  ``run_offset``/``log_offset`` or ``run_cursor``/``cursor``), the follower that reads it from a
  stored position (:meth:`Launcher.watch_log`, the watch's), the whole log (:meth:`Launcher.follower`,
  ``gpuops logs``) and a run's lines (:meth:`Launcher.run_log`, triage);
- how the plan shows what it writes (:meth:`Launcher.artifacts`, ``gpuops plan``).

Launchers register by name (:mod:`.registry`); a plan names its launcher (``Plan.launcher``), and
:func:`open_launcher` builds that launcher for the plan on a host. Nothing outside the launcher
modules asks which launcher a deployment has.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any, AsyncIterator, ClassVar

from ...domain import Deployment, Plan
from ...hosts.files import write_file, write_private_file
from ...hosts.host import Host, HostError, script_source
from ...hosts.programs import launcher as launcher_program
from ..journal import Record

STOP_GRACE_S = 60


class LaunchError(HostError):
    pass


@dataclass
class LaunchStatus:
    running: bool
    pid: int | None
    detail: str


@dataclass
class Artifact:
    """A file the launcher writes, as ``gpuops plan`` shows it: its path (a title), its text and the
    syntax to colour it with ("" for plain text)."""

    title: str
    text: str
    syntax: str = ""


@dataclass
class WatchLog:
    """A run's log as the watch reads it: (record, parse it?) items from the display window before the
    stored position, then from the position on; and where reading began (for the watch's status)."""

    records: AsyncIterator[tuple[Record, bool]]
    parsed_from: int | str | None  # the position parsing begins at (an offset or a cursor)
    read_from: int | None = None  # a file's offset reading began at (the display window's start)
    # the position the watch holds before its first record, as the store keeps it: {"log_offset": N}
    # or {"cursor": C}
    position: dict[str, Any] = field(default_factory=dict)


class Launcher:
    """Install, start, stop and inspect one deployment's server on a host (see the module docstring).

    A subclass sets ``kind`` (its registered name), builds itself for a plan in :meth:`open` and
    fills the methods below. ``env_path``: its 0600 env file (the quick check and the bench read the
    API key there, on the host); ``launch_path``: where gpuops' launcher is written when the argv runs it."""

    kind: ClassVar[str] = "abstract"

    launch_path = ""
    env_path = ""
    private_files = False  # every file 0600 (the process launcher's folder, as the store's)

    def __init__(self, host: Host, name: str, exec_argv: list[str], env: dict[str, str]):
        self.host = host
        self.name = name
        self.exec_argv = exec_argv
        self.env = env

    # ------------------------------------------------------------ building one

    @classmethod
    async def open(cls, host: Host, plan: Plan) -> "Launcher":
        """This launcher for `plan` on `host` (it may ask the host, e.g. for the user's home)."""
        return cls.for_plan(host, plan, None)

    @classmethod
    def for_plan(cls, host: Host, plan: Plan, home: str | None) -> "Launcher":
        """This launcher for `plan` on `host`, `home` being the host user's home (when known)."""
        raise NotImplementedError

    @classmethod
    def artifacts(cls, plan: Plan, python_label: str) -> list[Artifact]:
        """What the plan shows of the files it will write (`python_label` stands for the host's python
        of a plan made offline). None by default."""
        return []

    # ------------------------------------------------------------ the server

    async def _write_launch_script(self) -> None:
        if self.launch_path and self.launch_path in self.exec_argv:
            write = write_private_file if self.private_files else write_file
            await write(self.host, self.launch_path, script_source(launcher_program))

    async def install(self, secrets_env: dict[str, str]) -> None:
        raise NotImplementedError

    async def start(self) -> None:
        raise NotImplementedError

    async def stop(self) -> LaunchStatus:
        raise NotImplementedError

    async def status(self) -> LaunchStatus:
        raise NotImplementedError

    # ------------------------------------------------------------ its log

    async def log_end(self, journal_dir: str | None) -> dict[str, Any]:
        """Where the server's log ends now, as the store keeps a run's start (``{"log_offset": N}`` or
        ``{"cursor": C}``): a new run's log begins there."""
        raise NotImplementedError

    def watch_log(self, d: Deployment, *, journal_dir: str | None, follow: bool, backlog_bytes: int,
                  backlog_lines: int) -> WatchLog:
        """The run's log for the watch: the last lines before the stored position for display (at most
        `backlog_bytes` / `backlog_lines`), then from the position on (the run's start when none)."""
        raise NotImplementedError

    def follower(self, *, journal_dir: str | None, follow: bool) -> Any:
        """A follower (``records()``) of the server's whole log."""
        raise NotImplementedError

    def run_log(self, d: Deployment, *, journal_dir: str | None) -> Any:
        """A follower of the deployment's current run's log, from where the run began, not following."""
        raise NotImplementedError
