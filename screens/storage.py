"""Storage: one host's mounts and the models on its disks (model dirs, HF cache).

Thin: the scan (``app.ops.scan_storage``) and the removal (``app.ops.delete_model``) are core use cases, run in a worker on the
app's loop; the screen shows what they post. ``ctrl+d`` deletes after a confirmation,
refused in ``--readonly`` and whenever the host's policy or a user of the model says no.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Mapping

from rich.text import Text
from textual.app import ComposeResult
from textual.binding import Binding
from textual.coordinate import Coordinate
from textual.message import Message
from textual.widgets import DataTable, Header, Static

from ..core import units
from ..core.api import (
    Deleted,
    HostStorage,
    ModelCopy,
    refusal_for,
)
from ..core.literal import exact, literal
from ..tui.widgets import KeyFooter, LiteralTable
from .base import GpuopsScreen
from .confirm import ConfirmScreen

if TYPE_CHECKING:
    from ..core.api import Host

# what decides a deletion first (how big, complete, who uses it): at 80 columns Kind and Modified
# are the ones that go past the edge
COLUMNS = ("Model", "Size", "Complete", "Used by", "Kind", "Modified")


def _complete_cell(value: bool | None) -> Text:
    if value is None:
        return Text("?", style="dim")
    return Text("yes", style="green") if value else Text("NO", style="bold red")


def _used_cell(model: ModelCopy) -> str:
    # the deployments first: a narrow terminal cuts the end of the cell
    users = sorted(model.used_by, key=lambda u: u.deployment is None)
    return ", ".join(u.label() for u in users) or "-"


def model_row(model: ModelCopy) -> tuple:
    modified = (model.modified or "-").replace("T", " ").removesuffix("Z")[:16]  # to the minute
    # on a forbidden path (a retiring volume): listed and deletable, never used for a new plan
    kind = Text(model.kind) + (Text(" forbidden", style="yellow") if model.forbidden else Text())
    return (model.id, units.size(model.size_bytes), _complete_cell(model.complete), _used_cell(model), kind,
            modified)


class StorageScreen(GpuopsScreen):
    """Mounts and models of one host."""

    BINDINGS = [
        Binding("r", "rescan", "Rescan"),
        Binding("ctrl+d", "delete_model", "Delete"),
        Binding("escape", "back", "Back", key_display="esc"),
    ]

    class Scanned(Message):
        def __init__(self, storage: HostStorage) -> None:
            super().__init__()
            self.storage = storage

    class DeleteDone(Message):
        def __init__(self, model: ModelCopy, deleted: Deleted | None, error: str | None, rule: str | None = None) -> None:
            super().__init__()
            self.model = model
            self.deleted = deleted
            self.error = error
            self.rule = rule

    def __init__(self, host_name: str, deployments: Mapping[str, str] | None = None) -> None:
        super().__init__()
        self.host_name = host_name
        # name → model path or repo id of the stored deployments on this host (None: from the store)
        self.given_deployments = deployments
        self.storage: HostStorage | None = None
        self.scanning = False

    @property
    def host(self) -> "Host":
        return self.gapp.monitor.hosts[self.host_name]

    @property
    def readonly(self) -> bool:
        return bool(getattr(self.app, "readonly", False))

    def compose(self) -> ComposeResult:
        yield Header()
        yield Static(id="storage-title")
        yield Static(id="storage-mounts")
        yield LiteralTable(id="storage-models", cursor_type="row")  # (a folder's name is literal text)
        yield KeyFooter()

    def on_mount(self) -> None:
        table = self.query_one("#storage-models", DataTable)
        for label in COLUMNS:
            table.add_column(label, key=label)
        self.sub_title = f"storage · {self.host_name}"  # (SIMULATED, READONLY: the app's title says so)
        self._show_title()
        table.focus()
        self.action_rescan()

    # ------------------------------------------------------------- scanning

    def action_rescan(self) -> None:
        self.scanning = True
        self._show_title()
        self.run_worker(self._scan(), group="storage-scan", exclusive=True, exit_on_error=False)

    async def _scan(self) -> None:
        storage = await self.gapp.ops.scan_storage(self.host_name, self.given_deployments)
        self.post_message(self.Scanned(storage))

    def on_storage_screen_scanned(self, message: Scanned) -> None:
        self.scanning = False
        self.storage = message.storage
        self._show_title()
        self._show_mounts()
        self._show_models()

    def _show_title(self) -> None:
        title = Text.assemble(("Storage ", "bold"), (self.host_name, "bold"))
        if self.scanning:
            title.append("  scanning…", style="yellow")
        elif self.storage is not None and not self.storage.error:
            n = len(self.storage.models)
            total = sum(m.size_bytes or 0 for m in self.storage.models)
            title.append(f"  {n} model{'s' if n != 1 else ''}, {units.size(total)}", style="dim")
        if self.readonly:
            title.append("  READONLY", style="bold yellow")
        self.query_one("#storage-title", Static).update(title)

    def _show_mounts(self) -> None:
        s = self.storage
        text = Text()
        if s is None:
            pass
        elif s.error:
            text.append(literal(s.error), style="bold red")
            if s.hint:
                text.append(f"\nhint: {literal(s.hint)}", style="italic")
        else:
            for i, m in enumerate(s.mounts):
                if i:
                    text.append("\n")
                text.append(literal(m.mount), style="bold")
                text.append(f"  {units.size(m.free_bytes)} free of {units.size(m.total_bytes)}")
                if m.paths:
                    text.append(f"  ({', '.join(map(literal, m.paths))})", style="dim")
        self.query_one("#storage-mounts", Static).update(text)

    def _show_models(self) -> None:
        table = self.query_one("#storage-models", DataTable)
        keep = self.selected_model()
        table.clear()
        models = self.storage.models if self.storage else []
        for m in models:
            table.add_row(*model_row(m), key=m.path)
        if keep is not None:
            for i, m in enumerate(models):
                if m.path == keep.path:
                    table.move_cursor(row=i)
                    break

    def selected_model(self) -> ModelCopy | None:
        table = self.query_one("#storage-models", DataTable)
        if self.storage is None or table.row_count == 0:
            return None
        row_key = table.coordinate_to_cell_key(Coordinate(table.cursor_row, 0)).row_key
        return next((m for m in self.storage.models if m.path == row_key.value), None)

    # ------------------------------------------------------------- deleting

    def action_delete_model(self) -> None:
        if self.readonly:  # the binding is off in --readonly; this guards direct calls too
            self.notify("read-only: gpuops changes nothing on the hosts", severity="error")
            return
        if self.scanning:
            self.notify("still scanning…", severity="warning")
            return
        model = self.selected_model()
        if model is None:
            self.notify("no model selected", severity="warning")
            return
        refused = refusal_for(model, self.readonly)
        if refused is not None:
            self.notify(f"refused ({refused.rule}): {refused.message}", severity="error", timeout=8)
            return
        # the very path: quoted, escapes and all, when its plain form could read as another
        question = f"Delete {literal(model.id)} from {self.host_name}?"
        detail = (f"{model.kind} at {exact(model.path)}\n{units.size(model.size_bytes)}, "
                  f"modified {literal(model.modified or '?')}; this cannot be undone")

        def answered(yes: bool | str | None) -> None:
            if yes:
                self.run_worker(self._delete(model), group="storage-delete", exit_on_error=False)

        self.app.push_screen(ConfirmScreen(question, detail, yes="Delete"), answered)

    async def _delete(self, model: ModelCopy) -> None:
        from ..core.ops import Refused

        try:
            done = await self.gapp.ops.delete_model(self.host_name, model, confirmed=True)
        except Refused as exc:
            self.post_message(self.DeleteDone(model, None, str(exc), "policy"))
        except Exception as exc:  # HostError, timeout: say it, don't crash the UI
            self.post_message(self.DeleteDone(model, None, str(getattr(exc, "message", exc))))
        else:
            self.post_message(self.DeleteDone(model, done, None))

    def on_storage_screen_delete_done(self, message: DeleteDone) -> None:
        if message.deleted is not None:
            self.notify(f"deleted {message.model.id} on {self.host_name}, freed "
                        f"{units.size(message.deleted.freed_bytes)}")
        elif message.rule:
            self.notify(message.error or "refused", severity="error", timeout=8)
        else:
            self.notify(f"could not delete {message.model.id}: {message.error}", severity="error", timeout=8)
        self.action_rescan()

    # ------------------------------------------------------------- keys

    def action_back(self) -> None:
        self.app.pop_screen()
