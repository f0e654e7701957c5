"""Command palette providers: jump to a host, open a deployment."""

from __future__ import annotations

from functools import partial
from typing import TYPE_CHECKING, Protocol, cast

from textual.command import DiscoveryHit, Hit, Hits, Provider

if TYPE_CHECKING:
    from ..core.ops import Ops
    from ..core.telemetry.monitor import Monitor


class PaletteApp(Protocol):
    """What the palette's commands use of the app (`tui.app.GpuopsApp`, which mypy checks against
    this): the app lists these providers, so they name this instead of importing it."""

    monitor: Monitor

    @property
    def ops(self) -> Ops: ...
    def jump_to_host(self, name: str) -> bool: ...
    def open_deployment(self, name: str) -> bool: ...
    def open_deployments(self, select: str | None = None) -> None: ...


class _Listed(Provider):
    """A provider of (text, help, callback) commands, discovered and searched alike."""

    def _commands(self) -> list[tuple[str, str, object]]:
        raise NotImplementedError

    async def discover(self) -> Hits:
        for text, help_text, callback in self._commands():
            yield DiscoveryHit(text, callback, help=help_text)  # type: ignore[arg-type]

    async def search(self, query: str) -> Hits:
        matcher = self.matcher(query)
        for text, help_text, callback in self._commands():
            score = matcher.match(text)
            if score > 0:
                yield Hit(score, matcher.highlight(text), callback, help=help_text)  # type: ignore[arg-type]


class HostCommands(_Listed):
    """`Host: NAME` for every host of the inventory."""

    def _commands(self) -> list[tuple[str, str, object]]:
        app = cast("PaletteApp", self.app)
        return [
            (f"Host: {name}", f"show {name} ({state.kind} {state.address})", partial(app.jump_to_host, name))
            for name, state in app.monitor.states.items()
        ]


class DeploymentCommands(_Listed):
    """`Deployment: NAME` for every stored deployment, and the deployments view."""

    def _commands(self) -> list[tuple[str, str, object]]:
        app = cast("PaletteApp", self.app)
        try:
            stored = app.ops.deployments()
        except Exception:  # a store that cannot be read: the palette still opens
            stored = []
        rows: list[tuple[str, str, object]] = [
            (f"Deployment: {d.name}", f"open {d.name} ({d.model} on {d.host}, {d.state})",
             partial(app.open_deployment, d.name))
            for d in stored
        ]
        rows.append(("Deployments", "every stored deployment: stop, restart, logs, triage, bench, forget",
                     app.open_deployments))
        return rows
