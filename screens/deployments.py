"""Every stored deployment, one row each: host, model, state, run, port, how long in that state, the
GPU memory in use on its GPUs. Enter opens one; stop, restart and forget ask first (and are off in
`--readonly`); triage and bench open their screens. The list is the store's, read again every two
seconds (each deployment's own watch keeps its state true)."""

from __future__ import annotations

import time
from typing import Any

from rich.text import Text
from textual.app import ComposeResult
from textual.binding import Binding
from textual.coordinate import Coordinate
from textual.widgets import DataTable, Header

from ..core import units
from ..core.deploy.view import parse_ts
from ..core.domain import LIVE_STATES, Deployment
from ..core.states import State
from ..core.telemetry.samples import memory_used
from ..core.literal import literal
from ..tui.widgets import KeyFooter, LiteralTable, TextView
from .base import GpuopsScreen
from .confirm import ConfirmScreen

# the model last: a folder's path is long, and at 80 columns it pushed the state, port and GPU memory
# out of view (the line under the table shows it whole)
COLUMNS = ("Name", "State", "Host", "Port", "Run", "For", "GPU mem", "Model")
STATE_STYLE: dict[str, str] = {State.READY: "green", State.CRASHED: "red bold", State.STALLED: "yellow bold", State.STOPPED: "dim"}


def since(stamp: str, now: float | None = None) -> str:
    """How long ago an RFC 3339 time was, shortly ("3m", "2h")."""
    try:
        then = parse_ts(stamp).timestamp()
    except ValueError:
        return "?"
    return units.age(max(0.0, (now or time.time()) - then))


