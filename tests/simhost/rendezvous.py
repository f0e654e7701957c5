"""Multi-node starts: the dist-init address as SGLang parses it, the TCP rendezvous that stands in
for torch's TCPStore, and the Server's part of it (waiting, following node 0, lost peers)."""

from __future__ import annotations

import contextlib
import errno
import ipaddress
import os
import random
import signal
import socket
import sys
import threading
import time

from .api import _make_http_server, health_handler
from .common import DIST_TIMEOUT_ENV, Exit, NODE_DELAY_ENV, PACE_DIVISOR, SGLANG_DIR, TORCH_DIST_TIMEOUT_S, c10_line, env_seconds, traceback_text


class AddressError(Exception):
    """NetworkAddress.parse's ValueError: its message, which raise it is (ADDRESS_RAISE_LINES)."""

    def __init__(self, message, where, value=None):
        Exception.__init__(self, message)
        self.message, self.where, self.value = message, where, value


# srt/utils/network.py: the line and source of each of NetworkAddress.parse's raises (0.5.23, 0.5.10)
ADDRESS_RAISE_LINES = {
    "new": {"bracket": (622, 'raise ValueError(f"Missing closing bracket in IPv6 address: {addr!r}")'),
            "inside": (625, 'raise ValueError(f"Invalid IPv6 address inside brackets: {host!r}")'),
            "after": (628, "raise ValueError("),
            "missing_port": (635, 'raise ValueError(f"Missing port in address (expected host:port): {addr!r}")'),
            "empty_host": (638, 'raise ValueError(f"Empty host in address: {addr!r}")'),
            "bare_ipv6": (641, "raise ValueError("),
            "port": (535, 'raise ValueError(f"Invalid port number: {s!r}")'),
            "bracket_port": (535, 'raise ValueError(f"Invalid port number: {s!r}")'),
            "range": (537, 'raise ValueError(f"Port out of range (0-65535): {port}")'),
            "bracket_range": (537, 'raise ValueError(f"Port out of range (0-65535): {port}")'),
            "int": (533, "port = int(s)"),
            "return": (645, "return NetworkAddress(host, _parse_port(port_str))"),
            "return_bracket": (631, "return NetworkAddress(host, _parse_port(rest[1:]))")},
    "old": {"bracket": (496, 'raise ValueError(f"Missing closing bracket in IPv6 address: {addr!r}")'),
            "inside": (499, 'raise ValueError(f"Invalid IPv6 address inside brackets: {host!r}")'),
            "after": (502, "raise ValueError("),
            "missing_port": (509, 'raise ValueError(f"Missing port in address (expected host:port): {addr!r}")'),
            "empty_host": (512, 'raise ValueError(f"Empty host in address: {addr!r}")'),
            "bare_ipv6": (515, "raise ValueError("),
            "port": (409, 'raise ValueError(f"Invalid port number: {s!r}")'),
            "bracket_port": (409, 'raise ValueError(f"Invalid port number: {s!r}")'),
            "range": (411, 'raise ValueError(f"Port out of range (0-65535): {port}")'),
            "bracket_range": (411, 'raise ValueError(f"Port out of range (0-65535): {port}")'),
            "int": (407, "port = int(s)"),
            "return": (519, "return NetworkAddress(host, _parse_port(port_str))"),
            "return_bracket": (505, "return NetworkAddress(host, _parse_port(rest[1:]))")},
}


def _is_ipv6(host):
    try:
        ipaddress.IPv6Address(host)
        return True
    except ValueError:
        return False


def _parse_port(s, bracket=False):
    try:
        port = int(s)
    except ValueError:
        raise AddressError("Invalid port number: %r" % s, "bracket_port" if bracket else "port", s) from None
    if not 0 <= port <= 65535:
        raise AddressError("Port out of range (0-65535): %d" % port, "bracket_range" if bracket else "range")
    return port


