"""The dashboard's host list at fleet size: `f` finds hosts by name, `o` sorts them (free GPU
memory, util, stale), both at once; and the host table that repaints only the rows that changed."""

from __future__ import annotations

import time
from typing import Any

import pytest
from textual.app import App, ComposeResult
from rich.style import Style
from rich.text import Text
from textual.containers import Horizontal
from textual.geometry import Region
from textual.widgets import DataTable, Input

from gpuops.core.config import parse_inventory
from gpuops.screens.dashboard import DashboardScreen
from gpuops.screens.deployments import DeploymentsScreen
from gpuops.screens.help import HelpScreen
from gpuops.sim.host import setup_simhost
from gpuops.tui.app import GpuopsApp
from gpuops.tui.widgets import KeyFooter, RowTable
from tests.tui_helpers import screen_text, until

GIB = 1024**3


@pytest.fixture(autouse=True)
def _isolated(tmp_path, monkeypatch):
    monkeypatch.setenv("XDG_STATE_HOME", str(tmp_path / "state"))
    monkeypatch.setenv("HOME", str(tmp_path / "home"))
    monkeypatch.delenv("SSH_AUTH_SOCK", raising=False)


@pytest.fixture
def fleet(tmp_path):
    """Three simulated hosts (2 GPUs of 140 GiB each) with different loads, and one that is down.

    free GPU memory: bravo 261 GiB > alpha 181 > charlie 81; util: bravo 90% > charlie 50% > alpha 10%."""
    loads = {"alpha": (50, 10), "bravo": (10, 90), "charlie": (100, 50)}  # GiB used per GPU, util %
    blocks = []
    for name, (used, util) in loads.items():
        sim = setup_simhost(tmp_path / name, gpus=2)
        for i in range(2):
            sim.set_gpu(i, memory_used=used * GIB, util=util)
        blocks.append(sim.host_block(name))
    blocks.append('[hosts.deadbox]\nssh = "root@127.0.0.1:1"\n')
    return parse_inventory("\n".join(blocks), source="fleet.toml")


def shown(app) -> list[str]:
    table = app.screen.query_one("#hosts", RowTable)
    return [table.get_row_at(i)[1] for i in range(table.row_count)]


async def all_reported(app, pilot) -> None:
    """Until the host list shows every host's figures (deadbox: down)."""
    table = app.screen.query_one("#hosts", RowTable)

    def shown_all() -> bool:
        rows = {table.get_row_at(i)[1]: table.get_row_at(i) for i in range(table.row_count)}
        return len(rows) == 4 and all(rows[n][3] for n in ("alpha", "bravo", "charlie")) and rows["deadbox"][6] == "down"

    assert await until(pilot, shown_all, timeout=30)


async def test_o_cycles_the_sort_and_the_selection_stays_on_its_host(fleet):
    app = GpuopsApp(fleet, interval=0.25)
    async with app.run_test(size=(160, 45)) as pilot:
        await all_reported(app, pilot)
        screen = app.screen
        hosts = screen.query_one("#hosts", RowTable)
        assert shown(app) == ["alpha", "bravo", "charlie", "deadbox"]  # inventory order first
        assert not hosts.border_subtitle
        await pilot.press("down", "down")  # charlie
        assert screen.selected == "charlie"

        await pilot.press("o")
        assert shown(app) == ["bravo", "alpha", "charlie", "deadbox"]  # most free first, unknown last
        assert hosts.border_subtitle == "sorted: most free GPU memory first"
        assert screen.selected == "charlie" and hosts.cursor_row == 2

        await pilot.press("o")
        assert shown(app) == ["bravo", "charlie", "alpha", "deadbox"]  # busiest first
        assert hosts.border_subtitle == "sorted: busiest GPUs first"
        assert screen.selected == "charlie" and hosts.cursor_row == 1

        # stale: a host that stopped answering a while ago comes before the fresh ones, a host that
        # is down before both (the monitor is stopped so that nothing freshens them meanwhile)
        await app.monitor.close()
        app.monitor.states["charlie"].last_update = time.monotonic() - 30
        await pilot.press("o")
        assert shown(app) == ["deadbox", "charlie", "alpha", "bravo"]
        assert hosts.border_subtitle == "sorted: stalest first"
        assert screen.selected == "charlie" and hosts.cursor_row == 1

        await pilot.press("o")  # and back to the inventory's order
        assert shown(app) == ["alpha", "bravo", "charlie", "deadbox"]
        assert not hosts.border_subtitle
        assert screen.selected == "charlie" and hosts.cursor_row == 2


