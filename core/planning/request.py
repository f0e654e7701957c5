"""The planning use case: what the operator asks a plan for (:class:`PlanRequest`) to a checked plan, one
host, several nodes or replicas behind a router (:func:`plan_request`, behind ``Ops.plan``), and the
one dispatch among the three builders (:func:`build`), which the TUI's plan review uses for each edit.
Bad input raises :class:`~gpuops.core.planning.PlanError` (one line: the CLI's exit 2), nothing
changed."""

from __future__ import annotations

import re
from dataclasses import dataclass, replace
from typing import Any, Awaitable, Callable, Iterable, Sequence

from ..config import HostConfig, Inventory, validate_abs_path, validate_host_name
from .. import engines
from ..domain import Plan
from ..hosts.host import Host, HostError
from . import PlanError
from .hostfacts import engine_version, help_flags, offline_target, read_target
from .like import load_previous
from .model_facts import ModelError, ModelFacts, load_model_facts, validate_model_ref
from .inputs import GpuInfo, Target, Wishes
from .plan import Node, build_multinode_plan, build_plan, build_replicated_plan, with_deployment_ports

# a host of the inventory, opened (the caller's pool keeps it, or the caller closes it: see plan_request)
OpenHost = Callable[[HostConfig], Awaitable[Host]]


@dataclass(frozen=True)
class PlanRequest:
    """What the operator asks a plan for: `gpuops plan`'s options, which `deploy MODEL` shares (and
    `swap` fills in for the new model)."""

    model: str
    host: str | None = None
    hosts: str | None = None  # "H1,H2": one deployment over several hosts
    replicas: int | None = None
    router_policy: str | None = None  # --router-policy: how the replicas' router spreads the requests
    tp: int | None = None
    gpus: int | None = None
    gpu_memory: float | None = None
    gpu_ids: str | None = None  # "0,1" as typed
    engine_version: str | None = None  # the version to plan for (the CLI's option for the default engine)
    like: str | None = None  # NAME|PLAN.json|UNIT
    download_dir: str | None = None
    mtp: bool | None = None  # --mtp / --no-mtp; None: as the engine decides (its published command)
    name: str | None = None
    port: int | None = None  # never moved; None: the default port, or the next free one
    replacing: str | None = None  # the deployment a swap stops first: its port is no conflict


def build(facts: ModelFacts, target: Target, wishes: Wishes, nodes: Sequence[Node] = (),
          replicas: int | None = None) -> Plan:
    """The plan: `replicas` servers behind a router round `nodes`, one deployment over `nodes` (node 0
    first), or with no nodes one server on `target`."""
    if replicas:
        return build_replicated_plan(facts, list(nodes), wishes, replicas)
    if wishes.router_policy is not None:
        raise PlanError("a routing policy is the router's: plan replicas behind one first (--replicas K)")
    if not nodes:
        return build_plan(facts, target, wishes)
    return build_multinode_plan(facts, list(nodes), wishes)


def gpu_ids(text: str | None) -> tuple[int, ...] | None:
    if text is None:
        return None
    if not re.fullmatch(r"\d+(,\d+)*", text.strip()):
        raise PlanError(f"--gpu-ids must look like 0,1,2,3, got {text!r}")
    return tuple(int(x) for x in text.split(","))


def version_wish(text: str | None, engine: str = engines.DEFAULT) -> str | None:
    if text is None:
        return None
    if not re.fullmatch(r"\d+\.\d+(\.\d+)?([.-]?(post|rc|dev)\d*)?", text):
        raise PlanError(f"{engines.get(engine).version_option} must look like 0.5.23, got {text!r}")
    return text


async def plan_request(inv: Inventory, req: PlanRequest, *, open_host: OpenHost,
                       close_host: Callable[[Host], Awaitable[Any]],
                       stored_ports: Callable[[], Iterable[tuple[str, str, str, int]]],
                       stored_plan: Callable[[str], Plan | None]) -> tuple[ModelFacts, Plan]:
    """(the model's facts, the plan) that `req` asks for (PlanError on bad input, nothing changed).
    `open_host`/`close_host`: a host of the inventory to read (its GPUs, disks, engine);
    `stored_ports`: (name, host, state, port) of the stored deployments (their ports are taken);
    `stored_plan`: a stored deployment's plan by name (for --like NAME)."""
    try:
        ref = validate_model_ref(req.model)
    except ValueError as exc:
        raise PlanError(f"MODEL: {exc}") from None
    if req.download_dir is not None:
        try:
            validate_abs_path(req.download_dir, "--download-dir")
        except ValueError as exc:
            raise PlanError(str(exc)) from None
    wishes = Wishes(
        tp=req.tp, gpu_ids=gpu_ids(req.gpu_ids), mtp=req.mtp, download_dir=req.download_dir,
        port=req.port, name=req.name, engine_version=version_wish(req.engine_version),
        like=load_previous(req.like, stored_plan) if req.like else None, replacing=req.replacing,
        router_policy=req.router_policy,
    )
    hosts, replicas = req.hosts, req.replicas
    if hosts and req.host:
        raise PlanError("give --host (one host) or --hosts (several), not both")
    if hosts and (req.gpus is not None or req.gpu_memory is not None):
        raise PlanError("--hosts reads every node's GPUs: --gpus/--gpu-memory plan one host offline")
    if replicas is not None:
        if req.gpus is not None or req.gpu_memory is not None:
            raise PlanError("--replicas reads the hosts' GPUs: --gpus/--gpu-memory plan one server offline")
        if not hosts and not req.host:
            raise PlanError("--replicas: name the host (--host) or hosts (--hosts) they run on")
    reader = _Reader(inv, open_host, close_host, stored_ports)
    nodes = await reader.nodes(hosts or req.host or "", least=1 if replicas is not None else 2) \
        if hosts or replicas is not None else None
    target = await reader.target(req) if nodes is None else None
    try:
        facts = load_model_facts(ref)
    except ModelError as exc:
        raise PlanError(str(exc)) from None
    if nodes is not None:
        return facts, build(facts, nodes[0].target, wishes, nodes, replicas)
    assert target is not None
    return facts, build(facts, target, wishes)


