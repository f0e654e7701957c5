"""Starting and stopping a deployment's server on its host, independent of gpuops.

Two launchers:
- ``systemd``: unit ``/etc/systemd/system/gpuops-{name}.service`` and env file
  ``/etc/gpuops/{name}.env`` (mode 0600), ``systemctl daemon-reload``/start/stop; logs
  in the journal.
- ``process``: for hosts without systemd; ``~/.local/state/gpuops/deployments/{name}/``
  holds ``env`` (0600), ``pid`` and ``log``; the server runs in its own session
  (``setsid``) so it outlives gpuops and the SSH channel that started it.

Secrets (the API key, an HF token) only ever travel inside the 0600 env file, written
through stdin: never in argv, never printed. A server with an API key runs through gpuops'
launcher (``core/hosts/programs/launcher.py``, written beside the env file as ``launch.py`` /
``/etc/gpuops/{name}.launch.py``): its command line holds only the placeholder, and the key is
masked in what it prints.
"""

from __future__ import annotations

import shlex
from dataclasses import dataclass

from ..domain import Plan
from ..hosts.files import env_file_text, remote_home, write_file, write_private_file
from ..hosts.host import Host, HostError, script_source
from ..hosts.programs import launcher as launcher_program

STOP_GRACE_S = 60
# A shell function: is pid $1 alive? A zombie is not: where PID 1 reaps late (a container's
# init), an ended server lingers as a zombie that `kill -0` still answers.
_ALIVE = r"""
alive() { kill -0 "$1" 2>/dev/null && [ "$(sed -n 's/.*) \([A-Z]\).*/\1/p' "/proc/$1/stat" 2>/dev/null)" != Z ]; }
"""


class LaunchError(HostError):
    pass


@dataclass
class LaunchStatus:
    running: bool
    pid: int | None
    detail: str


class Launcher:
    """Install, start, stop and inspect one deployment's server on a host."""

    kind = "abstract"

    launch_path = ""  # where gpuops' launcher is written (used when the argv runs it)

    def __init__(self, host: Host, name: str, exec_argv: list[str], env: dict[str, str]):
        self.host = host
        self.name = name
        self.exec_argv = exec_argv
        self.env = env

    async def _write_launch_script(self) -> None:
        if self.launch_path and self.launch_path in self.exec_argv:
            await write_file(self.host, self.launch_path, script_source(launcher_program))

    async def install(self, secrets_env: dict[str, str]) -> None:
        raise NotImplementedError

    async def start(self) -> None:
        raise NotImplementedError

    async def stop(self) -> LaunchStatus:
        raise NotImplementedError

    async def status(self) -> LaunchStatus:
        raise NotImplementedError


