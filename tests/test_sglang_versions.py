"""SGLang's flags, parsers and defaults per version (core/engines/sglang/data/sglang_versions.json, read from
the wheels by core/engines/sglang/extract/flags.py), checked against what the wheels' own sources say
where the wheels agree with it. Offline: the data file is in the repo; nothing is downloaded."""

from __future__ import annotations

import argparse
import importlib.util
import json
import re
import sys
import zipfile
from pathlib import Path

import pytest

from gpuops.core.engines.sglang import versions as sv

REPO = Path(__file__).resolve().parent.parent
REQUIRED = ["0.5.9", "0.5.10", "0.5.11", "0.5.12", "0.5.13", "0.5.15", "0.5.18", "0.5.21", "0.5.23"]

# ToolCallParserEnum of 0.5.9 and 0.5.10 (function_call_parser.py)
TOOL_PARSERS_0_5_10 = {
    "deepseekv3", "deepseekv31", "deepseekv32", "glm", "glm45", "glm47", "gpt-oss", "kimi_k2", "lfm2", "llama3",
    "mimo", "mistral", "pythonic", "qwen", "qwen25", "qwen3_coder", "step3", "step3p5", "minimax-m2", "trinity",
    "interns1", "hermes", "gigachat3"}
# DetectorMap of 0.5.10 (reasoning_parser.py)
REASONING_PARSERS_0_5_10 = {
    "deepseek-r1", "deepseek-v3", "glm45", "gpt-oss", "kimi", "kimi_k2", "mimo", "qwen3", "qwen3-thinking",
    "minimax", "minimax-append-think", "step3", "step3p5", "mistral", "nemotron_3", "interns1"}


# ------------------------------------------------------------------ versions


def test_versions_covered_and_ordered():
    known = sv.known_versions()
    assert set(REQUIRED) <= set(known)
    assert known == sorted(known, key=sv.version_key)
    assert len(set(known)) == len(known)
    assert sv.newest_version() == known[-1]
    assert sv.version_key(sv.newest_version()) >= sv.version_key("0.5.23")


@pytest.mark.parametrize("low, high", [
    ("0.5.9", "0.5.10"), ("0.5.10", "0.5.10.post1"), ("0.5.23rc1", "0.5.23"), ("0.5.22", "0.5.23rc1"),
    ("0.5.23a1", "0.5.23b1"), ("0.5.23b2", "0.5.23rc1"), ("0.5.23.dev0", "0.5.23a1"), ("0.5", "0.5.1"),
    ("0.5.9.post2", "0.5.10"), ("0.4.10.post2", "0.5.0"), ("0.5.10.post1", "0.5.10.post2"),
])
def test_version_key_orders(low, high):
    assert sv.version_key(low) < sv.version_key(high)


def test_version_key_equal_spellings():
    assert sv.version_key("0.5") == sv.version_key("0.5.0") == sv.version_key("v0.5.0")
    assert sv.version_key("0.5.10+cu124") == sv.version_key("0.5.10")
    assert sv.version_key("0.5.10-post1") == sv.version_key("0.5.10.post1")
    assert all(isinstance(x, int) for x in sv.version_key("0.5.23rc1"))


@pytest.mark.parametrize("bad", ["", "banana", "0.5.x", "..", "0.5.10 rm -rf", None])
def test_version_key_rejects(bad):
    with pytest.raises(ValueError):
        sv.version_key(bad)


def test_resolve_version():
    oldest, newest = sv.known_versions()[0], sv.newest_version()
    for v in sv.known_versions():
        assert sv.resolve_version(v) == v
    assert sv.resolve_version("0.5.10.post1") == "0.5.10"
    assert sv.resolve_version("0.5.23rc1") == "0.5.22"  # a release candidate predates its release
    assert sv.resolve_version("0.5.23.post3") == "0.5.23"
    assert sv.resolve_version("9.0") == newest
    assert sv.resolve_version("0.4.10") == oldest
    with pytest.raises(ValueError):
        sv.resolve_version("latest")
    # unknown versions answer with the resolved version's data
    assert sv.flags_for("0.5.10.post1") == sv.flags_for("0.5.10")
    assert sv.tool_call_parsers("99.0") == sv.tool_call_parsers(newest)


