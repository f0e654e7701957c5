"""Small widgets shared by the screens."""

from __future__ import annotations

from typing import Any

from rich.cells import cell_len
from rich.style import Style
from rich.text import Text
from textual.cache import LRUCache
from textual.coordinate import Coordinate
from textual.geometry import Region
from textual.strip import Strip
from textual.widget import Widget
from textual.widgets import DataTable, Footer
from textual.widgets._footer import FooterKey
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


class GpuopsFooter(Footer):
    """Textual's Footer, recomposed once for any number of binding changes before the next frame,
    and only when what it shows changes.

    Textual's Footer mounts empty, then recomposes whenever the screen's bindings change (a screen's
    first frame brings two such changes: its resume, then its focus), and each recompose remakes
    every key of the footer (a widget each). This one recomposes once per frame at most, and not at
    all when its keys (their labels, enabled or not, the palette key) would come out as they are;
    and each key starts as compact as the footer (Textual's start compact and are made wide as they
    mount: every key restyled twice, on a slow machine a good part of the first paint)."""

    _recompose_pending = False
    _shown: tuple | None = None  # what the keys composed last show (None: not composed with keys yet)

    def _keys_shown(self) -> tuple:
        app = self.app
        active = self.screen.active_bindings
        keys = tuple(
            (binding.key, app.get_key_display(binding), binding.description, binding.action, enabled, tooltip,
             binding.group)
            for (_, binding, enabled, tooltip) in active.values() if binding.show
        )
        palette = None
        if self.show_command_palette and app.ENABLE_COMMAND_PALETTE:
            found = active.get(app.COMMAND_PALETTE_BINDING)
            if found is not None:
                _, binding, enabled, tooltip = found
                palette = (binding.key, app.get_key_display(binding), binding.description, binding.action, enabled,
                           binding.tooltip)
        return keys, palette

    def compose(self) -> Any:
        self._shown = self._keys_shown() if self._bindings_ready else None
        for widget in super().compose():
            if isinstance(widget, FooterKey):
                # a key starts compact (and is bound to the footer's compact later): starting as the
                # footer is spares restyling every key twice as it mounts
                widget.set_reactive(FooterKey.compact, self.compact)
            yield widget

    def bindings_changed(self, screen: Any) -> None:
        self._bindings_ready = True
        if not screen.app.app_focus:
            return
        if self.is_attached and screen is self.screen and not self._recompose_pending:
            self._recompose_pending = True
            self.call_after_refresh(self._recompose_once)

    async def _recompose_once(self) -> None:
        self._recompose_pending = False
        if not self.is_attached or self._keys_shown() == self._shown:
            return
        await self.recompose()
