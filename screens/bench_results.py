"""Stored benchmark runs, read: one run's result table, and several runs side by side with deltas
and plots (output throughput against concurrency; TTFT and ITL percentiles).

Thin: the figures, the columns and the deltas are the core's ``compare`` document
(``gpuops.core.bench.runner``); this module only lays it out and colours a delta by whether it is
better (each metric says which way is better)."""

from __future__ import annotations

from typing import Any

from rich.text import Text
from textual.app import ComposeResult
from textual.binding import Binding
from textual.containers import Horizontal, Vertical
from textual.widgets import DataTable, Header
from textual_plotext import PlotextPlot

from ..core.bench.runner import compare, compare_rows, describe_run
from ..core.domain import BenchRun
from ..core.literal import literal
from .base import GpuopsScreen
from ..tui.widgets import KeyFooter, LiteralTable, TextView

# (title, ((record key, bar label), ...)): the percentile bars of the compare screen
PERCENTILE_PLOTS = (
    ("TTFT (ms)", (("median_ttft_ms", "p50"), ("p90_ttft_ms", "p90"), ("p99_ttft_ms", "p99"))),
    ("ITL (ms)", (("median_itl_ms", "p50"), ("p95_itl_ms", "p95"), ("p99_itl_ms", "p99"))),
)
UNLIMITED = "∞"  # the concurrency of a record run without --max-concurrency


def load_runs(ops: Any, run_ids: list[int]) -> list[BenchRun]:
    """The stored runs, in the order given (the first is the baseline of a comparison)."""
    runs = [ops.bench_run(i) for i in run_ids]
    return [r for r in runs if r is not None]


def delta_style(delta: float | None, better: str) -> str:
    if not delta:
        return ""
    return "green" if (delta > 0) == (better == "higher") else "red"


def fill_results(table: DataTable, doc: dict) -> None:
    """The compare document as a table: one row per metric, one column per record, deltas coloured."""
    header, rows = compare_rows(doc)
    table.clear(columns=True)
    table.add_columns(*header)
    for metric, row in zip(doc["metrics"], rows):
        cells = [Text(row[0])]
        for cell, delta in zip(row[1:], metric["delta_percent"]):
            cells.append(Text(cell, style=delta_style(delta, metric["better"]), justify="right"))
        table.add_row(*cells)


def run_label(run: dict) -> str:
    """`#3 Qwen3.5-122B-A10B`: a legend entry (the model's last path part keeps it short)."""
    model = (run.get("model") or run.get("deployment") or "").rstrip("/").rsplit("/", 1)[-1]
    return literal(f"#{run['id']} {model}".strip())  # (drawn by plotext, as it is)


def _values(doc: dict, key: str) -> list:
    return next((m["values"] for m in doc["metrics"] if m["key"] == key), [None] * len(doc["columns"]))


def throughput_lines(doc: dict) -> tuple[list[str], list[tuple[str, list[int], list[float]]]]:
    """(the concurrencies on the x axis, [(run label, x positions, output throughputs)]): one line
    per run. The axis is categorical (1, 4, 16, 64 evenly spaced), unlimited last."""
    values = _values(doc, "output_throughput")
    points = [(c["run"], c["max_concurrency"], v) for c, v in zip(doc["columns"], values) if v is not None]
    numbers = sorted({c for _, c, _ in points if c is not None})
    axis = [str(c) for c in numbers] + ([UNLIMITED] if any(c is None for _, c, _ in points) else [])
    lines = []
    for run in doc["runs"]:
        mine = sorted((axis.index(UNLIMITED if c is None else str(c)) + 1, v) for r, c, v in points if r == run["id"])
        if mine:
            lines.append((run_label(run), [x for x, _ in mine], [v for _, v in mine]))
    return axis, lines


def draw_throughput(plot: PlotextPlot, doc: dict) -> None:
    plt = plot.plt
    axis, lines = throughput_lines(doc)
    plt.title("Output throughput (tok/s) vs concurrency")
    for label, xs, ys in lines:
        plt.plot(xs, ys, label=label, marker="braille")
    if axis:
        plt.xticks(list(range(1, len(axis) + 1)), axis)
    plot.refresh()


