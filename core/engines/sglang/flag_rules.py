"""SGLang's plan rules as data (``SGLang.plan_rules``): each flag of a plan comes from a rule (an
id, when it applies, what it adds, why: :class:`gpuops.core.planning.rules.Rule`). Rules are
version-aware: a flag is only emitted under the name the target SGLang version knows
(:mod:`gpuops.core.engines.sglang.versions`)."""

from __future__ import annotations

from ...domain import API_KEY_PLACEHOLDER, gpus, is_loopback
from ...planning.model_facts import ModelFacts, model_name
from ...planning.rules import Ctx, Rule
from . import parsers, recipes
from . import versions as sv
from .remote_code import remote_code

# With speculative decoding SGLang caps running requests at 48.
SPEC_MAX_RUNNING = 48
DEFAULT_MAX_RUNNING = 128
# The families whose cookbook command carries the FlashInfer all-reduce fusion (Qwen3.5's generator
# adds it to every non-FP4 config); the cookbook gives it for no other family gpuops plans.
ALLREDUCE_FUSION_FAMILIES = frozenset({"qwen3_5"})


# Which parsers a model family uses (SGLang's cookbook, sgl-cookbook; tests/data/recipes.json holds
# the commands each one is checked against); the rules keep only names the target version knows.
# The reasoning parser applies only to checkpoints that think (ModelFacts.thinking).
PARSERS: dict[str, tuple[str | None, str | None]] = {
    # family: (reasoning parser, tool-call parser)
    "qwen3_5": ("qwen3", "qwen3_coder"),
    "qwen3_next": ("qwen3", "qwen"),
    "qwen3_moe": ("qwen3", "qwen"),
    "qwen3": ("qwen3", "qwen"),
    "qwen3_coder": (None, "qwen3_coder"),
    "qwen2_5": (None, "qwen25"),
    "deepseek_v3": ("deepseek-v3", "deepseekv3"),
    "deepseek_v32": ("deepseek-v3", "deepseekv32"),
    "kimi_k2": ("kimi_k2", "kimi_k2"),
    "gpt_oss": ("gpt-oss", "gpt-oss"),
    "glm": ("glm45", "glm45"),
    "llama3": (None, "llama3"),
    "mixtral": (None, "mistral"),
}

THINKING_WHY = {
    "thinking": "always reasons before it answers",
    "hybrid": "is a hybrid thinker (thinking is switched per request with chat_template_kwargs)",
}


def _variant_parsers(facts: ModelFacts) -> tuple[str | None, str | None]:
    """A family's parsers, adjusted for the releases that differ (cookbook: DeepSeek-R1 reasons with
    deepseek-r1; V3.1 and V3.2-Exp call tools as deepseekv31; V3.2-Speciale calls none)."""
    reasoning, tool = PARSERS.get(facts.family, (None, None))
    name = model_name(facts.id)
    if facts.family == "deepseek_v3":
        if facts.thinking == "thinking":  # R1
            reasoning = "deepseek-r1"
        elif facts.thinking == "hybrid":  # V3.1, V3.1-Terminus
            tool = "deepseekv31"
    if facts.family == "deepseek_v32":
        if "speciale" in name.lower():
            tool = None
        elif "-exp" in name.lower():
            tool = "deepseekv31"
    return reasoning, tool


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
SPEC_FLAGS = recipes.SPEC_FLAGS  # (one list: the published commands are read with it too)
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


