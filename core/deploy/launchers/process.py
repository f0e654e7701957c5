"""The ``process`` launcher: for hosts without systemd.

``~/.local/state/gpuops/deployments/{name}/`` holds ``env`` (0600), ``pid`` (with ``pid.start``: the
server's start time and the boot id) and ``log``; the server runs in its own session (``setsid``) so it
outlives gpuops and the SSH channel that started it. A pid is signalled only while it is still the
server's: a process that took the pid since (another start time, another boot) is never signalled, and
stop says so. Its log is a file, followed by byte offset (the store's ``run_offset``/``log_offset``).

Secrets (the API key, an HF token) only ever travel inside the 0600 env file, written through stdin:
never in argv, never printed; a server with an API key runs through gpuops' launcher
(``core/hosts/programs/launcher.py``, written beside the env file as ``launch.py``).
"""

from __future__ import annotations

import shlex
from typing import Any

from ...domain import Deployment, Plan
from ...hosts.files import env_file_text, remote_home, write_private_file
from ...hosts.host import Host
from ..journal import FileFollower
from .base import STOP_GRACE_S, Launcher, LaunchError, LaunchStatus, WatchLog
from .registry import register

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


@register
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

    @classmethod
    async def open(cls, host: Host, plan: Plan) -> Launcher:
        return cls.for_plan(host, plan, await remote_home(host))

    @classmethod
    def for_plan(cls, host: Host, plan: Plan, home: str | None) -> Launcher:
        if home is None:
            raise LaunchError(f"{host.name}: the process launcher needs the user's home")
        launcher = cls(host, plan.name, [], dict(plan.env), home)
        launcher.exec_argv = plan.exec_argv(launcher.launch_path)
        return launcher

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

    # ------------------------------------------------------------ its log: a file, by byte offset

    async def log_end(self, journal_dir: str | None) -> dict[str, Any]:
        res = await self.host.run(["sh", "-c", 'wc -c < "$1" 2>/dev/null || echo 0', "gpuops-size", self.log_path],
                                  timeout=15)
        size = res.stdout.strip()
        return {"log_offset": int(size) if size.isdigit() else 0}

    def watch_log(self, d: Deployment, *, journal_dir: str | None, follow: bool, backlog_bytes: int,
                  backlog_lines: int) -> WatchLog:
        start = d.log_offset if d.log_offset is not None else (d.run_offset or 0)
        run_start = d.run_offset or 0
        begin = max(run_start, start - backlog_bytes)
        follower = FileFollower(self.host, self.log_path, offset=begin, follow=follow)
        # a window that starts mid-run may start mid-line
        return WatchLog(_records(follower, start, begin > run_start), parsed_from=start, read_from=begin,
                        position={"log_offset": start})

    def follower(self, *, journal_dir: str | None, follow: bool) -> Any:
        return FileFollower(self.host, self.log_path, follow=follow)

    def run_log(self, d: Deployment, *, journal_dir: str | None) -> Any:
        return FileFollower(self.host, self.log_path, offset=d.run_offset or 0, follow=False)


async def _records(follower: FileFollower, start: int, first: bool) -> Any:
    """(record, parse it?): a record after `start` is parsed; the window's first line, when the
    window starts mid-run (maybe mid-line), is dropped."""
    async for rec in follower.records():
        live = rec.notice is not None or rec.offset is None or rec.offset > start
        if first and not live:
            first = False
            continue
        first = False
        yield rec, live
