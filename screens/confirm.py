"""A yes/no question before anything destructive; `n`, `esc` and Enter on No all decline. It may
offer one other way forward (`o`, or the key given: deploy on other GPUs, roll back), answered as
the string "other". `y` always goes ahead with what the question proposes; a question whose safe
answer is to go ahead (keep what runs) has no No button and `n`/`esc` answer it as declining the
other way (`no=None`, the Yes button in focus)."""

from __future__ import annotations

from rich.text import Text
from textual import events
from textual.app import ComposeResult
from textual.binding import Binding
from textual.containers import Horizontal, Vertical, VerticalScroll
from textual.screen import ModalScreen
from textual.widgets import Button, Static

from ..tui.widgets import shown


class ConfirmScreen(ModalScreen["bool | str"]):
    BINDINGS = [
        Binding("y", "answer(True)", "Yes"),
        Binding("n", "answer(False)", "No"),
        Binding("escape", "answer(False)", "Cancel", key_display="esc"),
    ]

    def __init__(self, question: str, detail: str | Text = "", yes: str = "Yes", other: str | None = None,
                 no: str | None = "No", other_key: str = "o"):
        super().__init__(classes="confirm")
        self.question = question
        self.detail = detail
        self.yes_label = yes
        self.no_label = no  # None: no No button (n and esc still answer False), Yes is in focus
        self.other_label = other  # the third answer's label (None: a plain yes/no)
        self.other_key = other_key

    def compose(self) -> ComposeResult:
        with Vertical(id="confirm-box"):
            # literal text, never markup: a question names hosts, models, paths (the callers give a path
            # to act on through core.literal.exact, so that the question shows the very path)
            yield Static(shown(self.question, lines=True), id="confirm-question")
            if self.detail:  # a long one scrolls: the answers stay in view (80x24)
                with VerticalScroll(id="confirm-detail-box"):
                    yield Static(shown(self.detail, lines=True), id="confirm-detail")
            with Horizontal(id="confirm-buttons"):
                yield Button(shown(f"{self.yes_label} (y)"), variant="error" if self.no_label else "primary", id="yes")
                if self.other_label:
                    yield Button(shown(f"{self.other_label} ({self.other_key})"), variant="warning", id="other")
                if self.no_label:
                    yield Button(shown(f"{self.no_label} (n)"), variant="primary", id="no")

    def on_mount(self) -> None:
        # the safe answer is the default: No, or Yes where going ahead changes nothing
        self.query_one("#no" if self.no_label else "#yes", Button).focus()

    def on_button_pressed(self, event: Button.Pressed) -> None:
        self.dismiss("other" if event.button.id == "other" else event.button.id == "yes")

    def on_key(self, event: events.Key) -> None:
        if self.other_label and event.key == self.other_key:
            event.stop()
            self.dismiss("other")

    def action_answer(self, yes: bool) -> None:
        self.dismiss(yes)
