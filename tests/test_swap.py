"""`gpuops swap OLD MODEL`: the afternoon as one action, end to end on the simulated host over a real
sshd with SGLang's real benchmark: OLD ready → benchmarked → stopped → NEW ready on OLD's port and
GPUs → benchmarked → compared → kept; and a NEW whose start crashes, rolled back (OLD ready again on
its port), both deployments' histories kept."""

from __future__ import annotations

import json
import os
import re
import shutil
import sqlite3
import subprocess
import tempfile
import time
from pathlib import Path
from types import SimpleNamespace

import httpx
import pytest

from gpuops.core.deploy.store import Store
from gpuops.sim.host import setup_simhost
from tests.conftest import PACE, operator_hub
from tests.test_bench_cli import PROFILES, run_gpuops
from tests.test_cli import GPUOPS
from tests.test_secrets import free_port

GIB = 1024**3
NEW = "Qwen/Qwen2.5-7B-Instruct"  # 15 GB: fits the model dir's disk and oldie's GPU


@pytest.fixture
def box(sshd, sglang_venv, tmp_path):
    """A simulated 4-GPU host with the real SGLang venv over SSH; Qwen3-8B deployed as `oldie`
    (ready), Qwen3-32B's config in the operator's HF cache for the new plan."""
    root = Path(tempfile.mkdtemp(prefix="gpuops-swap-"))
    root.chmod(0o755)
    home = tmp_path / "home"
    (home / ".ssh").mkdir(parents=True)
    shutil.copy(sshd.client_key, home / ".ssh" / "id_ed25519")
    os.chmod(home / ".ssh" / "id_ed25519", 0o600)
    shutil.copy(sshd.known_hosts, home / ".ssh" / "known_hosts")
    (home / ".ssh" / "config").write_text(f"Host simbox\n  HostName 127.0.0.1\n  Port {sshd.port}\n  User {sshd.user}\n")
    hub = operator_hub(tmp_path / "hub", ("Qwen/Qwen3-8B", "qwen3__Qwen3-8B.json"),
                       ("Qwen/Qwen3-32B", "qwen3__Qwen3-32B.json"),
                       ("Qwen/Qwen2.5-7B-Instruct", "qwen2_5__Qwen2.5-7B-Instruct.json"))
    env = dict(os.environ, HOME=str(home), XDG_STATE_HOME=str(tmp_path / "state"),
               XDG_CONFIG_HOME=str(tmp_path / "cfg"), XDG_CACHE_HOME=str(tmp_path / "cache"), HF_HUB_CACHE=str(hub),
               HF_HUB_OFFLINE="1")
    for key in ("GPUOPS_CONFIG", "HF_TOKEN", "OPENAI_API_KEY", "API_KEY"):
        env.pop(key, None)
    sim = setup_simhost(root / "sim", gpus=4, engine_version="0.5.23", pace=PACE, engine_venv=str(sglang_venv))
    sim.set_sim(token_delay_s=0.001)
    cfg = tmp_path / "gpuops.toml"
    cfg.write_text(sim.host_block("gpu1", ssh="simbox") + f'model_dirs = ["{root / "models"}"]\n' + PROFILES)
    ns = SimpleNamespace(cfg=cfg, env=env, sim=sim, db=tmp_path / "state" / "gpuops" / "gpuops.db")
    port = free_port()
    out = run_gpuops(ns, "plan", "Qwen/Qwen3-8B", "--host", "gpu1", "--port", str(port), "--name", "oldie", "--json")
    assert out.returncode == 0, out.stderr
    (tmp_path / "old.json").write_text(out.stdout)
    try:
        out = run_gpuops(ns, "deploy", str(tmp_path / "old.json"), "--host", "gpu1", "--yes", "--json")
        assert out.returncode == 0, out.stderr + out.stdout[-2000:]
        yield SimpleNamespace(**vars(ns), port=port)
    finally:
        for name in ("oldie", "newbie"):
            run_gpuops(ns, "stop", name, "--yes", timeout=120)
        sim.shutdown()
        if ns.db.exists():
            for (remote_dir,) in sqlite3.connect(ns.db).execute("SELECT remote_dir FROM bench_runs"):
                if remote_dir:
                    shutil.rmtree(remote_dir, ignore_errors=True)
        shutil.rmtree(root, ignore_errors=True)


def swap(box, model: str, *args: str) -> tuple[int, list[dict], str]:
    out = run_gpuops(box, "swap", "oldie", model, "--name", "newbie", "--json", *args, timeout=600)
    return out.returncode, [json.loads(ln) for ln in out.stdout.splitlines() if ln.startswith("{")], out.stderr


def steps(events: list[dict]) -> list[str]:
    return [e["step"] for e in events if e["event"] == "swap"]


