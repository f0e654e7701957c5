"""The watch: one per deployment, the only reader of its log.

A :class:`Watch` follows the server's log from the stored position, runs the phase tracker, the
finding rules and the stall watcher once, takes GPU readings from the Monitor's stream (no
reporter of its own), samples the server's processes, records every transition in the store
under the run it watches, and publishes typed events on a :class:`Bus`: the CLI prints them,
the deployment screen draws them. Nothing else parses a deployment's log while it runs.

Opening a deployment later (a new gpuops, after a ``kill -9``, ``:dep NAME``) rebuilds its
:class:`~gpuops.core.deploy.view.RunView` from the stored events and continues from the stored
position: the run's earlier lines are not parsed again (the last :data:`BACKLOG_BYTES` before
the position are read for display only). A run never sees another run's lines: each start of
the deployment begins its run where the log ended then.

While another gpuops process watches a deployment (its heartbeat in the store is fresh), a watch
here is *passive*: it shows the log and relays the events that process stores, and takes over
from the stored position when that heartbeat goes stale.
"""

from __future__ import annotations

import asyncio
import json
import os
import time
from dataclasses import dataclass, field
from typing import Any, Callable, Iterable

from ..states import PHASES, State
from .. import engines
from ..engines import Scanner as LogScanner, Tracker as PhaseTracker
from ..engines.records import LogLine, Numbers, PhaseChange, Progress
from ..diagnose.hang import HANG_AFTER_S, Hang, HangWatch, Probe, hang_finding
from ..diagnose.stall import DEFAULT_STALL, Stall, StallWatcher, stall_finding
from ..domain import (
    ChecksEvent,
    Deployment,
    Event,
    Finding,
    FindingEvent,
    LogEvent,
    NumbersEvent,
    PhaseEvent,
    Plan,
    ProgressEvent,
    StateEvent,
    url_host,
    utc_now,
)
from ..hosts.host import Host, HostError, host_python, script_source
from ..hosts.procs import process_tree
from ..hosts.programs import http_probe as http_probe_program
from ..hosts.programs import quick_check as quick_check_program
from ..telemetry.samples import Snapshot, memory_used, snapshot
from .journal import FollowError, RingBuffer
from .launchers import Launcher, open_launcher
from .store import RunMoved, Store, StoreError
from .view import TERMINAL, RunView, parse_ts

# How often the watch samples the server's processes and its GPUs' memory, writes its position
# and its heartbeat (seconds).
POLL_S = 5.0
# How long a health answer may take (an engine's health path may wait 20 s for a one-token request).
HEALTH_TIMEOUT_S = 25.0
# How often, at most, the watch asks it after ready (seconds): each ask is one access line in the
# server's own log, so not every poll; a third of the hang threshold when that is shorter.
HEALTH_EVERY_S = 15.0
# How often a passive watch reads the events another gpuops stores (seconds).
PASSIVE_POLL_S = 1.0
# A watcher whose heartbeat is older than this is gone (killed, its machine asleep).
STALE_AFTER_S = 3 * POLL_S + 5
# What a reattach reads before the stored position, for display only.
BACKLOG_BYTES = 64 * 1024
BACKLOG_LINES = 2000
LOG_LINES_KEPT = 20_000
# Lines the watch takes off its queue in a row without giving the event loop a turn.
_NOWAIT_RUN = 256
# After the log shows a crash the server is still dying: the rest of the traceback, the other ranks'
# errors and the parent's last words ("Received sigquit from a child process") follow, seconds later
# on a loaded host; and when the watch learns that the server exited, its last lines may not have
# been read yet. Either way the watch reads on until the server has exited and its log has been quiet
# for CRASH_QUIET_S, or the log has been quiet CRASH_SILENT_S while the server lives on, at most
# CRASH_SETTLE_MAX_S, before it records the crash.
CRASH_QUIET_S = 1.0
CRASH_SILENT_S = 3.0
CRASH_SETTLE_MAX_S = 15.0

Listener = Callable[[Event], Any]


class Bus:
    """The events of each deployment, to whoever listens (sync callables; a listener that
    fails is dropped, never the publisher)."""

    def __init__(self) -> None:
        # each name's listeners as a tuple, replaced (never changed) when one comes or goes: a
        # publish (one a log line) walks it as it is, no copy, whatever its listeners do meanwhile
        self._listeners: dict[str, tuple[Listener, ...]] = {}

    def listen(self, name: str, listener: Listener) -> Callable[[], None]:
        self._listeners[name] = self._listeners.get(name, ()) + (listener,)

        def unlisten() -> None:
            self._drop(name, listener)

        return unlisten

    def _drop(self, name: str, listener: Listener) -> None:
        listeners = list(self._listeners.get(name, ()))
        if listener in listeners:
            listeners.remove(listener)
            self._listeners[name] = tuple(listeners)

    def publish(self, name: str, event: Event) -> None:
        for listener in self._listeners.get(name, ()):
            try:
                listener(event)
            except Exception:
                self._drop(name, listener)


