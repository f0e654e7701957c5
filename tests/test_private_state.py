"""gpuops' state on the operator's machine is the operator's alone: the folder 0700, the store (and
its -wal and -shm) and ui.json 0600, made so and tightened when an older gpuops left them readable.
A second OS user tries to read them."""

from __future__ import annotations

import os
import shutil
import sqlite3
import stat
import subprocess
import tempfile
from pathlib import Path

import pytest

from tests.sshd import ensure_test_user
from tests.test_cli import GPUOPS


def mode(path: Path) -> int:
    return stat.S_IMODE(path.stat().st_mode)


def other_user_reads(path: Path) -> bool:
    """Whether the second OS user can read `path` (cat as that user)."""
    user = ensure_test_user()
    assert user is not None, "the test runs as root: it makes a second user"
    res = subprocess.run(["runuser", "-u", user, "--", "cat", str(path)], capture_output=True, timeout=30)
    return res.returncode == 0


@pytest.fixture
def open_home():
    """A folder every user may enter (as a home's .local/state is), unlike pytest's tmp (0700)."""
    root = Path(tempfile.mkdtemp(prefix="gpuops-private-"))
    root.chmod(0o755)
    yield root
    shutil.rmtree(root, ignore_errors=True)


def cli(root: Path, *args: str) -> subprocess.CompletedProcess:
    cfg = root / "config.toml"
    cfg.write_text("[hosts.here]\nlocal = true\n")
    env = dict(os.environ, XDG_STATE_HOME=str(root / "state"), XDG_CACHE_HOME=str(root / "cache"))
    env.pop("GPUOPS_CONFIG", None)
    return subprocess.run([GPUOPS, "--config", str(cfg), *args], capture_output=True, text=True, env=env,
                          timeout=120, stdin=subprocess.DEVNULL)


def test_a_new_store_is_the_operators_alone(open_home):
    (open_home / "state").mkdir(mode=0o755)  # XDG_STATE_HOME itself: as the system made it
    res = cli(open_home, "status")
    assert res.returncode == 0, res.stderr
    folder = open_home / "state" / "gpuops"
    db = folder / "gpuops.db"
    assert db.is_file()
    assert mode(folder) == 0o700 and mode(db) == 0o600, (oct(mode(folder)), oct(mode(db)))
    assert not other_user_reads(db)


def test_an_older_gpuops_readable_store_is_tightened(open_home):
    """The folder 0755, the database, its -wal and -shm 0644 (a connection holds them open, as a
    running gpuops does): the next gpuops leaves each readable by its user only."""
    folder = open_home / "state" / "gpuops"
    folder.mkdir(parents=True)
    folder.chmod(0o755)
    db = folder / "gpuops.db"
    held = sqlite3.connect(db)
    try:
        held.execute("PRAGMA journal_mode=WAL")
        held.execute("CREATE TABLE x (secret TEXT)")
        held.execute("INSERT INTO x VALUES ('the plan of every deployment')")
        held.commit()
        ui = folder / "ui.json"
        ui.write_text('{"theme": "gpuops-dark"}\n')
        files = [db, Path(f"{db}-wal"), Path(f"{db}-shm"), ui]
        for path in files:
            path.chmod(0o644)
            assert path.exists()
        assert other_user_reads(db)  # as it was: a second user copied it
        res = cli(open_home, "status")
        assert res.returncode == 0, res.stderr
        assert mode(folder) == 0o700
        for path in files:
            assert mode(path) == 0o600, (path, oct(mode(path)))
        # even were the folder opened again, the files themselves refuse the other user
        folder.chmod(0o755)
        for path in files:
            assert not other_user_reads(path), path
    finally:
        held.close()


def test_tightening_takes_nothing_from_the_owner(tmp_path):
    """A store opened in a folder given explicitly (Store(path), as tests/gpu/check_nccl_stall.py does) may
    share it with the operator's own files: tightening takes group's and others' bits away, never the owner's.
    The GPU proof's stand-in `python` beside its store was made 0600 and could no longer run (Permission denied)."""
    from gpuops.core.deploy.store import Store

    folder = tmp_path / "work"
    folder.mkdir()
    tool = folder / "python"
    tool.write_text("#!/bin/sh\necho ran\n")
    tool.chmod(0o755)
    Store(folder / "gpuops.db").close()
    assert mode(tool) == 0o700 and mode(folder / "gpuops.db") == 0o600, oct(mode(tool))
    assert subprocess.run([str(tool)], capture_output=True, text=True, timeout=30).stdout == "ran\n"


def test_ui_json_is_written_0600(open_home, monkeypatch):
    from gpuops.core.paths import save_ui_state, ui_state_path

    monkeypatch.setenv("XDG_STATE_HOME", str(open_home / "state"))
    save_ui_state(theme="gpuops-light")
    path = ui_state_path()
    assert path.read_text().count("gpuops-light") == 1
    assert mode(path) == 0o600 and mode(path.parent) == 0o700
    path.chmod(0o644)  # an older gpuops' file: written again, it is the user's alone
    save_ui_state(theme="gpuops-dark")
    assert mode(path) == 0o600
    path.parent.chmod(0o755)
    assert not other_user_reads(path)


SERVER = """
import os, sys, time
open(os.path.join(sys.argv[1], "made-by-the-server"), "w").close()
print("serving", flush=True)
time.sleep(60)
"""


async def test_the_process_launchers_files_on_the_host_are_its_users_alone(open_home):
    """The deployment's folder on the host (env, cmd, launch.py, log, pid, pid.start): 0700 and
    0600, unreadable by a second user; the server's own umask is left as it was."""
    import sys

    from gpuops.core.config import HostConfig
    from gpuops.core.deploy.launch import ProcessLauncher
    from gpuops.core.hosts.host import LocalHost
    from tests.test_hosts import wait_until
    from tests.test_launch import own_pids

    host = LocalHost(HostConfig(name="localhost", local=True, ssh=None, python=None, env=(("HOME", str(open_home)),)))
    marker = f"gpuops-private-{os.getpid()}"
    out = open_home / "server-out"
    out.mkdir(mode=0o755)
    launcher = ProcessLauncher(host, marker, [], {}, str(open_home))
    # (the launch.py path in its argv: it is written too)
    launcher.exec_argv = [sys.executable, "-c", SERVER, str(out), marker, launcher.launch_path]
    old = os.umask(0o022)
    try:
        await launcher.install({"GPUOPS_API_KEY": "sk-gpuops-not-for-others"})
        await launcher.start()
        assert await wait_until(lambda: "serving" in Path(launcher.log_path).read_text(), timeout=20)
        folder = Path(launcher.dir)
        files = sorted(p.name for p in folder.iterdir())
        assert {"env", "cmd", "log", "pid", "pid.start", "launch.py"} <= set(files), files
        assert mode(folder) == 0o700
        for path in folder.iterdir():
            assert mode(path) == 0o600, (path.name, oct(mode(path)))
        for parent in (folder.parent, folder.parent.parent):
            parent.chmod(0o755)
        folder.chmod(0o755)  # even were the folder opened, the files refuse the second user
        for name in ("env", "cmd", "log", "pid"):
            assert not other_user_reads(folder / name), name
        assert mode(out / "made-by-the-server") == 0o644  # the server's umask: the operator's, not 077
        assert (await launcher.stop()).detail == "stopped"
    finally:
        os.umask(old)
        for pid in own_pids(marker):
            os.kill(pid, 9)
        await host.close()