class _Reader:
    """The targets a request names, read from their hosts."""

    def __init__(self, inv: Inventory, open_host: OpenHost, close_host: Callable[[Host], Awaitable[Any]],
                 stored_ports: Callable[[], Iterable[tuple[str, str, str, int]]]):
        self.inv, self.open_host, self.close_host, self.stored_ports = inv, open_host, close_host, stored_ports

    async def _read(self, cfg: HostConfig, read: Callable[[Host], Awaitable[Any]]) -> Any:
        host = await self.open_host(cfg)
        try:
            return await read(host)
        finally:
            await self.close_host(host)

    async def _engine(self, host: Host) -> tuple[str | None, frozenset[str] | None, bool]:
        """(engine version, its --help flags, asked): what the host's engine is when its GPUs could not
        be read; asked False when the host could not be asked at all."""
        try:
            version = await engine_version(host)
            return version, (await help_flags(host, version) if version else None), True
        except HostError:
            return None, None, False

    async def target(self, req: PlanRequest) -> Target:
        if req.gpus is not None and not 1 <= req.gpus <= 64:
            raise PlanError(f"--gpus must be 1..64, got {req.gpus}")
        if req.gpu_memory is not None and not 1 <= req.gpu_memory <= 4096:
            raise PlanError(f"--gpu-memory must be 1..4096 GiB, got {req.gpu_memory:g}")
        if req.host is None:
            if req.gpus is None or req.gpu_memory is None:
                raise PlanError("give --host H (its GPUs are read) or --gpus N and --gpu-memory GIB to plan offline")
            return offline_target(req.gpus, req.gpu_memory)
        try:
            cfg = self.inv.host(req.host)
        except KeyError:
            raise PlanError(f"unknown host {req.host!r} (known: {', '.join(self.inv.names())})") from None
        try:
            target = with_deployment_ports(await self._read(cfg, read_target), self.stored_ports())
        except HostError as exc:
            if req.gpus is None or req.gpu_memory is None:
                hint = f" ({exc.hint})" if exc.hint else ""
                raise PlanError(f"{exc.message}{hint}; to plan without it give --gpus N --gpu-memory GIB") from None
            # its GPUs could not be read, its engine may still be there: ask (the plan would otherwise
            # say the engine "is not installed" where it is)
            version, flags, asked = await self._read(cfg, self._engine)
            return replace(offline_target(req.gpus, req.gpu_memory, launcher=cfg.launcher), host=cfg.name,
                           python=cfg.python or "python3", model_dirs=cfg.model_dirs,
                           forbidden_paths=cfg.forbidden_paths, serve_host=cfg.serve_host,
                           allowed_gpu_ids=cfg.gpu_ids, engine_version=version, help_flags=flags,
                           engine_asked=asked, first_port=cfg.first_port)
        if req.gpus is not None or req.gpu_memory is not None:
            count = req.gpus if req.gpus is not None else len(target.gpus)
            mem = int(req.gpu_memory * 1024**3) if req.gpu_memory is not None else min(
                (g.memory_total for g in target.gpus), default=0)
            target = replace(target, gpus=tuple(GpuInfo(i, mem) for i in range(count)))
        return target

    async def nodes(self, hosts: str, least: int = 2) -> list[Node]:
        """The hosts of a multi-node or replicated plan: each host of `--hosts H1,H2` read as `--host`
        reads one."""
        names = [h.strip() for h in hosts.split(",") if h.strip()]
        if len(names) < least:
            raise PlanError("--hosts: name two or more hosts, comma-separated (one host: --host)")
        if len(set(names)) != len(names):
            raise PlanError(f"--hosts: each host once, not {hosts}")
        nodes = []
        for name in names:
            try:
                validate_host_name(name)
                cfg = self.inv.host(name)
            except ValueError as exc:
                raise PlanError(f"--hosts: {exc}") from None
            except KeyError:
                raise PlanError(f"--hosts: unknown host {name!r} (known: {', '.join(self.inv.names())})") from None
            nodes.append(Node(await self.target(PlanRequest(model="", host=name)), cfg.reachable_addr,
                              cfg.nccl_interface))
        return nodes
