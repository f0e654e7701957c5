"""What every gpuops screen shares: `--readonly` disables the actions that change a host."""

from __future__ import annotations

from textual.screen import Screen

# Actions that change a host; `--readonly` disables every one of them.
MUTATING_ACTIONS: frozenset[str] = frozenset({"end_process", "delete_model", "apply_fix", "nccl_debug"})


class GpuopsScreen(Screen):
    def check_action(self, action: str, parameters: tuple[object, ...]) -> bool | None:
        if action in MUTATING_ACTIONS and getattr(self.app, "readonly", False):
            return None  # shown disabled in the footer; pressing it does nothing
        return True
