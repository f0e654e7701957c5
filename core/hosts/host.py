"""Where commands run: the local machine or a host over SSH.

Every command is an argv list. Remote commands are quoted with ``shlex.join`` and
run under a small ``sh`` guard (``_GUARD``) so that closing the channel — a
cancelled stream, a timeout, a dropped connection — ends the remote process
group too: without a pty, sshd leaves a remote command running after its channel
closes, and it ignores signal requests for root sessions. The guard starts the
command in its own session and watches the channel's stdin; end-of-file there
means gpuops went away, and the guard kills the command's process group.

Local commands run under the same guard, their lifeline a pipe only gpuops holds: a SIGTERM,
SIGHUP or even a SIGKILL of gpuops closes it, and the guard ends what gpuops started (a
follower, a download) instead of leaving it to run on in a session of its own.
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
from typing import TYPE_CHECKING, Any, AsyncIterator, Callable, Sequence, cast

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
# Over SSH the host's environment (its `env`, an HF_TOKEN say) comes first on stdin, one NAME=VALUE a
# line up to an empty line, never in the command line (every user of the host reads argv in
# /proc/PID/cmdline for as long as the command runs). `read` takes a pipe a byte at a time, so what
# follows the empty line is left for the guard (its lifeline) or the command (its input).
_ENV_IN = r"""
while IFS= read -r gpuops_kv && [ -n "$gpuops_kv" ]; do export "$gpuops_kv"; done
unset gpuops_kv
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

    Use as ``async with host.stream(argv) as s: async for line in s: ...`` (or, for a callback that
    takes each line as it arrives, ``await s.each_line(handle)``).
    After the end, ``returncode`` and ``stderr_tail`` tell how it ended. A `binary` stream's lines
    are the bytes as they came (for a reader that decodes them itself: JSON lines, which msgspec
    reads from bytes, skipping a decode to text and back); else text, decoded as UTF-8 with
    replacement.
    """

    def __init__(self, binary: bool = False) -> None:
        self.binary = binary
        self.returncode: int | None = None
        self.stderr_tail: deque[str] = deque(maxlen=STDERR_TAIL)
        self._started = False
        self._closed = False

    async def _start(self) -> None:  # pragma: no cover - abstract
        raise NotImplementedError

    async def _readline(self) -> Any:  # pragma: no cover - abstract
        """The next line with its newline (str, or bytes for a binary stream); empty at the end."""
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

    def __aiter__(self) -> AsyncIterator[Any]:
        return self

    async def _next_line(self) -> Any:
        """The next line without its newline; None at the end."""
        line = await self._readline()
        if not line:
            return None
        return line.rstrip(b"\n" if self.binary else "\n")

    async def __anext__(self) -> Any:
        await self._ensure_started()
        line = await self._next_line()
        if line is None:
            await self._finish()
            raise StopAsyncIteration
        return line

    async def each_line(self, handle: Callable[[Any], Any]) -> None:
        """Every line (without its newline) to ``handle(line)`` as it comes, until the output ends;
        then ``returncode`` and ``stderr_tail`` tell how it ended, as after ``async for``.

        Over SSH the lines are handed over from the connection's own data callback, as the chunk
        that holds them arrives: no task wakes for a line (a watched fleet's reporters send a
        hundred a second). So `handle` must be quick and must not block; an exception it raises
        stops the stream's reading and is raised here."""
        async for line in self:
            handle(line)

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

    def stream(self, argv: Sequence[str], binary: bool = False) -> Stream:
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
    def __init__(self, host: "LocalHost", argv: list[str], binary: bool = False):
        super().__init__(binary)
        self._host = host
        self._argv = argv
        self._proc: asyncio.subprocess.Process | None = None
        self._stderr_task: asyncio.Task[None] | None = None

    async def _start(self) -> None:
        self._proc = await self._host._spawn(self._argv)
        self._stderr_task = asyncio.create_task(self._drain_stderr())

    async def _drain_stderr(self) -> None:
        assert self._proc and self._proc.stderr
        async for raw in self._proc.stderr:
            self.stderr_tail.append(raw.decode("utf-8", "replace").rstrip("\n"))

    async def _readline(self) -> Any:
        assert self._proc and self._proc.stdout
        raw = await self._proc.stdout.readline()
        return raw if self.binary else raw.decode("utf-8", "replace")

    async def _finish(self) -> None:
        assert self._proc
        self.returncode = await self._proc.wait()
        if self._proc.stdin is not None:
            self._proc.stdin.close()  # the lifeline of a command that ended
        if self._stderr_task:
            await self._stderr_task

    async def _terminate(self) -> None:
        if self._proc is not None:
            await _end_local(self._proc, guarded=True)
            self.returncode = self._proc.returncode
        if self._stderr_task:
            self._stderr_task.cancel()


