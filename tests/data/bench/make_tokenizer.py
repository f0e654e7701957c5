"""A tiny offline tokenizer for bench_serving's --tokenizer: a ByteLevel BPE trained on a few
words, saved with transformers' save_pretrained (tokenizer.json, tokenizer_config.json,
chat_template.jinja). Run with the SGLang host venv's python: python make_tokenizer.py DIR."""

import sys

from tokenizers import Tokenizer, decoders, models, pre_tokenizers, trainers
from transformers import PreTrainedTokenizerFast

words = "the quick brown fox jumps over the lazy dog question answer number total apples eggs".split()
corpus = [" ".join(words[i:] + words[:i]) for i in range(len(words))] * 20
tok = Tokenizer(models.BPE())
tok.pre_tokenizer = pre_tokenizers.ByteLevel(add_prefix_space=False)
tok.decoder = decoders.ByteLevel()
tok.train_from_iterator(corpus, trainers.BpeTrainer(vocab_size=400, special_tokens=["<|endoftext|>"],
                                                    initial_alphabet=pre_tokenizers.ByteLevel.alphabet()))
fast = PreTrainedTokenizerFast(tokenizer_object=tok, eos_token="<|endoftext|>", bos_token="<|endoftext|>")
fast.chat_template = "{% for m in messages %}{{ m['role'] }}: {{ m['content'] }}\n{% endfor %}assistant:"
fast.save_pretrained(sys.argv[1])
