"""A virtual log view: only the lines on screen are rendered, memory is bounded.

Follow mode keeps the newest line in view; any scroll up turns it off and a badge counts
the new lines since; `s` (or End) turns it back on. `/` filters, `t` shows timestamps,
`w` wraps, `e` jumps to the next error or warning, `c` copies the line under the cursor.
"""

from __future__ import annotations

import re
import time
from collections import deque
from itertools import repeat
from typing import Final

from rich.segment import Segment
from rich.style import Style
from textual.binding import Binding
from textual.geometry import Offset, Region, Size
from textual.message import Message
from textual.reactive import reactive
from textual.scroll_view import ScrollView
from textual.strip import Strip

from ..core.literal import literal

ERROR_RE = re.compile(r"Traceback|Error|ERROR|Exception|error:|FAILED|fatal|OOM|out of memory", re.I)
WARN_RE = re.compile(r"WARN|Warning|warning", re.I)
# The same two, for ASCII text lowercased: a case-sensitive search is ~10x faster than re.I's, and
# a log line is read by _level as it arrives (20,000 a second). For ASCII text they match alike.
_ERROR_ASCII = re.compile(ERROR_RE.pattern.lower())
_WARN_ASCII = re.compile(WARN_RE.pattern.lower())
TS_FORMAT = "%H:%M:%S "
TS_FORMAT_SAMPLE = "00:00:00 "
# While a followed log flows, its size and scroll position (which move the scrollbar and lay the screen
# out: a frame of the whole screen) are brought up to date at most this often; the lines repaint 30 times
# a second all the same.
SYNC_S: Final = 0.25


# One line: (text, ts, level), level 0 normal, 1 warning, 2 error. A plain tuple of atoms, not a
# class: CPython's GC stops tracking such tuples, so 100,000 buffered lines add nothing to each
# collection (as objects they made full collections the slowest frames: p99 122 ms vs 43 ms).
Entry = tuple[str, float | None, int]
TEXT: Final = 0  # Final: the index is a literal, so mypy knows each field's type
TS: Final = 1
LEVEL: Final = 2


def _level(text: str) -> int:
    """2 for an error line, 1 for a warning, else 0 (ERROR_RE, WARN_RE)."""
    if text.isascii():
        low = text.lower()
        return 2 if _ERROR_ASCII.search(low) else 1 if _WARN_ASCII.search(low) else 0
    return 2 if ERROR_RE.search(text) else 1 if WARN_RE.search(text) else 0


