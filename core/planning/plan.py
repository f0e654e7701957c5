"""From a model and a host to a checked, explained SGLang deployment plan.

Every flag in a plan comes from a rule in ``RULES`` (a table: id, when it applies,
what it adds, why). Rules are version-aware: a flag is only emitted under the name the
target SGLang version knows (``sglang_versions``), and the finished argv is checked
against that version's flag set (or the host's own ``--help``). ``--like`` starts from
a previous deployment's flags and drops, with a reason each, what no longer applies.
"""

from __future__ import annotations

import math
import re
import shlex
from dataclasses import dataclass, field
from typing import Callable, Sequence

from . import sglang_versions as sv
from ..config import validate_abs_path, validate_host_name
from .model_facts import ModelFacts

GIB = 1024**3
DEFAULT_PORT = 30000
DEFAULT_MEM_FRACTION = 0.8
# With speculative decoding SGLang caps running requests at 48 (facts/sglang.md §1).
SPEC_MAX_RUNNING = 48
DEFAULT_MAX_RUNNING = 128
MIN_TOKENS = 4096  # a server that can't hold this many tokens is not worth starting
DOWNLOAD_HEADROOM = 1.1


class PlanError(Exception):
    """Bad input for a plan: one line, exit code 2, nothing written."""


# ------------------------------------------------------------------ inputs


@dataclass(frozen=True)
class GpuInfo:
    index: int
    memory_total: int
    memory_used: int = 0
    processes: int = 0
    name: str | None = None


@dataclass(frozen=True)
class Target:
    """What the plan is for: a host's GPUs, disks and SGLang, or offline figures."""

    host: str | None
    gpus: tuple[GpuInfo, ...]
    sglang_version: str | None  # the host's installed version; None: not installed / unknown
    help_flags: frozenset[str] | None = None  # the host's `launch_server --help`, when it ran
    python: str = "python3"
    model_dirs: tuple[str, ...] = ()
    forbidden_paths: tuple[str, ...] = ()
    free_bytes: dict[str, int] = field(default_factory=dict)  # model dir -> free bytes there
    existing: dict[str, str] = field(default_factory=dict)  # model id -> path of a complete copy
    serve_host: str = "127.0.0.1"
    launcher: str = "systemd"
    allowed_gpu_ids: tuple[int, ...] | None = None  # the host policy's gpu_ids


@dataclass(frozen=True)
class Wishes:
    tp: int | None = None
    gpu_ids: tuple[int, ...] | None = None
    mtp: bool = True
    download_dir: str | None = None
    port: int = DEFAULT_PORT
    name: str | None = None
    mem_fraction_static: float = DEFAULT_MEM_FRACTION
    sglang_version: str | None = None  # --sglang-version: overrides what the host says
    like: "Previous | None" = None


@dataclass(frozen=True)
class Previous:
    """A previous deployment's launch: where it came from, its argv flags and env."""

    source: str
    argv: tuple[str, ...]
    env: tuple[tuple[str, str], ...] = ()


# ------------------------------------------------------------------ argv as flags


def split_flags(argv: Sequence[str]) -> list[tuple[str, tuple[str, ...]]]:
    """`--a 1 --b --c x y` → [("--a", ("1",)), ("--b", ()), ("--c", ("x", "y"))]."""
    out: list[tuple[str, tuple[str, ...]]] = []
    for arg in argv:
        if arg.startswith("--") and len(arg) > 2:
            if "=" in arg:
                name, _, value = arg.partition("=")
                out.append((name, (value,)))
            else:
                out.append((arg, ()))
        elif out:
            name, values = out[-1]
            out[-1] = (name, values + (arg,))
    return out


def join_flags(flags: Sequence[tuple[str, tuple[str, ...]]]) -> list[str]:
    argv: list[str] = []
    for name, values in flags:
        argv.append(name)
        argv.extend(values)
    return argv


# ------------------------------------------------------------------ the rules


@dataclass
class Ctx:
    """What a rule sees while the plan is built."""

    facts: ModelFacts
    target: Target
    wishes: Wishes
    version: str
    flags: frozenset[str]
    tp: int
    gpu_ids: tuple[int, ...]
    model_path: str
    spec: bool = False  # speculative decoding is on (set by the mtp rule)

    def has(self, flag: str) -> bool:
        return flag in self.flags


@dataclass(frozen=True)
class Rule:
    id: str
    when: Callable[[Ctx], bool]
    flags: Callable[[Ctx], list[tuple[str, tuple[str, ...]]]]
    why: Callable[[Ctx], str]
    env: Callable[[Ctx], dict[str, str]] = lambda ctx: {}


# Which parsers a model family uses (facts/sglang.md §2); the rules keep only names
# the target version knows.
PARSERS: dict[str, tuple[str | None, str | None]] = {
    # family: (reasoning parser, tool-call parser)
    "qwen3_5": ("qwen3", "qwen3_coder"),
    "qwen3_next": ("qwen3", "qwen"),
    "qwen3_moe": ("qwen3", "qwen"),
    "qwen3": ("qwen3", "qwen"),
    "qwen3_coder": (None, "qwen3_coder"),
    "qwen2_5": (None, "qwen25"),
    "deepseek_v3": ("deepseek-v3", "deepseekv3"),
    "kimi_k2": ("kimi_k2", "kimi_k2"),
    "gpt_oss": ("gpt-oss", "gpt-oss"),
    "glm": ("glm45", "glm45"),
    "llama3": (None, "llama3"),
    "mixtral": (None, "mistral"),
}

