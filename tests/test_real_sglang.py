"""The genuine SGLang server deployed through gpuops: `python -m sglang.launch_server --device cpu` with
SGLang 0.5.23's real code from the host venv (scripts/sglang-host-venv.sh), and 0.5.10's for the MTP
case, on a machine without a GPU. What gpuops says (the outcome, the phase, the finding) is checked
against what the real server prints, never against the simulator:

- a tiny random Qwen3 loads up to `Load weight begin.`, then the scheduler dies on the CPU rotary
  path (`ModuleNotFoundError: No module named 'vllm'`) and the server quits (`Received sigquit`):
  crashed in weights; the same with an API key, through gpuops' launcher, over SSH, with the key in
  no process's command line;
- a TP2 start of two nodes whose second node never comes waits at `Init parallel begin.`: stalled
  in dist_init (over SSH), then stopped, its processes gone;
- the seed's MTP crash (0.5.10, Qwen3.5-MoE) with its fix applied: that ValueError is gone, the next
  start stops later at another error;
- argparse's own errors, a port SGLang needs already taken, and the HTTP port refused before starting;
- through gpuops' multi-node path, two inventory hosts (this machine twice) with one genuine server
  each: node 1 held back, node 0 waits in the real rendezvous and the stall finding names node 1;
  both started, the rendezvous completes and both stop at SGLang's CPU limit in dist_init (crashed,
  never a stall).

Each real start costs 20-40 s of these 2 cores (mostly imports): this module makes twelve."""

from __future__ import annotations

import asyncio
import json
import os
import re
import secrets
import shutil
import signal
import socket
import subprocess
import tempfile
import threading
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


def test_a_real_crash_at_weights(local, tiny_qwen3):
    local.configure(model_dirs=(tiny_qwen3.parent,))
    name = local.name("weights")
    plan = local.plan(tiny_qwen3, name, free_port())
    rc, events, err = local.deploy(plan)
    assert_weights_crash(events, rc)
    # the server's own kill_process_tree ended its children: nothing of it is left
    assert wait_gone(local.server_pid(name), 30) == {}
    out = local.gpuops("status", name, "--json")
    assert json.loads(out.stdout)["deployment"]["state"] == "crashed"


def test_a_real_crash_with_an_api_key_through_the_launcher_over_ssh(over_ssh, tiny_qwen3):
    """serve_host 0.0.0.0: the plan carries `--api-key ${GPUOPS_API_KEY}`, the launcher fills the key
    into sys.argv inside the process and runs sglang.launch_server (runpy): real SGLang still gets to
    the same crash (its multiprocessing children included), and no process's command line, nor the
    log, holds the key."""
    rig = over_ssh
    rig.configure(extra='serve_host = "0.0.0.0"\n', model_dirs=(tiny_qwen3.parent,))
    name = rig.name("key")
    plan = rig.plan(tiny_qwen3, name, free_port())
    argv = json.loads(plan.read_text())["argv"]
    assert argv[argv.index("--host") + 1] == "0.0.0.0" and argv[argv.index("--api-key") + 1] == "${GPUOPS_API_KEY}"

    seen: dict[int, set[bytes]] = {}  # every command line each process of the server's session showed
    done = threading.Event()

    def scan() -> None:
        pid_file = rig.dep_dir(name) / "pid"
        while not done.is_set():
            try:
                sid = int(pid_file.read_text())
            except (OSError, ValueError):
                time.sleep(0.02)
                continue
            for pid, cmdline in session_members(sid).items():
                seen.setdefault(pid, set()).add(cmdline)
            time.sleep(0.02)

    scanner = threading.Thread(target=scan, daemon=True)
    scanner.start()
    try:
        rc, events, err = rig.deploy(plan)
    finally:
        done.set()
        scanner.join(10)
    assert_weights_crash(events, rc)

    env_file = rig.dep_dir(name) / "env"
    assert env_file.stat().st_mode & 0o777 == 0o600
    (key,) = [line.split("=", 1)[1] for line in env_file.read_text().splitlines()
              if line.startswith("GPUOPS_API_KEY=")]
    key = key.strip("'\"")
    assert len(key) >= 16
    cmdlines = [c for cs in seen.values() for c in cs]
    main = [c for c in cmdlines if b"sglang.launch_server" in c and b"launch.py" in c]
    assert main and all(b"${GPUOPS_API_KEY}" in c for c in main), cmdlines[:5]  # the launcher, with the placeholder
    assert any(c.startswith(b"sglang::scheduler") for c in cmdlines), cmdlines  # a real child was seen
    assert not [c for c in cmdlines if key.encode() in c]
    log = (rig.dep_dir(name) / "log").read_text()
    assert key not in log and "'api_key': '***'" in log  # SGLang got the key; its output masked it
    assert not [line for line in log_lines(events) if key in line]


