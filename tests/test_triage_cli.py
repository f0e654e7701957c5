"""`gpuops triage LOGFILE|- --json` on real-format logs (tests/data/logs, built from SGLang's wheels)."""

from __future__ import annotations

import json
import os
import subprocess
from pathlib import Path

from gpuops.sim.host import setup_simhost
from gpuops.core.diagnose.host_checks import CHECKS
from tests.conftest import PACE
from tests.sshd import free_port
from tests.test_cli import GPUOPS, gpuops

LOGS = Path(__file__).parent / "data" / "logs"


def test_triage_json_for_a_file_and_for_stdin():
    out = gpuops("triage", str(LOGS / "sglang-0.5.23-hybrid-mtp-tp4.log"), "--json")
    assert out.returncode == 0, out.stderr
    assert json.loads(out.stdout) == {"schema": 1, "phase": "ready", "outcome": "ready", "findings": []}
    text = (LOGS / "incomplete-dist-init-0.5.10.log").read_text()
    out = subprocess.run([GPUOPS, "triage", "-", "--json"], input=text, capture_output=True, text=True)
    doc = json.loads(out.stdout)
    assert (doc["phase"], doc["outcome"]) == ("dist_init", "incomplete")
    out = gpuops("triage", str(LOGS / "crash-kv-not-enough-memory-0.5.23.log"))
    assert out.returncode == 0 and "phase: kv_cache" in out.stdout and "outcome: crashed" in out.stdout


def test_triage_missing_file_is_exit_2():
    out = gpuops("triage", "/no/such.log", "--json")
    assert out.returncode == 2 and out.stderr.strip() == "gpuops: /no/such.log: no such file (nor a deployment: gpuops status lists them)"


def test_triage_shows_the_findings_with_their_evidence_and_fix():
    out = gpuops("triage", str(LOGS / "crash-spec-config-0.5.10.log"), "--json")
    assert out.returncode == 0, out.stderr
    doc = json.loads(out.stdout)
    assert (doc["phase"], doc["outcome"]) == ("starting", "crashed")
    [finding] = doc["findings"]
    lines = (LOGS / "crash-spec-config-0.5.10.log").read_text().splitlines()
    assert finding["code"] == "spec-config-invalid" and finding["severity"] == "error"
    assert finding["evidence"] == [{"source": f"log:{len(lines)}", "line": lines[-1]}]
    assert finding["fix"]["applicable"] is True
    assert finding["fix"]["plan_patch"] == {"set_flags": {"--mamba-scheduler-strategy": ["extra_buffer"]},
                                            "set_env": {"SGLANG_ENABLE_SPEC_V2": "1"}}
    # a log cut while NCCL hangs, from stdin: the warning its silence suggests, in both forms
    text = (LOGS / "incomplete-dist-init-0.5.10.log").read_text()
    out = subprocess.run([GPUOPS, "triage", "-", "--json"], input=text, capture_output=True, text=True)
    assert [(f["code"], f["severity"]) for f in json.loads(out.stdout)["findings"]] == [("nccl-init-stall", "warning")]
    out = subprocess.run([GPUOPS, "triage", "-"], input=text, capture_output=True, text=True)
    assert out.returncode == 0 and "  warning: nccl-init-stall: The log ends in dist_init" in out.stdout


def test_triage_needs_a_log_or_a_deployment_and_a_known_one(tmp_path):
    env = dict(os.environ, XDG_CONFIG_HOME=str(tmp_path / "cfg"), XDG_STATE_HOME=str(tmp_path / "state"))
    env.pop("GPUOPS_CONFIG", None)
    for args in ((), ("x.log", "--deployment", "d")):
        out = gpuops("triage", *args, "--json", env=env)
        assert out.returncode == 2 and "a LOGFILE (- for stdin) or --deployment NAME" in out.stderr
    out = gpuops("triage", "--deployment", "nope", "--json", env=env)
    assert out.returncode == 2 and out.stderr.strip() == "gpuops: no deployment named 'nope' (known: none)"


