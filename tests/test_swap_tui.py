"""The swap's TUI flow, through Textual's pilot, end to end on the simulated host over a real sshd with
SGLang's real benchmark: `:swap oldie` → pick the model → its plan like oldie (reviewed) → Swap asks →
the swap screen shows each step → the comparison → kept; and a new model whose start crashes, where
the screen offers the rollback at once and oldie serves again on its port."""

from __future__ import annotations

import httpx

from gpuops.core.config import load_inventory
from gpuops.screens.confirm import ConfirmScreen
from gpuops.screens.model_picker import ModelPickerScreen
from gpuops.screens.plan_review import SwapReviewScreen
from gpuops.screens.swap import SwapScreen
from gpuops.tui.app import GpuopsApp
from tests.test_swap import GIB, NEW, box, status  # noqa: F401  (box: the fixture)
from tests.tui_helpers import screen_text, until


def _env(box, monkeypatch) -> None:  # noqa: F811
    for var in ("HOME", "XDG_STATE_HOME", "XDG_CONFIG_HOME", "XDG_CACHE_HOME", "HF_HUB_CACHE", "HF_HUB_OFFLINE"):
        monkeypatch.setenv(var, box.env[var])


async def _to_swap_screen(app, pilot, model: str, answer: str = "y") -> SwapScreen:
    await pilot.press("colon", *"swap oldie", "enter")
    assert await until(pilot, lambda: isinstance(app.screen, ModelPickerScreen))
    picker = app.screen
    assert "replaces oldie" in picker.sub_title
    from textual.widgets import Input, Static

    title = picker.query_one("#picker-title", Static)
    assert await until(pilot, lambda: "scanning" not in str(title.render()), timeout=60)
    await pilot.press(*model)  # the id box has the keys from the start
    box_ = picker.query_one("#model-input", Input)
    assert box_.value == model, (box_.value, app.focused)
    said: list[str] = []  # every notification (they expire from the app's list while the host is read)
    notify = app.notify
    app.notify = lambda message, **kw: (said.append(str(message)), notify(message, **kw))[1]  # type: ignore[method-assign]
    await pilot.press("enter")
    # reading the host (its GPUs, disks, SGLang's --help) takes a while on a loaded machine
    assert await until(pilot, lambda: isinstance(app.screen, SwapReviewScreen), timeout=240), said
    app.notify = notify  # type: ignore[method-assign]
    review = app.screen
    assert await until(pilot, lambda: review.plan is not None)
    old = app.ops.deployment("oldie")
    # like oldie: its GPUs and port (oldie's own: no warning that it is in use), the diff shown
    assert review.plan.gpu_ids == old.plan.gpu_ids and review.plan.port == old.plan.port
    assert not [w for w in review.plan.warnings if "is in use" in w], review.plan.warnings
    assert review.plan.like is not None and review.plan.like.diff
    await pilot.press("e", *"name oldie", "enter")  # a swap needs a new name: refused, nothing asked
    await pilot.press("d")
    assert await until(pilot, lambda: any("needs its own name" in str(n.message) for n in app._notifications))
    assert isinstance(app.screen, SwapReviewScreen)
    await pilot.press("e", *"name newbie", "enter")  # the fixture's clean-up stops newbie
    assert await until(pilot, lambda: review.plan.name == "newbie")
    await pilot.press("d")
    assert await until(pilot, lambda: isinstance(app.screen, ConfirmScreen))
    assert app.screen.question.startswith("Swap oldie (Qwen/Qwen3-8B) for ")
    assert "benchmark oldie (smoke" in app.screen.detail and "o: the same without benchmarks" in app.screen.detail
    await pilot.press(answer)
    assert await until(pilot, lambda: isinstance(app.screen, SwapScreen))
    return app.screen


async def test_the_swap_screen_benchmarks_replaces_compares_and_keeps(box, monkeypatch):  # noqa: F811
    _env(box, monkeypatch)
    app = GpuopsApp(load_inventory(str(box.cfg)), interval=0.5)
    async with app.run_test(size=(160, 50)) as pilot:
        swap = await _to_swap_screen(app, pilot, NEW)
        new = swap.plan.name
        # the comparison comes with the question: keep (y, going ahead as everywhere) or roll back (r)
        assert await until(pilot, lambda: isinstance(app.screen, ConfirmScreen) and "Keep" in app.screen.question,
                           timeout=420)
        question = app.screen
        assert question.question == f"Keep {new}, or roll back to oldie?"
        assert "output throughput" in question.detail.lower() or "throughput" in question.detail.lower()
        await pilot.press("y")
        assert await until(pilot, lambda: swap.outcome is not None, timeout=60)
        assert swap.outcome["outcome"] == "swapped"
        texts = [t for _, t in swap.lines]
        assert texts[0].startswith(f"planned {new}") and any(t.startswith("stopping oldie") for t in texts)
        # the new weights first, while oldie serves; then the stop; the outage said with the outcome
        fetched = next(i for i, t in enumerate(texts) if t.startswith(f"{new}'s weights fetched: "))
        assert texts[fetched - 1].startswith(f"planned {new}") and fetched < texts.index("stopping oldie"), texts
        assert any(t.startswith(f"{new}: ready (outage ") for t in texts), texts
        assert swap.outcome["outage_s"] > 0
        assert texts[-1] == f"kept {new}"
        assert swap.query_one("#swap-compare").display
        assert f"{new} kept" in screen_text(app)
        await pilot.resize_terminal(80, 24)  # usable at 80x24: the outcome and the keys stay on screen
        assert await until(pilot, lambda: f"{new} kept" in screen_text(app) and "Open new" in screen_text(app)), \
            screen_text(app)
    assert status(box, "oldie")["state"] == "stopped"
    assert status(box, new)["state"] == "ready" and status(box, new)["port"] == box.port


async def test_a_crashing_new_one_is_offered_the_rollback_at_once(box, monkeypatch):  # noqa: F811
    """The new model's KV cache does not fit next to what GPU0 already reserves: its start crashes,
    the screen asks at once whether to roll back; yes restarts oldie on its port."""
    _env(box, monkeypatch)
    box.sim.set_gpu(0, memory_reserved=100 * GIB)
    app = GpuopsApp(load_inventory(str(box.cfg)), interval=0.5)
    async with app.run_test(size=(160, 50)) as pilot:
        swap = await _to_swap_screen(app, pilot, "Qwen/Qwen3-32B", answer="o")  # o: without benchmarks
        new = swap.plan.name
        assert not swap.bench and "no benchmark" in screen_text(app)
        assert await until(pilot, lambda: isinstance(app.screen, ConfirmScreen) and "crashed" in app.screen.question,
                           timeout=420)
        assert app.screen.question == f"{new} crashed: roll back to oldie now?"
        await pilot.press("y")
        assert await until(pilot, lambda: swap.outcome is not None, timeout=240)
        assert swap.outcome["outcome"] == "rolled-back"
        assert [t for _, t in swap.lines][-1].startswith("oldie: ready (outage ")  # until oldie served again
        assert "benchmark of oldie: skipped" in [t for _, t in swap.lines]
        assert "rolled back: oldie serves again" in screen_text(app)
    old = status(box, "oldie")
    assert old["state"] == "ready" and old["run"] == 2 and old["port"] == box.port
    assert httpx.get(f"http://127.0.0.1:{box.port}/health", timeout=10).status_code == 200
