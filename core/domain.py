"""The typed domain model: plans, deployments, their events, findings and benchmark runs.

Each type is a ``msgspec.Struct`` with one encoder and one decoder, used by the store, every
``--json`` output and every consumer; nothing passes a plan around as a ``dict``. What is read
back (a plan JSON given to ``gpuops deploy``, a ``--like`` plan, a stored row) is decoded through
the same type, which validates it: no control character in any string of a plan (argv, env,
paths, names), environment names as POSIX names, ports and GPU ids in range. A value that fails
is :class:`Invalid`, one line saying where and what.

Facts derived from a plan (where it binds, the name clients ask for, whether it uses an API key,
the argv it executes, its systemd unit and env file) are defined here once, on :class:`Plan`;
the unit is always rendered from the validated plan, never taken from a file.

This module is the bottom layer of core: it imports nothing of gpuops but the validators of
:mod:`gpuops.core.config`.
"""

from __future__ import annotations

import itertools
import re
import time
from typing import Any, ClassVar, Literal, Sequence, Union

import msgspec
from msgspec import Struct, field

from . import engines
from .config import DEFAULT_LAUNCHER, LAUNCHERS, launcher_choices, validate_host_name
from .states import LIVE_STATES as LIVE_STATES  # (re-exported: the front ends read them here)
from .states import PHASES as PHASES
from .states import STATES as STATES
from .states import State as State

__all__ = [
    "API_KEY_PLACEHOLDER",
    "SECRET_FLAGS",
    "is_secret_env",
    "placeholder",
    "BENCH_EVENT_KINDS",
    "BenchChecksEvent",
    "BenchEvent",
    "BenchLogEvent",
    "BenchProgressEvent",
    "BenchQualityEvent",
    "BenchResultEvent",
    "BenchRun",
    "BenchStateEvent",
    "BenchStepEvent",
    "ChecksEvent",
    "Deployment",
    "Event",
    "Evidence",
    "Finding",
    "FindingEvent",
    "Fit",
    "Fix",
    "FunctionalCheck",
    "HostCheck",
    "Invalid",
    "Like",
    "LikeChange",
    "LogEvent",
    "ModelSummary",
    "NumbersEvent",
    "PhaseEvent",
    "Member",
    "Plan",
    "PlanEvent",
    "ProgressEvent",
    "RuleFired",
    "LIVE_STATES",
    "STATES",
    "State",
    "StateEvent",
    "SwapBenchNew",
    "SwapBenchOld",
    "SwapCompare",
    "SwapDeployNew",
    "SwapFetch",
    "SwapKept",
    "SwapNewState",
    "SwapOldState",
    "SwapPlanned",
    "SwapRollback",
    "SwapStep",
    "SwapStopOld",
    "TriageReport",
    "join_flags",
    "split_flags",
    "utc_now",
]

SCHEMA = 1
SEVERITIES: tuple[str, ...] = ("error", "warning", "info")
Severity = Literal["error", "warning", "info"]
# systemd fills it from the env file; the process launcher's start script from its env file
API_KEY_PLACEHOLDER = "${GPUOPS_API_KEY}"
# the server's flags whose value is a secret, and the env file's variable that holds it: the command line
# carries only the placeholder ``${NAME}``, which gpuops' launcher fills in inside the server
SECRET_FLAGS: dict[str, str] = {"--api-key": "GPUOPS_API_KEY", "--admin-api-key": "GPUOPS_ADMIN_API_KEY",
                                "--ssl-keyfile-password": "GPUOPS_SSL_KEYFILE_PASSWORD"}
_PLACEHOLDER = re.compile(r"\$\{(GPUOPS_[A-Z0-9_]+)\}")
# environment variables whose value is a secret (HF_TOKEN, OPENAI_API_KEY, an engine's *_API_KEY, …)
_SECRET_ENV = re.compile(r"[A-Za-z0-9_]*(?:API_KEY|TOKEN|SECRET|PASSWORD|PASSWD|ACCESS_KEY)|[A-Za-z0-9_]*SECRET[A-Za-z0-9_]*",
                         re.IGNORECASE)


def placeholder(name: str) -> str:
    """The command line's stand-in for the secret held in env file variable `name`."""
    return "${" + name + "}"


def is_secret_env(name: str) -> bool:
    """Whether an environment variable's value is a secret (kept in the 0600 env file only)."""
    return bool(_SECRET_ENV.fullmatch(name))

_CONTROL = re.compile(r"[\x00-\x1f\x7f]")
_ENV_NAME = re.compile(r"[A-Za-z_][A-Za-z0-9_]*")
_COMMAND = re.compile(r"[A-Za-z0-9._+-]+")  # a bare command name (found on the host's PATH)
_VERSION = re.compile(r"[0-9A-Za-z][0-9A-Za-z.+-]*")


class Invalid(ValueError):
    """A value that is not one of these types: one line, ``where: what``."""


def jsonable(value: Any) -> Any:
    """`value` as plain JSON data (lists, dicts, str, numbers, None): what its JSON decodes to."""
    return msgspec.json.decode(msgspec.json.encode(value))


# The last millisecond formatted and its text, and the last second's text: every log line's event
# takes its time here (default_factory), so the same millisecond costs a clock read and a compare,
# a new millisecond in the same second one small f-string.
_now_ms = -1
_now_text = ""
_now_sec = -1
_now_sec_text = ""


def utc_now() -> str:
    """RFC 3339 UTC with milliseconds (``2026-12-01T10:00:00.123Z``)."""
    global _now_ms, _now_text, _now_sec, _now_sec_text
    ms = int(time.time() * 1000)
    if ms != _now_ms:
        sec = ms // 1000
        if sec != _now_sec:
            _now_sec, _now_sec_text = sec, time.strftime("%Y-%m-%dT%H:%M:%S", time.gmtime(sec))
        _now_ms, _now_text = ms, f"{_now_sec_text}.{ms % 1000:03d}Z"
    return _now_text


