"""Where commands run: the local machine or a host over SSH.

Every command is an argv list. Remote commands are quoted with ``shlex.join`` and
run under a small ``sh`` guard (``_GUARD``) so that closing the channel — a
cancelled stream, a timeout, a dropped connection — ends the remote process
group too: without a pty, sshd leaves a remote command running after its channel
closes, and it ignores signal requests for root sessions. The guard starts the
command in its own session and watches the channel's stdin; end-of-file there
means gpuops went away, and the guard kills the command's process group.
"""

from __future__ import annotations

import asyncio
import contextlib
import functools
import os
import re
import shlex
import signal
import sys
import time
from collections import deque
from dataclasses import dataclass
from pathlib import Path
from types import ModuleType
from typing import TYPE_CHECKING, Any, AsyncIterator, Sequence

from ..config import HostConfig

if TYPE_CHECKING:  # asyncssh costs ~0.2 s to import: only when an SSH host connects
    import asyncssh

STDERR_TAIL = 40
LINE_LIMIT = 16 * 1024 * 1024  # a journald JSON line with a long binary MESSAGE can pass 64 KiB
PREFERRED_CIPHERS = (
    "aes128-gcm@openssh.com", "aes256-gcm@openssh.com", "chacha20-poly1305@openssh.com",
    "aes256-ctr", "aes192-ctr", "aes128-ctr",
)
KILL_GRACE_S = 2.0

# $1.. is the command. GPUOPS_PATH_PREFIX (when set) is put in front of PATH.
_GUARD = r"""
if [ -n "${GPUOPS_PATH_PREFIX:-}" ]; then PATH="$GPUOPS_PATH_PREFIX:$PATH"; export PATH; fi
unset GPUOPS_PATH_PREFIX
exec 3<&0
if command -v setsid >/dev/null 2>&1; then setsid "$@" </dev/null 3<&- & else "$@" </dev/null 3<&- & fi
p=$!
{ while read -r _ <&3; do :; done
  kill -TERM -"$p" 2>/dev/null || kill -TERM "$p" 2>/dev/null
  sleep 2; kill -KILL -"$p" 2>/dev/null || kill -KILL "$p" 2>/dev/null; } &
w=$!
exec 3<&-
wait "$p"; rc=$?
kill "$w" 2>/dev/null
exit "$rc"
"""
# For commands fed on stdin (short writes): no watcher, stdin goes to the command.
_PLAIN = r"""
if [ -n "${GPUOPS_PATH_PREFIX:-}" ]; then PATH="$GPUOPS_PATH_PREFIX:$PATH"; export PATH; fi
unset GPUOPS_PATH_PREFIX
exec "$@"
"""


class HostError(Exception):
    """A host problem with a one-line message and a hint for the operator."""

    def __init__(self, message: str, hint: str | None = None):
        super().__init__(message)
        self.message = message
        self.hint = hint


class HostUnreachable(HostError):
    pass


class HostKeyRefused(HostUnreachable):
    def __init__(self, message: str, hint: str, fingerprint: str | None):
        super().__init__(message, hint)
        self.fingerprint = fingerprint


class CommandTimeout(HostError):
    pass


@dataclass
class Result:
    argv: list[str]
    returncode: int | None
    stdout: str
    stderr: str

    @property
    def ok(self) -> bool:
        return self.returncode == 0


def _validate_argv(argv: Sequence[str]) -> list[str]:
    argv = list(argv)
    if not argv or not all(isinstance(a, str) for a in argv):
        raise ValueError(f"a command is a non-empty list of strings, got {argv!r}")
    if any("\0" in a for a in argv):
        raise ValueError("a command argument contains a NUL byte")
    return argv


class Stream:
    """Lines of a running command's stdout; closing it ends the command.

    Use as ``async with host.stream(argv) as s: async for line in s: ...``.
    After the end, ``returncode`` and ``stderr_tail`` tell how it ended.
    """

    def __init__(self) -> None:
        self.returncode: int | None = None
        self.stderr_tail: deque[str] = deque(maxlen=STDERR_TAIL)
        self._started = False
        self._closed = False

    async def _start(self) -> None:  # pragma: no cover - abstract
        raise NotImplementedError

    async def _readline(self) -> str:  # pragma: no cover - abstract
        raise NotImplementedError

    async def _terminate(self) -> None:  # pragma: no cover - abstract
        raise NotImplementedError

    async def __aenter__(self) -> "Stream":
        await self._ensure_started()
        return self

    async def __aexit__(self, *exc: Any) -> None:
        await self.aclose()

    async def _ensure_started(self) -> None:
        if not self._started:
            self._started = True
            await self._start()

    def __aiter__(self) -> AsyncIterator[str]:
        return self

    async def __anext__(self) -> str:
        await self._ensure_started()
        line = await self._readline()
        if line == "":
            await self._finish()
            raise StopAsyncIteration
        return line.rstrip("\n")

    async def _finish(self) -> None:  # pragma: no cover - abstract
        raise NotImplementedError

    async def aclose(self) -> None:
        if self._closed:
            return
        self._closed = True
        if self._started:
            await self._terminate()


