"""The benchmark screens through Textual's pilot: the runs list and compare (deltas, plots) on
runs stored from bench_serving's real JSONL, the launcher's inline validation (nothing starts),
--readonly's refusal, and live runs on the simulated host: the core's real runner, relay and
/metrics poller against the simulated SGLang server, cancelled from the screen.

The live runs replace only bench_serving (the host venv with SGLang is too heavy for a screen
test: test_bench_cli.py runs the real one): the simulated host's SGLang venv is a stand-in that
prints tqdm's lines and writes bench_serving's real record from tests/data/bench."""

from __future__ import annotations

import json
import sys
from pathlib import Path

import pytest

from tests.plans import make_plan
from textual.widgets import DataTable, Input, OptionList, Static
from textual_plotext import PlotextPlot

from gpuops.core.bench.runner import compare, import_jsonl
from gpuops.core.config import load_inventory, parse_inventory
from gpuops.sim.host import setup_simhost
from gpuops.core.deploy.store import Store
from gpuops.screens.bench_launch import BenchLaunchScreen
from gpuops.screens.bench_results import BenchCompareScreen, BenchResultsScreen, throughput_lines
from gpuops.screens.bench_run import BenchRunScreen
from gpuops.screens.bench_runs import BenchRunsScreen
from gpuops.screens.confirm import ConfirmScreen
from gpuops.screens.deployment import DeploymentScreen
from gpuops.tui.app import GpuopsApp
from tests.test_hosts import processes_matching
from tests.test_sglang_sim import QWEN3, Server, model_dir
from tests.tui_helpers import screen_text, until

FIXTURE = Path(__file__).parent / "data" / "bench" / "bench_serving-0.5.23.jsonl"
MODULE = "sglang.benchmark.serving"  # what SGLang 0.5.23 runs


@pytest.fixture(autouse=True)
def _isolated(tmp_path, monkeypatch):
    monkeypatch.setenv("XDG_STATE_HOME", str(tmp_path / "state"))
    monkeypatch.setenv("HOME", str(tmp_path / "home"))
    monkeypatch.delenv("SSH_AUTH_SOCK", raising=False)
    monkeypatch.delenv("GPUOPS_CONFIG", raising=False)


def local_inventory():
    return parse_inventory("[hosts.localhost]\nlocal = true\n", source="test.toml")


def table_rows(table: DataTable) -> list[list[str]]:
    return [[str(c) for c in table.get_row_at(i)] for i in range(table.row_count)]


def store_runs() -> list[int]:
    """An old deployment's runs imported from bench_serving's JSONL (c=1, c=8), a newer one 1.5x
    faster with half the TTFT, stored in the other order (c=8 first), and a quality-only run."""
    store = Store()
    try:
        old = import_jsonl(store, FIXTURE.read_text(), FIXTURE.name)
        faster = [dict(r, output_throughput=r["output_throughput"] * 1.5, median_ttft_ms=r["median_ttft_ms"] / 2)
                  for r in old.records[::-1]]
        new = store.add_bench_run(profile="sweep", settings={"concurrencies": [8, 1]}, deployment="new122b",
                                  model="Qwen/Qwen3.5-122B-A10B", engine_version="0.5.23", status="ok",
                                  gpus={"count": 4, "ids": [0, 1, 2, 3], "names": ["NVIDIA H200"] * 4},
                                  records=faster)
        quality = store.add_bench_run(profile="quality", settings={"eval_name": "gsm8k"}, deployment="new122b")
        store.finish_bench_run(quality.id, "ok", quality={"eval": "gsm8k", "score": 0.75})
        return [old.id, new.id, quality.id]
    finally:
        store.close()


# ------------------------------------------------------------------ runs list, results, compare


