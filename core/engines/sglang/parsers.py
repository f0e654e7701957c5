"""Which reasoning and tool-call parsers fit a model, judged by the tokens each parser's detector
looks for (``data/sglang_parsers.json``, read from each version's wheel by
:mod:`gpuops.core.engines.sglang.extract.parsers`) against the special tokens the model's own chat
template writes (:attr:`ModelFacts.chat_atoms`).

A parser fits when every special token of what its detector waits for (a reasoning parser's start
and end of thinking, a tool-call parser's start of calls) is one the template writes or the
tokenizer declares. The family's parser (SGLang's cookbook, :data:`flag_rules.PARSERS`) is kept when
it fits, or when the template is not known; else the one parser that fits, or SGLang's ``auto``
(from 0.5.12 it picks from the template itself when the server starts) where several fit alike,
or none, with the reason.
"""

from __future__ import annotations

import functools
import json
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from ...planning.model_facts import ModelFacts, chat_atoms
from . import versions as sv
from .versions import version_key

DATA = Path(__file__).resolve().parent / "data" / "sglang_parsers.json"
REASONING, TOOLS = "reasoning", "tools"
_TOKENS = {REASONING: ("think_start_token", "think_end_token"), TOOLS: ("start",)}
_WHAT = {REASONING: "reasoning", TOOLS: "tool-call"}


@functools.lru_cache(maxsize=1)
def _data() -> dict[str, Any]:
    data: dict[str, Any] = json.loads(DATA.read_text(encoding="utf-8"))
    return data


@dataclass(frozen=True)
class Detector:
    """What one parser of one version waits for in the output, and where that was read."""

    name: str
    cls: str
    source: str  # "<file>:<line>" in the wheel
    tokens: tuple[str, ...]  # its start (and, thinking, end) token; empty: computed at run time, or none
    computed: bool

    @functools.cached_property
    def atoms(self) -> frozenset[str]:
        found: set[str] = set()
        for token in self.tokens:
            found |= chat_atoms(token)
        return frozenset(found)


@functools.lru_cache(maxsize=4096)
def detector(kind: str, name: str, version: str) -> Detector | None:
    """Parser `name` of `kind` (REASONING or TOOLS) as the wheel of `version` (or the newest known
    version before it) builds it; None when that version has no such parser."""
    spans = _data()[kind].get(name) or []
    v = version_key(sv.resolve_version(version))
    for span in spans:
        if version_key(span["since"]) <= v <= version_key(span["until"]):
            tokens = tuple(t for t in (span.get(f) for f in _TOKENS[kind]) if isinstance(t, str) and t)
            return Detector(name, span["class"], span["source"], tokens, bool(span.get("computed")))
    return None


@functools.lru_cache(maxsize=64)
def detectors(kind: str, version: str) -> tuple[Detector, ...]:
    out = []
    for name in sorted(_data()[kind]):
        d = detector(kind, name, version)
        if d is not None:
            out.append(d)
    return tuple(out)


def fits(d: Detector, atoms: frozenset[str]) -> bool | None:
    """Whether the template writes every special token `d` waits for (None: `d`'s tokens hold no
    special token to judge by: computed at run time, or plain text)."""
    need = d.atoms
    if not need:
        return None
    return need <= atoms


@dataclass(frozen=True)
class Choice:
    name: str | None
    why: str
    warning: str | None = None  # something the operator should know (a family's parser the template does not fit)


def _tokens_text(d: Detector) -> str:
    """Its tokens as one line (a token may hold a newline: Qwen's "<tool_call>\\n")."""
    return " … ".join(" ".join(t.split()) for t in d.tokens)


def _unchecked(kind: str, choice: str | None, version: str, why: str) -> Choice:
    """A choice with no chat template to check it against: the rule's, when the version has it."""
    if choice is None:
        return Choice(None, "no chat template read and no family rule")
    if detector(kind, choice, version) is None:
        return Choice(None, f"{choice} is not a {_WHAT[kind]} parser of SGLang {version}")
    return Choice(choice, why)


def choose(kind: str, family_choice: str | None, facts: ModelFacts, version: str, label: str | None = None) -> Choice:
    """The parser of `kind` for `facts` on `version` (see the module's text); `label`: where
    `family_choice` comes from (by default, its family's rule)."""
    what = _WHAT[kind]
    owner = label or f"the {facts.family} family's"
    if facts.chat_atoms is None:
        return _unchecked(kind, family_choice, version, f"{label}; no chat template read to check it against" if label
                          else f"{owner} (cookbook; no chat template read to check it against)")
    label = label or f"{owner} (cookbook)"
    atoms = frozenset(facts.chat_atoms)
    warning = None
    if family_choice is not None:
        d = detector(kind, family_choice, version)
        if d is not None:
            ok = fits(d, atoms)
            if ok is not False:
                checked = (f"the chat template writes {_tokens_text(d)} ({d.cls}, {d.source})" if ok
                           else f"{d.cls} waits for no special token to check")
                return Choice(family_choice, f"{label}; {checked}")
            warning = (f"{owner} {what} parser {family_choice} waits for {_tokens_text(d)} "
                       f"({d.cls}, {d.source}), which {facts.id}'s chat template never writes")
    fitting = [d for d in detectors(kind, version) if fits(d, atoms)]
    signatures = {d.atoms for d in fitting}
    if fitting and len(signatures) == 1 and len({d.cls for d in fitting}) == 1:
        d = fitting[0]
        names = ", ".join(x.name for x in fitting)
        return Choice(d.name, f"the chat template writes {_tokens_text(d)}, which only {names} "
                              f"({d.cls}, {d.source}) waits for", warning)
    known = sv.reasoning_parsers(version) if kind == REASONING else sv.tool_call_parsers(version)
    if fitting and "auto" in known:
        return Choice("auto", f"{len(fitting)} {what} parsers fit the chat template's tokens "
                              f"({', '.join(d.name for d in fitting[:6])}{'…' if len(fitting) > 6 else ''}): SGLang "
                              f"{version} picks among them from the template when the server starts", warning)
    if fitting:
        return Choice(None, f"{len(fitting)} {what} parsers fit the chat template's tokens "
                            f"({', '.join(d.name for d in fitting[:6])}) and SGLang {version} has no auto: "
                            f"name one with --{'reasoning' if kind == REASONING else 'tool-call'}-parser", warning)
    return Choice(None, f"no {what} parser of SGLang {version} waits for a token the chat template writes", warning)
