"""`gpuops deploy` end to end: the simulated host over real SSH, the process launcher,
download → phases → ready → quick check → stop, and the failing scenarios."""

from __future__ import annotations

import json
import os
import stat
import subprocess
import time
from pathlib import Path

import pytest

from gpuops.core.deploy.store import Store
from gpuops.sim.host import setup_simhost
from tests.sshd import free_port
from tests.test_cli import GPUOPS
from tests.test_hosts import processes_matching
from tests.ports import first_port

# the planner's first port without --port in this test process (its GPUOPS_FIRST_PORT, conftest)
FIRST_PORT = first_port()



def deploy(cfg: Path, env: dict, *args: str, timeout: float = 120,
           default_port: bool = False) -> tuple[int, list[dict], str]:
    """`gpuops deploy Qwen/Qwen3-8B` to gpu1 with ARGS, on a free port of its own unless ARGS name one or
    FIRST_PORT says the planner's default is what the test looks at (tests and other processes that run
    at once would race for the first port, then the next free one, between the plan and the server's bind)."""
    if not default_port and "--port" not in args:
        args = (*args, "--port", str(free_port()))
    out = subprocess.run([GPUOPS, "--config", str(cfg), "deploy", "Qwen/Qwen3-8B", "--host", "gpu1", "--json",
                          "--yes", *args], capture_output=True, text=True, env=env, timeout=timeout)
    events = [json.loads(line) for line in out.stdout.splitlines() if line.startswith("{")]
    return out.returncode, events, out.stderr


def served_port(env: dict, name: str, default: bool = False) -> int:
    """The stored deployment's port. DEFAULT: it was planned on the planner's default port (deploy's
    default_port): FIRST_PORT when the host had it free, else the next free one above it, which its plan says
    in a warning (another process on this machine may hold it)."""
    store = Store(Path(env["XDG_STATE_HOME"]) / "gpuops" / "gpuops.db")
    try:
        plan = store.deployment(name).plan
    finally:
        store.close()
    if default and plan.port != FIRST_PORT:
        assert plan.port > FIRST_PORT and any(
            w.startswith(f"port {FIRST_PORT} is in use on {plan.host}") and w.endswith(f"; using {plan.port}")
            for w in plan.warnings), (plan.port, plan.warnings)
    return plan.port


def states(events: list[dict]) -> list[str]:
    return [e["state"] for e in events if e["event"] == "state"]


def test_full_deploy_over_ssh_then_status_logs_and_stop(world):
    make, env = world
    cfg, sim = make("ok")
    rc, events, err = deploy(cfg, env, "--name", "qwen8b")
    assert rc == 0, err + "\n".join(map(json.dumps, events[-15:]))
    seen = states(events)
    assert seen[0] == "planned" and seen[-1] == "ready"
    order = ["downloading", "starting", "dist_init", "weights", "kv_cache", "cuda_graph", "http", "ready"]
    assert [s for s in seen if s in order] == order, seen
    downloads = [e for e in events if e["event"] == "progress" and e["phase"] == "downloading"]
    assert downloads and downloads[-1]["done"] >= downloads[-1]["total"] * 0.99  # bytes on disk, measured
    shards = [e for e in events if e["event"] == "progress" and e["phase"] == "weights"]
    assert shards and shards[-1]["done"] == shards[-1]["total"]
    ready = events[-1]
    port = served_port(env, "qwen8b")
    assert ready["endpoint"] == f"http://127.0.0.1:{port}" and ready["quick_check"]["content"]
    assert any(e["event"] == "log" and "fired up and ready" in e["line"] for e in events)
    assert all(e["ts"].endswith("Z") for e in events)

    out = subprocess.run([GPUOPS, "--config", str(cfg), "status", "qwen8b", "--json"], capture_output=True,
                         text=True, env=env)
    doc = json.loads(out.stdout)
    assert doc["deployment"]["state"] == "ready" and doc["deployment"]["host"] == "gpu1"
    out = subprocess.run([GPUOPS, "--config", str(cfg), "logs", "qwen8b"], capture_output=True, text=True, env=env,
                         timeout=60)
    assert "The server is fired up and ready to roll!" in out.stdout
    # the server runs on after gpuops has exited; stop asks first
    assert processes_matching("sglang.launch_server", str(sim.directory))  # this test's simulated host's
    out = subprocess.run([GPUOPS, "--config", str(cfg), "stop", "qwen8b"], capture_output=True, text=True, env=env,
                         stdin=subprocess.DEVNULL)
    assert out.returncode == 2 and "--yes" in out.stderr
    out = subprocess.run([GPUOPS, "--config", str(cfg), "--readonly", "stop", "qwen8b", "--yes"],
                         capture_output=True, text=True, env=env)
    assert out.returncode == 2 and "read-only" in out.stderr
    out = subprocess.run([GPUOPS, "--config", str(cfg), "stop", "qwen8b", "--yes"], capture_output=True, text=True,
                         env=env, timeout=120)
    assert out.returncode == 0, out.stderr
    out = subprocess.run([GPUOPS, "--config", str(cfg), "status", "qwen8b", "--json"], capture_output=True,
                         text=True, env=env)
    assert json.loads(out.stdout)["deployment"]["state"] == "stopped"
    # a second deploy reuses the downloaded copy: no download this time
    rc, events, err = deploy(cfg, env, "--name", "qwen8b")
    assert rc == 0, err + "\n".join(map(json.dumps, events[-25:]))
    assert "downloading" not in states(events)
    subprocess.run([GPUOPS, "--config", str(cfg), "stop", "qwen8b", "--yes"], capture_output=True, env=env)


