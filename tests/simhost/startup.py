"""The log script: SGLang's start-up lines per version and their timing (the phases a start goes
through, the crashes of the scenarios), as the Server's StartupLog part."""

from __future__ import annotations

import contextlib
import hashlib
import json
import os
import random
import signal
import socket
import sys
import time

from .common import DRAFT_ARCH, Exit, FIELD_RENAMES, GiB, HYBRID_ARCHS, LIB, MiB, NCCL_VERSION, PACE_DIVISOR, SERVER_ARGS_FILE, SGLANG_DIR, SPEC_CRASH_LINES, TORCH_DIR_NAME, WARN_LINES, human_interval, read_json, tqdm_rate, traceback_text


class StartupLog:
    """The start-up log script of :class:`Server` (see the module's docstring)."""

    @property
    def old_dist(self):  # "Init torch distributed begin." up to 0.5.20; "Init parallel begin." from 0.5.21
        return self.V < (0, 5, 21)

    @property
    def graph_era(self):
        if self.V < (0, 5, 15):
            return "old"
        if self.V < (0, 5, 16):
            return "v15"
        if self.V < (0, 5, 23):
            return "v16"
        return "v23"

    @property
    def draft_first(self):  # draft weights before the target KV pool (scheduler-driven init, 0.5.21+)
        return self.V >= (0, 5, 21)

    def _python_warning(self):
        path = os.path.join(SGLANG_DIR, "launch_server.py")
        line = WARN_LINES[max([k for k in WARN_LINES if k <= self.V] or [(0, 5, 10)])]
        self.out.write("%s:%d: UserWarning: 'python -m sglang.launch_server' is still supported, but "
                       "'sglang serve' is the recommended entrypoint.\n  Example: sglang serve --model-path "
                       "<model> [options]\n  warnings.warn(\n" % (path, line), sys.stderr)

    def _early_warnings(self):
        # server_args.__post_init__ logs before logging is configured: bare lines on stderr (0.5.10 texts).
        if not self.spec_on or self.V > (0, 5, 10):
            return
        if self.max_running_arg is None:
            self.out.bare("Max running requests is reset to 48 for speculative decoding. You can override this "
                          "by explicitly setting --max-running-requests.", sys.stderr)
        if os.environ.get("SGLANG_ENABLE_SPEC_V2", "").lower() in ("1", "true", "yes"):
            self.out.bare("Spec v2 is enabled for eagle/eagle3 speculative decoding and overlap schedule is "
                          "turned on.", sys.stderr)
        else:
            self.out.bare("Overlap scheduler is disabled when spec v2 is off or using unsupported speculative "
                          "algorithm. You can set env SGLANG_ENABLE_SPEC_V2=True to enable the experimental "
                          "overlap scheduler. ", sys.stderr)

    def _mamba_strategy(self):
        v = self.mamba_flag_value or "auto"
        if v == "auto":
            # <=0.5.13: auto -> no_buffer; 0.5.15+: extra_buffer with the overlap schedule or page_size > 1
            if self.V < (0, 5, 15):
                return "no_buffer"
            return "extra_buffer"
        return v

    def _server_args_check(self):
        """The spec-config-crash scenario: SGLang 0.5.10-0.5.13's ValueError for speculative decoding on
        a hybrid (mamba) model with radix cache and no_buffer (srt/server_args.py
        _handle_mamba_radix_cache), raised while ServerArgs is built, before anything is logged."""
        if self.scenario != "spec-config-crash" or not self.spec_on:
            return
        if not ((0, 5, 10) <= self.V <= (0, 5, 13)):
            return
        if self.model.arch not in HYBRID_ARCHS or not self.model.hybrid:
            return
        if self._mamba_strategy() == "extra_buffer" or self.disable_radix:
            return
        sg = os.path.join(SGLANG_DIR, "srt", "server_args.py")
        ls = os.path.join(SGLANG_DIR, "launch_server.py")
        # line numbers in launch_server.py and srt/server_args.py of that release (0.5.11: 0.5.10's)
        n = SPEC_CRASH_LINES[max(k for k in SPEC_CRASH_LINES if k <= self.V)]
        frames = [
            ("<frozen runpy>", 198, "_run_module_as_main", None),
            ("<frozen runpy>", 88, "_run_code", None),
            (ls, n["launch"], "<module>", "server_args = prepare_server_args(sys.argv[1:])"),
            (sg, n["prepare"], "prepare_server_args", "return ServerArgs.from_cli_args(raw_args)"),
            (sg, n["from_cli"], "from_cli_args", "return cls(**{attr: getattr(args, attr) for attr in attrs})"),
            ("<string>", n["fields"] + 3, "__init__", None),
            (sg, n["post_init"], "__post_init__", "self._handle_model_specific_adjustments()"),
            (sg, n["call"], "_handle_model_specific_adjustments", "self._handle_mamba_radix_cache("),
            (sg, n["raise"], "_handle_mamba_radix_cache", "raise ValueError("),
        ]
        msg = ("Speculative decoding for %s is not compatible with radix cache when using "
               "--mamba-scheduler-strategy no_buffer.To use radix cache with speculative decoding, please use "
               "--mamba-scheduler-strategy extra_buffer and set SGLANG_ENABLE_SPEC_V2=1." % self.model.arch)
        text = "Traceback (most recent call last):\n"
        for f, line, fn, src in frames:
            text += '  File "%s", line %d, in %s\n' % (f, line, fn)
            if src:
                text += "    %s\n" % src
        text += "ValueError: %s\n" % msg
        self.out.write(text, sys.stderr)
        raise Exit(1)

    def _server_args_values(self):
        data = read_json(SERVER_ARGS_FILE, {}) or {}
        versions = data.get("versions") or {}
        key = "0.5.23" if self.V >= (0, 5, 20) else "0.5.10"
        fields = versions.get(key) or []
        values = dict((k, v) for k, v in fields)
        order = [k for k, _ in fields]
        for k, v in self.given.items():  # ServerArgs.from_cli_args's renames, then the fields it has
            k = FIELD_RENAMES.get(k, k)
            if k in values:
                values[k] = v
        values.update({
            "model_path": self.model_path, "tokenizer_path": self.arg("--tokenizer-path") or self.model_path,
            "served_model_name": self.served, "host": self.host, "port": self.port, "tp_size": self.tp,
            "pp_size": self.pp, "dp_size": self.dp, "ep_size": self.ep, "mem_fraction_static": self.mem_frac,
            "chunked_prefill_size": self.chunked_prefill, "max_prefill_tokens": self.max_prefill_tokens,
            "cuda_graph_max_bs": self.cuda_graph_max_bs, "cuda_graph_bs": self.capture_bs,
            "context_length": self.context_arg, "api_key": self.api_key, "enable_metrics": self.enable_metrics,
            "reasoning_parser": self.reasoning_parser, "tool_call_parser": self.tool_parser,
            "speculative_algorithm": self.spec_algo, "page_size": self.page_size,
            "max_running_requests": self.max_running, "device": "cuda",
        })
        if self.spec_on:
            values.update({"speculative_num_steps": self.spec_steps, "speculative_eagle_topk": self.spec_topk,
                           "speculative_num_draft_tokens": self.spec_draft_tokens,
                           "speculative_draft_model_path": self.arg("--speculative-draft-model-path") or self.model_path})
        if "random_seed" in values and values.get("random_seed") is None:
            values["random_seed"] = random.randint(0, 1 << 30)
        for k in ("mamba_scheduler_strategy", "mamba_radix_cache_strategy"):
            if k in values and self.model.hybrid:
                values[k] = self._mamba_strategy()
        return order, values

    def _server_args_repr(self):
        order, values = self._server_args_values()
        if self.V >= (0, 5, 20):  # server_args={server_args.resolved_dict()}
            return repr(dict((k, values[k]) for k in order))
        return "ServerArgs(%s)" % ", ".join("%s=%r" % (k, values[k]) for k in order)

    def _main_crash(self, which, exc_line, carets=True):
        """The main process's uncaught exception from check_server_args (0.5.23's launch_server.py
        kills the process tree in a finally first, and logs that)."""
        pid = os.getpid()
        if self.V >= (0, 5, 23):
            self.log("kill_process_tree called: parent_pid=%d, include_parent=False, pid=%d" % (pid, pid))
        sg = lambda rel: os.path.join(SGLANG_DIR, rel)  # noqa: E731
        if self.V >= (0, 5, 21):  # the 0.5.23 wheel's files and lines
            check = {"tp": (179, "assert (cfg.tp_size * cfg.pp_size) % cfg.nnodes == 0, (",
                            "(cfg.tp_size * cfg.pp_size) % cfg.nnodes == 0"),
                     "dp": (199, "assert not (cfg.dp_size > 1 and cfg.nnodes != 1), (",
                            "not (cfg.dp_size > 1 and cfg.nnodes != 1)")}[which]
            frames = [
                ("<frozen runpy>", 198, "_run_module_as_main", None),
                ("<frozen runpy>", 88, "_run_code", None),
                (sg("launch_server.py"), 84, "<module>", "run_server(server_args)"),
                (sg("launch_server.py"), 67, "run_server", "launch_server(server_args)"),
                (sg("srt/entrypoints/http_server.py"), 3156, "launch_server", ") = Engine._launch_subprocesses(",
                 "Engine._launch_subprocesses("),
                (sg("srt/entrypoints/engine.py"), 1165, "_launch_subprocesses", "server_args.check_server_args()"),
                (sg("srt/server_args.py"), 511, "check_server_args", "check_server_args(self)"),
                (sg("srt/arg_groups/validation_hook.py"), check[0], "check_server_args", check[1],
                 check[2] if carets else None),
            ]
        else:  # 0.5.10's
            check = {"tp": (6065, "assert ("), "dp": (6076, "assert not (")}[which]
            frames = [
                ("<frozen runpy>", 198, "_run_module_as_main", None),
                ("<frozen runpy>", 88, "_run_code", None),
                (sg("launch_server.py"), 62, "<module>", "run_server(server_args)"),
                (sg("launch_server.py"), 47, "run_server", "launch_server(server_args)"),
                (sg("srt/entrypoints/http_server.py"), 2165, "launch_server", ") = Engine._launch_subprocesses(",
                 "Engine._launch_subprocesses("),
                (sg("srt/entrypoints/engine.py"), 642, "_launch_subprocesses", "server_args.check_server_args()"),
                (sg("srt/server_args.py"), check[0], "check_server_args", check[1]),
            ]
        self.out.write(traceback_text(frames) + exc_line + "\n", sys.stderr)
        raise Exit(1)

    def _tb_sched(self, rank, where):
        """A scheduler's traceback down to WHERE: "store" (TCPStore in init_process_group), "gloo"
        (the gloo group of WORLD, waiting for the other ranks), "memory" (a collective of the start:
        the pre-load memory all_reduce), "loop" (the event loop's request broadcast)."""
        sg = lambda rel: os.path.join(SGLANG_DIR, "srt", rel)  # noqa: E731
        th = lambda rel: os.path.join(LIB, TORCH_DIR_NAME, "distributed", rel)  # noqa: E731
        new = self.V >= (0, 5, 21)
        if new:
            init = [(sg("managers/scheduler.py"), 6362, "run_scheduler_process",
                     "scheduler = Scheduler(server_args, port_args)"),
                    (sg("managers/scheduler.py"), 536, "__init__", "bootstrap.init_parallel_runtime("),
                    (sg("distributed/bootstrap.py"), 152, "init_parallel_runtime", "_init_parallel_groups("),
                    (sg("distributed/bootstrap.py"), 322, "_init_parallel_groups", "init_distributed_environment(")]
            store_at = (sg("distributed/parallel_state.py"), 2517, "init_distributed_environment",
                        "torch.distributed.init_process_group(")
            world_at = [(sg("distributed/parallel_state.py"), 2551, "init_distributed_environment",
                         "_WORLD = init_world_group("),
                        (sg("distributed/parallel_state.py"), 2144, "init_world_group", "return GroupCoordinator("),
                        (sg("distributed/parallel_state.py"), 404, "__init__", "cpu_group = torch.distributed.new_group(")]
        else:
            init = [(sg("managers/scheduler.py"), 3600, "run_scheduler_process", "scheduler = Scheduler("),
                    (sg("managers/scheduler.py"), 385, "__init__", "self.init_model_worker()"),
                    (sg("managers/scheduler.py"), 632, "init_model_worker", "self.init_tp_model_worker()"),
                    (sg("managers/scheduler.py"), 600, "init_tp_model_worker",
                     "self.tp_worker = TpModelWorker(**worker_kwargs)"),
                    (sg("managers/tp_worker.py"), 261, "__init__", "self._init_model_runner()"),
                    (sg("managers/tp_worker.py"), 344, "_init_model_runner", "self._model_runner = ModelRunner("),
                    (sg("model_executor/model_runner.py"), 403, "__init__",
                     "pre_model_load_memory = self.init_torch_distributed()"),
                    (sg("model_executor/model_runner.py"), 955, "init_torch_distributed", "init_distributed_environment(")]
            store_at = (sg("distributed/parallel_state.py"), 1676, "init_distributed_environment",
                        "torch.distributed.init_process_group(")
            world_at = [(sg("distributed/parallel_state.py"), 1702, "init_distributed_environment",
                         "_WORLD = init_world_group(ranks, local_rank, backend)"),
                        (sg("distributed/parallel_state.py"), 1379, "init_world_group", "return GroupCoordinator("),
                        (sg("distributed/parallel_state.py"), 301, "__init__", "cpu_group = torch.distributed.new_group(")]
        logger83 = (th("c10d_logger.py"), 83, "wrapper", "return func(*args, **kwargs)")
        logger97 = (th("c10d_logger.py"), 97, "wrapper", "func_return = func(*args, **kwargs)")
        if where == "store":
            frames = init + [store_at, logger83, logger97,
                             (th("distributed_c10d.py"), 2546, "init_process_group",
                              "store, rank, world_size = next(rendezvous_iterator)"),
                             (th("rendezvous.py"), 248, "_tcp_rendezvous_handler", "store = _create_c10d_store("),
                             (th("rendezvous.py"), 215, "_create_c10d_store", "return TCPStore(")]
        elif where == "gloo":
            frames = init + world_at + [
                logger97, (th("distributed_c10d.py"), 6902, "new_group", "return _new_group_with_tag("),
                (th("distributed_c10d.py"), 7035, "_new_group_with_tag",
                 "pg_or_nonmember, pg_store = _new_process_group_helper("),
                (th("distributed_c10d.py"), 2874, "_new_process_group_helper",
                 "backend_result = creator_fn(dist_backend_opts, backend_options)"),
                (th("distributed_c10d.py"), 669, "_create_gloo_process_group", "backend_class = ProcessGroupGloo(")]
        elif where == "memory" and new:
            frames = [
                (sg("managers/scheduler.py"), 6362, "run_scheduler_process", "scheduler = Scheduler(server_args, port_args)"),
                (sg("managers/scheduler.py"), 568, "__init__", "self.init_model_worker()"),
                (sg("managers/scheduler.py"), 1130, "init_model_worker", "self.init_tp_model_worker()"),
                (sg("managers/scheduler.py"), 1033, "init_tp_model_worker", "self.tp_worker = TpModelWorker(**worker_kwargs)"),
                (sg("managers/tp_worker.py"), 319, "__init__", "self._init_model_runner()"),
                (sg("managers/tp_worker.py"), 487, "_init_model_runner", "self._model_runner = ModelRunner("),
                (sg("model_executor/model_runner.py"), 499, "__init__", "self.initialize()"),
                (sg("model_executor/model_runner.py"), 466, "initialize", "self.init_torch_distributed()"),
                (sg("model_executor/model_runner.py"), 1262, "init_torch_distributed",
                 "self.pre_model_load_memory = bootstrap.measure_pre_model_load_memory("),
                (sg("distributed/bootstrap.py"), 207, "measure_pre_model_load_memory",
                 "pre_model_load_memory = get_available_gpu_memory("),
                (sg("utils/common.py"), 571, "get_available_gpu_memory", "torch.distributed.all_reduce("),
                logger83, (th("distributed_c10d.py"), 3913, "all_reduce", "work.wait()")]
        elif where == "memory":
            frames = init[:7] + [
                (sg("model_executor/model_runner.py"), 999, "init_torch_distributed",
                 "pre_model_load_memory = get_available_gpu_memory("),
                (sg("utils/common.py"), 596, "get_available_gpu_memory", "torch.distributed.all_reduce("),
                logger83, (th("distributed_c10d.py"), 3913, "all_reduce", "work.wait()")]
        else:  # "loop": the request broadcast from TP0 that every iteration of the event loop does
            src = self.rank_ids[rank][2] == 0
            ctx = (os.path.join(LIB, TORCH_DIR_NAME, "utils", "_contextlib.py"), 124, "decorate_context",
                   "return func(*args, **kwargs)")
            loop = "event_loop_overlap" if self.overlap else "event_loop_normal"
            if new:
                frames = [
                    (sg("managers/scheduler.py"), 6368, "run_scheduler_process", "scheduler.run_event_loop()"),
                    (sg("managers/scheduler.py"), 2010, "run_event_loop", "dispatch_event_loop(self)"),
                    (sg("managers/scheduler.py"), 6215, "dispatch_event_loop", "return _dispatch_event_loop_once(scheduler)"),
                    (sg("managers/scheduler.py"), 6231 if self.overlap else 6233, "_dispatch_event_loop_once",
                     "scheduler.%s()" % loop), ctx,
                    (sg("managers/scheduler.py"), 2078 if self.overlap else 2033, loop, "self.ingest_requests()"),
                    (sg("managers/scheduler.py"), 2205, "ingest_requests",
                     "self.request_receiver.recv_requests(local_reqs=local_reqs)"),
                    (sg("managers/scheduler_components/request_receiver.py"), 101, "recv_requests",
                     "recv_reqs = self._broadcast_reqs_across_ranks(recv_reqs, local_reqs)"),
                    (sg("managers/scheduler_components/request_receiver.py"), 206, "_broadcast_reqs_across_ranks",
                     "recv_reqs = broadcast_pyobj("),
                    (sg("utils/common.py"), 2715 if src else 2730, "broadcast_pyobj",
                     "dist.broadcast(tensor_size, src=src, group=dist_group)")]
            else:
                frames = [
                    (sg("managers/scheduler.py"), 3616, "run_scheduler_process", "scheduler.run_event_loop()"),
                    (sg("managers/scheduler.py"), 1300, "run_event_loop", "dispatch_event_loop(self)"),
                    (sg("managers/scheduler.py"), 3497 if self.overlap else 3499, "dispatch_event_loop",
                     "scheduler.%s()" % loop), ctx,
                    (sg("managers/scheduler.py"), 1344 if self.overlap else 1307, loop,
                     "recv_reqs = self.recv_requests()"),
                    (sg("managers/scheduler.py"), 1506, "recv_requests", "recv_reqs = broadcast_pyobj("),
                    (sg("utils/common.py"), 1203 if src else 1218, "broadcast_pyobj",
                     "dist.broadcast(tensor_size, src=src, group=dist_group)")]
            frames += [logger83, (th("distributed_c10d.py"), 3787, "broadcast", "work.wait()")]
        return traceback_text(frames)

    def _ranks_crash(self, ranks, text_of, cxx_of=None):
        """Each of this node's RANKS logs 'Scheduler hit an exception: ' + TEXT_OF(rank), after torch's
        C++ log lines CXX_OF(rank) on stderr; then the main process's sigquit line, and the process tree
        is killed (SIGKILL). From any thread; only the first caller gets through."""
        if not self.crash_lock.acquire(False):
            while True:
                time.sleep(3600)
        for r in ranks:
            if cxx_of is not None:
                self.out.write(cxx_of(r), sys.stderr)
            self.log("Scheduler hit an exception: " + text_of(r), r)
        time.sleep(min(1.0, self.pace / PACE_DIVISOR))
        self.log("Received sigquit from a child process. It usually means the child failed.")
        if self.V >= (0, 5, 23):  # launch_phase_sigquit_handler: kill_process_tree(os.getpid())
            pid = os.getpid()
            self.log("kill_process_tree called: parent_pid=%d, include_parent=True, pid=%d" % (pid, pid))
        self.gpus.release()
        with contextlib.suppress(Exception):
            sys.stdout.flush()
        os.kill(os.getpid(), signal.SIGKILL)
        time.sleep(5)

    def _nccl_info(self, text, rank):
        host = socket.gethostname()
        self.out.bare("%s:%d:%d [%d] NCCL INFO %s" % (host, os.getpid(), os.getpid() + rank, rank % self.tp, text))

    def _dist_init(self):
        hang = self.scenario == "hang-at-dist-init"
        t0 = time.time()
        begin = "Init torch distributed begin." if self.old_dist else "Init parallel begin."
        self.each(lambda r: begin)
        self.sleep(2)
        if self.bad_device is not None:
            self._scheduler_crash("RuntimeError: CUDA error: invalid device ordinal\nCUDA kernel errors might be "
                                  "asynchronously reported at some other API call, so the stacktrace below might "
                                  "be incorrect.\nFor debugging consider passing CUDA_LAUNCH_BLOCKING=1\n"
                                  "Compile with `TORCH_USE_CUDA_DSA` to enable device-side assertions.\n",
                                  "dist")
        if self.nnodes > 1:  # torch's TCPStore rendezvous: waits here, silently, for every node
            self._rendezvous()
        if self.tp > 1 or hang:
            if self.tp > 1 and self.holds_rank0:
                self.log("sglang is using nccl==%s" % NCCL_VERSION, 0)
            # NCCL's INFO lines (its communicators' Init START) only with NCCL_DEBUG=INFO, as NCCL itself;
            # a hang without it is silent after "sglang is using nccl" (or the parallel-begin line)
            if os.environ.get("NCCL_DEBUG", "").upper() in ("INFO", "TRACE"):
                if self.holds_rank0:
                    self._nccl_info("NCCL version %s+cuda12.9" % NCCL_VERSION, 0)
                comm = int(hashlib.sha1(str(os.getpid()).encode()).hexdigest()[:16], 16)
                state = self.gpus.read().get("gpus") or []
                one = self.nnodes <= 1
                for local in range(self.tp) if one else range(self.nranks):
                    r = local if one else self.rank_ids[local][2]  # the TP rank
                    dev = local if one else self.local_gpu[local]  # the CUDA device here
                    idx = self.gpus.indices[local]
                    bus = state[idx].get("pci_bus_id", "00000000:00:00.0") if idx < len(state) else "0:0:0.0"
                    bus_int = int(bus.split(":")[-2], 16) << 12 if bus.count(":") >= 2 else 0
                    self._nccl_info("ncclCommInitRank comm 0x%x rank %d nranks %d cudaDev %d nvmlDev %d busId %x "
                                    "commId 0x%016x - Init START" % (0x55d4c0a00000 + 0x1000 * r, r, self.tp, dev, idx,
                                                                     bus_int, comm), r)
        if hang:
            while True:  # NCCL's rendezvous never completes: no watchdog guards startup
                self.sleep(3600 * PACE_DIVISOR / max(self.pace, 1e-9))
        self.sleep(15 if self.tp > 1 else 5)
        el = time.time() - t0
        if self.old_dist:
            self.each(lambda r: "Init torch distributed ends. elapsed=%.2f s, mem usage=0.00 GB" % el)
        else:
            self.each(lambda r: "Init parallel ends. elapsed=%.2f s" % el)
            self.each(lambda r: "Memory baseline taken. mem usage=0.00 GB")
        self._balance_warning()

    def _balance_warning(self):
        if self.nranks <= 1:
            return
        avail = [self.avail(r) for r in range(self.nranks)]
        low = min(avail)
        for r in range(self.nranks):
            if low < avail[r] * 0.9:
                self.log("The memory capacity is unbalanced. Some GPUs may be occupied by other processes. "
                         "pre_model_load_memory=%r, local_gpu_memory=%r, local_gpu_memory * 0.9=%r"
                         % (round(low, 4), round(avail[r], 4), avail[r] * 0.9), r)

    def _weights(self):
        """(target, draft) weight bytes per GPU."""
        per_gpu = self.model.total_size / float(self.tp * self.pp)
        layers = self.model.layers + max(self.model.mtp_layers, 1 if self.spec_on else 0)
        frac = (max(self.model.mtp_layers, 1) / float(layers)) if (self.spec_on or self.model.mtp_layers) else 0.0
        draft = per_gpu * frac if self.spec_on else 0.0
        target = per_gpu * (1 - frac) if self.model.mtp_layers or self.spec_on else per_gpu
        return target, draft

    def _load_weights(self, draft):
        target_b, draft_b = self._weights()
        nbytes = draft_b if draft else target_b
        context = 0.45 * GiB
        t0 = time.time()
        before = [self.avail(r) for r in range(self.nranks)]
        if draft and self.old_dist:
            self.each(lambda r: "Init torch distributed begin.")
            self.each(lambda r: "Init torch distributed ends. elapsed=0.00 s, mem usage=0.00 GB")
        base = [self.gpus.used.get(self.gpus.indices[r], 0) for r in range(self.nranks)]
        if not draft:
            base = [b + context for b in base]
            self.gpus.set(base)
        self.each(lambda r: "Load weight begin. avail mem=%.2f GB" % self.avail(r))
        # real: about 0.5 GB/s per GPU of safetensors, several seconds at least
        real_total = max(8.0 if draft else 10.0, nbytes / 0.5e9)
        shards = 1 if draft else self.model.shards
        desc = "Loading safetensors checkpoint shards"
        self.out.write("%s:   0%% Completed | 0/%d [00:00<?, ?it/s]\n" % (desc, shards), sys.stderr)
        start = time.time()
        room = [self.avail(r) * GiB for r in range(self.nranks)]  # what is left for the weights
        for i in range(1, shards + 1):
            self.sleep(real_total / shards)
            if nbytes * i / shards > room[0]:  # the next shard does not fit: torch's CUDA OOM
                self._weights_oom(nbytes / shards, base[0] + nbytes * (i - 1) / shards)
            self.gpus.set([base[r] + nbytes * i / shards for r in range(self.nranks)])
            el = time.time() - start
            rate = i / el if el > 0 else 0
            remaining = (shards - i) / rate if rate else 0
            self.out.write("%s: %3.0f%% Completed | %d/%d [%s<%s, %s]\n"
                           % (desc, 100.0 * i / shards, i, shards, human_interval(el), human_interval(remaining),
                              tqdm_rate(i, el)), sys.stderr)
        arch = DRAFT_ARCH.get(self.model.arch, self.model.arch) if draft else self.model.arch
        el = time.time() - t0
        quant = (self.model.quant + ", ") if self.model.quant else ""
        self.each(lambda r: "Load weight end. elapsed=%.2f s, type=%s, %savail mem=%.2f GB, mem usage=%.2f GB."
                  % (el, arch, quant, self.avail(r), before[r] - self.avail(r)))
        if draft:
            self.draft_weight_gb = nbytes / GiB
        else:
            self.weight_mem_gb = nbytes / GiB

    def _cell(self, layers):
        m = self.model
        if m.kv_lora_rank:
            return (int(m.kv_lora_rank) + m.rope_dim) * layers * 2
        kv_heads = max(1, m.kv_heads // self.tp)
        return 2 * kv_heads * m.head_dim * layers * 2

    def _mamba(self, rest):
        """(cache size, conv GB, ssm GB, intermediate ssm GB, intermediate conv GB) per GPU."""
        m = self.model
        if not m.hybrid:
            return None
        requests = self.max_running or 256
        size = requests * 3 if not self.spec_on else requests + 2 * 48
        v_heads = max(1, m.lin_v_heads // self.tp)
        k_heads = max(1, m.lin_k_heads // self.tp)
        conv_dim = 2 * k_heads * m.lin_k_dim + v_heads * m.lin_v_dim
        conv = size * m.linear_layers * conv_dim * (m.lin_conv - 1) * 2
        ssm = size * m.linear_layers * v_heads * m.lin_k_dim * m.lin_v_dim * 4
        inter_ssm = inter_conv = 0
        if self.spec_on:
            inter_ssm = requests * self.spec_draft_tokens * m.linear_layers * v_heads * m.lin_k_dim * m.lin_v_dim * 2
            inter_conv = requests * (self.spec_draft_tokens + m.lin_conv - 1) * m.linear_layers * conv_dim * 2
        total = conv + ssm + inter_ssm + inter_conv
        if rest > 0 and total > rest * 0.5:  # SGLang sizes the pools so that the KV cache keeps room
            scale = rest * 0.5 / total
            size = max(1, int(size * scale))
            conv, ssm, inter_ssm, inter_conv = (x * scale for x in (conv, ssm, inter_ssm, inter_conv))
        return size, conv, ssm, inter_ssm, inter_conv

    def _memory_pool(self, draft):
        if draft:
            tokens = self.max_total_tokens
            cell = self._cell(max(1, self.model.mtp_layers))
            kv = tokens * cell
            base = [self.gpus.used.get(self.gpus.indices[r], 0) for r in range(self.nranks)]
            self.gpus.set([b + kv for b in base])
            self._kv_line(tokens, cell, draft=True)
            self.each(lambda r: "Memory pool end. avail mem=%.2f GB" % self.avail(r))
            self.sleep(1)
            return
        self.sleep(2)
        target_b, draft_b = self._weights()
        total = self.gpus.total(0) or 143771 * MiB
        reserved = int((self.gpus.read().get("gpus") or [{}])[self.gpus.indices[0]].get("memory_reserved") or 0) \
            if self.gpus.indices[0] < len(self.gpus.read().get("gpus") or []) else 0
        budget = (total - reserved) * self.mem_frac
        rest = budget - target_b - draft_b - 0.45 * GiB
        mamba = self._mamba(rest)
        mamba_bytes = sum(mamba[1:]) if mamba else 0
        cell = self._cell(self.model.full_layers)
        if self.spec_on:
            cell_all = cell + self._cell(max(1, self.model.mtp_layers))
        else:
            cell_all = cell
        tokens = int((rest - mamba_bytes) / cell_all) if rest > mamba_bytes else 0
        tokens = tokens // self.page_size * self.page_size
        if self.scenario == "kv-cache-oom" or tokens <= 0:
            self._kv_oom()
        if self.max_running is None:
            if self.model.hybrid:  # bounded by the mamba cache (MAMBA_CACHE_SIZE_MAX_RUNNING_REQUESTS_RATIO = 3)
                self.max_running = max(1, min(256, tokens // 64, (mamba[0] // 3) if mamba else 256))
            else:
                self.max_running = min(max(int(tokens / self.context * 512), 2048), 4096)
            self.capture_bs = self._capture_bs()
        self.max_total_tokens = tokens
        base = [self.gpus.used.get(self.gpus.indices[r], 0) for r in range(self.nranks)]
        if mamba:
            size, conv, ssm, iss, icv = mamba
            self.gpus.set([b + mamba_bytes for b in base])
            if self.spec_on:
                self.each(lambda r: "Mamba Cache is allocated. max_mamba_cache_size: %d, conv_state size: %.2fGB, "
                          "ssm_state size: %.2fGB intermediate_ssm_state_cache size: %.2fGB "
                          "intermediate_conv_window_cache size: %.2fGB "
                          % (size, conv / GiB, ssm / GiB, iss / GiB, icv / GiB))
            else:
                self.each(lambda r: "Mamba Cache is allocated. max_mamba_cache_size: %d, conv_state size: %.2fGB, "
                          "ssm_state size: %.2fGB " % (size, conv / GiB, ssm / GiB))
        kv = tokens * cell
        self.gpus.set([b + mamba_bytes + kv for b in base])
        self.kv_mem_gb = kv / GiB
        self._kv_line(tokens, cell, draft=False)
        self.each(lambda r: "Memory pool end. avail mem=%.2f GB" % self.avail(r))

    def _kv_line(self, tokens, cell, draft):
        half = tokens * cell / 2.0 / GiB
        if self.model.kv_lora_rank:
            body = "#tokens: %d, KV size: %.2f GB" % (tokens, 2 * half)
        else:
            body = "#tokens: %d, K size: %.2f GB, V size: %.2f GB" % (tokens, half, half)
        if self.V >= (0, 5, 13):
            body = "dtype: %s, %s" % (self.model.dtype, body)
        self.each(lambda r: "KV Cache is allocated. " + body)

    def _weights_oom(self, want, held):
        total = self.gpus.total(0)
        free = max(0.0, self.avail(0) * GiB)
        self._scheduler_crash(
            "torch.OutOfMemoryError: CUDA out of memory. Tried to allocate %.2f GiB. GPU 0 has a total capacity of "
            "%.2f GiB of which %.2f MiB is free. Including non-PyTorch memory, this process has %.2f GiB memory in "
            "use. Of the allocated memory %.2f GiB is allocated by PyTorch, and %.2f MiB is reserved by PyTorch but "
            "unallocated. If reserved but unallocated memory is large try setting "
            "PYTORCH_CUDA_ALLOC_CONF=expandable_segments:True to avoid fragmentation.  See documentation for Memory "
            "Management  (https://pytorch.org/docs/stable/notes/cuda.html#environment-variables)\n"
            % (want / GiB, total / GiB, free / MiB, held / GiB, max(0.0, held - 0.45 * GiB) / GiB, 20.0), "weights")

    def _kv_oom(self):
        msg = "Not enough memory. Please try to increase --mem-fraction-static."
        if self.V < (0, 5, 20):
            msg += " Current value: mem_fraction_static=%s" % self.mem_frac
        self._scheduler_crash("RuntimeError: %s\n" % msg, "kv")

    def _scheduler_crash(self, exc_text, where):
        """Every rank's 'Scheduler hit an exception: <traceback>', then the main process's
        sigquit line, then the process tree is killed (SIGKILL), as SGLang does."""
        pkg = SGLANG_DIR + "/srt"
        if where == "kv" and self.V < (0, 5, 20):  # 0.5.10's call chain and line numbers
            frames = [
                ("managers/scheduler.py", 3600, "run_scheduler_process", "scheduler = Scheduler("),
                ("managers/scheduler.py", 385, "__init__", "self.init_model_worker()"),
                ("managers/scheduler.py", 632, "init_model_worker", "self.init_tp_model_worker()"),
                ("managers/scheduler.py", 600, "init_tp_model_worker", "self.tp_worker = TpModelWorker(**worker_kwargs)"),
                ("managers/tp_worker.py", 261, "__init__", "self._init_model_runner()"),
                ("managers/tp_worker.py", 344, "_init_model_runner", "self._model_runner = ModelRunner("),
                ("model_executor/model_runner.py", 427, "__init__", "self.initialize(pre_model_load_memory)"),
                ("model_executor/model_runner.py", 623, "initialize", "self.init_memory_pool(pre_model_load_memory)"),
                ("model_executor/model_runner_kv_cache_mixin.py", 899, "init_memory_pool",
                 "self.memory_pool_config = self._resolve_memory_pool_config("),
                ("model_executor/model_runner_kv_cache_mixin.py", 885, "_resolve_memory_pool_config",
                 "return MemoryPoolConfig("),
                (None, 8, "__init__", None),
                ("model_executor/model_runner_kv_cache_mixin.py", 60, "__post_init__", "raise RuntimeError(msg)"),
            ]
        elif where == "kv":  # 0.5.23's
            frames = [
                ("managers/scheduler.py", 6362, "run_scheduler_process", "scheduler = Scheduler(server_args, port_args)"),
                ("managers/scheduler.py", 568, "__init__", "self.init_model_worker()"),
                ("managers/scheduler.py", 1137, "init_model_worker", "self.init_memory_pools()"),
                ("managers/scheduler.py", 1100, "init_memory_pools", "self.init_target_memory_pool()"),
                ("managers/scheduler.py", 1090, "init_target_memory_pool", "self.tp_worker.alloc_memory_pool("),
                ("managers/tp_worker.py", 409, "alloc_memory_pool", "self.model_runner.alloc_memory_pool("),
                ("model_executor/model_runner.py", 982, "alloc_memory_pool",
                 "result = self.kv_cache_configurator.configure("),
                ("mem_cache/kv_cache_configurator.py", 476, "configure",
                 "config = self._resolve_memory_pool_config(pre_model_load_memory)"),
                ("mem_cache/kv_cache_configurator.py", 3183, "_resolve_memory_pool_config",
                 "config = self.config_from_budget(available_bytes)"),
                ("mem_cache/kv_cache_configurator.py", 3204, "config_from_budget",
                 "config = configurator.calculate_pool_sizes("),
                ("model_executor/pool_configurator.py", 647, "calculate_pool_sizes",
                 "return MemoryPoolConfig(max_total_num_tokens=max_total_num_tokens)"),
                (None, 14, "__init__", None),
                ("model_executor/pool_configurator.py", 99, "__post_init__", "raise RuntimeError(msg)"),
            ]
        elif where == "weights" and self.V < (0, 5, 20):
            frames = [
                ("managers/scheduler.py", 3600, "run_scheduler_process", "scheduler = Scheduler("),
                ("managers/scheduler.py", 385, "__init__", "self.init_model_worker()"),
                ("managers/scheduler.py", 632, "init_model_worker", "self.init_tp_model_worker()"),
                ("managers/scheduler.py", 600, "init_tp_model_worker", "self.tp_worker = TpModelWorker(**worker_kwargs)"),
                ("managers/tp_worker.py", 261, "__init__", "self._init_model_runner()"),
                ("managers/tp_worker.py", 344, "_init_model_runner", "self._model_runner = ModelRunner("),
                ("model_executor/model_runner.py", 427, "__init__", "self.initialize(pre_model_load_memory)"),
                ("model_executor/model_runner.py", 507, "initialize", "self.load_model()"),
                ("model_executor/model_runner.py", 1159, "load_model", "self.model = self.loader.load_model("),
            ]
        elif where == "weights":
            frames = [
                ("managers/scheduler.py", 6362, "run_scheduler_process", "scheduler = Scheduler(server_args, port_args)"),
                ("managers/scheduler.py", 568, "__init__", "self.init_model_worker()"),
                ("managers/scheduler.py", 1130, "init_model_worker", "self.init_tp_model_worker()"),
                ("managers/scheduler.py", 1033, "init_tp_model_worker", "self.tp_worker = TpModelWorker(**worker_kwargs)"),
                ("managers/tp_worker.py", 319, "__init__", "self._init_model_runner()"),
                ("managers/tp_worker.py", 487, "_init_model_runner", "self._model_runner = ModelRunner("),
                ("model_executor/model_runner.py", 499, "__init__", "self.initialize()"),
                ("model_executor/model_runner.py", 715, "initialize", "self.load_model()"),
                ("model_executor/model_runner.py", 1311, "load_model", "loaded = load_model_with_memory_saver("),
            ]
        else:
            frames = [
                ("managers/scheduler.py", 3600, "run_scheduler_process", "scheduler = Scheduler("),
                ("model_executor/model_runner.py", 403, "__init__",
                 "pre_model_load_memory = self.init_torch_distributed()"),
                ("model_executor/model_runner.py", 894, "init_torch_distributed",
                 "torch.get_device_module(self.device).set_device(self.gpu_id)"),
            ]
        tb = "Traceback (most recent call last):\n"
        for f, line, fn, src in frames:
            tb += '  File "%s", line %d, in %s\n' % (("%s/%s" % (pkg, f)) if f else "<string>", line, fn)
            if src:
                tb += "    %s\n" % src
        tb += exc_text
        for r in range(self.nranks):
            if where != "dist" or r == self.bad_device:
                self.log("Scheduler hit an exception: " + tb, r)
        self.sleep(1)
        self.log("Received sigquit from a child process. It usually means the child failed.")
        self.gpus.release()
        sys.stdout.flush()
        os.kill(os.getpid(), signal.SIGKILL)
        time.sleep(5)

    def _graphs(self, draft):
        if self.disable_cuda_graph:
            return
        t0 = time.time()
        bs = self.capture_bs
        avail0 = [self.avail(r) for r in range(self.nranks)]
        verify = self.spec_on
        name = "target verify" if verify else "target decode"
        per_req = self.spec_draft_tokens if verify else 1
        era = self.graph_era
        if era == "old":
            self.each(lambda r: "Capture cuda graph begin. This can take up to several minutes. avail mem=%.2f GB"
                      % avail0[r])
            self.log_tp0("Capture cuda graph bs %s" % bs)
        elif era == "v15":
            self.each(lambda r: "Capture %s CUDA graph begin. backend=full, num_tokens_per_bs=%d, bs=%s, "
                      "avail mem=%.2f GB" % (name, per_req, bs, avail0[r]))
        elif era == "v16":
            self.each(lambda r: "Capture %s CUDA graph begin. backend=full, num_tokens_per_req=%d, bs=%s, "
                      "avail mem=%.2f GB" % (name, per_req, bs, avail0[r]))
        else:
            self.each(lambda r: "Capture %s CUDA graph begin. backend=full, num_tokens_per_req=%d, avail mem=%.2f GB"
                      % (name, per_req, avail0[r]))
        graph_bytes = (0.5 + 0.03 * len(bs)) * GiB * (1.3 if self.tp > 1 else 1.0)
        base = [self.gpus.used.get(self.gpus.indices[r], 0) for r in range(self.nranks)]
        start = time.time()
        n = len(bs)
        real_total = 1.5 * n
        steps = list(reversed(bs))
        for i, b in enumerate(steps, 1):
            self.sleep(real_total / n)
            if i % max(1, n // 6) == 0 or i == n:
                self.gpus.set([base[r] + graph_bytes * i / n for r in range(self.nranks)])
                el = time.time() - start
                pct = 100.0 * i / n
                bar = ("\u2588" * int(pct / 10)).ljust(10)
                self.out.write("Capturing batches (bs=%d avail_mem=%.2f GB): %3.0f%%|%s| %d/%d [%s<%s, %s]\n"
                               % (b, self.avail(0), pct, bar, i, n, human_interval(el),
                                  human_interval(el / i * (n - i)), tqdm_rate(i, el)), sys.stderr)
        el = time.time() - t0
        self.graph_mem_gb = graph_bytes / GiB
        if era == "old":
            self.each(lambda r: "Capture cuda graph end. Time elapsed: %.2f s. mem usage=%.2f GB. avail mem=%.2f GB."
                      % (el, avail0[r] - self.avail(r), self.avail(r)))
        elif era in ("v15", "v16"):
            self.each(lambda r: "Capture %s CUDA graph end. elapsed=%.2f s, mem usage=%.2f GB, avail mem=%.2f GB."
                      % (name, el, avail0[r] - self.avail(r), self.avail(r)))
        else:
            self.each(lambda r: "Capture %s CUDA graph end. bs=%s, elapsed=%.2f s, mem usage=%.2f GB, "
                      "avail mem=%.2f GB." % (name, bs, el, avail0[r] - self.avail(r), self.avail(r)))

    def _draft_old_order(self):
        """<=0.5.20: the draft worker after the target one: weights, its KV pool, its graphs."""
        self._load_weights(draft=True)
        self._memory_pool(draft=True)
        self._draft_graphs()

    def _draft_graphs(self):
        if self.disable_cuda_graph:
            return
        bs = [b for b in self.capture_bs]
        for kind, per_req, real in (("", self.spec_topk, 20), ("extend ", self.spec_draft_tokens, 12)):
            avail0 = [self.avail(r) for r in range(self.nranks)]
            t0 = time.time()
            era = self.graph_era
            if era == "old":
                self.each(lambda r: "Capture draft %scuda graph begin. This can take up to several minutes. "
                          "avail mem=%.2f GB" % (kind, avail0[r]))
            else:
                what = "decode " if not kind else kind
                key = "num_tokens_per_bs" if era == "v15" else "num_tokens_per_req"
                self.log_tp0("Capture draft %sCUDA graph begin. backend=full, %s=%d, bs=%s, avail mem=%.2f GB"
                             % (what, key, per_req, bs, avail0[0]))
            self.sleep(real)
            base = [self.gpus.used.get(self.gpus.indices[r], 0) for r in range(self.nranks)]
            self.gpus.set([b + 0.35 * GiB for b in base])
            el = time.time() - t0
            if era == "old":
                self.each(lambda r: "Capture draft %scuda graph end. Time elapsed: %.2f s. mem usage=%.2f GB. "
                          "avail mem=%.2f GB." % (kind, el, avail0[r] - self.avail(r), self.avail(r)))
            else:
                what = "decode " if not kind else kind
                self.log_tp0("Capture draft %sCUDA graph end. elapsed=%.2f s, mem usage=%.2f GB, avail mem=%.2f GB."
                             % (what, el, avail0[0] - self.avail(0), self.avail(0)))

    def _warmup(self):
        import urllib.request

        base = "http://%s:%d" % ("127.0.0.1" if self.host in ("0.0.0.0", "::", "") else self.host, self.port)
        headers = {"Content-Type": "application/json"}
        if self.api_key:
            headers["Authorization"] = "Bearer %s" % self.api_key
        with contextlib.suppress(Exception):
            urllib.request.urlopen(urllib.request.Request(base + "/model_info", headers=headers), timeout=30).read()
            body = json.dumps({"sampling_params": {"temperature": 0, "max_new_tokens": 8},
                               "text": "The capital city of France is"}).encode()
            urllib.request.urlopen(urllib.request.Request(base + "/generate", data=body, headers=headers),
                                   timeout=60).read()
