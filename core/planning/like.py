"""``--like``: start from a previous deployment's flags and env, and drop, with a reason each, what no
longer applies to the new model or engine version (by the engine's knowledge: ``Engine.like_*``). Sources: a plan JSON, a systemd unit file, or a
stored deployment (by name)."""

from __future__ import annotations

import json
import re
import shlex
from dataclasses import replace
from pathlib import Path
from typing import Callable, Sequence

from ..domain import SECRET_FLAGS, Invalid, Plan, RuleFired, is_secret_env, join_flags, placeholder, split_flags
from . import PlanError
from .. import engines
from .inputs import Previous
from .rules import Ctx


_CONTROL = re.compile(r"[\x00-\x1f\x7f]")
_ENV_NAME = re.compile(r"[A-Za-z_][A-Za-z0-9_]*")
_ENV_ITEM = re.compile(r"[A-Z_][A-Z0-9_]*=.*")  # an env value among a rule's adds (flags are --names)


def _without_secrets(prev: Previous) -> Previous:
    """`prev` with its secrets out of its argv and env (see :class:`Previous`)."""
    argv: list[str] = []
    secrets: dict[str, str] = {}
    args = list(prev.argv)
    i = 0
    while i < len(args):
        arg = args[i]
        name, eq, value = arg.partition("=")
        if name in SECRET_FLAGS:
            var = SECRET_FLAGS[name]
            if not eq:  # the value is the next argument
                if i + 1 >= len(args):
                    argv.append(arg)
                    break
                value = args[i + 1]
                i += 1
            if value != placeholder(var):
                secrets[var] = value
            argv += [name, placeholder(var)]
        else:
            argv.append(arg)
        i += 1
    env: list[tuple[str, str]] = []
    secret_env: list[str] = []
    for key, value in prev.env:
        if is_secret_env(key) and not key.startswith("GPUOPS_"):
            secrets[key] = value
            secret_env.append(key)
        elif not key.startswith("GPUOPS_"):
            env.append((key, value))
    return replace(prev, argv=tuple(argv), env=tuple(env),
                   secret_env=tuple(dict.fromkeys([*prev.secret_env, *secret_env])),
                   secrets=tuple({**dict(prev.secrets), **secrets}.items()))



# A multi-node deployment's own flags: never carried over (a multi-node plan sets them for each of
# its nodes itself; a one-host plan has no nodes)
NODE_FLAGS = frozenset({"--nnodes", "--node-rank", "--dist-init-addr"})


def _drop_reason(name: str, values: tuple[str, ...], ctx: Ctx, ours: set[str]) -> str | None:
    """Why a flag of the previous deployment no longer applies (None: keep it)."""
    engine = engines.get(ctx.wishes.engine)
    if name in NODE_FLAGS:
        return "a multi-node deployment's own: a plan over several nodes sets it for each node"
    if name in engine.owned_flags or name in ours:
        return None  # replaced by this plan's own value
    reason = engine.like_drop_reason(name, values, ctx)
    if reason is not None:
        return reason
    if name not in ctx.flags:
        return _no_such(name, ctx)
    return None


def _no_such(name: str, ctx: Ctx) -> str:
    """Why a flag the plan's version does not have is dropped (when nothing more is known of it)."""
    return f"{engines.get(ctx.wishes.engine).title} {ctx.version} has no {name}"


def _translate_deprecated(name: str, values: tuple[str, ...], ctx: Ctx) -> tuple[str, tuple[str, ...]] | None:
    """A deprecated flag under its replacement's name (`--x` or `--x=value`); None if it
    has none gpuops can write (then it is kept as is: the engine still accepts it)."""
    return _replacement(engines.get(ctx.wishes.engine).versions.deprecated_flags(ctx.version).get(name), values, ctx)


def _replacement(notice: str | None, values: tuple[str, ...], ctx: Ctx) -> tuple[str, tuple[str, ...]] | None:
    """The flag a deprecation notice names (`--x` or `--x=value`), when gpuops can write it and the
    plan's version accepts it; None otherwise."""
    if not notice or any(ch in notice for ch in "{< "):
        return None
    new, eq, value = notice.partition("=")
    if new not in ctx.flags:
        return None
    return (new, (value,)) if eq else (new, values)


