"""The store: deployments and events in SQLite, surviving kill -9 at any moment."""

from __future__ import annotations

import json
import signal
import sqlite3
import subprocess
import sys

import pytest

from gpuops.core.deploy.store import MIGRATIONS, STATES, Store, StoreError
from gpuops.core.domain import PlanEvent, ProgressEvent, StateEvent, event_kind
from tests.plans import make_plan

PLAN = make_plan("qwen122", model="Qwen/Qwen3.5-122B-A10B", gpu_ids=(0, 1, 2, 3))


def summary(events) -> list[tuple]:
    return [(event_kind(e), e.run, getattr(e, "state", None) or getattr(e, "done", None)) for e in events]


def test_deployment_lifecycle(tmp_path):
    store = Store(tmp_path / "g.db")
    d = store.add_deployment("gpu1", PLAN)
    assert (d.state, d.model, d.launcher, d.plan.tp, d.run) == ("planned", "Qwen/Qwen3.5-122B-A10B", "process", 4, 1)
    assert d.plan == PLAN  # decoded and validated back as the same Plan
    for state in ("downloading", "starting", "dist_init", "weights"):
        store.set_state("qwen122", state)
    store.record("qwen122", ProgressEvent(phase="weights", done=12, total=40))
    store.set_position("qwen122", cursor="s=abc;i=1", log_offset=4096)
    d = store.deployment("qwen122")
    assert d.state == "weights" and d.cursor == "s=abc;i=1" and d.log_offset == 4096
    assert summary(store.events("qwen122")) == [("state", 1, "planned"), ("state", 1, "downloading"),
                                                ("state", 1, "starting"), ("state", 1, "dist_init"),
                                                ("state", 1, "weights"), ("progress", 1, 12)]
    assert [event_kind(e) for e in store.events("qwen122", kinds=("progress",))] == ["progress"]
    with pytest.raises(StoreError, match="exists"):
        store.add_deployment("gpu1", PLAN)
    with pytest.raises(StoreError, match="unknown deployment state"):
        store.set_state("qwen122", "exploded")
    with pytest.raises(StoreError, match="no deployment"):
        store.set_state("nope", "stopped")
    store.set_state("qwen122", "stopped")
    assert set(STATES) >= {"planned", "downloading", "ready", "crashed", "stalled", "stopped"}


def test_each_start_of_a_name_is_a_new_run_and_every_run_keeps_its_events(tmp_path):
    store = Store(tmp_path / "g.db")
    store.add_deployment("gpu1", PLAN)
    store.set_state("qwen122", "ready")
    store.set_position("qwen122", log_offset=9000)
    store.set_state("qwen122", "stopped")
    d = store.add_deployment("gpu2", PLAN)  # a stopped name can be reused: run 2
    assert (d.host, d.run, d.state, d.log_offset) == ("gpu2", 2, "planned", None)
    assert summary(store.events("qwen122", run=2)) == [("state", 2, "planned")]
    assert [e.state for e in store.events("qwen122", run=1)] == ["planned", "ready", "stopped"]
    # a watcher of run 1 that comes late writes nothing into run 2
    with pytest.raises(StoreError, match="run 1 is over"):
        store.record("qwen122", StateEvent(state="ready"), run=1)
    store.set_position("qwen122", log_offset=123, run=1)
    assert store.deployment("qwen122").log_offset is None
    # a restart of the same deployment: a new run whose log begins where it ended
    store.begin_log("qwen122", run=2, log_offset=500)
    assert store.new_run("qwen122", log_offset=800) == 3
    d = store.deployment("qwen122")
    assert (d.run, d.run_offset, d.log_offset) == (3, 800, 800)
    fixed = PLAN.replace(env={"NCCL_DEBUG": "INFO"})
    why = store.replace_plan("qwen122", fixed, PlanEvent(code="nccl-init-stall", diff=[("+", "NCCL_DEBUG=INFO")]))
    assert why.run == 3 and store.deployment("qwen122").plan.env == {"NCCL_DEBUG": "INFO"}
    assert [e.diff for e in store.events("qwen122", kinds=("plan",))] == [[("+", "NCCL_DEBUG=INFO")]]


