"""A replica the router's circuit breaker cuts off: the real smg (the SGLang host venv's) in front of
two simulated SGLang servers on the ports a gpuops plan gave its replicas. One server is killed while
its health checks are far apart, requests fail on it until the breaker opens, and it comes back: gpuops
reads the router's own log lines into ``replica-circuit-open`` and ``replica-circuit-closed`` for that
replica, and the router's run view keeps which replicas are cut off."""

from __future__ import annotations

import time
from pathlib import Path

import httpx

from gpuops.core.deploy.router import circuit_finding
from gpuops.core.deploy.view import RunView
from gpuops.core.domain import FindingEvent
from gpuops.sim.host import setup_simhost
from tests.router_util import Router
from tests.sshd import free_port
from tests.test_replicas import _replicated
from tests.test_router_probe import GENERATE, PACE
from tests.test_sglang_sim import QWEN3, Server, model_dir


def _findings(plan, router: Router) -> list:
    return [f for line in router.text if (f := circuit_finding(plan, line)) is not None]


def simulated_replicas(root, plan, token_delay_s: float) -> tuple[list[Server], Path]:
    """A simulated SGLang 0.5.23 server (Qwen3-8B's config) on each replica's port of `plan`, each
    generating a token every `token_delay_s`: started, not waited for; and the model's folder."""
    model = model_dir(root / "models", QWEN3, 16_381_470_720, shards=5)
    sims: list[Server] = []
    try:
        for i, replica in enumerate(plan.replicas):
            host = setup_simhost(root / f"sim{i}", gpus=1, engine_version="0.5.23", pace=PACE)
            host.set_sim(token_delay_s=token_delay_s)
            sims.append(Server(host, "--model-path", model, "--host", "127.0.0.1", "--port", replica.port))
    except BaseException:  # (one that failed to start: the ones before it are not left running)
        for s in sims:
            s.stop()
        raise
    return sims, model


def test_a_replica_the_breaker_cuts_off_is_a_finding_and_so_is_its_return(tmp_path, sglang_venv):
    plan = _replicated(2, name="duo", port=free_port())
    sims, model = simulated_replicas(tmp_path, plan, token_delay_s=0.001)
    try:
        for s in sims:
            s.wait_for("The server is fired up and ready to roll!", timeout=60)
        assert [s.url for s in sims] == plan.worker_urls
        # health checks a minute apart: only requests can tell the router the replica is gone
        with Router(sglang_venv / "bin" / "python", plan.worker_urls, module="smg.launch_router", health_interval=60,
                    extra=("--cb-failure-threshold", "2", "--cb-success-threshold", "1",
                           "--cb-timeout-duration-secs", "1", "--retry-max-retries", "2")) as router:
            router.wait_ready(timeout=90)
            lost = sims[1]
            lost.proc.kill()
            lost.wait(10)
            deadline = time.monotonic() + 30
            while not _findings(plan, router) and time.monotonic() < deadline:
                httpx.post(router.url + "/generate", json=GENERATE, timeout=30)
            (cut,) = _findings(plan, router)
            assert cut.code == "replica-circuit-open" and cut.severity == "warning"
            assert cut.data == {"replica": "duo-r2", "url": plan.worker_urls[1], "circuit": "open"}
            assert cut.summary.startswith(f"the router stopped sending requests to duo-r2 on gpu1 ({plan.worker_urls[1]})")
            assert "Circuit breaker state transition: closed -> open" in cut.evidence[0].reading
            assert router.workers()[plan.worker_urls[1]]["is_healthy"]  # what /workers says meanwhile

            # back on its port: the breaker lets a request through and closes
            host = setup_simhost(tmp_path / "sim1b", gpus=1, engine_version="0.5.23", pace=PACE)
            host.set_sim(token_delay_s=0.001)
            sims[1] = Server(host, "--model-path", model, "--host", "127.0.0.1", "--port", plan.replicas[1].port)
            sims[1].wait_for("The server is fired up and ready to roll!", timeout=60)
            deadline = time.monotonic() + 30
            while _findings(plan, router)[-1].code != "replica-circuit-closed" and time.monotonic() < deadline:
                httpx.post(router.url + "/generate", json=GENERATE, timeout=30)
                time.sleep(0.2)
            found = _findings(plan, router)
            assert [f.code for f in found][-1] == "replica-circuit-closed", [f.summary for f in found]
    finally:
        for s in sims:
            s.stop()

    # the router's run view: cut off while open, and the finding gone once every circuit closed
    view = RunView("duo", 1)
    view.apply(FindingEvent.of(found[0]))
    assert view.circuits_open == {"duo-r2"} and [f.code for f in view.findings] == ["replica-circuit-open"]
    view.apply(FindingEvent.of(found[-1]))
    assert view.circuits_open == set() and [f.code for f in view.findings] == ["replica-circuit-closed"]


def test_other_router_lines_and_other_workers_make_no_finding():
    plan = _replicated(2, name="duo")
    other = "http://127.0.0.1:1"
    assert circuit_finding(plan, f"INFO … Circuit breaker state transition: closed -> open worker_url={other}") is None
    half = f"INFO … Circuit breaker state transition: open -> half_open worker_url={plan.worker_urls[0]}"
    assert circuit_finding(plan, half) is None  # the router trying it: nothing to say yet
    assert circuit_finding(plan, f"WARN … HTTP health check failed for {plan.worker_urls[0]}/health") is None
