"""Small widgets shared by the screens."""

from __future__ import annotations

from typing import Any, Iterable, NamedTuple, Sequence

from rich.cells import cell_len
from rich.segment import Segment
from rich.style import Style
from rich.text import Text
from textual import events
from textual.binding import Binding
from textual.color import Color
from textual.geometry import Region, Size, Spacing
from textual.message import Message
from textual.scroll_view import ScrollView
from textual.strip import Strip
from textual.widget import Widget
from textual.widgets import DataTable

from ..core.literal import literal
from ..core.telemetry.samples import is_na


# ------------------------------------------------------------------ text from a host, a file, the store


def plain(value: object, style: str | Style = "") -> Text:
    """A string from a host, a file or the store (a model folder, a process's command line, an
    error a host sent, a name read back from the store) as a screen shows it: a Rich ``Text``, so
    never parsed as markup (``[red]x[/red]`` reads as those characters), with every control or
    format character escaped by :func:`gpuops.core.literal.literal`, the one helper the CLI uses
    too (an ESC, a newline, a bidi override reads ``\\x1b``, ``\\n``, ``\\u202e``)."""
    return Text(literal(value), style=style)


def literal_text(text: Text, *, lines: bool = False) -> Text:
    """`text` with the characters :func:`literal` escapes escaped, its styles kept on the same
    characters; `lines`: its line breaks kept as breaks (a pane of several lines). The same `text`
    when there is nothing to escape (nearly always). What the widgets below apply to any Text
    they are given, so that a string put into a Text as it came is still drawn as literal text."""
    raw = text.plain
    if (raw.replace("\n", "") if lines else raw).isprintable():
        return text
    pieces: list[str] = []
    offsets = [0]
    for ch in raw:
        piece = ch if ch.isprintable() or (lines and ch == "\n") else literal(ch)
        pieces.append(piece)
        offsets.append(offsets[-1] + len(piece))
    out = text.blank_copy("".join(pieces))
    for span in text.spans:
        out.spans.append(span._replace(start=offsets[span.start], end=offsets[min(span.end, len(raw))]))
    return out


def shown(value: Any, *, lines: bool = False) -> Any:
    """A cell or a pane's content as it is drawn: a `str` as :func:`plain` makes it, a `Text` as
    :func:`literal_text`, anything else (a renderable gpuops built) as it is."""
    if isinstance(value, str):
        return plain(value) if not lines else Text("\n".join(literal(line) for line in value.split("\n")))
    if isinstance(value, Text):
        return literal_text(value, lines=lines)
    return value


# ------------------------------------------------------------------ bars

BAR_WIDTH = 16


def bar(fraction: Any, width: int = BAR_WIDTH) -> Text:
    """A memory/utilisation bar; its colour says how full it is."""
    if is_na(fraction):
        return Text("─" * width, style="dim")
    fraction = min(1.0, max(0.0, float(fraction)))
    filled = round(fraction * width)
    style = "green" if fraction < 0.7 else "yellow" if fraction < 0.9 else "red"
    return Text.assemble(("█" * filled, style), ("░" * (width - filled), "dim"))


class LiteralTable(DataTable):
    """Textual's DataTable whose cells and column labels are shown as literal text (:func:`shown`):
    a DataTable parses a `str` cell as markup and draws control characters as they are."""

    def add_column(self, label: Any, *args: Any, **kwargs: Any) -> Any:
        return super().add_column(shown(label), *args, **kwargs)

    def add_row(self, *cells: Any, **kwargs: Any) -> Any:
        return super().add_row(*(shown(cell) for cell in cells), **kwargs)

    def update_cell(self, row_key: Any, column_key: Any, value: Any, **kwargs: Any) -> None:
        super().update_cell(row_key, column_key, shown(value), **kwargs)

    def update_cell_at(self, coordinate: Any, value: Any, **kwargs: Any) -> None:
        super().update_cell_at(coordinate, shown(value), **kwargs)