async def test_runs_list_marks_and_compares_with_deltas_and_plots():
    old, new, quality = store_runs()
    app = GpuopsApp(local_inventory(), interval=0.5)
    async with app.run_test(size=(180, 60)) as pilot:
        await pilot.press("b")  # on the dashboard: the runs list
        assert await until(pilot, lambda: isinstance(app.screen, BenchRunsScreen))
        runs = app.screen
        table = runs.query_one("#runs-table", DataTable)
        assert await until(pilot, lambda: table.row_count == 3)
        rows = table_rows(table)
        assert [r[1] for r in rows] == [f"#{old}", f"#{new}", f"#{quality}"]
        assert rows[1][2:4] + rows[1][6:10] == ["ok", "sweep", "new122b", "Qwen/Qwen3.5-122B-A10B", "0.5.23", "4x H200"]
        assert rows[0][4] == "1,803.6" and rows[1][4] == "2,705.4"  # the best output throughput
        assert rows[2][4:6] == ["-", "0.75"]

        await pilot.press("c")  # nothing marked: says what to do, stays
        assert await until(pilot, lambda: any("mark two or more" in str(n.message) for n in app._notifications))
        assert app.screen is runs
        await pilot.press("space", "space")  # marks the old run, then the new one (the cursor moves down)
        assert runs.marked == [old, new]
        assert f"marked: #{old} #{new}" in runs.query_one("#runs-title").text.plain
        assert table_rows(table)[0][0] == "1" and table_rows(table)[1][0] == "2"

        await pilot.press("c")
        assert await until(pilot, lambda: isinstance(app.screen, BenchCompareScreen))
        cmp = app.screen
        header = [str(c.label) for c in cmp.query_one("#compare-table", DataTable).columns.values()]
        assert header == ["metric", f"#{old} c=1", f"#{old} c=8", f"#{new} c=8", f"#{new} c=1"]
        cells = {r[0]: r[1:] for r in table_rows(cmp.query_one("#compare-table", DataTable))}
        assert cells["Output throughput (tok/s)"] == ["370.8", "1,803.6", "2,705.4 (+50.0%)", "556.2 (+50.0%)"]
        assert cells["TTFT median (ms)"][2:] == ["3.55 (-50.0%)", "1.73 (-50.0%)"]
        styles = {str(r[0]): [c.style for c in r[1:]] for r in
                  (cmp.query_one("#compare-table", DataTable).get_row_at(i) for i in range(len(cells)))}
        assert styles["Output throughput (tok/s)"][2:] == ["green", "green"]  # more is better
        assert styles["TTFT median (ms)"][2:] == ["green", "green"]  # less is better
        assert styles["ITL median (ms)"][2:] == ["", ""]  # unchanged

        # the plots: throughput against concurrency (one line per run), TTFT and ITL percentiles
        axis, lines = throughput_lines(cmp.doc)
        assert axis == ["1", "8"]
        assert [(label, xs) for label, xs, _ in lines] == [(f"#{old} Qwen3-8B", [1, 2]),
                                                           (f"#{new} Qwen3.5-122B-A10B", [1, 2])]
        assert [round(v, 1) for v in lines[1][2]] == [556.2, 2705.4]
        plots = list(cmp.query(PlotextPlot))
        assert len(plots) == 3 and all(p.size.width > 20 and p.size.height > 8 for p in plots)
        text = screen_text(app)
        for title in ("Output throughput (tok/s) vs concurrency", "TTFT (ms)", "ITL (ms)"):
            assert title in text
        assert f"#{new} Qwen3.5-122B-A10B" in text and f"#{new} c=8" in text  # legends

        await pilot.press("escape")
        assert await until(pilot, lambda: app.screen is runs)
        await pilot.press("up", "enter")  # the new run's results
        assert await until(pilot, lambda: isinstance(app.screen, BenchResultsScreen))
        res = app.screen
        assert res.run_id == new
        assert f"#{new} sweep (ok) new122b: Qwen/Qwen3.5-122B-A10B, SGLang 0.5.23, 4x NVIDIA H200" in \
            res.query_one("#results-about").text.plain
        result = {r[0]: r[1:] for r in table_rows(res.query_one("#results-table", DataTable))}
        assert result["Output throughput (tok/s)"] == ["2,705.4", "556.2"]
        assert "TTFT p99 (ms)" in result and "E2E median (ms)" in result
        assert len(res.query(PlotextPlot)) == 3 and f"#{new} Qwen3.5-122B-A10B" in screen_text(app)
        await pilot.press("escape", "escape")
        assert await until(pilot, lambda: type(app.screen).__name__ == "DashboardScreen")
        await pilot.press("colon", *"bench", "enter")  # the : command opens it too
        assert await until(pilot, lambda: isinstance(app.screen, BenchRunsScreen))


async def test_help_lists_the_bench_keys_and_command():
    app = GpuopsApp(local_inventory(), interval=0.5)
    async with app.run_test(size=(140, 50)) as pilot:
        await app.push_screen(BenchRunsScreen())
        await pilot.press("question_mark")
        assert await until(pilot, lambda: type(app.screen).__name__ == "HelpScreen")
        keys = dict(app.screen.keys)
        assert (keys["space"], keys["c"], keys["n"], keys["esc"]) == ("Mark", "Compare", "New run", "Back")
        assert await until(pilot, lambda: ":bench" in screen_text(app))


