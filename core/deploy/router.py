"""A replicated deployment's router (one of the engine's ``Engine.routers``, in front of K servers):
its own view of the replicas, read on its host, and the watch that turns it into the deployment's state.

The router (the first engine's two alike, as read from their wheels) answers on its --port: ``GET /readiness`` 200 ``{"status": "ready",
"healthy_workers": N, "total_workers": M}`` (503 with ``"not ready"`` while none is healthy) and
``GET /workers`` ``{"workers": [{"url", "is_healthy", "load", ...}], ...}``. It asks each replica's
/health every --health-check-interval-secs and counts it unhealthy after --health-failure-threshold
failures; it never drops a worker from its list, so a replica that comes back is healthy again.

The router has no start-up phases of its own: it is ``ready`` once it counts every replica healthy.
A replica it counts unhealthy afterwards is a ``replica-lost`` finding (the router serves on with
the others), and ``replica-back`` when it recovers; the router's process gone is a crash. Each
replica's ``load`` there (the requests the router has at it) is published as the router's numbers
(``in_flight``), for the screen, never stored.

Each router also keeps a circuit breaker per replica: after failed requests in a row (--cb-failure-
threshold, 10 by default) it stops sending that replica requests, whatever its /health says, and
tries it again later. /workers does not show it; the router's log does, in both routers' words
("Circuit breaker state transition: closed -> open … worker_url=URL"): ``replica-circuit-open``, and
``replica-circuit-closed`` when it takes requests again.
"""

from __future__ import annotations

import asyncio
import json
import re
from typing import Any

import msgspec

from ..domain import Evidence, Finding, Fix, NumbersEvent, Plan, url_host
from ..states import State
from ..hosts.host import Host, HostError, host_python, script_source
from ..hosts.programs import http_probe as http_probe_program
from .view import IN_FLIGHT
from .watch import WITH_ENV_FILE, Watch


READY_WITHIN_S = 120.0  # a router that counts its (ready) replicas healthy within this is fine


class RouterWorker(msgspec.Struct, frozen=True):
    url: str
    is_healthy: bool = False
    load: int | None = None


class RouterView(msgspec.Struct, frozen=True):
    """What the router says: whether it answers, how many replicas it counts healthy, per replica."""

    answering: bool
    ready: bool = False
    healthy: int = 0
    total: int = 0
    workers: tuple[RouterWorker, ...] = ()
    error: str | None = None

    def healthy_urls(self) -> set[str]:
        return {w.url for w in self.workers if w.is_healthy}


def parse_view(text: str) -> RouterView:
    """The probe's line as a RouterView (a router answering something else: not answering, why)."""
    try:
        doc = json.loads(text)
        ready_status, ready = doc["/readiness"][:2]
        workers_status, workers = doc["/workers"][:2]
    except (ValueError, KeyError, TypeError):
        return RouterView(answering=False, error="the router probe printed no JSON")
    if ready_status is None:
        return RouterView(answering=False, error=str(ready)[:300])
    try:
        listed = msgspec.convert((workers or {}).get("workers", []), tuple[RouterWorker, ...]) \
            if workers_status == 200 and isinstance(workers, dict) else ()
        healthy = int((ready or {}).get("healthy_workers", 0)) if isinstance(ready, dict) else 0
        total = int((ready or {}).get("total_workers", len(listed))) if isinstance(ready, dict) else len(listed)
    except (msgspec.ValidationError, ValueError, TypeError, AttributeError):
        return RouterView(answering=True, error="the router answered in a shape gpuops does not know")
    return RouterView(answering=True, ready=ready_status == 200, healthy=healthy, total=total, workers=listed)


async def router_view(host: Host, plan: Plan, env_path: str | None = None) -> RouterView:
    """The router's view of its replicas, asked on its host (with the key of its env file at
    `env_path` there when it has one: the key is read on the host, never here)."""
    argv = [host_python(host), "-c", script_source(http_probe_program), url_host(plan.client_host), str(plan.port), "5",
            "/readiness", "/workers"]
    if env_path and plan.uses_api_key:
        argv = ["sh", "-c", WITH_ENV_FILE, "gpuops-router-probe", env_path, *argv]
    try:
        res = await host.run(argv, timeout=30)
    except HostError as exc:
        return RouterView(answering=False, error=exc.message)
    if not res.ok:
        return RouterView(answering=False, error=(res.stderr.strip().splitlines() or ["the probe failed"])[-1][:300])
    return parse_view(res.stdout.strip().splitlines()[-1] if res.stdout.strip() else "")