async def _end_local(proc: asyncio.subprocess.Process, guarded: bool) -> None:
    """End a local command and everything it started. A guarded one as over SSH: its lifeline
    closed, the guard ends the command's process group (TERM, then KILL) and exits; the guard's own
    group is killed if it lingers (an unguarded one's group at once)."""
    if proc.stdin is not None:
        proc.stdin.close()  # (also once it ended: a pipe left open keeps its transport from closing)
    if proc.returncode is not None:
        return
    try:
        if guarded and proc.stdin is not None:
            try:
                await asyncio.wait_for(asyncio.shield(proc.wait()), KILL_GRACE_S + 3.0)
                return
            except asyncio.TimeoutError:
                pass
        await _kill_group(proc)
    except asyncio.CancelledError:
        # cancelled while waiting (a loop shutting down): the guard is left to end the command
        # (its lifeline is closed), and the transport is closed now, not collected after the loop
        transport = getattr(proc, "_transport", None)
        if transport is not None:
            transport.close()
        raise


async def _kill_group(proc: asyncio.subprocess.Process) -> None:
    """End a local command's session leader and its group."""
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


def _found(command: str, path: str) -> bool:
    """Whether `command` can be run (a path, or a name on `path`): what an exec would find."""
    import shutil

    if "/" in command:
        return os.access(command, os.X_OK) and not os.path.isdir(command)
    return shutil.which(command, path=path) is not None


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

    async def _spawn(self, argv: list[str], guarded: bool = True) -> asyncio.subprocess.Process:
        """`argv` in a session of its own; `guarded`: under the guard, its stdin the lifeline (else
        stdin is the command's: a short write, as over SSH)."""
        env = self._full_env()
        if not _found(argv[0], env.get("PATH", "")):
            raise HostError(f"{argv[0]}: command not found on {self.name}", None)
        try:
            return await asyncio.create_subprocess_exec(
                *(["sh", "-c", _GUARD, "gpuops", *argv] if guarded else argv),
                stdin=asyncio.subprocess.PIPE,
                stdout=asyncio.subprocess.PIPE,
                stderr=asyncio.subprocess.PIPE,
                env=env,
                start_new_session=True,
                limit=LINE_LIMIT,
            )
        except FileNotFoundError as exc:
            raise HostError(f"{argv[0]}: command not found on {self.name}", None) from exc

    async def run(self, argv: Sequence[str], timeout: float = 30.0, input: str | None = None) -> Result:
        argv = _validate_argv(argv)
        guarded = input is None
        try:
            proc = await self._spawn(argv, guarded=guarded)
        except HostError as exc:
            return Result(argv, 127, "", exc.message)
        try:
            if guarded:  # the lifeline stays open while the command runs (communicate() would close it)
                assert proc.stdout is not None and proc.stderr is not None
                out, err, _ = await asyncio.wait_for(
                    asyncio.gather(proc.stdout.read(), proc.stderr.read(), proc.wait()), timeout)
                if proc.stdin is not None:
                    proc.stdin.close()
            else:
                out, err = await asyncio.wait_for(proc.communicate(input.encode() if input is not None else None),
                                                  timeout)
        except (asyncio.TimeoutError, asyncio.CancelledError) as exc:
            await _end_local(proc, guarded)
            if isinstance(exc, asyncio.CancelledError):
                raise
            raise CommandTimeout(f"{shlex.join(argv)[:120]}: timed out after {timeout:g}s on {self.name}") from None
        return Result(argv, proc.returncode, out.decode("utf-8", "replace"), err.decode("utf-8", "replace"))

    def stream(self, argv: Sequence[str], binary: bool = False) -> Stream:
        return _LocalStream(self, _validate_argv(argv), binary)


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


# Bytes of lines a reader has not taken yet above which a streamed channel stops reading (its window
# then stops the sender), and below which it reads again.
STREAM_HIGH_WATER = 4 * 1024 * 1024
STREAM_LOW_WATER = STREAM_HIGH_WATER // 4