def test_a_real_distributed_start_that_never_completes_stalls_in_dist_init_over_ssh(over_ssh, tiny_qwen3):
    """--tp 2 --nnodes 2 --node-rank 0: node 0 waits at `Init parallel begin.` for node 1, which never
    comes. The stall watcher says stalled in dist_init; `gpuops stop` ends every process of it."""
    rig = over_ssh
    rig.configure(stall="dist_init = 20\n", model_dirs=(tiny_qwen3.parent,))
    name = rig.name("stall")
    dist_port = free_port()

    def two_nodes(doc: dict) -> None:
        set_flag(doc["argv"], "--tp-size", "2")
        doc["argv"] += ["--nnodes", "2", "--node-rank", "0", "--dist-init-addr", f"127.0.0.1:{dist_port}"]
        doc["tp"], doc["gpu_ids"] = 2, [0, 1]
        doc["env"].update(CUDA_VISIBLE_DEVICES="0,1", SGLANG_CPU_OMP_THREADS_BIND="0|1")  # else a NUMA assertion

    plan = rig.plan(tiny_qwen3, name, free_port(), two_nodes)
    rc, events, err = rig.deploy(plan)
    assert rc == 1, err + shown(events)
    last = last_state(events)
    assert last["state"] == "stalled" and last["phase"] == "dist_init", shown(events)
    assert "weights" not in states(events)
    assert any("Init parallel begin." in line for line in log_lines(events))
    (stall,) = [f for f in findings(events) if f["code"] in ("nccl-init-stall", "startup-stall")]
    assert stall["data"]["phase"] == "dist_init" and stall["data"]["silent_s"] >= 20
    assert any(ev["source"] == "ps" for ev in stall["evidence"])  # the live processes as evidence

    sid = rig.server_pid(name)
    alive = session_members(sid)
    assert any(c.startswith(b"sglang::scheduler_TP0") for c in alive.values()), alive  # still waiting
    out = rig.gpuops("stop", name, "--yes", timeout=180)
    assert out.returncode == 0, out.stderr
    assert wait_gone(sid, 60) == {}
    out = rig.gpuops("status", name, "--json")
    assert json.loads(out.stdout)["deployment"]["state"] == "stopped"


