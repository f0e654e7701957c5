"""A yes/no question before anything destructive; `n`, `esc` and Enter on No all decline. It may
offer one other way forward (`o`: deploy on other GPUs, say), answered as the string "other"."""

from __future__ import annotations

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
        Binding("o", "other", "Other", show=False),
        Binding("escape", "answer(False)", "Cancel", key_display="esc"),
    ]

    def __init__(self, question: str, detail: str = "", yes: str = "Yes", other: str | None = None,
                 no: str = "No"):
        super().__init__(classes="confirm")
        self.question = question
        self.detail = detail
        self.yes_label = yes
        self.no_label = no
        self.other_label = other  # the third answer's label (None: a plain yes/no)

    def compose(self) -> ComposeResult:
        with Vertical(id="confirm-box"):
            # literal text, never markup: a question names hosts, models, paths (the callers give a path
            # to act on through core.literal.exact, so that the question shows the very path)
            yield Static(shown(self.question, lines=True), id="confirm-question")
            if self.detail:  # a long one scrolls: the answers stay in view (80x24)
                with VerticalScroll(id="confirm-detail-box"):
                    yield Static(shown(self.detail, lines=True), id="confirm-detail")
            with Horizontal(id="confirm-buttons"):
                yield Button(shown(f"{self.yes_label} (y)"), variant="error", id="yes")
                if self.other_label:
                    yield Button(shown(f"{self.other_label} (o)"), variant="warning", id="other")
                yield Button(shown(f"{self.no_label} (n)"), variant="primary", id="no")

    def on_mount(self) -> None:
        self.query_one("#no", Button).focus()  # the safe answer is the default

    def on_button_pressed(self, event: Button.Pressed) -> None:
        self.dismiss("other" if event.button.id == "other" else event.button.id == "yes")

    def action_other(self) -> None:
        if self.other_label:
            self.dismiss("other")

    def action_answer(self, yes: bool) -> None:
        self.dismiss(yes)