def test_schema_version_and_newer_schema_refused(tmp_path):
    path = tmp_path / "g.db"
    Store(path).close()
    db = sqlite3.connect(path)
    assert db.execute("PRAGMA user_version").fetchone()[0] == len(MIGRATIONS)
    assert db.execute("PRAGMA journal_mode").fetchone()[0] == "wal"
    db.execute("PRAGMA user_version = 99")
    db.commit()
    db.close()
    with pytest.raises(StoreError, match="newer gpuops"):
        Store(path)


WRITER = """
import sys
from gpuops.core.deploy.store import Store
store = Store(sys.argv[1])
from gpuops.core.domain import ProgressEvent
from tests.plans import make_plan
store.add_deployment("gpu1", make_plan("d"))
i = 0
while True:
    store.record("d", ProgressEvent(phase="weights", done=i))
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
        ns = [e.done for e in store.events("d", kinds=("progress",))]
        # every acknowledged event is there, and what was written after is whole: no gap, no torn row
        assert len(ns) > acknowledged and ns == list(range(len(ns)))
        assert sqlite3.connect(path).execute("PRAGMA integrity_check").fetchone()[0] == "ok"
        store.remove("d")
        store.close()


def test_events_are_json_lines_ready(tmp_path):
    from gpuops.core.domain import event_json

    store = Store(tmp_path / "g.db")
    store.add_deployment("gpu1", make_plan("d"))
    e = store.set_state("d", "ready", endpoint="http://127.0.0.1:30000")
    doc = event_json(e)
    assert doc["event"] == "state" and doc["state"] == "ready" and doc["ts"].endswith("Z")
    assert doc["run"] == 1 and doc["deployment"] == "d"
    json.dumps(doc)


def test_cli_status(tmp_path):
    import os

    from tests.test_cli import gpuops

    env = dict(os.environ, XDG_STATE_HOME=str(tmp_path / "state"), XDG_CONFIG_HOME=str(tmp_path / "cfg"))
    out = gpuops("status", "--json", env=env)
    assert out.returncode == 0 and json.loads(out.stdout) == {"schema": 1, "deployments": []}
    assert "no deployments yet" in gpuops("status", env=env).stdout
    store = Store(tmp_path / "state" / "gpuops" / "gpuops.db")
    store.add_deployment("gpu1", PLAN)
    store.set_state("qwen122", "weights")
    out = gpuops("status", "--json", env=env)
    (d,) = json.loads(out.stdout)["deployments"]
    assert (d["name"], d["state"], d["host"], d["tp"]) == ("qwen122", "weights", "gpu1", 4)
    out = gpuops("status", "qwen122", "--json", env=env)
    assert [e["state"] for e in json.loads(out.stdout)["events"]] == ["planned", "weights"]
    out = gpuops("status", "nope", env=env)
    assert out.returncode == 2 and "no deployment named 'nope'" in out.stderr


def test_bench_runs(tmp_path):
    store = Store(tmp_path / "g.db")
    run = store.add_bench_run(profile="sweep", settings={"concurrencies": [1, 4], "request_rate": "inf"},
                              deployment="qwen122", host="gpu1", url="http://127.0.0.1:30000", model="Qwen/Qwen3.5-122B-A10B",
                              engine_version="0.5.23", gpus={"count": 4, "ids": [0, 1, 2, 3], "names": None}, plan=PLAN,
                              remote_dir="/root/.local/state/gpuops/bench/x", started_at="2026-11-30T10:00:00.000Z")
    assert (run.id, run.status, run.records, run.quality, run.finished_at) == (1, "running", [], None, None)
    store.add_bench_records(run.id, [{"max_concurrency": 1, "output_throughput": 10.5}])
    store.add_bench_records(run.id, [{"max_concurrency": 4, "output_throughput": 30.0}])
    done = store.finish_bench_run(run.id, "ok")
    assert done.status == "ok" and done.finished_at >= done.created_at and done.plan == PLAN
    assert [r["max_concurrency"] for r in done.records] == [1, 4]
    assert store.set_bench_model(run.id, "other").model == "other"
    q = store.add_bench_run(profile="quality", settings={"eval_name": "gsm8k"})
    assert store.finish_bench_run(q.id, "failed", error="run_eval printed no score").error == "run_eval printed no score"
    assert store.finish_bench_run(q.id, "ok", quality={"eval": "gsm8k", "score": 0.5}).quality["score"] == 0.5
    assert [r.id for r in store.bench_runs()] == [1, 2] and store.bench_run(99) is None
    doc = store.bench_run(1).to_json(full=False)
    assert "records" not in doc and "plan" not in doc and doc["gpus"]["count"] == 4
    json.dumps(store.bench_run(1).to_json(), allow_nan=False)
    with pytest.raises(StoreError, match="not storable as JSON"):  # bench_serving's Infinity is normalised first
        store.add_bench_records(run.id, [{"request_rate": float("inf")}])
    with pytest.raises(StoreError, match="finishes ok, failed or cancelled"):
        store.finish_bench_run(run.id, "running")
    with pytest.raises(StoreError, match="no benchmark run 42"):
        store.finish_bench_run(42, "ok")
    with pytest.raises(StoreError, match="unknown benchmark status"):
        store.add_bench_run(profile="x", settings={}, status="great")
    store.add_deployment("gpu1", PLAN)
    assert store.remove("qwen122")  # a run outlives its deployment
    assert store.bench_run(1).deployment == "qwen122"
    store.close()


def test_a_schema_1_store_is_migrated_keeping_its_deployments(tmp_path):
    path = tmp_path / "g.db"
    db = sqlite3.connect(path)
    db.executescript(MIGRATIONS[0] + "; PRAGMA user_version = 1;")
    old = json.dumps(make_plan("old").to_json())  # a plan document as schema 1 stored it (with its unit)
    db.execute("INSERT INTO deployments (name, host, model, launcher, plan_json, state, created_at, updated_at) "
               "VALUES ('old', 'gpu1', 'm', 'process', ?, 'ready', 't', 't')", (old,))
    db.execute("INSERT INTO events (deployment, ts, kind, data_json) VALUES ('old', 't', 'state', '{\"state\": \"ready\"}')")
    db.commit()
    db.close()
    store = Store(path)
    d = store.deployment("old")
    assert (d.state, d.run, d.plan.name) == ("ready", 1, "old")
    assert summary(store.events("old", run=1)) == [("state", 1, "ready")]
    assert store.add_bench_run(profile="smoke", settings={}).id == 1
    assert sqlite3.connect(path).execute("PRAGMA user_version").fetchone()[0] == len(MIGRATIONS) == 5
    store.close()


def test_an_event_recorded_with_its_log_position_stores_both_or_neither(tmp_path):
    from gpuops.core.domain import PhaseEvent

    store = Store(tmp_path / "g.db")
    store.add_deployment("gpu1", PLAN)
    store.set_position("qwen122", cursor="s=abc;i=1", log_offset=100)
    store.record("qwen122", PhaseEvent(phase="cuda_graph", line="Capture begin."), run=1, log_offset=4096)
    d = store.deployment("qwen122")
    assert (d.log_offset, d.cursor) == (4096, "s=abc;i=1")  # the cursor left as it was
    assert [e.phase for e in store.events("qwen122", kinds=("phase",))] == ["cuda_graph"]
    store.new_run("qwen122", log_offset=5000)
    with pytest.raises(StoreError, match="run 1 is over"):  # a late watcher of run 1: nothing of it written
        store.record("qwen122", PhaseEvent(phase="http", line="Uvicorn running"), run=1, log_offset=9999)
    assert store.deployment("qwen122").log_offset == 5000
    assert list(store.events("qwen122", run=2, kinds=("phase",))) == []
