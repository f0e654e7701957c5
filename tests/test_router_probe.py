"""The real sglang-router (PyPI's sglang-router, tests/router_util.py) in front of two simulated SGLang
servers on loopback: it routes to both, reports their health, sees a killed one as lost (and then
both), and SGLang's real benchmark runs through it. No mocks: the router's own /readiness, /workers
and Prometheus text are what is checked, against what each simulated server logged."""

from __future__ import annotations

import json
import os
import re
import signal
import shutil
import subprocess
import time
from pathlib import Path

import httpx
import pytest

from gpuops.sim.host import setup_simhost
from tests.router_util import ROUTER_VERSION, Router, python_or_skip, router_python
from tests.test_sglang_sim import QWEN3, Server, model_dir

PACE = 0.01
GENERATE = {"text": "the quick brown fox", "sampling_params": {"max_new_tokens": 4, "temperature": 0}}


@pytest.fixture(scope="module")
def router_py() -> Path:
    return python_or_skip(router_python, f"sglang-router {ROUTER_VERSION} is not available")


def start_sims(root: Path, model: Path, n: int = 2) -> list[Server]:
    sims = []
    for i in range(n):
        host = setup_simhost(root / f"sim{i}", gpus=1, engine_version="0.5.23", pace=PACE)
        host.set_sim(token_delay_s=0.001)
        sims.append(Server(host, "--model-path", model, "--host", "127.0.0.1"))
    for s in sims:
        s.wait_for("The server is fired up and ready to roll!", timeout=60)
    return sims


def generates(sim: Server) -> int:
    """POST /generate lines that SIM logged (its own warmup request included)."""
    return sum('"POST /generate HTTP/1.1" 200' in line for line in sim.text)


def settle(sims: list[Server], before: list[int], total: int, timeout: float = 10) -> list[int]:
    """Each sim's new POST /generate lines, once they add up to TOTAL (access lines come after the reply)."""
    deadline = time.monotonic() + timeout
    while True:
        got = [generates(s) - b for s, b in zip(sims, before)]
        if sum(got) >= total or time.monotonic() > deadline:
            return got
        time.sleep(0.05)


def metric(text: str, name: str, worker: str) -> float | None:
    m = re.search(r'^%s\{worker="%s"\} (\S+)$' % (re.escape(name), re.escape(worker)), text, re.M)
    return float(m.group(1)) if m else None


@pytest.fixture
def two_sims(tmp_path):
    model = model_dir(tmp_path / "models", QWEN3, 16_381_470_720, shards=5)
    sims = start_sims(tmp_path, model)
    yield sims, model
    for s in sims:
        s.stop()


