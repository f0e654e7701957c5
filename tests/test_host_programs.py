"""The programs gpuops sends to hosts are files under core/hosts/programs/, not strings in the modules
that send them: each one standard library only and Python 3.6 grammar (hosts run old pythons), sent as
``python -c SOURCE ARGS...`` (the text of :func:`script_source`), and each run here for real with the
argv its caller gives it."""

from __future__ import annotations

import ast
import json
import os
import socket
import subprocess
import sys
import time
from pathlib import Path

import pytest

from gpuops.core.hosts.host import script_source, shell_source
from gpuops.core.engines.sglang.programs import version as sglang_version
from gpuops.core.hosts.programs import folder_size, free_space, listening, model_config, port_free, proc_tree

ROOT = Path(__file__).resolve().parent.parent
PROGRAMS = ROOT / "core" / "hosts" / "programs"
# where programs live: gpuops' own, and each engine's (core/engines/NAME/programs/)
PROGRAM_DIRS = (PROGRAMS, *sorted((ROOT / "core" / "engines").glob("*/programs")))
PRODUCT = ("core", "cli", "tui", "screens")


def run(module, *args: str, python: str = sys.executable, timeout: float = 60) -> subprocess.CompletedProcess:
    return subprocess.run([python, "-c", script_source(module), *args], capture_output=True, text=True,
                          timeout=timeout)


def _imports(tree: ast.AST, guarded: bool = False):
    """(node, module names, inside a try) for every import of `tree`."""
    for child in ast.iter_child_nodes(tree):
        if isinstance(child, ast.Import):
            yield child, [a.name for a in child.names], guarded
        elif isinstance(child, ast.ImportFrom):
            yield child, [("." * child.level) + (child.module or "")], guarded
        yield from _imports(child, guarded or isinstance(child, ast.Try))


@pytest.mark.parametrize("path", sorted(p for d in PROGRAM_DIRS for p in d.glob("*.py")),
                         ids=lambda p: str(p.relative_to(ROOT / "core")))
def test_each_program_is_python_3_6_and_standard_library_only(path):
    """A program imports the standard library; anything else (pynvml, sglang: what it asks about)
    only inside a try, and ``.common`` only, which is inlined when sent."""
    tree = ast.parse(path.read_text(), str(path), feature_version=(3, 6))
    for node, names, guarded in _imports(tree):
        for name in names:
            if name.startswith("."):
                assert name == ".common", f"{path.name}:{node.lineno} imports {name}"
            elif not guarded:
                assert name.split(".")[0] in sys.stdlib_module_names, f"{path.name}:{node.lineno} imports {name}"
    # what is sent parses as one standalone file too (common.py inlined)
    if path.name not in ("__init__.py", "common.py"):
        ast.parse(script_source(_module(path)), path.name, feature_version=(3, 6))


def _module(path: Path):
    import importlib

    return importlib.import_module("gpuops." + ".".join(path.relative_to(ROOT).with_suffix("").parts))


def _python_programs_in_strings(path: Path) -> list[str]:
    """String constants of `path` of several lines that parse as Python and import something."""
    found = []
    for node in ast.walk(ast.parse(path.read_text(), str(path))):
        if not (isinstance(node, ast.Constant) and isinstance(node.value, str) and node.value.count("\n") >= 3):
            continue
        try:
            code = ast.parse(node.value)
        except (SyntaxError, ValueError):
            continue
        if any(isinstance(n, (ast.Import, ast.ImportFrom)) for n in ast.walk(code)):
            found.append(f"{path.relative_to(ROOT)}:{node.lineno}")
    return found


def test_no_python_program_is_a_string_literal_in_the_product():
    """Linters and these tests see a program only when it is a file: none hides in a string."""
    offenders = []
    for top in PRODUCT:
        for path in sorted((ROOT / top).rglob("*.py")):
            if not any(d in path.parents for d in PROGRAM_DIRS):
                offenders += _python_programs_in_strings(path)
    assert not offenders, "python programs in string literals (move them to core/hosts/programs/): " + \
        ", ".join(offenders)


def test_free_space_is_measured_at_the_nearest_existing_folder(tmp_path):
    missing = tmp_path / "not" / "yet"
    out = run(free_space, str(tmp_path), str(missing))
    assert out.returncode == 0, out.stderr
    free = json.loads(out.stdout)
    st = os.statvfs(tmp_path)
    assert set(free) == {str(tmp_path), str(missing)}
    # the same file system, measured twice a moment apart: within 64 MiB of each other and of ours
    assert abs(free[str(missing)] - free[str(tmp_path)]) < 64 << 20
    assert abs(free[str(tmp_path)] - st.f_bavail * st.f_frsize) < 64 << 20


def test_listening_names_the_port_and_its_holder():
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        s.listen()
        port = s.getsockname()[1]
        out = run(listening)
    assert out.returncode == 0, out.stderr
    ports = json.loads(out.stdout)["listening"]
    assert ports[str(port)].startswith(f"pid {os.getpid()} (")