# ------------------------------------------------------------------ flags (facts §1)


@pytest.mark.parametrize("v", ["0.5.9", "0.5.10", "0.5.11", "0.5.12", "0.5.13"])
def test_old_mamba_flag_up_to_0_5_13(v):
    flags = sv.flags_for(v)
    assert "--mamba-scheduler-strategy" in flags and "--mamba-radix-cache-strategy" not in flags
    assert {"auto", "no_buffer", "extra_buffer"} <= set(sv.choices_for(v, "--mamba-scheduler-strategy"))


@pytest.mark.parametrize("v", ["0.5.15", "0.5.18"])
def test_renamed_mamba_flag_with_deprecated_alias(v):
    flags = sv.flags_for(v)
    assert {"--mamba-scheduler-strategy", "--mamba-radix-cache-strategy"} <= flags
    assert sv.choices_for(v, "--mamba-radix-cache-strategy") == ("auto", "no_buffer", "extra_buffer",
                                                                 "extra_buffer_lazy")
    assert sv.deprecated_flags(v)["--mamba-scheduler-strategy"] == "--mamba-radix-cache-strategy"


@pytest.mark.parametrize("v", ["0.5.21", "0.5.23"])
def test_old_mamba_flag_gone(v):
    flags = sv.flags_for(v)
    assert "--mamba-scheduler-strategy" not in flags and "--mamba-radix-cache-strategy" in flags
    assert sv.canonical_flag(v, "--mamba-scheduler-strategy") is None


def test_mamba_rename_where_the_wheels_put_it():
    # for 0.5.14, 0.5.19, 0.5.20 the wheels say: the new name (with the
    # old one as a deprecated alias) arrives in 0.5.14, and the alias is last seen in 0.5.19.
    assert {"--mamba-scheduler-strategy", "--mamba-radix-cache-strategy"} <= sv.flags_for("0.5.14")
    assert "--mamba-scheduler-strategy" in sv.flags_for("0.5.19")
    assert "--mamba-scheduler-strategy" not in sv.flags_for("0.5.20")


@pytest.mark.parametrize("v", REQUIRED)
def test_flags_gpuops_writes_exist_everywhere(v):
    flags = sv.flags_for(v)
    for flag in ("--model-path", "--tp-size", "--tensor-parallel-size", "--host", "--port", "--api-key",
                 "--enable-metrics", "--mem-fraction-static", "--context-length", "--page-size",
                 "--reasoning-parser", "--tool-call-parser", "--speculative-algorithm", "--speculative-num-steps",
                 "--speculative-eagle-topk", "--speculative-num-draft-tokens", "--speculative-draft-model-path",
                 "--quantization", "--moe-runner-backend", "--fp4-gemm-backend",
                 "--enable-flashinfer-allreduce-fusion", "--watchdog-timeout", "--model-loader-extra-config",
                 "--disable-radix-cache", "-h", "--help"):
        assert flag in flags, flag
    assert "modelopt_fp4" in sv.choices_for(v, "--quantization")
    assert "flashinfer_cutlass" in sv.choices_for(v, "--moe-runner-backend")
    assert "flashinfer_cutlass" in sv.choices_for(v, "--fp4-gemm-backend")
    assert sv.nargs_for(v, "--enable-metrics") == 0 and sv.nargs_for(v, "--tp-size") == 1
    assert sv.nargs_for(v, "--enable-flashinfer-allreduce-fusion") == 0
    assert sv.nargs_for(v, "--no-such-flag") is None