def parse_address(addr):
    """srt/utils/network.py NetworkAddress.parse: (host, port) of ``host:port`` / ``[v6]:port``, or
    AddressError with SGLang's words."""
    if addr.startswith("["):
        close = addr.find("]")
        if close == -1:
            raise AddressError("Missing closing bracket in IPv6 address: %r" % addr, "bracket")
        host = addr[1:close]
        if not _is_ipv6(host):
            raise AddressError("Invalid IPv6 address inside brackets: %r" % host, "inside")
        rest = addr[close + 1:]
        if not rest.startswith(":") or len(rest) < 2:
            raise AddressError("Expected ':port' after closing bracket, got: %r" % rest, "after")
        return host, _parse_port(rest[1:], bracket=True)
    if ":" not in addr:
        raise AddressError("Missing port in address (expected host:port): %r" % addr, "missing_port")
    host, port_str = addr.rsplit(":", 1)
    if not host:
        raise AddressError("Empty host in address: %r" % addr, "empty_host")
    if ":" in host and _is_ipv6(host):
        raise AddressError("Bare IPv6 address without brackets is ambiguous: %r. Use [%s]:%s instead."
                           % (addr, host, port_str), "bare_ipv6")
    return host, _parse_port(port_str)


def _v6(addr):
    """An address as torch's SocketImpl prints it: [::ffff:127.0.0.1]:port for IPv4."""
    host, port = addr[0], addr[1]
    return "[%s]:%d" % (host if ":" in host else "::ffff:" + host, port)


