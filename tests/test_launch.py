"""Launchers on a real host (local and over SSH): the server outlives gpuops, secrets stay in 0600 files."""

from __future__ import annotations

import asyncio
import hashlib
import os
import signal
import stat
import subprocess
import sys
import tempfile
from pathlib import Path

import pytest

from gpuops.core.config import HostConfig, SshTarget
from gpuops.core.hosts.host import LocalHost, SshHost
from gpuops.core.deploy.launch import ProcessLauncher
from gpuops.core.hosts.files import FileError, env_file_text, new_api_key, read_env_value, remote_home
from tests.test_hosts import processes_matching, wait_until

SERVER = """
import hashlib, os, sys, time
print("argv", sys.argv[1:], flush=True)
print("env", os.environ.get("CUDA_VISIBLE_DEVICES"), flush=True)
key = sys.argv[sys.argv.index("--api-key") + 1]
print("key-matches", hashlib.sha256(key.encode()).hexdigest() == os.environ["EXPECT_SHA"], flush=True)
print("key-in-env", "GPUOPS_API_KEY" in os.environ, flush=True)
print("also on stderr:", key, file=sys.stderr, flush=True)
while True:
    print("tick", flush=True)
    time.sleep(0.2)
"""


@pytest.fixture
def home(monkeypatch):
    d = Path(tempfile.mkdtemp(prefix="gpuops-home-"))
    d.chmod(0o755)
    yield d
    subprocess.run(["rm", "-rf", str(d)])


def make_host(kind, sshd, home):
    if kind == "local":
        return LocalHost(HostConfig(name="localhost", local=True, ssh=None, python=None,
                                    env=(("HOME", str(home)),)))
    cfg = HostConfig(name="box", local=False, ssh=SshTarget(sshd.user, "127.0.0.1", sshd.port), python=None,
                     env=(("HOME", str(home)),))
    return SshHost(cfg, connect_options=sshd.options())


@pytest.mark.parametrize("kind", ["local", "ssh"])
async def test_process_launcher_lifecycle(kind, sshd, home):
    """The server runs through gpuops' launcher: the key reaches its sys.argv, but no process's
    command line, no file but the 0600 env file, and not the log (printed, it is masked)."""
    host = make_host(kind, sshd, home)
    marker = f"gpuops-test-{os.getpid()}-{kind}"
    module = f"fakeserver_{os.getpid()}_{kind}"
    (home / f"{module}.py").write_text(SERVER)
    try:
        assert await remote_home(host) == str(home)
        key = new_api_key()
        launcher = ProcessLauncher(host, marker, [], {"CUDA_VISIBLE_DEVICES": "0,1", "PYTHONPATH": str(home),
                                                      "EXPECT_SHA": hashlib.sha256(key.encode()).hexdigest()},
                                   str(home))
        launcher.exec_argv = [sys.executable, launcher.launch_path, "-m", module, "--api-key", "${GPUOPS_API_KEY}",
                              "--served-model-name", marker]
        await launcher.install({"GPUOPS_API_KEY": key})
        env_path = Path(launcher.env_path)
        assert stat.S_IMODE(env_path.stat().st_mode) == 0o600
        assert await read_env_value(host, launcher.env_path, "GPUOPS_API_KEY") == key
        await launcher.start()
        log = Path(launcher.log_path)
        assert await wait_until(lambda: log.exists() and "tick" in log.read_text(), timeout=10)
        text = log.read_text()
        assert "key-matches True" in text and "key-in-env False" in text  # in the server, from the env file
        assert "'--api-key', '***'" in text and "also on stderr: ***" in text  # its output masked
        assert key not in text
        for path in Path(launcher.dir).iterdir():  # no file but the env file holds it
            assert (key in path.read_text()) == (path == env_path), path
        listed = processes_matching(marker)
        assert len(listed) >= 2 and all(key not in line for line in listed)  # launcher and server
        assert "${GPUOPS_API_KEY}" in listed[0]
        for pid in own_pids(marker):
            assert key.encode() not in Path(f"/proc/{pid}/cmdline").read_bytes()
        assert "env 0,1" in text
        st = await launcher.status()
        assert st.running and st.pid
        # the server does not depend on gpuops: closing the host (the SSH connection) leaves it running
        await host.close()
        await asyncio.sleep(0.3)
        assert processes_matching(marker)
        host = make_host(kind, sshd, home)
        launcher.host = host
        with pytest.raises(Exception, match="already running"):
            await launcher.start()
        stopped = await launcher.stop()
        assert stopped.detail == "stopped"
        assert await wait_until(lambda: not processes_matching(marker), timeout=10)
        assert not (await launcher.status()).running
    finally:
        for pid in own_pids(marker):
            os.kill(pid, signal.SIGKILL)
        await host.close()