def test_a_port_is_free_to_bind_until_someone_listens(tmp_path):
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
        s.listen()
        held = run(port_free, "127.0.0.1", str(port))
    assert held.returncode == 1 and "in use" in held.stdout
    free = run(port_free, "127.0.0.1", str(port))
    assert free.returncode == 0 and free.stdout == ""


def test_model_config_reads_a_folder_and_an_hf_cache_entry(tmp_path):
    snap = tmp_path / "models--o--m" / "snapshots" / "abc"
    snap.mkdir(parents=True)
    (snap / "config.json").write_text(json.dumps({"architectures": ["X"]}))
    (snap / "model-00001-of-00001.safetensors").write_bytes(b"\0" * 123)
    (snap / "model.safetensors.index.json").write_text(json.dumps({"weight_map": {}}))
    out = run(model_config, str(tmp_path / "models--o--m"))
    assert out.returncode == 0, out.stderr
    assert json.loads(out.stdout) == {"config": {"architectures": ["X"]}, "index": {"weight_map": {}},
                                      "sizes": {"model-00001-of-00001.safetensors": 123}, "dir": str(snap), "tokenizer": None,
                                      "chat_template": None}
    assert run(model_config, str(tmp_path / "empty")).returncode == 3


def test_folder_size_sums_the_files_below(tmp_path):
    (tmp_path / "a" / "b").mkdir(parents=True)
    (tmp_path / "a" / "x").write_bytes(b"1" * 1000)
    (tmp_path / "a" / "b" / "y").write_bytes(b"2" * 24)
    out = run(folder_size, str(tmp_path))
    assert out.returncode == 0 and out.stdout == "1024\n", out.stderr


def test_proc_tree_lists_a_process_and_its_children():
    child = subprocess.Popen([sys.executable, "-c", "import subprocess, sys; "
                              "subprocess.run([sys.executable, '-c', 'import sys; sys.stdin.read()'])"],
                             stdin=subprocess.PIPE)
    try:
        deadline = time.monotonic() + 30
        while True:
            rows = [line.split("\t") for line in run(proc_tree, str(child.pid)).stdout.splitlines()]
            if len(rows) >= 2 or time.monotonic() > deadline:
                break
        assert rows[0][0] == str(child.pid) and "subprocess.run" in rows[0][1]
        assert len(rows) == 2 and "sys.stdin.read()" in rows[1][1]
    finally:
        child.stdin.close()  # the grandchild reads to its end
        child.kill()
        child.wait()
    assert run(proc_tree, str(child.pid)).stdout == ""


def test_sglang_version_exits_3_without_sglang_and_names_it_with():
    out = run(sglang_version)  # this venv has no sglang
    assert out.returncode == 3 and out.stdout == ""
    venv = os.environ.get("GPUOPS_TEST_SGLANG_VENV")
    if not venv:
        pytest.skip("GPUOPS_TEST_SGLANG_VENV is not set: the half with a real SGLang is not run")
    python = str(Path(venv) / "bin" / "python")
    out = run(sglang_version, python=python)
    want = subprocess.run([python, "-c", "from importlib.metadata import version; print(version('sglang'))"],
                          capture_output=True, text=True, timeout=60).stdout.strip()
    assert out.returncode == 0 and out.stdout == want and want


@pytest.mark.parametrize("path", sorted(PROGRAMS.glob("*.sh")), ids=lambda p: p.name)
def test_each_shell_program_parses_as_posix_sh(path):
    out = subprocess.run(["sh", "-n", str(path)], capture_output=True, text=True, timeout=30)
    assert out.returncode == 0, out.stderr
    assert shell_source(path.name) == path.read_text()


def _end(pid: int, want: str, grace: int = 5) -> tuple[int, str]:
    out = subprocess.run(["sh", "-c", shell_source("end_process.sh"), "gpuops-end", str(pid), want, str(grace)],
                         capture_output=True, text=True, timeout=30)
    return out.returncode, out.stdout.strip()


def test_end_process_checks_the_command_line_then_ends_the_process():
    proc = subprocess.Popen([sys.executable, "-c", "import time; time.sleep(600)", "gpuops-end-test"])
    try:
        shown = f"{sys.executable} -c import time; time.sleep(600) gpuops-end-test"
        assert _end(proc.pid, "/not/this/program") == (3, f"changed {shown}")  # another program: left alone
        assert proc.poll() is None
        assert _end(proc.pid, shown[:20]) == (0, "ended")
        assert proc.wait(timeout=10) == -15  # SIGTERM
    finally:
        proc.kill()
        proc.wait()
    assert _end(proc.pid, "") == (0, "gone")


def test_end_process_says_alive_when_sigterm_is_ignored():
    proc = subprocess.Popen([sys.executable, "-c", "import signal, sys, time; signal.signal(signal.SIGTERM, "
                             "signal.SIG_IGN); print('ready', flush=True); time.sleep(600)"], stdout=subprocess.PIPE,
                            text=True)
    try:
        assert proc.stdout is not None and proc.stdout.readline() == "ready\n"
        assert _end(proc.pid, "", grace=1) == (5, "alive")
    finally:
        proc.kill()
        proc.wait()
