"""From a model and a host to a checked, explained SGLang deployment plan.

Every flag in a plan comes from a rule of :mod:`gpuops.core.planning.flag_rules`; the finished argv
is checked against the target version's flag set (or the host's own ``--help``). ``--like``
(:mod:`gpuops.core.planning.like`) starts from a previous deployment's flags. The result is the
typed :class:`gpuops.core.domain.Plan`.
"""

from __future__ import annotations

import re
from ipaddress import ip_address
from dataclasses import dataclass, field, replace
from typing import Iterable, Sequence

from ..config import validate_abs_path, validate_host_name
from ..domain import Invalid, Like, LikeChange, ModelSummary, Plan, RuleFired, flag_value, is_loopback, join_flags
from . import PlanError
from . import sglang_versions as sv
from .fit import compute_fit, tp_choices
from .flag_rules import RULES, Ctx
from .like import Previous, apply_like
from .model_facts import ModelFacts

GIB = 1024**3
DEFAULT_PORT = 30000  # the server port when none is asked for; the next free one when the host uses it
DEFAULT_MEM_FRACTION = 0.8
DOWNLOAD_HEADROOM = 1.1


# ------------------------------------------------------------------ inputs


@dataclass(frozen=True)
class GpuInfo:
    index: int
    memory_total: int
    memory_used: int = 0
    processes: int = 0
    name: str | None = None


@dataclass(frozen=True)
class Target:
    """What the plan is for: a host's GPUs, disks and SGLang, or offline figures."""

    host: str | None
    gpus: tuple[GpuInfo, ...]
    sglang_version: str | None  # the host's installed version; None: not installed / unknown
    help_flags: frozenset[str] | None = None  # the host's `launch_server --help`, when it ran
    python: str | None = None  # the interpreter with SGLang on the host; None: offline, bound at deploy
    model_dirs: tuple[str, ...] = ()
    forbidden_paths: tuple[str, ...] = ()
    free_bytes: dict[str, int] = field(default_factory=dict)  # model dir -> free bytes there
    existing: dict[str, str] = field(default_factory=dict)  # model id -> path of a complete copy
    serve_host: str = "127.0.0.1"
    launcher: str = "systemd"
    allowed_gpu_ids: tuple[int, ...] | None = None  # the host policy's gpu_ids
    # TCP ports listening on the host, each with who holds it ("pid 123 (user: command)"; "" unknown)
    ports_taken: dict[int, str] = field(default_factory=dict)
    sglang_asked: bool = True  # False: the host could not be asked which SGLang it has
    # (name, port, state) of the host's stored deployments that may serve: their ports are taken too
    deployment_ports: tuple[tuple[str, int, str], ...] = ()


@dataclass(frozen=True)
class Wishes:
    tp: int | None = None
    gpu_ids: tuple[int, ...] | None = None
    mtp: bool = True
    download_dir: str | None = None
    port: int | None = None  # --port: never moved; None: DEFAULT_PORT, or the next free one on the host
    name: str | None = None
    mem_fraction_static: float = DEFAULT_MEM_FRACTION
    served_name: str | None = None  # the model name clients ask for (None: from the model; --like keeps the old)
    sglang_version: str | None = None  # --sglang-version: overrides what the host says
    like: "Previous | None" = None


# a stored deployment in one of these states has no server and will start none: its port is free again
PORT_RELEASED_STATES = ("stopped", "crashed")


def with_deployment_ports(target: Target, deployments: Iterable[tuple[str, str, str, int]]) -> Target:
    """`target` with the ports of the host's stored deployments: (name, host, state, port) for each
    deployment; those on `target.host` that may be serving (not stopped or crashed) count, a planned or
    downloading one too (its server starts on that port soon)."""
    held = tuple((name, port, state) for name, host, state, port in deployments
                 if host == target.host and state not in PORT_RELEASED_STATES)
    return replace(target, deployment_ports=held)


def ports_taken(target: Target, name: str) -> dict[int, str]:
    """{port: who holds it} on the target's host for a deployment named `name`: what listens there
    and the ports of its other deployments (a new run of `name` takes over its own)."""
    taken = dict(target.ports_taken)
    for other, port, state in target.deployment_ports:
        if other != name:
            held = f"deployment {other} ({state})"
            taken[port] = f"{taken[port]}; {held}" if taken.get(port) else held
    return taken


