"""The store never fails as a traceback, and one deploy per name at a time.

Real SQLite files corrupted the ways they get corrupted, a state folder that is read-only or a file,
a full disk (a tmpfs of a few MiB) at open and in the middle of a deploy; two deploys of one name at
once over a real sshd to the simulated host; a name whose deploy failed before it installed
anything. Each probe: the exit code, one line on stderr naming the file and what to do, and that
nothing was lost or written."""

from __future__ import annotations

import json
import os
import shutil
import signal
import sqlite3
import subprocess
import tempfile
import time
from contextlib import contextmanager
from pathlib import Path

import pytest

from gpuops.core.deploy.store import Store
from tests.plans import make_plan
from tests.sshd import free_port, ssh_user_home
from tests.test_cli import GPUOPS

LOCAL = '[hosts.here]\nlocal = true\n'


def gpuops(cfg: Path, env: dict, *args: str, timeout: float = 120) -> subprocess.CompletedProcess:
    return subprocess.run([GPUOPS, "--config", str(cfg), *args], capture_output=True, text=True, env=env,
                          timeout=timeout, stdin=subprocess.DEVNULL)


def one_line(res: subprocess.CompletedProcess) -> str:
    err = res.stderr.strip()
    assert "Traceback" not in res.stderr and "\n" not in err, res.stderr
    return err


@pytest.fixture
def local(tmp_path):
    cfg = tmp_path / "config.toml"
    cfg.write_text(LOCAL)
    state = tmp_path / "state"
    env = dict(os.environ, XDG_STATE_HOME=str(state), XDG_CACHE_HOME=str(tmp_path / "cache"), HF_HUB_OFFLINE="1")
    env.pop("GPUOPS_CONFIG", None)
    return cfg, env, state / "gpuops" / "gpuops.db"


def a_store(db: Path) -> None:
    """A store holding one stopped deployment and its events."""
    store = Store(db)
    store.add_deployment("here", make_plan("kept"))
    store.set_state("kept", "stopped")
    store.release_lease("kept")  # as a deploy does once its server started
    store.close()
    assert not Path(f"{db}-wal").exists() or Path(f"{db}-wal").stat().st_size == 0


