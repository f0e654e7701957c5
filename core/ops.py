"""The use cases: deploy, stop, restart, apply a fix, quick-check, triage, reconcile, bench, delete
a model, end a process. The CLI and the TUI both call these; neither opens the store, builds a
Deployer or starts a watch itself.

Policy lives here once:
- read-only (``--readonly``): everything that changes a host is :class:`Refused`;
- confirmation: a destructive step without ``confirmed=True`` raises :class:`NeedsConfirmation`
  with the question (the CLI asks on a terminal or wants ``--yes``; the TUI shows a dialog and
  calls again);
- a plan is bound to the host it is deployed on: a plan made offline takes the host's python and
  launcher; a plan made for another host, or whose python, bind address or download folder the
  host's policy does not allow, is refused.
"""

from __future__ import annotations

import asyncio
import functools
import os
import time
from typing import Any, AsyncIterator, Awaitable, Callable, Mapping

import msgspec

from . import units
from .config import HostConfig, Inventory
from .deploy.deployer import DeployError, Deployer
from .deploy.download import local_hf_token
from .deploy.launchers import open_launcher
from .deploy.store import Store, StoreError, default_path
from .deploy.router import watch_class
from .deploy.watch import POLL_S, Bus, Watch, Watches, WatchOptions, quick_check, watcher_alive
from .diagnose.fixes import apply_patch
from .diagnose.host_checks import findings as check_findings
from .diagnose.host_checks import run_checks, stacks
from .diagnose.triage import ranked, triage_log
from .states import State
from .domain import (LIVE_STATES, BenchEvent, BenchRun, Deployment, Event, Plan, PlanEvent, StateEvent, SwapBenchNew,
                     SwapBenchOld, SwapCompare, SwapDeployNew, SwapFetch, SwapKept, SwapNewState, SwapOldState,
                     SwapPlanned, SwapRollback, SwapStep, SwapStopOld, TriageReport, is_loopback)
from .hosts.host import Host, HostError, make_host
from .planning.inputs import Target
from .planning.plan import under_any
from .telemetry.samples import Snapshot

__all__ = ["NeedsConfirmation", "Ops", "Refused", "Store", "StoreError", "bind_plan"]

# States in which a deployment's server should be running and someone should be watching it.
LIVE = LIVE_STATES
# (UNSTARTED: its deploy has not started the server yet; the gpuops that deploys it holds its lease.)
UNSTARTED = (State.PLANNED, State.DOWNLOADING)


class Refused(Exception):
    """Not done, nothing changed: one line (exit 2)."""


class NeedsConfirmation(Exception):
    """A destructive step that wants a yes first; ``question`` says what would happen."""

    def __init__(self, question: str):
        super().__init__(question)
        self.question = question


def bind_plan(plan: Plan, cfg: HostConfig, source: str = "the plan") -> Plan:
    """`plan` as it will run on `cfg`'s host. A plan made offline (no host) takes the host's
    python and launcher; one made for this host must agree with its policy."""
    python = cfg.python or "python3"
    if plan.literal_secrets:
        flags = ", ".join(plan.literal_secrets)
        raise Refused(f"{source} puts the value of {flags} in the server's command line, which every user of the "
                      "host can read: plan again with --like (secrets go to the deployment's 0600 env file only)")
    if plan.host is not None and plan.host != cfg.name:
        raise Refused(f"{source} was planned for {plan.host}, not {cfg.name}: plan again for it")
    if plan.host is None or plan.python is None:
        plan = plan.replace(host=cfg.name, python=python, launcher=cfg.launcher,
                            warnings=[*plan.warnings, f"planned offline; bound to {cfg.name} at deploy "
                                      f"(python {python}, launcher {cfg.launcher})"])
    elif plan.python != python:
        raise Refused(f"{source} runs the server with {plan.python}, but {cfg.name}'s python is {python}: "
                      "plan again for it")
    bind = plan.bind_host
    if not is_loopback(bind) and bind != cfg.serve_host:
        raise Refused(f"{source} binds {bind}, but {cfg.name} allows serving on {cfg.serve_host} only "
                      "(its serve_host)")
    if not is_loopback(bind) and not plan.uses_api_key:
        raise Refused(f"{source} serves beyond loopback ({bind}) without an API key: plan again for {cfg.name}")
    for what, path in (("download_dir", plan.download_dir), ("model_path", plan.model_path)):
        bad = under_any(path, cfg.forbidden_paths) if path and path.startswith("/") else None
        if bad:
            raise Refused(f"{source}: {what} {path} is under {bad}, which {cfg.name} forbids (forbidden_paths)")
    return plan


class HostPool:
    """Hosts by name: given ones (the TUI's Monitor's, kept open), else made on first use and
    closed with the pool."""

    def __init__(self, inventory: Inventory, hosts: Mapping[str, Host] | None = None):
        self.inventory = inventory
        self.given = dict(hosts or {})
        self.made: dict[str, Host] = {}

    def get(self, name: str) -> Host | None:
        if name in self.given:
            return self.given[name]
        if name not in self.made:
            try:
                cfg = self.inventory.host(name)
            except KeyError:
                return None
            self.made[name] = make_host(cfg)
        return self.made[name]

    async def close(self) -> None:
        await asyncio.gather(*(h.close() for h in self.made.values()), return_exceptions=True)
        self.made.clear()


