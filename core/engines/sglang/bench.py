"""SGLang's benchmarks as gpuops runs them: the serving benchmark's command line
(``python -m sglang.bench_serving``, or ``sglang.benchmark.serving`` where the version has it;
``versions.bench_module``) and its ``--output-file`` records, the accuracy evaluation's command
line (``python -m sglang.test.run_eval --eval-name gsm8k`` on a local dataset file) and the
figures it prints."""

from __future__ import annotations

import re
from collections.abc import Iterable, Mapping
from typing import Any

__all__ = ["BACKEND", "EVAL_MODULE", "serving_argv", "eval_argv", "is_record", "read_eval_output"]

BACKEND = "sglang"  # bench_serving's --backend for an SGLang server
EVAL_MODULE = "sglang.test.run_eval"  # the quality profile's evaluation (gsm8k)

_SCORE = re.compile(r"^Score: (-?\d+(?:\.\d+)?)\s*$")
_EVAL_LATENCY = re.compile(r"^Total latency: (\d+(?:\.\d+)?) s")
_EVAL_THROUGHPUT = re.compile(r"^Output throughput: (\d+(?:\.\d+)?) token/s")


def serving_argv(python: str, module: str, *, url: str, settings: Mapping[str, Any], num_prompts: int,
                 concurrency: int | None, output_file: str, model_path: str | None = None,
                 tokenizer_path: str | None = None, served_name: str | None = None) -> list[str]:
    """One bench_serving run against `url` with a profile's `settings`, its records into `output_file`."""
    s = settings
    argv = [python, "-m", module, "--backend", s["backend"], "--base-url", url,
            "--dataset-name", s["dataset_name"], "--num-prompts", str(num_prompts),
            "--random-input-len", str(s["random_input_len"]), "--random-output-len", str(s["random_output_len"]),
            "--random-range-ratio", str(s["random_range_ratio"]), "--request-rate", str(s["request_rate"]),
            "--warmup-requests", str(s["warmup_requests"]), "--output-file", output_file]
    if s.get("dataset_path"):
        argv += ["--dataset-path", s["dataset_path"]]
    if concurrency is not None:
        argv += ["--max-concurrency", str(concurrency)]
    if model_path:  # the tokenizer from the deployment's files on the host (no download)
        argv += ["--model", model_path, "--tokenizer", tokenizer_path or model_path]
    if served_name:
        argv += ["--served-model-name", served_name]
    return argv


def eval_argv(python: str, *, url: str, settings: Mapping[str, Any], served_name: str | None = None) -> list[str]:
    """run_eval on the gsm8k file the profile names (hosts may be offline)."""
    s = settings
    argv = [python, "-m", EVAL_MODULE, "--base-url", url, "--eval-name", s["eval_name"],
            "--gsm8k-data-path", s["eval_data_path"], "--num-examples", str(s["num_examples"]),
            "--num-threads", str(s["max_concurrency"])]
    if served_name:
        argv += ["--model", served_name]
    return argv


def is_record(doc: object) -> bool:
    """Whether one JSON document of an ``--output-file`` is a bench_serving record."""
    return isinstance(doc, dict) and "backend" in doc and "output_throughput" in doc


def read_eval_output(lines: Iterable[str]) -> dict[str, float]:
    """run_eval's printed figures: ``score``, ``latency_s``, ``output_throughput`` (those it printed)."""
    found: dict[str, float] = {}
    for line in lines:
        for key, rx in (("score", _SCORE), ("latency_s", _EVAL_LATENCY), ("output_throughput", _EVAL_THROUGHPUT)):
            m = rx.match(line.strip())
            if m:
                found[key] = float(m.group(1))
    return found
