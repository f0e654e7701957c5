"""A benchmark, live: requests done / total, elapsed, the current step (a sweep runs one per
concurrency), the results of each finished step; beside it the server's /metrics (running and
queued requests, generation throughput and its sparkline, token usage, accept length) and the
GPUs' utilisation from the app's monitor. At the end, the run's result table.

Thin: two workers run the core (``BenchRunner`` and ``poll_metrics``) and only post messages.
`x` / `ctrl+c` cancel after asking; cancelling the worker cancels the runner's task, which stops
the benchmark on the host and records the run as cancelled (the core does both). Leaving the
screen while it runs asks too (the workers end with the screen)."""

from __future__ import annotations

import time
from collections import deque
from typing import Callable

from rich.text import Text
from textual import work
from textual.app import ComposeResult
from textual.binding import Binding
from textual.containers import Horizontal, Vertical
from textual.message import Message
from textual.widgets import DataTable, Header, Sparkline
from textual.worker import Worker, WorkerState

from ..core import units
from ..core.bench.runner import Profile, ServerMetrics, Target, compare, describe_profile, engine_title, fmt
from ..core.domain import (BenchChecksEvent, BenchEvent, BenchLogEvent, BenchProgressEvent, BenchQualityEvent,
                           BenchResultEvent, BenchStateEvent, BenchStepEvent, Deployment)
from ..core.telemetry.samples import is_na
from .base import GpuopsScreen
from .bench_results import fill_results
from .confirm import ConfirmScreen
from ..core.literal import literal
from ..tui.widgets import KeyFooter, LiteralTable, TextView, bar

FINAL = ("ok", "failed", "cancelled")
LOG_LINES = 8
HISTORY = 120  # generation throughput readings kept for the sparkline


def _count(value: float | None) -> str:
    return "-" if value is None else f"{value:.0f}"