# ------------------------------------------------------------------ the launcher


def ready_deployment(name: str, host: str, port: int, model: str, python: str = "python3", state: str = "ready"):
    plan = make_plan(name, port=port, python=python, model_path=model,
                     argv=["--model-path", model, "--port", str(port), "--enable-metrics"])
    store = Store()
    try:
        return store.add_deployment(host, plan, state=state)
    finally:
        store.close()


async def test_launcher_validates_inline_and_starts_nothing(tmp_path):
    ready_deployment("qwen8b", "localhost", 9, str(tmp_path / "model"))
    ready_deployment("old", "localhost", 9, str(tmp_path / "model"), state="stopped")
    inv = parse_inventory(f'[hosts.localhost]\nlocal = true\n\n[bench.profiles.nightly]\nconcurrencies = [2, 32]\n'
                          f'[bench.profiles.quality]\neval_data_path = "{tmp_path / "gsm8k.jsonl"}"\n',
                          source="test.toml")
    app = GpuopsApp(inv, interval=0.5)
    async with app.run_test(size=(160, 50)) as pilot:
        await app.push_screen(BenchRunsScreen())
        await pilot.press("n")
        assert await until(pilot, lambda: isinstance(app.screen, BenchLaunchScreen))
        form = app.screen
        profiles = form.query_one("#launch-profiles", OptionList)
        assert [profiles.get_option_at_index(i).id for i in range(profiles.option_count)] == \
               ["smoke", "latency", "throughput", "sweep", "quality", "nightly"]
        preview = form.query_one("#launch-preview")
        error = form.query_one("#launch-error", Static)
        assert "1 run (c=4 × 16 prompts); input 256 / output 64 tokens" in preview.text.plain
        assert [form.query_one(f"#launch-{f}", Input).placeholder for f in
                ("prompts", "concurrency", "input-len", "output-len")] == ["16", "4", "256", "64"]  # the profile's

        concurrency = form.query_one("#launch-concurrency", Input)
        concurrency.focus()
        for typed, message in (("abc", "Concurrency: expected an integer, or a list like 1,4,16 (one run each), "
                                       "got 'abc'"),
                               ("0", "bench.profiles.smoke (overrides).max_concurrency: expected an integer > 0, "
                                     "got 0")):
            concurrency.value = ""
            await pilot.press(*typed, "enter")
            assert await until(pilot, lambda: str(error.render()) == message)
            assert error.display and preview.text.plain == "" and app.screen is form
        concurrency.value = ""
        await pilot.press(*"1,8", "enter")  # a sweep, but no deployment chosen yet
        assert await until(pilot, lambda: str(error.render()) == "choose a deployment first")
        assert "2 runs (c=1 × 16, c=8 × 32 prompts)" in preview.text.plain
        form.query_one("#launch-deployment").value = "old"
        await pilot.press("enter")
        assert await until(pilot, lambda: str(error.render()) == "deployment old is stopped, not ready")

        profiles.focus()
        await pilot.press("down", "down", "down", "down")  # quality: input/output length do not apply
        assert await until(pilot, lambda: form.profile_name == "quality")
        assert form.query_one("#launch-input-len", Input).disabled
        assert "Concurrency: a quality run takes one number" in str(error.render())
        concurrency.value = "3"
        assert await until(pilot, lambda: "gsm8k: 200 examples, 3 in parallel" in preview.text.plain)
        await pilot.press("down")
        assert await until(pilot, lambda: form.profile_name == "nightly")
        await pilot.press("escape")
        assert await until(pilot, lambda: isinstance(app.screen, BenchRunsScreen))
    store = Store()
    assert store.bench_runs() == []  # nothing was started
    store.close()


async def test_readonly_refuses_benchmarks_with_a_notice(tmp_path):
    ready_deployment("qwen8b", "localhost", 9, str(tmp_path / "model"))
    app = GpuopsApp(local_inventory(), readonly=True, interval=0.5)
    async with app.run_test(size=(140, 45)) as pilot:
        await app.push_screen(BenchRunsScreen())
        await pilot.press("n")
        assert await until(pilot, lambda: any("read-only: a benchmark loads the server" in str(n.message)
                                              for n in app._notifications))
        assert isinstance(app.screen, BenchRunsScreen)
        await pilot.press("escape", "colon", *"dep qwen8b", "enter")
        assert await until(pilot, lambda: isinstance(app.screen, DeploymentScreen))
        await pilot.press("b")
        assert await until(pilot, lambda: sum("read-only: a benchmark" in str(n.message)
                                              for n in app._notifications) == 2)
        assert isinstance(app.screen, DeploymentScreen)