def _choose_port(target: Target, wishes: Wishes, name: str, warnings: list[str]) -> int:
    """The server port: --port as given, never moved (a warning when it is taken), else DEFAULT_PORT,
    or when that is taken the next port above it that is not (said in a warning)."""
    where = target.host or "the host"
    taken = ports_taken(target, name)
    if wishes.port is not None:
        if not 1 <= wishes.port <= 65535:
            raise PlanError(f"--port must be 1..65535, got {wishes.port}")
        if wishes.port in taken:
            holder = taken[wishes.port]
            warnings.append(f"port {wishes.port} is in use on {where}" + (f" ({holder})" if holder else "")
                            + "; choose another --port")
        return wishes.port
    if DEFAULT_PORT not in taken:
        return DEFAULT_PORT
    port = next((p for p in range(DEFAULT_PORT + 1, 65536) if p not in taken), None)
    if port is None:
        raise PlanError(f"port {DEFAULT_PORT} and every port above it are in use on {where}: give --port")
    holder = taken[DEFAULT_PORT]
    warnings.append(f"port {DEFAULT_PORT} is in use on {where}" + (f" ({holder})" if holder else "")
                    + f"; using {port}")
    return port


def default_name(model_id: str) -> str:
    base = model_id.rstrip("/").split("/")[-1].lower()
    base = re.sub(r"[^a-z0-9._-]+", "-", base).strip("-._") or "model"
    return base[:48]


def _choose_download_dir(facts: ModelFacts, target: Target, wishes: Wishes, warnings: list[str]) -> tuple[str | None, str, bool]:
    """(download_dir, model_path, reuse_existing)."""
    repo_like = "/" in facts.id and not facts.id.startswith("/")
    if facts.source == "local" and not repo_like:
        present = facts.weights_present_bytes
        if present == 0:
            warnings.append(f"{facts.id} holds no weights (no *.safetensors beside its config.json): the server "
                            "would stop at weights; put the checkpoint there first")
        elif present is not None and facts.checkpoint_bytes_source == "index" and present < 0.99 * facts.checkpoint_bytes:
            warnings.append(f"{facts.id} holds {present / 1e9:.1f} of its index's {facts.checkpoint_bytes / 1e9:.1f} GB "
                            "of weights: the copy is incomplete")
        return None, facts.id, True
    existing = target.existing.get(facts.id)
    if existing and not wishes.download_dir:
        return None, existing, True
    need = int(facts.checkpoint_bytes * DOWNLOAD_HEADROOM)
    if wishes.download_dir:
        d = validate_abs_path(wishes.download_dir, "--download-dir")
        bad = under_any(d, target.forbidden_paths)
        if bad:
            raise PlanError(f"--download-dir {d} is under forbidden path {bad} (host policy forbidden_paths): "
                            "refusing to put a model there")
        free = target.free_bytes.get(d)
        if free is not None and free < need:
            warnings.append(f"--download-dir {d} has {free / GIB:.0f} GiB free, the model needs {need / GIB:.0f} GiB "
                            "(1.1x its size)")
        if target.model_dirs and not under_any(d, target.model_dirs):
            warnings.append(f"--download-dir {d} is not one of the host's model_dirs")
        return d, f"{d.rstrip('/')}/{facts.id}", False
    for d in target.model_dirs:
        if under_any(d, target.forbidden_paths):
            continue  # config validation already refuses these; never choose one anyway
        free = target.free_bytes.get(d)
        if free is None or free >= need:
            return d, f"{d.rstrip('/')}/{facts.id}", False
    if target.model_dirs:
        frees = ", ".join(f"{d} {target.free_bytes.get(d, 0) / GIB:.0f} GiB" for d in target.model_dirs)
        warnings.append(f"no model dir has {need / GIB:.0f} GiB free (1.1x the checkpoint): {frees}")
    elif target.host is not None:
        warnings.append(f"{target.host} lists no model_dirs: the download goes to its HF cache")
    return None, facts.id, False


def under_any(path: str, roots: Sequence[str]) -> str | None:
    for root in roots:
        r = root.rstrip("/") or "/"
        if path == r or path.startswith(r.rstrip("/") + "/"):
            return root
    return None


