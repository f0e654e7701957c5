"""Typed plans for tests that need one without planning a model."""

from __future__ import annotations

from typing import Any

from gpuops.core.domain import ModelSummary, Plan
from tests.sshd import free_port


def make_plan(name: str = "t", *, model: str = "Qwen/Qwen3-8B", argv: list[str] | None = None,
              port: int | None = None, gpu_ids: list[int] | tuple[int, ...] = (0,), launcher: str = "process",
              **fields: Any) -> Plan:
    """A valid plan: `argv` gets --port when it has none; anything else a Plan has may be given.
    No `port`: a free one on this machine (never a fixed port another process may hold)."""
    if port is None:
        port = free_port()
    argv = list(argv if argv is not None else ["--model-path", model])
    if "--port" not in argv:
        argv += ["--port", str(port)]
    fields.setdefault("tp", len(gpu_ids) or 1)
    fields.setdefault("engine_version", "0.5.23")
    fields.setdefault("model_path", model)
    return Plan(name=name, model=ModelSummary(id=model), gpu_ids=tuple(gpu_ids), port=port, launcher=launcher,
                argv=argv, **fields)
