"""The genuine SGLang server's distributed start (see test_real_sglang.py):

- a TP2 start of two nodes whose second node never comes waits at `Init parallel begin.`: stalled
  in dist_init (over SSH), then stopped, its processes gone;
- through gpuops' multi-node path, two inventory hosts (this machine twice) with one genuine server
  each: node 1 held back, node 0 waits in the real rendezvous and the stall finding names node 1;
  both started, the rendezvous completes and both stop at SGLang's CPU limit in dist_init (crashed,
  never a stall)."""

from __future__ import annotations

import json
import subprocess

import pytest

from tests.real_sglang import (  # noqa: F401 (fixtures, as parameters below)
    DEPLOY_TIMEOUT,
    events_of,
    findings,
    last_state,
    local,
    log_lines,
    over_ssh,
    session_members,
    set_flag,
    shown,
    states,
    two_node_plan,
    wait_gone,
)
from tests.sshd import free_port

pytestmark = pytest.mark.timeout(900)


def test_a_real_distributed_start_that_never_completes_stalls_in_dist_init_over_ssh(over_ssh, tiny_qwen3):
    """--tp 2 --nnodes 2 --node-rank 0: node 0 waits at `Init parallel begin.` for node 1, which never
    comes. The stall watcher says stalled in dist_init; `gpuops stop` ends every process of it."""
    rig = over_ssh
    rig.configure(stall="dist_init = 20\n", model_dirs=(tiny_qwen3.parent,))
    name = rig.name("stall")
    dist_port = free_port()

    def two_nodes(doc: dict) -> None:
        set_flag(doc["argv"], "--tp-size", "2")
        doc["argv"] += ["--nnodes", "2", "--node-rank", "0", "--dist-init-addr", f"127.0.0.1:{dist_port}"]
        doc["tp"], doc["gpu_ids"] = 2, [0, 1]
        doc["env"].update(CUDA_VISIBLE_DEVICES="0,1", SGLANG_CPU_OMP_THREADS_BIND="0|1")  # else a NUMA assertion

    plan = rig.plan(tiny_qwen3, name, free_port(), two_nodes)
    rc, events, err = rig.deploy(plan)
    assert rc == 1, err + shown(events)
    last = last_state(events)
    assert last["state"] == "stalled" and last["phase"] == "dist_init", shown(events)
    assert "weights" not in states(events)
    assert any("Init parallel begin." in line for line in log_lines(events))
    (stall,) = [f for f in findings(events) if f["code"] in ("nccl-init-stall", "startup-stall")]
    assert stall["data"]["phase"] == "dist_init" and stall["data"]["silent_s"] >= 20
    assert any(ev["source"] == "ps" for ev in stall["evidence"])  # the live processes as evidence

    sid = rig.server_pid(name)
    alive = session_members(sid)
    assert any(c.startswith(b"sglang::scheduler_TP0") for c in alive.values()), alive  # still waiting
    out = rig.gpuops("stop", name, "--yes", timeout=180)
    assert out.returncode == 0, out.stderr
    assert wait_gone(sid, 60) == {}
    out = rig.gpuops("status", name, "--json")
    assert json.loads(out.stdout)["deployment"]["state"] == "stopped"


def test_a_real_two_node_deploy_whose_node_1_is_held_back_names_node_1(local, tiny_qwen3, tmp_path):
    """Through gpuops' multi-node path: two inventory hosts (this machine twice), one genuine SGLang
    server per node. Node 1's interpreter is held back before SGLang's code runs (a sitecustomize
    that sleeps): node 0 really waits at `Init parallel begin.`, the stall watcher flags it, and the
    finding names node 1, its host and its deployment. `stop` ends both nodes' processes."""
    rig = local
    name, path, dist = two_node_plan(rig, tiny_qwen3, tmp_path, hold_node_1=True)
    out = subprocess.run(rig.deploy_cmd(path), capture_output=True, text=True, env=rig.env, timeout=DEPLOY_TIMEOUT)
    events = events_of(out.stdout)
    mine = [e for e in events if e.get("deployment") == name]
    assert out.returncode == 1, out.stderr + shown(mine)
    last = last_state(mine)
    assert last["state"] == "stalled" and last["phase"] == "dist_init", shown(mine)
    assert any("Init parallel begin." in line for line in log_lines(mine))  # the genuine server, waiting
    named = [f for f in findings(mine) if f.get("data", {}).get("member") == f"{name}-n1"]
    assert named and named[0]["data"]["node_rank"] == 1 and named[0]["data"]["host"] == "cpu2", shown(mine)
    assert "node 1 (cpu2" in named[0]["summary"] and dist in named[0]["summary"]
    node1 = [e for e in events if e.get("deployment") == f"{name}-n1"]
    assert "dist_init" not in states(node1)  # it never got there
    sids = [rig.server_pid(name), rig.server_pid(f"{name}-n1")]
    assert all(session_members(sid) for sid in sids)  # both still running: node 0 waiting, node 1 held
    stop = rig.gpuops("stop", name, "--yes", timeout=180)
    assert stop.returncode == 0, stop.stderr
    assert [wait_gone(sid, 60) for sid in sids] == [{}, {}]


def test_a_real_two_node_deploy_whose_nodes_both_join_gets_past_the_rendezvous(local, tiny_qwen3, tmp_path):
    """Both nodes start: the genuine rendezvous completes (node 0 goes on past `Init parallel begin.`
    to its NCCL communicator, which it sets up only once every rank has joined), then SGLang's
    multi-node path on a CPU stops there for real (`ValueError: Expected a cuda device, but got:
    cpu`): gpuops says crashed in dist_init, cites that error, and never calls it a stall."""
    rig = local
    name, path, _ = two_node_plan(rig, tiny_qwen3, tmp_path, hold_node_1=False)
    out = subprocess.run(rig.deploy_cmd(path), capture_output=True, text=True, env=rig.env, timeout=DEPLOY_TIMEOUT)
    events = events_of(out.stdout)
    node0 = [e for e in events if e.get("deployment") == name]
    node1 = [e for e in events if e.get("deployment") == f"{name}-n1"]
    assert out.returncode == 1, out.stderr + shown(node0)
    assert "stalled" not in states(node0) and last_state(node0)["state"] == "crashed", shown(node0)
    assert last_state(node0)["phase"] == "dist_init"
    lines = log_lines(node0)
    # past the rendezvous: both joined (else what went wrong: the error lines, not the traceback's last frames)
    assert any("sglang is using nccl" in line for line in lines), [ln for ln in lines if "Error" in ln] or lines[-30:]
    assert any("Init parallel begin." in line for line in log_lines(node1))  # node 1's own real start
    cuda = "Expected a cuda device, but got: cpu"
    cited = [f for f in findings(node0) if f["severity"] == "error"
             and any(cuda in (ev.get("line") or ev.get("reading") or "") for ev in f["evidence"])
             or cuda in f.get("summary", "")]
    assert cited, [f["code"] + ": " + f["summary"] for f in findings(node0)]
    stop = rig.gpuops("stop", name, "--yes", timeout=180)
    assert stop.returncode == 0, stop.stderr
