"""gpuops on a machine it shares: something else already listens on the planner's default port
(127.0.0.1 at the first port a plan tries: the test process's GPUOPS_FIRST_PORT), and another
deployment's simulated server runs beside the test's own. The default port moves to the next free one (and the plan says so), an explicit --port never moves, and a stop
ends only the deployment it names. Through the real CLI, over the real sshd, with real sockets."""

from __future__ import annotations

import errno
import json
import os
import shutil
import socket
import subprocess
import time
import uuid
from pathlib import Path

import httpx

from tests.test_cli import GPUOPS
from tests.sshd import ssh_user_home
from tests.test_deploy import FIRST_PORT, deploy, served_port


HOST_HOME = ssh_user_home()  # the SSH user's HOME on the (loopback) host: this test process's own


def gpuops(cfg: Path, env: dict, *args: str, timeout: float = 120) -> subprocess.CompletedProcess:
    return subprocess.run([GPUOPS, "--config", str(cfg), *args], capture_output=True, text=True, env=env,
                          timeout=timeout, stdin=subprocess.DEVNULL)


def hold(port: int) -> socket.socket | None:
    """A real listening socket on 127.0.0.1:PORT; None when another process on this machine already
    holds it (the port is taken either way, which is what these tests need)."""
    s = socket.socket()
    s.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)  # a closed connection's TIME_WAIT is no holder
    try:
        s.bind(("127.0.0.1", port))
    except OSError as exc:
        s.close()
        if exc.errno != errno.EADDRINUSE:
            raise
        return None
    s.listen(8)
    s.settimeout(10)  # accept() never hangs a test
    return s


def in_use(port: int) -> bool:
    """Whether a socket listens on 127.0.0.1:PORT (what the deployer's check asks, SO_REUSEADDR and all)."""
    with socket.socket() as s:
        s.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        try:
            s.bind(("127.0.0.1", port))
        except OSError as exc:
            return exc.errno == errno.EADDRINUSE
    return False


def server_pid(name: str) -> int:
    """The process launcher's pid of deployment NAME (the leader of its server's process group),
    read where the host keeps it: the test's own deployment, by its unique name."""
    return int((HOST_HOME / ".local/state/gpuops/deployments" / name / "pid").read_text())


def group_alive(pgid: int) -> bool:
    """Whether any process of the server's process group runs (a zombie awaiting its reaper does not)."""
    for stat in Path("/proc").glob("[0-9]*/stat"):
        try:
            fields = stat.read_text().rsplit(")", 1)[1].split()
        except (OSError, IndexError):
            continue
        if int(fields[2]) == pgid and fields[0] != "Z":  # state, ppid, pgrp
            return True
    return False


def ended(pgid: int, timeout: float = 15.0) -> bool:
    deadline = time.monotonic() + timeout
    while group_alive(pgid):
        if time.monotonic() > deadline:
            return False
        time.sleep(0.1)
    return True


def cmdline(pid: int) -> str:
    return Path(f"/proc/{pid}/cmdline").read_bytes().replace(b"\0", b" ").decode()


def served_models(port: int) -> list[str]:
    r = httpx.get(f"http://127.0.0.1:{port}/v1/models", timeout=10)
    assert r.status_code == 200, r.text
    return [m["id"] for m in r.json()["data"]]


