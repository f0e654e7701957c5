"""LocalHost and SshHost against real processes and a real sshd on 127.0.0.1."""

from __future__ import annotations

import asyncio
import os
import subprocess
import time
import uuid

import pytest

from gpuops.core.config import HostConfig, SshTarget
from gpuops.core.hosts.host import (
    CommandTimeout,
    HostKeyRefused,
    HostUnreachable,
    LocalHost,
    SshHost,
)
from tests.sshd import TcpProxy


def local_config(**kw) -> HostConfig:
    return HostConfig(name="localhost", local=True, ssh=None, python=None, **kw)


def ssh_config(sshd, user=None, port=None, name="box", **kw) -> HostConfig:
    return HostConfig(
        name=name, local=False, ssh=SshTarget(user or sshd.user, "127.0.0.1", port or sshd.port),
        python=None, **kw
    )


def processes_matching(*markers: str) -> list[str]:
    """The test's own processes, "PID USER ARGS" each: those whose command line holds every marker.
    A marker is something the test itself put into what it launched (a path under its own temporary
    folder, a random duration, its pid): never a program's name alone, which another run's processes on
    a shared machine have too."""
    assert markers and all(markers), "processes_matching needs a marker of the test's own"
    ps = subprocess.Popen(["ps", "-ww", "-eo", "pid=,user=,args="], stdout=subprocess.PIPE, text=True)
    out, _ = ps.communicate()
    rows = [line.strip() for line in out.splitlines()]
    return [row for row in rows if row.split(None, 1)[0] != str(ps.pid) and all(m in row for m in markers)]


async def wait_until(predicate, timeout=10.0, step=0.05):
    """Poll a condition until it holds (or fail): no fixed sleeps."""
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if predicate():
            return True
        await asyncio.sleep(step)
    return predicate()


def marker_sleep() -> tuple[str, list[str]]:
    # A unique duration (12 random decimals) makes this test's process findable among all others.
    secs = f"{1000 + uuid.uuid4().int % 8000}.{uuid.uuid4().int % 10**12:012d}"
    return secs, ["sh", "-c", f"echo started; sleep {secs}; echo never"]


# ------------------------------------------------------------------ local


async def test_local_run_and_stream():
    host = LocalHost(local_config())
    res = await host.run(["sh", "-c", "echo out; echo err >&2; exit 3"])
    assert (res.returncode, res.stdout, res.stderr) == (3, "out\n", "err\n")
    async with host.stream(["sh", "-c", "for i in 1 2 3; do echo line$i; done"]) as s:
        lines = [line async for line in s]
    assert lines == ["line1", "line2", "line3"]
    assert s.returncode == 0


async def test_local_env_and_path_prefix(tmp_path):
    host = LocalHost(local_config(env=(("PATH", "/opt/fake/bin:$PATH"), ("HF_HOME", "/shared/hf"))))
    res = await host.run(["sh", "-c", 'echo "$PATH|$HF_HOME"'])
    path, hf = res.stdout.strip().split("|")
    assert path.startswith("/opt/fake/bin:") and len(path) > len("/opt/fake/bin:")
    assert hf == "/shared/hf"


async def test_local_stream_close_ends_process_group():
    secs, argv = marker_sleep()
    host = LocalHost(local_config())
    async with host.stream(argv) as s:
        assert await s.__anext__() == "started"
        assert processes_matching(f"sleep {secs}")
    assert await wait_until(lambda: not processes_matching(f"sleep {secs}"))


async def test_local_run_timeout_kills():
    secs, argv = marker_sleep()
    host = LocalHost(local_config())
    with pytest.raises(CommandTimeout):
        await host.run(argv, timeout=0.5)
    assert await wait_until(lambda: not processes_matching(f"sleep {secs}"))


async def test_local_missing_command():
    res = await LocalHost(local_config()).run(["/nonexistent/prog"])
    assert res.returncode == 127 and "not found" in res.stderr


# ------------------------------------------------------------------ ssh


async def test_ssh_run_stream_and_env(sshd):
    host = SshHost(ssh_config(sshd, env=(("PATH", "/opt/fake/bin:$PATH"), ("GREETING", "it's $x `y`"))),
                   connect_options=sshd.options())
    try:
        res = await host.run(["sh", "-c", 'echo "$GREETING"; echo "$PATH"; echo e >&2; exit 4'])
        greeting, path = res.stdout.splitlines()
        assert greeting == "it's $x `y`"  # no shell interpolation of values
        assert path.startswith("/opt/fake/bin:")
        assert (res.returncode, res.stderr) == (4, "e\n")
        # argv with spaces and metacharacters arrives intact
        res = await host.run(["printf", "%s\n", "a b", "$(id)", "; rm -rf /"])
        assert res.stdout.splitlines() == ["a b", "$(id)", "; rm -rf /"]
        async with host.stream(["sh", "-c", "for i in 1 2 3; do echo $i; done; exit 7"]) as s:
            assert [x async for x in s] == ["1", "2", "3"]
        assert s.returncode == 7
        # channels share one connection
        results = await asyncio.gather(*(host.run(["echo", str(i)]) for i in range(10)))
        assert [r.stdout.strip() for r in results] == [str(i) for i in range(10)]
        assert host.connects == 1
    finally:
        await host.close()