class RunOver(Exception):
    """The deployment moved on to another run (or was stopped) while this watch ran."""


def watcher_alive(d: Deployment, *, now: float | None = None) -> bool:
    """Another gpuops process watches `d` and its heartbeat is fresh."""
    if d.watch_pid is None or d.watch_beat is None or d.watch_pid == os.getpid():
        return False
    age = (now or time.time()) - parse_ts(d.watch_beat).timestamp()
    if age > STALE_AFTER_S:
        return False
    try:
        os.kill(d.watch_pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:
        pass  # someone else's process: trust the heartbeat
    return True


# `sh -c WITH_ENV_FILE NAME ENV_FILE ARGV…`: ARGV run with the variables of ENV_FILE (a deployment's
# 0600 env file on its host: the API key is read there, never by gpuops) exported, when readable
WITH_ENV_FILE = 'set -a; [ -r "$1" ] && . "$1"; set +a; shift; exec "$@"'


async def quick_check(host: Host, plan: Plan, launcher: Launcher) -> tuple[dict | None, str | None]:
    """One short chat completion against the server, from its host (with the deployment's API key
    read there from its env file, never here): (the answer, None) or (None, why it failed)."""
    env_path = launcher.env_path
    script = WITH_ENV_FILE
    client = plan.client_host
    res = await host.run(["sh", "-c", script, "gpuops-check", env_path, host_python(host), "-c",
                          script_source(quick_check_program), str(plan.port), plan.served_name,
                          url_host(client)], timeout=180)
    if not res.ok:
        return None, (res.stderr.strip().splitlines() or ["no output"])[-1]
    try:
        return json.loads(res.stdout), None
    except ValueError:
        return None, "the quick check printed no JSON"


async def health_probe(host: Host, plan: Plan, path: str, *, clock: Callable[[], float] = time.monotonic) -> Probe | None:
    """The server's answer to GET `path`, asked on its host; None when the host could not be asked."""
    client = plan.client_host
    try:
        res = await host.run([host_python(host), "-c", script_source(http_probe_program),
                              url_host(client), str(plan.port), str(HEALTH_TIMEOUT_S), path],
                             timeout=HEALTH_TIMEOUT_S + 20)
        status, body, seconds = json.loads(res.stdout.strip().splitlines()[-1])[path]
    except (HostError, ValueError, KeyError, IndexError, TypeError):
        return None
    if status is not None and not isinstance(status, int):
        return None
    detail = f"HTTP {status}" if status is not None else str(body)[:120]
    return Probe(status, detail, float(seconds) if isinstance(seconds, (int, float)) else 0.0, clock())


async def log_end(host: Host, launcher: Launcher, journal_dir: str | None) -> dict[str, Any]:
    """Where the server's log ends now (``{"log_offset": N}`` or ``{"cursor": C}``): a new run's
    log begins there, so the previous run's lines are never read as this one's."""
    return await launcher.log_end(journal_dir)


def _log_begun(d: Deployment) -> bool:
    """The run's server has been started (its log begins at a recorded position), so its log is
    this run's to read; before that (planning, downloading) the log holds earlier runs only."""
    return d.state not in (State.PLANNED, State.DOWNLOADING) or d.run_offset is not None or d.run_cursor is not None


def _before(state: str, phase: str) -> bool:
    """A state the run may move on from to `phase` (not ready or a later phase already)."""
    if state in PHASES:
        return PHASES.index(state) < PHASES.index(phase)
    return state in (State.PLANNED, State.DOWNLOADING, State.STALLED)


@dataclass(frozen=True)
class WatchOptions:
    """How a :class:`Watch` watches (every field has the CLI's default).

    ``until``: the outcomes that end the watch (the CLI's deploy: ready, crashed, stalled; the TUI
    watches on after ready, to see a crash then, and after a stall, which may clear). ``keep_on``:
    reaching one of `until` resolves ``Watch.reached`` and the watch goes on (the TUI's), else it ends
    there (the CLI's). ``follow=False`` reads what the log holds now and stops (how ``gpuops status``
    reconciles a deployment nobody watched). ``readings``: the Monitor's latest GPU snapshot of the
    host (None: the watch reads the host itself). ``stall``: stall thresholds over the defaults.
    ``launcher``: the deployment's launcher when the caller has it (else opened from the plan)."""

    readings: Callable[[], Snapshot | None] | None = None
    stall: dict[str, float] = field(default_factory=dict)
    journal_dir: str | None = None
    poll_s: float = POLL_S
    clock: Callable[[], float] = time.monotonic
    until: Iterable[str] = (State.READY, State.CRASHED, State.STALLED)
    quick_check: bool = True
    follow: bool = True
    triage: bool = True
    launcher: Launcher | None = None
    keep_on: bool = False
    health: bool = True  # after ready, ask the server's health path (HEALTH_EVERY_S; a hang: hang-after-ready)


@dataclass
class _Turn:
    """What one active watch carries from turn to turn of its loop."""

    tracker: PhaseTracker
    scanner: LogScanner
    watcher: StallWatcher
    queue: asyncio.Queue
    reader: asyncio.Task
    next_poll: float
    now: str
    last: tuple[str | None, int | None] = (None, None)  # the last non-empty line, its number
    exited: str | None = None  # the server's processes are gone (status detail)
    taken: int = 0  # lines taken from the queue since the loop last let the event loop run
    hang: HangWatch = field(default_factory=HangWatch)  # after ready: the health answers
    next_health: float = 0.0  # when to ask the server's health next (the watch's clock)
    last_line_at: float | None = None  # when the last line was taken (the watch's clock)
    processes: int | None = None  # the server's processes at the last sample


class Watch:
    """See the module docstring; how it watches: :class:`WatchOptions`."""

    def __init__(self, host: Host, deployment: Deployment, store: Store, bus: Bus | None = None,
                 options: WatchOptions | None = None):
        self.host = host
        self.deployment = deployment
        self.name = deployment.name
        self.plan = deployment.plan
        self.engine = engines.get(self.plan.engine)  # its phase grammar and rules: looked up once, not per line
        self.run_no = deployment.run
        self.store = store
        self.bus = bus or Bus()
        o = self.options = options or WatchOptions()
        self.readings = o.readings
        self.stall_thresholds = {**DEFAULT_STALL, **o.stall}
        self.journal_dir = o.journal_dir
        self.poll_s = o.poll_s
        self.clock = o.clock
        self.until = frozenset(o.until)
        self.want_quick_check = o.quick_check
        self.want_health = o.health and o.follow  # (a read of the log as it is now cannot see a hang: no probe)
        self._own_ask = f'"GET {self.engine.health_path} '  # its access line in the server's log
        self.follow = o.follow
        self.triage_on_stall = o.triage
        self.launcher = o.launcher
        self.keep_on = o.keep_on
        self.reached: asyncio.Future[str] | None = None
        self.view = RunView.of(self.name, store.events(self.name, run=self.run_no))
        self.log: RingBuffer[LogEvent] = RingBuffer(LOG_LINES_KEPT)
        self.passive = False
        self.stopping = False  # told to end (Python 3.11's wait_for can swallow a cancellation)
        # what was read (tests and the status verb look): where parsing began, lines parsed
        self.parsed_from: int | str | None = None
        self.read_from: int | None = None  # the file offset reading began at (the display window's start)
        self.lines_parsed = 0
        self.triages = 0
        self.last_checks: list[Any] = []  # the host checks of the last triage (its P2P check shapes a stall's fix)
        self._cursor: str | None = None
        self._offset: int | None = None
        self._numbers: dict[str, float] = {}
        self._last_ts: str | None = None  # the engine's timestamp on the last line that had one

    # ---------------------------------------------------------------- events

    def record(self, event: Event, *, at_position: bool = False) -> Event:
        """Store the event in this watch's run and publish it; RunOver when the run is over. When
        the store cannot record (a full disk, a lock held too long) the watch says so and ends with
        that StoreError: the server is not touched. `at_position`: with the log position (just
        after the line it came from) in the same write."""
        where: dict[str, Any] = {}
        if at_position and not self.passive:
            where = {"cursor": self._cursor, "log_offset": self._offset}
        try:
            stored = self.store.record(self.name, event, run=self.run_no, **where)
        except RunMoved as exc:
            raise RunOver(str(exc)) from None
        except StoreError as exc:
            self._log(f"gpuops: {exc}; the server is left as it is")
            raise
        self.view.apply(stored)
        self.bus.publish(self.name, stored)
        return stored

    def _log(self, text: str, log_ts: float | None = None, seen: str | None = None) -> None:
        """A line of the log for display (its ring and the bus); `seen`: when it was taken (the
        watch's loop reads the clock once for the lines it takes in one turn), else now."""
        event = LogEvent(line=text, log_ts=log_ts, ts=seen or utc_now(), run=self.run_no, deployment=self.name)
        self.log.append(event)
        self.bus.publish(self.name, event)

    def set_state(self, state: str, **fields: Any) -> None:
        self._flush_numbers()  # what the log said comes before the transition it led to
        self.record(StateEvent(state=state, **fields))

    def finding(self, finding: Finding) -> None:
        self.record(FindingEvent.of(finding))

    # ---------------------------------------------------------------- the watch

    async def run(self) -> str:
        """Watch until one of ``until`` (or the log's end without ``follow``); the run's state then."""
        if self.reached is None:
            self.reached = asyncio.get_running_loop().create_future()
        try:
            if self.launcher is None:
                self.launcher = await open_launcher(self.host, self.plan)
            while True:
                d = self.store.deployment(self.name)
                if d is None or d.run != self.run_no:
                    return self.view.state
                self.deployment = d
                if self.view.state in TERMINAL or (self.view.state in self.until and not self.keep_on):
                    await self._backlog_only()
                    return self.view.state
                if not _log_begun(d) and not watcher_alive(d):
                    return self.view.state  # its deploy ended before the server started: nothing runs
                if self.follow and watcher_alive(d):
                    self.passive = True
                    if not await self._passive():
                        return self.view.state
                    continue  # the other watcher went away: take over
                self.passive = False
                return await self._active()
        except RunOver:
            return self.view.state
        finally:
            self._remember(final=True)
            self._reach(self.view.state)

    @property
    def ending(self) -> bool:
        """It reached what its caller waited for and does not go on (its run() is returning): a new
        watch, not this one, watches on (a deploy that ended at a stall, then a screen that opens it)."""
        return self.reached is not None and self.reached.done() and not self.keep_on

    def _reach(self, state: str) -> None:
        if self.reached is not None and not self.reached.done():
            self.reached.set_result(state)

    def _ended(self, state: str) -> bool:
        """`state` is one the caller waits for: say so; True when the watch ends there."""
        if state in self.until or state == State.CRASHED:
            self._reach(state)
            return state == State.CRASHED or not self.keep_on
        return False

    async def _backlog_only(self) -> None:
        """A finished run (crashed, stopped) or one the caller no longer waits for: its last lines
        for display, nothing parsed."""
        try:
            async for rec, live in self._records(follow=False):
                if live:
                    self._log(rec.text, rec.ts)
                    self._took(rec)  # read for display: a later reattach starts after it
        except (FollowError, HostError) as exc:
            self._log(f"gpuops: {getattr(exc, 'message', exc)}")

    async def _passive(self) -> bool:
        """Relay another process's watch: the log for display, the events it stores (once a
        second, whether or not the log flows). True when its heartbeat went stale (take over),
        False when the run ended.

        The other process stores its last events before it releases its heartbeat: once the
        heartbeat is seen gone, the events are read once more, so a takeover starts from all of
        them (one stored between a poll's read and the heartbeat's would be missed: the ready of a
        deploy that ended just then, the takeover reading on from past its line, the view at http).
        """
        queue: asyncio.Queue = asyncio.Queue(maxsize=10_000)
        loop = asyncio.get_running_loop()

        async def read() -> None:
            async for rec, _live in self._records(follow=True):
                await queue.put(rec)

        reader: asyncio.Task | None = None
        next_poll = loop.time()
        try:
            while not self.stopping:
                if reader is None and _log_begun(self.deployment):  # a download first: no log of this run yet
                    reader = asyncio.create_task(read())
                wait = next_poll - loop.time()
                if wait > 0:
                    try:
                        rec = await asyncio.wait_for(queue.get(), wait)
                        self._log(rec.text, rec.ts)
                        continue
                    except asyncio.TimeoutError:
                        pass
                next_poll = loop.time() + PASSIVE_POLL_S
                self._catch_up()
                d = self.store.deployment(self.name)
                if d is None or d.run != self.run_no or self.view.state in TERMINAL:
                    return False
                self.deployment = d
                if not watcher_alive(d):
                    self._catch_up()  # what it stored last, before it let go
                    if self.view.state in TERMINAL:
                        return False
                    return _log_begun(d)  # take over a running server; a deploy that died: nothing to watch
            return False
        finally:
            if reader is not None:
                reader.cancel()
                await asyncio.gather(reader, return_exceptions=True)

    async def _records(self, *, follow: bool) -> Any:
        """(record, parse it?) from the backlog window, then from the stored position on."""
        assert self.launcher is not None
        log = self.launcher.watch_log(self.deployment, journal_dir=self.journal_dir, follow=follow,
                                      backlog_bytes=BACKLOG_BYTES, backlog_lines=BACKLOG_LINES)
        self.parsed_from, self.read_from = log.parsed_from, log.read_from
        if "log_offset" in log.position:
            self._offset = log.position["log_offset"]
        if "cursor" in log.position:
            self._cursor = log.position["cursor"]
        async for item in log.records:
            yield item

    def _took(self, rec: Any) -> None:
        """`rec`, a live record, has been dealt with: the position to resume after it. Kept by
        whoever takes the records off the queue, not by the reader (which runs ahead), so a stored
        position never passes a line that was not parsed."""
        if rec.offset is not None:  # a file's offset after the line (after a notice: where reading went on)
            self._offset = rec.offset
        elif rec.cursor is not None:
            self._cursor = rec.cursor

    def _clean(self, text: str) -> LogLine:
        """A log line as the plan's engine reads it."""
        return self.engine.clean(text)

    async def _active(self) -> str:
        """The watch proper: parse, record, publish. One turn: the next record, taken (shown, parsed);
        the outcome it led to (crashed, ready); once a poll the store, the server's processes and GPUs;
        then an exit or a stall."""
        engine = self.engine
        tracker = engine.tracker()  # the engine's phase grammar
        watcher = StallWatcher(self.stall_thresholds, clock=self.clock)
        view = self.view
        if view.phase is not None:  # a reattach: the run so far, from the store
            tracker.resume(view.phase)
            watcher.resume(view.phase, silent_s=view.silent_s(), stall=view.stall is not None)
        queue, reader = self._read_into_queue()
        # the engine's finding rules' view of the same lines
        t = _Turn(tracker, engine.scanner(), watcher, queue, reader, next_poll=self.clock(), now=utc_now(),
                  hang=HangWatch(self.stall_thresholds.get(State.READY, HANG_AFTER_S)))
        if view.state == State.STALLED and view.stall is not None and view.stall.phase == State.READY:
            t.hang.hung = Hang(0.0, 0, (), t.hang.threshold_s)  # a hang said before this watch: look for its end
        try:
            while not self.stopping:
                rec, live = await self._next_record(t)
                if reader.done() and rec is None and queue.empty():
                    if reader.exception() is not None:
                        raise reader.exception()  # type: ignore[misc]
                    return await self._log_ended(tracker, t.scanner)
                if rec is not None and not self._take(t, rec, live):
                    continue
                ended = await self._outcome(t)
                if ended is None and rec is not None and self.clock() < t.next_poll:
                    continue
                if ended is None and self.clock() >= t.next_poll:
                    ended = await self._poll(t)
                if ended is None:
                    ended = await self._exited_or_stalled(t, rec)
                if ended is not None:
                    return ended
            return view.state
        finally:
            self._flush_numbers()
            reader.cancel()
            await asyncio.gather(reader, return_exceptions=True)

    async def _next_record(self, t: "_Turn") -> tuple[Any, bool]:
        """The next (record, live) off the queue, or (None, False) after a quiet while (the tracker's idle
        changes taken then). A line already queued is taken as it is (wait_for costs a task and a timer a
        line); every _NOWAIT_RUN lines the event loop's other tasks (the reader, a UI) run."""
        if not t.queue.empty() and t.taken < _NOWAIT_RUN:
            t.taken += 1
            return t.queue.get_nowait()
        if t.taken:
            t.taken = 0
            await asyncio.sleep(0)
        try:
            rec, live = await asyncio.wait_for(t.queue.get(), min(1.0, self.poll_s))
        except asyncio.TimeoutError:
            rec, live = None, False
            self._changes(t.tracker.idle(), t.tracker, t.watcher)  # a quiet log: an inferred ready settles
        t.now = utc_now()  # the time the lines of this turn are taken at
        return rec, live

    def _take(self, t: "_Turn", rec: Any, live: bool) -> bool:
        """A record shown, and parsed when live; False when there is nothing more to do with it (a
        notice: truncated/rotated/missing, said and not parsed; a line of the window before the
        position: shown, its timestamp kept)."""
        if rec.notice:
            self._log(f"gpuops: log {rec.notice}: {rec.text}", seen=t.now)
            self._took(rec)
            return False
        self._log(rec.text, rec.ts, t.now)
        if not live:
            self._last_ts = self._clean(rec.text).ts or self._last_ts
            return False
        self._took(rec)
        self.lines_parsed += 1
        if self._own_ask not in rec.text:  # (the access line of the watch's own health ask is no sign of life)
            t.last_line_at = self.clock()
            if rec.text.strip():
                t.last = (rec.text, t.tracker.line_no + 1)
        line = self._clean(rec.text)
        changes = t.tracker.feed(line)
        t.scanner.feed(line, t.tracker)
        self._changes(changes, t.tracker, t.watcher)
        self._last_ts = line.ts or self._last_ts
        return True

    async def _outcome(self, t: "_Turn") -> str | None:
        """The crash or the readiness the log showed, recorded: the state that ends the watch, or None."""
        view, tracker = self.view, t.tracker
        if tracker.outcome == "crashed" and view.state != State.CRASHED:
            await self._settle_after_crash(tracker, t.scanner, t.queue, t.reader)
            await self._crashed(tracker, t.scanner, t.queue)
            return State.CRASHED
        if tracker.outcome == "ready" and view.state != State.READY:
            await self._ready()
            if self._ended(State.READY):
                return State.READY
            t.now = utc_now()  # (after the quick check's wait)
        return None

    async def _poll(self, t: "_Turn") -> str | None:
        """Once a poll: the position and the numbers stored, the run still this one's (else its state),
        the server's processes and GPUs sampled (it exited: why, in `t.exited`)."""
        t.next_poll = self.clock() + self.poll_s
        self._remember()  # once a poll, not a store write per line
        self._flush_numbers()
        if self._run_over():
            return self.view.state
        if t.exited is None and not await self._sample(t.watcher, t):
            t.exited = (await self.launcher.status()).detail  # type: ignore[union-attr]
        ended = await self._health(t) if t.exited is None else None
        t.now = utc_now()  # (after the samples' waits)
        return ended

    async def _health(self, t: "_Turn") -> str | None:
        """After ready, the server's health answer: health answers that keep failing are a hang
        (stalled after ready, the hang-after-ready finding); one that succeeds again ends it (ready)."""
        view = self.view
        hung = t.hang.hung is not None
        if not (view.state == State.READY or (view.state == State.STALLED and hung)) or not self.want_health:
            return None
        every = min(HEALTH_EVERY_S, t.hang.threshold_s / 3)
        if not t.next_health:  # ready (or reattached) just now: the first ask one interval later
            t.next_health = self.clock() + every
        if self.clock() < t.next_health:
            return None
        t.next_health = self.clock() + every
        path = self.engine.health_path
        probe = await health_probe(self.host, self.plan, path, clock=self.clock)
        if probe is None:  # the host could not be asked: no answer either way
            return None
        t.hang.probe(probe)
        if hung and t.hang.hung is None:
            self.set_state(State.READY, endpoint=self.plan.endpoint, model=self.plan.served_name,
                           line=f"{path} answers again ({probe.detail})")
            return None
        hang = t.hang.check()
        if hang is None:
            return None
        quiet = None if t.last_line_at is None else self.clock() - t.last_line_at
        self.set_state(State.STALLED, phase=State.READY, silent_s=round(quiet or hang.failing_s, 1), summary=hang.summary)
        self.finding(hang_finding(hang, path=path, last_line=t.last[0], quiet_s=quiet, processes=t.processes))
        return State.STALLED if self._ended(State.STALLED) else None

    async def _exited_or_stalled(self, t: "_Turn", rec: Any) -> str | None:
        """The server exited and its log has gone quiet since: a crash; or the stall watcher's stall."""
        view = self.view
        if t.exited is not None and rec is None:
            after = " after it was ready" if view.state == State.READY else ""
            await self._settle_after_crash(t.tracker, t.scanner, t.queue, t.reader, exited=True)
            await self._crashed(t.tracker, t.scanner, t.queue, reason=f"the server exited{after} ({t.exited})")
            return State.CRASHED
        stall = t.watcher.check()
        if stall is not None and view.state not in (State.READY, State.STALLED):
            await self._stalled(stall, *t.last, scanner=t.scanner, tracker=t.tracker)
            if self._ended(State.STALLED):
                return State.STALLED
            t.now = utc_now()  # (after the triage's wait)
        return None

    def _run_over(self) -> bool:
        """Whether this run is over in the store (removed, a new run, or stopped); a stop by another
        gpuops is relayed (its events applied and published)."""
        d = self.store.deployment(self.name)
        if d is not None and d.run == self.run_no and d.state != State.STOPPED:
            return False
        if d is not None and d.run == self.run_no:
            self._catch_up()
        return True

    def _catch_up(self) -> None:
        """The events stored for this run that the view has not applied yet (another gpuops
        stored them): applied and published, in their order."""
        for event in list(self.store.events(self.name, run=self.run_no))[self.view.events:]:
            self.view.apply(event)
            self.bus.publish(self.name, event)

    def _read_into_queue(self) -> tuple[asyncio.Queue, asyncio.Task]:
        """The log's (record, live) items put on a queue by a task of its own: a timeout on the
        queue never cancels the follower mid-line. The caller cancels the task when done."""
        queue: asyncio.Queue = asyncio.Queue(maxsize=10_000)

        async def read() -> None:
            async for item in self._records(follow=self.follow):
                await queue.put(item)

        return queue, asyncio.create_task(read())

    def _changes(self, changes: list, tracker: PhaseTracker, watcher: StallWatcher) -> None:
        view = self.view
        for ch in changes:
            if isinstance(ch, PhaseChange):
                watcher.progress(ch.phase)
                if ch.phase in view.phases:
                    continue
                # a line without the engine's timestamp (uvicorn's) is as late as the last one that had it
                # with its position: a reattach resumes in this phase just after its line, never before it
                self.record(PhaseEvent(phase=ch.phase, line=ch.text, log_ts=ch.ts or self._last_ts), at_position=True)
                # the ready state comes with the quick check's answer; a state never goes backwards
                if ch.phase != State.READY and _before(view.state, ch.phase):
                    self.set_state(ch.phase, line=ch.text)
            elif isinstance(ch, Progress):
                watcher.progress()
                self.record(ProgressEvent(phase=ch.phase, done=ch.done, total=ch.total, what=ch.what))
                if view.state == State.STALLED and tracker.phase:  # the stall is over
                    self.set_state(tracker.phase)
            elif isinstance(ch, Numbers):
                self._numbers.update(ch.values)

    def _flush_numbers(self) -> None:
        if self._numbers:
            values, self._numbers = self._numbers, {}
            try:
                self.record(NumbersEvent(values=values))
            except RunOver:
                pass

    async def _log_ended(self, tracker: PhaseTracker, scanner: LogScanner) -> str:
        """``follow=False``: what the log holds is read. Say what is true now."""
        self._changes(tracker.finish(), tracker, StallWatcher(self.stall_thresholds, clock=self.clock))
        view = self.view
        if tracker.outcome == "crashed" and view.state != State.CRASHED:
            await self._crashed(tracker, scanner, asyncio.Queue())
        elif tracker.outcome == "ready" and view.state != State.READY:
            await self._ready(check=False)
        if view.state in (State.CRASHED, State.STOPPED):
            return view.state
        assert self.launcher is not None
        status = await self.launcher.status()
        if not status.running:
            after = " after it was ready" if view.state == State.READY else ""
            await self._crashed(tracker, scanner, asyncio.Queue(),
                                reason=f"the server exited{after} ({status.detail})")
        return self.view.state

    async def _ready(self, check: bool = True) -> None:
        # a node beyond node 0 serves no API (only the engine's health check): nothing to ask it
        answer, why = (await quick_check(self.host, self.plan, self.launcher)  # type: ignore[arg-type]
                       if check and self.want_quick_check and not self.plan.node_rank else (None, None))
        if why is not None:
            self.finding(Finding("quick-check-failed", "warning", why))
        self.set_state(State.READY, endpoint=self.plan.endpoint, model=self.plan.served_name, quick_check=answer)

    async def _sample(self, watcher: StallWatcher, t: "_Turn | None" = None) -> bool:
        """Feed the stall watcher the server's processes (kept in the turn `t` too) and its GPUs'
        memory; False when the server has exited. A reading that fails (NVML, a slow host) leaves the
        watcher's last one."""
        assert self.launcher is not None
        st = await self.launcher.status()
        if not st.running:
            return False
        if st.pid:
            tree = await process_tree(self.host, st.pid, host_python(self.host))
            if t is not None:
                t.processes = len(tree.pids)
            watcher.processes(len(tree.pids), len(tree.ranks(engines.get(self.plan.engine).rank_title)) or None)
        # the Monitor's latest; none yet (its reporter still starting on a slow host) or stale: read
        # the host now, so a stall found early still says what the GPUs hold
        snap: Snapshot | None = self.readings() if self.readings is not None else None
        if snap is None:
            try:
                snap = await snapshot(self.host)
            except HostError:
                snap = None
        if snap is not None:
            used = memory_used(snap.gpus, set(self.plan.gpu_ids) or None)
            if used:
                watcher.gpus(used)
        return True

    async def _settle_after_crash(self, tracker: PhaseTracker, scanner: LogScanner, queue: asyncio.Queue,
                                  reader: asyncio.Task, *, exited: bool = False) -> None:
        """The lines a dying server writes after the crash the log showed (or the last ones of a
        server found exited), read before the crash is recorded: shown, and the rules' findings are
        over them too. Bounded by CRASH_* above, on the event loop's clock (a test's watch clock may
        stand still)."""
        loop = asyncio.get_running_loop()
        end = loop.time() + CRASH_SETTLE_MAX_S
        last_line = loop.time()
        while loop.time() < end:
            try:
                rec, live = await asyncio.wait_for(queue.get(), CRASH_QUIET_S)
            except asyncio.TimeoutError:
                if exited or reader.done() or loop.time() - last_line >= CRASH_SILENT_S:
                    return
                try:
                    exited = self.launcher is None or not (await self.launcher.status()).running
                except HostError:
                    return
                continue
            last_line = loop.time()
            if rec.notice:
                self._log(f"gpuops: log {rec.notice}: {rec.text}")
            else:
                self._log(rec.text, rec.ts)
                if live:
                    line = self._clean(rec.text)
                    if tracker.outcome != "crashed":  # a crash it has not read yet: its phase
                        tracker.feed(line)
                    scanner.feed(line, tracker)
                    self._took(rec)

    async def _crashed(self, tracker: PhaseTracker, scanner: LogScanner, queue: asyncio.Queue,
                       reason: str | None = None) -> None:
        """The crash's findings from the rules, over the lines that followed it too (the rest
        of the traceback, the other ranks' errors) as far as they have arrived. `reason`: the
        server exited without a crash the tracker recognised."""
        d = self.store.deployment(self.name)
        if reason is not None and d is not None and d.run == self.run_no and d.state == State.STOPPED:
            return  # stopped on purpose (by another gpuops): not a crash
        while not queue.empty():
            rec, live = queue.get_nowait()
            if not rec.notice:
                self._log(rec.text, rec.ts)
                if live:
                    scanner.feed(self._clean(rec.text), tracker)
                    self._took(rec)
        for finding in scanner.findings(tracker, self.plan):
            self.finding(finding)
        phase = tracker.crash.phase if tracker.crash else tracker.phase or self.view.phase or State.STARTING
        self.set_state(State.CRASHED, phase=phase, **({"reason": reason} if reason else {}))

    async def _stalled(self, stall: Stall, last_line: str | None, last_line_no: int | None, *,
                       scanner: LogScanner, tracker: PhaseTracker) -> None:
        """Say the stall (its state at once), triage it on the host (what the log's silence suggests,
        the host checks: driver/library, P2P, ports, /dev/shm, …), then its finding with its evidence,
        whose fix follows what the log and the checks showed (NCCL's own log on, the P2P check)."""
        self.set_state(State.STALLED, phase=stall.phase, silent_s=round(stall.silent_s, 1), summary=stall.summary)
        p2p_ok = None
        if self.triage_on_stall:
            await self.triage(scanner, tracker)
            p2p_ok = next((r.ok for r in self.last_checks if r.name == "p2p-unavailable"), None)
        self.finding(stall_finding(stall, last_line, last_line_no, nccl_log=self.engine.nccl_log_on(scanner, self.plan),
                                   p2p_ok=p2p_ok, p2p_off=self.plan.env.get("NCCL_P2P_DISABLE") == "1"))

    async def triage(self, scanner: LogScanner | None = None, tracker: PhaseTracker | None = None) -> list[Finding]:
        """Findings beyond the stall itself, recorded and returned: the log rules' (errors in
        the log so far; a silence rule's own nccl-init-stall is left out, the stall finding says
        it with readings) and the host checks' for the running server (their pass/fail list is
        a "checks" event). Once per stall."""
        from ..diagnose.host_checks import findings, run_checks

        self.triages += 1
        out: list[Finding] = []
        if scanner is not None and tracker is not None:
            out += [f for f in scanner.findings(tracker, self.plan) if f.code != "nccl-init-stall"]
        assert self.launcher is not None
        try:
            st = await self.launcher.status()
            results = await run_checks(self.host, self.plan, server_pids=[st.pid] if st.running and st.pid else [])
        except HostError as exc:
            out.append(Finding("host-error", "warning", f"the host checks could not run: {exc.message}"))
        else:
            self.last_checks = list(results)
            self.record(ChecksEvent(checks=[r.summary() for r in results]))
            out += findings(results)
        for finding in out:
            self.finding(finding)
        return out

    def _remember(self, final: bool = False) -> None:
        """The log position and this process's heartbeat (released at the end)."""
        if self.passive:
            return
        try:
            self.store.set_position(self.name, cursor=self._cursor, log_offset=self._offset, run=self.run_no,
                                    watcher=os.getpid())
            if final:
                self.store.release_watch(self.name, os.getpid())
        except StoreError:
            pass


class Watches:
    """This process's watches, one per deployment, and the bus their events go out on. The TUI
    keeps one (with the Monitor's readings); the CLI one per command. `watch_class` picks the watch
    that fits a deployment's plan (``deploy.router.watch_class``: a router's, or a server's)."""

    def __init__(self, store: Store, host_for: Callable[[str], Host | None], *,
                 watch_class: Callable[[Plan], type[Watch]],
                 readings: Callable[[str], Snapshot | None] | None = None, stall: dict[str, float] | None = None,
                 poll_s: float = POLL_S):
        self.store = store
        self.host_for = host_for
        self.watch_class = watch_class
        self.readings = readings
        self.stall = stall or {}
        self.poll_s = poll_s
        self.bus = Bus()
        self.watches: dict[str, Watch] = {}
        self.tasks: dict[str, asyncio.Task] = {}

    def watch(self, name: str, **options: Any) -> Watch | None:
        """The running watch of `name`, or a new one started (None: no such deployment or its
        host is not in the inventory)."""
        running = self.watches.get(name)
        task = self.tasks.get(name)
        if running is not None and task is not None and not task.done() and not running.ending:
            return running
        d = self.store.deployment(name)
        host = self.host_for(d.host) if d is not None else None
        if d is None or host is None:
            return None
        readings = (lambda: self.readings(d.host)) if self.readings is not None else None  # type: ignore[misc]
        w = self.watch_class(d.plan)(host, d, self.store, self.bus, WatchOptions(
            readings=readings, stall=self.stall, journal_dir=host.config.journal_dir, poll_s=self.poll_s, **options))
        w.reached = asyncio.get_running_loop().create_future()
        self.watches[name] = w
        self.tasks[name] = asyncio.create_task(w.run(), name=f"watch:{name}")
        return w

    async def outcome(self, name: str) -> str:
        """The state the watch of `name` reached that its caller waits for (or ended in)."""
        task, watch = self.tasks.get(name), self.watches.get(name)
        if task is None or watch is None:
            d = self.store.deployment(name)
            return d.state if d is not None else State.STOPPED
        assert watch.reached is not None
        done, _ = await asyncio.wait([task, watch.reached], return_when=asyncio.FIRST_COMPLETED)
        if task in done and task.exception() is not None:
            raise task.exception()  # type: ignore[misc]
        return watch.reached.result() if watch.reached.done() else await task

    async def stop(self, name: str) -> None:
        """End the watch of `name` (before the use case stops or restarts its server)."""
        task = self.tasks.pop(name, None)
        watch = self.watches.pop(name, None)
        if watch is not None:
            watch.stopping = True
        # Python 3.11's wait_for can swallow a cancellation that lands as a line arrives: the loops
        # also stop on `stopping`, and cancelling repeats until the task is done
        while task is not None and not task.done():
            task.cancel()
            await asyncio.wait([task], timeout=1.0)

    async def close(self) -> None:
        for name in list(self.tasks):
            await self.stop(name)
