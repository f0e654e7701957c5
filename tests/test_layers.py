"""The structure checks hold on the checkout, and each one fails when its rule is broken: the
import-linter contracts (a forbidden import added to a copy of the tree), mypy on every package (a
type error added), ruff (an unused import added)."""

from __future__ import annotations

import json
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parent.parent
BIN = Path(sys.executable).parent
FOLDERS = ("core", "tui", "screens", "themes", "cli", "sim")


def tree_copy(tmp: Path) -> Path:
    """The source folders as the package `gpuops` (tmp/path/gpuops/core, …) and the pyproject."""
    pkg = tmp / "path" / "gpuops"
    for folder in FOLDERS:
        shutil.copytree(REPO / folder, pkg / folder, ignore=shutil.ignore_patterns("__pycache__"))
    shutil.copy(REPO / "pyproject.toml", tmp / "pyproject.toml")
    return pkg


def lint_imports(cwd: Path, path: Path | None = None) -> subprocess.CompletedProcess:
    # the copy first on the path (the editable install's finder comes after the path finder)
    env = {"PATH": str(BIN), "PYTHONPATH": str(path)} if path else None
    return subprocess.run([str(BIN / "lint-imports"), "--no-cache"], cwd=cwd, capture_output=True, text=True,
                          env=env)


def test_the_contracts_hold_on_the_checkout():
    out = lint_imports(REPO)
    assert out.returncode == 0, out.stdout + out.stderr
    assert "0 broken" in out.stdout and " broken" in out.stdout


@pytest.mark.parametrize("module, line, contract", [
    ("core/diagnose/stall.py", "import textual", "core never imports textual"),
    ("core/hosts/host.py", "from ..deploy import store", "layers"),
    ("core/planning/plan.py", "from ..diagnose import fixes", "layers"),
    ("core/domain.py", "from .hosts import host", "layers"),
    ("screens/help.py", "from ..core.deploy.store import Store", "screens reach deployments"),
    ("screens/help.py", "from ..core.deploy.watch import Watch", "screens reach deployments"),
    ("screens/help.py", "from ..core.deploy.launchers import open_launcher", "screens reach deployments"),
    ("screens/help.py", "from ..core.planning.hostfacts import facts_on_host", "screens reach deployments"),
    ("screens/help.py", "from ..core.hosts.host import HostError", "screens reach deployments"),
    ("screens/help.py", "from ..core.hosts import model_copies", "screens reach deployments"),
    ("tui/app.py", "from ..core.hosts.host import make_host", "screens reach deployments"),
    ("core/ops.py", "from ..sim import host", "nothing imports the simulated host"),
    ("tui/app.py", "from ..sim.host import setup_simhost", "nothing imports the simulated host"),
    ("screens/dashboard.py", "from ..cli import main", "layers"),
    ("screens/bench_run.py", "from .dashboard import DashboardScreen", "no circle between sibling modules"),
    ("core/deploy/watch.py", "from .router import watch_class", "no circle between sibling modules"),
])
def test_each_contract_fails_when_broken(tmp_path, module, line, contract):
    pkg = tree_copy(tmp_path)
    assert lint_imports(tmp_path, pkg.parent).returncode == 0  # the copy as it is: kept
    target = pkg / module
    text = target.read_text()
    head, sep, rest = text.partition("from __future__ import annotations\n")
    target.write_text(head + sep + line + "  # noqa\n" + rest)
    out = lint_imports(tmp_path, pkg.parent)
    assert out.returncode == 1, out.stdout
    broken = [ln for ln in out.stdout.splitlines() if " BROKEN" in ln]
    assert len(broken) == 1 and contract in broken[0], out.stdout


def test_mypy_is_clean_on_every_package_and_fails_on_a_type_error(tmp_path):
    """`mypy` as configured (no arguments: the packages of [tool.mypy], read through the link tree
    src/gpuops) is clean, and it finds an error in core, in the TUI, in a screen and in the CLI;
    in a screen, a use case that `Ops` lacks, called through the typed app (`gapp`); in core, what
    only --strict refuses (a bare `dict`)."""
    out = subprocess.run([str(BIN / "mypy")], cwd=REPO, capture_output=True, text=True)
    assert out.returncode == 0, out.stdout
    pkg = tree_copy(tmp_path)
    (tmp_path / "src").symlink_to("path")  # the copy's own link tree, where mypy_path points
    wrong = {
        "core/paths.py": "\nWRONG: int = 'text'\n",
        "core/units.py": "\n\ndef _bare(doc: dict) -> list:\n    return []\n",  # core is strict
        "tui/widgets.py": "\nWRONG_TOO: int = 'text'\n",
        "cli/main.py": "\nWRONG_THREE: str = 3\n",
        "screens/deployments.py": "\n\ndef _wrong(screen: DeploymentsScreen) -> None:\n"
                                  "    screen.gapp.ops.no_such_use_case()\n",
    }
    for module, text in wrong.items():
        (pkg / module).write_text((pkg / module).read_text() + text)
    out = subprocess.run([str(BIN / "mypy"), "--no-incremental"], cwd=tmp_path, capture_output=True, text=True)
    assert out.returncode == 1, out.stdout
    for module in wrong:
        assert f"gpuops/{module}:" in out.stdout, out.stdout
    assert '"Ops" has no attribute "no_such_use_case"' in out.stdout, out.stdout
    assert 'units.py:' in out.stdout and 'Missing type arguments for generic type "dict"' in out.stdout, out.stdout


