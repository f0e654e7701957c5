"""gpuops' store: deployments, their runs and events, and benchmark runs, in SQLite (WAL).

Every write is its own committed transaction, so a `kill -9` of gpuops at any moment loses
nothing already recorded; WAL lets a second gpuops read while one writes. Schema changes are
migrations keyed on ``PRAGMA user_version``.

The store never fails as a traceback: a damaged file, a newer schema, a lock held too long, a
read-only or missing folder, a full disk each raise :class:`StoreError` with one line that names
the file and what to do (every SQLite error passes through :func:`explain`).

One deploy per name at a time: recording a deployment checks and writes in one transaction and
takes the name's lease (pid, machine, process start time); a second deploy of a name whose lease
is held by a live process is refused (:class:`NameTaken`), a dead owner's lease is taken over.

What goes in and comes out is typed (:mod:`gpuops.core.domain`): a stored plan is decoded and
validated through :class:`~gpuops.core.domain.Plan`, an event through the event union. A
deployment has a run number: each start of its name (a deploy, a restart, a fix) is a new run,
and the events of every run are kept.
"""

from __future__ import annotations

import functools
import inspect
import json
import os
import socket
import sqlite3
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Callable, Iterator, TypeVar

import msgspec
import psutil

from .. import engines
from ..config import validate_host_name
from ..states import State
from ..domain import (
    EVENT_KINDS,
    STATES,
    BenchRun,
    Deployment,
    Event,
    Invalid,
    LogEvent,
    Plan,
    PlanEvent,
    StateEvent,
    convert,
    event_kind,
    utc_now,
)
from ..paths import private_dir, state_dir

__all__ = ["MIGRATIONS", "REDEPLOYABLE", "STATES", "Lease", "NameTaken", "RunMoved", "Store", "StoreError",
           "default_path", "explain", "utc_now"]

BENCH_STATUSES = ("running", "ok", "failed", "cancelled")
BENCH_SOURCES = ("gpuops", "import")
# A name in one of these states may be deployed again (a new run): its server is not running,
# or never started (gpuops closed or killed while planning or downloading: the download resumes).
REDEPLOYABLE = (State.STOPPED, State.PLANNED, State.DOWNLOADING)

# the bench runs' column of the engine's version: named after gpuops' first engine (stores keep it)
ENGINE_VERSION = engines.plan_key("engine_version")

MIGRATIONS: tuple[str, ...] = (
    # 1: deployments and their events
    """
    CREATE TABLE deployments (
        name        TEXT PRIMARY KEY,
        host        TEXT NOT NULL,
        model       TEXT NOT NULL,
        launcher    TEXT NOT NULL,
        plan_json   TEXT NOT NULL,
        state       TEXT NOT NULL,
        created_at  TEXT NOT NULL,
        updated_at  TEXT NOT NULL,
        cursor      TEXT,            -- journal cursor of the last line read
        log_offset  INTEGER          -- byte offset in the log file (process launcher)
    );
    CREATE TABLE events (
        id          INTEGER PRIMARY KEY AUTOINCREMENT,
        deployment  TEXT NOT NULL REFERENCES deployments(name) ON DELETE CASCADE,
        ts          TEXT NOT NULL,
        kind        TEXT NOT NULL,
        data_json   TEXT NOT NULL
    );
    CREATE INDEX events_by_deployment ON events(deployment, id);
    """,
    # 2: benchmark runs (no foreign key to deployments: a run keeps its own copy of the plan,
    # so it stays comparable after the deployment is replaced or removed)
    """
    CREATE TABLE bench_runs (
        id              INTEGER PRIMARY KEY AUTOINCREMENT,
        source          TEXT NOT NULL,   -- gpuops | import
        deployment      TEXT,
        host            TEXT,
        url             TEXT,
        model           TEXT,
        {ENGINE_VERSION}  TEXT,          -- the engine's version (the column keeps its first engine's name)
        gpus_json       TEXT,            -- {"count", "ids", "names"} or null
        plan_json       TEXT,
        profile         TEXT NOT NULL,
        settings_json   TEXT NOT NULL,
        status          TEXT NOT NULL,   -- running | ok | failed | cancelled
        error           TEXT,
        records_json    TEXT NOT NULL,   -- bench_serving's JSONL records, in order
        quality_json    TEXT,            -- {"eval", "score", ...} of a quality run
        remote_dir      TEXT,            -- the run folder on the host
        created_at      TEXT NOT NULL,
        started_at      TEXT,
        finished_at     TEXT
    );
    """.replace("{ENGINE_VERSION}", ENGINE_VERSION),
    # 3: the functional checks of a run (tool calls, reasoning split, MTP accept length)
    """
    ALTER TABLE bench_runs ADD COLUMN checks_json TEXT;
    """,
    # 4: runs (each start of a name is a new run, every run's events kept), where a run's log
    # begins, and which gpuops process watches the deployment (its heartbeat)
    """
    ALTER TABLE deployments ADD COLUMN run INTEGER NOT NULL DEFAULT 1;
    ALTER TABLE deployments ADD COLUMN run_cursor TEXT;
    ALTER TABLE deployments ADD COLUMN run_offset INTEGER;
    ALTER TABLE deployments ADD COLUMN watch_pid INTEGER;
    ALTER TABLE deployments ADD COLUMN watch_beat TEXT;
    ALTER TABLE events ADD COLUMN run INTEGER NOT NULL DEFAULT 1;
    CREATE INDEX events_by_run ON events(deployment, run, id);
    """,
    # 5: the lease of the process that deploys a name (one deploy per name at a time)
    """
    ALTER TABLE deployments ADD COLUMN lease_pid INTEGER;
    ALTER TABLE deployments ADD COLUMN lease_host TEXT;
    ALTER TABLE deployments ADD COLUMN lease_start REAL;
    """,
)
LOCK_WAIT_S = 10.0
# a lease held on another machine (a store on a shared folder) counts while its heartbeat is this fresh
LEASE_STALE_S = 60.0

