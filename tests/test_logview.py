"""The log view through the pilot: follow, N new lines, filter, timestamps, wrap, errors, copy."""

from __future__ import annotations

from textual.app import App, ComposeResult

from gpuops.tui.logview import LogView
from tests.tui_helpers import until


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
