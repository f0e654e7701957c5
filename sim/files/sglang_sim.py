"""The SGLang server simulator of gpuops' simulated GPU host.

A template: ``gpuops.sim.host.setup_simhost`` copies it to ``DIR/lib/sglang-sim/sglang_sim.py``
next to ``launch_server.json`` (the flags of the SGLang version the host presents, from
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
  kv-cache-oom, slow-download (the last one only slows the fake ``hf``); one process can be given
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
"""

from __future__ import annotations

import argparse
import contextlib
import errno
import fcntl
import hashlib
import ipaddress
import json
import math
import os
import random
import re
import signal
import socket
import sys
import threading
import time
import uuid
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

HERE = os.path.dirname(os.path.abspath(__file__))  # DIR/lib/sglang-sim
LIB = os.path.dirname(HERE)  # DIR/lib
SIM_DIR = os.path.dirname(LIB)
STATE_DIR = os.path.join(SIM_DIR, "state")
GPUS_FILE = os.path.join(STATE_DIR, "gpus.json")
LOCK_FILE = os.path.join(STATE_DIR, ".gpus.lock")
SIM_FILE = os.path.join(STATE_DIR, "sim.json")
SPEC_FILE = os.path.join(HERE, "launch_server.json")
SERVER_ARGS_FILE = os.path.join(HERE, "server_args.json")
MODELS_FILE = os.path.join(LIB, "sim-data", "models.json")
SGLANG_DIR = os.path.join(LIB, "sglang")  # where "sglang" is installed on this host

GiB = 1 << 30
MiB = 1 << 20
NCCL_VERSION = "2.27.5"
# Real seconds of a start are divided by this at pace 1: pace 60 is about real time.
PACE_DIVISOR = 60.0

# launch_server.py's warnings.warn(...) line, per release (read from the wheels).
WARN_LINES = {(0, 5, 10): 51, (0, 5, 12): 54, (0, 5, 13): 54, (0, 5, 15): 55, (0, 5, 16): 56, (0, 5, 20): 71,
              (0, 5, 21): 71, (0, 5, 22): 71, (0, 5, 23): 71}
# Where the spec-config-crash ValueError is raised from, per release (launch_server.py and
# srt/server_args.py line numbers; fields: the ServerArgs dataclass fields, for the generated __init__).
SPEC_CRASH_LINES = {
    (0, 5, 10): {"launch": 59, "prepare": 6539, "from_cli": 5975, "fields": 349, "post_init": 787, "call": 2000,
                 "raise": 2206},
    (0, 5, 12): {"launch": 66, "prepare": 7757, "from_cli": 7141, "fields": 381, "post_init": 929, "call": 2340,
                 "raise": 2568},
    (0, 5, 13): {"launch": 66, "prepare": 8009, "from_cli": 7284, "fields": 396, "post_init": 970, "call": 2530,
                 "raise": 2754},
}

# argparse dests that ServerArgs.from_cli_args copies to another field name
FIELD_RENAMES = {"tensor_parallel_size": "tp_size", "pipeline_parallel_size": "pp_size",
                 "data_parallel_size": "dp_size", "expert_parallel_size": "ep_size",
                 "attention_context_parallel_size": "attn_cp_size", "moe_data_parallel_size": "moe_dp_size"}

SCENARIOS = ("ok", "ok-with-mtp", "hang-at-dist-init", "spec-config-crash", "kv-cache-oom", "slow-download")
# Scenarios of one process of a multi-node start (GPUOPS_SIM_SCENARIO=..., usually on node 1): it starts
# late (GPUOPS_SIM_NODE_DELAY_S), or it hangs after its server_args line and never reaches the rendezvous.
NODE_SCENARIOS = ("node-starts-late", "node-hangs-before-join")
SCENARIO_ENV = "GPUOPS_SIM_SCENARIO"
DIST_TIMEOUT_ENV = "GPUOPS_SIM_DIST_TIMEOUT_S"
NODE_DELAY_ENV = "GPUOPS_SIM_NODE_DELAY_S"
# torch's default timeout of an NCCL process group, which also bounds its TCPStore rendezvous
# (torch/distributed/constants.py default_pg_nccl_timeout: 10 minutes)
TORCH_DIST_TIMEOUT_S = 600
TORCH_DIR_NAME = "torch"  # where the host's torch lives, beside sglang (tracebacks name its files)

# config.json architectures -> the class the MTP draft worker loads (srt/configs/model_config.py
# _config_draft_model, 0.5.10); others keep their architecture.
DRAFT_ARCH = {
    "DeepseekV3ForCausalLM": "DeepseekV3ForCausalLMNextN",
    "GlmMoeDsaForCausalLM": "DeepseekV3ForCausalLMNextN",
    "Glm4MoeForCausalLM": "Glm4MoeForCausalLMNextN",
    "MiMoForCausalLM": "MiMoMTP",
    "Qwen3NextForCausalLM": "Qwen3NextForCausalLMMTP",
    "Qwen3_5ForConditionalGeneration": "Qwen3_5ForCausalLMMTP",
    "Qwen3_5MoeForConditionalGeneration": "Qwen3_5ForCausalLMMTP",
    "NemotronHForCausalLM": "NemotronHForCausalLMMTP",
}
# Architectures whose server_args handling goes through _handle_mamba_radix_cache (0.5.10).
HYBRID_ARCHS = ("Qwen3NextForCausalLM", "Qwen3_5MoeForConditionalGeneration", "Qwen3_5ForConditionalGeneration",
                "NemotronHForCausalLM", "FalconH1ForCausalLM", "Lfm2ForCausalLM", "KimiLinearForCausalLM")

# A request's "model" defaults to this, and responses echo the request's (protocol.py DEFAULT_MODEL_NAME).
DEFAULT_MODEL = "default"

WORDS = ("the quick model answers every request with plain words so that clients can count tokens "
         "while gpuops measures throughput latency and the shape of each streamed chunk on a simulated "
         "host where nothing runs on a real GPU yet every reply still looks like one").split()
THOUGHTS = ("let me think about what is asked here first then check the details and decide on a short "
            "clear answer before writing it down").split()


def vkey(v):
    nums = []
    for part in re.split(r"[.+-]", str(v)):
        if part.isdigit():
            nums.append(int(part))
        else:
            break
    return tuple((nums + [0, 0, 0])[:3])


def read_json(path, default=None):
    try:
        with open(path) as f:
            return json.load(f)
    except (OSError, ValueError):
        return default


def proc_start(pid):
    """The start time of PID in clock ticks (field 22 of /proc/PID/stat), or None."""
    try:
        with open("/proc/%d/stat" % pid, "rb") as f:
            return int(f.read().rsplit(b")", 1)[1].split()[19])
    except (OSError, IndexError, ValueError):
        return None


def human_interval(seconds):
    seconds = int(max(0, seconds))
    m, s = divmod(seconds, 60)
    h, m = divmod(m, 60)
    return "%d:%02d:%02d" % (h, m, s) if h else "%02d:%02d" % (m, s)


def tqdm_rate(n, elapsed):
    if not n or elapsed <= 0:
        return "?it/s"
    rate = n / elapsed
    if rate < 1:
        return "%5.2fs/it" % (1 / rate)
    return "%5.2fit/s" % rate


# ----------------------------------------------------------------------------------- output


