"""Benchmark events and swap steps are tagged structs of the domain (core/domain.py), and their JSON
is what `gpuops bench --json` and `gpuops swap --json` printed when they were dicts: the same keys
in the same order, byte for byte (field names only grow). Each variant a kind has (a step begun, or
ended ok, or failed) is held here against the dict the runner or Ops.swap used to emit."""

from __future__ import annotations

import json

import msgspec
import pytest

from gpuops.core.domain import (BENCH_EVENT_KINDS, BenchChecksEvent, BenchLogEvent, BenchProgressEvent,
                                BenchQualityEvent, BenchResultEvent, BenchStateEvent, BenchStepEvent, SwapBenchNew,
                                SwapBenchOld, SwapCompare, SwapDeployNew, SwapFetch, SwapKept, SwapNewState,
                                SwapOldState, SwapPlanned, SwapRollback, SwapStopOld)
from gpuops.core.states import LIVE_STATES, PHASES, STATES, State

TS = "2026-12-07T06:43:08.123Z"
PROFILE = {"name": "smoke", "kind": "serving", "settings": {"num_prompts": 8}}
SUMMARY = {"max_concurrency": 4, "output_throughput": 812.5, "completed": 8}

BENCH = [  # (event, what BenchRunner emitted before: {"schema", "ts", "event", "run", …data})
    (BenchStateEvent(run=7, ts=TS, state="running", profile=PROFILE, deployment="qwen", host="gpu1",
                     url="http://127.0.0.1:30000", engine_version="0.5.4", module="sglang.bench_serving"),
     {"state": "running", "profile": PROFILE, "deployment": "qwen", "host": "gpu1", "url": "http://127.0.0.1:30000",
      "sglang_version": "0.5.4", "module": "sglang.bench_serving"}),
    (BenchStateEvent(run=7, ts=TS, state="running", profile=PROFILE, deployment=None, host="gpu1",
                     url="http://10.0.0.2:8000", engine_version="0.5.4", module="sglang.test.run_eval"),
     {"state": "running", "profile": PROFILE, "deployment": None, "host": "gpu1", "url": "http://10.0.0.2:8000",
      "sglang_version": "0.5.4", "module": "sglang.test.run_eval"}),
    (BenchStateEvent(run=7, ts=TS, state="ok", error=None), {"state": "ok", "error": None}),
    (BenchStateEvent(run=7, ts=TS, state="failed", error="bench_serving exited with status 1: boom"),
     {"state": "failed", "error": "bench_serving exited with status 1: boom"}),
    (BenchStepEvent(run=7, ts=TS, step=1, steps=4, max_concurrency=None, num_prompts=32),
     {"step": 1, "steps": 4, "max_concurrency": None, "num_prompts": 32}),
    (BenchStepEvent(run=7, ts=TS, step=0, steps=1, max_concurrency=64, num_examples=200),
     {"step": 0, "steps": 1, "max_concurrency": 64, "num_examples": 200}),
    (BenchProgressEvent(run=7, ts=TS, step=0, steps=1, done=3, total=8, elapsed_s=1.25),
     {"step": 0, "steps": 1, "done": 3, "total": 8, "elapsed_s": 1.25}),
    (BenchLogEvent(run=7, ts=TS, step=0, line="Benchmark duration (s): 3.1"),
     {"step": 0, "line": "Benchmark duration (s): 3.1"}),
    (BenchResultEvent(run=7, ts=TS, step=0, summary=SUMMARY), {"step": 0, "summary": SUMMARY}),
    (BenchQualityEvent(run=7, ts=TS, eval="gsm8k", score=0.82, num_examples=200, latency_s=None,
                       output_throughput=431.0),
     {"eval": "gsm8k", "score": 0.82, "num_examples": 200, "latency_s": None, "output_throughput": 431.0}),
    (BenchChecksEvent(run=None, ts=TS, checks=[{"name": "tool-call", "ok": True, "reason": None}]),
     {"checks": [{"name": "tool-call", "ok": True, "reason": None}]}),
]


@pytest.mark.parametrize("event,data", BENCH, ids=[f"{e.kind}-{i}" for i, (e, _) in enumerate(BENCH)])
def test_a_bench_events_json_is_the_dict_it_was(event, data):
    before = {"schema": 1, "ts": TS, "event": event.kind, "run": event.run, **data}
    assert json.dumps(event.to_json()) == json.dumps(before)


