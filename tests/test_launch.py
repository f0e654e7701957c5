"""Launchers on a real host (local and over SSH): the server outlives gpuops, secrets stay in 0600 files."""

from __future__ import annotations

import asyncio
import os
import stat
import subprocess
import sys
import tempfile
from pathlib import Path

import pytest

from gpuops.core.config import HostConfig, SshTarget
from gpuops.core.hosts.host import LocalHost, SshHost
from gpuops.core.deploy.launch import ProcessLauncher
from gpuops.core.hosts.files import env_file_text, new_api_key, read_env_value, remote_home
from tests.test_hosts import processes_matching, wait_until

SERVER = """
import os, sys, time
print("argv", sys.argv[1:], flush=True)
print("env", os.environ.get("CUDA_VISIBLE_DEVICES"), flush=True)
print("key-set", bool(os.environ.get("GPUOPS_API_KEY")), flush=True)
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
    host = make_host(kind, sshd, home)
    marker = f"gpuops-test-{os.getpid()}-{kind}"
    try:
        assert await remote_home(host) == str(home)
        key = new_api_key()
        launcher = ProcessLauncher(host, marker, [sys.executable, "-c", SERVER, "--api-key", "${GPUOPS_API_KEY}",
                                                  "--served-model-name", marker],
                                   {"CUDA_VISIBLE_DEVICES": "0,1"}, str(home))
        await launcher.install({"GPUOPS_API_KEY": key})
        env_path = Path(launcher.env_path)
        assert stat.S_IMODE(env_path.stat().st_mode) == 0o600
        assert await read_env_value(host, launcher.env_path, "GPUOPS_API_KEY") == key
        await launcher.start()
        log = Path(launcher.log_path)
        assert await wait_until(lambda: log.exists() and "tick" in log.read_text(), timeout=10)
        text = log.read_text()
        assert f"'--api-key', '{key}'" in text  # filled in from the env file at start...
        assert key not in Path(launcher.cmd_path).read_text()  # ...never written anywhere else
        assert "env 0,1" in text and "key-set True" in text
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
        subprocess.run(["pkill", "-f", marker])
        await host.close()


def test_env_file_text_quotes_values():
    text = env_file_text({"A": "plain", "B": "it's $x"}, "h")
    assert "A=plain" in text and "B='it'\"'\"'s $x'" in text
    with pytest.raises(Exception):
        env_file_text({"BAD NAME": "x"}, "h")