class TextView(Widget):
    """Rich text that repaints only when it changes, and re-lays out only when the rows it takes
    may change (Static.update re-lays out the screen on every call): its number of lines changed,
    or a line of the old or new text is wider than the view (it wraps, to as many rows as may differ)."""

    DEFAULT_CSS = "TextView { height: auto; }"

    def __init__(self, text: Text | str = "", *, id: str | None = None, classes: str | None = None):
        super().__init__(id=id, classes=classes)
        self._text = literal_text(Text(text) if isinstance(text, str) else text, lines=True)

    @property
    def text(self) -> Text:
        return self._text

    def set(self, text: Text | str) -> None:
        # (what it shows is literal text: a control character in a string put into the Text as it came is
        # escaped, line breaks kept; the callers escape host strings that must stay on one line)
        text = literal_text(Text(text) if isinstance(text, str) else text, lines=True)
        if text == self._text:
            return
        relayout = text.plain.count("\n") != self._text.plain.count("\n") or not (text.plain and self._text.plain) \
            or self._wraps(text) or self._wraps(self._text)
        self._text = text
        self.refresh(layout=relayout)

    def render(self) -> Text:
        return self._text

    def _wraps(self, text: Text) -> bool:
        width = self.content_size.width
        return width <= 0 or any(cell_len(line) > width for line in text.plain.split("\n"))


