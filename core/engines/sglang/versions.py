"""What each SGLang release accepts, read from its wheel: launch flags, parser names, defaults.

The data is ``core/engines/sglang/data/sglang_versions.json``, written by ``extract/flags.py``
(rerun it to add releases). It is loaded on first use and cached. Versions gpuops has no data
for resolve to the newest known release at or below them (``resolve_version``).

``flags_for(v)`` are the option strings ``python -m sglang.launch_server`` declares (argparse
also accepts unique prefixes of long options: ``--tp`` for ``--tp-size``; ``match_flag`` answers
that). ``parse_help_flags`` reads the option strings back from the ``--help`` text of a real
host; options whose help SGLang suppresses (``hidden_flags``) are accepted but never listed there.
"""

from __future__ import annotations

import argparse
import functools
import json
import re
from collections.abc import Iterable
from pathlib import Path

__all__ = [
    "version_key", "known_versions", "newest_version", "resolve_version", "flags_for",
    "tool_call_parsers", "reasoning_parsers", "spec_v2_default", "spec_v2_env_retired", "bench_module",
    "parse_help_flags", "hidden_flags", "deprecated_flags", "choices_for", "nargs_for", "match_flag",
    "canonical_flag", "help_prog", "format_help", "DATA_FILE",
]

DATA_FILE = Path(__file__).resolve().parent / "data" / "sglang_versions.json"

_VERSION_RE = re.compile(
    r"^v?(?P<rel>\d+(?:\.\d+)*)"
    r"(?:[-_.]?(?P<pre>a|b|rc|dev)(?P<pren>\d*))?"
    r"(?:[-_.]?post(?P<post>\d*))?"
    r"(?:\.dev\d*)?"
    r"(?:\+[\w.]+)?$",
    re.IGNORECASE,
)
_STAGES = {"dev": -4, "a": -3, "b": -2, "rc": -1}


def version_key(v: str) -> tuple[int, ...]:
    """A sortable key: ``0.5.10`` > ``0.5.9``; ``0.5.23rc1`` < ``0.5.23`` < ``0.5.23.post1``.

    The release is padded to four parts, then (stage, n): dev/a/b/rc are negative stages with
    their number, a final release is (0, 0) and ``.postN`` is (0, N). A local part (``+cu124``)
    is ignored. ValueError for anything else.
    """
    if not isinstance(v, str):
        raise ValueError("not a version: %r" % (v,))
    m = _VERSION_RE.match(v.strip())
    if not m:
        raise ValueError("not a version: %r" % (v,))
    rel = [int(x) for x in m.group("rel").split(".")][:4]
    rel += [0] * (4 - len(rel))
    if m.group("pre"):
        return (*rel, _STAGES[m.group("pre").lower()], int(m.group("pren") or 0))
    return (*rel, 0, int(m.group("post") or 0))


# ------------------------------------------------------------------ the data


@functools.lru_cache(maxsize=1)
def _data() -> dict:
    with open(DATA_FILE, encoding="utf-8") as f:
        data = json.load(f)
    if data.get("schema") != 1 or not data.get("versions"):
        raise RuntimeError("%s: unexpected content (schema %r)" % (DATA_FILE, data.get("schema")))
    return data


@functools.lru_cache(maxsize=1)
def _expanded() -> dict[str, dict[str, dict]]:
    """Each known version's arguments in full ({first option string: spec})."""
    data = _data()["versions"]
    out: dict[str, dict[str, dict]] = {}
    args: dict[str, dict] = {}
    for v in sorted(data, key=version_key):
        entry = data[v]
        if "args" in entry:
            args = dict(entry["args"])
        else:
            args = dict(args)
            for k in entry.get("args_removed", ()):
                args.pop(k, None)
            args.update(entry.get("args_added", {}))
        out[v] = args
    return out


def known_versions() -> list[str]:
    """The versions with data, ascending."""
    return sorted(_data()["versions"], key=version_key)


def newest_version() -> str:
    return known_versions()[-1]


def resolve_version(v: str) -> str:
    """The known version whose data applies to V: the newest known at or below it (the newest
    known when V is newer than all, the oldest known when V is older than all)."""
    key = version_key(v)
    known = known_versions()
    best = known[0]
    for k in known:
        if version_key(k) <= key:
            best = k
    return best


def _entry(v: str) -> dict:
    return _data()["versions"][resolve_version(v)]


