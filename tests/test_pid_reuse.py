"""A pid is reused once its process is gone: the process launcher keeps the server's start time and
the boot id beside its pid, and never signals (nor calls running) a process that holds the pid now
but is not the server. The stranger here is a real process of a second OS user, leading its own
process group (as a server does), whose pid the test writes into the deployment's pid file."""

from __future__ import annotations

import os
import pwd
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest

from gpuops.core.deploy.launch import ProcessLauncher
from gpuops.core.deploy.store import Store
from tests.plans import make_plan
from tests.sshd import ensure_test_user
from tests.test_cli import GPUOPS
from tests.test_hosts import wait_until
from tests.test_launch import home, make_host, own_pids  # noqa: F401  (home: a fixture)

SERVER = "import sys, time; print('serving', sys.argv[1], flush=True); time.sleep(120)"


@pytest.fixture
def stranger():
    """An unrelated long-lived process of another user, the leader of its own process group."""
    user = ensure_test_user()
    assert user is not None, "runs as root: it makes a second user"
    pw = pwd.getpwnam(user)
    proc = subprocess.Popen(["sleep", "300"], user=pw.pw_uid, group=pw.pw_gid, start_new_session=True,
                            cwd="/", stdin=subprocess.DEVNULL)
    yield proc
    proc.kill()
    proc.wait()


def start_time(pid: int) -> str:
    stat = Path(f"/proc/{pid}/stat").read_text()
    return stat[stat.rfind(")") + 2:].split()[19]


def boot_id() -> str:
    return Path("/proc/sys/kernel/random/boot_id").read_text().strip()


async def served_and_stopped(launcher: ProcessLauncher, marker: str) -> tuple[int, str]:
    """The server started (its pid and start time recorded) and stopped: its pid file now names a
    pid that is free for the kernel to give to another process."""
    await launcher.install({})
    await launcher.start()
    assert await wait_until(lambda: f"serving {marker}" in Path(launcher.log_path).read_text(), timeout=20)
    pid = int(Path(launcher.dir, "pid").read_text())
    recorded = Path(launcher.dir, "pid.start").read_text().split()
    assert recorded == [str(pid), start_time(pid), boot_id()]
    assert (await launcher.stop()).detail == "stopped"
    return pid, recorded[1]


def untouched(proc: subprocess.Popen) -> bool:
    """The stranger still runs, never signalled (a SIGTERM would have ended `sleep`)."""
    time.sleep(0.2)
    return proc.poll() is None


@pytest.mark.parametrize("kind", ["local", "ssh"])
async def test_stop_never_signals_a_process_that_took_the_servers_pid(kind, sshd, home, stranger):  # noqa: F811
    host = make_host(kind, sshd, home)
    marker = f"gpuops-reuse-{os.getpid()}-{kind}"
    launcher = ProcessLauncher(host, marker, [sys.executable, "-c", SERVER, marker], {}, str(home))
    launcher.grace_s = 3
    try:
        _, server_start = await served_and_stopped(launcher, marker)
        # the kernel gave the server's pid to the stranger (simulated: its pid written where the
        # server's was; the start time recorded stays the server's)
        Path(launcher.dir, "pid").write_text(f"{stranger.pid}\n")
        Path(launcher.dir, "pid.start").write_text(f"{stranger.pid} {server_start} {boot_id()}\n")
        status = await launcher.status()
        assert not status.running and status.detail == "exited"
        stopped = await launcher.stop()
        assert stopped.detail == (f"not running: pid {stranger.pid} is now another process (it started later than "
                                  "the server): not signalled"), stopped
        assert untouched(stranger)
        with pytest.raises(Exception, match="already running"):  # a real server is still refused twice...
            Path(launcher.dir, "pid.start").write_text(f"{stranger.pid} {start_time(stranger.pid)} {boot_id()}\n")
            await launcher.start()
        # ...and one recorded before the host restarted (another boot id) is a stranger too
        Path(launcher.dir, "pid.start").write_text(f"{stranger.pid} {start_time(stranger.pid)} "
                                                   f"{'0' * 8}-0000-0000-0000-{'0' * 12}\n")
        assert not (await launcher.status()).running
        stopped = await launcher.stop()
        assert "recorded before the host restarted" in stopped.detail and "not signalled" in stopped.detail
        assert untouched(stranger)
    finally:
        for pid in own_pids(marker):
            os.kill(pid, signal.SIGKILL)
        await host.close()


