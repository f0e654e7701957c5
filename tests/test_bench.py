"""core/bench.py without SGLang's heavy imports: profiles and their validation, bench_serving's
real JSONL, the host-side relay run for real (live lines, the key in the environment), the live
/metrics poller against the simulated server, compare/export, the simulated host's wrapper, and
the command line's refusals. The real bench_serving and run_eval runs are in test_bench_cli.py."""

from __future__ import annotations

import asyncio
import csv
import hashlib
import io
import json
import os
import subprocess
import sys
import threading
from pathlib import Path

import httpx
import pytest

from tests.plans import make_plan
from tqdm import tqdm

from gpuops.core.bench.runner import (BenchInputError, Profile, Target, compare, compare_rows, export, import_jsonl, normalize_record,
                               parse_jsonl, parse_metrics, parse_progress, poll_metrics, resolve_profile)
from gpuops.core.config import HostConfig, parse_inventory
from gpuops.core.hosts.host import LocalHost, script_source
from gpuops.core.hosts.programs import bench_relay
from gpuops.core.hosts.files import env_file_text
from gpuops.sim.host import setup_simhost
from gpuops.core.deploy.store import Store
from tests.test_cli import gpuops
from tests.test_hosts import processes_matching
from tests.test_sglang_sim import MTP, QWEN3, Server, model_dir

FIXTURE = Path(__file__).parent / "data" / "bench" / "bench_serving-0.5.23.jsonl"
GSM8K = Path(__file__).parent / "data" / "bench" / "gsm8k-tiny.jsonl"


# ------------------------------------------------------------------ profiles


def test_default_profiles_and_config_overrides():
    inv = parse_inventory(f"""
[bench.profiles.smoke]
num_prompts = 8
[bench.profiles.sweep]
max_concurrency = 8
[bench.profiles.quality]
eval_data_path = "{GSM8K}"
[bench.profiles.nightly]
concurrencies = [2, 32]
random_output_len = 128
[bench.profiles.mmlu-ish]
num_examples = 10
eval_data_path = "/data/gsm8k.jsonl"
""", "/etc/gpuops.toml")
    smoke = resolve_profile("smoke", inv.bench_profiles)
    assert smoke.kind == "serving" and smoke.settings["num_prompts"] == 8 and smoke.steps() == [4]
    assert smoke.settings["dataset_name"] == "random-ids" and smoke.settings["request_rate"] == "inf"
    assert resolve_profile("latency").steps() == [1]
    assert resolve_profile("throughput").steps() == [256]
    sweep = resolve_profile("sweep")
    assert sweep.steps() == [1, 4, 16, 64]
    assert [sweep.num_prompts(c) for c in sweep.steps()] == [32, 32, 64, 256]  # at least 4 waves
    assert resolve_profile("sweep", inv.bench_profiles).steps() == [8]  # max_concurrency replaces the sweep
    assert resolve_profile("smoke", overrides={"concurrencies": [1, 2]}).steps() == [1, 2]
    quality = resolve_profile("quality", inv.bench_profiles)
    assert quality.kind == "quality" and quality.settings == {"eval_name": "gsm8k", "num_examples": 200,
                                                              "max_concurrency": 64, "eval_data_path": str(GSM8K)}
    nightly = resolve_profile("nightly", inv.bench_profiles)  # a new name starts from smoke
    assert nightly.steps() == [2, 32] and nightly.settings["random_output_len"] == 128
    assert nightly.settings["random_input_len"] == 256
    assert resolve_profile("mmlu-ish", inv.bench_profiles).kind == "quality"  # starts from quality
    assert Profile("x", "serving", {"num_prompts": 5}).to_json() == {"name": "x", "kind": "serving",
                                                                     "settings": {"num_prompts": 5}}