def _args(v: str) -> dict[str, dict]:
    return _expanded()[resolve_version(v)]


@functools.lru_cache(maxsize=64)
def _flags(version: str) -> frozenset[str]:
    out = {"-h", "--help"}  # argparse adds them to every parser
    for key, spec in _expanded()[version].items():
        out.update(spec.get("opts", (key,)))
    return frozenset(out)


def flags_for(v: str) -> frozenset[str]:
    """Every option string ``launch_server`` accepts in V, long and short (``-h``, ``--help``,
    ``--tp-size``, ``--tensor-parallel-size``, ...), hidden and deprecated ones included."""
    return _flags(resolve_version(v))


def hidden_flags(v: str) -> frozenset[str]:
    """Option strings V accepts but leaves out of ``--help`` (help=argparse.SUPPRESS)."""
    return frozenset(o for k, s in _args(v).items() if s.get("hidden") for o in s.get("opts", (k,)))


def deprecated_flags(v: str) -> dict[str, str | None]:
    """{deprecated option string: what its notice says to use instead (None: nothing named)}."""
    out: dict[str, str | None] = {}
    for k, s in _args(v).items():
        dep = s.get("deprecated")
        if dep:
            for o in s.get("opts", (k,)):
                out[o] = dep if isinstance(dep, str) else None
    return out


def removed_flag(flag: str, v: str) -> tuple[str, str | None] | None:
    """A flag V no longer has that an older version had: (the last version that had it, what the
    last deprecation notice it carried named instead, None when none did); None when V has it or no
    known version ever did."""
    if flag in flags_for(v):
        return None
    last: str | None = None
    instead: str | None = None
    for k in known_versions():
        if version_key(k) > version_key(resolve_version(v)):
            break
        if flag in flags_for(k):
            last = k
            notice = deprecated_flags(k).get(flag)
            instead = notice if notice else instead
    return (last, instead) if last is not None else None


def _spec(v: str, flag: str) -> dict | None:
    args = _args(v)
    if flag in args:
        return args[flag]
    for s in args.values():
        if flag in s.get("opts", ()):
            return s
    return None


def choices_for(v: str, flag: str) -> tuple[str, ...] | None:
    """The values V's argparse accepts for FLAG (any of its option strings), in SGLang's order;
    None when the flag is unknown, takes any value, or its choices are computed at run time."""
    s = _spec(v, flag)
    if s is None or "choices" not in s:
        return None
    return tuple(s["choices"])


def nargs_for(v: str, flag: str) -> int | str | None:
    """How many values FLAG takes in V: 0 (a switch), 1, or argparse's "?", "*", "+";
    None when V has no such option string."""
    s = _spec(v, flag)
    if s is None:
        return None if flag not in ("-h", "--help") else 0
    n = s.get("nargs")
    return 1 if n is None else n


def match_flag(flag: str, flags: Iterable[str], allow_abbrev: bool = True) -> str | None:
    """The option string argparse takes FLAG for among FLAGS (e.g. a host's ``--help`` flags):
    FLAG itself, or (``--opt=value`` accepted) the one long option it is a unique prefix of.
    None: unknown or ambiguous."""
    flags = flags if isinstance(flags, (set, frozenset)) else frozenset(flags)
    name = flag.split("=", 1)[0] if flag.startswith("--") else flag
    if name in flags:
        return name
    if not allow_abbrev or not name.startswith("--") or len(name) < 3:
        return None
    hits = [f for f in flags if f.startswith(name)]
    return hits[0] if len(hits) == 1 else None


def canonical_flag(v: str, flag: str) -> str | None:
    """``match_flag`` against V's flags: ``canonical_flag("0.5.23", "--tp") == "--tp-size"``."""
    return match_flag(flag, flags_for(v), _entry(v).get("allow_abbrev", True))


def tool_call_parsers(v: str) -> frozenset[str]:
    """The names ``--tool-call-parser`` accepts in V ("auto" from 0.5.12 on)."""
    return frozenset(_entry(v)["tool_call_parsers"])


def reasoning_parsers(v: str) -> frozenset[str]:
    """The names ``--reasoning-parser`` accepts in V ("auto" from 0.5.12 on)."""
    return frozenset(_entry(v)["reasoning_parsers"])