@pytest.mark.parametrize("who", ["root", "other"])
async def test_ssh_stream_cancel_leaves_no_remote_process(sshd, who):
    user = sshd.user if who == "root" else sshd.other_user
    if user is None:
        pytest.skip("needs root to create the non-root test user")
    secs, argv = marker_sleep()
    host = SshHost(ssh_config(sshd, user=user), connect_options=sshd.options())
    try:
        stream = host.stream(argv)
        got = []

        async def consume():
            async for line in stream:
                got.append(line)

        task = asyncio.create_task(consume())
        assert await wait_until(lambda: got == ["started"])
        assert processes_matching(f"sleep {secs}")
        task.cancel()
        with pytest.raises(asyncio.CancelledError):
            await task
        await stream.aclose()
        assert await wait_until(lambda: not processes_matching(f"sleep {secs}"), timeout=8)
    finally:
        await host.close()


async def test_ssh_run_timeout_leaves_no_remote_process(sshd):
    secs, argv = marker_sleep()
    host = SshHost(ssh_config(sshd), connect_options=sshd.options())
    try:
        with pytest.raises(CommandTimeout):
            await host.run(argv, timeout=1.0)
        assert await wait_until(lambda: not processes_matching(f"sleep {secs}"), timeout=8)
        assert (await host.run(["echo", "still usable"])).stdout == "still usable\n"
    finally:
        await host.close()


async def test_ssh_reconnects_after_server_drops(sshd):
    proxy = await TcpProxy(sshd.port).start(sshd)
    host = SshHost(ssh_config(sshd, port=proxy.port), connect_options=sshd.options())
    try:
        assert (await host.run(["echo", "one"])).stdout == "one\n"
        proxy.cut()
        assert await wait_until(lambda: not host.connected, timeout=5)
        res = await host.run(["echo", "two"])
        assert res.stdout == "two\n"
        assert host.connects == 2 and proxy.accepted == 2
    finally:
        await host.close()
        await proxy.close()


async def test_ssh_unknown_host_key_refused(sshd, tmp_path):
    empty = tmp_path / "known_hosts"
    empty.write_text("")
    host = SshHost(ssh_config(sshd), connect_options=sshd.options(known_hosts=empty))
    with pytest.raises(HostKeyRefused) as info:
        await host.run(["echo", "should not run"])
    expected_fp = subprocess.run(
        ["ssh-keygen", "-lf", f"{sshd.host_key}.pub"], capture_output=True, text=True
    ).stdout.split()[1]
    err = info.value
    assert err.fingerprint == expected_fp
    assert expected_fp in err.message and "not known" in err.message
    assert f"ssh-keyscan -p {sshd.port}" in err.hint and str(empty) in err.hint
    assert empty.read_text() == ""  # never auto-accepted


async def test_ssh_changed_host_key_refused(sshd, tmp_path):
    other = tmp_path / "other"
    subprocess.run(["ssh-keygen", "-q", "-t", "ed25519", "-N", "", "-f", str(other)], check=True)
    kind, blob = (tmp_path / "other.pub").read_text().split()[:2]
    known = tmp_path / "known_hosts"
    known.write_text(f"[127.0.0.1]:{sshd.port} {kind} {blob}\n")
    host = SshHost(ssh_config(sshd), connect_options=sshd.options(known_hosts=known))
    with pytest.raises(HostKeyRefused) as info:
        await host.run(["true"])
    assert "CHANGED" in info.value.message
    assert "ssh-keygen -R" in info.value.hint


async def test_ssh_config_alias_and_default_identity(sshd, ssh_home):
    """An alias from ~/.ssh/config, the default identity file and ~/.ssh/known_hosts."""
    cfg = HostConfig(name="alias", local=False, ssh=SshTarget(None, "simbox", None), python=None)
    host = SshHost(cfg)  # asyncssh's defaults: ~/.ssh/config, id_ed25519, known_hosts
    try:
        res = await host.run(["sh", "-c", "echo $(id -un)"])
        assert res.stdout.strip() == sshd.user
    finally:
        await host.close()


async def test_ssh_black_hole_does_not_stall_other_hosts(sshd):
    proxy = await TcpProxy(sshd.port).start(sshd)
    stuck = SshHost(ssh_config(sshd, port=proxy.port, name="stuck"), connect_options=sshd.options(),
                    keepalive_interval=1, keepalive_count_max=2)
    healthy = SshHost(ssh_config(sshd, name="healthy"), connect_options=sshd.options())
    try:
        assert (await stuck.run(["echo", "hi"])).ok
        proxy.freeze()
        stuck_task = asyncio.create_task(stuck.run(["echo", "lost"], timeout=4))
        t0 = time.monotonic()
        for i in range(5):  # the healthy host answers while the other one hangs
            assert (await healthy.run(["echo", str(i)])).stdout == f"{i}\n"
        assert time.monotonic() - t0 < 3 and not stuck_task.done()
        with pytest.raises((CommandTimeout, HostUnreachable)):
            await stuck_task
        # keepalives notice the dead connection; a new connect into the hole times out
        assert await wait_until(lambda: not stuck.connected, timeout=8)
        proxy.thaw()
        assert await wait_until(lambda: stuck.backoff.wait_left() == 0, timeout=35)
        assert (await stuck.run(["echo", "back"])).stdout == "back\n"
    finally:
        await stuck.close()
        await healthy.close()
        await proxy.close()


