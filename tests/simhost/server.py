"""The Server: its command line and the ranks it runs, the signals, and the start-up's order of phases."""

from __future__ import annotations

import contextlib
import os
import signal
import sys
import threading
import time

from .api import E2E_BUCKETS, Histogram, ITL_BUCKETS, QUEUE_BUCKETS, TTFT_BUCKETS, Serving
from .common import Exit, GPUS_FILE, MiB, NODE_SCENARIOS, Out, PACE_DIVISOR, SCENARIOS, SCENARIO_ENV, SIM_FILE, SPEC_FILE, build_parser, dest_of, read_json, vkey
from .gpus import Gpus
from .model import Model
from .rendezvous import MultiNode
from .startup import StartupLog


class Server(StartupLog, MultiNode, Serving):
    """``python -m sglang.launch_server ARGV`` on the simulated host: the command line, the ranks,
    the order of the start-up's phases (StartupLog, MultiNode), then the API (Serving)."""

    def __init__(self, argv):
        self.out = Out()
        self.spec = read_json(SPEC_FILE)
        if not self.spec:
            sys.stderr.write("gpuops simulated host: %s is missing (run gpuops sim setup again)\n" % SPEC_FILE)
            raise Exit(1)
        self.sim = read_json(SIM_FILE, {}) or {}
        self.scenario = self.sim.get("scenario") or "ok"
        chosen = os.environ.get(SCENARIO_ENV)
        if chosen:  # this process's own scenario (a node of a multi-node start)
            if chosen not in SCENARIOS + NODE_SCENARIOS:
                sys.stderr.write("gpuops simulated host: %s=%r is not a scenario (one of %s)\n"
                                 % (SCENARIO_ENV, chosen, ", ".join(SCENARIOS + NODE_SCENARIOS)))
                raise Exit(2)
            self.scenario = chosen
        self.pace = float(self.sim.get("pace") or 1.0)
        self.token_delay = float(self.sim.get("token_delay_s", 0.01))
        self.version = self.spec["version"]
        self.V = vkey(self.spec.get("resolved") or self.version)
        self.parser = build_parser(self.spec)
        ns = self.parser.parse_args(argv)  # exits 2 with argparse's message on a bad command line
        self.given = vars(ns)
        self.argv = list(argv)
        self.stop_event = threading.Event()
        self.term = False
        self.ready = False
        self.hung = False  # hang-after-ready: the scheduler deadlocked
        self.following = False  # a node R>0 whose schedulers are up (waiting for node 0's shutdown)
        self.node_exit = None  # why a following node ends: "shutdown" (node 0's broadcast)
        self.rendezvous = None
        self.closing = False  # a graceful shutdown is under way: lost peers are expected
        self.crash_lock = threading.Lock()
        self.httpd = None
        self.t0 = time.time()
        self.lock = threading.Lock()
        self._setup()

    def arg(self, *names, default=None):
        d = dest_of(self.spec, *names)
        if d is not None and d in self.given:
            return self.given[d]
        return default

    def _setup(self):
        a = self.arg
        self.model_path = a("--model-path")
        self.served = a("--served-model-name") or self.model_path
        self.tp = max(1, int(a("--tp-size", default=1)))
        self.pp = max(1, int(a("--pp-size", default=1)))
        self.dp = max(1, int(a("--dp-size", default=1)))
        self.ep = max(1, int(a("--ep-size", default=1)))
        self.host = a("--host", default="127.0.0.1")
        self.nnodes = int(a("--nnodes", default=1))
        self.node_rank = int(a("--node-rank", default=0))
        self.dist_init_addr = a("--dist-init-addr", "--nccl-init-addr")
        self.dist_timeout_arg = a("--dist-timeout")
        self.nccl_port_arg = a("--nccl-port")
        self.enable_dp_attention = bool(a("--enable-dp-attention", default=False))
        self.overlap = not bool(a("--disable-overlap-schedule", default=False))
        self.port = int(a("--port", default=30000))
        self.api_key = a("--api-key")
        self.enable_metrics = bool(a("--enable-metrics", default=False))
        self.reasoning_parser = a("--reasoning-parser")
        self.tool_parser = a("--tool-call-parser")
        for flag, value, names in (("--tool-call-parser", self.tool_parser, self.spec.get("tool_call_parsers")),
                                   ("--reasoning-parser", self.reasoning_parser, self.spec.get("reasoning_parsers"))):
            if value is not None and names and value not in names:
                self.parser.error("argument %s: invalid choice: %r (choose from %s)"
                                  % (flag, value, ", ".join(repr(n) for n in names)))
        algo = a("--speculative-algorithm")
        self.spec_algo_given = algo
        self.spec_algo = "EAGLE" if algo == "NEXTN" else algo
        self.spec_on = self.spec_algo in ("EAGLE", "EAGLE3", "STANDALONE", "NGRAM")
        self.spec_steps = int(a("--speculative-num-steps", default=3 if self.spec_on else 0) or 0)
        self.spec_topk = int(a("--speculative-eagle-topk", default=1 if self.spec_on else 0) or 0)
        self.spec_draft_tokens = int(a("--speculative-num-draft-tokens",
                                       default=(self.spec_steps + 1) if self.spec_on else 0) or 0)
        self.mamba_flag_value = a("--mamba-radix-cache-strategy", "--mamba-scheduler-strategy", default="auto")
        self.disable_radix = bool(a("--disable-radix-cache", default=False))
        self.page_size = int(a("--page-size", default=1) or 1)
        self.context_arg = a("--context-length")
        self.mem_frac_arg = a("--mem-fraction-static")
        self.max_running_arg = a("--max-running-requests")
        self.disable_cuda_graph = bool(a("--disable-cuda-graph", default=False))
        self.decode_log_interval = int(a("--decode-log-interval", default=40) or 40)
        self.skip_warmup = bool(a("--skip-server-warmup", default=False))
        self.model = Model(self.model_path, force_mtp=self.scenario == "ok-with-mtp")
        self.context = int(self.context_arg or self.model.context)
        # the GPUs: CUDA_VISIBLE_DEVICES (indices or UUIDs), --base-gpu-id, --gpu-id-step
        state = read_json(GPUS_FILE, {"gpus": []}) or {"gpus": []}
        gpus = state.get("gpus") or []
        visible = os.environ.get("CUDA_VISIBLE_DEVICES")
        if visible is not None and visible.strip() != "":
            order = []
            for item in visible.split(","):
                item = item.strip()
                if item.isdigit():
                    order.append(int(item))
                else:
                    order.extend(i for i, g in enumerate(gpus) if g.get("uuid") == item)
        else:
            order = list(range(len(gpus)))
        self.world = self.tp * self.pp * self.dp  # ranks of the whole server, every node
        base = int(a("--base-gpu-id", default=0) or 0)
        step = int(a("--gpu-id-step", default=1) or 1)
        self.rank_ids, locals_ = self._local_ranks(base, step)  # (dp, pp, tp) and local GPU id per rank here
        self.local_gpu = locals_
        self.nranks = len(self.rank_ids)  # ranks (scheduler processes) of this node
        self.holds_rank0 = self.rank_ids[:1] == [(0, 0, 0)]
        self.bad_device = None
        indices = []
        for r in range(self.nranks):
            local = locals_[r]
            if local < len(order) and order[local] < len(gpus):
                indices.append(order[local])
            else:
                indices.append(10**6)
                self.bad_device = self.bad_device if self.bad_device is not None else r
        self.gpus = Gpus(indices)
        self.gpu_mem_mb = (self.gpus.total(0) / MiB) if indices and indices[0] < len(gpus) else 143771
        # SGLang's own defaults for this GPU size (server_args._handle_gpu_memory_settings)
        g = self.gpu_mem_mb
        if g < 20 * 1024:
            chunk, max_bs = 2048, 8
        elif g < 35 * 1024:
            chunk, max_bs = 2048, (24 if self.tp < 4 else 80)
        elif g < 60 * 1024:
            chunk, max_bs = 4096, (32 if self.tp < 4 else 160)
        elif g < 160 * 1024:
            chunk, max_bs = 8192, (256 if self.tp < 4 else 512)
        else:
            chunk, max_bs = 16384, 512
        self.chunked_prefill = int(a("--chunked-prefill-size", default=chunk) or chunk)
        self.cuda_graph_max_bs = int(a("--cuda-graph-max-bs", default=max_bs) or max_bs)
        self.max_prefill_tokens = int(a("--max-prefill-tokens", default=16384) or 16384)
        if self.mem_frac_arg is not None:
            self.mem_frac = float(self.mem_frac_arg)
        else:
            reserved = 512 + max(self.chunked_prefill, 2048) * 1.5 + self.cuda_graph_max_bs * 2
            reserved += self.tp * self.pp / 8 * 1024
            if g > 60 * 1024:
                reserved = max(reserved, 10 * 1024)
            if self.spec_on:
                reserved += 4 * 1024
            self.mem_frac = round((g - reserved) / g, 3)
        if self.max_running_arg is not None:
            self.max_running = int(self.max_running_arg)
        elif self.spec_on:
            self.max_running = 48
        else:
            self.max_running = None  # from the KV pool
        self.capture_bs = self._capture_bs()
        self.accept_len = round(1 + self.spec_steps * 0.71, 2) if self.spec_on else None
        # mutable serving state
        self.metrics = {
            "prompt": 0, "gen": 0, "requests": 0, "aborted": 0, "cached": 0,
            "ttft": Histogram(TTFT_BUCKETS), "itl": Histogram(ITL_BUCKETS), "e2e": Histogram(E2E_BUCKETS),
            "queue": Histogram(QUEUE_BUCKETS),
        }
        self.running = 0
        self.used_tokens = 0
        self.gen_since_log = 0
        self.last_decode_log = time.time()
        self.last_gen_throughput = 0.0
        self.pending_prefill = []
        self.prefills_queued = 0  # requests handed to the scheduler loop ...
        self.prefills_logged = 0  # ... and those whose Prefill batch line it has logged
        self.cond = threading.Condition(self.lock)
        self.weight_mem_gb = 0.0
        self.kv_mem_gb = 0.0
        self.graph_mem_gb = 0.0
        self.max_total_tokens = 0
        self.startup_time = 0.0
        self.load_time = 0.0

    def _local_ranks(self, base, step):
        """This node's ranks as (dp, pp, tp) ranks and their local GPU ids. One node: every rank,
        on GPU base + r * step. Several (entrypoints/engine.py _calculate_rank_ranges, 0.5.23): node R
        runs pp ranks [pp_per_node * (R // nnodes_per_pp_rank), +pp_per_node) and tp ranks
        [tp_per_node * (R % nnodes_per_pp_rank), +tp_per_node), on GPU base + (pp % pp_per_node) *
        tp_per_node + (tp % tp_per_node) * step (the scheduler launch loop)."""
        if self.nnodes <= 1:
            ids = [(r // (self.tp * self.pp), (r // self.tp) % self.pp, r % self.tp) for r in range(self.world)]
            return ids, [base + r * step for r in range(self.world)]
        pp_per_node = max(self.pp // self.nnodes, 1)
        nodes_per_pp = max(self.nnodes // self.pp, 1)
        tp_per_node = max(self.tp // nodes_per_pp, 1)
        pp_lo = pp_per_node * (self.node_rank // nodes_per_pp)
        tp_lo = tp_per_node * (self.node_rank % nodes_per_pp)
        ids, gpu_ids = [], []
        for pp_rank in range(pp_lo, pp_lo + pp_per_node):
            for tp_rank in range(tp_lo, tp_lo + tp_per_node):
                ids.append((0, pp_rank, tp_rank))
                gpu_ids.append(base + (pp_rank % pp_per_node) * tp_per_node + (tp_rank % tp_per_node) * step)
        return ids, gpu_ids

    def global_rank(self, rank):
        """The torch.distributed rank of local RANK (tp_size * pp_rank + tp_rank)."""
        dp_rank, pp_rank, tp_rank = self.rank_ids[rank]
        return (dp_rank * self.pp + pp_rank) * self.tp + tp_rank

    def _capture_bs(self):
        m = self.cuda_graph_max_bs
        if self.spec_on:
            bs = list(range(1, 9)) + list(range(10, 33, 2)) + list(range(40, 65, 4)) + list(range(72, 257, 8))
            bs += list(range(272, m + 1, 16))
        else:
            bs = [1, 2, 4, 8, 12] + list(range(16, 257, 8)) + list(range(272, 512, 16)) + list(range(512, m + 1, 32))
        bs = [b for b in bs if b <= m]
        if m not in bs:
            bs.append(m)
        if self.max_running:
            bs = sorted(set([b for b in bs if b <= self.max_running] + [self.max_running]))
        return bs

    def prefix(self, rank):
        dp_rank, pp_rank, tp_rank = self.rank_ids[rank]
        p = ""
        if self.dp > 1:
            p += " DP%d" % dp_rank
        if self.pp > 1:
            p += " PP%d" % pp_rank
        if self.tp > 1:
            p += " TP%d" % tp_rank
        if self.ep > 1:
            p += " EP%d" % (tp_rank % self.ep)
        return p

    def log(self, msg, rank=None):
        self.out.log(msg, "" if rank is None else self.prefix(rank))

    def log_tp0(self, msg):
        """A line SGLang logs on TP rank 0 only: not on the other nodes of a multi-node start."""
        if self.holds_rank0:
            self.log(msg, 0 if self.world > 1 else None)

    def each(self, fn):
        for r in range(self.nranks):
            msg = fn(r)
            if msg is not None:
                self.log(msg, r)

    def sleep(self, real_seconds):
        """Wait REAL_SECONDS of a real start, scaled by the pace; False when told to stop."""
        t = max(0.0, real_seconds) * self.pace / PACE_DIVISOR
        if t > 0:
            self.stop_event.wait(t)
        if self.term:
            raise Exit(-getattr(self, "term_signal", signal.SIGTERM))
        return True

    def wait_wall(self, seconds):
        """Wait SECONDS of wall-clock time (not paced); raises Exit when told to stop."""
        if seconds > 0:
            self.stop_event.wait(seconds)
        if self.term:
            raise Exit(-getattr(self, "term_signal", signal.SIGTERM))

    def avail(self, rank):
        return self.gpus.avail(rank)

    def run(self):
        for sig in (signal.SIGTERM, signal.SIGINT):
            signal.signal(sig, self._on_signal)
        try:
            return self._run()
        except Exit as e:
            if e.code < 0:  # stopped during startup: die of that signal, as SGLang does
                self.gpus.release()
                signal.signal(-e.code, signal.SIG_DFL)
                os.kill(os.getpid(), -e.code)
                time.sleep(5)
            return e.code
        finally:
            self.gpus.release()

    def _on_signal(self, signum, frame):
        if self.following and signum == signal.SIGTERM and self.V >= (0, 5, 21):
            # entrypoints/engine.py (0.5.23): a node R>0 cannot drain on its own; rank 0's ShutdownReq
            # broadcast stops its schedulers (and the orchestrator's kill is the backstop)
            self.log("SIGTERM received on node_rank %d; waiting for the rank-0 ShutdownReq broadcast to stop "
                     "the schedulers." % self.node_rank)
            return
        self.term = True
        self.term_signal = signum
        self.stop_event.set()
        with self.cond:
            self.cond.notify_all()

    def _run(self):
        if self.scenario == "node-starts-late":  # started late: nothing at all until then
            self.wait_wall(self._node_delay())
        self._python_warning()
        self._early_warnings()
        self._server_args_check()
        self._multinode_check()
        self.log("server_args=" + self._server_args_repr())
        self.sleep(25)
        if self.scenario == "node-hangs-before-join":  # alive, silent, never reaches the rendezvous
            while True:
                self.wait_wall(3600)
        t_dist = time.time()
        self._dist_init()
        self.startup_begin = t_dist
        t_load = time.time()
        self._load_weights(draft=False)
        self.load_time = time.time() - t_load
        if self.spec_on and self.draft_first:
            self._load_weights(draft=True)
        self._memory_pool(draft=False)
        if self.spec_on and self.draft_first:
            self._memory_pool(draft=True)
        self._graphs(draft=False)
        if self.spec_on:
            if not self.draft_first:
                self._draft_old_order()
            else:
                self._draft_graphs()
        self.log_tp0("max_total_num_tokens=%d, chunked_prefill_size=%d, max_prefill_tokens=%d, "
                 "max_running_requests=%d, context_len=%d, available_gpu_mem=%.2f GB"
                 % (self.max_total_tokens, self.chunked_prefill, self.max_prefill_tokens, self.max_running,
                    self.context, self.avail(0)))
        self.startup_time = time.time() - self.t0
        self.sleep(5)
        if self.nnodes > 1 and self.node_rank > 0:
            return self._follow()
        return self._serve()


def main(argv=None):
    if hasattr(sys.stdout, "reconfigure"):
        with contextlib.suppress(Exception):
            sys.stdout.reconfigure(line_buffering=True)
            sys.stderr.reconfigure(line_buffering=True)
    try:
        server = Server(sys.argv[1:] if argv is None else argv)
    except Exit as e:
        return e.code
    return server.run()
