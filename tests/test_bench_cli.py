"""`gpuops bench` end to end: SGLang's real bench_serving and run_eval (the host venv) run by gpuops
over the real sshd on 127.0.0.1 against a deployment of the simulated host that serves with an API
key; sweep, quality, cancel, and compare/export/import on the stored runs.

Each real run costs ~13 s of SGLang imports: this module makes five of them."""

from __future__ import annotations

import json
import os
import shutil
import signal
import sqlite3
import subprocess
import tempfile
import threading
import time
from pathlib import Path
from types import SimpleNamespace

import httpx
import pytest

from gpuops.core.bench.runner import EVENT_KINDS
from gpuops.sim.host import setup_simhost
from tests.conftest import PACE
from tests.sshd import free_port
from tests.test_cli import GPUOPS
from tests.test_hosts import processes_matching

DATA = Path(__file__).parent / "data"
NAME = "bench8b"
MODULE = "sglang.benchmark.serving"  # what 0.5.23 runs (core/engines/sglang/versions.bench_module)
PROFILES = f"""
[bench.profiles.smoke]
num_prompts = 12
random_input_len = 64
random_output_len = 32

[bench.profiles.sweep]
concurrencies = [1, 4]
num_prompts = 4
random_input_len = 32
random_output_len = 16

[bench.profiles.quality]
eval_data_path = "{DATA / 'bench' / 'gsm8k-tiny.jsonl'}"
num_examples = 3
max_concurrency = 3

[bench.profiles.long]
num_prompts = 2000
max_concurrency = 2
random_output_len = 512
"""


def run_gpuops(w, *args: str, timeout: float = 180) -> subprocess.CompletedProcess:
    return subprocess.run([GPUOPS, "--config", str(w.cfg), *args], capture_output=True, text=True, env=w.env,
                          timeout=timeout)


def events_of(out: str) -> list[dict]:
    return [json.loads(line) for line in out.splitlines() if line.startswith("{")]


