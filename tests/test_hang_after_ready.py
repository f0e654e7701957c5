"""A server that stops answering after it was ready (issue 25: hang-after-ready): its scheduler
deadlocks, it logs nothing more, its processes live on, /health answers 503. The watch asks /health
after ready and says so: stalled after ready, with the failed answers as evidence; and
when /health answers again, ready again."""

from __future__ import annotations

import asyncio

import pytest

from gpuops.core.config import load_inventory
from gpuops.core.diagnose.hang import Hang, HangWatch, Probe, hang_finding
from gpuops.core.domain import FindingEvent, Plan, StateEvent
from gpuops.core.ops import Ops
from gpuops.sim.host import setup_simhost
from tests.conftest import PACE, kill_marked
from tests.test_rules import sim_plan


def probe(status: int | None, at: float, detail: str = "") -> Probe:
    return Probe(status, detail or f"HTTP {status}", 0.5, at)


def test_failures_for_the_threshold_are_one_hang_said_once_and_one_answer_ends_it():
    w = HangWatch(threshold_s=60)
    w.probe(probe(200, 0))
    for at in (5, 10, 30, 60):
        w.probe(probe(503, at))
        assert w.check() is None  # 55 s of failures: not yet
    w.probe(probe(None, 65, "timed out"))
    hang = w.check()
    assert isinstance(hang, Hang) and hang.failures == 5 and hang.failing_s == 60
    assert [p.detail for p in hang.probes] == ["HTTP 503"] * 4 + ["timed out"]
    w.probe(probe(503, 70))
    assert w.check() is None and w.hung is hang  # said once
    w.probe(probe(200, 75))
    assert w.hung is None and w.check() is None
    w.probe(probe(503, 80))
    assert w.check() is None  # a new run of failures starts again from one


def test_the_finding_says_what_was_asked_and_what_the_log_and_processes_showed():
    hang = Hang(62.0, 6, tuple(probe(503, t) for t in range(5)), 60.0)
    f = hang_finding(hang, path="/health", last_line="[2026-12-07 10:00:00] Decode batch, #running-req: 1",
                     quiet_s=90.0, processes=5)
    assert f.code == "hang-after-ready" and f.severity == "error"
    assert "failed 6 times over 62s" in f.summary and "silent" in f.summary
    sources = [e.source for e in f.evidence]
    assert sources.count("GET /health") == 5 and "ps" in sources
    assert any(e.reading == "no new log line for 90s" for e in f.evidence)
    assert "py-spy" in f.fix.summary and not f.fix.applicable


@pytest.mark.slow
async def test_a_server_that_hangs_after_ready_is_stalled_with_the_finding(tmp_path, monkeypatch, models):
    for var, sub in (("HOME", "home"), ("XDG_STATE_HOME", "state"), ("XDG_CONFIG_HOME", "cfg"),
                     ("XDG_CACHE_HOME", "cache")):
        (tmp_path / sub).mkdir()
        monkeypatch.setenv(var, str(tmp_path / sub))
    sim = setup_simhost(tmp_path / "box", gpus=1, engine_version="0.5.23", scenario="hang-after-ready", pace=PACE)
    sim.set_sim(hang_after_s=1.0, hang_for_s=12.0)  # it comes back by itself, later
    cfg = tmp_path / "gpuops.toml"
    cfg.write_text(sim.host_block("gpu1") + "\n[stall]\nready = 3\n")
    doc = sim_plan(models["qwen3"], "0.5.23", 1, name="hung")
    doc.update(host="gpu1", launcher="process", python=str(sim.python))
    ops = Ops(load_inventory(str(cfg)), poll_s=0.5)
    try:
        state = await asyncio.wait_for(ops.deploy(Plan.from_json(doc), "gpu1", yes=True,
                                                  until=("stalled", "crashed")), timeout=180)
        assert state == "stalled"
        events = list(ops.events("hung"))
        states = [(e.state, e.phase) for e in events if isinstance(e, StateEvent)]
        assert ("ready", None) in states and states[-1] == ("stalled", "ready"), states
        (f,) = [e for e in events if isinstance(e, FindingEvent) and e.code == "hang-after-ready"]
        assert f.severity == "error" and "stopped answering after it was ready" in f.summary
        asked = [e for e in f.evidence if e.source == "GET /health"]
        assert asked and all(e.reading.startswith("HTTP 503") for e in asked), f.evidence
        assert any(e.source == "ps" and "alive" in (e.reading or "") for e in f.evidence)
        # silent: the access lines of the watch's own asks are no sign of life
        assert "(alive, silent)" in f.summary, f.summary
        assert not any(e.source == "log" and "GET /health" in (e.line or "") for e in f.evidence), f.evidence
        assert f.data["failing_s"] >= 3
        assert ops.deployment("hung").state == "stalled"
        # another watch of it (a screen opening it, at once: not the deploy's, which is ending): /health
        # answers again once the deadlock is over
        watch = ops.watch("hung")
        assert watch is not None and not watch.ending
        loop = asyncio.get_running_loop()
        end = loop.time() + 60
        while ops.deployment("hung").state != "ready" and loop.time() < end:
            await asyncio.sleep(0.2)
        assert ops.deployment("hung").state == "ready", [(e.state, e.line) for e in ops.events("hung")
                                                          if isinstance(e, StateEvent)][-3:]
        back = [e for e in ops.events("hung") if isinstance(e, StateEvent)][-1]
        assert back.line == "/health answers again (HTTP 200)", back
    finally:
        await ops.close()
        kill_marked(str(tmp_path / "box"))
