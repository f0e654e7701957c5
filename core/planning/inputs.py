"""What the planner is given: the target (a host's GPUs, disks and engine, or offline figures), the
operator's wishes, and for ``--like`` a previous deployment's launch. Below the planner's modules
(:mod:`.plan` builds from these, :mod:`.rules`' context carries them, :mod:`.like` reads a
:class:`Previous`), so none of them imports another to name these types."""

from __future__ import annotations

from dataclasses import dataclass, field

from .. import engines
from ..config import DEFAULT_FIRST_PORT, DEFAULT_LAUNCHER

__all__ = ["DEFAULT_MEM_FRACTION", "MEM_FRACTIONS", "GpuInfo", "Previous", "Target", "Wishes", "mem_fraction_of"]

DEFAULT_MEM_FRACTION = 0.8
MEM_FRACTIONS = (0.1, 0.98)  # the static shares a plan may pass (--mem-fraction-static), inclusive


def mem_fraction_of(text: str | None) -> float | None:
    """A --mem-fraction-static value as written (a previous deployment's, a published command's),
    when it is one a plan may pass; None otherwise."""
    try:
        frac = float(text) if text else None
    except ValueError:
        return None
    return frac if frac is not None and MEM_FRACTIONS[0] <= frac <= MEM_FRACTIONS[1] else None


@dataclass(frozen=True)
class GpuInfo:
    index: int
    memory_total: int
    memory_used: int = 0
    processes: int = 0
    name: str | None = None


@dataclass(frozen=True)
class Target:
    """What the plan is for: a host's GPUs, disks and engine, or offline figures."""

    host: str | None
    gpus: tuple[GpuInfo, ...]
    engine_version: str | None  # the host's installed engine version; None: not installed / unknown
    help_flags: frozenset[str] | None = None  # the host's `launch_server --help`, when it ran
    python: str | None = None  # the interpreter with the engine on the host; None: offline, bound at deploy
    model_dirs: tuple[str, ...] = ()
    forbidden_paths: tuple[str, ...] = ()
    free_bytes: dict[str, int] = field(default_factory=dict)  # model dir -> free bytes there
    existing: dict[str, str] = field(default_factory=dict)  # model id -> path of a complete copy
    serve_host: str = "127.0.0.1"
    launcher: str = DEFAULT_LAUNCHER
    allowed_gpu_ids: tuple[int, ...] | None = None  # the host policy's gpu_ids
    # TCP ports listening on the host, each with who holds it ("pid 123 (user: command)"; "" unknown)
    ports_taken: dict[int, str] = field(default_factory=dict)
    engine_asked: bool = True  # False: the host could not be asked which engine version it has
    # (name, port, state) of the host's stored deployments that may serve: their ports are taken too
    deployment_ports: tuple[tuple[str, int, str], ...] = ()
    first_port: int = DEFAULT_FIRST_PORT  # the host's first try for a server port (its inventory's first_port)


@dataclass(frozen=True)
class Previous:
    """A previous deployment's launch: where it came from, its argv flags and env. Its secrets (a
    secret flag's value, a secret variable's) are taken out as it is read: the argv holds the
    placeholder, `secret_env` the variables' names, `secrets` the values (what the source said; a
    stored deployment's are in its env file on its host), which never reach a plan. From a plan (a
    stored deployment, a plan JSON), also what its planner rules added: `derived` flags (name,
    values, the rule's id and why) and `derived_env` (name, value, rule id, why). Those were the
    planner's answer for the previous model, not the operator's choices: a plan like it derives
    them again for its own model (a unit file does not say which is which: all of it is kept)."""

    source: str
    argv: tuple[str, ...]
    env: tuple[tuple[str, str], ...] = ()
    secret_env: tuple[str, ...] = ()
    secrets: tuple[tuple[str, str], ...] = ()
    derived: tuple[tuple[str, tuple[str, ...], str, str], ...] = ()
    derived_env: tuple[tuple[str, str, str, str], ...] = ()

    def __repr__(self) -> str:  # never the values
        return f"Previous({self.source!r}, secrets={[k for k, _ in self.secrets]})"


@dataclass(frozen=True)
class Wishes:
    tp: int | None = None
    gpu_ids: tuple[int, ...] | None = None
    # speculative decoding where the checkpoint has MTP layers: True/False as the operator asked; None:
    # the engine decides (Engine.mtp_default: as a previous deployment had it, or the published command)
    mtp: bool | None = None
    download_dir: str | None = None
    port: int | None = None  # --port: never moved; None: the target's first_port, or the next free one above it
    name: str | None = None
    # --mem-fraction-static: the operator's (plan review's `mem`, --like's); None: the planner's choice
    # (the engine's published command's for these GPUs, else DEFAULT_MEM_FRACTION), resolved with the
    # GPUs (plan._tp_and_gpus), its source then in mem_fraction_from
    mem_fraction_static: float | None = None
    mem_fraction_from: str | None = None
    router_policy: str | None = None  # a replicated plan's router's --policy; None: the router's default
    served_name: str | None = None  # the model name clients ask for (None: from the model; --like keeps the old)
    engine_version: str | None = None  # the engine's version option: overrides what the host says
    like: Previous | None = None
    engine: str = engines.DEFAULT  # what serves: its flag rules and version data make the plan
    # the stored deployment this plan replaces (a swap): its server is stopped before this one
    # starts, so its port (and what listens there: its server) is not a conflict
    replacing: str | None = None
    # no --port: the first port tried (the target's first_port; a replica of a router given --port P:
    # P + 1, so that the replicas sit above the router's port rather than at the host's first port)
    port_from: int | None = None

    @property
    def mem_fraction(self) -> float:
        """The static share the plan passes: the one decided (mem_fraction_static), else gpuops' default."""
        return DEFAULT_MEM_FRACTION if self.mem_fraction_static is None else self.mem_fraction_static