class _LineSession:
    """The session of a streamed command's SSH channel: its stdout as lines, split here from the
    chunks the channel delivers (each line decoded once, as UTF-8 with replacement), and the last
    lines of its stderr.

    asyncssh's process session decodes every chunk, buffers it and wakes a reader task, which then
    looks for the newline: per line, a hand-over to a task and a search of its buffer. Here a chunk's
    lines go to a queue that a reader takes from without waiting while it holds any or, once the
    reader has handed over a callback (`Stream.each_line`), straight to that callback from the
    channel's data callback. A reader slower than the command stops the channel's reading while more
    than STREAM_HIGH_WATER bytes of lines wait (memory stays bounded; the SSH window holds the rest
    back at the sender). A partial line longer than LINE_LIMIT is handed over as a line of its own.

    asyncssh's session interface: connection_made, session_started, data_received, eof_received,
    exit_status_received, exit_signal_received, connection_lost, pause/resume_writing."""

    def __init__(self, binary: bool = False) -> None:
        self.binary = binary  # lines as the bytes that came (see Stream)
        self.chan: Any = None
        self.lines: deque[Any] = deque()
        self.stderr_tail: deque[str] = deque(maxlen=STDERR_TAIL)
        self.eof = False  # stdout ended (or the channel closed)
        self.lost: BaseException | None = None  # the connection's loss, when the channel closed with it
        self.failed: BaseException | None = None  # what the callback raised
        self._partial = b""
        self._err_partial = b""
        self._queued = 0  # about the bytes of the lines in `lines`
        self._paused = False
        self._waiter: asyncio.Future[None] | None = None
        self._sink: Callable[[Any], Any] | None = None

    # -- asyncssh's side

    def connection_made(self, chan: Any) -> None:
        self.chan = chan

    def session_started(self) -> None:
        pass

    def pause_writing(self) -> None:
        pass

    def resume_writing(self) -> None:
        pass

    def xon_xoff_requested(self, client_can_do: bool) -> None:
        pass

    def exit_status_received(self, status: int) -> None:
        pass

    def exit_signal_received(self, signal: str, core_dumped: bool, msg: str, lang: str) -> None:
        pass

    def data_received(self, data: bytes, datatype: Any) -> None:
        if datatype:  # stderr (the only extended data a session has)
            self._stderr(data)
            return
        if data.endswith(b"\n"):  # (the usual chunk: whole lines) decoded at once, then split:
            # "\n" ends every UTF-8 sequence, so this is each line decoded on its own, with one copy
            if self._partial:
                data, self._partial = self._partial + data, b""
            text: Any = data if self.binary else data.decode("utf-8", "replace")
            nl: Any = b"\n" if self.binary else "\n"
            if text.find(nl) == len(text) - 1:  # one line (a reporter's, each second)
                self._deliver([text[:-1]], len(data))
            else:
                lines = text.split(nl)
                lines.pop()  # ("" after the last newline)
                self._deliver(lines, len(data))
            return
        if b"\n" not in data:
            partial = self._partial = self._partial + data
            if len(partial) > LINE_LIMIT:
                self._partial = b""
                self._deliver([self._text(partial)], len(partial))
            return
        if self._partial:
            data = self._partial + data
        *done, self._partial = data.split(b"\n")
        self._deliver(done if self.binary else [line.decode("utf-8", "replace") for line in done],
                      len(data) - len(self._partial))

    def _text(self, line: bytes) -> Any:
        """A line as this session hands it over."""
        return line if self.binary else line.decode("utf-8", "replace")

    def eof_received(self) -> bool:
        self._end()
        return True  # (our side stays open: the command's stdin is closed by closing the channel)

    def connection_lost(self, exc: BaseException | None) -> None:
        if exc is not None and not self.eof:
            self.lost = exc
        self._end()
        if self._err_partial:
            self.stderr_tail.append(self._err_partial.decode("utf-8", "replace"))
            self._err_partial = b""

    def _end(self) -> None:
        if self.eof:
            return
        if self._partial:  # a last line without a newline
            partial, self._partial = self._partial, b""
            self._deliver([self._text(partial)], len(partial))
        self.eof = True
        self._wake()

    def _stderr(self, data: bytes) -> None:
        if self._err_partial:
            data = self._err_partial + data
        *done, partial = data.split(b"\n")
        self._err_partial = partial[-LINE_LIMIT:]
        self.stderr_tail.extend(line.decode("utf-8", "replace") for line in done[-STDERR_TAIL:])

    def _deliver(self, lines: list[Any], size: int) -> None:
        sink = self._sink
        if sink is not None:
            try:
                for line in lines:
                    sink(line)
            except BaseException as exc:  # (the reader raises it: nothing more is handed over)
                self._sink, self.failed = None, exc
                self._pause()
                self._wake()
            return
        self.lines.extend(lines)
        self._queued += size
        if self._queued > STREAM_HIGH_WATER:
            self._pause()
        self._wake()

    def _pause(self) -> None:
        if not self._paused and self.chan is not None:
            self._paused = True
            self.chan.pause_reading()

    def _resume(self) -> None:
        if self._paused and self.failed is None:
            self._paused = False
            self.chan.resume_reading()

    def _wake(self) -> None:
        waiter = self._waiter
        if waiter is not None and not waiter.done():
            waiter.set_result(None)

    async def _wait(self) -> None:
        self._waiter = asyncio.get_running_loop().create_future()
        try:
            await self._waiter
        finally:
            self._waiter = None

    # -- the reader's side

    async def next_line(self) -> Any:
        """The next line; None at the end (then `lost` says whether the connection was)."""
        while True:
            lines = self.lines
            if lines:
                line = lines.popleft()
                if self._paused:
                    self._queued -= len(line) + 1
                    if self._queued < STREAM_LOW_WATER or not lines:
                        self._resume()
                if not lines:
                    self._queued = 0
                return line
            if self.eof or self.failed is not None:
                return None
            await self._wait()

    async def each(self, handle: Callable[[Any], Any]) -> None:
        """Every line to `handle` until the end: those waiting now, then each as it arrives, from
        `data_received`. Raises what `handle` raised."""
        lines = self.lines
        while lines:
            handle(lines.popleft())
        self._queued = 0
        self._sink = handle
        try:
            self._resume()  # (what the channel held back comes to `handle` now)
            while not self.eof and self.failed is None:
                await self._wait()
        finally:
            self._sink = None
        if self.failed is not None:
            raise self.failed


