"""What the operator changes on a plan after the planner made it: one line each, as typed on plan
review (or given to a script), validated before it changes anything.

    name N · port N · tp N · gpus 0,1 · mem 0.85 · bind 0.0.0.0     the planner's own choices
    nodes H2[,H3…] · nodes -                                        more hosts: one server over several
                                                                    nodes (this host is node 0); - back to one
    replicas K [H2,…] · replicas -                                  K servers behind the router (on this
                                                                    host's GPUs, or round it and H2…); - one
    policy P · policy -                                             how the router spreads the requests
                                                                    (its --policy); - its default
    flag --NAME [VALUE…] · -flag --NAME                             add/alter or drop a server flag
    env NAME=VALUE · -env NAME                                      set or drop an environment variable

The first group goes back through the planner (it re-checks the fit, the port, the GPUs); flags and
env are applied to the plan it makes, every time it makes one, and the rule list shows them as "set
by you". The flags the planner owns (``--port``, ``--tp-size``, ``--host``, …) are refused as
flags: each has its own word above (or is derived). A flag the host's engine does not know is
refused, as is anything a shell, a unit or a screen could not hold (the plan's own validation)."""

from __future__ import annotations

import re
import shlex
from dataclasses import dataclass
from ipaddress import ip_address
from typing import Any, Callable, Sequence

from ..domain import Invalid, Plan, RuleFired, join_flags, split_flags
from . import PlanError
from .. import engines
from .plan import recheck_startup

WORDS = ("name", "port", "tp", "gpus", "mem", "bind", "nodes", "replicas", "policy", "flag", "-flag", "env", "-env")
_OWNED_HINT = {"--port": "port N", "--tp-size": "tp N", "--tp": "tp N", "--host": "bind ADDRESS",
               "--mem-fraction-static": "mem FRACTION", "--served-model-name": "name N (or --like)",
               "--api-key": "bind beyond loopback (gpuops keeps the key)"}
MAX_REPLICAS = 16  # the most replicas the edit asks for
_ENV_NAME = re.compile(r"[A-Za-z_][A-Za-z0-9_]*")
_FLAG = re.compile(r"--[a-z0-9][a-z0-9-]*")


class EditError(PlanError):
    """An edit that cannot be made; one line, nothing changed."""


@dataclass(frozen=True)
class Edit:
    """One of the operator's changes to flags or env (the planner's own choices are Wishes)."""

    op: str  # "flag" | "-flag" | "env" | "-env"
    name: str
    values: tuple[str, ...] = ()

    def text(self) -> str:
        if self.op == "env":
            return f"{self.name}={self.values[0]}"
        if self.op == "-env":
            return f"-{self.name}"
        return ("-" if self.op == "-flag" else "") + " ".join([self.name, *self.values])


def _name(args: list[str]) -> tuple[str, Any]:
    from ..config import validate_host_name

    try:
        return "wish", {"name": validate_host_name(args[0])}
    except ValueError as exc:
        raise EditError(f"name: {exc}") from None


def _port(args: list[str]) -> tuple[str, Any]:
    if not args[0].isdigit() or not 1024 <= int(args[0]) <= 65535:
        raise EditError(f"port: a number 1024..65535, not {args[0]!r}")
    return "wish", {"port": int(args[0])}


def _tp(args: list[str]) -> tuple[str, Any]:
    if not args[0].isdigit() or not 1 <= int(args[0]) <= 64:
        raise EditError(f"tp: a number 1..64, not {args[0]!r}")
    return "wish", {"tp": int(args[0]), "gpu_ids": None}


def _gpus(args: list[str]) -> tuple[str, Any]:
    try:
        ids = tuple(int(x) for x in args[0].split(","))
    except ValueError:
        raise EditError(f"gpus: GPU indexes such as 0,1,2,3, not {args[0]!r}") from None
    if any(i < 0 for i in ids) or len(set(ids)) != len(ids):
        raise EditError(f"gpus: distinct GPU indexes, not {args[0]!r}")
    return "wish", {"gpu_ids": ids, "tp": len(ids)}


