"""Model picker: type a model id, or pick one of the host's copies (HF cache, model dirs);
the facts show as you move; Enter plans it for the host.

The id box has the keys from the start and keeps them: what is typed as soon as the picker shows
lands there whole, whenever the host's scan ends. `down` goes to the copies; a letter typed there
goes back to the box; Enter on an empty box plans the highlighted copy."""

from __future__ import annotations

from rich.text import Text
from textual import events, on, work
from textual.app import ComposeResult
from textual.binding import Binding
from textual.coordinate import Coordinate
from textual.containers import Horizontal, Vertical
from textual.widgets import DataTable, Header, Input, Static

from ..core import engines, units
from ..core.api import Host, HostError
from ..core.planning.model_facts import ModelError, ModelFacts
from ..core.planning.inputs import Wishes
from .base import GpuopsScreen
from ..tui.plan_view import facts_line
from ..core.literal import literal
from ..tui.widgets import KeyFooter, LiteralTable, TextView


class ModelPickerScreen(GpuopsScreen):
    BINDINGS = [
        Binding("slash", "focus_input", "Type an id", key_display="/"),
        # from the id box (before its own down, which scrolls nothing); on the table, the table's own down
        Binding("down", "focus_copies", "Copies", key_display="↓", priority=True),
        Binding("r", "rescan", "Rescan"),
        Binding("escape", "app.pop_screen", "Back", key_display="esc"),
    ]

    def __init__(self, host_name: str, swap_from: str | None = None, model: str | None = None):
        super().__init__()
        self.host_name = host_name
        self.swap_from = swap_from  # a ready deployment this model replaces (the swap's picker)
        self.model = model  # a model id given already (`:swap NAME MODEL`): planned at once
        self._typing = False  # the operator went for the id box (/ or typed): focus stays there
        self.copies: dict[str, tuple[str, str]] = {}  # row key -> (model id, path on the host)
        self.facts: ModelFacts | None = None

    @property
    def holds_work(self) -> bool:
        return self._typing  # a model id being typed

    @property
    def host(self) -> Host:
        return self.gapp.monitor.hosts[self.host_name]

    def compose(self) -> ComposeResult:
        yield Header()
        yield Input(placeholder="owner/name (HF) or /path/on/this/machine — Enter plans it", id="model-input")
        with Horizontal(id="picker-main"):
            with Vertical(id="picker-left"):
                yield Static(Text(f"Models on {self.host_name}"), classes="section", id="picker-title")
                yield LiteralTable(id="candidates", cursor_type="row")  # (a folder's name is literal text)
            yield TextView(Text("move to a model to see its facts", style="dim"), id="picker-facts")
        yield KeyFooter()

    def on_mount(self) -> None:
        self.sub_title = (f"pick the model that replaces {self.swap_from} on {self.host_name}" if self.swap_from
                          else f"pick a model for {self.host_name}")
        self.query_one("#candidates", DataTable).add_columns("model", "kind", "size", "complete")
        self.query_one("#model-input", Input).focus()  # typing goes there from the first key
        self.scan()
        if self.model:
            box = self.query_one("#model-input", Input)
            box.value = self.model
            self._typing = True
            self._plan_typed(self.model)

    # ---------------------------------------------------------------- scanning

    @work(exclusive=True, group="scan")
    async def scan(self) -> None:
        title = self.query_one("#picker-title", Static)
        title.update(Text(f"Models on {self.host_name}: scanning…"))
        storage = await self.app.ops.scan_storage(self.host_name, {})  # type: ignore[attr-defined]
        if not self.is_attached:  # left (esc) while the host was read
            return
        table = self.query_one("#candidates", DataTable)
        table.clear()
        self.copies.clear()
        for m in storage.models:
            key = f"{m.kind}:{m.path}"
            # a folder laid out as MODEL_DIR/owner/name is planned as that repo id
            model_id = (self.app.ops.model_id_for(self.host_name, m.path)  # type: ignore[attr-defined]
                        or m.id) if m.kind == "dir" else m.id
            self.copies[key] = (model_id, m.path)
            size = units.size(m.size_bytes) if m.size_bytes else "?"  # (as the storage screen says it)
            table.add_row(model_id, m.kind, size, {True: "yes", False: "NO", None: "?"}[m.complete], key=key)
        note = f" ({literal(storage.error)})" if storage.error else ""
        hint = " (down: pick one)" if storage.models and self.focused is not table else ""
        title.update(Text(f"Models on {self.host_name}: {len(storage.models)}{note}{hint}"))
        # the focus stays where it is: keys typed as the scan ended must not go to the table

    def action_rescan(self) -> None:
        self.scan()

    def action_focus_input(self) -> None:
        self._typing = True
        self.query_one("#model-input", Input).focus()

    def check_action(self, action: str, parameters: tuple[object, ...]) -> bool | None:
        box = self.query("#model-input")
        in_box = bool(box) and self.focused is box.first()
        if action == "focus_input" and in_box:
            return False  # typing there already (`/` types a path's first slash)
        if action == "focus_copies" and not in_box:
            return False  # (elsewhere down is the focused widget's own)
        return super().check_action(action, parameters)

    def action_focus_copies(self) -> None:
        table = self.query_one("#candidates", DataTable)
        if table.row_count:
            table.focus()

    def on_key(self, event: events.Key) -> None:
        """A character typed on the copies (not one of their keys) goes back to typing an id."""
        table = self.query_one("#candidates", DataTable)
        if self.focused is table and event.is_printable and event.character and event.key not in ("r", "slash"):
            event.stop()
            event.prevent_default()
            box = self.query_one("#model-input", Input)
            box.focus()
            box.insert_text_at_cursor(event.character)

    @on(Input.Changed, "#model-input")
    def _typed_some(self, event: Input.Changed) -> None:
        self._typing = True

    # ---------------------------------------------------------------- facts

    @on(DataTable.RowHighlighted, "#candidates")
    def _moved(self, event: DataTable.RowHighlighted) -> None:
        key = event.row_key.value if event.row_key else None
        if key in self.copies:
            model_id, path = self.copies[key]
            self.load_facts(model_id, path)

    async def _facts(self, model_id: str, host_path: str | None) -> ModelFacts:
        """From the copy on the host, else from the HF cache/Hub on this machine."""
        if host_path is not None:
            return await self.app.ops.model_facts_on_host(self.host_name, model_id, host_path)  # type: ignore[attr-defined]
        from asyncio import to_thread

        from ..core.planning.model_facts import load_model_facts

        return await to_thread(load_model_facts, model_id)

    @work(exclusive=True, group="facts")
    async def load_facts(self, model_id: str, host_path: str | None) -> None:
        view = self.query_one("#picker-facts", TextView)
        view.set(Text(f"reading {literal(model_id)}…", style="dim"))
        try:
            facts = await self._facts(model_id, host_path)
        except (ModelError, HostError, ValueError) as exc:
            self.facts = None
            if self.is_attached:
                view.set(Text(literal(str(exc)), style="red"))
            return
        if not self.is_attached:  # left while it was read
            return
        self.facts = facts
        view.set(Text.assemble((f"{literal(facts.id)}\n", "bold"), facts_line(facts)))

    @on(Input.Submitted, "#model-input")
    def _typed(self, event: Input.Submitted) -> None:
        table = self.query_one("#candidates", DataTable)
        if not event.value.strip() and table.row_count:  # nothing typed: the highlighted copy
            key = table.coordinate_to_cell_key(Coordinate(table.cursor_row, 0)).row_key.value
            if key in self.copies:
                self.plan_when_ready(*self.copies[key])
                return
        self._plan_typed(event.value)

    def _plan_typed(self, text: str) -> None:
        from ..core.planning.model_facts import validate_model_ref

        try:
            ref = validate_model_ref(text.strip())
        except ValueError as exc:
            self.notify(str(exc), severity="error")
            return
        self.load_facts(ref, None)
        self.plan_when_ready(ref)

    # ---------------------------------------------------------------- planning

    @on(DataTable.RowSelected, "#candidates")
    def _picked(self, event: DataTable.RowSelected) -> None:
        key = event.row_key.value if event.row_key else None
        if key in self.copies:
            self.plan_when_ready(*self.copies[key])

    @work(exclusive=True, group="plan")
    async def plan_when_ready(self, model_id: str, host_path: str | None = None) -> None:
        from .plan_review import PlanReviewScreen

        self.notify(f"reading {model_id} and {self.host_name}'s GPUs, disks and {engines.get().title}…")
        try:
            facts = await self._facts(model_id, host_path)
            target = await self.gapp.ops.read_target(self.host)
        except (ModelError, ValueError) as exc:
            self.notify(str(exc), severity="error")
            return
        except HostError as exc:
            self.notify(f"{exc.message}" + (f" — {exc.hint}" if exc.hint else ""), severity="error")
            return
        if not self.is_attached:  # left (esc) while the model and the host were read: nothing opens
            return
        if self.swap_from is None:
            self.app.push_screen(PlanReviewScreen(facts, target, Wishes()))
            return
        from ..core.ops import Refused
        from ..core.planning import PlanError
        from ..core.planning.like import previous_from_plan
        from .plan_review import SwapReviewScreen

        try:  # like the old one: its GPUs, port, bind, served name (planning keeps them)
            old = self.gapp.ops.deployment(self.swap_from)
            previous = previous_from_plan(old.plan, f"deployment {old.name}")
        except (Refused, PlanError) as exc:
            self.notify(str(exc), severity="error")
            return
        # a multi-node one: over the same nodes at the same TP (the review reads the other nodes)
        # (its port: the old one's, which the swap frees first: `replacing`)
        wishes = Wishes(tp=old.plan.tp, like=previous, replacing=old.name) if old.plan.members else \
            Wishes(gpu_ids=old.plan.gpu_ids, like=previous, replacing=old.name)
        self.app.push_screen(SwapReviewScreen(facts, target, wishes, old))
