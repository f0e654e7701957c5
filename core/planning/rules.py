"""What the planner's flag rules are: each flag of a plan comes from a rule (an id, when it applies,
what it adds, why). The rules themselves are the engine's (``Engine.plan_rules``, in each engine's
package under ``core/engines/``); the planner fires them in order over a :class:`Ctx`."""

from __future__ import annotations

from dataclasses import dataclass
from typing import TYPE_CHECKING, Any, Callable, Sequence

if TYPE_CHECKING:
    from .model_facts import ModelFacts
    from .inputs import Target, Wishes

__all__ = ["Ctx", "Rule"]


@dataclass
class Ctx:
    """What a rule sees while the plan is built."""

    facts: ModelFacts
    target: Target
    wishes: Wishes
    version: str
    flags: frozenset[str]
    tp: int
    gpu_ids: tuple[int, ...]
    model_path: str
    spec: bool = False  # speculative decoding is on (set by the mtp rule)
    official: Any = None  # the engine's published command for these GPUs (Engine.official), or None

    def has(self, flag: str) -> bool:
        return flag in self.flags


@dataclass(frozen=True)
class Rule:
    id: str
    when: Callable[[Ctx], bool]
    flags: Callable[[Ctx], Sequence[tuple[str, Sequence[str]]]]
    why: Callable[[Ctx], str]
    env: Callable[[Ctx], dict[str, str]] = lambda ctx: {}