@pytest.mark.parametrize("scenario, stall, final, phase", [
    ("hang-at-dist-init", "\n[stall]\ndist_init = 3\n", "stalled", "dist_init"),
    ("kv-cache-oom", "", "crashed", "kv_cache"),
    ("slow-download", "\n[stall]\ndownload = 3\n", "stalled", None),
])
def test_failing_scenarios_end_with_the_right_outcome(world, scenario, stall, final, phase):
    make, env = world
    cfg, sim = make(scenario, stall)
    rc, events, err = deploy(cfg, env, "--name", f"t-{scenario}")
    assert rc == 1, err
    last = [e for e in events if e["event"] == "state"][-1]
    assert last["state"] == final
    if phase:
        assert last.get("phase") == phase, [e for e in events if e["event"] in ("state", "finding", "phase")]
    else:
        assert any(e["event"] == "finding" and e["code"] == "download-stalled" for e in events)
    if scenario == "hang-at-dist-init":
        # the watcher's finding: the simulated GPUs' memory (0 MiB on the plan's 4 GPUs) and the
        # server's live processes as evidence, and the NCCL_DEBUG restart as an applicable fix
        (f,) = [e for e in events if e["event"] == "finding" and e["code"] == "nccl-init-stall"]
        assert f["summary"].startswith("dist_init silent ") and "0 MiB used on GPU0" in f["summary"]
        readings = [ev["reading"] for ev in f["evidence"] if ev["source"] == "nvml"]
        assert readings == ["GPU0 memory used 0 MiB"]  # the plan's one GPU (Qwen3-8B fits TP1)
        assert any(ev["source"] == "ps" and "server processes alive" in ev["reading"] for ev in f["evidence"])
        (line,) = [ev for ev in f["evidence"] if ev["source"].startswith("log:")]  # the last line: 0.5.23's
        assert "Init parallel begin." in line["line"] or "nccl" in line["line"].lower()  # or NCCL's after it
        assert f["fix"]["applicable"] and f["fix"]["plan_patch"]["set_env"]["NCCL_DEBUG"] == "INFO"
        assert 3 <= f["data"]["silent_s"] < 3 + 5 + 2  # threshold + one poll (+ the quiet-log wait)
        # and triage ran on its own: the host checks, all passing on this healthy simulated host
        (checks,) = [e["checks"] for e in events if e["event"] == "checks"]
        assert {c["name"] for c in checks} >= {"driver-library-mismatch", "port-in-use", "leftover-gpu-process"}
        assert all(c["ok"] is not False for c in checks), checks
    if scenario == "kv-cache-oom":  # the rule's finding, with the plan change that fixes it
        (f,) = [e for e in events if e["event"] == "finding" and e["code"] == "kv-cache-oom"]
        assert f["fix"]["applicable"] and "--mem-fraction-static" in f["fix"]["plan_patch"]["set_flags"]
    subprocess.run([GPUOPS, "--config", str(cfg), "stop", f"t-{scenario}", "--yes"], capture_output=True, env=env)


