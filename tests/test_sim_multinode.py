"""The simulated SGLang server across nodes (issue 14): ``--nnodes/--node-rank/--dist-init-addr``, run
for real. Each node is its own simulated host (its own GPUs) and its own ``python -m
sglang.launch_server`` process; they meet on a real TCP rendezvous at the dist-init address, the
stand-in for torch's TCPStore. No mocks, no sleeps: every wait polls a condition under a deadline.

The processes are found by a marker of this module (an environment variable with a fresh value
per test), never by name, and whatever is left of them is killed at the end of each test."""

from __future__ import annotations

import os
import re
import signal
import socket
import time
import uuid
from pathlib import Path

import httpx
import pytest

from gpuops.sim.host import SimHost, setup_simhost
from tests.sshd import free_port
from tests.test_sglang_sim import QWEN3, Server, model_dir, report

GIB = 1 << 30
PACE = 0.05  # a whole single-node start of Qwen3-8B is about a second at this pace
MARK_ENV = "GPUOPS_TEST_SIM_MULTINODE"
READY = r"\] The server is fired up and ready to roll!$"
LOGGED = re.compile(r"^\[\d{4}-\d\d-\d\d \d\d:\d\d:\d\d(?P<prefix>(?: TP\d+)*)\] (?P<msg>.*)$")


def wait_until(cond, timeout: float, what: str):
    """Poll COND until it returns something true; fail after TIMEOUT seconds."""
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        got = cond()
        if got:
            return got
        time.sleep(0.02)
    raise AssertionError(f"timed out after {timeout:.0f} s waiting for {what}")


def logged(srv: Server) -> list[tuple[str, str]]:
    """(rank prefix, message) of SRV's logged lines, in order."""
    return [(m.group("prefix").strip(), m.group("msg")) for m in map(LOGGED.match, srv.text) if m]


def marked_pids(mark: str) -> list[int]:
    """The processes whose environment carries MARK (this test's servers and nothing else)."""
    needle = f"{MARK_ENV}={mark}".encode()
    pids = []
    for entry in Path("/proc").iterdir():
        if not entry.name.isdigit():
            continue
        try:
            env = (entry / "environ").read_bytes().split(b"\0")
        except OSError:
            continue
        if needle in env:
            pids.append(int(entry.name))
    return pids


@pytest.fixture
def cluster(tmp_path):
    """Start nodes of one multi-node server: ``start(host, rank, nnodes=2, tp=2, **env)``."""
    mark = uuid.uuid4().hex
    model = model_dir(tmp_path / "models", QWEN3, 16_381_470_720, shards=5)
    dist_port = free_port()
    nodes: list[Server] = []

    def host(name: str, gpus: int = 1, version: str = "0.5.23") -> SimHost:
        h = setup_simhost(tmp_path / name, gpus=gpus, engine_version=version, pace=PACE)
        h.set_sim(token_delay_s=0.001)
        return h

    def start(h: SimHost, rank: int, *, nnodes: int = 2, tp: int = 2, extra: tuple = (),
              addr: str | None = None, **env) -> Server:
        """ADDR: the --dist-init-addr (default 127.0.0.1:<this cluster's port>; "" leaves it out)."""
        addr = f"127.0.0.1:{dist_port}" if addr is None else addr
        args = ["--model-path", model, "--tp-size", str(tp), "--nnodes", str(nnodes), "--node-rank", str(rank),
                *(["--dist-init-addr", addr] if addr else []), *extra]
        srv = Server(h, *args, env={MARK_ENV: mark, **{k: str(v) for k, v in env.items()}})
        nodes.append(srv)
        return srv

    start.host = host
    start.dist_port = dist_port
    start.model = model
    yield start
    for pid in marked_pids(mark):
        try:
            os.kill(pid, signal.SIGKILL)
        except ProcessLookupError:
            pass
    for srv in nodes:
        srv.stop()
    assert marked_pids(mark) == []


def node_pids(h: SimHost) -> list[list[int]]:
    """The pids holding memory on each GPU of host H (its state file, as NVML reports them)."""
    return [[p["pid"] for p in g["processes"]] for g in h.read_state()["gpus"]]


# ------------------------------------------------------------------ both join