class Host:
    """A place to run commands: ``run()`` (bounded) and ``stream()`` (lines)."""

    kind = "abstract"

    def __init__(self, config: HostConfig):
        self.config = config
        self.name = config.name

    @property
    def address(self) -> str:
        return self.config.address

    def _env(self) -> dict[str, str]:
        env = dict(self.config.env_dict())
        prefix = self.config.path_prefix()
        if prefix is not None:
            env.pop("PATH", None)
        return env

    async def run(self, argv: Sequence[str], timeout: float = 30.0, input: str | None = None) -> Result:
        raise NotImplementedError

    def stream(self, argv: Sequence[str]) -> Stream:
        raise NotImplementedError

    @contextlib.asynccontextmanager
    async def forward(self, address: str, port: int) -> AsyncIterator[tuple[str, int]]:
        """A TCP port of the host (a server bound to its loopback, say) reachable from here:
        yields (address, port) to connect to; closed on exit. Local hosts need none."""
        yield address, port

    async def close(self) -> None:
        pass


# ------------------------------------------------------------------ local


class _LocalStream(Stream):
    def __init__(self, host: "LocalHost", argv: list[str]):
        super().__init__()
        self._host = host
        self._argv = argv
        self._proc: asyncio.subprocess.Process | None = None
        self._stderr_task: asyncio.Task | None = None

    async def _start(self) -> None:
        self._proc = await self._host._spawn(self._argv, stdin=asyncio.subprocess.DEVNULL)
        self._stderr_task = asyncio.create_task(self._drain_stderr())

    async def _drain_stderr(self) -> None:
        assert self._proc and self._proc.stderr
        async for raw in self._proc.stderr:
            self.stderr_tail.append(raw.decode("utf-8", "replace").rstrip("\n"))

    async def _readline(self) -> str:
        assert self._proc and self._proc.stdout
        return (await self._proc.stdout.readline()).decode("utf-8", "replace")

    async def _finish(self) -> None:
        assert self._proc
        self.returncode = await self._proc.wait()
        if self._stderr_task:
            await self._stderr_task

    async def _terminate(self) -> None:
        if self._proc is not None:
            await _kill_group(self._proc)
            self.returncode = self._proc.returncode
        if self._stderr_task:
            self._stderr_task.cancel()


async def _kill_group(proc: asyncio.subprocess.Process) -> None:
    """End a local command and everything it started (it leads its own session)."""
    if proc.returncode is not None:
        return
    for sig, wait in ((signal.SIGTERM, KILL_GRACE_S), (signal.SIGKILL, 5.0)):
        try:
            os.killpg(proc.pid, sig)
        except ProcessLookupError:
            pass
        try:
            await asyncio.wait_for(asyncio.shield(proc.wait()), wait)
            return
        except asyncio.TimeoutError:
            continue