# Flags that belong to a quantization: dropped by --like when the new checkpoint
# doesn't carry that quantization.
QUANT_FLAGS: dict[str, frozenset[str]] = {
    "nvfp4": frozenset({"--quantization", "--moe-runner-backend", "--fp4-gemm-backend", "--kv-cache-dtype"}),
    "fp8": frozenset({"--quantization", "--kv-cache-dtype"}),
    "mxfp4": frozenset({"--quantization", "--moe-runner-backend"}),
}
FP4_ONLY_VALUES = {"--quantization": {"modelopt_fp4", "nvfp4", "mxfp4", "modelopt"},
                   "--moe-runner-backend": {"flashinfer_cutlass", "flashinfer_trtllm", "flashinfer_mxfp4"}}

MAMBA_FLAGS = ("--mamba-radix-cache-strategy", "--mamba-scheduler-strategy")  # new name first
SPEC_FLAGS = ("--speculative-algorithm", "--speculative-algo", "--speculative-num-steps",
              "--speculative-eagle-topk", "--speculative-num-draft-tokens", "--speculative-draft-model-path")
# Flags a plan always decides itself (never carried over from --like).
OWNED_FLAGS = frozenset({"--model-path", "--model", "--served-model-name", "--tp-size", "--host", "--port", "--api-key", "--context-length",
                         "--mem-fraction-static", "--enable-metrics"})


def _mamba_flag(ctx: Ctx) -> str | None:
    return next((f for f in MAMBA_FLAGS if ctx.has(f)), None)


def _allreduce_fusion(ctx: Ctx) -> tuple[str, tuple[str, ...]] | None:
    """`--flashinfer-allreduce-fusion-backend auto` where it exists (0.5.14+), else the old switch."""
    if ctx.has("--flashinfer-allreduce-fusion-backend"):
        return ("--flashinfer-allreduce-fusion-backend", ("auto",))
    if ctx.has("--enable-flashinfer-allreduce-fusion"):
        return ("--enable-flashinfer-allreduce-fusion", ())
    return None


def _parser(ctx: Ctx, which: int) -> str | None:
    name = PARSERS.get(ctx.facts.family, (None, None))[which]
    if name is None:
        return None
    known = sv.reasoning_parsers(ctx.version) if which == 0 else sv.tool_call_parsers(ctx.version)
    return name if name in known else None


def _quant_flags(ctx: Ctx) -> list[tuple[str, tuple[str, ...]]]:
    q = ctx.facts.quant
    if q is None or not q.sglang_quantization:
        return []
    return [("--quantization", (q.sglang_quantization,))]


def _spec_on(ctx: Ctx) -> bool:
    on = ctx.facts.mtp_layers > 0 and ctx.wishes.mtp and ctx.has("--speculative-algorithm")
    ctx.spec = on
    return on


