"""The genuine SGLang server deployed through gpuops, crashing for real: `python -m sglang.launch_server
--device cpu` with SGLang 0.5.23's real code from the host venv (scripts/sglang-host-venv.sh), and
0.5.10's for the MTP case, on a machine without a GPU. What gpuops says (the outcome, the phase, the
finding) is checked against what the real server prints, never against the simulator:

- a tiny random Qwen3 loads up to `Load weight begin.`, then the scheduler dies on the CPU rotary
  path (`ModuleNotFoundError: No module named 'vllm'`) and the server quits (`Received sigquit`):
  crashed in weights; the same with an API key, through gpuops' launcher, over SSH, with the key in
  no process's command line;
- the seed's MTP crash (0.5.10, Qwen3.5-MoE) with its fix applied: that ValueError is gone, the next
  start stops later at another error.

Its refusals are in test_real_sglang_refusals.py, its distributed starts in test_real_sglang_nodes.py
(split so that parallel workers share them: each real start costs 20-40 s of these 2 cores)."""

from __future__ import annotations

import asyncio
import json
import threading
import time

import pytest

from tests.real_sglang import (  # noqa: F401 (fixtures, as parameters below)
    DEPLOY_TIMEOUT,
    assert_weights_crash,
    drop_flag,
    findings,
    last_state,
    local,
    log_lines,
    over_ssh,
    session_members,
    shown,
    wait_gone,
)
from tests.sshd import free_port

pytestmark = pytest.mark.timeout(900)


def test_a_real_crash_at_weights(local, tiny_qwen3):
    local.configure(model_dirs=(tiny_qwen3.parent,))
    name = local.name("weights")
    plan = local.plan(tiny_qwen3, name, free_port())
    rc, events, err = local.deploy(plan)
    assert_weights_crash(events, rc)
    # the server's own kill_process_tree ended its children: nothing of it is left
    assert wait_gone(local.server_pid(name), 30) == {}
    out = local.gpuops("status", name, "--json")
    assert json.loads(out.stdout)["deployment"]["state"] == "crashed"


def test_a_real_crash_with_an_api_key_through_the_launcher_over_ssh(over_ssh, tiny_qwen3):
    """serve_host 0.0.0.0: the plan carries `--api-key ${GPUOPS_API_KEY}`, the launcher fills the key
    into sys.argv inside the process and runs sglang.launch_server (runpy): real SGLang still gets to
    the same crash (its multiprocessing children included), and no process's command line, nor the
    log, holds the key."""
    rig = over_ssh
    rig.configure(extra='serve_host = "0.0.0.0"\n', model_dirs=(tiny_qwen3.parent,))
    name = rig.name("key")
    plan = rig.plan(tiny_qwen3, name, free_port())
    argv = json.loads(plan.read_text())["argv"]
    assert argv[argv.index("--host") + 1] == "0.0.0.0" and argv[argv.index("--api-key") + 1] == "${GPUOPS_API_KEY}"

    seen: dict[int, set[bytes]] = {}  # every command line each process of the server's session showed
    done = threading.Event()

    def scan() -> None:
        pid_file = rig.dep_dir(name) / "pid"
        while not done.is_set():
            try:
                sid = int(pid_file.read_text())
            except (OSError, ValueError):
                time.sleep(0.02)
                continue
            for pid, cmdline in session_members(sid).items():
                seen.setdefault(pid, set()).add(cmdline)
            time.sleep(0.02)

    scanner = threading.Thread(target=scan, daemon=True)
    scanner.start()
    try:
        rc, events, err = rig.deploy(plan)
    finally:
        done.set()
        scanner.join(10)
    assert_weights_crash(events, rc)

    env_file = rig.dep_dir(name) / "env"
    assert env_file.stat().st_mode & 0o777 == 0o600
    (key,) = [line.split("=", 1)[1] for line in env_file.read_text().splitlines()
              if line.startswith("GPUOPS_API_KEY=")]
    key = key.strip("'\"")
    assert len(key) >= 16
    cmdlines = [c for cs in seen.values() for c in cs]
    main = [c for c in cmdlines if b"sglang.launch_server" in c and b"launch.py" in c]
    assert main and all(b"${GPUOPS_API_KEY}" in c for c in main), cmdlines[:5]  # the launcher, with the placeholder
    assert any(c.startswith(b"sglang::scheduler") for c in cmdlines), cmdlines  # a real child was seen
    assert not [c for c in cmdlines if key.encode() in c]
    log = (rig.dep_dir(name) / "log").read_text()
    assert key not in log and "'api_key': '***'" in log  # SGLang got the key; its output masked it
    assert not [line for line in log_lines(events) if key in line]