class Rendezvous:
    """The stand-in for torch's TCPStore at the dist-init address: a real TCP rendezvous.

    Node 0 serves it on the port, on every local address (as TCPStore's server listens); every node,
    node 0 included, connects as a client (retrying until the timeout, as TCPStore's client does) and
    registers its ranks; the nodes wait until all ``nnodes`` have; the connections then stay open for
    the life of the server, so a node that dies (its socket closes) is seen at once by the others, as
    their gloo and NCCL peers see it. The protocol, one ASCII line each:

        client -> node 0    JOIN <node_rank> <ranks on that node> <pid>
        node 0 -> clients   WAIT <ranks joined> <world size>      after each registration
        node 0 -> clients   GO <nnodes>                           once every node has joined
        node 0 -> clients   SHUTDOWN                              node 0 shuts down (SGLang's ShutdownReq)

    Anything else is ignored; a connection that never sends JOIN (a port probe) is never counted;
    a node rank outside 0..nnodes-1 or one already there is not counted either. A node that leaves
    before all have joined is no longer counted; after that its loss ends the others."""

    def __init__(self, server, host, port, timeout):
        self.server = server
        self.host, self.port, self.timeout = host, port, timeout
        self.lock = threading.Lock()
        self.members = {}  # node rank -> (connection, ranks, peer address)   (node 0: the server's side)
        self.all_joined = threading.Event()
        self.go = threading.Event()
        self.listener = None
        self.sock = None  # this node's client connection

    # ---------------------------------------------------------------- node 0: the server

    def serve(self):
        """Listen on the port, every local address (IPv6 and IPv4, else IPv4 only); None, or the
        OSError that stopped it (EADDRINUSE: the port is taken)."""
        last = None
        for family, addr in ((socket.AF_INET6, ("::", self.port)), (socket.AF_INET, ("0.0.0.0", self.port))):
            try:
                ls = socket.socket(family, socket.SOCK_STREAM)
            except OSError as e:
                last = e
                continue
            try:
                if family == socket.AF_INET6:
                    ls.setsockopt(socket.IPPROTO_IPV6, socket.IPV6_V6ONLY, 0)
                ls.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
                ls.bind(addr)
                ls.listen(128)
            except OSError as e:
                ls.close()
                last = e
                if e.errno == errno.EADDRINUSE:
                    return e
                continue
            self.listener = ls
            threading.Thread(target=self._accept, daemon=True).start()
            return None
        return last

    def _accept(self):
        while True:
            try:
                conn, addr = self.listener.accept()
            except OSError:
                return
            threading.Thread(target=self._member, args=(conn, addr), daemon=True).start()

    def _send_all(self, line):
        for conn, _, _ in list(self.members.values()):
            with contextlib.suppress(OSError):
                conn.sendall(line.encode())

    def joined_ranks(self):
        with self.lock:
            return sum(n for _, n, _ in self.members.values())

    def _member(self, conn, addr):
        node = None
        f = conn.makefile("rb")
        try:
            for raw in f:
                parts = raw.decode("ascii", "replace").split()
                if node is not None or len(parts) != 4 or parts[0] != "JOIN":
                    continue
                try:
                    rank, nranks = int(parts[1]), int(parts[2])
                except ValueError:
                    continue
                with self.lock:
                    if not 0 <= rank < self.server.nnodes or rank in self.members or self.go.is_set():
                        continue
                    node = rank
                    self.members[rank] = (conn, nranks, addr)
                    joined = sum(n for _, n, _ in self.members.values())
                    self._send_all("WAIT %d %d\n" % (joined, self.server.world))
                    if len(self.members) == self.server.nnodes:
                        self.all_joined.set()
                        self.go.set()
                        self._send_all("GO %d\n" % self.server.nnodes)
        except OSError:
            pass
        if node is None:
            conn.close()
            return
        with self.lock:
            gone = self.members.get(node, (None,))[0] is conn
            if gone and not self.go.is_set():
                del self.members[node]
        if gone and self.go.is_set() and node != 0:
            host = addr[0][7:] if addr[0].startswith("::ffff:") else addr[0]
            self.server.peer_lost((host, addr[1]))

    def wait_all(self, timeout):
        """Node 0: wait (silently) until every node has joined; False at the timeout."""
        deadline = time.monotonic() + timeout
        while not self.all_joined.is_set():
            left = deadline - time.monotonic()
            if left <= 0:
                return False
            self.server.wait_wall(min(0.2, left))
        return True

    def shutdown(self):
        """Node 0 shuts down: tell the other nodes (their schedulers then exit), close the store."""
        with self.lock:
            self._send_all("SHUTDOWN\n")
        for s in (self.listener, self.sock):
            if s is not None:
                with contextlib.suppress(OSError):
                    s.close()

    def server_addr(self):
        try:
            return self.sock.getpeername()[:2]
        except (OSError, AttributeError):
            return (self.host, self.port)

    # ---------------------------------------------------------------- every node: the client

    def join(self):
        """Connect to the store (torch's client: tries until the timeout, one retry after a delay,
        then DistNetworkError) and register this node's ranks."""
        srv = self.server
        ms = int(self.timeout * 1000)
        what = "The client socket has timed out after %dms while trying to connect to (%s, %d)." % (
            ms, self.host, self.port)
        sock = self._connect(self.timeout)
        if sock is None:
            delay = int(ms * random.uniform(0.6, 0.85))
            for r in range(srv.nranks):
                srv.out.write(c10_line("E", "socket.cpp:1028", "[c10d] " + what)
                              + c10_line("W", "TCPStore.cpp:340", "[c10d] TCP client failed to connect/validate to "
                                         "host %s:%d - retrying (try=0, timeout=%dms, delay=%dms): %s"
                                         % (self.host, self.port, ms, delay, what))
                              + "Exception raised from throwTimeoutError at /__w/pytorch/pytorch/torch/csrc/"
                                "distributed/c10d/socket.cpp:1030 (most recent call first):\n\n", sys.stderr)
            srv.wait_wall(delay / 1000.0)
            sock = self._connect(self.timeout * 0.8)
        if sock is None:
            for r in range(srv.nranks):
                srv.out.write(c10_line("E", "socket.cpp:1028", "[c10d] " + what)
                              + c10_line("E", "TCPStore.cpp:328", "[c10d] TCP client failed to connect/validate to "
                                         "host %s:%d - timed out (try=1, timeout=%dms): %s"
                                         % (self.host, self.port, ms, what))
                              + "Exception raised from throwTimeoutError at /__w/pytorch/pytorch/torch/csrc/"
                                "distributed/c10d/socket.cpp:1030 (most recent call first):\n\n", sys.stderr)
            srv.connect_timed_out(self.host, self.port, self.timeout)
        self.sock = sock
        try:
            sock.sendall(("JOIN %d %d %d\n" % (srv.node_rank, srv.nranks, os.getpid())).encode())
        except OSError:
            pass
        threading.Thread(target=self._read, daemon=True).start()

    def _connect(self, budget):
        deadline = time.monotonic() + budget
        while True:
            left = deadline - time.monotonic()
            if left <= 0:
                return None
            try:
                s = socket.create_connection((self.host, self.port), timeout=min(1.0, left))
                s.settimeout(None)
                return s
            except OSError:  # refused, unreachable, not resolvable: TCPStore's client retries
                self.server.wait_wall(min(0.25, max(0.0, deadline - time.monotonic())))

    def _read(self):
        srv = self.server
        try:
            desc = "SocketImpl(fd=%d, addr=%s, remote=%s)" % (self.sock.fileno(), _v6(self.sock.getsockname()),
                                                              _v6(self.sock.getpeername()))
        except OSError:
            desc = "SocketImpl(fd=3, addr=?, remote=%s)" % _v6((self.host, self.port))
        # the peer gloo names: node 0's address, its pair's own (ephemeral) port
        addr = (self.server_addr()[0], random.Random(self.port).randint(32768, 60999))
        f = self.sock.makefile("rb")
        try:
            for raw in f:
                word = raw.split()[:1]
                if word == [b"GO"]:
                    self.go.set()
                elif word == [b"SHUTDOWN"]:
                    srv.node_shutdown()
                    return
        except OSError:
            pass
        if srv.node_rank == 0 or srv.closing:
            return
        if not self.go.is_set():
            srv.store_lost(desc)
        else:
            srv.peer_lost(addr)

    def wait_go(self):
        """A node R>0: wait (silently, no timeout of its own: node 0's store times out) for every node."""
        while not self.go.is_set():
            self.server.wait_wall(0.2)


