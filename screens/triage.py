"""Why is it stuck? A deployment's findings (log rules and host checks), their evidence and
fixes; `f` applies the selected finding's fix (its diff shown first), `n` restarts with
NCCL_DEBUG=INFO, `ctrl+k` ends a leftover GPU process (asks first), `r` runs triage again."""

from __future__ import annotations

from rich.text import Text
from textual import work
from textual.app import ComposeResult
from textual.binding import Binding
from textual.containers import Horizontal, VerticalScroll
from textual.widgets import Header, OptionList
from textual.widgets.option_list import Option

from ..core.domain import Deployment, Finding, Fix, TriageReport
from ..core.literal import literal
from .base import GpuopsScreen
from .confirm import ConfirmScreen
from ..tui.widgets import KeyFooter, TextView

SEVERITY_STYLE = {"error": "bold red", "warning": "yellow", "info": "cyan"}


def diff_text(diff: list[tuple[str, str]]) -> Text:
    out = Text()
    for op, line in diff:
        out.append(f"{op} {line}\n", style="green" if op == "+" else "red" if op == "-" else "")
    return out


def ask_and_apply(screen: GpuopsScreen, deployment: Deployment, finding: Finding) -> None:
    """Show the fix's diff against the deployment's plan and, on yes, have the app apply it
    (restart with the patched plan). Shared by the deployment and triage screens."""
    from ..core.ops import Refused

    fix = finding.fix
    if fix is None or not fix.applicable or not fix.plan_patch:
        screen.notify(f"{finding.code}: no fix gpuops can apply; {fix.summary if fix else ''}".strip(),
                      severity="warning")
        return
    try:
        diff = screen.gapp.ops.fix_diff(deployment.name, fix.plan_patch)
    except Refused as exc:
        screen.notify(str(exc), severity="error")
        return
    detail = Text(f"{fix.summary}\n\n")
    detail.append_text(diff_text(diff))
    detail.append("\nThe server is stopped and started again with this plan.")
    patch = fix.plan_patch

    def answered(yes: bool | str | None) -> None:
        if yes:
            screen.gapp.apply_fix(deployment.name, patch, code=finding.code, summary=fix.summary)

    screen.app.push_screen(ConfirmScreen(f"Apply the fix for {finding.code} to {deployment.name}?",
                                         detail, yes="Restart with it"), answered)