def test_the_seeds_mtp_crash_and_its_fix_with_sglang_0_5_10(local, qwen35_moe_config, sglang_0510, monkeypatch):
    """SGLang 0.5.10's code (PYTHONPATH) with a Qwen3.5-MoE config and MTP but without the extra_buffer
    mamba cache: its ValueError; gpuops: crashed, spec-config-invalid with an applicable fix. Applied
    (the Ops API: there is no CLI verb for a fix), the next start no longer hits that ValueError and
    stops later, at `Mamba extra_buffer is only supported on CUDA devices` (no CUDA here)."""
    local.configure(model_dirs=(qwen35_moe_config.parent,))
    name = local.name("mtp")

    def the_seeds_plan(doc: dict) -> None:
        # gpuops' planner already gives MTP the two settings it needs: take them out, as the seed's
        # hand-written command had them
        assert doc["argv"][doc["argv"].index("--mamba-scheduler-strategy") + 1] == "extra_buffer"
        assert doc["env"]["SGLANG_ENABLE_SPEC_V2"] == "1" and "--speculative-algorithm" in doc["argv"]
        drop_flag(doc["argv"], "--mamba-scheduler-strategy")
        del doc["env"]["SGLANG_ENABLE_SPEC_V2"]
        doc["env"]["PYTHONPATH"] = str(sglang_0510)

    # planned as for four H200s: the fit is not what this is about (SGLang stops at its arguments)
    out = local.gpuops("plan", str(qwen35_moe_config), "--host", "cpu1", "--name", name, "--port", str(free_port()),
                       "--gpus", "4", "--gpu-memory", "141", "--sglang-version", "0.5.10", "--json")
    assert out.returncode == 0, out.stderr
    doc = json.loads(out.stdout)
    doc["argv"].extend(["--device", "cpu"])
    the_seeds_plan(doc)
    plan = local.tmp / "mtp.plan.json"
    plan.write_text(json.dumps(doc))
    rc, events, err = local.deploy(plan)
    assert rc == 1, err + shown(events)
    last = last_state(events)
    assert last["state"] == "crashed" and last["phase"] == "starting", shown(events)
    seed = ("ValueError: Speculative decoding for Qwen3_5MoeForConditionalGeneration is not compatible with "
            "radix cache when using --mamba-scheduler-strategy no_buffer.")
    assert any(line.startswith(seed) for line in log_lines(events)), shown(events)
    (f,) = [f for f in findings(events) if f["code"] == "spec-config-invalid"]
    assert any(ev["line"].startswith(seed) for ev in f["evidence"])
    assert f["fix"]["applicable"]
    patch = f["fix"]["plan_patch"]
    assert patch["set_flags"] == {"--mamba-scheduler-strategy": ["extra_buffer"]}
    assert patch["set_env"] == {"SGLANG_ENABLE_SPEC_V2": "1"}

    from gpuops.core.config import load_inventory
    from gpuops.core.deploy.store import Store
    from gpuops.core.domain import FindingEvent, PlanEvent, StateEvent
    from gpuops.core.ops import Ops

    for key in ("HOME", "XDG_STATE_HOME", "XDG_CONFIG_HOME", "XDG_CACHE_HOME", "HF_HUB_OFFLINE"):
        monkeypatch.setenv(key, local.env[key])
    monkeypatch.delenv("PYTHONPATH", raising=False)

    async def apply() -> str:
        ops = Ops(load_inventory(str(local.cfg)))
        try:
            return await ops.apply_fix(name, patch, code=f["code"], summary=f["fix"]["summary"], confirmed=True)
        finally:
            await ops.close()

    outcome = asyncio.run(asyncio.wait_for(apply(), DEPLOY_TIMEOUT))
    store = Store(local.tmp / "state" / "gpuops" / "gpuops.db")
    try:
        d = store.deployment(name)
        run2 = list(store.events(name, run=d.run))
    finally:
        store.close()
    assert d.run == 2 and outcome == "crashed"
    (why,) = [e for e in run2 if isinstance(e, PlanEvent)]
    assert why.code == "spec-config-invalid"
    assert sorted(map(tuple, why.diff)) == [("+", "--mamba-scheduler-strategy extra_buffer"),
                                           ("+", "SGLANG_ENABLE_SPEC_V2=1")]
    assert d.plan.env["SGLANG_ENABLE_SPEC_V2"] == "1" and d.plan.env["PYTHONPATH"] == str(sglang_0510)
    # the log is not stored (it lives on the host): run 2's part of the log file begins at run_offset
    log = (local.dep_dir(name) / "log").read_bytes()
    first, second = log[:d.run_offset].decode(), log[d.run_offset:].decode()
    assert seed in first
    assert "not compatible with radix cache" not in second  # THAT crash is gone
    later = "Mamba extra_buffer is only supported on CUDA devices"
    assert later in second, second[-3000:]
    final = [e for e in run2 if isinstance(e, StateEvent)][-1]
    assert final.state == "crashed"
    run2_findings = [e for e in run2 if isinstance(e, FindingEvent)]
    assert not [e for e in run2_findings if any("not compatible with radix cache" in (ev.line or "")
                                                for ev in e.evidence)]
    assert [e for e in run2_findings if any(later in (ev.line or "") for ev in e.evidence)], run2_findings


