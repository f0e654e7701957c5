"""`Ops.plan`: the planning use case in core (one host, several nodes, replicas), the one the CLI's
plan/deploy/swap and the TUI's plan review share: the same plan as `gpuops plan` for the same request,
bad input refused with the CLI's one line (PlanError), nothing changed."""

from __future__ import annotations

import asyncio
import json

import pytest

from gpuops.core.config import parse_inventory
from gpuops.core.deploy.store import Store
from gpuops.core.ops import Ops
from gpuops.core.planning import PlanError
from gpuops.core.planning.request import PlanRequest
from tests.test_cli import gpuops
from tests.test_plan import env, model_dir  # noqa: F401  (fixtures)


def _plan(tmp_path, req: PlanRequest):
    async def go():
        ops = Ops(parse_inventory("", source="test"), store=Store(tmp_path / "gpuops.db"))
        try:
            return await ops.plan(req)
        finally:
            await ops.close()

    return asyncio.run(go())


def test_ops_plan_is_the_plan_gpuops_plan_prints(model_dir, env, tmp_path):  # noqa: F811
    _facts, plan = _plan(tmp_path, PlanRequest(str(model_dir), gpus=4, gpu_memory=140.4, tp=4,
                                               engine_version="0.5.23"))
    out = gpuops("plan", str(model_dir), "--gpus", "4", "--gpu-memory", "140.4", "--tp", "4",
                 "--sglang-version", "0.5.23", "--json", env=env)
    assert out.returncode == 0, out.stderr
    assert plan.to_json() == json.loads(out.stdout)


@pytest.mark.parametrize("req, message", [
    (dict(gpu_ids="0;1"), "--gpu-ids must look like 0,1,2,3"),
    (dict(engine_version="latest"), "--sglang-version must look like"),
    (dict(tp=3), "does not divide"),
    (dict(host="a", hosts="a,b"), "give --host (one host) or --hosts (several), not both"),
    (dict(gpus=None), "give --host H (its GPUs are read) or --gpus N and --gpu-memory GIB to plan offline"),
    (dict(replicas=2), "--replicas reads the hosts' GPUs"),
])
def test_ops_plan_refuses_bad_input_in_one_line(model_dir, tmp_path, req, message):  # noqa: F811
    wish = {"gpus": 8, "gpu_memory": 140.0, **req}
    with pytest.raises(PlanError) as err:
        _plan(tmp_path, PlanRequest(str(model_dir), **wish))
    assert message in str(err.value) and "\n" not in str(err.value)


def test_ops_opens_its_store_when_first_used_so_planning_creates_none(model_dir, tmp_path, monkeypatch):  # noqa: F811
    """Ops owns the store and opens it lazily: an Ops that only plans (the CLI's `gpuops plan`) creates
    no store; a use case that records something opens (and creates) it."""
    monkeypatch.setenv("XDG_STATE_HOME", str(tmp_path / "state"))
    from gpuops.core.deploy.store import default_path

    db = default_path()
    assert str(db).startswith(str(tmp_path))

    async def go():
        ops = Ops(parse_inventory("", source="test"))
        try:
            _facts, plan = await ops.plan(PlanRequest(str(model_dir), gpus=4, gpu_memory=140.4, tp=4,
                                                      engine_version="0.5.23"))
            assert plan.tp == 4
            assert not db.exists()  # planned, nothing stored, no store made
        finally:
            await ops.close()
        assert not db.exists()
        ops = Ops(parse_inventory("", source="test"))
        try:
            assert ops.deployments() == [] and db.is_file()  # a use case that reads the store opens it
        finally:
            await ops.close()

    asyncio.run(go())