@pytest.fixture(scope="module")
def w(sshd, sglang_venv, bench_tokenizer, tmp_path_factory):
    """A simulated 4-GPU host with the real SGLang venv, reached over SSH, with a ready deployment
    serving Qwen3-8B on 0.0.0.0 (so with --api-key from its 0600 env file) and a tokenizer in its
    model folder."""
    tmp = tmp_path_factory.mktemp("bench")
    root = Path(tempfile.mkdtemp(prefix="gpuops-bench-"))
    root.chmod(0o755)
    home = tmp / "home"
    (home / ".ssh").mkdir(parents=True)
    shutil.copy(sshd.client_key, home / ".ssh" / "id_ed25519")
    os.chmod(home / ".ssh" / "id_ed25519", 0o600)
    shutil.copy(sshd.known_hosts, home / ".ssh" / "known_hosts")
    (home / ".ssh" / "config").write_text(f"Host simbox\n  HostName 127.0.0.1\n  Port {sshd.port}\n  User {sshd.user}\n")
    hub = tmp / "hub"
    sha = "0123456789abcdef0123456789abcdef01234567"
    snap = hub / "models--Qwen--Qwen3-8B" / "snapshots" / sha
    snap.mkdir(parents=True)
    (hub / "models--Qwen--Qwen3-8B" / "refs").mkdir()
    (hub / "models--Qwen--Qwen3-8B" / "refs" / "main").write_text(sha)
    shutil.copy(DATA / "configs" / "qwen3__Qwen3-8B.json", snap / "config.json")
    env = dict(os.environ, HOME=str(home), XDG_STATE_HOME=str(tmp / "state"), XDG_CONFIG_HOME=str(tmp / "cfg"),
               XDG_CACHE_HOME=str(tmp / "cache"), HF_HUB_CACHE=str(hub), HF_HUB_OFFLINE="1")
    for key in ("GPUOPS_CONFIG", "HF_TOKEN", "OPENAI_API_KEY", "API_KEY"):
        env.pop(key, None)
    sim = setup_simhost(root / "sim", gpus=4, engine_version="0.5.23", pace=PACE, engine_venv=str(sglang_venv))
    sim.set_sim(token_delay_s=0.001)
    cfg = tmp / "gpuops.toml"
    cfg.write_text(sim.host_block("gpu1", ssh="simbox") + f'model_dirs = ["{root / "models"}"]\n'
                   'serve_host = "0.0.0.0"\n' + PROFILES)
    ns = SimpleNamespace(cfg=cfg, env=env, sim=sim, db=tmp / "state" / "gpuops" / "gpuops.db")
    port = free_port()
    out = run_gpuops(ns, "plan", "Qwen/Qwen3-8B", "--host", "gpu1", "--port", str(port), "--json", timeout=120)
    assert out.returncode == 0, out.stderr
    plan = json.loads(out.stdout)
    assert "${GPUOPS_API_KEY}" in plan["argv"]
    (tmp / "plan.json").write_text(out.stdout)
    try:
        out = run_gpuops(ns, "deploy", str(tmp / "plan.json"), "--host", "gpu1", "--name", NAME, "--yes", "--json")
        assert out.returncode == 0, out.stderr + out.stdout[-3000:]
        for f in bench_tokenizer.iterdir():
            shutil.copy(f, Path(plan["model_path"]) / f.name)
        env_file = sshd.home / ".local/state/gpuops/deployments" / NAME / "env"
        key = next(line.split("=", 1)[1] for line in env_file.read_text().splitlines()
                   if line.startswith("GPUOPS_API_KEY="))
        yield SimpleNamespace(**vars(ns), url=f"http://127.0.0.1:{port}", key=key, plan=plan)
    finally:
        run_gpuops(ns, "stop", NAME, "--yes", timeout=120)
        sim.shutdown()
        if ns.db.exists():  # the run folders the benchmarks left on the host
            for (remote_dir,) in sqlite3.connect(ns.db).execute("SELECT remote_dir FROM bench_runs"):
                if remote_dir:
                    shutil.rmtree(remote_dir, ignore_errors=True)
        shutil.rmtree(root, ignore_errors=True)


class Watch:
    """This test's benchmark processes on the host while it runs: their argv and environment. Only
    those whose argv holds every marker count (the module and the test's own model folder: another
    run's benchmarks on a shared machine are not this test's)."""

    def __init__(self, *markers: str):
        self.markers = [m.encode() for m in markers]
        self.seen: dict[tuple[int, bytes], bytes] = {}  # (pid, argv) -> environ: a pid may exec
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, daemon=True)

    def _run(self) -> None:
        while not self._stop.is_set():
            for proc in Path("/proc").iterdir():
                if not proc.name.isdigit():
                    continue
                try:
                    argv = (proc / "cmdline").read_bytes()
                    if all(m in argv for m in self.markers) and (int(proc.name), argv) not in self.seen:
                        self.seen[int(proc.name), argv] = (proc / "environ").read_bytes()
                except OSError:
                    continue
            self._stop.wait(0.05)

    def __enter__(self) -> "Watch":
        self._thread.start()
        return self

    def __exit__(self, *exc) -> None:
        self._stop.set()
        self._thread.join(5)


