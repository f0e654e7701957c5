"""How SGLang shards a model over TP ranks: the sizes its layers refuse at start-up."""

from __future__ import annotations

from typing import Any


def tp_refusal(facts: Any, tp: int) -> str | None:
    """Why the engine cannot shard the model over `tp` GPUs, None when it can. What SGLang 0.5.23's
    layers require (read in its wheel, sglang/srt/…):
    - layers/linear.py:1139-1145 (QKVParallelLinear): the attention heads split evenly over the ranks;
      the KV heads too, or, where there are fewer KV heads than ranks, each copied to a whole number of
      ranks (TP a multiple of them). Not for MLA, whose latent every rank holds whole;
    - layers/moe/fused_moe_triton/layer.py:427 (no expert parallelism): each rank holds 1/TP of every
      expert's intermediate size, and for a block-quantized FP8 checkpoint that share is a whole number
      of its blocks (layers/quantization/fp8.py:1588-1600, block_n and block_k)."""
    heads = facts.num_attention_heads
    if heads and heads % tp:
        return f"TP {tp} does not divide the model's {heads} attention heads"
    kv = facts.num_kv_heads
    if facts.mla is None and kv and (kv % tp if tp < kv else tp % kv):
        return (f"TP {tp} neither divides the model's {kv} KV heads nor is a multiple of them (each rank holds "
                "a share of them, or one of them copied whole)")
    moe = facts.moe
    inter = moe.moe_intermediate_size if moe is not None else None
    if inter:
        if inter % tp:
            return f"TP {tp} does not divide the experts' intermediate size {inter}"
        block = facts.quant.block_size if facts.quant is not None else None
        if block and tp > 1 and any((inter // tp) % b for b in block):
            return (f"at TP {tp} each rank's share of the experts' intermediate size ({inter // tp}) is not a whole "
                    f"number of the checkpoint's {block[0]}x{block[1]} quantization blocks")
    return None