async def test_ssh_agent_is_honoured(sshd, tmp_path, monkeypatch):
    """No identity file in ~/.ssh: the key comes from a running ssh-agent."""
    home = tmp_path / "agenthome"
    (home / ".ssh").mkdir(parents=True)
    (home / ".ssh" / "known_hosts").write_text(sshd.known_hosts.read_text())
    sock = tmp_path / "agent.sock"
    agent = subprocess.Popen(["ssh-agent", "-D", "-a", str(sock)], stdout=subprocess.DEVNULL)
    try:
        assert await wait_until(sock.exists, timeout=5)
        add = subprocess.run(["ssh-add", str(sshd.client_key)], env={"SSH_AUTH_SOCK": str(sock)},
                             capture_output=True, text=True)
        assert add.returncode == 0, add.stderr
        monkeypatch.setenv("HOME", str(home))
        monkeypatch.setenv("SSH_AUTH_SOCK", str(sock))
        host = SshHost(ssh_config(sshd))  # defaults only: agent, ~/.ssh/known_hosts
        try:
            assert (await host.run(["echo", "via agent"])).stdout == "via agent\n"
        finally:
            await host.close()
        monkeypatch.delenv("SSH_AUTH_SOCK")
        with pytest.raises(HostUnreachable, match="refused"):
            await SshHost(ssh_config(sshd)).run(["true"])  # and without it, no key at all
    finally:
        agent.terminate()
        agent.wait()


WATCH_CMDLINES = r"""
import os, sys, time
needle, until = sys.stdin.readline().strip().encode(), time.monotonic() + float(sys.argv[1])
seen = 0
print("watching", flush=True)
while time.monotonic() < until:
    for pid in os.listdir("/proc"):
        if pid.isdigit():
            try:
                with open("/proc/%s/cmdline" % pid, "rb") as f:
                    line = f.read()
            except OSError:
                continue
            seen += 1
            if needle in line:
                print("SEEN", pid, line.replace(b"\0", b" ")[:300].decode("utf-8", "replace"), flush=True)
print("scanned", seen, flush=True)
"""


@pytest.mark.parametrize("login", ["root", "user"])
async def test_a_hosts_secret_env_is_never_in_a_command_line(sshd, login):
    """A host's env = {HF_TOKEN = …}: while a command and a stream run over the real sshd, a second
    OS user scanning every /proc/PID/cmdline never sees the value; the command still gets it, exactly
    (spaces, quotes, $, backslashes), with the host's PATH prefix; input still reaches the command."""
    other = sshd.other_user
    if other is None:
        pytest.skip("needs root to make a second user")
    token = f"hf_{os.getpid()}SecretTokenValue{int(time.time())}"
    odd = "a b 'c' \"d\" $HOME `id` \\n \\ end "
    env = (("PATH", "/opt/fake/bin:$PATH"), ("HF_TOKEN", token), ("ODD", odd))
    cfg = ssh_config(sshd, env=env)
    if login == "user":
        cfg = HostConfig(name="box", local=False, ssh=SshTarget(other, "127.0.0.1", sshd.port), python=None, env=env)
    host = SshHost(cfg, connect_options=sshd.options())
    watcher = subprocess.Popen(["runuser", "-u", other, "--", "/usr/bin/python3", "-c", WATCH_CMDLINES, "6"],
                               stdin=subprocess.PIPE, stdout=subprocess.PIPE, text=True, cwd="/")
    try:
        watcher.stdin.write(token + "\n")  # (not in its own command line)
        watcher.stdin.close()
        assert watcher.stdout.readline() == "watching\n"
        script = 'printf "%s|%s|%s\\n" "$HF_TOKEN" "$ODD" "${PATH%%:*}"; sleep 2'
        res, streamed = await asyncio.gather(
            host.run(["sh", "-c", script]),
            collect(host.stream(["sh", "-c", script + "; echo done"])))
        assert res.returncode == 0, res.stderr
        assert res.stdout == f"{token}|{odd}|/opt/fake/bin\n"
        assert streamed == [f"{token}|{odd}|/opt/fake/bin", "done"]
        fed = await host.run(["sh", "-c", 'cat; printf "%s" "$HF_TOKEN" | wc -c'], input="line on stdin\n")
        assert fed.stdout.split() == ["line", "on", "stdin", str(len(token))]
        out = watcher.stdout.read()
        watcher.wait(30)
        assert "SEEN" not in out, out
        assert int(out.split()[-1]) > 100  # it did scan the host's processes
    finally:
        if watcher.poll() is None:
            watcher.kill()
        await host.close()


async def collect(stream) -> list[str]:
    async with stream as s:
        return [line async for line in s]
