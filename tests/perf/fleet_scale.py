#!/usr/bin/env python3
"""The dashboard with a very large inventory: the real `gpuops` in tmux (a real terminal), its
config listing N SSH hosts that cannot be reached, against a baseline of a few such hosts measured
in the same run. For each size it prints: the process's RSS once the first frame is drawn and again
after a settling time, its CPU while idle (a share of one core over a window), how many hosts the
Monitor is connecting to at once (from the process's sockets), and the time from `q` to the
process's exit.

Two kinds of unreachable host: `refused` (127.0.0.1 on a port where nothing listens: each attempt
fails at once) and `blackhole` (a listener that never accepts: the kernel's queue fills and the
attempts hang until gpuops' connect timeout), as a fleet whose network is down behaves.

    .venv/bin/python tests/perf/fleet_scale.py [--hosts 10000] [--baseline 10] [--kind refused,blackhole]
                                               [--settle 20] [--window 10]

Figures only (a shared machine's numbers move): no pass or fail. The issue's: 10,000 hosts held
733 MiB and a core and took 23 s to quit.
"""

from __future__ import annotations

import argparse
import shutil
import socket
import subprocess
import sys
import tempfile
import time
import uuid
from pathlib import Path

import psutil

GPUOPS = str(Path(sys.executable).with_name("gpuops"))


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def write_config(path: Path, hosts: int, port: int) -> None:
    lines = []
    for i in range(hosts):
        lines.append(f'[hosts.h{i:05d}]\nssh = "root@127.0.0.1:{port}"\n')
    path.write_text("\n".join(lines))


class Tmux:
    def __init__(self, command: str, size: tuple[int, int] = (200, 50)):
        self.socket = f"gpuops-perf-{uuid.uuid4().hex[:8]}"
        self.session = "s"
        self.run("new-session", "-d", "-s", self.session, "-x", str(size[0]), "-y", str(size[1]), command)

    def run(self, *args: str) -> str:
        return subprocess.run(["tmux", "-L", self.socket, "-f", "/dev/null", *args], capture_output=True,
                              text=True).stdout

    def capture(self) -> str:
        return self.run("capture-pane", "-t", self.session, "-p")

    def pane_pid(self) -> int:
        return int(self.run("display", "-p", "-t", self.session, "#{pane_pid}").strip())

    def keys(self, *keys: str) -> None:
        self.run("send-keys", "-t", self.session, *keys)

    def close(self) -> None:
        self.run("kill-server")


def gpuops_process(shell_pid: int, timeout: float = 30) -> psutil.Process:
    """The gpuops python process under the pane (exec'd by `env`, or a child of the shell)."""
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        try:
            p = psutil.Process(shell_pid)
            for q in [p, *p.children(recursive=True)]:
                if any("gpuops" in part for part in q.cmdline()[:2]):
                    return q
        except psutil.Error:
            pass
        time.sleep(0.05)
    raise RuntimeError("gpuops did not start")


def connecting(proc: psutil.Process, port: int) -> tuple[int, int]:
    """(TCP sockets of the process to the hosts' port: all, established or in SYN_SENT)."""
    try:
        conns = proc.net_connections(kind="tcp")
    except psutil.Error:
        return 0, 0
    mine = [c for c in conns if c.raddr and c.raddr.port == port]
    return len(mine), sum(1 for c in mine if c.status == psutil.CONN_SYN_SENT)


def exited(proc: psutil.Process) -> bool:
    try:
        return proc.status() == psutil.STATUS_ZOMBIE
    except psutil.NoSuchProcess:
        return True