def _pick_gpus(target: Target, wishes: Wishes, tp: int | None, warnings: list[str]) -> tuple[int, tuple[int, ...]]:
    allowed = [g.index for g in target.gpus]
    if target.allowed_gpu_ids is not None:
        allowed = [i for i in allowed if i in target.allowed_gpu_ids] if target.gpus else list(target.allowed_gpu_ids)
    if not allowed:
        raise PlanError("no GPUs to plan for: give --host (its GPUs are read) or --gpus N --gpu-memory GIB")
    if wishes.gpu_ids is not None:
        ids = wishes.gpu_ids
        outside = [i for i in ids if i not in allowed]
        if outside:
            raise PlanError(f"--gpu-ids {','.join(map(str, outside))}: not among this host's GPUs for gpuops "
                            f"({','.join(map(str, allowed))})")
        if len(set(ids)) != len(ids):
            raise PlanError("--gpu-ids lists a GPU twice")
        if tp is not None and tp != len(ids):
            raise PlanError(f"--tp {tp} but --gpu-ids names {len(ids)} GPU(s): they must match")
        return len(ids), tuple(ids)
    busy = {g.index for g in target.gpus if g.processes > 0}
    free_first = [i for i in allowed if i not in busy] + [i for i in allowed if i in busy]
    want = tp if tp is not None else None
    if want is None:
        return 0, tuple(free_first)  # decided after the fit
    if want > len(allowed):
        raise PlanError(f"--tp {want} needs {want} GPUs; this host has {len(allowed)} for gpuops")
    chosen = tuple(sorted(free_first[:want]))
    taken = [i for i in chosen if i in busy]
    if taken:
        warnings.append(f"GPU(s) {','.join(map(str, taken))} already run processes: deploy will list them and ask")
    return want, chosen


def _keep_from_like(target: Target, wishes: Wishes, warnings: list[str]) -> tuple[Target, Wishes, list[str]]:
    """What `--like` keeps so that the old deployment's clients keep working: its port (unless
    --port), its bind address (where the host's serve_host allows it; else a warning that says how
    to keep it), its static memory fraction (unless given). Returns notes for the rule list."""
    prev = wishes.like
    assert prev is not None
    argv = list(prev.argv)
    notes: list[str] = []
    port = flag_value(argv, "--port")
    if wishes.port is None and port and port.isdigit() and 1 <= int(port) <= 65535:
        wishes = replace(wishes, port=int(port))
        notes.append(f"--port {port}")
    bind = flag_value(argv, "--host")
    if bind and bind != target.serve_host:
        try:
            ip_address(bind)
        except ValueError:
            bind = None
        if bind is not None and (is_loopback(bind) or not is_loopback(target.serve_host)):
            target = replace(target, serve_host=bind)
            notes.append(f"--host {bind}")
        elif bind is not None:
            warnings.append(f"{prev.source} listened on {bind}; {target.host or 'this host'}'s serve_host is "
                            f"{target.serve_host}, so this plan binds {target.serve_host} and clients on other "
                            f"machines lose it: set serve_host = \"{bind}\" in [hosts.{target.host or 'NAME'}] to keep it")
    served = flag_value(argv, "--served-model-name")
    if wishes.served_name is None and served and re.fullmatch(r"[A-Za-z0-9._:/@+-]{1,200}", served):
        wishes = replace(wishes, served_name=served)  # clients ask for it by that name
        notes.append(f"--served-model-name {served}")
    mem = flag_value(argv, "--mem-fraction-static")
    if wishes.mem_fraction_static == DEFAULT_MEM_FRACTION and mem:
        try:
            frac = float(mem)
        except ValueError:
            frac = -1.0
        if 0.1 <= frac <= 0.98 and frac != DEFAULT_MEM_FRACTION:
            wishes = replace(wishes, mem_fraction_static=frac)
            notes.append(f"--mem-fraction-static {mem}")
    return target, wishes, notes


