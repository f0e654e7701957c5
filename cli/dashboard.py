"""The dashboard as a verb (`gpuops`, `gpuops dashboard`, and `gpuops demo` on a simulated host): the
app run on an inventory, and its exit status. Textual is imported when the dashboard starts, not
when this module is (the snapshot verbs import the CLI without it)."""

from __future__ import annotations

import sys
from typing import Any

from ..core.config import Inventory
from ..core.literal import literal


def run_dashboard(inv: Inventory, readonly: bool, simulated: bool = False, config: str | None = None) -> int:
    from ..core.config import resolve_config_path
    from ..tui.app import GpuopsApp

    path, _ = resolve_config_path(config)  # followed: a change, or a file made later, is picked up
    app = GpuopsApp(inv, readonly=readonly, simulated=simulated, config_path=str(path) if path else None)
    app.run()
    # What is left is freed as the process ends: the collector's last pass over it (an inventory of
    # 10,000 hosts: more than half a second between q and the exit) is not needed
    import gc

    gc.freeze()
    return dashboard_exit(app)


def dashboard_exit(app: Any) -> int:
    """The dashboard's exit status: 0 when it was quit, 1 when an error ended it, with one line on
    stderr saying which error and where its traceback was written (or, when no file could be
    written, the traceback itself after that line)."""
    if not app.return_code:
        return 0
    summary = app.crash_summary or f"exit status {app.return_code}"
    if app.crash_report:
        print(f"gpuops: the dashboard stopped on an error ({summary}); its traceback is in {literal(app.crash_report)}",
              file=sys.stderr)
    else:
        print(f"gpuops: the dashboard stopped on an error ({summary}); its traceback could not be written to a "
              f"file ({app.crash_report_error or 'unknown'}), here it is:", file=sys.stderr)
        print(app.crash_traceback, end="", file=sys.stderr)
    return 1