def draw_percentiles(plot: PlotextPlot, doc: dict, title: str, keys: tuple[tuple[str, str], ...]) -> None:
    """One group of bars per percentile, one bar per record (a sweep has one per concurrency)."""
    plt = plot.plt
    plt.title(title)
    shown = [(key, label) for key, label in keys if any(v is not None for v in _values(doc, key))]
    if shown:
        series = [[_values(doc, key)[i] or 0.0 for key, _ in shown] for i in range(len(doc["columns"]))]
        plt.multiple_bar([label for _, label in shown], series, labels=[c["label"] for c in doc["columns"]])  # type: ignore[call-arg]  # the stub says label; plotext takes labels
    plot.refresh()


class BenchPlots(Horizontal):
    """Output throughput against concurrency beside the TTFT and ITL percentile bars."""

    def compose(self) -> ComposeResult:
        yield PlotextPlot(classes="plot-throughput")
        with Vertical(classes="plot-bars"):
            for _ in PERCENTILE_PLOTS:
                yield PlotextPlot(classes="plot-percentiles")

    def draw(self, doc: dict) -> None:
        draw_throughput(self.query_one(".plot-throughput", PlotextPlot), doc)
        for plot, (title, keys) in zip(self.query(".plot-percentiles").results(PlotextPlot), PERCENTILE_PLOTS):
            draw_percentiles(plot, doc, title, keys)


class BenchResultsScreen(GpuopsScreen):
    """One stored run: what ran where, and its result table."""

    BINDINGS = [Binding("escape", "back", "Back", key_display="esc")]

    def __init__(self, run_id: int):
        super().__init__()
        self.run_id = run_id

    def compose(self) -> ComposeResult:
        yield Header()
        yield TextView(id="results-about")
        yield LiteralTable(id="results-table", cursor_type="row", zebra_stripes=True)
        yield BenchPlots(id="results-plots")
        yield KeyFooter()

    def on_mount(self) -> None:
        self.sub_title = f"benchmark run #{self.run_id}"
        about = Text()
        runs = load_runs(self.gapp.ops, [self.run_id])
        plots = self.query_one(BenchPlots)
        plots.display = bool(runs and runs[0].records)
        if not runs:
            about.append(f"no benchmark run #{self.run_id}", style="bold red")
        else:
            run = runs[0]
            about.append(literal(describe_run(run)), style="bold")
            settings = ", ".join(f"{k}={v}" for k, v in run.settings.items())
            about.append(f"\nsettings: {literal(settings)}", style="dim")
            if run.error:
                about.append(f"\nerror: {literal(run.error)}", style="red")
            if not (run.records or run.quality):
                about.append("\nno results stored", style="yellow")
            doc = compare([run])
            fill_results(self.query_one("#results-table", DataTable), doc)
            if run.records:
                plots.draw(doc)
        self.query_one("#results-about", TextView).set(about)
        self.query_one("#results-table", DataTable).focus()

    def action_back(self) -> None:
        self.app.pop_screen()


class BenchCompareScreen(GpuopsScreen):
    """Runs side by side: deltas against the first, and plots."""

    BINDINGS = [Binding("escape", "back", "Back", key_display="esc")]

    def __init__(self, run_ids: list[int]):
        super().__init__()
        self.run_ids = list(run_ids)
        self.doc: dict | None = None

    def compose(self) -> ComposeResult:
        yield Header()
        yield TextView(id="compare-about")
        yield LiteralTable(id="compare-table", cursor_type="row", zebra_stripes=True)
        yield BenchPlots(id="compare-plots")
        yield KeyFooter()

    def on_mount(self) -> None:
        runs = load_runs(self.gapp.ops, self.run_ids)
        self.sub_title = "compare " + " ".join(f"#{r.id}" for r in runs)
        if not runs:
            self.query_one("#compare-about", TextView).set(Text("none of these runs is stored", style="bold red"))
            return
        doc = self.doc = compare(runs)
        about = Text("baseline: the first run (deltas in % against its record of the same concurrency)\n",
                     style="dim")
        for i, run in enumerate(runs):
            about.append(("  base " if i == 0 else "  vs   ") + literal(describe_run(run)) + "\n")
        if doc.get("note"):
            about.append(f"  {doc['note']}\n", style="yellow")
        self.query_one("#compare-about", TextView).set(about)
        fill_results(self.query_one("#compare-table", DataTable), doc)
        self.query_one(BenchPlots).draw(doc)
        self.query_one("#compare-table", DataTable).focus()

    def action_back(self) -> None:
        self.app.pop_screen()
