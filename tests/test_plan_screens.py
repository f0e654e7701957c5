"""The model picker and plan review screens, driven through the pilot."""

from __future__ import annotations

import json
import subprocess
import tempfile
from pathlib import Path

import pytest
from textual.widgets import DataTable

from gpuops.core.config import parse_inventory
from gpuops.core.planning.hostfacts import offline_target
from gpuops.core.planning.plan import Wishes
from gpuops.sim.host import setup_simhost
from gpuops.screens.model_picker import ModelPickerScreen
from gpuops.screens.plan_review import PlanReviewScreen
from gpuops.tui.app import GpuopsApp
from tests.test_plan import H200, QWEN122, config, facts
from tests.tui_helpers import screen_text, until


@pytest.fixture(autouse=True)
def _isolated(tmp_path, monkeypatch):
    monkeypatch.setenv("XDG_STATE_HOME", str(tmp_path / "state"))
    monkeypatch.setenv("XDG_CACHE_HOME", str(tmp_path / "cache"))
    monkeypatch.setenv("HF_HUB_OFFLINE", "1")
    monkeypatch.setenv("HF_HUB_CACHE", str(tmp_path / "hub"))


def app_for(block: str = "[hosts.localhost]\nlocal = true\n") -> GpuopsApp:
    return GpuopsApp(parse_inventory(block, source="t.toml"), interval=0.5)


def verdict(app) -> str:
    return app.screen.query_one("#plan-verdict").text.plain


async def test_plan_review_warnings_speak_the_screens_words_not_the_clis():
    """No TP chosen: the warning names TP, not the CLI's --tp, which plan review has no use for."""
    app = app_for()
    async with app.run_test(size=(160, 50)) as pilot:
        await app.push_screen(PlanReviewScreen(facts(*QWEN122), offline_target(8, H200), Wishes(engine_version="0.5.23")))
        warnings = lambda: app.screen.query_one("#plan-warnings").text.plain  # noqa: E731
        assert await until(pilot, lambda: "TP not chosen: TP4, the published command's for these GPUs (qwen3.5.jsx@"
                           in warnings())
        assert "TP4: 15.6x, TP8: 25.1x; + and - for another)" in warnings() and "--tp" not in warnings()


async def test_plan_review_changes_tp_and_mtp_and_updates_the_verdict():
    app = app_for()
    async with app.run_test(size=(160, 50)) as pilot:
        screen = PlanReviewScreen(facts(*QWEN122), offline_target(4, H200), Wishes(tp=4, engine_version="0.5.23"))
        await app.push_screen(screen)
        assert await until(pilot, lambda: "TP4" in verdict(app) and "fits at TP4" in verdict(app))
        assert str(screen.query_one("#plan-launch-title").render()) == "Launch (SGLang 0.5.23)"
        ids = [r.id for r in screen.plan.rules]
        assert "mtp" in ids and "mamba-extra-buffer" in ids and "tool-call-parser" in ids
        await pilot.press("minus")
        assert await until(pilot, lambda: "does not fit at TP2" in verdict(app))
        await pilot.press("minus")
        assert await until(pilot, lambda: "does not fit at TP1" in verdict(app))
        assert "smallest TP that fits is 4" in verdict(app)
        await pilot.press("plus", "plus")
        assert await until(pilot, lambda: "TP4" in verdict(app))
        await pilot.press("m")
        assert await until(pilot, lambda: "mtp" not in [r.id for r in screen.plan.rules])
        ids = [r.id for r in screen.plan.rules]
        assert "mtp" not in ids and "mamba-extra-buffer" not in ids
        assert "--speculative" not in " ".join(screen.plan.argv)
        await pilot.press("d")  # asks first, with what will happen
        from gpuops.screens.confirm import ConfirmScreen
        assert await until(pilot, lambda: isinstance(app.screen, ConfirmScreen))
        assert app.screen.question.startswith("Deploy qwen3.5-122b-a10b (Qwen/Qwen3.5-122B-A10B)")
        assert "fit: fits at TP4" in app.screen.detail and "weights:" in app.screen.detail
        await pilot.press("y")
        assert await until(pilot, lambda: any("deploy" in str(n.message) for n in app._notifications))
        await pilot.press("escape")
        assert not isinstance(app.screen, PlanReviewScreen)


