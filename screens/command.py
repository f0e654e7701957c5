"""`:` on every screen: a command line over the screen, which owns the keyboard while it is open
(the letters typed never reach the screen's hotkeys). Enter runs the command (the app's
`run_command`), esc abandons it. It completes hosts, deployments, themes and the commands."""

from __future__ import annotations

from typing import Iterable

from textual.app import ComposeResult
from textual.binding import Binding
from textual.screen import ModalScreen
from textual.suggester import SuggestFromList
from textual.widgets import Input

VERBS = ("host", "dep", "deployments", "swap", "theme", "bench", "help", "quit")


def suggestions(hosts: Iterable[str], deployments: Iterable[str], themes: Iterable[str]) -> list[str]:
    """What the command line completes: every command with every name it takes."""
    hosts, deployments = list(hosts), list(deployments)
    return ([f"dep {d}" for d in deployments] + [f"swap {d}" for d in deployments] + [f"host {h}" for h in hosts] + hosts
            + [f"theme {t}" for t in themes] + list(VERBS))


class CommandScreen(ModalScreen[str | None]):
    BINDINGS = [Binding("escape", "cancel", "Cancel", key_display="esc")]

    def __init__(self, completions: list[str], placeholder: str):
        super().__init__(classes="command")
        self.completions = completions
        self.placeholder = placeholder

    def compose(self) -> ComposeResult:
        cmd = Input(id="cmdline", placeholder=self.placeholder,
                    suggester=SuggestFromList(self.completions, case_sensitive=False))
        cmd.border_title = ":"
        yield cmd

    def on_mount(self) -> None:
        self.query_one("#cmdline", Input).focus()

    def on_input_submitted(self, event: Input.Submitted) -> None:
        event.stop()
        self._close(event.value.strip() or None)

    def action_cancel(self) -> None:
        self._close(None)

    def _close(self, text: str | None) -> None:
        self.query_one("#cmdline", Input).display = False
        self.dismiss(text)
