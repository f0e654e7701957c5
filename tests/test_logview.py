"""The log view through the pilot: follow, N new lines, filter, timestamps, wrap, errors, copy."""

from __future__ import annotations

import time

from textual.app import App, ComposeResult

from gpuops.tui.logview import LogView
from tests.tui_helpers import screen_text, until


class LogApp(App):
    def __init__(self, capacity: int = 1000):
        super().__init__()
        self.capacity = capacity
        self.new_lines: list[int] = []

    def compose(self) -> ComposeResult:
        yield LogView(self.capacity, id="log")

    def on_log_view_new_lines(self, message: LogView.NewLines) -> None:
        self.new_lines.append(message.count)


def visible(view: LogView) -> list[str]:
    return [view.render_line(y).text.rstrip() for y in range(view.scrollable_content_region.height)]


async def test_follow_pauses_on_scroll_up_and_counts_new_lines():
    app = LogApp()
    async with app.run_test(size=(80, 12)) as pilot:
        view = app.query_one(LogView)
        view.focus()
        for i in range(200):
            view.append(f"line {i}")
        # (the view sizes and scrolls once a frame: each wait is for what it shows, however slow the machine)
        assert await until(pilot, lambda: view.follow and visible(view)[-1] == "line 199")
        await pilot.press("up")
        assert not view.follow
        top, first = view.scroll_y, visible(view)[0]
        for i in range(200, 205):
            view.append(f"line {i}")
        assert await until(pilot, lambda: view.new_lines == 5 and app.new_lines[-1:] == [5])
        await pilot.pause()  # a frame after the lines came
        assert (view.scroll_y, visible(view)[0]) == (top, first)  # paused: the view stays where it was put
        await pilot.press("s")
        assert await until(pilot, lambda: view.follow and visible(view)[-1] == "line 204" and view.new_lines == 0)