_EVENT_COMMON = ("event", "ts", "run", "deployment")


class StoreError(Exception):
    """A store problem with a one-line message."""


class RunMoved(StoreError):
    """An event for a run that is over, or for a deployment that is gone (a late watcher's)."""


class NameTaken(StoreError):
    """Another live gpuops process is deploying this name."""


def explain(path: Path, exc: BaseException) -> StoreError:
    """One line for an SQLite (or file system) error on the store at `path`: what and what to do."""
    text = str(exc) or type(exc).__name__
    low = text.lower()
    aside = f"move it aside (mv {path} {path}.damaged) and gpuops starts an empty store"
    if isinstance(exc, OSError) and not isinstance(exc, sqlite3.Error):
        return StoreError(f"cannot use the state folder {path.parent}: {exc.strerror or text}: make it a writable "
                          "folder, or set XDG_STATE_HOME to one")
    if "not a database" in low or "malformed" in low or "encrypted" in low:
        return StoreError(f"{path} is damaged ({text}): {aside}")
    if "no such table" in low or "no such column" in low:
        return StoreError(f"{path} is damaged (a table or column is missing: {text}): {aside}")
    if "locked" in low or "busy" in low:
        return StoreError(f"{path} is locked by another gpuops (waited {LOCK_WAIT_S:g} s): try again when it is done")
    if "full" in low:
        return StoreError(f"cannot write {path}: the disk is full: free space on its file system, then try again")
    if "readonly" in low or "read-only" in low:
        return StoreError(f"cannot write {path}: it or its folder is read-only: make {path.parent} writable, or set "
                          "XDG_STATE_HOME to a writable folder")
    if "unable to open" in low:
        return StoreError(f"cannot open {path}: make {path.parent} a writable folder (or set XDG_STATE_HOME)")
    if "disk i/o" in low and _full(path.parent):  # SQLite could not make its -shm: no byte left
        return StoreError(f"cannot write {path}: the disk is full: free space on its file system, then try again")
    if "disk i/o" in low:
        return StoreError(f"cannot read or write {path}: an I/O error ({text}): is its disk full or failing?")
    return StoreError(f"{path}: {text}")


def _full(folder: Path) -> bool:
    try:
        st = os.statvfs(folder)
    except OSError:
        return False
    return st.f_bavail * st.f_frsize < 64 * 1024 or st.f_favail == 0


F = TypeVar("F", bound=Callable[..., Any])


