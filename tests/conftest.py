from __future__ import annotations

import os
import shutil
import tempfile
from pathlib import Path

import pytest

from tests.sshd import start_sshd, Sshd

REPO = Path(__file__).resolve().parent.parent


@pytest.fixture(scope="session")
def sshd(tmp_path_factory) -> Sshd:
    """A real sshd on 127.0.0.1 with a throwaway host key and client key."""
    if not shutil.which("sshd") and not os.path.exists("/usr/sbin/sshd"):
        pytest.fail("sshd is not installed: run the README's test command (it installs openssh-server)")
    # Not under pytest's tmp dir: that is mode 0700, and sshd reads the non-root
    # user's authorized_keys as that user.
    root = Path(tempfile.mkdtemp(prefix="gpuops-sshd-"))
    root.chmod(0o755)
    server = start_sshd(root / "sshd")
    yield server
    server.stop()
    shutil.rmtree(root, ignore_errors=True)


@pytest.fixture
def ssh_home(tmp_path, sshd, monkeypatch) -> Path:
    """A HOME whose ~/.ssh holds the test key, known_hosts and a config alias, so that
    gpuops run as a subprocess uses exactly what an operator's ~/.ssh would give it."""
    home = tmp_path / "home"
    ssh = home / ".ssh"
    ssh.mkdir(parents=True)
    shutil.copy(sshd.client_key, ssh / "id_ed25519")
    os.chmod(ssh / "id_ed25519", 0o600)
    shutil.copy(sshd.known_hosts, ssh / "known_hosts")
    (ssh / "config").write_text(
        f"Host simbox\n  HostName 127.0.0.1\n  Port {sshd.port}\n  User {sshd.user}\n"
    )
    monkeypatch.setenv("HOME", str(home))
    monkeypatch.delenv("SSH_AUTH_SOCK", raising=False)
    return home