RULES: tuple[Rule, ...] = (
    Rule("model", lambda c: True,
         lambda c: [("--model-path", (c.model_path,)), ("--served-model-name", (served_name(c.facts),))],
         lambda c: f"serve {c.facts.id} from {c.model_path}; clients ask for it as {served_name(c.facts)!r}"),
    Rule("tensor-parallel", lambda c: True,
         lambda c: [("--tp-size", (str(c.tp),))],
         lambda c: f"shard over {c.tp} GPU(s) ({', '.join(map(str, c.gpu_ids))})",
         env=lambda c: {"CUDA_VISIBLE_DEVICES": ",".join(map(str, c.gpu_ids))}),
    Rule("bind", lambda c: True,
         lambda c: [("--host", (c.target.serve_host,)), ("--port", (str(c.wishes.port),))],
         lambda c: ("the host policy allows serving only on loopback" if _loopback(c.target.serve_host)
                    else f"the host policy allows serving on {c.target.serve_host}")),
    Rule("api-key", lambda c: not _loopback(c.target.serve_host),
         lambda c: [("--api-key", ("${GPUOPS_API_KEY}",))],
         lambda c: "serving beyond loopback needs a key: generated at deploy into the 0600 env file, never shown"),
    Rule("context-length", lambda c: bool(c.facts.context_length) and c.has("--context-length"),
         lambda c: [("--context-length", (str(c.facts.context_length),))],
         lambda c: f"the model's full context ({c.facts.context_length:,} tokens); long contexts keep thinking intact"),
    Rule("mem-fraction", lambda c: c.has("--mem-fraction-static"),
         lambda c: [("--mem-fraction-static", (f"{c.wishes.mem_fraction_static:g}",))],
         lambda c: f"weights + KV cache may use {c.wishes.mem_fraction_static:.0%} of each GPU; the rest is for "
                   "activations and CUDA graphs"),
    Rule("metrics", lambda c: c.has("--enable-metrics"),
         lambda c: [("--enable-metrics", ())],
         lambda c: "Prometheus /metrics for gpuops' live views and benchmarks"),
    Rule("reasoning-parser", lambda c: _parser(c, 0) is not None and c.has("--reasoning-parser"),
         lambda c: [("--reasoning-parser", (_parser(c, 0),))],
         lambda c: f"{c.facts.family} models think: split reasoning_content from content"),
    Rule("tool-call-parser", lambda c: _parser(c, 1) is not None and c.has("--tool-call-parser"),
         lambda c: [("--tool-call-parser", (_parser(c, 1),))],
         lambda c: f"{c.facts.family} tool-call format → OpenAI tool_calls"),
    Rule("quantization", lambda c: bool(_quant_flags(c)) and c.has("--quantization"),
         _quant_flags,
         lambda c: f"the checkpoint is {c.facts.quant.method if c.facts.quant else '?'}-quantized"),
    Rule("mtp", _spec_on,
         lambda c: [("--speculative-algorithm", ("NEXTN",)), ("--speculative-num-steps", ("3",)),
                    ("--speculative-eagle-topk", ("1",)), ("--speculative-num-draft-tokens", ("4",))],
         lambda c: f"the checkpoint has {c.facts.mtp_layers} MTP layer(s): NEXTN speculative decoding "
                   "(cookbook: 3 steps, top-k 1, 4 draft tokens); --no-mtp drops it"),
    Rule("mamba-extra-buffer", lambda c: c.spec and c.facts.hybrid is not None and _mamba_flag(c) is not None,
         lambda c: [(_mamba_flag(c) or "", ("extra_buffer",))]
         + ([("--page-size", ("64",))] if c.has("--page-size") else []),
         lambda c: f"hybrid linear attention + speculative decoding needs the extra_buffer mamba cache "
                   f"(named {_mamba_flag(c)} in {c.version}); page size 64 matches FLA's chunk size"
                   + ("; Spec V2 is off by default in this version: SGLANG_ENABLE_SPEC_V2=1"
                      if sv.spec_v2_default(c.version) is False else ""),
         env=lambda c: {"SGLANG_ENABLE_SPEC_V2": "1"} if sv.spec_v2_default(c.version) is False else {}),
    Rule("allreduce-fusion",
         lambda c: c.tp > 1 and not _is_fp4(c.facts) and _allreduce_fusion(c) is not None,
         lambda c: [_allreduce_fusion(c) or ("", ())],
         lambda c: "cookbook: fuse all-reduce with the norm for non-FP4 checkpoints at TP > 1"),
)


def served_name(facts: ModelFacts) -> str:
    """The model name clients use: the repo id, or a local folder's name."""
    return facts.id.rstrip("/").rsplit("/", 1)[-1] if facts.id.startswith("/") else facts.id


def _loopback(addr: str) -> bool:
    return addr.startswith("127.") or addr == "::1" or addr == "localhost"


def _is_fp4(facts: ModelFacts) -> bool:
    return facts.quant is not None and facts.quant.method in ("nvfp4", "mxfp4")


# ------------------------------------------------------------------ the fit


@dataclass
class Fit:
    gpu_memory_bytes: int
    mem_fraction_static: float
    weights_per_gpu_bytes: int
    state_cache_per_gpu_bytes: int
    kv_cache_per_gpu_bytes: int
    kv_bytes_per_token_per_gpu: int
    max_total_tokens: int
    fits: bool
    verdict: str
    smallest_tp: int | None = None

    def to_json(self) -> dict:
        return {
            "weights_per_gpu_bytes": self.weights_per_gpu_bytes,
            "kv_cache_per_gpu_bytes": self.kv_cache_per_gpu_bytes,
            "max_total_tokens": self.max_total_tokens,
            "fits": self.fits,
            "gpu_memory_bytes": self.gpu_memory_bytes,
            "mem_fraction_static": self.mem_fraction_static,
            "state_cache_per_gpu_bytes": self.state_cache_per_gpu_bytes,
            "kv_bytes_per_token_per_gpu": self.kv_bytes_per_token_per_gpu,
            "smallest_tp": self.smallest_tp,
            "verdict": self.verdict,
        }


def kv_bytes_per_token_per_gpu(facts: ModelFacts, tp: int) -> int:
    """KV bytes one token costs on each GPU. MLA's latent is replicated on every TP rank;
    GQA heads are split, but never below one head per rank."""
    whole = facts.kv_bytes_per_token()
    if facts.mla is not None:
        return whole
    kv_heads = facts.num_kv_heads or facts.num_attention_heads or 1
    per_rank_heads = max(1, math.ceil(kv_heads / tp))
    return math.ceil(whole * per_rank_heads / kv_heads)