def test_smoke_over_ssh_with_the_api_key_in_the_environment_only(w):
    with Watch(MODULE, w.plan["model_path"]) as watch:  # its --model/--tokenizer: the test's own folder
        out = run_gpuops(w, "bench", NAME, "--json")
    assert out.returncode == 0, out.stderr + out.stdout[-3000:]
    events = events_of(out.stdout)
    assert all(e["schema"] == 1 and e["ts"].endswith("Z") and e["event"] in EVENT_KINDS for e in events)
    assert events[0]["event"] == "state" and events[0]["state"] == "running"
    assert events[0]["module"] == MODULE and events[0]["sglang_version"] == "0.5.23"
    assert events[-1]["event"] == "state" and events[-1]["state"] == "ok"
    progress = [(e["done"], e["total"]) for e in events if e["event"] == "progress"]
    assert progress[-1] == (12, 12) and len(progress) >= 2
    assert [d for d, _ in progress] == sorted(d for d, _ in progress)  # counted up while it ran
    (result,) = [e for e in events if e["event"] == "result"]
    assert result["summary"]["completed"] == 12 and result["summary"]["output_throughput"] > 0
    # the functional checks ran first, over a port forward, with the deployment's key
    (checks,) = [e["checks"] for e in events if e["event"] == "checks"]
    assert {c["name"]: c["ok"] for c in checks} == {"tool_calls": True, "thinking": True, "mtp": None}, checks
    assert "no speculative" in next(c["reason"] for c in checks if c["name"] == "mtp").lower()
    # the real bench_serving ran on the host with the key in its environment, never in an argv
    bench_procs = [(argv, environ) for (_, argv), environ in watch.seen.items()
                   if argv.split(b"\0")[1:3] == [b"-m", MODULE.encode()]]
    assert bench_procs
    for argv, environ in bench_procs:
        assert w.key.encode() not in argv
        assert b"OPENAI_API_KEY=" + w.key.encode() in environ.split(b"\0")
    assert all(w.key.encode() not in argv for _, argv in watch.seen)
    assert w.key not in out.stdout + out.stderr
    for f in w.db.parent.glob("gpuops.db*"):  # the store, its WAL included
        assert w.key.encode() not in f.read_bytes(), f

    run_id = events[0]["run"]
    doc = json.loads(run_gpuops(w, "bench", "show", str(run_id), "--json").stdout)["run"]
    assert (doc["status"], doc["deployment"], doc["model"], doc["sglang_version"]) == ("ok", NAME, "Qwen/Qwen3-8B",
                                                                                        "0.5.23")
    assert doc["gpus"] == {"count": 1, "ids": [0], "names": ["NVIDIA H200"]}
    assert doc["plan"]["argv"] == w.plan["argv"] and doc["settings"]["num_prompts"] == 12
    assert doc["started_at"] <= doc["finished_at"]
    assert doc["checks"] == checks
    text = run_gpuops(w, "bench", "show", str(run_id)).stdout
    assert "check tool_calls: pass" in text and "check mtp: skipped" in text
    (record,) = doc["records"]
    assert record["request_rate"] == "inf" and record["max_concurrency"] == 4 and record["completed"] == 12
    assert record["server_info"]["api_key"] == "***"
    assert record["server_info"]["port"] == int(w.url.rsplit(":", 1)[1])
    # the JSONL stays on the host, in the run's folder
    assert Path(doc["remote_dir"], "step-0.jsonl").read_text().count("\n") == 1


