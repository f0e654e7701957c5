"""A multi-node deployment's nodes compared by triage: drivers and torch builds that differ, an NCCL
interface a node lacks, and each node's reach of node 0's rendezvous, probed for real (a port that
listens, one that refuses, and one a firewall drops, on this machine's own network stack)."""

from __future__ import annotations

import asyncio
import socket
import subprocess
import sys

from gpuops.core.config import HostConfig
from gpuops.core.diagnose.node_checks import compare_nodes, node_probe
from gpuops.core.hosts.host import make_host, script_source
from gpuops.core.hosts.programs import node_probe as node_probe_program
from gpuops.core.planning.plan import Node, Wishes, build_multinode_plan
from tests.test_multinode_plan import target
from tests.test_plan import facts


def _plan(addr: str = "10.0.0.1", iface: str | None = "ib0"):
    nodes = [Node(target("gpu1"), addr, iface), Node(target("gpu2"), "10.0.0.2", iface)]
    return build_multinode_plan(facts("qwen3__Qwen3-8B", "Qwen/Qwen3-8B"), nodes, Wishes(tp=8, name="duo"))


def _doc(driver: str, torch: str = "2.9.1", cuda: str = "12.9") -> dict:
    return {"driver": {"module_version": driver}, "nvml": {"driver_version": driver},
            "torch": {"found": True, "version": torch, "cuda": cuda}}


def test_nodes_that_agree_pass_and_a_different_driver_or_torch_is_an_error_naming_both():
    plan = _plan()
    probes = [{"ifaces": ["ib0", "lo"], "connect": "ok"}, {"ifaces": ["ib0", "lo"], "connect": "ok"}]
    same = {r.name: r for r in compare_nodes(plan, [_doc("580.1"), _doc("580.1")], probes, [True, True])}
    assert same["nodes-driver"].ok and same["nodes-torch"].ok and same["nodes-rendezvous"].ok
    assert same["nodes-interface"].ok
    differ = {r.name: r for r in compare_nodes(plan, [_doc("580.1"), _doc("570.9", "2.8.0")], probes, [True, True])}
    (driver,) = differ["nodes-driver"].findings
    assert driver.severity == "error" and "gpu1 580.1" in driver.summary and "gpu2 570.9" in driver.summary
    assert differ["nodes-torch"].ok is False and "2.8.0" in differ["nodes-torch"].detail
    unknown = {r.name: r for r in compare_nodes(plan, [{}, {}], probes, [True, True])}
    assert unknown["nodes-driver"].ok is None  # nobody said: not a pass, not a failure


def test_a_node_without_the_named_interface_and_a_dropped_rendezvous_are_errors():
    plan = _plan()
    probes = [{"ifaces": ["ib0", "lo"], "connect": "ok"}, {"ifaces": ["eth0", "lo"], "connect": "timeout"}]
    checks = compare_nodes(plan, [_doc("580.1"), _doc("580.1")], probes, [True, True])
    iface = [r for r in checks if r.name == "nodes-interface" and r.ok is False]
    assert len(iface) == 1 and "node 1 (gpu2) has no interface ib0" in iface[0].detail
    assert "eth0" in iface[0].findings[0].fix.summary
    (reach,) = [r for r in checks if r.name == "nodes-rendezvous"]
    assert reach.ok is False and reach.findings[0].severity == "error" and "firewall" in reach.findings[0].summary
    # refused while node 0 is not running is no finding (nothing should listen); while it runs, a warning
    refused = [{"ifaces": ["ib0"], "connect": "ok"}, {"ifaces": ["ib0"], "connect": "refused"}]
    (idle,) = [r for r in compare_nodes(plan, [{}, {}], refused, [False, False]) if r.name == "nodes-rendezvous"]
    assert idle.ok is None and not idle.findings
    (live,) = [r for r in compare_nodes(plan, [{}, {}], refused, [True, True]) if r.name == "nodes-rendezvous"]
    assert live.ok is False and live.findings[0].severity == "warning"


def _probe(host: str, port: int) -> str:
    out = subprocess.run([sys.executable, "-c", script_source(node_probe_program), host, str(port), ""], capture_output=True, text=True,
                         timeout=30)
    import json

    return json.loads(out.stdout)["connect"]


def test_the_node_probe_tells_listening_refused_and_dropped_apart():
    with socket.socket() as listening:
        listening.bind(("127.0.0.1", 0))
        listening.listen()
        assert _probe("127.0.0.1", listening.getsockname()[1]) == "ok"
    with socket.socket() as closed:
        closed.bind(("127.0.0.1", 0))
        port = closed.getsockname()[1]  # bound, not listening: the kernel refuses
        assert _probe("127.0.0.1", port) == "refused"
    # SYNs dropped, as a firewall drops them: a listener whose accept queue is full (the kernel then
    # drops every new SYN on loopback too)
    with socket.socket() as full:
        full.bind(("127.0.0.1", 0))
        full.listen(0)
        port = full.getsockname()[1]
        held = []
        for _ in range(4):  # fill the queue (the kernel's backlog for 0 is one or two)
            c = socket.socket()
            c.settimeout(1)
            try:
                c.connect(("127.0.0.1", port))
                held.append(c)
            except OSError:
                c.close()
                break
        try:
            assert _probe("127.0.0.1", port) == "timeout"
        finally:
            for c in held:
                c.close()


def test_node_probe_runs_through_the_host_and_lists_interfaces():
    plan = _plan(addr="127.0.0.1", iface=None)
    host = make_host(HostConfig(name="here", local=True, ssh=None, python=sys.executable))
    doc = asyncio.run(node_probe(host, plan, None))
    assert "lo" in doc["ifaces"] and doc["connect"] in ("refused", "ok")

