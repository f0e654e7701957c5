"""Small widgets shared by the screens."""

from __future__ import annotations

from typing import Any, NamedTuple

from rich.cells import cell_len
from rich.segment import Segment
from rich.style import Style
from rich.text import Text
from textual import events
from textual.cache import LRUCache
from textual.color import Color
from textual.coordinate import Coordinate
from textual.geometry import Region, Spacing
from textual.strip import Strip
from textual.widget import Widget
from textual.widgets import DataTable
from textual.widgets.data_table import RowKey


class TextView(Widget):
    """Rich text that repaints only when it changes, and re-lays out only when the rows it takes
    may change (Static.update re-lays out the screen on every call): its number of lines changed,
    or a line of the old or new text is wider than the view (it wraps, to as many rows as may differ)."""

    DEFAULT_CSS = "TextView { height: auto; }"

    def __init__(self, text: Text | str = "", *, id: str | None = None, classes: str | None = None):
        super().__init__(id=id, classes=classes)
        self._text = Text(text) if isinstance(text, str) else text

    @property
    def text(self) -> Text:
        return self._text

    def set(self, text: Text | str) -> None:
        text = Text(text) if isinstance(text, str) else text
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


class FleetTable(DataTable):
    """A DataTable for a list that changes a little all the time (a fleet's hosts at 1 Hz).

    A plain DataTable forgets every rendered line whenever any cell changes, so one changed host
    re-renders every visible row. Here each rendered line is also kept under its row's own version
    (bumped when that row's cells change), so a change re-renders that row alone and the other
    lines come from the cache. Anything else that can change a line's look (its place, the cursor
    or hover on it, focus, scrolling, column widths, styles) is part of the key, and whatever clears
    the DataTable's own caches clears this one too. Only the row cursor type is cached: other
    cursor types take DataTable's own path. A cell update repaints its own row only (and nothing
    when that row is scrolled out of view), unless the column's width changes with it."""

    def __init__(self, *args: Any, **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        self._row_versions: dict[Any, int] = {}
        self._fleet_lines: LRUCache[tuple, Strip] = LRUCache(1024)
        self._fleet_cells: LRUCache[tuple, Any] = LRUCache(4096)
        self._column_widths: tuple[int, ...] = ()

    def _bump(self, row_key: Any) -> None:
        key = row_key if isinstance(row_key, RowKey) else RowKey(row_key)
        self._row_versions[key] = self._row_versions.get(key, 0) + 1

    _row_only = False  # inside update_cell: its repaint of the whole table is left out

    def update_cell(self, row_key: Any, column_key: Any, value: Any, *, update_width: bool = False) -> None:
        """As DataTable's, but unless the column's width is to change, only that row is repainted
        (and only when it is in view)."""
        self._row_only = not update_width
        try:
            super().update_cell(row_key, column_key, value, update_width=update_width)
        finally:
            self._row_only = False
        self._bump(row_key)
        if not update_width:
            self._refresh_row_of(row_key)

    def _refresh_row_of(self, row_key: Any) -> None:
        index = self.get_row_index(row_key)
        if not self._single_lines:
            self.refresh_row(index)
            return
        # every row is one line: its place is its index (refresh_row adds up the rows above it)
        y = index + (self.header_height if self.show_header else 0)
        top = self.scroll_offset.y
        if top <= y < top + self.size.height:
            self.refresh(Region(0, y - top, max(self.size.width, self.virtual_size.width), 1))

    def refresh(self, *regions: Any, **kwargs: Any) -> Any:
        if self._row_only and not regions and not kwargs:
            return self
        return super().refresh(*regions, **kwargs)

    _single_lines = True  # every row added so far is one line high

    def add_row(self, *cells: Any, height: int | None = 1, key: str | None = None, label: Any = None) -> RowKey:
        if height != 1:
            self._single_lines = False
        row_key = super().add_row(*cells, height=height, key=key, label=label)
        self._bump(row_key)
        return row_key

    def remove_row(self, row_key: Any) -> None:
        super().remove_row(row_key)
        self._bump(row_key)

    def _clear_caches(self) -> None:
        super()._clear_caches()
        self._fleet_lines.clear()
        self._fleet_cells.clear()

    def notify_style_update(self) -> None:
        super().notify_style_update()
        self._fleet_lines.clear()
        self._fleet_cells.clear()

    def _render_cell(self, row_index: int, column_index: int, base_style: Style, width: int,
                     cursor: bool = False, hover: bool = False) -> Any:
        # a changed row re-renders only its changed cells: a cell's render is kept under its value
        # (and its place: the render carries its row and column for the mouse)
        if row_index < 0 or column_index < 0 or self.cursor_type != "row" or not self._single_lines:
            return super()._render_cell(row_index, column_index, base_style, width, cursor, hover)
        value = self.get_cell_at(Coordinate(row_index, column_index))
        what = (value.plain, str(value.style), tuple(value.spans)) if isinstance(value, Text) else value
        key = (row_index, column_index, what, base_style, width, cursor, hover, self._show_hover_cursor,
               self._pseudo_class_state, self.app.theme)
        lines = self._fleet_cells.get(key)
        if lines is None:
            lines = super()._render_cell(row_index, column_index, base_style, width, cursor, hover)
            self._fleet_cells.set(key, lines)
        return lines

    def render_lines(self, crop: Any) -> list[Strip]:
        self._column_widths = tuple(column.get_render_width(self) for column in self.ordered_columns)
        return super().render_lines(crop)

    def _render_line(self, y: int, x1: int, x2: int, base_style: Style) -> Strip:
        if self.cursor_type != "row":
            return super()._render_line(y, x1, x2, base_style)
        try:
            row_key, line_in_row = self._get_offsets(y)
        except LookupError:
            return super()._render_line(y, x1, x2, base_style)
        row = self._row_locations.get(row_key)
        if row is None:
            row = -1  # the header
        key = (
            row_key, self._row_versions.get(row_key, 0), line_in_row, row, y, x1, x2, self.size.width,
            base_style, self.cursor_coordinate.row == row, self.hover_coordinate.row == row, self.show_cursor,
            self._show_hover_cursor, self._pseudo_class_state, self._column_widths, self.app.theme,
        )
        strip = self._fleet_lines.get(key)
        if strip is None:
            strip = super()._render_line(y, x1, x2, base_style)
            self._fleet_lines.set(key, strip)
        return strip


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
    key cuts the last ones (Textual's scrolled sideways under the mouse wheel). Binding groups are
    drawn key by key (gpuops has none).

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
