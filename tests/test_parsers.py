"""Reasoning and tool-call parsers judged against the model's own chat template (issue 25): what
each parser of each SGLang version waits for, read from the wheels (extract/parsers.py →
data/sglang_parsers.json), checked against the genuine SGLang 0.5.23; and the choice it makes on
real published chat templates (tests/data/configs/tokenizers, sources in SOURCES.md)."""

from __future__ import annotations

import json
import subprocess
from pathlib import Path

import pytest

from gpuops.core.engines.sglang import parsers
from gpuops.core.engines.sglang.extract.parsers import compact
from gpuops.core.engines.sglang.flag_rules import parser_choice
from gpuops.core.planning.model_facts import facts_from_config, load_model_facts, template_atoms

CONFIGS = Path(__file__).parent / "data" / "configs"
TOKENIZERS = CONFIGS / "tokenizers"
GPT_OSS_TEMPLATE = (TOKENIZERS / "gpt_oss__gpt-oss-20b.chat_template.jinja").read_text()
GPT_OSS_TOKENIZER = json.loads((TOKENIZERS / "gpt_oss__gpt-oss-20b.json").read_text())
GLM_TEMPLATE = (TOKENIZERS / "glm4_moe__GLM-4.5.chat_template.jinja").read_text()
QWEN3_THINKING_TOKENIZER = json.loads((TOKENIZERS / "qwen3__Qwen3-4B-Thinking-2507.json").read_text())


def _facts(config: str, model_id: str, **template):
    return facts_from_config(json.loads((CONFIGS / config).read_text()), id=model_id, **template)


# ------------------------------------------------------------------ the data, as read from the wheels


def test_the_data_holds_each_parsers_tokens_with_the_wheel_file_and_line():
    qwen3 = parsers.detector(parsers.REASONING, "qwen3", "0.5.23")
    assert qwen3 is not None and qwen3.tokens == ("<think>", "</think>") and qwen3.cls == "Qwen3Detector"
    assert qwen3.source.startswith("sglang/srt/parser/reasoning_parser.py:")
    gpt_oss = parsers.detector(parsers.REASONING, "gpt-oss", "0.5.10")
    assert gpt_oss is not None and gpt_oss.tokens == ("<|channel|>analysis<|message|>", "<|end|>")
    kimi = parsers.detector(parsers.TOOLS, "kimi_k2", "0.5.23")
    assert kimi is not None and kimi.tokens == ("<|tool_calls_section_begin|>",)
    coder = parsers.detector(parsers.TOOLS, "qwen3_coder", "0.5.23")  # its has_tool_call looks for another attribute
    assert coder is not None and coder.tokens == ("<tool_call>",)
    mistral = parsers.detector(parsers.REASONING, "mistral", "0.5.23")
    assert mistral is not None and mistral.tokens == ("[THINK]", "[/THINK]")
    # a version without the parser has none; a version newer than the data reads the newest
    assert parsers.detector(parsers.TOOLS, "kimi_k3", "0.5.10") is None
    assert parsers.detector(parsers.TOOLS, "kimi_k3", "0.5.99") == parsers.detector(parsers.TOOLS, "kimi_k3", "0.5.23")
    # computed at run time (from the tokenizer): not judged by tokens
    hunyuan = parsers.detector(parsers.TOOLS, "hunyuan", "0.5.23")
    assert hunyuan is not None and hunyuan.computed and parsers.fits(hunyuan, frozenset({"<tool_call>"})) is None