@pytest.mark.parametrize("what, edit, flag, said", [
    pytest.param("unknown-flag", lambda doc: doc["argv"].append("--no-such-flag"), "--no-such-flag",
                 "error: unrecognized arguments: --no-such-flag", id="unknown-flag"),
    pytest.param("bad-value", lambda doc: set_flag(doc["argv"], "--mem-fraction-static", "lots"),
                 "--mem-fraction-static", "error: argument --mem-fraction-static: invalid float value: 'lots'",
                 id="bad-value"),
])
def test_real_argument_errors(local, tiny_qwen3, what, edit, flag, said):
    """SGLang's argparse refuses them before anything starts: crashed at starting, server-args-invalid
    citing argparse's own line."""
    local.configure(model_dirs=(tiny_qwen3.parent,))
    name = local.name(what)
    rc, events, err = local.deploy(local.plan(tiny_qwen3, name, free_port(), edit))
    assert rc == 1, err + shown(events)
    assert states(events) == ["planned", "starting", "crashed"], shown(events)
    assert last_state(events)["phase"] == "starting"
    assert any(line.endswith(said) for line in log_lines(events)), shown(events)
    (f,) = [f for f in findings(events) if f["code"] == "server-args-invalid"]
    assert f["severity"] == "error" and flag in f["summary"]
    assert any(ev["line"].endswith(said) for ev in f["evidence"])
    if what == "unknown-flag":  # dropping it is the fix
        assert f["fix"]["applicable"] and f["fix"]["plan_patch"] == {"remove_flags": ["--no-such-flag"]}


@pytest.fixture
def held_port():
    """A port on 127.0.0.1 that a listening socket of this test holds."""
    s = socket.socket()
    s.bind(("127.0.0.1", 0))
    s.listen()
    yield s.getsockname()[1]
    s.close()


def test_a_port_sglang_needs_is_taken(local, tiny_qwen3, held_port):
    """The HTTP port is free but torch.distributed's (--nccl-port) is held: real SGLang's TCPStore
    fails at `Init parallel begin.` with EADDRINUSE: crashed in dist_init, port-in-use naming it."""
    local.configure(model_dirs=(tiny_qwen3.parent,))
    name = local.name("nccl-port")
    plan = local.plan(tiny_qwen3, name, free_port(), lambda doc: doc["argv"].extend(["--nccl-port", str(held_port)]))
    rc, events, err = local.deploy(plan)
    assert rc == 1, err + shown(events)
    last = last_state(events)
    assert last["state"] == "crashed" and last["phase"] == "dist_init", shown(events)
    eaddr = [line for line in log_lines(events) if "EADDRINUSE" in line and f"port: {held_port}" in line]
    assert eaddr, shown(events)
    (f,) = [f for f in findings(events) if f["code"] == "port-in-use"]
    assert str(held_port) in f["summary"] and any("EADDRINUSE" in ev["line"] for ev in f["evidence"])


def test_the_http_port_taken_is_refused_before_starting(local, tiny_qwen3, held_port):
    """gpuops' own check before anything changes: exit 2, one line, nothing recorded, nothing started."""
    local.configure(model_dirs=(tiny_qwen3.parent,))
    name = local.name("http-port")
    rc, events, err = local.deploy(local.plan(tiny_qwen3, name, held_port))
    assert rc == 2 and events == [], err
    assert re.search(rf"port {held_port} is in use on cpu1", err) and err.count("\n") <= 1, err
    assert not local.dep_dir(name).exists()
    out = local.gpuops("status", "--json")
    assert name not in [d["name"] for d in json.loads(out.stdout)["deployments"]]


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