def in_flight(plan: Plan, view: RouterView) -> dict[str, float]:
    """{IN_FLIGHT + replica name: the requests the router has at it now}, for the replicas its
    /workers lists with a load."""
    load = {w.url: w.load for w in view.workers if w.load is not None}
    return {IN_FLIGHT + r.name: float(load[url]) for r, url in zip(plan.replicas, plan.worker_urls) if url in load}


_CIRCUIT = re.compile(r"Circuit breaker state transition: (?P<old>\w+) -> (?P<new>\w+)")
_WORKER_URL = re.compile(r"worker_url=\"?(?P<url>[^\s\"]+)")
_ANSI = re.compile(r"\x1b\[[0-9;]*m")


def circuit_finding(plan: Plan, text: str) -> Finding | None:
    """The finding a router's log line about a replica's circuit breaker makes: it opened (the router
    sends that replica no requests), or it closed again; None for any other line (half-open: the
    router is trying it)."""
    if "Circuit breaker state transition" not in text:
        return None
    line = _ANSI.sub("", text)
    m, u = _CIRCUIT.search(line), _WORKER_URL.search(line)
    if m is None or u is None or u.group("url") not in plan.worker_urls:
        return None
    url = u.group("url")
    replica = plan.replicas[plan.worker_urls.index(url)]
    where = f"{replica.name} on {replica.host} ({url})"
    evidence = (Evidence(source=f"router:{plan.name}", reading=line.strip()[:300]),)
    if m.group("new") == "open":
        return Finding(
            "replica-circuit-open", "warning",
            f"the router stopped sending requests to {where}: its circuit breaker opened after failed requests in a "
            "row (its /health may still answer); the others serve, and the router tries it again later",
            evidence=evidence,
            fix=Fix(f"read why its requests fail (gpuops logs {replica.name}); restart it if it is stuck"),
            data={"replica": replica.name, "url": url, "circuit": "open"})
    if m.group("new") == "closed":
        return Finding("replica-circuit-closed", "info", f"the router sends requests to {where} again (its circuit "
                       "breaker closed)", evidence=evidence, data={"replica": replica.name, "url": url, "circuit": "closed"})
    return None


def replica_findings(plan: Plan, view: RouterView, lost: set[str], states: dict[str, str]) -> tuple[list[Finding], set[str]]:
    """The replicas the router counts lost now that it did not before (replica-lost), and those it
    counts healthy again (replica-back); with the set lost now. `states`: each replica's stored state."""
    healthy = view.healthy_urls()
    listed = {w.url for w in view.workers}
    out: list[Finding] = []
    now: set[str] = set()
    for replica, url in zip(plan.replicas, plan.worker_urls):
        if url in listed and url not in healthy:
            now.add(url)
        where = f"{replica.name} on {replica.host} ({url})"
        state = states.get(replica.name, "unknown")
        if url in now and url not in lost:
            out.append(Finding(
                "replica-lost", "error",
                f"the router counts {where} unhealthy: its /health failed; {view.healthy} of {view.total} "
                f"replicas serve (gpuops last recorded {replica.name} as {state})",
                evidence=(Evidence(source=f"router:{plan.name}", reading=f"/workers: {url} is_healthy false"),
                          Evidence(source=f"deployment:{replica.name}", reading=f"state {state}")),
                fix=Fix(f"open {replica.name} (:dep {replica.name}, gpuops logs {replica.name}) and restart it: the "
                        "router sends it requests again once its /health answers"),
                data={"replica": replica.name, "url": url, "healthy": False}))
        elif url in lost and url not in now and url in listed:
            out.append(Finding(
                "replica-back", "info", f"the router counts {where} healthy again ({view.healthy} of {view.total})",
                evidence=(Evidence(source=f"router:{plan.name}", reading=f"/workers: {url} is_healthy true"),),
                data={"replica": replica.name, "url": url, "healthy": True}))
    return out, now