def _guarded(method: F) -> F:
    """Store methods raise StoreError, never sqlite3's errors (generators too); a damaged row's
    StoreError gets the file's name and what to do."""
    def translate(self: "Store", exc: BaseException) -> BaseException:
        if isinstance(exc, _Damaged):
            return StoreError(f"{self.path}: {exc}: the store is damaged; move it aside (mv {self.path} "
                              f"{self.path}.damaged) and gpuops starts an empty store")
        if self.unwritable is not None and "readonly" in str(exc).lower():
            return StoreError(self.unwritable)  # read because it could not be written: why it could not
        return explain(self.path, exc)

    if inspect.isgeneratorfunction(method):
        @functools.wraps(method)
        def gen(self: "Store", *args: Any, **kwargs: Any) -> Any:
            try:
                yield from method(self, *args, **kwargs)
            except (sqlite3.Error, _Damaged) as exc:
                raise translate(self, exc) from None
        return gen  # type: ignore[return-value]

    @functools.wraps(method)
    def call(self: "Store", *args: Any, **kwargs: Any) -> Any:
        try:
            return method(self, *args, **kwargs)
        except (sqlite3.Error, _Damaged) as exc:
            raise translate(self, exc) from None
    return call  # type: ignore[return-value]


class _Damaged(Exception):
    """A stored row that does not decode (the guard adds the file and what to do)."""


@dataclass(frozen=True)
class Lease:
    """Which process deploys a name: its pid, machine and start time (a reused pid is not it)."""

    pid: int
    host: str
    start: float

    @classmethod
    def mine(cls) -> "Lease":
        return cls(os.getpid(), socket.gethostname(), _start_time(os.getpid()) or 0.0)

    def alive(self, beat: str | None = None) -> bool:
        if self.host != socket.gethostname():  # can't look: its heartbeat says
            return beat is not None and time.time() - _ts(beat) < LEASE_STALE_S
        started = _start_time(self.pid)
        return started is not None and abs(started - self.start) < 1.0


def _start_time(pid: int) -> float | None:
    try:
        return float(psutil.Process(pid).create_time())
    except (psutil.Error, OSError):
        return None


def _ts(stamp: str) -> float:
    from .view import parse_ts

    try:
        return parse_ts(stamp).timestamp()
    except (ValueError, TypeError, AttributeError):
        return 0.0


def _set_watcher(db: sqlite3.Connection, name: str, watcher: int, now: str) -> None:
    """`watcher` (a pid) watches `name`: its heartbeat, in the caller's transaction."""
    db.execute("UPDATE deployments SET watch_pid = ?, watch_beat = ? WHERE name = ?", (watcher, now, name))


def default_path() -> Path:
    return state_dir() / "gpuops.db"


