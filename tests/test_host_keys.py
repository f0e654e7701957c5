"""SSH trust diagnosis against real sshd servers on 127.0.0.1, through the real CLI.

A refused host key is one of CHANGED, REVOKED or UNKNOWN, for every key type, looked up the way
the connection looked it up (ssh_config's HostName, Port, HostKeyAlias, UserKnownHostsFile), with the
server's fingerprint and the one command that fixes it; gpuops never writes known_hosts itself.
"""

from __future__ import annotations

import json
import os
import shutil
import socket
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import pytest

from gpuops.core.config import HostConfig, SshTarget
from gpuops.core.hosts.host import HostKeyRefused, SshHost
from tests.sshd import Sshd, start_sshd

GPUOPS = str(Path(sys.executable).with_name("gpuops"))


@pytest.fixture(scope="module")
def servers():
    """One sshd per host key type: each offers only that key."""
    root = Path(tempfile.mkdtemp(prefix="gpuops-hostkeys-"))
    root.chmod(0o755)
    started: dict[str, Sshd] = {}
    try:
        for kind in ("ed25519", "ecdsa", "rsa"):
            started[kind] = start_sshd(root / kind, host_key_type=kind)
        yield started
    finally:
        for server in started.values():
            server.stop()
        shutil.rmtree(root, ignore_errors=True)


def pub(path: Path) -> tuple[str, str]:
    """(algorithm, base64 blob) of a public key file."""
    kind, blob = path.read_text().split()[:2]
    return kind, blob


def fingerprint(path: Path) -> str:
    out = subprocess.run(["ssh-keygen", "-lf", str(path)], capture_output=True, text=True, check=True)
    return out.stdout.split()[1]


def other_key(tmp_path: Path, kind: str) -> Path:
    """A key the server does not have: its .pub path."""
    key = tmp_path / f"other-{kind}"
    subprocess.run(["ssh-keygen", "-q", "-t", kind, "-N", "", "-f", str(key)], check=True)
    return Path(f"{key}.pub")


class Operator:
    """A HOME with ~/.ssh (config alias `simbox`, key, known_hosts) and an inventory with one host."""

    def __init__(self, tmp_path: Path, server: Sshd, extra_config: str = "", ssh: str = "simbox"):
        self.server = server
        self.home = tmp_path / "home"
        self.ssh = self.home / ".ssh"
        self.ssh.mkdir(parents=True)
        shutil.copy(server.client_key, self.ssh / "id_ed25519")
        os.chmod(self.ssh / "id_ed25519", 0o600)
        self.known_hosts = self.ssh / "known_hosts"
        self.known_hosts.write_text("")
        (self.ssh / "config").write_text(
            f"Host simbox\n  HostName 127.0.0.1\n  Port {server.port}\n  User {server.user}\n{extra_config}"
        )
        self.inventory = tmp_path / "config.toml"
        self.target = ssh
        self.inventory.write_text(f'[hosts.box]\nssh = "{ssh}"\n')
        self.env = dict(os.environ, HOME=str(self.home), XDG_CONFIG_HOME=str(tmp_path / "cfg"),
                        XDG_STATE_HOME=str(tmp_path / "state"), XDG_CACHE_HOME=str(tmp_path / "cache"))
        self.env.pop("GPUOPS_CONFIG", None)
        self.env.pop("SSH_AUTH_SOCK", None)

    def hosts(self) -> dict:
        """`gpuops hosts --json`: exit 0 (a snapshot verb reports host errors inside), one row."""
        out = subprocess.run([GPUOPS, "--config", str(self.inventory), "hosts", "--json"],
                             capture_output=True, text=True, env=self.env, timeout=60)
        assert out.returncode == 0, out.stderr
        assert "Traceback" not in out.stderr
        (row,) = json.loads(out.stdout)["hosts"]
        return row

    def refused(self) -> tuple[str, str]:
        """The host's one-line error and hint, with known_hosts untouched by gpuops."""
        before = self.known_hosts.read_bytes()
        listing = sorted(p.name for p in self.ssh.iterdir())
        row = self.hosts()
        assert row["reachable"] is False
        error, hint = row["error"], row["hint"]
        assert error and hint and "\n" not in error and "\n" not in hint
        assert error.endswith("; refusing to connect")
        assert self.known_hosts.read_bytes() == before  # never accepted, never removed
        assert sorted(p.name for p in self.ssh.iterdir()) == listing  # no known_hosts.old either
        return error, hint

    def run_hint(self, hint: str) -> None:
        """Run the command a hint gives (after its colon), as the operator would paste it."""
        command = hint.split(": ", 1)[1]
        done = subprocess.run(["sh", "-c", command], capture_output=True, text=True, env=self.env, timeout=60)
        assert done.returncode == 0, done.stderr

    def connects(self) -> None:
        """The host connects now, through the same SshHost (a full `gpuops hosts` snapshot takes
        seconds: one command is enough to show the key is trusted)."""
        done = subprocess.run([sys.executable, "-c", CONNECT, self.target], capture_output=True, text=True,
                              env=self.env, timeout=60)
        assert done.returncode == 0 and done.stdout == "connected\n", done.stdout + done.stderr


