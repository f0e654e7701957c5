"""Triage of a stored deployment: its log through the finding rules, plus the host checks.

The one place the document of ``gpuops triage --deployment NAME`` is put together, for the CLI
and the triage screen alike: ``{"schema": 1, phase, outcome, findings, checks, stacks}``.
"""

from __future__ import annotations

from ..deploy.deployer import log_follower, open_launcher
from ..hosts.host import Host
from ..deploy.journal import FollowError
from .phases import triage_log
from .host_checks import findings, run_checks, stacks


async def triage_deployment(host: Host, plan: dict, journal_dir: str | None = None) -> dict:
    """Read the deployment's whole log (its file, or its unit's journal), run the log rules
    with the deployment's plan (so fixes patch it) and the host checks with its running
    server's pid. A log that cannot be read is ``log_error`` (the checks still run); any other
    HostError propagates."""
    lau = await open_launcher(host, plan)
    follower = log_follower(host, lau, journal_dir, follow=False)
    log_error = None
    try:
        lines = [rec.text async for rec in follower.records() if not rec.notice]
    except FollowError as exc:  # no log (yet), or unreadable: the host checks still tell a lot
        lines, log_error = [], exc.message
    status = await lau.status()
    results = await run_checks(host, plan, server_pids=[status.pid] if status.running and status.pid else [])
    doc = triage_log(lines, plan)
    doc["findings"] = list(doc.get("findings") or []) + [f.to_json() for f in findings(results)]
    doc["checks"] = [r.to_json() for r in results]
    doc["stacks"] = stacks(results)
    doc["running"] = status.running
    doc["log_error"] = log_error
    return doc