@pytest.mark.parametrize("name, configured, overrides, message", [
    ("nightly", {}, None, "unknown profile 'nightly' (known: latency, quality, smoke, sweep, throughput)"),
    ("Smoke", {}, None, "profile: invalid name"),
    ("quality", {}, None, "bench.profiles.quality: set eval_data_path to a gsm8k-format JSONL file on the host"),
    ("quality", {"quality": {"eval_name": "mmlu", "eval_data_path": "/x"}}, None,
     "bench.profiles.quality.eval_name: only gsm8k runs from a local file"),
    ("quality", {"quality": {"eval_data_path": "/x", "num_prompts": 4}}, None,
     "bench.profiles.quality: num_prompts does not apply to a quality profile"),
    ("smoke", {"smoke": {"num_examples": 4}}, None,
     "bench.profiles.smoke: num_examples does not apply to a serving profile"),
    ("smoke", {"smoke": {"dataset_name": "random"}}, None,
     "bench.profiles.smoke: dataset_name 'random' needs dataset_path"),
    ("smoke", {}, {"max_concurrency": 2, "concurrencies": [1]}, "set max_concurrency (one run) or concurrencies"),
    ("smoke", {}, {"num_prompts": 0}, "bench.profiles.smoke (overrides).num_prompts: expected an integer > 0, got 0"),
    ("smoke", {}, {"request_rate": "fast"}, "request_rate: expected a number > 0 or \"inf\", got 'fast'"),
    ("smoke", {}, {"dataset_path": "rel/path.json"}, "dataset_path: expected an absolute path"),
    ("smoke", {}, {"prompts": 3}, "unknown setting 'prompts' (known: backend, concurrencies,"),
])
def test_profile_errors_are_one_clear_line(name, configured, overrides, message):
    with pytest.raises(BenchInputError) as info:
        resolve_profile(name, configured, overrides)
    assert message in str(info.value) and "\n" not in str(info.value)


# ------------------------------------------------------------------ records and output


def test_real_bench_serving_jsonl_is_read_faithfully():
    text = FIXTURE.read_text()
    assert '"request_rate": Infinity' in text and '"api_key": "sk-abc"' in text  # as SGLang 0.5.23 wrote it
    records = parse_jsonl(text, FIXTURE.name)
    raw = [json.loads(line) for line in text.splitlines()]
    assert len(records) == 2 and [r["max_concurrency"] for r in records] == [1, 8]
    for rec, orig in zip(records, raw):
        assert set(rec) == set(orig) and len(rec) >= 49
        assert rec["request_rate"] == "inf"
        assert {k: v for k, v in rec.items() if k not in ("request_rate", "server_info")} == \
               {k: v for k, v in orig.items() if k not in ("request_rate", "server_info")}
        assert rec["server_info"]["api_key"] == "***"
        assert rec["server_info"]["internal_states"][0]["api_key"] == "***"
        assert rec["server_info"]["tokenizer_path"] == orig["server_info"]["tokenizer_path"]  # not a secret
    assert "sk-abc" not in json.dumps(records, allow_nan=False)  # strict JSON, nothing secret left
    assert normalize_record({"request_rate": 2.5, "x": float("nan"), "server_info": {
        "launch_command": "python -m sglang.launch_server --api-key sk-1 --port 1"}}) == {
        "request_rate": 2.5, "x": None, "server_info": {
            "launch_command": "python -m sglang.launch_server --api-key *** --port 1"}}
    with pytest.raises(BenchInputError, match=r"^f.jsonl:2: not JSON"):
        parse_jsonl(text.splitlines()[0] + "\n{oops\n", "f.jsonl")
    with pytest.raises(BenchInputError, match=r"^f.jsonl:1: not a bench_serving record"):
        parse_jsonl('{"a": 1}\n', "f.jsonl")
    with pytest.raises(BenchInputError, match="no bench_serving records"):
        parse_jsonl("\n", "f.jsonl")


def test_progress_from_tqdm_lines():
    buf = io.StringIO()
    bar = tqdm(total=20, file=buf, mininterval=0)
    for _ in range(20):
        bar.update(1)
    bar.close()
    seen = [parse_progress(seg) for seg in buf.getvalue().replace("\n", "\r").split("\r") if seg.strip()]
    assert [p for p in seen if p] and all(p is not None for p in seen)
    assert seen[0] == (0, 20) and seen[-1] == (20, 20)
    assert parse_progress("#Input tokens: 609") is None
    assert parse_progress("Mean TTFT (ms):                          5.48") is None


