"""The bench launcher: a deployment, a profile (the core's table with config.toml's
``[bench.profiles.NAME]``), a few settings changed (prompts, concurrency, input/output length),
start. Every change is checked as it is typed, by the core's own rules (``resolve_profile``);
a bad value is an inline error and `enter` then starts nothing.

A benchmark changes nothing on the host's configuration, but it loads a (maybe production)
server and writes its run folder on the host: like k9s's --readonly, gpuops --readonly refuses
it, with a notice (``open_launcher``)."""

from __future__ import annotations

from typing import Any

from rich.text import Text
from textual import on
from textual.app import App, ComposeResult
from textual.binding import Binding
from textual.containers import Horizontal, Vertical
from textual.widgets import Header, Input, Label, OptionList, Select, Static
from textual.widgets.option_list import Option

from ..core.bench.runner import DEFAULT_PROFILES, BenchInputError, Profile, describe_profile, resolve_profile
from ..core.domain import Deployment
from ..core.states import State
from .base import GpuopsScreen
from ..core.literal import literal
from ..tui.widgets import KeyFooter, TextView

READONLY_NOTICE = "read-only: a benchmark loads the server and writes on its host, so gpuops --readonly runs none"

# (input id, label, the setting it overrides in a serving profile, in a quality profile or None)
FIELDS = (
    ("prompts", "Prompts", "num_prompts", "num_examples"),
    ("concurrency", "Concurrency", "max_concurrency", "max_concurrency"),
    ("input-len", "Input len", "random_input_len", None),
    ("output-len", "Output len", "random_output_len", None),
)


def open_launcher(app: App, deployment: Deployment | None = None) -> None:
    """Open the launcher (for DEPLOYMENT, else with a choice of the stored ones); refused in --readonly."""
    if getattr(app, "readonly", False):
        app.notify(READONLY_NOTICE, severity="error", timeout=8)
        return
    app.push_screen(BenchLaunchScreen(deployment))


def profile_names(configured: dict[str, Any]) -> list[str]:
    return [*DEFAULT_PROFILES, *sorted(set(configured) - set(DEFAULT_PROFILES))]


def overrides_from(values: dict[str, str], kind: str) -> dict[str, Any]:
    """The form's text as ``resolve_profile`` overrides; an empty field keeps the profile's value.
    Concurrency takes one number or a list (`1,4,16`: a sweep). Range checks are the core's."""
    out: dict[str, Any] = {}
    for field_id, label, serving_key, quality_key in FIELDS:
        text = values.get(field_id, "").strip()
        key = quality_key if kind == "quality" else serving_key
        if not text or key is None:
            continue
        words = [w.strip() for w in text.split(",")]
        if not all(w.lstrip("-").isdigit() for w in words) or (len(words) > 1 and field_id != "concurrency"):
            expected = "an integer, or a list like 1,4,16 (one run each)" if field_id == "concurrency" else "an integer"
            raise BenchInputError(f"{label}: expected {expected}, got {text!r}")
        if len(words) > 1:
            if kind == "quality":
                raise BenchInputError(f"{label}: a quality run takes one number (its parallel requests)")
            out["concurrencies"] = [int(w) for w in words]
        else:
            out[key] = int(words[0])
    return out


def _shown(profile: Profile, field_id: str, key: str) -> str:
    """A field's placeholder: the profile's own value (a sweep's concurrencies as a list)."""
    if field_id == "concurrency":
        return ",".join(str(c or "unlimited") for c in profile.steps())
    return str(profile.settings[key])