class _SshStream(Stream):
    def __init__(self, host: "SshHost", command: str, binary: bool = False):
        super().__init__(binary)
        self._host = host
        self._command = command
        self._chan: Any = None
        self._session: _LineSession | None = None

    async def _start(self) -> None:
        self._chan, self._session = await self._host._open_session(self._command, self.binary)
        self.stderr_tail = self._session.stderr_tail

    def _check_lost(self) -> None:
        assert self._session is not None
        exc = self._session.lost
        if exc is not None:  # the connection was lost mid-stream
            self._host._connection_lost(exc)
            raise HostUnreachable(f"{self._host.name}: connection lost: {exc}") from exc

    async def _next_line(self) -> Any:
        assert self._session is not None
        line = await self._session.next_line()
        if line is None:
            self._check_lost()
        return line

    async def each_line(self, handle: Callable[[Any], Any]) -> None:
        await self._ensure_started()
        assert self._session is not None
        await self._session.each(handle)
        self._check_lost()
        await self._finish()

    async def _finish(self) -> None:
        try:
            await self._chan.wait_closed()
        except Exception:
            pass
        self.returncode = self._chan.get_returncode()

    async def _terminate(self) -> None:
        if self._chan is None:
            return
        self._chan.close()  # EOF on the remote stdin: the guard ends the command
        try:
            await asyncio.wait_for(self._chan.wait_closed(), 5.0)
        except Exception:
            pass