class Store:
    unwritable: str | None = None  # a store only read: why it could not be opened to write

    def __init__(self, path: str | Path | None = None):
        self.path = Path(path) if path is not None else default_path()
        try:
            private_dir(self.path.parent)  # 0700, its files 0600 (tightened when an older gpuops made them)
            if self.path.exists() and not self.path.is_file():
                raise StoreError(f"{self.path} is not a file (a folder?): move it aside, and gpuops starts a new store")
            self._db = sqlite3.connect(self.path, isolation_level=None, timeout=LOCK_WAIT_S)
        except (OSError, sqlite3.Error) as exc:
            raise explain(self.path, exc) from None
        try:
            self._db.row_factory = sqlite3.Row
            self._db.execute("PRAGMA journal_mode=WAL")
            self._db.execute("PRAGMA synchronous=NORMAL")  # WAL + NORMAL: durable across process crashes
            self._db.execute("PRAGMA foreign_keys=ON")
            self._migrate()
            self._check_tables()
            private_dir(self.path.parent)  # the database, -wal and -shm just made: 0600
        except (sqlite3.Error, StoreError) as exc:
            self._db.close()
            raise (exc if isinstance(exc, StoreError) else explain(self.path, exc)) from None

    @classmethod
    def read_only(cls, why: str, path: str | Path | None = None) -> "Store":
        """The store read without writing a byte (no -wal or -shm made, no lock taken), for what must
        work when it cannot be written (a full disk: SQLite cannot even make its -shm to read): stop
        reads the plan and stops the server. Every write raises StoreError(`why`), the reason the
        store could not be opened as usual. What another gpuops has not yet checkpointed from its
        -wal is not seen."""
        from urllib.parse import quote

        self = cls.__new__(cls)
        self.path = Path(path) if path is not None else default_path()
        self.unwritable = why
        if not self.path.is_file():
            raise StoreError(why)
        try:
            self._db = sqlite3.connect(f"file:{quote(str(self.path))}?immutable=1", uri=True, isolation_level=None)
        except sqlite3.Error:
            raise StoreError(why) from None
        try:
            self._db.row_factory = sqlite3.Row
            if self._db.execute("PRAGMA user_version").fetchone()[0] != len(MIGRATIONS):
                raise StoreError(why)  # an older schema it cannot migrate, or a newer one
            self._check_tables()
        except (sqlite3.Error, StoreError):
            self._db.close()
            raise StoreError(why) from None
        return self

    def _check_tables(self) -> None:
        have = {r[0] for r in self._db.execute("SELECT name FROM sqlite_master WHERE type = 'table'")}
        missing = sorted({"deployments", "events", "bench_runs"} - have)
        if missing:
            raise StoreError(f"{self.path} is damaged (table {missing[0]} is missing): move it aside (mv {self.path} "
                             f"{self.path}.damaged) and gpuops starts an empty store")

    def _migrate(self) -> None:
        version = self._db.execute("PRAGMA user_version").fetchone()[0]
        if version > len(MIGRATIONS):
            raise StoreError(f"{self.path} was written by a newer gpuops (schema {version}); upgrade gpuops")
        for number, script in enumerate(MIGRATIONS[version:], start=version + 1):
            # one transaction per migration: a crash leaves the schema at a whole version
            self._db.executescript(f"BEGIN IMMEDIATE; {script}; PRAGMA user_version = {number}; COMMIT;")

    class _Tx:
        def __init__(self, db: sqlite3.Connection):
            self.db = db

        def __enter__(self) -> sqlite3.Connection:
            self.db.execute("BEGIN IMMEDIATE")  # the write lock up front: no upgrade deadlock
            return self.db

        def __exit__(self, *exc: Any) -> None:
            if self.db.in_transaction:
                self.db.execute("ROLLBACK" if exc[0] else "COMMIT")

    def _tx(self) -> "Store._Tx":
        return Store._Tx(self._db)

    def close(self) -> None:
        self._db.close()

    # ---------------------------------------------------------------- deployments

    @_guarded
    def add_deployment(self, host: str, plan: Plan, state: str = State.PLANNED, *,
                       lease: Lease | None = None, watcher: int | None = None) -> Deployment:
        """Record a deployment of `plan` on `host` (run 1), or a new run of a name whose server is
        not running (:data:`REDEPLOYABLE`): the name keeps its history, the run number grows.
        The check and the write are one transaction, and the name's lease becomes `lease` (this
        process's by default): :class:`NameTaken` while another live process holds it. `watcher`
        (a pid): that process's heartbeat, in the same transaction, so no reader ever sees the new
        run without the process that deploys it (a screen opening it then would take the run for
        one whose deploy ended before its server started, and stop watching)."""
        name = validate_host_name(plan.name)
        if state not in STATES:
            raise StoreError(f"unknown deployment state {state!r}")
        lease = lease or Lease.mine()
        now = utc_now()
        plan_json = _plan_json(plan)
        with self._tx() as db:
            row = db.execute("SELECT * FROM deployments WHERE name = ?", (name,)).fetchone()
            refusal = _refusal(row, lease)
            if refusal:
                raise refusal
            if row is None:
                run = 1
                db.execute(
                    "INSERT INTO deployments (name, host, model, launcher, plan_json, state, created_at, updated_at,"
                    " run, lease_pid, lease_host, lease_start) VALUES (?, ?, ?, ?, ?, ?, ?, ?, 1, ?, ?, ?)",
                    (name, host, plan.model.id, plan.launcher, plan_json, state, now, now, lease.pid, lease.host,
                     lease.start))
            else:
                run = int(row["run"]) + 1
                db.execute(
                    "UPDATE deployments SET host = ?, model = ?, launcher = ?, plan_json = ?, state = ?,"
                    " created_at = ?, updated_at = ?, run = ?, cursor = NULL, log_offset = NULL,"
                    " run_cursor = NULL, run_offset = NULL, lease_pid = ?, lease_host = ?, lease_start = ?"
                    " WHERE name = ?",
                    (host, plan.model.id, plan.launcher, plan_json, state, now, now, run, lease.pid, lease.host,
                     lease.start, name))
            if watcher is not None:
                _set_watcher(db, name, watcher, now)
            self._insert(db, name, run, StateEvent(state=state, name=name, host=host, ts=now))
        return self._get(name)

    @_guarded
    def refusal(self, name: str, lease: Lease | None = None) -> str | None:
        """Why a deploy of `name` would be refused now (None: it would not); the same test that
        :meth:`add_deployment` makes in its transaction, to ask before any check runs."""
        row = self._db.execute("SELECT * FROM deployments WHERE name = ?", (name,)).fetchone()
        refused = _refusal(row, lease or Lease.mine())
        return str(refused) if refused else None

    @_guarded
    def release_lease(self, name: str, lease: Lease | None = None) -> None:
        """The deploy of `name` by `lease`'s process (this one's) is over."""
        lease = lease or Lease.mine()
        with self._tx() as db:
            db.execute("UPDATE deployments SET lease_pid = NULL, lease_host = NULL, lease_start = NULL"
                       " WHERE name = ? AND lease_pid = ? AND lease_host = ?", (name, lease.pid, lease.host))

    @_guarded
    def lease_owner(self, name: str) -> tuple[Lease, str | None] | None:
        """Which process holds the name's lease (deploys it now or did until it died), with the
        heartbeat it wrote last; None when nobody does."""
        row = self._db.execute("SELECT lease_pid, lease_host, lease_start, watch_beat FROM deployments"
                               " WHERE name = ?", (name,)).fetchone()
        if row is None or row["lease_pid"] is None:
            return None
        return (Lease(int(row["lease_pid"]), str(row["lease_host"] or ""), float(row["lease_start"] or 0.0)),
                row["watch_beat"])

    @_guarded
    def deployment(self, name: str) -> Deployment | None:
        row = self._db.execute("SELECT * FROM deployments WHERE name = ?", (name,)).fetchone()
        return _deployment(row) if row else None

    def _get(self, name: str) -> Deployment:
        d = self.deployment(name)
        if d is None:
            raise StoreError(f"no deployment named {name!r}")
        return d

    @_guarded
    def deployments(self) -> list[Deployment]:
        return [_deployment(r) for r in self._db.execute("SELECT * FROM deployments ORDER BY created_at, name")]

    @_guarded
    def new_run(self, name: str, *, cursor: str | None = None, log_offset: int | None = None,
                lease: Lease | None = None, state: str | None = None, watcher: int | None = None) -> int:
        """The same deployment starts again (a restart, a fix applied): a new run whose log begins
        at `cursor`/`log_offset` (where the log ends now; None: where its server starts, set by
        :meth:`begin_log`). `lease`: the name's lease becomes it (:class:`NameTaken` while another
        live process holds it); `state`: the new run's first state, recorded with it; `watcher`:
        that pid's heartbeat, written with the new run (as :meth:`add_deployment`'s)."""
        with self._tx() as db:
            row = db.execute("SELECT * FROM deployments WHERE name = ?", (name,)).fetchone()
            if row is None:
                raise StoreError(f"no deployment named {name!r}")
            if lease is not None and row["lease_pid"] is not None:
                held = Lease(int(row["lease_pid"]), str(row["lease_host"] or ""), float(row["lease_start"] or 0.0))
                if (held.pid, held.host) != (lease.pid, lease.host) and held.alive(row["watch_beat"]):
                    raise NameTaken(f"{name!r} is being deployed by gpuops pid {held.pid} ({row['state']}): wait "
                                    "for it or stop it")
            if state is not None and state not in STATES:
                raise StoreError(f"unknown deployment state {state!r}")
            run = row["run"] + 1
            now = utc_now()
            db.execute("UPDATE deployments SET run = ?, cursor = ?, log_offset = ?, run_cursor = ?, run_offset = ?,"
                       " updated_at = ? WHERE name = ?", (run, cursor, log_offset, cursor, log_offset, now, name))
            if lease is not None:
                db.execute("UPDATE deployments SET lease_pid = ?, lease_host = ?, lease_start = ? WHERE name = ?",
                           (lease.pid, lease.host, lease.start, name))
            if watcher is not None:
                _set_watcher(db, name, watcher, now)
            if state is not None:
                db.execute("UPDATE deployments SET state = ? WHERE name = ?", (state, name))
                self._insert(db, name, run, StateEvent(state=state, ts=now))
        return int(run)

    @_guarded
    def begin_log(self, name: str, *, run: int | None = None, cursor: str | None = None,
                  log_offset: int | None = None) -> None:
        """The current run's log begins at `cursor`/`log_offset` (where the log ended when its
        server was started); reading it starts there."""
        with self._tx() as db:
            if db.execute("UPDATE deployments SET cursor = ?, log_offset = ?, run_cursor = ?, run_offset = ?"
                          " WHERE name = ? AND (? IS NULL OR run = ?)",
                          (cursor, log_offset, cursor, log_offset, name, run, run)).rowcount == 0:
                raise StoreError(f"no deployment named {name!r} on run {run}")

    @_guarded
    def record(self, name: str, event: Event, *, run: int | None = None, cursor: str | None = None,
               log_offset: int | None = None) -> Event:
        """Store `event` in the deployment's current run (or `run`, which must be current: an
        event of an earlier run is refused, so a late watcher never writes into a new run). A
        state event also sets the deployment's state. `cursor`/`log_offset`: the log position just
        after the line the event came from, stored with it in one transaction (a watch killed then
        cannot leave a phase recorded ahead of where a reattach resumes). Returns the event as
        stored (run, deployment and ts filled in). Log lines are not stored: the log lives on the
        host."""
        if isinstance(event, LogEvent):
            raise StoreError("log lines are not stored (the server's log lives on its host)")
        if isinstance(event, StateEvent) and event.state not in STATES:
            raise StoreError(f"unknown deployment state {event.state!r}")
        with self._tx() as db:
            row = db.execute("SELECT run FROM deployments WHERE name = ?", (name,)).fetchone()
            if row is None:
                raise RunMoved(f"no deployment named {name!r}")
            current = int(row["run"])
            if run is not None and run != current:
                raise RunMoved(f"{name}: run {run} is over (the deployment is on run {current})")
            event = msgspec.structs.replace(event, run=current, deployment=name)
            if isinstance(event, StateEvent):
                db.execute("UPDATE deployments SET state = ?, updated_at = ? WHERE name = ?",
                           (event.state, event.ts, name))
            self._insert(db, name, current, event)
            if cursor is not None or log_offset is not None:
                db.execute("UPDATE deployments SET cursor = COALESCE(?, cursor), log_offset = COALESCE(?, log_offset)"
                           " WHERE name = ?", (cursor, log_offset, name))
        return event

    @_guarded
    def set_state(self, name: str, state: str, *, run: int | None = None, **fields: Any) -> StateEvent:
        event = self.record(name, StateEvent(state=state, **fields), run=run)
        assert isinstance(event, StateEvent)
        return event

    def _insert(self, db: sqlite3.Connection, name: str, run: int, event: Event) -> None:
        kind = event_kind(event)
        data = {k: v for k, v in msgspec.to_builtins(event).items() if k not in _EVENT_COMMON}
        db.execute("INSERT INTO events (deployment, ts, kind, data_json, run) VALUES (?, ?, ?, ?, ?)",
                   (name, event.ts, kind, _strict_json(data), run))

    @_guarded
    def replace_plan(self, name: str, plan: Plan, why: PlanEvent) -> PlanEvent:
        """A fix applied: the deployment's plan becomes `plan`; the event keeps `why` (the finding's
        code and the diff) so the history says what changed and why."""
        if plan.name != name:
            raise StoreError(f"a plan named {plan.name!r} cannot replace {name!r}'s")
        with self._tx() as db:
            if db.execute("UPDATE deployments SET plan_json = ?, updated_at = ? WHERE name = ?",
                          (_plan_json(plan), utc_now(), name)).rowcount == 0:
                raise StoreError(f"no deployment named {name!r}")
        event = self.record(name, why)
        assert isinstance(event, PlanEvent)
        return event

    @_guarded
    def set_position(self, name: str, *, cursor: str | None = None, log_offset: int | None = None,
                     run: int | None = None, watcher: int | None = None) -> None:
        """Where reading the deployment's log stopped (resumed from there on reattach); with
        `watcher` (a pid), that process's heartbeat. Ignored when `run` is not the current run."""
        with self._tx() as db:
            db.execute("UPDATE deployments SET cursor = COALESCE(?, cursor), log_offset = COALESCE(?, log_offset),"
                       " watch_pid = COALESCE(?, watch_pid), watch_beat = CASE WHEN ? IS NULL THEN watch_beat"
                       " ELSE ? END WHERE name = ? AND (? IS NULL OR run = ?)",
                       (cursor, log_offset, watcher, watcher, utc_now(), name, run, run))

    @_guarded
    def release_watch(self, name: str, watcher: int) -> None:
        """`watcher` no longer watches the deployment."""
        with self._tx() as db:
            db.execute("UPDATE deployments SET watch_pid = NULL, watch_beat = NULL WHERE name = ? AND watch_pid = ?",
                       (name, watcher))

    @_guarded
    def events(self, name: str, *, run: int | None = None, kinds: tuple[str, ...] | None = None) -> Iterator[Event]:
        """The deployment's stored events, oldest first: of one run, or of all."""
        query = "SELECT * FROM events WHERE deployment = ?"
        args: list[Any] = [name]
        if run is not None:
            query += " AND run = ?"
            args.append(run)
        if kinds:
            unknown = [k for k in kinds if k not in EVENT_KINDS]
            if unknown:
                raise StoreError(f"unknown event kind {unknown[0]!r}")
            query += f" AND kind IN ({','.join('?' * len(kinds))})"
            args += list(kinds)
        for row in self._db.execute(query + " ORDER BY id", args):
            yield _event(row)

    @_guarded
    def remove(self, name: str) -> bool:
        with self._tx() as db:
            return db.execute("DELETE FROM deployments WHERE name = ?", (name,)).rowcount > 0

    # ---------------------------------------------------------------- benchmark runs

    @_guarded
    def add_bench_run(self, *, profile: str, settings: dict, source: str = "gpuops", status: str = "running",
                      deployment: str | None = None, host: str | None = None, url: str | None = None,
                      model: str | None = None, engine_version: str | None = None, gpus: dict | None = None,
                      plan: Plan | None = None, records: list | None = None, quality: dict | None = None,
                      remote_dir: str | None = None, started_at: str | None = None,
                      finished_at: str | None = None) -> BenchRun:
        """Record a run (``running`` when gpuops starts one; imported runs arrive finished).
        JSON is written strictly (no NaN/Infinity): callers normalise bench_serving's records."""
        if status not in BENCH_STATUSES:
            raise StoreError(f"unknown benchmark status {status!r}")
        if source not in BENCH_SOURCES:
            raise StoreError(f"unknown benchmark source {source!r}")
        with self._tx() as db:
            cur = db.execute(
                f"INSERT INTO bench_runs (source, deployment, host, url, model, {ENGINE_VERSION}, gpus_json, plan_json,"
                " profile, settings_json, status, records_json, quality_json, remote_dir, created_at, started_at,"
                " finished_at) VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?)",
                (source, deployment, host, url, model, engine_version, _strict_json_or_null(gpus),
                 None if plan is None else _plan_json(plan), profile, _strict_json(settings), status,
                 _strict_json(records or []), _strict_json_or_null(quality), remote_dir, utc_now(), started_at,
                 finished_at))
        return self._bench(cur.lastrowid or 0)

    @_guarded
    def add_bench_records(self, run_id: int, records: list) -> None:
        """Append bench_serving records to a run (each step of a sweep, as soon as it is read back)."""
        with self._tx() as db:
            row = db.execute("SELECT records_json FROM bench_runs WHERE id = ?", (run_id,)).fetchone()
            if row is None:
                raise StoreError(f"no benchmark run {run_id}")
            db.execute("UPDATE bench_runs SET records_json = ? WHERE id = ?",
                       (_strict_json(json.loads(row["records_json"]) + list(records)), run_id))

    @_guarded
    def finish_bench_run(self, run_id: int, status: str, *, error: str | None = None,
                         quality: dict | None = None) -> BenchRun:
        if status not in BENCH_STATUSES or status == "running":
            raise StoreError(f"a run finishes ok, failed or cancelled, not {status!r}")
        with self._tx() as db:
            if db.execute("UPDATE bench_runs SET status = ?, error = ?, quality_json = COALESCE(?, quality_json),"
                          " finished_at = ? WHERE id = ?",
                          (status, error, _strict_json_or_null(quality), utc_now(), run_id)).rowcount == 0:
                raise StoreError(f"no benchmark run {run_id}")
        return self._bench(run_id)

    @_guarded
    def set_bench_checks(self, run_id: int, checks: list) -> BenchRun:
        """The functional checks' results of a run (FunctionalCheck structs or their JSON)."""
        with self._tx() as db:
            if db.execute("UPDATE bench_runs SET checks_json = ? WHERE id = ?",
                          (_strict_json_or_null(msgspec.to_builtins(checks)), run_id)).rowcount == 0:
                raise StoreError(f"no benchmark run {run_id}")
        return self._bench(run_id)

    @_guarded
    def set_bench_model(self, run_id: int, model: str) -> BenchRun:
        """The model of a run that only learnt it from the server (a --url run)."""
        with self._tx() as db:
            if db.execute("UPDATE bench_runs SET model = ? WHERE id = ?", (model, run_id)).rowcount == 0:
                raise StoreError(f"no benchmark run {run_id}")
        return self._bench(run_id)

    @_guarded
    def bench_run(self, run_id: int) -> BenchRun | None:
        row = self._db.execute("SELECT * FROM bench_runs WHERE id = ?", (run_id,)).fetchone()
        return _bench_run(row) if row else None

    def _bench(self, run_id: int) -> BenchRun:
        run = self.bench_run(run_id)
        if run is None:
            raise StoreError(f"no benchmark run {run_id}")
        return run

    @_guarded
    def bench_runs(self) -> list[BenchRun]:
        return [_bench_run(r) for r in self._db.execute("SELECT * FROM bench_runs ORDER BY id")]