def test_ruff_is_clean_and_fails_on_an_unused_import(tmp_path):
    out = subprocess.run([str(BIN / "ruff"), "check", "--no-cache", "."], cwd=REPO, capture_output=True, text=True)
    assert out.returncode == 0, out.stdout
    pkg = tree_copy(tmp_path)
    (pkg / "core" / "units.py").write_text("import os\n" + (pkg / "core" / "units.py").read_text())
    out = subprocess.run([str(BIN / "ruff"), "check", "--no-cache", "--config", str(REPO / "pyproject.toml"),
                          str(pkg)], cwd=tmp_path, capture_output=True, text=True)
    assert out.returncode == 1 and "F401" in out.stdout, out.stdout


# grimp's graph of gpuops (every import: at the top, inside a function, under TYPE_CHECKING) and its
# import circles: each strongly connected component of two or more modules, with the imports
# between its modules. Run in a subprocess, with `path` first on sys.path (before the editable
# install's src/): the checkout's link tree src/, or a copy's.
CIRCLES = """
import json, sys
import grimp

# gpuops' six packages, not the namespace `gpuops`: grimp reads every portion of a namespace (a
# copy's and the editable install's src/ alike) and keeps one module of each name, either one
graph = grimp.build_graph(*sys.argv[1:], cache_dir=None)
index, low, stack, on_stack, rings = {}, {}, [], set(), []


def visit(module):
    index[module] = low[module] = len(index)
    stack.append(module)
    on_stack.add(module)
    for imported in sorted(graph.find_modules_directly_imported_by(module)):
        if imported not in index:
            visit(imported)
            low[module] = min(low[module], low[imported])
        elif imported in on_stack:
            low[module] = min(low[module], index[imported])
    if low[module] == index[module]:
        ring = []
        while True:
            member = stack.pop()
            on_stack.discard(member)
            ring.append(member)
            if member == module:
                break
        if len(ring) > 1:
            rings.append(sorted(ring))


sys.setrecursionlimit(10_000)
for module in sorted(graph.modules):
    if module not in index:
        visit(module)
print(json.dumps([
    {"modules": ring,
     "imports": [f"{a} -> {b} (line {d['line_number']}: {d['line_contents']})"
                 for a in ring for b in sorted(graph.find_modules_directly_imported_by(a)) if b in ring
                 for d in graph.get_import_details(importer=a, imported=b)]}
    for ring in sorted(rings)]))
"""


def import_circles(path: Path) -> list[dict]:
    out = subprocess.run([sys.executable, "-c", CIRCLES, *(f"gpuops.{folder}" for folder in FOLDERS)], env={"PATH": str(BIN), "PYTHONPATH": str(path)},
                         capture_output=True, text=True)
    assert out.returncode == 0, out.stderr
    return json.loads(out.stdout)


def named(circles: list[dict]) -> str:
    return "".join(f"\nimport circle of {', '.join(c['modules'])}:\n  " + "\n  ".join(c["imports"])
                   for c in circles)


def test_no_import_circle_local_imports_included():
    circles = import_circles(REPO / "src")
    assert circles == [], named(circles)


def test_every_import_circle_is_named(tmp_path):
    """Circles added to a copy of the tree, each of a kind the graph must see: an import inside a
    function (cli), one under TYPE_CHECKING (tui), one at the top (core/planning), a ring of four
    screens (the dashboard's way to a benchmark and back); each is named, with its modules and the
    imports that close it."""
    pkg = tree_copy(tmp_path)
    assert import_circles(pkg.parent) == []  # the copy as it is: none
    added = {
        "cli/dashboard.py": "\n\ndef _local():\n    from .sim import cmd_demo  # noqa\n",
        "tui/commands.py": "\nif TYPE_CHECKING:\n    from .app import GpuopsApp  # noqa\n",
        "core/planning/fit.py": "\nfrom .plan import build_plan  # noqa\n",
        "screens/bench_run.py": "\nfrom .dashboard import DashboardScreen  # noqa\n",
    }
    for module, text in added.items():
        (pkg / module).write_text((pkg / module).read_text() + text)
    circles = import_circles(pkg.parent)
    rings = [c["modules"] for c in circles]
    assert rings == [["gpuops.cli.dashboard", "gpuops.cli.sim"],
                     ["gpuops.core.planning.fit", "gpuops.core.planning.plan"],
                     ["gpuops.screens.bench_launch", "gpuops.screens.bench_run", "gpuops.screens.bench_runs",
                      "gpuops.screens.dashboard"],
                     ["gpuops.tui.app", "gpuops.tui.commands"]], named(circles)
    said = named(circles)
    assert "gpuops.cli.dashboard -> gpuops.cli.sim (line" in said and "from .sim import cmd_demo" in said, said
    assert "gpuops.tui.commands -> gpuops.tui.app (line" in said and "from .app import GpuopsApp" in said, said
    assert "gpuops.core.planning.fit -> gpuops.core.planning.plan (line" in said, said
    assert "gpuops.screens.bench_run -> gpuops.screens.dashboard (line" in said, said