def test_the_default_port_moves_past_a_port_another_process_holds(world, tmp_path):
    make, env = world
    cfg, sim = make("ok")
    name = f"moved-{uuid.uuid4().hex[:8]}"
    holder = hold(FIRST_PORT)
    assert holder is not None or in_use(FIRST_PORT)
    try:
        # `plan` without --port: the next free port, and a warning that names whose FIRST_PORT is
        out = gpuops(cfg, env, "plan", "Qwen/Qwen3-8B", "--host", "gpu1", "--name", name, "--json")
        assert out.returncode == 0, out.stderr
        plan = json.loads(out.stdout)
        assert plan["port"] > FIRST_PORT and f"--port {plan['port']}" in " ".join(plan["argv"])
        (warning,) = [w for w in plan["warnings"] if w.startswith(f"port {FIRST_PORT} is in use on gpu1")]
        assert warning.endswith(f"; using {plan['port']}")
        if holder is not None:  # the host's /proc names the holder: this test's own process
            assert f"(pid {os.getpid()} (" in warning, warning

        # an explicit --port is the operator's: never moved; the plan warns and deploy refuses it
        out = gpuops(cfg, env, "plan", "Qwen/Qwen3-8B", "--host", "gpu1", "--name", name, "--port",
                     str(FIRST_PORT), "--json")
        assert out.returncode == 0, out.stderr
        kept = json.loads(out.stdout)
        assert kept["port"] == FIRST_PORT and f"--port {FIRST_PORT}" in " ".join(kept["argv"])
        assert any(w.startswith(f"port {FIRST_PORT} is in use on gpu1") and w.endswith("choose another --port")
                   for w in kept["warnings"]), kept["warnings"]
        if holder is not None:  # our socket listens on the very address the server would bind
            (tmp_path / "kept.json").write_text(out.stdout)
            out = gpuops(cfg, env, "deploy", str(tmp_path / "kept.json"), "--host", "gpu1", "--yes", "--json")
            assert out.returncode == 2 and f"port {FIRST_PORT} is in use on gpu1" in out.stderr, out.stderr

        # `deploy MODEL` (the default port) through the real CLI: the server comes up on the moved port
        rc, events, err = deploy(cfg, env, "--name", name, default_port=True)
        assert rc == 0, err + "\n".join(map(json.dumps, events[-10:]))
        port = served_port(env, name, default=True)  # the stored plan's port, and its warning
        assert port > FIRST_PORT
        assert events[-1]["state"] == "ready" and events[-1]["endpoint"] == f"http://127.0.0.1:{port}"
        assert served_models(port) == ["Qwen/Qwen3-8B"]  # it answers there
        pid = server_pid(name)
        assert str(sim.directory) in cmdline(pid) and f"--port {port} " in cmdline(pid) + " "
        if holder is not None:  # and FIRST_PORT is still this test's socket, untouched
            with socket.create_connection(("127.0.0.1", FIRST_PORT), timeout=5):
                conn, _ = holder.accept()
                conn.close()
        out = gpuops(cfg, env, "stop", name, "--yes")
        assert out.returncode == 0, out.stderr
        assert ended(pid)
    finally:
        gpuops(cfg, env, "stop", name, "--yes")
        if holder is not None:
            holder.close()
        shutil.rmtree(HOST_HOME / ".local/state/gpuops/deployments" / name, ignore_errors=True)


def test_a_stop_ends_only_its_own_deployment_beside_another_one(world, tmp_path):
    """Another operator's deployment on the same machine (its own gpuops store, the same simulated
    host): the test's deployment plans around the port that one listens on, and its stop leaves it running."""
    make, env = world
    cfg, sim = make("ok")
    tag = uuid.uuid4().hex[:8]
    mine, theirs = f"mine-{tag}", f"theirs-{tag}"
    their_env = dict(env, XDG_STATE_HOME=str(tmp_path / "their-state"))
    holder = hold(FIRST_PORT)
    assert holder is not None or in_use(FIRST_PORT)
    try:
        rc, events, err = deploy(cfg, their_env, "--name", theirs, default_port=True)
        assert rc == 0, err
        their_port = served_port(their_env, theirs, default=True)
        their_pid = server_pid(theirs)
        assert str(sim.directory) in cmdline(their_pid) and group_alive(their_pid)

        rc, events, err = deploy(cfg, env, "--name", mine, default_port=True)
        assert rc == 0, err
        my_port = served_port(env, mine, default=True)
        assert my_port > FIRST_PORT and my_port != their_port  # their server's port is taken: /proc says so
        my_pid = server_pid(mine)
        assert my_pid != their_pid and group_alive(my_pid)
        assert served_models(my_port) == served_models(their_port) == ["Qwen/Qwen3-8B"]

        out = gpuops(cfg, env, "stop", mine, "--yes")
        assert out.returncode == 0, out.stderr
        assert ended(my_pid)  # every process of its group
        assert not in_use(my_port)  # its port is free again
        # theirs was not touched: the same process, still serving, still ready in their store
        assert group_alive(their_pid) and server_pid(theirs) == their_pid
        assert served_models(their_port) == ["Qwen/Qwen3-8B"]
        doc = json.loads(gpuops(cfg, their_env, "status", theirs, "--json").stdout)
        assert doc["deployment"]["state"] == "ready"
        assert json.loads(gpuops(cfg, env, "status", mine, "--json").stdout)["deployment"]["state"] == "stopped"
    finally:
        gpuops(cfg, env, "stop", mine, "--yes")
        gpuops(cfg, their_env, "stop", theirs, "--yes")
        if holder is not None:
            holder.close()
        for name in (mine, theirs):  # the host's folders of these deployments, named for this test only
            shutil.rmtree(HOST_HOME / ".local/state/gpuops/deployments" / name, ignore_errors=True)