def _refusal(row: sqlite3.Row | None, lease: Lease) -> StoreError | None:
    """Why a name's stored row does not let `lease`'s process deploy it (None: it does)."""
    if row is None:
        return None
    name, state, host = row["name"], row["state"], row["host"]
    if state not in REDEPLOYABLE:
        return NameTaken(f"a deployment named {name!r} exists ({state} on {host}): stop it first or choose "
                         "another --name")
    if row["lease_pid"] is None:
        return None
    held = Lease(int(row["lease_pid"]), str(row["lease_host"] or ""), float(row["lease_start"] or 0.0))
    if (held.pid, held.host) == (lease.pid, lease.host) or not held.alive(row["watch_beat"]):
        return None  # this process's own, or its owner is gone (a kill -9): taken over
    where = "" if held.host == socket.gethostname() else f" on {held.host}"
    return NameTaken(f"{name!r} is being deployed by gpuops pid {held.pid}{where} ({state}): wait for it, stop it, "
                     "or choose another --name")


def _strict_json(value: Any) -> str:
    try:
        return json.dumps(value, allow_nan=False)
    except ValueError as exc:
        raise StoreError(f"not storable as JSON: {exc}") from None


def _strict_json_or_null(value: Any) -> str | None:
    return None if value is None else _strict_json(value)