# ------------------------------------------------------------------ argv as flags


def split_flags(argv: Sequence[str]) -> list[tuple[str, tuple[str, ...]]]:
    """`--a 1 --b --c x y` → [("--a", ("1",)), ("--b", ()), ("--c", ("x", "y"))]."""
    out: list[tuple[str, tuple[str, ...]]] = []
    for arg in argv:
        if arg.startswith("--") and len(arg) > 2:
            if "=" in arg:
                name, _, value = arg.partition("=")
                out.append((name, (value,)))
            else:
                out.append((arg, ()))
        elif out:
            name, values = out[-1]
            out[-1] = (name, values + (arg,))
    return out


def join_flags(flags: Sequence[tuple[str, Sequence[str]]]) -> list[str]:
    argv: list[str] = []
    for name, values in flags:
        argv.append(name)
        argv.extend(values)
    return argv


def flag_value(argv: Sequence[str], name: str) -> str | None:
    """The value of ``--name VALUE`` or ``--name=VALUE`` (the last one given), else None."""
    value = None
    for flag, values in split_flags(argv):
        if flag == name and values:
            value = values[0]
    return value


def is_loopback(addr: str) -> bool:
    return addr.startswith("127.") or addr in ("::1", "localhost")


def url_host(addr: str) -> str:
    """`addr` as the host of a URL or a HOST:PORT: an IPv6 address in brackets."""
    return f"[{addr}]" if ":" in addr else addr


def client_host(bind: str) -> str:
    """Where a client on a server's host reaches a server bound to `bind`: that address, the
    loopback for a wildcard bind (0.0.0.0, ::)."""
    return "127.0.0.1" if bind in ("0.0.0.0", "", "::") else bind


def _control_free(value: Any, where: str) -> None:
    """Every string inside `value` (nested lists, tuples, dicts and their keys) is free of
    control characters."""
    if isinstance(value, str):
        m = _CONTROL.search(value)
        if m:
            raise Invalid(f"{where}: contains a control character ({m.group()!r}) in {_show(value)}")
    elif isinstance(value, dict):
        for k, v in value.items():
            _control_free(k, where)
            _control_free(v, f"{where}.{k}")
    elif isinstance(value, (list, tuple)):
        for i, v in enumerate(value):
            _control_free(v, f"{where}[{i}]")


def _show(value: str, limit: int = 50) -> str:
    text = value if len(value) <= limit else value[: limit - 1] + "…"
    return repr(text)


# ------------------------------------------------------------------ findings


class Evidence(Struct, frozen=True, omit_defaults=True):
    """One piece of evidence: a log ``line`` or a ``reading`` (exactly one of them), and its
    ``source`` (``"log:123"`` for a log line number, ``"nvml"``, ``"/proc/driver/nvidia/version"``)."""

    source: str
    line: str | None = None
    reading: str | None = None


class Fix(Struct, frozen=True):
    """What to do. ``plan_patch`` (None when the fix is not a plan change) is what
    :func:`gpuops.core.diagnose.fixes.apply_patch` applies; ``applicable``: one key can do it."""

    summary: str
    applicable: bool = False
    plan_patch: dict[str, Any] | None = None


class Finding(Struct, frozen=True):
    """What triage says: a stable ``code``, a ``severity``, one sentence of cause, the evidence
    and a fix. ``data``: rule-specific numbers (e.g. ``silent_s``), grown freely."""

    code: str
    severity: Severity
    summary: str
    evidence: tuple[Evidence, ...] = ()
    fix: Fix | None = None
    data: dict[str, Any] = {}

    def to_json(self) -> dict[str, Any]:
        doc: dict[str, Any] = jsonable(self)
        return doc


class HostCheck(Struct, frozen=True):
    """One host check as reported: ``ok`` True (pass), False, None (could not check)."""

    name: str
    ok: bool | None
    detail: str


class FunctionalCheck(Struct, frozen=True):
    """One functional check of a server (tool calls, thinking, MTP): ``ok`` None: skipped."""

    name: str
    ok: bool | None
    reason: str
    details: dict[str, Any] = {}

    def to_json(self) -> dict[str, Any]:
        doc: dict[str, Any] = jsonable(self)
        return doc


class TriageReport(Struct, kw_only=True, omit_defaults=True):
    """Where a server log got to and why it stopped there (``gpuops triage``); for a deployment
    also its host checks, the ranks' py-spy stacks, whether it runs, and why its log could not be
    read (the checks run all the same)."""

    phase: str | None
    outcome: Literal["ready", "crashed", "incomplete"]
    findings: list[Finding]
    checks: list[HostCheck] | None = None
    stacks: list[dict[str, Any]] | None = None
    running: bool | None = None
    log_error: str | None = None

    def to_json(self) -> dict[str, Any]:
        return {"schema": SCHEMA, **jsonable(self)}


# ------------------------------------------------------------------ the plan


class ModelSummary(Struct, frozen=True):
    """What the plan says about its model (the facts that matter to a reader of the plan)."""

    id: str
    architecture: str | None = None
    params: int | None = None
    active_params: int | None = None
    checkpoint_bytes: int | None = None
    dtype: str | None = None
    quant: str | None = None
    moe: dict[str, Any] | None = None
    hybrid_linear_attention: bool = False
    mtp_layers: int = 0
    context_length: int | None = None