def test_abbreviations_argparse_accepts():
    # `--tp` and the cookbook's `--speculative-algo` are not declared anywhere: argparse takes
    # them as unique prefixes of --tp-size and --speculative-algorithm.
    for v in REQUIRED:
        assert "--tp" not in sv.flags_for(v) and "--speculative-algo" not in sv.flags_for(v)
        assert sv.canonical_flag(v, "--tp") == "--tp-size"
        assert sv.canonical_flag(v, "--speculative-algo") == "--speculative-algorithm"
        assert sv.canonical_flag(v, "--tp=4") == "--tp-size"
        assert sv.canonical_flag(v, "--tensor-parallel-size") == "--tensor-parallel-size"
        assert sv.canonical_flag(v, "--speculative") is None  # ambiguous
        assert sv.canonical_flag(v, "--bogus-flag") is None
    assert sv.match_flag("--tp", {"--tp-size", "--tpu"}) is None
    assert sv.match_flag("--tp", {"--tp-size", "--tpu"}, allow_abbrev=False) is None
    assert sv.match_flag("--tp-size", ["--tp-size", "--tp-size-x"]) == "--tp-size"
    assert sv.match_flag("-t", {"--tp-size"}) is None


def test_allreduce_fusion_flag_deprecated_from_0_5_14():
    assert "--enable-flashinfer-allreduce-fusion" not in sv.deprecated_flags("0.5.13")
    for v in ("0.5.14", "0.5.18", "0.5.23"):
        assert sv.deprecated_flags(v)["--enable-flashinfer-allreduce-fusion"] == \
            "--flashinfer-allreduce-fusion-backend=auto"


def test_hidden_flags_are_accepted():
    hidden = sv.hidden_flags("0.5.23")
    assert "--forward-pass-metrics-worker-id" in hidden
    assert hidden <= sv.flags_for("0.5.23")
    assert sv.hidden_flags("0.5.9") == frozenset()


def test_prog_and_required():
    assert sv.help_prog("0.5.9") == "launch_server.py"
    assert sv.help_prog("0.5.23") == "sglang serve"
    assert "--model-path MODEL_PATH" in sv.format_help("0.5.23").split("\n\n")[0]  # required: no brackets


def test_flag_counts_grow_and_results_are_cached():
    assert len(sv.flags_for("0.5.9")) > 300 and len(sv.flags_for("0.5.23")) > 500
    assert sv.flags_for("0.5.23") is sv.flags_for("0.5.23")
    assert isinstance(sv.flags_for("0.5.23"), frozenset)


# ------------------------------------------------------------------ parsers (facts §2)


@pytest.mark.parametrize("v", ["0.5.9", "0.5.10"])
def test_tool_call_parsers_match_facts(v):
    assert sv.tool_call_parsers(v) == TOOL_PARSERS_0_5_10


def test_reasoning_parsers_match_facts():
    assert sv.reasoning_parsers("0.5.10") == REASONING_PARSERS_0_5_10
    # facts: 0.5.9 has nano_v3 instead of mistral/nemotron_3; the wheel also lacks mimo there
    assert sv.reasoning_parsers("0.5.9") == (REASONING_PARSERS_0_5_10 - {"mistral", "nemotron_3", "mimo"}) | {"nano_v3"}


def test_newer_parsers():
    tools = sv.tool_call_parsers("0.5.23")
    assert {"deepseekv4", "kimi_k3", "minimax-m3", "gemma4", "hunyuan", "response_template"} <= tools
    assert len(tools - sv.tool_call_parsers("0.5.10")) >= 20
    assert "auto" not in sv.tool_call_parsers("0.5.11") and "auto" in sv.tool_call_parsers("0.5.12")
    for v in REQUIRED:
        assert {"qwen3_coder", "qwen", "qwen25", "kimi_k2", "gpt-oss", "deepseekv3"} <= sv.tool_call_parsers(v)
        assert {"qwen3", "deepseek-r1", "gpt-oss"} <= sv.reasoning_parsers(v)
        assert sv.tool_call_parsers(v) == frozenset(sv.choices_for(v, "--tool-call-parser"))
        assert sv.reasoning_parsers(v) == frozenset(sv.choices_for(v, "--reasoning-parser"))


