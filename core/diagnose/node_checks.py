"""A multi-node deployment's nodes compared: what must agree between them for NCCL and torch's
rendezvous to work (the NVIDIA driver, torch and its CUDA build, the engine), the network interface
the plan names on each node, and whether each node reaches node 0's rendezvous (--dist-init-addr)
at all: a firewall that drops the port shows as a timeout, nothing listening as refused.

Each node's own host checks (gpuops.core.diagnose.host_checks) run as for one host; this module
adds the checks across nodes, from the same triage probe documents plus one small probe per node.
"""

from __future__ import annotations

import json
from typing import Any

from .. import engines
from ..domain import Evidence, Finding, Fix, Plan
from ..hosts.host import Host, HostError, host_python, script_source
from ..hosts.programs import node_probe as node_probe_program
from .host_checks import HostCheckResult


def split_addr(addr: str) -> tuple[str, int]:
    host, _, port = addr.rpartition(":")
    return host.strip("[]"), int(port)


async def node_probe(host: Host, plan: Plan, iface: str | None) -> dict[str, Any]:
    """What node `host` says: its interfaces, and whether it reaches the plan's rendezvous."""
    addr, port = split_addr(plan.dist_init_addr or "")
    try:
        argv = [host_python(host), "-c", script_source(node_probe_program), addr, str(port), iface or ""]
        res = await host.run(argv, timeout=30)
        return json.loads(res.stdout.strip().splitlines()[-1]) if res.ok else {"error": res.stderr.strip()[-300:]}
    except (HostError, ValueError, IndexError) as exc:
        return {"error": getattr(exc, "message", str(exc))}


def compare_nodes(plan: Plan, docs: list[dict[str, Any]], probes: list[dict[str, Any]],
                  running: list[bool]) -> list[HostCheckResult]:
    """The checks across the nodes of `plan` (node R's triage probe document docs[R], its node probe
    probes[R], whether its server runs running[R])."""
    hosts = [m.host for m in plan.members]
    out = [
        _same(plan, "nodes-driver", "NVIDIA driver", [_driver(d) for d in docs], hosts,
              "install the same NVIDIA driver on every node (NCCL across nodes needs matching drivers)"),
        _same(plan, "nodes-torch", "torch (CUDA build)", [_torch(d) for d in docs], hosts,
              f"run the same {engines.get(plan.engine).title} environment (torch and its CUDA build, NCCL) "
              "on every node"),
    ]
    for rank, m in enumerate(plan.members):
        iface = m.env.get("NCCL_SOCKET_IFNAME")
        if iface:
            out.append(_iface(rank, m.host, iface, probes[rank]))
    for rank in range(1, len(plan.members)):
        out.append(_reach(plan, rank, hosts[rank], probes[rank], running[0]))
    return out


def _driver(doc: dict[str, Any]) -> str | None:
    driver = doc.get("driver") or {}
    nvml = doc.get("nvml") or {}
    return driver.get("module_version") or nvml.get("driver_version")


def _torch(doc: dict[str, Any]) -> str | None:
    torch = doc.get("torch") or {}
    if not torch.get("found"):
        return None
    return f"{torch.get('version')} (CUDA {torch.get('cuda') or 'none'})"


def _same(plan: Plan, name: str, what: str, values: list[str | None], hosts: list[str], fix: str) -> HostCheckResult:
    seen = {h: v for h, v in zip(hosts, values)}
    known = {v for v in seen.values() if v}
    listing = ", ".join(f"{h} {v or '?'}" for h, v in seen.items())
    if not known:
        return HostCheckResult(name, None, f"{what}: no node said ({listing})")
    if len(known) == 1 and all(seen.values()):
        return HostCheckResult(name, True, f"{what} the same on every node: {next(iter(known))}")
    if len(known) == 1:
        return HostCheckResult(name, None, f"{what}: {listing} (not every node said)")
    finding = Finding(name, "error", f"the nodes of {plan.name} run different {what}s: {listing}",
                      tuple(Evidence(f"node:{h}", reading=f"{what} {v or '?'}") for h, v in seen.items()),
                      Fix(fix), data={"values": seen})
    return HostCheckResult(name, False, finding.summary, (finding,))


def _iface(rank: int, host: str, iface: str, probe: dict[str, Any]) -> HostCheckResult:
    name = "nodes-interface"
    ifaces = probe.get("ifaces")
    if not isinstance(ifaces, list):
        return HostCheckResult(name, None, f"node {rank} ({host}): cannot list its interfaces "
                                           f"({probe.get('error') or 'no /sys/class/net'})")
    if iface in ifaces:
        return HostCheckResult(name, True, f"node {rank} ({host}) has {iface} (NCCL_SOCKET_IFNAME)")
    finding = Finding(name, "error", f"node {rank} ({host}) has no interface {iface}, which its "
                                     f"NCCL_SOCKET_IFNAME names: NCCL and gloo cannot open it",
                      (Evidence(f"node:{host}", reading=f"/sys/class/net: {', '.join(ifaces)}"),),
                      Fix(f"set nccl_interface in [hosts.{host}] to one of {', '.join(ifaces)} and plan again"),
                      data={"node_rank": rank, "host": host, "interface": iface})
    return HostCheckResult(name, False, finding.summary, (finding,))


def _reach(plan: Plan, rank: int, host: str, probe: dict[str, Any], node0_running: bool) -> HostCheckResult:
    name = "nodes-rendezvous"
    addr = plan.dist_init_addr
    said = probe.get("connect")
    where = f"node {rank} ({host}) → {addr}"
    if said == "ok":
        return HostCheckResult(name, True, f"{where}: reachable")
    if said == "refused":
        detail = f"{where}: refused (nothing listens there{'' if node0_running else ': node 0 is not running'})"
        if not node0_running:
            return HostCheckResult(name, None, detail)
        finding = Finding(name, "warning", f"node {rank} ({host}) is refused at {addr}: node 0 runs but nothing "
                                           "listens on its rendezvous port (past it already, or on another address)",
                          (Evidence(f"node:{host}", reading=f"connect {addr}: refused"),),
                          Fix(f"check node 0's --dist-init-addr is an address of {plan.host} that {host} reaches "
                              f"(node_addr in [hosts.{plan.host}])"),
                          data={"node_rank": rank, "host": host, "connect": said})
        return HostCheckResult(name, False, detail, (finding,))
    if said == "timeout" or (isinstance(said, str) and said.startswith("error")):
        finding = Finding(name, "error", f"node {rank} ({host}) cannot reach node 0's rendezvous at {addr} "
                                         f"({said}): a firewall or route between the nodes, or a wrong node_addr",
                          (Evidence(f"node:{host}", reading=f"connect {addr}: {said}"),),
                          Fix(f"open TCP {addr.rsplit(':', 1)[-1] if addr else '?'} on {plan.host} to {host} (and "
                              f"NCCL's ports), or set node_addr in [hosts.{plan.host}] to an address {host} reaches"),
                          data={"node_rank": rank, "host": host, "connect": said})
        return HostCheckResult(name, False, finding.summary, (finding,))
    return HostCheckResult(name, None, f"{where}: could not check ({probe.get('error') or said or 'no answer'})")