async def test_filter_timestamps_wrap_errors_and_copy():
    app = LogApp()
    async with app.run_test(size=(60, 10)) as pilot:
        view = app.query_one(LogView)
        view.focus()
        view.append("[TP0] Load weight begin. avail mem=139.41 GB", ts=0.0)
        view.append("WARNING: The memory capacity is unbalanced.", ts=1.0)
        view.append("RuntimeError: Not enough memory. Please try to increase --mem-fraction-static.", ts=2.0)
        view.append("x" * 150, ts=3.0)
        await pilot.pause()
        view.set_filter("memory")
        await pilot.pause()
        assert view.plain_lines() == ["WARNING: The memory capacity is unbalanced.",
                                      "RuntimeError: Not enough memory. Please try to increase --mem-fraction-static."]
        view.set_filter("")
        await pilot.press("e")  # the first error (not the warning)
        assert view.current_line().startswith("RuntimeError")
        await pilot.press("c")
        assert app.clipboard.startswith("RuntimeError: Not enough memory")
        await pilot.press("t")
        await pilot.pause()
        assert view.plain_lines()[0].split(" ", 1)[1] == "[TP0] Load weight begin. avail mem=139.41 GB"
        await pilot.press("t", "w")
        await pilot.pause()
        width = view.scrollable_content_region.width
        expected = sum(-(-len(e[0]) // width) for e in view.entries)
        assert len(view._rows) == expected and expected >= 4 + 2  # the 150-char line wraps into 3+ rows
        await pilot.press("w")
        await pilot.pause()
        assert len(view._rows) == 4


async def test_memory_is_bounded_with_a_visible_dropped_count():
    app = LogApp(capacity=100)
    async with app.run_test(size=(60, 10)) as pilot:
        view = app.query_one(LogView)
        for i in range(1000):
            view.append(f"l{i}")
        await pilot.pause()
        assert len(view.entries) == 100 and view.dropped == 900
        assert view.plain_lines()[0] == "l900"


async def test_flowing_lines_lay_the_screen_out_only_when_a_scrollbar_appears():
    """Lines arriving while following grow only the view's content: its scrollbar and scroll
    position follow them without a layout of the whole screen (which repaints every widget on
    it, each frame while 20,000 lines a second flow)."""
    app = LogApp(capacity=10_000)
    async with app.run_test(size=(80, 12)) as pilot:
        view = app.query_one(LogView)
        view.focus()
        layouts: list[int] = []
        screen = app.screen
        lay_out = screen._refresh_layout

        def counted(*args, **kwargs):
            layouts.append(1)
            return lay_out(*args, **kwargs)

        screen._refresh_layout = counted
        n = 0
        for batch in range(8):
            for _ in range(50):
                view.append(f"line {n}")
                n += 1
            last = f"line {n - 1}"
            assert await until(pilot, lambda last=last: visible(view)[-1] == last)
            # what the user sees: the newest line at the bottom, and (within SYNC_S) the scrollbar as
            # long as the log
            assert await until(pilot, lambda n=n: view.virtual_size.height == n and not view._sync_pending
                               and view.scroll_y == view.max_scroll_y == n - view.scrollable_content_region.height)
            assert view.vertical_scrollbar.window_virtual_size == view.virtual_size.height == n
            assert view.vertical_scrollbar.position == view.scroll_y
            if batch == 1:  # (the first lines that overflow show the scrollbar: those lay the screen out)
                layouts.clear()
        assert layouts == []  # was one a batch


async def test_a_render_reads_the_views_style_once():
    """The lines of one render share the widget's style, width and scroll offset (Textual blends
    the style through the ancestors on each read): read once a render, the lines are the same."""

    class Counted(LogView):
        reads = 0

        @property
        def rich_style(self):
            Counted.reads += 1
            return super().rich_style

    class OneView(App):
        def compose(self) -> ComposeResult:
            yield Counted(id="log")

    app = OneView()
    async with app.run_test(size=(60, 30)) as pilot:
        view = app.query_one(Counted)
        for i in range(5):  # fewer lines than rows: the other 25 are blank
            view.append(f"line {i}" if i != 3 else "RuntimeError: boom", ts=float(i))
        view.show_timestamps = True
        assert await until(pilot, lambda: not view._size_pending)  # (the view sized: no render of that to come)
        await pilot.pause()
        Counted.reads = 0
        view.refresh()
        assert await until(pilot, lambda: Counted.reads > 0)  # a frame rendered the view
        await pilot.pause()
        assert Counted.reads <= 2  # one a render; was one for each blank line (25)
        ts = time.strftime("%H:%M:%S ", time.localtime(3.0))
        shown = screen_text(app)
        assert f"{ts}RuntimeError: boom" in shown and "line 4" in shown
        strips = view._styles_cache.render_widget(view, view.scrollable_content_region.reset_offset)
        assert [s.text.rstrip() for s in strips[:5]] == [
            time.strftime("%H:%M:%S ", time.localtime(float(i))) + (f"line {i}" if i != 3 else "RuntimeError: boom")
            for i in range(5)]
        colors = [{seg.style.color for seg in strip if seg.style and seg.text.strip()} for strip in strips[:5]]
        assert colors[3] and colors[3].isdisjoint(colors[4])  # the error line in its own colour (red)
        blank = list(strips[-1])
        assert all(list(s) == blank for s in strips[5:]) and strips[-1].text.strip() == ""
        assert blank[0].style.bgcolor == view.rich_style.bgcolor  # the view's own background


def test_a_lines_level_is_read_as_the_patterns_say():
    """_level (a lowercased, case-sensitive search for ASCII text) says what ERROR_RE and WARN_RE
    (re.I) say, for the real logs' lines and their case variants, and non-ASCII lines."""
    from pathlib import Path

    from gpuops.tui.logview import ERROR_RE, WARN_RE, _level

    logs = Path(__file__).parent / "data" / "logs"
    lines = [ln for f in sorted(logs.rglob("*.log")) for ln in f.read_text(errors="replace").splitlines()]
    lines += ["warn", "WaRnInG x", "eRrOr: x", "out OF Memory", "OOM", "fataL", "Traceback (most", "x FAILED",
              "no problem here", "", "Ünïcode ERROR", "İ warning", "ſtrange", "K\u212aelvin error", "ﬁne"]
    lines += [ln.upper() for ln in lines[:2000]] + [ln.swapcase() for ln in lines[:2000]]
    levels = [_level(ln) for ln in lines]
    assert levels == [2 if ERROR_RE.search(ln) else 1 if WARN_RE.search(ln) else 0 for ln in lines]
    assert levels.count(2) > 10 and levels.count(1) > 10 and levels.count(0) > 100


async def test_the_log_renders_its_lines_itself_as_textuals_styles_pass_would():
    """While lines flow every row is new on each frame, and Textual's styles pass (four copies of
    each line) was half of a frame: a view with nothing for that pass to add (no padding, side
    border, tint...) renders its lines itself, cell for cell as the pass would, each in the view's
    colours (its text had the terminal's default background); a top border's row is still
    Textual's own, and a padded view is left to Textual."""
    from textual._styles_cache import StylesCache
    from textual.geometry import Region

    class Styled(App):
        CSS = "#bordered { border-top: solid red; border-title-align: left; } #padded { padding: 0 2; }"

        def compose(self) -> ComposeResult:
            yield LogView(id="plain")
            bordered = LogView(id="bordered")
            bordered.border_title = "keys here"
            yield bordered
            yield LogView(id="padded")

    app = Styled()
    passes = {"n": 0}
    real = StylesCache.render_line

    def counted(self, *a, **kw):
        passes["n"] += 1
        return real(self, *a, **kw)

    async with app.run_test(size=(70, 36)) as pilot:
        views = [app.query_one(f"#{n}", LogView) for n in ("plain", "bordered", "padded")]
        for view in views:
            for i in range(40):  # more than the rows: a scrollbar
                view.append(f"RuntimeError: boom {i}" if i % 7 == 3 else f"line {i} " + "x" * (i % 50))
        assert await until(pilot, lambda: not any(v._size_pending for v in views))
        await pilot.pause()
        for view in views:
            whole = Region(0, 0, view.region.width, view.region.height)
            view._styles_cache.clear()  # (nothing from an earlier frame)
            StylesCache.render_line = counted  # type: ignore[method-assign]
            try:
                passes["n"] = 0
                ours = view.render_lines(whole)
                by_ours = passes["n"]
            finally:
                StylesCache.render_line = real  # type: ignore[method-assign]
            view._styles_cache.clear()
            textuals = view._styles_cache.render_widget(view, whole)
            assert [s.text for s in ours] == [s.text for s in textuals], view.id
            assert [s.cell_length for s in ours] == [view.region.width] * view.region.height
            if view.id == "padded":
                assert by_ours == view.region.height  # Textual's pass, every line
                assert ours[0].text.startswith("  ")
                continue
            first = 1 if view.id == "bordered" else 0
            assert by_ours == first  # the border's row only
            if first:
                assert "keys here" in ours[0].text
            log_rows = ours[first:]
            assert all(seg.style is not None and seg.style.bgcolor == view.rich_style.bgcolor
                       for strip in log_rows for seg in strip)
            errors = [strip for strip in log_rows if "RuntimeError" in strip.text]
            plain = [strip for strip in log_rows if strip.text.startswith("line")]
            assert errors and plain
            assert {seg.style.color for seg in errors[0] if seg.text.strip()}.isdisjoint(
                {seg.style.color for seg in plain[0] if seg.text.strip()})  # the error in its own colour


async def test_following_a_flowing_log_repaints_the_lines_and_moves_the_scrollbar_only_now_and_then(monkeypatch):
    """While lines flow into a followed view whose scrollbar shows already, each repaint draws the
    newest lines from the end of its rows; its scroll position (the scrollbar, and a layout of the
    screen: a frame of the whole screen) catches up at most every SYNC_S, and before anything scrolls
    it, so a key that leaves following starts from the newest line, not from where the scrollbar was."""
    from gpuops.tui import logview

    monkeypatch.setattr(logview, "SYNC_S", 3600.0)  # (never by the clock in this test: only as the keys ask)
    app = LogApp(capacity=10_000)
    async with app.run_test(size=(80, 12)) as pilot:
        view = app.query_one(LogView)
        view.focus()
        for i in range(100):
            view.append(f"line {i}")
        assert await until(pilot, lambda: view.show_vertical_scrollbar and view.scroll_y == view.max_scroll_y > 0)
        view.append("line 100")  # (sized again for the vertical scrollbar's width: no horizontal one)
        assert await until(pilot, lambda: view.virtual_size.height == 101 and not view.show_horizontal_scrollbar
                           and view.scroll_y == view.max_scroll_y)
        synced_at, n = view.scroll_y, 101
        for _ in range(5):  # five batches: each on screen at the end, the scroll position where it was
            for _ in range(30):
                view.append(f"line {n}")
                n += 1
            assert await until(pilot, lambda n=n: visible(view)[-1] == f"line {n - 1}" and not view._size_pending)
            assert screen_text(app).count(f"line {n - 1}") == 1  # (on the screen itself, not only render_line)
            assert view.scroll_y == synced_at and view.virtual_size.height == 101 and view._sync_pending
        await pilot.press("up")  # the cursor one line up from the newest: the position caught up first
        assert await until(pilot, lambda: view.cursor == n - 2)
        assert not view.follow and view.virtual_size.height == n and view.scroll_y == view.max_scroll_y
        assert view.current_line() == f"line {n - 2}" and visible(view)[-1] == f"line {n - 1}"


async def test_the_mouse_wheel_scrolls_up_from_the_newest_lines_not_from_where_the_scrollbar_was(monkeypatch):
    from textual import events

    from gpuops.tui import logview

    monkeypatch.setattr(logview, "SYNC_S", 3600.0)
    app = LogApp(capacity=10_000)
    async with app.run_test(size=(80, 12)) as pilot:
        view = app.query_one(LogView)
        for i in range(100):
            view.append(f"line {i}")
        assert await until(pilot, lambda: view.show_vertical_scrollbar and view.scroll_y == view.max_scroll_y > 0)
        view.append("line 100")  # (sized again for the vertical scrollbar's width: no horizontal one)
        assert await until(pilot, lambda: view.virtual_size.height == 101 and not view.show_horizontal_scrollbar
                           and view.scroll_y == view.max_scroll_y > 0 and not view._size_pending)
        for i in range(101, 301):  # 200 lines the scroll position has not caught up with
            view.append(f"line {i}")
        assert await until(pilot, lambda: visible(view)[-1] == "line 300" and view._sync_pending)
        view.post_message(events.MouseScrollUp(view, 1, 1, 0, -1, 0, False, False, False))
        assert await until(pilot, lambda: not view.follow)
        assert view.virtual_size.height == 301 and not view._sync_pending
        shown = visible(view)
        assert "line 290" in shown and "line 300" not in shown  # a few lines above the newest, not 200