def test_two_nodes_join_node0_serves_and_node1_follows(cluster):
    h0, h1 = cluster.host("node0", gpus=2), cluster.host("node1", gpus=2)
    n0 = cluster(h0, 0, tp=4)
    n1 = cluster(h1, 1, tp=4)
    n0.wait_for(READY, 30)
    n1.wait_for(r"\] Dummy health check server started in background thread at 127\.0\.0\.1:%d$" % n1.port, 30)

    # node 0 alone serves the API
    assert httpx.get(n0.url + "/health", timeout=10).status_code == 200
    models = httpx.get(n0.url + "/v1/models", timeout=10).json()
    assert [m["id"] for m in models["data"]] == [str(cluster.model)]
    # node 1: SGLang's dummy health-check server, nothing else
    assert httpx.get(n1.url + "/health", timeout=10).status_code == 200
    assert httpx.get(n1.url + "/health_generate", timeout=10).status_code == 200
    r = httpx.get(n1.url + "/v1/models", timeout=10)
    assert (r.status_code, r.json()) == (404, {"detail": "Not Found"})
    assert httpx.post(n1.url + "/generate", json={"text": "hi"}, timeout=10).status_code == 404

    # each node logs its own ranks (TP0,TP1 | TP2,TP3), and waits in dist init for the other
    l0, l1 = logged(n0), logged(n1)
    assert [p for p, m in l0 if m == "Init parallel begin."] == ["TP0", "TP1"]
    assert [p for p, m in l1 if m == "Init parallel begin."] == ["TP2", "TP3"]
    assert {p for p, _ in l1} == {"", "TP2", "TP3"} and {p for p, _ in l0} == {"", "TP0", "TP1"}
    for lines in (l0, l1):
        msgs = [m for _, m in lines]
        assert msgs.index("Init parallel begin.") < next(i for i, m in enumerate(msgs) if m.startswith(
            "Init parallel ends. elapsed="))
    # the TP0-only lines and the API are node 0's; node 1 never says it is ready
    assert any(m.startswith("max_total_num_tokens=") for _, m in l0)
    assert not any(m.startswith(("max_total_num_tokens=", "sglang is using nccl", "Prefill batch")) for _, m in l1)
    assert not any("Uvicorn running" in x or "ready to roll" in x for x in n1.text)
    assert [m for _, m in l1][-1] == f"Dummy health check server started in background thread at 127.0.0.1:{n1.port}"

    # each node's GPUs hold that node's own process (two ranks, two local GPUs, per node)
    assert node_pids(h0) == [[n0.proc.pid], [n0.proc.pid]] and node_pids(h1) == [[n1.proc.pid], [n1.proc.pid]]
    for h in (h0, h1):
        assert all(g["memory_used_bytes"] > 10 * GIB for g in report(h)["gpus"])

    # SIGTERM on node 1 (0.5.23) is only logged: rank 0's shutdown broadcast stops it ...
    n1.proc.send_signal(signal.SIGTERM)
    n1.wait_for(r"\] SIGTERM received on node_rank 1; waiting for the rank-0 ShutdownReq broadcast to stop the "
                r"schedulers\.$", 10)
    assert n1.proc.poll() is None
    assert httpx.get(n1.url + "/health", timeout=10).status_code == 200
    # ... and node 0's graceful shutdown sends it: node 1's schedulers exit, then node 1
    n0.proc.send_signal(signal.SIGTERM)
    assert n0.wait(20) == 0
    assert n1.wait(20) == 0
    tail = [m for _, m in logged(n1)][-2:]
    assert all(re.fullmatch(r"Scheduler or DataParallelController \d+ terminated with 0", m) for m in tail), tail
    assert not any("Scheduler hit an exception" in x for x in n0.text + n1.text)
    assert node_pids(h0) == [[], []] and node_pids(h1) == [[], []]