def status(box, name: str) -> dict:
    return json.loads(run_gpuops(box, "status", name, "--json").stdout)["deployment"]


def test_swap_benchmarks_replaces_compares_and_keeps(box):
    out = run_gpuops(box, "swap", "oldie", NEW, "--name", "newbie")  # asks first: no terminal
    assert out.returncode == 2 and "--yes" in out.stderr and status(box, "oldie")["state"] == "ready"
    assert "fetch Qwen/Qwen2.5-7B-Instruct there while oldie serves" in out.stderr
    bench = run_gpuops(box, "bench", "oldie", "--profile", "smoke", "--json", timeout=300)
    assert bench.returncode == 0, bench.stderr
    stored = json.loads(run_gpuops(box, "bench", "list", "--json").stdout)["runs"][-1]["id"]
    rc, events, err = swap(box, NEW, "--yes")
    assert rc == 0, err + json.dumps(events[-5:])
    assert steps(events) == ["plan", "fetch-new", "fetch-new", "bench-old", "stop-old", "deploy-new", "new-ready",
                             "bench-new", "compare", "kept"]
    # OLD's latest ok run of the profile is reused (--bench-old reuse, the default): no second benchmark of it
    (bench_old,) = [e for e in events if e.get("step") == "bench-old"]
    assert bench_old["reused"] is True and bench_old["run"] == stored
    plan_step = events[0]
    assert plan_step["model"] == NEW and any("--model-path" in d for d in plan_step["diff"])
    # Qwen3-8B's reasoning parser was its rule's: Qwen2.5-7B-Instruct never thinks, so it is not carried
    assert any(d.startswith("- --reasoning-parser qwen3  (the planner added it for deployment oldie (rule "
                            "reasoning-parser") for d in plan_step["diff"]), plan_step["diff"]
    result = events[-1]
    assert result["event"] == "swap-result" and result["outcome"] == "swapped"
    assert result["outage_s"] > 0 and events[-2]["outage_s"] == result["outage_s"]  # the last step says it too
    old, new = status(box, "oldie"), status(box, "newbie")
    assert old["state"] == "stopped" and new["state"] == "ready"
    # in the old one's place: its port, GPUs and served name (its clients keep working)
    assert new["port"] == box.port and new["gpu_ids"] == old["gpu_ids"]
    store = Store(box.db)
    try:
        assert store.deployment("newbie").plan.served_name == store.deployment("oldie").plan.served_name
        assert "--reasoning-parser" not in store.deployment("newbie").plan.argv
        # oldie's own port is not a conflict for the plan that replaces it (no "port N is in use")
        assert not [w for w in store.deployment("newbie").plan.warnings if "is in use" in w]
    finally:
        store.close()
    (bench_new,) = [e for e in events if e.get("step") == "bench-new"]
    assert bench_new["status"] == "ok", "\n".join(str(e.get("line") or e.get("error")) for e in events if e.get("error") or e.get("event") == "log")[-3000:]
    (cmp,) = [e["compare"] for e in events if e.get("step") == "compare"]
    assert [r["deployment"] for r in cmp["runs"]] == ["oldie", "newbie"] and cmp["note"] is None
    cols = cmp["columns"]
    assert all(c["baseline"] is not None and cols[c["baseline"]]["max_concurrency"] == c["max_concurrency"]
               and cols[c["baseline"]]["run"] == cmp["runs"][0]["id"] for c in cols), (cols, cmp["runs"])  # paired by concurrency
    # oldie is stopped now: swapping it again is refused in one line
    out = run_gpuops(box, "swap", "oldie", "Qwen/Qwen3-8B", "--name", "again", "--yes")
    assert out.returncode == 2 and "oldie is stopped" in out.stderr


def test_a_new_one_that_crashes_is_rolled_back_and_the_old_one_serves_again(box):
    """The new model's KV cache does not fit next to what GPU0 already reserves (the old, smaller
    one still does): its start crashes, --rollback-on-failure restarts oldie on its port."""
    box.sim.set_gpu(0, memory_reserved=100 * GIB)
    rc, events, err = swap(box, "Qwen/Qwen3-32B", "--yes", "--rollback-on-failure", "--bench-old", "none")
    assert rc == 0, err + json.dumps(events[-5:])
    assert steps(events)[-3:] == ["new-crashed", "rollback", "old-ready"]
    assert "bench-new" not in steps(events)
    assert [e for e in events if e.get("step") == "bench-old"] == [
        {"event": "swap", "step": "bench-old", "old": "oldie", "run": None, "skipped": True}]
    result = events[-1]
    assert result["outcome"] == "rolled-back" and "newbie crashed" in result["reason"] and result["before"] is None
    assert result["outage_s"] > 0 and events[-2]["outage_s"] == result["outage_s"]  # until oldie served again
    old, new = status(box, "oldie"), status(box, "newbie")
    assert old["state"] == "ready" and old["run"] == 2 and old["port"] == box.port
    assert new["state"] in ("crashed", "stopped")
    # both histories kept: oldie's first run and its rollback run, newbie's crash
    db = sqlite3.connect(box.db)
    runs = {r for (r,) in db.execute("SELECT DISTINCT run FROM events WHERE deployment = 'oldie'")}
    crashed = db.execute("SELECT COUNT(*) FROM events WHERE deployment = 'newbie' AND kind = 'state' "
                         "AND data_json LIKE '%crashed%'").fetchone()[0]
    assert runs == {1, 2} and crashed == 1
    rollback = db.execute("SELECT data_json FROM events WHERE deployment = 'oldie' AND kind = 'plan'").fetchall()
    assert rollback and "rolled back from newbie" in rollback[-1][0]
    assert httpx.get(f"http://127.0.0.1:{box.port}/health", timeout=10).status_code == 200  # it answers again


