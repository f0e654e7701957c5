"""The deployment screen's paint, as pure functions of a run's view (tui/deployment_view.py): each
phase's mark and time, the download, how the run ended, the numbers and the GPUs; no app, no pilot."""

from __future__ import annotations

from datetime import datetime, timedelta, timezone
from types import SimpleNamespace

from gpuops.core.deploy.view import RunView
from gpuops.core.domain import PhaseEvent, ProgressEvent, StateEvent
from gpuops.tui.deployment_view import gpu_lines, numbers_text, phase_mark, phases_text, shown_phases
from rich.text import Text

from tests.plans import make_plan

T0 = datetime(2026, 1, 1, 12, 0, 0, tzinfo=timezone.utc)
GIB = 1024**3


def ts(s: float) -> str:
    return (T0 + timedelta(seconds=s)).isoformat().replace("+00:00", "Z")


def view(*events) -> RunView:
    return RunView.of("t", events)


def rows(text: Text) -> dict[str, str]:
    """Each phase's line by phase name."""
    out = {}
    for line in text.plain.splitlines():
        parts = line.split()
        if len(parts) >= 2 and parts[0] in "✔✖▶■·–":
            out[parts[1]] = line
    return out


PLAN = make_plan("t", port=31000, gpu_ids=(0, 1))


def test_a_run_on_its_way_marks_passed_phases_the_current_one_and_those_to_come():
    v = view(StateEvent("starting", ts=ts(0)), PhaseEvent("starting", ts=ts(0)), PhaseEvent("weights", ts=ts(12)),
             ProgressEvent("weights", 3, 8, what="shards", ts=ts(20)))
    text = phases_text(v, PLAN, T0 + timedelta(seconds=30))
    r = rows(text)
    assert r["starting"].startswith("✔ starting") and "12.0s" in r["starting"]
    assert r["dist_init"].startswith("– dist_init")  # passed without a line of its own
    assert r["weights"].startswith("▶ weights") and "18.0s" in r["weights"] and "shards 3/8" in r["weights"]
    assert r["http"].startswith("· http") and "s" not in r["http"].split("http", 1)[1]
    assert "draft" not in r  # no draft model, no draft line in the log
    assert "ready:" not in text.plain and "crashed" not in text.plain


def test_a_crash_is_marked_on_the_phase_it_happened_in_with_its_reason_literal():
    v = view(StateEvent("starting", ts=ts(0)), PhaseEvent("weights", ts=ts(1)),
             StateEvent("crashed", phase="kv_cache", reason="out of [bold]memory[/]", ts=ts(5)))
    text = phases_text(v, PLAN, T0 + timedelta(seconds=60))
    r = rows(text)
    assert r["weights"].startswith("✔ weights") and "4.0s" in r["weights"]  # up to the crash, not to now
    assert r["kv_cache"].startswith("✖ kv_cache")
    assert "crashed in kv_cache: out of [bold]memory[/]" in text.plain  # literal, never markup
    # narrow with findings: the banner says why, the pane only where
    finding = SimpleNamespace(summary="s", code="c")
    v.findings = [finding]  # type: ignore[list-item]
    narrow = phases_text(v, PLAN, T0, narrow=True)
    assert "crashed in kv_cache\n" in narrow.plain and "memory" not in narrow.plain


def test_ready_shows_the_endpoint_and_the_quick_check_and_a_stop_says_why():
    v = view(StateEvent("starting", ts=ts(0)), PhaseEvent("http", ts=ts(3)), PhaseEvent("ready", ts=ts(4)),
             StateEvent("ready", ts=ts(4)))
    text = phases_text(v, PLAN, T0 + timedelta(seconds=9), check_result="hello there (0.4 s)")
    assert rows(text)["ready"].startswith("✔ ready") and rows(text)["http"].startswith("✔ http")
    assert f"ready: {PLAN.endpoint}  (k: quick check)\nhello there (0.4 s)\n" in text.plain
    v.apply(StateEvent("stopped", reason="by the operator", ts=ts(10)))
    stopped = phases_text(v, PLAN, T0 + timedelta(seconds=11))
    assert "\nstopped: by the operator\n" in stopped.plain
    assert phase_mark(v, "ready", 7, 7, "ready") == ("✔", "green")  # it had got there


def test_narrow_puts_two_phases_a_line_and_the_current_progress_under_them():
    v = view(StateEvent("starting", ts=ts(0)), PhaseEvent("weights", ts=ts(0)),
             ProgressEvent("weights", 5, 10, what="shards", ts=ts(1)))
    text = phases_text(v, PLAN, T0 + timedelta(seconds=2), narrow=True)
    lines = text.plain.splitlines()
    assert "starting" in lines[0] and "dist_init" in lines[0]
    assert "weights: shards 5/10" in text.plain
    assert lines[1].startswith("▶ weights") and "· kv_cache" in lines[1] and lines[3].startswith("· ready")


def test_the_download_shows_its_size_and_rate():
    v = view(StateEvent("downloading", ts=ts(0)),
             ProgressEvent("downloading", 2 * GIB, 8 * GIB, rate_bps=100 * 1024**2, ts=ts(1)))
    text = phases_text(v, PLAN, T0)
    assert "downloading 2.0 GiB / 8.0 GiB at " in text.plain


def test_a_router_lists_only_starting_and_ready_and_a_draft_phase_shows_when_seen():
    router = SimpleNamespace(replicas=["r-1", "r-2"], speculative=False)  # (what it reads of a router's plan)
    assert shown_phases(router, RunView("r")) == ("starting", "ready")  # type: ignore[arg-type]
    assert "draft" not in shown_phases(PLAN, RunView("t"))
    assert "draft" in shown_phases(PLAN, view(PhaseEvent("draft", ts=ts(0))))


def test_numbers_and_gpus():
    assert numbers_text({"b": 2.5, "a": 1.0}).plain == "From the log\n  a: 1\n  b: 2.5\n"
    gpus = [SimpleNamespace(index=i, memory_used=i * GIB, memory_total=80 * GIB) for i in range(3)]
    live = gpu_lines(Text(), PLAN, "ready", gpus).plain
    assert live == "GPUs (sampler)\n  GPU0:    0.0 / 80.0 GiB\n  GPU1:    1.0 / 80.0 GiB\n"
    assert gpu_lines(Text(), PLAN, "crashed", gpus).plain == "GPUs (sampler)\n  — (no server: crashed)\n"
    assert gpu_lines(Text(), PLAN, "ready", None).plain == "GPUs (sampler)\n"