async def test_plan_review_edits_without_dead_ends_and_asks_before_deploying():
    """Name, port, GPUs, memory fraction, bind, flags and env changed on the screen (validated, kept
    across a TP change, shown as "set by you"); a plan that does not fit says so in the question."""
    from gpuops.screens.confirm import ConfirmScreen

    app = app_for()
    async with app.run_test(size=(160, 50)) as pilot:
        screen = PlanReviewScreen(facts(*QWEN122), offline_target(4, H200), Wishes(tp=4, engine_version="0.5.23"))
        await app.push_screen(screen)
        assert await until(pilot, lambda: screen.plan is not None)

        async def typed(line: str) -> None:
            await pilot.press("e", *line, "enter")
            await pilot.pause()  # (an edit is applied as its line is submitted)

        await typed("port 31234")
        await typed("name swapped")
        # a flag edit the start-up reserve reads is checked again: decode graphs to batch 16384 (32 GiB)
        # want more than the plan's 0.8 leaves, and the warning goes when the edit that replaces it wants less
        await typed("flag --cuda-graph-max-bs-decode 16384")
        assert any("CUDA graphs and buffers" in w for w in screen.plan.warnings), screen.plan.warnings
        assert "CUDA graphs and buffers" in app.screen.query_one("#plan-warnings").text.plain
        await typed("-flag --cuda-graph-max-bs-decode")
        assert not any("CUDA graphs and buffers" in w for w in screen.plan.warnings), screen.plan.warnings
        await typed("flag --chunked-prefill-size 4096")
        await typed("env NCCL_DEBUG=INFO")
        await typed("mem 0.8")
        p = screen.plan
        assert (p.port, p.name, p.env["NCCL_DEBUG"]) == (31234, "swapped", "INFO")
        assert "--chunked-prefill-size 4096" in " ".join(p.argv) and "--mem-fraction-static 0.8" in " ".join(p.argv)
        you = [r for r in p.rules if r.id == "you"]
        assert you and you[0].why == "set by you" and "--chunked-prefill-size 4096" in you[0].adds
        before = screen.plan
        for bad, says in (("flag --port 1", "--port is the planner's: use `port N`"),
                          ("-flag --no-such-flag", "the plan has no --no-such-flag"),
                          ("port 80", "port: a number 1024..65535"), ("env 1X=2", "POSIX name"),
                          ("gpus 0,0", "distinct GPU indexes"), ("launch", "unknown change 'launch'"),
                          ("nodes gpu2,gpu2", "each host once"), ("nodes a;b", "nodes: "),
                          ("nodes gpu2 gpu3", "nodes takes the other hosts"),
                          ("nodes localhost", "an offline plan is not a host of the inventory")):
            await typed(bad)
            assert screen.plan is before, bad  # nothing changed
            assert await until(pilot, lambda: any(says in str(n.message) for n in app._notifications)), \
                (bad, [str(n.message) for n in app._notifications])
        await typed("bind 0.0.0.0")
        assert "--host 0.0.0.0" in " ".join(screen.plan.argv) and screen.plan.uses_api_key
        await typed("-flag --chunked-prefill-size")
        assert "--chunked-prefill-size" not in screen.plan.argv, [str(n.message) for n in app._notifications][-3:]
        await pilot.press("minus")  # TP2: the edits stay
        assert await until(pilot, lambda: screen.plan.tp == 2)
        assert screen.plan.port == 31234 and screen.plan.env["NCCL_DEBUG"] == "INFO"
        await pilot.press("d")
        assert await until(pilot, lambda: isinstance(app.screen, ConfirmScreen))
        assert "DOES NOT FIT" in app.screen.question and "API key" in app.screen.detail
        await pilot.press("n")  # no: back on the plan, nothing deployed
        assert await until(pilot, lambda: app.screen is screen)


@pytest.fixture
def sim_with_model():
    root = Path(tempfile.mkdtemp(prefix="gpuops-plan-"))
    root.chmod(0o755)
    sim = setup_simhost(root / "host", gpus=4)
    models = root / "models"
    model = models / "Qwen" / "Qwen3.5-122B-A10B"
    model.mkdir(parents=True)
    (model / "config.json").write_text(json.dumps(config(QWEN122[0])))
    shard = "model-00001-of-00001.safetensors"
    header = json.dumps({"lm_head.weight": {"dtype": "BF16", "shape": [2, 2], "data_offsets": [0, 8]}}).encode()
    (model / shard).write_bytes(len(header).to_bytes(8, "little") + header + b"\0" * 8)  # a real, tiny shard
    (model / "model.safetensors.index.json").write_text(json.dumps(
        {"metadata": {"total_size": 244_000_000_000}, "weight_map": {"lm_head.weight": shard}}))
    block = sim.host_block("gpu1") + f'model_dirs = ["{models}"]\n'
    yield sim, block, model
    subprocess.run(["rm", "-rf", str(root)])