def test_the_new_weights_are_fetched_while_the_old_one_serves(box):
    """The outage is a start-up, not a download: NEW's weights come down (slowly here) while OLD still
    answers; only then is OLD stopped; the outage measured from that stop to NEW ready leaves the
    download out. --no-bench: no benchmark, no comparison. A second swap (back to the first model,
    whose weights are on the host) fetches nothing and prints its outage."""
    bad = run_gpuops(box, "swap", "oldie", NEW, "--no-bench", "--bench-old", "run", "--yes")
    assert bad.returncode == 2 and bad.stderr.strip() == "gpuops: --no-bench benchmarks neither: not with --bench-old run"
    box.sim.set_sim(download_rate=72 << 20)  # / PACE: ~1.5 GB/s, the 15 GB of NEW take ~10 s
    proc = subprocess.Popen([GPUOPS, "--config", str(box.cfg), "swap", "oldie", NEW, "--name", "newbie", "--no-bench",
                             "--yes", "--json"], stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
                            env=box.env)
    events: list[dict] = []
    answered_while_fetching = 0
    stopped_at = None
    try:
        assert proc.stdout is not None
        for line in proc.stdout:
            ev = json.loads(line)
            events.append(ev)
            if ev.get("step") == "fetch-new" and "status" not in ev:
                # the download runs: OLD still answers, and NEW is recorded as downloading
                deadline = time.monotonic() + 60
                while time.monotonic() < deadline and status(box, "newbie")["state"] != "downloading":
                    time.sleep(0.2)
                assert status(box, "newbie")["state"] == "downloading"
                assert httpx.get(f"http://127.0.0.1:{box.port}/health", timeout=10).status_code == 200
                answered_while_fetching += 1
            if ev.get("step") == "stop-old":
                stopped_at = time.monotonic()
    finally:
        rc = proc.wait(timeout=600)
    ended_at = time.monotonic()
    assert rc == 0, proc.stderr.read() if proc.stderr else ""
    assert answered_while_fetching == 1 and stopped_at is not None
    assert steps(events) == ["plan", "fetch-new", "fetch-new", "bench-old", "stop-old", "deploy-new", "new-ready",
                             "bench-new", "kept"]
    fetched = [e for e in events if e.get("step") == "fetch-new"][-1]
    assert fetched["status"] == "ok" and not fetched["present"] and fetched["bytes"] > 14e9
    assert fetched["seconds"] >= 5  # the slow download, all of it before the stop
    result = events[-1]
    assert result["outcome"] == "swapped" and result["before"] is None and result["after"] is None
    assert 0 < result["outage_s"] <= ended_at - stopped_at + 1.0  # from the stop of OLD: no download in it
    # in the store: every download event of NEW precedes OLD's stop
    db = sqlite3.connect(box.db)
    last_fetch = db.execute("SELECT MAX(ts) FROM events WHERE deployment = 'newbie' AND kind = 'progress' "
                            "AND data_json LIKE '%downloading%'").fetchone()[0]
    old_stop = db.execute("SELECT MAX(ts) FROM events WHERE deployment = 'oldie' AND kind = 'state' "
                          "AND data_json LIKE '%stopped%'").fetchone()[0]
    assert last_fetch < old_stop, (last_fetch, old_stop)
    # back again in human words: the first model's weights are on the host, nothing to fetch
    out = run_gpuops(box, "swap", "newbie", "Qwen/Qwen3-8B", "--name", "oldie", "--no-bench", "--yes", timeout=600)
    assert out.returncode == 0, out.stderr + out.stdout
    assert "oldie's weights: already on the host" in out.stdout
    assert re.search(r"swapped: oldie serves in newbie's place; outage \d+\.\d s \(from the stop of newbie", out.stdout), \
        out.stdout