def test_0_5_10_wording_and_gpu_placement(cluster):
    """The old wording (`Init torch distributed begin.` up to 0.5.20) and --base-gpu-id on node 1."""
    h0, h1 = cluster.host("node0", gpus=1, version="0.5.10"), cluster.host("node1", gpus=2, version="0.5.10")
    n0 = cluster(h0, 0)
    n1 = cluster(h1, 1, extra=("--base-gpu-id", "1"))
    n0.wait_for(READY, 30)
    n1.wait_for(r"\] Dummy health check server started in background thread at ", 30)
    for srv, rank in ((n0, "TP0"), (n1, "TP1")):
        dist = [(p, m) for p, m in logged(srv) if m.startswith("Init torch distributed")][:2]
        assert dist[0] == (rank, "Init torch distributed begin."), dist
        assert dist[1][0] == rank and re.fullmatch(
            r"Init torch distributed ends\. elapsed=\d+\.\d\d s, mem usage=0\.00 GB", dist[1][1]), dist
    assert not any("Init parallel" in x or "ready to roll" in x for x in n1.text)
    assert node_pids(h1) == [[], [n1.proc.pid]]  # --base-gpu-id 1: its one rank on local GPU 1
    # before 0.5.21 nothing handles SIGTERM on a node R>0: it dies of it
    n1.proc.send_signal(signal.SIGTERM)
    assert n1.wait(20) == -signal.SIGTERM


# ------------------------------------------------------------------ node 1 missing, late, hung


def test_node1_never_started_node0_sits_in_dist_init(cluster):
    """Nobody runs node 1: node 0 logs `Init parallel begin.` and nothing more, its store listening,
    until the store's timeout (short here) ends it with torch's DistStoreError naming 1/2 joined."""
    h0 = cluster.host("node0")
    n0 = cluster(h0, 0, GPUOPS_SIM_DIST_TIMEOUT_S=4)
    t_begin, _ = n0.wait_for(r" TP0\] Init parallel begin\.$", 30)
    # the rendezvous is a real TCP server: a probe connects, sends junk, and is not counted as a node
    probe = wait_until(lambda: _try_connect(cluster.dist_port), 10, "the store's port to accept a connection")
    probe.sendall(b"GET / HTTP/1.0\r\n\r\n")
    t_end, line = n0.wait_for(r"DistStoreError", 30)
    probe.close()
    assert n0.wait(10) == -signal.SIGKILL  # and all its output read
    assert line == "torch.distributed.DistStoreError: Timed out after 5 seconds waiting for clients. 1/2 clients joined."
    assert t_end - t_begin >= 3.5
    msgs = [m for _, m in logged(n0)]
    i = msgs.index("Init parallel begin.")
    # nothing between the begin line and the crash: it sat in dist_init the whole time
    assert msgs[i + 1].startswith("Scheduler hit an exception: Traceback (most recent call last):")
    assert not any(m.startswith(("Init parallel ends", "Load weight", "sglang is using nccl")) for m in msgs)
    text = n0.text
    assert '    return TCPStore(' in text and any(x.endswith('/torch/distributed/rendezvous.py", line 215, in '
                                                          '_create_c10d_store') for x in text)
    assert msgs[-2:] == ["Received sigquit from a child process. It usually means the child failed.",
                         f"kill_process_tree called: parent_pid={n0.proc.pid}, include_parent=True, "
                         f"pid={n0.proc.pid}"]
    assert node_pids(h0) == [[]]


def test_node1_never_started_node0_waits_without_a_timeout(cluster):
    """With torch's default timeout (600 s) node 0 just waits: alive, the begin line its last, its
    store holding only its own rank's connection (what the host's socket table shows a triage)."""
    h0 = cluster.host("node0")
    n0 = cluster(h0, 0)
    n0.wait_for(r" TP0\] Init parallel begin\.$", 30)
    wait_until(lambda: _established_to(cluster.dist_port) == 1, 10, "node 0's own connection to its store")
    assert n0.proc.poll() is None
    assert [m for _, m in logged(n0)][-1] == "Init parallel begin."
    assert node_pids(h0) == [[]]  # nothing allocated before the weights
    n0.proc.send_signal(signal.SIGTERM)  # no handler in a rendezvous: it dies of the signal
    assert n0.wait(10) == -signal.SIGTERM


def test_node1_starts_late_both_reach_ready(cluster):
    h0, h1 = cluster.host("node0"), cluster.host("node1")
    n0 = cluster(h0, 0)
    n1 = cluster(h1, 1, GPUOPS_SIM_SCENARIO="node-starts-late", GPUOPS_SIM_NODE_DELAY_S=2)
    n0.wait_for(r" TP0\] Init parallel begin\.$", 30)
    t_ready, _ = n0.wait_for(READY, 60)
    n1.wait_for(r"\] Dummy health check server started in background thread at ", 60)
    # node 0 left dist init only once node 1 (silent for its delay) had joined
    t_first1 = n1.lines[0][0]
    t_ends0 = n0.first(r" TP0\] Init parallel ends\.")
    assert t_ends0 >= t_first1
    elapsed = float(re.search(r"Init parallel ends\. elapsed=(\d+\.\d\d) s", next(
        m for _, m in logged(n0) if m.startswith("Init parallel ends"))).group(1))
    assert elapsed >= 1.0
    assert httpx.get(n0.url + "/v1/models", timeout=10).status_code == 200
    assert not any("ready to roll" in x for x in n1.text)