def _lazy_keepalive(conn: Any) -> None:
    """The connection's keepalive, re-armed lazily: asyncssh cancels its keepalive timer and starts
    a new one on every read from the socket (a watched host's reporter line is one, so a fleet makes
    a hundred timers a second). Here a read only marks the connection heard from; when the timer
    fires, a connection heard from since it was armed is armed again for a full interval, and only a
    connection silent for that whole interval gets asyncssh's own handling (a keepalive request;
    after `keepalive_count_max` unanswered ones, the connection is closed as lost). So a dead
    connection is still found, at most one interval later than asyncssh alone would find it.

    Works on asyncssh's connection internals (its `_reset_keepalive_timer`, `_keepalive_timer_callback`
    and `_keepalive_timer`, asyncssh 2.14 to 2.24 at least); another asyncssh keeps its own behaviour."""
    cls = type(conn)
    reset = getattr(cls, "_reset_keepalive_timer", None)
    fire = getattr(cls, "_keepalive_timer_callback", None)
    if reset is None or fire is None or not hasattr(conn, "_keepalive_timer") or not hasattr(conn, "_loop"):
        return
    heard = False

    def read() -> None:  # instead of asyncssh's: per read from the socket
        nonlocal heard
        if conn._keepalive_timer is not None:
            heard = True
        elif conn._keepalive_interval:  # not armed (a keepalive just set, say): as asyncssh does
            reset(conn)

    def fired() -> None:
        nonlocal heard
        if heard and conn._keepalive_interval:
            heard = False
            conn._keepalive_timer = conn._loop.call_later(conn._keepalive_interval, fired)
        else:
            fire(conn)  # (asyncssh arms its next timer through the attribute: this function again)

    conn._reset_keepalive_timer = read
    conn._keepalive_timer_callback = fired
    if conn._keepalive_timer is not None:  # the timer armed at login calls back here
        conn._keepalive_timer.cancel()
        conn._keepalive_timer = None
        reset(conn)


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
                # the same error again (a refused host key stays a HostKeyRefused, fingerprint and all)
                raise self.backoff.last_error.with_traceback(None)
            try:
                self._conn = await self._connect()
            except HostUnreachable as exc:
                self.backoff.failed(exc)
                raise
            _lazy_keepalive(self._conn)
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
            refused = await self._key_type_refusal(exc)
            if refused is not None:
                raise refused from exc
            raise HostUnreachable(f"{self.name}: SSH to {where} failed: {exc.reason}", None) from exc
        except OSError as exc:
            refused = await self._key_type_refusal(exc)
            if refused is not None:
                raise refused from exc
            raise HostUnreachable(
                f"{self.name}: cannot connect to {where}: {exc.strerror or exc}",
                "is sshd running there, and is the address/port right?",
            ) from exc

    async def _host_key_error(self, exc: Exception) -> HostKeyRefused:
        """Refuse a host key that known_hosts does not trust: CHANGED, REVOKED or UNKNOWN, with the
        server's fingerprint and the one command that fixes it. Nothing is ever written."""
        trust = await self._trust()
        key = await self._server_key()
        reason = str(getattr(exc, "reason", "") or exc)
        return _host_key_verdict(self.name, trust, key, revoked_hint="revoked" in reason.lower(), reason=reason)

    async def _key_type_refusal(self, exc: BaseException) -> HostKeyRefused | None:
        """A CHANGED (or REVOKED) key behind a lost connection: asyncssh offers the server only the
        algorithms of the keys known_hosts trusts for it, so a server re-keyed to another type (an
        ecdsa key known, ed25519 offered now) closes the connection during key exchange instead of
        presenting a key to refuse. Fetch its key without that restriction and compare."""
        import asyncssh

        lost = (asyncssh.ConnectionLost, asyncssh.KeyExchangeFailed, asyncssh.ProtocolError,
                ConnectionResetError, BrokenPipeError, asyncio.IncompleteReadError)
        if not isinstance(exc, lost):
            return None
        try:
            trust = await self._trust()
        except Exception:
            return None
        if not trust.trusted:
            if trust.authorities:  # only certificate algorithms were offered: the server has no certificate
                return _ca_only_verdict(self.name, trust, await self._server_key())
            return None  # every algorithm was offered: a plain reset, not a key problem
        key = await self._server_key()
        if key is None or _same_key(key, (e.key for e in trust.trusted)):
            return None
        return _host_key_verdict(self.name, trust, key, revoked_hint=False, reason=str(exc))

    async def _server_key(self) -> Any:
        """The key the server presents when any algorithm is allowed (None when it cannot be read).
        The target as configured, so that ssh_config resolves it as it did for the connection."""
        import asyncssh

        try:
            return await asyncio.wait_for(
                asyncssh.get_server_host_key(
                    self.target.host, self.target.port or (), config=self._options.get("config", ())
                ),
                self._connect_timeout,
            )
        except Exception:
            return None

    async def _trust(self) -> "_Trust":
        """Where asyncssh looked this host's key up: ssh_config resolved (HostName, Port,
        HostKeyAlias, UserKnownHostsFile) exactly as the connection did, and what known_hosts
        lists for it, line by line."""
        host, port, alias = self.target.host, self.target.port or 22, None
        known: Any = self._options.get("known_hosts", ())
        try:
            import asyncssh

            keys = ("config", "known_hosts", "host_key_alias", "username", "port")
            kwargs = {k: v for k, v in self._connect_kwargs().items() if k in keys}
            kwargs.setdefault("config", ())  # as asyncssh.connect: () loads ~/.ssh/config, None nothing
            opts = await asyncssh.SSHClientConnectionOptions.construct(
                host=self.target.host, client_keys=None, agent_path=None, **kwargs
            )
            host, port, alias, known = opts.host, int(opts.port), opts.host_key_alias, opts.known_hosts
        except Exception:
            pass
        addr = await _resolve(host, port)
        return _Trust.look_up(host, port, alias, addr, known)

    # -- commands ------------------------------------------------------------

    def _env_lines(self) -> str:
        """The host's environment as sent on stdin before anything else ("" when it has none)."""
        env = [f"{k}={v}" for k, v in self._env().items()]
        prefix = self.config.path_prefix()
        if prefix is not None:
            env.insert(0, f"GPUOPS_PATH_PREFIX={prefix}")
        return "".join(f"{line}\n" for line in env) + "\n" if env else ""

    def _command(self, argv: list[str], guard: str) -> str:
        """The command line: names and programs only; the environment's values travel on stdin."""
        return shlex.join(["sh", "-c", (_ENV_IN if self._env_lines() else "") + guard, "gpuops", *argv])

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

    async def _open_session(self, command: str, binary: bool = False) -> tuple[Any, _LineSession]:
        """A channel running `command`, its output read by a _LineSession (the retry as `_open`'s)."""
        for attempt in (1, 2):
            conn = await self.connection()
            try:
                chan, session = await conn.create_session(cast(Any, functools.partial(_LineSession, binary)),
                                                          command, encoding=None)
                env = self._env_lines()
                if env:
                    chan.write(env.encode())
                return chan, cast(_LineSession, session)
            except Exception as exc:
                self._connection_lost(exc)
                if attempt == 2:
                    raise HostUnreachable(f"{self.name}: connection lost: {exc}") from exc
        raise AssertionError("unreachable")  # pragma: no cover

    async def run(self, argv: Sequence[str], timeout: float = 30.0, input: str | None = None) -> Result:
        argv = _validate_argv(argv)
        proc = await self._open(self._command(argv, _GUARD if input is None else _PLAIN))
        try:
            env = self._env_lines()
            if env:
                proc.stdin.write(env)
            if input is not None:
                proc.stdin.write(input)
                proc.stdin.write_eof()
            completed = await asyncio.wait_for(proc.wait(), timeout)
        except asyncio.TimeoutError:
            proc.close()
            raise CommandTimeout(f"{shlex.join(argv)[:120]}: timed out after {timeout:g}s on {self.name}") from None
        except asyncio.CancelledError:
            proc.close()
            raise
        except Exception as exc:
            proc.close()
            self._connection_lost(exc)
            raise HostUnreachable(f"{self.name}: connection lost: {exc}") from exc
        return Result(argv, completed.exit_status, completed.stdout or "", completed.stderr or "")

    def stream(self, argv: Sequence[str], binary: bool = False) -> Stream:
        return _SshStream(self, self._command(_validate_argv(argv), _GUARD), binary)

    async def close(self) -> None:
        if self._conn is not None:
            self._conn.close()
            try:
                await asyncio.wait_for(self._conn.wait_closed(), 2.0)
            except Exception:
                pass
            self._conn = None