class ProcessLauncher(Launcher):
    kind = "process"

    def __init__(self, host: Host, name: str, exec_argv: list[str], env: dict[str, str], home: str):
        super().__init__(host, name, exec_argv, env)
        self.dir = f"{home.rstrip('/')}/.local/state/gpuops/deployments/{name}"
        self.env_path = f"{self.dir}/env"
        self.pid_path = f"{self.dir}/pid"
        self.log_path = f"{self.dir}/log"
        self.cmd_path = f"{self.dir}/cmd"
        self.launch_path = f"{self.dir}/launch.py"
        self.grace_s = STOP_GRACE_S  # SIGTERM to SIGKILL

    async def install(self, secrets_env: dict[str, str]) -> None:
        await write_private_file(self.host, self.env_path, env_file_text(
            {**self.env, **secrets_env}, f"gpuops: environment of deployment {self.name} (mode 0600)"))
        await self._write_launch_script()
        # the command, one shell-quoted word per line, for `gpuops` and for people
        await write_file(self.host, self.cmd_path, shlex.join(self.exec_argv) + "\n")

    async def start(self) -> None:
        # `set -a` exports what the env file sets (the launcher reads the API key from it: the
        # argv keeps the placeholder, so no process listing shows the key).
        script = _ALIVE + r"""
d=$1; shift
cd "$d" || exit 3
if [ -f pid ] && alive "$(cat pid)"; then echo "already running: $(cat pid)" >&2; exit 4; fi
set -a; . ./env; set +a
: >> log
setsid "$@" </dev/null >>log 2>&1 &
echo $! > pid.tmp && mv -f pid.tmp pid
cat pid
"""
        res = await self.host.run(["sh", "-c", script, "gpuops-start", self.dir, *self.exec_argv], timeout=30)
        if not res.ok:
            raise LaunchError(f"{self.host.name}: could not start {self.name}: "
                              f"{res.stderr.strip() or 'exit ' + str(res.returncode)}")

    async def status(self) -> LaunchStatus:
        script = _ALIVE + 'p=$(cat "$1" 2>/dev/null) || { echo none; exit 0; }; if alive "$p"; then ' \
                 'echo "running $p"; else echo "exited $p"; fi'
        res = await self.host.run(["sh", "-c", script, "gpuops-status", self.pid_path], timeout=15)
        word, _, pid = res.stdout.strip().partition(" ")
        return LaunchStatus(word == "running", int(pid) if pid.isdigit() else None, word or "unknown")

    async def stop(self) -> LaunchStatus:
        # The server is its own process group (setsid): stopped means every member is gone, not
        # just the leader (a rank or multiprocessing's resource tracker outlived it, still holding
        # GPU memory), so the wait and the KILL are for the group.
        script = _ALIVE + r"""
members() { cat /proc/[0-9]*/stat 2>/dev/null | awk -v g="$1" '{ sub(/^.*\) /, ""); if ($3 == g && $1 != "Z") n++ } END { print n + 0 }'; }
p=$(cat "$1" 2>/dev/null) || { echo "not started"; exit 0; }
alive "$p" || [ "$(members "$p")" -gt 0 ] || { echo "not running"; exit 0; }
kill -TERM -"$p" 2>/dev/null || kill -TERM "$p"
i=0
while { alive "$p" || [ "$(members "$p")" -gt 0 ]; } && [ "$i" -lt "$(( $2 * 5 ))" ]; do sleep 0.2; i=$((i + 1)); done
if alive "$p" || [ "$(members "$p")" -gt 0 ]; then
    kill -KILL -"$p" 2>/dev/null || kill -KILL "$p"
    i=0
    while [ "$(members "$p")" -gt 0 ] && [ "$i" -lt 50 ]; do sleep 0.1; i=$((i + 1)); done
    echo killed
else
    echo stopped
fi
"""
        res = await self.host.run(["sh", "-c", script, "gpuops-stop", self.pid_path, str(self.grace_s)],
                                  timeout=self.grace_s + 30)
        return LaunchStatus(False, None, res.stdout.strip() or res.stderr.strip())


class SystemdLauncher(Launcher):
    kind = "systemd"

    def __init__(self, host: Host, name: str, exec_argv: list[str], env: dict[str, str], unit_text: str):
        super().__init__(host, name, exec_argv, env)
        self.unit = f"gpuops-{name}.service"
        self.unit_path = f"/etc/systemd/system/{self.unit}"
        self.env_path = f"/etc/gpuops/{name}.env"
        self.launch_path = f"/etc/gpuops/{name}.launch.py"
        self.unit_text = unit_text

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


def launcher_for(host: Host, plan: Plan, home: str | None) -> Launcher:
    """The plan's launcher on `host`; the systemd unit is rendered from the (validated) plan."""
    if plan.launcher == "systemd":
        return SystemdLauncher(host, plan.name, plan.exec_argv(), dict(plan.env), plan.unit_text())
    assert home is not None
    launcher = ProcessLauncher(host, plan.name, [], dict(plan.env), home)
    launcher.exec_argv = plan.exec_argv(launcher.launch_path)
    return launcher


async def open_launcher(host: Host, plan: Plan) -> Launcher:
    """The deployment's launcher on `host` (the process launcher lives under the host user's home)."""
    home = None if plan.launcher == "systemd" else await remote_home(host)
    return launcher_for(host, plan, home)
