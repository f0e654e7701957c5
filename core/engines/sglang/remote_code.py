"""Whether a checkpoint needs ``--trust-remote-code`` on a given SGLang version, and why.

SGLang reads a model's config and tokenizer through transformers (the release its wheel pins), after
registering config classes of its own; transformers runs the Python a checkpoint ships (its
``auto_map``) only with ``trust_remote_code``, and only for what it cannot read itself. So the flag
is needed where, for that version:

* the config's ``model_type`` is neither transformers' nor SGLang's own, and ``auto_map`` names a
  config class (else the config cannot be read at all: said as a warning);
* the ``tokenizer_class`` of tokenizer_config.json is no transformers class and its ``auto_map``
  names one (Kimi-K2's TikToken tokenizer);
* SGLang has no model for the architecture (its transformers fallback builds the model) and
  transformers has none for the ``model_type`` either, and ``auto_map`` names the model's code.

The sets come from the wheels: ``data/sglang_configs.json`` (``extract/remote_code.py``), the
architectures from ``data/sglang_models.json``.
"""

from __future__ import annotations

import functools
import json
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from . import models
from .versions import resolve_version, version_key

DATA = Path(__file__).resolve().parent / "data" / "sglang_configs.json"
_MODEL_KEYS = ("AutoModel", "AutoModelForCausalLM", "AutoModelForImageTextToText", "AutoModelForVision2Seq")


@functools.cache
def _data() -> dict[str, Any]:
    data: dict[str, Any] = json.loads(DATA.read_text(encoding="utf-8"))
    return data


def _names(section: str, version: str, key: str) -> frozenset[str]:
    """`key`'s names for `version` of `section` ("sglang" or "transformers"): the first version's list
    with each later version's additions and removals applied, up to `version`."""
    entries = _data()[section]
    out: set[str] = set()
    for v in sorted(entries, key=version_key):
        if version_key(v) > version_key(version):
            break
        e = entries[v]
        if key in e:
            out = set(e[key])
        out |= set(e.get(f"{key}_added", ()))
        out -= set(e.get(f"{key}_removed", ()))
    return frozenset(out)


@functools.cache
def transformers_of(version: str) -> str | None:
    """The transformers release SGLang `version` pins (as the known version its data resolves to)."""
    pin: str | None = _data()["sglang"].get(resolve_version(version), {}).get("transformers")
    return pin


@functools.cache
def config_types(version: str) -> frozenset[str]:
    """The model types SGLang `version` reads, its own and its transformers'."""
    own = _names("sglang", resolve_version(version), "config_types")
    tf = transformers_of(version)
    return own | (_names("transformers", tf, "model_types") if tf else frozenset())


@functools.cache
def tokenizer_classes(version: str) -> frozenset[str]:
    tf = transformers_of(version)
    return _names("transformers", tf, "tokenizer_classes") if tf else frozenset()


def _files(entries: tuple[tuple[str, str], ...], keys: tuple[str, ...] | None = None) -> list[str]:
    """The checkpoint's Python files the auto_map entries (of `keys`) name, in their order."""
    out: list[str] = []
    for key, ref in entries:
        if keys is not None and key not in keys:
            continue
        if ref == "?":
            name = "its own code"
        else:
            module = ref.split("--", 1)[-1].rsplit(".", 1)[0]
            name = module.replace(".", "/") + ".py"
        if name not in out:
            out.append(name)
    return out


@dataclass(frozen=True)
class RemoteCode:
    """What the checkpoint needs of `--trust-remote-code` on one SGLang version."""

    needed: bool
    reasons: tuple[str, ...]  # why it is needed, one per part that needs it
    files: tuple[str, ...]  # the checkpoint's Python files that would run
    unreadable: str | None = None  # a config SGLang cannot read at all, and why


def remote_code(facts: Any, version: str) -> RemoteCode:
    """See the module docstring. `facts`: a planning ModelFacts."""
    v = resolve_version(version)
    tf = transformers_of(v)
    where = f"transformers {tf} (SGLang {v}'s)" if tf else f"SGLang {v}'s transformers"
    reasons: list[str] = []
    files: list[str] = []
    unreadable = None
    model_type = facts.model_type
    known_type = model_type is None or model_type in config_types(v)
    if not known_type:
        code = _files(facts.auto_map, ("AutoConfig",))
        if code:
            reasons.append(f"its model_type {model_type!r} is known neither to {where} nor to SGLang itself: "
                           f"the config is read with {', '.join(code)}")
            files += code
        else:
            unreadable = (f"SGLang {v} cannot read its config: model_type {model_type!r} is known neither to {where} "
                          "nor to SGLang itself, and the checkpoint ships no code for it (plan for a newer version)")
    tok = facts.tokenizer_class
    if tok and facts.tokenizer_auto_map:
        classes = tokenizer_classes(v)
        if classes and tok not in classes and tok.removesuffix("Fast") not in classes:
            code = _files(facts.tokenizer_auto_map, ("AutoTokenizer",))
            if code:
                reasons.append(f"its tokenizer class {tok} is no {where} class: it is loaded from {', '.join(code)}")
                files += code
    arch = facts.architecture
    if arch and models.served(arch, v) is None and not known_type:
        code = _files(facts.auto_map, _MODEL_KEYS)
        if code:
            reasons.append(f"SGLang {v} has no model for {arch} and {where} none for {model_type!r}: its transformers "
                           f"fallback builds the model from {', '.join(code)}")
            files += code
    unique = tuple(dict.fromkeys(files))
    return RemoteCode(bool(reasons), tuple(reasons), unique, unreadable)