class LocalHost(Host):
    kind = "local"

    @property
    def address(self) -> str:
        return "local"

    def _full_env(self) -> dict[str, str]:
        env = dict(os.environ)
        env.update(self._env())
        prefix = self.config.path_prefix()
        if prefix is not None:
            env["PATH"] = f"{prefix}:{env.get('PATH', '')}"
        return env

    async def _spawn(self, argv: list[str], stdin: Any) -> asyncio.subprocess.Process:
        try:
            return await asyncio.create_subprocess_exec(
                *argv,
                stdin=stdin,
                stdout=asyncio.subprocess.PIPE,
                stderr=asyncio.subprocess.PIPE,
                env=self._full_env(),
                start_new_session=True,
                limit=LINE_LIMIT,
            )
        except FileNotFoundError as exc:
            raise HostError(f"{argv[0]}: command not found on {self.name}", None) from exc

    async def run(self, argv: Sequence[str], timeout: float = 30.0, input: str | None = None) -> Result:
        argv = _validate_argv(argv)
        try:
            proc = await self._spawn(
                argv, asyncio.subprocess.PIPE if input is not None else asyncio.subprocess.DEVNULL
            )
        except HostError as exc:
            return Result(argv, 127, "", exc.message)
        try:
            out, err = await asyncio.wait_for(
                proc.communicate(input.encode() if input is not None else None), timeout
            )
        except (asyncio.TimeoutError, asyncio.CancelledError) as exc:
            await _kill_group(proc)
            if isinstance(exc, asyncio.CancelledError):
                raise
            raise CommandTimeout(f"{shlex.join(argv)[:120]}: timed out after {timeout:g}s on {self.name}")
        return Result(argv, proc.returncode, out.decode("utf-8", "replace"), err.decode("utf-8", "replace"))

    def stream(self, argv: Sequence[str]) -> Stream:
        return _LocalStream(self, _validate_argv(argv))


# ------------------------------------------------------------------ SSH


@dataclass
class _Backoff:
    """Reconnect delays: 1, 2, 4 … 30 s after consecutive failures."""

    failures: int = 0
    next_attempt: float = 0.0
    last_error: HostUnreachable | None = None
    base: float = 1.0
    cap: float = 30.0

    def failed(self, error: HostUnreachable) -> None:
        self.failures += 1
        self.last_error = error
        self.next_attempt = time.monotonic() + min(self.cap, self.base * 2 ** (self.failures - 1))

    def succeeded(self) -> None:
        self.failures = 0
        self.next_attempt = 0.0
        self.last_error = None

    def wait_left(self) -> float:
        return max(0.0, self.next_attempt - time.monotonic())


class _SshStream(Stream):
    def __init__(self, host: "SshHost", command: str):
        super().__init__()
        self._host = host
        self._command = command
        self._proc: Any = None
        self._stderr_task: asyncio.Task | None = None

    async def _start(self) -> None:
        self._proc = await self._host._open(self._command)
        self._stderr_task = asyncio.create_task(self._drain_stderr())

    async def _drain_stderr(self) -> None:
        try:
            async for line in self._proc.stderr:
                self.stderr_tail.append(line.rstrip("\n"))
        except Exception:  # the connection went away; the stdout side reports it
            pass

    async def _readline(self) -> str:
        try:
            return await self._proc.stdout.readline()
        except Exception as exc:  # connection lost mid-stream
            self._host._connection_lost(exc)
            raise HostUnreachable(f"{self._host.name}: connection lost: {exc}") from exc

    async def _finish(self) -> None:
        try:
            await self._proc.wait_closed()
        except Exception:
            pass
        self.returncode = self._proc.returncode
        if self._stderr_task:
            await asyncio.wait({self._stderr_task}, timeout=1.0)

    async def _terminate(self) -> None:
        if self._proc is None:
            return
        self._proc.close()  # EOF on the remote stdin: the guard ends the command
        try:
            await asyncio.wait_for(self._proc.wait_closed(), 5.0)
        except Exception:
            pass
        if self._stderr_task:
            self._stderr_task.cancel()


