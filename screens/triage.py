"""Why is it stuck? A deployment's findings (log rules and host checks), their evidence and
fixes; `f` applies the selected finding's fix (its diff shown first), `n` restarts with
NCCL_DEBUG=INFO, `ctrl+k` ends a leftover GPU process (asks first), `r` runs triage again."""

from __future__ import annotations

from rich.text import Text
from textual import work
from textual.app import ComposeResult
from textual.binding import Binding
from textual.containers import Horizontal, VerticalScroll
from textual.widgets import Footer, Header, OptionList
from textual.widgets.option_list import Option

from ..core.deploy.store import Deployment
from .base import GpuopsScreen
from .confirm import ConfirmScreen
from ..tui.widgets import TextView

SEVERITY_STYLE = {"error": "bold red", "warning": "yellow", "info": "cyan"}


def diff_text(diff: list[tuple[str, str]]) -> Text:
    out = Text()
    for op, line in diff:
        out.append(f"{op} {line}\n", style="green" if op == "+" else "red" if op == "-" else "")
    return out


def ask_and_apply(screen: GpuopsScreen, deployment: Deployment, finding: dict) -> None:
    """Show the fix's diff against the deployment's plan and, on yes, have the app apply it
    (restart with the patched plan). Shared by the deployment and triage screens."""
    from ..core.diagnose.fixes import apply_patch

    fix = finding.get("fix") or {}
    if not fix.get("applicable") or not fix.get("plan_patch"):
        screen.notify(f"{finding.get('code')}: no fix gpuops can apply; {fix.get('summary') or ''}".strip(),
                      severity="warning")
        return
    try:
        _, diff = apply_patch(deployment.plan, fix["plan_patch"])
    except ValueError as exc:
        screen.notify(f"fix refused: {exc}", severity="error")
        return
    detail = Text(f"{fix.get('summary')}\n\n")
    detail.append_text(diff_text(diff))
    detail.append("\nThe server is stopped and started again with this plan.")

    def answered(yes: bool | None) -> None:
        if yes:
            screen.app.apply_fix(deployment.name, fix["plan_patch"],  # type: ignore[attr-defined]
                                 {"code": finding.get("code"), "summary": fix.get("summary")})

    screen.app.push_screen(ConfirmScreen(f"Apply the fix for {finding.get('code')} to {deployment.name}?",
                                         detail, yes="Restart with it"), answered)