def test_records_that_stay_the_same_across_versions_are_stored_once():
    rec = {"class": "A", "source": "a.py:1", "start": "<x>"}
    data = compact({"0.5.9": {"reasoning": {}, "tools": {"a": rec}},
                    "0.5.10": {"reasoning": {}, "tools": {"a": rec}},
                    "0.5.11": {"reasoning": {}, "tools": {"a": {**rec, "source": "a.py:2"}}},
                    "0.5.12": {"reasoning": {}, "tools": {}},
                    "0.5.13": {"reasoning": {}, "tools": {"a": {**rec, "source": "a.py:2"}}}})
    assert [(s["since"], s["until"], s["source"]) for s in data["tools"]["a"]] == [
        ("0.5.9", "0.5.10", "a.py:1"), ("0.5.11", "0.5.11", "a.py:2"), ("0.5.13", "0.5.13", "a.py:2")]


@pytest.mark.slow
def test_the_data_agrees_with_the_genuine_sglangs_detectors(sglang_venv):
    """Each parser of SGLang 0.5.23, built in the host venv as the server builds it: its reasoning
    detector's start, end and tool-start tokens are the data's, and its tool-call detector says a
    tool call begins at the data's marker (and not in plain text)."""
    data = {kind: {d.name: d for d in parsers.detectors(kind, "0.5.23")} for kind in (parsers.REASONING, parsers.TOOLS)}
    program = (
        "import json, sys\n"
        "import sglang\n"
        "from sglang.srt.parser.reasoning_parser import ReasoningParser\n"
        "from sglang.srt.function_call.function_call_parser import FunctionCallParser\n"
        "markers = json.loads(sys.argv[1])\n"
        "out = {'version': sglang.__version__, 'reasoning': {}, 'tools': {}}\n"
        "for name, cls in ReasoningParser.DetectorMap.items():\n"
        "    try:\n"
        "        d = cls()\n"
        "    except Exception:\n"
        "        continue\n"
        "    out['reasoning'][name] = [d.think_start_token, d.think_end_token, getattr(d, 'tool_start_token', None)]\n"
        "for name, cls in FunctionCallParser.ToolCallParserEnum.items():\n"
        "    try:\n"
        "        d = cls()\n"
        "        out['tools'][name] = [d.has_tool_call(markers.get(name) or '\\x00'), d.has_tool_call('a plain answer')]\n"
        "    except Exception:\n"
        "        continue\n"
        "print(json.dumps(out))\n")
    markers = {n: d.tokens[0] for n, d in data[parsers.TOOLS].items() if d.tokens}
    out = subprocess.run([str(sglang_venv / "bin" / "python"), "-c", program, json.dumps(markers)],
                         capture_output=True, text=True, timeout=300)
    assert out.returncode == 0, out.stderr[-2000:]
    real = json.loads(out.stdout.strip().splitlines()[-1])
    assert real["version"] == "0.5.23"
    assert set(real["reasoning"]) <= set(data[parsers.REASONING]) and len(real["reasoning"]) >= 30
    checked = 0
    for name, (start, end, tool_start) in real["reasoning"].items():
        ours = data[parsers.REASONING][name]
        if ours.computed:
            continue
        assert ours.tokens == tuple(t for t in (start, end) if t), name
        span = next(sp for sp in json.loads(parsers.DATA.read_text())["reasoning"][name] if sp["until"] == "0.5.23")
        assert span["tool_start_token"] == tool_start, name
        checked += 1
    assert checked >= 30
    told = 0
    for name, (at_marker, in_plain) in real["tools"].items():
        if name in markers:
            assert at_marker and not in_plain, name
            told += 1
    assert told >= 30, told


# ------------------------------------------------------------------ the template, read with the model


def test_a_models_chat_template_and_tokens_give_its_atoms():
    atoms = template_atoms(GPT_OSS_TOKENIZER, GPT_OSS_TEMPLATE)
    assert atoms is not None and {"<|start|>", "<|channel|>", "<|message|>", "<|end|>", "<|call|>"} <= set(atoms)
    qwen = template_atoms(QWEN3_THINKING_TOKENIZER)  # the template inside tokenizer_config.json
    assert qwen is not None and {"<think>", "</think>", "<tool_call>", "<|im_start|>"} <= set(qwen)
    assert template_atoms({"tokenizer_class": "X"}) is None  # no template: nothing to check against
    assert template_atoms({"chat_template": [{"name": "default", "template": "<|a|>{{ x }}"}, {"name": "tool_use"}]}) \
        == ("<|a|>",)