# ------------------------------------------------------------------ live runs on the simulated host

STAND_IN = '''#!{python}
"""SGLang's bench_serving on the simulated host, for screen tests: tqdm's progress on stderr
(with \\r, as tqdm writes it), then bench_serving's real record (tests/data/bench) at the
concurrency asked. With 1000 prompts or more it stops after the first one until it is killed."""
import json, sys, time

def opt(name):
    return sys.argv[sys.argv.index(name) + 1]

n, c = int(opt("--num-prompts")), int(opt("--max-concurrency"))
for i in range(n + 1):
    sys.stderr.write("\\r%3d%%|          | %d/%d [00:00<00:00, 9.00it/s]" % (100 * i // n, i, n))
    sys.stderr.flush()
    if n >= 1000 and i == 1:
        time.sleep(600)
sys.stderr.write("\\n")
with open({fixture!r}) as f:
    record = json.loads(f.readline())
record.update(max_concurrency=c, num_prompts=n, completed=n, output_throughput=100.0 * c)
with open(opt("--output-file"), "a") as f:
    f.write(json.dumps(record) + "\\n")
'''


@pytest.fixture
def simbox(tmp_path, monkeypatch):
    """A simulated 2-GPU host (local) whose SGLang venv is the stand-in above, a simulated SGLang
    server on it with --enable-metrics, and a ready deployment of it in the store."""
    venv = tmp_path / "venv"
    (venv / "bin").mkdir(parents=True)
    (venv / "bin" / "python").write_text(STAND_IN.format(python=sys.executable, fixture=str(FIXTURE)))
    (venv / "bin" / "python").chmod(0o755)
    sim = setup_simhost(tmp_path / "sim", gpus=2, engine_version="0.5.23", pace=0.02, engine_venv=str(venv))
    sim.set_sim(token_delay_s=0.002)
    model = model_dir(tmp_path / "models", QWEN3, 16_381_470_720, shards=5)
    server = Server(sim, "--model-path", model, "--enable-metrics", env={"CUDA_VISIBLE_DEVICES": "0"})
    cfg = tmp_path / "config.toml"
    cfg.write_text(sim.host_block("sim") + f'[bench.profiles.quality]\neval_data_path = "{tmp_path / "none.jsonl"}"\n')
    try:
        server.wait_for("fired up")
        ready_deployment("qwen8b", "sim", server.port, str(model), python=str(sim.python))
        # where the process launcher keeps it: the deployment's watch finds its server alive
        state = tmp_path / "home" / ".local/state/gpuops/deployments/qwen8b"
        state.mkdir(parents=True)
        (state / "pid").write_text(f"{server.proc.pid}\n")
        (state / "log").write_text("")
        yield load_inventory(str(cfg)), venv, tmp_path
    finally:
        server.stop()