# A stand-in benchmark for the relay: a tqdm bar on stderr that waits for the test before it goes
# on (so a line delivered late would hang the test), what it got for OPENAI_API_KEY, its exit status.
CHILD = r"""
import hashlib, os, sys, time
from tqdm import tqdm
go = sys.argv[1]
print("key sha256", hashlib.sha256(os.environ.get("OPENAI_API_KEY", "").encode()).hexdigest())
print("unbuffered", os.environ.get("PYTHONUNBUFFERED"), "cwd", os.getcwd())
bar = tqdm(total=3, mininterval=0)
bar.update(1)
while not os.path.exists(go):
    time.sleep(0.01)
bar.update(2)
bar.close()
sys.exit(7)
"""


async def test_the_relay_streams_live_lines_and_passes_the_key_in_the_environment(tmp_path):
    key = "sk-gpuops-it's a \"key\" $HOME"
    env_file = tmp_path / "env"
    env_file.write_text(env_file_text({"GPUOPS_API_KEY": key, "OTHER": "x"}, "test"))
    go, run_dir = tmp_path / "go", tmp_path / "runs" / "r1"
    host = LocalHost(HostConfig(name="h", local=True, ssh=None, python=sys.executable))
    argv = [sys.executable, "-c", script_source(bench_relay), "run", str(env_file), str(run_dir), sys.executable, "-c", CHILD,
            str(go)]
    assert not any(key in a for a in argv)
    lines = []

    async def read() -> int | None:
        async with host.stream(argv) as stream:
            async for line in stream:
                lines.append(line)
                if parse_progress(line) == (1, 3):
                    go.touch()  # the child waits for this: the bar came through while it ran
        return stream.returncode

    rc = await asyncio.wait_for(read(), 30)
    assert rc == 7
    assert lines[0] == "key sha256 " + hashlib.sha256(key.encode()).hexdigest()
    assert lines[1] == f"unbuffered 1 cwd {run_dir}" and (run_dir.stat().st_mode & 0o777) == 0o700
    assert [parse_progress(x) for x in lines[2:]][-1] == (3, 3)
    # no env file: no key
    lines.clear()
    go.unlink()
    argv[4] = ""
    assert await asyncio.wait_for(read(), 30) == 7
    assert lines[0] == "key sha256 " + hashlib.sha256(b"").hexdigest()


# ------------------------------------------------------------------ live metrics


def test_parse_metrics_sums_counts_over_ranks_and_averages_ratios():
    text = "\n".join([
        "# TYPE sglang:num_running_reqs gauge",
        'sglang:num_running_reqs{dp_rank="0"} 3', 'sglang:num_running_reqs{dp_rank="1"} 5',
        "# TYPE sglang:num_queue_reqs gauge", 'sglang:num_queue_reqs{dp_rank="0"} 1',
        "# TYPE sglang:gen_throughput gauge",
        'sglang:gen_throughput{dp_rank="0"} 100.5', 'sglang:gen_throughput{dp_rank="1"} 99.5',
        "# TYPE sglang:full_token_usage gauge",
        'sglang:full_token_usage{dp_rank="0"} 0.2', 'sglang:full_token_usage{dp_rank="1"} 0.4', ""])
    m = parse_metrics(text, ts="2026-01-01T00:00:00.000Z")
    assert (m.running_reqs, m.queued_reqs, m.gen_throughput, m.accept_length) == (8, 1, 200.0, None)
    assert m.token_usage == pytest.approx(0.3) and m.error is None  # hybrid models: full_token_usage
    assert m.to_json()["ts"] == "2026-01-01T00:00:00.000Z"
    assert parse_metrics("sglang:x{ 1\n").error.startswith("unreadable /metrics")


