"""Ports for the tests, which share this machine with each other (pytest-xdist's workers) and with
whatever else runs on it.

Two ways a test lost its port before (CI, stop 31: four failures in one run, e.g. a simulated server's
"[Errno 98] error while attempting to bind on address ('127.0.0.1', 38681): address already in use"):

- a port asked of the kernel (bind to port 0) comes from the ephemeral range, which every outgoing
  connection of every process takes its source port from as well: between the test closing its probe
  socket and the server binding the port, an ssh or HTTP connection of another worker could take it;
- a plan without --port starts at the same first port (30000) in every worker, so two workers' plans
  could both find 30000 free and both deploy there.

So each worker takes ports from blocks of its own below the ephemeral range, where no outgoing
connection lands: `free_port()` from one, and the planner's first port (GPUOPS_FIRST_PORT, set for
the whole worker process and every gpuops it starts, see conftest) from another. Each process starts
at a place of its own in its blocks, so that two test sessions on one machine (two checkouts, or a
load generator beside a run) do not walk the same ports in step.
"""

from __future__ import annotations

import itertools
import os
import random
import socket

FREE_BASE = 10_000  # free_port()'s blocks: FREE_BASE + FREE_BLOCK * worker
FREE_BLOCK = 1_500
FIRST_BASE = 30_000  # the planner's first ports: FIRST_BASE + FIRST_BLOCK * worker (it walks up from there)
FIRST_BLOCK = 200
WORKERS = 8  # blocks for this many workers; more share blocks (modulo)


def ephemeral_low() -> int:
    """The kernel's lowest ephemeral port (Linux: /proc/sys/net/ipv4/ip_local_port_range)."""
    try:
        with open("/proc/sys/net/ipv4/ip_local_port_range") as f:
            return int(f.read().split()[0])
    except (OSError, ValueError, IndexError):
        return 32_768


def worker() -> int:
    """This process's pytest-xdist worker number (gw3 → 3); 0 outside xdist."""
    name = os.environ.get("PYTEST_XDIST_WORKER", "")
    return int(name[2:]) % WORKERS if name.startswith("gw") and name[2:].isdigit() else 0


_FIRST_OFFSET = random.randrange(FIRST_BLOCK // 2)  # (the planner walks up from the first port)


def first_port() -> int:
    """The first port a plan without --port tries in this worker (its GPUOPS_FIRST_PORT): the same
    for the whole process."""
    return FIRST_BASE + FIRST_BLOCK * worker() + _FIRST_OFFSET


def _blocks_fit() -> None:
    top = max(FREE_BASE + FREE_BLOCK * WORKERS, FIRST_BASE + FIRST_BLOCK * WORKERS)
    if top > ephemeral_low():
        raise RuntimeError(f"the tests' port blocks reach {top}, into the ephemeral range ({ephemeral_low()}-)")


_next = itertools.count(random.randrange(FREE_BLOCK))


def free_port(host: str = "127.0.0.1") -> int:
    """A port of this worker's block that nothing on HOST listens on or is connected from now, never
    the same twice in a row (the block is walked round)."""
    base = FREE_BASE + FREE_BLOCK * worker()
    for _ in range(FREE_BLOCK):
        port = base + next(_next) % FREE_BLOCK
        with socket.socket() as s:
            try:
                s.bind((host, port))
            except OSError:
                continue
            return port
    raise RuntimeError(f"no free port in {base}-{base + FREE_BLOCK - 1}")


_blocks_fit()