class BenchLaunchScreen(GpuopsScreen):
    BINDINGS = [
        Binding("ctrl+s", "start", "Start"),
        Binding("escape", "back", "Back", key_display="esc"),
    ]

    holds_work = True  # the form being filled

    def __init__(self, deployment: Deployment | None = None):
        super().__init__()
        self.deployment = deployment
        self.profile_name = "smoke"
        self.profile: Profile | None = None  # the checked profile, None while the form has an error

    @property
    def configured(self) -> dict[str, dict[str, Any]]:
        inventory = getattr(self.app, "inventory", None)
        return dict(inventory.bench_profiles) if inventory is not None else {}

    def compose(self) -> ComposeResult:
        yield Header()
        with Vertical(id="launch-form"):
            if self.deployment is None:
                yield Label("Deployment", classes="section")
                options = self._deployment_options()
                yield Select(options, id="launch-deployment", prompt="choose a deployment" if options else
                             "no deployments yet: plan and deploy one first (p on the dashboard)")
            else:
                yield TextView(id="launch-target")
            yield Label("Profile", classes="section")
            yield OptionList(id="launch-profiles")
            yield Label("Settings (empty: the profile's)", classes="section")
            with Horizontal(id="launch-fields"):
                for field_id, label, *_ in FIELDS:
                    with Vertical(classes="launch-field"):
                        yield Label(label)
                        yield Input(id=f"launch-{field_id}")
            yield TextView(id="launch-preview")
            yield Static(id="launch-error")
        yield KeyFooter()

    def _deployment_options(self) -> list[tuple[Text, str]]:
        deployments = self.gapp.ops.deployments()
        return [(Text(literal(f"{d.name}  {d.model} on {d.host} · {d.state}")), d.name) for d in deployments]

    def on_mount(self) -> None:
        if self.deployment is not None:  # as it is now (the caller's copy may be from its start)
            try:
                self.deployment = self.gapp.ops.deployment(self.deployment.name)
            except Exception:
                pass  # forgotten meanwhile: the form still shows what it was given
        d = self.deployment
        self.sub_title = "new benchmark" + (f" · {d.name}" if d else "")
        if d is not None:
            self.query_one("#launch-target", TextView).set(Text.assemble(
                ("Benchmark ", "bold"), (d.name, "bold"), f"  {d.model} on {d.host} · {d.state}"))
        profiles = self.query_one("#launch-profiles", OptionList)
        for name in profile_names(self.configured):
            profiles.add_option(Option(self._profile_line(name), id=name))
        profiles.highlighted = 0
        profiles.focus()
        self.check()

    def _profile_line(self, name: str) -> Text:
        line = Text(f"{literal(name):<12}", style="bold")  # (a profile of config.toml: its name as written)
        try:
            line.append(literal(describe_profile(resolve_profile(name, self.configured))), style="dim")
        except BenchInputError as exc:
            line.append(literal(str(exc)), style="yellow")
        return line

    # ------------------------------------------------------------- the form

    def check(self) -> Profile | None:
        """The profile the form describes, or None with the reason shown inline."""
        values = {f: self.query_one(f"#launch-{f}", Input).value for f, *_ in FIELDS}
        error = None
        try:
            base = resolve_profile(self.profile_name, self.configured)
        except BenchInputError as exc:
            base, error = None, str(exc)
        kind = base.kind if base is not None else "serving"
        for field_id, _, serving_key, quality_key in FIELDS:
            box = self.query_one(f"#launch-{field_id}", Input)
            key = quality_key if kind == "quality" else serving_key
            box.disabled = key is None
            box.placeholder = "" if base is None or key is None else _shown(base, field_id, key)
        self.profile = None
        if error is None:
            try:
                self.profile = resolve_profile(self.profile_name, self.configured, overrides_from(values, kind))
            except BenchInputError as exc:
                error = str(exc)
        preview = Text()
        if self.profile is not None:
            preview.append(f"{self.profile.name}: ", style="bold")
            preview.append(describe_profile(self.profile))
            preview.append("\nenter or ctrl+s starts it", style="dim")
        self.query_one("#launch-preview", TextView).set(preview)
        self._show_error(error)
        return self.profile

    def _show_error(self, error: str | None) -> None:
        box = self.query_one("#launch-error", Static)
        box.update(Text(literal(error or ""), style="bold red"))
        box.display = error is not None

    @on(OptionList.OptionHighlighted, "#launch-profiles")
    def _profile_highlighted(self, event: OptionList.OptionHighlighted) -> None:
        self.profile_name = event.option.id or "smoke"
        self.check()

    @on(Input.Changed)
    def _field_changed(self) -> None:
        self.check()

    @on(OptionList.OptionSelected, "#launch-profiles")
    @on(Input.Submitted)
    def _enter(self) -> None:
        self.action_start()

    # ------------------------------------------------------------- start

    def _chosen(self) -> Deployment | None:
        """The deployment as the store has it now (its state may have changed since)."""
        if self.deployment is not None:
            name = self.deployment.name
        else:
            value = self.query_one("#launch-deployment", Select).value
            if value is Select.NULL:
                return None
            name = str(value)
        return next((d for d in self.gapp.ops.deployments() if d.name == name), None)

    def action_start(self) -> None:
        from .bench_run import BenchRunScreen

        if getattr(self.app, "readonly", False):  # open_launcher refuses first; this guards direct use
            self.notify(READONLY_NOTICE, severity="error", timeout=8)
            return
        profile = self.check()
        if profile is None:
            return
        deployment = self._chosen()
        if deployment is None:
            self._show_error("choose a deployment first" if self.deployment is None
                         else f"deployment {self.deployment.name} is no longer stored")
        elif deployment.state != State.READY:
            self._show_error(f"deployment {deployment.name} is {deployment.state}, not ready")
        else:
            self.app.switch_screen(BenchRunScreen(deployment, profile))

    def action_back(self) -> None:
        self.app.pop_screen()