async def test_f_finds_hosts_by_name_at_once(fleet):
    app = GpuopsApp(fleet, interval=0.25)
    async with app.run_test(size=(160, 45)) as pilot:
        await all_reported(app, pilot)
        screen = app.screen
        hosts = screen.query_one("#hosts", RowTable)
        assert screen.selected == "alpha"

        await pilot.press("f")
        line = screen.query_one("#hostfilter", Input)
        assert line.display and line.has_focus
        await pilot.press(*"RAV")  # any case; the list narrows as it is typed, not at the next tick
        assert shown(app) == ["bravo"]
        assert screen.selected == "bravo"  # the selected host was hidden: the first one shown is selected
        assert hosts.border_title == "Hosts (1 of 4: 'RAV')"
        assert await until(pilot, lambda: "bravo" in str(screen.query_one("#host-title").text))

        await pilot.press("escape")  # esc while typing: the filter as it was before `f`
        assert not line.display and hosts.has_focus
        assert shown(app) == ["alpha", "bravo", "charlie", "deadbox"]
        assert not hosts.border_title

        await pilot.press("f", *"ha", "enter")  # enter keeps it
        assert not line.display and hosts.has_focus
        assert shown(app) == ["alpha", "charlie"]
        assert screen.host_filter == "ha"

        await pilot.press("o", "o")  # filter and sort together: busiest first
        assert shown(app) == ["charlie", "alpha"]

        await pilot.press("colon", *"host deadbox", "enter")  # a hidden host asked for: shown again
        assert screen.selected == "deadbox" and screen.host_filter == ""
        assert "deadbox" in shown(app) and hosts.cursor_row == shown(app).index("deadbox")

        await pilot.press("f", *"zzz", "enter")  # nothing matches: an empty list, the selection stays
        assert shown(app) == [] and screen.selected == "deadbox"
        await pilot.press("escape")  # esc with the line closed clears the host filter
        assert screen.host_filter == "" and len(shown(app)) == 4


async def test_the_process_filter_and_the_host_filter_are_apart(fleet):
    app = GpuopsApp(fleet, interval=0.25)
    async with app.run_test(size=(160, 45)) as pilot:
        await all_reported(app, pilot)
        screen = app.screen
        await pilot.press("f", *"ha", "enter")  # alpha, charlie
        await pilot.press("slash", *"1234", "enter")  # the processes
        assert screen.filter_text == "1234" and screen.host_filter == "ha"
        assert shown(app) == ["alpha", "charlie"]
        await pilot.press("escape")  # esc clears the process filter first
        assert screen.filter_text == "" and screen.host_filter == "ha"
        await pilot.press("escape")  # then the host filter
        assert screen.host_filter == "" and len(shown(app)) == 4


def footer_line(app) -> str:
    """The footer's line as it is drawn (the screen's width of it)."""
    return app.screen.query_one(KeyFooter).render_line(0).text


async def test_find_and_sort_are_in_the_footer_and_on_help(fleet):
    app = GpuopsApp(fleet, interval=0.25)
    async with app.run_test(size=(160, 45)) as pilot:
        tail = " f Find  o Sort  q Quit  ? Keys"
        assert await until(pilot, lambda: footer_line(app).rstrip().endswith(tail)), footer_line(app)
        assert "^p" not in footer_line(app)  # no palette key on the dashboard (ctrl+p opens it, ? says so)
        await pilot.press("question_mark")
        assert isinstance(app.screen, HelpScreen)
        keys = dict(app.screen.keys)
        assert keys["f"] == "Find" and keys["o"] == "Sort"
        assert keys["/"] == "Filter" and keys["q"] == "Quit"
        await pilot.press("escape")
        assert isinstance(app.screen, DashboardScreen)