def spec_v2_default(v: str) -> bool | None:
    """The default of ``SGLANG_ENABLE_SPEC_V2`` in V's ``srt/environ.py``: False up to 0.5.10,
    True 0.5.11-0.5.13; None where the variable no longer exists (0.5.14 on: speculative
    decoding always runs the V2 worker, and setting it only earns a warning while
    ``spec_v2_env_retired``)."""
    return _entry(v)["spec_v2_default"]


def spec_v2_env_retired(v: str) -> bool:
    """True where V warns that ``SGLANG_ENABLE_SPEC_V2`` has been removed when it is set."""
    return bool(_entry(v).get("spec_v2_env_retired"))


def bench_module(v: str) -> str:
    """The module to run for SGLang's serving benchmark in V."""
    mods = _entry(v).get("bench_modules", ())
    return "sglang.benchmark.serving" if "sglang.benchmark.serving" in mods else "sglang.bench_serving"


def help_prog(v: str) -> str:
    """The program name V's ``launch_server --help`` prints in its usage line."""
    return _entry(v).get("prog") or "launch_server.py"


# ------------------------------------------------------------------ --help text


def format_help(v: str, width: int = 78) -> str:
    """``python -m sglang.launch_server --help`` as V prints it (argparse's own layout, option
    invocations only: no help sentences), at WIDTH columns (78: what argparse uses when its
    output is not a terminal and COLUMNS is unset)."""
    version = resolve_version(v)

    def formatter(prog: str) -> argparse.HelpFormatter:
        return argparse.HelpFormatter(prog, width=width)

    try:
        parser = argparse.ArgumentParser(prog=help_prog(version), formatter_class=formatter,
                                         color=False)  # type: ignore[call-arg]
    except TypeError:  # Python < 3.14: no color argument
        parser = argparse.ArgumentParser(prog=help_prog(version), formatter_class=formatter)
    for key, spec in sorted(_expanded()[version].items()):
        opts = spec.get("opts", [key])
        kwargs: dict = {}
        if spec.get("hidden"):
            kwargs["help"] = argparse.SUPPRESS
        if spec.get("required"):
            kwargs["required"] = True
        nargs = spec.get("nargs")
        if nargs == 0:
            kwargs["action"] = "store_true"
        else:
            if nargs is not None:
                kwargs["nargs"] = nargs
            if spec.get("choices") is not None:
                kwargs["choices"] = spec["choices"]
        try:
            parser.add_argument(*opts, **kwargs)
        except (argparse.ArgumentError, ValueError):  # a clash argparse refuses: keep what it can
            continue
    return parser.format_help()


_ANSI = re.compile(r"\x1b\[[0-9;]*[A-Za-z]")
_USAGE_OPT = re.compile(r"(?:^|(?<=[\s\[(|]))(--?[A-Za-z][\w.-]*)(?=[\s\]|)]|$)")


def parse_help_flags(text: str) -> frozenset[str]:
    """The option strings in argparse ``--help`` output (``python -m sglang.launch_server --help``).

    Reads the invocation lines of the option sections (``  --tp-size TP_SIZE, --tensor-parallel-size
    TP_SIZE``, ``  -h, --help``, ``  --quantization {awq,fp8,...}``; Python 3.13's ``  -t, --tp T``
    too) and the usage block (``usage: PROG [-h] [--tp-size TP_SIZE] ...`` over wrapped lines).
    Flags that help sentences merely mention are not counted.
    """
    text = _ANSI.sub("", text or "").replace("\r\n", "\n")
    out: set[str] = set()
    lines = text.split("\n")
    in_usage = False
    for line in lines:
        stripped = line.strip()
        if line.lower().startswith("usage:"):
            in_usage = True
            body = line[len("usage:"):]
        elif in_usage and line.startswith(" ") and stripped:
            body = line
        else:
            in_usage = False
            body = None
        if in_usage and body is not None:
            # metavars of choices ({a,b}) never start a token here: the lookbehind wants space or [ ( |
            out.update(_USAGE_OPT.findall(body))
            continue
        # an option's invocation: two spaces, a dash, then up to two spaces before its help
        if len(line) > 3 and line.startswith("  -") and line[3] not in " ":
            invocation = re.split(r"\s{2,}", line.strip(), maxsplit=1)[0]
            for part in invocation.split(", "):
                token = part.split(" ", 1)[0].split("=", 1)[0]
                if re.fullmatch(r"--?[A-Za-z0-9][\w.-]*", token):
                    out.add(token)
    return frozenset(out)
