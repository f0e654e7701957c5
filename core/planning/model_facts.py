"""Model facts: what a checkpoint is (architecture traits) and how big it is.

A model is named by a Hugging Face repo id (``owner/name``) or an absolute local folder that holds
``config.json``. :func:`load_model_facts` reads the config (and, when present, the
``model.safetensors.index.json`` and the ``*.safetensors`` sizes) and hands it to
:func:`facts_from_config`, which derives everything else from the config alone:

- traits: dense or MoE (experts, active, shared, dense layers), MLA ranks, hybrid linear attention
  (GDN layers, their per-request state), MTP layers, dtype, quantization, context length;
- size: checkpoint bytes from the index ``metadata.total_size`` ("index"), else the summed
  ``*.safetensors`` file sizes ("files"), else computed from the config ("computed"). The
  computation walks the tensors a checkpoint of that architecture stores: embeddings (tied or
  not), attention (GQA with biases, gated attention, MLA low-rank projections), Gated DeltaNet
  projections, dense MLPs, routers, routed and shared experts, norms, MTP layers, and the vision
  tower of multimodal checkpoints; each linear weight is priced at the checkpoint's storage
  format (bf16/fp16/fp32, fp8 with block scales, MXFP4/NVFP4 packing with their scales, int4 with
  group scales).

A config that lacks a field the computation needs never raises: the field is named in
``ModelFacts.missing`` and counted as zero, so the planner can warn. Errors that stop loading
(no such repo, gated, offline and not cached, no ``config.json``, invalid JSON) raise
:class:`ModelError` with a one-line message; the Hub token is never part of one.

huggingface_hub is imported inside the functions that use the Hub (its import costs ~0.2 s).
"""

from __future__ import annotations

import fnmatch
import json
import math
import os
import re
from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import Any

__all__ = [
    "HybridInfo",
    "MlaInfo",
    "ModelError",
    "ModelFacts",
    "MoeInfo",
    "QuantInfo",
    "facts_from_config",
    "load_model_facts",
    "model_name",
    "thinking_mode",
    "validate_model_ref",
]

CONFIG_FILE = "config.json"
INDEX_FILE = "model.safetensors.index.json"
TOKENIZER_CONFIG_FILE = "tokenizer_config.json"
CHAT_TEMPLATE_FILE = "chat_template.jinja"  # where newer checkpoints keep the template (transformers 4.43+)

_REPO_PART = re.compile(r"[A-Za-z0-9](?:[A-Za-z0-9._-]*[A-Za-z0-9_])?")
_LOCAL_PATH = re.compile(r"/[A-Za-z0-9._/+@=,-]*")
_DTYPE_BYTES = {"bfloat16": 2, "float16": 2, "half": 2, "float32": 4, "float": 4, "float8_e4m3fn": 1}
# Architectures whose tensor layout the size computation models exactly.
_KNOWN_ARCHITECTURES = frozenset({
    "LlamaForCausalLM", "MistralForCausalLM", "MixtralForCausalLM",
    "Qwen2ForCausalLM", "Qwen2MoeForCausalLM", "Qwen3ForCausalLM", "Qwen3MoeForCausalLM",
    "Qwen3NextForCausalLM", "Qwen3_5ForConditionalGeneration", "Qwen3_5MoeForConditionalGeneration",
    "Qwen3_5ForCausalLM", "Qwen3_5MoeForCausalLM",
    "DeepseekV2ForCausalLM", "DeepseekV3ForCausalLM", "GptOssForCausalLM",
    "NemotronHForCausalLM",
})


class ModelError(Exception):
    """A model could not be read; ``str()`` is one line that says why."""


def validate_model_ref(s: str) -> str:
    """An HF repo id ``owner/name`` or an absolute local folder path (``//``, ``/./`` and a trailing
    ``/`` collapsed; a canonical one is returned unchanged).

    Raises ValueError (one line, the reference shown escaped) for anything else: spaces, shell
    metacharacters, control characters, relative paths, ``~``, a ``..`` segment in a folder path
    (give the canonical path), a path over PATH_MAX or a component over NAME_MAX, ``..`` or ``--``
    in a repo id, parts longer than 96 characters.
    """
    from ..paths import check_path, show_path

    if not isinstance(s, str):
        raise ValueError(f"invalid model reference: expected a string, got {type(s).__name__}")
    if s.startswith("/"):
        check_path(s, "model folder", dotdot=False)
        if not _LOCAL_PATH.fullmatch(s):
            raise ValueError(
                f"invalid model folder {show_path(s)}: only letters, digits and . _ / + @ = , - are allowed"
            )
        return "/" + "/".join(p for p in s.split("/") if p not in ("", "."))
    parts = s.split("/")
    if (
        len(parts) == 2
        and all(_REPO_PART.fullmatch(p) and len(p) <= 96 for p in parts)
        and ".." not in s
        and "--" not in s
    ):
        return s
    raise ValueError(
        f"invalid model reference {show_path(s)}: expected a Hugging Face repo id (owner/name) "
        "or an absolute folder path"
    )


@dataclass(frozen=True)
class MoeInfo:
    num_experts: int
    active_experts: int
    shared_experts: int
    moe_intermediate_size: int | None
    dense_layers: int  # layers with a dense MLP instead of experts (first_k_dense_replace, ...)


@dataclass(frozen=True)
class MlaInfo:
    kv_lora_rank: int
    qk_rope_head_dim: int
    qk_nope_head_dim: int | None
    v_head_dim: int | None
    q_lora_rank: int | None


@dataclass(frozen=True)
class HybridInfo:
    full_attention_layers: int
    linear_attention_layers: int
    # conv + ssm state of ONE request across all linear-attention layers, at the state dtypes
    state_bytes_per_request: int


@dataclass(frozen=True)
class QuantInfo:
    method: str  # "fp8" | "mxfp4" | "nvfp4" | "awq" | "gptq" | "compressed-tensors" | raw name
    block_size: tuple[int, int] | None
    raw: dict[str, Any]
    # the checkpoint's quantization as servers' --quantization names it (modelopt_fp4, modelopt_fp8), when
    # its config does not say it plainly (None: the server reads it from the config)
    quantization: str | None


