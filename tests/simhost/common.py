"""Paths of the simulated host, the simulator's constants and small helpers shared by its modules."""

from __future__ import annotations

import argparse
import json
import math
import os
import re
import sys
import threading
import time



HERE = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))  # DIR/lib/sglang-sim (this package's folder)


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


SCENARIOS = ("ok", "ok-with-mtp", "hang-at-dist-init", "spec-config-crash", "kv-cache-oom", "slow-download",
             "hang-after-ready")


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


class Exit(Exception):
    def __init__(self, code):
        Exception.__init__(self, code)
        self.code = code
