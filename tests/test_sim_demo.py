"""The product's small simulator, without the tests' hook (GPUOPS_SIM_SERVER unset): what `gpuops demo`
and `gpuops sim setup` give an operator. `gpuops sim setup` run as a subprocess writes the host, a
real deploy over SSH reaches ready on it (the engine's start-up lines replayed, the API answering the
quick check), hang-at-dist-init is flagged as a stall and kv-cache-oom as a crash; a scenario only the
tests' scenario engine knows is refused with one line naming the ones it knows."""

from __future__ import annotations

import json
import os
import subprocess
import tempfile
from pathlib import Path

import pytest

from gpuops.sim.host import SCENARIOS, SERVER_ENV
from tests.conftest import PACE, kill_marked, operator_hub
from tests.test_cli import GPUOPS
from tests.test_deploy import deploy, states


@pytest.fixture
def demo_world(tmp_path, sshd, ssh_home):
    """`gpuops sim setup` without the hook: a host with the product's small server, reached over SSH."""
    root = Path(tempfile.mkdtemp(prefix="gpuops-demo-"))
    root.chmod(0o755)
    hub = operator_hub(tmp_path / "hub")
    env = dict(os.environ, HOME=str(ssh_home), XDG_STATE_HOME=str(tmp_path / "state"),
               XDG_CONFIG_HOME=str(tmp_path / "cfg"), XDG_CACHE_HOME=str(tmp_path / "cache"),
               HF_HUB_CACHE=str(hub), HF_HUB_OFFLINE="1")
    for key in ("GPUOPS_CONFIG", "HF_TOKEN", SERVER_ENV):
        env.pop(key, None)

    def make(scenario: str, stall: str = "") -> tuple[Path, Path]:
        out = subprocess.run([GPUOPS, "sim", "setup", str(root / scenario), "--scenario", scenario, "--gpus", "4",
                              "--pace", str(PACE), "--name", "gpu1", "--ssh", "simbox"],
                             capture_output=True, text=True, env=env, timeout=60)
        assert out.returncode == 0, out.stderr
        cfg = tmp_path / f"{scenario}.toml"
        cfg.write_text(out.stdout + f'model_dirs = ["{root / scenario / "models"}"]\n' + stall)
        return cfg, root / scenario

    yield make, env
    kill_marked(str(root))
    subprocess.run(["rm", "-rf", str(root)])


def test_the_small_server_knows_the_demos_scenarios():
    assert set(SCENARIOS) >= {"ok", "slow-download", "hang-at-dist-init", "kv-cache-oom"}


def test_a_servers_scenarios_are_read_from_its_scenarios_line(tmp_path):
    """A server file's (or a package's module's) `SCENARIOS = (...)` line, over lines too; a file or
    folder without one is no server (one line)."""
    from gpuops.sim.host import server_scenarios

    (tmp_path / "one.py").write_text('"""x"""\nSCENARIOS = ("ok", "slow-download")\n')
    assert server_scenarios(tmp_path / "one.py") == ("ok", "slow-download")
    (tmp_path / "single.py").write_text("SCENARIOS = ('ok',)\n")
    assert server_scenarios(tmp_path / "single.py") == ("ok",)
    pkg = tmp_path / "pkg"
    pkg.mkdir()
    (pkg / "__init__.py").write_text("")
    (pkg / "common.py").write_text('X = 1\nSCENARIOS = (\n    "ok",\n    "kv-cache-oom",\n)\n')
    assert server_scenarios(pkg) == ("ok", "kv-cache-oom")
    (tmp_path / "none.py").write_text("SCENARIOS = make()\n")
    with pytest.raises(ValueError, match="is not one"):
        server_scenarios(tmp_path / "none.py")
    with pytest.raises(ValueError, match="is not one"):
        server_scenarios(tmp_path / "absent")


def test_a_deploy_reaches_ready_on_the_small_server(demo_world):
    make, env = demo_world
    cfg, host = make("ok")
    server = json.loads((host / "state" / "server.json").read_text())
    assert server["server"].endswith("demo_server.py")  # not the tests' scenario engine
    rc, events, err = deploy(cfg, env, "--name", "demo")
    assert rc == 0, err + "\n".join(map(json.dumps, events[-15:]))
    order = ["downloading", "starting", "dist_init", "weights", "kv_cache", "cuda_graph", "http", "ready"]
    assert [s for s in states(events) if s in order] == order, states(events)
    assert events[-1]["quick_check"]["content"]
    assert any(e["event"] == "log" and "fired up and ready" in e["line"] for e in events)
    out = subprocess.run([GPUOPS, "--config", str(cfg), "stop", "demo", "--yes"], capture_output=True, text=True,
                         env=env, timeout=120)
    assert out.returncode == 0, out.stderr


@pytest.mark.parametrize("scenario, stall, final, phase, code", [
    ("hang-at-dist-init", "\n[stall]\ndist_init = 3\n", "stalled", "dist_init", "nccl-init-stall"),
    ("kv-cache-oom", "", "crashed", "kv_cache", "kv-cache-oom"),
])
def test_the_small_servers_failures_are_found(demo_world, scenario, stall, final, phase, code):
    make, env = demo_world
    cfg, _ = make(scenario, stall)
    rc, events, err = deploy(cfg, env, "--name", f"d-{scenario}")
    assert rc == 1, err
    last = [e for e in events if e["event"] == "state"][-1]
    assert (last["state"], last.get("phase")) == (final, phase), [e for e in events if e["event"] == "state"]
    assert any(e["event"] == "finding" and e["code"] == code for e in events)
    subprocess.run([GPUOPS, "--config", str(cfg), "stop", f"d-{scenario}", "--yes"], capture_output=True, env=env)


def test_a_scenario_the_small_server_does_not_know_is_refused(tmp_path):
    env = {k: v for k, v in os.environ.items() if k != SERVER_ENV}
    out = subprocess.run([GPUOPS, "sim", "setup", str(tmp_path / "sim"), "--scenario", "spec-config-crash"],
                         capture_output=True, text=True, env=env, timeout=60)
    assert out.returncode == 2 and out.stdout == ""
    assert out.stderr.count("\n") == 1 and "scenario must be one of " + ", ".join(SCENARIOS) in out.stderr
    assert not (tmp_path / "sim").exists()
    out = subprocess.run([GPUOPS, "demo", "--scenario", "spec-config-crash"], capture_output=True, text=True,
                         env=env, timeout=60)
    assert out.returncode == 2 and "--scenario must be one of " + ", ".join(SCENARIOS) in out.stderr
    # with the hook, the same setup runs the tests' scenario engine, which knows it
    out = subprocess.run([GPUOPS, "sim", "setup", str(tmp_path / "sim"), "--scenario", "spec-config-crash"],
                         capture_output=True, text=True, env=dict(env, **{SERVER_ENV: os.environ[SERVER_ENV]}),
                         timeout=60)
    assert out.returncode == 0, out.stderr