def compute_fit(facts: ModelFacts, tp: int, gpu_memory: int, mem_fraction: float, spec: bool,
                gpu_count: int | None = None) -> Fit:
    weights = math.ceil(facts.checkpoint_bytes / tp)
    running = SPEC_MAX_RUNNING if spec else DEFAULT_MAX_RUNNING
    state = 0
    if facts.hybrid is not None:
        # extra_buffer keeps a second state per request for speculative decoding
        state = math.ceil(facts.hybrid.state_bytes_per_request * running * (2 if spec else 1) / tp)
    budget = int(gpu_memory * mem_fraction) - weights - state
    per_token = max(1, kv_bytes_per_token_per_gpu(facts, tp))
    tokens = max(0, budget // per_token)
    need = min(facts.context_length or MIN_TOKENS, MIN_TOKENS)
    fits = budget > 0 and tokens >= need
    if fits:
        ctx = facts.context_length
        room = f" ({tokens / ctx:.1f}x a full {ctx:,}-token context)" if ctx else ""
        verdict = (f"fits at TP{tp}: {weights / GIB:.1f} GiB weights per GPU, {budget / GIB:.1f} GiB KV cache "
                   f"per GPU → {tokens:,} tokens{room}")
    elif budget <= 0:
        verdict = (f"does not fit at TP{tp}: {weights / GIB:.1f} GiB weights per GPU + {state / GIB:.1f} GiB state "
                   f"exceed {mem_fraction:.0%} of {gpu_memory / GIB:.1f} GiB")
    else:
        verdict = f"does not fit at TP{tp}: room for only {tokens:,} tokens of KV cache"
    fit = Fit(gpu_memory, mem_fraction, weights, state, max(0, budget), per_token, tokens, fits, verdict)
    if not fits and gpu_count:
        for bigger in _tp_choices(facts, gpu_count):
            if bigger > tp and compute_fit(facts, bigger, gpu_memory, mem_fraction, spec).fits:
                fit.smallest_tp = bigger
                fit.verdict += f"; the smallest TP that fits is {bigger}"
                break
        else:
            fit.verdict += f"; no TP up to {gpu_count} GPU(s) fits"
    return fit


def _tp_choices(facts: ModelFacts, gpus: int) -> list[int]:
    heads = facts.num_attention_heads
    return [t for t in range(1, gpus + 1) if heads is None or heads % t == 0]


# ------------------------------------------------------------------ the plan


@dataclass
class RuleFired:
    id: str
    why: str
    adds: list[str]
    removes: list[str] = field(default_factory=list)

    def to_json(self) -> dict:
        return {"id": self.id, "why": self.why, "adds": self.adds, "removes": self.removes}


@dataclass
class Plan:
    name: str
    host: str | None
    facts: ModelFacts
    tp: int
    gpu_ids: tuple[int, ...]
    port: int
    launcher: str
    sglang_version: str
    version_source: str  # "host" | "--sglang-version" | "newest known"
    python: str
    env: dict[str, str]
    argv: list[str]
    download_dir: str | None
    model_path: str
    reuse_existing: bool
    fit: Fit
    rules: list[RuleFired]
    warnings: list[str]
    flags_checked_against: str
    unknown_flags: list[str]
    like: Previous | None = None
    like_diff: list[tuple[str, str]] = field(default_factory=list)  # ("+"/"-"/"~", text)

    @property
    def unit_name(self) -> str:
        return f"gpuops-{self.name}.service"

    @property
    def env_file(self) -> str:
        return f"/etc/gpuops/{self.name}.env"

    def exec_argv(self) -> list[str]:
        return [self.python, "-m", "sglang.launch_server", *self.argv]

    def unit_text(self) -> str:
        return render_unit(self)

    def env_file_text(self) -> str:
        """The env file as it will be written (mode 0600); secrets only as placeholders."""
        lines = [f"# gpuops: environment of {self.unit_name} (mode 0600)"]
        lines += [f"{k}={_env_quote(v)}" for k, v in sorted(self.env.items())]
        if any("${GPUOPS_API_KEY}" in a for a in self.argv):
            lines.append("GPUOPS_API_KEY=<generated at deploy, never shown>")
        lines.append("# HF_TOKEN=<passed from your environment at download time, if set>")
        return "\n".join(lines) + "\n"

    def to_json(self) -> dict:
        return {
            "schema": 1,
            "name": self.name,
            "host": self.host,
            "model": self.facts.to_json(),
            "tp": self.tp,
            "gpu_ids": list(self.gpu_ids),
            "port": self.port,
            "launcher": self.launcher,
            "sglang_version": self.sglang_version,
            "env": dict(self.env),
            "argv": list(self.argv),
            "download_dir": self.download_dir,
            "fit": self.fit.to_json(),
            "rules": [r.to_json() for r in self.rules],
            "unit": ({"name": self.unit_name, "text": self.unit_text(), "env_file": self.env_file}
                     if self.launcher == "systemd" else None),
            "warnings": list(self.warnings),
            # grown fields
            "model_path": self.model_path,
            "reuse_existing": self.reuse_existing,
            "python": self.python,
            "sglang_version_source": self.version_source,
            "flags_checked_against": self.flags_checked_against,
            "unknown_flags": list(self.unknown_flags),
            "like": ({"source": self.like.source, "diff": [{"op": op, "text": t} for op, t in self.like_diff]}
                     if self.like else None),
        }


def _env_quote(value: str) -> str:
    return value if re.fullmatch(r"[A-Za-z0-9_./:,=+@-]*", value) else '"' + value.replace("\\", "\\\\").replace('"', '\\"') + '"'


def systemd_quote(arg: str) -> str:
    """One ExecStart word: systemd's own quoting; `%` specifiers and `$` expansion escaped,
    except the ${GPUOPS_API_KEY} placeholder that systemd fills from the env file."""
    if arg == "${GPUOPS_API_KEY}":
        return arg
    escaped = arg.replace("%", "%%").replace("$", "$$")
    if re.fullmatch(r"[A-Za-z0-9_./:,=+@%$-]+", escaped):
        return escaped
    return '"' + escaped.replace("\\", "\\\\").replace('"', '\\"') + '"'


def render_unit(plan: Plan) -> str:
    return _unit_text(plan.facts.id, plan.name, plan.env_file, plan.exec_argv())


def unit_text_from_json(doc: dict) -> str:
    """The systemd unit of a plan JSON document (``Plan.to_json()``), as :func:`render_unit` writes
    it for the Plan: for a document whose argv changed since (core/fixes.py applies fixes to JSON)."""
    exec_argv = [doc.get("python") or "python3", "-m", "sglang.launch_server", *doc["argv"]]
    return _unit_text(doc["model"]["id"], doc["name"], doc["unit"]["env_file"], exec_argv)


def _unit_text(model_id: str, name: str, env_file: str, exec_argv: list[str]) -> str:
    exec_start = " \\\n    ".join(
        " ".join(systemd_quote(a) for a in chunk) for chunk in _chunks(exec_argv)
    )
    return (
        "[Unit]\n"
        f"Description=gpuops: {model_id} ({name})\n"
        "After=network-online.target\n"
        "Wants=network-online.target\n\n"
        "[Service]\n"
        "Type=simple\n"
        f"EnvironmentFile={env_file}\n"
        f"ExecStart={exec_start}\n"
        "Restart=no\n"
        "KillMode=control-group\n"
        "TimeoutStopSec=60\n"
        "LimitNOFILE=1048576\n"
        "StandardOutput=journal\n"
        "StandardError=journal\n\n"
        "[Install]\n"
        "WantedBy=multi-user.target\n"
    )


def _chunks(argv: list[str]) -> list[list[str]]:
    """The python -m part, then one flag with its values per line."""
    head = argv[:3]
    out = [head]
    for name, values in split_flags(argv[3:]):
        out.append([name, *values])
    return out


def default_name(model_id: str) -> str:
    base = model_id.rstrip("/").split("/")[-1].lower()
    base = re.sub(r"[^a-z0-9._-]+", "-", base).strip("-._") or "model"
    return base[:48]


def _choose_download_dir(facts: ModelFacts, target: Target, wishes: Wishes, warnings: list[str]) -> tuple[str | None, str, bool]:
    """(download_dir, model_path, reuse_existing)."""
    repo_like = "/" in facts.id and not facts.id.startswith("/")
    if facts.source == "local" and not repo_like:
        return None, facts.id, True
    existing = target.existing.get(facts.id)
    if existing and not wishes.download_dir:
        return None, existing, True
    need = int(facts.checkpoint_bytes * DOWNLOAD_HEADROOM)
    if wishes.download_dir:
        d = validate_abs_path(wishes.download_dir, "--download-dir")
        bad = _under_any(d, target.forbidden_paths)
        if bad:
            raise PlanError(f"--download-dir {d} is under forbidden path {bad} (host policy forbidden_paths): "
                            "refusing to put a model there")
        free = target.free_bytes.get(d)
        if free is not None and free < need:
            warnings.append(f"--download-dir {d} has {free / GIB:.0f} GiB free, the model needs {need / GIB:.0f} GiB "
                            "(1.1x its size)")
        if target.model_dirs and not _under_any(d, target.model_dirs):
            warnings.append(f"--download-dir {d} is not one of the host's model_dirs")
        return d, f"{d.rstrip('/')}/{facts.id}", False
    for d in target.model_dirs:
        if _under_any(d, target.forbidden_paths):
            continue  # config validation already refuses these; never choose one anyway
        free = target.free_bytes.get(d)
        if free is None or free >= need:
            return d, f"{d.rstrip('/')}/{facts.id}", False
    if target.model_dirs:
        frees = ", ".join(f"{d} {target.free_bytes.get(d, 0) / GIB:.0f} GiB" for d in target.model_dirs)
        warnings.append(f"no model dir has {need / GIB:.0f} GiB free (1.1x the checkpoint): {frees}")
    elif target.host is not None:
        warnings.append(f"{target.host} lists no model_dirs: the download goes to its HF cache")
    return None, facts.id, False


def _under_any(path: str, roots: Sequence[str]) -> str | None:
    for root in roots:
        r = root.rstrip("/") or "/"
        if path == r or path.startswith(r.rstrip("/") + "/"):
            return root
    return None


def _pick_gpus(target: Target, wishes: Wishes, tp: int | None, warnings: list[str]) -> tuple[int, tuple[int, ...]]:
    allowed = [g.index for g in target.gpus]
    if target.allowed_gpu_ids is not None:
        allowed = [i for i in allowed if i in target.allowed_gpu_ids] if target.gpus else list(target.allowed_gpu_ids)
    if not allowed:
        raise PlanError("no GPUs to plan for: give --host (its GPUs are read) or --gpus N --gpu-memory GIB")
    if wishes.gpu_ids is not None:
        ids = wishes.gpu_ids
        outside = [i for i in ids if i not in allowed]
        if outside:
            raise PlanError(f"--gpu-ids {','.join(map(str, outside))}: not among this host's GPUs for gpuops "
                            f"({','.join(map(str, allowed))})")
        if len(set(ids)) != len(ids):
            raise PlanError("--gpu-ids lists a GPU twice")
        if tp is not None and tp != len(ids):
            raise PlanError(f"--tp {tp} but --gpu-ids names {len(ids)} GPU(s): they must match")
        return len(ids), tuple(ids)
    busy = {g.index for g in target.gpus if g.processes > 0}
    free_first = [i for i in allowed if i not in busy] + [i for i in allowed if i in busy]
    want = tp if tp is not None else None
    if want is None:
        return 0, tuple(free_first)  # decided after the fit
    if want > len(allowed):
        raise PlanError(f"--tp {want} needs {want} GPUs; this host has {len(allowed)} for gpuops")
    chosen = tuple(sorted(free_first[:want]))
    taken = [i for i in chosen if i in busy]
    if taken:
        warnings.append(f"GPU(s) {','.join(map(str, taken))} already run processes: deploy will list them and ask")
    return want, chosen


def build_plan(facts: ModelFacts, target: Target, wishes: Wishes) -> Plan:
    warnings: list[str] = []
    if wishes.name is not None:
        try:
            name = validate_host_name(wishes.name)
        except ValueError as exc:
            raise PlanError(f"--name: {exc}") from None
    else:
        name = default_name(facts.id)
    if not 1 <= wishes.port <= 65535:
        raise PlanError(f"--port must be 1..65535, got {wishes.port}")
    if not 0.1 <= wishes.mem_fraction_static <= 0.98:
        raise PlanError(f"--mem-fraction-static must be 0.1..0.98, got {wishes.mem_fraction_static}")

    # the SGLang version whose rules and flags apply
    if wishes.sglang_version:
        version, version_source = wishes.sglang_version, "--sglang-version"
        if target.sglang_version and sv.version_key(target.sglang_version) != sv.version_key(version):
            warnings.append(f"planning for SGLang {version} but the host has {target.sglang_version}")
    elif target.sglang_version:
        version, version_source = target.sglang_version, "host"
    else:
        version, version_source = sv.newest_version(), "newest known"
    if target.host and not target.sglang_version:
        warnings.append(f"SGLang is not installed on {target.host} (with {target.python}): planned for "
                        f"{version}; deploy will refuse until SGLang is installed there")
    if facts.missing:
        warnings.append(f"config.json lacks {', '.join(facts.missing)}: sizes and fit are estimates")
    if not facts.known_architecture:
        warnings.append(f"unknown architecture {facts.architecture or '?'}: generic rules only (no parsers, "
                        "no quantization flags); check the launch before deploying")
    # a host's --help leaves out the options SGLang hides; they are accepted all the same
    flags = (target.help_flags | sv.hidden_flags(version)) if target.help_flags else sv.flags_for(version)
    checked_against = (f"{target.host}'s `launch_server --help` (SGLang {target.sglang_version})"
                       if target.help_flags else f"SGLang {sv.resolve_version(version)}'s flags (from its wheel)")

    # GPUs and TP
    if wishes.tp is not None and wishes.tp < 1:
        raise PlanError(f"--tp must be at least 1, got {wishes.tp}")
    tp, gpu_ids = _pick_gpus(target, wishes, wishes.tp, warnings)
    heads = facts.num_attention_heads
    gpu_mem = min((g.memory_total for g in target.gpus if g.index in gpu_ids), default=0)
    spec_possible = facts.mtp_layers > 0 and wishes.mtp
    if tp == 0:  # no --tp: the smallest that fits on the free GPUs
        choices = _tp_choices(facts, len(gpu_ids))
        tp = next((t for t in choices if compute_fit(facts, t, gpu_mem, wishes.mem_fraction_static,
                                                     spec_possible).fits), choices[-1] if choices else 1)
        gpu_ids = tuple(sorted(gpu_ids[:tp]))
        warnings.append(f"no --tp given: TP{tp}, the smallest that fits")
    if heads and heads % tp:
        raise PlanError(f"--tp {tp} does not divide the model's {heads} attention heads "
                        f"(try {', '.join(map(str, _tp_choices(facts, max(tp, 8))))})")

    # where the weights go
    download_dir, model_path, reuse = _choose_download_dir(facts, target, wishes, warnings)

    ctx = Ctx(facts, target, wishes, version, frozenset(flags), tp, gpu_ids, model_path)
    produced: list[tuple[str, tuple[str, ...]]] = []
    env: dict[str, str] = {}
    fired: list[RuleFired] = []
    for rule in RULES:
        if not rule.when(ctx):
            continue
        rule_flags = rule.flags(ctx)
        rule_env = rule.env(ctx)
        produced.extend(rule_flags)
        env.update(rule_env)
        fired.append(RuleFired(rule.id, rule.why(ctx),
                               join_flags(rule_flags) + [f"{k}={v}" for k, v in rule_env.items()]))
    if facts.mtp_layers > 0 and not ctx.spec:
        why = "--no-mtp" if not wishes.mtp else f"SGLang {version} has no --speculative-algorithm"
        warnings.append(f"the checkpoint has MTP layers but speculative decoding is off ({why})")

    like_diff: list[tuple[str, str]] = []
    if wishes.like is not None:
        produced, env, like_diff = _apply_like(wishes.like, produced, env, ctx, fired)

    argv = join_flags(produced)
    unknown = sorted({n for n, _ in produced if n not in flags})
    if unknown:
        warnings.append(f"flags unknown to SGLang {version}: {', '.join(unknown)} — deploy would fail; "
                        "fix the plan first")

    fit = compute_fit(facts, tp, gpu_mem, wishes.mem_fraction_static, ctx.spec, gpu_count=len(target.gpus) or None)
    return Plan(
        name=name, host=target.host, facts=facts, tp=tp, gpu_ids=gpu_ids, port=wishes.port,
        launcher=target.launcher, sglang_version=version, version_source=version_source,
        python=target.python, env=env, argv=argv, download_dir=download_dir, model_path=model_path,
        reuse_existing=reuse, fit=fit, rules=fired, warnings=warnings, flags_checked_against=checked_against,
        unknown_flags=unknown, like=wishes.like, like_diff=like_diff,
    )


def _drop_reason(name: str, values: tuple[str, ...], ctx: Ctx, ours: set[str]) -> str | None:
    """Why a flag of the previous deployment no longer applies (None: keep it)."""
    facts = ctx.facts
    if name in OWNED_FLAGS or name in ours:
        return None  # replaced by this plan's own value
    if name in FP4_ONLY_VALUES and (not values or values[0] in FP4_ONLY_VALUES[name]):
        if not _is_fp4(facts):
            return f"{name} {' '.join(values)} is for FP4 checkpoints; {facts.id} is {facts.quant.method if facts.quant else facts.dtype or 'unquantized'}"
    if name == "--fp4-gemm-backend" and not _is_fp4(facts):
        return f"--fp4-gemm-backend only matters for FP4 checkpoints; {facts.id} is not FP4"
    if name == "--quantization" and (facts.quant is None or facts.quant.sglang_quantization not in values):
        return f"{facts.id} carries no {' '.join(values)} quantization"
    if name in SPEC_FLAGS and not ctx.spec:
        return "speculative decoding is off for this model (" + ("--no-mtp" if not ctx.wishes.mtp else "no MTP layers") + ")"
    if name in MAMBA_FLAGS and facts.hybrid is None:
        return f"{facts.id} has no linear-attention layers"
    if name not in ctx.flags:
        renamed = next((m for m in MAMBA_FLAGS if m != name and m in ctx.flags), None) if name in MAMBA_FLAGS else None
        return f"renamed to {renamed} in SGLang {ctx.version}" if renamed else f"SGLang {ctx.version} has no {name}"
    return None


def _translate_deprecated(name: str, values: tuple[str, ...], version: str) -> tuple[str, tuple[str, ...]] | None:
    """A deprecated flag under its replacement's name (`--x` or `--x=value`); None if it
    has none gpuops can write (then it is kept as is: SGLang still accepts it)."""
    replacement = sv.deprecated_flags(version).get(name)
    if not replacement or any(ch in replacement for ch in "{< "):
        return None
    new, eq, value = replacement.partition("=")
    return (new, (value,)) if eq else (new, values)


def _apply_like(prev: Previous, produced: list[tuple[str, tuple[str, ...]]], env: dict[str, str], ctx: Ctx,
                fired: list[RuleFired]) -> tuple[list[tuple[str, tuple[str, ...]]], dict[str, str], list[tuple[str, str]]]:
    ours = {n for n, _ in produced}
    prev_flags = [(canonical_flag(n, ctx.flags), v) for n, v in split_flags(_strip_launcher(prev.argv))]
    prev_map = dict(prev_flags)
    kept: list[tuple[str, tuple[str, ...]]] = []
    dropped: list[str] = []
    diff: list[tuple[str, str]] = []
    for name, values in prev_flags:
        reason = _drop_reason(name, values, ctx, ours)
        translated = _translate_deprecated(name, values, ctx.version) if reason is None else None
        if translated is not None:
            new_name, new_values = translated
            why = f"{name} is deprecated in SGLang {ctx.version}: {' '.join([new_name, *new_values])}"
            if new_name in ours:
                reason = f"{why}, which this plan sets itself"
            else:
                diff.append(("~", f"{' '.join([name, *values])} → {' '.join([new_name, *new_values])}  ({why})"))
                fired.append(RuleFired("like-rename", why, [new_name, *new_values], [name, *values]))
                kept.append((new_name, new_values))
                continue
        if reason is not None:
            dropped.extend([name, *values])
            diff.append(("-", f"{' '.join([name, *values])}  ({reason})"))
            fired.append(RuleFired("like-drop", reason, [], [name, *values]))
        elif name not in ours:
            kept.append((name, values))
    if kept:
        fired.append(RuleFired("like-keep", f"kept from {prev.source}: still valid for this model and SGLang "
                               f"{ctx.version}", join_flags(kept)))
    for name, values in produced:
        if name not in prev_map:
            diff.append(("+", " ".join([name, *values])))
        elif prev_map[name] != values:
            diff.append(("~", f"{name} {' '.join(prev_map[name])} → {' '.join(values)}"))
    new_env = dict(prev.env)
    if "SGLANG_ENABLE_SPEC_V2" in new_env:
        why = ("speculative decoding is off" if not ctx.spec
               else f"SGLang {ctx.version} has no such variable any more" if sv.spec_v2_default(ctx.version) is None
               else None)
        if why:
            value = new_env.pop("SGLANG_ENABLE_SPEC_V2")
            diff.append(("-", f"SGLANG_ENABLE_SPEC_V2={value}  ({why})"))
            fired.append(RuleFired("like-drop", why, [], [f"SGLANG_ENABLE_SPEC_V2={value}"]))
    for k, v in env.items():
        if new_env.get(k) != v:
            diff.append(("+" if k not in new_env else "~", f"{k}={v}"))
        new_env[k] = v
    return produced + kept, new_env, diff


ALIASES = {"--tensor-parallel-size": "--tp-size", "--tp": "--tp-size", "--model": "--model-path",
           "--speculative-algo": "--speculative-algorithm"}


def canonical_flag(name: str, known: frozenset[str]) -> str:
    """The flag's full name: known aliases, and argparse's unique-prefix abbreviations
    (`--tp` is accepted by SGLang as `--tp-size`)."""
    if name in ALIASES:
        return ALIASES[name]
    return sv.match_flag(name, known) or name


def _strip_launcher(argv: Sequence[str]) -> list[str]:
    """Drop `python -m sglang.launch_server` / `sglang serve` from the front of an argv."""
    args = list(argv)
    for i, a in enumerate(args):
        if a in ("sglang.launch_server", "serve") or a.endswith("launch_server.py"):
            return args[i + 1:]
        if a.startswith("--"):
            return args[i:]
    return args


# ------------------------------------------------------------------ --like sources


def previous_from_unit(text: str, source: str) -> Previous:
    """A systemd unit file's ExecStart (continuation lines joined) and Environment= lines."""
    joined = re.sub(r"\\\n\s*", " ", text)
    exec_line = next((ln.split("=", 1)[1] for ln in joined.splitlines() if ln.strip().startswith("ExecStart=")), None)
    if exec_line is None:
        raise PlanError(f"{source}: no ExecStart= line: not a unit file gpuops can read")
    try:
        argv = shlex.split(exec_line.strip().lstrip("-@+!:"))
    except ValueError as exc:
        raise PlanError(f"{source}: ExecStart= cannot be parsed: {exc}") from None
    env: list[tuple[str, str]] = []
    for ln in joined.splitlines():
        ln = ln.strip()
        if ln.startswith("Environment="):
            for item in shlex.split(ln.split("=", 1)[1]):
                k, sep, v = item.partition("=")
                if sep:
                    env.append((k, v))
    argv = [a for a in argv if not re.fullmatch(r"[A-Za-z_][A-Za-z0-9_]*=.*", a)]  # `env X=1 python …`
    if argv and argv[0].endswith("/env"):
        argv = argv[1:]
    return Previous(source, tuple(argv), tuple(env))


def load_previous(ref: str) -> Previous:
    """A previous deployment from a plan JSON or a systemd unit file on this machine
    (a stored deployment name once the store exists). PlanError on anything else."""
    import json
    from pathlib import Path

    path = Path(ref)
    if not path.is_file():
        raise PlanError(f"--like {ref}: no such file (stored deployments come with `gpuops deploy`; "
                        "give a plan JSON or a systemd unit file)")
    try:
        text = path.read_text()
    except (OSError, UnicodeDecodeError) as exc:
        raise PlanError(f"--like {ref}: cannot read: {exc}") from None
    if text.lstrip().startswith("{"):
        try:
            return previous_from_plan_json(json.loads(text), str(path))
        except ValueError as exc:
            raise PlanError(f"--like {ref}: invalid JSON: {exc}") from None
    return previous_from_unit(text, str(path))


def previous_from_plan_json(data: dict, source: str) -> Previous:
    argv = data.get("argv")
    if not isinstance(argv, list) or not all(isinstance(a, str) for a in argv):
        raise PlanError(f"{source}: a plan JSON needs an \"argv\" list of strings")
    env = data.get("env") or {}
    if not isinstance(env, dict):
        raise PlanError(f"{source}: \"env\" must be an object")
    return Previous(source, tuple(argv), tuple((str(k), str(v)) for k, v in env.items()))