@dataclass(frozen=True)
class ModelFacts:
    id: str
    source: str  # "hub" | "local"
    local_path: str | None
    architecture: str | None
    model_type: str | None
    family: str
    known_architecture: bool
    hidden_size: int | None
    num_layers: int | None
    vocab_size: int | None
    num_attention_heads: int | None
    num_kv_heads: int | None
    head_dim: int | None
    mla: MlaInfo | None
    moe: MoeInfo | None
    hybrid: HybridInfo | None
    mtp_layers: int
    dtype: str | None
    quant: QuantInfo | None
    context_length: int | None
    params: int
    active_params: int | None
    checkpoint_bytes: int
    checkpoint_bytes_source: str  # "index" | "files" | "computed"
    mtp_bytes: int
    missing: tuple[str, ...]
    thinking: str = "none"  # "thinking" | "hybrid" | "none": see thinking_mode()
    weights_present_bytes: int | None = None  # the *.safetensors bytes in the folder; None: not looked
    # the checkpoint's own code, as its config.json's and tokenizer_config.json's ``auto_map`` name it:
    # (what it is for, e.g. "AutoConfig", and the reference, e.g. "configuration_deepseek.DeepseekV3Config")
    auto_map: tuple[tuple[str, str], ...] = ()
    tokenizer_class: str | None = None  # tokenizer_config.json's; None: not known or no such file
    tokenizer_auto_map: tuple[tuple[str, str], ...] = ()
    # the special-token-like pieces (<|im_start|>, <think>, [TOOL_CALLS], <｜tool▁calls▁begin｜>…) its
    # chat template writes and its tokenizer declares: what an engine's output parsers can be checked
    # against (chat_atoms()); None: no chat template was read
    chat_atoms: tuple[str, ...] | None = None
    # a multimodal checkpoint's vision tower as engines size its working memory: (num_hidden_layers,
    # hidden_size) of its vision_config, None where the config leaves one out; None: no vision tower
    vision_tower: tuple[int | None, int | None] | None = None

    def kv_bytes_per_token(self, dtype_bytes: int = 2) -> int:
        """KV cache bytes one token needs in the whole model (all ranks together).

        Hybrid models count only their full-attention layers; MLA stores the compressed latent
        (kv_lora_rank + qk_rope_head_dim per layer); GQA stores K and V per KV head.
        """
        if self.mla is not None:
            per_layer = self.mla.kv_lora_rank + self.mla.qk_rope_head_dim
        else:
            per_layer = 2 * (self.num_kv_heads or 0) * (self.head_dim or 0)
        layers = self.hybrid.full_attention_layers if self.hybrid is not None else (self.num_layers or 0)
        return layers * per_layer * dtype_bytes

    def to_json(self) -> dict[str, Any]:
        return {
            "id": self.id,
            "architecture": self.architecture,
            "params": self.params,
            "active_params": self.active_params,
            "checkpoint_bytes": self.checkpoint_bytes,
            "dtype": self.dtype,
            "quant": self.quant.method if self.quant is not None else None,
            "moe": (
                {
                    "num_experts": self.moe.num_experts,
                    "active_experts": self.moe.active_experts,
                    "shared_experts": self.moe.shared_experts,
                }
                if self.moe is not None
                else None
            ),
            "hybrid_linear_attention": self.hybrid is not None,
            "mtp_layers": self.mtp_layers,
            "context_length": self.context_length,
        }


# --------------------------------------------------------------------------- config reading


class _Config:
    """Field lookup over a (possibly nested) HF config that remembers what was missing.

    Text fields are looked up in ``text_config`` first (Qwen3.5 and other multimodal wrappers),
    then at the top level.
    """

    def __init__(self, config: dict[str, Any]) -> None:
        text = config.get("text_config")
        self.text: dict[str, Any] = text if isinstance(text, dict) else {}
        self.top = config
        self.missing: list[str] = []

    def get(self, name: str) -> Any:
        if name in self.text:
            return self.text[name]
        return self.top.get(name)

    def number(self, *names: str) -> int | None:
        """The first of ``names`` that holds an integer (bools excluded), else None."""
        for name in names:
            value = self.get(name)
            if isinstance(value, int) and not isinstance(value, bool):
                return value
        return None

    def need(self, *names: str) -> int:
        """Like :meth:`number`, but a field the computation cannot do without: 0 and noted."""
        value = self.number(*names)
        if value is None:
            if names[0] not in self.missing:
                self.missing.append(names[0])
            return 0
        return value


def _architecture(config: dict[str, Any]) -> str | None:
    archs = config.get("architectures")
    if isinstance(archs, list) and archs and isinstance(archs[0], str):
        return archs[0]
    return None


def _family(model_type: str | None, architecture: str | None, vocab: int | None, name: str) -> str:
    mt = (model_type or "").lower()
    arch = architecture or ""
    if mt.startswith("qwen3_5") or arch.startswith("Qwen3_5"):
        return "qwen3_5"
    if mt.startswith("qwen3") and "coder" in name.lower():
        return "qwen3_coder"
    if mt in ("qwen3_next", "qwen3_moe", "qwen3"):
        return mt
    if mt in ("qwen2", "qwen2_moe"):
        return "qwen2_5"
    if mt == "llama" and (vocab or 0) >= 128000:
        return "llama3"
    if mt == "mixtral":
        return "mixtral"
    if mt == "kimi_k2":
        return "kimi_k2"
    if mt == "deepseek_v32":
        return "deepseek_v32"
    if mt == "deepseek_v3":
        return "deepseek_v3"
    if mt == "gpt_oss":
        return "gpt_oss"
    if mt.startswith(("glm", "chatglm")):
        return "glm"
    return "unknown"


def model_name(ref: str) -> str:
    """The checkpoint's name: the repo part of ``owner/name``, or a local folder's last component."""
    return ref.rstrip("/").rsplit("/", 1)[-1]


_WORD = r"(?:^|(?<=[-_.]))"  # a name part starts at the beginning or after - _ .
_R1 = re.compile(_WORD + r"R1(?=$|[-_.])", re.IGNORECASE)
_DEEPSEEK_HYBRID = re.compile(r"V3\.[1-9]", re.IGNORECASE)  # V3.1, V3.1-Terminus, V3.2, V3.2-Exp


def thinking_mode(family: str, name: str) -> str:
    """Whether a checkpoint thinks, from what it is (its family and the name it was released under;
    the configs of a release's Instruct and Thinking checkpoints are the same):

    - ``"thinking"``: always reasons first (Qwen3 ``-Thinking-2507``, Qwen3-Next ``-Thinking``,
      DeepSeek-R1, Kimi-K2-Thinking, DeepSeek-V3.2-Speciale, gpt-oss);
    - ``"hybrid"``: thinks by default or on request and can be switched off per request (the first
      Qwen3 releases such as Qwen3-8B or Qwen3-30B-A3B, Qwen3.5, DeepSeek-V3.1 and V3.2, GLM-4.5/4.6);
    - ``"none"``: never thinks (Qwen3 ``-Instruct-2507`` and Qwen3-Next ``-Instruct``, Kimi-K2-Instruct,
      DeepSeek-V3 and V3-0324, pretrained ``-Base`` checkpoints, Qwen2.5, Llama, Mixtral, Qwen3-Coder).
    """
    n = name.lower()
    base = bool(re.search(r"(?:^|[-_.])base(?=$|[-_.])", n))
    if family in ("qwen3", "qwen3_moe", "qwen3_next"):
        if "thinking" in n:
            return "thinking"
        if "instruct" in n or base:
            return "none"
        # Qwen3-Next was released only as -Instruct and -Thinking: no hybrid checkpoint
        return "none" if family == "qwen3_next" else "hybrid"
    if family == "qwen3_5":
        return "none" if base else "hybrid"
    if family == "deepseek_v3":
        if _R1.search(name):
            return "thinking"
        return "hybrid" if _DEEPSEEK_HYBRID.search(name) and not base else "none"
    if family == "deepseek_v32":
        return "thinking" if "speciale" in n else ("none" if base else "hybrid")
    if family == "kimi_k2":
        return "thinking" if "thinking" in n else "none"
    if family == "gpt_oss":
        return "thinking"
    if family == "glm":
        return "none" if base else "hybrid"
    return "none"


