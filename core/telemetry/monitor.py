"""Watch every host of the inventory at once; one task per host, none waits on another.

Each host's state keeps its latest snapshot, ten minutes of per-GPU history, and how
fresh it is. A host that stops answering (a black hole, not a refused connection)
only goes stale: its stream is abandoned after ``stale_after`` seconds without a line
and retried with backoff, while the other hosts keep updating.

A large inventory degrades gracefully (10,000 hosts, most of them down, held 733 MiB and a core
and took 23 s to quit): at most ``MAX_CONNECTING`` hosts are connecting at once (an attempt ends at
its first sample, or when it fails); attempts of hosts that have delivered nothing since their last
attempt, the first ones included, take turns at ``ATTEMPTS_PER_S`` a second over the whole
inventory after a first ``ATTEMPT_BURST`` (a few hosts, or a fleet that answers, never wait: a host
whose stream delivered starts over at once); a failure keeps no traceback (its frames held the
connection attempt's objects); and closing aborts every connection and waits for no host.
"""

from __future__ import annotations

import asyncio
import math
import time
from collections import deque
from dataclasses import dataclass, field
from typing import Any, Callable, Iterable

from ..config import Inventory
from ..hosts.host import Host, HostError, HostUnreachable, SshHost, make_host
from .samples import Sampler, Snapshot

HISTORY_SECONDS = 600.0
FIRST_SAMPLE_GRACE_S = 15.0
MAX_CONNECTING = 64  # hosts connecting (or waiting for their first sample) at once
ATTEMPTS_PER_S = 20.0  # attempts a second, over all hosts, of hosts that delivered nothing since the last
ATTEMPT_BURST = 100  # ... after this many at once (an inventory of up to this many hosts never waits)
CLOSE_WAIT_S = 0.5  # closing: how long the watches are given to end once cancelled


class _Turns:
    """Turns for attempts, `rate` a second after a first `burst` (the generic cell rate algorithm):
    `take(t)` is the time, at or after t, of the next free turn, which it takes."""

    def __init__(self, rate: float, burst: int) -> None:
        self.spacing = 1.0 / rate
        self.tolerance = (burst - 1) * self.spacing
        self.theoretical = 0.0

    def take(self, t: float) -> float:
        at = max(t, self.theoretical - self.tolerance)
        self.theoretical = max(self.theoretical, at) + self.spacing
        return at


@dataclass
class HostState:
    name: str
    kind: str
    address: str
    snapshot: Snapshot | None = None
    last_update: float | None = None  # time.monotonic() of the last snapshot
    reachable: bool | None = None  # None until the first answer or failure
    error: str | None = None
    hint: str | None = None
    retry_at: float | None = None  # monotonic time of the next attempt, while failing
    updates: int = 0
    history_len: int = 600
    gpu_history: dict[int, deque[Any]] = field(default_factory=dict)  # index -> (mem_used, util)
    cpu_history: deque[Any] = field(default_factory=lambda: deque(maxlen=600))
    # the GPU list recorded last and its histories in its order: a snapshot that shares that list
    # (a host whose GPU rows did not change) appends each history's last entry again, nothing else
    _recorded: list[Any] | None = field(default=None, repr=False, compare=False)
    _histories: list[Any] = field(default_factory=list, repr=False, compare=False)

    def age(self, now: float | None = None) -> float | None:
        if self.last_update is None:
            return None
        return (now if now is not None else time.monotonic()) - self.last_update

    def record(self, snap: Snapshot, now: float) -> None:
        self.snapshot = snap
        self.last_update = now
        self.reachable = True
        self.retry_at = None
        self.updates += 1
        self.error, self.hint = (None, None) if snap.nvml.ok else (snap.nvml.error, snap.nvml.hint)
        if snap.host is not None:
            self.cpu_history.append(snap.host.cpu_percent)
        gpus = snap.gpus
        if gpus is self._recorded:
            for hist in self._histories:
                hist.append(hist[-1])
            return
        histories: list[deque[Any]] = []
        self._recorded = gpus
        self._histories = histories
        history = self.gpu_history
        for gpu in gpus:
            hist = history.get(gpu.index)
            if hist is None:
                hist = history[gpu.index] = deque(maxlen=self.history_len)
            histories.append(hist)
            if not hist:
                hist.append((gpu.memory_used, gpu.util))
                continue
            # A GPU whose figures did not change (most, most seconds: a reused GpuSample's are the
            # very same objects) appends the entry before it again, not a new one: ten minutes of a
            # fleet's history are then mostly a few shared tuples, not half a million to collect.
            last = hist[-1]
            mem, util = gpu.memory_used, gpu.util
            if last[0] is mem and last[1] is util:
                hist.append(last)
            else:
                hist.append((mem, util))

    def failed(self, error: HostError, retry_at: float | None) -> None:
        # A host that answers SSH but whose reporter fails is reachable; a refused,
        # timed-out or silent connection is not.
        self.reachable = not isinstance(error, HostUnreachable)
        self.error = error.message
        self.hint = error.hint
        self.retry_at = retry_at