async def test_the_footer_redraws_only_when_what_it_shows_changes(fleet):
    """A bindings change that shows nothing new redraws nothing; one that does (`--readonly` turned
    on: Kill disabled) redraws the footer once, Kill dimmed."""
    app = GpuopsApp(fleet, interval=0.25)
    async with app.run_test(size=(160, 45)) as pilot:
        await all_reported(app, pilot)
        footer = app.screen.query_one(KeyFooter)
        looks: list[int] = []
        redraws: list[int] = []
        keys_now, refresh = footer._keys_now, footer.refresh

        def counted_look() -> Any:
            looks.append(1)
            return keys_now()

        def counted_refresh(*args: Any, **kwargs: Any) -> Any:
            redraws.append(1)
            return refresh(*args, **kwargs)

        footer._keys_now = counted_look  # type: ignore[method-assign]
        footer.refresh = counted_refresh  # type: ignore[method-assign]

        async def looked_again() -> None:
            seen = len(looks)
            app.screen.refresh_bindings()
            assert await until(pilot, lambda: len(looks) > seen)

        await looked_again()
        assert redraws == []
        app.readonly = True
        await looked_again()
        assert redraws == [1]
        await looked_again()
        assert redraws == [1]
        kill = next(seg for seg in footer.render_line(0) if seg.text.strip() == "Kill")
        quit_ = next(seg for seg in footer.render_line(0) if seg.text.strip() == "Quit")
        assert kill.style is not None and kill.style.dim
        assert quit_.style is not None and not quit_.style.dim


async def test_80_columns_keep_q_quit_in_the_footer(fleet):
    """Under 120 columns the footer is compact (one column between keys, none around a key), from
    the start or once the terminal is made narrower, and wide again when it is widened."""
    app = GpuopsApp(fleet, interval=0.25)
    async with app.run_test(size=(80, 24)) as pilot:
        assert await until(pilot, lambda: "d Deploys ^k Kill p Plan" in footer_line(app)), footer_line(app)
        line = footer_line(app)
        assert len(line) == 80 and "f Find o Sort q Quit" in line, line
    app = GpuopsApp(fleet, interval=0.25)
    async with app.run_test(size=(160, 45)) as pilot:
        assert await until(pilot, lambda: " d Deploys  ^k Kill  p Plan " in footer_line(app)), footer_line(app)
        await pilot.resize_terminal(80, 24)
        assert await until(pilot, lambda: "f Find o Sort q Quit" in footer_line(app)), footer_line(app)
        await pilot.resize_terminal(120, 24)
        assert await until(pilot, lambda: " f Find  o Sort  q Quit " in footer_line(app)), footer_line(app)


async def test_a_click_on_a_footer_key_presses_it(fleet):
    """A mouse press on a key of the footer runs its action; on a disabled key, the bell; between
    keys, nothing."""
    app = GpuopsApp(fleet, interval=0.25, readonly=True)
    bells: list[int] = []
    app.bell = lambda: bells.append(1)  # type: ignore[method-assign]
    async with app.run_test(size=(80, 24)) as pilot:
        assert await until(pilot, lambda: "d Deploys ^k Kill" in footer_line(app))
        line = footer_line(app)
        await pilot.click(KeyFooter, offset=(line.index(" ^k Kill"), 0))  # the column between two keys
        await pilot.click(KeyFooter, offset=(line.index("Kill"), 0))  # --readonly: disabled
        assert bells == [1] and isinstance(app.screen, DashboardScreen)
        await pilot.click(KeyFooter, offset=(line.index("Deploys"), 0))
        assert await until(pilot, lambda: isinstance(app.screen, DeploymentsScreen))
        await pilot.press("escape")
        assert await until(pilot, lambda: isinstance(app.screen, DashboardScreen))
        await pilot.click(KeyFooter, offset=(footer_line(app).index("q Quit"), 0))  # on the key itself
        assert await until(pilot, lambda: not app.is_running)


