"""The stored benchmark runs (`gpuops bench list` as a screen): `space` marks runs, `c` compares
the marked ones in the order they were marked (the first is the baseline), `enter` opens one,
`n` starts a new run (refused in --readonly)."""

from __future__ import annotations

from rich.text import Text
from textual import on
from textual.app import ComposeResult
from textual.binding import Binding
from textual.widgets import DataTable, Header

from ..core.bench.runner import engine_title, fmt
from ..core.domain import BenchRun
from .base import GpuopsScreen
from ..tui.widgets import KeyFooter, LiteralTable, TextView

# the figures right after the profile: at 80 columns they are what must stay in view
# (the default engine's name heads the version column: every run so far is of it)
COLUMNS = (" ", "Run", "Status", "Profile", "Out tok/s", "Quality", "Target", "Model", engine_title(None),
           "GPUs", "Started")
STATUS_STYLE = {"ok": "green", "failed": "bold red", "cancelled": "yellow", "running": "cyan"}


def run_row(run: BenchRun, mark: str) -> tuple:
    best = max((r.get("output_throughput") or 0 for r in run.records), default=None)
    gpus = run.gpus or {}
    names = sorted({n.replace("NVIDIA ", "") for n in gpus.get("names") or [] if n})
    return (
        Text(mark, style="bold green"),
        f"#{run.id}",
        Text(run.status, style=STATUS_STYLE.get(run.status, "")),
        run.profile,
        Text(fmt(best) if run.records else "-", justify="right"),
        Text(fmt((run.quality or {}).get("score")), justify="right"),
        run.deployment or run.url or run.settings.get("file") or "-",
        run.model or "-",
        run.engine_version or "-",
        f"{gpus['count']}x {'/'.join(names) or '?'}" if gpus.get("count") else "-",
        (run.started_at or run.created_at).replace("T", " ").removesuffix("Z"),
    )


class BenchRunsScreen(GpuopsScreen):
    BINDINGS = [
        Binding("space", "mark", "Mark"),
        Binding("c", "compare", "Compare"),
        Binding("n", "new_run", "New run"),
        Binding("r", "reload", "Reload"),
        Binding("escape", "back", "Back", key_display="esc"),
    ]

    def __init__(self) -> None:
        super().__init__()
        self.runs: list[BenchRun] = []
        self.marked: list[int] = []  # run ids, in the order they were marked

    def compose(self) -> ComposeResult:
        yield Header()
        yield TextView(id="runs-title")
        yield LiteralTable(id="runs-table", cursor_type="row")
        yield KeyFooter()

    def on_mount(self) -> None:
        table = self.query_one("#runs-table", DataTable)
        for label in COLUMNS:
            table.add_column(label, key=label)
        self.sub_title = "benchmark runs"
        table.focus()

    def on_screen_resume(self) -> None:
        """Every time the list shows (a run may have finished meanwhile)."""
        self.action_reload()

    def action_reload(self) -> None:
        self.runs = self.gapp.ops.bench_runs()
        ids = {r.id for r in self.runs}
        self.marked = [i for i in self.marked if i in ids]
        self._show()

    def _show(self) -> None:
        table = self.query_one("#runs-table", DataTable)
        row = table.cursor_row
        table.clear()
        for run in self.runs:
            mark = str(self.marked.index(run.id) + 1) if run.id in self.marked else ""
            table.add_row(*run_row(run, mark), key=str(run.id))
        if self.runs:
            table.move_cursor(row=min(row, len(self.runs) - 1))
        title = Text(f"{len(self.runs)} run{'s' if len(self.runs) != 1 else ''}", style="bold")
        if not self.runs:
            title.append("  none yet: b on a ready deployment (or n here) runs one; gpuops bench import FILE.jsonl "
                         "adds results from elsewhere", style="dim")
        elif self.marked:
            title.append("  marked: " + " ".join(f"#{i}" for i in self.marked) + "  (c compares, the first is the "
                         "baseline)", style="cyan")
        else:
            title.append("  space marks runs, c compares them", style="dim")
        self.query_one("#runs-title", TextView).set(title)

    def current(self) -> BenchRun | None:
        table = self.query_one("#runs-table", DataTable)
        if not self.runs or table.row_count == 0:
            return None
        return self.runs[table.cursor_row]

    # ------------------------------------------------------------- actions

    def action_mark(self) -> None:
        run = self.current()
        if run is None:
            return
        if run.id in self.marked:
            self.marked.remove(run.id)
        else:
            self.marked.append(run.id)
        self._show()
        table = self.query_one("#runs-table", DataTable)
        table.move_cursor(row=min(table.cursor_row + 1, table.row_count - 1))

    def action_compare(self) -> None:
        from .bench_results import BenchCompareScreen

        if len(self.marked) < 2:
            self.notify("mark two or more runs with space first", severity="warning")
            return
        self.app.push_screen(BenchCompareScreen(self.marked))

    @on(DataTable.RowSelected, "#runs-table")
    def _open(self, event: DataTable.RowSelected) -> None:
        from .bench_results import BenchResultsScreen

        if event.row_key.value is not None:
            self.app.push_screen(BenchResultsScreen(int(event.row_key.value)))

    def action_new_run(self) -> None:
        from .bench_launch import open_launcher

        open_launcher(self.app)

    def action_back(self) -> None:
        self.app.pop_screen()