def parser_choice(facts: ModelFacts, version: str, which: int) -> parsers.Choice:
    """The reasoning (0) or tool-call (1) parser for `facts` on `version`: the one SGLang's recipe for the
    checkpoint names (where the version has it), else the family's; checked against the model's own
    chat template (see :mod:`.parsers`)."""
    kind = parsers.REASONING if which == 0 else parsers.TOOLS
    known = sv.reasoning_parsers(version) if which == 0 else sv.tool_call_parsers(version)
    published = recipes.parser_for(facts.id, "reasoning" if which == 0 else "tool_call")
    if published is not None and published[0] in known:  # SGLang's recipe names it (a thinker, then)
        return parsers.choose(kind, published[0], facts, version, label=f"SGLang's recipe ({published[1]})")
    if which == 0 and facts.thinking == "none":
        # a model that never thinks gets no reasoning parser (cookbook, model cards)
        return parsers.Choice(None, f"{served_name(facts)} does not think")
    family = _variant_parsers(facts)[which]
    if family is not None and family not in known:
        family = None
    return parsers.choose(kind, family, facts, version)


def _parser(ctx: Ctx, which: int) -> str | None:
    return parser_choice(ctx.facts, ctx.version, which).name


def _trust_reasons(ctx: Ctx) -> list[str]:
    """Why the server runs the checkpoint's own Python: what its config needs on this version, and the
    recipe that runs it so."""
    need = remote_code(ctx.facts, ctx.version)
    out = list(need.reasons) if need.needed else []
    source = recipes.trusts_remote_code(ctx.facts.id)
    if source is not None:
        out.append(f"SGLang's recipe runs it with --trust-remote-code ({source})")
    return out


def _spec_flags(ctx: Ctx) -> list[tuple[str, tuple[str, ...]]]:
    """The published command's speculative settings for these GPUs (its MTP layers as the draft), else
    the cookbook's usual NEXTN 3/1/4."""
    off = ctx.official
    if off is not None and off.speculative and off.value("--speculative-draft-model-path") is None:
        return [(f, v) for f, v in off.flags if f in SPEC_FLAGS and ctx.has(f)]
    return [("--speculative-algorithm", ("NEXTN",)), ("--speculative-num-steps", ("3",)),
            ("--speculative-eagle-topk", ("1",)), ("--speculative-num-draft-tokens", ("4",))]


def _spec_why(ctx: Ctx) -> str:
    settings = " ".join(f"{f.removeprefix('--speculative-')} {' '.join(v)}" for f, v in _spec_flags(ctx))
    off = ctx.official
    where = (f"as SGLang's published command for these GPUs has it ({off.source})"
             if off is not None and off.speculative and off.value("--speculative-draft-model-path") is None
             else "cookbook: 3 steps, top-k 1, 4 draft tokens")
    return (f"the checkpoint has {ctx.facts.mtp_layers} MTP layer(s): speculative decoding with them ({settings}; "
            f"{where}); --no-mtp drops it")


def _ep(ctx: Ctx) -> int | None:
    """The published command's expert-parallel size, where the plan runs its TP and the checkpoint's
    routed experts split evenly over it; None otherwise."""
    off, moe = ctx.official, ctx.facts.moe
    ep = off.expert_parallel if off is not None else None
    if ep is None or off.tp != ctx.tp or moe is None or not moe.num_experts or moe.num_experts % ep:
        return None
    return int(ep)


def _quant_flags(ctx: Ctx) -> list[tuple[str, tuple[str, ...]]]:
    q = ctx.facts.quant
    if q is None or not q.quantization:
        return []
    return [("--quantization", (q.quantization,))]


def _spec_on(ctx: Ctx) -> bool:
    on = ctx.facts.mtp_layers > 0 and bool(ctx.wishes.mtp) and ctx.has("--speculative-algorithm")
    ctx.spec = on
    return on


