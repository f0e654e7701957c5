"""From a model and a host to a checked, explained deployment plan for a serving engine.

Every flag in a plan comes from a rule of the plan's engine (``Engine.plan_rules``, in the engine's
package under ``core/engines/``); the finished argv
is checked against the target version's flag set (or the host's own ``--help``). ``--like``
(:mod:`gpuops.core.planning.like`) starts from a previous deployment's flags. The result is the
typed :class:`gpuops.core.domain.Plan`.
"""

from __future__ import annotations

import re
from ipaddress import ip_address
from dataclasses import dataclass, field, replace
from typing import Any, Iterable, Sequence

from .. import units
from ..config import validate_abs_path, validate_host_name
import msgspec

from ..states import State
from ..domain import (API_KEY_PLACEHOLDER, Fit, Invalid, Like, LikeChange, Member, ModelSummary, Plan, RuleFired,
                      flag_value, gpus, is_loopback, join_flags, replica_name, split_flags, url_host)
from . import PlanError
from .. import engines
from .fit import compute_fit, tp_choices, tp_refusal
from .inputs import DEFAULT_MEM_FRACTION, MEM_FRACTIONS, GpuInfo, Previous, Target, Wishes, mem_fraction_of
from .rules import Ctx, Rule
from .like import NODE_FLAGS, apply_like
from .model_facts import ModelFacts

GIB = 1024**3
DOWNLOAD_HEADROOM = 1.1


# ------------------------------------------------------------------ inputs


# a stored deployment in one of these states has no server and will start none: its port is free again
PORT_RELEASED_STATES = (State.STOPPED, State.CRASHED)


def with_deployment_ports(target: Target, deployments: Iterable[tuple[str, str, str, int]]) -> Target:
    """`target` with the ports of the host's stored deployments: (name, host, state, port) for each
    deployment; those on `target.host` that may be serving (not stopped or crashed) count, a planned or
    downloading one too (its server starts on that port soon)."""
    held = tuple((name, port, state) for name, host, state, port in deployments
                 if host == target.host and state not in PORT_RELEASED_STATES)
    return replace(target, deployment_ports=held)


def ports_taken(target: Target, name: str, replacing: str | None = None) -> dict[int, str]:
    """{port: who holds it} on the target's host for a deployment named `name`: what listens there
    and the ports of its other deployments (a new run of `name` takes over its own; so does the
    deployment it replaces, `replacing`, whose server is stopped first: its port is not taken)."""
    taken = dict(target.ports_taken)
    for other, port, _state in target.deployment_ports:
        if replacing is not None and other == replacing:
            taken.pop(port, None)  # its server listens there now, and is stopped before this one starts
    for other, port, state in target.deployment_ports:
        if other != name and other != replacing:
            held = f"deployment {other} ({state})"
            taken[port] = f"{taken[port]}; {held}" if taken.get(port) else held
    return taken