# ------------------------------------------------------------------ spec v2, bench


def test_spec_v2_default():
    assert sv.spec_v2_default("0.5.9") is False and sv.spec_v2_default("0.5.10") is False
    for v in ("0.5.11", "0.5.12", "0.5.13"):
        assert sv.spec_v2_default(v) is True
    # 0.5.14 removed the variable: speculative decoding always runs the V2 worker
    for v in ("0.5.14", "0.5.15", "0.5.18", "0.5.21", "0.5.23"):
        assert sv.spec_v2_default(v) is None
    assert not sv.spec_v2_env_retired("0.5.13")
    assert sv.spec_v2_env_retired("0.5.14") and sv.spec_v2_env_retired("0.5.18")
    assert not sv.spec_v2_env_retired("0.5.23")  # the removal notice itself is gone


def test_bench_module():
    for v in ("0.5.9", "0.5.10", "0.5.13", "0.5.14"):
        assert sv.bench_module(v) == "sglang.bench_serving"
    for v in ("0.5.15", "0.5.18", "0.5.21", "0.5.23", "1.0"):
        assert sv.bench_module(v) == "sglang.benchmark.serving"


# ------------------------------------------------------------------ the data file


def test_data_file_is_compact_and_complete():
    raw = sv.DATA_FILE.read_bytes()
    assert len(raw) < 300_000
    data = json.loads(raw)
    assert data["schema"] == 1
    first, *rest = sorted(data["versions"], key=sv.version_key)
    assert "args" in data["versions"][first]
    for v in rest:
        entry = data["versions"][v]
        assert "args" not in entry and {"args_added", "args_removed"} <= set(entry)
        assert entry["tool_call_parsers"] == sorted(entry["tool_call_parsers"])
        assert re.fullmatch(r"sglang-%s-.*\.whl" % re.escape(v), entry["wheel"])


# ------------------------------------------------------------------ --help parsing


@pytest.mark.parametrize("v", REQUIRED)
def test_parse_help_flags_round_trip(v):
    text = sv.format_help(v)
    assert text.startswith("usage: %s [-h] " % sv.help_prog(v))
    assert "\noptions:\n" in text or "\noptional arguments:\n" in text
    parsed = sv.parse_help_flags(text)
    assert parsed == sv.flags_for(v) - sv.hidden_flags(v)
    assert parsed | sv.hidden_flags(v) == sv.flags_for(v)


def test_format_help_wraps_like_argparse():
    text = sv.format_help("0.5.23")
    usage = text.split("\n\n")[0].splitlines()
    assert len(usage) > 100
    indent = " " * len("usage: sglang serve ")
    assert all(line.startswith(indent) for line in usage[1:])
    # a line only runs past the width when it holds one usage part that is longer than that
    assert all(len(line) <= 78 or "] [" not in line for line in usage)
    assert any(len(line) > 78 for line in usage)  # e.g. --attention-backend {...}
    assert "  --tp-size TP_SIZE, --tensor-parallel-size TP_SIZE\n" in text
    assert "  --enable-metrics\n" in text