RULES: tuple[Rule, ...] = (
    Rule("model", lambda c: True,
         lambda c: [("--model-path", (c.model_path,)), ("--served-model-name", (c.wishes.served_name
                                                                               or served_name(c.facts),))],
         lambda c: f"serve {c.facts.id} from {c.model_path}; clients ask for it as "
                   f"{c.wishes.served_name or served_name(c.facts)!r}" + (" (as before)" if c.wishes.served_name else "")),
    Rule("trust-remote-code", lambda c: _trust_reasons(c) != [] and c.has("--trust-remote-code"),
         lambda c: [("--trust-remote-code", ())],
         lambda c: "; ".join(_trust_reasons(c)) + " (that Python runs on the host with the server's rights)"),
    Rule("tensor-parallel", lambda c: True,
         lambda c: [("--tp-size", (str(c.tp),))],
         lambda c: f"shard over {gpus(c.tp)} ({', '.join(map(str, c.gpu_ids))})",
         env=lambda c: {"CUDA_VISIBLE_DEVICES": ",".join(map(str, c.gpu_ids))}),
    Rule("expert-parallel", lambda c: _ep(c) is not None and c.has("--ep-size"),
         lambda c: [("--ep-size", (str(_ep(c)),))],
         lambda c: f"the experts spread over {gpus(_ep(c) or 1)} (expert parallelism), as SGLang's published command "
                   f"for these GPUs runs them ({c.official.source})"),
    Rule("bind", lambda c: True,
         lambda c: [("--host", (c.target.serve_host,)), ("--port", (str(c.wishes.port),))],
         lambda c: ("the host policy allows serving only on loopback" if is_loopback(c.target.serve_host)
                    else f"the host policy allows serving on {c.target.serve_host}")),
    Rule("api-key", lambda c: not is_loopback(c.target.serve_host),
         lambda c: [("--api-key", (API_KEY_PLACEHOLDER,))],
         lambda c: "serving beyond loopback needs a key: generated at deploy into the 0600 env file, never shown"),
    Rule("context-length", lambda c: bool(c.facts.context_length) and c.has("--context-length"),
         lambda c: [("--context-length", (str(c.facts.context_length),))],
         lambda c: f"the model's full context ({c.facts.context_length:,} tokens); long contexts keep thinking intact"),
    Rule("mem-fraction", lambda c: c.has("--mem-fraction-static"),
         lambda c: [("--mem-fraction-static", (f"{c.wishes.mem_fraction:g}",))],
         lambda c: f"weights + KV cache may use {c.wishes.mem_fraction:.0%} of each GPU; the rest is for "
                   "activations and CUDA graphs" + (f" (as SGLang's published command for these GPUs has it: "
                                                    f"{c.wishes.mem_fraction_from})" if c.wishes.mem_fraction_from
                                                    else "")),
    Rule("metrics", lambda c: c.has("--enable-metrics"),
         lambda c: [("--enable-metrics", ())],
         lambda c: "Prometheus /metrics for gpuops' live views and benchmarks"),
    Rule("reasoning-parser", lambda c: _parser(c, 0) is not None and c.has("--reasoning-parser"),
         lambda c: [("--reasoning-parser", (_parser(c, 0) or "",))],
         lambda c: f"{served_name(c.facts)} {THINKING_WHY.get(c.facts.thinking, 'thinks')}: "
                   f"split reasoning_content from content; {parser_choice(c.facts, c.version, 0).why}"),
    Rule("tool-call-parser", lambda c: _parser(c, 1) is not None and c.has("--tool-call-parser"),
         lambda c: [("--tool-call-parser", (_parser(c, 1) or "",))],
         lambda c: f"tool calls → OpenAI tool_calls; {parser_choice(c.facts, c.version, 1).why}"),
    Rule("quantization", lambda c: bool(_quant_flags(c)) and c.has("--quantization"),
         _quant_flags,
         lambda c: f"the checkpoint is {c.facts.quant.method if c.facts.quant else '?'}-quantized"),
    Rule("mtp", _spec_on, _spec_flags, _spec_why),
    Rule("mamba-extra-buffer", lambda c: c.spec and c.facts.hybrid is not None and _mamba_flag(c) is not None,
         lambda c: [(_mamba_flag(c) or "", ("extra_buffer",))]
         + ([("--page-size", ("64",))] if c.has("--page-size") else []),
         lambda c: f"hybrid linear attention + speculative decoding needs the extra_buffer mamba cache "
                   f"(named {_mamba_flag(c)} in {c.version}); page size 64 matches FLA's chunk size"
                   + ("; Spec V2 is off by default in this version: SGLANG_ENABLE_SPEC_V2=1"
                      if sv.spec_v2_default(c.version) is False else ""),
         env=lambda c: {"SGLANG_ENABLE_SPEC_V2": "1"} if sv.spec_v2_default(c.version) is False else {}),
    Rule("allreduce-fusion",
         lambda c: (c.facts.family in ALLREDUCE_FUSION_FAMILIES and c.tp > 1 and not _is_fp4(c.facts)
                    and _allreduce_fusion(c) is not None),
         lambda c: [_allreduce_fusion(c) or ("", ())],
         lambda c: "cookbook (Qwen3.5): fuse all-reduce with the norm for non-FP4 checkpoints at TP > 1"),
)