def _plan_json(plan: Plan) -> str:
    return _strict_json(msgspec.to_builtins(plan))


def _loads(text: str | None, where: str) -> Any:
    if text is None:
        return None
    try:
        return json.loads(text)
    except ValueError as exc:
        raise _Damaged(f"its {where} is not JSON ({exc})") from None


def _plan(text: str | None, where: str) -> Plan | None:
    doc = _loads(text, where)
    if doc is None:
        return None
    try:
        return Plan.from_json(doc, where)
    except Invalid as exc:
        raise _Damaged(f"it holds a plan gpuops refuses: {exc}") from None


def _bench_run(row: sqlite3.Row) -> BenchRun:
    where = f"benchmark run {row['id']}"
    doc = {"id": row["id"], "source": row["source"], "deployment": row["deployment"], "host": row["host"],
           "url": row["url"], "model": row["model"], ENGINE_VERSION: row[ENGINE_VERSION],
           "gpus": _loads(row["gpus_json"], where), "profile": row["profile"],
           "settings": _loads(row["settings_json"], where), "status": row["status"], "error": row["error"],
           "records": _loads(row["records_json"], where), "quality": _loads(row["quality_json"], where),
           "remote_dir": row["remote_dir"], "created_at": row["created_at"], "started_at": row["started_at"],
           "finished_at": row["finished_at"], "checks": _loads(row["checks_json"], where)}
    try:
        run = convert(doc, BenchRun, where)
    except Invalid as exc:
        raise _Damaged(f"its {exc}") from None
    run.plan = _plan(row["plan_json"], f"{where}'s plan")
    return run  # type: ignore[no-any-return]


def _deployment(row: sqlite3.Row) -> Deployment:
    name = row["name"]
    plan = _plan(row["plan_json"], f"deployment {name}'s plan")
    assert plan is not None
    doc = {k: row[k] for k in ("name", "host", "model", "launcher", "state", "run", "created_at", "updated_at",
                               "cursor", "log_offset", "run_cursor", "run_offset", "watch_pid", "watch_beat")}
    return Deployment(plan=plan, **doc)


def _event(row: sqlite3.Row) -> Event:
    data = _loads(row["data_json"], f"event {row['id']}")
    doc = {**(data if isinstance(data, dict) else {}), "event": row["kind"], "ts": row["ts"], "run": row["run"],
           "deployment": row["deployment"]}
    try:
        return convert(doc, Event, f"event {row['id']}")  # type: ignore[no-any-return]
    except Invalid as exc:
        raise _Damaged(f"its {exc}") from None