class Fit(Struct):
    """Memory per GPU at a TP: weights, state, KV cache; and whether that is worth starting."""

    weights_per_gpu_bytes: int
    kv_cache_per_gpu_bytes: int
    max_total_tokens: int
    fits: bool
    gpu_memory_bytes: int = 0
    mem_fraction_static: float = 0.0
    state_cache_per_gpu_bytes: int = 0
    kv_bytes_per_token_per_gpu: int = 0
    smallest_tp: int | None = None
    verdict: str = ""
    # what the engine keeps outside --mem-fraction-static at start-up (activations, CUDA graphs), as its
    # own heuristic sizes it for this server (0: the engine does not say), and its terms in words
    startup_reserve_bytes: int = 0
    startup_reserve_why: str = ""

    def to_json(self) -> dict[str, Any]:
        doc: dict[str, Any] = jsonable(self)
        return doc


class RuleFired(Struct):
    """A rule that put flags (or env) into the plan, or took them out, and why."""

    id: str
    why: str
    adds: list[str]
    removes: list[str] = []

    def to_json(self) -> dict[str, Any]:
        doc: dict[str, Any] = jsonable(self)
        return doc


class LikeChange(Struct, frozen=True):
    op: Literal["+", "-", "~"]
    text: str


class Like(Struct, frozen=True):
    """Where ``--like`` started from and what changed against it."""

    source: str
    diff: tuple[LikeChange, ...] = ()


class Member(Struct, frozen=True, kw_only=True):
    """One node of a multi-node deployment: where it runs, its node rank, its GPUs (node 0 is the
    plan's own host; its rendezvous is the plan's ``dist_init_addr``)."""

    host: str
    node_rank: int
    gpu_ids: tuple[int, ...]
    port: int = 0  # its --port (node R > 0 serves only the engine's health check there); 0: the plan's
    python: str | None = None
    launcher: str = DEFAULT_LAUNCHER  # a registered launcher's name (config.LAUNCHERS)
    env: dict[str, str] = {}  # this node's own additions (its NCCL interface)


def _check_member(m: Member) -> None:
    """One node of a multi-node plan: its host's name, its GPUs, its python, its env's names."""
    try:
        validate_host_name(m.host)
    except ValueError as exc:
        raise Invalid(f"members: {exc}") from None
    if any(g < 0 for g in m.gpu_ids) or len(set(m.gpu_ids)) != len(m.gpu_ids):
        raise Invalid(f"members: GPU indexes are distinct and not negative, not {m.gpu_ids}")
    if m.python is not None and not (m.python.startswith("/") or _COMMAND.fullmatch(m.python)):
        raise Invalid(f"members: python: an absolute path or a command name, not {_show(m.python)}")
    for key in m.env:
        if not _ENV_NAME.fullmatch(key):
            raise Invalid(f"members: env: {key!r} is not an environment variable name")


