"""Small widgets shared by the screens."""

from __future__ import annotations

from rich.text import Text
from textual.widget import Widget


class TextView(Widget):
    """Rich text that repaints only when it changes, and re-lays out only when its
    number of lines changes (Static.update re-lays out the screen on every call)."""

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
        relayout = text.plain.count("\n") != self._text.plain.count("\n") or not (text.plain and self._text.plain)
        self._text = text
        self.refresh(layout=relayout)

    def render(self) -> Text:
        return self._text