def test_the_templates_own_tokens_are_kept_whatever_the_tokenizer_declares():
    """A tokenizer may declare thousands of tokens (Llama 3's 256 reserved ones, a vocabulary's
    worth of added tokens): the atoms are bounded, and what the template writes is kept first."""
    added = {str(i): {"content": f"<|reserved_special_token_{i}|>"} for i in range(3000)}
    added |= {str(5000 + i): {"content": f"<|a_{i:05d}|>"} for i in range(3000)}
    atoms = template_atoms({"chat_template": "<|start_header_id|>{{ m }}<|eot_id|><tool_call>",
                            "added_tokens_decoder": added})
    assert atoms is not None and len(atoms) <= 1000
    assert {"<|start_header_id|>", "<|eot_id|>", "<tool_call>"} <= set(atoms)
    assert not any("reserved" in a for a in atoms)


def test_a_local_folders_chat_template_file_is_read(tmp_path):
    (tmp_path / "config.json").write_text((CONFIGS / "corpus" / "gpt_oss__gpt-oss-20b.json").read_text())
    (tmp_path / "tokenizer_config.json").write_text(json.dumps(GPT_OSS_TOKENIZER))
    (tmp_path / "chat_template.jinja").write_text(GPT_OSS_TEMPLATE)
    facts = load_model_facts(str(tmp_path))
    assert facts.chat_atoms is not None and "<|channel|>" in facts.chat_atoms


def test_the_host_program_returns_the_template_and_the_tokens_text(tmp_path):
    from gpuops.core.hosts.host import script_source
    from gpuops.core.hosts.programs import model_config

    (tmp_path / "config.json").write_text("{}")
    (tmp_path / "tokenizer_config.json").write_text(json.dumps(GPT_OSS_TOKENIZER))
    (tmp_path / "chat_template.jinja").write_text(GPT_OSS_TEMPLATE)
    out = subprocess.run(["python3", "-c", script_source(model_config), str(tmp_path)], capture_output=True, text=True,
                         timeout=30)
    doc = json.loads(out.stdout)
    assert doc["chat_template"] == GPT_OSS_TEMPLATE
    tok = doc["tokenizer"]
    assert tok["tokenizer_class"] == GPT_OSS_TOKENIZER["tokenizer_class"]
    assert all(set(v) == {"content"} for v in tok["added_tokens_decoder"].values())  # the text only
    assert template_atoms(tok, doc["chat_template"]) == template_atoms(GPT_OSS_TOKENIZER, GPT_OSS_TEMPLATE)


# ------------------------------------------------------------------ the choice


def test_gpt_oss_keeps_its_familys_parsers_the_template_shows_they_fit():
    facts = _facts("corpus/gpt_oss__gpt-oss-20b.json", "openai/gpt-oss-20b", tokenizer_config=GPT_OSS_TOKENIZER,
                   chat_template=GPT_OSS_TEMPLATE)
    for version in ("0.5.10", "0.5.23"):
        reasoning, tool = parser_choice(facts, version, 0), parser_choice(facts, version, 1)
        assert (reasoning.name, tool.name) == ("gpt-oss", "gpt-oss")
        assert "the chat template writes <|channel|>analysis<|message|> … <|end|> (GptOssDetector" in reasoning.why
        assert "GptOssDetector, sglang/srt/function_call/gpt_oss_detector.py:" in tool.why
        assert reasoning.warning is None and tool.warning is None