CONNECT = """
import asyncio, sys
from gpuops.core.config import HostConfig, SshTarget
from gpuops.core.hosts.host import SshHost

async def main():
    host = SshHost(HostConfig(name="box", local=False, ssh=SshTarget.parse(sys.argv[1]), python=None))
    try:
        print((await host.run(["echo", "connected"])).stdout, end="")
    finally:
        await host.close()

asyncio.run(main())
"""


KH = "~/.ssh/known_hosts"  # how the hints name the operator's known_hosts (HOME is the test's)


def test_alias_changed_key_same_type(tmp_path, servers):
    """An ssh_config alias: looked up as [HostName]:Port, and the hint uses the alias's port."""
    server = servers["ed25519"]
    op = Operator(tmp_path, server)
    old = other_key(tmp_path, "ed25519")
    kind, blob = pub(old)
    op.known_hosts.write_text(f"[127.0.0.1]:{server.port} {kind} {blob}\n")
    fp, old_fp = fingerprint(server.host_key.with_suffix(".pub")), fingerprint(old)
    error, hint = op.refused()
    spec = f"[127.0.0.1]:{server.port}"
    assert error == (f"box: CHANGED host key for {spec}: the server offers ssh-ed25519 {fp}, "
                     f"{KH} line 1 holds ssh-ed25519 {old_fp}; refusing to connect")
    assert hint == (f"if the host was re-keyed (check {fp} with its admin): "
                    f"ssh-keygen -R '{spec}' -f {KH} && "
                    f"ssh-keyscan -p {server.port} -t ed25519 127.0.0.1 >> {KH}")
    op.run_hint(hint)  # the command fixes it
    assert old_fp not in op.known_hosts.read_text() and blob not in op.known_hosts.read_text()
    op.connects()


@pytest.mark.parametrize("offered,known", [("ed25519", "ecdsa"), ("ecdsa", "ed25519"), ("rsa", "ecdsa"),
                                           ("ed25519", "rsa")])
def test_changed_key_of_another_type_is_changed_not_a_reset(tmp_path, servers, offered, known):
    """known_hosts holds a key of one type, the server now offers only another: asyncssh offers only
    the known type, the server closes the connection; the diagnosis still says CHANGED."""
    server = servers[offered]
    op = Operator(tmp_path, server)
    old = other_key(tmp_path, known)
    kind, blob = pub(old)
    op.known_hosts.write_text(f"# an operator's comment\n[127.0.0.1]:{server.port} {kind} {blob}\n")
    server_kind = pub(server.host_key.with_suffix(".pub"))[0]
    fp, old_fp = fingerprint(server.host_key.with_suffix(".pub")), fingerprint(old)
    error, hint = op.refused()
    spec = f"[127.0.0.1]:{server.port}"
    assert "reset" not in error.lower() and "lost" not in error.lower()
    assert error == (f"box: CHANGED host key for {spec}: the server offers {server_kind} {fp}, "
                     f"{KH} line 2 holds {kind} {old_fp}; refusing to connect")
    assert hint.endswith(f"ssh-keygen -R '{spec}' -f {KH} && "
                         f"ssh-keyscan -p {server.port} -t {offered} 127.0.0.1 >> {KH}")
    op.run_hint(hint)
    op.connects()


