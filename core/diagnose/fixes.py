"""Apply a finding's fix to a plan: a checked ``plan_patch`` on a copy of the plan, with its diff.

A fix that is a plan change (:class:`gpuops.core.domain.Fix` with ``applicable``) carries a
``plan_patch``, a JSON object with any of these keys and nothing else::

    {"set_flags":    {"--mem-fraction-static": ["0.85"], "--enable-metrics": []},
     "remove_flags": ["--disable-radix-cache"],
     "set_env":      {"NCCL_DEBUG": "INFO"},
     "unset_env":    ["NCCL_P2P_DISABLE"],
     "port":         30001}

- ``set_flags``: a launch flag and its values (``[]``: a switch). An existing flag is replaced
  where it stands (a repeated one keeps its first place); a new one goes to the end.
- ``remove_flags``: flags to drop (every occurrence); one the plan lacks is no change.
- ``set_env`` / ``unset_env``: the server's environment (the plan's ``env``).
- ``port``: the server port, set in both the plan's ``port`` and its ``--port`` flag (so
  ``--port`` itself is refused in the flag lists, as is ``--api-key``: secrets never go in argv).

Flag names are ``--[a-z0-9-]+``, environment names ``[A-Za-z_][A-Za-z0-9_]*``, values strings
without newlines or NUL; a flag or variable may not be both set and removed. Anything else is a
ValueError with one line saying what, and nothing is applied. The input plan is never changed.
"""

from __future__ import annotations

import re
from typing import Any, Callable

from ..domain import Invalid, Plan, RuleFired, join_flags, split_flags

__all__ = ["PATCH_KEYS", "validate_patch", "apply_patch", "describe_patch"]

PATCH_KEYS = ("set_flags", "remove_flags", "set_env", "unset_env", "port")
_FLAG_RE = re.compile(r"--[a-z0-9][a-z0-9-]*")
_ENV_RE = re.compile(r"[A-Za-z_][A-Za-z0-9_]*")
_REFUSED_FLAGS = {"--port": 'set the port with the patch\'s "port"', "--api-key": "secrets never go in argv"}
# Flags the plan's fit was computed from: changing them leaves the fit figures behind.
_FIT_FLAGS = ("--mem-fraction-static", "--context-length", "--max-running-requests", "--tp-size")


def _value(v: object, where: str) -> str:
    if not isinstance(v, str):
        raise ValueError(f"plan_patch {where}: values must be strings, not {type(v).__name__}")
    if "\n" in v or "\r" in v or "\x00" in v:
        raise ValueError(f"plan_patch {where}: a value may not contain a newline or NUL")
    return v


def _flag(name: object, where: str) -> str:
    if not isinstance(name, str) or not _FLAG_RE.fullmatch(name):
        raise ValueError(f"plan_patch {where}: {name!r} is not a flag name (--[a-z0-9-]+)")
    if name in _REFUSED_FLAGS:
        raise ValueError(f"plan_patch {where}: {name} cannot be patched ({_REFUSED_FLAGS[name]})")
    return name


def _env_name(name: object, where: str) -> str:
    if not isinstance(name, str) or not _ENV_RE.fullmatch(name):
        raise ValueError(f"plan_patch {where}: {name!r} is not an environment variable name")
    return name


def _names(items: object, where: str, check: Callable[[object, str], str]) -> list[str]:
    if not isinstance(items, list):
        raise ValueError(f"plan_patch {where} must be a list")
    return [check(x, where) for x in items]


def validate_patch(patch: object) -> dict[str, Any]:
    """The patch, checked and normalized (every key present). ValueError when it is not one."""
    if not isinstance(patch, dict):
        raise ValueError("a plan_patch must be a JSON object")
    unknown = sorted(set(patch) - set(PATCH_KEYS))
    if unknown:
        raise ValueError(f"plan_patch: unknown key(s) {', '.join(unknown)} (allowed: {', '.join(PATCH_KEYS)})")
    set_flags = patch.get("set_flags") or {}
    set_env = patch.get("set_env") or {}
    if not isinstance(set_flags, dict) or not isinstance(set_env, dict):
        raise ValueError("plan_patch set_flags and set_env must be objects")
    out: dict[str, Any] = {"set_flags": {}, "set_env": {}, "port": None}
    for name, values in set_flags.items():
        where = f"set_flags {name}"
        _flag(name, "set_flags")
        if not isinstance(values, list):
            raise ValueError(f"plan_patch {where}: values must be a list ([] for a switch)")
        out["set_flags"][name] = [_value(v, where) for v in values]
    out["remove_flags"] = _names(patch.get("remove_flags") or [], "remove_flags", _flag)
    for name, value in set_env.items():
        out["set_env"][_env_name(name, "set_env")] = _value(value, f"set_env {name}")
    out["unset_env"] = _names(patch.get("unset_env") or [], "unset_env", _env_name)
    both = sorted(set(out["set_flags"]) & set(out["remove_flags"])) + sorted(set(out["set_env"]) & set(out["unset_env"]))
    if both:
        raise ValueError(f"plan_patch: {', '.join(both)} both set and removed")
    port = patch.get("port")
    if port is not None:
        if isinstance(port, bool) or not isinstance(port, int) or not 1 <= port <= 65535:
            raise ValueError(f"plan_patch port must be an integer 1..65535, not {port!r}")
        out["port"] = port
    return out