def _translate_removed(name: str, values: tuple[str, ...],
                       ctx: Ctx) -> tuple[tuple[str, tuple[str, ...]], str] | None:
    """A flag the plan's version no longer has, under the name the last notice it carried gave (and
    why, in words); None when there is none gpuops can write."""
    engine = engines.get(ctx.wishes.engine)
    gone = engine.versions.removed_flag(name, ctx.version)
    if gone is None:
        return None
    last, instead = gone
    new = _replacement(instead, values, ctx)
    if new is None:
        return None
    return new, (f"{name} is gone from {engine.title} {ctx.version} (after {last}, whose notice said: use "
                 f"{instead})")


def _derived_reason(rule: str, why: str, source: str, ctx: Ctx) -> str:
    return (f"the planner added it for {source} (rule {rule}: {why}); its rule does not apply to "
            f"{ctx.facts.id}")


def _like_flags(prev: Previous, ours: set[str], ctx: Ctx, fired: list[RuleFired],
                diff: list[tuple[str, str]]) -> list[tuple[str, tuple[str, ...]]]:
    """The previous deployment's flags this plan keeps (a deprecated one under its new name); each
    drop and rename said in `diff` and `fired`."""
    engine = ctx.wishes.engine
    prev_flags = [(canonical_flag(n, ctx.flags, engine), v)
                  for n, v in split_flags(_strip_launcher(prev.argv, engine))]
    derived = {(canonical_flag(n, ctx.flags, engine), v): (rule, why) for n, v, rule, why in prev.derived}
    kept: list[tuple[str, tuple[str, ...]]] = []
    for name, values in prev_flags:
        reason = _drop_reason(name, values, ctx, ours)
        if reason is None and name not in ours and (name, values) in derived:
            # a rule companion of the previous model (its parser, its mamba cache's page size, its
            # family's fusion): this plan's own rules said whether it applies here, and they did not
            reason = _derived_reason(*derived[(name, values)], prev.source, ctx)
        translated = _translate_deprecated(name, values, ctx) if reason is None else None
        why = ""
        if translated is not None:
            why = (f"{name} is deprecated in {engines.get(engine).title} {ctx.version}: "
                   f"{' '.join([translated[0], *translated[1]])}")
        elif reason == _no_such(name, ctx) and (removed := _translate_removed(name, values, ctx)):
            (translated, why), reason = removed, None
        if translated is not None:
            new_name, new_values = translated
            if new_name in ours:
                reason = f"{why}, which this plan sets itself"
            else:
                diff.append(("~", f"{' '.join([name, *values])} → {' '.join([new_name, *new_values])}  ({why})"))
                fired.append(RuleFired("like-rename", why, [new_name, *new_values], [name, *values]))
                kept.append((new_name, new_values))
                continue
        if reason is not None:
            diff.append(("-", f"{' '.join([name, *values])}  ({reason})"))
            fired.append(RuleFired("like-drop", reason, [], [name, *values]))
        elif name not in ours:
            kept.append((name, values))
    return kept


def _produced_diff(prev: Previous, produced: list[tuple[str, tuple[str, ...]]], ctx: Ctx, fired: list[RuleFired],
                   diff: list[tuple[str, str]]) -> None:
    """What this plan's own flags add or change against the previous deployment's, each with the
    reason of the rule that put it there."""
    prev_map = dict((canonical_flag(n, ctx.flags, ctx.wishes.engine), v)
                    for n, v in split_flags(_strip_launcher(prev.argv, ctx.wishes.engine)))

    def because(name: str) -> str:
        """Why this plan sets `name`: the reason of the rule that put it there."""
        rule = next((r for r in fired if r.id not in ("like-keep", "like-drop", "like-rename")
                     and any(a == name or a.startswith(name + " ") for a in r.adds)), None)
        return f"  ({rule.why})" if rule is not None else ""

    for name, values in produced:
        if name not in prev_map:
            diff.append(("+", " ".join([name, *values]) + because(name)))
        elif prev_map[name] != values:
            diff.append(("~", f"{name} {' '.join(prev_map[name])} → {' '.join(values)}" + because(name)))


