"""What lets the suite run on several workers at once (pytest-xdist, scripts/test-all.sh): no two test
processes share the simulated host's remote state or the planner's default port."""

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
