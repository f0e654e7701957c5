"""The TUI's words where the use cases speak the command line's: a remedy that names a flag of
`gpuops plan` or `deploy` ("choose another --port") names the TUI's way to do it instead (the plan
review's `e` and its edit word, `l`): the operator at the dashboard types no flags. Applied to every
notice (`GpuopsApp.notify`) and to the plan's warnings where the plan review shows them."""

from __future__ import annotations

import re

_EDIT = "plan review: e, then"
# (what the command line's words say, what the TUI says): remedies first, then the flags named
_WAYS: tuple[tuple[re.Pattern[str], str], ...] = (
    (re.compile(r"choose another --port\b"), f"choose another port ({_EDIT} port N)"),
    (re.compile(r"choose another --name\b"), f"choose another name ({_EDIT} name NEW)"),
    (re.compile(r"give --name\b"), f"give it a name of its own ({_EDIT} name NEW)"),
    (re.compile(r" \(refusing without --yes\)"), ""),
    (re.compile(r"--like (?=\S)"), "like "),
    (re.compile(r"--tp N for another\b"), "+ and - for another"),
    (re.compile(r"--tp (\d+)"), r"TP \1"),
    (re.compile(r"--name: "), "name: "),
    (re.compile(r"--download-dir (?=\S)"), "the download folder "),
    (re.compile(r"(?<![\w-])--replicas\b"), "replicas"),
    (re.compile(r"(?<![\w-])--hosts\b"), "nodes"),
)


def in_tui(text: str) -> str:
    """`text` with the command line's flags put as the TUI's ways (unchanged when it names none)."""
    if "--" not in text:
        return text
    for pattern, way in _WAYS:
        text = pattern.sub(way, text)
    return text
