"""What gpuops reads back is validated through its type before it reaches a shell, a unit or a
screen: a plan JSON given to `deploy`, a `--like` plan or unit. Over the real sshd to the simulated
host; every refusal is exit 2, one line, and nothing written there."""

from __future__ import annotations

import json
import os
import subprocess
from pathlib import Path

import pytest

from tests.sshd import free_port, ssh_user_home
from tests.test_cli import GPUOPS

HOME = ssh_user_home()  # the SSH user's HOME on the (loopback) host: this test process's own


def gpuops(cfg: Path, env: dict, *args: str, timeout: float = 120) -> subprocess.CompletedProcess:
    return subprocess.run([GPUOPS, "--config", str(cfg), *args], capture_output=True, text=True, env=env,
                          timeout=timeout, stdin=subprocess.DEVNULL)


def a_plan(cfg: Path, env: dict, *extra: str) -> dict:
    out = gpuops(cfg, env, "plan", "Qwen/Qwen3-8B", "--host", "gpu1", "--json", *extra)
    assert out.returncode == 0, out.stderr
    return json.loads(out.stdout)


def nothing_written(cfg: Path, env: dict, name: str) -> None:
    assert not (HOME / ".local/state/gpuops/deployments" / name).exists()
    assert not Path(f"/etc/systemd/system/gpuops-{name}.service").exists()
    assert not Path(f"/etc/gpuops/{name}.env").exists()
    listed = json.loads(gpuops(cfg, env, "status", "--json").stdout)["deployments"]
    assert name not in [d["name"] for d in listed]


@pytest.mark.parametrize("where, bad", [
    ("argv", "a\nExecStartPre=/bin/sh -c 'touch /tmp/pwned'"),
    ("argv", "a\x00b"),
    ("argv", "\x1b[2Jhidden"),
    ("env", "1\r\nExecStart=/bin/sh"),
    ("model_path", "/models/x\n"),
    ("python", "/usr/bin/python3\tx"),
    ("name", "evil\nname"),
])
def test_a_plan_json_with_a_control_character_is_refused(world, tmp_path, where, bad):
    make, env = world
    cfg, sim = make("ok")
    doc = a_plan(cfg, env, "--name", "inj")
    if where == "argv":
        doc["argv"][doc["argv"].index("--context-length") + 1] = bad
    elif where == "env":
        doc["env"]["NCCL_DEBUG"] = bad
    else:
        doc[where] = bad
    path = tmp_path / "plan.json"
    path.write_text(json.dumps(doc))
    out = gpuops(cfg, env, "deploy", str(path), "--host", "gpu1", "--yes", "--json")
    assert out.returncode == 2, (out.stdout, out.stderr)
    assert len(out.stderr.strip().splitlines()) == 1 and "control character" in out.stderr, out.stderr
    assert out.stdout == ""
    nothing_written(cfg, env, "inj")


def test_env_names_ports_and_the_plans_host_are_checked(world, tmp_path):
    make, env = world
    cfg, sim = make("ok")
    doc = a_plan(cfg, env, "--name", "inj")
    for change, needle in (({"env": {"A-B": "1"}}, "not an environment variable name"),
                           ({"port": 70000}, "port: must be 1..65535"),
                           ({"gpu_ids": [0, 0]}, "gpu_ids"),
                           ({"host": "elsewhere"}, "planned for elsewhere, not gpu1"),
                           ({"python": "/opt/other/bin/python"}, "but gpu1's python is"),
                           ({"schema": 2}, "plan schema 2")):
        path = tmp_path / "plan.json"
        path.write_text(json.dumps({**doc, **change}))
        out = gpuops(cfg, env, "deploy", str(path), "--host", "gpu1", "--yes")
        assert out.returncode == 2 and needle in out.stderr, (change, out.stderr)
        assert len(out.stderr.strip().splitlines()) == 1
    nothing_written(cfg, env, "inj")


def test_a_like_unit_or_plan_with_a_control_character_is_refused(world, tmp_path):
    make, env = world
    cfg, sim = make("ok")
    unit = tmp_path / "old.service"
    unit.write_text("[Service]\nExecStart=/opt/sglang/bin/python -m sglang.launch_server --model-path /m "
                    "--tp 4 --chat-template \"x\x1b]0;owned\x07y\"\n")
    out = gpuops(cfg, env, "plan", "Qwen/Qwen3-8B", "--host", "gpu1", "--like", str(unit))
    assert out.returncode == 2 and "control character" in out.stderr and len(out.stderr.strip().splitlines()) == 1
    two = tmp_path / "two.service"
    two.write_text("[Service]\nExecStart=/usr/bin/python3 -m sglang.launch_server --tp 4\nExecStart=/bin/evil\n")
    out = gpuops(cfg, env, "plan", "Qwen/Qwen3-8B", "--host", "gpu1", "--like", str(two))
    assert out.returncode == 2 and "2 ExecStart= lines" in out.stderr
    doc = a_plan(cfg, env)
    doc["argv"] += ["--chat-template", "a\nExecStartPost=/bin/evil"]
    like = tmp_path / "like.json"
    like.write_text(json.dumps(doc))
    out = gpuops(cfg, env, "plan", "Qwen/Qwen3-8B", "--host", "gpu1", "--like", str(like), "--json")
    assert out.returncode == 2 and "control character" in out.stderr, out.stderr
    assert len(out.stderr.strip().splitlines()) == 1 and out.stdout == ""


def test_the_unit_is_rendered_from_the_plan_never_taken_from_the_file(world, tmp_path):
    """A plan JSON whose `unit.text` was edited: the unit written is the one the validated plan
    renders; and a plan made offline runs with the host's python, not a bare `python3`."""
    make, env = world
    cfg, sim = make("ok")
    cfg.write_text(sim.host_block("gpu1", ssh="simbox", launcher="systemd")
                   + f'model_dirs = ["{sim.directory / "models"}"]\n')
    name = f"unit{os.getpid()}"
    out = gpuops(cfg, env, "plan", "Qwen/Qwen3-8B", "--gpus", "4", "--gpu-memory", "140", "--name", name,
                 "--port", str(free_port()), "--json")  # offline: no host's ports to avoid, so a free one
    doc = json.loads(out.stdout)
    assert doc["host"] is None and doc["python"] is None  # offline: no host, no python yet
    doc["unit"]["text"] = "[Service]\nExecStart=/bin/sh -c 'touch /tmp/gpuops-pwned'\n"
    path = tmp_path / "plan.json"
    path.write_text(json.dumps(doc))
    unit, env_file = Path(f"/etc/systemd/system/gpuops-{name}.service"), Path(f"/etc/gpuops/{name}.env")
    try:
        out = gpuops(cfg, env, "deploy", str(path), "--host", "gpu1", "--yes", "--json", timeout=180)
        assert out.returncode == 0, out.stderr + out.stdout[-2000:]
        text = unit.read_text()
        assert "gpuops-pwned" not in text and "ExecStart=/bin/sh" not in text
        assert f"ExecStart={sim.directory}/bin/python -m sglang.launch_server \\\n" in text  # the host's python
        status = json.loads(gpuops(cfg, env, "status", name, "--json").stdout)
        assert status["deployment"]["state"] == "ready"
    finally:
        gpuops(cfg, env, "stop", name, "--yes")
        sim.shutdown()
        unit.unlink(missing_ok=True)
        env_file.unlink(missing_ok=True)