async def test_a_long_host_list_keeps_the_cursor_in_view_and_a_click_selects_a_host():
    """At 80x24 twelve hosts (down: nothing answers at that port) share the host list's three rows:
    the keys move the selection and scroll it into view, the list grown back from a filter shows the
    selected host, and a click on a host's row selects it."""
    text = "".join(f'[hosts.h{i:02d}]\nssh = "root@127.0.0.1:1"\n' for i in range(12))
    app = GpuopsApp(parse_inventory(text, source="fleet.toml"), interval=0.25)
    async with app.run_test(size=(80, 24)) as pilot:
        screen = app.screen
        hosts = screen.query_one("#hosts", RowTable)

        def cursor_in_view() -> bool:  # (below the header, above the list's last line)
            return 1 <= hosts.cursor_row + 1 - hosts.scroll_offset.y < hosts.size.height

        await pilot.pause()
        assert hosts.row_count == 12 and hosts.size.height == 4  # the header and three rows
        await pilot.press("down", "ctrl+end")
        assert screen.selected == "h11" and hosts.scroll_offset.y == 9 and cursor_in_view()
        await pilot.press("pageup")
        assert screen.selected == "h08" and hosts.scroll_offset.y == 6 and cursor_in_view()
        await pilot.press("ctrl+end", "f", *"h1", "enter")
        assert shown(app) == ["h10", "h11"] and hosts.size.height == 3 and screen.selected == "h11"
        await pilot.press("escape")  # every host again: the selected one still in view
        assert await until(pilot, lambda: len(shown(app)) == 12 and hosts.size.height == 4)
        assert screen.selected == "h11" and cursor_in_view()

        top = hosts.scroll_offset.y
        await pilot.click(hosts, offset=(5, 2))  # the border, the header, then the first row shown
        assert await until(pilot, lambda: screen.selected == f"h{top:02d}")
        assert hosts.cursor_row == top
        assert await until(pilot, lambda: f"h{top:02d}" in str(screen.query_one("#host-title").text))  # its detail


async def test_a_changed_host_row_shows_its_new_figures(tmp_path):
    sim = setup_simhost(tmp_path / "box", gpus=2)
    app = GpuopsApp(parse_inventory(sim.host_block("box"), "t.toml"), interval=0.25)
    async with app.run_test(size=(160, 45)) as pilot:
        assert await until(pilot, lambda: "0/281G" in screen_text(app), timeout=30)
        sim.set_gpu(0, memory_used=70 * GIB, util=40)
        assert await until(pilot, lambda: "70/281G" in screen_text(app) and "20%" in screen_text(app), timeout=15)
        row = app.screen.query_one("#hosts", RowTable).get_row("box")
        assert row[3] == "70/281G" and row[4] == "20%"


# ---------------------------------------------------------------- RowTable draws what a DataTable draws


