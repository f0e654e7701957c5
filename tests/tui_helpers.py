"""Helpers for driving the TUI through Textual's pilot."""

from __future__ import annotations

import time


async def until(pilot, predicate, timeout: float = 15.0, step: float = 0.05) -> bool:
    """Let the app run until `predicate()` holds; False if it never does."""
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if predicate():
            return True
        await pilot.pause(step)
    return bool(predicate())


def screen_text(app) -> str:
    """Everything on screen as plain text (the SVG export's text nodes)."""
    import html
    import re

    svg = app.export_screenshot()
    return html.unescape(" ".join(re.findall(r">([^<>]*)</text>", svg))).replace("\xa0", " ")