class TriageScreen(GpuopsScreen):
    BINDINGS = [
        Binding("f", "apply_fix", "Apply fix"),
        Binding("n", "nccl_debug", "Restart w/ NCCL_DEBUG"),
        Binding("ctrl+k", "end_process", "End leftovers"),
        Binding("r", "rerun", "Re-run"),
        Binding("escape", "back", "Back", key_display="esc"),
    ]

    def __init__(self, deployment: Deployment, doc: dict | None = None):
        super().__init__(id="triage")
        self.deployment = deployment
        self.doc: dict | None = doc

    def compose(self) -> ComposeResult:
        yield Header()
        with Horizontal(id="triage-top"):
            yield OptionList(id="triage-findings")
            with VerticalScroll(id="triage-detail-box"):
                yield TextView(id="triage-detail")
        with VerticalScroll(id="triage-checks-box"):
            yield TextView(id="triage-checks")
        yield Footer()

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
        from ..core.diagnose.triage import triage_deployment
        from ..core.hosts.host import HostError

        d = self.deployment
        host = self.app.monitor.hosts.get(d.host)  # type: ignore[attr-defined]
        if host is None:
            self.notify(f"host {d.host} is not in the inventory", severity="error")
            return
        self.query_one("#triage-detail", TextView).set(Text("running the log rules and the host checks…"))
        try:
            self.doc = await triage_deployment(host, d.plan, host.config.journal_dir)
        except HostError as exc:
            self.query_one("#triage-detail", TextView).set(Text(f"triage failed: {exc.message}", style="red"))
            return
        self.show()

    @property
    def findings(self) -> list[dict]:
        return list((self.doc or {}).get("findings") or [])

    def show(self) -> None:
        doc = self.doc or {}
        options = self.query_one(OptionList)
        options.clear_options()
        for i, f in enumerate(self.findings):
            label = Text()
            label.append(f"{f.get('severity', '?'):<7} ", style=SEVERITY_STYLE.get(f.get("severity"), ""))
            label.append(f"{f.get('code')}")
            if (f.get("fix") or {}).get("applicable"):
                label.append("  [fix]", style="green")
            options.add_option(Option(label, id=str(i)))
        if self.findings:
            options.highlighted = 0
        else:
            self.query_one("#triage-detail", TextView).set(Text(
                f"no findings (phase {doc.get('phase') or '-'}, outcome {doc.get('outcome') or '-'})."
                " If it is stuck with nothing found: n restarts with NCCL_DEBUG=INFO."))
        checks = Text()
        if doc.get("log_error"):
            checks.append(f"The log could not be read: {doc['log_error']}\n\n", style="yellow")
        checks.append("Host checks\n", style="bold")
        for c in doc.get("checks") or []:
            mark, style = {True: ("ok  ", "green"), False: ("FAIL", "bold red"), None: ("n/a ", "dim")}[c["ok"]]
            checks.append(f"  [{mark}] ", style=style)
            checks.append(f"{c['name']}: {c['detail']}\n")
        for stack in doc.get("stacks") or []:
            checks.append(f"\npy-spy {stack.get('rank') or 'server'} (pid {stack.get('pid')})\n", style="bold")
            checks.append((stack.get("text") or stack.get("error") or "").rstrip() + "\n")
        self.query_one("#triage-checks", TextView).set(checks)

    def selected(self) -> dict | None:
        idx = self.query_one(OptionList).highlighted
        return self.findings[idx] if idx is not None and idx < len(self.findings) else None

    def on_option_list_option_highlighted(self, event: OptionList.OptionHighlighted) -> None:
        f = self.selected()
        if f is None:
            return
        out = Text()
        out.append(f"{f.get('code')} ({f.get('severity')})\n", style=SEVERITY_STYLE.get(f.get("severity"), "bold"))
        out.append(f"{f.get('summary')}\n\n")
        if f.get("evidence"):
            out.append("Evidence\n", style="bold")
            for ev in f["evidence"]:
                out.append(f"  {ev.get('source')}: ", style="dim")
                out.append(f"{ev.get('line') or ev.get('reading')}\n")
        fix = f.get("fix") or {}
        if fix.get("summary"):
            out.append("\nFix\n", style="bold")
            out.append(f"  {fix['summary']}\n")
            if fix.get("applicable") and fix.get("plan_patch"):
                from ..core.diagnose.fixes import apply_patch

                try:
                    _, diff = apply_patch(self.deployment.plan, fix["plan_patch"])
                    out.append("  f applies it:\n", style="green")
                    out.append_text(diff_text(diff))
                except ValueError as exc:
                    out.append(f"  (cannot be applied to this plan: {exc})\n", style="red")
        self.query_one("#triage-detail", TextView).set(out)

    # ---------------------------------------------------------------- actions

    def action_apply_fix(self) -> None:
        f = self.selected()
        if f is None:
            self.notify("no finding selected", severity="warning")
            return
        ask_and_apply(self, self.deployment, f)

    def action_nccl_debug(self) -> None:
        from ..core.diagnose.stall import NCCL_DEBUG_PATCH

        ask_and_apply(self, self.deployment, {"code": "nccl-debug", "fix": {
            "summary": "restart with NCCL's own logging on, to see which step NCCL waits in",
            "applicable": True, "plan_patch": NCCL_DEBUG_PATCH}})

    def action_end_process(self) -> None:
        """End the selected leftover-gpu-process finding's processes: asks first; each pid is
        signalled only while it still runs the command shown (core/procs.py)."""
        f = self.selected()
        rows = ((f or {}).get("data") or {}).get("processes") or []
        if not f or f.get("code") != "leftover-gpu-process" or not rows:
            self.notify("select a leftover-gpu-process finding first", severity="warning")
            return
        listing = "\n".join(f"GPU{r['gpu']}  pid {r['pid']}  {r.get('user') or '?'}  {(r.get('command') or '?')[:90]}"
                            for r in rows)

        def answered(yes: bool | None) -> None:
            if yes:
                self.end_processes(rows)

        self.app.push_screen(ConfirmScreen(f"End {len(rows)} process(es) on {self.deployment.host}?", listing,
                                           yes="End them"), answered)

    @work(exclusive=True, group="triage-end")
    async def end_processes(self, rows: list[dict]) -> None:
        from ..core.hosts.host import HostError
        from ..core.hosts.procs import end_process

        host = self.app.monitor.hosts.get(self.deployment.host)  # type: ignore[attr-defined]
        if host is None:
            return
        for pid in dict.fromkeys(r["pid"] for r in rows):
            command = next(r.get("command") for r in rows if r["pid"] == pid)
            try:
                result = await end_process(host, pid, command)
            except HostError as exc:
                self.notify(exc.message, severity="error")
                continue
            self.notify(result.message, severity="information" if result.ended else "error")
        self.action_rerun()

    def action_back(self) -> None:
        self.app.pop_screen()
