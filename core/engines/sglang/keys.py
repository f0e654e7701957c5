"""The JSON and store keys that keep SGLang's name (read through ``engines.plan_key``).

gpuops' first engine was SGLang, and the plan's ``--json`` document, the store's rows and every stored
plan named the engine's version after it. The CLI contract keeps field names (they only grow, never
renamed), so the domain's engine-neutral attributes are written and read under these keys
(``msgspec.field(name=...)``) for every engine.
"""

from __future__ import annotations

# Plan attribute -> its key in the plan JSON (schema 1) and the store
PLAN_KEYS: dict[str, str] = {
    "engine_version": "sglang_version",
    "engine_version_source": "sglang_version_source",
}
