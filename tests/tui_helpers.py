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


def app_with_a_stopped_deployment(tmp_path, monkeypatch, name: str = "alpha"):
    """The dashboard app of a state folder of the test's own (XDG_STATE_HOME, HOME under `tmp_path`)
    whose store holds one stopped deployment `name` on localhost."""
    from gpuops.core.config import parse_inventory
    from gpuops.core.deploy.store import Store
    from gpuops.tui.app import GpuopsApp
    from tests.plans import make_plan

    monkeypatch.setenv("XDG_STATE_HOME", str(tmp_path / "state"))
    monkeypatch.setenv("HOME", str(tmp_path / "home"))
    store = Store()
    store.add_deployment("localhost", make_plan(name), state="stopped")
    store.close()
    return GpuopsApp(parse_inventory("[hosts.localhost]\nlocal = true\n", source="t.toml"), interval=0.5)