async def test_poll_metrics_follows_the_simulated_server(tmp_path):
    model = model_dir(tmp_path / "models", QWEN3, 16_381_470_720, shards=5)
    sim = setup_simhost(tmp_path / "sim", gpus=2, engine_version="0.5.23", scenario="ok-with-mtp", pace=0.02)
    sim.set_sim(token_delay_s=0.002)
    full = Server(sim, "--model-path", model, *MTP, "--enable-metrics", "--api-key", "sk-poll",
                  env={"CUDA_VISIBLE_DEVICES": "0"})
    bare = Server(sim, "--model-path", model, env={"CUDA_VISIBLE_DEVICES": "1"})
    env_file = tmp_path / "env"
    env_file.write_text(env_file_text({"GPUOPS_API_KEY": "sk-poll"}, "test"))
    host = LocalHost(HostConfig(name="sim", local=True, ssh=None, python=str(sim.python)))
    try:
        full.wait_for("fired up")
        bare.wait_for("fired up")
        target = Target(host=host, url=full.url, home=str(tmp_path), env_file=str(env_file))
        request = threading.Thread(target=lambda: httpx.post(
            full.url + "/v1/completions", json={"prompt": "go", "max_tokens": 1500},
            headers={"Authorization": "Bearer sk-poll"}, timeout=60))
        readings = []
        agen = poll_metrics(target, interval=0.1)
        async for m in agen:
            readings.append(m)
            if len(readings) == 1:
                assert m.error is None and m.running_reqs == 0
                request.start()
            elif m.running_reqs == 1 and m.gen_throughput and m.accept_length:
                break
        await agen.aclose()
        request.join(60)
        assert readings[-1].accept_length == pytest.approx(3.13) and 0 <= readings[-1].token_usage < 1
        agen = poll_metrics(Target(host=host, url=bare.url, home=str(tmp_path)), interval=0.1)
        first = await agen.__anext__()
        await agen.aclose()
        assert first.error == f"HTTP 404 from {bare.url}/metrics (start the server with --enable-metrics)"
        assert processes_matching(f"{full.url}/metrics") == [] and processes_matching(f"{bare.url}/metrics") == []
        with pytest.raises(ValueError):
            await poll_metrics(target, interval=0).__anext__()
    finally:
        full.stop()
        bare.stop()


# ------------------------------------------------------------------ compare and export


def _stored(tmp_path) -> tuple[Store, list]:
    store = Store(tmp_path / "g.db")
    imported = import_jsonl(store, FIXTURE.read_text(), FIXTURE.name)
    records = imported.records
    faster = [dict(r, output_throughput=r["output_throughput"] * 1.5, median_ttft_ms=r["median_ttft_ms"] / 2)
              for r in records[::-1]]  # c=8 first, then c=1
    other = store.add_bench_run(profile="sweep", settings={}, deployment="new", model="Qwen/Qwen3.5-122B-A10B",
                                engine_version="0.5.23", gpus={"count": 4, "ids": [0, 1, 2, 3], "names": ["NVIDIA H200"] * 4},
                                records=faster, status="ok")
    quality = store.add_bench_run(profile="quality", settings={"eval_name": "gsm8k"}, status="ok")
    quality = store.finish_bench_run(quality.id, "ok", quality={"eval": "gsm8k", "score": 0.75})
    return store, [imported, other, quality]


def test_compare_matches_concurrencies_and_gives_percent_deltas(tmp_path):
    store, runs = _stored(tmp_path)
    imported, other, quality = runs
    doc = compare(runs)
    assert doc["schema"] == 1 and [r["id"] for r in doc["runs"]] == [1, 2, 3]
    assert [c["label"] for c in doc["columns"]] == ["#1 c=1", "#1 c=8", "#2 c=8", "#2 c=1", "#3"]
    assert [c["baseline"] for c in doc["columns"]] == [0, 1, 1, 0, None]  # the eval has no concurrency pair
    assert doc["note"] is None
    by_key = {m["key"]: m for m in doc["metrics"]}
    out = by_key["output_throughput"]
    assert out["better"] == "higher" and out["unit"] == "tok/s"
    assert out["delta_percent"][:4] == [None, None, 50.0, 50.0] and out["values"][4] is None
    assert by_key["median_ttft_ms"]["delta_percent"][2:4] == [-50.0, -50.0]
    assert by_key["quality_score"]["values"] == [None, None, None, None, 0.75]
    assert "accept_length" not in by_key  # no run measured it
    assert doc["checks"] == []
    # functional checks stored with a run show beside the figures, per column of that run
    store.set_bench_checks(2, [{"name": "tool_calls", "ok": False, "reason": "no tool_calls", "details": {}},
                               {"name": "mtp", "ok": None, "reason": "no speculative decoding", "details": {}}])
    runs = [store.bench_run(i) for i in (1, 2, 3)]
    doc = compare(runs)
    assert doc["checks"] == [{"name": "tool_calls", "values": ["not run", "not run", False, False, "not run"]},
                             {"name": "mtp", "values": ["not run", "not run", None, None, "not run"]}]
    _, rows = compare_rows(doc)
    assert rows[-2:] == [["check tool_calls", "-", "-", "FAIL", "FAIL", "-"], ["check mtp", "-", "-", "skipped",
                                                                             "skipped", "-"]]
    store.close()


