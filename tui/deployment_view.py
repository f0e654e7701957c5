"""What the deployment screen paints, as pure functions of a run's view: its phases (each one's mark,
time and progress), how the run ended, the numbers read from the log, and its GPUs. Tested without
a pilot (tests/test_deployment_view.py); the screen only sets the texts."""

from __future__ import annotations

from datetime import datetime
from typing import Any, Iterable

from rich.text import Text

from ..core import units
from ..core.states import PHASES, State
from ..core.deploy.view import RunView
from ..core.domain import LIVE_STATES, Plan
from ..core.literal import literal
from ..core.telemetry.samples import is_na

GIB = 1024**3


def shown_phases(plan: Plan, view: RunView) -> tuple[str, ...]:
    """The phases the screen lists: a router (the engine's, in front of replicas) has no server
    start-up, it starts, then is ready; a server without a draft model has no draft phase (unless
    its log shows one)."""
    if plan.replicas:
        return (State.STARTING, State.READY)
    return tuple(p for p in PHASES if p != State.DRAFT or plan.speculative or State.DRAFT in view.phases)


def phase_mark(view: RunView, phase: str, i: int, reached: int, failed: str | None) -> tuple[str, str]:
    """(mark, style) of the `i`th phase: passed, passed without a line, crashed, stopped, current, to come."""
    current, ready = view.phase, view.state == State.READY
    passed = i < reached or (phase == current and ready)
    if passed and phase not in view.phases:
        return "–", "dim"  # passed without a line of its own (the engine skipped it, or said nothing)
    if passed:
        return "✔", "green"
    if phase == failed and view.state == State.CRASHED:
        return "✖", "bold red"
    if phase == failed and view.state == State.STOPPED:  # stopped there (a ready one had got there: ✔)
        return ("✔", "green") if phase == State.READY else ("■", "bold")
    if phase == failed:
        return "▶", "bold yellow"
    return "·", "dim"


def _phase_rows(out: Text, view: RunView, phases: tuple[str, ...], now: datetime, narrow: bool) -> None:
    current = view.phase
    # a crash is marked on the phase it happened in (a kv_cache crash while the last phase line
    # seen was the weights'), else on the last phase reached
    crash_phase = view.crash.phase if view.state == State.CRASHED and view.crash is not None else None
    failed = crash_phase if crash_phase in phases else current
    reached = phases.index(failed) if failed in phases else -1
    times = dict(view.phase_times(now))
    for i, phase in enumerate(phases):
        mark, style = phase_mark(view, phase, i, reached, failed)
        took = times.get(phase)
        elapsed = "" if took is None or phase == State.READY else f"{took:6.1f}s"
        if narrow:
            out.append(f"{mark} {phase:<11}{elapsed:>7}", style=style)
            out.append("\n" if i % 2 else "  ")
            continue
        out.append(f"{mark} {phase:<11}{elapsed:>9}", style=style)
        prog = view.progress.get(phase)
        if prog is not None:
            total = f"/{prog.total}" if prog.total else ""
            out.append(f"  {prog.what or ''} {prog.done}{total}", style="cyan")
        if phase == State.WEIGHTS and view.draft_shards is not None:
            d = view.draft_shards
            out.append(f"  draft shards {d.done}" + (f"/{d.total}" if d.total else ""), style="cyan")
        out.append("\n")
    if narrow and len(phases) % 2:
        out.append("\n")


def _progress_lines(out: Text, view: RunView, narrow: bool) -> None:
    """Narrow: the current phase's progress under the phases; and the download's, while downloading."""
    current = view.phase
    settled = view.state in (State.READY, State.CRASHED)
    prog = view.progress.get(current) if narrow and current and not settled else None
    if prog is not None:
        total = f"/{prog.total}" if prog.total else ""
        out.append(f"{current}: {prog.what or ''} {prog.done}{total}\n", style="cyan")
    dl = view.progress.get("downloading")
    if dl is not None and view.state == State.DOWNLOADING and dl.total:
        out.append(f"\ndownloading {units.size(dl.done)} / {units.size(dl.total)}", style="cyan")
        if dl.rate_bps:
            out.append(f" at {units.rate(dl.rate_bps)}", style="cyan")
        out.append("\n")


def _outcome_lines(out: Text, view: RunView, plan: Plan, narrow: bool, check_result: str | None) -> None:
    """How the run ended (crashed, stopped) or where it serves (ready, with the quick check's answer)."""
    crash = view.crash if view.state == State.CRASHED else None
    if crash is not None and narrow and view.findings:
        # the banner under it says why (80x24: the reason twice pushed the fix out of view)
        out.append(f"\ncrashed in {crash.phase or '?'}\n", style="bold red")
    elif crash is not None:
        why = crash.reason or (view.findings[0].summary if view.findings else "see the log")
        out.append(f"\ncrashed in {crash.phase or '?'}: {literal(why)}\n", style="bold red")
    if view.state == State.STOPPED:
        stop_why = view.state_event.reason if view.state_event is not None else None
        out.append(f"\nstopped: {literal(stop_why)}\n" if stop_why else "\nstopped\n", style="bold")
    if view.state == State.READY:
        out.append(f"\nready: {plan.endpoint}  (k: quick check)\n", style="bold green")
        if check_result:
            out.append(check_result + "\n")


def phases_text(view: RunView, plan: Plan, now: datetime, *, narrow: bool = False,
                check_result: str | None = None) -> Text:
    """The phases pane: one line per phase (under 120 columns two phases a line, and only the current
    phase's progress: the banner below them stays in view at 80x24), then the download, then the end."""
    out = Text()
    _phase_rows(out, view, shown_phases(plan, view), now, narrow)
    _progress_lines(out, view, narrow)
    _outcome_lines(out, view, plan, narrow, check_result)
    return out


def numbers_text(numbers: dict[str, float]) -> Text:
    """The numbers read from the log, by name."""
    out = Text("From the log\n", style="bold")
    for key, value in sorted(numbers.items()):
        out.append(f"  {key}: {value:g}\n")
    return out


def gpu_lines(out: Text, plan: Plan, state: str, gpus: Iterable[Any] | None) -> Text:
    """The plan's GPUs from the sampler's last snapshot (`gpus`: its GPUs, None before one came),
    appended to `out`; none while its server does not run (what they hold is not its own)."""
    if plan.gpu_ids:
        out.append("GPUs (sampler)\n", style="bold")
    wanted = set(plan.gpu_ids)
    if wanted and state not in LIVE_STATES:
        out.append(f"  — (no server: {state})\n", style="dim")
    elif gpus is not None:
        for g in gpus:
            if g.index in wanted:
                used = "N/A" if is_na(g.memory_used) else f"{g.memory_used / GIB:6.1f}"
                total = "N/A" if is_na(g.memory_total) else f"{g.memory_total / GIB:.1f}"
                out.append(f"  GPU{g.index}: {used} / {total} GiB\n")
    return out
