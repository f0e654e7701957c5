"""What the tests of the genuine SGLang server share (tests/test_real_sglang*.py): a rig that plans and
deploys on this machine (`local`) or over SSH (`over_ssh`), the events' readers, a held port, a two-node
plan. Each real start costs 20-40 s of these 2 cores (mostly imports): the tests are split over three
files so that parallel workers share them."""

from __future__ import annotations

import json
import os
import secrets
import shutil
import signal
import socket
import subprocess
import tempfile
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Callable

import pytest

from tests.sshd import free_port
from tests.test_cli import GPUOPS

DEPLOY_TIMEOUT = 480  # one real start is 20-40 s here; far more on a loaded machine
VLLM = "ModuleNotFoundError: No module named 'vllm'"
pytestmark = pytest.mark.timeout(900)


def session_members(sid: int) -> dict[int, bytes]:
    """The live (not zombie) processes of session `sid` ({pid: /proc/PID/cmdline}). The process
    launcher starts the server with setsid, so the session is the server and every child of it."""
    out: dict[int, bytes] = {}
    for entry in os.listdir("/proc"):
        if not entry.isdigit():
            continue
        try:
            with open(f"/proc/{entry}/stat", "rb") as f:
                fields = f.read().rsplit(b")", 1)[1].split()
            if int(fields[3]) != sid or fields[0] == b"Z":
                continue
            with open(f"/proc/{entry}/cmdline", "rb") as f:
                out[int(entry)] = f.read()
        except (OSError, ValueError, IndexError):
            continue
    return out


def wait_gone(sid: int, timeout: float = 60.0) -> dict[int, bytes]:
    """Waits until session `sid` has no live process; what is left at the deadline."""
    deadline = time.monotonic() + timeout
    while (left := session_members(sid)) and time.monotonic() < deadline:
        time.sleep(0.1)
    return left


def events_of(out: str) -> list[dict]:
    return [json.loads(line) for line in out.splitlines() if line.startswith("{")]


def states(events: list[dict]) -> list[str]:
    return [e["state"] for e in events if e["event"] == "state"]


def last_state(events: list[dict]) -> dict:
    return [e for e in events if e["event"] == "state"][-1]


def findings(events: list[dict]) -> list[dict]:
    return [e for e in events if e["event"] == "finding"]


def log_lines(events: list[dict]) -> list[str]:
    return [e["line"] for e in events if e["event"] == "log"]


def shown(events: list[dict]) -> str:
    """The events but the log lines, and the log's last lines: for assertion messages."""
    keep = [json.dumps(e)[:800] for e in events if e["event"] != "log"]
    return "\n".join(keep + ["--- log tail:"] + log_lines(events)[-25:])


def set_flag(argv: list[str], flag: str, *values: str) -> None:
    """Sets `flag` to `values` in argv (in its place when present, else appended)."""
    if flag in argv:
        i = argv.index(flag)
        j = i + 1
        while j < len(argv) and not argv[j].startswith("--"):
            j += 1
        argv[i:j] = [flag, *values]
    else:
        argv += [flag, *values]


def drop_flag(argv: list[str], flag: str) -> None:
    i = argv.index(flag)
    j = i + 1
    while j < len(argv) and not argv[j].startswith("--"):
        j += 1
    del argv[i:j]