def test_compare_never_pairs_different_concurrencies(tmp_path):
    """c=256 against c=4 gave "-82.1%" under a header that says "against the same concurrency":
    no delta where the first run has no record of that concurrency, and the note says so."""
    store = Store(tmp_path / "g.db")
    rec = {"max_concurrency": 4, "output_throughput": 100.0, "median_ttft_ms": 10.0, "completed": 8}
    a = store.add_bench_run(profile="smoke", settings={}, status="ok", records=[rec])
    b = store.add_bench_run(profile="throughput", settings={}, status="ok",
                            records=[dict(rec, max_concurrency=256, output_throughput=17.9)])
    doc = compare([a, b])
    assert [c["label"] for c in doc["columns"]] == [f"#{a.id} c=4", f"#{b.id} c=256"]
    assert [c["baseline"] for c in doc["columns"]] == [0, None]
    assert all(d is None for m in doc["metrics"] for d in m["delta_percent"])
    assert doc["note"] == f"no run shares a concurrency with #{a.id} (4): no deltas"
    header, rows = compare_rows(doc)
    assert not any("%" in cell for row in rows for cell in row[1:])
    c = store.add_bench_run(profile="sweep", settings={}, status="ok",
                            records=[dict(rec, output_throughput=150.0), dict(rec, max_concurrency=64)])
    doc = compare([a, c])
    assert [m["delta_percent"] for m in doc["metrics"] if m["key"] == "output_throughput"] == [[None, 50.0, None]]
    assert doc["note"] == f"no delta for #{c.id} c=64: #{a.id} has no run at that concurrency"
    store.close()


def test_export_md_csv_json(tmp_path):
    store, runs = _stored(tmp_path)
    md = export(runs, "md")
    assert md.splitlines()[1] == ("- #2 sweep (ok) new: Qwen/Qwen3.5-122B-A10B, SGLang 0.5.23, 4x NVIDIA H200, "
                                  "started -")
    table = [line for line in md.splitlines() if line.startswith("| Output throughput")]
    assert table and table[0].count("(+50.0%)") == 2
    rows = list(csv.DictReader(io.StringIO(export(runs, "csv"))))
    assert [(r["run"], r["max_concurrency"], r["quality_score"]) for r in rows] == [
        ("1", "1", ""), ("1", "8", ""), ("2", "8", ""), ("2", "1", ""), ("3", "", "0.75")]
    assert float(rows[2]["output_throughput"]) == runs[1].records[0]["output_throughput"]
    assert rows[2]["gpu_names"] == "NVIDIA H200;NVIDIA H200;NVIDIA H200;NVIDIA H200"
    doc = json.loads(export(runs, "json"))
    assert doc["schema"] == 1 and doc["runs"][0]["records"][0]["request_rate"] == "inf"
    with pytest.raises(BenchInputError, match="--format must be md, csv or json"):
        export(runs, "xlsx")
    store.close()


# ------------------------------------------------------------------ the simulated host's wrapper