def _real_parser(width: int) -> str:
    parser = argparse.ArgumentParser(
        prog="launch_server.py", description="A parser like SGLang's, with text that names --fake-from-description.",
        formatter_class=lambda prog: argparse.HelpFormatter(prog, width=width))
    parser.add_argument("--model-path", "--model", required=True, help="The model (see --not-a-flag-1).")
    parser.add_argument("--tp-size", "--tensor-parallel-size", type=int, default=1,
                        help="Tensor parallelism. " + "Long words that wrap the help onto more lines " * 3
                        + "--not-a-flag-2 starts a wrapped line maybe.")
    parser.add_argument("--quantization", choices=["awq", "fp8", "modelopt_fp4", "-1", "w8a8_int8"],
                        help="Quantization.")
    parser.add_argument("--cuda-graph-bs", type=int, nargs="+", help="Batch sizes.")
    parser.add_argument("--lora-paths", nargs="*", help="LoRA.")
    parser.add_argument("--enable-metrics", action="store_true", help="Use --not-a-flag-3 instead.")
    parser.add_argument("-v", "--verbose", action="count")
    parser.add_argument("--json-model-override-args", metavar="JSON", help="x")
    parser.add_argument("--secret", help=argparse.SUPPRESS)
    group = parser.add_argument_group("Speculative decoding")
    group.add_argument("--speculative-algorithm", choices=["EAGLE", "NEXTN"])
    group.add_argument("--speculative-num-draft-tokens", type=int)
    return parser.format_help()


@pytest.mark.parametrize("width", [40, 60, 78, 200])
def test_parse_help_flags_on_real_argparse(width):
    text = _real_parser(width)
    if width <= 60:
        assert len(text.split("\n\n")[0].splitlines()) > 3  # the usage really wraps
    assert "--not-a-flag-1" in text and "--not-a-flag-3" in text  # mentioned in help, not options
    assert sv.parse_help_flags(text) == {
        "-h", "--help", "--model-path", "--model", "--tp-size", "--tensor-parallel-size", "--quantization",
        "--cuda-graph-bs", "--lora-paths", "--enable-metrics", "-v", "--verbose", "--json-model-override-args",
        "--speculative-algorithm", "--speculative-num-draft-tokens"}


def test_parse_help_flags_other_layouts():
    # Python 3.13+ prints the metavar once; Python <= 3.9 says "optional arguments:"; colours
    text = ("usage: sglang serve [-h] [-t TP]\n\noptional arguments:\n"
            "  -h, --help            show this help message and exit\n"
            "  -t, --tp-size TP      Tensor parallel size.\n"
            "  \x1b[32m--port\x1b[0m PORT           The port.\n"
            "                        --mentioned-in-help is not an option\n")
    assert sv.parse_help_flags(text) == {"-h", "--help", "-t", "--tp-size", "--port"}
    # an argparse error prints only the usage
    err = ("usage: sglang serve [-h] --model-path MODEL_PATH [--tp-size TP_SIZE]\n"
           "                    [--quantization {awq,fp8,--x}]\n"
           "sglang serve: error: the following arguments are required: --model-path\n")
    assert sv.parse_help_flags(err) == {"-h", "--model-path", "--tp-size", "--quantization"}
    assert sv.parse_help_flags("") == frozenset()
    assert sv.parse_help_flags("Traceback (most recent call last):\n  File x\nModuleNotFoundError: sglang\n") \
        == frozenset()


# ------------------------------------------------------------------ the extraction script, offline


def _load_script():
    spec = importlib.util.spec_from_file_location("extract_sglang_flags", REPO / "core" / "engines" / "sglang" / "extract" / "flags.py")
    mod = importlib.util.module_from_spec(spec)
    sys.modules[spec.name] = mod  # its dataclasses look their module up
    try:
        spec.loader.exec_module(mod)
    finally:
        sys.modules.pop(spec.name, None)
    return mod