def test_every_bench_event_kind_has_its_struct():
    assert sorted({e.kind for e, _ in BENCH}) == sorted(BENCH_EVENT_KINDS)


COMPARE = {"schema": 1, "runs": [3, 9], "columns": [], "metrics": []}
SWAP = [  # (step, the dict Ops.swap emitted before)
    (SwapPlanned(old="oldie", new="newbie", model="Qwen/Qwen2.5-7B-Instruct", diff=["- --tp 2", "+ --tp 4"]),
     {"step": "plan", "old": "oldie", "new": "newbie", "model": "Qwen/Qwen2.5-7B-Instruct",
      "diff": ["- --tp 2", "+ --tp 4"]}),
    (SwapFetch(old="oldie", new="newbie", model="Qwen/Qwen2.5-7B-Instruct"),
     {"step": "fetch-new", "old": "oldie", "new": "newbie", "model": "Qwen/Qwen2.5-7B-Instruct"}),
    (SwapFetch(old="oldie", new="newbie", status="crashed"),
     {"step": "fetch-new", "old": "oldie", "new": "newbie", "status": "crashed"}),
    (SwapFetch(old="oldie", new="newbie", status="ok", present=False, bytes=15_231_000_000, seconds=81.5),
     {"step": "fetch-new", "old": "oldie", "new": "newbie", "status": "ok", "present": False,
      "bytes": 15_231_000_000, "seconds": 81.5}),
    (SwapBenchOld(old="oldie", run=None, skipped=True),
     {"step": "bench-old", "old": "oldie", "run": None, "skipped": True}),
    (SwapBenchOld(run=3, reused=True), {"step": "bench-old", "run": 3, "reused": True}),
    (SwapBenchOld(run=None, reused=False), {"step": "bench-old", "run": None, "reused": False}),
    (SwapBenchOld(run=3, status="ok"), {"step": "bench-old", "run": 3, "status": "ok"}),
    (SwapStopOld(old="oldie"), {"step": "stop-old", "old": "oldie"}),
    (SwapDeployNew(new="newbie"), {"step": "deploy-new", "new": "newbie"}),
    (SwapNewState(state="ready", new="newbie", outage_s=41.2),
     {"step": "new-ready", "new": "newbie", "outage_s": 41.2}),
    (SwapNewState(state="crashed", new="newbie"), {"step": "new-crashed", "new": "newbie"}),
    (SwapRollback(old="oldie", why="newbie crashed"), {"step": "rollback", "old": "oldie", "why": "newbie crashed"}),
    (SwapOldState(state="ready", old="oldie", outage_s=95.0), {"step": "old-ready", "old": "oldie", "outage_s": 95.0}),
    (SwapOldState(state="crashed", old="oldie", outage_s=None),
     {"step": "old-crashed", "old": "oldie", "outage_s": None}),
    (SwapBenchNew(run=9, status="ok"), {"step": "bench-new", "run": 9, "status": "ok"}),
    (SwapBenchNew(new="newbie", run=None, skipped=True),
     {"step": "bench-new", "new": "newbie", "run": None, "skipped": True}),
    (SwapCompare(before=3, after=9, compare=COMPARE), {"step": "compare", "before": 3, "after": 9, "compare": COMPARE}),
    (SwapKept(new="newbie", outage_s=41.2), {"step": "kept", "new": "newbie", "outage_s": 41.2}),
]


@pytest.mark.parametrize("step,before", SWAP, ids=[f"{b['step']}-{i}" for i, (_, b) in enumerate(SWAP)])
def test_a_swap_steps_json_is_the_dict_it_was(step, before):
    assert json.dumps({"event": "swap", **step.to_json()}) == json.dumps({"event": "swap", **before})
    assert step.name == before["step"]


def test_states_are_their_names_as_text():
    """A State is the str the store and every --json carry: equal to it, the same dict key, the
    same JSON, the same text in an f-string."""
    assert State.CRASHED == "crashed" and {"crashed": 1}[State.CRASHED] == 1 and hash(State.CRASHED) == hash("crashed")
    assert f"{State.CRASHED} {State.KV_CACHE:>9}" == "crashed  kv_cache"
    assert json.dumps([State.READY]) == '["ready"]' and msgspec.json.encode(State.READY) == b'"ready"'
    assert STATES == ("planned", "downloading", "starting", "dist_init", "weights", "kv_cache", "cuda_graph", "draft",
                      "http", "ready", "crashed", "stalled", "stopped")
    assert STATES[2:10] == PHASES and (*PHASES, "stalled") == LIVE_STATES