def test_node0_starts_late_node1_retries_its_store_client(cluster):
    """Node 1 first: its TCPStore client retries quietly until node 0 listens, then both are up."""
    h0, h1 = cluster.host("node0"), cluster.host("node1")
    n1 = cluster(h1, 1)
    n1.wait_for(r" TP1\] Init parallel begin\.$", 30)
    n0 = cluster(h0, 0, GPUOPS_SIM_SCENARIO="node-starts-late", GPUOPS_SIM_NODE_DELAY_S=1)
    n0.wait_for(READY, 60)
    n1.wait_for(r"\] Dummy health check server started in background thread at ", 60)
    assert not any("c10d" in x or "Scheduler hit an exception" in x for x in n1.text)


def test_node1_hangs_before_joining(cluster):
    """node-hangs-before-join: node 1 is alive, logged its server_args and nothing more, and never
    reached the store; node 0 sits in dist init until its (short) timeout: 1/2 joined."""
    h0, h1 = cluster.host("node0"), cluster.host("node1")
    n1 = cluster(h1, 1, GPUOPS_SIM_SCENARIO="node-hangs-before-join")
    n0 = cluster(h0, 0, GPUOPS_SIM_DIST_TIMEOUT_S=3)
    n1.wait_for(r"^\[[^]]+\] server_args=\{'model_path': ", 30)
    _, line = n0.wait_for(r"DistStoreError", 30)
    assert line.endswith("Timed out after 4 seconds waiting for clients. 1/2 clients joined.")
    assert n0.wait(10) == -signal.SIGKILL
    assert n1.proc.poll() is None  # still there, still silent
    assert [m for _, m in logged(n1)][-1].startswith("server_args=")
    assert not any("Init parallel" in x for x in n1.text)
    assert node_pids(h1) == [[]]


def test_unknown_scenario_in_the_environment_is_refused(cluster):
    n1 = cluster(cluster.host("node1"), 1, GPUOPS_SIM_SCENARIO="node-explodes")
    assert n1.wait(20) == 2
    assert "GPUOPS_SIM_SCENARIO='node-explodes' is not a scenario" in n1.text[-1]


# ------------------------------------------------------------------ a node dies


def test_node0_killed_node1_exits_with_gloo_error(cluster):
    h0, h1 = cluster.host("node0"), cluster.host("node1")
    n0 = cluster(h0, 0)
    n1 = cluster(h1, 1)
    n0.wait_for(READY, 30)
    n1.wait_for(r"\] Dummy health check server started in background thread at ", 30)
    n0.proc.kill()
    assert n0.wait(10) == -signal.SIGKILL
    assert n1.wait(20) == -signal.SIGKILL  # SGLang's kill_process_tree after the scheduler's SIGQUIT
    text = n1.text
    i = next(i for i, x in enumerate(text) if re.match(r"^\[[^]]+ TP1\] Scheduler hit an exception: Traceback", x))
    assert any(x.endswith("in broadcast_pyobj") for x in text[i:])
    assert re.fullmatch(r"RuntimeError: \[/__w/pytorch/pytorch/third_party/gloo/gloo/transport/tcp/pair\.cc:561\] "
                        r"Connection closed by peer \[127\.0\.0\.1\]:\d+\. This is typically caused by a remote "
                        r"worker crashing\. Check the logs of the remote worker before reporting an error\. GLHF! .*",
                        next(x for x in text[i:] if x.startswith("RuntimeError: ")))
    assert [m for _, m in logged(n1)][-2:] == [
        "Received sigquit from a child process. It usually means the child failed.",
        f"kill_process_tree called: parent_pid={n1.proc.pid}, include_parent=True, pid={n1.proc.pid}"]
    assert node_pids(h1) == [[]]


