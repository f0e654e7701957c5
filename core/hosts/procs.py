"""Ending a process on a host (a leftover GPU process, say), carefully.

The pid is checked against the command line the operator saw before any signal is
sent: a pid reused since the last sample is never signalled.
"""

from __future__ import annotations

from dataclasses import dataclass

from ..redact import MASK, redact
from .host import Host, script_source, shell_source
from .programs import proc_tree as proc_tree_program


@dataclass
class EndResult:
    pid: int
    ended: bool
    message: str


async def end_process(host: Host, pid: int, shown_command: str | None, grace_s: int = 10) -> EndResult:
    """SIGTERM `pid` on `host` if it still runs `shown_command`; wait up to `grace_s`."""
    if not isinstance(pid, int) or pid <= 1:
        raise ValueError(f"refusing to signal pid {pid!r}")
    # what was shown is redacted: the check is on the command line up to its first secret
    want = (shown_command or "").strip().split(MASK, 1)[0]
    res = await host.run(["sh", "-c", shell_source("end_process.sh"), "gpuops-end", str(pid), want,
                          str(int(grace_s))],
                         timeout=grace_s + 15)
    word, _, rest = res.stdout.strip().partition(" ")
    if word in ("ended", "gone"):
        return EndResult(pid, True, f"pid {pid} on {host.name} " + ("ended" if word == "ended" else "had already exited"))
    if word == "changed":
        return EndResult(pid, False, f"pid {pid} on {host.name} now runs {redact(rest)!r}: not signalled")
    if word == "alive":
        return EndResult(pid, False, f"pid {pid} on {host.name} is still running {grace_s}s after SIGTERM")
    if word == "refused":
        return EndResult(pid, False, f"no permission to signal pid {pid} on {host.name}")
    return EndResult(pid, False, f"could not end pid {pid} on {host.name}: {(res.stderr or res.stdout).strip()[:200]}")


@dataclass
class ProcessTree:
    pids: list[int]
    commands: dict[int, str]

    def ranks(self, title_prefix: str | None) -> list[int]:
        """The server's rank processes, known by the process title they give themselves
        (``Engine.rank_title``; None: the engine names none), in pid order."""
        if not title_prefix:
            return []
        return [p for p in self.pids if self.commands.get(p, "").startswith(title_prefix)]


async def process_tree(host: Host, pid: int, python: str) -> ProcessTree:
    """`pid` and its live descendants on `host` (an empty tree when `pid` is gone)."""
    if not isinstance(pid, int) or pid <= 0:
        raise ValueError(f"invalid pid {pid!r}")
    res = await host.run([python, "-c", script_source(proc_tree_program), str(pid)], timeout=20)
    pids, commands = [], {}
    for line in res.stdout.splitlines():
        p, _, command = line.partition("\t")
        if p.isdigit():
            pids.append(int(p))
            commands[int(p)] = command
    return ProcessTree(pids, commands)