class Out:
    """Line output shared by the startup thread, the HTTP threads and the scheduler thread."""

    def __init__(self):
        self.lock = threading.RLock()  # re-entrant: a signal handler may log while the main thread writes

    def write(self, text, stream=None):
        stream = stream or sys.stdout
        with self.lock:
            try:
                try:
                    stream.write(text)
                except UnicodeEncodeError:  # a stream that is not UTF-8 (gloo's message has an emoji)
                    stream.write(text.encode(getattr(stream, "encoding", None) or "ascii", "replace").decode(
                        getattr(stream, "encoding", None) or "ascii"))
                stream.flush()
            except (OSError, ValueError):
                pass

    def log(self, msg, prefix=""):
        """One logged line as SGLang's configure_logger formats it: [%(asctime)s{prefix}] %(message)s."""
        self.write("[%s%s] %s\n" % (time.strftime("%Y-%m-%d %H:%M:%S"), prefix, msg))

    def bare(self, msg, stream=None):
        self.write(msg + "\n", stream)


# ----------------------------------------------------------------------------------- the GPUs


class Gpus:
    """This server's entries in DIR/state/gpus.json: one process (this pid) on each GPU it uses."""

    def __init__(self, indices):
        self.indices = indices  # GPU index per rank
        self.pid = os.getpid()
        self.start = proc_start(self.pid)
        self.used = {}  # gpu index -> bytes this process holds there

    @contextlib.contextmanager
    def _locked(self):
        with open(LOCK_FILE, "a") as lock:
            fcntl.flock(lock, fcntl.LOCK_EX)
            try:
                yield
            finally:
                fcntl.flock(lock, fcntl.LOCK_UN)

    def read(self):
        return read_json(GPUS_FILE, {"gpus": []})

    def _write(self, state):
        tmp = os.path.join(STATE_DIR, ".gpus.json.%d.tmp" % os.getpid())
        with open(tmp, "w") as f:
            json.dump(state, f, indent=1)
            f.write("\n")
        os.replace(tmp, GPUS_FILE)

    def set(self, per_rank=None, util=None, power_mw=None):
        """Set this process's memory on each rank's GPU (bytes; None: leave it). util/power
        apply to all its GPUs. Entries of processes that no longer exist are dropped."""
        with self._locked():
            state = self.read()
            gpus = state.get("gpus") or []
            changed = False
            for rank, index in enumerate(self.indices):
                if index >= len(gpus):
                    continue
                gpu = gpus[index]
                procs = []
                mem = int(gpu.get("memory_used") or 0)
                for p in gpu.get("processes") or []:
                    pid = p.get("pid")
                    mine = pid == self.pid
                    if mine or not _alive(pid, p.get("start")):
                        mem -= int(p.get("used") or 0)
                        changed = True
                        continue
                    procs.append(p)
                new = self.used.get(index) if per_rank is None else per_rank[rank]  # None: not (or no longer) there
                if new is not None:
                    procs.append({"pid": self.pid, "used": int(new), "start": self.start})
                    mem += int(new)
                    self.used[index] = int(new)
                else:
                    self.used.pop(index, None)
                gpu["processes"] = procs
                gpu["memory_used"] = max(0, mem)
                if util is not None:
                    gpu["util"] = util
                    gpu["mem_util"] = min(100, util // 2)
                    gpu["sm_clock"] = 1980 if util else 345
                if power_mw is not None:
                    gpu["power_mw"] = power_mw
                changed = True
            if changed:
                self._write(state)

    def release(self):
        with contextlib.suppress(Exception):
            self.set([None] * len(self.indices), util=0, power_mw=75000)

    def avail(self, rank):
        """Free memory of RANK's GPU in GB (as torch.cuda.mem_get_info sees it)."""
        state = self.read()
        gpus = state.get("gpus") or []
        index = self.indices[rank]
        if index >= len(gpus):
            return 0.0
        gpu = gpus[index]
        used = int(gpu.get("memory_used") or 0)
        for p in gpu.get("processes") or []:
            if p.get("pid") != self.pid and not _alive(p.get("pid"), p.get("start")):
                used -= int(p.get("used") or 0)
        total = int(gpu.get("memory_total") or 0)
        return max(0, total - int(gpu.get("memory_reserved") or 0) - max(0, used)) / GiB

    def total(self, rank):
        gpus = self.read().get("gpus") or []
        index = self.indices[rank]
        return int(gpus[index].get("memory_total") or 0) if index < len(gpus) else 0


def _alive(pid, start=None):
    try:
        with open("/proc/%d/stat" % int(pid), "rb") as f:
            fields = f.read().rsplit(b")", 1)[1].split()
    except (OSError, IndexError, ValueError, TypeError):
        return not os.path.isdir("/proc/self")
    if fields[0] in (b"Z", b"X"):
        return False
    return start is None or fields[19].decode() == str(start)


# ----------------------------------------------------------------------------------- the model


class Model:
    """What the simulator needs from the model folder (config.json, the safetensors index)."""

    def __init__(self, path, force_mtp=False):
        self.path = path
        self.folder = self._folder(path)
        known = (read_json(MODELS_FILE, {}) or {}).get("models", {}).get(path)
        config = read_json(os.path.join(self.folder, "config.json")) if self.folder else None
        if config is None and known:
            config = known["config"]
        self.known_config = config is not None
        self.config = config or {
            "architectures": ["Qwen3ForCausalLM"], "model_type": "qwen3", "hidden_size": 2560,
            "num_hidden_layers": 36, "num_attention_heads": 32, "num_key_value_heads": 8, "head_dim": 128,
            "max_position_embeddings": 40960, "vocab_size": 151936, "torch_dtype": "bfloat16",
        }
        c = self.config
        t = c.get("text_config") if isinstance(c.get("text_config"), dict) else c
        self.text = t
        self.arch = (c.get("architectures") or t.get("architectures") or ["LlamaForCausalLM"])[0]
        self.model_type = c.get("model_type") or t.get("model_type") or "llama"
        self.layers = int(t.get("num_hidden_layers") or 32)
        heads = int(t.get("num_attention_heads") or 32)
        self.kv_heads = int(t.get("num_key_value_heads") or heads)
        self.head_dim = int(t.get("head_dim") or (int(t.get("hidden_size") or 4096) // heads))
        self.kv_lora_rank = t.get("kv_lora_rank")
        self.rope_dim = int(t.get("qk_rope_head_dim") or 64)
        layer_types = t.get("layer_types") if isinstance(t.get("layer_types"), list) else None
        interval = t.get("full_attention_interval")
        if layer_types and "linear_attention" in layer_types:
            self.full_layers = sum(1 for x in layer_types[: self.layers] if x == "full_attention")
        elif interval and (self.model_type.startswith("qwen3_next") or self.model_type.startswith("qwen3_5")):
            self.full_layers = self.layers // int(interval)
        else:
            self.full_layers = self.layers
        self.hybrid = self.full_layers < self.layers
        self.linear_layers = self.layers - self.full_layers
        mtp = t.get("mtp_num_hidden_layers", c.get("mtp_num_hidden_layers"))
        if mtp is None:
            mtp = t.get("num_nextn_predict_layers", c.get("num_nextn_predict_layers"))
        if mtp is None:
            mtp = 1 if self.model_type == "qwen3_next" else 0
        self.mtp_layers = int(mtp or 0)
        if force_mtp and self.mtp_layers == 0:
            self.mtp_layers = 1
        self.context = int(t.get("max_position_embeddings") or c.get("max_position_embeddings") or 32768)
        dtype = c.get("torch_dtype") or c.get("dtype") or t.get("torch_dtype") or t.get("dtype") or "bfloat16"
        self.dtype = "torch.%s" % dtype
        q = c.get("quantization_config") or t.get("quantization_config")
        self.quant = None
        if isinstance(q, dict):
            self.quant = "quant=%s" % q.get("quant_method", "quantized")
            for field in ("bits", "quant_algo", "fmt"):
                if field in q:
                    self.quant += ", %s=%s" % (field, q[field])
        # linear attention (GDN) dimensions
        self.lin_v_heads = int(t.get("linear_num_value_heads") or 32)
        self.lin_k_heads = int(t.get("linear_num_key_heads") or 16)
        self.lin_k_dim = int(t.get("linear_key_head_dim") or 128)
        self.lin_v_dim = int(t.get("linear_value_head_dim") or 128)
        self.lin_conv = int(t.get("linear_conv_kernel_dim") or 4)
        # checkpoint size and shards
        index = read_json(os.path.join(self.folder, "model.safetensors.index.json")) if self.folder else None
        self.total_size = None
        self.shards = None
        if isinstance(index, dict):
            with contextlib.suppress(TypeError, ValueError):
                self.total_size = int((index.get("metadata") or {}).get("total_size"))
            files = set((index.get("weight_map") or {}).values())
            self.shards = len(files) or None
        if self.total_size is None and self.folder:
            sizes = [os.path.getsize(os.path.join(self.folder, f)) for f in os.listdir(self.folder)
                     if f.endswith(".safetensors")]
            if sizes:
                self.total_size, self.shards = sum(sizes), len(sizes)
        if self.total_size is None and known:
            self.total_size, self.shards = int(known["total_size"]), int(known["shards"])
        if self.total_size is None:
            self.total_size = 6 * GiB  # a few GiB
        if not self.shards:
            self.shards = max(1, int(math.ceil(self.total_size / 5e9)))

    @staticmethod
    def _folder(path):
        if os.path.isdir(path):
            return path
        if path.count("/") != 1 or path.startswith(("/", ".")):
            return None
        hub = os.environ.get("HF_HUB_CACHE") or os.path.join(
            os.environ.get("HF_HOME") or os.path.join(os.path.expanduser("~"), ".cache", "huggingface"), "hub")
        repo = os.path.join(hub, "models--" + path.replace("/", "--"))
        ref = os.path.join(repo, "refs", "main")
        with contextlib.suppress(OSError):
            with open(ref) as f:
                snap = os.path.join(repo, "snapshots", f.read().strip())
            if os.path.isdir(snap):
                return snap
        with contextlib.suppress(OSError):
            snaps = sorted(os.listdir(os.path.join(repo, "snapshots")))
            if snaps:
                return os.path.join(repo, "snapshots", snaps[-1])
        return None

    @property
    def thinks(self):
        return self.model_type.startswith("qwen3") or "deepseek_r1" in self.model_type

    @property
    def xml_tools(self):
        return self.model_type.startswith("qwen3_5") or "coder" in self.path.lower()


# ----------------------------------------------------------------------------------- multi-node


def env_seconds(name):
    """A positive number of seconds from the environment variable NAME (None: unset or not one)."""
    try:
        v = float(os.environ.get(name, ""))
    except ValueError:
        return None
    return v if v > 0 and not math.isinf(v) else None


def traceback_text(frames):
    """Python's 'Traceback (most recent call last):' block: FRAMES are (file, line, function,
    source line or None[, the part of it Python 3.11+ underlines])."""
    text = "Traceback (most recent call last):\n"
    for frame in frames:
        f, line, fn, src = frame[:4]
        text += '  File "%s", line %d, in %s\n' % (f, line, fn)
        if src:
            text += "    %s\n" % src
            under = frame[4] if len(frame) > 4 else None
            if under and under in src:
                text += " " * (4 + src.index(under)) + "^" * len(under) + "\n"
    return text


def c10_line(level, where, msg):
    """A line of torch's C++ logging (c10): ``[W1201 17:38:25.865510781 TCPStore.cpp:138] MSG``."""
    now = time.time()
    return "[%s%s.%09d %s] %s\n" % (level, time.strftime("%m%d %H:%M:%S", time.localtime(now)),
                                    int((now % 1) * 1e9), where, msg)


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


# ----------------------------------------------------------------------------------- the command line


def build_parser(spec):
    """SGLang's launch_server parser for the host's version: its option strings, nargs and
    static choices (from gpuops.core.engines.sglang.versions, written at setup), argparse's own
    prefix matching and errors. Defaults are left out: only what was given is returned."""

    def formatter(prog):
        return argparse.HelpFormatter(prog, width=78)

    parser = argparse.ArgumentParser(prog=spec["prog"], formatter_class=formatter,
                                     argument_default=argparse.SUPPRESS,
                                     allow_abbrev=spec.get("allow_abbrev", True) is not False)
    ints = {"--tp-size", "--port", "--context-length", "--page-size", "--speculative-num-steps",
            "--speculative-eagle-topk", "--speculative-num-draft-tokens", "--max-running-requests",
            "--chunked-prefill-size", "--cuda-graph-max-bs", "--pp-size", "--dp-size", "--ep-size",
            "--base-gpu-id", "--gpu-id-step", "--decode-log-interval", "--max-total-tokens",
            "--max-prefill-tokens", "--nnodes", "--node-rank", "--dist-timeout", "--nccl-port"}
    floats = {"--mem-fraction-static", "--watchdog-timeout"}
    for arg in spec["args"]:
        opts = arg["opts"]
        kwargs = {}
        if arg.get("hidden"):
            kwargs["help"] = argparse.SUPPRESS
        if arg.get("required"):
            kwargs["required"] = True
        nargs = arg.get("nargs")
        if nargs == 0:
            kwargs["action"] = "store_true"
        else:
            if nargs is not None:
                kwargs["nargs"] = nargs
            if arg.get("choices") is not None:
                kwargs["choices"] = arg["choices"]
            if nargs is None and any(o in ints for o in opts):
                kwargs["type"] = int
            elif nargs is None and any(o in floats for o in opts):
                kwargs["type"] = float
        try:
            parser.add_argument(*opts, **kwargs)
        except (argparse.ArgumentError, ValueError):
            continue
    return parser


def dest_of(spec, *names):
    """The argparse dest of the first of NAMES this version has (None: none of them)."""
    flags = {o: arg["opts"] for arg in spec["args"] for o in arg["opts"]}
    for name in names:
        if name in flags:
            first = next((o for o in flags[name] if o.startswith("--")), flags[name][0])
            return first.lstrip("-").replace("-", "_")
    return None


# ----------------------------------------------------------------------------------- metrics


class Histogram:
    def __init__(self, buckets):
        self.buckets = list(buckets)
        self.counts = [0] * len(self.buckets)
        self.sum = 0.0
        self.count = 0

    def observe(self, v):
        self.sum += v
        self.count += 1
        for i, b in enumerate(self.buckets):
            if v <= b:
                self.counts[i] += 1


TTFT_BUCKETS = [0.1, 0.2, 0.4, 0.6, 0.8, 1, 2, 4, 6, 8, 10, 20, 40, 60, 80, 100, 200, 400]
E2E_BUCKETS = [0.1, 0.2, 0.4, 0.6, 0.8, 1, 2, 4, 6, 8, 10, 20, 40, 60, 80, 100, 200, 400, 600, 1200, 1800, 2400]
ITL_BUCKETS = [0.002, 0.004, 0.006, 0.008, 0.010, 0.015, 0.020, 0.025, 0.030, 0.035, 0.040, 0.060, 0.080,
               0.100, 0.200, 0.400, 0.600, 0.800, 1.000, 2.000, 4.000, 6.000, 8.000]
QUEUE_BUCKETS = [0.0, 0.1, 0.2, 0.5, 1, 2, 3, 4, 5, 10, 15, 20, 30, 40, 50, 60, 70, 80, 90, 100, 200, 300,
                 400, 500, 600, 1200, 1800, 2400]


def fnum(v):
    """A sample value as prometheus_client writes it."""
    if isinstance(v, float) and math.isinf(v):
        return "+Inf" if v > 0 else "-Inf"
    return repr(float(v))


# ----------------------------------------------------------------------------------- the server


class Exit(Exception):
    def __init__(self, code):
        Exception.__init__(self, code)
        self.code = code


class Server:
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
        self.following = False  # a node R>0 whose schedulers are up (waiting for node 0's shutdown)
        self.node_exit = None  # why a following node ends: "shutdown" (node 0's broadcast)
        self.rendezvous = None
        self.closing = False  # a graceful shutdown is under way: lost peers are expected
        self.crash_lock = threading.Lock()
        self.httpd = None
        self.t0 = time.time()
        self.lock = threading.Lock()
        self._setup()

    # ------------------------------------------------------------ arguments

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

    # ------------------------------------------------------------ eras of this version

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

    # ------------------------------------------------------------ helpers

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

    # ------------------------------------------------------------ run

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

    # ------------------------------------------------------------ before the log starts

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

    # ------------------------------------------------------------ multi-node

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

    # tracebacks of the multi-node failures (the sglang 0.5.23 and 0.5.10 wheels, torch 2.14.1)

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

    # ------------------------------------------------------------ phases

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

    # ------------------------------------------------------------ serving

    def _serve(self):
        family = socket.AF_INET6 if ":" in self.host else socket.AF_INET
        handler = make_handler(self)

        class HTTPServer(ThreadingHTTPServer):
            address_family = family
            daemon_threads = True
            allow_reuse_address = True
            request_queue_size = 1024

        pid = os.getpid()
        self.out.bare("INFO:     Started server process [%d]" % pid)
        self.out.bare("INFO:     Waiting for application startup.")
        self.out.bare("INFO:     Application startup complete.")
        try:
            self.httpd = HTTPServer((self.host, self.port), handler)
        except OSError as e:
            self.out.bare("ERROR:    [Errno %d] error while attempting to bind on address (%r, %d): %s"
                          % (e.errno or 98, self.host, self.port, (e.strerror or str(e)).lower()))
            self.gpus.release()
            raise Exit(1)
        shown = self.host if family == socket.AF_INET else "[%s]" % self.host
        self.out.bare("INFO:     Uvicorn running on http://%s:%d (Press CTRL+C to quit)" % (shown, self.port))
        threading.Thread(target=self.httpd.serve_forever, kwargs={"poll_interval": 0.2}, daemon=True).start()
        threading.Thread(target=self._scheduler_loop, daemon=True).start()
        if not self.term and not self.skip_warmup:
            self.stop_event.wait(0.5 * self.pace / PACE_DIVISOR)
            self._warmup()
        if not self.term:
            self.ready = True
            self.log("The server is fired up and ready to roll!")
        while not self.term:
            self.stop_event.wait(1.0)
        return self._shutdown()

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

    def _shutdown(self):
        self.closing = True
        if self.rendezvous is not None:  # tokenizer_manager's ShutdownReq reaches every node's schedulers
            self.rendezvous.shutdown()
        self.out.bare("INFO:     Shutting down")
        with contextlib.suppress(Exception):
            self.httpd.shutdown()
            self.httpd.server_close()
        self.out.bare("INFO:     Waiting for application shutdown.")
        self.out.bare("INFO:     Application shutdown complete.")
        self.out.bare("INFO:     Finished server process [%d]" % os.getpid())
        self.gpus.release()
        return 0

    def _scheduler_loop(self):
        """Prefill batch lines for new requests; GPU utilisation follows the load."""
        last_util = None
        while not self.term:
            with self.cond:
                self.cond.wait(0.05)
                new = self.pending_prefill
                self.pending_prefill = []
                running = self.running
            if new:
                tokens = sum(new)
                gap = max(1e-3, time.time() - getattr(self, "_last_prefill", self.t0))
                self._last_prefill = time.time()
                usage = self.used_tokens / float(self.max_total_tokens or 1)
                if self.model.hybrid:
                    usage_msg = "full token usage: %.2f, mamba usage: %.2f, " % (usage, min(1.0, running / 256.0))
                else:
                    usage_msg = "token usage: %.2f, " % usage
                pending = "#pending-token: 0, " if self.V >= (0, 5, 23) else ""
                self.log("Prefill batch, #new-seq: %d, #new-token: %d, #cached-token: 0, %s#running-req: %d, "
                         "#queue-req: 0, %scuda graph: False, input throughput (token/s): %.2f"
                         % (len(new), tokens, usage_msg, max(0, running - len(new)), pending, tokens / gap),
                         0 if self.world > 1 else None)
                with self.cond:  # as SGLang's scheduler: a request's tokens come after its prefill is logged
                    self.prefills_logged += len(new)
                    self.cond.notify_all()
            util = min(97, 35 + running * 6) if running else 0
            if util != last_util:
                last_util = util
                with contextlib.suppress(Exception):
                    self.gpus.set(None, util=util, power_mw=75000 + util * 4500)

    def note_tokens(self, n):
        """Count generated tokens; log a Decode batch line every decode_log_interval steps."""
        with self.lock:
            self.metrics["gen"] += n
            self.gen_since_log += n
            self.used_tokens = max(0, self.used_tokens + n)
            # SGLang logs every decode_log_interval decode steps; a step makes one token per running request
            if self.gen_since_log < self.decode_log_interval * max(1, self.running):
                return
            now = time.time()
            gap = max(1e-3, now - self.last_decode_log)
            self.last_gen_throughput = self.gen_since_log / gap
            self.gen_since_log = 0
            self.last_decode_log = now
            running = self.running
            used = self.used_tokens
        usage = used / float(self.max_total_tokens or 1)
        if self.model.hybrid:
            usage_msg = ("#full token: %d, full token usage: %.2f, mamba num: %d, mamba usage: %.2f, "
                         % (used, usage, running, min(1.0, running / 256.0)))
        else:
            usage_msg = "#token: %d, token usage: %.2f, " % (used, usage)
        spec = ""
        if self.spec_on:
            spec = "accept len: %.2f, accept rate: %.2f, " % (self.accept_len,
                                                               (self.accept_len - 1) / max(1, self.spec_draft_tokens - 1))
        self.log("Decode batch, #running-req: %d, %s%scuda graph: True, gen throughput (token/s): %.2f, #queue-req: 0"
                 % (running, usage_msg, spec, self.last_gen_throughput), 0 if self.world > 1 else None)

    # ------------------------------------------------------------ documents

    def usage(self, prompt, completion, reasoning=0):
        """UsageInfo as SGLang dumps it (entrypoints/openai/protocol.py UsageInfo); 0.5.23 adds
        completion_tokens_details (usage_processor.py:117-131; not in 0.5.19)."""
        usage = {"prompt_tokens": prompt, "total_tokens": prompt + completion, "completion_tokens": completion,
                 "prompt_tokens_details": None, "reasoning_tokens": reasoning}
        if self.V >= (0, 5, 23):
            usage["completion_tokens_details"] = {"reasoning_tokens": reasoning} if reasoning else None
        return usage

    def model_info(self):
        return {
            "model_path": self.model_path, "tokenizer_path": self.arg("--tokenizer-path") or self.model_path,
            "is_generation": True, "preferred_sampling_params": None, "weight_version": "default",
            "has_image_understanding": "vision_config" in self.model.config, "has_audio_understanding": False,
            "model_type": self.model.model_type, "architectures": self.model.config.get("architectures"),
        }

    def internal_state(self):
        order, values = self._server_args_values()
        state = dict((k, values[k]) for k in order)
        state["last_gen_throughput"] = round(self.last_gen_throughput, 4)
        state["memory_usage"] = {"weight": round(self.weight_mem_gb, 2), "kvcache": round(self.kv_mem_gb, 2),
                                 "token_capacity": int(self.max_total_tokens), "graph": round(self.graph_mem_gb, 2)}
        state["effective_max_running_requests_per_dp"] = self.max_running
        if self.spec_on and self.metrics["gen"] > 0:
            state["avg_spec_accept_length"] = self.accept_len
        return state

    def server_info(self):
        order, values = self._server_args_values()
        info = dict((k, values[k]) for k in order)
        info.update({"status": "ready" if self.ready else "starting", "max_total_num_tokens": self.max_total_tokens,
                     "max_req_input_len": max(1, min(self.context, self.max_total_tokens) - 5)})
        if self.V >= (0, 5, 23):
            info.update({"launch_command": "python -m sglang.launch_server " + " ".join(self._redacted_argv()),
                         "kv_events": None, "startup_time": self.startup_time, "frontend": "python"})
        info["internal_states"] = [self.internal_state()]
        info["version"] = self.version
        return info

    def _redacted_argv(self):
        out, hide = [], False
        for a in self.argv:
            if hide:
                out.append("<redacted>")
                hide = False
                continue
            if a.startswith("--api-key"):
                if "=" in a:
                    out.append("--api-key=<redacted>")
                    continue
                hide = True
            out.append(a)
        return out

    def metrics_text(self):
        labels = 'model_name="%s",engine_type="unified",tp_rank="0",pp_rank="0"' % self.served.replace(
            "\\", "\\\\").replace('"', '\\"')
        lines = []

        def gauge(name, doc, value):
            lines.extend(["# HELP %s %s" % (name, doc), "# TYPE %s gauge" % name,
                          "%s{%s} %s" % (name, labels, fnum(value))])

        def counter(name, doc, value):
            lines.extend(["# HELP %s %s" % (name, doc), "# TYPE %s counter" % name,
                          "%s{%s} %s" % (name, labels, fnum(value))])

        def histogram(name, doc, h):
            lines.extend(["# HELP %s %s" % (name, doc), "# TYPE %s histogram" % name])
            for b, c in zip(h.buckets, h.counts):
                lines.append('%s_bucket{%s,le="%s"} %s' % (name, labels, fnum(float(b)), fnum(c)))
            lines.append('%s_bucket{%s,le="+Inf"} %s' % (name, labels, fnum(h.count)))
            lines.append("%s_count{%s} %s" % (name, labels, fnum(h.count)))
            lines.append("%s_sum{%s} %s" % (name, labels, fnum(h.sum)))

        with self.lock:
            m = self.metrics
            running = self.running
            used = self.used_tokens
            gauge("sglang:num_running_reqs", "The number of running requests.", running)
            gauge("sglang:num_used_tokens", "The number of used tokens.", used)
            gauge("sglang:token_usage", "The token usage.", used / float(self.max_total_tokens or 1))
            gauge("sglang:gen_throughput", "The generation throughput (token/s).", self.last_gen_throughput)
            gauge("sglang:num_queue_reqs", "The number of requests in the waiting queue.", 0)
            gauge("sglang:cache_hit_rate", "The prefix cache hit rate.", 0.0)
            gauge("sglang:max_total_num_tokens", "Maximum total number of tokens in the KV cache pool.",
                  self.max_total_tokens)
            if self.spec_on:
                gauge("sglang:spec_accept_length", "The average acceptance length of speculative decoding.",
                      self.accept_len if m["gen"] else 0.0)
                gauge("sglang:spec_accept_rate", "The average acceptance rate of speculative decoding "
                      "(`accepted tokens / total draft tokens` in batch).",
                      (self.accept_len - 1) / max(1, self.spec_draft_tokens - 1) if m["gen"] else 0.0)
            gauge("sglang:utilization", "The utilization.", min(1.0, running / float(self.max_running or 1)))
            gauge("sglang:engine_startup_time", "The time taken for the engine to start up.", self.startup_time)
            gauge("sglang:engine_load_weights_time", "The time taken for the engine to load weights.",
                  self.load_time)
            counter("sglang:prompt_tokens_total", "Number of prefill tokens processed.", m["prompt"])
            counter("sglang:generation_tokens_total", "Number of generation tokens processed.", m["gen"])
            counter("sglang:cached_tokens_total", "Number of cached prompt tokens.", m["cached"])
            counter("sglang:num_requests_total", "Number of requests processed.", m["requests"])
            counter("sglang:num_aborted_requests_total", "Number of requests aborted.", m["aborted"])
            histogram("sglang:time_to_first_token_seconds", "Histogram of time to first token in seconds.", m["ttft"])
            histogram("sglang:inter_token_latency_seconds", "Histogram of inter-token latency in seconds.", m["itl"])
            histogram("sglang:e2e_request_latency_seconds", "Histogram of End-to-end request latency in seconds",
                      m["e2e"])
            histogram("sglang:queue_time_seconds", "Histogram of queueing time in seconds.", m["queue"])
        return "\n".join(lines) + "\n"


# ----------------------------------------------------------------------------------- generation


def count_tokens(value):
    """A tokenizer-free count: words and punctuation of a text, the length of token ids."""
    if value is None:
        return 0
    if isinstance(value, list):
        if value and isinstance(value[0], int):
            return len(value)
        return sum(count_tokens(v) for v in value)
    if isinstance(value, dict):
        return count_tokens(value.get("text") or value.get("content"))
    return max(1, len(re.findall(r"\w+|[^\w\s]", str(value)))) if str(value) else 0


def example_value(schema, name="", depth=0):
    """A value that matches a JSON schema (types, enums, required properties)."""
    if not isinstance(schema, dict):
        return "example"
    if "enum" in schema and schema["enum"]:
        return schema["enum"][0]
    if "const" in schema:
        return schema["const"]
    for key in ("anyOf", "oneOf"):
        if schema.get(key):
            return example_value(schema[key][0], name, depth)
    t = schema.get("type")
    if isinstance(t, list):
        t = next((x for x in t if x != "null"), "string")
    if t == "object" or (t is None and "properties" in schema):
        props = schema.get("properties") or {}
        return dict((k, example_value(v, k, depth + 1)) for k, v in props.items()) if depth < 4 else {}
    if t == "array":
        return [example_value(schema.get("items") or {"type": "string"}, name, depth + 1)] if depth < 4 else []
    if t == "integer":
        lo = schema.get("minimum", 0)
        return int(max(lo, min(3, schema.get("maximum", 3))))
    if t == "number":
        return float(max(schema.get("minimum", 0), min(1.5, schema.get("maximum", 1.5))))
    if t == "boolean":
        return True
    if t == "null":
        return None
    words = {"city": "Paris", "location": "Paris, France", "unit": "celsius", "query": "sglang", "name": "gpuops",
             "date": "2026-11-30", "timezone": "UTC", "language": "en"}
    return words.get(name.lower(), "example")


def compact(obj):
    """JSON as SGLang's encoders write it (orjson, pydantic's model_dump_json, msgspec): no spaces, UTF-8."""
    return json.dumps(obj, separators=(",", ":"), ensure_ascii=False)


def tool_call_pieces(call, xml):
    """The model's raw text for CALL, one piece a token: Qwen3-Coder/Qwen3.5's XML
    (``<tool_call><function=NAME><parameter=K>V</parameter>...``) or the Qwen2.5/Qwen3 JSON."""
    if xml:
        raw = "<tool_call>\n<function=%s>\n" % call["name"]
        for k, v in call["arguments"].items():
            raw += "<parameter=%s>\n%s\n</parameter>\n" % (k, v if isinstance(v, str) else json.dumps(v))
        raw += "</function>\n</tool_call>"
    else:
        raw = "<tool_call>\n%s\n</tool_call>" % json.dumps({"name": call["name"], "arguments": call["arguments"]})
    return re.findall(r"\s*\S+", raw) or [raw]


def tool_call_deltas(call, pieces, xml):
    """What the tool-call parser streams as the model writes PIECES: {piece index: [(name or
    None, arguments fragment)]}. Qwen3CoderDetector (function_call/qwen3_coder_detector.py:270-383):
    the name with arguments "" once ``<function=NAME>`` is complete, "{" and '"key": value' as each
    ``</parameter>`` closes, "}" at ``</function>``. The JSON detectors (base_format_detector.py:260,
    330): the name first, then the arguments as they are written."""
    out = {}
    if not xml:
        args = json.dumps(call["arguments"], ensure_ascii=False)
        out[0] = [(call["name"], "")]
        step = max(1, len(args) // 4)
        out.setdefault(len(pieces) - 1, []).extend((None, args[j:j + step]) for j in range(0, len(args), step))
        return out
    params = iter(call["arguments"].items())
    count = 0
    for i, piece in enumerate(pieces):
        tag = piece.strip()
        if tag.startswith("<function="):
            out[i] = [(call["name"], "")]
        elif tag == "</parameter>":
            k, v = next(params)
            fragment = "%s: %s" % (json.dumps(k), json.dumps(v, ensure_ascii=False))
            out[i] = ([(None, "{")] if count == 0 else []) + [(None, fragment if count == 0 else ", " + fragment)]
            count += 1
        elif tag == "</function>":
            out[i] = ([(None, "{")] if count == 0 else []) + [(None, "}")]
    return out


class Generation:
    """What one request produces: a list of (kind, text) tokens and how it finishes."""

    def __init__(self, server, rng):
        self.server = server
        self.rng = rng

    def words(self, n, pool):
        i = self.rng.randrange(len(pool))
        return [" " + pool[(i + k) % len(pool)] for k in range(n)]


def _make_http_server(host, port, handler):
    family = socket.AF_INET6 if ":" in host else socket.AF_INET

    class HTTPServer(ThreadingHTTPServer):
        address_family = family
        daemon_threads = True
        allow_reuse_address = True
        request_queue_size = 1024

    return HTTPServer((host, port), handler)


def health_handler(server):
    """A node R>0's dummy health-check server (srt/utils/common.py launch_dummy_health_check_server):
    GET /ping, /health and /health_generate answer 200 with an empty body, /metrics with
    --enable-metrics; anything else FastAPI's 404. uvicorn runs at log level warning: no access lines."""

    class Handler(BaseHTTPRequestHandler):
        protocol_version = "HTTP/1.1"
        server_version = "uvicorn"
        sys_version = ""

        def log_message(self, fmt, *args):
            pass

        def answer(self):
            path = self.path.split("?", 1)[0]
            n = int(self.headers.get("Content-Length") or 0)
            if n:
                self.rfile.read(n)
            routes = ("/ping", "/health", "/health_generate") + (("/metrics",) if server.enable_metrics else ())
            ctype = "application/json"
            if path in routes and self.command == "GET":
                status, body = 200, b""
                if path == "/metrics":
                    ctype = "text/plain; version=0.0.4; charset=utf-8"
            elif path in routes:
                status, body = 405, b'{"detail":"Method Not Allowed"}'
            else:
                status, body = 404, b'{"detail":"Not Found"}'
            self.send_response(status)
            if body or path == "/metrics":
                self.send_header("content-type", ctype)
            self.send_header("content-length", str(len(body)))
            self.end_headers()
            if self.command != "HEAD":
                self.wfile.write(body)

        do_GET = do_POST = do_HEAD = do_PUT = do_DELETE = answer

    return Handler


def make_handler(server):
    out = server.out

    class Handler(BaseHTTPRequestHandler):
        protocol_version = "HTTP/1.1"
        server_version = "uvicorn"
        sys_version = ""

        def log_message(self, fmt, *args):
            pass

        def access(self, status):
            reason = {200: "OK", 400: "Bad Request", 401: "Unauthorized", 404: "Not Found",
                      405: "Method Not Allowed", 503: "Service Unavailable"}.get(status, "")
            out.bare('INFO:     %s:%d - "%s %s %s" %d %s' % (self.client_address[0], self.client_address[1],
                                                            self.command, self.path, self.request_version, status,
                                                            reason))

        # ---------------------------------------------------- plumbing

        def body(self):
            n = int(self.headers.get("Content-Length") or 0)
            if n:
                return self.rfile.read(n)
            if "chunked" in (self.headers.get("Transfer-Encoding") or "").lower():
                data = b""
                while True:
                    size = int(self.rfile.readline().strip() or b"0", 16)
                    if size == 0:
                        self.rfile.readline()
                        return data
                    data += self.rfile.read(size)
                    self.rfile.readline()
            return b""

        def send(self, status, payload=None, ctype="application/json", text=None):
            self.access(status)
            if text is not None:
                data = text.encode()
            elif payload is None:
                data = b""
            else:
                data = compact(payload).encode()
            self.send_response(status)
            if data or ctype:
                self.send_header("content-type", ctype)
            self.send_header("content-length", str(len(data)))
            self.end_headers()
            if self.command != "HEAD":
                self.wfile.write(data)

        def error(self, status, message, typ="BadRequestError"):
            self.send(status, {"object": "error", "message": message, "type": typ, "param": None, "code": status})

        def start_stream(self):
            self.access(200)
            self.send_response(200)
            self.send_header("content-type", "text/event-stream; charset=utf-8")
            self.send_header("transfer-encoding", "chunked")
            self.end_headers()

        def chunk(self, data):
            if isinstance(data, str):
                data = data.encode()
            self.wfile.write(b"%x\r\n%s\r\n" % (len(data), data))
            self.wfile.flush()

        def sse(self, obj):
            self.chunk("data: " + (obj if isinstance(obj, str) else compact(obj)) + "\n\n")

        def end_stream(self):
            self.chunk("data: [DONE]\n\n")
            self.wfile.write(b"0\r\n\r\n")
            self.wfile.flush()

        def authorized(self, path):
            """srt/utils/auth.py decide_request_auth: probes and Prometheus scrapes need no key."""
            if not server.api_key or path.startswith(("/health", "/metrics")):
                return True
            auth = self.headers.get("Authorization") or ""
            parts = auth.split(" ", 1)
            return len(parts) == 2 and parts[0].lower() == "bearer" and parts[1] == server.api_key

        # ---------------------------------------------------- routes

        def do_GET(self):
            self.route("GET")

        def do_POST(self):
            self.route("POST")

        def do_HEAD(self):
            self.route("GET")

        def route(self, method):
            path = self.path.split("?", 1)[0]
            try:
                raw = self.body() if method == "POST" else b""
                if not self.authorized(path):
                    return self.send(401, {"error": "Unauthorized"})
                get_routes = {
                    "/health": self.health, "/health_generate": self.health, "/model_info": self.model_info,
                    "/get_model_info": self.get_model_info, "/server_info": self.server_info,
                    "/get_server_info": self.get_server_info, "/v1/models": self.models, "/metrics": self.metrics,
                    "/flush_cache": self.flush_cache, "/ping": self.ping, "/v1/loads": self.loads,
                }
                post_routes = {"/v1/completions": self.completions, "/v1/chat/completions": self.chat,
                               "/generate": self.generate, "/flush_cache": self.flush_cache}
                routes = get_routes if method == "GET" else post_routes
                fn = routes.get(path)
                if fn is None:
                    if path in get_routes or path in post_routes:
                        return self.send(405, {"detail": "Method Not Allowed"})
                    return self.send(404, {"detail": "Not Found"})
                if method == "POST":
                    try:
                        body = json.loads(raw or b"{}")
                        if not isinstance(body, dict):
                            raise ValueError("expected a JSON object")
                    except ValueError as e:
                        return self.error(400, "Invalid request body: %s" % e)
                    return fn(body)
                return fn()
            except (BrokenPipeError, ConnectionResetError):
                with server.lock:
                    server.metrics["aborted"] += 1
            except Exception as e:  # a bug of the simulator: answer like FastAPI's 500, keep serving
                with contextlib.suppress(Exception):
                    self.error(500, "Internal server error: %r" % (e,), "InternalServerError")

        def health(self):
            if not server.ready or server.term:
                return self.send(503)
            return self.send(200)

        def ping(self):
            return self.send(200)

        def model_info(self):
            return self.send(200, server.model_info())

        def get_model_info(self):
            server.log("Endpoint '/get_model_info' is deprecated and will be removed in a future version. "
                       "Please use '/model_info' instead.")
            return self.model_info()

        def server_info(self):
            return self.send(200, server.server_info())

        def get_server_info(self):
            server.log("Endpoint '/get_server_info' is deprecated and will be removed in a future version. "
                       "Please use '/server_info' instead.")
            return self.server_info()

        def models(self):
            return self.send(200, {"object": "list", "data": [{
                "id": server.served, "object": "model", "created": int(server.t0), "owned_by": "sglang",
                "root": server.served, "parent": None, "max_model_len": server.context}]})

        def loads(self):
            return self.send(200, {"num_running_reqs": server.running, "num_waiting_reqs": 0,
                                   "num_used_tokens": server.used_tokens})

        def metrics(self):
            if not server.enable_metrics:
                return self.send(404, {"detail": "Not Found"})
            return self.send(200, ctype="text/plain; version=0.0.4; charset=utf-8", text=server.metrics_text())

        def flush_cache(self, body=None):
            server.log("Cache flushed successfully!", 0 if server.world > 1 else None)
            return self.send(200, ctype="text/plain; charset=utf-8", text=(
                "Cache flushed.\nPlease check backend logs for more details. "
                "(When there are running or waiting requests, the operation will not be performed.)\n"))

        # ---------------------------------------------------- generation

        def run_tokens(self, prompt_tokens, tokens, emit):
            """Prefill, then one token at a time: EMIT(i, token) for each; metrics. Returns e2e."""
            t0 = time.time()
            with server.cond:
                server.running += 1
                server.metrics["requests"] += 1
                server.metrics["prompt"] += prompt_tokens
                server.used_tokens += prompt_tokens
                server.pending_prefill.append(prompt_tokens)
                server.prefills_queued += 1
                ticket = server.prefills_queued
                server.cond.notify_all()
                # the scheduler loop logs the Prefill batch line before the first token (bounded: a loop
                # that is not running never holds a request)
                waited = time.time() + 2.0
                while server.prefills_logged < ticket and not server.term and time.time() < waited:
                    server.cond.wait(0.05)
            server.metrics["queue"].observe(0.0)
            delay = server.token_delay / (server.accept_len or 1.0)
            try:
                time.sleep(max(server.token_delay, prompt_tokens * server.token_delay / 500.0))
                last = time.time()
                server.metrics["ttft"].observe(last - t0)
                for i, tok in enumerate(tokens):
                    if i:
                        time.sleep(delay)
                        now = time.time()
                        server.metrics["itl"].observe(now - last)
                        last = now
                    emit(i, tok)
                    server.note_tokens(1)
            finally:
                with server.cond:
                    server.running -= 1
                    server.used_tokens = max(0, server.used_tokens - prompt_tokens - len(tokens))
                e2e = time.time() - t0
                server.metrics["e2e"].observe(e2e)
            return e2e

        def rng_for(self, body):
            return random.Random(hashlib.sha1(json.dumps(body, sort_keys=True, default=str).encode()).hexdigest())

        def max_tokens(self, body, default):
            for key in ("max_completion_tokens", "max_tokens"):
                v = body.get(key)
                if v is not None:
                    try:
                        v = int(v)
                    except (TypeError, ValueError):
                        return None, "%s must be an integer" % key
                    if v < 0:
                        return None, "max_tokens must be at least 0, got %d." % v
                    return v, None
            return default, None

        def completions(self, body):
            """serving_completions.py (0.5.23): the last token's chunk carries finish_reason (:374-403);
            the usage-only chunk, only with stream_options.include_usage, is dumped without nulls (:495)."""
            prompt = body.get("prompt")
            if prompt is None:
                return self.error(400, "Field required: prompt")
            n, err = self.max_tokens(body, 16)
            if err:
                return self.error(400, err)
            ptoks = count_tokens(prompt)
            gen = Generation(server, self.rng_for(body))
            tokens = gen.words(n, WORDS)
            rid = uuid.uuid4().hex
            created = int(time.time())
            model = body.get("model") or DEFAULT_MODEL
            usage = server.usage(ptoks, n)
            if not body.get("stream"):
                self.run_tokens(ptoks, tokens, lambda i, t: None)
                return self.send(200, {"id": rid, "object": "text_completion", "created": created, "model": model,
                                       "choices": [{"index": 0, "text": "".join(tokens), "logprobs": None,
                                                    "finish_reason": "length", "matched_stop": None}],
                                       "usage": usage, "metadata": {"weight_version": "default"}})
            include_usage = bool((body.get("stream_options") or {}).get("include_usage"))
            self.start_stream()

            def emit(i, tok):
                self.sse({"id": rid, "object": "text_completion", "created": created, "model": model,
                          "choices": [{"index": 0, "text": tok, "logprobs": None,
                                       "finish_reason": "length" if i == n - 1 else None, "matched_stop": None}],
                          "usage": None})

            self.run_tokens(ptoks, tokens, emit)
            if not tokens:
                emit(-1, "")
            if include_usage:
                self.sse({"id": rid, "object": "text_completion", "created": created, "model": model,
                          "choices": [], "usage": dict((k, v) for k, v in usage.items() if v is not None)})
            self.end_stream()

        def generate(self, body):
            text = body.get("text", body.get("input_ids"))
            if text is None:
                return self.error(400, "Either text or input_ids should be provided.")
            sp = body.get("sampling_params") or {}
            n = int(sp.get("max_new_tokens", 128) if sp.get("max_new_tokens") is not None else 128)
            ptoks = count_tokens(text)
            tokens = Generation(server, self.rng_for(body)).words(n, WORDS)
            rid = uuid.uuid4().hex
            ids = [1000 + (hash(t) % 50000) for t in tokens]

            def meta(k, done, e2e=None):
                m = {"id": rid, "finish_reason": {"type": "length", "length": n} if done else None,
                     "prompt_tokens": ptoks, "weight_version": "default", "completion_tokens": k,
                     "cached_tokens": 0}
                if e2e is not None:
                    m["e2e_latency"] = e2e
                return m

            if not body.get("stream"):
                e2e = self.run_tokens(ptoks, tokens, lambda i, t: None)
                return self.send(200, {"text": "".join(tokens), "output_ids": ids, "meta_info": meta(n, True, e2e)})
            self.start_stream()

            def emit(i, tok):
                self.sse({"text": "".join(tokens[: i + 1]), "output_ids": ids[: i + 1],
                          "meta_info": meta(i + 1, i + 1 == n)})

            self.run_tokens(ptoks, tokens, emit)
            self.end_stream()

        def chat(self, body):
            """serving_chat.py (0.5.23). The model writes raw text: its reasoning up to </think> when
            thinking is on (chat_template_kwargs enable_thinking / thinking false turns it off), then
            an answer or a tool call in its own format. SGLang's parsers split that text only when the
            server was started with them: --reasoning-parser moves the reasoning to reasoning_content
            (separate_reasoning, the default), --tool-call-parser turns the call into tool_calls with
            finish_reason "tool_calls" (:3150-3214, :2641-2662). Without them everything stays in
            content, as real SGLang leaves it. The JSON changed across releases (read from the wheels):
            up to 0.5.12 every chunk is a pydantic ChatCompletionStreamResponse with all delta fields and
            an empty non-streaming content is null; from 0.5.13 role, reasoning, plain content and the
            finish are sse_utils.build_sse_content's msgspec chunks (nulls left out), the tool-call
            parser's output stays pydantic (:3656-3756), and empty content is "" (:2994-2997); 0.5.23
            leaves a null tool_calls out (protocol.py:1299, :1380; still there in 0.5.19)."""
            messages = body.get("messages")
            if not isinstance(messages, list) or not messages:
                return self.error(400, "Field required: messages")
            n_given, err = self.max_tokens(body, None)
            if err:
                return self.error(400, err)
            ptoks = sum(count_tokens(m.get("content") if isinstance(m, dict) else m) + 4 for m in messages) + 3
            kwargs = body.get("chat_template_kwargs") or {}
            thinking_on = kwargs.get("enable_thinking", True) is not False and kwargs.get("thinking", True) is not False
            think = thinking_on and (server.reasoning_parser is not None or server.model.thinks)
            separate = server.reasoning_parser is not None and body.get("separate_reasoning", True) is not False
            tools = body.get("tools") or []
            choice = body.get("tool_choice", "auto")
            gen = Generation(server, self.rng_for(body))
            call = None
            if tools and choice != "none":
                fn = tools[0].get("function", {}) if isinstance(tools[0], dict) else {}
                if isinstance(choice, dict):
                    want = (choice.get("function") or {}).get("name")
                    fn = next((t.get("function", {}) for t in tools if (t.get("function") or {}).get("name") == want), fn)
                args = example_value(fn.get("parameters") or {"type": "object", "properties": {}})
                call = {"name": fn.get("name") or "tool", "arguments": args}
            # _tool_call_parsing_active (:1080): a tool-call parser, tools, tool_choice other than "none"
            parse_tools = call is not None and server.tool_parser is not None
            # the plan: reasoning tokens, content tokens (a word each), or a tool call; the answer ends at
            # its EOS unless max_tokens cuts it short or the request sets ignore_eos (as bench_serving does)
            r_n, c_n = (12 if think else 0), 20
            finish = "stop"
            if n_given is not None and (n_given < r_n + c_n or body.get("ignore_eos")):
                r_n = n_given // 2 if think else 0
                c_n = n_given - r_n
                finish = "length"
            if call is not None:
                r_n = min(r_n, 8) if think else 0
                finish = "tool_calls" if parse_tools else "stop"
            reasoning = gen.words(r_n, THOUGHTS)
            content = gen.words(c_n, WORDS) if call is None else []
            pieces = tool_call_pieces(call, server.model.xml_tools) if call is not None else []
            # the tokens as (where SGLang's parsers put them, text)
            seq = []
            if reasoning and separate:
                seq += [("reasoning", t) for t in reasoning]
            elif reasoning:
                seq += [("content", ("<think>\n" if i == 0 else "") + t) for i, t in enumerate(reasoning)]
                if content:
                    content[0] = "\n</think>\n\n" + content[0].lstrip()
                else:
                    seq.append(("content", "\n</think>\n\n"))
            elif content:
                content[0] = content[0].lstrip()
            seq += [("content", t) for t in content]
            first_piece = len(seq)
            seq += [("tool" if parse_tools else "content", t) for t in pieces]
            deltas = tool_call_deltas(call, pieces, server.model.xml_tools) if parse_tools else {}
            rid = uuid.uuid4().hex
            created = int(time.time())
            model = body.get("model") or DEFAULT_MODEL
            tool_calls = None
            if parse_tools:
                tool_calls = [{"id": "call_%s" % uuid.uuid4().hex[:24], "index": 0, "type": "function",
                               "function": {"name": call["name"],
                                            "arguments": json.dumps(call["arguments"], ensure_ascii=False)}}]
            usage = server.usage(ptoks, len(seq), len(reasoning) if separate else 0)
            matched = 151645 if finish == "stop" else None  # <|im_end|>
            msgspec_chunks = server.V >= (0, 5, 13)
            drop_null_calls = server.V >= (0, 5, 23)
            if not body.get("stream"):
                self.run_tokens(ptoks, seq, lambda i, t: None)
                text = "".join(t for k, t in seq if k == "content")
                message = {"role": "assistant", "content": text or ("" if msgspec_chunks else None),
                           "reasoning_content": "".join(t for k, t in seq if k == "reasoning").lstrip() or None,
                           "tool_calls": tool_calls}
                if tool_calls is None and drop_null_calls:
                    del message["tool_calls"]
                return self.send(200, {"id": rid, "object": "chat.completion", "created": created, "model": model,
                                       "choices": [{"index": 0, "message": message, "logprobs": None,
                                                    "finish_reason": finish, "matched_stop": matched}],
                                       "usage": usage, "metadata": {"weight_version": "default"}})
            include_usage = bool((body.get("stream_options") or {}).get("include_usage"))
            self.start_stream()

            def chunk(delta, finish_reason=None, matched_stop=None, parsed=False):
                """build_sse_content's msgspec chunk (reasoning_content always, role and content when set)
                from 0.5.13 unless PARSED by the tool-call parser; else the pydantic one."""
                doc = {"id": rid, "object": "chat.completion.chunk", "created": created, "model": model,
                       "choices": [{"index": 0, "delta": None, "logprobs": None, "finish_reason": finish_reason,
                                    "matched_stop": matched_stop}]}
                if msgspec_chunks and not parsed:
                    d = {"reasoning_content": delta.get("reasoning_content")}
                    d.update((k, delta[k]) for k in ("role", "content") if delta.get(k) is not None)
                else:
                    d = dict((k, delta.get(k)) for k in ("role", "content", "reasoning_content", "tool_calls"))
                    if d["tool_calls"] is None and drop_null_calls:
                        del d["tool_calls"]
                    doc["usage"] = None
                doc["choices"][0]["delta"] = d
                self.sse(doc)

            chunk({"role": "assistant", "content": ""})

            def emit(i, item):
                kind, text = item
                if kind == "reasoning":
                    chunk({"reasoning_content": text.lstrip() if i == 0 else text})
                elif kind == "content":
                    chunk({"content": text}, parsed=parse_tools)
                for name, args in deltas.get(i - first_piece, ()):
                    chunk({"tool_calls": [{"id": tool_calls[0]["id"] if name else None, "index": 0, "type": "function",
                                           "function": {"name": name, "arguments": args}}]}, parsed=True)

            self.run_tokens(ptoks, seq, emit)
            chunk({}, finish, matched)
            if include_usage:
                self.sse({"id": rid, "object": "chat.completion.chunk", "created": created, "model": model,
                          "choices": [], "usage": usage})
            self.end_stream()

    return Handler


# ----------------------------------------------------------------------------------- main


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


if __name__ == "__main__":
    sys.exit(main())