def _quant_info(cfg: _Config) -> QuantInfo | None:
    raw = cfg.get("quantization_config")
    if not isinstance(raw, dict):
        return None
    quant_method = str(raw.get("quant_method") or "").lower()
    algo = str(raw.get("quant_algo") or "").upper()
    block = raw.get("weight_block_size")
    block_size = (
        (int(block[0]), int(block[1]))
        if isinstance(block, list) and len(block) == 2 and all(isinstance(b, int) for b in block)
        else None
    )
    # ModelOpt names its algorithm per checkpoint, or per layer for MIXED_PRECISION ones.
    layers = raw.get("quantized_layers")
    algos = {algo} | {
        str(v.get("quant_algo") or "").upper()
        for v in (layers.values() if isinstance(layers, dict) else [])
        if isinstance(v, dict)
    }
    named: str | None = None
    if any("FP4" in a for a in algos) and quant_method != "mxfp4":
        method = "nvfp4"
        named = "modelopt_fp4"
    elif quant_method == "modelopt":
        method = "fp8"
        named = "modelopt_fp8"
    else:
        method = quant_method or "unknown"
    return QuantInfo(method=method, block_size=block_size, raw=raw, quantization=named)


def _context_length(cfg: _Config) -> int | None:
    """The context a server uses by default: max_position_embeddings, times the rope scaling
    factor only when the scaling does not already state an original length (the engines' rule)."""
    base = cfg.number("max_position_embeddings", "max_sequence_length", "seq_length", "n_positions")
    if base is None:
        return None
    scaling = cfg.get("rope_scaling")
    if not isinstance(scaling, dict):
        return base
    factor = scaling.get("factor")
    kind = scaling.get("rope_type") or scaling.get("type")
    if (
        not isinstance(factor, (int, float))
        or "original_max_position_embeddings" in scaling
        or kind == "llama3"
    ):
        return base
    return int(base * factor)


# --------------------------------------------------------------------------- size accounting

# Parts a quantization may apply to, with a module name of that part to match exclusion patterns
# (modules_to_not_convert / ignore / exclude_modules) against.
_PART_MODULES = {
    "attn": "model.layers.0.self_attn.o_proj",
    "linear_attn": "model.layers.0.linear_attn.out_proj",
    "mlp": "model.layers.0.mlp.down_proj",
    "experts": "model.layers.0.mlp.experts.0.down_proj",
    "shared": "model.layers.0.mlp.shared_experts.down_proj",
}


@dataclass
class _Tally:
    """Bytes and parameter counts of a checkpoint, by section (main, mtp, vision)."""

    dtype_bytes: int
    quant: QuantInfo | None
    params: dict[str, int] = field(default_factory=lambda: {"main": 0, "mtp": 0, "vision": 0})
    nbytes: dict[str, float] = field(default_factory=lambda: {"main": 0.0, "mtp": 0.0, "vision": 0.0})

    def plain(self, section: str, n: int, element_bytes: float | None = None) -> None:
        """Tensors stored unquantized (embeddings, norms, biases, routers, ...)."""
        self.params[section] += n
        self.nbytes[section] += n * (self.dtype_bytes if element_bytes is None else element_bytes)

    def linear(self, section: str, part: str, out: int, inp: int, count: int = 1) -> None:
        """``count`` weight matrices of shape [out, inp] belonging to ``part``."""
        self.params[section] += count * out * inp
        self.nbytes[section] += count * self._linear_bytes(section, part, out, inp)

    def _linear_bytes(self, section: str, part: str, out: int, inp: int) -> float:
        q = self.quant
        if q is None or not _quantized(q, section, part):
            return out * inp * self.dtype_bytes
        n = out * inp
        if "fp8" in q.method:
            if q.block_size is None:
                return n + 4  # one fp32 scale per tensor
            b0, b1 = q.block_size
            return n + math.ceil(out / b0) * math.ceil(inp / b1) * 4
        if q.method == "mxfp4":
            return n / 2 + out * math.ceil(inp / 32)  # e2m1 pairs + one e8m0 scale per 32
        if q.method == "nvfp4":
            return n / 2 + out * math.ceil(inp / 16) + 8  # + fp8 scale per 16, two fp32 scalars
        bits, group = _int_bits_group(q.raw)
        if group <= 0:
            return n * bits / 8 + out * 2  # per-channel 16-bit scales
        groups = out * math.ceil(inp / group)
        return n * bits / 8 + groups * (2 + bits / 8)  # 16-bit scale and packed zero per group


def _int_bits_group(raw: dict[str, Any]) -> tuple[int, int]:
    """Weight bits and group size of an AWQ/GPTQ/compressed-tensors/other integer scheme."""
    groups = raw.get("config_groups")
    if isinstance(groups, dict):
        for group in groups.values():
            weights = group.get("weights") if isinstance(group, dict) else None
            if isinstance(weights, dict):
                bits = weights.get("num_bits")
                size = weights.get("group_size")
                return (
                    bits if isinstance(bits, int) else 8,
                    size if isinstance(size, int) else 0,
                )
    if raw.get("load_in_4bit"):
        return 4, 64
    if raw.get("load_in_8bit"):
        return 8, 0
    bits = raw.get("bits", raw.get("w_bit"))
    size = raw.get("group_size", raw.get("q_group_size"))
    return (bits if isinstance(bits, int) else 4, size if isinstance(size, int) else 128)


def _excluded(patterns: list[str], module: str) -> bool:
    for pattern in patterns:
        if pattern.startswith("re:"):
            if re.match(pattern[3:], module):
                return True
        elif any(c in pattern for c in "*?["):
            if fnmatch.fnmatch(module, pattern) or fnmatch.fnmatch(module, pattern + ".*"):
                return True
        elif pattern in module:
            return True
    return False


def _quantized(q: QuantInfo, section: str, part: str) -> bool:
    """Whether linear weights of ``part`` are stored quantized (embeddings, the LM head,
    routers and vision towers never are)."""
    module = _PART_MODULES.get(part)
    if module is None or section == "vision":
        return False
    if section == "mtp":
        module = module.replace("model.layers.0", "mtp.layers.0")
    patterns: list[str] = []
    for key in ("modules_to_not_convert", "ignore", "exclude_modules", "ignored_layers"):
        value = q.raw.get(key)
        if isinstance(value, list):
            patterns.extend(p for p in value if isinstance(p, str))
    return not _excluded(patterns, module)


@dataclass(frozen=True)
class _Shape:
    hidden: int
    heads: int
    kv_heads: int
    head_dim: int


def _attention(t: _Tally, cfg: _Config, s: _Shape, section: str, mla: MlaInfo | None,
               model_type: str) -> None:
    """One attention block: projections, their biases, q/k norms, sinks."""
    h = s.hidden
    if mla is not None:
        nope = mla.qk_nope_head_dim or 0
        v_dim = mla.v_head_dim or 0
        q_dim = s.heads * (nope + mla.qk_rope_head_dim)
        if mla.q_lora_rank:
            t.linear(section, "attn", mla.q_lora_rank, h)
            t.plain(section, mla.q_lora_rank)  # q_a_layernorm
            t.linear(section, "attn", q_dim, mla.q_lora_rank)
        else:
            t.linear(section, "attn", q_dim, h)
        t.linear(section, "attn", mla.kv_lora_rank + mla.qk_rope_head_dim, h)
        t.plain(section, mla.kv_lora_rank)  # kv_a_layernorm
        t.linear(section, "attn", s.heads * (nope + v_dim), mla.kv_lora_rank)
        t.linear(section, "attn", h, s.heads * v_dim)
        return
    q_out = s.heads * s.head_dim
    kv_out = s.kv_heads * s.head_dim
    gated = bool(cfg.get("attn_output_gate")) or model_type == "qwen3_next"
    t.linear(section, "attn", 2 * q_out if gated else q_out, h)
    t.linear(section, "attn", kv_out, h, count=2)
    t.linear(section, "attn", h, q_out)
    qkv_bias = bool(cfg.get("attention_bias")) or model_type in ("qwen2", "qwen2_moe")
    if qkv_bias:
        t.plain(section, q_out + 2 * kv_out)
    if cfg.get("attention_bias"):
        t.plain(section, h)  # o_proj bias
    if model_type.startswith("qwen3") or cfg.get("use_qk_norm"):
        t.plain(section, 2 * s.head_dim)  # q_norm, k_norm
    if model_type == "gpt_oss":
        t.plain(section, s.heads)  # attention sinks


