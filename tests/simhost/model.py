"""What the simulator reads from the model folder: config.json and the safetensors index."""

from __future__ import annotations

import contextlib
import math
import os

from .common import GiB, MODELS_FILE, read_json


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
