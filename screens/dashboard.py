"""The dashboard: every host on the left, the selected host's GPUs and processes on the right.

Thin on purpose: it reads ``app.monitor.states`` (core) once a tick and redraws only
what changed; it never talks SSH or parses anything.

Fleet-sized: a tick recomputes the row of a host only when what the row shows may have changed
(its GPU rows, RAM in whole GiB, NVML's state, reachability, staleness); the host list (a
`RowTable`) redraws only the rows whose cells changed. The host list can be narrowed
to the hosts whose name holds some text (`f`) and sorted (`o`: inventory order, most free GPU
memory, busiest GPUs, stalest), both applied at once, not at the next tick.
"""

from __future__ import annotations

import functools
import time
from typing import Any

from rich.text import Text
from textual import on, work
from textual.app import ComposeResult
from textual.binding import Binding
from textual.containers import Horizontal, Vertical, VerticalScroll
from textual.widget import Widget
from textual.widgets import Header, Input, Static

from ..core import units
from ..core.literal import literal
from ..core.telemetry.monitor import HostState
from ..core.telemetry.samples import GpuSample, is_na
from .base import GpuopsScreen
from ..tui.widgets import KeyFooter, RowTable, TextView, bar

STALE_AFTER = 3.0  # seconds without a sample before a host shows as stale
HISTORY_REDRAW_S = 5.0
# The host list shows what changes slowly; per-second figures (CPU, age) live in the
# detail pane, so a quiet fleet repaints nothing here. Age shows only once it is stale.
HOST_COLUMNS = (" ", "Host", "GPUs", "GPU mem", "Util", "RAM", "Stale")
# The host list's orders, `o` cycles through them: (name, what the list's subtitle says)
SORTS: tuple[tuple[str, str], ...] = (
    ("inventory", ""),
    ("free", "sorted: most free GPU memory first"),
    ("util", "sorted: busiest GPUs first"),
    ("stale", "sorted: stalest first"),
)
_UNKNOWN = float("inf")  # sort keys: hosts without the figure come last


def host_status(state: HostState, now: float) -> tuple[str, str]:
    """(symbol, style) for a host row: fresh, stale, unreachable, not yet known, or reachable with
    its GPUs unreadable (NVML failing: a driver/library mismatch, no driver) — never green then."""
    age = state.age(now)
    if state.reachable is False:
        return "✖", "red"
    if age is None:
        return "…", "dim"
    if age > STALE_AFTER:
        return "●", "yellow"
    snap = state.snapshot
    if snap is not None and not snap.nvml.ok and not snap.gpus:
        if snap.nvml.code == "no-driver":  # a machine without NVIDIA GPUs (a laptop's localhost)
            return "○", "dim"
        return "▲", "red bold"
    return "●", "green"


def host_row(state: HostState, now: float) -> tuple:
    return host_figures(state, now)[0]


def host_figures(state: HostState, now: float) -> tuple[tuple, tuple[float, float, float]]:
    """(the host list's cells, the sort keys): keys are ascending, inventory order breaks ties, and
    they use the figures as shown (whole GiB free, whole per cent), so a list sorted by them does
    not reshuffle on every sample."""
    symbol, style = host_status(state, now)
    snap = state.snapshot
    gpus = snap.gpus if snap else []
    used = total = util = 0  # one pass over the GPUs (a fleet's row is made for every sample)
    n_used = n_total = n_util = 0
    for g in gpus:  # (`v == v`: not NaN, so not NA: is_na inlined, this runs 800 times a second)
        v = g.memory_used
        if v is not None and v == v:
            used += v
            n_used += 1
        v = g.memory_total
        if v is not None and v == v:
            total += v
            n_total += 1
        v = g.util
        if v is not None and v == v:
            util += v
            n_util += 1
    host = snap.host if snap else None
    age = state.age(now)
    mean_util = util / n_util if n_util else None
    cells = (
        Text.assemble((symbol, style)),  # (a span, not the base style: Text's == compares spans)
        state.name,
        str(len(gpus)) if snap else "",
        f"{units.gib(used, 0)}/{units.gib(total, 0)}G" if n_total else "",
        f"{mean_util:.0f}%" if mean_util is not None else "",
        f"{units.gib(host.mem_used, 0)}/{units.gib(host.mem_total, 0)}G" if host else "",
        "down" if state.reachable is False else _stale_for(age),
    )
    free = -round((total - used) / units.GIB) if n_total and n_used == n_total else _UNKNOWN
    busy = -round(mean_util) if mean_util is not None else _UNKNOWN
    stale = -_UNKNOWN if state.reachable is False else -int(age) if age is not None and age > STALE_AFTER else 0
    return cells, (free, busy, stale)