@dataclass(frozen=True)
class _Gdn:
    key_dim: int
    value_dim: int
    v_heads: int
    conv_dim: int
    kernel: int
    k_head_dim: int
    v_head_dim: int


def _gdn_dims(cfg: _Config) -> _Gdn:
    k_heads = cfg.need("linear_num_key_heads")
    v_heads = cfg.need("linear_num_value_heads")
    k_dim = cfg.need("linear_key_head_dim")
    v_dim = cfg.need("linear_value_head_dim")
    kernel = cfg.need("linear_conv_kernel_dim")
    key_dim, value_dim = k_heads * k_dim, v_heads * v_dim
    return _Gdn(key_dim, value_dim, v_heads, 2 * key_dim + value_dim, kernel, k_dim, v_dim)


def _linear_attention(t: _Tally, g: _Gdn, hidden: int, section: str) -> None:
    """One Gated DeltaNet block (Qwen3-Next / Qwen3.5)."""
    t.linear(section, "linear_attn", 2 * g.key_dim + 2 * g.value_dim, hidden)  # q, k, v, z
    t.linear(section, "linear_attn", 2 * g.v_heads, hidden)  # b, a
    t.plain(section, g.conv_dim * g.kernel)  # depthwise conv1d
    t.plain(section, 2 * g.v_heads + g.v_head_dim)  # A_log, dt_bias, gated norm
    t.linear(section, "linear_attn", hidden, g.value_dim)


@dataclass(frozen=True)
class _Moe:
    experts: int
    active: int
    expert_inter: int
    shared_inter: int  # 0 without shared experts
    shared_gate: bool  # Qwen-style scalar gate on the shared expert
    router_bias: int  # router/e_score_correction bias elements
    router_bias_bytes: float | None
    fused_bias: bool  # gpt-oss experts carry biases
    gated: bool = True  # up and gate projections (SwiGLU); False: up only (relu2, Nemotron-H)
    # LatentMoE (Nemotron 3 Super and Ultra, ``moe_latent_size``): the routed experts work in a narrower
    # space, entered and left through one projection pair a layer (the serving engines' NemotronH
    # fc1_latent_proj/fc2_latent_proj); 0: the experts work at the hidden size
    latent: int = 0


def _mlp(t: _Tally, hidden: int, inter: int, section: str, gated: bool = True) -> None:
    t.linear(section, "mlp", inter, hidden, count=2 if gated else 1)
    t.linear(section, "mlp", hidden, inter)


def _moe_block(t: _Tally, m: _Moe, hidden: int, section: str) -> None:
    t.plain(section, m.experts * hidden)  # router (it reads the hidden state, latent or not)
    if m.router_bias:
        t.plain(section, m.router_bias, m.router_bias_bytes)
    width = m.latent or hidden
    if m.latent:
        t.linear(section, "mlp", m.latent, hidden)  # into the latent space
        t.linear(section, "mlp", hidden, m.latent)  # and back
    t.linear(section, "experts", m.expert_inter, width, count=(2 if m.gated else 1) * m.experts)
    t.linear(section, "experts", width, m.expert_inter, count=m.experts)
    if m.fused_bias:
        t.plain(section, m.experts * (2 * m.expert_inter + hidden))
    if m.shared_inter:
        t.linear(section, "shared", m.shared_inter, hidden, count=2 if m.gated else 1)
        t.linear(section, "shared", hidden, m.shared_inter)
        if m.shared_gate:
            t.plain(section, hidden)


def _positive(value: Any) -> int | None:
    """A config's count (a positive int, not a bool), else None."""
    return value if isinstance(value, int) and not isinstance(value, bool) and value > 0 else None


def _vision_tower(t: _Tally, vision: dict[str, Any], missing: list[str]) -> None:
    """A Qwen-VL style ViT (patch embedding, position table, blocks, patch merger and any
    deepstack mergers), stored unquantized."""

    def number(name: str, default: int | None = None) -> int:
        value = vision.get(name, default)
        if isinstance(value, int) and not isinstance(value, bool):
            return value
        missing.append(f"vision_config.{name}")
        return 0

    h, depth, inter = number("hidden_size"), number("depth"), number("intermediate_size")
    patch, temporal = number("patch_size"), number("temporal_patch_size", 1)
    channels, merge = number("in_channels", 3), number("spatial_merge_size", 2)
    out, positions = number("out_hidden_size", h), number("num_position_embeddings", 0)
    deepstack = vision.get("deepstack_visual_indexes")
    t.plain("vision", channels * temporal * patch * patch * h + h + positions * h)
    per_block = 4 * h + (3 * h * h + 3 * h) + (h * h + h) + (h * inter + inter) + (inter * h + h)
    t.plain("vision", depth * per_block)
    wide = h * merge * merge
    merger = (wide * wide + wide) + (wide * out + out)
    t.plain("vision", merger + 2 * h)  # the main merger normalizes before the 2x2 shuffle
    if isinstance(deepstack, list):
        t.plain("vision", len(deepstack) * (merger + 2 * wide))  # deepstack ones after it


# --------------------------------------------------------------------------- facts


@dataclass(frozen=True)
class _Layout:
    """What each decoder layer is: full or linear (Gated DeltaNet) attention, a dense MLP or experts;
    and the multi-token-prediction layers after them."""

    count: int
    linear: list[bool]  # Gated DeltaNet layers
    gdn: _Gdn | None
    moe: _Moe | None
    sparse: list[bool]  # MoE layers
    dense_inter: int  # the dense MLP's width (0 when every layer has experts)
    mtp: int
    deepseek_mtp: bool  # DeepSeek-style MTP: stores its own copies of the embedding and the head
    # one mixer a layer (Nemotron-H): "mamba", "attention", "moe" or "mlp" for each; None: every layer
    # is attention (full or linear) followed by an MLP or experts
    mixers: list[str] | None = None
    mamba: _Mamba2 | None = None
    mlp_gated: bool = True  # the MLPs' and experts' up and gate projections (False: relu2, up only)


def _model_types(config: dict[str, Any], cfg: _Config) -> tuple[str | None, str]:
    """The config's own model_type, and the text model's (a multimodal wrapper's text_config first)."""
    model_type_top = config.get("model_type") if isinstance(config.get("model_type"), str) else None
    text_type = cfg.text.get("model_type")
    return model_type_top, (text_type if isinstance(text_type, str) else model_type_top) or ""


def _dtype(cfg: _Config) -> tuple[str | None, QuantInfo | None, int]:
    """The weights' dtype, their quantization, and the bytes of an unquantized element."""
    dtype_name = cfg.get("dtype") or cfg.get("torch_dtype")
    dtype = dtype_name if isinstance(dtype_name, str) else None
    quant = _quant_info(cfg)
    if dtype is None and quant is None:
        cfg.missing.append("torch_dtype")
    return dtype, quant, _DTYPE_BYTES.get(dtype or "bfloat16", 2)