async def test_model_picker_lists_the_hosts_models_shows_facts_and_plans(sim_with_model):
    sim, block, model = sim_with_model
    app = app_for(block)
    async with app.run_test(size=(170, 50)) as pilot:
        await pilot.press("p")
        assert await until(pilot, lambda: isinstance(app.screen, ModelPickerScreen))
        picker = app.screen
        table = picker.query_one("#candidates", DataTable)
        assert await until(pilot, lambda: table.row_count == 1, timeout=20)
        assert str(table.get_row_at(0)[0]) == "Qwen/Qwen3.5-122B-A10B"  # (a cell is literal Text)
        table.focus()
        assert await until(pilot, lambda: "MoE 256 experts" in picker.query_one("#picker-facts").text.plain,
                           timeout=20)
        await pilot.press("enter")
        assert await until(pilot, lambda: isinstance(app.screen, PlanReviewScreen), timeout=30)
        review = app.screen
        assert review.target.host == "gpu1" and len(review.target.gpus) == 4
        assert review.target.engine_version == sim.engine_version
        assert await until(pilot, lambda: "fits at TP" in verdict(app))
        assert review.plan.model_path == str(model)  # the copy already on the host is reused
        assert "SGLang " + sim.engine_version in screen_text(app)


async def test_plan_review_like_a_previous_unit_shows_the_diff():
    from tests.test_plan import DATA

    app = app_for()
    async with app.run_test(size=(160, 60)) as pilot:
        screen = PlanReviewScreen(facts(*QWEN122), offline_target(4, H200), Wishes(tp=4, engine_version="0.5.23"))
        await app.push_screen(screen)
        assert await until(pilot, lambda: screen.plan is not None)
        assert not screen.query_one("#plan-diff-title").display
        await pilot.press("l")
        await pilot.press(*str(DATA / "units" / "qwen397-nvfp4.service"), "enter")
        assert await until(pilot, lambda: screen.plan.like is not None)
        assert "SGLANG_ENABLE_SPEC_V2" not in screen.plan.env  # retired in 0.5.14: dropped, with a reason
        diff = screen.query_one("#plan-diff").text.plain
        assert "- --quantization modelopt_fp4" in diff and "+ --mamba-radix-cache-strategy extra_buffer" in diff
        assert screen.query_one("#plan-diff-title").display
        await pilot.press("l", *"/no/such/unit", "enter")
        assert await until(pilot, lambda: any("no such file" in str(n.message) for n in app._notifications))
        assert screen.plan.like is not None  # a bad path changes nothing


async def test_busy_gpus_are_shown_and_free_ones_offered(sim_with_model):
    """Deploy on GPUs where something runs: the summary lists it and offers the free GPUs (o),
    which the plan then takes; with too few free GPUs it says what the ways forward are."""
    from gpuops.core.planning.hostfacts import read_target
    from gpuops.screens.confirm import ConfirmScreen

    sim, block, _ = sim_with_model
    other = subprocess.Popen(["sleep", "300"])
    try:
        sim.set_gpu(0, processes=[{"pid": other.pid, "used": 40 * 1024**3}], memory_used=40 * 1024**3)
        app = app_for(block)
        async with app.run_test(size=(160, 50)) as pilot:
            state = app.monitor.states["gpu1"]
            assert await until(pilot, lambda: state.snapshot is not None
                               and any(p.pid == other.pid for p in state.snapshot.gpus[0].processes), timeout=30)
            target = await read_target(app.monitor.hosts["gpu1"])
            screen = PlanReviewScreen(facts(*QWEN122), target, Wishes(gpu_ids=(0, 1), engine_version="0.5.23"))
            await app.push_screen(screen)
            assert await until(pilot, lambda: screen.plan is not None and screen.plan.gpu_ids == (0, 1))
            await pilot.press("d")
            assert await until(pilot, lambda: isinstance(app.screen, ConfirmScreen))
            box = app.screen
            assert "GPUs in use" in box.question and f"GPU0: pid {other.pid}" in box.detail
            assert box.other_label == "Use free GPUs 1,2"
            await pilot.press("o")
            assert await until(pilot, lambda: app.screen is screen and screen.plan.gpu_ids == (1, 2))
            await pilot.press("d")  # nothing runs there: a plain question
            assert await until(pilot, lambda: isinstance(app.screen, ConfirmScreen))
            assert app.screen.other_label is None and "GPUs in use" not in app.screen.question
            await pilot.press("n")
            # TP4 on a 4-GPU host with one busy: no free set; the summary says what to do instead
            await pilot.press("plus")  # TP3 does not divide the heads: TP4
            assert await until(pilot, lambda: screen.plan.tp == 4)
            await pilot.press("d")
            assert await until(pilot, lambda: isinstance(app.screen, ConfirmScreen))
            assert app.screen.other_label is None
            assert "only 3 of the GPUs are free for TP 4" in app.screen.detail
            await pilot.press("n")
    finally:
        other.kill()
        other.wait()