# ------------------------------------------------------------------ host keys


@dataclass
class _KnownKey:
    """One known_hosts entry that matches the host."""

    file: str | None  # None: a known_hosts given in memory (no file, no lines)
    line: int | None
    marker: str | None  # None (a trusted key), "revoked" or "cert-authority"
    key: Any  # asyncssh.SSHKey
    spec: str  # the name it is listed under, as `ssh-keygen -R` takes it
    with_port: bool  # matched as [host]:port (else as the bare host)

    def where(self) -> str:
        if self.file is None:
            return "the known_hosts given to gpuops"
        return f"{_show_path(self.file)} line {self.line}"


@dataclass
class _Trust:
    """What known_hosts says about one host, looked up as asyncssh does."""

    host: str  # HostName, after ssh_config
    port: int
    alias: str | None  # HostKeyAlias: the name keys are looked up and saved under
    files: list[str]  # the known_hosts files, in order (new keys go to the first)
    entries: list[_KnownKey]

    @property
    def lookup(self) -> str:
        """The name the host's key is looked up under, as ssh-keygen and known_hosts write it."""
        if self.alias:
            return self.alias
        return _bracket(self.host, self.port)

    @property
    def trusted(self) -> list[_KnownKey]:
        """The keys asyncssh trusts: those listed under [host]:port, else those under the host
        (asyncssh falls back to the bare name when nothing is listed with the port)."""
        with_port = [e for e in self.entries if e.with_port and e.marker != "revoked"]
        chosen = with_port or [e for e in self.entries if not e.with_port and e.marker != "revoked"]
        return [e for e in chosen if e.marker is None]

    @property
    def authorities(self) -> list[_KnownKey]:
        """The @cert-authority entries for the host (chosen as `trusted` chooses): a host key is
        trusted only as a certificate one of them signed."""
        with_port = [e for e in self.entries if e.with_port and e.marker != "revoked"]
        chosen = with_port or [e for e in self.entries if not e.with_port and e.marker != "revoked"]
        return [e for e in chosen if e.marker == "cert-authority"]

    @property
    def revoked(self) -> list[_KnownKey]:
        return [e for e in self.entries if e.marker == "revoked"]

    @classmethod
    def look_up(cls, host: str, port: int, alias: str | None, addr: str, known: Any) -> "_Trust":
        name = alias or host
        if known is None:  # host key checking switched off: nothing refuses a key
            return cls(host, port, alias, [], [])
        if isinstance(known, (str, os.PathLike)):
            known = [known]
        if not known:  # asyncssh's default
            known = ["~/.ssh/known_hosts"]
        if isinstance(known, (list, tuple)) and all(isinstance(f, (str, os.PathLike)) for f in known):
            files = [os.path.expanduser(os.fspath(f)) for f in known]
            entries = [e for f in files for e in _scan_known_hosts(f, name, addr, port)]
            return cls(host, port, alias, files, entries)
        return cls(host, port, alias, [], _match_in_memory(known, name, addr, port))