def test_refused_before_anything_changes(world):
    make, env = world
    cfg, sim = make("ok")
    bare = setup_simhost(Path(sim.directory).parent / "bare", gpus=2, engine_version="none")
    cfg.write_text(bare.host_block("gpu1", ssh="simbox"))
    rc, events, err = deploy(cfg, env)
    assert rc == 2 and "SGLang is not installed" in err and events == []
    out = subprocess.run([GPUOPS, "--config", str(cfg), "status", "--json"], capture_output=True, text=True, env=env)
    assert json.loads(out.stdout)["deployments"] == []  # nothing recorded


def test_a_plan_with_a_flag_the_hosts_version_removed_is_refused_before_anything_changes(world, tmp_path):
    """A plan made for SGLang 0.5.19 (offline) that sets --cuda-graph-max-bs, which 0.5.20 removed,
    deployed on a host with 0.5.23: refused in one line naming the flag and both versions, with
    nothing recorded and no server started (the server would die on the flag after the download)."""
    make, env = world
    cfg, sim = make("ok")
    out = subprocess.run([GPUOPS, "--config", str(cfg), "plan", "Qwen/Qwen3-8B", "--gpus", "4", "--gpu-memory", "80",
                          "--sglang-version", "0.5.19", "--name", "old", "--port", str(free_port()), "--json"],
                         capture_output=True, text=True, env=env, timeout=120)
    assert out.returncode == 0, out.stderr
    doc = json.loads(out.stdout)
    assert doc["sglang_version"] == "0.5.19"
    doc["argv"] += ["--cuda-graph-max-bs", "64"]  # accepted by 0.5.19
    (tmp_path / "old.json").write_text(json.dumps(doc))
    out = subprocess.run([GPUOPS, "--config", str(cfg), "deploy", str(tmp_path / "old.json"), "--host", "gpu1", "--yes"],
                         capture_output=True, text=True, env=env, timeout=120)
    assert out.returncode == 2, out.stderr
    (line,) = out.stderr.strip().splitlines()
    assert line.endswith("SGLang 0.5.23 on gpu1 does not accept --cuda-graph-max-bs (gone after 0.5.19, whose notice "
                         "said: use --cuda-graph-max-bs-decode); the plan was made for SGLang 0.5.19: plan it again "
                         "for this host (--like keeps the rest)"), line
    status = subprocess.run([GPUOPS, "--config", str(cfg), "status", "--json"], capture_output=True, text=True, env=env)
    assert json.loads(status.stdout)["deployments"] == []  # nothing recorded
    assert not processes_matching("sglang.launch_server", str(sim.directory))  # nothing started
    # without the flag the same plan deploys (the check refuses only what the host's version lacks); a
    # flag 0.5.23 still accepts but deprecated is said among the plan's warnings, stored with it
    doc["argv"] = doc["argv"][:-2] + ["--disable-fast-image-processor"]
    (tmp_path / "old.json").write_text(json.dumps(doc))
    out = subprocess.run([GPUOPS, "--config", str(cfg), "deploy", str(tmp_path / "old.json"), "--host", "gpu1", "--yes"],
                         capture_output=True, text=True, env=env, timeout=120)
    try:
        assert out.returncode == 0, out.stderr
        said = ("--disable-fast-image-processor is deprecated in SGLang 0.5.23 (its notice: use "
                "--image-processor-backend=pil); a later version may refuse it")
        assert f"plan: {said}" in out.stdout, out.stdout
        store = Store(Path(env["XDG_STATE_HOME"]) / "gpuops" / "gpuops.db")
        try:
            stored = store.deployment("old")
        finally:
            store.close()
        assert stored is not None and said in stored.plan.warnings, stored
    finally:
        subprocess.run([GPUOPS, "--config", str(cfg), "stop", "old", "--yes"], capture_output=True, env=env)