class DeploymentsScreen(GpuopsScreen):
    HELP_TITLE = "deployments"
    BINDINGS = [
        Binding("enter", "open", "Open"),
        Binding("s", "stop", "Stop"),
        Binding("r", "restart", "Restart"),
        Binding("x", "triage", "Triage"),
        Binding("b", "bench", "Bench"),
        Binding("n", "swap", "Swap…"),
        Binding("delete", "forget", "Forget", key_display="del"),
        Binding("escape", "back", "Back", key_display="esc"),
    ]

    def __init__(self) -> None:
        super().__init__()
        self.rows: dict[str, Deployment] = {}
        self._cells: dict[str, tuple] = {}

    @property
    def ops(self) -> Any:
        return self.gapp.ops

    def compose(self) -> ComposeResult:
        yield Header()
        yield LiteralTable(id="deployments-table", cursor_type="row")
        yield TextView(id="deployments-detail")
        yield KeyFooter()

    def on_mount(self) -> None:
        self.sub_title = "deployments"
        table = self.query_one(DataTable)
        for label in COLUMNS:
            table.add_column(label, key=label)
        self.refresh_rows()
        self.set_interval(2.0, self.refresh_rows)
        table.focus()

    # ---------------------------------------------------------------- rows

    def _gpu_mem(self, d: Deployment) -> str:
        if d.state not in LIVE_STATES:  # no server of its own: what its GPUs hold is another's
            return "—"
        state = self.gapp.monitor.states.get(d.host)
        snap = state.snapshot if state is not None else None
        if snap is None or not snap.gpus:
            return "?"
        used = memory_used(snap.gpus, set(d.plan.gpu_ids))
        if not used or any(v is None for v in used.values()):
            return "?"
        ids = ",".join(str(i) for i in sorted(used))
        return f"{units.gib(sum(v or 0 for v in used.values()))} GiB on {ids}"

    def _row(self, d: Deployment) -> tuple:
        state = Text(d.state, style=STATE_STYLE.get(d.state, ""))
        return (d.name, state, d.host, str(d.plan.port), str(d.run), since(d.updated_at), self._gpu_mem(d),
                d.model)

    def refresh_rows(self) -> None:
        table = self.query_one(DataTable)
        deployments = {d.name: d for d in self.ops.deployments()}
        for gone in [n for n in self.rows if n not in deployments]:
            table.remove_row(gone)
            self._cells.pop(gone, None)
        for name, d in deployments.items():
            cells = self._row(d)
            if name not in self.rows:
                table.add_row(*cells, key=name)
            elif self._cells.get(name) != cells:
                for column, value in zip(COLUMNS, cells):
                    table.update_cell(name, column, value, update_width=True)
            self._cells[name] = cells
        self.rows = deployments
        self._show_detail()

    def _show_detail(self) -> None:
        d = self.current()
        detail = self.query_one("#deployments-detail", TextView)
        if d is None:
            detail.set(Text("no deployments yet: p on the dashboard plans one, d there deploys it", style="dim"))
            return
        p = d.plan
        detail.set(Text.assemble((d.name, "bold"), f"  {literal(d.model)} on {d.host}  ·  {p.launcher}  ·  ",
                                 f"GPUs {','.join(map(str, p.gpu_ids)) or '?'} (TP {p.tp})  ·  {p.endpoint}\n",
                                 ("enter open · s stop · r restart · x triage · b bench · n swap · del forget", "dim")))

    def on_data_table_row_highlighted(self, event: DataTable.RowHighlighted) -> None:
        self._show_detail()

    def on_data_table_row_selected(self, event: DataTable.RowSelected) -> None:
        self.action_open()  # Enter on the table (it takes the key before the screen's binding)

    def current(self) -> Deployment | None:
        table = self.query_one(DataTable)
        if not self.rows or table.cursor_row < 0 or table.cursor_row >= table.row_count:
            return None
        key = table.coordinate_to_cell_key(Coordinate(table.cursor_row, 0)).row_key.value
        return self.rows.get(str(key))

    def select(self, name: str) -> bool:
        if name not in self.rows:
            return False
        table = self.query_one(DataTable)
        table.move_cursor(row=table.get_row_index(name))
        return True

    # ---------------------------------------------------------------- keys

    def _picked(self) -> Deployment | None:
        d = self.current()
        if d is None:
            self.notify("no deployment selected", severity="warning")
        return d

    def action_open(self) -> None:
        d = self._picked()
        if d is not None:
            self.gapp.open_deployment(d.name)

    def _confirmed(self, question: str, detail: str, yes: str, then: Any) -> None:
        self.app.push_screen(ConfirmScreen(question, detail, yes=yes), lambda ok: then() if ok else None)

    def action_stop(self) -> None:
        d = self._picked()
        if d is not None:
            also = self.gapp.ops.parts_said(d)
            self._confirmed(f"Stop {d.name} on {d.host}{also}?", f"{d.model}, {d.state}; its server is stopped "
                            f"(SIGTERM, then up to 60 s)", "Stop it", lambda: self.gapp.stop_deployment(d.name))

    def action_restart(self) -> None:
        d = self._picked()
        if d is not None:
            also = self.gapp.ops.parts_said(d)
            self._confirmed(f"Restart {d.name} on {d.host}{also}?", f"{d.model}: stopped, then started again as run "
                            f"{d.run + 1} with the same plan (its weights are checked on the host first: what is "
                            "missing is downloaded before the server starts)", "Restart",
                            lambda: self.gapp.restart_deployment(d.name))

    def action_forget(self) -> None:
        """Refused at once (its server runs, another gpuops deploys it: the use case says) or asked."""
        d = self._picked()
        if d is None:
            return

        async def check() -> None:
            from ..core.api import HostError
            from ..core.ops import NeedsConfirmation, Refused

            try:
                await self.gapp.ops.forget(d.name, confirmed=False)
            except NeedsConfirmation:  # nothing refuses it: ask
                also = self.gapp.ops.parts_said(d)
                self._confirmed(f"Forget {d.name}{also}?", f"{d.model} on {d.host}, {d.state}, {d.run} run(s): "
                                "removed from the store with its history", "Forget",
                                lambda: self.gapp.forget_deployment(d.name))
            except Refused as exc:
                self.notify(f"not forgotten: {exc}", severity="error", timeout=10, markup=False)
            except HostError as exc:
                self.notify(f"not forgotten: {exc.message}", severity="error", timeout=10, markup=False)

        self.run_worker(check(), group="forget-check", exclusive=True, exit_on_error=False)

    def action_triage(self) -> None:
        from .triage import TriageScreen

        d = self._picked()
        if d is not None:
            self.app.push_screen(TriageScreen(d))

    def action_bench(self) -> None:
        from .bench_launch import BenchLaunchScreen

        d = self._picked()
        if d is not None:
            self.app.push_screen(BenchLaunchScreen(d))

    def action_swap(self) -> None:
        d = self._picked()
        if d is not None:
            self.gapp.begin_swap(d.name)

    def action_back(self) -> None:
        self.app.pop_screen()

    def run_screen_command(self, verb: str, arg: str) -> bool:
        if verb in ("stop", "restart", "forget", "triage", "bench", "swap") and (not arg or self.select(arg)):
            if not self.refused_readonly(verb):  # (asked nothing: read-only says so at once)
                getattr(self, f"action_{verb}")()
            return True
        return False
