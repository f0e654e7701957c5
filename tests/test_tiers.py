"""The fast tier: tests/tiers.py names the slow tests, conftest marks them, `-m "not slow"` leaves them out."""

from __future__ import annotations

import ast
import functools
import subprocess
import sys
from pathlib import Path

from tests.tiers import HEAVY_FIRST, SLOW_FILES, SLOW_TESTS, is_slow

TESTS = Path(__file__).parent


@functools.cache
def _test_functions(file: Path) -> set[str]:
    tree = ast.parse(file.read_text())
    return {n.name for n in tree.body if isinstance(n, (ast.FunctionDef, ast.AsyncFunctionDef))
            and n.name.startswith("test")}


def test_every_slow_name_is_a_test_that_exists():
    """A renamed or removed test would silently move back into the fast tier's list: every name counts."""
    for file in SLOW_FILES:
        assert (TESTS / file).is_file(), file
    missing = []
    for entry in sorted(SLOW_TESTS):
        file, _, name = entry.partition("::")
        if not (TESTS / file).is_file() or name not in _test_functions(TESTS / file):
            missing.append(entry)
    assert missing == [], f"tests/tiers.py names tests that do not exist: {missing}"


def test_a_test_is_slow_by_its_file_its_name_or_the_real_parts_it_asks_for():
    some = next(iter(sorted(SLOW_TESTS)))
    file, name = some.split("::")
    assert is_slow(f"tests/{file}::{name}[param-1]") and is_slow(f"tests/{file}::{name}")
    assert is_slow(f"tests/{next(iter(SLOW_FILES))}::test_anything")
    assert is_slow("tests/test_config.py::test_x", ["tmp_path", "sshd"])
    assert is_slow("tests/test_config.py::test_x", ["ssh_home"]) and is_slow("tests/test_x.py::t", ["sglang_venv"])
    assert not is_slow("tests/test_config.py::test_x", ["tmp_path", "monkeypatch"])
    assert not is_slow(f"tests/{file}::{name}_and_more")  # a name, not a prefix


def test_the_fast_tier_leaves_out_what_is_slow_and_keeps_the_rest():
    out = subprocess.run([sys.executable, "-m", "pytest", "-q", "-p", "no:cacheprovider", "--co", "-m", "not slow",
                          "tests/test_download_life.py", "tests/test_cli.py"],
                         capture_output=True, text=True, timeout=120, cwd=TESTS.parent)
    assert out.returncode == 0, out.stdout + out.stderr
    ids = [ln for ln in out.stdout.splitlines() if "::" in ln]
    assert ids and all(ln.startswith("tests/test_cli.py::") for ln in ids), out.stdout  # that file: slow
    names = {ln.split("::")[1].split("[")[0] for ln in ids}
    assert "test_unreachable_host_is_reported_not_fatal" not in names  # named slow
    assert "test_version" in names
    src = (TESTS / "test_cli.py").read_text()
    for name in names:  # nothing that asks for the sshd
        body = src[src.index(f"def {name}("):]
        assert "ssh_home" not in body[:body.index(")")] and "sshd" not in body[:body.index(")")], name


def test_the_heaviest_files_are_collected_first_in_their_order():
    """A parallel run hands out whole files in collection order: HEAVY_FIRST's come first (each a file
    that exists), then the rest as before; a file's own tests keep their order."""
    missing = [f for f in HEAVY_FIRST if not (TESTS / f).is_file()]
    assert missing == [], f"tests/tiers.py HEAVY_FIRST names files that do not exist: {missing}"
    out = subprocess.run([sys.executable, "-m", "pytest", "-q", "-p", "no:cacheprovider", "--co",
                          "tests/test_tiers.py", "tests/test_cli.py", "tests/test_replicas.py", "tests/test_swap.py"],
                         capture_output=True, text=True, timeout=120, cwd=TESTS.parent)
    assert out.returncode == 0, out.stdout + out.stderr
    ids = [ln for ln in out.stdout.splitlines() if "::" in ln]
    files = list(dict.fromkeys(ln.split("::")[0] for ln in ids))
    heavy = sorted(["tests/test_replicas.py", "tests/test_swap.py"], key=lambda f: HEAVY_FIRST.index(f[6:]))
    assert files == [*heavy, "tests/test_tiers.py", "tests/test_cli.py"], files
    mine = [ln.split("::")[1] for ln in ids if ln.startswith("tests/test_tiers.py::")]
    assert mine == [n for n in _ordered_tests(TESTS / "test_tiers.py")], mine


def _ordered_tests(file: Path) -> list[str]:
    tree = ast.parse(file.read_text())
    return [n.name for n in tree.body if isinstance(n, (ast.FunctionDef, ast.AsyncFunctionDef))
            and n.name.startswith("test")]