def test_systemd_launcher_with_the_fake_systemctl_and_a_real_journal(world):
    """No machine here runs systemd as PID 1: the simulated host's systemctl starts the unit gpuops
    wrote and feeds its output into a real journal file, which gpuops follows with journalctl."""
    make, env = world
    cfg, sim = make("ok")
    cfg.write_text(sim.host_block("gpu1", ssh="simbox", launcher="systemd")
                   + f'model_dirs = ["{sim.directory / "models"}"]\n')
    name = f"sd{os.getpid()}"
    unit, env_file = Path(f"/etc/systemd/system/gpuops-{name}.service"), Path(f"/etc/gpuops/{name}.env")
    try:
        rc, events, err = deploy(cfg, env, "--name", name)
        assert rc == 0, err + "\n".join(map(json.dumps, events[-10:]))
        assert [s for s in states(events) if s in ("starting", "dist_init", "ready")] == ["starting", "dist_init",
                                                                                            "ready"]
        assert unit.is_file() and "EnvironmentFile=" in unit.read_text()
        assert stat.S_IMODE(env_file.stat().st_mode) == 0o600
        out = subprocess.run([GPUOPS, "--config", str(cfg), "logs", name], capture_output=True, text=True, env=env,
                             timeout=60)
        assert "The server is fired up and ready to roll!" in out.stdout  # read back from the journal
        out = subprocess.run([GPUOPS, "--config", str(cfg), "stop", name, "--yes"], capture_output=True, text=True,
                             env=env, timeout=120)
        assert out.returncode == 0, out.stderr
    finally:
        sim.shutdown()
        unit.unlink(missing_ok=True)
        env_file.unlink(missing_ok=True)


def test_a_deploy_killed_mid_download_resumes_from_what_is_on_disk(world):
    """kill -9 of gpuops while `hf download` runs on the host: the host's download dies with the
    channel, what was recorded stays, and the same deploy again resumes (not from 0) to ready."""
    make, env = world
    cfg, sim = make("ok")
    sim.set_sim(download_rate=150 << 20)  # / PACE: ~3 GB/s of apparent size, 16.4 GB takes ~5 s
    argv = [GPUOPS, "--config", str(cfg), "deploy", "Qwen/Qwen3-8B", "--host", "gpu1", "--json", "--yes",
            "--name", "resume", "--port", str(free_port())]
    proc = subprocess.Popen(argv, stdout=subprocess.PIPE, text=True, env=env)
    first: list[dict] = []
    try:
        for line in proc.stdout:
            ev = json.loads(line)
            if ev["event"] == "progress" and ev["phase"] == "downloading" and ev["done"] >= 0.25 * ev["total"]:
                first.append(ev)
                break
    finally:
        proc.kill()
        proc.wait()
    assert first, "the download never got a quarter done"
    killed_at = first[-1]["done"]
    assert wait_until_gone(str(sim.directory / "bin" / "hf"))  # the host's hf ended with the channel
    out = subprocess.run([GPUOPS, "--config", str(cfg), "status", "resume", "--json"], capture_output=True,
                         text=True, env=env)
    # its deployer is gone: the download is interrupted (not "downloading" for ever), deploying again resumes it
    assert json.loads(out.stdout)["deployment"]["state"] == "stopped"
    rc, events, err = deploy(cfg, env, "--name", "resume")
    assert rc == 0, err
    downloads = [e for e in events if e["event"] == "progress" and e["phase"] == "downloading"]
    assert downloads[0]["done"] >= killed_at  # resumed from the bytes on disk
    assert downloads[-1]["done"] >= downloads[-1]["total"] * 0.99
    subprocess.run([GPUOPS, "--config", str(cfg), "stop", "resume", "--yes"], capture_output=True, env=env)


def wait_until_gone(marker: str, timeout: float = 15.0) -> bool:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if not processes_matching(marker):
            return True
        time.sleep(0.1)
    return False