def _replicas(args: list[str]) -> tuple[str, Any]:
    if args == ["-"]:
        return "replicas", (0, ())
    if not 1 <= len(args) <= 2 or not args[0].isdigit() or not 2 <= int(args[0]) <= MAX_REPLICAS:
        raise EditError(f"replicas takes a count 2..{MAX_REPLICAS} and the other hosts if any (replicas 2, "
                        "replicas 4 gpu2,gpu3), or - for one server")
    return "replicas", (int(args[0]), _nodes(args[1:], "replicas") if len(args) == 2 else ())


def _mem(args: list[str]) -> tuple[str, Any]:
    try:
        frac = float(args[0])
    except ValueError:
        frac = -1.0
    if not 0.3 <= frac <= 0.97:
        raise EditError(f"mem: the static memory fraction, 0.3..0.97, not {args[0]!r}")
    return "wish", {"mem_fraction_static": frac}


def _policy(args: list[str]) -> tuple[str, Any]:
    """The replicas' router's --policy (the planner checks the engine's routers accept it); - its default."""
    if args[0] == "-":
        return "wish", {"router_policy": None}
    if not re.fullmatch(r"[a-z][a-z0-9_]{0,39}", args[0]):
        raise EditError(f"policy: a routing policy's name (round_robin, cache_aware, …), not {args[0]!r}")
    return "wish", {"router_policy": args[0]}


def _bind(args: list[str]) -> tuple[str, Any]:
    try:
        ip_address(args[0])
    except ValueError:
        raise EditError(f"bind: an IP address such as 127.0.0.1 or 0.0.0.0, not {args[0]!r}") from None
    return "bind", args[0]


def _env(word: str, args: list[str]) -> tuple[str, Any]:
    """`env NAME=VALUE`, `-env NAME`."""
    if len(args) != 1:
        raise EditError(f"{word} takes {'NAME=VALUE' if word == 'env' else 'NAME'}")
    name, sep, value = args[0].partition("=")
    if not _ENV_NAME.fullmatch(name) or (word == "env" and not sep) or (word == "-env" and sep):
        raise EditError(f"{word}: {'NAME=VALUE' if word == 'env' else 'NAME'} with a POSIX name, not {args[0]!r}")
    return "edit", Edit(word, name, (value,) if word == "env" else ())


def _a(word: str) -> str:
    """`word` with its article, its first letter said by its name as a title in capitals is (an S…, a v…)."""
    return f"{'an' if word[:1].upper() in 'AEFHILMNORSX' else 'a'} {word}"


def _flag(word: str, args: list[str], known_flags: frozenset[str] | None, engine: str) -> tuple[str, Any]:
    """`flag --NAME [VALUE…]`, `-flag --NAME`: never one the planner owns; `flag` one the host knows."""
    if not args or not _FLAG.fullmatch(args[0]):
        raise EditError(f"{word}: {_a(engines.get(engine).title)} flag such as --chunked-prefill-size, not {' '.join(args) or 'nothing'}")
    name = args[0]
    if name in engines.get(engine).owned_flags or name in _OWNED_HINT:
        hint = _OWNED_HINT.get(name)
        raise EditError(f"{name} is the planner's" + (f": use `{hint}`" if hint else " (derived from the model)"))
    if word == "flag" and known_flags is not None and name not in known_flags:
        raise EditError(f"{name}: this host's {engines.get(engine).title} has no such flag")
    if word == "-flag" and len(args) > 1:
        raise EditError("-flag takes only the flag's name")
    return "edit", Edit(word, name, tuple(args[1:]))


# the words of one value each, and what reads it
_ONE_VALUE: dict[str, Callable[[list[str]], tuple[str, Any]]] = {
    "name": _name, "port": _port, "tp": _tp, "mem": _mem, "bind": _bind, "gpus": _gpus, "policy": _policy}