def measure(kind: str, hosts: int, settle: float, window: float, root: Path) -> dict:
    listener = None
    if kind == "blackhole":
        listener = socket.socket()
        listener.bind(("127.0.0.1", 0))
        listener.listen(0)  # never accepted: the queue fills, later connects hang
        port = listener.getsockname()[1]
    else:
        port = free_port()  # nothing listens there: refused
    work = root / f"{kind}-{hosts}"
    (work / "home").mkdir(parents=True)
    cfg = work / "config.toml"
    write_config(cfg, hosts, port)
    env = (f"-u COLUMNS -u LINES TERM=xterm-256color HOME={work / 'home'} XDG_STATE_HOME={work / 'state'} "
           f"XDG_CONFIG_HOME={work / 'cfg'}")
    started = time.monotonic()
    pane = Tmux(f"env {env} {GPUOPS} --config {cfg}")
    out: dict = {"kind": kind, "hosts": hosts}
    try:
        proc = gpuops_process(pane.pane_pid())
        deadline = time.monotonic() + 120
        while "Quit" not in pane.capture() and time.monotonic() < deadline:
            time.sleep(0.05)
        out["first_frame_s"] = time.monotonic() - started
        out["rss_start_mib"] = proc.memory_info().rss / 2**20
        time.sleep(settle)
        out["rss_settled_mib"] = proc.memory_info().rss / 2**20
        sockets = [connecting(proc, port)]
        cpu0, t0 = proc.cpu_times(), time.monotonic()
        time.sleep(window)
        cpu1, t1 = proc.cpu_times(), time.monotonic()
        sockets.append(connecting(proc, port))
        out["cpu_idle_pct"] = 100 * ((cpu1.user + cpu1.system) - (cpu0.user + cpu0.system)) / (t1 - t0)
        out["rss_end_mib"] = proc.memory_info().rss / 2**20
        out["sockets"] = max(s[0] for s in sockets)
        out["threads"] = proc.num_threads()
        pane.keys("q")
        sent = time.monotonic()
        out["quit_s"] = float("inf")
        while time.monotonic() - sent < 180:
            if exited(proc):  # (a zombie has exited: tmux reaps it when it gets to it)
                out["quit_s"] = time.monotonic() - sent
                break
            time.sleep(0.01)
        else:
            proc.kill()
    finally:
        pane.close()
        if listener is not None:
            listener.close()
    return out


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--hosts", type=int, default=10_000)
    ap.add_argument("--baseline", type=int, default=10)
    ap.add_argument("--kind", default="refused,blackhole")
    ap.add_argument("--settle", type=float, default=20.0, help="seconds after the first frame before measuring")
    ap.add_argument("--window", type=float, default=10.0, help="seconds of the idle CPU window")
    args = ap.parse_args()
    if not shutil.which("tmux"):
        print("tmux is needed", file=sys.stderr)
        return 2
    root = Path(tempfile.mkdtemp(prefix="gpuops-fleet-"))
    rows = []
    try:
        for kind in args.kind.split(","):
            for n in (args.baseline, args.hosts):
                print(f"measuring {kind} x {n} ...", file=sys.stderr, flush=True)
                rows.append(measure(kind, n, args.settle, args.window, root))
    finally:
        shutil.rmtree(root, ignore_errors=True)
    head = ("kind", "hosts", "first frame s", "RSS start MiB", "RSS settled MiB", "RSS end MiB", "CPU idle %",
            "sockets", "threads", "q to exit s")
    print("  ".join(f"{h:>15}" for h in head))
    for r in rows:
        print("  ".join(f"{v:>15}" for v in (
            r["kind"], r["hosts"], f"{r['first_frame_s']:.1f}", f"{r['rss_start_mib']:.0f}",
            f"{r['rss_settled_mib']:.0f}", f"{r['rss_end_mib']:.0f}", f"{r['cpu_idle_pct']:.1f}", r["sockets"],
            r["threads"], f"{r['quit_s']:.2f}")))
    for kind in args.kind.split(","):
        base, big = [r for r in rows if r["kind"] == kind]
        per_host = (big["rss_end_mib"] - base["rss_end_mib"]) * 1024 / max(1, big["hosts"] - base["hosts"])
        print(f"{kind}: {per_host:.1f} KiB per host more than the baseline's; CPU idle {big['cpu_idle_pct']:.1f}% vs "
              f"{base['cpu_idle_pct']:.1f}%; quit {big['quit_s']:.2f} s vs {base['quit_s']:.2f} s")
    return 0


if __name__ == "__main__":
    sys.exit(main())
