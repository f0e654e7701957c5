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
    assert {"gpuops/sim/files/pynvml.py", "gpuops/sim/files/nvidia-smi",
            "gpuops/core/planning/sglang-data/sglang_versions.json"} <= set(names)
    entry = zipfile.ZipFile(wheel).read(next(n for n in names if n.endswith("entry_points.txt"))).decode()
    assert "gpuops = gpuops.cli.main:main" in entry