class LogView(ScrollView, can_focus=True):
    DEFAULT_CSS = """
    LogView { height: 1fr; background: $surface; }
    LogView > .logview--cursor { background: $primary 30%; }
    """
    COMPONENT_CLASSES = {"logview--cursor"}
    BINDINGS = [
        Binding("s", "follow", "Follow"),
        Binding("t", "timestamps", "Times"),
        Binding("w", "wrap", "Wrap"),
        Binding("e", "next_problem", "Next error"),
        Binding("c", "copy_line", "Copy line"),
        Binding("up", "cursor(-1)", "Up", show=False),
        Binding("down", "cursor(1)", "Down", show=False),
        Binding("pageup", "page(-1)", "Page up", show=False),
        Binding("pagedown", "page(1)", "Page down", show=False),
        Binding("home", "top", "Top", show=False),
        Binding("end", "follow", "Bottom", show=False),
    ]

    follow: reactive[bool] = reactive(True)
    show_timestamps: reactive[bool] = reactive(False)
    wrap: reactive[bool] = reactive(False)

    class NewLines(Message):
        """How many lines arrived while not following (coalesced)."""

        def __init__(self, count: int, dropped: int) -> None:
            super().__init__()
            self.count = count
            self.dropped = dropped

        def can_replace(self, message: Message) -> bool:
            return isinstance(message, LogView.NewLines)

    def __init__(self, capacity: int = 100_000, *, id: str | None = None):
        super().__init__(id=id)
        self.capacity = capacity
        self.entries: deque[Entry] = deque(maxlen=capacity)
        self.dropped = 0
        self.new_lines = 0
        self.filter_text = ""
        self.cursor = -1  # index into the visible rows
        self._rows: deque[tuple[int, int]] = deque()  # (absolute entry number, wrapped piece) shown
        self._first = 0  # absolute number of entries[0]
        self._widest = 0  # the longest text (without a timestamp prefix) among the rows
        self._size_pending = False
        self._synced_at = -1e9  # when the size and scroll position were last brought up to date (monotonic)
        self._sync_pending = False
        self._frame: tuple[Offset, int, Strip, tuple[Style, Style, Style]] | None = None  # one render's

    # ---------------------------------------------------------------- data

    def append(self, text: str, ts: float | None = None) -> None:
        # one line, as literal text: a carriage return, a tab, what is left of an escape sequence (a
        # BEL, an OSC's text) or a bidi override in a log line is shown escaped, never sent to the terminal
        text = literal(text.rstrip("\n"))
        level = _level(text)
        if len(self.entries) == self.capacity:
            self.dropped += 1
            self._first += 1
            while self._rows and self._rows[0][0] < self._first:
                self._rows.popleft()
        entry = (text, ts if ts is not None else time.time(), level)
        self.entries.append(entry)
        if self._matches(text):
            self._add_rows(self._first + len(self.entries) - 1, entry)
            if not self.follow:
                self.new_lines += 1
                self.post_message(self.NewLines(self.new_lines, self.dropped))
        self._sized()

    def _matches(self, text: str) -> bool:
        return not self.filter_text or self.filter_text.lower() in text.lower()

    def _width(self) -> int:
        return max(10, self.scrollable_content_region.width or 80)

    def _prefix_len(self) -> int:
        return len(TS_FORMAT_SAMPLE) if self.show_timestamps else 0

    def _add_rows(self, absolute: int, entry: Entry) -> None:
        if self.wrap:
            length = len(entry[TEXT]) + (self._prefix_len() if entry[TS] is not None else 0)
            self._rows.extend((absolute, p) for p in range(max(1, -(-length // self._width()))))
        else:
            self._rows.append((absolute, 0))
        if len(entry[TEXT]) > self._widest:
            self._widest = len(entry[TEXT])

    def _relayout(self) -> None:
        """All rows again (filter, wrap or width changed). Timestamps alone change no row unless
        wrapping: see watch_show_timestamps. Unfiltered and unwrapped, the rows are simply one per
        entry (100,000 entries in a few ms, so a key press repaints promptly under load)."""
        self._rows.clear()
        if not self.filter_text and not self.wrap:
            self._rows.extend(zip(range(self._first, self._first + len(self.entries)), repeat(0)))
            self._widest = max(map(len, (e[TEXT] for e in self.entries)), default=0)
        else:
            self._widest = 0
            for i, e in enumerate(self.entries):
                if self._matches(e[TEXT]):
                    self._add_rows(self._first + i, e)
        self.cursor = min(self.cursor, len(self._rows) - 1)
        self._sized()

    def _sized(self) -> None:
        # Lines can arrive thousands a second: size, scroll and repaint at most once a frame.
        if not self._size_pending:
            self._size_pending = True
            self.set_timer(1 / 30, self._apply_size)

    def _apply_size(self) -> None:
        """The new lines on screen. Following, with the scrollbars already as they would be, only
        the view repaints: it draws the newest lines from the end of its rows (render_line), and its
        size and scroll position, which move the scrollbar and lay the screen out again (a frame
        of the whole screen, not of the log), catch up at most every SYNC_S, and before anything
        scrolls it (_sync_now)."""
        self._size_pending = False
        size = self._content_size()
        if self.follow and size != self.virtual_size and self._bars_stay(size):
            wait = self._synced_at + SYNC_S - time.monotonic()
            if wait > 0:
                if not self._sync_pending:
                    self._sync_pending = True
                    self.set_timer(wait, self._sync)
                self.refresh()
                return
        self._sync()

    def _content_size(self) -> Size:
        width = self._width()
        return Size(width if self.wrap else max(width, self._widest + self._prefix_len()), len(self._rows))

    def _bars_stay(self, size: Size) -> bool:
        """`size` shows the scrollbars the view shows now (a vertical one, no new horizontal one)."""
        height, width = self.scrollable_content_region.height, self.scrollable_content_region.width
        return (self.show_vertical_scrollbar and size.height > height
                and (size.width <= width) == (not self.show_horizontal_scrollbar))

    def _sync_now(self) -> None:
        """Before anything scrolls the view: its size and position as they are (a scroll up from a
        position the newest lines had left behind would jump back to it)."""
        if self._sync_pending or self._content_size() != self.virtual_size:
            self._sync()

    def _sync(self) -> None:
        self._sync_pending = False
        self._synced_at = time.monotonic()
        size = self._content_size()
        laid_out = False
        if size != self.virtual_size:
            # Only this view's content grew: no layout of the screen (setting virtual_size lays out
            # and repaints every widget on it, each frame while lines flow). Its scrollbars follow
            # as a layout would update them (Textual's Widget._scroll_update); a scrollbar shown or
            # hidden lays the screen out itself.
            bars = self.show_horizontal_scrollbar, self.show_vertical_scrollbar
            self.set_reactive(LogView.virtual_size, size)
            self._scroll_update(size)
            laid_out = bars != (self.show_horizontal_scrollbar, self.show_vertical_scrollbar)
        if self.follow:
            if laid_out:  # the end is known once the new layout is done
                self.call_after_refresh(self._to_end)
            else:  # now: the frame that shows the new lines shows them at the end (one repaint, not two)
                self._to_end(immediate=True)
        self.refresh()

    def _to_end(self, immediate: bool = False) -> None:
        if self.follow:
            self.scroll_end(animate=False, x_axis=False, immediate=immediate)

    def set_filter(self, text: str) -> None:
        self.filter_text = text
        self.cursor = -1
        self._relayout()

    def _entry(self, row: int) -> tuple[Entry, int]:
        absolute, piece = self._rows[row]
        return self.entries[absolute - self._first], piece

    def _line_text(self, e: Entry) -> str:
        if self.show_timestamps and e[TS] is not None:
            return time.strftime(TS_FORMAT, time.localtime(e[TS])) + e[TEXT]
        return e[TEXT]

    # ---------------------------------------------------------------- rendering

    def render_lines(self, crop: Region) -> list[Strip]:
        # What every line of one render shares, looked up once for all of them: the widget's style
        # (Textual blends it through the ancestors on each read, the most of an empty line's cost),
        # its width, the scroll offset and a blank line.
        self._frame = self._frame_state()
        try:
            if not self._plain():
                return super().render_lines(crop)
            # No padding, side border, outline, tint, hatch or opacity: each line of the log is the
            # strip _line makes (with the scrollbar's gutter), as Textual's styles pass would leave
            # it, without that pass's four copies of it (while lines flow every row is new on each frame: that pass was half
            # a frame's cost); a top or bottom border's row is Textual's own.
            border = self.styles.border
            top, bottom = int(bool(border.top[0])), int(bool(border.bottom[0]))
            height, content_width = self.region.height, self.content_region.width
            width, base = self._frame[1], self._frame[3][0]
            background = self.background_colors[1]
            filters = self.get_line_filters()
            span = crop.column_span
            strips: list[Strip] = []
            gutter = content_width - width  # the scrollbar's, in the widget's background (made with the line)
            blank = Strip.blank(content_width, base) if gutter else self._frame[2]
            for y in crop.line_range:
                if y < top or y >= height - bottom:
                    strips.append(super().render_lines(Region(crop.x, y, crop.width, 1))[0])
                    continue
                strip = self._line(y - top, self._frame, gutter) or blank
                for line_filter in filters:
                    strip = strip.apply_filter(line_filter, background)
                strips.append(strip if span == (0, content_width) else strip.crop(*span))
            return strips
        finally:
            self._frame = None

    def _frame_state(self) -> tuple[Offset, int, Strip, tuple[Style, Style, Style]]:
        region = self.scrollable_content_region
        width = region.width
        offset = self.scroll_offset
        if self.follow:  # the newest lines, whether or not the scroll position has caught up (_apply_size)
            offset = Offset(offset.x, max(0, len(self._rows) - region.height))
        base = self.rich_style  # the widget's colours, under each line's own (as Textual's Log does)
        styles = (base, base + Style(color="yellow"), base + Style(color="red"))  # by level
        return offset, width, Strip.blank(width, base), styles

    def _plain(self) -> bool:
        """Nothing in the widget's styles that Textual's styles pass would add to a line."""
        st = self.styles
        return (not any(st.padding) and not st.border.left[0] and not st.border.right[0]
                and not any(edge for edge, _ in st.outline) and st.tint.a == 0
                and self.opacity == 1.0 and st.text_opacity == 1.0
                and not (st.has_rule("hatch") and st.hatch != "none"))

    def render_line(self, y: int) -> Strip:
        frame = self._frame or self._frame_state()
        return self._line(y, frame, 0) or frame[2]

    def _line(self, y: int, frame: tuple[Offset, int, Strip, tuple[Style, Style, Style]], gutter: int) -> Strip | None:
        """Row `y` on screen as one strip (with `gutter` blank cells after it); None past the last row."""
        (scroll_x, scroll_y), width, _blank, styles = frame
        row = scroll_y + y
        if row >= len(self._rows):
            return None
        entry, piece = self._entry(row)
        text = self._line_text(entry)
        text = text[piece * width:(piece + 1) * width] if self.wrap else text[scroll_x:scroll_x + width]
        style = styles[entry[LEVEL]]
        if row == self.cursor:
            style += self.get_component_rich_style("logview--cursor")
        if gutter:
            return Strip([Segment(text.ljust(width), style), Segment(" " * gutter, styles[0])], width + gutter)
        return Strip([Segment(text.ljust(width), style)], width)

    # ---------------------------------------------------------------- follow

    def watch_follow(self, follow: bool) -> None:
        if follow:
            self.new_lines = 0
            self.post_message(self.NewLines(0, self.dropped))
            self.cursor = -1
            self._sized()

    def watch_show_timestamps(self) -> None:
        if self.wrap:  # a longer line may wrap into more rows
            self._relayout()
        else:
            self._sized()

    def watch_wrap(self) -> None:
        self._relayout()

    def on_resize(self) -> None:
        if self.wrap:
            self._relayout()

    def _scroll_up_stops_following(self) -> None:
        if self.follow and self.scroll_y < self.max_scroll_y:
            self.follow = False

    def watch_scroll_y(self, old: float, new: float) -> None:
        super().watch_scroll_y(old, new)
        if new < old:
            self._scroll_up_stops_following()

    # ---------------------------------------------------------------- actions

    def action_follow(self) -> None:
        self.follow = True

    def action_timestamps(self) -> None:
        self.show_timestamps = not self.show_timestamps

    def action_wrap(self) -> None:
        self.wrap = not self.wrap

    def on_mouse_scroll_up(self) -> None:  # (before Textual's own handler scrolls)
        self._sync_now()

    def on_mouse_scroll_down(self) -> None:
        self._sync_now()

    def on_scroll_up(self) -> None:  # the scrollbar's messages, before Textual's handlers
        self._sync_now()

    def on_scroll_down(self) -> None:
        self._sync_now()

    def on_scroll_to(self) -> None:
        self._sync_now()

    def action_top(self) -> None:
        self._sync_now()
        self.follow = False
        self.scroll_home(animate=False)

    def action_cursor(self, step: int) -> None:
        if not self._rows:
            return
        self._sync_now()
        self.follow = False
        start = self.cursor if self.cursor >= 0 else int(self.scroll_y) + self.scrollable_content_region.height - 1
        self.cursor = max(0, min(len(self._rows) - 1, start + step))
        self.scroll_to_region_row(self.cursor)
        self.refresh()

    def action_page(self, step: int) -> None:
        self.action_cursor(step * max(1, self.scrollable_content_region.height - 1))

    def scroll_to_region_row(self, row: int) -> None:
        height = self.scrollable_content_region.height
        if row < self.scroll_y:
            self.scroll_to(y=row, animate=False)
        elif row >= self.scroll_y + height:
            self.scroll_to(y=row - height + 1, animate=False)

    def action_next_problem(self) -> None:
        """The next error (or warning, when there are no errors) after the cursor."""
        self._sync_now()
        start = self.cursor + 1 if self.cursor >= 0 else 0
        for level in (2, 1):
            for row in range(start, len(self._rows)):
                entry, piece = self._entry(row)
                if piece == 0 and entry[LEVEL] >= level:
                    self.follow = False
                    self.cursor = row
                    self.scroll_to(y=max(0, row - 2), animate=False)
                    self.refresh()
                    return
        self.notify("no (further) errors or warnings", severity="information")

    def current_line(self) -> str | None:
        if 0 <= self.cursor < len(self._rows):
            return self._entry(self.cursor)[0][TEXT]
        return None

    def action_copy_line(self) -> None:
        line = self.current_line()
        if line is None:
            self.notify("move the cursor to a line first (↑/↓ or e)", severity="warning")
            return
        self.app.copy_to_clipboard(line)
        self.notify("line copied", timeout=2)

    def plain_lines(self) -> list[str]:
        return [self._line_text(self._entry(r)[0]) for r in range(len(self._rows)) if self._rows[r][1] == 0]
