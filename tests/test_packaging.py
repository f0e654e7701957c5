"""Layout and packaging as the design card asks."""

from __future__ import annotations

import shutil
import subprocess
import sys
import zipfile
from pathlib import Path

REPO = Path(__file__).resolve().parent.parent
BIN = Path(sys.executable).parent


def test_core_never_imports_textual():
    out = subprocess.run([str(BIN / "lint-imports"), "--no-cache"], cwd=REPO, capture_output=True, text=True)
    assert out.returncode == 0, out.stdout + out.stderr
    assert "0 broken" in out.stdout and "KEPT" in out.stdout


def test_wheel_installs_only_under_the_gpuops_namespace(tmp_path):
    # Build from a copy of the tracked files: no stale build/ in the checkout, nothing untracked.
    src = tmp_path / "src"
    files = subprocess.run(["git", "ls-files", "-z"], cwd=REPO, capture_output=True, text=True, check=True)
    for name in filter(None, files.stdout.split("\0")):
        if (REPO / name).is_file():
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
    assert {"gpuops/sim/files/pynvml.py", "gpuops/sim/files/nvidia-smi",
            "gpuops/core/planning/sglang-data/sglang_versions.json"} <= set(names)
    entry = zipfile.ZipFile(wheel).read(next(n for n in names if n.endswith("entry_points.txt"))).decode()
    assert "gpuops = gpuops.cli.main:main" in entry


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
    assert pins["sglang"] == "0.5.23" and pins["sglang-router"] == "0.3.2"
    listing = ("from importlib.metadata import distributions\n"
               "for d in distributions(): print(d.metadata['Name'], d.version)")
    out = subprocess.run([str(sglang_venv / "bin" / "python"), "-I", "-c", listing],
                         capture_output=True, text=True, timeout=120, check=True)
    installed = dict(line.split(" ", 1) for line in out.stdout.splitlines())
    installed = {_canonical(dist): version for dist, version in installed.items()}
    for skip in ("pip", "setuptools", "wheel"):
        installed.pop(skip, None)
    assert installed == pins