def test_simulated_host_runs_sglang_modules_from_the_sglang_venv(tmp_path):
    venv = tmp_path / "venv"
    (venv / "bin").mkdir(parents=True)
    (venv / "bin" / "python").write_text('#!/bin/sh\necho "venv python: $* PYTHONPATH=${PYTHONPATH-unset}"\n')
    (venv / "bin" / "python").chmod(0o755)
    bare = setup_simhost(tmp_path / "bare", gpus=1)
    out = subprocess.run([str(bare.python), "-m", "sglang.bench_serving", "--help"], capture_output=True, text=True)
    assert out.returncode == 1 and out.stdout == ""
    assert out.stderr == ("gpuops simulated host: python -m sglang.bench_serving needs a real SGLang virtualenv; "
                          "set one up with gpuops sim setup DIR --sglang-venv PATH\n")
    sim = setup_simhost(tmp_path / "sim", gpus=1, engine_venv=str(venv))
    for module in ("sglang.bench_serving", "sglang.benchmark.serving", "sglang.test.run_eval"):
        out = subprocess.run([str(sim.python), "-m", module, "--x"], capture_output=True, text=True,
                             env=dict(os.environ, PYTHONPATH="/opt/site"))
        assert out.stdout == f"venv python: -m {module} --x PYTHONPATH=/opt/site\n"
    # from a python the wrapper ran (the stand-ins first on its PYTHONPATH): the venv sees none of them
    nested = f"import subprocess; subprocess.run([{str(sim.python)!r}, '-m', 'sglang.test.run_eval'])"
    env = {k: v for k, v in os.environ.items() if k != "PYTHONPATH"}
    out = subprocess.run([str(sim.python), "-c", nested], capture_output=True, text=True, env=env)
    assert out.stdout == "venv python: -m sglang.test.run_eval PYTHONPATH=unset\n"
    # launch_server stays the simulator's; a host without SGLang has none of its modules
    out = subprocess.run([str(sim.python), "-m", "sglang.launch_server", "--help"], capture_output=True, text=True)
    assert out.returncode == 0 and "--model-path" in out.stdout
    none = setup_simhost(tmp_path / "none", gpus=1, engine_version="none", engine_venv=str(venv))
    out = subprocess.run([str(none.python), "-m", "sglang.bench_serving"], capture_output=True, text=True)
    assert out.returncode == 1 and "No module named 'sglang'" in out.stderr
    with pytest.raises(ValueError, match="is not a virtualenv"):
        setup_simhost(tmp_path / "x", gpus=1, engine_venv=str(tmp_path))
    out = gpuops("sim", "setup", str(tmp_path / "cli"), "--gpus", "1", "--sglang-venv", str(venv))
    assert out.returncode == 0, out.stderr
    assert f"SGLANG_VENV='{venv}'" in (tmp_path / "cli" / "bin" / "python").read_text()
    out = gpuops("sim", "setup", str(tmp_path / "cli2"), "--sglang-venv", str(tmp_path / "nope"))
    assert out.returncode == 2 and "is not a virtualenv" in out.stderr


# ------------------------------------------------------------------ the command line's refusals


@pytest.fixture
def cli(tmp_path):
    """A simulated host without the SGLang venv (nothing here imports SGLang) and a clean state."""
    sim = setup_simhost(tmp_path / "sim", gpus=2, engine_version="0.5.23")
    cfg = tmp_path / "config.toml"
    cfg.write_text(sim.host_block("sim") + sim.host_block("other")
                   + f'\n[bench.profiles.quality]\neval_data_path = "{tmp_path / "missing.jsonl"}"\n')
    env = dict(os.environ, XDG_STATE_HOME=str(tmp_path / "state"), XDG_CONFIG_HOME=str(tmp_path / "cfg"),
               HOME=str(tmp_path / "home"))  # the local host's home: run folders go under it
    env.pop("GPUOPS_CONFIG", None)

    def run(*args: str) -> subprocess.CompletedProcess:
        return gpuops("--config", str(cfg), *args, env=env, timeout=120)

    run.db = tmp_path / "state" / "gpuops" / "gpuops.db"
    return run