async def test_live_sweep_from_the_deployment_screen_then_cancel(simbox):
    inv, venv, tmp_path = simbox
    stand_in = str(venv / "bin" / "python")
    app = GpuopsApp(inv, interval=0.3)
    async with app.run_test(size=(170, 55)) as pilot:
        await pilot.press("colon", *"dep qwen8b", "enter")
        assert await until(pilot, lambda: isinstance(app.screen, DeploymentScreen))
        dep = app.screen
        await pilot.press("b")
        assert await until(pilot, lambda: isinstance(app.screen, BenchLaunchScreen))
        form = app.screen
        assert "Benchmark qwen8b  Qwen/Qwen3-8B on sim · ready" in form.query_one("#launch-target").text.plain
        await pilot.press("down", "down", "down")  # sweep
        assert await until(pilot, lambda: form.profile_name == "sweep")
        form.query_one("#launch-prompts", Input).value = "3"
        form.query_one("#launch-concurrency", Input).value = "1,2"
        assert await until(pilot, lambda: "2 runs (c=1 × 4, c=2 × 8 prompts)" in
                           form.query_one("#launch-preview").text.plain)
        await pilot.press("enter")  # on the profile list: start
        assert await until(pilot, lambda: isinstance(app.screen, BenchRunScreen))
        live = app.screen
        assert await until(pilot, lambda: live.state == "ok", timeout=60), live.error
        progress = live.query_one("#run-progress").text.plain
        assert "OK" in progress and "step 2/2: concurrency 2, 8 requests" in progress and "8/8 done" in progress
        steps = live.query_one("#run-steps").text.plain
        assert "c=1  100.0 tok/s out" in steps and "c=2  200.0 tok/s out" in steps
        header = [str(c.label) for c in live.query_one("#run-results", DataTable).columns.values()]
        assert header == ["metric", f"#{live.run_id} c=1", f"#{live.run_id} c=2"]
        assert "SGLang 0.5.23 · sglang.benchmark.serving" in live.query_one("#run-title").text.plain
        log = live.query_one("#run-log").text.plain  # the functional checks ran first
        assert "check tool_calls: skipped (the server runs without --tool-call-parser" in log and "check mtp: skipped" in log
        # beside it: the server's /metrics (the simulated server's) and the deployment's GPU
        assert await until(pilot, lambda: "running" in live.query_one("#run-server").text.plain, timeout=20), \
            live.query_one("#run-server").text.plain
        server = live.query_one("#run-server").text.plain
        assert "gen tok/s" in server and "token usage" in server and "accept len" in server
        assert await until(pilot, lambda: "GPU0  util" in live.query_one("#run-gpus").text.plain, timeout=20)
        assert "GPU1" not in live.query_one("#run-gpus").text.plain  # not this deployment's
        run_id = live.run_id
        store = Store()
        run = store.bench_run(run_id)
        store.close()
        assert (run.status, run.deployment, [r["max_concurrency"] for r in run.records]) == ("ok", "qwen8b", [1, 2])

        await pilot.press("escape")  # ended: back without a question
        assert await until(pilot, lambda: app.screen is dep)
        await pilot.press("b")
        assert await until(pilot, lambda: isinstance(app.screen, BenchLaunchScreen))
        await pilot.press("down", "down", "enter")  # throughput: 1000 prompts, the stand-in waits after one
        assert await until(pilot, lambda: isinstance(app.screen, BenchRunScreen))
        live = app.screen
        assert await until(pilot, lambda: live.progress is not None and live.progress.done == 1, timeout=60), live.error
        assert "1/1000 done" in live.query_one("#run-progress").text.plain
        assert processes_matching(stand_in)
        await pilot.press("ctrl+c")  # asks first; no keeps it running
        assert await until(pilot, lambda: isinstance(app.screen, ConfirmScreen))
        await pilot.press("n")
        assert await until(pilot, lambda: app.screen is live)
        assert live.running and processes_matching(stand_in)
        await pilot.press("x")
        assert await until(pilot, lambda: isinstance(app.screen, ConfirmScreen))
        await pilot.press("y")
        assert await until(pilot, lambda: live.state == "cancelled", timeout=30)
        assert await until(pilot, lambda: not processes_matching(stand_in), timeout=15)  # stopped on the host
        assert "CANCELLED" in live.query_one("#run-progress").text.plain
        # nothing left to cancel: gone from the footer (which redraws at its next refresh after the state flips)
        assert await until(pilot, lambda: "Cancel run" not in screen_text(app)), screen_text(app)
        store = Store()
        run = store.bench_run(live.run_id)
        store.close()
        assert run.status == "cancelled" and run.records == []
        await pilot.press("escape")
        assert await until(pilot, lambda: app.screen is dep)

        await pilot.press("b")  # quality, with a dataset the host does not have: refused before it runs
        assert await until(pilot, lambda: isinstance(app.screen, BenchLaunchScreen))
        await pilot.press("down", "down", "down", "down", "enter")
        assert await until(pilot, lambda: isinstance(app.screen, BenchRunScreen))
        live = app.screen
        assert await until(pilot, lambda: live.state == "failed", timeout=30)
        assert f"eval_data_path {tmp_path / 'none.jsonl'}: no such readable file on sim" in \
            live.query_one("#run-progress").text.plain
        store = Store()
        assert [r.status for r in store.bench_runs()] == ["ok", "cancelled"]  # nothing more stored
        store.close()


def test_compare_document_feeds_the_plots_unlimited_last():
    """A record run without --max-concurrency sits after the numbered concurrencies."""
    store = Store()
    try:
        base = import_jsonl(store, FIXTURE.read_text(), FIXTURE.name)
        (first, _) = base.records
        unlimited = store.add_bench_run(profile="throughput", settings={}, status="ok",
                                        records=[dict(first, max_concurrency=None, output_throughput=9.0)])
        doc = compare([base, unlimited])
    finally:
        store.close()
    axis, lines = throughput_lines(doc)
    assert axis == ["1", "8", "∞"]
    assert [(xs, ys) for _, xs, ys in lines][1] == ([3], [9.0])
    assert json.dumps(doc, allow_nan=False)