def _like_env(prev: Previous, env: dict[str, str], ctx: Ctx, fired: list[RuleFired],
              diff: list[tuple[str, str]]) -> dict[str, str]:
    """The previous deployment's environment without what no longer applies (a variable the previous
    model's rules set, one the engine says means nothing now), then this plan's own."""
    new_env = dict(prev.env)
    for key, value, rule, why in prev.derived_env:
        if new_env.get(key) == value and key not in env:  # the previous model's rule set it; this plan's do not
            new_env.pop(key)
            said = _derived_reason(rule, why, prev.source, ctx)
            diff.append(("-", f"{key}={value}  ({said})"))
            fired.append(RuleFired("like-drop", said, [], [f"{key}={value}"]))
    engine = engines.get(ctx.wishes.engine)
    for key, value in list(new_env.items()):
        gone = engine.like_env_reason(key, value, ctx)
        if gone:
            new_env.pop(key)
            diff.append(("-", f"{key}={value}  ({gone})"))
            fired.append(RuleFired("like-drop", gone, [], [f"{key}={value}"]))
    for k, v in env.items():
        if new_env.get(k) != v:
            diff.append(("+" if k not in new_env else "~", f"{k}={v}"))
        new_env[k] = v
    return new_env


def apply_like(prev: Previous, produced: list[tuple[str, tuple[str, ...]]], env: dict[str, str], ctx: Ctx,
               fired: list[RuleFired]) -> tuple[list[tuple[str, tuple[str, ...]]], dict[str, str], list[tuple[str, str]]]:
    ours = {n for n, _ in produced}
    diff: list[tuple[str, str]] = []
    kept = _like_flags(prev, ours, ctx, fired, diff)
    if kept:
        fired.append(RuleFired("like-keep", f"kept from {prev.source}: still valid for this model and "
                               f"{engines.get(ctx.wishes.engine).title} "
                               f"{ctx.version}", join_flags(kept)))
    _produced_diff(prev, produced, ctx, fired, diff)
    return produced + kept, _like_env(prev, env, ctx, fired, diff), diff


def canonical_flag(name: str, known: frozenset[str], engine: str = engines.DEFAULT) -> str:
    """The flag's full name: the engine's aliases, and the abbreviations its parser takes
    (`Engine.flag_aliases`, `VersionData.match_flag`)."""
    eng = engines.get(engine)
    if name in eng.flag_aliases:
        return eng.flag_aliases[name]
    return eng.versions.match_flag(name, known) or name


def _strip_launcher(argv: Sequence[str], engine: str = engines.DEFAULT) -> list[str]:
    """Drop the server's command (`python -m MODULE`: the engine says which) from the front of an argv."""
    return engines.get(engine).command_flags(argv)


# ------------------------------------------------------------------ --like sources


def _checked(prev: Previous) -> Previous:
    """Refuse a previous launch whose argv or env could not go into a unit or a shell as is; its
    secrets taken out first (a refusal never shows one)."""
    for key, _ in prev.env:
        if not _ENV_NAME.fullmatch(key):
            raise PlanError(f"--like {prev.source}: {key[:40]!r} is not an environment variable name")
    prev = _without_secrets(prev)
    for i, arg in enumerate(prev.argv):
        if _CONTROL.search(arg):
            raise PlanError(f"--like {prev.source}: argument {i + 1} ({arg[:40]!r}) contains a control character")
    for key, value in prev.env:
        if _CONTROL.search(value):
            raise PlanError(f"--like {prev.source}: the value of {key} contains a control character")
    for key, value in prev.secrets:
        if _CONTROL.search(value):
            raise PlanError(f"--like {prev.source}: the secret {key} (not shown) contains a control character")
    return prev


