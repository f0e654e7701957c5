"""The requests a router has at each replica, as the deployment screen shows them: the real smg (the
SGLang host venv's) in front of two simulated SGLang servers that generate slowly, asked by gpuops'
own probe (``router_view``) while requests are in flight and after they end; the run view keeps
them apart from the log's numbers."""

from __future__ import annotations

import asyncio
import threading
import time

import httpx

from gpuops.core.config import HostConfig
from gpuops.core.deploy.router import in_flight, router_view
from gpuops.core.deploy.view import IN_FLIGHT, RunView
from gpuops.core.domain import NumbersEvent
from gpuops.core.hosts.host import LocalHost
from tests.router_util import Router
from tests.sshd import free_port
from tests.test_replicas import _replicated
from tests.test_router_circuit import simulated_replicas

SLOW = {"text": "the quick brown fox", "sampling_params": {"max_new_tokens": 120, "temperature": 0}}


def test_the_routers_requests_at_each_replica_are_read_while_in_flight_and_after(tmp_path, sglang_venv):
    plan = _replicated(2, name="duo", port=free_port())
    local = LocalHost(HostConfig(name="gpu1", local=True, ssh=None, python=None))
    sims, _ = simulated_replicas(tmp_path, plan, token_delay_s=0.05)  # 120 tokens: about 6 s a request
    try:
        for s in sims:
            s.wait_for("The server is fired up and ready to roll!", timeout=60)
        with Router(sglang_venv / "bin" / "python", plan.worker_urls, module="smg.launch_router") as router:
            router.wait_ready(timeout=90)
            served = plan.replace(port=router.port)  # gpuops asks the router at the plan's port
            idle = in_flight(served, asyncio.run(router_view(local, served)))
            assert idle == {IN_FLIGHT + "duo-r1": 0.0, IN_FLIGHT + "duo-r2": 0.0}, idle

            done: list[int] = []
            threads = [threading.Thread(target=lambda: done.append(
                httpx.post(router.url + "/generate", json=SLOW, timeout=120).status_code)) for _ in range(4)]
            for t in threads:
                t.start()
            busy: dict[str, float] = {}
            deadline = time.monotonic() + 20
            while sum(busy.values()) < 2 and time.monotonic() < deadline:
                busy = in_flight(served, asyncio.run(router_view(local, served)))
            assert sum(busy.values()) >= 2 and set(busy) == set(idle), busy  # (round robin: both have some)
            for t in threads:
                t.join(timeout=120)
            assert done == [200] * 4
            after: dict[str, float] = busy
            deadline = time.monotonic() + 20
            while any(after.values()) and time.monotonic() < deadline:
                after = in_flight(served, asyncio.run(router_view(local, served)))
            assert after == idle, after
    finally:
        for s in sims:
            s.stop()

    # the run view keeps them for the replicas' rows, not among the numbers read from the log
    view = RunView("duo", 1)
    view.apply(NumbersEvent(values={**busy, "kv_tokens": 1000.0}, run=1, deployment="duo"))
    assert view.in_flight == {k[len(IN_FLIGHT):]: v for k, v in busy.items()}
    assert view.numbers == {"kv_tokens": 1000.0}
