"""The SGLang server simulator of gpuops' simulated GPU host.

The tests' scenario engine (tests/simhost), a package: ``gpuops.sim.host.setup_simhost`` copies this
folder to ``DIR/lib/sglang-sim/sglang_sim/`` when GPUOPS_SIM_SERVER (or its ``server=``) names it (the
tests' conftest sets that for the session; without it a host runs the product's small server), next
to ``launch_server.json`` (the flags of the SGLang version the host presents, from
``gpuops.core.engines.sglang.versions``) and ``server_args.json`` (ServerArgs fields read from the
wheels). ``python -m sglang.launch_server ...`` on the simulated host runs it (through the
stand-in ``DIR/lib/sglang/launch_server.py``). Standard library only.

What it does, like SGLang where gpuops looks:
- parses the command line with argparse built from that version's options: an unknown flag
  is refused exactly as SGLang's own parser refuses it (usage, ``error: unrecognized
  arguments``, exit 2);
- prints SGLang's startup log lines of that version (texts from the sglang wheels; the
  wording changes across versions are kept: ``Init torch distributed begin.`` up to 0.5.20,
  ``Init parallel begin.`` / ``Memory baseline taken.`` from 0.5.21, the cuda graph lines of
  <=0.5.13, 0.5.15-0.5.22 and 0.5.23) with the log format ``[%Y-%m-%d %H:%M:%S TPn] message``
  and realistic relative timing, scaled by the host's pace (``DIR/state/sim.json``);
- moves the GPUs' memory in ``DIR/state/gpus.json`` (read by the fake pynvml and nvidia-smi)
  through the phases, under the same lock file as ``SimHost.set_gpu``;
- then serves SGLang's HTTP API (threaded ``http.server``): /health, /health_generate,
  /model_info, /server_info, /v1/models, /v1/completions, /v1/chat/completions (streaming,
  usage, tool_calls, reasoning_content), /generate, /metrics, /flush_cache;
- scenarios (``DIR/state/sim.json``): ok, ok-with-mtp, hang-at-dist-init, spec-config-crash,
  kv-cache-oom, slow-download (the last one only slows the fake ``hf``), hang-after-ready (ready,
  then after ``hang_after_s`` (2 s) its scheduler deadlocks: silent, requests never answered, /health
  503, its processes alive); one process can be given
  another with the environment variable ``GPUOPS_SIM_SCENARIO``, which also knows the multi-node
  ones (``NODE_SCENARIOS``): node-starts-late, node-hangs-before-join;
- multi-node starts (``--nnodes N --node-rank R --dist-init-addr HOST:PORT``), as SGLang runs them:
  ``check_server_args``' assertions; each node runs only its share of the ranks (TP ``R*tp/N`` ...
  on its local GPUs); a real TCP rendezvous on the dist-init address stands in for torch's
  TCPStore (``Rendezvous``): node 0 serves it, every node registers, and each waits silently after
  ``Init torch distributed begin.`` / ``Init parallel begin.`` until all N have joined (node 0 gives
  up after the store's timeout with torch's ``DistStoreError``; a node that cannot reach the port
  retries and then fails with torch's ``DistNetworkError``); the connections stay open, so a node
  that dies takes the others down with gloo's ``Connection closed by peer`` (or, before all joined,
  the store's ``Failed to recv``). Node 0 alone serves the API and logs the ready line; a node R>0
  runs its schedulers, starts SGLang's dummy health-check server (/health, /health_generate, /ping)
  and waits for node 0's shutdown broadcast (SIGTERM is only logged there from 0.5.21).
  Timeouts: ``GPUOPS_SIM_DIST_TIMEOUT_S`` (wall seconds; default ``--dist-timeout``, else torch's
  600 s); node-starts-late's delay: ``GPUOPS_SIM_NODE_DELAY_S`` (wall seconds; default 120 s of
  a real start at the host's pace).

Logged lines go to stdout (line by line, flushed); Python warnings, tqdm bars and uncaught
tracebacks go to stderr, as they do from SGLang.

Its modules, by concern: ``server`` (the Server: its command line, ranks, signals and the order of
the phases), ``startup`` (the log script: each version's start-up lines and their timing, the
scenarios' crashes), ``rendezvous`` (multi-node: the dist-init address, the TCP rendezvous, a
following node), ``api`` (the HTTP API, the scheduler loop's lines, /metrics), ``gpus`` (the GPU
state file), ``model`` (what it reads from the model folder), ``common`` (paths, constants, helpers).
"""

from .server import Server, main

__all__ = ["Server", "main"]
