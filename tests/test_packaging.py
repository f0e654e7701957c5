"""Layout and packaging as the design card asks."""

from __future__ import annotations

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
    out = subprocess.run(
        [sys.executable, "-m", "pip", "wheel", "--no-deps", "-q", "-w", str(tmp_path), str(REPO)],
        capture_output=True, text=True,
    )
    assert out.returncode == 0, out.stderr
    wheel = next(tmp_path.glob("gpuops-*.whl"))
    names = zipfile.ZipFile(wheel).namelist()
    tops = {n.split("/")[0] for n in names}
    assert tops == {"gpuops", wheel.name.split("-")[0] + "-" + wheel.name.split("-")[1] + ".dist-info"}
    for sub in ("core", "tui", "screens", "themes"):
        assert f"gpuops/{sub}/__init__.py" in names
    assert "gpuops/themes/gpuops.tcss" in names
    assert "gpuops/core/reporter.py" in names
    entry = zipfile.ZipFile(wheel).read(next(n for n in names if n.endswith("entry_points.txt"))).decode()
    assert "gpuops = gpuops.tui.cli:main" in entry