def _gpus_pane_title(count: int) -> tuple[str, bool]:
    """The GPU pane's border title, and whether the pane is the empty one (`.empty`)."""
    return (f"GPUs ({count})", False) if count else ("no GPUs reported", True)


def _age_bucket(age: float | None) -> int | None:
    """What of a host's age its row shows: nothing, fresh (-1) or stale for whole seconds."""
    if age is None:
        return None
    return -1 if age <= STALE_AFTER else int(age)


def _stale_for(age: float | None) -> str:
    """Whole seconds, only once stale: a fresh host's row doesn't change every second."""
    return "" if age is None or age <= STALE_AFTER else units.age(float(int(age)))


def _linkless(widget: Any) -> Any:
    """`widget` without Textual's link styling (auto_links): what the dashboard draws itself holds no
    link, and the styling looks at every segment of every line drawn (a sparkline's every bar) each
    time the widget is drawn, which the per-second widgets are every second."""
    widget.set_reactive(Widget.auto_links, False)
    return widget


@functools.lru_cache(maxsize=None)
def _sparkline() -> Any:
    """Textual's Sparkline, drawn by a renderable that draws what Textual's draws, faster: 16 of them
    (a host's 8 GPUs) redraw every few seconds, and Textual's takes its buckets with Fractions and
    makes each bar's colour anew (most of a millisecond a sparkline). Same buckets by integer
    arithmetic (floor(n*k/w) is int(Fraction(n, w) * k)), each bar's style made once per colour and
    height. tests/test_fleet_dashboard.py holds it to Textual's own output. With ``bounds`` (low, high)
    it draws on that scale instead of the data's own minimum to maximum: a GPU's utilisation on 0-100%
    and its memory on 0 to its total, so an idle GPU's jitter of a few MiB is no full-height swing
    and one reading is drawn at its height, not as Textual's full bars."""
    from rich.segment import Segment
    from rich.style import Style
    from textual.renderables._blend_colors import blend_colors
    from textual.renderables.sparkline import Sparkline as SparklineRenderable
    from textual.widgets import Sparkline

    styles: dict[tuple, Any] = {}

    class FastSparklineRenderable(SparklineRenderable):
        def __init__(self, *args: Any, bounds: tuple[float, float] | None = None, **kwargs: Any) -> None:
            super().__init__(*args, **kwargs)
            self.bounds = bounds

        @classmethod
        def _buckets(cls, data: Any, num_buckets: int) -> Any:
            n = len(data)
            for bucket_no in range(num_buckets):
                partition = data[n * bucket_no // num_buckets:n * (bucket_no + 1) // num_buckets]
                if partition:
                    yield partition

        def __rich_console__(self, console: Any, options: Any) -> Any:
            width = self.width or options.max_width
            height = self.height or 1
            data, bounds = self.data, self.bounds
            if bounds is not None and len(data) == 1:
                data = [data[0], data[0]]  # one reading at its height on the scale
            if len(data) <= 1:  # (Textual's own drawing of no data and of one value)
                yield from super().__rich_console__(console, options)
                return
            bars = self.BARS
            bar_line_segments = len(bars)
            bar_segments = bar_line_segments * height - 1
            minimum, maximum = min(data), max(data)
            if bounds is not None:
                minimum, maximum = min(minimum, bounds[0]), max(maximum, bounds[1])
            extent = maximum - minimum or 1
            summary_function = self.summary_function
            min_color, max_color = self.min_color.color, self.max_color.color
            assert min_color is not None and max_color is not None
            buckets = tuple(self._buckets(list(data), num_buckets=width))
            if len(styles) > 4096:
                styles.clear()
            for i in reversed(range(height)):
                low, high = i * bar_line_segments, (i + 1) * bar_line_segments
                bucket_index = 0.0
                step = len(buckets) / width
                for _ in range(width):
                    height_ratio = (summary_function(buckets[int(bucket_index)]) - minimum) / extent
                    bar_index = int(height_ratio * bar_segments)
                    if bar_index < low:
                        yield Segment(" ", None)
                    else:
                        bar = "█" if bar_index >= high else bars[bar_index % bar_line_segments]
                        key = (min_color, max_color, height_ratio)
                        style = styles.get(key)
                        if style is None:
                            style = styles[key] = Style.from_color(blend_colors(min_color, max_color, height_ratio))
                        yield Segment(bar, style)
                    bucket_index += step
                if i > 0:
                    yield Segment.line()

    class FastSparkline(Sparkline):  # (Sparkline's CSS applies to it: styles follow the bases')
        renderable_class = FastSparklineRenderable

        def __init__(self, *args: Any, bounds: tuple[float, float] | None = None, **kwargs: Any) -> None:
            super().__init__(*args, **kwargs)
            self.bounds = bounds  # the scale (see _sparkline); None: the data's own minimum to maximum
            _linkless(self)

        def render(self) -> Any:
            renderable: Any = super().render()  # Sparkline's own SparklineRenderable
            return FastSparklineRenderable(
                renderable.data, width=renderable.width, height=renderable.height,
                min_color=renderable.min_color.color, max_color=renderable.max_color.color,
                summary_function=renderable.summary_function, bounds=self.bounds,
            )

    return FastSparkline


def _visible(data: list[float], width: int, height: int, bounds: tuple[float, float] | None = None) -> tuple:
    """What a sparkline of `data` draws at that size: each column's height ratio as the sparkline
    renderable works it out (its buckets, floor(n*k/w) to floor(n*(k+1)/w), their `max`, scaled
    between the data's minimum and maximum, or on `bounds`; a bar's character and colour follow from
    the ratio), or how many values for one value or none. Two data alike here draw alike: a history
    that grew or scrolled without changing what its bars show is not redrawn (a flat one never is)."""
    if bounds is not None and len(data) == 1:
        data = [data[0], data[0]]
    n = len(data)
    if n <= 1 or width <= 0:
        return ("few", width, height, n)
    buckets = []
    start = 0
    for k in range(1, width + 1):
        end = n * k // width
        if end > start:
            buckets.append(max(data[start:end]))
            start = end
    minimum, maximum = min(data), max(buckets)
    if bounds is not None:
        minimum, maximum = min(minimum, bounds[0]), max(maximum, bounds[1])
    extent = maximum - minimum or 1
    step = len(buckets) / width
    index = 0.0
    ratios = []
    for _ in range(width):  # (the renderable's own walk over the buckets, float steps included)
        ratios.append((buckets[int(index)] - minimum) / extent)
        index += step
    return ("many", width, height, tuple(ratios))


class GpuRow(Horizontal):
    """One GPU: figures and bars, then memory and utilisation history."""

    DEFAULT_CSS = """
    GpuRow { height: 2; }
    GpuRow > .gpu-text { width: 1fr; min-width: 56; }
    GpuRow > Vertical { width: 1fr; max-width: 60; }
    GpuRow Sparkline { height: 1; }
    """

    def __init__(self, index: int):
        # no id: another host's GPU rows are mounted while this host's are still being removed (an id
        # per index, gpu-0 twice at once, was Textual's DuplicateIds, ending the app)
        super().__init__(classes="gpu-row")
        self.index = index
        self._last: tuple | None = None
        self._text = _linkless(TextView(classes="gpu-text"))
        spark = _sparkline()  # (its module is made on the first GPU row, not at start-up)
        # on absolute scales: memory from 0 to the GPU's total (1 until a sample says it), 0-100%
        self._mem = spark([0.0], summary_function=max, classes="mem-spark", bounds=(0.0, 1.0))
        self._util = spark([0.0], summary_function=max, classes="util-spark", bounds=(0.0, 100.0))
        self._drawn: dict[str, tuple | None] = {"mem": None, "util": None}  # what each sparkline shows

    def compose(self) -> ComposeResult:
        yield self._text
        with Vertical():
            yield self._mem
            yield self._util

    @property
    def ready(self) -> bool:
        # A row mounted this refresh has not composed its children yet: the next
        # sample draws it (nothing is marked drawn until it really is).
        return self._text.is_mounted and self._mem.is_mounted and self._util.is_mounted

    def show(self, gpu: GpuSample) -> None:
        if not self.ready:
            return
        key = (gpu.memory_used, gpu.memory_total, gpu.util, gpu.power_w, gpu.temp_c)
        if key == self._last:
            return
        self._last = key
        if not is_na(gpu.memory_total) and gpu.memory_total > 0 and self._mem.bounds != (0.0, float(gpu.memory_total)):
            self._mem.bounds = (0.0, float(gpu.memory_total))
            self._drawn["mem"] = None  # (drawn on the new scale at the next look at the history)
        name = literal(gpu.name or "GPU").replace("NVIDIA ", "")  # (what the host's NVML says)
        util_frac = gpu.util / 100 if not is_na(gpu.util) else gpu.util
        line1 = Text.assemble(
            (f"GPU{gpu.index:<2} ", "bold"),
            f"{name[:12]:<12} mem ",
            bar(gpu.memory_fraction),
            f" {units.gib(gpu.memory_used)}/{units.gib(gpu.memory_total)} GiB",
        )
        line2 = Text.assemble(
            (f"{gpu.temp_c:>7.0f}°C {gpu.power_w:>5.0f} W ", "dim"),
            "util ",
            bar(util_frac),
            f" {units.percent(gpu.util):>4}",
        )
        self._text.set(Text("\n").join([line1, line2]))

    def show_history(self, history: Any) -> bool:
        """The memory and utilisation sparklines from the GPU's history; False when the row cannot
        draw yet (not composed). Each sparkline is redrawn only when what it shows changed: its
        data is kept current either way (a resize draws the latest)."""
        if not self.ready:
            return False
        if not history:
            return True
        # (NA, None or NaN, as 0: `m != m` is NaN's test, NA included)
        mem = [0.0 if m is None or m != m else float(m) for m, _ in history]
        util = [0.0 if u is None or u != u else float(u) for _, u in history]
        self._show_spark("mem", self._mem, mem)
        self._show_spark("util", self._util, util)
        return True

    def _show_spark(self, which: str, spark: Any, data: list[float]) -> None:
        spark.set_reactive(type(spark).data, data)
        size = spark.size
        visible = _visible(data, size.width, size.height, spark.bounds)
        if visible == self._drawn[which]:
            return
        self._drawn[which] = visible
        self._redraw_spark(which, spark)

    def _redraw_spark(self, which: str, spark: Any) -> None:
        spark.refresh()


class DashboardScreen(GpuopsScreen):
    """Hosts, their GPUs and the processes holding GPU memory."""

    BINDINGS = [
        Binding("slash", "filter", "Filter", key_display="/"),
        Binding("d", "deployments", "Deploys"),
        Binding("escape", "back", "Back", key_display="esc", show=False),  # on ?; the footer keeps q Quit at 80 columns
        Binding("tab", "focus_next", "Next pane", show=False),
        Binding("ctrl+k", "end_process", "Kill"),
        Binding("p", "plan", "Plan"),
        Binding("s", "storage", "Storage"),
        Binding("b", "bench_runs", "Bench"),  # the runs (looking: not read-only's `bench`, which runs one)
        Binding("f", "find_host", "Find"),  # the host list: hosts whose name holds what is typed
        Binding("o", "sort_hosts", "Sort"),  # the host list: inventory, free GPU memory, util, stale
    ]

    def __init__(self) -> None:
        super().__init__()
        self.selected: str | None = None
        self.filter_text = ""
        self.host_filter = ""  # `f`: the host list shows the hosts whose name holds it (any case)
        self.sort_by = SORTS[0][0]  # `o`: one of SORTS
        self._procs_key: tuple | None = None
        self._rows: dict[str, tuple] = {}  # the latest cells per host, shown or not
        self._keys: dict[str, tuple[float, float, float]] = {}  # sort keys per host
        self._seen: dict[str, tuple] = {}  # per host: what its row was made from (see _refresh_hosts)
        self._index: dict[str, int] = {}  # inventory order
        self._order: list[str] = []  # the shown hosts, top to bottom
        self._gpus_title: tuple | None = None
        self._gpu_rows: dict[int, GpuRow] = {}  # the GPU rows shown, by index
        self._history_host: str | None = None  # the host whose GPU histories the rows show, and when
        self._history_at = 0.0
        self._detail_ready = False  # the selected host's panes (mounted right after the first frame)

    def compose(self) -> ComposeResult:
        # The first frame: the host list in its place, the detail pane's frame empty; what goes in
        # it (the selected host's figures, GPUs, processes) is mounted right after that frame.
        yield Header()
        with Horizontal(id="main"):
            yield RowTable(*HOST_COLUMNS, id="hosts")
            yield Vertical(id="detail")
        yield KeyFooter(show_command_palette=False)  # ctrl+p still opens it (and ? says so): q Quit fits at 80 columns

    def on_mount(self) -> None:
        self.selected = next(iter(self.gapp.monitor.states), None)  # (SIMULATED, READONLY: the app's title says so)
        self.refresh_data()
        self.query_one("#hosts", RowTable).focus()
        self.call_after_refresh(self._mount_detail)

    async def _mount_detail(self) -> None:
        """The selected host's panes, once the first frame is on screen (styling, laying out and
        drawing them, the processes table above all, was a good part of that frame)."""
        detail = self.query("#detail")
        if not detail or self._detail_ready:  # (the app is closing already)
            return
        # made as they show a host not sampled yet (no alert, no GPUs): its first showing restyles nothing
        alert = _linkless(TextView(id="host-alert"))
        alert.display = False
        self._gpus_title = _gpus_pane_title(0)
        gpus = VerticalScroll(id="gpus", classes="empty")
        gpus.border_title = self._gpus_title[0]
        await detail.first(Vertical).mount_all([
            _linkless(TextView(id="host-title")),
            _linkless(TextView(id="host-stats")),
            alert,
            gpus,
            Static("Processes holding GPU memory", id="procs-title"),
            RowTable("GPU", "PID", "User", "Memory", "Command", id="procs"),
        ])
        if not self.query("#procs"):  # the app closed while they were mounted
            return
        self._detail_ready = True
        self._procs_key = None
        self.refresh_data()

    # ------------------------------------------------------------- data → view

    def refresh_data(self) -> None:
        now = time.monotonic()
        states = self.gapp.monitor.states
        self._refresh_hosts(states, now)
        if self.selected in states and self._detail_ready:
            self._show_host(states[self.selected], now)

    def _refresh_hosts(self, states: dict[str, HostState], now: float) -> None:
        """The host list: rows of the hosts with news, in the chosen order, only what changed."""
        if states.keys() != self._index.keys():  # the inventory changed (config.toml reloaded)
            self._index = {name: i for i, name in enumerate(states)}
            for gone in [name for name in self._rows if name not in states]:
                for cache in (self._rows, self._keys, self._seen):
                    cache.pop(gone, None)
        seen_rows = self._seen
        gib = units.gib
        remade = False
        for name, state in states.items():
            # What the row is made from: its GPU rows (the very list: a host whose GPU rows did not
            # change shares the one before; kept here, so its id is never another list's), RAM in
            # whole GiB, NVML's state, reachability and the staleness shown. A new sample that
            # changes none of them (most, most seconds) costs no row.
            snap = state.snapshot
            if snap is None:
                gpus = shown = None
            else:
                gpus, host, nvml = snap.gpus, snap.host, snap.nvml
                ram = (gib(host.mem_used, 0), gib(host.mem_total, 0)) if host is not None else None
                shown = (ram, nvml.ok, nvml.code)
            key = (shown, state.reachable, _age_bucket(state.age(now)))
            seen = seen_rows.get(name)
            if seen is not None and seen[0] is gpus and seen[1] == key:
                continue
            seen_rows[name] = (gpus, key)
            self._rows[name], self._keys[name] = host_figures(state, now)
            remade = True
        order = self._host_order(states)
        moved = order != self._order
        hosts = self.query_one("#hosts", RowTable)
        if remade or moved:  # (the list draws again only the rows whose cells changed)
            hosts.set_rows([(name, self._rows[name]) for name in order])
        self._order = order
        self._show_list_title(len(states))
        if not moved:
            return
        if self.selected in order:
            hosts.move_cursor(row=order.index(self.selected))
        elif order:  # the filter hid the selected host: the first one shown is selected
            self.selected = order[0]
            self._procs_key = None
            hosts.move_cursor(row=0)
            if self.selected in states and self._detail_ready:
                self._show_host(states[self.selected], now)

    def _host_order(self, states: dict[str, HostState]) -> list[str]:
        needle = self.host_filter.lower()
        names = [name for name in states if needle in name.lower()] if needle else list(states)
        which = [key for key, _ in SORTS].index(self.sort_by) - 1
        if which >= 0:
            keys, index = self._keys, self._index
            names.sort(key=lambda name: (keys[name][which], index.get(name, 0)))
        return names

    def _show_list_title(self, total: int) -> None:
        hosts = self.query_one("#hosts", RowTable)
        shown = len(self._order)
        title = f"Hosts ({shown} of {total}: {self.host_filter!r})" if self.host_filter else ""
        subtitle = dict(SORTS)[self.sort_by]
        if (title, subtitle) != (hosts.border_title or "", hosts.border_subtitle or ""):
            hosts.border_title = title or None
            hosts.border_subtitle = subtitle or None

    def _show_host(self, state: HostState, now: float) -> None:
        snap = state.snapshot
        age = state.age(now)
        freshness = (
            "waiting for the first sample…" if age is None
            else "live" if age <= STALE_AFTER
            else f"STALE: no data for {units.age(float(int(age)))}"
        )
        where = "local" if state.kind == "local" else f"ssh {state.address}"
        title = Text.assemble((state.name, "bold"), f"  {literal(where)}  ·  ")
        title.append(freshness, style="yellow bold" if age is not None and age > STALE_AFTER else "green")
        if state.retry_at is not None:
            title.append(f"  ·  retrying in {max(0.0, state.retry_at - now):.0f}s", style="dim")
        self.query_one("#host-title", TextView).set(title)

        stats = Text()
        if snap and snap.host:
            h = snap.host
            cpu = h.cpu_percent / 100 if not is_na(h.cpu_percent) else h.cpu_percent
            mem = h.mem_used / h.mem_total if not (is_na(h.mem_used) or is_na(h.mem_total)) else h.mem_used
            stats.append_text(Text.assemble("CPU ", bar(cpu, 12), f" {units.percent(h.cpu_percent):>4}   "))
            stats.append_text(Text.assemble("RAM ", bar(mem, 12), f" {units.gib(h.mem_used)}/{units.gib(h.mem_total)} GiB"))
            for d in h.disks:
                stats.append(f"\nDisk {literal(d.mount):<24} ")
                stats.append_text(bar(1 - d.free_bytes / d.total_bytes if d.total_bytes else 0, 12))
                stats.append(f" {units.size(d.free_bytes)} free of {units.size(d.total_bytes)}")
        self.query_one("#host-stats", TextView).set(stats)

        alert = Text()
        if state.error:
            alert.append(literal(state.error), style="bold red" if state.reachable is False else "bold yellow")
            if state.hint:
                alert.append(f"\nhint: {literal(state.hint)}", style="italic")
        elif snap and snap.nvml.hint:
            alert.append(f"note: {literal(snap.nvml.hint)}", style="dim")
        self.query_one("#host-alert", TextView).set(alert)
        self.query_one("#host-alert").display = bool(alert.plain)

        self._show_gpus(state)
        self._show_processes(state)

    def _show_gpus(self, state: HostState) -> None:
        container = self.query_one("#gpus", VerticalScroll)
        gpus = state.snapshot.gpus if state.snapshot else []
        title = _gpus_pane_title(len(gpus))
        if title != self._gpus_title:  # setting a border title repaints the whole pane: only on change
            self._gpus_title = title
            container.border_title = title[0]
            container.set_class(title[1], "empty")
        rows = self._gpu_rows
        # (rows that left the pane otherwise: the rows there are, but not those being removed, whose
        # removal is not done yet: counting them remounted the rows on every refresh, forever,
        # when a host's GPUs went away)
        if any(row.parent is not container for row in rows.values()):
            rows = self._gpu_rows = {row.index: row for row in container.query(GpuRow)
                                     if not row._pruning}  # (a CSS query: not every tick)
        wanted = [g.index for g in gpus]
        if sorted(rows) != wanted:
            container.remove_children()
            new_rows = [GpuRow(i) for i in wanted]
            container.mount_all(new_rows)
            rows = self._gpu_rows = {r.index: r for r in new_rows}
            self._history_host = None  # (new rows: their histories at once)
            self.call_after_refresh(self._show_gpus, state)
            return
        for gpu in gpus:
            rows[gpu.index].show(gpu)
        # Ten minutes in ~34 columns is ~18 s a column: looking at the history every few seconds
        # shows everything there is to see (and at once for a host just selected).
        now = time.monotonic()
        if state.name == self._history_host and now - self._history_at < HISTORY_REDRAW_S:
            return
        history = state.gpu_history
        drawn = [rows[gpu.index].show_history(history.get(gpu.index)) for gpu in gpus]
        if all(drawn):  # (a row not composed yet: the next tick draws them)
            self._history_host, self._history_at = state.name, now

    def _process_rows(self, state: HostState) -> list[tuple]:
        rows = []
        needle = self.filter_text.lower()
        for gpu in state.snapshot.gpus if state.snapshot else []:
            for p in gpu.processes:
                row = (str(gpu.index), str(p.pid), p.user or "?", units.size(p.used_bytes), p.command or "?")
                if not needle or any(needle in str(cell).lower() for cell in row[1:]):
                    rows.append(row)
        return rows

    def _show_processes(self, state: HostState) -> None:
        rows = self._process_rows(state)
        key = (state.name, self.filter_text, tuple(rows))
        if key == self._procs_key:
            return
        self._procs_key = key
        self.query_one("#procs", RowTable).set_rows([(f"{row[0]}:{row[1]}", row) for row in rows])
        title = "Processes holding GPU memory"
        if self.filter_text:
            title += f"  (filter: {self.filter_text!r}, {len(rows)} shown)"
        self.query_one("#procs-title", Static).update(Text(title))  # (what was typed is no markup)

    # ------------------------------------------------------------- other screens

    def action_plan(self) -> None:
        from .model_picker import ModelPickerScreen

        if self.selected:
            self.app.push_screen(ModelPickerScreen(self.selected))

    def action_storage(self) -> None:
        from .storage import StorageScreen

        if self.selected:
            self.app.push_screen(StorageScreen(self.selected))

    def action_bench_runs(self) -> None:
        from .bench_runs import BenchRunsScreen

        self.app.push_screen(BenchRunsScreen())

    # ------------------------------------------------------------- ending a process

    def selected_process(self) -> tuple[str, Any] | None:
        """(host name, GpuProcess) under the processes table's cursor."""
        if not self._detail_ready:
            return None
        table = self.query_one("#procs", RowTable)
        state = self.gapp.monitor.states.get(self.selected or "")
        if state is None or state.snapshot is None or table.row_count == 0:
            return None
        gpu_index, pid = table.get_row_at(table.cursor_row)[:2]
        for gpu in state.snapshot.gpus:
            for p in gpu.processes:
                if str(gpu.index) == gpu_index and str(p.pid) == pid:
                    return state.name, p
        return None

    def action_end_process(self) -> None:
        picked = self.selected_process()
        if picked is None:
            self.notify("select a process in the processes table first (tab)", severity="warning")
            return
        self._ask_end(*picked)

    @work(exclusive=True, group="end-process")
    async def _ask_end(self, host: str, proc: Any) -> None:
        """Ask before ending `proc`: a deployment's server is named, and ending it stops that
        deployment (as `s` on the deployments view does); any other process is ended by itself."""
        from ..core.api import HostError
        from .confirm import ConfirmScreen

        held = f"user {literal(proc.user or '?')}, holding {units.size(proc.used_bytes)} of GPU memory"
        try:
            owner = await self.gapp.ops.process_owner(host, proc.pid)
        except HostError as exc:
            self.notify(f"pid {proc.pid}: cannot tell whose it is ({exc.message}); nothing ended", severity="error")
            return
        if owner is not None:
            also = self.gapp.ops.parts_said(owner)
            question = f"Stop deployment {owner.name} on {host}{also}? pid {proc.pid} is its server"
            detail = (f"{literal(owner.model)}, {owner.state}; {literal(proc.command or '?')}\n{held}\nits server is stopped as `s` "
                      "on the deployments view does (SIGTERM, then up to 60 s): recorded as stopped")
            yes = f"Stop {owner.name}"
        else:
            question = f"End pid {proc.pid} on {host}? (SIGTERM, then wait 10 s)"
            detail, yes = f"{literal(proc.command or '?')}\n{held}", "End it"

        def answered(answer: bool | str | None) -> None:
            if answer is True:
                self.gapp.end_process(host, proc.pid, proc.command, owner.name if owner is not None else None)

        self.app.push_screen(ConfirmScreen(question, detail, yes=yes), answered)

    # ------------------------------------------------------------- selection

    def select_host(self, name: str) -> bool:
        states = self.gapp.monitor.states
        if name not in states:
            return False
        if name not in self._order:  # hidden by the host filter: show every host again
            self.host_filter = ""
            self._refresh_hosts(states, time.monotonic())
        self.selected = name
        hosts = self.query_one("#hosts", RowTable)
        hosts.move_cursor(row=hosts.get_row_index(name))
        self._procs_key = None
        self.refresh_data()
        return True

    @on(RowTable.RowHighlighted, "#hosts")
    def _host_highlighted(self, event: RowTable.RowHighlighted) -> None:
        name, table = event.key, event.table
        if name not in self._order or table.get_row_index(name) != table.cursor_row:
            return  # the cursor moved on since (a re-sorted or re-filtered list, keys held down)
        if name != self.selected:
            self.selected = name
            self._procs_key = None
            self.refresh_data()

    # ------------------------------------------------------------- keys

    def _cmdline(self) -> Input:
        """The `/` filter line, made on first use (nothing at start-up pays for it)."""
        found = self.query("#filterline")
        if found:
            return found.first(Input)
        line = Input(id="filterline", placeholder="filter processes (esc clears)")
        line.border_title = "/"
        self.mount(line, before=self.query_one(KeyFooter))
        return line

    def action_filter(self) -> None:
        self._filter_before = self.filter_text
        line = self._cmdline()
        line.value = self.filter_text
        line.display = True
        line.focus()

    def action_back(self) -> None:
        if self.query("#hostfilter") and self._hostline().display:
            self._set_host_filter(self._hosts_before)
            self._close_hostline()
        elif self.query("#filterline") and self._cmdline().display:
            self._set_filter(self._filter_before)
            self._close_cmdline()
        elif self.filter_text:
            self._set_filter("")
        elif self.host_filter:
            self._set_host_filter("")

    def _close_cmdline(self) -> None:
        self._cmdline().display = False
        self.query_one("#hosts", RowTable).focus()

    def _set_filter(self, text: str) -> None:
        self.filter_text = text
        if self.selected in self.gapp.monitor.states and self._detail_ready:
            self._show_processes(self.gapp.monitor.states[self.selected])

    _filter_before = ""

    @on(Input.Changed, "#filterline")
    def _filter_changed(self, event: Input.Changed) -> None:
        self._set_filter(event.value.strip())

    @on(Input.Submitted, "#filterline")
    def _filter_submitted(self, event: Input.Submitted) -> None:
        self._close_cmdline()

    # the host list: `f` finds hosts by name, `o` sorts them

    def _hostline(self) -> Input:
        """The `f` line, made on first use."""
        found = self.query("#hostfilter")
        if found:
            return found.first(Input)
        line = Input(id="hostfilter", placeholder="hosts whose name holds… (enter keeps, esc restores)")
        line.border_title = "f"
        self.mount(line, before=self.query_one(KeyFooter))
        return line

    def action_find_host(self) -> None:
        self._hosts_before = self.host_filter
        line = self._hostline()
        line.value = self.host_filter
        line.display = True
        line.focus()

    def _close_hostline(self) -> None:
        self._hostline().display = False
        self.query_one("#hosts", RowTable).focus()

    def _set_host_filter(self, text: str) -> None:
        if text != self.host_filter:
            self.host_filter = text
            self._refresh_hosts(self.gapp.monitor.states, time.monotonic())

    _hosts_before = ""

    @on(Input.Changed, "#hostfilter")
    def _host_filter_changed(self, event: Input.Changed) -> None:
        self._set_host_filter(event.value.strip())

    @on(Input.Submitted, "#hostfilter")
    def _host_filter_submitted(self, event: Input.Submitted) -> None:
        self._close_hostline()

    def action_sort_hosts(self) -> None:
        names = [key for key, _ in SORTS]
        self.sort_by = names[(names.index(self.sort_by) + 1) % len(names)]
        self._refresh_hosts(self.gapp.monitor.states, time.monotonic())

    def action_deployments(self) -> None:
        self.gapp.open_deployments()