def test_node1_killed_node0_exits_too(cluster):
    h0, h1 = cluster.host("node0"), cluster.host("node1")
    n0 = cluster(h0, 0)
    n1 = cluster(h1, 1)
    n0.wait_for(READY, 30)
    n1.wait_for(r"\] Dummy health check server started in background thread at ", 30)
    n1.proc.kill()
    assert n0.wait(20) == -signal.SIGKILL
    assert any("Connection closed by peer [127.0.0.1]:" in x for x in n0.text)
    assert any(re.match(r"^\[[^]]+ TP0\] Scheduler hit an exception: ", x) for x in n0.text)


def test_node0_killed_before_all_joined_node1_fails_to_recv(cluster):
    """Three nodes, node 2 never comes: node 1 has joined and waits; node 0 dies: node 1's store
    connection closes and it ends with torch's DistNetworkError from the gloo group's set-up."""
    h0, h1 = cluster.host("node0"), cluster.host("node1")
    n0 = cluster(h0, 0, nnodes=3, tp=3)
    n1 = cluster(h1, 1, nnodes=3, tp=3)
    n1.wait_for(r" TP1\] Init parallel begin\.$", 30)
    wait_until(lambda: _established_to(cluster.dist_port) == 2, 10, "both nodes' connections to the store")
    assert n1.proc.poll() is None and [m for _, m in logged(n1)][-1] == "Init parallel begin."
    n0.proc.kill()
    assert n1.wait(20) == -signal.SIGKILL
    text = n1.text
    assert any(re.fullmatch(r"\[W\d{4} [\d:.]+ TCPStore\.cpp:138\] \[c10d\] recvValueWithTimeout failed on "
                            r"SocketImpl\(fd=\d+, addr=\[::ffff:127\.0\.0\.1\]:\d+, remote=\[::ffff:127\.0\.0\.1\]:%d\): "
                            r"Failed to recv, got 0 bytes\. Connection was likely closed\. Did the remote server "
                            r"shutdown or crash\?" % cluster.dist_port, x) for x in text), text[-30:]
    assert "torch.distributed.DistNetworkError: Failed to recv, got 0 bytes. Connection was likely closed. Did the " \
           "remote server shutdown or crash?" in text
    assert any(x.endswith("in _create_gloo_process_group") for x in text)


def test_store_port_taken_node0_cannot_listen(cluster):
    """Something already listens on the dist-init port: TCPStore's server cannot, node 0 ends."""
    with socket.socket() as taken:
        taken.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        taken.bind(("127.0.0.1", cluster.dist_port))
        taken.listen(1)
        n0 = cluster(cluster.host("node0"), 0)
        assert n0.wait(20) == -signal.SIGKILL
    assert ("torch.distributed.DistNetworkError: The server socket has failed to listen on any local network "
            "address. port: %d, useIpv6: false, code: -98, name: EADDRINUSE, message: address already in use"
            % cluster.dist_port) in n0.text
    msgs = [m for _, m in logged(n0)]
    assert msgs[msgs.index("Init parallel begin.") + 1].startswith("Scheduler hit an exception: Traceback")


def test_store_unreachable_the_client_times_out(cluster):
    """Node 1 with no node 0 at all: torch's client retries, logs its two tries, then gives up."""
    n1 = cluster(cluster.host("node1"), 1, GPUOPS_SIM_DIST_TIMEOUT_S=1)
    assert n1.wait(30) == -signal.SIGKILL
    what = "The client socket has timed out after 1000ms while trying to connect to (127.0.0.1, %d)." % cluster.dist_port
    text = n1.text
    assert any(x.endswith("socket.cpp:1028] [c10d] " + what) for x in text)
    assert any(re.search(r"TCPStore\.cpp:340\] \[c10d\] TCP client failed to connect/validate to host 127\.0\.0\.1:%d "
                         r"- retrying \(try=0, timeout=1000ms, delay=\d+ms\): " % cluster.dist_port, x) for x in text)
    assert any(re.search(r"TCPStore\.cpp:328\] \[c10d\] TCP client failed to connect/validate to host 127\.0\.0\.1:%d "
                         r"- timed out \(try=1, timeout=1000ms\): " % cluster.dist_port, x) for x in text)
    assert "torch.distributed.DistNetworkError: " + what in text
    msgs = [m for _, m in logged(n1)]
    assert msgs[msgs.index("Init parallel begin.") + 1].startswith("Scheduler hit an exception: Traceback")