def test_a_real_two_node_deploy_whose_node_1_is_held_back_names_node_1(local, tiny_qwen3, tmp_path):
    """Through gpuops' multi-node path: two inventory hosts (this machine twice), one genuine SGLang
    server per node. Node 1's interpreter is held back before SGLang's code runs (a sitecustomize
    that sleeps): node 0 really waits at `Init parallel begin.`, the stall watcher flags it, and the
    finding names node 1, its host and its deployment. `stop` ends both nodes' processes."""
    rig = local
    name, path, dist = two_node_plan(rig, tiny_qwen3, tmp_path, hold_node_1=True)
    out = subprocess.run(rig.deploy_cmd(path), capture_output=True, text=True, env=rig.env, timeout=DEPLOY_TIMEOUT)
    events = events_of(out.stdout)
    mine = [e for e in events if e.get("deployment") == name]
    assert out.returncode == 1, out.stderr + shown(mine)
    last = last_state(mine)
    assert last["state"] == "stalled" and last["phase"] == "dist_init", shown(mine)
    assert any("Init parallel begin." in line for line in log_lines(mine))  # the genuine server, waiting
    named = [f for f in findings(mine) if f.get("data", {}).get("member") == f"{name}-n1"]
    assert named and named[0]["data"]["node_rank"] == 1 and named[0]["data"]["host"] == "cpu2", shown(mine)
    assert "node 1 (cpu2" in named[0]["summary"] and dist in named[0]["summary"]
    node1 = [e for e in events if e.get("deployment") == f"{name}-n1"]
    assert "dist_init" not in states(node1)  # it never got there
    sids = [rig.server_pid(name), rig.server_pid(f"{name}-n1")]
    assert all(session_members(sid) for sid in sids)  # both still running: node 0 waiting, node 1 held
    stop = rig.gpuops("stop", name, "--yes", timeout=180)
    assert stop.returncode == 0, stop.stderr
    assert [wait_gone(sid, 60) for sid in sids] == [{}, {}]


def test_a_real_two_node_deploy_whose_nodes_both_join_gets_past_the_rendezvous(local, tiny_qwen3, tmp_path):
    """Both nodes start: the genuine rendezvous completes (node 0 goes on past `Init parallel begin.`
    to its NCCL communicator, which it sets up only once every rank has joined), then SGLang's
    multi-node path on a CPU stops there for real (`ValueError: Expected a cuda device, but got:
    cpu`): gpuops says crashed in dist_init, cites that error, and never calls it a stall."""
    rig = local
    name, path, _ = two_node_plan(rig, tiny_qwen3, tmp_path, hold_node_1=False)
    out = subprocess.run(rig.deploy_cmd(path), capture_output=True, text=True, env=rig.env, timeout=DEPLOY_TIMEOUT)
    events = events_of(out.stdout)
    node0 = [e for e in events if e.get("deployment") == name]
    node1 = [e for e in events if e.get("deployment") == f"{name}-n1"]
    assert out.returncode == 1, out.stderr + shown(node0)
    assert "stalled" not in states(node0) and last_state(node0)["state"] == "crashed", shown(node0)
    assert last_state(node0)["phase"] == "dist_init"
    lines = log_lines(node0)
    assert any("sglang is using nccl" in line for line in lines), lines[-30:]  # past the rendezvous: both joined
    assert any("Init parallel begin." in line for line in log_lines(node1))  # node 1's own real start
    cuda = "Expected a cuda device, but got: cpu"
    cited = [f for f in findings(node0) if f["severity"] == "error"
             and any(cuda in (ev.get("line") or ev.get("reading") or "") for ev in f["evidence"])
             or cuda in f.get("summary", "")]
    assert cited, [f["code"] + ": " + f["summary"] for f in findings(node0)]
    stop = rig.gpuops("stop", name, "--yes", timeout=180)
    assert stop.returncode == 0, stop.stderr