def test_router_routes_reports_health_and_sees_a_killed_worker_lost(two_sims, router_py):
    sims, model = two_sims
    urls = [s.url for s in sims]
    with Router(router_py, urls) as router:
        router.wait_ready(timeout=90)
        router.wait_for(r"INFO smg::server: .*Starting router on 127\.0\.0\.1:%d \| mode: Regular" % router.port)

        # health: the process, then the workers as the router sees them
        assert router.get("/health").text == "OK"
        assert router.readiness() == (200, {"status": "ready", "healthy_workers": 2, "total_workers": 2})
        ws = router.workers()
        assert set(ws) == set(urls)
        assert all(w["is_healthy"] and w["model_id"] == str(model) and w["worker_type"] == "regular"
                   for w in ws.values())
        assert router.get("/v1/models").json()["data"][0]["id"] == str(model)
        text = router.metrics()
        assert [metric(text, "smg_worker_health", u) for u in urls] == [1.0, 1.0]

        # routing: round robin reaches both simulated servers
        before = [generates(s) for s in sims]
        for _ in range(6):
            r = httpx.post(router.url + "/generate", json=GENERATE, timeout=30)
            assert r.status_code == 200 and r.json()["meta_info"]["completion_tokens"] == 4
        assert settle(sims, before, 6) == [3, 3]

        # one replica killed. Before the health checker notices, round robin still picks it: the router
        # logs the failed send and retries on the other (--retry-max-retries 5), so the client sees a 200
        lost, alive = sims[1], sims[0]
        t_kill = time.time()
        os.kill(lost.proc.pid, signal.SIGKILL)
        lost.wait(10)
        for _ in range(2):
            assert httpx.post(router.url + "/generate", json=GENERATE, timeout=30).status_code == 200
        router.wait_for(r" ERROR .*smg::routers::http::router: .*Failed to send typed request worker_url=%s "
                        r"route=/generate error=error sending request" % re.escape(lost.url))
        assert re.search(r'^smg_worker_retries_total\{worker_type="regular",endpoint="generate"\} [1-9]',
                         router.metrics(), re.M)
        # then marked unhealthy by the health checker (every 1 s, 2 misses), and still listed
        waited = router.wait_worker(lost.url, healthy=False, timeout=20)
        assert waited < 10, waited
        assert router.readiness() == (200, {"status": "ready", "healthy_workers": 1, "total_workers": 2})
        ws = router.workers()
        assert set(ws) == set(urls) and not ws[lost.url]["is_healthy"] and ws[alive.url]["is_healthy"]
        assert metric(router.metrics(), "smg_worker_health", lost.url) == 0.0
        t_line, _ = router.wait_for(r" WARN smg::core::worker: .*HTTP health check failed for %s/health: .*"
                                    r"Connection refused" % re.escape(lost.url))
        assert t_line >= t_kill - 1
        # requests go on, all to the survivor
        before = generates(alive)
        for _ in range(4):
            assert httpx.post(router.url + "/generate", json=GENERATE, timeout=30).status_code == 200
        assert settle([alive], [before], 4) == [4]

        # both lost: not ready, and a request is refused at once with the router's own error
        os.kill(alive.proc.pid, signal.SIGKILL)
        alive.wait(10)
        router.wait_worker(alive.url, healthy=False, timeout=20)
        code, body = router.readiness()
        assert (code, body) == (503, {"status": "not ready", "reason": "insufficient healthy workers"})
        assert router.get("/health").status_code == 200  # /health is the router's liveness only
        r = httpx.post(router.url + "/generate", json=GENERATE, timeout=30)
        assert r.status_code == 503
        assert r.json() == {"error": {"type": "Service Unavailable", "code": "no_available_workers",
                                      "message": "No available workers (all circuits open or unhealthy)"}}
    assert any("Received terminate signal, starting graceful shutdown" in line for line in router.text)


def test_bench_serving_through_the_router(tmp_path, router_py, sglang_venv, bench_tokenizer):
    """SGLang's real benchmark (the host venv's sglang.benchmark.serving, as gpuops runs it for 0.5.23)
    with --base-url at the router: every prompt completes, and both replicas served some."""
    model = model_dir(tmp_path / "models", QWEN3, 16_381_470_720, shards=5)
    for f in bench_tokenizer.iterdir():
        shutil.copy(f, model / f.name)
    sims = start_sims(tmp_path, model)
    try:
        with Router(router_py, [s.url for s in sims]) as router:
            router.wait_ready(timeout=90)
            before = [generates(s) for s in sims]
            out = tmp_path / "bench.jsonl"
            argv = [str(sglang_venv / "bin" / "python"), "-m", "sglang.benchmark.serving", "--backend", "sglang",
                    "--base-url", router.url, "--dataset-name", "random-ids", "--num-prompts", "8",
                    "--random-input-len", "32", "--random-output-len", "16", "--random-range-ratio", "0",
                    "--request-rate", "inf", "--warmup-requests", "1", "--max-concurrency", "4",
                    "--model", str(model), "--tokenizer", str(model), "--output-file", str(out)]
            res = subprocess.run(argv, capture_output=True, text=True, timeout=240,
                                 env=dict(os.environ, HF_HUB_OFFLINE="1"))
            assert res.returncode == 0, res.stdout[-3000:] + res.stderr[-3000:]
            record = json.loads(out.read_text().splitlines()[-1])
            # (random-ids with --random-range-ratio 0 draws each output length in [0, 16]: not 8 x 16)
            assert record["completed"] == 8 and record["total_output_tokens"] > 0, record
            assert record["backend"] == "sglang" and record["max_concurrency"] == 4
            # bench_serving reads GET /server_info, which 0.3.2 does not serve (only /get_server_info):
            # through the router the record has no server_info (nor MTP's accept length)
            assert router.get("/server_info").status_code == 404 and record["server_info"] is None
            got = settle(sims, before, 9)  # 8 prompts and the warmup request
            assert sum(got) == 9 and min(got) >= 1, got
    finally:
        for s in sims:
            s.stop()