def _bracket(host: str, port: int) -> str:
    return host if port == 22 else f"[{host}]:{port}"


def _scan_known_hosts(path: str, name: str, addr: str, port: int) -> list[_KnownKey]:
    """The entries of one known_hosts file that match the host, with their line numbers: each line
    matched on its own with asyncssh's matcher (hashed names, patterns, markers as it reads them)."""
    import asyncssh

    try:
        text = Path(path).read_text(encoding="utf-8", errors="replace")
    except OSError:
        return []
    found: list[_KnownKey] = []
    for number, raw in enumerate(text.splitlines(), 1):
        line = raw.strip()
        if not line or line.startswith("#"):
            continue
        try:
            one = asyncssh.import_known_hosts(line)
        except Exception:
            continue  # a line asyncssh cannot read is one it ignores too
        for with_port in ((True, False) if port != 22 else (False,)):
            key, marker = _line_match(one, name, addr, port if with_port else None)
            if key is None:
                continue
            by_name = _line_match(one, name, "", port if with_port else None)[0] is not None
            listed = name if by_name or not addr else addr
            spec = _bracket(listed, port) if with_port else listed
            found.append(_KnownKey(path, number, marker, key, spec, with_port))
    return found


def _line_match(one: Any, name: str, addr: str, port: int | None) -> tuple[Any, str | None]:
    """The key of a one-line known_hosts when it matches (exactly this port, or the bare host when
    port is None), and its marker."""
    match = getattr(one, "_match", None)
    if match is None:  # pragma: no cover - an asyncssh without the exact matcher
        if port is not None:
            return None, None
        match = one.match
    try:
        host_keys, ca_keys, revoked = match(name, addr, port)[:3]
    except Exception:
        return None, None
    if revoked:
        return revoked[0], "revoked"
    if ca_keys:
        return ca_keys[0], "cert-authority"
    if host_keys:
        return host_keys[0], None
    return None, None


def _match_in_memory(known: Any, name: str, addr: str, port: int) -> list[_KnownKey]:
    """A known_hosts given as data (no file to point at): the keys only."""
    import asyncssh

    try:
        host_keys, ca_keys, revoked = asyncssh.match_known_hosts(known, name, addr, port if port != 22 else None)[:3]
    except Exception:
        return []
    spec = _bracket(name, port)
    return ([_KnownKey(None, None, None, k, spec, True) for k in host_keys]
            + [_KnownKey(None, None, "cert-authority", k, spec, True) for k in ca_keys]
            + [_KnownKey(None, None, "revoked", k, spec, True) for k in revoked])


async def _resolve(host: str, port: int) -> str:
    """The address asyncssh matches known_hosts against besides the name ("" when unknown)."""
    import ipaddress
    import socket

    try:
        return str(ipaddress.ip_address(host))
    except ValueError:
        pass
    try:
        infos = await asyncio.wait_for(
            asyncio.get_running_loop().getaddrinfo(host, port, type=socket.SOCK_STREAM), 2.0
        )
        return str(infos[0][4][0])
    except Exception:
        return ""


def _same_key(key: Any, keys: Any) -> bool:
    data = key.public_data
    return any(k.public_data == data for k in keys)


def _key_text(key: Any) -> str:
    return f"{key.get_algorithm()} {key.get_fingerprint()}"


_KEYSCAN_TYPES = {
    "ssh-ed25519": "ed25519", "ssh-rsa": "rsa", "ssh-dss": "dsa",
    "sk-ssh-ed25519@openssh.com": "ed25519-sk", "sk-ecdsa-sha2-nistp256@openssh.com": "ecdsa-sk",
}


def _keyscan_type(algorithm: str) -> str:
    """ssh-keyscan's -t name for a key algorithm."""
    if algorithm in _KEYSCAN_TYPES:
        return _KEYSCAN_TYPES[algorithm]
    return "ecdsa" if algorithm.startswith("ecdsa-") else algorithm


def _show_path(path: str) -> str:
    """A path as the operator types it in a shell: ~/... under $HOME, else quoted when needed."""
    home = os.path.expanduser("~").rstrip("/")
    if home and path.startswith(home + "/"):
        rest = path[len(home) + 1:]
        if shlex.quote(rest) == rest:
            return "~/" + rest
    return shlex.quote(path)


def _keyscan(trust: _Trust, key: Any) -> str:
    """The command that prints the server's key as a known_hosts line, under the lookup name."""
    argv = ["ssh-keyscan", "-p", str(trust.port)]
    if key is not None:
        argv += ["-t", _keyscan_type(key.get_algorithm())]
    command = shlex.join([*argv, trust.host])
    if trust.alias:  # keyscan names the line after the address: HostKeyAlias looks it up by the alias
        command += " | sed " + shlex.quote(f"s/^[^ ]*/{trust.alias}/")
    return command


