"""The fit: weights, state and KV cache per GPU at a TP, and whether that is worth starting."""

from __future__ import annotations

import math

from .. import engines
from ..domain import Fit, gpus
from .model_facts import ModelFacts

GIB = 1024**3
MIN_TOKENS = 4096  # a server that can't hold this many tokens is not worth starting


def kv_bytes_per_token_per_gpu(facts: ModelFacts, tp: int, spec: bool = False) -> int:
    """KV bytes one token costs on each GPU. MLA's latent is replicated on every TP rank;
    GQA heads are split, but never below one head per rank. With speculative decoding on the MTP
    layers, the draft keeps its own KV for every token of the pool, one full-attention layer's worth
    per MTP layer, out of the same budget (the first engine's 0.5.23 prices a pool token so; its
    0.5.10 took the draft's pool from its start-up reserve instead: counted here for every version,
    it errs on the side of fewer tokens)."""
    whole = facts.kv_bytes_per_token()
    attention_layers = facts.hybrid.full_attention_layers if facts.hybrid is not None else (facts.num_layers or 0)
    if spec and facts.mtp_layers > 0 and attention_layers > 0:
        whole += whole * facts.mtp_layers // attention_layers
    if facts.mla is not None:
        return whole
    kv_heads = facts.num_kv_heads or facts.num_attention_heads or 1
    per_rank_heads = max(1, math.ceil(kv_heads / tp))
    return math.ceil(whole * per_rank_heads / kv_heads)


def compute_fit(facts: ModelFacts, tp: int, gpu_memory: int, mem_fraction: float, spec: bool,
                gpu_count: int | None = None, engine: str = engines.DEFAULT) -> Fit:
    weights = math.ceil(facts.checkpoint_bytes / tp)
    running = engines.get(engine).max_running(spec)  # the requests whose state the server keeps
    state = 0
    if facts.hybrid is not None:
        # extra_buffer keeps a second state per request for speculative decoding
        state = math.ceil(facts.hybrid.state_bytes_per_request * running * (2 if spec else 1) / tp)
    budget = int(gpu_memory * mem_fraction) - weights - state
    per_token = max(1, kv_bytes_per_token_per_gpu(facts, tp, spec))
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
    fit = Fit(weights_per_gpu_bytes=weights, kv_cache_per_gpu_bytes=max(0, budget), max_total_tokens=tokens, fits=fits,
              gpu_memory_bytes=gpu_memory, mem_fraction_static=mem_fraction, state_cache_per_gpu_bytes=state,
              kv_bytes_per_token_per_gpu=per_token, verdict=verdict)
    if not fits and gpu_count:
        for bigger in tp_choices(facts, gpu_count, engine):
            if bigger > tp and compute_fit(facts, bigger, gpu_memory, mem_fraction, spec, engine=engine).fits:
                fit.smallest_tp = bigger
                fit.verdict += f"; the smallest TP that fits is {bigger}"
                break
        else:
            fit.verdict += f"; no TP up to {gpus(gpu_count)} fits"
    return fit


def tp_refusal(facts: ModelFacts, tp: int, engine: str = engines.DEFAULT) -> str | None:
    """Why `engine` cannot shard the model over `tp` GPUs (its layers' conditions), None when it can."""
    return engines.get(engine).tp_refusal(facts, tp)


def tp_choices(facts: ModelFacts, gpus: int, engine: str = engines.DEFAULT) -> list[int]:
    """The TP sizes up to `gpus` the engine can shard the model over (:func:`tp_refusal`)."""
    return [t for t in range(1, gpus + 1) if tp_refusal(facts, t, engine) is None]