def previous_from_unit(text: str, source: str) -> Previous:
    """A systemd unit file's ExecStart (continuation lines joined) and Environment= lines."""
    joined = re.sub(r"\\\n\s*", " ", text)
    exec_lines = [ln.split("=", 1)[1] for ln in joined.splitlines() if ln.strip().startswith("ExecStart=")]
    if not exec_lines:
        raise PlanError(f"{source}: no ExecStart= line: not a unit file gpuops can read")
    if len(exec_lines) > 1:
        raise PlanError(f"{source}: {len(exec_lines)} ExecStart= lines: gpuops reads a unit with one")
    try:
        argv = shlex.split(exec_lines[0].strip().lstrip("-@+!:"))
    except ValueError as exc:
        raise PlanError(f"{source}: ExecStart= cannot be parsed: {exc}") from None
    env: list[tuple[str, str]] = []
    for ln in joined.splitlines():
        ln = ln.strip()
        if ln.startswith("Environment="):
            try:
                items = shlex.split(ln.split("=", 1)[1])
            except ValueError as exc:
                raise PlanError(f"{source}: Environment= cannot be parsed: {exc}") from None
            for item in items:
                k, sep, v = item.partition("=")
                if sep:
                    env.append((k, v))
    argv = [a.replace("$$", "$").replace("%%", "%") for a in argv]  # systemd's escapes of `$` and `%`
    argv = [a for a in argv if not re.fullmatch(r"[A-Za-z_][A-Za-z0-9_]*=.*", a)]  # `env X=1 python …`
    if argv and argv[0].endswith("/env"):
        argv = argv[1:]
    return _checked(Previous(source, tuple(argv), tuple(env)))


def previous_from_plan(plan: Plan, source: str) -> Previous:
    """The plan's launch, with what its planner rules added (see :class:`Previous`): a flag or env
    value counts as the rule's only as the rule wrote it (an operator who changed it chose it)."""
    flags = set(split_flags(plan.argv))
    derived: list[tuple[str, tuple[str, ...], str, str]] = []
    derived_env: list[tuple[str, str, str, str]] = []
    planner_rules = {rule.id for rule in engines.get(plan.engine).plan_rules()}  # what they add is derived
    for rule in plan.rules:
        if rule.id not in planner_rules:
            continue
        env_items = [a for a in rule.adds if _ENV_ITEM.fullmatch(a)]
        for key, _, value in (a.partition("=") for a in env_items):
            if plan.env.get(key) == value:
                derived_env.append((key, value, rule.id, rule.why))
        for name, values in split_flags([a for a in rule.adds if a not in env_items]):
            if (name, values) in flags:
                derived.append((name, values, rule.id, rule.why))
    return _checked(Previous(source, tuple(plan.argv), tuple(plan.env.items()), secret_env=tuple(plan.secret_env),
                             derived=tuple(derived), derived_env=tuple(derived_env)))


def load_previous(ref: str, stored: Callable[[str], Plan | None] | None = None) -> Previous:
    """A previous deployment: a stored one by name (`stored` looks it up), or a plan JSON or a
    systemd unit file on this machine. PlanError on anything else."""
    path = Path(ref)
    if not path.is_file():
        plan = stored(ref) if stored is not None and "/" not in ref else None
        if plan is not None:
            return previous_from_plan(plan, f"deployment {ref}")
        raise PlanError(f"--like {ref}: no such file, and no stored deployment of that name (give a "
                        "deployment name, a plan JSON or a systemd unit file)")
    try:
        text = path.read_text()
    except (OSError, UnicodeDecodeError) as exc:
        raise PlanError(f"--like {ref}: cannot read: {exc}") from None
    if text.lstrip().startswith("{"):
        try:
            doc = json.loads(text)
        except ValueError as exc:
            raise PlanError(f"--like {ref}: invalid JSON: {exc}") from None
        return previous_from_plan_json(doc, str(path.absolute()))
    return previous_from_unit(text, str(path.absolute()))  # (deploy reads its secrets there again)


def previous_from_plan_json(data: object, source: str) -> Previous:
    """The flags and env of a plan document, decoded through :class:`Plan` (its own checks)."""
    try:
        plan = Plan.from_json(data, source)
    except Invalid as exc:
        raise PlanError(f"--like {exc}") from None
    return previous_from_plan(plan, source)