def _ca_only_verdict(name: str, trust: _Trust, key: Any) -> HostKeyRefused:
    """known_hosts trusts only a certificate authority for the host, and the server presents a plain
    key (no certificate): asyncssh offered certificate algorithms only, so the server closed the
    connection. Say that, and how to trust the host's key (or certify it)."""
    ca = trust.authorities[0]
    more = f" (and {len(trust.authorities) - 1} more)" if len(trust.authorities) > 1 else ""
    shown = f"a plain {_key_text(key)} key" if key is not None else "no certificate gpuops could read back"
    target = _show_path(trust.files[0]) if trust.files else "your known_hosts"
    return HostKeyRefused(
        f"{name}: host key for {trust.lookup} not trusted: known_hosts trusts only a certificate authority "
        f"for it (@cert-authority, {ca.where()}{more}), and the server offers {shown} with no certificate "
        "signed by it; refusing to connect",
        f"have the host's admin sign its host key with that CA (sshd's HostCertificate), or, if the fingerprint is "
        f"the host's (ask its admin): {_keyscan(trust, key)} >> {target}",
        key.get_fingerprint() if key is not None else None,
    )


def _host_key_verdict(name: str, trust: _Trust, key: Any, revoked_hint: bool, reason: str) -> HostKeyRefused:
    """CHANGED, REVOKED or UNKNOWN: one line, the server's fingerprint, and the command that fixes it
    (none for a revoked key: that is for the host's admin to settle)."""
    spec = trust.lookup
    fingerprint = key.get_fingerprint() if key is not None else None
    shown = _key_text(key) if key is not None else "a key gpuops could not read back"
    keyscan = _keyscan(trust, key)
    target = _show_path(trust.files[0]) if trust.files else "your known_hosts"

    files = ", ".join(_show_path(f) for f in trust.files) or "the known_hosts given to gpuops"
    revoked = [e for e in trust.revoked if key is not None and _same_key(key, [e.key])]
    if revoked or (key is None and revoked_hint):  # the key unreadable now: asyncssh's word for it
        where = revoked[0].where() if revoked else (trust.revoked[0].where() if trust.revoked else files)
        return HostKeyRefused(
            f"{name}: REVOKED host key for {spec}: the server offers {shown}, marked @revoked in {where}; "
            "refusing to connect",
            f"a revoked key must not be trusted unless the host's admin confirms they re-keyed the host: "
            f"look at the @revoked entry ({where}) with them; gpuops gives no command that trusts it again",
            fingerprint,
        )

    trusted = trust.trusted
    if trusted and not (key is not None and _same_key(key, (e.key for e in trusted))):
        first = trusted[0]
        more = f" (and {len(trusted) - 1} more)" if len(trusted) > 1 else ""
        holds = f"{first.where()} holds {_key_text(first.key)}{more}"
        removals: list[str] = []
        for e in trusted:
            file = _show_path(e.file) if e.file is not None else target
            command = f"ssh-keygen -R {shlex.quote(e.spec)} -f {file}"
            if command not in removals:
                removals.append(command)
        file = _show_path(first.file) if first.file is not None else target
        return HostKeyRefused(
            f"{name}: CHANGED host key for {spec}: the server offers {shown}, {holds}; refusing to connect",
            f"if the host was re-keyed (check {fingerprint or 'its fingerprint'} with its admin): "
            + " && ".join([*removals, f"{keyscan} >> {file}"]),
            fingerprint,
        )
    if trusted:  # the key is one known_hosts trusts, yet asyncssh refused it
        return HostKeyRefused(
            f"{name}: host key for {spec} refused ({shown}): {reason}; refusing to connect",
            f"check the entries for {spec} in {trusted[0].where()}",
            fingerprint,
        )
    return HostKeyRefused(
        f"{name}: UNKNOWN host key for {spec}: the server offers {shown}, not known in {files}; "
        "refusing to connect",
        f"if that fingerprint is the host's (ask its admin): {keyscan} >> {target}",
        fingerprint,
    )


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


@functools.cache
def shell_source(name: str) -> str:
    """The text of one of gpuops' shell programs (``core/hosts/programs/NAME``, POSIX sh), as sent to
    hosts (``sh -c SOURCE NAME ARGS...``)."""
    return (Path(__file__).parent / "programs" / name).read_text()


def make_host(config: HostConfig, connect_options: dict[str, Any] | None = None) -> Host:
    if config.local:
        return LocalHost(config)
    return SshHost(config, connect_options=connect_options)