class TriageScreen(GpuopsScreen):
    BINDINGS = [
        Binding("f", "apply_fix", "Apply fix"),
        Binding("n", "nccl_debug", "Restart w/ NCCL_DEBUG"),
        Binding("ctrl+k", "end_process", "End leftovers"),
        Binding("r", "rerun", "Re-run"),
        Binding("escape", "back", "Back", key_display="esc"),
    ]

    def __init__(self, deployment: Deployment, report: TriageReport | None = None):
        super().__init__()
        self.deployment = deployment
        self.doc: TriageReport | None = report

    def compose(self) -> ComposeResult:
        yield Header()
        with Horizontal(id="triage-top"):
            yield OptionList(id="triage-findings")
            with VerticalScroll(id="triage-detail-box"):
                yield TextView(id="triage-detail")
        with VerticalScroll(id="triage-checks-box"):
            yield TextView(id="triage-checks")
        yield KeyFooter()

    def on_mount(self) -> None:
        d = self.deployment
        self.sub_title = f"triage · {d.name} on {d.host}"
        self.query_one(OptionList).focus()
        if self.doc is None:
            self.action_rerun()
        else:
            self.show()

    # ---------------------------------------------------------------- data

    @work(exclusive=True, group="triage")
    async def action_rerun(self) -> None:
        from ..core.api import HostError
        from ..core.ops import Refused

        self._detail(Text("running the log rules and the host checks…"))
        try:
            doc = await self.gapp.ops.triage(self.deployment.name)
        except (HostError, Refused) as exc:
            if self._open():
                self._detail(Text(f"triage failed: {literal(getattr(exc, 'message', exc))}", style="red"))
            return
        if not self._open():  # closed (esc) while the triage ran: nothing left to show it on
            return
        self.doc = doc
        self.show()

    def _open(self) -> bool:
        """Whether the screen still has its widgets: a pop removes the children before the screen (an
        answer that came in between found no OptionList, and the failed worker took the app down)."""
        return self.is_attached and bool(self.query(OptionList))

    @property
    def findings(self) -> list[Finding]:
        return list(self.doc.findings) if self.doc is not None else []

    def show(self) -> None:
        doc = self.doc
        options = self.query_one(OptionList)
        options.clear_options()
        for i, f in enumerate(self.findings):
            label = Text()
            label.append(f"{f.severity:<7} ", style=SEVERITY_STYLE.get(f.severity, ""))
            label.append(literal(f.code))
            if f.fix is not None and f.fix.applicable:
                label.append("  [fix]", style="green")
            options.add_option(Option(label, id=str(i)))
        options.set_class(not self.findings, "-empty")  # at 80x24 an empty list gives its room to the detail
        if self.findings:
            options.highlighted = 0
        else:
            self._detail(Text(
                f"no findings (phase {(doc.phase if doc else None) or '-'}, outcome {(doc.outcome if doc else None) or '-'})."
                " If it is stuck with nothing found: n restarts with NCCL_DEBUG=INFO."))
        checks = Text()
        if doc is not None and doc.log_error:
            checks.append(f"The log could not be read: {literal(doc.log_error)}\n\n", style="yellow")
        checks.append("Host checks\n", style="bold")
        for c in (doc.checks if doc is not None else None) or []:
            mark, style = {True: ("ok  ", "green"), False: ("FAIL", "bold red"), None: ("n/a ", "dim")}[c.ok]
            checks.append(f"  [{mark}] ", style=style)
            checks.append(f"{literal(c.name)}: {literal(c.detail)}\n")
        for stack in (doc.stacks if doc is not None else None) or []:
            checks.append(f"\npy-spy {stack.get('rank') or 'server'} (pid {stack.get('pid')})\n", style="bold")
            checks.append((stack.get("text") or stack.get("error") or "").rstrip() + "\n")
        view = self.query_one("#triage-checks", TextView)
        view.set(checks)
        view.refresh(layout=True)  # its lines wrap: as many lines as before may take other rows

    def selected(self) -> Finding | None:
        idx = self.query_one(OptionList).highlighted
        return self.findings[idx] if idx is not None and idx < len(self.findings) else None

    def on_option_list_option_highlighted(self, event: OptionList.OptionHighlighted) -> None:
        f = self.selected()
        if f is None:
            return
        from ..core.ops import Refused

        out = Text()
        out.append(f"{f.code} ({f.severity})\n", style=SEVERITY_STYLE.get(f.severity, "bold"))
        out.append(f"{literal(f.summary)}\n\n")
        if f.evidence:
            out.append("Evidence\n", style="bold")
            for ev in f.evidence:
                out.append(f"  {literal(ev.source)}: ", style="dim")
                out.append(f"{literal(ev.line or ev.reading)}\n")
        fix = f.fix
        if fix is not None and fix.summary:
            out.append("\nFix\n", style="bold")
            out.append(f"  {literal(fix.summary)}\n")
            if fix.applicable and fix.plan_patch:
                try:
                    diff = self.gapp.ops.fix_diff(self.deployment.name, fix.plan_patch)
                    out.append("  f applies it:\n", style="green")
                    out.append_text(diff_text(diff))
                except Refused as exc:
                    out.append(f"  (cannot be applied to this plan: {exc})\n", style="red")
        self._detail(out)

    def _detail(self, text: Text) -> None:
        """The detail pane's text, laid out again: a text of as many lines as the last one may wrap to
        more or fewer rows (cut, or blank rows left, in a narrow terminal)."""
        view = self.query_one("#triage-detail", TextView)
        view.set(text)
        view.refresh(layout=True)

    # ---------------------------------------------------------------- actions

    def action_apply_fix(self) -> None:
        f = self.selected()
        if f is None:
            self.notify("no finding selected", severity="warning")
            return
        ask_and_apply(self, self.deployment, f)

    def action_nccl_debug(self) -> None:
        from ..core.diagnose.stall import NCCL_DEBUG_PATCH

        ask_and_apply(self, self.deployment, Finding("nccl-debug", "info", "NCCL's own logging", fix=Fix(
            "restart with NCCL's own logging on, to see which step NCCL waits in", True, NCCL_DEBUG_PATCH)))

    def action_end_process(self) -> None:
        """End the selected leftover-gpu-process finding's processes: asks first; each pid is
        signalled only while it still runs the command shown (gpuops.core.hosts.procs)."""
        f = self.selected()
        rows = (f.data.get("processes") if f is not None else None) or []
        if f is None or f.code != "leftover-gpu-process" or not rows:
            self.notify("select a leftover-gpu-process finding first", severity="warning")
            return
        listing = "\n".join(f"GPU{r['gpu']}  pid {r['pid']}  {literal(r.get('user') or '?')}  "
                            f"{literal(r.get('command') or '?')[:90]}" for r in rows)

        def answered(yes: bool | str | None) -> None:
            if yes:
                self.end_processes(rows)

        self.app.push_screen(ConfirmScreen(f"End {len(rows)} process(es) on {self.deployment.host}?", listing,
                                           yes="End them"), answered)

    @work(exclusive=True, group="triage-end")
    async def end_processes(self, rows: list[dict]) -> None:
        from ..core.api import HostError
        from ..core.ops import NeedsConfirmation, Refused

        for pid in dict.fromkeys(r["pid"] for r in rows):
            command = next(r.get("command") for r in rows if r["pid"] == pid)
            try:
                result = await self.gapp.ops.end_process(self.deployment.host, pid, command,
                                                        confirmed=True)
            except (HostError, Refused) as exc:
                self.notify(getattr(exc, "message", str(exc)), severity="error")
                continue
            except NeedsConfirmation as exc:  # another deployment's server: not ended as a leftover
                self.notify(f"not ended: {exc.question} (s on the deployments view stops it)", severity="warning", timeout=10)
                continue
            self.notify(result.message, severity="information" if result.ended else "error")
        self.action_rerun()

    def action_back(self) -> None:
        self.app.pop_screen()
