"""docs/ARCHITECTURE.md stays true about what it names: every repo path in backticks exists, every
dotted module (`core.deploy.watch.Watch`, `gpuops.cli.sim`, `ops.deploy` under core) is found with
what it names in it, and every code name (`decode_event`, `RunView`) is in the product's code."""

from __future__ import annotations

import importlib
import re
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parent.parent
DOC = REPO / "docs" / "ARCHITECTURE.md"
FOLDERS = ("core", "tui", "screens", "themes", "cli", "sim")
TOP = (*FOLDERS, "tests", "scripts", "docs", "locks", "src")
# the modules under core/ the doc names without `core.` (`ops.deploy`, `deploy.watch.Watch`)
CORE_NAMES = {p.stem for p in (REPO / "core").iterdir() if p.suffix == ".py" or (p / "__init__.py").exists()}


def spans(text: str) -> list[str]:
    return re.findall(r"`([^`\n]+)`", text)


def code_words() -> set[str]:
    words: set[str] = set()
    for folder in FOLDERS:
        for path in (REPO / folder).rglob("*.py"):
            words.update(re.findall(r"\w+", path.read_text()))
    return words


def path_problem(span: str) -> str | None:
    """Why `span`, a repo path (`core/ops.py`, `tests/perf/x.py`, `scripts/`, `core/paths.check_path`,
    `programs/triage_probe.py`, a bare `launch.py`), is not there; None when it is (or is no path)."""
    span = span.split()[0].rstrip(",.:;")
    if span.startswith(("/", "$", "..", "~")) or "{" in span or "…" in span or "*" in span:
        return None  # a path on a host, or a pattern
    head, dot, attr = span.partition(".")
    if "/" in span and dot and not span.endswith((".py", ".sh", ".md", ".toml", ".txt", ".json", ".tcss", "/")) \
            and "/" not in attr and "." not in attr.split("(")[0] and re.fullmatch(r"[\w/]+", head):
        return module_problem(head.replace("/", ".") + "." + attr)  # core/paths.check_path
    if "/" in span:
        if span.split("/")[0] not in TOP and not span.endswith((".py", ".sh")):
            return None  # not a repo path (a layer list, a URL path)
        if (REPO / span).exists():
            return None
        if span.split("/")[0] not in TOP and any(REPO.glob(f"**/{span.rstrip('/')}")):
            return None  # relative to a folder the sentence names (programs/x.py under core/hosts)
        return f"{span}: no such path in the repository"
    if re.fullmatch(r"[\w-]+\.(py|sh)", span):
        if any(p for folder in (*FOLDERS, "tests", "scripts") for p in (REPO / folder).rglob(span)):
            return None
        return f"{span}: no such file in the repository"
    return None


def module_problem(span: str) -> str | None:
    """Why a dotted name (`core.ops`, `gpuops.tui.app`, `cli.common.UsageError`, `deploy.watch.Watch`,
    `Ops.swap` is not this) is not found: its longest importable prefix, then each further part
    defined in that module's source (a function, class, method or attribute)."""
    name = span.split("(")[0].rstrip(".,:;")
    parts = name.split(".")
    if parts[0] == "gpuops":
        parts = parts[1:]
    elif parts[0] in CORE_NAMES and parts[0] not in FOLDERS:
        parts = ["core", *parts]
    if len(parts) < 2 or parts[0] not in FOLDERS or not all(p.isidentifier() for p in parts):
        return None
    for cut in range(len(parts), 0, -1):
        module = "gpuops." + ".".join(parts[:cut])
        try:
            found = importlib.import_module(module)
        except ModuleNotFoundError as exc:
            if exc.name and not module.startswith(exc.name):
                raise
            continue
        source = Path(found.__file__ or "").read_text()
        for attr in parts[cut:]:
            if not re.search(rf"\b(def|class)\s+{attr}\b|^\s*(self\.)?{attr}\s*[:=]|\b{attr}\s*=", source, re.M):
                return f"{span}: {module} has no {attr}"
        return None if cut > 1 or len(parts) == 1 else f"{span}: no module {'.'.join(parts[:2])}"
    return f"{span}: no such module"


def test_every_path_and_module_the_doc_names_exists():
    problems = [p for s in spans(DOC.read_text()) for p in (path_problem(s), module_problem(s)) if p]
    assert not problems, "\n".join(problems)


def test_every_code_name_the_doc_names_is_in_the_code():
    """A backticked identifier that can only be code (snake_case with an underscore, or CamelCase)
    occurs in the product's source: a function, class, field or value renamed or removed is found."""
    words = code_words()
    names = {s for s in spans(DOC.read_text()) if re.fullmatch(r"_?[a-z]+(_[a-z0-9]+)+|[A-Z][a-z]+[A-Z]\w*", s)}
    assert names  # (the doc names code)
    missing = sorted(n for n in names if n not in words)
    assert not missing, f"named in docs/ARCHITECTURE.md, not in the code: {missing}"


@pytest.mark.parametrize("span, problem", [
    ("scripts/checks.sh", "no such path"),
    ("core/deploy/nowhere.py", "no such path"),
    ("nowhere.py", "no such file"),
    ("core.deploy.nowhere", "gpuops.core.deploy has no nowhere"),
    ("core.nowhere.x", "gpuops.core has no nowhere"),
    ("gpuops.core.ops.no_such_use_case", "has no no_such_use_case"),
    ("deploy.watch.NoSuchWatch", "has no NoSuchWatch"),
    ("core/paths.no_such_check", "has no no_such_check"),
])
def test_a_stale_name_is_found(span, problem):
    found = path_problem(span) or module_problem(span)
    assert found is not None and problem in found, found


@pytest.mark.parametrize("span", ["core/ops.py", "core/hosts/programs/", "programs/triage_probe.py", "launch.py",
                                  "gpuops.cli.sim", "core.literal.exact", "ops.deploy", "deploy.watch.Watch",
                                  "core/paths.check_path", "cli.plan.make_plan(inv, PlanRequest)",
                                  "/etc/gpuops/{name}.env", "Ops.swap"])
def test_a_true_name_passes(span):
    assert path_problem(span) is None and module_problem(span) is None
