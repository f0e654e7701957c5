"""The ``systemd`` launcher: unit ``/etc/systemd/system/gpuops-{name}.service`` and env file
``/etc/gpuops/{name}.env`` (mode 0600), ``systemctl daemon-reload``/start/stop; its log is the unit's
journal, followed by cursor (the store's ``run_cursor``/``cursor``).

Secrets only ever travel inside the 0600 env file, written through stdin; a server with an API key runs
through gpuops' launcher, written as ``/etc/gpuops/{name}.launch.py`` (its command line holds only the
placeholder).
"""

from __future__ import annotations

import json
import re
from typing import Any

from ...domain import Deployment, Plan
from ...hosts.files import env_file_text, write_file, write_private_file
from ...hosts.host import Host
from ..journal import JournalFollower
from .base import STOP_GRACE_S, Artifact, Launcher, LaunchError, LaunchStatus, WatchLog
from .registry import register


def _seqnum(cursor: str | None) -> tuple[str, int] | None:
    """(seqnum id, seqnum) of a journal cursor: entries of one journal compare by it."""
    if not cursor:
        return None
    parts = dict(p.split("=", 1) for p in cursor.split(";") if "=" in p)
    try:
        return parts["s"], int(parts["i"], 16)
    except (KeyError, ValueError):
        return None


@register
class SystemdLauncher(Launcher):
    kind = "systemd"

    def __init__(self, host: Host, name: str, exec_argv: list[str], env: dict[str, str], unit_text: str):
        super().__init__(host, name, exec_argv, env)
        self.unit = f"gpuops-{name}.service"
        self.unit_path = f"/etc/systemd/system/{self.unit}"
        self.env_path = f"/etc/gpuops/{name}.env"
        self.launch_path = f"/etc/gpuops/{name}.launch.py"
        self.unit_text = unit_text

    @classmethod
    def for_plan(cls, host: Host, plan: Plan, home: str | None) -> Launcher:
        """The unit is rendered from the (validated) plan."""
        return cls(host, plan.name, plan.exec_argv(), dict(plan.env), plan.unit_text())

    @classmethod
    def artifacts(cls, plan: Plan, python_label: str) -> list[Artifact]:
        unit = plan.unit_text()
        if plan.python is None:  # planned offline: the unit runs the host's python (bound at deploy), not python3
            unit = re.sub(r"^ExecStart=python3 ", f"ExecStart={python_label} ", unit, count=1, flags=re.M)
        return [Artifact(plan.unit_name, unit, "ini"), Artifact(plan.env_file, plan.env_file_text().rstrip())]

    async def _systemctl(self, *args: str, timeout: float = 60) -> str:
        res = await self.host.run(["systemctl", *args], timeout=timeout)
        if not res.ok:
            raise LaunchError(f"{self.host.name}: systemctl {' '.join(args)} failed: "
                              f"{(res.stderr or res.stdout).strip() or res.returncode}")
        return res.stdout

    async def install(self, secrets_env: dict[str, str]) -> None:
        await write_private_file(self.host, self.env_path, env_file_text(
            {**self.env, **secrets_env}, f"gpuops: environment of {self.unit} (mode 0600)"))
        await self._write_launch_script()
        await write_file(self.host, self.unit_path, self.unit_text)
        await self._systemctl("daemon-reload")

    async def start(self) -> None:
        await self._systemctl("start", self.unit)

    async def status(self) -> LaunchStatus:
        res = await self.host.run(["systemctl", "show", "-p", "MainPID,ActiveState", self.unit], timeout=15)
        props = dict(line.split("=", 1) for line in res.stdout.splitlines() if "=" in line)
        pid = int(props.get("MainPID", "0") or 0)
        state = props.get("ActiveState", "unknown")
        return LaunchStatus(state in ("active", "activating"), pid or None, state)

    async def stop(self) -> LaunchStatus:
        try:
            await self._systemctl("stop", self.unit, timeout=STOP_GRACE_S + 30)
        except LaunchError as exc:
            if "not loaded" not in exc.message:
                raise
            # a deploy that failed before it installed the unit: nothing runs, nothing to stop
            return LaunchStatus(False, None, "not installed")
        return await self.status()

    # ------------------------------------------------------------ its log: the unit's journal, by cursor

    async def log_end(self, journal_dir: str | None) -> dict[str, Any]:
        argv = ["journalctl", "-u", self.unit, "-n", "1", "-o", "json", "--no-pager"]
        if journal_dir:
            argv[1:1] = ["--directory", journal_dir]
        res = await self.host.run(argv, timeout=30)
        try:
            return {"cursor": json.loads(res.stdout.strip().splitlines()[-1])["__CURSOR"]}
        except (ValueError, IndexError, KeyError):
            return {"cursor": None}

    def watch_log(self, d: Deployment, *, journal_dir: str | None, follow: bool, backlog_bytes: int,
                  backlog_lines: int) -> WatchLog:
        cursor = d.cursor or d.run_cursor
        return WatchLog(self._watch_records(d, cursor, journal_dir, follow, backlog_lines), parsed_from=cursor,
                        position={"cursor": cursor})

    async def _watch_records(self, d: Deployment, cursor: str | None, journal_dir: str | None, follow: bool,
                             backlog_lines: int) -> Any:
        if d.cursor is not None:  # a reattach: the run's last lines before the position, for display
            low, high = _seqnum(d.run_cursor), _seqnum(d.cursor)
            back = JournalFollower(self.host, self.unit, directory=journal_dir, lines=backlog_lines, follow=False)
            async for rec in back.records():
                at = _seqnum(rec.cursor)
                if at is None or high is None or at[0] != high[0] or at[1] > high[1]:
                    continue
                if low is not None and at[0] == low[0] and at[1] <= low[1]:
                    continue
                yield rec, False
        journal = JournalFollower(self.host, self.unit, directory=journal_dir, cursor=cursor, follow=follow)
        async for rec in journal.records():
            yield rec, True

    def follower(self, *, journal_dir: str | None, follow: bool) -> Any:
        return JournalFollower(self.host, self.unit, directory=journal_dir, follow=follow)

    def run_log(self, d: Deployment, *, journal_dir: str | None) -> Any:
        return JournalFollower(self.host, self.unit, directory=journal_dir, cursor=d.run_cursor, follow=False)