class BenchRunScreen(GpuopsScreen):
    BINDINGS = [
        Binding("x", "cancel", "Cancel run"),
        Binding("ctrl+c", "cancel", "Cancel run", show=False),
        Binding("escape", "back", "Back", key_display="esc"),
    ]

    class Event(Message):
        """One of the runner's events (``BenchEvent``)."""

        def __init__(self, event: BenchEvent) -> None:
            super().__init__()
            self.event = event

    class Metrics(Message):
        def __init__(self, metrics: ServerMetrics) -> None:
            super().__init__()
            self.metrics = metrics

    class Refused(Message):
        """The run could not start (no engine on the host, host unreachable, …): one line."""

        def __init__(self, error: str) -> None:
            super().__init__()
            self.error = error

    def __init__(self, deployment: Deployment, profile: Profile, clock: Callable[[], float] = time.monotonic):
        super().__init__()
        self.deployment = deployment
        self.profile = profile
        self.clock = clock
        self.state = "starting"  # then running, then one of FINAL
        self.error: str | None = None
        self.run_id: int | None = None
        self.about: BenchStateEvent | None = None  # the runner's "running" event: engine version, module, url
        self.step: BenchStepEvent | None = None  # the current step
        self.progress: BenchProgressEvent | None = None  # the step's last progress
        self.results: list[BenchResultEvent | BenchQualityEvent] = []
        self.log_lines: deque[str] = deque(maxlen=LOG_LINES)
        self.metrics: ServerMetrics | None = None
        self.throughput: deque[float] = deque(maxlen=HISTORY)
        self.started = clock()
        self.ended: float | None = None
        self.runner: Worker | None = None

    def compose(self) -> ComposeResult:
        yield Header()
        yield TextView(id="run-title")
        with Horizontal(id="run-main"):
            with Vertical(id="run-left"):
                yield TextView(id="run-progress")
                yield TextView(id="run-steps")
                yield LiteralTable(id="run-results", cursor_type="row", zebra_stripes=True)
                yield TextView(id="run-log")
            with Vertical(id="run-side"):
                yield TextView(id="run-server")
                yield Sparkline([0.0], summary_function=max, id="run-spark")
                yield TextView(id="run-gpus")
        yield KeyFooter()

    def on_mount(self) -> None:
        d = self.deployment
        self.sub_title = f"bench · {self.profile.name} · {d.name}"
        self.query_one("#run-results", DataTable).display = False
        self.runner = self.run_bench()
        self.show()

    @property
    def running(self) -> bool:
        return self.state not in FINAL

    @property
    def holds_work(self) -> bool:
        return self.running  # leaving cancels the benchmark: only after asking (esc)

    def check_action(self, action: str, parameters: tuple[object, ...]) -> bool | None:
        if action == "cancel" and not self.running:
            return False  # gone from the footer once the run has ended (nothing to cancel)
        return super().check_action(action, parameters)

    # ------------------------------------------------------------- workers (they only post)

    @work(exclusive=True, group="bench-run", exit_on_error=False)
    async def run_bench(self) -> None:
        from ..core.bench.runner import BenchInputError
        from ..core.api import HostError
        from ..core.ops import Refused

        ops = self.gapp.ops
        try:
            target = await ops.bench_target(deployment=self.deployment.name)
            self.follow_metrics(target)
            await ops.bench(target, self.profile, emit=lambda e: self.post_message(self.Event(e)))
        except (BenchInputError, Refused) as exc:
            self.post_message(self.Refused(str(exc)))
        except HostError as exc:
            self.post_message(self.Refused(exc.message))

    @work(exclusive=True, group="bench-metrics", exit_on_error=False)
    async def follow_metrics(self, target: Target) -> None:
        """Until the screen closes: the server draining after the run is worth seeing too."""
        from ..core.bench.runner import poll_metrics
        from ..core.api import HostError
        from ..core.domain import utc_now

        try:
            async for reading in poll_metrics(target, interval=getattr(self.app, "interval", 1.0)):
                self.post_message(self.Metrics(reading))
        except HostError as exc:
            self.post_message(self.Metrics(ServerMetrics(utc_now(), error=exc.message)))

    # ------------------------------------------------------------- messages → state

    def on_bench_run_screen_event(self, message: Event) -> None:
        event = message.event
        if event.run is not None:
            self.run_id = event.run
        match event:
            case BenchStateEvent(state="running"):
                self.state, self.about = "running", event
            case BenchStateEvent():
                self._end(event.state, event.error if isinstance(event.error, str) else None)
            case BenchStepEvent():
                self.step, self.progress = event, None
            case BenchProgressEvent():
                self.progress = event
            case BenchResultEvent() | BenchQualityEvent():
                self.results.append(event)
            case BenchLogEvent():
                self.log_lines.append(event.line)
            case BenchChecksEvent():
                from ..core.bench.runner import CHECK_WORDS

                self.log_lines.extend(f"check {c['name']}: {CHECK_WORDS[c['ok']]}"
                                      + (f" ({c['reason']})" if c["reason"] else "") for c in event.checks)
        self.show()

    def on_bench_run_screen_metrics(self, message: Metrics) -> None:
        self.metrics = message.metrics
        if message.metrics.gen_throughput is not None:
            self.throughput.append(message.metrics.gen_throughput)
            self.query_one("#run-spark", Sparkline).data = list(self.throughput)
        self.show_side()

    def on_bench_run_screen_refused(self, message: Refused) -> None:
        self._end("failed", message.error)
        self.show()

    def on_worker_state_changed(self, event: Worker.StateChanged) -> None:
        if event.worker is not self.runner or not self.running:
            return
        if event.state == WorkerState.CANCELLED:  # before the runner had started
            self._end("cancelled", None)
        elif event.state == WorkerState.ERROR:
            self._end("failed", f"{type(event.worker.error).__name__}: {event.worker.error}")
        self.show()

    def _end(self, state: str, error: str | None) -> None:
        self.state, self.error, self.ended = state, error, self.clock()
        self.refresh_bindings()
        if self.run_id is None:
            return
        run = self.gapp.ops.bench_run(self.run_id)
        if run is not None and (run.records or run.quality):
            table = self.query_one("#run-results", DataTable)
            fill_results(table, compare([run]))
            table.display = True

    # ------------------------------------------------------------- the view

    def refresh_data(self) -> None:
        """The app's tick: elapsed time and the GPUs move even when the benchmark says nothing."""
        self.show()

    def show(self) -> None:
        self._show_title()
        self._show_progress()
        self._show_steps()
        self.query_one("#run-log", TextView).set(Text("\n".join(map(literal, self.log_lines)), style="dim"))
        self.show_side()

    def _show_title(self) -> None:
        d, a = self.deployment, self.about
        title = Text.assemble(("bench ", "bold"), (f"#{self.run_id} " if self.run_id else "", "bold"),
                              f"{self.profile.name} against ", (d.name, "bold"), f" ({d.model}) on {d.host}")
        if a is not None:
            title.append(f" · {engine_title(d.plan)} {a.engine_version or None} · {a.module or None}", style="dim")
        title.append("\n" + describe_profile(self.profile), style="dim")
        self.query_one("#run-title", TextView).set(title)

    def _show_progress(self) -> None:
        now = self.ended if self.ended is not None else self.clock()
        out = Text()
        style = {"ok": "bold green", "failed": "bold red", "cancelled": "bold yellow"}.get(self.state, "bold cyan")
        out.append(self.state.upper(), style=style)
        out.append(f"  elapsed {now - self.started:.1f} s")
        if self.step is not None:
            s = self.step
            n = s.num_prompts or s.num_examples
            what = "examples" if s.is_eval else "requests"
            out.append(f"\nstep {s.step + 1}/{s.steps}: concurrency {s.max_concurrency or 'unlimited'}, "
                       f"{n} {what}")
        if self.progress is not None:
            p = self.progress
            out.append("\n")
            out.append_text(bar(p.done / p.total if p.total else 0, 30))
            out.append(f" {p.done}/{p.total} done  ({p.elapsed_s:.1f} s this step)")
        if self.error:
            out.append(f"\n{literal(self.error)}", style="red")
        self.query_one("#run-progress", TextView).set(out)

    def _show_steps(self) -> None:
        out = Text()
        for r in self.results:
            if isinstance(r, BenchQualityEvent):
                out.append(f"{r.eval} score {fmt(r.score)} ({r.num_examples} examples)\n", style="bold")
                continue
            s = r.summary
            out.append(f"c={s['max_concurrency'] or 'unl.'}", style="bold")
            out.append(f"  {fmt(s['output_throughput'])} tok/s out · {fmt(s['request_throughput'])} req/s · TTFT p50 "
                       f"{fmt(s['median_ttft_ms'])} ms · ITL p50 {fmt(s['median_itl_ms'])} ms · "
                       f"{s['completed']} done in {fmt(s['duration'])} s\n")
        self.query_one("#run-steps", TextView).set(out)

    def show_side(self) -> None:
        m = self.metrics
        out = Text("Server /metrics\n", style="bold")
        if m is None:
            out.append("  waiting for the first reading…\n", style="dim")
        elif m.error:
            out.append(f"  {literal(m.error)}\n", style="yellow")
        else:
            for label, value in (("running", _count(m.running_reqs)), ("queued", _count(m.queued_reqs)),
                                 ("gen tok/s", fmt(m.gen_throughput)),
                                 ("token usage", "-" if m.token_usage is None else f"{m.token_usage * 100:.1f}%"),
                                 ("accept len", fmt(m.accept_length))):
                out.append(f"  {label:<12}{value:>12}\n")
            out.append("  gen tok/s over time:", style="dim")
        self.query_one("#run-server", TextView).set(out)

        gpus = Text("GPUs\n", style="bold")
        state = self.gapp.monitor.states.get(self.deployment.host)
        wanted = set(self.deployment.plan.gpu_ids)
        for g in state.snapshot.gpus if state is not None and state.snapshot is not None else []:
            if wanted and g.index not in wanted:
                continue
            util = g.util / 100 if not is_na(g.util) else g.util
            gpus.append_text(Text.assemble(f"  GPU{g.index:<2} util ", bar(util, 12),
                                           f" {units.percent(g.util):>4}  {units.gib(g.memory_used)}/"
                                           f"{units.gib(g.memory_total)} GiB\n"))
        self.query_one("#run-gpus", TextView).set(gpus)

    # ------------------------------------------------------------- keys

    def action_cancel(self) -> None:
        def answered(yes: bool | str | None) -> None:
            if yes and self.running and self.runner is not None:
                self.runner.cancel()

        self.app.push_screen(ConfirmScreen(
            f"Cancel benchmark {'#' + str(self.run_id) if self.run_id else ''} on {self.deployment.host}?",
            "It stops the benchmark on the host; steps already finished stay stored.", yes="Cancel it"), answered)

    def action_back(self) -> None:
        if not self.running:
            self.app.pop_screen()
            return

        def answered(yes: bool | str | None) -> None:
            if yes:
                if self.runner is not None:
                    self.runner.cancel()
                self.app.pop_screen()

        self.app.push_screen(ConfirmScreen("Leave and cancel the running benchmark?",
                                           "It stops the benchmark on the host.", yes="Cancel it"), answered)