def test_sweep_then_compare_export_and_import(w, tmp_path):
    out = run_gpuops(w, "bench", NAME, "--profile", "sweep")
    assert out.returncode == 0, out.stderr + out.stdout
    assert "step 1/2: concurrency 1, 4 requests" in out.stdout
    assert "step 2/2: concurrency 4, 16 requests" in out.stdout  # at least 4 waves per step
    sweep_id = int(out.stdout.split()[1].strip("#:"))
    run = json.loads(run_gpuops(w, "bench", "show", str(sweep_id), "--json").stdout)["run"]
    assert [(r["max_concurrency"], r["completed"]) for r in run["records"]] == [(1, 4), (4, 16)]

    out = run_gpuops(w, "bench", "import", str(DATA / "bench" / "bench_serving-0.5.23.jsonl"), "--json")
    assert out.returncode == 0, out.stderr
    imported = json.loads(out.stdout)["run"]
    assert imported["source"] == "import" and imported["sglang_version"] == "0.5.23"

    doc = json.loads(run_gpuops(w, "bench", "compare", str(sweep_id), str(imported["id"]), "--json").stdout)
    labels = [c["label"] for c in doc["columns"]]
    assert labels == [f"#{sweep_id} c=1", f"#{sweep_id} c=4", f"#{imported['id']} c=1", f"#{imported['id']} c=8"]
    # the first run's columns are the baselines; the imported c=1 is compared with the sweep's c=1,
    # its c=8 with nothing (the sweep has no c=8: no delta, and the note says so)
    assert [c["baseline"] for c in doc["columns"]] == [0, 1, 0, None]
    assert doc["note"] == f"no delta for #{imported['id']} c=8: #{sweep_id} has no run at that concurrency"
    out_tp = next(m for m in doc["metrics"] if m["key"] == "output_throughput")
    base = run["records"][0]["output_throughput"]
    assert out_tp["values"][0] == base and out_tp["delta_percent"][0] is None
    assert out_tp["delta_percent"][2] == round((out_tp["values"][2] - base) / base * 100, 2)

    md = tmp_path / "runs.md"
    assert run_gpuops(w, "bench", "export", str(sweep_id), str(imported["id"]), "--format", "md", "-o",
                      str(md)).returncode == 0
    text = md.read_text()
    assert f"#{sweep_id} sweep (ok) {NAME}: Qwen/Qwen3-8B, SGLang 0.5.23, 1x NVIDIA H200" in text
    assert "| Output throughput (tok/s) |" in text and "%)" in text
    out = run_gpuops(w, "bench", "export", str(sweep_id), "--format", "csv")
    import csv

    rows = list(csv.DictReader(out.stdout.splitlines()))
    assert [(r["run"], r["max_concurrency"], r["completed"]) for r in rows] == [(str(sweep_id), "1", "4"),
                                                                               (str(sweep_id), "4", "16")]
    assert float(rows[1]["output_throughput"]) == run["records"][1]["output_throughput"]
    out = run_gpuops(w, "bench", "export", str(imported["id"]), "--format", "json")
    assert json.loads(out.stdout)["runs"][0]["records"][0]["request_rate"] == "inf"


def _requests_served(url: str) -> float:
    from prometheus_client.parser import text_string_to_metric_families

    text = httpx.get(url + "/metrics", timeout=10).text
    fams = {f.name: f for f in text_string_to_metric_families(text)}
    return sum(s.value for s in fams["sglang:num_requests"].samples)


def test_quality_profile_runs_sglang_run_eval(w):
    before = _requests_served(w.url)
    out = run_gpuops(w, "bench", NAME, "--profile", "quality", "--json")
    assert out.returncode == 0, out.stderr + out.stdout[-3000:]
    events = events_of(out.stdout)
    assert events[0]["module"] == "sglang.test.run_eval"
    (quality,) = [e for e in events if e["event"] == "quality"]
    # the simulated server answers with words, never a number: SGLang's scorer gives 0 of 3
    assert quality["eval"] == "gsm8k" and quality["score"] == 0.0 and quality["num_examples"] == 3
    # one chat completion per example, through the API key, after the functional checks' five (tool
    # calls streamed and not; thinking streamed, not, and off; MTP skipped: no speculative decoding)
    (checks,) = [e["checks"] for e in events if e["event"] == "checks"]
    assert [c["ok"] for c in checks] == [True, True, None]
    assert _requests_served(w.url) - before == 5 + 3
    assert [e["done"] for e in events if e["event"] == "progress"][-1] == 3
    run = json.loads(run_gpuops(w, "bench", "show", str(events[0]["run"]), "--json").stdout)["run"]
    assert run["quality"]["score"] == 0.0 and run["records"] == []