_OLD_STYLE = {
    "sglang/launch_server.py": "from sglang.srt.server_args import prepare_server_args\n",
    "sglang/srt/server_args.py": '''
import argparse
from sglang.srt.function_call.function_call_parser import FunctionCallParser
from sglang.srt.parser.reasoning_parser import ReasoningParser
QUANTIZATION_CHOICES = ["fp8", "awq"]
QUANTIZATION_CHOICES.extend(["modelopt_fp4"])

class DeprecatedAction(argparse.Action):
    def __init__(self, option_strings, dest, nargs=0, **kwargs):
        super().__init__(option_strings, dest, nargs=nargs, **kwargs)

class ServerArgs:
    @staticmethod
    def add_cli_args(parser):
        parser.add_argument("--model-path", "--model", required=True)
        parser.add_argument("--tp-size", "--tensor-parallel-size", type=int)
        parser.add_argument("--quantization", choices=QUANTIZATION_CHOICES)
        parser.add_argument("--enable-metrics", action="store_true")
        parser.add_argument("--old-thing", action=DeprecatedAction, help="Deprecated. Use --new-thing instead.")
        parser.add_argument("--secret", help=argparse.SUPPRESS)
        tool_choices = list(FunctionCallParser.ToolCallParserEnum.keys())
        parser.add_argument("--tool-call-parser", choices=tool_choices)
        parser.add_argument("--reasoning-parser", choices=list(ReasoningParser.DetectorMap.keys()))
        _more(parser)

def _more(parser):
    parser.add_argument("--cuda-graph-bs", type=int, nargs="+")

def prepare_server_args(argv):
    parser = argparse.ArgumentParser()
    ServerArgs.add_cli_args(parser)
    return parser.parse_args(argv)
''',
    "sglang/srt/function_call/function_call_parser.py": '''
class FunctionCallParser:
    ToolCallParserEnum = {"qwen": object, "qwen3_coder": object}
''',
    "sglang/srt/parser/reasoning_parser.py": '''
class ReasoningParser:
    DetectorMap = {"qwen3": object}
''',
    "sglang/srt/environ.py": "class Envs:\n    SGLANG_ENABLE_SPEC_V2 = EnvBool(False)\n",
    "sglang/bench_serving.py": "",
}

_NEW_STYLE = {
    "sglang/launch_server.py": "from sglang.srt.server_args import prepare_server_args\n",
    "sglang/srt/arg_groups/arg_utils.py": "A = Annotated\nclass Arg: pass\n",
    "sglang/srt/arg_groups/fields/model.py": '''
from typing import Literal, Optional
import msgspec
from sglang.srt.arg_groups.arg_utils import A, Arg
class Model(msgspec.Struct):
    _NS_PATH = "model"
    model_path: A[str, Arg(help="The model.", aliases=["--model"])]
    tp_size: A[int, Arg(help="TP.", aliases=["--tensor-parallel-size"])] = 1
    strategy: A[Literal["auto", "extra_buffer"], Arg(help="x", cli_name="--mamba-radix-cache-strategy")] = "auto"
    cuda_graph_bs: A[Optional[list[int]], "Batch sizes."] = None
    enable_metrics: A[bool, "Metrics."] = False
    internal: A[int, Arg(no_cli=True)] = 0
    derived: A[int, Derived(doc="not an input")] = 0
    plain: int = 3
''',
    "sglang/srt/server_args.py": '''
import argparse, sys
from sglang.srt.arg_groups.arg_utils import add_cli_args_from_dataclass
from sglang.srt.arg_groups.fields.model import Model

def _tool_call_parser_choices():
    module = sys.modules.get("x")
    if module is not None:
        return list(module.Names)
    from sglang.srt.function_call.parser_names import TOOL_CALL_PARSER_NAMES
    return list(TOOL_CALL_PARSER_NAMES)

class ServerArgs:
    @staticmethod
    def add_cli_args(parser):
        add_cli_args_from_dataclass(parser, ServerArgs)
        parser.add_argument("--tool-call-parser", choices=["auto"] + _tool_call_parser_choices())

_INPUT_NAMESPACES = [Model]
_a, _d, _n = collect_input_fields(_INPUT_NAMESPACES)
ServerArgs = msgspec.defstruct("ServerArgs", [])

def prepare_server_args(argv):
    parser = argparse.ArgumentParser(prog="sglang serve")
    ServerArgs.add_cli_args(parser)
''',
    "sglang/srt/function_call/parser_names.py": 'TOOL_CALL_PARSER_NAMES = ["qwen", "qwen3_coder"]\n',
    "sglang/srt/parser/reasoning_parser.py": 'class ReasoningParser:\n    DetectorMap = {"qwen3": None}\n',
    "sglang/srt/arg_groups/speculative_hook.py": 'MSG = "SGLANG_ENABLE_SPEC_V2 has been removed: ..."\n',
    "sglang/bench_serving.py": "",
    "sglang/benchmark/__init__.py": "",
    "sglang/benchmark/serving.py": "",
}


