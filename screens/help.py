"""`?`: the keys of the screen underneath, and the `:` commands."""

from __future__ import annotations

from collections.abc import Sequence

from rich.table import Table
from rich.text import Text
from textual.app import ComposeResult
from textual.binding import Binding
from textual.containers import VerticalScroll
from textual.screen import ModalScreen
from textual.widgets import Static

COMMANDS = (
    (":host NAME", "jump to a host (also :NAME)"),
    (":theme NAME", "switch theme (gpuops-dark, gpuops-light, …)"),
    (":dep NAME", "watch a deployment (reattaches to its server)"),
    (":dep", "every deployment: open, stop, restart, triage, bench, forget (d on the dashboard)"),
    (":swap NAME [MODEL]", "replace ready deployment NAME by another model: pick it (or MODEL), plan it like "
                           "NAME, benchmark both, keep or roll back (n on a deployment)"),
    (":bench", "benchmark runs: results, compare (b on a deployment runs one)"),
    (":help", "this help"),
    (":quit", "leave gpuops"),
)


class HelpScreen(ModalScreen[None]):
    """Lists (key, what it does) for the screen it was opened over."""

    BINDINGS = [
        Binding("escape", "dismiss", "Close", key_display="esc"),
        Binding("question_mark", "dismiss", "Close", show=False),
        Binding("q", "dismiss", "Close", show=False),
    ]

    def __init__(self, title: str, keys: Sequence[tuple[str, str]], more: Sequence[tuple[str, str]] = (),
                 off: Sequence[tuple[str, str]] = ()):
        super().__init__()
        self.title_text = title
        self.keys = list(keys) + list(more) + list(off)
        self.main_keys = list(keys)
        self.more_keys = list(more)
        self.off_keys = list(off)  # keys read-only turns off (listed, marked so)

    def compose(self) -> ComposeResult:
        table = Table.grid(padding=(0, 2))
        table.add_column(style="bold")
        table.add_column()
        for key, description in self.main_keys:
            table.add_row(key, description)
        if self.off_keys:
            table.add_row("", "")
            for key, description in self.off_keys:
                table.add_row(Text(key, style="dim strike"), Text(description, style="yellow"))
        table.add_row("", "")
        for key, description in COMMANDS:
            table.add_row(key, description)
        if self.more_keys:
            table.add_row("", "")
            for key, description in self.more_keys:
                table.add_row(Text(key, style="dim"), Text(description, style="dim"))
        with VerticalScroll(id="help-box") as box:
            box.border_title = f"Keys: {self.title_text}"
            box.border_subtitle = "esc to close"
            yield Static(table, id="help-keys")
            yield Static(Text("ctrl+p opens the command palette (hosts, themes, …)", style="dim"))