def test_cancel_stops_the_benchmark_on_the_host(w):
    proc = subprocess.Popen([GPUOPS, "--config", str(w.cfg), "bench", NAME, "--profile", "long", "--json"],
                            stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, env=w.env,
                            start_new_session=True)
    try:
        events = []
        for line in proc.stdout:
            events.append(json.loads(line))
            if events[-1]["event"] == "progress" and events[-1]["done"] > 0:
                break
        assert processes_matching(f"-m {MODULE}", w.plan["model_path"]), "the benchmark runs on the host"
        os.kill(proc.pid, signal.SIGINT)
        rest, err = proc.stdout.read(), proc.stderr.read()
        proc.wait(60)
    finally:
        if proc.poll() is None:
            proc.kill()
    assert proc.returncode == 130, err
    events += events_of(rest)
    assert events[-1]["event"] == "state" and events[-1]["state"] == "cancelled"
    deadline = time.monotonic() + 10  # the guard's TERM, then KILL after 2 s
    while processes_matching(f"-m {MODULE}", w.plan["model_path"]) and time.monotonic() < deadline:
        time.sleep(0.1)
    assert processes_matching(f"-m {MODULE}", w.plan["model_path"]) == []
    run_id = events[0]["run"]
    row = sqlite3.connect(w.db).execute("SELECT status, finished_at FROM bench_runs WHERE id = ?",
                                        (run_id,)).fetchone()
    assert row[0] == "cancelled" and row[1]


def test_a_model_served_from_the_hosts_hf_cache_is_benchmarked_with_its_snapshots_tokenizer(w, tmp_path):
    """A host without model_dirs: the plan serves the repo id from the host's HF cache. The
    benchmark reads the tokenizer from that cache's snapshot folder on the host (given the repo id,
    bench_serving would ask the Hub, which a host without a way out cannot reach)."""
    import re

    hf_home = Path(tempfile.mkdtemp(prefix="gpuops-hfcache-"))
    hf_home.chmod(0o755)
    block = re.sub(r"^env = \{ PATH = (\"[^\"]*\"), HF_HOME = \"[^\"]*\" \}$",
                   lambda m: f'env = {{ PATH = {m.group(1)}, HF_HOME = "{hf_home}", HF_HUB_OFFLINE = "1" }}',
                   w.sim.host_block("gpu1", ssh="simbox"), flags=re.M)
    assert f'HF_HOME = "{hf_home}"' in block
    cfg = tmp_path / "hf.toml"
    cfg.write_text(block + PROFILES)
    ns = SimpleNamespace(**{**vars(w), "cfg": cfg})
    port = free_port()
    try:
        out = run_gpuops(ns, "plan", "Qwen/Qwen3-8B", "--host", "gpu1", "--port", str(port), "--json", timeout=120)
        assert out.returncode == 0, out.stderr
        assert json.loads(out.stdout)["model_path"] == "Qwen/Qwen3-8B"  # no model dir: the host's HF cache
        (tmp_path / "plan.json").write_text(out.stdout)
        out = run_gpuops(ns, "deploy", str(tmp_path / "plan.json"), "--host", "gpu1", "--name", "fromcache", "--yes",
                         "--json")
        assert out.returncode == 0, out.stderr + out.stdout[-3000:]
        states = [e["state"] for e in events_of(out.stdout) if e["event"] == "state"]
        assert states[:2] == ["planned", "downloading"] and states[-1] == "ready"  # into the cache, with progress
        snaps = list((hf_home / "hub" / "models--Qwen--Qwen3-8B" / "snapshots").iterdir())
        assert len(snaps) == 1 and (snaps[0] / "tokenizer.json").exists()
        with Watch(MODULE, str(snaps[0])) as watch:
            out = run_gpuops(ns, "bench", "fromcache", "--profile", "smoke", "--json")
        assert out.returncode == 0, out.stderr + out.stdout[-3000:]
        events = events_of(out.stdout)
        assert events[-1]["event"] == "state" and events[-1]["state"] == "ok", events[-3:]
        argvs = [argv.split(b"\0") for (_, argv) in watch.seen]
        assert any(a[a.index(b"--tokenizer") + 1] == str(snaps[0]).encode() for a in argvs if b"--tokenizer" in a)
    finally:
        run_gpuops(ns, "stop", "fromcache", "--yes", timeout=120)
        shutil.rmtree(hf_home, ignore_errors=True)