class RowTable(ScrollView, can_focus=True):
    """A table of one-line rows with a row cursor, drawn by this one widget, as Textual's DataTable
    draws one with `cursor_type="row"` (tests/test_fleet_dashboard.py holds them side by side): a
    header, each column as wide as its widest text (a space either side), the cursor's row, the row
    under the mouse, scrolling both ways. A DataTable parses and styles nine component classes and
    renders every cell through Rich (padding, styles, cropping): the dashboard's host list and
    processes table as DataTables cost its first paint about 73 M instructions more than as
    RowTables. This one makes each row's line from its cells directly and keeps it until that row,
    the columns' widths, the cursor or hover on it, or the styles change.

    Its rows are given whole, in order (`set_rows`): a row whose cells are the same as drawn costs a
    comparison, a changed one repaints its own line (and nothing out of view), unless a column's
    widest text changes with it. The cursor stays on its row's key when the rows change (else at
    its place). Cells are text: a `str` as it is (no markup), a Rich `Text` with its styles.

    Keys: up/down, pageup/pagedown, ctrl+home/ctrl+end move the cursor; left/right, home/end scroll
    sideways. A click on a row moves the cursor there. `RowHighlighted` is posted when the cursor
    moves to another row (keys, mouse, `move_cursor`).

    Its look is the stylesheet's: its own colours, and its component classes
    - row-table--header: the header row;
    - row-table--cursor: the cursor's row (its colour wins over a cell's own);
    - row-table--hover: the row under the mouse;
    - row-table--header-hover: the header under the mouse (over row-table--hover)."""

    ALLOW_SELECT = False
    BINDINGS = [  # (no descriptions: not on `?`, as DataTable's are not)
        Binding("up", "cursor_up", show=False),
        Binding("down", "cursor_down", show=False),
        Binding("pageup", "page_up", show=False),
        Binding("pagedown", "page_down", show=False),
        Binding("ctrl+home", "cursor_top", show=False),
        Binding("ctrl+end", "cursor_bottom", show=False),
        Binding("home", "scroll_leftmost", show=False),
        Binding("end", "scroll_rightmost", show=False),
    ]
    COMPONENT_CLASSES = {"row-table--header", "row-table--cursor", "row-table--hover", "row-table--header-hover"}
    DEFAULT_CSS = """
    RowTable {
        background: $surface;
        color: $foreground;
        height: auto;
        max-height: 100%;
        &:focus {
            background-tint: $foreground 5%;
            & > .row-table--cursor {
                background: $block-cursor-background;
                color: $block-cursor-foreground;
                text-style: $block-cursor-text-style;
            }
            & > .row-table--header {
                background-tint: $foreground 5%;
            }
        }
        & > .row-table--header {
            text-style: bold;
            background: $panel;
            color: $foreground;
        }
        &:ansi > .row-table--header {
            background: ansi_bright_blue;
            color: ansi_default;
        }
        & > .row-table--cursor {
            background: $block-cursor-blurred-background;
            color: $block-cursor-blurred-foreground;
            text-style: $block-cursor-blurred-text-style;
        }
        & > .row-table--hover {
            background: $block-hover-background;
        }
        & > .row-table--header-hover {
            background: $accent 30%;
        }
    }
    """

    class RowHighlighted(Message):
        """The cursor moved to another row: its place and its key."""

        def __init__(self, table: RowTable, row: int, key: str) -> None:
            super().__init__()
            self.table = table
            self.row = row
            self.key = key

        @property
        def control(self) -> RowTable:
            return self.table

    def __init__(self, *columns: str, id: str | None = None, classes: str | None = None) -> None:
        super().__init__(id=id, classes=classes)
        self._labels = columns
        self._keys: list[str] = []  # the rows' keys, top to bottom
        self._given: dict[str, tuple[str | Text, ...]] = {}  # the rows as set_rows was given them
        self._cells: dict[str, tuple[str | Text, ...]] = {}  # ... and as they are drawn (literal text)
        self._index: dict[str, int] = {}
        self._widths: list[dict[str, int]] = [{} for _ in columns]  # text width per column, per row
        self._widest = [cell_len(label) for label in columns]  # per column: its widest text or label
        self._cursor = 0
        self._hover: int | None = None  # the row under the mouse (-1: the header)
        self._look: tuple = ()  # the styles and sizes the lines below were drawn with
        # per row key (None: the header): its line, and whether the cursor and the mouse were on it
        self._lines: dict[str | None, tuple[tuple[bool, bool], Strip]] = {}
        self.set_reactive(ScrollView.virtual_size, self._table_size())  # (its header, before any row)

    # ------------------------------------------------------------- the rows

    @property
    def row_count(self) -> int:
        return len(self._keys)

    @property
    def cursor_row(self) -> int:
        return self._cursor

    def get_row(self, key: str) -> tuple[str | Text, ...]:
        return self._cells[key]

    def get_row_at(self, row: int) -> tuple[str | Text, ...]:
        return self._cells[self._keys[row]]

    def get_row_index(self, key: str) -> int:
        return self._index[key]

    def set_rows(self, rows: Sequence[tuple[str, tuple[str | Text, ...]]]) -> None:
        """The table's rows, top to bottom: (key, cells). Only what changed is drawn again. A cell is
        drawn as literal text (`shown`: a process's command line with newlines or escape sequences in
        it stays on its one line, escaped); `get_row` gives the cells as drawn."""
        old_given, old = self._given, self._cells
        self._given = given = dict(rows)
        cells: dict[str, tuple[str | Text, ...]] = {}
        for key, row in given.items():
            was = old_given.get(key)
            cells[key] = old[key] if was is row or (was is not None and was == row) else _shown_row(row)
        self._cells = cells
        keys = list(cells)
        moved = keys != self._keys
        if moved:
            self._reorder(keys)
        changed = [key for key, row in cells.items() if (was := old.get(key)) is not row and was != row]
        widths_changed = False
        for key in changed:
            self._lines.pop(key, None)
            for column, value in enumerate(cells[key]):
                widths_changed |= self._measure(column, key, value.cell_len if isinstance(value, Text) else cell_len(value))
        gone = old.keys() - cells.keys() if moved else ()
        if gone:
            self._forget(gone)
        if moved or widths_changed:
            self.virtual_size = self._table_size()
            self.refresh()
        else:
            for key in changed:
                self._refresh_row(self._index[key])

    def _reorder(self, keys: list[str]) -> None:
        """The rows in a new order (or some new, some gone): the cursor stays on its row's key where it
        is still there, else at its place (within the rows there are)."""
        under_cursor = self._keys[self._cursor] if self._cursor < len(self._keys) else None
        self._keys = keys
        self._index = {key: i for i, key in enumerate(keys)}
        self._lines = {key: line for key, line in self._lines.items() if key in self._cells or key is None}
        at = self._index.get(under_cursor, self._cursor) if under_cursor is not None else self._cursor
        self._cursor = max(0, min(at, len(keys) - 1))

    def _forget(self, gone: Iterable[str]) -> None:
        """The columns' widths again, without the rows that left."""
        for widths in self._widths:
            for key in gone:
                widths.pop(key, None)
        self._widest = [max([cell_len(label), *widths.values()]) for label, widths in zip(self._labels, self._widths)]

    def _table_size(self) -> Size:
        """Its columns' widths, a space either side of each; its rows and header."""
        return Size(sum(self._widest) + 2 * len(self._widest), len(self._keys) + 1)

    def _measure(self, column: int, key: str, width: int) -> bool:
        """A cell's text width noted; whether its column's width changes with it."""
        widths = self._widths[column]
        old = widths.get(key)
        widths[key] = width
        widest = self._widest[column]
        if width > widest:
            self._widest[column] = width
            return True
        if old == widest and width < widest:  # it was the widest: the column again (its label too)
            self._widest[column] = max([cell_len(self._labels[column]), *widths.values()])
            return self._widest[column] != widest
        return False

    def _refresh_row(self, row: int) -> None:
        """Repaints a row's line (-1: the header), when it is in view."""
        y = 0 if row < 0 else row + 1 - self.scroll_offset.y
        if 0 < y < self.size.height or row < 0:
            self.refresh(Region(0, y, self.size.width, 1))

    # ------------------------------------------------------------- the cursor

    def move_cursor(self, *, row: int) -> None:
        """The cursor to `row` (clamped to the rows there are), scrolled into view."""
        self._to(row)

    def _to(self, row: int, scroll: bool = True) -> None:
        row = max(0, min(row, len(self._keys) - 1))
        old = self._cursor
        self._cursor = row
        if row != old:
            self._refresh_row(old)
            self._refresh_row(row)
            if row < len(self._keys):
                self.post_message(self.RowHighlighted(self, row, self._keys[row]))
        if scroll:  # (its line in view below the header)
            self.scroll_to_region(Region(int(self.scroll_x), row + 1, self.virtual_size.width, 1),
                                  spacing=Spacing(1, 0, 0, 0), animate=False, force=True)

    # (as DataTable's: a key pressed, the row under the mouse is shown no more)

    def action_cursor_up(self) -> None:
        self._set_hover(None)
        self._to(self._cursor - 1)

    def action_cursor_down(self) -> None:
        self._set_hover(None)
        self._to(self._cursor + 1)

    def action_cursor_top(self) -> None:
        self._set_hover(None)
        self._to(0)

    def action_cursor_bottom(self) -> None:
        self._set_hover(None)
        self._to(len(self._keys) - 1)

    def action_page_down(self) -> None:
        self._set_hover(None)
        page = self.scrollable_content_region.height - 1
        self.scroll_relative(y=page, animate=False, force=True)
        self._to(self._cursor + page, scroll=False)

    def action_page_up(self) -> None:
        self._set_hover(None)
        page = self.scrollable_content_region.height - 1
        self.scroll_relative(y=-page, animate=False, force=True)
        self._to(self._cursor - page, scroll=False)

    def action_scroll_leftmost(self) -> None:
        self._set_hover(None)
        self.scroll_x = 0

    def action_scroll_rightmost(self) -> None:
        self._set_hover(None)
        self.scroll_x = self.max_scroll_x

    # ------------------------------------------------------------- the mouse

    def _row_at(self, event: events.MouseEvent) -> int | None:
        """The row under the mouse (-1: the header), or None (below the rows, on the border)."""
        offset = event.get_content_offset(self)
        if offset is None:
            return None
        if offset.y == 0:
            return -1
        row = offset.y - 1 + self.scroll_offset.y
        return row if row < len(self._keys) else None

    def _set_hover(self, row: int | None) -> None:
        if row != self._hover:
            old, self._hover = self._hover, row
            for changed in (old, row):
                if changed is not None:
                    self._refresh_row(changed)

    def on_mouse_move(self, event: events.MouseMove) -> None:
        self._set_hover(self._row_at(event))

    def on_leave(self, event: events.Leave) -> None:
        self._set_hover(None)

    def on_click(self, event: events.Click) -> None:
        row = self._row_at(event)
        self._set_hover(row)
        if row is not None and row >= 0:
            self._to(row)
            event.stop()

    # ------------------------------------------------------------- drawing

    def notify_style_update(self) -> None:
        super().notify_style_update()
        self._look = ()

    def render_lines(self, crop: Region) -> list[Strip]:
        # what every line depends on, looked at once a frame: a change draws every row again
        look = (self.rich_style, self.get_component_rich_style("row-table--header"),
                self.get_component_rich_style("row-table--cursor"),
                self.get_component_rich_style("row-table--hover"),
                self.get_component_rich_style("row-table--header-hover"), tuple(self._widest), self.size.width)
        if look != self._look:
            self._look = look
            self._lines.clear()
        return super().render_lines(crop)

    def render_line(self, y: int) -> Strip:
        width = self.size.width
        scroll_x, scroll_y = self.scroll_offset
        base = self._look[0]
        row = -1 if y == 0 else y - 1 + scroll_y
        if row >= len(self._keys):
            return Strip.blank(width, base)
        key = self._keys[row] if row >= 0 else None
        state = (row == self._cursor, row == self._hover)
        drawn = self._lines.get(key)
        if drawn is None or drawn[0] != state:
            drawn = self._lines[key] = (state, self._line(row, *state))
        return drawn[1].crop(scroll_x, scroll_x + width).adjust_cell_length(width, base)

    def _line(self, row: int, cursor: bool, hover: bool) -> Strip:
        """A row's whole line (-1: the header's), as DataTable draws it: each cell in the row's style
        and the cursor's or hover's over it, its own styles over them, and the cursor's or hover's
        colour over all; a space either side; then the row's style and the cursor's or hover's to
        the widget's width."""
        base, header, on_cursor, on_hover, header_hover = self._look[:5]
        extra = Style()
        if hover:
            extra += on_hover + header_hover if row < 0 else on_hover
        if cursor and row >= 0:
            extra += on_cursor
        style = (header if row < 0 else base) + extra
        post = Style.from_color(extra.color) if extra.color is not None else None
        cell_style = style + post if post else style
        segments: list[Segment] = []
        add = segments.append
        console = self.app.console
        for value, width in zip(self._labels if row < 0 else self._cells[self._keys[row]], self._widest):
            if isinstance(value, str):
                add(Segment(f" {value}{' ' * (width - cell_len(value))} ", cell_style))
                continue
            add(Segment(" ", cell_style))
            text = Text().append_text(value) if value.style else value  # (its own style as a span)
            for segment in text.render(console):
                own = style + segment.style if segment.style else style
                add(Segment(segment.text, own + post if post else own))
            add(Segment(" " * (width - value.cell_len + 1), cell_style))
        add(Segment(" " * max(0, self.size.width - self.virtual_size.width), style))
        return Strip(segments).simplify()