class Pair(App):
    """A RowTable beside a DataTable (row cursor) of the same rows, cursor and scrolling: the
    DataTable made anew at each step (the reference), the RowTable changed step by step."""

    CSS = "RowTable, DataTable { width: 40; height: 12; border: round $primary; }"
    AUTO_FOCUS = None  # both unfocused: the same look

    def __init__(self) -> None:
        super().__init__()
        self.highlighted: list[tuple[int, str]] = []

    def compose(self) -> ComposeResult:
        with Horizontal():
            yield RowTable(" ", "Host", "Util", id="ours")
            yield DataTable(id="theirs", cursor_type="row")

    def on_row_table_row_highlighted(self, event: RowTable.RowHighlighted) -> None:
        self.highlighted.append((event.row, event.key))

    @property
    def ours(self) -> RowTable:
        return self.query_one(RowTable)

    @property
    def theirs(self) -> DataTable:
        return self.query_one(DataTable)

    async def remake_theirs(self, pilot, rows: list[tuple[str, tuple]]) -> None:
        theirs, ours = self.theirs, self.ours
        theirs.clear(columns=True)
        for label in (" ", "Host", "Util"):
            theirs.add_column(label, key=label)
        for key, cells in rows:
            theirs.add_row(*(Text(c) if isinstance(c, str) else c for c in cells), key=key)  # (no markup)
        await pilot.pause()
        theirs.move_cursor(row=ours.cursor_row, scroll=False)
        theirs.scroll_to(x=ours.scroll_x, y=ours.scroll_y, animate=False, force=True)
        await pilot.pause()


def drawn(widget) -> list[list[tuple[str, Style]]]:
    """The widget's lines as the screen has them (border included): each cell's character and style
    (less the mouse's metadata, which DataTable puts in every cell)."""
    lines = widget.render_lines(Region(0, 0, *widget.outer_size))
    return [[(ch, (seg.style or Style()).clear_meta_and_links()) for seg in line for ch in seg.text]
            for line in lines]


STATUS = {"up": Text.assemble(("●", "green")), "down": Text.assemble(("✖", "red")), "slow": Text("●", style="yellow")}


def fleet_rows(n: int, util=lambda i: f"{i}%") -> list[tuple[str, tuple]]:
    return [(f"h{i:02d}", (STATUS[("up", "down", "slow")[i % 3]], f"h{i:02d}", util(i))) for i in range(n)]


async def test_a_row_table_draws_what_a_data_table_draws():
    app = Pair()
    async with app.run_test(size=(90, 14)) as pilot:
        ours = app.ours
        rows: list[tuple[str, tuple]] = []

        async def same(what: str) -> None:
            await pilot.pause()
            await app.remake_theirs(pilot, rows)
            assert drawn(ours) == drawn(app.theirs), what

        def step(new_rows: list[tuple[str, tuple]]) -> None:
            rows[:] = new_rows
            ours.set_rows(rows)

        for table in (ours, app.theirs):
            table.styles.height = "auto"  # as high as its rows: the header alone
        await same("no rows given yet: the header")
        assert ours.outer_size.height == 3
        for table in (ours, app.theirs):
            table.styles.height = 12
        step(fleet_rows(30))
        await same("first paint")
        step([(k, (c[0], c[1], f"{90 - i}%" if i in (0, 3, 7) else c[2])) for i, (k, c) in enumerate(rows)])
        await same("cells changed")
        step([(k, (c[0], "h01-a-much-longer-name" if k == "h01" else c[1], c[2])) for k, c in rows])
        await same("a wider cell: its column wider")
        step([(k, (c[0], k, c[2])) for k, c in rows])
        await same("the widest cell narrower again: its column too")
        ours.move_cursor(row=5)
        await same("cursor moved")
        step(sorted(rows, key=lambda r: int(r[1][2].rstrip("%"))))
        assert ours.get_row_at(ours.cursor_row)[1] == "h05"  # the cursor stays on its row
        await same("sorted")
        ours.scroll_to(y=10, animate=False)
        await same("scrolled")
        step([(k, (c[0], c[1], "!" if k in ("h12", "h29") else c[2])) for k, c in rows])
        await same("changed while scrolled, in view and out of it")
        step([(k, (STATUS["down"] if k == "h14" else c[0], c[1], c[2])) for k, c in rows])
        await same("a cell's styles changed")
        step([r for r in rows if r[0] != "h12"])
        await same("a row removed")
        step([(k, (c[0], "h03-a-name-wider-than-the-table" if k == "h03" else c[1], c[2])) for k, c in rows])
        ours.scroll_to(x=7, animate=False)
        await same("scrolled sideways")
        step([r for r in rows if r[0] != "h03"])
        await same("the widest row removed: its column narrower")
        step(fleet_rows(5, util=lambda i: "1%"))
        await same("other rows, fewer")
        step([])
        await same("no rows")
        step([(k, (c[0], "h03-a-name-wider-than-the-table" if k == "h03" else c[1], c[2])) for k, c in fleet_rows(30)])
        ours.move_cursor(row=20)
        await same("rows again")

        # focused, the keys: each table focused in turn, the same look
        ours.focus()
        await pilot.press("up", "up", "pagedown", "down", "pageup", "ctrl+end", "up", "right", "right")
        assert ours.cursor_row == 28 and ours.scroll_x == 2
        focused = drawn(ours)
        await app.remake_theirs(pilot, rows)
        app.theirs.focus()
        await pilot.pause()
        assert focused == drawn(app.theirs)
        ours.focus()
        await pilot.press("ctrl+home", "home")
        assert ours.cursor_row == 0 and ours.scroll_offset == (0, 0)
        await pilot.press("end")
        assert ours.scroll_x == ours.max_scroll_x > 0

        # the mouse: the row under it, the header under it, the cursor's row under it
        ours.set_rows(fleet_rows(8))
        ours.move_cursor(row=2)
        ours.scroll_to(x=0, animate=False)
        app.set_focus(None)
        rows = fleet_rows(8)
        await app.remake_theirs(pilot, rows)
        for what, y, shows in (("a row", 5, True), ("the header", 1, True), ("the cursor's row", 4, False)):
            await pilot.hover(ours, offset=(3, y))
            mine = drawn(ours)
            await pilot.hover(app.theirs, offset=(3, y))
            assert mine == drawn(app.theirs), what
            assert (mine != drawn(ours)) == shows, what  # (the mouse left: it looked different, or not)

        # a click on a row moves the cursor there (once: RowHighlighted)
        app.highlighted.clear()
        await pilot.click(ours, offset=(3, 6))  # the border, the header: row 4
        assert ours.cursor_row == 4 and app.highlighted == [(4, "h04")]
        await pilot.click(ours, offset=(3, 1))  # the header: nothing moves
        await pilot.click(ours, offset=(3, 11))  # below the rows: nothing moves
        assert ours.cursor_row == 4 and app.highlighted == [(4, "h04")]