class Monitor:
    """Samples every host each ``interval`` seconds; calls ``on_update(name)`` on change."""

    def __init__(
        self,
        inventory: Inventory,
        interval: float = 1.0,
        hosts: Iterable[Host] | None = None,
        on_update: Callable[[str], Any] | None = None,
        stale_after: float | None = None,
    ):
        self.interval = interval
        self.hosts: dict[str, Host] = {h.name: h for h in (hosts or (make_host(c) for c in inventory.hosts))}
        history = max(1, int(HISTORY_SECONDS / interval))
        self.states: dict[str, HostState] = {
            name: HostState(name, h.kind, h.address, history_len=history, cpu_history=deque(maxlen=history))
            for name, h in self.hosts.items()
        }
        self.on_update = on_update
        self.stale_after = stale_after if stale_after is not None else 3 * interval + 5
        self._tasks: dict[str, asyncio.Task[None]] = {}
        self._closing = False
        self._started = False
        self._connecting = asyncio.Semaphore(MAX_CONNECTING)
        self._turns = _Turns(ATTEMPTS_PER_S, ATTEMPT_BURST)
        self.attempts = 0  # connection attempts started so far (each host's first, and each retry)
        self.attempting = 0  # ... in progress now (until their first sample or their failure)
        self.most_attempting = 0  # ... the most at once

    def start(self) -> None:
        self._started = True
        for name in self.hosts:
            if name not in self._tasks:
                self._tasks[name] = asyncio.create_task(self._watch(name), name=f"watch:{name}")

    async def run(self) -> None:
        self.start()
        try:
            await asyncio.gather(*self._tasks.values())
        finally:
            await self.close()

    def _notify(self, name: str) -> None:
        if self.on_update is not None:
            self.on_update(name)

    async def _watch(self, name: str) -> None:
        host, state = self.hosts[name], self.states[name]
        delay = 1.0
        start = self._turns.take(time.monotonic())  # the first attempt takes its turn too
        while not self._closing:
            pause = start - time.monotonic()
            if pause > 0:
                await asyncio.sleep(pause)
            seen = state.updates
            try:
                await self._follow(host, state)
                if self._closing:
                    return
                raise HostError(f"{name}: telemetry stream ended")
            except asyncio.CancelledError:
                raise
            except HostError as exc:
                wait = 1.0 if state.updates > seen else delay
                if isinstance(host, SshHost):
                    wait = max(wait, host.backoff.wait_left())
                message, hint, kind = exc.message, exc.hint, type(exc)
            except Exception as exc:  # a bug must not kill the watch loop
                wait = delay
                message, hint, kind = f"{name}: {type(exc).__name__}: {exc}", None, HostError
            # (the error's message only: the exception's traceback held the attempt's frames and objects)
            delivered = state.updates > seen
            start = time.monotonic() + wait
            if not delivered:  # its turn among every host that gave nothing
                start = self._turns.take(start)
            state.failed((HostUnreachable if issubclass(kind, HostUnreachable) else HostError)(message, hint), start)
            self._notify(name)
            # back off while it keeps failing; a stream that delivered starts over at 1 s
            delay = 1.0 if delivered else min(30.0, delay * 2)

    async def _follow(self, host: Host, state: HostState) -> None:
        """One source's samples into `state` until it ends, fails or falls silent.

        The samples are recorded where the stream hands them over (`Sampler.follow`: over SSH, in
        the connection's data callback), so a sample wakes no task and moves no timer: a fleet
        sends a hundred a second. Silence is watched from here instead: this task wakes when the
        deadline of the last sample would pass, `stale_after` seconds after it (the first sample
        also waits for the connection, which has its own timeout, and the reporter's start-up)."""
        started = state.updates
        first = asyncio.get_running_loop().create_future()  # done at the first sample
        await self._connecting.acquire()  # (one of MAX_CONNECTING: until its first sample or its end)
        attempting = True
        self.attempts += 1
        self.attempting += 1
        self.most_attempting = max(self.most_attempting, self.attempting)

        def connected() -> None:
            nonlocal attempting
            if attempting:
                attempting = False
                self.attempting -= 1
                self._connecting.release()

        def on_sample(snap: Snapshot) -> None:
            state.record(snap, time.monotonic())
            self._notify(host.name)
            if not first.done():
                first.set_result(None)
                connected()

        try:
            follow = asyncio.ensure_future(Sampler(host, self.interval).follow(on_sample))
        except BaseException:
            connected()
            raise
        follow.add_done_callback(_retrieved)
        waiting: set[asyncio.Future[Any]] = {follow, first}
        try:
            wait = self.stale_after + FIRST_SAMPLE_GRACE_S
            since = time.monotonic()
            while True:
                # (the deadline rounded up to a whole second of the loop's clock: the fleet's reporters
                # send at the same moments, so their hosts' deadlines wake this process once together)
                until = math.ceil(since + wait)
                done, _ = await asyncio.wait(waiting, timeout=max(0.0, until - time.monotonic()),
                                             return_when=asyncio.FIRST_COMPLETED)
                if follow in done:
                    follow.result()  # (its error, if it ended with one)
                    return
                waiting.discard(first)  # (from the first sample on: silence is `stale_after`)
                if state.updates > started and state.last_update is not None:
                    since, wait = max(since, state.last_update), self.stale_after
                if time.monotonic() - since >= wait:
                    raise self._silent(host, wait)
        finally:
            connected()
            if not follow.done():
                follow.cancel()
                if not self._closing:  # (closing: the connections are aborted, nothing is waited for)
                    # its stream closes (the remote command ended) even while this task is cancelled
                    await asyncio.shield(asyncio.wait((follow,), timeout=6.0))

    async def set_inventory(self, inventory: Inventory) -> tuple[list[str], list[str], list[str]]:
        """Follow `inventory` from now on (config.toml changed): hosts that left are no longer
        watched (their connection closed), new ones are, and one whose entry changed starts over
        with its new settings. Returns (added, removed, changed) host names."""
        old = {name: host.config for name, host in self.hosts.items()}
        new = {cfg.name: cfg for cfg in inventory.hosts}
        removed = [n for n in old if n not in new]
        changed = [n for n in old if n in new and new[n] != old[n]]
        added = [n for n in new if n not in old]
        for name in removed + changed:
            task = self._tasks.pop(name, None)
            if task is not None:
                task.cancel()
                await asyncio.gather(task, return_exceptions=True)
            host = self.hosts.pop(name)
            self.states.pop(name, None)
            await asyncio.gather(host.close(), return_exceptions=True)
        history = max(1, int(HISTORY_SECONDS / self.interval))
        for name in changed + added:
            host = self.hosts[name] = make_host(new[name])
            self.states[name] = HostState(name, host.kind, host.address, history_len=history,
                                          cpu_history=deque(maxlen=history))
        # the inventory's order (the dashboard lists hosts as the file does)
        self.hosts = {n: self.hosts[n] for n in new}
        self.states = {n: self.states[n] for n in new}
        if self._started and not self._closing:  # else start() watches them with the others
            for name in changed + added:
                self._tasks[name] = asyncio.create_task(self._watch(name), name=f"watch:{name}")
        return added, removed, changed

    @staticmethod
    def _silent(host: Host, wait: float) -> HostUnreachable:
        if isinstance(host, SshHost):
            host._connection_lost()  # a black hole: start over on a new connection
        return HostUnreachable(
            f"{host.name}: no data for {wait:.0f}s (host not answering)",
            "the host or network may be down; gpuops keeps retrying",
        )

    async def close(self) -> None:
        """Stop watching, at once whatever the inventory's size: every SSH connection is aborted
        (its remote reporter ends with it), then the watches are cancelled and given CLOSE_WAIT_S
        to end. Python 3.11's wait_for can swallow a cancellation that lands as a sample arrives:
        the loops also stop on `_closing`, and cancelling repeats until then."""
        self._closing = True
        for host in self.hosts.values():
            if isinstance(host, SshHost):
                host._connection_lost()  # (aborted: closing one by one waited for each, up to 2 s)
        pending = set(self._tasks.values())
        deadline = time.monotonic() + CLOSE_WAIT_S
        while pending:
            for t in pending:
                t.cancel()
            _, pending = await asyncio.wait(pending, timeout=max(0.05, deadline - time.monotonic()))
            if time.monotonic() >= deadline:
                break  # (left cancelled: what is left of them ends with the loop)
        self._tasks.clear()
        # (the SSH hosts' connections are aborted above: a close of each of 10,000 was most of a second)
        await asyncio.gather(*(h.close() for h in self.hosts.values() if not isinstance(h, SshHost)),
                             return_exceptions=True)


def _retrieved(task: asyncio.Future[Any]) -> None:
    """A source's error is raised by `_follow`, or superseded there (by silence, by a close)."""
    if not task.cancelled():
        task.exception()
