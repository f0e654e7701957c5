"""Proof on real GPUs: the stall watcher against a real NCCL rendezvous.

Runs gpuops' own Deployer and the deployment's Watch (process launcher on the local host, the log
follower, the phase tracker, the stall watcher, the NVML sampler) against tests/gpu/nccl_server.py, a stand-in
server whose dist_init is a real 2-rank NCCL rendezvous, in three cases:

  stall      rank 1 is held back for good: rank 0 waits in the rendezvous (as a real 2-rank init
             does when a peer never joins). With [stall] dist_init = 20 and a 1 s poll, the watcher must flag
             nccl-init-stall within 20 s + one poll of the last progress (the dist_init line, or
             GPU memory that moved after it: rank 0's CUDA context), with both GPUs' real NVML
             memory readings in its evidence (compared with nvidia-smi's at that moment).
  slow-peer  rank 1 joins 8 s late: a slow rendezvous that completes; never flagged.
  healthy    both ranks join at once; never flagged.

On a stall the watch also runs the host triage (the probe is a `python -c` of the host's python:
the stand-in `python` passes everything but `-m sglang.launch_server` to the real interpreter); the
stall case must see its checks event, each check as it read on this host.

Needs torch, nvidia-ml-py, msgspec and psutil (cp312 wheels carried to the GPU machine); nothing else
of gpuops' dependencies. 2 GPUs for all three cases; on 1 GPU only the stall case runs (rank 1 is
held back and never touches a GPU, so the rendezvous is still a real world-size-2 one).
Usage: python3 tests/gpu/check_nccl_stall.py [--threshold 20] [--cases ...] [--gpus N]
Prints what it saw, and RESULT: PASS/FAIL; exit 0 on PASS.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import shutil
import subprocess
import sys
import tempfile
import time
from pathlib import Path

REPO = Path(__file__).resolve().parents[2]


def import_core(tmp: Path) -> None:
    """gpuops.core from this checkout without installing it (its deps aren't on the GPU box)."""
    pkg = tmp / "path" / "gpuops"
    pkg.mkdir(parents=True)
    (pkg / "core").symlink_to(REPO / "core")
    sys.path.insert(0, str(tmp / "path"))


def nvidia_smi_used() -> dict[int, int]:
    if shutil.which("nvidia-smi") is None:  # the CPU smoke run (GPUOPS_STANDIN_BACKEND=gloo)
        return {}
    out = subprocess.run(["nvidia-smi", "--query-gpu=index,memory.used", "--format=csv,noheader,nounits"],
                         capture_output=True, text=True, timeout=30).stdout
    return {int(i): int(v) for i, v in (line.split(",") for line in out.strip().splitlines())}


async def run_case(case: str, threshold: float, tmp: Path, gpus: int) -> dict:
    from gpuops.core.config import HostConfig
    from gpuops.core.deploy.deployer import Deployer
    from gpuops.core.deploy.store import Store
    from gpuops.core.deploy.watch import Bus, Watch, WatchOptions
    from gpuops.core.domain import ModelSummary, Plan, event_json, event_kind
    from gpuops.core.hosts.host import LocalHost

    work = tmp / case
    (work / "home").mkdir(parents=True)
    os.environ["HOME"] = str(work / "home")
    wrapper = work / "python"
    # the host's "python": the server command runs the stand-in, anything else (the triage probe's
    # `python -c`) the real interpreter
    wrapper.write_text(f"#!/bin/sh\nif [ \"$1\" = -m ] && [ \"$2\" = sglang.launch_server ]; then\n"
                       f"    exec {sys.executable} {REPO / 'tests/gpu/nccl_server.py'} \"$@\"\nfi\n"
                       f"exec {sys.executable} \"$@\"\n")
    wrapper.chmod(0o755)
    hold = {"stall": ["--hold-back-rank", "1", "--hold-back-s", "-1"],
            "slow-peer": ["--hold-back-rank", "1", "--hold-back-s", "8"], "healthy": []}[case]
    port = {"stall": 30101, "slow-peer": 30102, "healthy": 30103}[case]
    gpu_ids = (0, 1) if gpus >= 2 else (0,)
    plan = Plan(name=f"nccl-{case}", host="localhost", model=ModelSummary(id="nccl-standin"), tp=2, gpu_ids=gpu_ids,
                port=port, launcher="process", engine_version="0.5.23", python=str(wrapper),
                env={"NCCL_DEBUG": "WARN"}, argv=["--tp", "2", "--port", str(port), "--nccl-port", str(port + 1000),
                                                  *hold])
    host = LocalHost(HostConfig(name="localhost", local=True, ssh=None, python=sys.executable))
    store = Store(work / "gpuops.db")
    bus = Bus()
    events: list[tuple[float, dict]] = []
    bus.listen(plan.name, lambda e: events.append((time.monotonic(), {"event": event_kind(e), **event_json(e)})))
    deployer = Deployer(host, plan, store, bus)
    deployer.begin()
    t0 = time.monotonic()
    await deployer.launch()
    watch = Watch(host, store.deployment(plan.name), store, bus, WatchOptions(
        stall={"dist_init": threshold}, poll_s=1.0, quick_check=False, launcher=deployer.launcher))
    try:
        outcome = await asyncio.wait_for(watch.run(), timeout=threshold + 150)
        smi = nvidia_smi_used()
    finally:
        await deployer.launcher.stop()
        store.close()
    begin = next((t for t, e in events if e["event"] == "phase" and e.get("phase") == "dist_init"), None)
    findings = [(t, e) for t, e in events if e["event"] == "finding"]
    stalls = [(t, f) for t, f in findings if f.get("code") == "nccl-init-stall"]
    result = {"case": case, "outcome": outcome, "seconds_total": round(time.monotonic() - t0, 1),
              "findings": [f.get("code") for _, f in findings], "nvidia_smi_used_mib": smi,
              "gpu_ids": list(gpu_ids),
              "checks": [e["checks"] for _, e in events if e["event"] == "checks"]}
    if stalls:
        t, f = stalls[0]
        result["flag_after_dist_init_s"] = round(t - begin, 2) if begin is not None else None
        # silence as the watcher measured it: since the last progress, which is the dist_init line
        # or, later, GPU memory that moved (rank 0's CUDA context appears after the line)
        result["silent_s"] = f["data"]["silent_s"]
        result["summary"] = f["summary"]
        result["evidence"] = f["evidence"]
    result["phases"] = [e.get("phase") for _, e in events if e["event"] == "phase"]
    return result


def verdict(r: dict, threshold: float, poll: float) -> list[str]:
    problems = []
    if r["case"] == "stall":
        if r["outcome"] != "stalled" or "flag_after_dist_init_s" not in r:
            problems.append(f"stall case ended {r['outcome']} without nccl-init-stall")
        else:
            silent = r["silent_s"]
            if not (threshold <= silent <= threshold + poll + 0.5):
                problems.append(f"flagged after {silent} s of silence (want {threshold}..{threshold + poll + 0.5})")
            readings = [e["reading"] for e in r["evidence"] if e["source"] == "nvml"]
            want = [f"GPU{i}" for i in r["gpu_ids"]]
            if [x.split()[0] for x in readings] != want:
                problems.append(f"evidence lacks the NVML readings of {want}: {readings}")
            if len(r["checks"]) != 1:
                problems.append(f"the host triage after the stall gave {len(r['checks'])} checks events, not 1")
            else:
                names = {c["name"] for c in r["checks"][0]}
                for need in ("driver-library-mismatch", "port-in-use", "shm-too-small", "leftover-gpu-process"):
                    if need not in names:
                        problems.append(f"the host triage has no {need} check: {sorted(names)}")
            for x in readings:
                gpu, mib = int(x.split()[0][3:]), float(x.split()[3])
                if abs(mib - r["nvidia_smi_used_mib"].get(gpu, float("nan"))) <= 64:
                    continue
                problems.append(f"GPU{gpu}: watcher read {mib} MiB, nvidia-smi {r['nvidia_smi_used_mib'].get(gpu)} MiB")
    else:
        if r["outcome"] != "ready" or "nccl-init-stall" in r["findings"]:
            problems.append(f"{r['case']}: outcome {r['outcome']}, findings {r['findings']}")
    return problems


def main() -> int:
    ap = argparse.ArgumentParser()
    ap.add_argument("--threshold", type=float, default=20.0)
    ap.add_argument("--cases", nargs="+", default=None)
    ap.add_argument("--gpus", type=int, default=None, help="GPUs to use (default: all nvidia-smi lists)")
    a = ap.parse_args()
    gpus = a.gpus if a.gpus is not None else len(nvidia_smi_used()) or 2
    cases = a.cases or (["stall", "slow-peer", "healthy"] if gpus >= 2 else ["stall"])
    print(f"GPUs used: {gpus}; cases: {', '.join(cases)}")
    if shutil.which("nvidia-smi"):
        print(subprocess.run(["nvidia-smi", "-L"], capture_output=True, text=True).stdout.strip())
    problems: list[str] = []
    with tempfile.TemporaryDirectory(prefix="gpuops-gpu-") as d:
        tmp = Path(d)
        os.environ["XDG_STATE_HOME"] = str(tmp / "state")
        os.environ["XDG_CACHE_HOME"] = str(tmp / "cache")
        import_core(tmp)
        for case in cases:
            r = asyncio.run(run_case(case, a.threshold, tmp, gpus))
            print(json.dumps(r, indent=1))
            p = verdict(r, a.threshold, 1.0)
            print(f"{case}: {'PASS' if not p else 'FAIL: ' + '; '.join(p)}", flush=True)
            problems += p
    print("RESULT:", "PASS" if not problems else "FAIL")
    return 0 if not problems else 1


if __name__ == "__main__":
    sys.exit(main())