async def test_a_row_table_draws_again_only_the_rows_that_changed():
    """The same rows again draw nothing; a changed row in view draws its own line, one out of view
    nothing; a wider text draws the table again (its column is wider)."""
    app = Pair()
    async with app.run_test(size=(90, 14)) as pilot:
        ours = app.ours
        rows = fleet_rows(30)
        ours.set_rows(rows)
        await pilot.pause()
        drawn_lines: list[int] = []
        render_line = ours.render_line

        def counted(y: int) -> Any:
            drawn_lines.append(y)
            return render_line(y)

        ours.render_line = counted  # type: ignore[method-assign]

        async def lines_drawn(new_rows: list[tuple[str, tuple]]) -> list[int]:
            drawn_lines.clear()
            ours.set_rows(new_rows)
            await pilot.pause()
            return sorted(drawn_lines)

        assert await lines_drawn([(k, tuple(c)) for k, c in rows]) == []  # equal cells, new tuples
        assert await lines_drawn([(k, (c[0], c[1], "7%" if k == "h04" else c[2])) for k, c in rows]) == [5]
        assert await lines_drawn([(k, (c[0], c[1], "7%" if k in ("h04", "h25") else c[2])) for k, c in rows]) == []
        assert len(await lines_drawn([(k, (c[0], c[1], "1000%" if k == "h04" else c[2])) for k, c in rows])) == 10