class Ops:
    """The use cases for one inventory. ``monitor``: the TUI's, whose stream gives the watches
    their GPU readings; without one (the CLI) a watch gets a Monitor of its own host."""

    def __init__(self, inventory: Inventory, *, readonly: bool = False, store: Store | None = None,
                 hosts: Mapping[str, Host] | None = None, monitor: Any = None, poll_s: float = POLL_S):
        self.inventory = inventory
        self.readonly = readonly
        self.readonly_why: str | None = None  # why, when it is not the operator's --readonly
        self._store = store  # opened when first used (`gpuops plan` opens none, so creates none)
        self.pool = HostPool(inventory, hosts)
        self.monitor = monitor
        self._own_monitor: Any = None
        self._poll_s = poll_s
        self.deploying: set[str] = set()  # deploys and restarts in progress in this process

    @property
    def store(self) -> Store:
        """The store, opened (and created) the first time it is asked for (StoreError: it cannot be used)."""
        if self._store is None:
            self._store = Store()
        return self._store

    def open_store(self) -> Store:
        """The store opened now: a front end that wants a StoreError at its start calls this."""
        return self.store

    def _stored(self) -> Store | None:
        """The store when it is open or exists, else None (reading it creates none)."""
        if self._store is None and not default_path().is_file():
            return None
        return self.store

    @functools.cached_property
    def watches(self) -> Watches:
        return Watches(self.store, self.host, watch_class=watch_class, readings=self.readings, stall=dict(self.inventory.stall),
                       poll_s=self._poll_s)

    @property
    def bus(self) -> Bus:
        return self.watches.bus

    def set_inventory(self, inventory: Inventory, hosts: Mapping[str, Host] | None = None) -> None:
        """Use `inventory` from now on (config.toml changed); `hosts`: the Monitor's, kept open."""
        self.inventory = inventory
        self.pool.inventory = inventory
        self.pool.given = dict(hosts or {})
        if "watches" in self.__dict__:  # (made later, it reads the inventory's then)
            self.watches.stall = dict(inventory.stall)

    async def close(self) -> None:
        for name in sorted(self.deploying):  # what this process deploys ends with it: its leases go
            self._release(name)
        if "watches" in self.__dict__:
            await self.watches.close()
        if self._own_monitor is not None:
            await self._own_monitor.close()
        await self.pool.close()
        if self._store is not None:
            self._store.close()

    # ---------------------------------------------------------------- lookups

    def host(self, name: str) -> Host | None:
        return self.pool.get(name)

    def host_config(self, name: str) -> HostConfig:
        try:
            return self.inventory.host(name)
        except KeyError:
            raise Refused(f"unknown host {name!r} (known: {', '.join(self.inventory.names())})") from None

    def _host_of(self, d: Deployment) -> Host:
        host = self.host(d.host)
        if host is None:
            raise Refused(f"deployment {d.name} is on {d.host!r}, which the inventory no longer has")
        return host

    def readings(self, host_name: str) -> Snapshot | None:
        """The latest GPU snapshot of a host from the Monitor's stream (None: none yet, or stale)."""
        monitor = self.monitor or self._own_monitor
        if monitor is None:
            return None
        state = monitor.states.get(host_name)
        if state is None or state.snapshot is None:
            return None
        age = state.age()
        return state.snapshot if age is not None and age < 3 * POLL_S else None

    def _ensure_readings(self, host: Host) -> None:
        """The CLI has no Monitor: one for this host (one long-lived reporter, not one per poll)."""
        if self.monitor is not None or self._own_monitor is not None:
            return
        from .telemetry.monitor import Monitor

        self._own_monitor = Monitor(self.inventory, interval=min(2.0, POLL_S), hosts=[host])
        self._own_monitor.start()

    def deployment(self, name: str) -> Deployment:
        d = self.store.deployment(name)
        if d is None:
            known = ", ".join(x.name for x in self.store.deployments()) or "none"
            raise Refused(f"no deployment named {name!r} (known: {known})")
        return self.reconcile_deploy(d)

    def deployments(self) -> list[Deployment]:
        return [self.reconcile_deploy(d) for d in self.store.deployments()]

    def reconcile_deploy(self, d: Deployment) -> Deployment:
        """`d` as it is: a deployment still planned or downloading whose deploy runs nowhere any more
        (the gpuops that ran it was closed or killed: nobody holds the name's lease, and this process
        does not deploy it) started no server and downloads nothing. It is recorded as stopped, with
        a finding that says where its download got to and that deploying again resumes it (a stalled
        download's downloader still runs: that one is `stalled`). Only the store is read: no host."""
        if d.state not in UNSTARTED or d.name in self.deploying:
            return d
        try:
            owner = self.store.lease_owner(d.name)
            if owner is not None and owner[0].alive(owner[1]):
                return d  # a live gpuops (this one's leases are released when its deploys end) deploys it
            self._record_interrupted(d)
        except StoreError:
            return d  # a store that cannot be written: it says what it said
        return self.store.deployment(d.name) or d

    def downloads(self) -> list[tuple[str, int | None, int | None]]:
        """The downloads this process runs now (a deploy's, a restart's, a swap's): (name, bytes on
        disk, bytes expected) each, from what was recorded. Ending this process interrupts them."""
        from .domain import ProgressEvent

        out: list[tuple[str, int | None, int | None]] = []
        for name in sorted(self.deploying):
            d = self.store.deployment(name)
            if d is None or d.state != State.DOWNLOADING:
                continue
            last = [e for e in self.store.events(name, run=d.run, kinds=("progress",)) if isinstance(e, ProgressEvent)]
            if last and last[-1].total and last[-1].done >= last[-1].total:
                continue  # fetched (a swap's new weights, waiting for the old server to stop)
            out.append((name, last[-1].done if last else None, last[-1].total if last else None))
        return out

    def _record_interrupted(self, d: Deployment) -> None:
        from .deploy.store import RunMoved
        from .domain import Finding, FindingEvent, Fix, ProgressEvent

        progress = [e for e in self.store.events(d.name, run=d.run, kinds=("progress",))
                    if isinstance(e, ProgressEvent) and e.phase == "downloading"]
        if d.state == State.DOWNLOADING:
            where = d.plan.model_path if (d.plan.model_path or "").startswith("/") else "the host's HF cache"
            got = (f" at {units.size(progress[-1].done)} of {units.size(progress[-1].total)}"
                   if progress and progress[-1].total else "")
            finding = Finding("download-interrupted", "warning",
                              f"the download of {d.model} into {where} on {d.host} stopped{got}: the gpuops that ran "
                              "it was closed or killed",
                              fix=Fix(f"deploy again (r on the deployments view restarts it): the download resumes "
                                      f"from what is on {d.host}'s disk"),
                              data={"done_bytes": progress[-1].done if progress else None,
                                    "total_bytes": progress[-1].total if progress else None})
            reason = "download interrupted: deploy again to resume"
        else:
            finding = Finding("deploy-interrupted", "warning",
                              f"the deploy of {d.model} on {d.host} stopped before its server started: the gpuops "
                              "that ran it was closed or killed",
                              fix=Fix("deploy again (r on the deployments view restarts it)"))
            reason = "deploy interrupted before the server started: deploy again"
        try:
            for event in (FindingEvent.of(finding), StateEvent(state=State.STOPPED, reason=reason)):
                self.bus.publish(d.name, self.store.record(d.name, event, run=d.run))
        except RunMoved:
            pass  # a new run began meanwhile: it is that one's to say

    def parts(self, d: Deployment) -> list[Deployment]:
        """The other parts of `d` that are recorded: a multi-node deployment's other nodes, a router's
        replicas (what stop, restart and forget of `d` act on too)."""
        return [p for p in (self.store.deployment(n) for n in d.plan.part_names) if p is not None]

    def parts_said(self, d: Deployment) -> str:
        """What else an action on `d` acts on, for its question: " and its node duo-n1 on gpu2", " and its
        replicas trio-r1, trio-r2 on gpu1"; "" for a server of one part."""
        parts = self.parts(d)
        if not parts:
            return ""
        kind = "node" if d.plan.members else "replica"
        hosts = sorted({p.host for p in parts})
        return f" and its {kind}{'s' if len(parts) > 1 else ''} {', '.join(p.name for p in parts)} on {', '.join(hosts)}"

    async def read_target(self, host: Host) -> Target:
        """What a plan for `host` is made on: its GPUs, disks and engine as read now, with the ports
        of its stored deployments taken too (a planned one's server will listen on its port soon)."""
        from .planning.hostfacts import read_target
        from .planning.plan import with_deployment_ports

        stored = [(d.name, d.host, d.state, d.plan.port) for d in self.deployments()]
        return with_deployment_ports(await read_target(host), stored)

    def events(self, name: str, run: int | None = None) -> list[Event]:
        return list(self.store.events(name, run=run))

    def _writable(self, what: str) -> None:
        if self.readonly:
            raise Refused(f"{self.readonly_why or 'read-only'}: {what}")

    # ---------------------------------------------------------------- plan

    async def plan(self, request: Any) -> tuple[Any, Plan]:
        """(the model's facts, the plan) a :class:`~gpuops.core.planning.request.PlanRequest` asks for:
        one host, several nodes or replicas, its hosts read through this Ops' pool, the stored
        deployments' ports taken and `--like NAME` read from its store (PlanError on bad input).
        Planning creates no store: the ports are read when there is one (a store that cannot be read
        gives none), and a `--like NAME` that cannot be read is bad input."""
        import sqlite3

        from .planning import PlanError
        from .planning.request import plan_request

        async def open_host(cfg: HostConfig) -> Host:
            host = self.host(cfg.name)
            if host is None:
                raise Refused(f"unknown host {cfg.name!r}")
            return host

        async def keep_open(host: Host) -> None:  # the pool's: closed with this Ops
            pass

        def stored_plan(name: str) -> Plan | None:
            try:
                d = self.store.deployment(name)
            except StoreError as exc:
                raise PlanError(f"--like {name}: {exc}") from None
            return d.plan if d is not None else None

        def stored_ports() -> list[tuple[str, str, str, int]]:
            try:
                store = self._stored()
                if store is None:  # nothing deployed from here
                    return []
                return [(d.name, d.host, d.state, d.plan.port) for d in store.deployments()]
            except (StoreError, OSError, sqlite3.Error):
                return []

        return await plan_request(self.inventory, request, open_host=open_host, close_host=keep_open,
                                  stored_plan=stored_plan, stored_ports=stored_ports)

    # ---------------------------------------------------------------- deploy

    async def deploy(self, plan: Plan, host_name: str, *, yes: bool = False, ask: Callable[[str], bool] | None = None,
                     hf_token: str | None = None, until: tuple[str, ...] = (State.READY, State.CRASHED, State.STALLED),
                     on_begin: Callable[[Deployment], Awaitable[Any]] | None = None, keep_on: bool = False) -> str:
        """Checks (DeployError/Refused: nothing changed), then the deployment recorded, the download,
        the launch, and its watch until one of `until`: the state returned. `keep_on`: the watch goes
        on after that (the TUI's), else it ends there (the CLI's)."""
        self._writable("deploy changes a host")
        hf_token = hf_token or local_hf_token()
        if plan.members:
            if host_name != plan.host:
                raise Refused(f"{plan.name} is a {plan.nnodes}-node plan whose node 0 is {plan.host}, not {host_name}")
            return await self._deploy_nodes(plan, yes=yes, ask=ask, hf_token=hf_token, until=until,
                                            on_begin=on_begin, keep_on=keep_on)
        if plan.replicas:
            if host_name != plan.host:
                raise Refused(f"{plan.name} is a router in front of {len(plan.replicas)} replicas on {plan.host}, "
                              f"not {host_name}")
            return await self._deploy_replicas(plan, yes=yes, ask=ask, hf_token=hf_token, until=until,
                                               on_begin=on_begin, keep_on=keep_on)
        return await self._deploy_one(plan, host_name, yes=yes, ask=ask, hf_token=hf_token, until=until,
                                      on_begin=on_begin, keep_on=keep_on)

    async def deploy_refusal(self, plan: Plan, host_name: str) -> str | None:
        """Why :meth:`deploy` of `plan` on `host_name` would be refused now for a conflict, asked
        before the operator is asked to confirm it (None: it would go on): read-only, the plan not
        this host's, a name (of any part) taken, a port in use. Nothing changes (the deploy checks
        again, and the rest: the engine there, disk space)."""
        try:
            self._writable("deploy changes a host")
            if (plan.members or plan.replicas) and host_name != plan.host:
                return f"{plan.name} is planned with {plan.host} first, not {host_name}"
            parts = ([plan] + [plan.member_plan(r) for r in range(1, plan.nnodes)] if plan.members
                     else [*plan.replicas, plan] if plan.replicas else [bind_plan(plan, self.host_config(host_name))])
            for deployer in self._deployers(parts, yes=False, ask=None, hf_token=None):
                await deployer.check_ports()
        except (Refused, DeployError, StoreError) as exc:
            return str(exc)
        return None

    async def _deploy_one(self, plan: Plan, host_name: str, *, yes: bool, ask: Callable[[str], bool] | None,
                          hf_token: str | None, until: tuple[str, ...],
                          on_begin: Callable[[Deployment], Awaitable[Any]] | None, keep_on: bool,
                          api_key: str | None = None) -> str:
        cfg = self.host_config(host_name)
        plan = bind_plan(plan, cfg)
        host = self.host(cfg.name)
        assert host is not None
        refusal = self.store.refusal(plan.name)  # asked before any check (again when it is recorded)
        if refusal:
            raise Refused(refusal)
        deployer = Deployer(host, plan, self.store, self.bus, yes=yes, ask=ask, stall=dict(self.inventory.stall),
                            hf_token=hf_token, journal_dir=cfg.journal_dir, api_key=api_key,
                            secrets=await self.carried_secrets(plan))
        try:
            await deployer.preflight()
            deployer.begin()
        except (DeployError, StoreError) as exc:
            raise Refused(str(exc)) from None
        self.deploying.add(plan.name)
        try:
            if on_begin is not None:
                await on_begin(self.deployment(plan.name))
            try:
                if not await deployer.download():
                    self.store.release_watch(plan.name, os.getpid())
                    return self.deployment(plan.name).state
                await deployer.launch()
            except HostError as exc:
                self.store.release_watch(plan.name, os.getpid())
                return self._host_error(plan.name, exc)
            except StoreError as exc:
                raise StoreError(f"{exc}; {plan.name} on {host.name} was left as it is: `gpuops status "
                                 f"{plan.name}` records what happened once the store can be written") from None
            finally:
                self._release(plan.name)
        finally:
            self.deploying.discard(plan.name)
        try:
            return await self._watch(plan.name, host, until, keep_on)  # its heartbeat goes on
        except StoreError as exc:
            raise StoreError(f"{exc}; the server of {plan.name} on {host.name} was left as it is: `gpuops status "
                             f"{plan.name}` records what happened once the store can be written") from None

    async def _deploy_nodes(self, plan: Plan, *, yes: bool, ask: Callable[[str], bool] | None,
                            hf_token: str | None, until: tuple[str, ...],
                            on_begin: Callable[[Deployment], Awaitable[Any]] | None, keep_on: bool) -> str:
        """A multi-node deployment: every node checked before anything changes; each node recorded as
        a deployment of its own (node 0 under the plan's name, node R as NAME-nR, member_of NAME);
        the weights on every node; node 0 started first, then the others; every node watched. The
        state returned is node 0's, and "ready" only once every node is (else the first other node's
        state); a stall in the rendezvous names the nodes that never joined."""
        plans = [plan] + [plan.member_plan(r) for r in range(1, plan.nnodes)]
        deployers = self._deployers(plans, yes=yes, ask=ask, hf_token=hf_token, secrets=await self.carried_secrets(plan))
        await self._begin_parts(deployers)
        names = [dep.name for dep in deployers]
        launching = False
        try:
            if on_begin is not None:
                await on_begin(self.deployment(plan.name))
            try:
                failed = await self._fetch_parts(plan, deployers)
            except HostError as exc:
                for dep in deployers:
                    self.store.release_watch(dep.name, os.getpid())
                return self._host_error(plan.name, exc)
            if failed is not None:
                return failed
            launching = True
            return await self._launch_parts(plan, deployers, until, keep_on)
        finally:
            if not launching:  # (_launch_parts releases them itself)
                self._end_parts(names)

    async def _begin_parts(self, deployers: list[Deployer], *, held: bool = False) -> None:
        """Every part checked before anything changes (Refused: nothing changed), then each recorded
        as a deployment of its own, its lease this process's. `held`: the port and GPUs are the
        replaced deployment's (a swap's): checked once it is stopped (:meth:`_launch_parts`)."""
        begun: list[Deployer] = []
        try:
            for confirm in (False, True):  # every part's refusals before any part's question
                for dep in deployers:
                    if confirm and held:
                        continue  # the GPUs are the replaced deployment's: asked about once it is stopped
                    try:
                        await (dep.confirm_gpus() if confirm else dep.checks(held=held))
                    except DeployError as exc:
                        if len(deployers) == 1:
                            raise
                        raise DeployError(f"node {dep.plan.node_rank} ({dep.host.name}): {exc}") from None
            for dep in deployers:
                dep.begin()
                begun.append(dep)
        except (DeployError, StoreError) as exc:
            for dep in begun:  # recorded already: marked as never started, their leases go
                self.bus.publish(dep.name, self.store.set_state(dep.name, State.STOPPED, detail=f"not started: {exc}"))
                self._release(dep.name)
            raise Refused(str(exc)) from None
        self.deploying.update(dep.name for dep in deployers)

    def _end_parts(self, names: list[str]) -> None:
        """This process's deploy of these parts is over: their leases go."""
        for name in names:
            self._release(name)
        self.deploying.difference_update(names)

    async def _fetch_parts(self, plan: Plan, deployers: list[Deployer]) -> str | None:
        """The weights on every part's host (each checked, what is missing downloaded): node 0 first,
        then the others at once (on a shared mount they then find the files there: two downloads into
        one folder at once trip over each other). None when every part has them; else the state the
        deployment ends in (the failed part's own is recorded; the others are stopped, not started)."""
        fetched = [await deployers[0].download()]
        if fetched[0]:
            fetched += await asyncio.gather(*(dep.download() for dep in deployers[1:]))
        else:
            fetched += [True] * (len(deployers) - 1)
        if all(fetched):
            return None
        failed = [dep for dep, ok in zip(deployers, fetched) if not ok]
        for dep, ok in zip(deployers, fetched):
            self.store.release_watch(dep.name, os.getpid())
            if ok:
                self.bus.publish(dep.name, self.store.set_state(
                    dep.name, State.STOPPED, detail=f"not started: node {failed[0].plan.node_rank}'s download failed"))
        return self.deployment(failed[0].name).state if failed[0].name == plan.name else State.CRASHED

    async def _launch_parts(self, plan: Plan, deployers: list[Deployer], until: tuple[str, ...], keep_on: bool,
                            *, check_held: bool = False) -> str:
        """Start every part (node 0 first: it holds the rendezvous the others join) and watch each.
        The state returned is node 0's, and "ready" only once every node is (else the first other
        node's state); a stall in the rendezvous names the nodes that never joined. `check_held`:
        the ports and GPUs are checked first (a swap's: the old server held them until now); one
        still taken is a crash of the new deployment, nothing started."""
        names = [dep.name for dep in deployers]
        try:
            if check_held:
                try:
                    for dep in deployers:
                        await dep.check_held()
                except DeployError as exc:
                    from .domain import Finding, FindingEvent

                    why = f"not started: {exc}"
                    for dep in deployers:
                        self.store.release_watch(dep.name, os.getpid())
                        if dep.name != plan.name:
                            self.bus.publish(dep.name, self.store.set_state(dep.name, State.STOPPED, detail=why))
                    for event in (FindingEvent.of(Finding("port-in-use", "error", str(exc))),
                                  StateEvent(state=State.CRASHED, reason=why)):
                        self.bus.publish(plan.name, self.store.record(plan.name, event))
                    return State.CRASHED
            for dep in deployers:
                await dep.launch()
        except HostError as exc:
            for dep in deployers:
                self.store.release_watch(dep.name, os.getpid())
            return self._host_error(plan.name, exc)
        finally:
            self._end_parts(names)
        for dep in deployers[1:]:  # the other nodes' watches go on beside node 0's
            self._ensure_readings(dep.host)
            await self.watches.stop(dep.name)
            self.watches.watch(dep.name, until=until, keep_on=True)
        state = await self._watch(plan.name, deployers[0].host, until, keep_on)
        if state == State.STALLED and plan.members:
            self._name_missing_nodes(plan)
        elif state == State.READY:  # the deployment is ready when every node is (each goes on being watched)
            for dep in deployers[1:]:
                try:
                    member = await self.watches.outcome(dep.name)
                except HostError as exc:
                    member = self._host_error(dep.name, exc)
                if member != State.READY:
                    return member
        return state

    async def carried_secrets(self, plan: Plan) -> dict[str, str]:
        """The values of the secrets `plan` carries from the deployment it was planned like (its
        secret_names), read again where `--like` read them, never from the plan: a unit or plan file
        on this machine, or a stored deployment (its env file on its host). What cannot be read is
        left out: the deployment's own env file may hold it (a redeploy), else the deploy is refused."""
        from .deploy.store import StoreError
        from .hosts.files import read_env_value
        from .planning import PlanError
        from .planning.like import load_previous, previous_from_plan

        names = plan.secret_names
        if plan.like is None or not names:
            return {}
        source = plan.like.source
        values: dict[str, str] = {}
        try:
            if source.startswith("deployment "):
                old = self.store.deployment(source[len("deployment "):])
                if old is None:
                    return {}
                values = dict(previous_from_plan(old.plan, source).secrets)  # (an older gpuops' plan held them)
                host = self.host(old.host)
                if host is not None and any(n not in values for n in names):
                    env_path = getattr(await open_launcher(host, old.plan), "env_path")
                    for name in names:
                        if name not in values and (value := await read_env_value(host, env_path, name)):
                            values[name] = value
            else:
                values = dict(load_previous(source).secrets)
        except (PlanError, HostError, StoreError, OSError):
            pass  # what was read so far; the rest from the deployment's own env file, or refused
        return {n: v for n, v in values.items() if n in names}

    def _deployers(self, plans: list[Plan], *, yes: bool, ask: Callable[[str], bool] | None,
                   hf_token: str | None, secrets: dict[str, str] | None = None) -> list[Deployer]:
        """A deployer for each part of a multi-part deployment (bound to its host); Refused when one
        is being deployed by another gpuops."""
        deployers: list[Deployer] = []
        for p in plans:
            cfg = self.host_config(p.host or "")
            bound = bind_plan(p, cfg)
            host = self.host(cfg.name)
            assert host is not None
            refusal = self.store.refusal(bound.name)
            if refusal:
                raise Refused(refusal)
            deployers.append(Deployer(host, bound, self.store, self.bus, yes=yes, ask=ask,
                                      stall=dict(self.inventory.stall), hf_token=hf_token, journal_dir=cfg.journal_dir,
                                      secrets=secrets))
        return deployers

    async def _deploy_replicas(self, plan: Plan, *, yes: bool, ask: Callable[[str], bool] | None,
                               hf_token: str | None, until: tuple[str, ...],
                               on_begin: Callable[[Deployment], Awaitable[Any]] | None, keep_on: bool) -> str:
        """A replicated deployment: every replica and the router checked before anything changes;
        the router recorded (under the plan's name); each replica deployed as NAME-rI (replica_of
        NAME) and watched until ready, one after the other (replicas on one host share its
        download); then the router started, ready once it counts every replica healthy. A replica
        that does not get ready leaves the router unstarted (its state says why)."""
        deployers = self._deployers([*plan.replicas, plan], yes=yes, ask=ask, hf_token=hf_token)
        try:
            for deployer in deployers:  # every part's refusals before any part's question
                await deployer.checks()
            for deployer in deployers:
                await deployer.confirm_gpus()
            router = deployers[-1]
            router.begin()
        except (DeployError, StoreError) as exc:
            raise Refused(str(exc)) from None
        self.deploying.add(plan.name)
        try:
            if on_begin is not None:
                await on_begin(self.deployment(plan.name))
            # one API key for the router and every keyed replica: the router's from an earlier run
            # (its clients keep working after a restart), else a new one
            try:
                key = await self._shared_key(router) if plan.uses_api_key else None
            except HostError as exc:
                self.store.release_watch(plan.name, os.getpid())
                return self._host_error(plan.name, exc)
            router.api_key = key
            for deployer in deployers[:-1]:
                replica = deployer.plan
                state = await self._deploy_one(replica, replica.host or "", yes=True, ask=None, hf_token=hf_token,
                                               until=(State.READY, State.CRASHED, State.STALLED), on_begin=None, keep_on=True,
                                               api_key=key if replica.uses_api_key else None)
                if state != State.READY:
                    why = f"replica {replica.name} is {state}: the router was not started"
                    self.bus.publish(plan.name, self.store.record(plan.name, StateEvent(state=State.CRASHED, reason=why)))
                    self.store.release_watch(plan.name, os.getpid())
                    return state
            try:
                await router.launch()
            except HostError as exc:
                self.store.release_watch(plan.name, os.getpid())
                return self._host_error(plan.name, exc)
        finally:
            self._release(plan.name)  # the router's lease, however its deploy ended
            self.deploying.discard(plan.name)
        return await self._watch(plan.name, router.host, until, keep_on)

    @staticmethod
    async def _shared_key(deployer: Deployer) -> str:
        from .hosts.files import new_api_key, read_env_value

        env_path = getattr(await open_launcher(deployer.host, deployer.plan), "env_path")
        return await read_env_value(deployer.host, env_path, "GPUOPS_API_KEY") or new_api_key()

    def _name_missing_nodes(self, plan: Plan) -> None:
        """Node 0 of `plan` stalled: a node that never reached the rendezvous (its own log shows no
        dist_init, or its server is gone) is named in a finding of node 0."""
        from .domain import PHASES, Evidence, Finding, FindingEvent, Fix

        dist = PHASES.index(State.DIST_INIT)
        for rank, name in enumerate(plan.member_names, start=1):
            m = self.store.deployment(name)
            if m is None:
                continue
            phase = m.state if m.state in PHASES else None
            if phase is not None and PHASES.index(phase) >= dist:
                continue
            where = plan.members[rank]
            finding = Finding(
                "nccl-init-stall", "error",
                f"node {rank} ({where.host}, deployment {name}) never reached the rendezvous at {plan.dist_init_addr}: "
                f"it is {m.state}",
                evidence=(Evidence(source=f"deployment:{name}", reading=f"state {m.state} since {m.updated_at}"),),
                fix=Fix(f"open {name} (gpuops logs {name}, :dep {name}): start it, or find why it cannot reach "
                        f"{plan.dist_init_addr} from {where.host}"),
                data={"node_rank": rank, "member": name, "host": where.host, "state": m.state})
            try:
                self.bus.publish(plan.name, self.store.record(plan.name, FindingEvent.of(finding)))
            except StoreError:
                return

    def _release(self, name: str) -> None:
        """This process's deploy of `name` is over (started, or failed before): its lease goes."""
        try:
            self.store.release_lease(name)
        except StoreError:
            pass  # a store that cannot be written: the lease's owner is dead once this process ends

    async def _watch(self, name: str, host: Host, until: tuple[str, ...], keep_on: bool = False) -> str:
        self._ensure_readings(host)
        await self.watches.stop(name)
        watch = self.watches.watch(name, until=until, keep_on=keep_on)
        if watch is None:
            return self.deployment(name).state
        try:
            return await self.watches.outcome(name)
        except HostError as exc:
            return self._host_error(name, exc)

    def _host_error(self, name: str, exc: HostError) -> str:
        from .domain import Finding, FindingEvent

        for event in (FindingEvent.of(Finding("host-error", "error", exc.message)),
                      StateEvent(state=State.CRASHED, reason=exc.message)):
            try:
                self.bus.publish(name, self.store.record(name, event))
            except StoreError:
                break
        return State.CRASHED

    def watch(self, name: str) -> Watch | None:
        """The deployment's watch in this process, started when there is none: the screen
        subscribes to it. It watches on after ready (a crash then is seen) and after a stall.
        While this process deploys or restarts it, the deploy's own watch (once it starts) is the
        one: none is started beside it."""
        if name in self.deploying:
            return self.watches.watches.get(name)
        return self.watches.watch(name, until=())

    # ---------------------------------------------------------------- stop, restart, fix

    async def stop(self, name: str, *, confirmed: bool = False) -> str:
        """Stop the server (asked first); the state becomes stopped. Returns the launcher's word.
        Stopping never waits on the store: every server (and part) is stopped first, then recorded;
        a record that fails (a full disk) is a StoreError saying the servers are stopped."""
        self._writable("stop changes a host")
        d = self.deployment(name)
        if not confirmed:
            raise NeedsConfirmation(f"stop {d.name} ({d.model}) on {d.host}{self.parts_said(d)}?")
        host = self._host_of(d)
        try:
            await self.watches.stop(name)
        except StoreError:
            pass  # the watch's last write failed: it ended all the same
        status = await (await open_launcher(host, d.plan)).stop()
        unrecorded: list[str] = []
        try:
            self.bus.publish(name, self.store.set_state(name, State.STOPPED, detail=status.detail))
        except StoreError as exc:
            unrecorded.append(f"{name}'s server on {d.host} is stopped ({status.detail}), but the store could not "
                              f"record it: {exc}")
        said = status.detail
        for member in self.parts(d):  # node 0 first (its shutdown reaches the others), then each node;
            try:  # a router first, then its replicas
                said += f"; {member.name}: {await self.stop(member.name, confirmed=True)}"
            except StoreError as exc:
                unrecorded.append(str(exc).split(f"; run `gpuops stop {member.name}`")[0])
        if unrecorded:
            raise StoreError("; ".join(unrecorded) + f"; run `gpuops stop {name}` again once it can be written")
        return said

    async def forget(self, name: str, *, confirmed: bool = False) -> None:
        """Remove a deployment and its history from the store (asked first): refused while its
        server runs or another gpuops deploys it (stop it first)."""
        self._writable("forget changes the store")
        d = self.deployment(name)
        host = self.host(d.host)
        if host is not None:
            status = await (await open_launcher(host, d.plan)).status()
            if status.running:
                raise Refused(f"{name}'s server runs on {d.host} (pid {status.pid}): stop it first")
        taken = self.store.refusal(name)
        if taken and d.state in (State.PLANNED, State.DOWNLOADING):  # another gpuops deploys it right now
            raise Refused(taken)
        if not confirmed:
            raise NeedsConfirmation(f"forget {name} ({d.model} on {d.host}, {d.state}, run {d.run}){self.parts_said(d)} "
                                    "and its history?")
        for member in d.plan.part_names:  # a multi-node deployment's other nodes go with it, a router's replicas
            if self.store.deployment(member) is not None:
                await self.forget(member, confirmed=True)
        await self.watches.stop(name)
        self.store.remove(name)

    async def restart(self, name: str, *, confirmed: bool = False, plan: Plan | None = None,
                      why: PlanEvent | None = None, until: tuple[str, ...] = (State.READY, State.CRASHED, State.STALLED),
                      keep_on: bool = False) -> str:
        """Stop the server and start it again (with `plan` and its reason `why`: a fix), as a new
        run watched from where its log ends now. As deploy does, the weights are checked on the host
        first and what is missing is downloaded (resumed from the disk) before the server starts."""
        self._writable("a restart changes a host")
        d = self.deployment(name)
        if name in self.deploying:
            raise Refused(f"{name} is being deployed by this gpuops ({d.state}): wait for it, or stop it first")
        owner = self.store.lease_owner(name)
        if owner is not None and owner[0].pid != os.getpid() and owner[0].alive(owner[1]):
            raise Refused(f"{name} is being deployed by gpuops pid {owner[0].pid} ({d.state}): wait for it, or stop "
                          "it first")
        if not confirmed:
            raise NeedsConfirmation(f"restart {d.name} ({d.model}) on {d.host}{self.parts_said(d)}?")
        host = self._host_of(d)
        new_plan = plan or d.plan
        hf_token = local_hf_token()  # (a download may be needed: a gated model's needs the token as deploy's did)
        if new_plan.members:  # every node: stopped, then started again as a new run of each
            await self.stop(name, confirmed=True)
            return await self._deploy_nodes(new_plan, yes=True, ask=None, hf_token=hf_token, until=until,
                                            on_begin=None, keep_on=keep_on)
        if new_plan.replicas:  # every replica and the router: stopped, then started again
            await self.stop(name, confirmed=True)
            return await self._deploy_replicas(new_plan, yes=True, ask=None, hf_token=hf_token, until=until,
                                               on_begin=None, keep_on=keep_on)
        cfg = self.host_config(d.host)
        await self.watches.stop(name)
        # the inventory's [stall] limits as a deploy has them (a restart's stalled download waited 120 s)
        deployer = Deployer(host, new_plan, self.store, self.bus, yes=True, stall=dict(self.inventory.stall),
                            hf_token=hf_token, journal_dir=cfg.journal_dir)
        try:  # the new run first: it takes the name's lease (refused while another gpuops deploys it)
            deployer.begin_run(why or PlanEvent(code="restart", summary="restarted by the operator"))
        except StoreError as exc:
            raise Refused(str(exc)) from None
        self.deploying.add(name)
        try:
            await (await open_launcher(host, d.plan)).stop()
            # as deploy does: the weights checked on the host, and what is missing downloaded
            # (resumed from the disk) before the server starts: never a server on half a model
            if not await deployer.download():
                self.store.release_watch(name, os.getpid())
                return self.deployment(name).state
            await deployer.launch()
        except HostError as exc:
            return self._host_error(name, exc)
        finally:
            self._release(name)
            self.deploying.discard(name)
        return await self._watch(name, host, until, keep_on)

    async def apply_fix(self, name: str, patch: dict, *, code: str | None = None, summary: str | None = None,
                        confirmed: bool = False, until: tuple[str, ...] = (State.READY, State.CRASHED, State.STALLED),
                        keep_on: bool = False) -> str:
        """A finding's fix: the plan patched (its diff recorded with the finding's code), the server
        restarted with it. ValueError-free: a bad patch is Refused."""
        self._writable("a fix restarts the server")
        d = self.deployment(name)
        try:
            new_plan, diff = apply_patch(d.plan, patch, why=summary)
        except ValueError as exc:
            raise Refused(f"fix refused: {exc}") from None
        if not diff:
            raise Refused(f"the fix changes nothing in {name}'s plan")
        if not confirmed:
            shown = "; ".join(f"{op}{text}" for op, text in diff)
            raise NeedsConfirmation(f"apply the fix for {code or 'the finding'} to {name} and restart it? {shown}")
        why = PlanEvent(code=code, summary=summary, diff=diff)
        return await self.restart(name, confirmed=True, plan=new_plan, why=why, until=until, keep_on=keep_on)

    def findings(self, name: str) -> list[Any]:
        """The findings of the deployment's current run as its screen shows them (the view rebuilt
        from the store: one per code, errors first; a stall's are gone once the run moved on)."""
        from .deploy.view import RunView

        d = self.deployment(name)
        return RunView.of(d.name, self.store.events(d.name, run=d.run)).findings

    def fix_diff(self, name: str, patch: dict) -> list[tuple[str, str]]:
        """What a fix would change in the deployment's plan (shown before asking)."""
        try:
            return apply_patch(self.deployment(name).plan, patch)[1]
        except ValueError as exc:
            raise Refused(f"fix refused: {exc}") from None

    # ---------------------------------------------------------------- looking

    async def quick_check(self, name: str) -> dict:
        d = self.deployment(name)
        host = self._host_of(d)
        answer, why = await quick_check(host, d.plan, await open_launcher(host, d.plan))
        if answer is None:
            raise HostError(f"quick check failed: {why}")
        return answer

    async def status(self, name: str) -> Deployment:
        """The deployment as it is: one nobody watches (its gpuops was closed or killed) is
        reconciled with its host first (is the server alive? what did its log say since the stored
        position?), and what is true is recorded."""
        d = self.deployment(name)
        if d.state not in LIVE or watcher_alive(d) or name in self.watches.tasks:
            return d
        host = self.host(d.host)
        if host is None:
            return d
        watch = watch_class(d.plan)(host, d, self.store, self.bus, WatchOptions(
            stall=dict(self.inventory.stall), journal_dir=self.host_config(d.host).journal_dir, follow=False,
            quick_check=False, triage=False, until=()))
        await watch.run()
        return self.deployment(name)

    async def logs(self, name: str, *, follow: bool = False) -> AsyncIterator[Any]:
        """The server's log records (the whole log of the deployment's file or unit)."""
        d = self.deployment(name)
        host = self._host_of(d)
        launcher = await open_launcher(host, d.plan)
        follower = launcher.follower(journal_dir=self.host_config(d.host).journal_dir, follow=follow)
        async for rec in follower.records():
            yield rec

    async def triage(self, name: str) -> TriageReport:
        """The deployment's current run's log through the log triage, plus the host checks."""
        from .deploy.journal import FollowError

        d = self.deployment(name)
        host = self._host_of(d)
        launcher = await open_launcher(host, d.plan)
        lines: list[str] = []
        log_error = None
        if d.run_offset is None and d.run_cursor is None:
            # this run's server never started (it failed or stopped while planned or downloading): the log
            # holds earlier runs only, and an earlier run's "ready" is not this run's
            log_error = f"run {d.run} has no log: its server was never started ({d.state})"
        else:
            try:
                lines = [rec.text async for rec in self._run_log(d, host, launcher)]
            except FollowError as exc:  # no log (yet), or unreadable: the host checks still tell a lot
                log_error = exc.message
        status = await launcher.status()
        if d.plan.members:  # every node's own checks, and the checks across the nodes
            results = await self._node_checks(d.plan, host, status)
        else:
            results = await run_checks(host, d.plan, server_pids=[status.pid] if status.running and status.pid else [])
        report = triage_log(lines, d.plan)
        report.findings = ranked([*self._as_its_screen(d, report.findings, results), *check_findings(results)])
        report.checks = [r.summary() for r in results]
        report.stacks = stacks(results)
        report.running = status.running
        report.log_error = log_error
        return report

    def _as_its_screen(self, d: Deployment, found: list[Any], results: list[Any]) -> list[Any]:
        """The log's findings as the deployment's screen says them: a stall in force is the stall
        watcher's finding (one finding, one severity, one fix) in place of the log's silence; else
        the silence's fix made again from the host's P2P check (errors first, causes first after)."""
        from .diagnose.stall import with_p2p_check

        stalled = [f for f in self.findings(d.name) if f.code == "nccl-init-stall" and "silent_s" in f.data] \
            if d.state == State.STALLED else []
        if stalled:
            return [f for f in found if f.code != "nccl-init-stall"] + stalled[:1]
        p2p_ok = next((r.ok for r in results if r.name == "p2p-unavailable"), None)
        return [with_p2p_check(f, p2p_ok, d.plan.env.get("NCCL_P2P_DISABLE") == "1") for f in found]

    async def _node_checks(self, plan: Plan, host0: Host, status0: Any) -> list[Any]:
        """A multi-node deployment's host checks: node 0's as for one host, each other node's with its
        node in the check's name and its findings' summaries, then the nodes compared (driver, torch,
        the NCCL interface, each node's reach of node 0's rendezvous)."""
        import asyncio

        import msgspec

        from .diagnose.host_checks import HostCheckResult, TriageError, _snapshot_or_error, checks_from, run_probe
        from .diagnose.node_checks import compare_nodes, node_probe

        async def one(rank: int) -> tuple[list[Any], dict, dict, bool]:
            p = plan.member_plan(rank)
            host = host0 if rank == 0 else self.host(p.host or "")
            if host is None:
                return [HostCheckResult(f"node-{rank}", None, f"node {rank}: {p.host} is not in the inventory")], {}, \
                    {}, False
            st = status0 if rank == 0 else await (await open_launcher(host, p)).status()
            pids = [st.pid] if st.running and st.pid else []
            try:
                doc, snap = await asyncio.gather(run_probe(host, p, server_pids=pids), _snapshot_or_error(host))
            except (TriageError, HostError) as exc:
                return [HostCheckResult(f"node-{rank}", None, f"node {rank} ({p.host}): {exc.message}")], {}, \
                    await node_probe(host, plan, p.env.get("NCCL_SOCKET_IFNAME")), st.running
            results = checks_from(doc, p, snap)
            if rank:
                label = f"node {rank} ({p.host})"
                results = [HostCheckResult(f"{r.name}@{p.host}", r.ok, f"{label}: {r.detail}",
                                           tuple(msgspec.structs.replace(f, summary=f"{label}: {f.summary}")
                                                 for f in r.findings), r.data) for r in results]
            return results, doc, await node_probe(host, plan, p.env.get("NCCL_SOCKET_IFNAME")), st.running

        nodes = await asyncio.gather(*(one(rank) for rank in range(plan.nnodes)))
        results = [r for rs, _, _, _ in nodes for r in rs]
        return results + compare_nodes(plan, [n[1] for n in nodes], [n[2] for n in nodes], [n[3] for n in nodes])

    async def _run_log(self, d: Deployment, host: Host, launcher: Any) -> AsyncIterator[Any]:
        """The lines of the deployment's current run (from where its run's log begins)."""
        follower = launcher.run_log(d, journal_dir=self.host_config(d.host).journal_dir)
        async for rec in follower.records():
            if not rec.notice:
                yield rec

    # ---------------------------------------------------------------- hosts

    async def scan_storage(self, host_name: str, users: Mapping[str, str] | None = None) -> Any:
        """The host's mounts and model copies (a HostStorage; its `error` says why a part could not be
        read, an unknown host included). `users`: the deployments that use a model (None: the stored)."""
        from .hosts.model_copies import HostStorage, scan_or_error

        host = self.host(host_name)
        if host is None:
            return HostStorage(host_name, error=f"no host named {host_name!r}")
        return await scan_or_error(host, self.stored_model_users(host_name) if users is None else users)

    async def model_facts_on_host(self, host_name: str, model_id: str, path: str) -> Any:
        """A model's facts from its copy at `path` on the host (its config.json read there)."""
        from .planning.hostfacts import facts_on_host

        host = self.host(host_name)
        if host is None:
            raise Refused(f"unknown host {host_name!r} (known: {', '.join(self.inventory.names())})")
        return await facts_on_host(host, model_id, path)

    def model_id_for(self, host_name: str, path: str) -> str | None:
        """The repo id a folder on the host stands for (MODEL_DIR/owner/name), else None."""
        from .planning.hostfacts import repo_id_for

        return repo_id_for(path, self.host_config(host_name).model_dirs)

    def stored_model_users(self, host_name: str) -> dict[str, str]:
        """Deployments on `host_name` whose server runs or is about to (name → model path): a
        model they use is not deleted. A stopped or crashed one holds no file of it."""
        return {d.name: d.plan.model_path or d.model for d in self.store.deployments()
                if d.host == host_name and d.state not in (State.STOPPED, State.CRASHED)}

    async def delete_model(self, host_name: str, model: Any, *, confirmed: bool = False) -> Any:
        """Remove a model copy (from a scan of the host) after asking; the host re-checks the
        policy and that no process uses it."""
        from .hosts.model_copies import DeleteRefused, delete, refusal_for

        refused = refusal_for(model, self.readonly)
        if refused is not None:
            raise Refused(f"refused ({refused.rule}): {refused.message}; nothing deleted")
        if not confirmed:
            raise NeedsConfirmation(f"delete {model.id} on {host_name} ({model.path})?")
        host = self.host(host_name)
        if host is None:
            raise Refused(f"unknown host {host_name!r}")
        try:
            return await delete(host, model, self.stored_model_users(host_name), readonly=self.readonly)
        except DeleteRefused as exc:
            raise Refused(f"refused ({exc.rule}): {exc.message}; nothing deleted") from None

    async def process_owner(self, host_name: str, pid: int) -> Deployment | None:
        """The stored deployment whose server `pid` belongs to on `host_name` (its launcher's process
        or one of that one's descendants: a rank), or None."""
        from .hosts.host import host_python
        from .hosts.procs import process_tree

        host = self.host(host_name)
        if host is None:
            return None
        for d in self.store.deployments():
            if d.host != host_name or d.state in (State.PLANNED, State.STOPPED):
                continue
            status = await (await open_launcher(host, d.plan)).status()
            if not status.running or not status.pid:
                continue
            if status.pid == pid or pid in (await process_tree(host, status.pid, host_python(host))).pids:
                return d
        return None

    async def end_process(self, host_name: str, pid: int, shown_command: str | None, *,
                          confirmed: bool = False, deployment: str | None = None) -> Any:
        """End a process on a host (asked first). One of a stored deployment's server is ended as the
        deployment is: by `stop` (recorded stopped, never a crash); `deployment` is the one the
        operator was asked about: a pid found to be another's (or a deployment's, when none was
        named) is asked about again."""
        from .hosts.procs import EndResult, end_process

        self._writable("gpuops changes nothing on the hosts")
        host = self.host(host_name)
        if host is None:
            raise Refused(f"unknown host {host_name!r}")
        owner = await self.process_owner(host_name, pid)
        if owner is not None:
            if not confirmed or deployment != owner.name:
                raise NeedsConfirmation(f"pid {pid} on {host_name} is the server of deployment {owner.name} "
                                        f"({owner.model}): stop {owner.name}{self.parts_said(owner)}?")
            said = await self.stop(owner.name, confirmed=True)
            return EndResult(pid, True, f"{owner.name} stopped ({said}): pid {pid} was its server")
        if not confirmed:
            raise NeedsConfirmation(f"end pid {pid} on {host_name} ({shown_command or '?'})?")
        return await end_process(host, pid, shown_command)

    # ---------------------------------------------------------------- benchmarks

    def bench_runs(self) -> list[Any]:
        return self.store.bench_runs()

    def bench_run(self, run_id: int) -> Any:
        return self.store.bench_run(run_id)

    # ---------------------------------------------------------------- swap

    BENCH_OLD = ("reuse", "run", "none")

    async def swap(self, old: str, plan: Plan, profile: Any, *, confirmed: bool = False,
                   rollback_on_failure: bool = False, keep: Callable[[dict], Awaitable[bool]] | None = None,
                   emit: Callable[[SwapStep], Any] = lambda step: None,
                   bench_emit: Callable[[BenchEvent], Any] = lambda e: None, bench_old: str = "reuse",
                   bench_new: bool = True, hf_token: str | None = None) -> dict:
        """Replace ready deployment `old` by `plan` (planned like it: same host, GPUs, port, bind,
        served name) as one action: the new weights fetched on the host and checked while `old`
        still serves; `old` benchmarked with `profile` (`bench_old`: "reuse" its latest ok run of
        that profile, else run one; "run" one; "none"); `old` stopped; the new one started and
        watched; benchmarked the same way (unless not `bench_new`); compared; then kept or rolled
        back (`old` restarted with its plan: a new run of its name). A new one that crashes or
        stalls is rolled back at once when `rollback_on_failure`. Every step is one `emit`ted
        :data:`~gpuops.core.domain.SwapStep` (``"step": NAME``); the outage (no server ready: from
        the stop of `old` until the new one, or `old` again, is ready) is measured, `outage_s` in the
        result and the last step. Both deployments keep their whole history."""
        self._writable("a swap stops and starts servers")
        d = self._swap_refusal(old, plan, bench_old)
        if not confirmed:
            raise NeedsConfirmation(_swap_question(old, d, plan, profile, bench_old, bench_new))
        emit(SwapPlanned(old=old, new=plan.name, model=plan.model.id,
                         diff=[f"{c.op} {c.text}" for c in (plan.like.diff if plan.like is not None else ())]))
        run = _SwapRun(old, plan, profile, emit, bench_emit)
        state = await self._swap_start(run, bench_old, hf_token)
        if isinstance(state, dict):
            return state  # not swapped: nothing was stopped
        if state == State.READY:
            run.outage += time.monotonic() - (run.down_at or time.monotonic())
            run.down_at = None
        emit(SwapNewState(state=state, new=plan.name,
                          outage_s=round(run.outage, 1) if state == State.READY else msgspec.UNSET))
        if state != State.READY:
            why = f"{plan.name} {state}"
            if rollback_on_failure or (keep is not None and not await keep({"failed": why})):
                return await self._swap_rollback(run, why)
            return {"outcome": "failed", "reason": why, "old": old, "new": plan.name, "before": run.before_id,
                    "outage_s": None}
        return await self._swap_end(run, keep, bench_new)

    def _swap_refusal(self, old: str, plan: Plan, bench_old: str) -> Deployment:
        """Deployment `old`, which `plan` may replace (else Refused, nothing changed)."""
        if bench_old not in self.BENCH_OLD:
            raise Refused(f"bench_old must be one of {', '.join(self.BENCH_OLD)}, not {bench_old!r}")
        d = self.deployment(old)
        if d.state != State.READY:
            raise Refused(f"{old} is {d.state}: a swap replaces a ready deployment (deploy the new one instead)")
        if plan.name == old:
            raise Refused(f"the new deployment needs its own name (not {old!r}, which a rollback restarts): give --name")
        if plan.host != d.host:
            raise Refused(f"{plan.name} is planned for {plan.host}, {old} runs on {d.host}: a swap stays on the host")
        if plan.replicas:
            raise Refused(f"{plan.name} is replicas behind a router: a swap to it is not built yet")
        taken = self.store.refusal(plan.name)
        if taken:
            raise Refused(taken)
        return d

    async def _swap_start(self, run: _SwapRun, bench_old: str, hf_token: str | None) -> str | dict:
        """The new weights first, while the old server serves (the outage is a start-up, not a
        download), the old one benchmarked and stopped, the new one started: its state, or the
        result of a swap that stopped before the old one did (nothing stopped, the new one's parts
        recorded stopped: not started)."""
        plan = run.plan
        plans = [plan] + [plan.member_plan(r) for r in range(1, plan.nnodes)]
        deployers = self._deployers(plans, yes=True, ask=None, hf_token=hf_token or local_hf_token(),
                                    secrets=await self.carried_secrets(plan))
        await self._begin_parts(deployers, held=True)
        names = [dep.name for dep in deployers]
        launching = False
        try:
            stopped = await self._swap_fetch(run, deployers)
            if stopped is None:
                stopped = await self._swap_bench_old(run, bench_old)
            if stopped is not None:
                return stopped
            run.emit(SwapStopOld(old=run.old))
            run.down_at = time.monotonic()
            await self.stop(run.old, confirmed=True)
            run.emit(SwapDeployNew(new=plan.name))
            launching = True
            return await self._launch_parts(plan, deployers, (State.READY, State.CRASHED, State.STALLED), False, check_held=True)
        finally:
            if not launching:
                self._swap_unstarted(names, run.unstarted)

    def _swap_unstarted(self, names: list[str], why: str) -> None:
        """The new one's parts, recorded and never started: said so (not an interrupted download)."""
        for name in names:
            try:
                part = self.store.deployment(name)
                if part is not None and part.state in UNSTARTED:
                    self.bus.publish(name, self.store.set_state(name, State.STOPPED, detail=f"not started: {why}"))
            except StoreError:
                pass
        self._end_parts(names)

    async def _swap_fetch(self, run: _SwapRun, deployers: list[Deployer]) -> dict | None:
        """The new weights on the host (None), or the swap's end: they could not be fetched."""
        plan, old = run.plan, run.old
        run.emit(SwapFetch(old=old, new=plan.name, model=plan.model.id))
        try:
            failed = await self._fetch_parts(plan, deployers)
        except HostError as exc:
            for dep in deployers:
                self.store.release_watch(dep.name, os.getpid())
            failed = self._host_error(plan.name, exc)
        if failed is not None:
            run.emit(SwapFetch(old=old, new=plan.name, status=failed))
            return run.not_swapped(f"the download of {plan.model.id} for {plan.name} {failed}; {old} serves on")
        got = deployers[0].fetched
        run.emit(SwapFetch(old=old, new=plan.name, status="ok", present=bool(got.get("present", True)),
                           bytes=got.get("bytes", 0), seconds=got.get("seconds", 0.0)))
        return None

    async def _swap_bench_old(self, run: _SwapRun, bench_old: str) -> dict | None:
        """The old one's benchmark (`run.before`): skipped, reused or run (None), or the swap's end:
        it did not end ok."""
        old = run.old
        if bench_old == "none":
            run.emit(SwapBenchOld(old=old, run=None, skipped=True))
            return None
        reused = None if bench_old == "run" else next(
            (r for r in reversed(self.bench_runs()) if r.deployment == old and r.profile == run.profile.name
             and r.status == "ok"), None)
        if reused is not None:
            run.before = reused
            run.emit(SwapBenchOld(run=reused.id, reused=True))
            return None
        run.emit(SwapBenchOld(run=None, reused=False))
        before = run.before = await self.bench(await self.bench_target(deployment=old), run.profile,
                                               emit=run.bench_emit)
        run.emit(SwapBenchOld(run=before.id, status=before.status))
        if before.status != "ok":
            return run.not_swapped(f"the benchmark of {old} {before.status}")
        return None

    async def _swap_rollback(self, run: _SwapRun, why: str) -> dict:
        """The new one stopped, the old one restarted with its plan: the swap's result."""
        new_name, old = run.plan.name, run.old
        run.emit(SwapRollback(old=old, why=why))
        new = self.store.deployment(new_name)
        if run.down_at is None:
            run.down_at = time.monotonic()  # the new one served until now
        if new is not None and new.state not in (State.STOPPED, State.PLANNED, State.DOWNLOADING):
            await self.stop(new_name, confirmed=True)
        back = await self.restart(old, confirmed=True,
                                  why=PlanEvent(code="rollback", summary=f"rolled back from {new_name}: {why}"))
        total = round(run.outage + time.monotonic() - run.down_at, 1) if back == State.READY else None
        run.emit(SwapOldState(state=back, old=old, outage_s=total))
        return {"outcome": "rolled-back" if back == "ready" else "rollback-failed", "reason": why, "old": old,
                "new": new_name, "old_state": back, "before": run.before_id, "outage_s": total}

    async def _swap_end(self, run: _SwapRun, keep: Callable[[dict], Awaitable[bool]] | None,
                        bench_new: bool) -> dict:
        """The new one ready: benchmarked, compared, then kept or rolled back."""
        from .bench.runner import compare

        plan = run.plan
        after = None
        if bench_new:
            after = await self.bench(await self.bench_target(deployment=plan.name), run.profile, emit=run.bench_emit)
            run.emit(SwapBenchNew(run=after.id, status=after.status))
        else:
            run.emit(SwapBenchNew(new=plan.name, run=None, skipped=True))
        doc = None
        if run.before is not None and after is not None:
            doc = compare([run.before, after])
            run.emit(SwapCompare(before=run.before.id, after=after.id, compare=doc))
        ids = {"before": run.before_id, "after": after.id if after else None}
        if keep is not None and not await keep({"compare": doc, **ids}):
            return await self._swap_rollback(run, "the operator chose the old one")
        run.emit(SwapKept(new=plan.name, outage_s=round(run.outage, 1)))
        return {"outcome": "swapped", "old": run.old, "new": plan.name, **ids, "compare": doc,
                "outage_s": round(run.outage, 1)}

    async def bench_target(self, *, deployment: str | None = None, url: str | None = None,
                           host_name: str | None = None) -> Any:
        """What a benchmark runs against: a ready deployment, or a URL reached from `host_name`."""
        from .bench.runner import deployment_target, url_target

        self._writable("a benchmark loads a server and writes on its host")
        d = None
        if deployment is not None:
            d = self.deployment(deployment)
            if d.state != State.READY:
                raise Refused(f"deployment {d.name} is {d.state}, not ready")
            host_name = d.host
        if host_name is None:
            raise Refused("a benchmark needs a deployment or a host to run from")
        host = self.host(host_name)
        if host is None:
            raise Refused(f"unknown host {host_name!r}")
        return await deployment_target(host, d) if d is not None else await url_target(host, url or "")

    async def bench(self, target: Any, profile: Any, *, emit: Callable[[Any], Any] = lambda e: None) -> Any:
        """The engine's own benchmark against `target` (see :meth:`bench_target`), stored as it runs."""
        from .bench.runner import BenchRunner

        self._writable("a benchmark loads a server and writes on its host")
        return await BenchRunner(target, profile, self.store, emit=emit).run()


