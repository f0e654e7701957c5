"""A tiny Qwen3 with random weights that the genuine SGLang server loads on a CPU: transformers'
Qwen3Config (2 layers, hidden 64, vocab 512), saved as safetensors. Run with the SGLang host venv's
python: python make_tiny_qwen3.py DIR (tests/data/bench/make_tokenizer.py adds the tokenizer)."""

import sys

import torch
from transformers import Qwen3Config, Qwen3ForCausalLM

torch.manual_seed(0)
config = Qwen3Config(vocab_size=512, hidden_size=64, intermediate_size=128, num_hidden_layers=2,
                     num_attention_heads=4, num_key_value_heads=2, head_dim=16)
Qwen3ForCausalLM(config).save_pretrained(sys.argv[1], safe_serialization=True)