def test_triage_of_a_deployment_stuck_on_a_driver_mismatch_over_ssh(world, tmp_path):
    """The seed: the host's kernel module is 590.48.01, the libraries the server loads are 565; the
    server hangs at dist init. Planned while the host was healthy, deployed after the driver upgrade,
    over real SSH; `triage --deployment` reads its log and runs the host checks (real py-spy on the
    simulated server's process)."""
    make, env = world
    cfg, sim = make("hang-at-dist-init", "\n[stall]\ndist_init = 3\n")
    out = subprocess.run([GPUOPS, "--config", str(cfg), "plan", "Qwen/Qwen3-8B", "--host", "gpu1", "--tp", "2",
                          "--port", str(free_port()), "--json"], capture_output=True, text=True, env=env, timeout=60)
    assert out.returncode == 0, out.stderr
    plan = tmp_path / "plan.json"
    plan.write_text(out.stdout)
    setup_simhost(sim.directory, gpus=4, engine_version="0.5.23", scenario="hang-at-dist-init", pace=PACE,
                  driver_version="590.48.01", nvml="mismatch", library_version="565.57.01")
    out = subprocess.run([GPUOPS, "--config", str(cfg), "deploy", str(plan), "--host", "gpu1", "--name", "seed",
                          "--yes", "--json"], capture_output=True, text=True, env=env, timeout=120)
    assert out.returncode == 1 and '"state": "stalled"' in out.stdout, out.stderr
    try:
        out = subprocess.run([GPUOPS, "--config", str(cfg), "triage", "--deployment", "seed", "--json"],
                             capture_output=True, text=True, env=env, timeout=120)
        assert out.returncode == 0, out.stderr
        doc = json.loads(out.stdout)
        assert (doc["schema"], doc["phase"], doc["outcome"]) == (1, "dist_init", "incomplete")
        assert [c["name"] for c in doc["checks"]] == list(CHECKS)
        [mismatch] = [f for f in doc["findings"] if f["code"] == "driver-library-mismatch"]
        shown = json.dumps(mismatch["evidence"])
        assert "kernel module 590.48.01" in shown and "libnvidia-ml.so.565.57.01: libnvidia-ml 565.57.01" in shown
        assert mismatch["fix"]["applicable"] is False
        [spy] = [c for c in doc["checks"] if c["name"] == "py-spy"]
        [stack] = doc["stacks"]
        assert spy["ok"] is True and stack["ok"] and stack["rank"] is None
        assert "sglang.launch_server" in stack["title"] and f"Process {stack['pid']}" in stack["text"]
        out = subprocess.run([GPUOPS, "--config", str(cfg), "triage", "--deployment", "seed"], capture_output=True,
                             text=True, env=env, timeout=120)
        assert out.returncode == 0 and "[FAIL] driver-library-mismatch: the NVIDIA kernel module is 590.48.01" \
            in out.stdout and f"--- py-spy server (pid {stack['pid']}) ---" in out.stdout
    finally:
        subprocess.run([GPUOPS, "--config", str(cfg), "stop", "seed", "--yes"], capture_output=True, env=env)


def test_findings_are_ranked_errors_first_and_causes_before_the_stalls_advice():
    """A stall's generic advice (nccl-init-stall, a warning with an applicable NCCL_DEBUG fix) never
    comes before the error that explains it (a host check's driver/library mismatch, whose fix is
    not gpuops'): `f` then offers no fix rather than the red herring's."""
    from gpuops.core.diagnose.triage import ranked, top_fix
    from gpuops.core.domain import Finding, Fix

    stall = Finding("nccl-init-stall", "warning", "dist_init silent 2m10s",
                    fix=Fix("restart with NCCL_DEBUG=INFO", applicable=True, plan_patch={"set_env": {"NCCL_DEBUG": "INFO"}}))
    shm = Finding("shm-too-small", "warning", "/dev/shm is 64 MiB", fix=Fix("give the container --shm-size"))
    driver = Finding("driver-library-mismatch", "error", "kernel module 580.159.04, libnvidia-ml 565.57.01",
                     fix=Fix("reboot, or reload the nvidia module"))
    assert [f.code for f in ranked([stall, shm, driver])] == ["driver-library-mismatch", "shm-too-small",
                                                              "nccl-init-stall"]
    assert top_fix([stall, shm, driver]) is None  # the top error's fix is not applicable: none in its place
    assert top_fix([stall]) is stall