def served_name(facts: ModelFacts) -> str:
    """The model name clients use: the repo id, or a local folder's name."""
    return facts.id.rstrip("/").rsplit("/", 1)[-1] if facts.id.startswith("/") else facts.id


def _is_fp4(facts: ModelFacts) -> bool:
    return facts.quant is not None and facts.quant.method in ("nvfp4", "mxfp4")


# ------------------------------------------------------------------ --like (SGLang.like_*)

# other spellings SGLang takes for a flag -> the name a plan writes
ALIASES = {"--tensor-parallel-size": "--tp-size", "--tp": "--tp-size", "--model": "--model-path",
           "--speculative-algo": "--speculative-algorithm"}


def _quant_reason(name: str, values: tuple[str, ...], facts: ModelFacts) -> str | None:
    """Why a quantization flag of the previous deployment does not fit this checkpoint (None: it does)."""
    if name in FP4_ONLY_VALUES and (not values or values[0] in FP4_ONLY_VALUES[name]) and not _is_fp4(facts):
        return f"{name} {' '.join(values)} is for FP4 checkpoints; {facts.id} is {facts.quant.method if facts.quant else facts.dtype or 'unquantized'}"
    if name == "--fp4-gemm-backend" and not _is_fp4(facts):
        return f"--fp4-gemm-backend only matters for FP4 checkpoints; {facts.id} is not FP4"
    if name == "--quantization" and (facts.quant is None or facts.quant.quantization not in values):
        return f"{facts.id} carries no {' '.join(values)} quantization"
    return None


def like_drop_reason(name: str, values: tuple[str, ...], ctx: Ctx) -> str | None:
    """Why SGLang's knowledge drops a previous deployment's flag from this plan (None: it does not)."""
    facts = ctx.facts
    quant = _quant_reason(name, values, facts)
    if quant is not None:
        return quant
    if name == "--trust-remote-code" and not _trust_reasons(ctx):
        return f"SGLang {ctx.version} reads {facts.id} without the checkpoint's own Python"
    if name in SPEC_FLAGS and not ctx.spec:
        return "speculative decoding is off for this model (" + ("--no-mtp" if not ctx.wishes.mtp else "no MTP layers") + ")"
    if name in MAMBA_FLAGS and facts.hybrid is None:
        return f"{facts.id} has no linear-attention layers"
    if name not in ctx.flags and name in MAMBA_FLAGS:
        renamed = next((m for m in MAMBA_FLAGS if m != name and m in ctx.flags), None)
        if renamed:
            return f"renamed to {renamed} in SGLang {ctx.version}"
    return None


def like_env_reason(key: str, ctx: Ctx) -> str | None:
    """Why a previous deployment's SGLANG_ENABLE_SPEC_V2 no longer applies (None: it does, or `key`
    is another variable)."""
    if key != "SGLANG_ENABLE_SPEC_V2":
        return None
    return ("speculative decoding is off" if not ctx.spec
            else f"SGLang {ctx.version} has no such variable any more"
            if sv.spec_v2_default(ctx.version) is None else None)
