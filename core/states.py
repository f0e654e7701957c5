"""gpuops' deployment states, and among them its start-up phases: the states a deployment passes
through between "downloading" and "ready". They are gpuops' vocabulary, carried by the store and
every ``--json`` document, so they never change; an engine maps its own phases onto them
(``Engine.state_of``: the first engine gpuops knew named its phases so).

:class:`State` is a ``StrEnum``: a member is its own name as a ``str`` (``State.CRASHED ==
"crashed"``, the same key in a dict, the same text in JSON and the store), so a state read back
as a plain string compares equal to it."""

from __future__ import annotations

import sys
from enum import Enum

__all__ = ["LIVE_STATES", "PHASES", "STATES", "State"]

if sys.version_info >= (3, 11):
    from enum import StrEnum
else:  # pragma: no cover  (Python 3.10: the same behaviour, by hand)
    class StrEnum(str, Enum):
        __str__ = str.__str__
        __format__ = str.__format__


class State(StrEnum):
    """A deployment's state (``Deployment.state``, ``StateEvent.state``), in the order a start goes."""

    PLANNED = "planned"
    DOWNLOADING = "downloading"
    STARTING = "starting"
    DIST_INIT = "dist_init"
    WEIGHTS = "weights"
    KV_CACHE = "kv_cache"
    CUDA_GRAPH = "cuda_graph"
    DRAFT = "draft"
    HTTP = "http"
    READY = "ready"
    CRASHED = "crashed"
    STALLED = "stalled"
    STOPPED = "stopped"


# the start-up phases: from the first line of the server's log until it serves
PHASES: tuple[State, ...] = (State.STARTING, State.DIST_INIT, State.WEIGHTS, State.KV_CACHE, State.CUDA_GRAPH,
                             State.DRAFT, State.HTTP, State.READY)
STATES: tuple[State, ...] = tuple(State)
# The states in which a deployment's server runs (or should, and someone should watch it): only then
# is what its GPUs hold its own (planned, downloading, crashed and stopped ones hold nothing there).
LIVE_STATES: tuple[State, ...] = (*PHASES, State.STALLED)
