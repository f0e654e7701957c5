"""Starting and stopping a deployment's server on its host, independent of gpuops.

Two launchers:
- ``systemd``: unit ``/etc/systemd/system/gpuops-{name}.service`` and env file
  ``/etc/gpuops/{name}.env`` (mode 0600), ``systemctl daemon-reload``/start/stop; logs
  in the journal.
- ``process``: for hosts without systemd; ``~/.local/state/gpuops/deployments/{name}/``
  holds ``env`` (0600), ``pid`` (with ``pid.start``: the server's start time and the boot id)
  and ``log``; the server runs in its own session (``setsid``) so it outlives gpuops and the SSH
  channel that started it. A pid is signalled only while it is still the server's: a process that
  took the pid since (another start time, another boot) is never signalled, and stop says so.

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
# Shell functions: which process the deployment's pid file names, checked before it is signalled or
# reported running. A pid is reused once its process is gone: the server's start time (clock ticks
# since boot, /proc/PID/stat field 22) and the boot id are kept beside it (`pid.start`: "PID START
# BOOT_ID", written at start), and a process now holding the pid with another start time, or a pid
# recorded before the host restarted, is a stranger: never signalled, never "running". A pid file from
# before `pid.start` existed: the process must have started before the pid file was written.
#   started PID   its start time, empty when it is gone or a zombie
#   ours DIR      sets p (the pid), st (its start time) and why (when it returns 1: why not ours)
_OURS = r"""
boot_id() { cat /proc/sys/kernel/random/boot_id 2>/dev/null; }
started() {
    s=$(cat "/proc/$1/stat" 2>/dev/null) || return 0
    s=${s##*) }
    set -- $s
    [ "$1" = Z ] || echo "${20}"
}
ours() {
    p=$(cat "$1/pid" 2>/dev/null) && [ -n "$p" ] || { why="not started"; return 1; }
    case "$p" in *[!0-9]*) why="not started (the pid file holds no pid)"; return 1 ;; esac
    st=$(started "$p")
    [ -n "$st" ] || { why="not running"; return 1; }
    if [ -f "$1/pid.start" ] && read -r rp rst rboot < "$1/pid.start" && [ "$rp" = "$p" ]; then
        if [ "$rboot" != "$(boot_id)" ]; then
            why="not running: pid $p was recorded before the host restarted, and is now another process: not signalled"
            return 1
        fi
        if [ "$rst" != "$st" ]; then
            why="not running: pid $p is now another process (it started later than the server): not signalled"
            return 1
        fi
        return 0
    fi
    hz=$(getconf CLK_TCK 2>/dev/null) || hz=100
    btime=$(sed -n 's/^btime //p' /proc/stat)
    written=$(stat -c %Y "$1/pid" 2>/dev/null) || written=0
    if [ -n "$btime" ] && [ $(( btime + st / hz )) -gt $(( written + 2 )) ]; then
        why="not running: pid $p is now another process (it started after the pid file was written): not signalled"
        return 1
    fi
    return 0
}
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

    private_files = False  # every file 0600 (the process launcher's folder, as the store's)

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


class ProcessLauncher(Launcher):
    kind = "process"
    private_files = True

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
        # the command, shell-quoted, for `gpuops` and for people
        await write_private_file(self.host, self.cmd_path, shlex.join(self.exec_argv) + "\n")

    async def start(self) -> None:
        # `set -a` exports what the env file sets (the launcher reads the API key from it: the
        # argv keeps the placeholder, so no process listing shows the key). The server's start time
        # and the boot id go beside its pid (`pid.start`, first: a reader finds the pid's own). Its
        # files are 0600 (the server's own umask is left as it is).
        script = _OURS + r"""
d=$1; shift
cd "$d" || exit 3
if ours "$d"; then echo "already running: $p" >&2; exit 4; fi
set -a; . ./env; set +a
(umask 077; : >> log) && chmod 600 log
setsid "$@" </dev/null >>log 2>&1 &
p=$!
st=$(started "$p")
(umask 077; echo "$p ${st:--} $(boot_id)" > pid.start.tmp) && mv -f pid.start.tmp pid.start
(umask 077; echo "$p" > pid.tmp) && mv -f pid.tmp pid
cat pid
"""
        res = await self.host.run(["sh", "-c", script, "gpuops-start", self.dir, *self.exec_argv], timeout=30)
        if not res.ok:
            raise LaunchError(f"{self.host.name}: could not start {self.name}: "
                              f"{res.stderr.strip() or 'exit ' + str(res.returncode)}")

    async def status(self) -> LaunchStatus:
        # running only when the pid is still the server's (a reused pid is "exited")
        script = _OURS + 'if ours "$1"; then echo "running $p"; elif [ -n "${p:-}" ]; then echo "exited $p"; ' \
                 'else echo none; fi'
        res = await self.host.run(["sh", "-c", script, "gpuops-status", self.dir], timeout=15)
        word, _, pid = res.stdout.strip().partition(" ")
        return LaunchStatus(word == "running", int(pid) if pid.isdigit() else None, word or "unknown")

    async def stop(self) -> LaunchStatus:
        # The server is its own process group (setsid): stopped means every member is gone, not
        # just the leader (a rank or multiprocessing's resource tracker outlived it, still holding
        # GPU memory), so the wait and the KILL are for the group. Only the server's own: the leader
        # when it is still the process started (its start time), and the members of its group that
        # started with or after it (a group's id is not reused while one member lives). A process
        # that holds the pid now but is not the server is named and never signalled.
        script = _OURS + r"""
members() { cat /proc/[0-9]*/stat 2>/dev/null | awk -v g="$1" -v t="$2" '{ sub(/^.*\) /, ""); if ($3 == g && $1 != "Z" && $20 >= t) n++ } END { print n + 0 }'; }
leader() { [ "$(started "$p")" = "$st" ]; }
if ours "$1"; then
    :
elif [ -n "${p:-}" ] && [ -z "${st:-}" ] && [ -f "$1/pid.start" ] && read -r rp rst rboot < "$1/pid.start" \
        && [ "$rp" = "$p" ] && [ "$rst" != "-" ] && [ "$rboot" = "$(boot_id)" ] && [ "$(members "$p" "$rst")" -gt 0 ]; then
    st=$rst  # the leader is gone, members of its group live on
else
    echo "$why"; exit 0
fi
sig() {
    if leader; then kill "-$1" -"$p" 2>/dev/null || kill "-$1" "$p"
    else kill "-$1" -"$p" 2>/dev/null; fi
}
gone() { ! leader && [ "$(members "$p" "$st")" -eq 0 ]; }
sig TERM
i=0
while ! gone && [ "$i" -lt "$(( $2 * 5 ))" ]; do sleep 0.2; i=$((i + 1)); done
if ! gone; then
    sig KILL
    i=0
    while [ "$(members "$p" "$st")" -gt 0 ] && [ "$i" -lt 50 ]; do sleep 0.1; i=$((i + 1)); done
    echo killed
else
    echo stopped
fi
"""
        res = await self.host.run(["sh", "-c", script, "gpuops-stop", self.dir, str(self.grace_s)],
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