def own_pids(marker: str) -> list[int]:
    """The pids whose command line holds `marker` (only this test's processes carry it)."""
    pids = []
    for entry in Path("/proc").iterdir():
        if entry.name.isdigit():
            try:
                if marker.encode() in (entry / "cmdline").read_bytes():
                    pids.append(int(entry.name))
            except OSError:
                pass
    return [p for p in pids if p != os.getpid()]


def test_the_launcher_passes_the_server_exit_status_and_needs_the_key(tmp_path):
    """What `python launch.py -m MODULE` returns is the server's; a placeholder without a key in the
    environment is refused before anything runs."""
    from gpuops.core.hosts.programs import launcher

    (tmp_path / "exits.py").write_text("import sys\nprint('bye', sys.argv[1:])\nsys.exit(7)\n")
    env = dict(os.environ, PYTHONPATH=str(tmp_path), GPUOPS_API_KEY="sekrit-value")
    script = launcher.__file__
    out = subprocess.run([sys.executable, script, "-m", "exits", "--api-key", "${GPUOPS_API_KEY}"],
                         capture_output=True, text=True, env=env, timeout=30)
    assert out.returncode == 7 and out.stdout == "bye ['--api-key', '***']\n"
    env.pop("GPUOPS_API_KEY")
    out = subprocess.run([sys.executable, script, "-m", "exits", "--api-key", "${GPUOPS_API_KEY}"],
                         capture_output=True, text=True, env=env, timeout=30)
    assert out.returncode == 2 and "GPUOPS_API_KEY is not set" in out.stderr and "bye" not in out.stdout
    out = subprocess.run([sys.executable, script, "-m", "exits"], capture_output=True, text=True, env=env, timeout=30)
    assert out.returncode == 7 and out.stdout == "bye []\n"  # no key: runs as `python -m` would


def test_the_launcher_masks_a_key_split_across_reads():
    from gpuops.core.hosts.programs.launcher import held_back

    key = b"sk-gpuops-abcdef"
    assert held_back(b"line one\napi_key='sk-gpu", key) == len(b"sk-gpu")
    assert held_back(b"line one\n", key) == 0
    assert held_back(b"ends with s", key) == 1


def test_env_file_text_quotes_values():
    text = env_file_text({"A": "plain", "B": "it's $x"}, "h")
    assert "A=plain" in text and "B='it'\"'\"'s $x'" in text
    with pytest.raises(FileError, match="invalid environment variable name"):
        env_file_text({"BAD NAME": "x"}, "h")


STUBBORN = """
import os, signal, sys, time
if os.fork() == 0:  # a child that outlives its parent's SIGTERM (a rank, a resource tracker)
    signal.signal(signal.SIGTERM, signal.SIG_IGN)
    while True:
        time.sleep(0.1)
print("started", flush=True)
while True:
    time.sleep(0.1)
"""


async def test_stop_waits_for_the_whole_process_group(home):
    """Stopped means every process of the server's group is gone: a child that ignores SIGTERM
    is killed after the grace, and stop says so."""
    host = make_host("local", None, home)
    marker = f"gpuops-stubborn-{os.getpid()}"
    (home / f"{marker.replace('-', '_')}.py").write_text(STUBBORN)
    launcher = ProcessLauncher(host, marker, [sys.executable, "-m", marker.replace("-", "_"), marker],
                               {"PYTHONPATH": str(home)}, str(home))
    launcher.grace_s = 2
    try:
        await launcher.install({})
        await launcher.start()
        assert await wait_until(lambda: "started" in Path(launcher.log_path).read_text(), timeout=10)
        assert await wait_until(lambda: len(own_pids(marker)) == 2, timeout=10)
        stopped = await launcher.stop()
        assert stopped.detail == "killed", stopped
        assert own_pids(marker) == []  # no member left when stop returns
    finally:
        for pid in own_pids(marker):
            os.kill(pid, signal.SIGKILL)
        await host.close()