@pytest.mark.parametrize("listing", ["alone", "after-the-new-key", "wildcard"])
def test_revoked_key(tmp_path, servers, listing):
    """The server presents a key marked @revoked: REVOKED, where it is marked, and no command that
    would trust it again."""
    server = servers["ed25519"]
    op = Operator(tmp_path, server)
    kind, blob = pub(server.host_key.with_suffix(".pub"))
    spec = f"[127.0.0.1]:{server.port}"
    if listing == "alone":
        op.known_hosts.write_text(f"@revoked {spec} {kind} {blob}\n")
        line = 1
    elif listing == "after-the-new-key":  # the admin re-keyed it in known_hosts, the server still has the old key
        nkind, nblob = pub(other_key(tmp_path, "ecdsa"))
        op.known_hosts.write_text(f"{spec} {nkind} {nblob}\n@revoked {spec} {kind} {blob}\n")
        line = 2
    else:
        op.known_hosts.write_text(f"# revoked everywhere\n\n@revoked * {kind} {blob}\n")
        line = 3
    fp = fingerprint(server.host_key.with_suffix(".pub"))
    error, hint = op.refused()
    assert error == (f"box: REVOKED host key for {spec}: the server offers {kind} {fp}, "
                     f"marked @revoked in {KH} line {line}; refusing to connect")
    assert "must not be trusted" in hint and f"{KH} line {line}" in hint and "admin" in hint
    assert "ssh-keyscan" not in hint and "ssh-keygen" not in hint and ">>" not in hint


@pytest.mark.parametrize("ssh", ["simbox", "direct"])
def test_unknown_key(tmp_path, servers, ssh):
    server = servers["ecdsa"]
    target = "simbox" if ssh == "simbox" else f"{server.user}@127.0.0.1:{server.port}"
    op = Operator(tmp_path, server, ssh=target)
    op.known_hosts.write_text(f"[127.0.0.1]:{server.port + 1} ssh-ed25519 {pub(server.client_key.with_suffix('.pub'))[1]}\n")
    kind = pub(server.host_key.with_suffix(".pub"))[0]
    fp = fingerprint(server.host_key.with_suffix(".pub"))
    error, hint = op.refused()
    assert error == (f"box: UNKNOWN host key for [127.0.0.1]:{server.port}: the server offers {kind} {fp}, "
                     f"not known in {KH}; refusing to connect")
    assert hint == (f"if that fingerprint is the host's (ask its admin): "
                    f"ssh-keyscan -p {server.port} -t ecdsa 127.0.0.1 >> {KH}")
    op.run_hint(hint)
    op.connects()


def test_host_key_alias_is_the_lookup_name(tmp_path, servers):
    """HostKeyAlias: keys are looked up (and must be saved) under the alias, not the address."""
    server = servers["ed25519"]
    op = Operator(tmp_path, server, extra_config="  HostKeyAlias simbox-key\n")
    old = other_key(tmp_path, "ed25519")
    kind, blob = pub(old)
    op.known_hosts.write_text(f"simbox-key {kind} {blob}\n")
    fp, old_fp = fingerprint(server.host_key.with_suffix(".pub")), fingerprint(old)
    error, hint = op.refused()
    assert error == (f"box: CHANGED host key for simbox-key: the server offers ssh-ed25519 {fp}, "
                     f"{KH} line 1 holds ssh-ed25519 {old_fp}; refusing to connect")
    keyscan = f"ssh-keyscan -p {server.port} -t ed25519 127.0.0.1 | sed 's/^[^ ]*/simbox-key/' >> {KH}"
    assert hint.endswith(f"ssh-keygen -R simbox-key -f {KH} && {keyscan}")

    op.known_hosts.write_text("")
    error, hint = op.refused()
    assert error == (f"box: UNKNOWN host key for simbox-key: the server offers ssh-ed25519 {fp}, "
                     f"not known in {KH}; refusing to connect")
    assert hint.endswith(f": {keyscan}")
    op.run_hint(hint)
    assert op.known_hosts.read_text().startswith("simbox-key ssh-ed25519 ")
    op.connects()


def test_user_known_hosts_file_from_ssh_config(tmp_path, servers):
    """UserKnownHostsFile in ssh_config: that file is read, named, and the one to write to."""
    server = servers["ed25519"]
    op = Operator(tmp_path, server, extra_config="  UserKnownHostsFile ~/.ssh/fleet_hosts\n")
    fleet = op.ssh / "fleet_hosts"
    old = other_key(tmp_path, "ecdsa")
    kind, blob = pub(old)
    fleet.write_text(f"127.0.0.1 {kind} {blob}\n")  # listed without the port: asyncssh falls back to it
    fp = fingerprint(server.host_key.with_suffix(".pub"))
    before = fleet.read_bytes()
    error, hint = op.refused()
    assert fleet.read_bytes() == before
    assert error == (f"box: CHANGED host key for [127.0.0.1]:{server.port}: the server offers ssh-ed25519 {fp}, "
                     f"~/.ssh/fleet_hosts line 1 holds {kind} {fingerprint(old)}; refusing to connect")
    assert hint.endswith(f"ssh-keygen -R 127.0.0.1 -f ~/.ssh/fleet_hosts && "
                         f"ssh-keyscan -p {server.port} -t ed25519 127.0.0.1 >> ~/.ssh/fleet_hosts")
    op.run_hint(hint)
    op.connects()