class MultiNode:
    """The multi-node part of :class:`Server`: the rendezvous, a following node, lost peers."""

    def _node_delay(self):
        """node-starts-late's delay in wall seconds: GPUOPS_SIM_NODE_DELAY_S, else 2 real minutes at the pace."""
        v = env_seconds(NODE_DELAY_ENV)
        return v if v is not None else 120.0 * self.pace / PACE_DIVISOR

    def _dist_timeout(self):
        """The rendezvous' timeout in wall seconds (not paced): GPUOPS_SIM_DIST_TIMEOUT_S, else
        --dist-timeout, else torch's default for an NCCL process group (600 s)."""
        v = env_seconds(DIST_TIMEOUT_ENV)
        if v is not None:
            return v
        if self.dist_timeout_arg is not None and float(self.dist_timeout_arg) > 0:
            return float(self.dist_timeout_arg)
        return float(TORCH_DIST_TIMEOUT_S)

    def _multinode_check(self):
        """check_server_args' multi-node assertions, in the main process before server_args is
        logged (0.5.10: srt/server_args.py ServerArgs.check_server_args; 0.5.23:
        srt/arg_groups/validation_hook.py check_server_args): an uncaught AssertionError, exit 1."""
        new = self.V >= (0, 5, 21)
        nn = self.nnodes
        if nn == 0:
            return self._main_crash("tp", "ZeroDivisionError: integer modulo by zero", carets=False)
        if (self.tp * self.pp) % nn != 0:
            return self._main_crash("tp", "AssertionError: tp_size must be divisible by number of nodes")
        if new and self.dp > 1 and nn != 1:
            return self._main_crash("dp", "AssertionError: multi-node data-parallel replicas are not supported; "
                                    "use attention DP (--attn-dp-size) across nodes")
        if not new and self.dp > 1 and nn != 1 and not self.enable_dp_attention:
            return self._main_crash("dp", "AssertionError: multi-node data parallel is not supported unless dp "
                                    "attention!")

    def _store_addr(self):
        """Where the ranks rendezvous (bootstrap.py _resolve_dist_init_method, 0.5.23; model_runner.py
        init_torch_distributed, 0.5.10): --dist-init-addr, else this node's own --host (or 127.0.0.1)
        and its NCCL port (--nccl-port, else a free one): nodes then never meet unless they share both."""
        if self.dist_init_addr:
            return parse_address(self.dist_init_addr)
        if self.nccl_port_arg is not None:
            return self.host or "127.0.0.1", int(self.nccl_port_arg)
        with socket.socket() as s:
            s.bind(("127.0.0.1", 0))
            return self.host or "127.0.0.1", s.getsockname()[1]

    def _rendezvous(self):
        """torch.distributed.init_process_group's TCPStore rendezvous and the gloo group after it:
        node 0 serves the store; every node (0 too) registers its ranks; all wait, silently, until
        every node has. Failures end the node as torch and SGLang end it."""
        try:
            host, port = self._store_addr()
        except AddressError as e:
            err = e
            self._ranks_crash(range(self.nranks), lambda r: self._tb_addr(err))
        timeout = self._dist_timeout()
        rdv = self.rendezvous = Rendezvous(self, host, port, timeout)
        if self.node_rank == 0:
            err = rdv.serve()
            if err is not None:  # TCPStore's server socket (libuv): the port is taken, most likely
                code = err.errno or errno.EADDRINUSE
                msg = ("The server socket has failed to listen on any local network address. port: %d, useIpv6: "
                       "false, code: %d, name: %s, message: %s"
                       % (port, -code, errno.errorcode.get(code, "UNKNOWN"), os.strerror(code).lower()))
                self._ranks_crash([0], lambda r: self._tb_sched(r, "store") + "torch.distributed.DistNetworkError: "
                                  + msg + "\n")
        rdv.join()  # every node's client, node 0's included; returns once connected or crashes
        if self.node_rank == 0:
            if not rdv.wait_all(timeout):  # TCPStore's waitForWorkers on rank 0
                joined = rdv.joined_ranks()
                msg = ("Timed out after %d seconds waiting for clients. %d/%d clients joined."
                       % (int(timeout) + 1, joined, self.world))
                self._ranks_crash([0], lambda r: self._tb_sched(r, "store") + "torch.distributed.DistStoreError: "
                                  + msg + "\n")
        else:
            rdv.wait_go()  # the gloo group of WORLD: every rank's address through the store

    def _tb_addr(self, err):
        """NetworkAddress.parse's ValueError for a malformed --dist-init-addr, in the scheduler."""
        sg = lambda rel: os.path.join(SGLANG_DIR, "srt", rel)  # noqa: E731
        new = self.V >= (0, 5, 21)
        lines = ADDRESS_RAISE_LINES["new" if new else "old"]
        if new:
            frames = [(sg("managers/scheduler.py"), 6362, "run_scheduler_process",
                       "scheduler = Scheduler(server_args, port_args)"),
                      (sg("managers/scheduler.py"), 536, "__init__", "bootstrap.init_parallel_runtime("),
                      (sg("distributed/bootstrap.py"), 127, "init_parallel_runtime",
                       "dist_init_method = _resolve_dist_init_method(dist_port=dist_port)"),
                      (sg("distributed/bootstrap.py"), 242, "_resolve_dist_init_method",
                       "na = NetworkAddress.parse(get_parallel().dist_init_addr)")]
        else:
            frames = [(sg("managers/scheduler.py"), 3600, "run_scheduler_process", "scheduler = Scheduler("),
                      (sg("managers/scheduler.py"), 385, "__init__", "self.init_model_worker()"),
                      (sg("managers/scheduler.py"), 632, "init_model_worker", "self.init_tp_model_worker()"),
                      (sg("managers/scheduler.py"), 600, "init_tp_model_worker",
                       "self.tp_worker = TpModelWorker(**worker_kwargs)"),
                      (sg("managers/tp_worker.py"), 261, "__init__", "self._init_model_runner()"),
                      (sg("managers/tp_worker.py"), 344, "_init_model_runner", "self._model_runner = ModelRunner("),
                      (sg("model_executor/model_runner.py"), 403, "__init__",
                       "pre_model_load_memory = self.init_torch_distributed()"),
                      (sg("model_executor/model_runner.py"), 925, "init_torch_distributed",
                       "na = NetworkAddress.parse(self.server_args.dist_init_addr)")]
        net = sg("utils/network.py")
        line, src = lines[err.where]
        if err.where in ("port", "range", "bracket_port", "bracket_range"):
            ret, ret_src = lines["return_bracket" if err.where.startswith("bracket") else "return"]
            frames.append((net, ret, "parse", ret_src))
            frames.append((net, line, "_parse_port", src))
        else:
            frames.append((net, line, "parse", src))
        text = traceback_text(frames) + "ValueError: %s\n" % err.message
        if err.where in ("port", "bracket_port"):  # raised while handling int()'s own ValueError
            first = traceback_text([(net, lines["int"][0], "_parse_port", lines["int"][1], "int(s)")])
            text = (first + "ValueError: invalid literal for int() with base 10: %r\n\nDuring handling of the above "
                    "exception, another exception occurred:\n\n" % err.value) + text
        return text

    def connect_timed_out(self, host, port, timeout):
        """A rank's TCPStore client gave up on HOST:PORT: torch's C++ lines were printed as it went."""
        msg = ("The client socket has timed out after %dms while trying to connect to (%s, %d)."
               % (int(timeout * 1000), host, port))
        self._ranks_crash(range(self.nranks), lambda r: self._tb_sched(r, "store")
                          + "torch.distributed.DistNetworkError: " + msg + "\n")

    def store_lost(self, sock_desc):
        """The store's server went away while this node waited for the others (before all joined)."""
        msg = "Failed to recv, got 0 bytes. Connection was likely closed. Did the remote server shutdown or crash?"
        cxx = (c10_line("W", "TCPStore.cpp:138", "[c10d] recvValueWithTimeout failed on %s: %s" % (sock_desc, msg))
               + "Exception raised from recvBytes at /__w/pytorch/pytorch/torch/csrc/distributed/c10d/Utils.hpp:790 "
               "(most recent call first):\n\n")
        self._ranks_crash(range(self.nranks), lambda r: self._tb_sched(r, "gloo")
                          + "torch.distributed.DistNetworkError: " + msg + "\n", lambda r: cxx)

    def peer_lost(self, addr):
        """A node of this server died after all had joined: gloo's next collective fails on every rank
        here (the request broadcast once serving, a collective of the start before)."""
        if self.closing:
            return
        where = "loop" if (self.ready or self.following) else "memory"
        msg = ("RuntimeError: [/__w/pytorch/pytorch/third_party/gloo/gloo/transport/tcp/pair.cc:561] Connection "
               "closed by peer [%s]:%d. This is typically caused by a remote worker crashing. Check the logs of the "
               "remote worker before reporting an error. GLHF! \U0001f3d6\ufe0f\n" % addr)
        self._ranks_crash(range(self.nranks), lambda r: self._tb_sched(r, where) + msg)

    def node_shutdown(self):
        """Node 0's ShutdownReq broadcast reached this node: its schedulers leave their loops."""
        if not self.following:
            return self.peer_lost((self.rendezvous.server_addr()[0], random.Random(self.port).randint(32768, 60999)))
        self.node_exit = "shutdown"
        self.stop_event.set()

    def _follow(self):
        """A node R>0 once its schedulers are up (entrypoints/engine.py, node_rank >= 1): no tokenizer
        and no API; SGLang's dummy health-check server on --host/--port; then it blocks until its
        schedulers exit (node 0's shutdown broadcast), or dies with them."""
        self.following = True
        shown = "[%s]" % self.host if ":" in self.host else self.host
        self.log("Dummy health check server started in background thread at %s:%d" % (shown, self.port))
        try:
            self.httpd = _make_http_server(self.host, self.port, health_handler(self))
        except OSError as e:  # uvicorn's error, then the thread's finally
            self.log("[Errno %d] error while attempting to bind on address (%r, %d): %s"
                     % (e.errno or 98, self.host, self.port, (e.strerror or str(e)).lower()))
            self.log("Dummy health check server stopped at %s:%d" % (shown, self.port))
            self.httpd = None
        else:
            threading.Thread(target=self.httpd.serve_forever, kwargs={"poll_interval": 0.2}, daemon=True).start()
        while not self.term and self.node_exit is None:
            self.stop_event.wait(1.0)
        if self.term:  # SIGINT, or SIGTERM before 0.5.21: no handler, the process dies of it
            raise Exit(-getattr(self, "term_signal", signal.SIGTERM))
        for r in range(self.nranks):  # block_until_scheduler_exits / wait_for_completion
            self.log("Scheduler or DataParallelController %d terminated with 0" % (os.getpid() + 1 + r))
        self.gpus.release()
        return 0
