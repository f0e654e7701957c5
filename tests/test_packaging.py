"""Layout and packaging as the design card asks."""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
import sysconfig
import tomllib
import zipfile
from pathlib import Path

REPO = Path(__file__).resolve().parent.parent
BIN = Path(sys.executable).parent
FOLDERS = ("core", "tui", "screens", "themes", "cli", "sim")


def test_core_never_imports_textual():
    out = subprocess.run([str(BIN / "lint-imports"), "--no-cache"], cwd=REPO, capture_output=True, text=True)
    assert out.returncode == 0, out.stdout + out.stderr
    assert "0 broken" in out.stdout and "KEPT" in out.stdout


def test_wheel_installs_only_under_the_gpuops_namespace(tmp_path):
    # Build from a copy of the tracked files: no stale build/ in the checkout, nothing untracked.
    src = tmp_path / "src"
    files = subprocess.run(["git", "ls-files", "-z"], cwd=REPO, capture_output=True, text=True, check=True)
    for name in filter(None, files.stdout.split("\0")):
        if (REPO / name).is_symlink():  # the link tree src/gpuops/<folder> -> ../../<folder>
            (src / name).parent.mkdir(parents=True, exist_ok=True)
            os.symlink(os.readlink(REPO / name), src / name)
        elif (REPO / name).is_file():
            (src / name).parent.mkdir(parents=True, exist_ok=True)
            shutil.copy2(REPO / name, src / name)
    out = subprocess.run(
        [sys.executable, "-m", "pip", "wheel", "--no-deps", "-q", "-w", str(tmp_path), str(src)],
        capture_output=True, text=True,
    )
    assert out.returncode == 0, out.stderr
    wheel = next(tmp_path.glob("gpuops-*.whl"))
    names = zipfile.ZipFile(wheel).namelist()
    tops = {n.split("/")[0] for n in names}
    assert tops == {"gpuops", wheel.name.split("-")[0] + "-" + wheel.name.split("-")[1] + ".dist-info"}
    for sub in ("core", "tui", "screens", "themes", "cli", "sim"):
        assert f"gpuops/{sub}/__init__.py" in names
    assert "gpuops/themes/gpuops.tcss" in names
    assert "gpuops/core/hosts/programs/reporter.py" in names
    assert "gpuops/core/hosts/programs/end_process.sh" in names  # a shell program is package data
    assert {"gpuops/sim/files/pynvml.py", "gpuops/sim/files/nvidia-smi", "gpuops/sim/files/demo_server.py",
            "gpuops/core/engines/sglang/data/sglang_versions.json", "gpuops/core/engines/sglang/data/server_args.json",
            "gpuops/core/engines/sglang/simulated.py"} <= set(names)
    # the product's simulator is the small demo server: the tests' scenario engine stays out of the wheel
    assert not [n for n in names if "sglang_sim" in n or "simhost" in n], names
    entry = zipfile.ZipFile(wheel).read(next(n for n in names if n.endswith("entry_points.txt"))).decode()
    assert "gpuops = gpuops.cli.main:main" in entry


def test_the_editable_install_is_a_plain_path_to_the_link_tree():
    """What lets every tool (mypy, import-linter, an editor's go-to-definition) resolve `gpuops.*`
    to the checkout's folders: the editable install adds one directory to sys.path (a `.pth` line,
    not an import hook that only a running python sees), the committed link tree `src/`, where
    `gpuops/<folder>` is the top-level folder itself; a file added to a folder is there at once."""
    site = Path(sysconfig.get_paths()["purelib"])
    lines = [ln.strip() for pth in site.glob("*gpuops*.pth") for ln in pth.read_text().splitlines()]
    assert lines and not [ln for ln in lines if ln.startswith("import")], lines
    assert [Path(ln) for ln in lines] == [REPO / "src"]
    for folder in FOLDERS:
        link = REPO / "src" / "gpuops" / folder
        assert link.is_symlink() and link.resolve() == REPO / folder
    out = subprocess.run([sys.executable, "-c", "import gpuops.tui.app, gpuops.core.ops; print(gpuops.tui.app.__file__)"],
                         cwd="/", capture_output=True, text=True)
    assert out.returncode == 0, out.stderr
    assert Path(out.stdout.strip()).resolve() == REPO / "tui" / "app.py"


def test_every_package_of_the_checkout_is_in_the_wheel_list():
    """A package folder (one with an __init__.py) added under a top-level folder is importable from
    the checkout at once; the wheel has it only when `[tool.setuptools] packages` names it."""
    listed = set(tomllib.loads((REPO / "pyproject.toml").read_text())["tool"]["setuptools"]["packages"])
    found = {"gpuops"} | {
        ".".join(("gpuops", *init.parent.relative_to(REPO).parts))
        for folder in FOLDERS for init in (REPO / folder).rglob("__init__.py")
    }
    assert found == listed


def _lock(name: str) -> dict[str, str]:
    pins = {}
    for line in (REPO / "locks" / name).read_text().splitlines():
        if line and not line.startswith("#"):
            dist, _, version = line.partition("==")
            assert version and " @ " not in line, f"locks/{name}: {line!r} is not NAME==VERSION"
            pins[_canonical(dist)] = version
    return pins


def _canonical(name: str) -> str:
    import re

    return re.sub(r"[-_.]+", "-", name).lower()


def test_the_test_environment_is_exactly_the_lock():
    """A release upstream changes nothing until the lock is refreshed on purpose (scripts/lock.sh):
    every distribution in this environment is the lock's, at the lock's version, and a dependency
    added to pyproject.toml without refreshing the lock fails here."""
    from importlib.metadata import distributions

    pins = _lock("gpuops.txt")
    installed = {_canonical(d.metadata["Name"]): d.version for d in distributions()}
    for skip in ("gpuops", "pip", "setuptools", "wheel"):
        installed.pop(skip, None)
    assert installed == pins


def test_the_sglang_host_venv_is_exactly_its_lock(sglang_venv):
    pins = _lock("sglang-host.txt")
    assert pins["sglang"] == "0.5.23" and pins["sglang-router"] == "0.3.2" and pins["smg"] == "1.13.0"
    listing = ("from importlib.metadata import distributions\n"
               "for d in distributions(): print(d.metadata['Name'], d.version)")
    out = subprocess.run([str(sglang_venv / "bin" / "python"), "-I", "-c", listing],
                         capture_output=True, text=True, timeout=120, check=True)
    installed = dict(line.split(" ", 1) for line in out.stdout.splitlines())
    installed = {_canonical(dist): version for dist, version in installed.items()}
    for skip in ("pip", "setuptools", "wheel"):
        installed.pop(skip, None)
    assert installed == pins