def _mla(cfg: _Config) -> MlaInfo | None:
    """Multi-head latent attention (DeepSeek), when the config has a KV LoRA rank."""
    kv_lora = cfg.number("kv_lora_rank")
    if not kv_lora:
        return None
    return MlaInfo(
        kv_lora_rank=kv_lora,
        qk_rope_head_dim=cfg.need("qk_rope_head_dim"),
        qk_nope_head_dim=cfg.number("qk_nope_head_dim"),
        v_head_dim=cfg.number("v_head_dim"),
        q_lora_rank=cfg.number("q_lora_rank"),
    )


def _linear_layers(cfg: _Config, layers: int) -> list[bool]:
    """Which layers are Gated DeltaNet (linear attention), which full attention."""
    layer_types = cfg.get("layer_types")
    interval = cfg.number("full_attention_interval")
    if isinstance(layer_types, list) and "linear_attention" in layer_types:
        return [i < len(layer_types) and layer_types[i] == "linear_attention" for i in range(layers)]
    if interval:
        return [(i + 1) % interval != 0 for i in range(layers)]
    return [False] * layers


def _experts(cfg: _Config, layers: int, model_type: str) -> tuple[_Moe | None, list[bool]]:
    """The experts (None for a dense model), and which layers have them."""
    num_experts = cfg.number("num_experts", "n_routed_experts", "num_local_experts") or 0
    if not num_experts:
        return None, [False] * layers
    active = cfg.need("num_experts_per_tok", "experts_per_token", "num_experts_per_token", "top_k_experts")
    expert_inter = cfg.number("moe_intermediate_size") or cfg.need("intermediate_size")
    n_shared = cfg.number("n_shared_experts") or 0
    shared_inter = cfg.number("shared_expert_intermediate_size") or 0
    if n_shared:
        shared_inter = n_shared * expert_inter
    topk_method = cfg.get("topk_method")
    moe = _Moe(
        experts=num_experts,
        active=active,
        expert_inter=expert_inter,
        shared_inter=shared_inter,
        shared_gate=bool(cfg.number("shared_expert_intermediate_size")),
        router_bias=num_experts if (topk_method == "noaux_tc" or model_type == "gpt_oss") else 0,
        router_bias_bytes=4 if topk_method == "noaux_tc" else None,
        fused_bias=model_type == "gpt_oss",
    )
    first_dense = cfg.number("first_k_dense_replace") or 0
    freq = cfg.number("moe_layer_freq") or 1
    step = cfg.number("decoder_sparse_step") or 1
    mlp_only = cfg.get("mlp_only_layers")
    dense_only = {i for i in mlp_only if isinstance(i, int)} if isinstance(mlp_only, list) else set()
    sparse = [
        i >= first_dense and i % freq == 0 and (i + 1) % step == 0 and i not in dense_only
        for i in range(layers)
    ]
    return moe, sparse


def _mtp_layers(cfg: _Config, model_type: str) -> tuple[int, bool]:
    """The multi-token-prediction layers, and whether they are DeepSeek's (NextN)."""
    nextn = cfg.number("num_nextn_predict_layers")
    mtp_layers = cfg.number("mtp_num_hidden_layers")
    if mtp_layers is None:
        mtp_layers = nextn if nextn is not None else (1 if model_type == "qwen3_next" else 0)
    return mtp_layers, nextn is not None and mtp_layers > 0


_MIXER_SYMBOLS = {"M": "mamba", "*": "attention", "E": "moe", "-": "mlp"}


def _mixers(cfg: _Config, layers: int) -> list[str] | None:
    """A model whose layers each hold one mixer (Nemotron-H: `hybrid_override_pattern`, one symbol a
    layer, M Mamba-2, * attention, E experts, - MLP; or `layers_block_type`, their names in a list),
    None for the usual attention-then-MLP layers. A pattern that does not name every layer is noted
    as missing (and the layers are counted the usual way)."""
    pattern = cfg.get("hybrid_override_pattern")
    blocks = cfg.get("layers_block_type")
    if isinstance(pattern, str) and pattern:
        mixers = [_MIXER_SYMBOLS.get(c, "") for c in pattern]
    elif isinstance(blocks, list) and blocks:
        mixers = [b if isinstance(b, str) else "" for b in blocks]
    else:
        return None
    if len(mixers) != layers or not all(m in _MIXER_SYMBOLS.values() for m in mixers):
        cfg.missing.append("hybrid_override_pattern")
        return None
    return mixers


@dataclass(frozen=True)
class _Mamba2:
    heads: int
    head_dim: int
    groups: int
    state: int
    kernel: int
    conv_bias: bool
    proj_bias: bool

    @property
    def inner(self) -> int:  # the heads' width (Nemotron-H's is not expand x hidden)
        return self.heads * self.head_dim

    @property
    def conv_dim(self) -> int:  # x, B and C go through the convolution
        return self.inner + 2 * self.groups * self.state


def _mamba2_dims(cfg: _Config) -> _Mamba2:
    return _Mamba2(heads=cfg.need("mamba_num_heads"), head_dim=cfg.need("mamba_head_dim"),
                   groups=cfg.number("n_groups") or 1, state=cfg.need("ssm_state_size"),
                   kernel=cfg.number("conv_kernel") or 4, conv_bias=cfg.get("use_conv_bias") is not False,
                   proj_bias=bool(cfg.get("mamba_proj_bias")))


def _mamba2(t: _Tally, m: _Mamba2, hidden: int, section: str) -> None:
    """One Mamba-2 mixer: in_proj (z, x, B, C and dt), the depthwise convolution, dt bias, A and D per
    head, the gated norm, out_proj."""
    in_out = 2 * m.inner + 2 * m.groups * m.state + m.heads
    t.linear(section, "mamba", in_out, hidden)
    t.plain(section, m.conv_dim * m.kernel + (m.conv_dim if m.conv_bias else 0))
    t.plain(section, 3 * m.heads + m.inner)
    t.linear(section, "mamba", hidden, m.inner)
    if m.proj_bias:
        t.plain(section, in_out + hidden)


def _layout(cfg: _Config, layers: int, model_type: str) -> _Layout:
    mixers = _mixers(cfg, layers)
    if mixers is not None:
        return _mixer_layout(cfg, layers, model_type, mixers)
    linear = _linear_layers(cfg, layers)
    gdn = _gdn_dims(cfg) if any(linear) else None
    moe, sparse = _experts(cfg, layers, model_type)
    dense_inter = cfg.need("intermediate_size") if moe is None or not all(sparse) else 0
    mtp, deepseek_mtp = _mtp_layers(cfg, model_type)
    return _Layout(layers, linear, gdn, moe, sparse, dense_inter, mtp, deepseek_mtp)


def _mixer_layout(cfg: _Config, layers: int, model_type: str, mixers: list[str]) -> _Layout:
    """Nemotron-H's layers: Mamba-2 ones are its linear (recurrent) layers, the experts are where the
    pattern says, the MLPs (and the experts) are up/down only when the activation is relu2."""
    moe, _ = _experts(cfg, layers, model_type)
    gated = cfg.get("mlp_hidden_act") not in ("relu2", "relu")
    if moe is not None:
        shared = cfg.number("moe_shared_expert_intermediate_size") or moe.shared_inter
        moe = replace(moe, gated=gated, shared_inter=shared, shared_gate=False,
                      router_bias=moe.experts, router_bias_bytes=4,  # e_score_correction_bias, fp32
                      latent=cfg.number("moe_latent_size") or 0)
    sparse = [m == "moe" for m in mixers]
    dense_inter = (cfg.number("intermediate_size") or 0) if "mlp" in mixers else 0
    mtp, deepseek_mtp = _mtp_layers(cfg, model_type)
    mamba = _mamba2_dims(cfg) if "mamba" in mixers else None
    return _Layout(layers, [m == "mamba" for m in mixers], None, moe, sparse, dense_inter, mtp, deepseek_mtp,
                   mixers=mixers, mamba=mamba, mlp_gated=gated)


