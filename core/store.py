"""gpuops' store: deployments, their plans and their events, in SQLite (WAL).

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

from .config import PHASES, validate_host_name
from .paths import state_dir

STATES = ("planned", "downloading", *PHASES, "crashed", "stalled", "stopped")
EVENT_KINDS = ("state", "phase", "progress", "log", "finding")

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
        if existing is not None and existing.state != "stopped":
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


def _deployment(row: sqlite3.Row) -> Deployment:
    return Deployment(row["name"], row["host"], row["model"], row["launcher"], json.loads(row["plan_json"]),
                      row["state"], row["created_at"], row["updated_at"], row["cursor"], row["log_offset"])