async def test_a_pid_file_without_a_start_time_is_checked_by_when_it_was_written(home, stranger):  # noqa: F811
    """A pid file an older gpuops wrote (no pid.start): a process that started after the file was
    written is not the server; the server itself (started before) is still stopped."""
    host = make_host("local", None, home)
    marker = f"gpuops-reuse-old-{os.getpid()}"
    launcher = ProcessLauncher(host, marker, [sys.executable, "-c", SERVER, marker], {}, str(home))
    launcher.grace_s = 3
    try:
        await launcher.install({})
        await launcher.start()
        assert await wait_until(lambda: f"serving {marker}" in Path(launcher.log_path).read_text(), timeout=20)
        server = int(Path(launcher.dir, "pid").read_text())
        Path(launcher.dir, "pid.start").unlink()  # as an older gpuops left it
        assert (await launcher.status()).running  # written after the server started: it is the server
        pid_file = Path(launcher.dir, "pid")
        pid_file.write_text(f"{stranger.pid}\n")
        an_hour_ago = time.time() - 3600
        os.utime(pid_file, (an_hour_ago, an_hour_ago))  # the stranger started long after
        assert not (await launcher.status()).running
        stopped = await launcher.stop()
        assert stopped.detail == (f"not running: pid {stranger.pid} is now another process (it started after the pid "
                                  "file was written): not signalled"), stopped
        assert untouched(stranger)
        pid_file.write_text(f"{server}\n")  # the server's own legacy pid file: stopped as before
        assert (await launcher.stop()).detail == "stopped"
        assert await wait_until(lambda: not own_pids(marker), timeout=10)
    finally:
        for pid in own_pids(marker):
            os.kill(pid, signal.SIGKILL)
        await host.close()


def test_gpuops_stop_and_forget_leave_the_stranger_alone(tmp_path, home, stranger):  # noqa: F811
    """`gpuops stop NAME` says why it signalled nothing; `forget` is not refused by the stranger."""
    name = f"reuse{os.getpid()}"
    state = tmp_path / "state"
    store = Store(state / "gpuops" / "gpuops.db")
    store.add_deployment("here", make_plan(name, launcher="process"))
    store.set_state(name, "ready")
    store.release_lease(name)
    store.close()
    folder = home / ".local/state/gpuops/deployments" / name
    folder.mkdir(parents=True)
    (folder / "pid").write_text(f"{stranger.pid}\n")
    (folder / "pid.start").write_text(f"{stranger.pid} 1 {boot_id()}\n")  # the server started at tick 1
    cfg = tmp_path / "config.toml"
    cfg.write_text("[hosts.here]\nlocal = true\n")
    env = dict(os.environ, HOME=str(home), XDG_STATE_HOME=str(state), XDG_CACHE_HOME=str(tmp_path / "cache"))
    env.pop("GPUOPS_CONFIG", None)

    def gpuops(*args: str) -> subprocess.CompletedProcess:
        return subprocess.run([GPUOPS, "--config", str(cfg), *args], capture_output=True, text=True, env=env,
                              timeout=120, stdin=subprocess.DEVNULL)

    res = gpuops("status", name, "--json")
    assert res.returncode == 0, res.stderr
    res = gpuops("stop", name, "--yes")
    assert res.returncode == 0, res.stderr
    assert res.stdout.strip() == (f"{name}: stopped (not running: pid {stranger.pid} is now another process (it "
                                  "started later than the server): not signalled)"), res.stdout
    assert untouched(stranger)
    res = gpuops("forget", name, "--yes")
    assert res.returncode == 0, res.stderr
    assert untouched(stranger)


ORPHANING = """
import os, signal, sys, time
if os.fork() == 0:  # a rank that outlives the server's own process, ignoring SIGTERM
    signal.signal(signal.SIGTERM, signal.SIG_IGN)
    print("rank", flush=True)
    while True:
        time.sleep(0.1)
time.sleep(0.5)
print("leader exits", flush=True)
"""


async def test_a_group_whose_leader_is_gone_is_still_stopped(home):  # noqa: F811
    """The server's own process has exited but a member of its group lives on (holding GPU memory):
    stop ends that member (it started after the server, in the server's group)."""
    host = make_host("local", None, home)
    marker = f"gpuops-orphan-{os.getpid()}"
    launcher = ProcessLauncher(host, marker, [sys.executable, "-c", ORPHANING, marker], {}, str(home))
    launcher.grace_s = 1
    try:
        await launcher.install({})
        await launcher.start()
        leader = int(Path(launcher.dir, "pid").read_text())
        assert await wait_until(lambda: "leader exits" in Path(launcher.log_path).read_text(), timeout=20)
        assert await wait_until(lambda: not Path(f"/proc/{leader}").exists() or
                                Path(f"/proc/{leader}/stat").read_text().split(") ")[1][0] == "Z", timeout=10)
        assert own_pids(marker)  # the rank
        assert not (await launcher.status()).running
        assert (await launcher.stop()).detail == "killed"
        assert await wait_until(lambda: not own_pids(marker), timeout=10)
    finally:
        for pid in own_pids(marker):
            os.kill(pid, signal.SIGKILL)
        await host.close()