def build_plan(facts: ModelFacts, target: Target, wishes: Wishes) -> Plan:
    warnings: list[str] = []
    like_notes: list[str] = []
    if wishes.like is not None:
        target, wishes, like_notes = _keep_from_like(target, wishes, warnings)
    if wishes.name is not None:
        try:
            name = validate_host_name(wishes.name)
        except ValueError as exc:
            raise PlanError(f"--name: {exc}") from None
    else:
        name = default_name(facts.id)
    wishes = replace(wishes, port=_choose_port(target, wishes, name, warnings))  # the flag rules read wishes.port
    if not 0.1 <= wishes.mem_fraction_static <= 0.98:
        raise PlanError(f"--mem-fraction-static must be 0.1..0.98, got {wishes.mem_fraction_static}")

    # the SGLang version whose rules and flags apply
    if wishes.sglang_version:
        version, version_source = wishes.sglang_version, "--sglang-version"
        if target.sglang_version and sv.version_key(target.sglang_version) != sv.version_key(version):
            warnings.append(f"planning for SGLang {version} but the host has {target.sglang_version}")
    elif target.sglang_version:
        version, version_source = target.sglang_version, "host"
    else:
        version, version_source = sv.newest_version(), "newest known"
    if target.host and not target.sglang_version and not target.sglang_asked:
        warnings.append(f"{target.host} could not be asked which SGLang it has: planned for {version}")
    elif target.host and not target.sglang_version:
        warnings.append(f"SGLang is not installed on {target.host} (with {target.python or 'python3'}): planned for "
                        f"{version}; deploy will refuse until SGLang is installed there")
    if facts.missing:
        warnings.append(f"config.json lacks {', '.join(facts.missing)}: sizes and fit are estimates")
    if not facts.known_architecture:
        warnings.append(f"unknown architecture {facts.architecture or '?'}: generic rules only (no parsers, "
                        "no quantization flags); check the launch before deploying")
    # a host's --help leaves out the options SGLang hides; they are accepted all the same
    # the host's own --help only when the plan is for the SGLang it has (--sglang-version X on a host
    # with Y: X's flags, from its wheel)
    host_help = target.help_flags if target.help_flags and target.sglang_version and \
        sv.version_key(target.sglang_version) == sv.version_key(version) else None
    flags = (host_help | sv.hidden_flags(version)) if host_help else sv.flags_for(version)
    checked_against = (f"{target.host}'s `launch_server --help` (SGLang {target.sglang_version})"
                       if host_help else f"SGLang {sv.resolve_version(version)}'s flags (from its wheel)")

    # GPUs and TP
    if wishes.tp is not None and wishes.tp < 1:
        raise PlanError(f"--tp must be at least 1, got {wishes.tp}")
    tp, gpu_ids = _pick_gpus(target, wishes, wishes.tp, warnings)
    heads = facts.num_attention_heads
    gpu_mem = min((g.memory_total for g in target.gpus if g.index in gpu_ids), default=0)
    spec_possible = facts.mtp_layers > 0 and wishes.mtp
    if tp == 0:  # no --tp: the smallest that fits on the free GPUs
        choices = tp_choices(facts, len(gpu_ids))
        tp = next((t for t in choices if compute_fit(facts, t, gpu_mem, wishes.mem_fraction_static,
                                                     spec_possible).fits), choices[-1] if choices else 1)
        gpu_ids = tuple(sorted(gpu_ids[:tp]))
        warnings.append(f"no --tp given: TP{tp}, the smallest that fits")
    if heads and heads % tp:
        raise PlanError(f"--tp {tp} does not divide the model's {heads} attention heads "
                        f"(try {', '.join(map(str, tp_choices(facts, max(tp, 8))))})")

    # where the weights go
    download_dir, model_path, reuse = _choose_download_dir(facts, target, wishes, warnings)

    ctx = Ctx(facts, target, wishes, version, frozenset(flags), tp, gpu_ids, model_path)
    produced: list[tuple[str, tuple[str, ...]]] = []
    env: dict[str, str] = {}
    fired: list[RuleFired] = []
    for rule in RULES:
        if not rule.when(ctx):
            continue
        rule_flags = [(name, tuple(values)) for name, values in rule.flags(ctx)]
        rule_env = rule.env(ctx)
        produced.extend(rule_flags)
        env.update(rule_env)
        fired.append(RuleFired(rule.id, rule.why(ctx),
                               join_flags(rule_flags) + [f"{k}={v}" for k, v in rule_env.items()]))
    if facts.mtp_layers > 0 and not ctx.spec:
        why = "--no-mtp" if not wishes.mtp else f"SGLang {version} has no --speculative-algorithm"
        warnings.append(f"the checkpoint has MTP layers but speculative decoding is off ({why})")

    like_diff: list[tuple[str, str]] = []
    if wishes.like is not None:
        if like_notes:
            fired.append(RuleFired("like-clients", f"kept from {wishes.like.source} so that its clients keep "
                                   "working (the same address, port and model name)", like_notes))
        produced, env, like_diff = apply_like(wishes.like, produced, env, ctx, fired)

    argv = join_flags(produced)
    unknown = sorted({n for n, _ in produced if n not in flags})
    if unknown:
        warnings.append(f"flags unknown to SGLang {version}: {', '.join(unknown)} — deploy would fail; "
                        "fix the plan first")

    fit = compute_fit(facts, tp, gpu_mem, wishes.mem_fraction_static, ctx.spec, gpu_count=len(target.gpus) or None)
    like = (Like(wishes.like.source, tuple(LikeChange(op, text) for op, text in like_diff))  # type: ignore[arg-type]
            if wishes.like is not None else None)
    try:
        return Plan(
            name=name, host=target.host, model=ModelSummary(**facts.to_json()), tp=tp, gpu_ids=tuple(gpu_ids),
            port=wishes.port, launcher=target.launcher, sglang_version=version,  # type: ignore[arg-type]
            sglang_version_source=version_source, python=target.python, env=env, argv=argv,
            download_dir=download_dir, model_path=model_path, reuse_existing=reuse, fit=fit, rules=fired,
            warnings=warnings, flags_checked_against=checked_against, unknown_flags=unknown, like=like,
        )
    except Invalid as exc:  # a value from the host, a model folder or --like that no plan may hold
        raise PlanError(str(exc)) from None