# ------------------------------------------------------------------ arguments


def test_tp_not_divisible_by_nnodes(cluster):
    n0 = cluster(cluster.host("node0"), 0, tp=3)
    assert n0.wait(20) == 1
    text = n0.text
    assert text[-1] == "AssertionError: tp_size must be divisible by number of nodes"
    assert text[-3:-1] == ["    assert (cfg.tp_size * cfg.pp_size) % cfg.nnodes == 0, (",
                           "           " + "^" * 45]
    assert any(x.endswith('/sglang/srt/arg_groups/validation_hook.py", line 179, in check_server_args') for x in text)
    assert re.match(r"^\[[^]]+\] kill_process_tree called: parent_pid=%d, include_parent=False, pid=%d$"
                    % (n0.proc.pid, n0.proc.pid), text[text.index("Traceback (most recent call last):") - 1])
    assert not any("server_args=" in x for x in text)
    # 0.5.10: ServerArgs.check_server_args, its own line
    old = cluster(cluster.host("old", version="0.5.10"), 0, tp=3)
    assert old.wait(20) == 1
    assert old.text[-3:] == ['  File "%s/sglang/srt/server_args.py", line 6065, in check_server_args'
                             % (old.host.directory / "lib"), "    assert (",
                             "AssertionError: tp_size must be divisible by number of nodes"]


def test_multinode_data_parallel_is_refused(cluster):
    n0 = cluster(cluster.host("node0", gpus=4), 0, tp=2, extra=("--dp-size", "2"))
    assert n0.wait(20) == 1
    assert n0.text[-1] == ("AssertionError: multi-node data-parallel replicas are not supported; use attention DP "
                           "(--attn-dp-size) across nodes")


def test_malformed_dist_init_addr(cluster):
    srv = cluster(cluster.host("node0"), 0, addr="127.0.0.1")
    assert srv.wait(20) == -signal.SIGKILL
    msgs = [m for _, m in logged(srv)]
    assert msgs[msgs.index("Init parallel begin.") + 1].startswith("Scheduler hit an exception: Traceback")
    assert "ValueError: Missing port in address (expected host:port): '127.0.0.1'" in srv.text
    assert any(x.endswith('/sglang/srt/distributed/bootstrap.py", line 242, in _resolve_dist_init_method')
               for x in srv.text)
    # a port that is not a number: int()'s ValueError, then SGLang's
    srv = cluster(cluster.host("node0b"), 0, addr="127.0.0.1:abc")
    assert srv.wait(20) == -signal.SIGKILL
    text = srv.text
    assert text.index("ValueError: invalid literal for int() with base 10: 'abc'") < text.index(
        "During handling of the above exception, another exception occurred:") < text.index(
        "ValueError: Invalid port number: 'abc'")


def test_without_dist_init_addr_nodes_never_meet(cluster):
    """No --dist-init-addr: each node rendezvous at its own --host and NCCL port (SGLang 0.5.23 has no
    check for it): node 1 tries its own 127.0.0.1:<nccl port>, nobody is there, it times out."""
    port = free_port()
    srv = cluster(cluster.host("node1"), 1, addr="", extra=("--nccl-port", str(port)), GPUOPS_SIM_DIST_TIMEOUT_S=1)
    assert srv.wait(30) == -signal.SIGKILL
    assert ("torch.distributed.DistNetworkError: The client socket has timed out after 1000ms while trying to "
            "connect to (127.0.0.1, %d)." % port) in srv.text


# ------------------------------------------------------------------ helpers


def _try_connect(port: int):
    try:
        return socket.create_connection(("127.0.0.1", port), timeout=1)
    except OSError:
        return None


def _established_to(port: int) -> int:
    """ESTABLISHED TCP connections whose remote end is local PORT (from /proc/net/tcp and tcp6)."""
    n = 0
    for table in ("/proc/net/tcp", "/proc/net/tcp6"):
        try:
            rows = Path(table).read_text().splitlines()[1:]
        except OSError:
            continue
        for row in rows:
            cols = row.split()
            remote, state = cols[2], cols[3]
            if state == "01" and int(remote.rsplit(":", 1)[1], 16) == port:
                n += 1
    return n
