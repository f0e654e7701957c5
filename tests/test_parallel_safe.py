"""What lets the suite run on several workers at once (pytest-xdist, scripts/test-all.sh): no two test
processes share the simulated host's remote state or the ports they take (tests/ports.py)."""

from __future__ import annotations

import os
import pwd
import subprocess

from tests.sshd import ssh_user_home


def test_the_sshd_gives_its_users_sessions_a_home_of_this_test_process(sshd):
    """The process launcher keeps a deployment's files under the host user's ~/.local/state/gpuops: with
    the account's home (/root) two workers deploying the same name would share (and stop) one server."""
    def home_of(user: str) -> str:
        out = subprocess.run(["ssh", "-i", str(sshd.client_key), "-o", f"UserKnownHostsFile={sshd.known_hosts}",
                              "-o", "BatchMode=yes", "-F", "/dev/null", "-p", str(sshd.port), f"{user}@127.0.0.1",
                              'sh -c \'printf %s "$HOME"\''], capture_output=True, text=True, timeout=30,
                             stdin=subprocess.DEVNULL)
        assert out.returncode == 0, out.stderr
        return out.stdout

    assert sshd.home == ssh_user_home() and str(os.getpid()) in sshd.home.name
    assert home_of(sshd.user) == str(sshd.home) != pwd.getpwnam(sshd.user).pw_dir
    assert sshd.home.is_dir()
    if sshd.other_user:  # another account keeps its own home
        assert home_of(sshd.other_user) == pwd.getpwnam(sshd.other_user).pw_dir


def test_ports_come_from_the_workers_own_blocks_below_the_ephemeral_range(monkeypatch):
    """free_port() never hands out a port an outgoing connection could be given meanwhile, nor one of
    another worker's block; the planner's first port in this process is the worker's own, set for every
    gpuops the test starts."""
    import socket

    from tests import ports

    low = ports.ephemeral_low()
    taken = [ports.free_port() for _ in range(50)]
    block = range(ports.FREE_BASE + ports.FREE_BLOCK * ports.worker(), ports.FREE_BASE + ports.FREE_BLOCK * (ports.worker() + 1))
    assert all(p in block and p < low for p in taken) and len(set(taken)) == 50
    with socket.socket() as held:  # a port something listens on is skipped
        held.bind(("127.0.0.1", ports.free_port() + 1))
        held.listen()
        assert ports.free_port() != held.getsockname()[1]
    first = ports.first_port()
    assert os.environ["GPUOPS_FIRST_PORT"] == str(first) == str(ports.first_port())
    assert ports.FIRST_BASE + ports.FIRST_BLOCK * ports.worker() <= first < ports.FIRST_BASE + ports.FIRST_BLOCK * (ports.worker() + 1) <= low
    for name, number in (("gw0", 0), ("gw2", 2), ("master", 0), ("", 0)):
        monkeypatch.setenv("PYTEST_XDIST_WORKER", name)
        assert ports.worker() == number
