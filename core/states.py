"""gpuops' start-up phases: the states a deployment passes through between "downloading" and
"ready" (``domain.STATES`` puts them between its own). They are gpuops' vocabulary, carried by the
store and every ``--json`` document, so they never change; an engine maps its own phases onto them
(``Engine.state_of``: SGLang's phases have these very names, the first engine gpuops knew)."""

from __future__ import annotations

__all__ = ["PHASES"]

PHASES: tuple[str, ...] = ("starting", "dist_init", "weights", "kv_cache", "cuda_graph", "draft", "http", "ready")