def parse(line: str, known_flags: frozenset[str] | None = None, engine: str = engines.DEFAULT) -> tuple[str, Any]:
    """One typed edit: ("wish", {field: value}) for the planner's choices, ("bind", address),
    ("nodes", (host, …)) for the other nodes of a multi-node plan (empty: one host again), ("replicas",
    (K, (host, …))) for K servers behind a router on this host and those (K 0: one server again),
    ("edit", Edit) for a flag or env change; EditError (one line) for anything else."""
    try:
        words = shlex.split(line)
    except ValueError as exc:
        raise EditError(f"cannot read {line!r}: {exc}") from None
    if not words:
        raise EditError("nothing to change")
    word, args = words[0].lower(), words[1:]
    if word not in WORDS:
        raise EditError(f"unknown change {word!r}: one of {', '.join(WORDS)}")
    if word in _ONE_VALUE:
        if len(args) != 1:
            raise EditError(f"{word} takes one value")
        return _ONE_VALUE[word](args)
    if word == "nodes":
        return "nodes", _nodes(args)
    if word == "replicas":
        return _replicas(args)
    if word in ("env", "-env"):
        return _env(word, args)
    return _flag(word, args, known_flags, engine)


def _nodes(args: list[str], word: str = "nodes") -> tuple[str, ...]:
    """`nodes gpu2,gpu3`: the inventory names of the other nodes, each once; `nodes -`: none. (Also
    the other hosts of `replicas K H2,…`.)"""
    from ..config import validate_host_name

    if len(args) != 1:
        raise EditError("nodes takes the other hosts, comma-separated (nodes gpu2,gpu3), or - for one host")
    if args[0] == "-" and word == "nodes":
        return ()
    names = tuple(n.strip() for n in args[0].split(","))
    try:
        names = tuple(validate_host_name(n) for n in names)
    except ValueError as exc:
        raise EditError(f"{word}: {exc}") from None
    if len(set(names)) != len(names):
        raise EditError(f"{word}: each host once, not {args[0]}")
    return names


def apply(plan: Plan, edits: Sequence[Edit], facts: Any = None) -> Plan:
    """`plan` with the operator's flag and env edits (later ones win), shown as the rule "you". A
    router's are its replicas' (the engine's flags and env; the router's own are the planner's).
    With the model's `facts`, the start-up reserve is checked again for the edited flags."""
    if not edits:
        return plan
    if plan.replicas:
        replicas = [apply(r, edits, facts) for r in plan.replicas]
        try:
            return plan.replace(replicas=replicas, rules=[*plan.rules, replicas[0].rules[-1]])
        except Invalid as exc:
            raise EditError(str(exc)) from None
    flags = split_flags(plan.argv)
    env = dict(plan.env)
    adds: list[str] = []
    removes: list[str] = []
    for e in edits:
        if e.op == "flag":
            flags = [f for f in flags if f[0] != e.name] + [(e.name, e.values)]
            adds.append(" ".join([e.name, *e.values]))
        elif e.op == "-flag":  # (a rebuild that no longer adds it: nothing to drop)
            if any(f[0] == e.name for f in flags):
                flags = [f for f in flags if f[0] != e.name]
                removes.append(e.name)
        elif e.op == "env":
            env[e.name] = e.values[0]
            adds.append(f"{e.name}={e.values[0]}")
        elif e.op == "-env" and e.name in env:
            del env[e.name]
            removes.append(e.name)
    rule = RuleFired(id="you", why="set by you", adds=adds, removes=removes)
    try:
        edited = plan.replace(argv=join_flags(flags), env=env, rules=[*plan.rules, rule])
    except Invalid as exc:
        raise EditError(str(exc)) from None
    return edited if facts is None else recheck_startup(plan, edited, facts)


def with_edit(plan: Plan, edits: Sequence[Edit], new: Edit) -> list[Edit]:
    """The edit list with `new` replacing any earlier edit of the same flag or variable; dropping
    what `plan` (the plan as shown; a router's: its replicas') does not have is an EditError."""
    if plan.replicas:
        plan = plan.replicas[0]
    if new.op == "-flag" and not any(f[0] == new.name for f in split_flags(plan.argv)):
        raise EditError(f"-flag {new.name}: the plan has no {new.name}")
    if new.op == "-env" and new.name not in plan.env:
        raise EditError(f"-env {new.name}: the plan sets no {new.name}")
    return [e for e in edits if e.name != new.name] + [new]


__all__ = ["Edit", "EditError", "WORDS", "apply", "parse", "with_edit"]