class SshHost(Host):
    """One asyncssh connection per host; channels multiplexed on it.

    ``~/.ssh/config``, the agent, identity files and ``~/.ssh/known_hosts`` are
    honoured by asyncssh's defaults. ``connect_options`` overrides them (tests pass a
    throwaway key and known_hosts file).
    """

    kind = "ssh"

    def __init__(
        self,
        config: HostConfig,
        connect_options: dict[str, Any] | None = None,
        connect_timeout: float = 8.0,
        keepalive_interval: float = 5.0,
        keepalive_count_max: int = 3,
    ):
        super().__init__(config)
        assert config.ssh is not None
        self.target = config.ssh
        self._options = dict(connect_options or {})
        self._connect_timeout = connect_timeout
        self._keepalive = (keepalive_interval, keepalive_count_max)
        self._conn: asyncssh.SSHClientConnection | None = None
        self._lock = asyncio.Lock()
        self.backoff = _Backoff()
        self.connects = 0  # successful connections so far (reconnects show here)

    # -- connection ----------------------------------------------------------

    def _connect_kwargs(self) -> dict[str, Any]:
        # AES-GCM first: the cryptography library does it in C with AES-NI, while
        # asyncssh's chacha20-poly1305 sets up keys in Python for every packet (a
        # watched fleet sends many small packets). Every default algorithm stays allowed.
        kwargs: dict[str, Any] = {"encryption_algs": PREFERRED_CIPHERS}
        if self.target.port is not None:
            kwargs["port"] = self.target.port
        if self.target.user is not None:
            kwargs["username"] = self.target.user
        kwargs.update(self._options)
        return kwargs

    @property
    def connected(self) -> bool:
        return self._conn is not None and not self._conn.is_closed()

    def _connection_lost(self, exc: BaseException | None = None) -> None:
        conn, self._conn = self._conn, None
        if conn is not None:
            conn.abort()

    @contextlib.asynccontextmanager
    async def forward(self, address: str, port: int) -> AsyncIterator[tuple[str, int]]:
        """An SSH local port forward (127.0.0.1, an ephemeral port) to `address`:`port` as seen
        from the host, over the host's one connection."""
        import asyncssh

        conn = await self.connection()
        try:
            listener = await conn.forward_local_port("127.0.0.1", 0, address, port)
        except (OSError, asyncssh.Error) as exc:
            raise HostError(f"{self.name}: cannot forward to {address}:{port}: {exc}") from exc
        try:
            yield "127.0.0.1", listener.get_port()
        finally:
            listener.close()
            await listener.wait_closed()

    async def connection(self) -> "asyncssh.SSHClientConnection":
        if self.connected:
            assert self._conn is not None
            return self._conn
        async with self._lock:
            if self.connected:
                assert self._conn is not None
                return self._conn
            if self.backoff.last_error is not None and self.backoff.wait_left() > 0:
                err = self.backoff.last_error
                raise HostUnreachable(err.message, err.hint)
            try:
                self._conn = await self._connect()
            except HostUnreachable as exc:
                self.backoff.failed(exc)
                raise
            self.backoff.succeeded()
            self.connects += 1
            return self._conn

    async def _connect(self) -> "asyncssh.SSHClientConnection":
        import asyncssh

        where = self.target.display()
        try:
            return await asyncio.wait_for(
                asyncssh.connect(
                    self.target.host,
                    keepalive_interval=self._keepalive[0],
                    keepalive_count_max=self._keepalive[1],
                    connect_timeout=self._connect_timeout,
                    **self._connect_kwargs(),
                ),
                self._connect_timeout + 2,
            )
        except asyncssh.HostKeyNotVerifiable as exc:
            raise await self._host_key_error(exc) from exc
        except asyncssh.PermissionDenied as exc:
            raise HostUnreachable(
                f"{self.name}: SSH login to {where} refused ({exc.reason})",
                "check the user and that your key is in the host's authorized_keys "
                "(or loaded in ssh-agent)",
            ) from exc
        except (asyncio.TimeoutError, TimeoutError) as exc:
            raise HostUnreachable(
                f"{self.name}: no answer from {where} within {self._connect_timeout:g}s",
                "the host or network is down, or a firewall drops the traffic; gpuops keeps retrying",
            ) from exc
        except asyncssh.Error as exc:
            raise HostUnreachable(f"{self.name}: SSH to {where} failed: {exc.reason}", None) from exc
        except OSError as exc:
            raise HostUnreachable(
                f"{self.name}: cannot connect to {where}: {exc.strerror or exc}",
                "is sshd running there, and is the address/port right?",
            ) from exc

    async def _host_key_error(self, exc: Exception) -> HostKeyRefused:
        """Refuse an unknown or changed host key, naming its fingerprint."""
        import asyncssh

        host = self.target.host
        port = self.target.port or 22
        fingerprint = algorithm = None
        try:
            key = await asyncio.wait_for(
                asyncssh.get_server_host_key(
                    host, self.target.port or (), config=self._options.get("config", ())
                ),
                self._connect_timeout,
            )
            if key is not None:
                fingerprint = key.get_fingerprint()
                algorithm = key.get_algorithm()
        except Exception:
            pass
        known_hosts = self._options.get("known_hosts")
        kh_path = known_hosts if isinstance(known_hosts, (str, Path)) else "~/.ssh/known_hosts"
        changed = _known_hosts_lists(Path(os.path.expanduser(str(kh_path))), host, port)
        shown = f"{algorithm} {fingerprint}" if fingerprint else "fingerprint unavailable"
        hostspec = host if port == 22 else f"[{host}]:{port}"
        keyscan = shlex.join(
            ["ssh-keyscan", *(["-p", str(port)] if port != 22 else []),
             *(["-t", algorithm.replace("ssh-", "")] if algorithm else []), host]
        )
        if changed:
            return HostKeyRefused(
                f"{self.name}: host key for {hostspec} CHANGED ({shown}); refusing to connect",
                f"if the change is expected: ssh-keygen -R {shlex.quote(hostspec)} "
                f"-f {kh_path} && {keyscan} >> {kh_path}",
                fingerprint,
            )
        return HostKeyRefused(
            f"{self.name}: host key for {hostspec} is not known ({shown}); refusing to connect",
            f"if that fingerprint is right: {keyscan} >> {kh_path}",
            fingerprint,
        )

    # -- commands ------------------------------------------------------------

    def _command(self, argv: list[str], guard: str) -> str:
        env = [f"{k}={v}" for k, v in self._env().items()]
        prefix = self.config.path_prefix()
        if prefix is not None:
            env.insert(0, f"GPUOPS_PATH_PREFIX={prefix}")
        head = ["env", *env] if env else []
        return shlex.join([*head, "sh", "-c", guard, "gpuops", *argv])

    async def _open(self, command: str) -> Any:
        # A connection that died since its last use fails before the command
        # starts, so one retry on a fresh connection cannot run anything twice.
        for attempt in (1, 2):
            conn = await self.connection()
            try:
                return await conn.create_process(command, encoding="utf-8", errors="replace")
            except Exception as exc:
                self._connection_lost(exc)
                if attempt == 2:
                    raise HostUnreachable(f"{self.name}: connection lost: {exc}") from exc

    async def run(self, argv: Sequence[str], timeout: float = 30.0, input: str | None = None) -> Result:
        argv = _validate_argv(argv)
        proc = await self._open(self._command(argv, _GUARD if input is None else _PLAIN))
        try:
            if input is not None:
                proc.stdin.write(input)
                proc.stdin.write_eof()
            completed = await asyncio.wait_for(proc.wait(), timeout)
        except asyncio.TimeoutError:
            proc.close()
            raise CommandTimeout(f"{shlex.join(argv)[:120]}: timed out after {timeout:g}s on {self.name}")
        except asyncio.CancelledError:
            proc.close()
            raise
        except Exception as exc:
            proc.close()
            self._connection_lost(exc)
            raise HostUnreachable(f"{self.name}: connection lost: {exc}") from exc
        return Result(argv, completed.exit_status, completed.stdout or "", completed.stderr or "")

    def stream(self, argv: Sequence[str]) -> Stream:
        return _SshStream(self, self._command(_validate_argv(argv), _GUARD))

    async def close(self) -> None:
        if self._conn is not None:
            self._conn.close()
            try:
                await asyncio.wait_for(self._conn.wait_closed(), 2.0)
            except Exception:
                pass
            self._conn = None