def _choose_port(target: Target, wishes: Wishes, name: str, warnings: list[str]) -> int:
    """The server port: --port as given, never moved (a warning when it is taken), else the target's
    first port (its host's first_port, GPUOPS_FIRST_PORT or 30000), or when that is taken the
    next port above it that is not (said in a warning)."""
    where = target.host or "the host"
    taken = ports_taken(target, name, wishes.replacing)
    if wishes.port is not None:
        if not 1 <= wishes.port <= 65535:
            raise PlanError(f"port must be 1..65535, got {wishes.port}")
        if wishes.port in taken:
            holder = taken[wishes.port]
            warnings.append(f"port {wishes.port} is in use on {where}" + (f" ({holder})" if holder else "")
                            + "; choose another --port")
        return wishes.port
    base = wishes.port_from or target.first_port
    if base not in taken:
        return base
    port = next((p for p in range(base + 1, 65536) if p not in taken), None)
    if port is None:
        raise PlanError(f"port {base} and every port above it are in use on {where}: choose a port")
    holder = taken[base]
    warnings.append(f"port {base} is in use on {where}" + (f" ({holder})" if holder else "")
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
            warnings.append(f"{facts.id} holds {units.size(present)} of its index's {units.size(facts.checkpoint_bytes)} "
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


def _check_gpu_ids(ids: tuple[int, ...], allowed: list[int], tp: int | None) -> tuple[int, ...]:
    """--gpu-ids, refused unless they are the host's for gpuops, each once, as many as the TP."""
    outside = [i for i in ids if i not in allowed]
    if outside:
        raise PlanError(f"GPU ids {','.join(map(str, outside))}: not among this host's GPUs for gpuops "
                        f"({','.join(map(str, allowed))})")
    if len(set(ids)) != len(ids):
        raise PlanError("the GPU ids list a GPU twice")
    if tp is not None and tp != len(ids):
        raise PlanError(f"TP {tp} but the GPU ids name {gpus(len(ids))}: they must match")
    return tuple(ids)


def _pick_gpus(target: Target, wishes: Wishes, tp: int | None, warnings: list[str]) -> tuple[int, tuple[int, ...]]:
    allowed = [g.index for g in target.gpus]
    if target.allowed_gpu_ids is not None:
        allowed = [i for i in allowed if i in target.allowed_gpu_ids] if target.gpus else list(target.allowed_gpu_ids)
    if not allowed:
        raise PlanError("no GPUs to plan for: give --host (its GPUs are read) or --gpus N --gpu-memory GIB")
    if wishes.gpu_ids is not None:
        ids = _check_gpu_ids(wishes.gpu_ids, allowed, tp)
        return len(ids), ids
    busy = {g.index for g in target.gpus if g.processes > 0}
    free_first = [i for i in allowed if i not in busy] + [i for i in allowed if i in busy]
    want = tp if tp is not None else None
    if want is None:
        return 0, tuple(free_first)  # decided after the fit
    if want > len(allowed):
        raise PlanError(f"TP {want} needs {want} GPUs; this host has {len(allowed)} for gpuops")
    chosen = tuple(sorted(free_first[:want]))
    taken = [i for i in chosen if i in busy]
    if taken:
        warnings.append(f"GPU{'s' if len(taken) > 1 else ''} {','.join(map(str, taken))} already run processes: deploy will list them and ask")
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
    frac = mem_fraction_of(mem)
    if wishes.mem_fraction_static is None and frac is not None:
        wishes = replace(wishes, mem_fraction_static=frac)
        if frac != DEFAULT_MEM_FRACTION:
            notes.append(f"--mem-fraction-static {mem}")
    return target, wishes, notes


def _plan_name(facts: ModelFacts, wishes: Wishes) -> str:
    if wishes.name is None:
        return default_name(facts.id)
    try:
        return validate_host_name(wishes.name)
    except ValueError as exc:
        raise PlanError(f"--name: {exc}") from None


def _engine_version(target: Target, wishes: Wishes, warnings: list[str]) -> tuple[str, str]:
    """The engine version whose rules and flags apply, and where it comes from."""
    engine = engines.get(wishes.engine)
    sv, title = engine.versions, engine.title
    if wishes.engine_version:
        version, version_source = wishes.engine_version, engine.version_option
        if target.engine_version and sv.key(target.engine_version) != sv.key(version):
            warnings.append(f"planning for {title} {version} but the host has {target.engine_version}")
    elif target.engine_version:
        version, version_source = target.engine_version, "host"
    else:
        version, version_source = sv.newest(), "newest known"
    if target.host and not target.engine_version and not target.engine_asked:
        warnings.append(f"{target.host} could not be asked which {title} it has: planned for {version}")
    elif target.host and not target.engine_version:
        warnings.append(f"{title} is not installed on {target.host} (with {target.python or 'python3'}): planned for "
                        f"{version}; deploy will refuse until {title} is installed there")
    return version, version_source


def _facts_warnings(facts: ModelFacts, warnings: list[str], engine: engines.Engine, version: str) -> None:
    """What the plan cannot vouch for: fields the config lacks, an architecture gpuops has no rules
    for, and one the engine's version does not serve itself (from its model registry)."""
    if facts.missing:
        warnings.append(f"config.json lacks {', '.join(facts.missing)}: sizes and fit are estimates")
    arch = facts.architecture
    served = engine.serves(arch, version) if arch else None
    if served is False:
        warnings.append(f"{engine.title} {version} has no model of its own for {arch} (its model registry): it would "
                        "try its transformers fallback, if it starts at all; plan for a version that has it")
    warnings.extend(engine.model_warnings(facts, version))
    if not facts.known_architecture:
        where = f" ({engine.title} {version} serves it)" if served else ""
        parsers = "parsers only from its chat template" if facts.chat_atoms is not None else "no parsers"
        warnings.append(f"unknown architecture {arch or '?'}{where}: generic rules only ({parsers}, "
                        "no quantization flags); check the launch before deploying")


def _known_flags(target: Target, version: str, engine: engines.Engine) -> tuple[frozenset[str], str]:
    """The flags the engine's `version` takes, and what they were checked against: the host's own
    --help only when the plan is for the version it has (the version option X on a host with Y: X's
    flags, from its wheel); a host's --help leaves out the options the engine hides, accepted all the same."""
    sv = engine.versions
    host_help = target.help_flags if target.help_flags and target.engine_version and \
        sv.key(target.engine_version) == sv.key(version) else None
    flags = (host_help | sv.hidden_flags(version)) if host_help else sv.flags_for(version)
    command = engine.server_module().rsplit(".", 1)[-1]  # what ran --help there: the server module, by its last name
    checked_against = (f"{target.host}'s `{command} --help` ({engine.title} {target.engine_version})"
                       if host_help else f"{engine.title} {sv.resolve(version)}'s flags (from its wheel)")
    return frozenset(flags), checked_against


def _tp_and_gpus(facts: ModelFacts, target: Target, wishes: Wishes,
                 warnings: list[str]) -> tuple[int, tuple[int, ...], int, Wishes, Any]:
    """(TP, the GPUs, the smallest one's memory, the wishes with MTP decided, the engine's published
    command for these GPUs or None): without --tp, see :func:`_choose_tp`. A TP the engine cannot shard
    the model over is refused, with the ones it can."""
    if wishes.tp is not None and wishes.tp < 1:
        raise PlanError(f"TP must be at least 1, got {wishes.tp}")
    tp, gpu_ids = _pick_gpus(target, wishes, wishes.tp, warnings)
    gpu_mem = min((g.memory_total for g in target.gpus if g.index in gpu_ids), default=0)
    engine = engines.get(wishes.engine)
    name = next((g.name for g in target.gpus if g.index in gpu_ids), None)
    official = engine.official(facts, name, gpu_mem, len(gpu_ids))
    if wishes.mem_fraction_static is None:  # the published command's for these GPUs, else gpuops' default
        published = getattr(official, "mem_fraction", None) if official is not None else None
        wishes = (replace(wishes, mem_fraction_static=published, mem_fraction_from=official.source)
                  if official is not None and published is not None
                  else replace(wishes, mem_fraction_static=DEFAULT_MEM_FRACTION))
    if wishes.mtp is None:  # neither --mtp nor --no-mtp: the engine decides (the plan's offer says why, when off)
        wishes = replace(wishes, mtp=engine.mtp_default(facts, wishes, official))
    if tp == 0:  # no --tp: chosen among the free GPUs
        tp = _choose_tp(facts, gpu_mem, wishes, len(gpu_ids), warnings, official)
        gpu_ids = tuple(sorted(gpu_ids[:tp]))
    if wishes.mem_fraction_from is not None and official is not None and official.tp != tp:  # tuned for its TP
        wishes = replace(wishes, mem_fraction_static=DEFAULT_MEM_FRACTION, mem_fraction_from=None)
    refusal = tp_refusal(facts, tp, wishes.engine)
    if refusal:
        raise PlanError(f"{refusal} (try {', '.join(map(str, tp_choices(facts, max(tp, 8), wishes.engine)))})")
    return tp, gpu_ids, gpu_mem, wishes, official


def _choose_tp(facts: ModelFacts, gpu_mem: int, wishes: Wishes, gpus: int, warnings: list[str],
               official: Any = None) -> int:
    """The TP a plan without --tp takes, said in a warning beside the others that fit: the engine's
    published command's for these GPUs when it has one the fit holds; else, among the sizes the engine
    can shard the model over, the smallest whose KV cache holds one full context (the smallest that
    merely fits could leave a tenth of a context: a server that refuses long prompts);
    when none does, the one that holds the most tokens; for a model that names no context length,
    the smallest that fits; when none fits, the largest the free GPUs allow (its fit says why not)."""
    spec = facts.mtp_layers > 0 and bool(wishes.mtp)
    choices = tp_choices(facts, gpus, wishes.engine) or [1]
    fits = [(t, f) for t in choices
            if (f := compute_fit(facts, t, gpu_mem, wishes.mem_fraction, spec, engine=wishes.engine)).fits]
    if not fits:
        warnings.append(f"TP not chosen: TP{choices[-1]}, the largest the free GPUs allow (no TP up to {gpus} fits)")
        return choices[-1]
    ctx = facts.context_length
    if official is not None and official.tp in {t for t, _ in fits}:
        tp, why = int(official.tp), f"the published command's for these GPUs ({official.source})"
    elif not ctx:
        tp, why = fits[0][0], "the smallest that fits"
    else:
        whole = [t for t, f in fits if f.max_total_tokens >= ctx]
        if whole:
            tp, why = whole[0], f"the smallest that holds a full {ctx:,}-token context"
        else:
            tp = max(fits, key=lambda tf: tf[1].max_total_tokens)[0]
            why = f"the one that holds the most KV cache (none holds a full {ctx:,}-token context)"
    others = (", ".join(f"TP{t}: {f.max_total_tokens / ctx:.1f}x" for t, f in fits) if ctx
              else ", ".join(f"TP{t}: {f.max_total_tokens:,} tokens" for t, f in fits))
    if official is not None and official.tp != tp:  # the published command's TP, and why not
        fit = compute_fit(facts, official.tp, gpu_mem, wishes.mem_fraction, spec, engine=wishes.engine)
        why += (f"; not the published command's TP{official.tp} ({official.source}): it {fit.verdict}"
                if official.tp in choices else
                f"; {wishes.engine} cannot shard the model over the published command's TP{official.tp} ({official.source})")
    warnings.append(f"TP not chosen: TP{tp}, {why} (KV cache per context, of the TPs that fit: {others}; "
                    "--tp N for another)")
    return tp


def _mtp_offer(facts: ModelFacts, tp: int, gpu_mem: int, wishes: Wishes, fit: Any, official: Any) -> str:
    """What a plan says when speculative decoding is off because the published command leaves it off:
    that the checkpoint could, how to turn it on, and what that changes (the requests run at once, the
    KV cache, as the fit counts them)."""
    engine = engines.get(wishes.engine)
    on = compute_fit(facts, tp, gpu_mem, wishes.mem_fraction, True, engine=wishes.engine)
    change = (f" (then at most {engine.max_running(True)} requests run at once, not {engine.max_running(False)}; KV cache "
              f"{on.max_total_tokens:,} tokens instead of {fit.max_total_tokens:,})" if on.fits
              else f", which does not fit here ({on.verdict})")
    return (f"speculative decoding off, as the published command for these GPUs has it ({official.source}); the "
            f"checkpoint has {facts.mtp_layers} MTP layer(s): --mtp (plan review: m) turns it on{change}")


def deprecated_warnings(produced: Sequence[tuple[str, tuple[str, ...]]], engine: engines.Engine,
                         version: str) -> list[str]:
    """A warning for each flag the version still accepts but has deprecated (--like translates the
    ones whose notice names a plain replacement; an edit or a notice that names none leaves them):
    what its notice says instead, from the engine's own deprecation text."""
    deprecated = engine.versions.deprecated_flags(version)
    out = []
    for name in sorted({n for n, _ in produced if n in deprecated}):
        instead = deprecated[name]
        out.append(f"{name} is deprecated in {engine.title} {version}"
                   + (f" (its notice: use {instead})" if instead else "") + "; a later version may refuse it")
    return out


def _fire_rules(ctx: Ctx, rules: Sequence[Rule]) -> tuple[list[tuple[str, tuple[str, ...]]], dict[str, str],
                                                           list[RuleFired]]:
    """The flag rules that apply: the flags they produce, their env, and each one's why."""
    produced: list[tuple[str, tuple[str, ...]]] = []
    env: dict[str, str] = {}
    fired: list[RuleFired] = []
    for rule in rules:
        if not rule.when(ctx):
            continue
        rule_flags = [(name, tuple(values)) for name, values in rule.flags(ctx)]
        rule_env = rule.env(ctx)
        produced.extend(rule_flags)
        env.update(rule_env)
        fired.append(RuleFired(rule.id, rule.why(ctx),
                               join_flags(rule_flags) + [f"{k}={v}" for k, v in rule_env.items()]))
    return produced, env, fired


def _like_secrets(like: Previous, argv: list[str], env: dict[str, str], fired: list[RuleFired]) -> list[str]:
    """The secrets --like carries (the values the source had: a secret flag's, a secret variable's):
    their names only, the values read again from the source at deploy, into the 0600 env file."""
    had = dict(like.secrets)
    flagged = [a[2:-1] for a in argv if a.startswith("${GPUOPS_") and a.endswith("}")]
    secret_env = list(dict.fromkeys([*(n for n in flagged if n in had),
                                     *(k for k in like.secret_env if k not in env)]))
    if secret_env:
        fired.append(RuleFired("like-secrets", f"secrets of {like.source}: kept only in the deployment's "
                               "0600 env file (read there again at deploy), never in the plan, a command line or "
                               "the store", secret_env))
    return secret_env


def _startup_reserve(fit: Fit, facts: ModelFacts, engine: engines.Engine, version: str, tp: int,
                     flags: Sequence[tuple[str, tuple[str, ...]]]) -> str | None:
    """Records in `fit` what the engine keeps outside the static memory at start-up for these flags;
    the plan's warning when its static share leaves less (None: it leaves enough, or the engine does
    not say)."""
    reserve = engine.startup_reserve(facts, version, fit.gpu_memory_bytes, tp, dict(flags))
    if reserve is None:
        return None
    fit.startup_reserve_bytes, fit.startup_reserve_why = reserve.bytes, reserve.why
    return reserve.warning


def recheck_startup(before: Plan, after: Plan, facts: ModelFacts) -> Plan:
    """`after` (`before` with the operator's flag edits) with the start-up reserve for its own flags:
    an edit of the prefill chunk, the graphs' batch or the static share moves it, and the warning
    `before`'s flags gave gives way to the one `after`'s give."""
    if after.fit is None or after.replicas or after.members:
        return after
    engine = engines.get(after.engine)
    was = msgspec.structs.replace(after.fit)
    old = _startup_reserve(was, facts, engine, before.engine_version, before.tp, split_flags(before.argv))
    fit = msgspec.structs.replace(after.fit)
    new = _startup_reserve(fit, facts, engine, after.engine_version, after.tp, split_flags(after.argv))
    if (fit.startup_reserve_bytes, new) == (was.startup_reserve_bytes, old):
        return after  # nothing the reserve reads moved: the plan's own warnings stand as the planner gave them
    warnings = [w for w in after.warnings if w != old] + ([new] if new else [])
    try:
        return after.replace(fit=fit, warnings=warnings)
    except Invalid as exc:
        raise PlanError(str(exc)) from None


def _check_mem_fraction(wishes: Wishes) -> None:
    """PlanError for a static share the operator gave outside MEM_FRACTIONS."""
    frac, (low, high) = wishes.mem_fraction_static, MEM_FRACTIONS
    if frac is not None and not low <= frac <= high:
        raise PlanError(f"the memory fraction (--mem-fraction-static) must be {low:g}..{high:g}, got {frac}")


def build_plan(facts: ModelFacts, target: Target, wishes: Wishes) -> Plan:
    warnings: list[str] = []
    like_notes: list[str] = []
    if wishes.like is not None:
        target, wishes, like_notes = _keep_from_like(target, wishes, warnings)
    name = _plan_name(facts, wishes)
    wishes = replace(wishes, port=_choose_port(target, wishes, name, warnings))  # the flag rules read wishes.port
    _check_mem_fraction(wishes)
    version, version_source = _engine_version(target, wishes, warnings)
    engine = engines.get(wishes.engine)
    _facts_warnings(facts, warnings, engine, version)
    flags, checked_against = _known_flags(target, version, engine)
    asked_mtp = wishes.mtp
    tp, gpu_ids, gpu_mem, wishes, official = _tp_and_gpus(facts, target, wishes, warnings)
    # where the weights go
    download_dir, model_path, reuse = _choose_download_dir(facts, target, wishes, warnings)

    ctx = Ctx(facts, target, wishes, version, flags, tp, gpu_ids, model_path, official=official)
    produced, env, fired = _fire_rules(ctx, engine.plan_rules())
    if facts.mtp_layers > 0 and not ctx.spec and (asked_mtp is not None or wishes.mtp):  # (else the offer says why)
        why = "--no-mtp" if not wishes.mtp else f"{engine.title} {version} has no --speculative-algorithm"
        warnings.append(f"the checkpoint has MTP layers but speculative decoding is off ({why})")

    like_diff: list[tuple[str, str]] = []
    if wishes.like is not None:
        if like_notes:
            fired.append(RuleFired("like-clients", f"kept from {wishes.like.source} so that its clients keep "
                                   "working (the same address, port and model name)", like_notes))
        produced, env, like_diff = apply_like(wishes.like, produced, env, ctx, fired)

    argv = join_flags(produced)
    secret_env = _like_secrets(wishes.like, argv, env, fired) if wishes.like is not None else []
    unknown = sorted({n for n, _ in produced if n not in flags})
    if unknown:
        named = ", ".join(engine.versions.removal_note(n, version) for n in unknown)
        warnings.append(f"flags unknown to {engine.title} {version}: {named} — deploy would fail; fix the plan first")
    warnings += deprecated_warnings(produced, engine, version)

    fit = compute_fit(facts, tp, gpu_mem, wishes.mem_fraction, ctx.spec, gpu_count=len(target.gpus) or None,
                      engine=wishes.engine)
    reserve_warning = _startup_reserve(fit, facts, engine, version, tp, produced)
    if reserve_warning and wishes.mem_fraction_from is None:  # (a published command's share ran as published)
        warnings.append(reserve_warning)
    if asked_mtp is None and not wishes.mtp and facts.mtp_layers > 0 and official is not None:
        warnings.append(_mtp_offer(facts, tp, gpu_mem, wishes, fit, official))
    like = (Like(wishes.like.source, tuple(LikeChange(op, text) for op, text in like_diff))  # type: ignore[arg-type]
            if wishes.like is not None else None)
    try:
        return Plan(
            name=name, host=target.host, model=ModelSummary(**facts.to_json()), tp=tp, gpu_ids=tuple(gpu_ids),
            port=wishes.port, launcher=target.launcher, engine_version=version,  # type: ignore[arg-type]
            engine_version_source=version_source, python=target.python, env=env, argv=argv,
            download_dir=download_dir, model_path=model_path, reuse_existing=reuse, fit=fit, rules=fired,
            warnings=warnings, flags_checked_against=checked_against, unknown_flags=unknown, like=like,
            secret_env=secret_env, engine=wishes.engine,
        )
    except Invalid as exc:  # a value from the host, a model folder or --like that no plan may hold
        raise PlanError(str(exc)) from None


# ------------------------------------------------------------------ several nodes

DIST_INIT_PORT = 5000  # node 0's rendezvous port when it is free there (the engine's docs use 5000); else the next


@dataclass(frozen=True)
class Node:
    """One host of a multi-node plan: what the planner read there, and its inventory's network facts."""

    target: Target
    addr: str  # where the other nodes reach it (HostConfig.reachable_addr)
    nccl_interface: str | None = None


def _multinode_tp(facts: ModelFacts, nodes: Sequence[Node], wishes: Wishes) -> tuple[int, list[str | None]]:
    """The TP over the nodes (--tp, else every GPU of the smallest node, lowered until it divides the
    heads), after refusing what cannot be split; and the nodes' host names."""
    n = len(nodes)
    if n < 2:
        raise PlanError("--hosts: name two or more hosts for a multi-node plan (one host: --host)")
    hosts = [node.target.host for node in nodes]
    if any(h is None for h in hosts) or len(set(hosts)) != n:
        raise PlanError(f"--hosts: each node is a distinct inventory host, not {','.join(map(str, hosts))}")
    if wishes.gpu_ids is not None:
        raise PlanError("GPU ids name one host's GPUs: over several nodes each node's are chosen (its policy's gpu_ids)")
    per_node = [len(_allowed(node.target)) for node in nodes]
    if wishes.tp is not None:
        if wishes.tp % n:
            raise PlanError(f"--tp {wishes.tp} does not split evenly over {n} nodes ({engines.get(wishes.engine).title} "
                            "needs TP divisible by "
                            f"--nnodes: try {', '.join(str(n * k) for k in range(1, max(per_node) + 1))})")
        tp = wishes.tp
    else:
        tp = n * min(per_node)
        while tp > n and tp_refusal(facts, tp, wishes.engine):  # the most the nodes hold that the engine can shard over
            tp -= n
    g = tp // n
    short = [f"{h} has {c}" for h, c, in zip(hosts, per_node) if c < g]
    if short:
        raise PlanError(f"TP{tp} over {n} nodes needs {gpus(g)} on each: {', '.join(short)} for gpuops")
    return tp, hosts


def _check_nodes(nodes: Sequence[Node], plan: Plan, warnings: list[str]) -> None:
    """What the nodes must agree on: one engine version, and the model path (a copy on each, or a
    download there that its policy allows)."""
    versions = {node.target.host: node.target.engine_version for node in nodes}
    if len({v for v in versions.values()}) > 1:
        listed = ", ".join(f"{h} {v or 'none'}" for h, v in versions.items())
        warnings.append(f"the nodes have different {engines.get(plan.engine).title} versions ({listed}): every node must run the same")
    for node in nodes[1:]:
        t = node.target
        if plan.model_path.startswith("/") and plan.reuse_existing and plan.model_path not in t.existing.values():
            warnings.append(f"{t.host} has no complete copy at {plan.model_path}: deploy downloads it there too "
                            "(or put the models on a shared mount)")
        bad = under_any(plan.model_path, t.forbidden_paths) if plan.model_path.startswith("/") else None
        if bad:
            raise PlanError(f"{plan.model_path} is under {bad} on {t.host}, which forbids it (forbidden_paths): give "
                            "--download-dir a path every node allows")


def _members(nodes: Sequence[Node], picked: list[tuple[int, ...]], plan: Plan, dist_port: int) -> list[Member]:
    """Each node's launch: its rank, its GPUs, its NCCL interface, its port."""
    members = []
    for rank, (node, ids) in enumerate(zip(nodes, picked)):
        env = ({"NCCL_SOCKET_IFNAME": node.nccl_interface, "GLOO_SOCKET_IFNAME": node.nccl_interface}
               if node.nccl_interface else {})
        env["CUDA_VISIBLE_DEVICES"] = ",".join(map(str, ids))
        members.append(Member(host=str(node.target.host), node_rank=rank, gpu_ids=ids, python=node.target.python,
                              launcher=node.target.launcher, env=env,
                              port=plan.port if rank == 0 else _member_port(node.target, plan.port + rank, dist_port)))
    return members


def _multinode_rules(plan: Plan, nodes: Sequence[Node], hosts: list[str | None], picked: list[tuple[int, ...]],
                     tp: int, dist: str) -> list[RuleFired]:
    """Node 0's rules with the TP rule said per node, the multi-node rule, the NCCL interface's."""
    n, g, t0 = len(nodes), tp // len(nodes), nodes[0].target
    why = (f"TP{tp} over {n} nodes, {gpus(g)} each ({', '.join(f'{h}: {_ids(i)}' for h, i in zip(hosts, picked))}); "
           f"node 0 ({t0.host}) holds the rendezvous at {dist}; each node's own --node-rank")
    per_node_rules = [RuleFired("tensor-parallel", f"shard over {tp} GPUs: {g} on each of {n} nodes (each node's "
                                "CUDA_VISIBLE_DEVICES: its own GPUs)", ["--tp-size", str(tp)])
                      if r.id == "tensor-parallel" else r for r in plan.rules]
    fired = [*per_node_rules, RuleFired("multi-node", why, join_flags([("--nnodes", (str(n),)), ("--node-rank", ("R",)),
                                                                     ("--dist-init-addr", (dist,))]))]
    if any(node.nccl_interface for node in nodes):
        fired.append(RuleFired("nccl-interface", "the inventory names the nodes' network interface (nccl_interface): "
                               "NCCL and gloo use it, not the first one they find",
                               [f"{node.target.host}: NCCL_SOCKET_IFNAME={node.nccl_interface}" for node in nodes
                                if node.nccl_interface]))
    return fired


def _pick_node_gpus(node: Node, wishes: Wishes, g: int, warnings: list[str]) -> tuple[int, ...]:
    """A node's `g` GPUs (its free ones first); its warnings named after it."""
    own: list[str] = []
    _, ids = _pick_gpus(node.target, replace(wishes, tp=g, gpu_ids=None), g, own)
    warnings += [f"{node.target.host}: {w}" for w in own]
    return ids


def _rendezvous(nodes: Sequence[Node], http_port: int, warnings: list[str]) -> tuple[int, str]:
    """Node 0's rendezvous: its port, and the --dist-init-addr the other nodes reach it at."""
    t0, addr = nodes[0].target, nodes[0].addr
    dist_port = _dist_init_port(t0, http_port)
    dist = f"{url_host(addr)}:{dist_port}"
    if is_loopback(addr) and any(not is_loopback(node.addr) for node in nodes[1:]):
        warnings.append(f"{t0.host} is reached at {addr}, a loopback address the other nodes cannot reach: "
                        f"set node_addr in [hosts.{t0.host}]")
    return dist_port, dist


def _per_node_like(like: Like | None, fired: list[RuleFired]) -> tuple[Like | None, list[RuleFired]]:
    """--like's diff and drops without the node flags and each node's GPUs: set here again, per node."""
    if like is None:
        return None, fired
    like = msgspec.structs.replace(like, diff=tuple(
        c for c in like.diff if c.text.split(" ", 1)[0] not in NODE_FLAGS
        and not c.text.startswith("CUDA_VISIBLE_DEVICES=")))
    return like, [r for r in fired if not (r.id == "like-drop" and r.removes and r.removes[0] in NODE_FLAGS)]


def build_multinode_plan(facts: ModelFacts, nodes: Sequence[Node], wishes: Wishes) -> Plan:
    """One deployment over several hosts: TP split evenly (TP/N GPUs on each node), fit per
    node (the smallest GPU of any node counts), the same model path on every node, the engine's own
    `--nnodes N --node-rank R --dist-init-addr HOST0:PORT` with node 0 holding the rendezvous, the
    NCCL interface where the inventory names one. Deploy starts one server per node."""
    tp, hosts = _multinode_tp(facts, nodes, wishes)
    n = len(nodes)
    g = tp // n

    warnings: list[str] = []
    picked = [_pick_node_gpus(node, wishes, g, warnings) for node in nodes]
    # node 0's plan, with the whole TP over a stand-in of the nodes' GPUs (the smallest of any node):
    # the rules, the fit and the flags read the deployment as the engine sees it
    t0 = nodes[0].target
    smallest = min(gpu.memory_total for node, ids in zip(nodes, picked) for gpu in node.target.gpus if gpu.index in ids)
    stand_in = replace(t0, gpus=tuple(GpuInfo(i, smallest) for i in range(tp)), allowed_gpu_ids=None)
    plan = build_plan(facts, stand_in, replace(wishes, tp=tp, gpu_ids=tuple(range(tp))))

    _check_nodes(nodes, plan, warnings)
    dist_port, dist = _rendezvous(nodes, plan.port, warnings)
    adds = ["--nnodes", str(n), "--node-rank", "0", "--dist-init-addr", dist]
    members = _members(nodes, picked, plan, dist_port)
    fired = _multinode_rules(plan, nodes, hosts, picked, tp, dist)
    unknown = [f for f in ("--nnodes", "--node-rank", "--dist-init-addr") if f not in _flags_of(plan, t0)]
    if unknown:
        warnings.append(f"flags unknown to {engines.get(plan.engine).title} {plan.engine_version}: {', '.join(unknown)}")
    fit = plan.fit
    if fit is not None:
        fit = msgspec.structs.replace(fit, verdict=fit.verdict + f" ({gpus(g)} on each of {n} nodes)")
    like, fired = _per_node_like(plan.like, fired)
    try:
        return plan.replace(gpu_ids=picked[0], argv=[*plan.argv, *adds], members=members, dist_init_addr=dist, like=like,
                            env={**plan.env, **members[0].env},
                            rules=fired, warnings=[w for w in plan.warnings if not w.startswith("TP not chosen")] + warnings,
                            fit=fit)
    except Invalid as exc:
        raise PlanError(str(exc)) from None


# How often the router asks each replica's /health and after how many failures it counts it lost:
# the router's defaults (60 s, 3) notice a lost replica after three minutes
ROUTER_HEALTH = ("--health-check-interval-secs", "5", "--health-failure-threshold", "2")


@dataclass
class _Replicas:
    """What the replicas of a replicated plan take, as they are planned one after the other."""

    name: str
    head: Target
    ours: dict[str, dict[int, str]]  # the ports this plan takes, by address (two hosts at one address share them)
    used: dict[str | None, set[int]] = field(default_factory=dict)  # the GPUs taken, by host
    warned: set[str] = field(default_factory=set)  # the hosts whose loopback address was warned of


def _replica(facts: ModelFacts, node: Node, wishes: Wishes, i: int, replicas: int, taken: _Replicas,
             warnings: list[str]) -> tuple[Plan, str]:
    """Replica `i`'s one-host plan on `node` (the GPUs and ports the replicas before it took left out)
    and the URL the router reaches it at."""
    t, head, name = node.target, taken.head, taken.name
    free = tuple(g for g in _allowed(t) if g not in taken.used.get(t.host, set()))
    if not free:
        raise PlanError(f"replicas {replicas}: {t.host} has no GPU left for replica {i} (the replicas before it "
                        f"hold {_ids(sorted(taken.used.get(t.host, ())))}): fewer replicas, or a smaller TP")
    one = replace(t, allowed_gpu_ids=free, ports_taken={**t.ports_taken, **taken.ours.get(node.addr, {})})
    # without --port the replicas take their host's first port and up; with it, the ports above the router's
    base = wishes.port + 1 if wishes.port is not None and wishes.port < 65535 else t.first_port
    p = build_plan(facts, one, replace(wishes, name=replica_name(name, i), port=None, gpu_ids=None, port_from=base))
    away = t.host != head.host
    if away and is_loopback(p.bind_host):
        raise PlanError(f"replicas: {t.host} serves on loopback only (its serve_host {p.bind_host}), so the router "
                        f"on {head.host} cannot reach replica {i} there: set serve_host in [hosts.{t.host}]")
    if not p.fit or not p.fit.fits:
        raise PlanError(f"replica {i} on {t.host} ({_ids(p.gpu_ids)}): {p.fit.verdict if p.fit else 'no fit'}")
    taken.used.setdefault(t.host, set()).update(p.gpu_ids)
    taken.ours.setdefault(node.addr, {})[p.port] = f"replica {i} of {name}"
    # on the router's host: where a client there reaches the replica; elsewhere: the host's
    # address for other machines (node_addr, else its ssh host)
    addr = node.addr if away else p.client_host
    if away and is_loopback(addr) and t.host not in taken.warned:
        taken.warned.add(str(t.host))
        warnings.append(f"{t.host} is reached at {addr}, a loopback address: the router on {head.host} reaches "
                        f"its replicas there only if both are this machine (set node_addr in [hosts.{t.host}])")
    url = f"http://{url_host(addr)}:{p.port}"
    return p.replace(replica_of=name, warnings=[w for w in p.warnings if not w.startswith(f"port {base} is in use")]), url


def _router_rules(plans: list[Plan], head: Target, urls: list[str], router_port: int, metrics: int,
                  keyed: bool) -> list[RuleFired]:
    router_title = engines.get(plans[0].engine).router_title()
    where = "; ".join(f"{r.name}: {r.host} {_ids(r.gpu_ids)} port {r.port}" for r in plans)
    fired = [
        RuleFired("replicas", f"{len(plans)} servers of the model, each on GPUs of its own ({where})", []),
        RuleFired("router", f"{router_title} on {head.host} spreads the requests over them at port {router_port} "
                            f"(metrics at {metrics}, on the router's own address)",
                  join_flags([("--worker-urls", tuple(urls)), ("--prometheus-host", (head.serve_host,))])),
        RuleFired("router-health", "the router asks each replica's /health every 5 s and counts it lost after 2 "
                                   "failures (its defaults notice a lost replica after 3 minutes)", list(ROUTER_HEALTH)),
    ]
    if keyed:
        bind = head.serve_host
        served = sorted({str(p.host) for p in plans if p.uses_api_key} | ({str(head.host)} if not is_loopback(bind) else set()))
        fired.append(RuleFired("router-api-key", f"serving beyond loopback ({', '.join(served)}): one API key for the "
                               "router and every replica, generated at deploy; the router checks it from clients and "
                               "sends it to the replicas", ["--api-key", API_KEY_PLACEHOLDER]))
    return fired


def _router_policy(engine_name: str, policy: str | None) -> tuple[str | None, RuleFired | None]:
    """(the router the plan must run, None: the first the host has; the rule that sets --policy) for
    the operator's --router-policy: a policy every one of the engine's routers accepts leaves the
    router to the host; one only some accept names the first of them; one none accepts is refused,
    with theirs."""
    if policy is None:
        return None, None
    engine = engines.get(engine_name)
    having = [r.package for r in engine.routers if policy in engine.router_policies(r.package)]
    if not having:
        said = "; ".join(f"{r.package}: {', '.join(engine.router_policies(r.package)) or '?'}" for r in engine.routers)
        raise PlanError(f"--router-policy {policy}: no router of {engine.title} has it ({said})")
    router = None if len(having) == len(engine.routers) else having[0]
    default = engine.router_policies(having[0])[0]
    why = (f"the router spreads the requests by {policy}" + (f" (only {router} has it: the plan runs {router})" if router
                                                             else "")
           + (f", not its default {default}" if policy != default else " (its default, as asked)"))
    return router, RuleFired("router-policy", why, ["--policy", policy])


def _check_replicated(nodes: Sequence[Node], wishes: Wishes, replicas: int) -> None:
    if replicas < 2:
        raise PlanError("--replicas: two or more (one server: leave --replicas out)")
    if wishes.gpu_ids is not None:
        raise PlanError("--gpu-ids names one server's GPUs: with --replicas each replica's are chosen")
    if wishes.like is not None:
        raise PlanError("--like with --replicas: plan one server like the old one first (not supported yet)")
    if not nodes:
        raise PlanError("--replicas: name the host (--host) or hosts (--hosts)")


def build_replicated_plan(facts: ModelFacts, nodes: Sequence[Node], wishes: Wishes, replicas: int) -> Plan:
    """K servers of the model, each a one-host plan of its own on its own GPUs and port (the GPUs the
    replicas before it took left out), and the engine's router in front of them on the same host: the
    router's plan holds the replicas' plans. Deploy starts the replicas, then the router (python -m
    ROUTER_MODULE --worker-urls ...). The replicas go round the hosts of `nodes` (the
    router on the first): a replica on another host serves beyond loopback (its serve_host), so
    with an API key; then the router carries it (`--api-key`: the router checks it from clients
    and sends it to the replicas), and deploy gives the router and every replica the same key."""
    _check_replicated(nodes, wishes, replicas)
    try:
        name = validate_host_name(wishes.name) if wishes.name is not None else default_name(facts.id)
    except ValueError as exc:
        raise PlanError(f"--name: {exc}") from None
    head = nodes[0].target
    warnings: list[str] = []
    router_port = _choose_port(head, wishes, name, warnings)
    taken = _Replicas(name, head, {nodes[0].addr: {router_port: f"the router of {name}"}})
    plans: list[Plan] = []
    urls: list[str] = []
    for i in range(1, replicas + 1):
        p, url = _replica(facts, nodes[(i - 1) % len(nodes)], wishes, i, replicas, taken, warnings)
        plans.append(p)
        urls.append(url)
    if not engines.get(plans[0].engine).routers:
        raise PlanError(f"--replicas: gpuops knows no router for {engines.get(plans[0].engine).title} to put in front of them")
    ports = {**ports_taken(head, name, wishes.replacing), **taken.ours.get(nodes[0].addr, {})}
    # its metrics on the next free port above the router's and the replicas' (from the host's first port
    # on, as every port a plan picks: not the router's own default, 29000, which every router of a host
    # and every host would share)
    above = max([router_port, *taken.ours.get(nodes[0].addr, {})]) + 1
    metrics = next((q for q in range(above, 65536) if q not in ports), None)
    if metrics is None:
        raise PlanError(f"no free port for the router's metrics on {head.host}")
    bind = head.serve_host
    keyed = not is_loopback(bind) or any(p.uses_api_key for p in plans)
    # its metrics on its own address: the routers' default is every address (0.0.0.0), unauthenticated
    router, policy_rule = _router_policy(plans[0].engine, wishes.router_policy)
    argv = ["--worker-urls", *urls, "--host", bind, "--port", str(router_port), "--prometheus-host", bind,
            "--prometheus-port", str(metrics), *(policy_rule.adds if policy_rule else []),
            *ROUTER_HEALTH, *(["--api-key", API_KEY_PLACEHOLDER] if keyed else [])]
    fired = _router_rules(plans, head, urls, router_port, metrics, keyed) + ([policy_rule] if policy_rule else [])
    first = plans[0]
    fit = first.fit
    if fit is not None:
        fit = msgspec.structs.replace(fit, verdict=fit.verdict + f" (each of {replicas} replicas)")
    try:
        return Plan(name=name, host=head.host, model=first.model, tp=first.tp, gpu_ids=(), port=router_port,
                    launcher=head.launcher, engine_version=first.engine_version, env={}, argv=argv,
                    download_dir=None, fit=fit, rules=fired, warnings=warnings + list(dict.fromkeys(w for p in plans for w in p.warnings)),
                    model_path=first.model_path, reuse_existing=True, python=head.python,
                    engine_version_source=first.engine_version_source,
                    flags_checked_against=engines.get(first.engine).router_title(router),
                    replicas=plans, router=router)
    except Invalid as exc:
        raise PlanError(str(exc)) from None


def _allowed(target: Target) -> list[int]:
    ids = [g.index for g in target.gpus]
    return [i for i in ids if target.allowed_gpu_ids is None or i in target.allowed_gpu_ids]


def _ids(ids: Sequence[int]) -> str:
    return "GPUs " + ",".join(map(str, ids))


def _flags_of(plan: Plan, target: Target) -> frozenset[str]:
    sv = engines.get(plan.engine).versions
    version = plan.engine_version
    host_help = target.help_flags if target.help_flags and target.engine_version and \
        sv.key(target.engine_version) == sv.key(version) else None
    return frozenset((host_help | sv.hidden_flags(version)) if host_help else sv.flags_for(version))


def _member_port(target: Target, start: int, dist_port: int) -> int:
    """Node R's --port (the engine serves its health check there): the plan's + R, or the next one free
    on its host (two nodes may share a machine)."""
    taken = set(target.ports_taken) | {p for _, p, _ in target.deployment_ports} | {dist_port}
    port = start
    while port in taken:
        port += 1
    return port


def _dist_init_port(target: Target, http_port: int) -> int:
    """Node 0's rendezvous port: DIST_INIT_PORT or the next free one there (not the server's port,
    nor the few after it that the engine takes for itself)."""
    taken = set(target.ports_taken) | {p for _, p, _ in target.deployment_ports}
    port = DIST_INIT_PORT
    while port in taken or http_port <= port <= http_port + 10:
        port += 1
    return port