def test_the_gpu_rows_sparklines_draw_what_textuals_draw():
    """The GPU rows' sparkline renderable: Textual's buckets and bars, segment for segment, on any
    data (one value, a flat line, NA-as-zero gaps, more columns than values, several lines high)."""
    import random

    from rich.color import Color
    from rich.console import Console
    from textual.renderables.sparkline import Sparkline as TextualSparkline
    from textual.widgets import Sparkline

    from gpuops.screens.dashboard import _sparkline

    spark = _sparkline()
    assert issubclass(spark, Sparkline)
    console = Console(width=80, file=None, force_terminal=True)
    rng = random.Random(14)
    datasets = [[5.0], [0.0, 0.0], [3.0] * 600, [float(i % 7) for i in range(37)], [0.0, 1e12, 0.0, 5e11]]
    datasets += [[rng.choice((0.0, rng.random() * 100)) for _ in range(rng.randint(2, 700))] for _ in range(40)]
    for data in datasets:
        for width, height in ((34, 1), (60, 1), (5, 2), (100, 1)):
            args = dict(width=width, height=height, min_color=Color.from_rgb(10, 90, 200),
                        max_color=Color.from_rgb(250, 20, 30), summary_function=max)
            ours = spark.renderable_class(data, **args)
            theirs = TextualSparkline(data, **args)
            opts = console.options
            assert list(ours.__rich_console__(console, opts)) == list(theirs.__rich_console__(console, opts)), (
                len(data), width, height)



def test_the_gpu_rows_sparklines_draw_on_absolute_scales():
    """On bounds (a GPU's utilisation 0-100%, its memory 0 to its total): an idle GPU's jitter is a
    low flat line, not the full-height swings the data's own minimum-to-maximum scale makes of it;
    half busy is half height; one reading is drawn at its height (Textual draws one value as full
    bars, which made every GPU look busy until its second sample)."""
    from rich.color import Color
    from rich.console import Console

    from gpuops.screens.dashboard import _sparkline

    spark = _sparkline()
    console = Console(width=80, force_terminal=True)
    gib = 1024**3

    def bars(data, bounds, width=20):
        r = spark.renderable_class(data, width=width, height=1, min_color=Color.from_rgb(10, 90, 200),
                                   max_color=Color.from_rgb(250, 20, 30), summary_function=max, bounds=bounds)
        return "".join(s.text for s in r.__rich_console__(console, console.options))

    jitter = [0.0, 1.0] * 30
    assert bars(jitter, (0.0, 100.0)) == "▁" * 20
    assert set(bars(jitter, None)) == {"█"}  # the data's own scale: 1% drawn full height
    assert bars([50.0] * 30, (0.0, 100.0)) == "▄" * 20
    assert bars([100.0], (0.0, 100.0)) == "█" * 20 and bars([0.0], (0.0, 100.0)) == "▁" * 20
    assert bars([0.0], None) == "█" * 20  # (Textual's one value)
    memory = [30.0 * gib + (i % 3) * 2**20 for i in range(60)]  # 30 GiB, a few MiB either way, of 140
    assert bars(memory, (0.0, 140.0 * gib)) == "▂" * 20


async def test_the_gpu_rows_sparkline_widget_paints_what_textuals_paints():
    """Mounted side by side with the same data and size, the GPU rows' sparkline and Textual's paint
    the same cells in the same styles."""
    from textual.geometry import Region
    from textual.widgets import Sparkline

    from gpuops.screens.dashboard import _sparkline

    data = [float((i * 37) % 101) for i in range(300)]

    class Sparks(App):
        CSS = "Sparkline { height: 2; width: 50; }"

        def compose(self) -> ComposeResult:
            yield Sparkline(data, summary_function=max, id="textual")
            yield _sparkline()(data, summary_function=max, id="ours")

    app = Sparks()
    async with app.run_test(size=(60, 6)) as pilot:
        await pilot.pause()
        theirs, ours = app.query_one("#textual"), app.query_one("#ours")
        assert ours.auto_links is False
        region = Region(0, 0, 50, 2)
        assert [s.text for s in ours.render_lines(region)] == [s.text for s in theirs.render_lines(region)]
        assert list(ours.render_lines(region)) == list(theirs.render_lines(region))