class Plan(Struct, kw_only=True):
    """A checked, explained launch of an engine's server on a host (the ``plan`` JSON contract, schema 1); with
    ``members``, one launch per node of a multi-node deployment (``member_plan(rank)``)."""

    name: str
    host: str | None = None
    model: ModelSummary
    tp: int
    gpu_ids: tuple[int, ...]
    port: int
    launcher: str  # a registered launcher's name (config.LAUNCHERS; core.deploy.launchers)
    # the engine's version; its JSON and store key keeps the first engine's name (the CLI contract: names
    # only grow), from that engine package's table (engines.plan_key)
    engine_version: str = field(name=engines.plan_key("engine_version"))
    env: dict[str, str] = {}
    argv: list[str]
    download_dir: str | None = None
    fit: Fit | None = None
    rules: list[RuleFired] = []
    warnings: list[str] = []
    model_path: str = ""
    reuse_existing: bool = False
    python: str | None = None  # the host's interpreter with the engine; None: planned offline, bound at deploy
    engine_version_source: str = field(default="host", name=engines.plan_key("engine_version_source"))  # (as above)
    flags_checked_against: str = ""
    unknown_flags: list[str] = []
    like: Like | None = None
    members: list[Member] = []  # a multi-node deployment's nodes, node 0 first; [] on one host
    dist_init_addr: str | None = None  # HOST:PORT of node 0's rendezvous (the engine's --dist-init-addr)
    member_of: str | None = None  # a node R > 0's own plan: the multi-node deployment it belongs to
    node_rank: int = 0
    # a replicated deployment: this plan is its router's (the engine's router in front of the replicas;
    # argv are the router's flags, it holds no GPUs); each replica is a one-host plan of its own
    replicas: list["Plan"] = []
    replica_of: str | None = None  # a replica's own plan: the replicated deployment it belongs to
    # the secrets --like carried from a previous deployment: variables set only in the deployment's 0600
    # env file (HF_TOKEN, …, and a secret flag's GPUOPS_API_KEY, …), their values never in a plan, the
    # store or a command line; read again where --like read them at deploy
    secret_env: list[str] = []
    engine: str = engines.DEFAULT  # what serves (core/engines): its module, phase grammar, rules
    # a router's plan: the package of the engine's router it runs (Engine.routers); None: chosen at deploy,
    # the first of them the host has (the stored plan then names it)
    router: str | None = None

    def __post_init__(self) -> None:
        self.check()

    def check(self) -> None:
        """Raise :class:`Invalid` unless every value is one gpuops can put in a shell, a unit or
        on a screen."""
        _control_free(msgspec.to_builtins(self), "plan")
        for launcher in (self.launcher, *(m.launcher for m in self.members)):
            if launcher not in LAUNCHERS:
                raise Invalid(f"launcher: expected {launcher_choices()}, got {launcher!r}")
        try:
            validate_host_name(self.name)
            if self.host is not None:
                validate_host_name(self.host)
        except ValueError as exc:
            raise Invalid(f"name: {exc}") from None
        self._check_env()
        if not 1 <= self.port <= 65535:
            raise Invalid(f"port: must be 1..65535, not {self.port}")
        if self.tp < 1:
            raise Invalid(f"tp: must be at least 1, not {self.tp}")
        if any(g < 0 for g in self.gpu_ids) or len(set(self.gpu_ids)) != len(self.gpu_ids):
            raise Invalid(f"gpu_ids: GPU indexes are distinct and not negative, not {self.gpu_ids}")
        if self.python is not None and not (self.python.startswith("/") or _COMMAND.fullmatch(self.python)):
            raise Invalid(f"python: an absolute path or a command name, not {_show(self.python)}")
        self._check_engine()
        if self.download_dir is not None and not self.download_dir.startswith("/"):
            raise Invalid(f"download_dir: must be an absolute path, not {_show(self.download_dir)}")
        if any(not a for a in self.argv):
            raise Invalid("argv: an empty argument")
        if self.members:
            self._check_members()
        if self.replicas:
            self._check_replicas()
        for field_name in ("replica_of", "member_of"):
            parent = getattr(self, field_name)
            if parent is not None:
                try:
                    validate_host_name(parent)
                except ValueError as exc:
                    raise Invalid(f"{field_name}: {exc}") from None

    def _check_engine(self) -> None:
        """The engine one gpuops knows, its version a version, a router's one of the engine's."""
        if self.engine not in engines.names():
            raise Invalid(f"engine: {_show(self.engine)} is not an engine gpuops knows ({', '.join(engines.names())})")
        if self.router is not None:
            known = [r.package for r in engines.get(self.engine).routers]
            if not self.replicas or self.router not in known:
                raise Invalid(f"router: {_show(self.router)} is not a router of {self.engine} in front of replicas "
                              f"({', '.join(known) or 'it has none'})")
        if not _VERSION.fullmatch(self.engine_version):
            raise Invalid(f"{engines.plan_key('engine_version')}: {_show(self.engine_version)} is not a version")

    def _check_env(self) -> None:
        for key in self.env:
            if not _ENV_NAME.fullmatch(key):
                raise Invalid(f"env: {key!r} is not an environment variable name ([A-Za-z_][A-Za-z0-9_]*)")
        for key in self.secret_env:
            if not _ENV_NAME.fullmatch(key):
                raise Invalid(f"secret_env: {key!r} is not an environment variable name ([A-Za-z_][A-Za-z0-9_]*)")
            if key in self.env:
                raise Invalid(f"secret_env: {key} is a secret: its value is never in the plan's env")

    def _check_members(self) -> None:
        n = len(self.members)
        if n < 2:
            raise Invalid("members: a multi-node plan has at least two nodes")
        if [m.node_rank for m in self.members] != list(range(n)):
            raise Invalid(f"members: node ranks must be 0..{n - 1} in order")
        if self.members[0].host != self.host or tuple(self.members[0].gpu_ids) != tuple(self.gpu_ids):
            raise Invalid("members: node 0 is the plan's own host and GPUs")
        if len({m.host for m in self.members}) != n:
            raise Invalid("members: each node on its own host")
        if self.tp % n or any(len(m.gpu_ids) != self.tp // n for m in self.members):
            raise Invalid(f"members: TP {self.tp} over {n} nodes is "
                          f"{gpus(self.tp // n) if not self.tp % n else '? GPUs'} on each")
        for m in self.members:
            _check_member(m)
        if any(not (0 <= m.port <= 65535) for m in self.members):
            raise Invalid("members: port: must be 1..65535 (0: the plan's)")
        if not self.dist_init_addr or flag_value(self.argv, "--dist-init-addr") != self.dist_init_addr:
            raise Invalid("dist_init_addr: a multi-node plan names node 0's rendezvous, as its --dist-init-addr")

    def _check_replicas(self) -> None:
        if len(self.replicas) < 2:
            raise Invalid("replicas: a replicated deployment has at least two")
        if self.members or self.gpu_ids:
            raise Invalid("replicas: the router's plan holds no GPUs and no nodes (each replica has its own)")
        names = [r.name for r in self.replicas]
        if names != [replica_name(self.name, i) for i in range(1, len(names) + 1)]:
            raise Invalid(f"replicas: named {self.name}-r1..{self.name}-r{len(names)} in order, not {', '.join(names)}")
        for r in self.replicas:
            if r.replica_of != self.name or r.replicas or r.members:
                raise Invalid(f"replicas: {r.name} is a one-host replica of {self.name}")
            if r.host is None:
                raise Invalid(f"replicas: {r.name} names its host")
        places = [(r.host, r.port) for r in self.replicas] + [(self.host, self.port)]
        if len(set(places)) != len(places):
            raise Invalid("replicas: every replica (and the router) has a port of its own on its host")
        urls = self.worker_urls
        if len(urls) != len(self.replicas) or not all(_WORKER_URL.fullmatch(u) for u in urls):
            raise Invalid("argv: the router's --worker-urls lists every replica, each http://HOST:PORT")

    @property
    def worker_urls(self) -> list[str]:
        """A router plan's --worker-urls, in replica order."""
        if "--worker-urls" not in self.argv:
            return []
        rest = self.argv[self.argv.index("--worker-urls") + 1:]
        return list(itertools.takewhile(lambda a: not a.startswith("--"), rest))

    @property
    def replica_names(self) -> list[str]:
        """The stored deployments of a replicated deployment's replicas (this one is its router)."""
        return [r.name for r in self.replicas]

    @property
    def part_names(self) -> list[str]:
        """The other stored deployments this one starts, stops and forgets with it: a multi-node
        deployment's nodes 1.., a replicated one's replicas."""
        return self.member_names + self.replica_names

    @property
    def nnodes(self) -> int:
        return len(self.members) or 1

    def member_plan(self, rank: int) -> "Plan":
        """Node `rank`'s own launch: its host, GPUs, python and launcher, `--node-rank RANK`, and a
        name of its own beyond node 0 (NAME-nR: two nodes may share a machine, their units must not)."""
        if rank == 0:
            return self
        m = self.members[rank]
        shared = {k: v for k, v in self.env.items() if k not in self.members[0].env}  # node 0's own ones out
        argv = list(self.argv)
        argv[argv.index("--node-rank") + 1] = str(rank)
        port = m.port or self.port
        if "--port" in argv:
            argv[argv.index("--port") + 1] = str(port)
        return msgspec.structs.replace(
            self, name=member_name(self.name, rank), host=m.host, gpu_ids=tuple(m.gpu_ids), port=port,
            python=m.python, launcher=m.launcher, env={**shared, **m.env}, argv=argv, members=[],
            dist_init_addr=None, member_of=self.name, node_rank=rank)

    @property
    def member_names(self) -> list[str]:
        """The stored deployments of nodes 1.. of a multi-node deployment (node 0 is this one)."""
        return [member_name(self.name, m.node_rank) for m in self.members[1:]]

    # -------------------------------------------------------------- derived facts

    @property
    def bind_host(self) -> str:
        """The address the server binds (its ``--host``)."""
        return flag_value(self.argv, "--host") or "127.0.0.1"

    @property
    def client_host(self) -> str:
        """Where a client on the server's host reaches it."""
        return client_host(self.bind_host)

    @property
    def endpoint(self) -> str:
        return f"http://{url_host(self.bind_host)}:{self.port}"

    @property
    def served_name(self) -> str:
        """The model name clients ask for."""
        if self.replicas:  # the router passes the replicas' own name through
            return self.replicas[0].served_name
        return flag_value(self.argv, "--served-model-name") or self.model.id or "default"

    @property
    def uses_api_key(self) -> bool:
        return any(API_KEY_PLACEHOLDER in a for a in self.argv)

    @property
    def speculative(self) -> bool:
        """Whether the server runs a draft model (speculative decoding: MTP, EAGLE, …): its start-up
        has a draft phase."""
        return flag_value(self.argv, "--speculative-algorithm") is not None

    @property
    def secret_placeholders(self) -> list[str]:
        """The env file's variables the command line stands in for (``${GPUOPS_…}``), in order."""
        return list(dict.fromkeys(m[1] for a in self.argv if (m := _PLACEHOLDER.fullmatch(a))))

    @property
    def literal_secrets(self) -> list[str]:
        """The secret flags whose value the argv holds itself, not as ``${GPUOPS_…}`` (a plan written
        by hand, or stored by a gpuops before --like took secrets out): never deployed so."""
        found = []
        for i, arg in enumerate(self.argv):
            name = arg.partition("=")[0]
            var = SECRET_FLAGS.get(name)
            if var is None:
                continue
            value = arg.partition("=")[2] if "=" in arg else (self.argv[i + 1] if i + 1 < len(self.argv) else "")
            if value and value != placeholder(var) and not value.startswith("--"):
                found.append(name)
        return found

    @property
    def secret_names(self) -> list[str]:
        """Every secret the deployment's env file holds: the placeholders' and `secret_env`."""
        return list(dict.fromkeys([*self.secret_placeholders, *self.secret_env]))

    def exec_argv(self, launch_script: str | None = None) -> list[str]:
        """The server's command line. With an API key (or another secret flag) it runs through gpuops'
        launcher (`launch_script`, the systemd launcher's by default), which fills the secrets in from
        the environment inside the process and masks them in the output: no command line holds one."""
        head = [self.python or "python3"]
        if self.secret_placeholders:
            head.append(launch_script or self.launch_script)
        return [*head, "-m", self.module, *self.argv]

    @property
    def module(self) -> str:
        """What the command line runs: the engine's server, or for replicas the router in front of them."""
        engine = engines.get(self.engine)
        return engine.router(self.router).module if self.replicas else engine.server_module()

    @property
    def launch_script(self) -> str:
        """The systemd launcher's copy of gpuops' launcher (beside the env file; no secrets in it)."""
        return f"/etc/gpuops/{self.name}.launch.py"

    @property
    def unit_name(self) -> str:
        return f"gpuops-{self.name}.service"

    @property
    def env_file(self) -> str:
        """The systemd launcher's env file (mode 0600)."""
        return f"/etc/gpuops/{self.name}.env"

    def unit_text(self) -> str:
        """The systemd unit, rendered from this (validated) plan."""
        exec_start = " \\\n    ".join(" ".join(systemd_quote(a) for a in chunk) for chunk in _chunks(self.exec_argv(), self.module))
        return (
            "[Unit]\n"
            f"Description=gpuops: {self.model.id} ({self.name})\n"
            "After=network-online.target\n"
            "Wants=network-online.target\n\n"
            "[Service]\n"
            "Type=simple\n"
            f"EnvironmentFile={self.env_file}\n"
            f"ExecStart={exec_start}\n"
            "Restart=no\n"
            "KillMode=control-group\n"
            "TimeoutStopSec=60\n"
            "LimitNOFILE=1048576\n"
            "StandardOutput=journal\n"
            "StandardError=journal\n\n"
            "[Install]\n"
            "WantedBy=multi-user.target\n"
        )

    def env_file_text(self) -> str:
        """The env file as it will be written (mode 0600), secrets only as placeholders."""
        lines = [f"# gpuops: environment of {self.unit_name} (mode 0600)"]
        lines += [f"{k}={_env_quote(v)}" for k, v in sorted(self.env.items())]
        source = self.like.source if self.like is not None else None
        for name in self.secret_names:
            if name == "GPUOPS_API_KEY":
                where = f"kept from {source} or " if source else ""
                lines.append(f"{name}=<{where}generated at deploy, never shown>")
            else:
                lines.append(f"{name}=<kept from {source or 'the env file'} at deploy, never shown>")
        if "HF_TOKEN" not in self.secret_env:
            lines.append("# HF_TOKEN=<passed from your environment at download time, if set>")
        return "\n".join(lines) + "\n"

    # -------------------------------------------------------------- JSON

    def to_json(self) -> dict[str, Any]:
        """The plan document: ``schema``, the fields, and the unit rendered from them."""
        doc: dict[str, Any] = {"schema": SCHEMA}
        for key, value in jsonable(self).items():
            doc[key] = value
            if key == "rules":
                doc["unit"] = ({"name": self.unit_name, "text": self.unit_text(), "env_file": self.env_file}
                               if self.launcher == "systemd" else None)
        return doc

    @classmethod
    def from_json(cls, doc: Any, source: str = "plan") -> "Plan":
        """A plan document decoded and validated (its ``unit`` is derived, never read)."""
        if not isinstance(doc, dict):
            raise Invalid(f"{source}: a plan is a JSON object")
        schema = doc.get("schema", SCHEMA)
        if schema != SCHEMA:
            raise Invalid(f"{source}: plan schema {schema!r}; this gpuops reads schema {SCHEMA}")
        body = {k: v for k, v in doc.items() if k not in ("schema", "unit")}
        plan: Plan = convert(body, cls, source)
        return plan

    def replace(self, **changes: Any) -> "Plan":
        """A copy with `changes`, validated."""
        new = msgspec.structs.replace(self, **changes)
        new.check()
        return new


_WORKER_URL = re.compile(r"http://(\[[0-9A-Fa-f:.]+\]|[A-Za-z0-9.-]+):\d{1,5}")


def replica_name(name: str, index: int) -> str:
    """The stored deployment of replica `index` (1..K) of replicated deployment `name`."""
    return f"{name}-r{index}"


def member_name(name: str, rank: int) -> str:
    """The stored deployment of node `rank` of multi-node deployment `name` (node 0: `name`)."""
    return name if rank == 0 else f"{name}-n{rank}"


def convert(data: Any, type_: Any, source: str) -> Any:
    """`data` (builtins) as `type_`, or :class:`Invalid` with one line."""
    try:
        return msgspec.convert(data, type_)
    except msgspec.ValidationError as exc:
        raise Invalid(f"{source}: {_one_line(str(exc))}") from None


def gpus(n: int) -> str:
    """"1 GPU", "4 GPUs"."""
    return f"{n} GPU" if n == 1 else f"{n} GPUs"


def _one_line(text: str) -> str:
    return " ".join(text.split())


def systemd_quote(arg: str) -> str:
    """One ExecStart word: systemd's own quoting; `%` specifiers and `$` expansion escaped (the
    API-key placeholder too: the launcher fills it in, systemd must not)."""
    escaped = arg.replace("%", "%%").replace("$", "$$")
    if re.fullmatch(r"[A-Za-z0-9_./:,=+@%$-]+", escaped):
        return escaped
    return '"' + escaped.replace("\\", "\\\\").replace('"', '\\"') + '"'


def _env_quote(value: str) -> str:
    return value if re.fullmatch(r"[A-Za-z0-9_./:,=+@-]*", value) else '"' + value.replace("\\", "\\\\").replace('"', '\\"') + '"'


def _chunks(argv: list[str], module: str) -> list[list[str]]:
    """The python [launcher] -m part, then one flag with its values per line."""
    head = argv.index(module) + 1
    out = [argv[:head]]
    for name, values in split_flags(argv[head:]):
        out.append([name, *values])
    return out


# ------------------------------------------------------------------ deployments


class Deployment(Struct, kw_only=True):
    """A stored deployment: its plan, its state and its current run (each start of the name is a
    new run; the events of every run are kept). ``cursor``/``log_offset``: where reading its log
    stopped (the watch resumes there); ``run_cursor``/``run_offset``: where the run's log begins."""

    name: str
    host: str
    model: str
    launcher: str
    plan: Plan
    state: str
    run: int = 1
    created_at: str
    updated_at: str
    cursor: str | None = None
    log_offset: int | None = None
    run_cursor: str | None = None
    run_offset: int | None = None
    watch_pid: int | None = None
    watch_beat: str | None = None

    def to_json(self) -> dict[str, Any]:
        return {"name": self.name, "host": self.host, "model": self.model, "launcher": self.launcher,
                "state": self.state, "run": self.run, "created_at": self.created_at,
                "updated_at": self.updated_at, "port": self.plan.port, "tp": self.plan.tp,
                "gpu_ids": list(self.plan.gpu_ids), "endpoint": self.plan.endpoint,
                # a router's: the router it runs (its package; null until a deploy chose it)
                **({"router": self.plan.router} if self.plan.replicas else {})}


# ------------------------------------------------------------------ events


class _Tagged(Struct, kw_only=True, tag_field="event", omit_defaults=True, frozen=True):
    """The tag (``"event": KIND``) every event carries."""


class StateEvent(_Tagged, tag="state", frozen=True):
    """The deployment entered ``state``; the other fields say what came with it."""

    state: str
    phase: str | None = None
    reason: str | None = None
    detail: str | None = None
    line: str | None = None
    name: str | None = None
    host: str | None = None
    model: str | None = None
    into: str | None = None
    launcher: str | None = None
    endpoint: str | None = None
    quick_check: dict[str, Any] | None = None
    silent_s: float | None = None
    summary: str | None = None
    ts: str = field(default_factory=utc_now)
    run: int = 0
    deployment: str | None = None


class PhaseEvent(_Tagged, tag="phase", frozen=True):
    phase: str
    line: str | None = None
    log_ts: str | None = None  # the server's own timestamp on that line
    ts: str = field(default_factory=utc_now)
    run: int = 0
    deployment: str | None = None


class ProgressEvent(_Tagged, tag="progress", frozen=True):
    phase: str
    done: int
    total: int | None = None
    what: str | None = None
    rate_bps: int | None = None
    eta_s: float | None = None
    ts: str = field(default_factory=utc_now)
    run: int = 0
    deployment: str | None = None


class NumbersEvent(_Tagged, tag="numbers", frozen=True):
    """Numbers the log reported since the last such event (kv_tokens, avail_mem_gb, …)."""

    values: dict[str, float]
    ts: str = field(default_factory=utc_now)
    run: int = 0
    deployment: str | None = None


class LogEvent(_Tagged, tag="log", frozen=True, gc=False):
    """A line of the server's log (never stored: the log lives on the host). One a line, kept by the
    thousand in a watch's ring: of text and numbers only, so never in a reference cycle, and the
    garbage collector need not track each one (tests hold its fields to such types)."""

    line: str
    log_ts: float | None = None  # the journal's time of the line (seconds), when it has one
    ts: str = field(default_factory=utc_now)
    run: int = 0
    deployment: str | None = None


class FindingEvent(Finding, _Tagged, tag="finding", kw_only=True, omit_defaults=False, frozen=True):
    """A finding, flattened into the event (``code``, ``severity``, ``summary``, …)."""

    ts: str = field(default_factory=utc_now)
    run: int = 0
    deployment: str | None = None

    @classmethod
    def of(cls, finding: Finding, **extra: Any) -> "FindingEvent":
        return cls(finding.code, finding.severity, finding.summary, finding.evidence, finding.fix,
                   finding.data, **extra)

    def finding(self) -> Finding:
        return Finding(self.code, self.severity, self.summary, self.evidence, self.fix, self.data)


class ChecksEvent(_Tagged, tag="checks", frozen=True):
    """The host checks of a triage: each one's pass, fail or could-not-check."""

    checks: list[HostCheck]
    ts: str = field(default_factory=utc_now)
    run: int = 0
    deployment: str | None = None


class PlanEvent(_Tagged, tag="plan", frozen=True):
    """The deployment's plan was replaced (a fix applied): which finding, and the diff."""

    code: str | None = None
    summary: str | None = None
    diff: list[tuple[str, str]] = []
    ts: str = field(default_factory=utc_now)
    run: int = 0
    deployment: str | None = None


Event = Union[StateEvent, PhaseEvent, ProgressEvent, NumbersEvent, LogEvent, FindingEvent, ChecksEvent, PlanEvent]
EVENT_KINDS: tuple[str, ...] = ("state", "phase", "progress", "numbers", "log", "finding", "checks", "plan")


def event_kind(event: Event) -> str:
    return type(event).__struct_config__.tag  # type: ignore[return-value]


def event_json(event: Event) -> dict[str, Any]:
    return jsonable(event)  # type: ignore[no-any-return]


# ------------------------------------------------------------------ benchmark runs


class BenchRun(Struct, kw_only=True):
    """A benchmark run: the engine's own records (its serving benchmark's JSONL, in order) with what
    compare needs (model, engine version, GPUs, plan), its functional checks and quality score."""

    id: int
    source: Literal["gpuops", "import"]
    deployment: str | None = None
    host: str | None = None
    url: str | None = None
    model: str | None = None
    # the engine's version (its JSON key kept: engines.plan_key)
    engine_version: str | None = field(default=None, name=engines.plan_key("engine_version"))
    gpus: dict[str, Any] | None = None
    plan: Plan | None = None  # the plan as it was (runs outlive their deployments)
    profile: str
    settings: dict[str, Any]
    status: Literal["running", "ok", "failed", "cancelled"]
    error: str | None = None
    records: list[dict[str, Any]] = []
    quality: dict[str, Any] | None = None
    remote_dir: str | None = None
    created_at: str
    started_at: str | None = None
    finished_at: str | None = None
    checks: list[FunctionalCheck] | None = None

    LISTED: ClassVar[tuple[str, ...]] = ("plan", "records")

    def to_json(self, full: bool = True) -> dict[str, Any]:
        """The run as JSON; ``full=False`` leaves out the plan and the records (listings)."""
        doc: dict[str, Any] = jsonable(self)
        if not full:
            for key in self.LISTED:
                doc.pop(key, None)
        return doc


# ------------------------------------------------------------------ benchmark events


class _BenchTagged(Struct, kw_only=True, tag_field="event", frozen=True):
    """A benchmark run's event (``"event": KIND``), as :class:`~gpuops.core.bench.runner.BenchRunner`
    emits it. A field left ``UNSET`` is not in the JSON: each kind says only what it said before."""

    run: int | None = None
    ts: str = field(default_factory=utc_now)

    @property
    def kind(self) -> str:
        return type(self).__struct_config__.tag  # type: ignore[return-value]

    def to_json(self) -> dict[str, Any]:
        """``{"schema": 1, "ts": …, "event": KIND, "run": …, …}``: the document ``bench --json`` prints."""
        doc: dict[str, Any] = msgspec.to_builtins(self)  # (the tag, this kind's fields, then run and ts)
        return {"schema": SCHEMA, "ts": doc.pop("ts"), "event": doc.pop("event"), "run": doc.pop("run"), **doc}


class BenchStateEvent(_BenchTagged, tag="state", frozen=True):
    """The run is ``running`` (with what it runs: profile, target, module) or ended (ok, failed,
    cancelled; ``error`` says why)."""

    state: str
    profile: dict[str, Any] | msgspec.UnsetType = msgspec.UNSET
    deployment: str | None | msgspec.UnsetType = msgspec.UNSET
    host: str | msgspec.UnsetType = msgspec.UNSET
    url: str | msgspec.UnsetType = msgspec.UNSET
    engine_version: str | msgspec.UnsetType = field(default=msgspec.UNSET, name=engines.plan_key("engine_version"))
    module: str | msgspec.UnsetType = msgspec.UNSET
    error: str | None | msgspec.UnsetType = msgspec.UNSET


class BenchStepEvent(_BenchTagged, tag="step", frozen=True):
    """A step begins: a serving run at one concurrency (``num_prompts``), or the eval (``num_examples``)."""

    step: int
    steps: int
    max_concurrency: int | None
    num_prompts: int | msgspec.UnsetType = msgspec.UNSET
    num_examples: int | msgspec.UnsetType = msgspec.UNSET

    @property
    def is_eval(self) -> bool:
        """The eval's step (its examples), not a serving run's (its requests)."""
        return not isinstance(self.num_examples, msgspec.UnsetType)


class BenchProgressEvent(_BenchTagged, tag="progress", frozen=True):
    step: int
    steps: int
    done: int
    total: int
    elapsed_s: float


class BenchLogEvent(_BenchTagged, tag="log", frozen=True):
    step: int
    line: str


class BenchResultEvent(_BenchTagged, tag="result", frozen=True):
    """One record of a serving step, summarised (``bench.runner.summary``)."""

    step: int
    summary: dict[str, Any]


class BenchQualityEvent(_BenchTagged, tag="quality", frozen=True):
    eval: str
    score: float
    num_examples: int
    latency_s: float | None
    output_throughput: float | None


class BenchChecksEvent(_BenchTagged, tag="checks", frozen=True):
    """The functional checks' results (each ``FunctionalCheck.to_json()``)."""

    checks: list[dict[str, Any]]


BenchEvent = Union[BenchStateEvent, BenchStepEvent, BenchProgressEvent, BenchLogEvent, BenchResultEvent,
                   BenchQualityEvent, BenchChecksEvent]
BENCH_EVENT_KINDS: tuple[str, ...] = ("state", "step", "progress", "log", "result", "quality", "checks")


# ------------------------------------------------------------------ swap steps


class _SwapTagged(Struct, kw_only=True, tag_field="step", frozen=True):
    """A step of ``Ops.swap`` (``"step": NAME``). A field left ``UNSET`` is not in the JSON."""

    @property
    def name(self) -> str:
        return type(self).__struct_config__.tag  # type: ignore[return-value]

    def to_json(self) -> dict[str, Any]:
        """``{"step": NAME, …}``: ``gpuops swap --json`` prints it after ``"event": "swap"``."""
        return msgspec.to_builtins(self)  # type: ignore[no-any-return]


class SwapPlanned(_SwapTagged, tag="plan", frozen=True):
    old: str
    new: str
    model: str
    diff: list[str]


class SwapFetch(_SwapTagged, tag="fetch-new", frozen=True):
    """The new weights: being fetched (no ``status``), fetched (``status`` "ok", with what it
    took) or not (``status`` says how it ended)."""

    old: str
    new: str
    model: str | msgspec.UnsetType = msgspec.UNSET
    status: str | msgspec.UnsetType = msgspec.UNSET
    present: bool | msgspec.UnsetType = msgspec.UNSET
    bytes: int | msgspec.UnsetType = msgspec.UNSET
    seconds: float | msgspec.UnsetType = msgspec.UNSET


class SwapBenchOld(_SwapTagged, tag="bench-old", frozen=True):
    """The old one's benchmark: skipped, a run reused, a run begun (``run`` None, ``reused``
    False) or ended (``status``)."""

    old: str | msgspec.UnsetType = msgspec.UNSET
    run: int | None = None
    reused: bool | msgspec.UnsetType = msgspec.UNSET
    status: str | msgspec.UnsetType = msgspec.UNSET
    skipped: bool | msgspec.UnsetType = msgspec.UNSET


class SwapStopOld(_SwapTagged, tag="stop-old", frozen=True):
    old: str


class SwapDeployNew(_SwapTagged, tag="deploy-new", frozen=True):
    new: str


class SwapNewState(_SwapTagged, tag="new-", frozen=True):
    """The new one's start ended in ``state`` (``"step": "new-" + state``; the outage when ready)."""

    state: str
    new: str
    outage_s: float | msgspec.UnsetType = msgspec.UNSET

    @property
    def name(self) -> str:
        return "new-" + self.state

    def to_json(self) -> dict[str, Any]:
        doc = msgspec.to_builtins(self)
        return {"step": self.name, **{k: v for k, v in doc.items() if k not in ("step", "state")}}


class SwapRollback(_SwapTagged, tag="rollback", frozen=True):
    old: str
    why: str


class SwapOldState(_SwapTagged, tag="old-", frozen=True):
    """The rollback's restart of the old one ended in ``state`` (``"step": "old-" + state``), the
    whole outage when ready (None: it goes on)."""

    state: str
    old: str
    outage_s: float | None

    @property
    def name(self) -> str:
        return "old-" + self.state

    def to_json(self) -> dict[str, Any]:
        doc = msgspec.to_builtins(self)
        return {"step": self.name, **{k: v for k, v in doc.items() if k not in ("step", "state")}}


class SwapBenchNew(_SwapTagged, tag="bench-new", frozen=True):
    new: str | msgspec.UnsetType = msgspec.UNSET
    run: int | None = None
    status: str | msgspec.UnsetType = msgspec.UNSET
    skipped: bool | msgspec.UnsetType = msgspec.UNSET


class SwapCompare(_SwapTagged, tag="compare", frozen=True):
    before: int
    after: int
    compare: dict[str, Any]


class SwapKept(_SwapTagged, tag="kept", frozen=True):
    new: str
    outage_s: float


SwapStep = Union[SwapPlanned, SwapFetch, SwapBenchOld, SwapStopOld, SwapDeployNew, SwapNewState, SwapRollback,
                 SwapOldState, SwapBenchNew, SwapCompare, SwapKept]