def _known_hosts_lists(path: Path, host: str, port: int) -> bool:
    """True when known_hosts already holds a key for this host (so a refusal means it changed)."""
    try:
        import asyncssh

        known = asyncssh.read_known_hosts(str(path))
    except Exception:
        return False
    try:
        trusted = known.match(host, "", port)[0]
    except Exception:
        return False
    return bool(trusted)


def host_python(host: Host) -> str:
    """The interpreter gpuops runs its scripts with on a host: its `python` key, else
    gpuops' own interpreter locally and `python3` elsewhere."""
    if host.config.python:
        return host.config.python
    return sys.executable if isinstance(host, LocalHost) else "python3"


_INLINE = re.compile(r"^from \.common import .*# gpuops: inlined when sent to a host\n", re.M)


@functools.cache
def script_source(module: ModuleType) -> str:
    """The text of one of gpuops' programs, as sent to hosts (``python -c``): standalone, with the
    shared helpers of ``programs/common.py`` in place of its import of them."""
    path = Path(module.__file__ or "")
    text = path.read_text()
    if _INLINE.search(text):
        common = (path.parent / "common.py").read_text()
        body = common[common.index('"""', 3) + 3:]  # after its docstring
        text = _INLINE.sub(lambda _m: body.lstrip("\n") + "\n", text, count=1)
    return text


def make_host(config: HostConfig, connect_options: dict[str, Any] | None = None) -> Host:
    if config.local:
        return LocalHost(config)
    return SshHost(config, connect_options=connect_options)