def test_bad_input_exits_2_with_one_line(cli, tmp_path):
    store = Store(cli.db)
    store.add_deployment("sim", make_plan("dep", model="m", port=1))
    store.close()
    (tmp_path / "bad.jsonl").write_text('{"backend": "sglang"}\n')
    cases = [
        (["bench"], "bench needs a deployment NAME, --url URL, or one of: list, show, compare, import, export"),
        (["bench", "nope"], "no deployment named 'nope'"),
        (["bench", "dep"], "deployment dep is planned, not ready"),
        (["bench", "dep", "--url", "http://x:1"], "give a deployment NAME or --url, not both"),
        (["bench", "--url", "http://127.0.0.1:1"], "--url needs --host H: the host whose python runs the benchmark"),
        (["bench", "--url", "ftp://x", "--host", "sim"], "--url must look like http://HOST:PORT, got 'ftp://x'"),
        (["bench", "--url", "http://x:1", "--host", "gpu9"], "unknown host 'gpu9' (known: sim, other)"),
        (["bench", "--url", "http://x:1", "--host", "sim", "--profile", "nope"], "unknown profile 'nope'"),
        (["--readonly", "bench", "--url", "http://x:1", "--host", "sim"], "read-only"),
        (["bench", "--url", "http://127.0.0.1:1", "--host", "sim", "--profile", "quality"],
         f"eval_data_path {tmp_path / 'missing.jsonl'}: no such readable file on sim"),
        (["bench", "show"], "bench show takes 1 RUN id(s), got 0"),
        (["bench", "show", "1"], "no benchmark run #1"),
        (["bench", "show", "-1"], "RUN is a run id (a positive integer), got '-1'"),
        (["bench", "compare", "1"], "bench compare takes 2 or more RUN id(s), got 1"),
        (["bench", "export", "1"], "bench export needs --format md, csv or json"),
        (["bench", "import", str(tmp_path / "none.jsonl")], "none.jsonl: cannot read it"),
        (["bench", "import", str(tmp_path / "bad.jsonl")], "bad.jsonl:1: not a bench_serving record"),
        (["bench", "list", "3"], "bench list takes 0 RUN id(s), got 1"),
    ]
    for args, message in cases:
        out = cli(*args)
        assert out.returncode == 2, (args, out.stderr)
        assert message in out.stderr and out.stderr.count("\n") == 1, (args, out.stderr)
    out = cli("bench", "list", "--json")
    assert json.loads(out.stdout) == {"schema": 1, "runs": []}  # nothing was recorded
    assert "no benchmark runs yet" in cli("bench", "list").stdout


def test_without_the_sglang_venv_the_run_fails_and_says_why(cli, tmp_path):
    out = cli("bench", "--url", "http://127.0.0.1:9", "--host", "sim", "--json")
    assert out.returncode == 1
    events = [json.loads(line) for line in out.stdout.splitlines()]
    assert events[-1]["state"] == "failed"
    assert events[-1]["error"] == ("sglang.benchmark.serving exited with status 1: gpuops simulated host: python -m "
                                   "sglang.benchmark.serving needs a real SGLang virtualenv; set one up with gpuops "
                                   "sim setup DIR --sglang-venv PATH")
    (run,) = json.loads(cli("bench", "list", "--json").stdout)["runs"]
    assert (run["status"], run["error"], run["url"], run["host"]) == ("failed", events[-1]["error"],
                                                                      "http://127.0.0.1:9", "sim")
    assert run["remote_dir"].startswith(str(tmp_path / "home" / ".local/state/gpuops/bench") + "/")


async def test_a_headless_benchmark_says_something_at_least_every_heartbeat(monkeypatch, capsys):
    """Output that is not a terminal: a progress line whenever HEARTBEAT_S pass without one."""
    import asyncio

    from gpuops.cli import bench as cli_bench
    from gpuops.core.domain import BenchProgressEvent

    monkeypatch.setattr(cli_bench, "HEARTBEAT_S", 0.2)
    beat = cli_bench._Heartbeat()
    beat.saw(BenchProgressEvent(run=1, step=0, steps=1, done=3, total=10, elapsed_s=0.5))
    task = asyncio.create_task(beat.run())
    try:
        lines: list[str] = []
        for _ in range(100):
            await asyncio.sleep(0.05)
            lines += capsys.readouterr().out.splitlines()
            if len(lines) >= 2:
                break
    finally:
        task.cancel()
    assert len(lines) >= 2 and all(ln.startswith("  running ") and ln.endswith("3/10 requests") for ln in lines)