def _count_decoder(t: _Tally, cfg: _Config, shape: _Shape, vocab: int, lay: _Layout, mla: MlaInfo | None,
                   model_type: str) -> None:
    """The decoder's weights into `t`: the embeddings and head, each layer, the MTP layers."""
    hidden = shape.hidden
    tied = bool(cfg.get("tie_word_embeddings"))
    t.plain("main", vocab * hidden * (1 if tied else 2) + hidden)  # embeddings, head, final norm

    def decoder_layer(section: str, linear: bool, sparse: bool) -> None:
        if linear and lay.gdn is not None:
            _linear_attention(t, lay.gdn, hidden, section)
        else:
            _attention(t, cfg, shape, section, mla, model_type)
        if sparse and lay.moe is not None:
            _moe_block(t, lay.moe, hidden, section)
        else:
            _mlp(t, hidden, lay.dense_inter, section)
        t.plain(section, 2 * hidden)  # input and post-attention norms

    if lay.mixers is not None:
        _count_mixers(t, cfg, shape, lay, model_type)
    else:
        for i in range(lay.count):
            decoder_layer("main", lay.linear[i], lay.sparse[i])
    for _ in range(lay.mtp):
        decoder_layer("mtp", False, lay.moe is not None)
        if lay.deepseek_mtp:
            # enorm, hnorm, eh_proj, shared_head.norm, and the copies of embed/head it stores
            t.plain("mtp", 3 * hidden + 2 * hidden * hidden + 2 * vocab * hidden)
        else:
            # pre_fc norms (embedding, hidden), fc, final norm
            t.plain("mtp", 3 * hidden + 2 * hidden * hidden)


def _count_mixers(t: _Tally, cfg: _Config, shape: _Shape, lay: _Layout, model_type: str) -> None:
    """Layers of one mixer each (Nemotron-H), each with its norm."""
    for mixer in lay.mixers or ():
        if mixer == "mamba" and lay.mamba is not None:
            _mamba2(t, lay.mamba, shape.hidden, "main")
        elif mixer == "attention":
            _attention(t, cfg, shape, "main", None, model_type)
        elif mixer == "moe" and lay.moe is not None:
            _moe_block(t, lay.moe, shape.hidden, "main")
        else:
            _mlp(t, shape.hidden, lay.dense_inter, "main", gated=lay.mlp_gated)
        t.plain("main", shape.hidden)


def _active_params(t: _Tally, hidden: int, lay: _Layout, params: int) -> int:
    """The parameters one token runs through: all of them but the experts it is not routed to."""
    moe = lay.moe
    if moe is None or not moe.experts:
        return params
    expert_params = (3 if moe.gated else 2) * (moe.latent or hidden) * moe.expert_inter * moe.experts * sum(lay.sparse)
    inactive = expert_params * (moe.experts - moe.active) // moe.experts
    return t.params["main"] - inactive


def _checkpoint_bytes(index: dict[str, Any] | None, file_sizes: dict[str, int] | None,
                      computed_bytes: int) -> tuple[int, str, int]:
    """(the checkpoint's bytes, where that figure comes from, the safetensors files' bytes present):
    the index's total size, else the files' sizes, else the computed weights."""
    metadata = index.get("metadata") if isinstance(index, dict) else None
    total_size = metadata.get("total_size") if isinstance(metadata, dict) else None
    safetensors = sum(size for name, size in (file_sizes or {}).items() if name.endswith(".safetensors"))
    if isinstance(total_size, int) and total_size > 0:
        return total_size, "index", safetensors
    if safetensors > 0:
        return safetensors, "files", safetensors
    return computed_bytes, "computed", safetensors


def _hybrid(cfg: _Config, lay: _Layout, dtype_bytes: int) -> HybridInfo | None:
    """A hybrid model's layer counts and the recurrent state each request holds."""
    gdn = lay.gdn
    if lay.mamba is not None and lay.mixers is not None:
        m = lay.mamba
        mamba_layers = lay.mixers.count("mamba")
        ssm_dtype = cfg.get("mamba_ssm_cache_dtype") or cfg.get("mamba_ssm_dtype")
        ssm_bytes = _DTYPE_BYTES.get(ssm_dtype if isinstance(ssm_dtype, str) else "float32", 4)
        conv_state = m.conv_dim * max(m.kernel - 1, 0) * dtype_bytes
        ssm_state = m.heads * m.head_dim * m.state * ssm_bytes
        return HybridInfo(full_attention_layers=lay.mixers.count("attention"), linear_attention_layers=mamba_layers,
                          state_bytes_per_request=mamba_layers * (conv_state + ssm_state))
    if gdn is None:
        return None
    linear_layers = sum(lay.linear)
    ssm_dtype = cfg.get("mamba_ssm_dtype")
    ssm_bytes = _DTYPE_BYTES.get(ssm_dtype if isinstance(ssm_dtype, str) else "float32", 4)
    conv_state = gdn.conv_dim * max(gdn.kernel - 1, 0) * dtype_bytes
    ssm_state = gdn.v_heads * gdn.k_head_dim * gdn.v_head_dim * ssm_bytes
    return HybridInfo(
        full_attention_layers=lay.count - linear_layers,
        linear_attention_layers=linear_layers,
        state_bytes_per_request=linear_layers * (conv_state + ssm_state),
    )


def _moe_info(cfg: _Config, lay: _Layout) -> MoeInfo | None:
    moe = lay.moe
    if moe is None:
        return None
    return MoeInfo(
        num_experts=moe.experts,
        active_experts=moe.active,
        shared_experts=(cfg.number("n_shared_experts") or (1 if moe.shared_inter else 0)),
        moe_intermediate_size=cfg.number("moe_intermediate_size"),
        dense_layers=lay.count - sum(lay.sparse),
    )