@dataclass
class Rig:
    """One inventory with one host, `cpu1` (this machine: `local = true`, or over the real sshd),
    whose python is the SGLang host venv's; the operator's state, config and cache in `tmp`."""

    tmp: Path
    env: dict
    venv: Path
    host_home: Path  # the host user's home: where the process launcher keeps a deployment's files
    ssh: str | None = None
    names: list[str] = field(default_factory=list)
    cfg: Path = field(init=False)

    def __post_init__(self) -> None:
        self.cfg = self.tmp / "gpuops.toml"
        self.configure()

    def configure(self, *, extra: str = "", stall: str = "", model_dirs: tuple[Path, ...] = ()) -> None:
        where = f'ssh = "{self.ssh}"' if self.ssh else "local = true"
        dirs = ", ".join(json.dumps(str(d)) for d in model_dirs)
        self.cfg.write_text(f'[hosts.cpu1]\n{where}\npython = "{self.venv / "bin" / "python"}"\n'
                            f'launcher = "process"\nmodel_dirs = [{dirs}]\n{extra}'
                            + (f"\n[stall]\n{stall}" if stall else ""))

    def name(self, what: str) -> str:
        """A deployment name of this test's own (the host user's home may be shared)."""
        name = f"rs-{what}-{secrets.token_hex(3)}"
        self.names.append(name)
        return name

    def gpuops(self, *args: str, timeout: float = 180) -> subprocess.CompletedProcess:
        return subprocess.run([GPUOPS, "--config", str(self.cfg), *args], capture_output=True, text=True,
                              env=self.env, timeout=timeout)

    def plan(self, model: Path, name: str, port: int, edit: Callable[[dict], None] | None = None,
             *extra: str) -> Path:
        """`gpuops plan` for the host (no GPU here: planned as for one 16 GiB GPU), then the flags the
        planner would not add (--device cpu, …) edited into its argv/env: the deploy validates it."""
        out = self.gpuops("plan", str(model), "--host", "cpu1", "--name", name, "--port", str(port),
                          "--gpus", "1", "--gpu-memory", "16", "--json", *extra)
        assert out.returncode == 0, out.stderr
        doc = json.loads(out.stdout)
        assert doc["python"] == str(self.venv / "bin" / "python") and doc["launcher"] == "process"
        doc["argv"].extend(["--device", "cpu"])
        if edit:
            edit(doc)
        path = self.tmp / f"{name}.plan.json"
        path.write_text(json.dumps(doc))
        return path

    def deploy_cmd(self, plan: Path) -> list[str]:
        return [GPUOPS, "--config", str(self.cfg), "deploy", str(plan), "--host", "cpu1", "--json", "--yes"]

    def deploy(self, plan: Path) -> tuple[int, list[dict], str]:
        out = subprocess.run(self.deploy_cmd(plan), capture_output=True, text=True, env=self.env,
                             timeout=DEPLOY_TIMEOUT)
        return out.returncode, events_of(out.stdout), out.stderr

    def dep_dir(self, name: str) -> Path:
        return self.host_home / ".local" / "state" / "gpuops" / "deployments" / name

    def server_pid(self, name: str) -> int:
        return int((self.dep_dir(name) / "pid").read_text())

    def cleanup(self) -> None:
        """Ends what this test's deployments left running (their own sessions only), removes their
        folders on the host."""
        for name in self.names:
            try:
                sid = self.server_pid(name)
            except (OSError, ValueError):
                sid = None
            if sid and session_members(sid):
                try:
                    os.killpg(sid, signal.SIGKILL)
                except OSError:
                    pass
                wait_gone(sid, 10)
            shutil.rmtree(self.dep_dir(name), ignore_errors=True)


def operator_env(tmp: Path, home: Path) -> dict:
    env = dict(os.environ, HOME=str(home), XDG_STATE_HOME=str(tmp / "state"), XDG_CONFIG_HOME=str(tmp / "cfg"),
               XDG_CACHE_HOME=str(tmp / "cache"), HF_HUB_OFFLINE="1")
    for key in ("GPUOPS_CONFIG", "HF_TOKEN", "PYTHONPATH"):
        env.pop(key, None)
    return env


@pytest.fixture
def local(sglang_server_venv, tmp_path):
    """A `local = true` host: this machine, the operator's HOME (so the launcher's files) in tmp."""
    home = Path(tempfile.mkdtemp(prefix="gpuops-rs-home-"))
    home.chmod(0o755)
    rig = Rig(tmp_path, operator_env(tmp_path, home), sglang_server_venv, home)
    yield rig
    rig.cleanup()
    shutil.rmtree(home, ignore_errors=True)


@pytest.fixture
def over_ssh(sglang_server_venv, tmp_path, sshd, ssh_home):
    """The same machine reached over the real sshd on 127.0.0.1 (the `simbox` alias of ssh_home's
    ~/.ssh/config); the server runs as the sshd user, its files under that user's home."""
    rig = Rig(tmp_path, operator_env(tmp_path, ssh_home), sglang_server_venv,
              sshd.home, ssh="simbox")
    yield rig
    rig.cleanup()