def test_glm_and_qwen3_keep_their_familys_parsers_on_their_real_templates():
    glm = _facts("corpus/glm_moe_dsa__GLM-5.json", "zai-org/GLM-5", chat_template=GLM_TEMPLATE)
    assert (parser_choice(glm, "0.5.23", 0).name, parser_choice(glm, "0.5.23", 1).name) == ("glm45", "glm45")
    qwen = _facts("qwen3__Qwen3-8B.json", "Qwen/Qwen3-4B-Thinking-2507", tokenizer_config=QWEN3_THINKING_TOKENIZER)
    tool = parser_choice(qwen, "0.5.23", 1)
    assert tool.name == "qwen" and "the chat template writes <tool_call> (Qwen25Detector" in tool.why  # one line


def test_a_familys_parser_the_template_never_writes_is_replaced_by_the_one_that_fits_with_a_warning():
    """A checkpoint whose template is not its family's (here Kimi-K2's config with gpt-oss' template):
    the family's kimi_k2 waits for a token the model never writes, so tool calls would come back as
    text; the one parser whose token the template writes is chosen, and the plan warns."""
    facts = _facts("kimi_k2__Kimi-K2-Instruct.json", "moonshotai/Kimi-K2-Instruct",
                   tokenizer_config=GPT_OSS_TOKENIZER, chat_template=GPT_OSS_TEMPLATE)
    tool = parser_choice(facts, "0.5.23", 1)
    assert tool.name == "gpt-oss"
    assert tool.warning is not None and "kimi_k2 waits for <|tool_calls_section_begin|>" in tool.warning
    from gpuops.core import engines

    warnings = engines.get("sglang").model_warnings(facts, "0.5.23")
    assert any("never writes" in w and "--tool-call-parser gpt-oss instead" in w for w in warnings), warnings


def test_a_model_in_no_family_gets_auto_where_several_fit_and_none_with_the_reason_where_auto_is_missing():
    facts = _facts("corpus/exaone4__EXAONE-4.0-32B.json", "LGAI-EXAONE/EXAONE-4.0-32B", chat_template=GLM_TEMPLATE)
    new, old = parser_choice(facts, "0.5.23", 1), parser_choice(facts, "0.5.10", 1)
    assert new.name == "auto" and "picks among them from the template when the server starts" in new.why
    assert old.name is None and "has no auto" in old.why and "--tool-call-parser" in old.why
    unique = _facts("corpus/exaone4__EXAONE-4.0-32B.json", "x/y", tokenizer_config=GPT_OSS_TOKENIZER,
                    chat_template=GPT_OSS_TEMPLATE)
    assert parser_choice(unique, "0.5.10", 1).name == "gpt-oss"  # one parser's token: that one, any version
    nothing = _facts("corpus/exaone4__EXAONE-4.0-32B.json", "x/z", chat_template="{{ messages }}")
    assert parser_choice(nothing, "0.5.23", 1).name is None


def test_without_a_template_the_familys_parser_stays_and_says_it_was_not_checked():
    facts = _facts("kimi_k2__Kimi-K2-Instruct.json", "moonshotai/Kimi-K2-Instruct")
    tool = parser_choice(facts, "0.5.23", 1)
    assert tool.name == "kimi_k2" and "no chat template read" in tool.why


def test_the_plan_carries_the_checked_parser_and_its_reason():
    from gpuops.core.planning.hostfacts import offline_target
    from gpuops.core.planning.inputs import Wishes
    from gpuops.core.planning.plan import build_plan

    facts = _facts("corpus/gpt_oss__gpt-oss-20b.json", "openai/gpt-oss-20b", tokenizer_config=GPT_OSS_TOKENIZER,
                   chat_template=GPT_OSS_TEMPLATE)
    plan = build_plan(facts, offline_target(1, 80), Wishes(tp=1, engine_version="0.5.23"))
    argv = plan.argv
    assert argv[argv.index("--tool-call-parser") + 1] == "gpt-oss"
    why = " ".join(r.why for r in plan.rules if r.id == "tool-call-parser")
    assert "the chat template writes" in why