async def test_key_type_change_raises_host_key_refused_with_the_servers_fingerprint(tmp_path, servers):
    """In process: the exception callers catch (HostKeyRefused, a HostUnreachable), carrying the
    server's fingerprint, not a connection error."""
    server = servers["ecdsa"]
    kind, blob = pub(other_key(tmp_path, "ed25519"))
    known = tmp_path / "known_hosts"
    known.write_text(f"[127.0.0.1]:{server.port} {kind} {blob}\n")
    host = SshHost(HostConfig(name="box", local=False, ssh=SshTarget(server.user, "127.0.0.1", server.port),
                              python=None), connect_options=server.options(known_hosts=known))
    with pytest.raises(HostKeyRefused) as info:
        await host.run(["true"])
    assert info.value.fingerprint == fingerprint(server.host_key.with_suffix(".pub"))
    assert info.value.message.startswith(f"box: CHANGED host key for [127.0.0.1]:{server.port}: ")
    assert f"-t ecdsa 127.0.0.1 >> {known}" in info.value.hint
    assert known.read_text() == f"[127.0.0.1]:{server.port} {kind} {blob}\n"


def test_a_known_hosts_of_only_a_cert_authority_says_so(tmp_path, servers):
    """known_hosts trusts the host only through @cert-authority, and the server has no certificate:
    not "connection lost" but what is wrong (no certificate signed by that CA) and the two ways out;
    the hint's command works. A server whose key that CA signed connects."""
    server = servers["ed25519"]
    op = Operator(tmp_path, server)
    ca = tmp_path / "ca"
    subprocess.run(["ssh-keygen", "-q", "-t", "ed25519", "-N", "", "-f", str(ca)], check=True)
    kind, blob = pub(Path(f"{ca}.pub"))
    for pattern in (f"[127.0.0.1]:{server.port}", "*"):
        op.known_hosts.write_text(f"# our CA\n@cert-authority {pattern} {kind} {blob}\n")
        error, hint = op.refused()
        fp = fingerprint(server.host_key.with_suffix(".pub"))
        assert error == (f"box: host key for [127.0.0.1]:{server.port} not trusted: known_hosts trusts only a "
                         f"certificate authority for it (@cert-authority, {KH} line 2), and the server offers a plain "
                         f"ssh-ed25519 {fp} key with no certificate signed by it; refusing to connect"), error
        assert "Connection" not in error and "HostCertificate" in hint
        assert hint.endswith(f"ssh-keyscan -p {server.port} -t ed25519 127.0.0.1 >> {KH}"), hint
    op.run_hint(hint)
    op.connects()

    # the same CA, and a server whose host key it signed: trusted as a certificate
    root = Path(tempfile.mkdtemp(prefix="gpuops-hostcert-"))
    root.chmod(0o755)
    certified = start_sshd(root / "sshd")
    try:
        subprocess.run(["ssh-keygen", "-q", "-s", str(ca), "-I", "gpuops-test", "-h", "-n", "127.0.0.1",
                        str(certified.host_key.with_suffix(".pub"))], check=True)
        certified.stop()
        config = certified.root / "sshd_config"
        # first: the config ends in a Match block (tests/sshd.py), where sshd refuses HostCertificate
        config.write_text(f"HostCertificate {certified.host_key}-cert.pub\n" + config.read_text())
        certified.proc = subprocess.Popen(["/usr/sbin/sshd", "-D", "-e", "-f", str(config)],
                                          stderr=open(certified.root / "sshd2.log", "wb"))  # noqa: SIM115
        deadline = time.monotonic() + 20
        while True:  # until the restarted sshd listens
            try:
                socket.create_connection(("127.0.0.1", certified.port), timeout=0.5).close()
                break
            except OSError:
                assert certified.proc.poll() is None and time.monotonic() < deadline, \
                    (certified.root / "sshd2.log").read_text()
                time.sleep(0.05)
        op2 = Operator(tmp_path / "certified", certified)
        op2.known_hosts.write_text(f"@cert-authority * {kind} {blob}\n")
        op2.connects()
    finally:
        certified.stop()
        shutil.rmtree(root, ignore_errors=True)