def corrupt(db: Path, how: str) -> None:
    if how == "garbage":
        db.write_bytes(os.urandom(8192))
    elif how == "truncated":
        data = db.read_bytes()
        db.write_bytes(data[: len(data) // 2])
    elif how == "newer-schema":
        con = sqlite3.connect(db)
        con.execute("PRAGMA user_version = 99")
        con.close()
    elif how == "a-directory":
        db.unlink()
        db.mkdir()
    elif how == "bad-json-row":
        con = sqlite3.connect(db)
        con.execute("UPDATE deployments SET plan_json = '{oops' WHERE name = 'kept'")
        con.commit()
        con.close()
    elif how == "dropped-table":
        con = sqlite3.connect(db)
        con.execute("DROP TABLE events")
        con.commit()
        con.close()


def snapshot(path: Path) -> dict[str, bytes]:
    root = path.parent
    return {str(p): p.read_bytes() for p in root.rglob("*") if p.is_file()}


VERBS = (["status"], ["status", "kept"], ["logs", "kept"], ["stop", "kept", "--yes"], ["bench", "list"],
         ["forget", "kept", "--yes"], ["deploy", "PLAN", "--host", "here", "--yes"])


def run_verb(cfg: Path, env: dict, verb: list[str]) -> subprocess.CompletedProcess:
    """`verb`, its PLAN a plan JSON of a deployment named `kept` (deploy reaches the store first)."""
    if "PLAN" in verb:
        plan = cfg.parent / "kept.plan.json"
        plan.write_text(json.dumps(make_plan("kept").to_json()))
        verb = [str(plan) if a == "PLAN" else a for a in verb]
    return gpuops(cfg, env, *verb)


@pytest.mark.parametrize("how", ["garbage", "truncated", "newer-schema", "a-directory", "bad-json-row",
                                 "dropped-table"])
def test_a_damaged_store_is_one_line_for_every_verb(local, how):
    cfg, env, db = local
    a_store(db)
    corrupt(db, how)
    before = snapshot(db)
    failed = 0
    for verb in VERBS:
        res = run_verb(cfg, env, verb)
        line = one_line(res)
        if res.returncode == 0:
            continue  # a verb that never reads the damaged part (bench list, with only events gone)
        failed += 1
        if verb[0] == "deploy" and res.returncode == 2:
            continue  # refused by a check before the store was touched (no SGLang on this machine)
        assert res.returncode == 1, (verb, res)
        assert str(db) in line and ("move it aside" in line or "upgrade gpuops" in line), (verb, line)
        assert snapshot(db) == before, verb  # nothing written, nothing lost
    assert failed >= 5, how  # the verbs that read deployments all said so


def test_a_newer_schema_says_upgrade(local):
    cfg, env, db = local
    a_store(db)
    corrupt(db, "newer-schema")
    res = gpuops(cfg, env, "status")
    assert res.returncode == 1 and "written by a newer gpuops (schema 99); upgrade gpuops" in one_line(res)


def test_a_store_locked_too_long_is_one_line_and_nothing_changes(local):
    cfg, env, db = local
    a_store(db)
    holder = sqlite3.connect(db, isolation_level=None)
    holder.execute("BEGIN IMMEDIATE")  # another gpuops in the middle of a write, for longer than we wait
    try:
        res = gpuops(cfg, env, "forget", "kept", "--yes")
    finally:
        holder.execute("ROLLBACK")
        holder.close()
    assert res.returncode == 1 and f"{db} is locked by another gpuops" in one_line(res)
    assert Store(db).deployment("kept") is not None  # nothing was removed


@contextmanager
def tmpfs(size: str):
    root = Path(tempfile.mkdtemp(prefix="gpuops-tmpfs-"))
    res = subprocess.run(["mount", "-t", "tmpfs", "-o", f"size={size},mode=0755", "tmpfs", str(root)],
                         capture_output=True, text=True)
    if res.returncode != 0:
        root.rmdir()
        pytest.skip(f"this machine does not let the tests mount a tmpfs ({res.stderr.strip()})")
    try:
        yield root
    finally:
        subprocess.run(["umount", "-l", str(root)])
        shutil.rmtree(root, ignore_errors=True)


def fill(root: Path) -> Path:
    """Fill the file system of `root` to the last byte."""
    filler = root / "filler"
    fd = os.open(filler, os.O_WRONLY | os.O_CREAT, 0o600)
    try:
        for size in (65536, 1):
            while True:
                try:
                    os.write(fd, b"\0" * size)
                except OSError:
                    break
    finally:
        os.close(fd)
    return filler


READ_VERBS = (["status"], ["bench", "list"], ["logs", "kept"], ["deploy", "PLAN", "--host", "here", "--yes"])


def test_a_read_only_state_folder_is_one_line(local, tmp_path):
    cfg, env, _ = local
    with tmpfs("4m") as root:
        db = root / "gpuops" / "gpuops.db"
        a_store(db)
        before = snapshot(db)
        assert subprocess.run(["mount", "-o", "remount,ro", str(root)]).returncode == 0
        env = dict(env, XDG_STATE_HOME=str(root))
        for verb in READ_VERBS:
            res = run_verb(cfg, env, verb)
            line = one_line(res)
            assert res.returncode == 1, (verb, res)
            assert str(db) in line or str(db.parent) in line, line
            assert "read-only" in line or "writable" in line, line
        assert snapshot(db) == before


def test_a_state_folder_that_is_a_file_is_one_line(local, tmp_path):
    cfg, env, _ = local
    (tmp_path / "state").write_text("not a folder")
    for verb in READ_VERBS:
        res = run_verb(cfg, env, verb)
        line = one_line(res)
        assert res.returncode == 1 and "state folder" in line and "XDG_STATE_HOME" in line, (verb, line)
    assert (tmp_path / "state").read_text() == "not a folder"


def test_a_full_disk_at_open_is_one_line(local):
    cfg, env, _ = local
    with tmpfs("1m") as root:
        (root / "gpuops").mkdir()
        fill(root)
        env = dict(env, XDG_STATE_HOME=str(root))
        for verb in (["status"], ["bench", "list"]):
            res = gpuops(cfg, env, *verb)
            line = one_line(res)
            assert res.returncode == 1 and "disk is full" in line and str(root / "gpuops" / "gpuops.db") in line, line


def events_in(db: Path, name: str) -> list[tuple[int, str, str]]:
    con = sqlite3.connect(db)
    try:
        return [(r[0], r[1], r[2]) for r in con.execute(
            "SELECT run, kind, data_json FROM events WHERE deployment = ? ORDER BY id", (name,))]
    finally:
        con.close()


def test_a_full_disk_mid_deploy_leaves_the_server_and_status_reconciles(world):
    """The state folder fills up while the server starts: the deploy ends (exit 1) saying so, the
    server is left running, and once there is room `gpuops status` records where it got to."""
    make, env = world
    cfg, sim = make("ok")
    with tmpfs("8m") as root:
        env = dict(env, XDG_STATE_HOME=str(root))
        proc = subprocess.Popen([GPUOPS, "--config", str(cfg), "deploy", "Qwen/Qwen3-8B", "--host", "gpu1", "--name",
                                 "full", "--json", "--yes", "--port", str(free_port())], stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
                                env=env)
        filler = None
        try:
            for line in proc.stdout:
                ev = json.loads(line)
                if ev["event"] == "state" and ev["state"] == "starting":
                    filler = fill(root)
                    break
            assert filler is not None, "the deploy never started its server"
            out, err = proc.communicate(timeout=120)
        finally:
            if proc.poll() is None:
                proc.kill()
        assert proc.returncode == 1, err
        last = [ln for ln in err.strip().splitlines() if ln.startswith("gpuops:")][-1]
        assert "disk is full" in last and "left as it is" in last and "gpuops status full" in last, err
        assert "Traceback" not in err
        pid_file = ssh_user_home() / ".local/state/gpuops/deployments/full/pid"
        assert Path(f"/proc/{int(pid_file.read_text())}").exists()  # the server was left running
        filler.unlink()

        seen: list[str] = []

        def reconciled() -> bool:
            res = gpuops(cfg, env, "status", "full", "--json")
            seen.append(res.stdout[-300:] + res.stderr[-300:])
            return res.returncode == 0 and json.loads(res.stdout)["deployment"]["state"] == "ready"
        assert wait_until_sync(reconciled, timeout=180), seen[-2:]  # each status reads the host: slow under load
        res = gpuops(cfg, env, "stop", "full", "--yes")
        assert res.returncode == 0, res.stderr


def wait_until_sync(predicate, timeout: float, step: float = 0.5) -> bool:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if predicate():
            return True
        time.sleep(step)
    return predicate()


@pytest.mark.parametrize("launcher", ["process", "systemd"])
def test_two_deploys_of_one_name_at_once_the_second_is_refused(world, launcher):
    """While a deploy of NAME downloads, a second deploy of NAME is refused (exit 2) and writes
    nothing: no second download, no `crashed` in the first's history, no event twice."""
    make, env = world
    cfg, sim = make("ok")
    cfg.write_text(sim.host_block("gpu1", ssh="simbox", launcher=launcher)
                   + f'model_dirs = ["{sim.directory / "models"}"]\n')
    sim.set_sim(download_rate=40 << 20)  # / PACE: ~800 MB/s apparent, 16.4 GB takes ~20 s
    name = f"twice{launcher[0]}{os.getpid()}"
    db = Path(env["XDG_STATE_HOME"]) / "gpuops" / "gpuops.db"
    argv = [GPUOPS, "--config", str(cfg), "deploy", "Qwen/Qwen3-8B", "--host", "gpu1", "--name", name, "--json",
            "--yes", "--port", str(free_port())]
    first = subprocess.Popen(argv, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, env=env)
    try:
        for line in first.stdout:
            ev = json.loads(line)
            if ev["event"] == "progress" and ev["phase"] == "downloading":
                break
        before = events_in(db, name)
        second = subprocess.run(argv, capture_output=True, text=True, env=env, timeout=120)
        assert second.returncode == 2, second.stderr
        line = one_line(second)
        assert f"{name!r} is being deployed by gpuops pid {first.pid}" in line, line
        assert second.stdout == ""
        after = events_in(db, name)
        assert after[:len(before)] == before  # nothing of the first's history changed
        out, err = first.communicate(timeout=240)
        assert first.returncode == 0, err
    finally:
        if first.poll() is None:
            first.kill()
    stored = events_in(db, name)
    runs = {run for run, _, _ in stored}
    states = [json.loads(data)["state"] for _, kind, data in stored if kind == "state"]
    # one run, one `planned` (the second recorded nothing), no `crashed` written into it
    assert runs == {1} and states.count("planned") == 1 and states.count("ready") == 1 and "crashed" not in states
    res = gpuops(cfg, env, "stop", name, "--yes")
    assert res.returncode == 0, res.stderr
    if launcher == "systemd":
        for path in (f"/etc/systemd/system/gpuops-{name}.service", f"/etc/gpuops/{name}.env"):
            Path(path).unlink(missing_ok=True)


def test_a_dead_owner_gives_its_name_up_and_the_earlier_run_is_kept(world):
    """kill -9 of a deploy mid-download: its lease dies with it; the next deploy of the name
    resumes as run 2, and run 1's events stay."""
    make, env = world
    cfg, sim = make("ok")
    sim.set_sim(download_rate=40 << 20)
    db = Path(env["XDG_STATE_HOME"]) / "gpuops" / "gpuops.db"
    argv = [GPUOPS, "--config", str(cfg), "deploy", "Qwen/Qwen3-8B", "--host", "gpu1", "--name", "orphan", "--json",
            "--yes", "--port", str(free_port())]
    first = subprocess.Popen(argv, stdout=subprocess.PIPE, text=True, env=env)
    try:
        for line in first.stdout:
            ev = json.loads(line)
            if ev["event"] == "progress" and ev["phase"] == "downloading":
                break
    finally:
        first.send_signal(signal.SIGKILL)
        first.wait()
    run1 = events_in(db, "orphan")
    assert run1 and {r for r, _, _ in run1} == {1}
    sim.set_sim(download_rate=2 << 30)
    res = subprocess.run(argv, capture_output=True, text=True, env=env, timeout=240)
    assert res.returncode == 0, res.stderr
    stored = events_in(db, "orphan")
    assert stored[:len(run1)] == run1  # the interrupted attempt's events are kept
    assert {r for r, _, _ in stored[len(run1):]} == {2}
    assert gpuops(cfg, env, "stop", "orphan", "--yes").returncode == 0


def test_a_name_whose_deploy_failed_before_install_can_be_stopped_forgotten_and_deployed(world):
    """A systemd deploy whose download stalls never installs its unit: `stop` succeeds (there was
    nothing to stop), and the name can be deployed again or forgotten."""
    make, env = world
    cfg, sim = make("slow-download", "\n[stall]\ndownload = 3\n")
    cfg.write_text(sim.host_block("gpu1", ssh="simbox", launcher="systemd")
                   + f'model_dirs = ["{sim.directory / "models"}"]\n[stall]\ndownload = 3\n')
    name = f"stuck{os.getpid()}"
    res = gpuops(cfg, env, "deploy", "Qwen/Qwen3-8B", "--host", "gpu1", "--name", name, "--json", "--yes",
                 "--port", str(free_port()), timeout=180)
    assert res.returncode == 1
    assert not Path(f"/etc/systemd/system/gpuops-{name}.service").exists()
    res = gpuops(cfg, env, "stop", name, "--yes")
    assert res.returncode == 0 and "not installed" in res.stdout, res.stderr
    status = json.loads(gpuops(cfg, env, "status", name, "--json").stdout)
    assert status["deployment"]["state"] == "stopped"
    res = gpuops(cfg, env, "forget", name)
    assert res.returncode == 2 and "--yes" in one_line(res)  # asks first
    res = gpuops(cfg, env, "forget", name, "--yes")
    assert res.returncode == 0 and f"{name}: forgotten" in res.stdout, res.stderr
    res = gpuops(cfg, env, "status", name)
    assert res.returncode == 2 and "no deployment named" in one_line(res)


SLEEPER = "import sys, time; print('serving', sys.argv[1], flush=True); time.sleep(300)"


async def a_running_server(db: Path, home: Path, name: str) -> None:
    """A ready process deployment `name` on host `here`, its server (a sleeper) running under HOME."""
    import sys

    from gpuops.core.deploy.launch import ProcessLauncher
    from tests.test_launch import make_host

    store = Store(db)
    store.add_deployment("here", make_plan(name, launcher="process"))
    store.set_state(name, "ready")
    store.release_lease(name)
    store.close()
    host = make_host("local", None, home)
    launcher = ProcessLauncher(host, name, [sys.executable, "-c", SLEEPER, name], {}, str(home))
    await launcher.install({})
    await launcher.start()
    await host.close()
    deadline = time.monotonic() + 20
    while "serving" not in Path(launcher.log_path).read_text():
        assert time.monotonic() < deadline, "the server never started"
        time.sleep(0.05)


async def test_stop_stops_the_server_on_a_full_disk_and_says_what_it_could_not_record(local, tmp_path):
    """The store's disk is full (SQLite cannot even open it to write): `gpuops stop` still reads the
    plan, stops the server, and says in one line that the stop is not recorded (exit 1), writing
    nothing; once there is room, stop again records it."""
    from tests.test_launch import own_pids

    cfg, env, _ = local
    name = f"fullstop{os.getpid()}"
    home = Path(tempfile.mkdtemp(prefix="gpuops-home-"))
    try:
        with tmpfs("2m") as root:
            db = root / "gpuops" / "gpuops.db"
            await a_running_server(db, home, name)
            assert own_pids(name)
            filler = fill(root)
            before = db.read_bytes()
            env = dict(env, XDG_STATE_HOME=str(root), HOME=str(home))
            res = gpuops(cfg, env, "stop", name, "--yes")
            line = one_line(res)
            assert res.returncode == 1, line
            assert line == (f"gpuops: {name}'s server on here is stopped (stopped), but the store could not record it: "
                            f"cannot write {db}: the disk is full: free space on its file system, then try again; run "
                            f"`gpuops stop {name}` again once it can be written"), line
            assert not own_pids(name)  # stopped, though nothing could be written
            assert db.read_bytes() == before  # (SQLite's own failed open may leave an empty -wal, a short -shm)
            filler.unlink()
            res = gpuops(cfg, env, "stop", name, "--yes")
            assert res.returncode == 0 and res.stdout.strip() == f"{name}: stopped (not running)", res
            assert Store(db).deployment(name).state == "stopped"
    finally:
        for pid in own_pids(name):
            os.kill(pid, signal.SIGKILL)
        shutil.rmtree(home, ignore_errors=True)


async def test_a_store_that_fills_up_while_open_does_not_keep_the_server_running(tmp_path):
    """The TUI's case: the store was opened before the disk filled; stop stops the server first and
    then says the record failed."""
    from gpuops.core.config import parse_inventory
    from gpuops.core.ops import Ops
    from tests.test_launch import own_pids

    name = f"fullopen{os.getpid()}"
    home = Path(tempfile.mkdtemp(prefix="gpuops-home-"))
    try:
        with tmpfs("2m") as root:
            db = root / "gpuops" / "gpuops.db"
            await a_running_server(db, home, name)
            inv = parse_inventory(f'[hosts.here]\nlocal = true\nenv = {{ HOME = "{home}" }}\n', "test")
            ops = Ops(inv, store=Store(db))
            try:
                fill(root)
                with pytest.raises(Exception, match=f"{name}'s server on here is stopped .* could not record it"):
                    await ops.stop(name, confirmed=True)
                assert not own_pids(name)
            finally:
                await ops.close()
    finally:
        for pid in own_pids(name):
            os.kill(pid, signal.SIGKILL)
        shutil.rmtree(home, ignore_errors=True)


async def test_the_dashboard_goes_on_read_only_when_its_store_cannot_be_used(tmp_path, monkeypatch):
    """The app's Ops opens its store at once (Ops itself opens it when first used): a store that
    cannot be used leaves the dashboard on, read-only, saying why, on a store in memory."""
    from gpuops.core.config import parse_inventory
    from gpuops.tui.app import GpuopsApp

    monkeypatch.setenv("XDG_STATE_HOME", str(tmp_path / "state"))
    monkeypatch.setenv("HOME", str(tmp_path / "home"))
    (tmp_path / "state" / "gpuops" / "gpuops.db").mkdir(parents=True)  # a folder where the store goes
    app = GpuopsApp(parse_inventory("[hosts.localhost]\nlocal = true\n", source="t.toml"), interval=0.5)
    async with app.run_test(size=(100, 30)):
        ops = app.ops
        assert ops.readonly and "the store cannot be used" in (ops.readonly_why or ""), ops.readonly_why
        assert "is not a file" in (ops.readonly_why or "")
        assert ops.deployments() == []