def facts_from_config(
    config: dict[str, Any],
    *,
    id: str,
    source: str = "local",
    local_path: str | None = None,
    index: dict[str, Any] | None = None,
    file_sizes: dict[str, int] | None = None,
    tokenizer_config: dict[str, Any] | None = None,
    chat_template: str | None = None,
) -> ModelFacts:
    """Everything gpuops knows about a model, derived from its config.json (plus the index, the
    safetensors file sizes, its tokenizer_config.json and its chat_template.jinja when the caller
    has them). Never raises on a partial config."""
    cfg = _Config(config)
    architecture = _architecture(config)
    model_type_top, model_type = _model_types(config, cfg)

    hidden = cfg.need("hidden_size", "d_model", "n_embd")
    blocks = cfg.get("layers_block_type")  # (a Nemotron-H config that lists its layers says no count)
    layers = (cfg.number("num_hidden_layers", "n_layer", "num_layers") or (len(blocks) if isinstance(blocks, list) else 0)
              or cfg.need("num_hidden_layers", "n_layer", "num_layers"))
    vocab = cfg.need("vocab_size")
    heads = cfg.need("num_attention_heads", "n_head")
    kv_heads = cfg.number("num_key_value_heads") or heads
    head_dim = cfg.number("head_dim") or (hidden // heads if heads else 0)
    shape = _Shape(hidden, heads, kv_heads, head_dim)

    dtype, quant, dtype_bytes = _dtype(cfg)
    mla = _mla(cfg)
    if mla is not None:
        head_dim = (mla.qk_nope_head_dim or 0) + mla.qk_rope_head_dim  # per query/key head
    lay = _layout(cfg, layers, model_type)

    t = _Tally(dtype_bytes=dtype_bytes, quant=quant)
    _count_decoder(t, cfg, shape, vocab, lay, mla, model_type)
    vision = config.get("vision_config")
    tower = None
    if isinstance(vision, dict) and architecture and "ConditionalGeneration" in architecture:
        _vision_tower(t, vision, cfg.missing)
        tower = (_positive(vision.get("num_hidden_layers")), _positive(vision.get("hidden_size")))

    params = sum(t.params.values())
    active_params: int | None = _active_params(t, hidden, lay, params)
    checkpoint_bytes, bytes_source, safetensors = _checkpoint_bytes(index, file_sizes,
                                                                     round(sum(t.nbytes.values())))
    known = architecture in _KNOWN_ARCHITECTURES
    if not known and bytes_source != "computed" and quant is None:
        # An architecture the computation does not model: the weights themselves are the count.
        params = checkpoint_bytes // dtype_bytes
        if lay.moe is None:
            active_params = params

    family = _family(model_type, architecture, vocab, id)
    return ModelFacts(
        id=id,
        source=source,
        local_path=local_path,
        architecture=architecture,
        model_type=model_type_top,
        family=family,
        known_architecture=known,
        hidden_size=hidden or None,
        num_layers=layers or None,
        vocab_size=vocab or None,
        num_attention_heads=heads or None,
        num_kv_heads=kv_heads or None,
        head_dim=head_dim or None,
        mla=mla,
        moe=_moe_info(cfg, lay),
        hybrid=_hybrid(cfg, lay, dtype_bytes),
        mtp_layers=lay.mtp,
        dtype=dtype,
        quant=quant,
        context_length=_context_length(cfg),
        params=params,
        active_params=active_params,
        checkpoint_bytes=checkpoint_bytes,
        checkpoint_bytes_source=bytes_source,
        mtp_bytes=round(t.nbytes["mtp"]),
        missing=tuple(cfg.missing),
        thinking=thinking_mode(family, model_name(id)),
        weights_present_bytes=safetensors if file_sizes is not None else None,
        auto_map=auto_map_entries(config.get("auto_map")),
        tokenizer_class=_tokenizer_class(tokenizer_config),
        tokenizer_auto_map=auto_map_entries((tokenizer_config or {}).get("auto_map")),
        chat_atoms=template_atoms(tokenizer_config, chat_template),
        vision_tower=tower,
    )


# A class reference in an auto_map: "module.Class", or "owner/repo--module.Class" (code in another repo).
_CODE_REF = re.compile(r"(?:[\w.-]{1,96}/[\w.-]{1,96}--)?[A-Za-z_][\w.]{0,200}")
_CLASS_NAME = re.compile(r"[A-Za-z_]\w{0,127}")


def auto_map_entries(value: Any) -> tuple[tuple[str, str], ...]:
    """A config's ``auto_map`` as (auto class, reference) pairs; a list (a tokenizer's slow and fast
    classes) gives a pair each, null members skipped. A key or a reference of another shape (it
    would reach a plan's text) is shown as ``?``: that the checkpoint ships code still counts."""
    if not isinstance(value, dict):
        return ()
    out: list[tuple[str, str]] = []
    for key, refs in value.items():
        key = key if isinstance(key, str) and _CLASS_NAME.fullmatch(key) else "?"
        for ref in refs if isinstance(refs, list) else [refs]:
            if isinstance(ref, str):
                out.append((key, ref if _CODE_REF.fullmatch(ref) else "?"))
    return tuple(out)


# A special token as chat templates write them: <|im_start|>, <｜tool▁calls▁begin｜>, <｜GCML｜tool_calls>,
# <think>, </tool_call>, <mm:think>, <ifm|think>, Gemma 4's <|channel> and <channel|>, [THINK],
# [/TOOL_CALLS], Kimi's ◁think▷.
ATOM_PATTERN = (r"<\|[^<>|\s]{1,40}\|>|</?｜[^<>｜]{1,40}｜(?:[^<>｜\s]{1,40})?>|</?[A-Za-z_][\w:.|-]{0,40}>"
                r"|<\|[^<>|\s]{1,40}>|<[^<>|\s/]{1,40}\|>|\[/?[A-Z][A-Z_]{1,30}\]|◁/?[a-z_]{1,20}▷")
_ATOM = re.compile(ATOM_PATTERN)
MAX_ATOMS = 1000


def chat_atoms(text: str) -> set[str]:
    """The special-token-like pieces of `text` (ATOM_PATTERN)."""
    return set(_ATOM.findall(text))


def template_atoms(tokenizer_config: dict[str, Any] | None, chat_template: str | None = None) -> tuple[str, ...] | None:
    """The atoms of a model's chat template (tokenizer_config.json's ``chat_template``, a string or
    named templates, or chat_template.jinja's text) and of the tokens its tokenizer declares
    (``added_tokens_decoder``, ``additional_special_tokens``); None when there is no template."""
    tc = tokenizer_config if isinstance(tokenizer_config, dict) else {}
    raw = tc.get("chat_template")
    texts = [chat_template] if isinstance(chat_template, str) else []
    if isinstance(raw, str):
        texts.append(raw)
    elif isinstance(raw, list):
        texts += [t["template"] for t in raw if isinstance(t, dict) and isinstance(t.get("template"), str)]
    if not texts:
        return None
    written: set[str] = set()
    for text in texts:
        written |= chat_atoms(text)
    added = tc.get("added_tokens_decoder")
    tokens = [t.get("content") for t in added.values() if isinstance(t, dict)] if isinstance(added, dict) else []
    extra = tc.get("additional_special_tokens")
    tokens += extra if isinstance(extra, list) else []
    declared: set[str] = set()
    for tok in tokens:  # (not the hundreds of reserved placeholders some tokenizers declare)
        if isinstance(tok, str) and len(tok) <= 64 and "reserved" not in tok:
            declared |= chat_atoms(tok)
    # what the template writes first, whole; then what the tokenizer declares, as far as the bound allows
    return tuple((sorted(written) + sorted(declared - written))[:MAX_ATOMS])


def _tokenizer_class(tokenizer_config: dict[str, Any] | None) -> str | None:
    name = (tokenizer_config or {}).get("tokenizer_class")
    return name if isinstance(name, str) and _CLASS_NAME.fullmatch(name) else None


# --------------------------------------------------------------------------- loading


def _read_json(path: Path, what: str) -> dict[str, Any]:
    try:
        data = json.loads(path.read_text(encoding="utf-8"))
    except json.JSONDecodeError as e:
        raise ModelError(f"{what}: {path.name} is not valid JSON (line {e.lineno}: {e.msg})") from None
    except (OSError, UnicodeDecodeError) as e:
        raise ModelError(f"{what}: cannot read {path.name}: {e.__class__.__name__}") from None
    if not isinstance(data, dict):
        raise ModelError(f"{what}: {path.name} is not a JSON object")
    return data


def _safetensors_sizes(folder: Path) -> dict[str, int]:
    return {p.name: p.stat().st_size for p in folder.glob("*.safetensors") if p.is_file()}


def _load_local(path: str) -> ModelFacts:
    folder = Path(path)
    if not folder.is_dir():
        raise ModelError(f"no such model folder: {path} (a local model is a folder holding {CONFIG_FILE})")
    config_path = folder / CONFIG_FILE
    if not config_path.is_file():
        raise ModelError(f"{path} has no {CONFIG_FILE}: not a model folder")
    config = _read_json(config_path, path)
    index_path = folder / INDEX_FILE
    index = _read_json(index_path, path) if index_path.is_file() else None
    tokenizer_path = folder / TOKENIZER_CONFIG_FILE
    return facts_from_config(
        config, id=path, source="local", local_path=path, index=index,
        file_sizes=_safetensors_sizes(folder),
        tokenizer_config=_read_json(tokenizer_path, path) if tokenizer_path.is_file() else None,
        chat_template=_read_text(folder / CHAT_TEMPLATE_FILE),
    )


def _read_text(path: Path) -> str | None:
    """A small text file's content; None when it is not there or cannot be read as text."""
    try:
        if path.stat().st_size > 1_000_000:
            return None
        return path.read_text(encoding="utf-8")
    except (OSError, UnicodeDecodeError):
        return None


def _hub_settings() -> tuple[str, bool]:
    """The HF hub cache folder and whether the Hub is off limits, read from the environment now
    with huggingface_hub's own precedence. huggingface_hub reads them once, at its import, so a
    process whose environment changed since (the dashboard's tests, a config reload) would use
    stale ones."""
    env = os.environ
    cache = env.get("HF_HUB_CACHE") or env.get("HUGGINGFACE_HUB_CACHE")
    if not cache:
        home = env.get("HF_HOME") or os.path.join(
            env.get("XDG_CACHE_HOME") or os.path.expanduser("~/.cache"), "huggingface")
        cache = os.path.join(home, "hub")
    offline = any(env.get(k, "").upper() in {"1", "ON", "YES", "TRUE"} for k in ("HF_HUB_OFFLINE", "TRANSFORMERS_OFFLINE"))
    return os.path.expandvars(os.path.expanduser(cache)), offline


def _hub_host() -> str:
    """The Hub's address as huggingface_hub uses it (HF_ENDPOINT, read at its import)."""
    from huggingface_hub import constants

    return str(constants.ENDPOINT)


def _one_line(e: BaseException) -> str:
    text = " ".join(str(e).split())
    return (text[:200] + "…" if len(text) > 200 else text) or type(e).__name__


def _load_hub(repo: str, offline: bool | None) -> ModelFacts:
    import httpx2
    from huggingface_hub import HfApi, get_hf_file_metadata, hf_hub_download, hf_hub_url, try_to_load_from_cache
    from huggingface_hub.errors import (
        EntryNotFoundError,
        GatedRepoError,
        HfHubHTTPError,
        LocalEntryNotFoundError,
        OfflineModeIsEnabled,
        RemoteEntryNotFoundError,
        RepositoryNotFoundError,
    )

    cache_dir, offline_now = _hub_settings()
    if offline is None:
        offline = offline_now
    unreachable = f"{repo} is not in the local HF cache and the Hub can't be reached (offline)"
    try:
        if not offline and not isinstance(try_to_load_from_cache(repo, CONFIG_FILE, cache_dir=cache_dir), str):
            # Not cached: one look at the Hub first, without retries. hf_hub_download retries a
            # connection that fails for a file it lacks five times over 23 s, each retry logged to
            # stderr; a host that cannot resolve or reach the Hub (an air-gapped GPU box) is told so
            # at once, with the reason.
            try:
                get_hf_file_metadata(hf_hub_url(repo, CONFIG_FILE))
            except httpx2.ConnectError as e:
                raise ModelError(f"{repo} is not in the local HF cache and the Hub can't be reached "
                                 f"({_hub_host()}: {_one_line(e)})") from None
        config_file = hf_hub_download(repo, CONFIG_FILE, local_files_only=offline, cache_dir=cache_dir)
    except GatedRepoError:
        raise ModelError(
            f"{repo} is a gated repo: accept its terms on the Hub, then log in (hf auth login) "
            "or set HF_TOKEN"
        ) from None
    except RepositoryNotFoundError:
        raise ModelError(f"no such repo on the Hub: {repo}") from None
    except RemoteEntryNotFoundError:
        raise ModelError(f"{repo} has no {CONFIG_FILE}: not a model repo") from None
    except (LocalEntryNotFoundError, OfflineModeIsEnabled, httpx2.TransportError):
        raise ModelError(unreachable) from None
    except HfHubHTTPError as e:
        status = e.response.status_code if e.response is not None else "?"
        raise ModelError(f"cannot read {repo} from the Hub: HTTP {status}") from None
    snapshot = Path(config_file).parent
    config = _read_json(Path(config_file), repo)

    try:
        index: dict[str, Any] | None = _read_json(
            Path(hf_hub_download(repo, INDEX_FILE, local_files_only=offline, cache_dir=cache_dir)), repo
        )
    except (EntryNotFoundError, OfflineModeIsEnabled, HfHubHTTPError, httpx2.TransportError):
        index = None

    try:
        tokenizer_config: dict[str, Any] | None = _read_json(
            Path(hf_hub_download(repo, TOKENIZER_CONFIG_FILE, local_files_only=offline, cache_dir=cache_dir)), repo
        )
    except (EntryNotFoundError, OfflineModeIsEnabled, HfHubHTTPError, httpx2.TransportError, ModelError):
        tokenizer_config = None  # (a repo without one, or one that cannot be read: its tokenizer is not judged)
    chat_template = None
    if tokenizer_config is not None and not tokenizer_config.get("chat_template"):
        try:
            chat_template = _read_text(Path(hf_hub_download(repo, CHAT_TEMPLATE_FILE, local_files_only=offline,
                                                            cache_dir=cache_dir)))
        except (EntryNotFoundError, OfflineModeIsEnabled, HfHubHTTPError, httpx2.TransportError):
            chat_template = None  # (no template file: the parsers are not checked against one)

    sizes = _safetensors_sizes(snapshot)
    if index is None and not offline:
        try:
            info = HfApi().model_info(repo, files_metadata=True)
            sizes = {
                s.rfilename: s.size for s in info.siblings or [] if s.size is not None
            }
        except (HfHubHTTPError, OfflineModeIsEnabled, httpx2.TransportError):
            pass
    return facts_from_config(
        config, id=repo, source="hub", local_path=str(snapshot), index=index, file_sizes=sizes,
        tokenizer_config=tokenizer_config, chat_template=chat_template,
    )


def load_model_facts(ref: str, *, offline: bool | None = None) -> ModelFacts:
    """Facts for an HF repo id (through huggingface_hub: its cache, HF_HUB_OFFLINE, the token
    from the usual place) or an absolute local folder holding config.json.

    ``offline=None`` follows HF_HUB_OFFLINE. Raises ModelError with a one-line reason.
    """
    try:
        ref = validate_model_ref(ref)
    except ValueError as e:
        raise ModelError(str(e)) from None
    if ref.startswith("/"):
        return _load_local(ref)
    return _load_hub(ref, offline)
