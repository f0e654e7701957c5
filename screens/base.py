"""What every gpuops screen shares: `:` opens the command line, and `--readonly` disables the
actions that change a host."""

from __future__ import annotations

from textual.binding import Binding
from textual.screen import Screen

# Actions that change a host; `--readonly` disables every one of them.
MUTATING_ACTIONS: frozenset[str] = frozenset({"end_process", "delete_model", "apply_fix", "nccl_debug",
                                              "stop", "restart", "forget", "swap"})


class GpuopsScreen(Screen):
    BINDINGS = [Binding("colon", "command", "Cmd", key_display=":")]
    HELP_TITLE = ""  # what `?` calls the screen (its class name, spaced, when empty)

    def action_command(self) -> None:
        self.app.action_command()  # type: ignore[attr-defined]

    def run_screen_command(self, verb: str, arg: str) -> bool:
        """A `:` command of this screen (True: it was one); the app's commands come after."""
        return False

    def check_action(self, action: str, parameters: tuple[object, ...]) -> bool | None:
        if action in MUTATING_ACTIONS and getattr(self.app, "readonly", False):
            return None  # shown disabled in the footer; pressing it does nothing
        return True
