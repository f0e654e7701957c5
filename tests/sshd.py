"""A real OpenSSH server on 127.0.0.1 for the tests, and a loopback TCP proxy that a
test can cut (dropped connection) or freeze (a network black hole)."""

from __future__ import annotations

import asyncio
import os
import pwd
import shutil
import socket
import subprocess
import tempfile
import time
from dataclasses import dataclass, field
from pathlib import Path
from tests.ports import free_port

SSHD = shutil.which("sshd") or "/usr/sbin/sshd"
TEST_USER = "gpuopstest"



def ssh_user_home() -> Path:
    """The HOME that the test sshd gives its user's sessions (sshd_config's SetEnv): a folder of this test
    process's own (one per pytest-xdist worker), not the account's (/root). What gpuops keeps in the host
    user's home (the process launcher's ~/.local/state/gpuops/deployments/NAME, bench runs) is then never
    shared by two test processes running at once, and a run leaves nothing in /root."""
    return Path(tempfile.gettempdir()) / f"gpuops-ssh-home-{os.getpid()}"


def _keygen(path: Path, kind: str = "ed25519") -> None:
    subprocess.run(["ssh-keygen", "-q", "-t", kind, "-N", "", "-f", str(path)], check=True)


def ensure_test_user() -> str | None:
    """A non-root account (sshd ignores signal requests for root sessions)."""
    if os.geteuid() != 0:
        return None
    try:
        pwd.getpwnam(TEST_USER)
    except KeyError:
        subprocess.run(["useradd", "-m", "-s", "/bin/sh", TEST_USER], check=True)
    subprocess.run(["usermod", "-p", "*", TEST_USER], check=True)  # unlock: UsePAM is off
    return TEST_USER


@dataclass
class Sshd:
    root: Path
    port: int
    client_key: Path
    known_hosts: Path
    host_key: Path
    user: str
    other_user: str | None
    home: Path  # the HOME of `user`'s sessions (ssh_user_home()); other_user keeps its own
    proc: subprocess.Popen | None = None
    extra_hosts: list = field(default_factory=list)

    def options(self, known_hosts: Path | None = None) -> dict:
        return {
            "client_keys": [str(self.client_key)],
            "known_hosts": str(known_hosts or self.known_hosts),
            "config": (),
            "agent_path": None,
        }

    def target(self, user: str | None = None, port: int | None = None) -> str:
        return f"{user or self.user}@127.0.0.1:{port or self.port}"

    def trust_port(self, port: int) -> None:
        """Add the server's key for another port (a proxy in front of it)."""
        kind, blob = (self.host_key.parent / "hostkey.pub").read_text().split()[:2]
        with self.known_hosts.open("a") as f:
            f.write(f"[127.0.0.1]:{port} {kind} {blob}\n")

    def stop(self) -> None:
        if self.proc and self.proc.poll() is None:
            self.proc.terminate()
            self.proc.wait(5)


def start_sshd(root: Path, host_key_type: str = "ed25519") -> Sshd:
    """An sshd with one host key of `host_key_type` (ssh-keygen's -t: ed25519, ecdsa, rsa)."""
    root.mkdir(parents=True, exist_ok=True)
    os.chmod(root, 0o755)
    host_key, client_key = root / "hostkey", root / "clientkey"
    _keygen(host_key, host_key_type)
    _keygen(client_key)
    ak = root / "ak"
    ak.mkdir()
    os.chmod(ak, 0o755)
    user = pwd.getpwuid(os.geteuid()).pw_name
    other = ensure_test_user()
    pub = (root / "clientkey.pub").read_text()
    for name in filter(None, [user, other]):
        f = ak / name
        f.write_text(pub)
        pw = pwd.getpwnam(name)
        os.chown(f, pw.pw_uid, pw.pw_gid)
        os.chmod(f, 0o600)
    Path("/run/sshd").mkdir(exist_ok=True)
    home = ssh_user_home()
    home.mkdir(mode=0o755, exist_ok=True)
    port = free_port()
    cfg = root / "sshd_config"
    cfg.write_text(
        f"ListenAddress 127.0.0.1\nPort {port}\nHostKey {host_key}\nPidFile {root}/sshd.pid\n"
        f"AuthorizedKeysFile {ak}/%u\nStrictModes no\nUsePAM no\nPermitRootLogin prohibit-password\n"
        "MaxSessions 200\nMaxStartups 200:30:300\nLogLevel ERROR\n"
        f"Match User {user}\n  SetEnv HOME={home}\n"
    )
    proc = subprocess.Popen([SSHD, "-D", "-e", "-f", str(cfg)], stderr=open(root / "sshd.log", "wb"))  # noqa: SIM115  (sshd's, for its life)
    deadline = time.monotonic() + 10
    while True:
        try:
            socket.create_connection(("127.0.0.1", port), timeout=0.2).close()
            break
        except OSError:
            if proc.poll() is not None or time.monotonic() > deadline:
                raise RuntimeError("sshd did not start: " + (root / "sshd.log").read_text()) from None
            time.sleep(0.02)
    hostpub = (root / "hostkey.pub").read_text().split()
    known = root / "known_hosts"
    known.write_text(f"[127.0.0.1]:{port} {hostpub[0]} {hostpub[1]}\n")
    return Sshd(root, port, client_key, known, host_key, user, other, home, proc)


class TcpProxy:
    """Forwards 127.0.0.1:port to a target; `cut()` drops every connection,
    `freeze()` keeps sockets open but stops moving bytes (a black hole)."""

    def __init__(self, target_port: int):
        self.target_port = target_port
        self.port = 0
        self.frozen = asyncio.Event()
        self._server: asyncio.base_events.Server | None = None
        self._writers: set[asyncio.StreamWriter] = set()
        self.accepted = 0

    async def start(self, sshd: "Sshd | None" = None) -> "TcpProxy":
        self._server = await asyncio.start_server(self._handle, "127.0.0.1", 0)
        self.port = self._server.sockets[0].getsockname()[1]
        if sshd is not None:
            sshd.trust_port(self.port)
        return self

    async def _pipe(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        try:
            while True:
                data = await reader.read(65536)
                if not data:
                    break
                while self.frozen.is_set():  # hold the bytes: nothing gets through
                    await asyncio.sleep(0.05)
                writer.write(data)
                await writer.drain()
        except (ConnectionError, asyncio.CancelledError):
            pass
        finally:
            writer.close()

    async def _handle(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        if self.frozen.is_set():  # a black hole accepts nothing useful either
            self._writers.add(writer)
            return
        self.accepted += 1
        up_reader, up_writer = await asyncio.open_connection("127.0.0.1", self.target_port)
        self._writers.update((writer, up_writer))
        try:
            await asyncio.gather(self._pipe(reader, up_writer), self._pipe(up_reader, writer))
        except asyncio.CancelledError:
            pass

    def cut(self) -> None:
        for w in list(self._writers):
            transport = w.transport
            transport.abort()
        self._writers.clear()

    def freeze(self) -> None:
        self.frozen.set()

    def thaw(self) -> None:
        self.frozen.clear()
        self.cut()  # connections held during the freeze are dead to both ends

    async def close(self) -> None:
        self.cut()
        if self._server:
            self._server.close()