def _shown_row(row: tuple[str | Text, ...]) -> tuple[str | Text, ...]:
    """A RowTable row's cells as drawn: each str through `literal`, each Text through `literal_text`
    (the same tuple when nothing needs escaping)."""
    for value in row:
        if not (value.isprintable() if isinstance(value, str) else value.plain.isprintable()):
            return tuple(literal(v) if isinstance(v, str) else literal_text(v) for v in row)
    return row


class KeyHint(NamedTuple):
    """One key as the footer shows it."""

    key: str
    display: str  # as the app shows the key (`app.get_key_display`)
    description: str
    enabled: bool


class KeyFooter(Widget):
    """The screen's keys on one line, drawn by this one widget from the screen's `active_bindings`.
    Textual's Footer mounts a widget per key, each styled, composed, laid out and rendered: on the
    dashboard (11 keys) about 60 M instructions of its first paint, where this one costs about 13 M.

    It shows what Textual's Footer shows, as it draws it (tests/test_key_footer.py holds them side
    by side): each binding with `show` (the first of each action) as its key then its description,
    a disabled one dimmed, the one under the mouse highlighted, the palette's key on the right
    (`show_command_palette`); a mouse press on a key presses it (on a disabled one: the bell). When
    the screen's bindings change (focus moved, `check_action` changed) it looks at them again once
    before the next frame, and redraws only when what it shows changed. A line too short for every
    key shows those that fit whole, in their order, then `?` alone (the key that lists them all);
    no key is ever cut (Textual's scrolled sideways under the mouse wheel; 80 columns read "q Q").
    Binding groups are drawn key by key (gpuops has none).

    Its look is the stylesheet's: its own colours are the footer's, and its component classes
    - footer-key--key, footer-key--description: as Textual's FooterKey's (colours, padding);
    - footer-key: a key as a whole; its right margin: the columns after it, in the footer's colours;
    - footer-key--hover: the key under the mouse (its background);
    - footer-key--disabled: a key whose action is disabled (its text style);
    - footer-key--palette: the palette's key: the colour of its bar, its right padding (`display:
      none` leaves it out)."""

    ALLOW_SELECT = False
    COMPONENT_CLASSES = {"footer-key", "footer-key--key", "footer-key--description", "footer-key--hover",
                         "footer-key--disabled", "footer-key--palette"}
    DEFAULT_CSS = """
    KeyFooter {
        dock: bottom;
        height: 1;
        color: $footer-foreground;
        background: $footer-background;
        .footer-key--key {
            color: $footer-key-foreground;
            background: $footer-key-background;
            text-style: bold;
            padding: 0 1;
        }
        .footer-key--description {
            color: $footer-description-foreground;
            background: $footer-description-background;
            padding: 0 1 0 0;
        }
        .footer-key--hover {
            background: $block-hover-background;
        }
        .footer-key--disabled {
            text-style: dim;
        }
        .footer-key--palette {
            color: $foreground 20%;
            padding: 0 1 0 0;
        }
    }
    """
    PALETTE_BAR = "\u258f"  # Textual's `vkey` border on the palette key's left

    def __init__(self, *, show_command_palette: bool = True, id: str | None = None,
                 classes: str | None = None) -> None:
        super().__init__(id=id, classes=classes)
        self.show_command_palette = show_command_palette
        self._shown: tuple[tuple[KeyHint, ...], KeyHint | None] | None = None  # (keys, palette) drawn
        self._spans: list[tuple[int, int, KeyHint]] = []  # where each key drawn is: [start, end)
        self._hover: KeyHint | None = None
        self._check_pending = False
        self._looks: dict[tuple[str, bool, bool], tuple[Style, Spacing]] = {}

    def on_mount(self) -> None:
        self.screen.bindings_updated_signal.subscribe(self, self._bindings_changed)

    def on_unmount(self) -> None:
        self.screen.bindings_updated_signal.unsubscribe(self)

    def _shows(self) -> tuple[tuple[KeyHint, ...], KeyHint | None]:
        if self._shown is None:
            self._shown = self._keys_now()
        return self._shown

    def _keys_now(self) -> tuple[tuple[KeyHint, ...], KeyHint | None]:
        app = self.app
        active = self.screen.active_bindings
        actions: set[str] = set()
        keys = []
        for _, binding, enabled, _ in active.values():
            if binding.show and binding.action not in actions:
                actions.add(binding.action)
                keys.append(KeyHint(binding.key, app.get_key_display(binding), binding.description, enabled))
        palette = None
        if self.show_command_palette and app.ENABLE_COMMAND_PALETTE:
            found = active.get(app.COMMAND_PALETTE_BINDING)
            if found is not None:
                _, binding, enabled, _ = found
                palette = KeyHint(binding.key, app.get_key_display(binding), binding.description, enabled)
        return tuple(keys), palette

    def _bindings_changed(self, screen: Any) -> None:
        # (as Textual's Footer: while the terminal has no focus the bindings are left as they were)
        if screen.app.app_focus and screen is self.screen and not self._check_pending:
            self._check_pending = True
            self.call_after_refresh(self._check_keys)

    def _check_keys(self) -> None:
        self._check_pending = False
        if not self.is_attached:
            return
        shown = self._keys_now()
        if shown != self._shown:
            self._shown = shown
            self._hover_on(None)  # (as a recomposed Footer's new keys: none under the mouse till it moves)
            self.refresh()

    # ------------------------------------------------------------- drawing

    def notify_style_update(self) -> None:
        super().notify_style_update()
        self._looks.clear()

    def _look(self, name: str, hover: bool, enabled: bool) -> tuple[Style, Spacing]:
        """A part's style and padding (kept till the styles change)."""
        look = self._looks.get((name, hover, enabled))
        if look is None:
            styles = self.get_component_styles(name)
            style = self.get_component_rich_style(name)
            if hover:
                under = Color.from_rich_color(self.get_component_rich_style("footer-key--hover").bgcolor)
                style += Style(bgcolor=(under + styles.background).rich_color)
            if not enabled:
                style += self.get_component_rich_style("footer-key--disabled", partial=True)
            look = self._looks[name, hover, enabled] = (style, styles.padding)
        return look

    def _parts(self, hint: KeyHint, hover: bool, padded: bool = True) -> list[Segment]:
        """A key's cells: its key, then its description (none when it has none), in its styles;
        not `padded`: the key's padding left out, one column before the description (the palette's)."""
        style, pad = self._look("footer-key--key", hover, hint.enabled)
        segments = [Segment(" " * pad.left + hint.display + " " * pad.right if padded else hint.display, style)]
        if hint.description:
            style, pad = self._look("footer-key--description", hover, hint.enabled)
            text = " " * pad.left + hint.description + " " * pad.right if padded else " " + hint.description
            segments.append(Segment(text, style))
        return segments

    def _palette(self, hint: KeyHint) -> list[Segment]:
        """The palette's key as Textual's Footer draws it (compact always): its bar, its key, its
        padding."""
        hover = hint == self._hover
        under = (self.get_component_rich_style("footer-key--hover") if hover else self.rich_style).bgcolor
        palette = self.get_component_styles("footer-key--palette")
        return [Segment(self.PALETTE_BAR, Style(color=palette.rich_style.color, bgcolor=under)),
                *self._parts(hint, hover, padded=False), Segment(" " * palette.padding.right, Style(bgcolor=under))]

    def render_line(self, y: int) -> Strip:
        width = self.size.width
        base = Style(bgcolor=self.rich_style.bgcolor)  # (the footer's background, where nothing is written)
        if y:
            return Strip.blank(width, base)
        keys, palette = self._shows()
        if palette is not None and self.get_component_styles("footer-key--palette").display == "none":
            palette = None
        right = Strip(self._palette(palette) if palette is not None else [])
        room = max(0, width - right.cell_length)
        spans: list[tuple[int, int, KeyHint]] = []
        margin = self.get_component_styles("footer-key").margin.right
        keys = self._fitting(keys, room, margin)
        segments: list[Segment] = []
        x = 0
        for hint in keys:
            if x >= room:
                break
            parts = self._parts(hint, hint == self._hover)
            end = x + sum(segment.cell_length for segment in parts)
            spans.append((x, min(end, room), hint))
            segments += parts
            if margin:
                segments.append(Segment(" " * margin, base))
            x = end + margin
        if palette is not None:
            spans.append((room, width, palette))
        self._spans = spans
        return Strip.join([Strip(segments).crop_extend(0, room, base), right]).crop(0, width)

    HELP = "question_mark"  # the key that lists every key (`?`)

    def _fitting(self, keys: tuple[KeyHint, ...], room: int, margin: int) -> tuple[KeyHint, ...]:
        """The keys the line shows, each whole: all of them when they fit; else those that fit in
        their order, then `?` alone (no description: the key that lists the others) where it fits.
        A key is never cut (80 columns drew "q Q" and "? Key")."""
        widths = [sum(seg.cell_length for seg in self._parts(hint, False)) + margin for hint in keys]
        if sum(widths) - margin <= room:
            return keys
        help_key = next((h for h in keys if h.key == self.HELP), None)
        more = help_key._replace(description="") if help_key is not None else None
        more_width = sum(seg.cell_length for seg in self._parts(more, False)) if more is not None else -margin
        shown: list[KeyHint] = []
        used = 0
        for hint, width in zip(keys, widths):  # (a width holds the margin before the next key)
            if hint is help_key:
                continue
            if used + width + more_width > room:
                break
            shown.append(hint)
            used += width
        if more is not None:
            shown.append(more)
        return tuple(shown)

    # ------------------------------------------------------------- the mouse

    def _key_at(self, x: int) -> KeyHint | None:
        return next((hint for start, end, hint in self._spans if start <= x < end), None)

    def on_mouse_down(self, event: events.MouseDown) -> None:
        hint = self._key_at(event.x)
        if hint is None:
            return
        if hint.enabled:
            self.app.simulate_key(hint.key)
        else:
            self.app.bell()

    def on_mouse_move(self, event: events.MouseMove) -> None:
        self._hover_on(self._key_at(event.x))

    def on_leave(self, event: events.Leave) -> None:
        self._hover_on(None)

    def _hover_on(self, hint: KeyHint | None) -> None:
        if hint != self._hover:
            self._hover = hint
            self.styles.pointer = "default" if hint is None else "pointer"  # (a hand, where the terminal can)
            self.refresh()