def describe_patch(patch: dict[str, Any]) -> str:
    """One line for a fix's summary: ``set --mem-fraction-static 0.85; set NCCL_DEBUG=INFO``."""
    p = validate_patch(patch)
    parts = [" ".join(["set", name, *values]) for name, values in p["set_flags"].items()]
    parts += [f"remove {name}" for name in p["remove_flags"]]
    parts += [f"set {k}={v}" for k, v in p["set_env"].items()]
    parts += [f"unset {k}" for k in p["unset_env"]]
    if p["port"] is not None:
        parts.append(f"port {p['port']}")
    return "; ".join(parts)


def _show(name: str, values: tuple[str, ...] | list[str]) -> str:
    return " ".join([name, *values])


def _patch_flags(flags: list[tuple[str, tuple[str, ...]]], p: dict[str, Any], wanted: dict[str, list[str]],
                 diff: list[tuple[str, str]], adds: list[str], removes: list[str]) -> list[tuple[str, tuple[str, ...]]]:
    """`flags` without the patch's removed flags and with its set ones (each in the place of its first
    occurrence, or last); every change into `diff`, `adds` and `removes`."""
    for name in p["remove_flags"]:
        for n, have in flags:
            if n == name:
                diff.append(("-", _show(n, have)))
                removes.extend([n, *have])
        flags = [f for f in flags if f[0] != name]
    for name, values in wanted.items():
        where = [i for i, (n, _) in enumerate(flags) if n == name]
        if where and [list(flags[i][1]) for i in where] == [values]:
            continue
        for i in where:
            diff.append(("-", _show(*flags[i])))
            removes.extend([flags[i][0], *flags[i][1]])
        diff.append(("+", _show(name, values)))
        adds.extend([name, *values])
        if where:
            flags[where[0]] = (name, tuple(values))
            flags = [f for i, f in enumerate(flags) if i not in where[1:]]
        else:
            flags.append((name, tuple(values)))
    return flags


def _patch_env(env: dict[str, str], p: dict[str, Any], diff: list[tuple[str, str]], adds: list[str],
               removes: list[str]) -> dict[str, str]:
    """`env` without the patch's unset variables and with its set ones; every change into `diff`,
    `adds` and `removes`."""
    new_env = dict(env)
    for key in p["unset_env"]:
        if key in new_env:
            old = f"{key}={new_env.pop(key)}"
            diff.append(("-", old))
            removes.append(old)
    for key, value in p["set_env"].items():
        if new_env.get(key) == value:
            continue
        if key in new_env:
            diff.append(("-", f"{key}={new_env[key]}"))
        diff.append(("+", f"{key}={value}"))
        adds.append(f"{key}={value}")
        new_env[key] = value
    return new_env


def apply_patch(plan: Plan, patch: dict[str, Any], *, why: str | None = None) -> tuple[Plan, list[tuple[str, str]]]:
    """(the new plan, its diff). The diff lists every change as ("-", old) / ("+", new) lines:
    ``--flag values`` for argv, ``NAME=value`` for the environment; an empty diff means the patch
    changes nothing in this plan (the plan itself comes back). When something changed, the plan's
    ``rules`` gain ``fix`` (WHY) so every flag still says which rule put it there. The input plan
    is never changed; the new one is validated like any plan."""
    p = validate_patch(patch)
    diff: list[tuple[str, str]] = []
    adds: list[str] = []
    removes: list[str] = []
    wanted = dict(p["set_flags"])
    if p["port"] is not None:
        wanted["--port"] = [str(p["port"])]
    flags = _patch_flags(split_flags(plan.argv), p, wanted, diff, adds, removes)
    new_env = _patch_env(plan.env, p, diff, adds, removes)
    if not diff:
        return plan, diff
    warnings = list(plan.warnings)
    touched = [f for f in _FIT_FLAGS if f in wanted or f in p["remove_flags"]]
    if touched:
        warnings.append(f"a fix changed {', '.join(touched)}: the fit figures are from before it")
    try:
        new = plan.replace(argv=join_flags(flags), env=new_env, port=p["port"] if p["port"] is not None else plan.port,
                           rules=[*plan.rules, RuleFired("fix", why or "a triage fix", adds, removes)],
                           warnings=warnings)
    except Invalid as exc:
        raise ValueError(f"plan_patch: {exc}") from None
    return new, diff