class RouterWatch(Watch):
    """The watch of a router deployment: its log for display (as a server's), its state from what
    the router says of its replicas, its process from its launcher."""

    _loads: dict[str, float] | None = None  # the requests in flight at each replica, as last published

    async def _active(self) -> str:
        view = self.view
        queue, reader = self._read_into_queue()
        started = self.clock()
        next_poll = started
        poll = min(self.poll_s, 2.0)
        last_lines: list[str] = []
        try:
            while not self.stopping:
                try:
                    rec, _live = await asyncio.wait_for(queue.get(), min(1.0, poll))
                except asyncio.TimeoutError:
                    rec = None
                if rec is not None:
                    last_lines = self._show(rec, last_lines)
                log_read = reader.done() and queue.empty()
                if self.clock() < next_poll and not (log_read and not self.follow):
                    continue
                next_poll = self.clock() + poll
                self._remember()
                if self._run_over():
                    return view.state
                ended = await self._poll_router(started, last_lines)
                if ended is not None:
                    return ended
                if log_read and not self.follow:
                    return view.state
            return view.state
        finally:
            reader.cancel()
            await asyncio.gather(reader, return_exceptions=True)

    def _show(self, rec: Any, last_lines: list[str]) -> list[str]:
        """A record of the router's log shown; the last lines kept (an exit's evidence)."""
        if rec.notice:
            self._log(f"gpuops: log {rec.notice}: {rec.text}")
        else:
            self._log(rec.text, rec.ts)
            if rec.text.strip():
                last_lines = (last_lines + [rec.text])[-5:]
            circuit = circuit_finding(self.plan, rec.text)
            if circuit is not None:
                self.finding(circuit)
        return last_lines

    async def _poll_router(self, started: float, last_lines: list[str]) -> str | None:
        """Once a poll: the router's process (exited: crashed), then what it says of its replicas (ready,
        not ready in time: stalled, a replica lost or back). The state that ends the watch, or None."""
        view = self.view
        assert self.launcher is not None
        status = await self.launcher.status()
        if not status.running:
            after = " after it was ready" if view.state == State.READY else ""
            self.finding(Finding(
                "router-exited", "error", f"the router exited{after} ({status.detail})",
                evidence=tuple(Evidence(source="log", reading=t[:300]) for t in last_lines),
                fix=Fix(f"read its log (gpuops logs {self.name}); restart it from the deployments view")))
            self.set_state(State.CRASHED, phase=view.phase or State.STARTING, reason=f"the router exited ({status.detail})")
            return State.CRASHED
        rv = await router_view(self.host, self.plan, self.launcher.env_path or None)
        loads = in_flight(self.plan, rv) if rv.answering else {}
        if loads and loads != self._loads:  # (shown, not stored: it moves with every request)
            self._loads = loads
            self.bus.publish(self.name, NumbersEvent(values=loads, run=self.run_no, deployment=self.name))
        if view.state != State.READY:
            ended = self._router_readiness(rv, started)
            if ended is not None:
                return ended
        if rv.answering and view.state in (State.READY, State.STALLED):
            states = {n: (r.state if (r := self.store.deployment(n)) is not None else "forgotten")
                      for n in self.plan.replica_names}
            # the replicas lost so far: what this run's findings said (the run view keeps it)
            lost = {url for r, url in zip(self.plan.replicas, self.plan.worker_urls)
                    if r.name in view.replicas_lost}
            found, _ = replica_findings(self.plan, rv, lost, states)
            for finding in found:
                self.finding(finding)
        return None

    def _router_readiness(self, rv: Any, started: float) -> str | None:
        """A router not ready yet: ready when every replica is healthy; stalled when that takes longer
        than its threshold. The state that ends the watch, or None."""
        view = self.view
        if rv.answering and rv.total == len(self.plan.replicas) and rv.healthy == rv.total:
            self.set_state(State.READY, endpoint=self.plan.endpoint, model=self.plan.served_name,
                           detail=f"{rv.healthy} of {rv.total} replicas healthy")
            return State.READY if self._ended(State.READY) else None
        if self.clock() - started > self.stall_thresholds.get("router", READY_WITHIN_S) and view.state != State.STALLED:
            said = (f"it counts {rv.healthy} of {rv.total} replicas healthy" if rv.answering
                    else f"it does not answer ({rv.error})")
            self.finding(Finding(
                "router-not-ready", "error",
                f"the router is not ready after {self.clock() - started:.0f} s: {said}",
                evidence=(Evidence(source=f"router:{self.name}", reading=said),),
                fix=Fix(f"check each replica ({', '.join(self.plan.replica_names)}) is ready and "
                        f"reachable from {self.plan.host} at its URL")))
            self.set_state(State.STALLED, phase=State.STARTING, summary=said)
            return State.STALLED if self._ended(State.STALLED) else None
        return None


def watch_class(plan: Plan) -> type[Watch]:
    """The watch that fits a deployment: a router's, or a server's."""
    return RouterWatch if plan.replicas else Watch