def assert_weights_crash(events: list[dict], rc: int) -> None:
    """SGLang 0.5.23 on the CPU: up to `Load weight begin.`, then the scheduler's ModuleNotFoundError
    and the parent's `Received sigquit`; gpuops: crashed in weights, an error finding citing it."""
    assert rc == 1, shown(events)
    assert states(events) == ["planned", "starting", "dist_init", "weights", "crashed"], shown(events)
    assert last_state(events)["phase"] == "weights"
    lines = log_lines(events)
    for needle in ("Init parallel begin.", "Load weight begin.", "Scheduler hit an exception", VLLM,
                   "Received sigquit from a child process"):
        assert any(needle in line for line in lines), needle
    # named for what it is: the server's Python lacks a module (not the generic "server-crashed")
    cited = [f for f in findings(events) if f["severity"] == "error"
             and any(VLLM in (ev.get("line") or "") for ev in f["evidence"])]
    assert [f["code"] for f in cited] == ["python-module-missing"], shown(events)
    assert "vllm" in cited[0]["summary"]


@pytest.fixture
def held_port():
    """A port on 127.0.0.1 that a listening socket of this test holds."""
    s = socket.socket()
    s.bind(("127.0.0.1", 0))
    s.listen()
    yield s.getsockname()[1]
    s.close()


HOLD = "import os, time\nif os.environ.get('GPUOPS_TEST_HOLD_NODE'):\n    time.sleep(10**6)\n"


def two_node_plan(rig, tiny_qwen3: Path, tmp_path: Path, hold_node_1: bool) -> tuple[str, Path, str]:
    """A two-node plan of the tiny Qwen3 as the planner writes it (`--tp 2 --nnodes 2 --node-rank R
    --dist-init-addr`) for two inventory hosts that are this machine twice, edited for the CPU (each
    node's one rank on a core of its own); node 1 held back before SGLang's code runs when asked.
    Returns (name, the plan file, its dist-init-addr)."""
    from gpuops.core.planning.model_facts import load_model_facts
    from gpuops.core.planning.plan import GpuInfo, Node, Target, Wishes, build_multinode_plan

    python = str(rig.venv / "bin" / "python")
    block = (f'launcher = "process"\npython = "{python}"\nmodel_dirs = ["{tiny_qwen3.parent}"]\nlocal = true\n'
             'node_addr = "127.0.0.1"\n')
    rig.cfg.write_text(f"[hosts.cpu1]\n{block}\n[hosts.cpu2]\n{block}\n[stall]\ndist_init = 20\n")
    name = rig.name("duo")
    rig.names.append(f"{name}-n1")
    # no GPU here: each node planned as for one 16 GiB GPU, then the flags a CPU run needs edited in
    nodes = [Node(Target(host=h, gpus=(GpuInfo(0, 16 * 2**30),), engine_version="0.5.23", python=python,
                         model_dirs=(str(tiny_qwen3.parent),), launcher="process"), "127.0.0.1") for h in ("cpu1", "cpu2")]
    plan = build_multinode_plan(load_model_facts(str(tiny_qwen3)), nodes,
                                Wishes(tp=2, name=name, port=free_port()))
    doc = plan.to_json()
    dist = doc["dist_init_addr"]
    assert doc["argv"][-6:] == ["--nnodes", "2", "--node-rank", "0", "--dist-init-addr", dist]
    doc["argv"].extend(["--device", "cpu"])
    for rank, member in enumerate(doc["members"]):
        member["env"]["SGLANG_CPU_OMP_THREADS_BIND"] = str(rank)
    doc["env"]["SGLANG_CPU_OMP_THREADS_BIND"] = "0"
    if hold_node_1:
        hold = tmp_path / "hold"
        hold.mkdir()
        (hold / "sitecustomize.py").write_text(HOLD)
        doc["members"][1]["env"].update(PYTHONPATH=str(hold), GPUOPS_TEST_HOLD_NODE="1")
    path = tmp_path / "duo.json"
    path.write_text(json.dumps(doc))
    return name, path, dist
