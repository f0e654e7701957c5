"""gpuops' store: deployments, their plans and their events, and benchmark runs, in SQLite (WAL).

Every write is its own committed transaction, so a `kill -9` of gpuops at any moment
loses nothing already recorded; WAL lets a second gpuops read while one writes.
Schema changes are migrations keyed on ``PRAGMA user_version``.
"""

from __future__ import annotations

import json
import sqlite3
from dataclasses import dataclass
from datetime import datetime, timezone
from pathlib import Path
from typing import Any, Iterator

from ..config import PHASES, validate_host_name
from ..paths import state_dir

STATES = ("planned", "downloading", *PHASES, "crashed", "stalled", "stopped")
EVENT_KINDS = ("state", "phase", "progress", "log", "finding", "plan", "checks")
BENCH_STATUSES = ("running", "ok", "failed", "cancelled")
BENCH_SOURCES = ("gpuops", "import")

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
        sglang_version  TEXT,
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
    """,
    # 3: the functional checks of a run (tool calls, reasoning split, MTP accept length)
    """
    ALTER TABLE bench_runs ADD COLUMN checks_json TEXT;
    """,
)


class StoreError(Exception):
    """A store problem with a one-line message."""


def utc_now() -> str:
    """RFC 3339 UTC with milliseconds."""
    return datetime.now(timezone.utc).isoformat(timespec="milliseconds").replace("+00:00", "Z")


@dataclass(frozen=True)
class Deployment:
    name: str
    host: str
    model: str
    launcher: str
    plan: dict
    state: str
    created_at: str
    updated_at: str
    cursor: str | None
    log_offset: int | None

    def to_json(self) -> dict:
        return {"name": self.name, "host": self.host, "model": self.model, "launcher": self.launcher,
                "state": self.state, "created_at": self.created_at, "updated_at": self.updated_at,
                "port": self.plan.get("port"), "tp": self.plan.get("tp"), "gpu_ids": self.plan.get("gpu_ids")}


@dataclass(frozen=True)
class Event:
    id: int
    deployment: str
    ts: str
    kind: str
    data: dict

    def to_json(self) -> dict:
        return {"ts": self.ts, "event": self.kind, "deployment": self.deployment, **self.data}


@dataclass(frozen=True)
class BenchRun:
    id: int
    source: str
    deployment: str | None
    host: str | None
    url: str | None
    model: str | None
    sglang_version: str | None
    gpus: dict | None
    plan: dict | None
    profile: str
    settings: dict
    status: str
    error: str | None
    records: list
    quality: dict | None
    remote_dir: str | None
    created_at: str
    started_at: str | None
    finished_at: str | None
    checks: list | None = None  # [{name, ok, reason, details}] (core/checks.py), None: not run

    def to_json(self, full: bool = True) -> dict:
        """The run as JSON; ``full=False`` leaves out the plan and the records (listings)."""
        doc = {"id": self.id, "source": self.source, "deployment": self.deployment, "host": self.host,
               "url": self.url, "model": self.model, "sglang_version": self.sglang_version, "gpus": self.gpus,
               "profile": self.profile, "settings": self.settings, "status": self.status, "error": self.error,
               "quality": self.quality, "remote_dir": self.remote_dir, "created_at": self.created_at,
               "started_at": self.started_at, "finished_at": self.finished_at, "checks": self.checks}
        if full:
            doc.update(plan=self.plan, records=self.records)
        return doc


def default_path() -> Path:
    return state_dir() / "gpuops.db"


class Store:
    def __init__(self, path: str | Path | None = None):
        self.path = Path(path) if path is not None else default_path()
        self.path.parent.mkdir(parents=True, exist_ok=True)
        self._db = sqlite3.connect(self.path, isolation_level=None, timeout=10.0)
        self._db.row_factory = sqlite3.Row
        self._db.execute("PRAGMA journal_mode=WAL")
        self._db.execute("PRAGMA synchronous=NORMAL")  # WAL + NORMAL: durable across process crashes
        self._db.execute("PRAGMA foreign_keys=ON")
        self._migrate()

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

    def add_deployment(self, name: str, host: str, plan: dict, state: str = "planned") -> Deployment:
        validate_host_name(name)
        if state not in STATES:
            raise StoreError(f"unknown deployment state {state!r}")
        existing = self.deployment(name)
        # A deployment whose server never started (gpuops closed or killed while planning or
        # downloading) may be deployed again: its download resumes from what is on disk.
        if existing is not None and existing.state not in ("stopped", "planned", "downloading"):
            raise StoreError(f"a deployment named {name!r} exists ({existing.state} on {existing.host}): "
                             "stop it first or choose another --name")
        now = utc_now()
        model = (plan.get("model") or {}).get("id") or "?"
        with self._tx() as db:
            db.execute("DELETE FROM deployments WHERE name = ?", (name,))
            db.execute(
                "INSERT INTO deployments (name, host, model, launcher, plan_json, state, created_at, updated_at)"
                " VALUES (?, ?, ?, ?, ?, ?, ?, ?)",
                (name, host, model, plan.get("launcher") or "systemd", json.dumps(plan), state, now, now),
            )
            db.execute("INSERT INTO events (deployment, ts, kind, data_json) VALUES (?, ?, 'state', ?)",
                       (name, now, json.dumps({"state": state})))
        return self.deployment(name)  # type: ignore[return-value]

    def deployment(self, name: str) -> Deployment | None:
        row = self._db.execute("SELECT * FROM deployments WHERE name = ?", (name,)).fetchone()
        return _deployment(row) if row else None

    def deployments(self) -> list[Deployment]:
        return [_deployment(r) for r in self._db.execute("SELECT * FROM deployments ORDER BY created_at, name")]

    def set_state(self, name: str, state: str, **data: Any) -> Event:
        if state not in STATES:
            raise StoreError(f"unknown deployment state {state!r}")
        now = utc_now()
        with self._tx() as db:
            if db.execute("UPDATE deployments SET state = ?, updated_at = ? WHERE name = ?",
                          (state, now, name)).rowcount == 0:
                raise StoreError(f"no deployment named {name!r}")
            cur = db.execute("INSERT INTO events (deployment, ts, kind, data_json) VALUES (?, ?, 'state', ?)",
                             (name, now, json.dumps({"state": state, **data})))
        return Event(cur.lastrowid or 0, name, now, "state", {"state": state, **data})

    def add_event(self, name: str, kind: str, data: dict, ts: str | None = None) -> Event:
        if kind not in EVENT_KINDS:
            raise StoreError(f"unknown event kind {kind!r}")
        ts = ts or utc_now()
        with self._tx() as db:
            cur = db.execute("INSERT INTO events (deployment, ts, kind, data_json) VALUES (?, ?, ?, ?)",
                             (name, ts, kind, json.dumps(data)))
        return Event(cur.lastrowid or 0, name, ts, kind, data)

    def replace_plan(self, name: str, plan: dict, why: dict) -> Event:
        """A fix applied: the deployment's plan becomes `plan`; the event (kind "plan") keeps
        `why` (the finding code and the diff) so the history says what changed and why."""
        now = utc_now()
        with self._tx() as db:
            if db.execute("UPDATE deployments SET plan_json = ?, updated_at = ? WHERE name = ?",
                          (json.dumps(plan), now, name)).rowcount == 0:
                raise StoreError(f"no deployment named {name!r}")
            cur = db.execute("INSERT INTO events (deployment, ts, kind, data_json) VALUES (?, ?, 'plan', ?)",
                             (name, now, json.dumps(why)))
        return Event(cur.lastrowid or 0, name, now, "plan", why)

    def set_position(self, name: str, *, cursor: str | None = None, log_offset: int | None = None) -> None:
        """Where reading the deployment's log stopped (resumed from there on reattach)."""
        with self._tx() as db:
            db.execute("UPDATE deployments SET cursor = COALESCE(?, cursor), log_offset = COALESCE(?, log_offset) "
                       "WHERE name = ?", (cursor, log_offset, name))

    def events(self, name: str, after_id: int = 0, kinds: tuple[str, ...] | None = None) -> Iterator[Event]:
        query = "SELECT * FROM events WHERE deployment = ? AND id > ?"
        args: list[Any] = [name, after_id]
        if kinds:
            query += f" AND kind IN ({','.join('?' * len(kinds))})"
            args += list(kinds)
        for row in self._db.execute(query + " ORDER BY id", args):
            yield Event(row["id"], row["deployment"], row["ts"], row["kind"], json.loads(row["data_json"]))

    def remove(self, name: str) -> bool:
        with self._tx() as db:
            return db.execute("DELETE FROM deployments WHERE name = ?", (name,)).rowcount > 0


    # ---------------------------------------------------------------- benchmark runs

    def add_bench_run(self, *, profile: str, settings: dict, source: str = "gpuops", status: str = "running",
                      deployment: str | None = None, host: str | None = None, url: str | None = None,
                      model: str | None = None, sglang_version: str | None = None, gpus: dict | None = None,
                      plan: dict | None = None, records: list | None = None, quality: dict | None = None,
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
                "INSERT INTO bench_runs (source, deployment, host, url, model, sglang_version, gpus_json, plan_json,"
                " profile, settings_json, status, records_json, quality_json, remote_dir, created_at, started_at,"
                " finished_at) VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?)",
                (source, deployment, host, url, model, sglang_version, _strict_json_or_null(gpus),
                 _strict_json_or_null(plan), profile, _strict_json(settings), status, _strict_json(records or []),
                 _strict_json_or_null(quality), remote_dir, utc_now(), started_at, finished_at))
        return self.bench_run(cur.lastrowid or 0)  # type: ignore[return-value]

    def add_bench_records(self, run_id: int, records: list) -> None:
        """Append bench_serving records to a run (each step of a sweep, as soon as it is read back)."""
        with self._tx() as db:
            row = db.execute("SELECT records_json FROM bench_runs WHERE id = ?", (run_id,)).fetchone()
            if row is None:
                raise StoreError(f"no benchmark run {run_id}")
            db.execute("UPDATE bench_runs SET records_json = ? WHERE id = ?",
                       (_strict_json(json.loads(row["records_json"]) + list(records)), run_id))

    def finish_bench_run(self, run_id: int, status: str, *, error: str | None = None,
                         quality: dict | None = None) -> BenchRun:
        if status not in BENCH_STATUSES or status == "running":
            raise StoreError(f"a run finishes ok, failed or cancelled, not {status!r}")
        with self._tx() as db:
            if db.execute("UPDATE bench_runs SET status = ?, error = ?, quality_json = COALESCE(?, quality_json),"
                          " finished_at = ? WHERE id = ?",
                          (status, error, _strict_json_or_null(quality), utc_now(), run_id)).rowcount == 0:
                raise StoreError(f"no benchmark run {run_id}")
        return self.bench_run(run_id)  # type: ignore[return-value]

    def set_bench_checks(self, run_id: int, checks: list) -> BenchRun:
        """The functional checks' results of a run."""
        with self._tx() as db:
            if db.execute("UPDATE bench_runs SET checks_json = ? WHERE id = ?",
                          (_strict_json_or_null(checks), run_id)).rowcount == 0:
                raise StoreError(f"no benchmark run {run_id}")
        return self.bench_run(run_id)  # type: ignore[return-value]

    def set_bench_model(self, run_id: int, model: str) -> BenchRun:
        """The model of a run that only learnt it from the server (a --url run)."""
        with self._tx() as db:
            if db.execute("UPDATE bench_runs SET model = ? WHERE id = ?", (model, run_id)).rowcount == 0:
                raise StoreError(f"no benchmark run {run_id}")
        return self.bench_run(run_id)  # type: ignore[return-value]

    def bench_run(self, run_id: int) -> BenchRun | None:
        row = self._db.execute("SELECT * FROM bench_runs WHERE id = ?", (run_id,)).fetchone()
        return _bench_run(row) if row else None

    def bench_runs(self) -> list[BenchRun]:
        return [_bench_run(r) for r in self._db.execute("SELECT * FROM bench_runs ORDER BY id")]


def _strict_json(value: Any) -> str:
    try:
        return json.dumps(value, allow_nan=False)
    except ValueError as exc:
        raise StoreError(f"not storable as JSON: {exc}") from None


def _strict_json_or_null(value: Any) -> str | None:
    return None if value is None else _strict_json(value)


def _loads(text: str | None) -> Any:
    return None if text is None else json.loads(text)


def _bench_run(row: sqlite3.Row) -> BenchRun:
    return BenchRun(row["id"], row["source"], row["deployment"], row["host"], row["url"], row["model"],
                    row["sglang_version"], _loads(row["gpus_json"]), _loads(row["plan_json"]), row["profile"],
                    json.loads(row["settings_json"]), row["status"], row["error"], json.loads(row["records_json"]),
                    _loads(row["quality_json"]), row["remote_dir"], row["created_at"], row["started_at"],
                    row["finished_at"], _loads(row["checks_json"]))


def _deployment(row: sqlite3.Row) -> Deployment:
    return Deployment(row["name"], row["host"], row["model"], row["launcher"], json.loads(row["plan_json"]),
                      row["state"], row["created_at"], row["updated_at"], row["cursor"], row["log_offset"])

