"""The command line as an operator at 2 a.m. uses it (issue 23): `deploy MODEL` with plan's options,
`restart` and `fix`, conflicts refused before any question, `status NAME` condensed, piped tables
whole, a stalled deploy that says what still holds the GPUs. The CLI runs as a subprocess against the
simulated GPU host (local: its programs stand in for the host's, gpuops' code is the real one)."""

from __future__ import annotations

import json
import os
import socket
import subprocess
import tempfile
from pathlib import Path

import pytest

from gpuops.core.deploy.store import Store
from gpuops.sim.host import setup_simhost
from tests.conftest import PACE, kill_marked, operator_hub
from tests.test_cli import GPUOPS


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


class World:
    """Simulated 4-GPU hosts on this machine (one per scenario), an operator's HF cache holding
    Qwen3-8B's config, a state folder of the test's own."""

    def __init__(self, tmp_path: Path):
        self.root = Path(tempfile.mkdtemp(prefix="gpuops-cliverbs-"))
        self.tmp = tmp_path
        hub = operator_hub(tmp_path / "hub")
        home = tmp_path / "home"  # the process launcher's files (~/.local/state/gpuops) are this test's own
        home.mkdir()
        self.env = dict(os.environ, HOME=str(home), XDG_STATE_HOME=str(tmp_path / "state"),
                        XDG_CONFIG_HOME=str(tmp_path / "cfg"), XDG_CACHE_HOME=str(tmp_path / "cache"),
                        HF_HUB_CACHE=str(hub), HF_HUB_OFFLINE="1")
        for key in ("GPUOPS_CONFIG", "HF_TOKEN"):
            self.env.pop(key, None)
        self.cfg = tmp_path / "config.toml"
        self.cfg.write_text("")
        self.sims: dict[str, object] = {}

    def host(self, name: str, scenario: str = "ok", extra: str = "") -> object:
        sim = setup_simhost(self.root / name, gpus=4, sglang_version="0.5.23", scenario=scenario, pace=PACE)
        self.sims[name] = sim
        self.cfg.write_text(self.cfg.read_text() + sim.host_block(name) + extra)
        return sim

    def stall(self, **seconds: float) -> None:
        self.cfg.write_text(self.cfg.read_text() + "[stall]\n" + "".join(f"{k} = {v}\n" for k, v in seconds.items()))

    def run(self, *args: str, timeout: float = 120, stdin: str | None = None) -> subprocess.CompletedProcess:
        return subprocess.run([GPUOPS, "--config", str(self.cfg), *args], capture_output=True, text=True,
                              env=self.env, timeout=timeout, input=stdin,
                              stdin=subprocess.DEVNULL if stdin is None else None)

    def store(self) -> Store:
        return Store(Path(self.env["XDG_STATE_HOME"]) / "gpuops" / "gpuops.db")

    def deployment(self, name: str):  # type: ignore[no-untyped-def]
        store = self.store()
        try:
            return store.deployment(name)
        finally:
            store.close()


@pytest.fixture
def world(tmp_path):
    w = World(tmp_path)
    yield w
    kill_marked(str(w.root))
    subprocess.run(["rm", "-rf", str(w.root)])


def events(out: subprocess.CompletedProcess) -> list[dict]:
    return [json.loads(line) for line in out.stdout.splitlines() if line.startswith("{")]


def one_line(out: subprocess.CompletedProcess) -> str:
    err = out.stderr.strip()
    assert "Traceback" not in out.stderr and "\n" not in err, out.stderr
    return err


# ------------------------------------------------------------------ deploy MODEL takes plan's options


def test_deploy_model_takes_the_planning_options_of_plan(world):
    """`deploy MODEL --port --tp --gpu-ids --download-dir` deploys what `plan` with the same options
    plans (they were unknown to deploy: exit 2); a PLAN.json refuses them (it is planned already)."""
    world.host("gpu1")
    port = free_port()
    into = world.root / "weights"
    opts = ["--host", "gpu1", "--name", "tuned", "--port", str(port), "--tp", "2", "--gpu-ids", "2,3",
            "--download-dir", str(into), "--no-mtp"]
    planned = world.run("plan", "Qwen/Qwen3-8B", *opts, "--json")
    assert planned.returncode == 0, planned.stderr
    out = world.run("deploy", "Qwen/Qwen3-8B", *opts, "--yes", "--json")
    assert out.returncode == 0, out.stderr
    assert [e["state"] for e in events(out) if e["event"] == "state"][-1] == "ready"
    plan = world.deployment("tuned").plan
    assert (plan.port, plan.tp, plan.gpu_ids, plan.download_dir) == (port, 2, (2, 3), str(into))
    assert plan.argv == json.loads(planned.stdout)["argv"]
    assert any(into.rglob("*.safetensors"))  # the weights went where it was told
    # a plan made already takes none of them: one line, exit 2, nothing deployed
    plan_file = world.tmp / "plan.json"
    plan_file.write_text(planned.stdout)
    out = world.run("deploy", str(plan_file), "--host", "gpu1", "--tp", "4", "--yes")
    assert out.returncode == 2 and "--tp" in one_line(out) and "is a plan already" in out.stderr
    out = world.run("deploy", "Qwen/Qwen3-8B", "--yes")
    assert out.returncode == 2 and "--host" in one_line(out)