def _swap_question(old: str, d: Deployment, plan: Plan, profile: Any, bench_old: str, bench_new: bool) -> str:
    """What a swap asks before it does anything."""
    measured = {"reuse": f"benchmark {old} ({profile.name}; its latest ok run of it is reused)",
                "run": f"benchmark {old} ({profile.name})", "none": None}[bench_old]
    return (f"swap {old} ({d.model}) for {plan.name} ({plan.model.id}) on {d.host}: fetch {plan.model.id} there "
            f"while {old} serves, " + (f"{measured}, " if measured else "") + f"stop {old}, start {plan.name} on "
            f"GPUs {','.join(map(str, plan.gpu_ids))}, port {plan.port}"
            + (", benchmark it, compare?" if measured and bench_new else ", benchmark it?" if bench_new else "?"))


class _SwapRun:
    """One swap as it goes: what it replaces by what, where its steps go, the old one's
    benchmark, and the outage (`down_at`: since when no server is ready; `outage`: seconds so far)."""

    def __init__(self, old: str, plan: Plan, profile: Any, emit: Callable[[SwapStep], Any],
                 bench_emit: Callable[[BenchEvent], Any]) -> None:
        self.old = old
        self.plan = plan
        self.profile = profile
        self.emit = emit
        self.bench_emit = bench_emit
        self.before: BenchRun | None = None
        self.down_at: float | None = None
        self.outage = 0.0
        self.unstarted = "the swap ended before it started"  # why the new one's parts never started

    @property
    def before_id(self) -> int | None:
        return self.before.id if self.before is not None else None

    def not_swapped(self, reason: str) -> dict:
        """The result of a swap that ended before it stopped the old one (`reason` also said of the
        new one's parts, recorded stopped: not started)."""
        self.unstarted = reason
        return {"outcome": "not-swapped", "reason": reason, "old": self.old, "new": self.plan.name, "outage_s": 0.0}