def test_the_seeds_mtp_crash_and_its_fix_with_sglang_0_5_10(local, qwen35_moe_config, sglang_0510, monkeypatch):
    """SGLang 0.5.10's code (PYTHONPATH) with a Qwen3.5-MoE config and MTP but without the extra_buffer
    mamba cache: its ValueError; gpuops: crashed, spec-config-invalid with an applicable fix. Applied
    (the Ops API: there is no CLI verb for a fix), the next start no longer hits that ValueError and
    stops later, at `Mamba extra_buffer is only supported on CUDA devices` (no CUDA here)."""
    local.configure(model_dirs=(qwen35_moe_config.parent,))
    name = local.name("mtp")

    def the_seeds_plan(doc: dict) -> None:
        # gpuops' planner already gives MTP the two settings it needs: take them out, as the seed's
        # hand-written command had them
        assert doc["argv"][doc["argv"].index("--mamba-scheduler-strategy") + 1] == "extra_buffer"
        assert doc["env"]["SGLANG_ENABLE_SPEC_V2"] == "1" and "--speculative-algorithm" in doc["argv"]
        drop_flag(doc["argv"], "--mamba-scheduler-strategy")
        del doc["env"]["SGLANG_ENABLE_SPEC_V2"]
        doc["env"]["PYTHONPATH"] = str(sglang_0510)

    # planned as for four H200s: the fit is not what this is about (SGLang stops at its arguments)
    out = local.gpuops("plan", str(qwen35_moe_config), "--host", "cpu1", "--name", name, "--port", str(free_port()),
                       "--gpus", "4", "--gpu-memory", "141", "--sglang-version", "0.5.10", "--json")
    assert out.returncode == 0, out.stderr
    doc = json.loads(out.stdout)
    doc["argv"].extend(["--device", "cpu"])
    the_seeds_plan(doc)
    plan = local.tmp / "mtp.plan.json"
    plan.write_text(json.dumps(doc))
    rc, events, err = local.deploy(plan)
    assert rc == 1, err + shown(events)
    last = last_state(events)
    assert last["state"] == "crashed" and last["phase"] == "starting", shown(events)
    seed = ("ValueError: Speculative decoding for Qwen3_5MoeForConditionalGeneration is not compatible with "
            "radix cache when using --mamba-scheduler-strategy no_buffer.")
    assert any(line.startswith(seed) for line in log_lines(events)), shown(events)
    (f,) = [f for f in findings(events) if f["code"] == "spec-config-invalid"]
    assert any(ev["line"].startswith(seed) for ev in f["evidence"])
    assert f["fix"]["applicable"]
    patch = f["fix"]["plan_patch"]
    assert patch["set_flags"] == {"--mamba-scheduler-strategy": ["extra_buffer"]}
    assert patch["set_env"] == {"SGLANG_ENABLE_SPEC_V2": "1"}

    from gpuops.core.config import load_inventory
    from gpuops.core.deploy.store import Store
    from gpuops.core.domain import FindingEvent, PlanEvent, StateEvent
    from gpuops.core.ops import Ops

    for key in ("HOME", "XDG_STATE_HOME", "XDG_CONFIG_HOME", "XDG_CACHE_HOME", "HF_HUB_OFFLINE"):
        monkeypatch.setenv(key, local.env[key])
    monkeypatch.delenv("PYTHONPATH", raising=False)

    async def apply() -> str:
        ops = Ops(load_inventory(str(local.cfg)))
        try:
            return await ops.apply_fix(name, patch, code=f["code"], summary=f["fix"]["summary"], confirmed=True)
        finally:
            await ops.close()

    outcome = asyncio.run(asyncio.wait_for(apply(), DEPLOY_TIMEOUT))
    store = Store(local.tmp / "state" / "gpuops" / "gpuops.db")
    try:
        d = store.deployment(name)
        run2 = list(store.events(name, run=d.run))
    finally:
        store.close()
    assert d.run == 2 and outcome == "crashed"
    (why,) = [e for e in run2 if isinstance(e, PlanEvent)]
    assert why.code == "spec-config-invalid"
    assert sorted(map(tuple, why.diff)) == [("+", "--mamba-scheduler-strategy extra_buffer"),
                                           ("+", "SGLANG_ENABLE_SPEC_V2=1")]
    assert d.plan.env["SGLANG_ENABLE_SPEC_V2"] == "1" and d.plan.env["PYTHONPATH"] == str(sglang_0510)
    # the log is not stored (it lives on the host): run 2's part of the log file begins at run_offset
    log = (local.dep_dir(name) / "log").read_bytes()
    first, second = log[:d.run_offset].decode(), log[d.run_offset:].decode()
    assert seed in first
    assert "not compatible with radix cache" not in second  # THAT crash is gone
    later = "Mamba extra_buffer is only supported on CUDA devices"
    assert later in second, second[-3000:]
    final = [e for e in run2 if isinstance(e, StateEvent)][-1]
    assert final.state == "crashed"
    run2_findings = [e for e in run2 if isinstance(e, FindingEvent)]
    assert not [e for e in run2_findings if any("not compatible with radix cache" in (ev.line or "")
                                                for ev in e.evidence)]
    assert [e for e in run2_findings if any(later in (ev.line or "") for ev in e.evidence)], run2_findings
