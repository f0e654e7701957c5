"""The store: deployments and events in SQLite, surviving kill -9 at any moment."""

from __future__ import annotations

import json
import signal
import sqlite3
import subprocess
import sys

import pytest

from gpuops.core.store import STATES, Store, StoreError

PLAN = {"schema": 1, "name": "qwen122", "model": {"id": "Qwen/Qwen3.5-122B-A10B"}, "launcher": "process",
        "tp": 4, "gpu_ids": [0, 1, 2, 3], "port": 30000}


def test_deployment_lifecycle(tmp_path):
    store = Store(tmp_path / "g.db")
    d = store.add_deployment("qwen122", "gpu1", PLAN)
    assert (d.state, d.model, d.launcher, d.plan["tp"]) == ("planned", "Qwen/Qwen3.5-122B-A10B", "process", 4)
    for state in ("downloading", "starting", "dist_init", "weights"):
        store.set_state("qwen122", state)
    store.add_event("qwen122", "progress", {"phase": "weights", "done": 12, "total": 40})
    store.set_position("qwen122", cursor="s=abc;i=1", log_offset=4096)
    d = store.deployment("qwen122")
    assert d.state == "weights" and d.cursor == "s=abc;i=1" and d.log_offset == 4096
    kinds = [(e.kind, e.data.get("state") or e.data.get("done")) for e in store.events("qwen122")]
    assert kinds == [("state", "planned"), ("state", "downloading"), ("state", "starting"), ("state", "dist_init"),
                     ("state", "weights"), ("progress", 12)]
    last = list(store.events("qwen122"))[-2].id
    assert [e.kind for e in store.events("qwen122", after_id=last)] == ["progress"]
    with pytest.raises(StoreError, match="exists"):
        store.add_deployment("qwen122", "gpu1", PLAN)
    with pytest.raises(StoreError, match="unknown deployment state"):
        store.set_state("qwen122", "exploded")
    with pytest.raises(StoreError, match="no deployment"):
        store.set_state("nope", "stopped")
    store.set_state("qwen122", "stopped")
    assert store.add_deployment("qwen122", "gpu2", PLAN).host == "gpu2"  # a stopped name can be reused
    assert set(STATES) >= {"planned", "downloading", "ready", "crashed", "stalled", "stopped"}


def test_schema_version_and_newer_schema_refused(tmp_path):
    path = tmp_path / "g.db"
    Store(path).close()
    db = sqlite3.connect(path)
    assert db.execute("PRAGMA user_version").fetchone()[0] == 1
    assert db.execute("PRAGMA journal_mode").fetchone()[0] == "wal"
    db.execute("PRAGMA user_version = 99")
    db.commit()
    db.close()
    with pytest.raises(StoreError, match="newer gpuops"):
        Store(path)


WRITER = """
import sys
from gpuops.core.store import Store
store = Store(sys.argv[1])
store.add_deployment("d", "gpu1", {"model": {"id": "m"}})
i = 0
while True:
    store.add_event("d", "log", {"n": i})
    print(i, flush=True)   # printed only after the event is committed
    i += 1
"""


def test_kill_9_at_any_moment_loses_nothing_recorded(tmp_path):
    path = tmp_path / "g.db"
    for round_ in range(5):
        proc = subprocess.Popen([sys.executable, "-c", WRITER, str(path)], stdout=subprocess.PIPE, text=True)
        acknowledged = -1
        for _ in range(200 + 137 * round_):  # kill it mid-stream, at a different point each round
            acknowledged = int(proc.stdout.readline())
        proc.send_signal(signal.SIGKILL)
        proc.wait()
        store = Store(path)
        ns = [e.data["n"] for e in store.events("d", kinds=("log",))]
        # every acknowledged event is there, and what was written after is whole: no gap, no torn row
        assert len(ns) > acknowledged and ns == list(range(len(ns)))
        assert sqlite3.connect(path).execute("PRAGMA integrity_check").fetchone()[0] == "ok"
        store.remove("d")
        store.close()


def test_events_are_json_lines_ready(tmp_path):
    store = Store(tmp_path / "g.db")
    store.add_deployment("d", "gpu1", PLAN)
    e = store.set_state("d", "ready", endpoint="http://127.0.0.1:30000")
    doc = e.to_json()
    assert doc["event"] == "state" and doc["state"] == "ready" and doc["ts"].endswith("Z")
    json.dumps(doc)


def test_cli_status(tmp_path):
    import os

    from tests.test_cli import gpuops

    env = dict(os.environ, XDG_STATE_HOME=str(tmp_path / "state"), XDG_CONFIG_HOME=str(tmp_path / "cfg"))
    out = gpuops("status", "--json", env=env)
    assert out.returncode == 0 and json.loads(out.stdout) == {"schema": 1, "deployments": []}
    assert "no deployments yet" in gpuops("status", env=env).stdout
    store = Store(tmp_path / "state" / "gpuops" / "gpuops.db")
    store.add_deployment("qwen122", "gpu1", PLAN)
    store.set_state("qwen122", "weights")
    out = gpuops("status", "--json", env=env)
    (d,) = json.loads(out.stdout)["deployments"]
    assert (d["name"], d["state"], d["host"], d["tp"]) == ("qwen122", "weights", "gpu1", 4)
    out = gpuops("status", "qwen122", "--json", env=env)
    assert [e["state"] for e in json.loads(out.stdout)["events"]] == ["planned", "weights"]
    out = gpuops("status", "nope", env=env)
    assert out.returncode == 2 and "no deployment named 'nope'" in out.stderr
