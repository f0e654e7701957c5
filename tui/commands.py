"""Command palette providers: jump to a host, switch theme."""

from __future__ import annotations

from functools import partial
from typing import TYPE_CHECKING

from textual.command import DiscoveryHit, Hit, Hits, Provider

if TYPE_CHECKING:
    from .app import GpuopsApp


class HostCommands(Provider):
    """`Host: NAME` for every host of the inventory."""

    def _commands(self) -> list[tuple[str, str, object]]:
        app: GpuopsApp = self.app  # type: ignore[assignment]
        return [
            (f"Host: {name}", f"show {name} ({state.kind} {state.address})", partial(app.jump_to_host, name))
            for name, state in app.monitor.states.items()
        ]

    async def discover(self) -> Hits:
        for text, help_text, callback in self._commands():
            yield DiscoveryHit(text, callback, help=help_text)  # type: ignore[arg-type]

    async def search(self, query: str) -> Hits:
        matcher = self.matcher(query)
        for text, help_text, callback in self._commands():
            score = matcher.match(text)
            if score > 0:
                yield Hit(score, matcher.highlight(text), callback, help=help_text)  # type: ignore[arg-type]