def _wheel(tmp_path, name, files) -> Path:
    path = tmp_path / name
    with zipfile.ZipFile(path, "w") as z:
        for k, v in files.items():
            z.writestr(k, v)
    return path


def test_extract_old_style_wheel(tmp_path):
    mod = _load_script()
    data, notes = mod.extract(_wheel(tmp_path, "sglang-0.0.1-py3-none-any.whl", _OLD_STYLE))
    assert notes == []
    args = data["args"]
    assert args["--model-path"] == {"opts": ["--model-path", "--model"], "required": True}
    assert args["--tp-size"] == {"opts": ["--tp-size", "--tensor-parallel-size"]}
    assert args["--quantization"] == {"choices": ["fp8", "awq", "modelopt_fp4"]}
    assert args["--enable-metrics"] == {"nargs": 0}
    assert args["--old-thing"] == {"nargs": 0, "deprecated": "--new-thing"}
    assert args["--secret"] == {"hidden": True}
    assert args["--cuda-graph-bs"] == {"nargs": "+"}  # found through the helper that gets the parser
    assert data["tool_call_parsers"] == ["qwen", "qwen3_coder"] and data["reasoning_parsers"] == ["qwen3"]
    assert data["spec_v2_default"] is False and data["spec_v2_env_retired"] is False
    assert data["bench_modules"] == ["sglang.bench_serving"] and data["prog"] is None


def test_extract_namespace_fields_wheel(tmp_path):
    mod = _load_script()
    data, notes = mod.extract(_wheel(tmp_path, "sglang-0.0.2-py3-none-any.whl", _NEW_STYLE))
    args = data["args"]
    assert set(args) == {"--model-path", "--tp-size", "--mamba-radix-cache-strategy", "--cuda-graph-bs",
                         "--enable-metrics", "--tool-call-parser"}
    assert args["--model-path"] == {"opts": ["--model-path", "--model"], "required": True}
    assert args["--mamba-radix-cache-strategy"] == {"choices": ["auto", "extra_buffer"]}
    assert args["--cuda-graph-bs"] == {"nargs": "+"} and args["--enable-metrics"] == {"nargs": 0}
    assert data["tool_call_parsers"] == ["auto", "qwen", "qwen3_coder"]
    assert data["spec_v2_default"] is None and data["spec_v2_env_retired"] is True
    assert data["bench_modules"] == ["sglang.bench_serving", "sglang.benchmark.serving"]
    assert data["prog"] == "sglang serve"


def test_compact_and_expand_round_trip(tmp_path):
    mod = _load_script()
    a, _ = mod.extract(_wheel(tmp_path, "sglang-0.0.1-py3-none-any.whl", _OLD_STYLE))
    b, _ = mod.extract(_wheel(tmp_path, "sglang-0.0.2-py3-none-any.whl", _NEW_STYLE))
    data = mod.compact({"0.0.1": a, "0.0.2": b})
    full = mod.expand(data)
    assert full["0.0.1"] == a["args"] and full["0.0.2"] == b["args"]
    assert "--quantization" in data["versions"]["0.0.2"]["args_removed"]
    text = mod.summary(data, {})
    assert "0.0.1 -> 0.0.2" in text and "--mamba-radix-cache-strategy" in text
