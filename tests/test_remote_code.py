"""--trust-remote-code where the SGLang version cannot read the checkpoint without its own Python,
and only there (issue 25): the decision from the wheels' data (extract/remote_code.py), checked
against the genuine SGLang 0.5.23 and its transformers in the host venv."""

from __future__ import annotations

import json
import subprocess
import zipfile
from pathlib import Path

import pytest

from gpuops.core.domain import split_flags
from gpuops.core.engines.sglang import remote_code as rc
from gpuops.core.engines.sglang.extract.remote_code import read_transformers, sglang_config_types
from gpuops.core.planning.hostfacts import offline_target
from gpuops.core.planning.inputs import Previous
from gpuops.core.planning.model_facts import auto_map_entries, facts_from_config, load_model_facts
from gpuops.core.planning.plan import Wishes, build_plan

CONFIGS = Path(__file__).parent / "data" / "configs"
H200 = 143771 / 1024


def corpus(stem: str, *, tokenizer: bool = True, **changes):
    config = {**json.loads((CONFIGS / f"{stem}.json").read_text()), **changes}
    tok = CONFIGS / "tokenizers" / f"{stem}.json"
    return facts_from_config(config, id=f"org/{stem.split('__')[1]}", source="hub",
                             tokenizer_config=json.loads(tok.read_text()) if tokenizer and tok.is_file() else None)


def flags_of(plan) -> dict:
    return dict(split_flags(plan.argv))


def test_kimi_k2s_tokenizer_is_its_own_code_on_every_version():
    kimi = corpus("kimi_k2__Kimi-K2-Instruct")
    for version in ("0.5.9", "0.5.10", "0.5.23"):
        need = rc.remote_code(kimi, version)
        assert need.needed and "tokenization_kimi.py" in need.files, (version, need)
        assert any("TikTokenTokenizer" in r for r in need.reasons)
    # its config: model_type kimi_k2 is SGLang's own from 0.5.11 on (an alias of DeepSeek-V3's), not before
    old = rc.remote_code(corpus("kimi_k2__Kimi-K2-Instruct", tokenizer=False), "0.5.10")
    assert old.needed and old.files == ("configuration_deepseek.py",), old
    assert "transformers 5.3.0 (SGLang 0.5.10's)" in old.reasons[0]
    assert not rc.remote_code(corpus("kimi_k2__Kimi-K2-Instruct", tokenizer=False), "0.5.23").needed


def test_a_checkpoint_that_ships_code_transformers_does_not_need_gets_no_flag():
    """DeepSeek-V3's auto_map names its own config and model code; transformers has both since 4.5x."""
    ds = corpus("deepseek_v3__DeepSeek-V3")
    assert ds.auto_map and ds.model_type == "deepseek_v3"
    for version in ("0.5.9", "0.5.23"):
        assert rc.remote_code(ds, version) == rc.RemoteCode(False, (), (), None)
    plan = build_plan(ds, offline_target(8, H200), Wishes(tp=8, engine_version="0.5.23"))
    assert "--trust-remote-code" not in flags_of(plan)
    assert not any("trust-remote-code" in w for w in plan.warnings)


def test_the_plan_says_what_the_flag_lets_run_and_where():
    plan = build_plan(corpus("kimi_k2__Kimi-K2-Instruct"), offline_target(8, H200), Wishes(tp=8, engine_version="0.5.23"))
    assert flags_of(plan)["--trust-remote-code"] == ()
    rule = next(r for r in plan.rules if r.id == "trust-remote-code")
    assert "TikTokenTokenizer" in rule.why and "tokenization_kimi.py" in rule.why and "rights" in rule.why
    warning = next(w for w in plan.warnings if w.startswith("--trust-remote-code"))
    assert "tokenization_kimi.py" in warning and "read that code" in warning


def test_a_new_model_type_with_its_code_needs_the_flag_and_one_without_it_cannot_be_read():
    base = "qwen3__Qwen3-8B"
    shipped = corpus(base, model_type="acme_lm", architectures=["AcmeForCausalLM"],
                     auto_map={"AutoConfig": "configuration_acme.AcmeConfig",
                               "AutoModelForCausalLM": "modeling_acme.AcmeForCausalLM"})
    need = rc.remote_code(shipped, "0.5.23")
    assert need.needed and need.files == ("configuration_acme.py", "modeling_acme.py"), need
    assert any("transformers fallback builds the model from modeling_acme.py" in r for r in need.reasons)
    plan = build_plan(shipped, offline_target(1, H200), Wishes(tp=1, engine_version="0.5.23"))
    assert "--trust-remote-code" in flags_of(plan)

    bare = corpus(base, model_type="acme_lm", architectures=["AcmeForCausalLM"])
    need = rc.remote_code(bare, "0.5.23")
    assert not need.needed and need.unreadable and "ships no code" in need.unreadable
    plan = build_plan(bare, offline_target(1, H200), Wishes(tp=1, engine_version="0.5.23"))
    assert "--trust-remote-code" not in flags_of(plan)
    assert any("cannot read its config" in w for w in plan.warnings)


def test_like_a_deployment_that_trusted_remote_code_drops_it_for_a_model_that_needs_none():
    prev = Previous("old.service", ("/opt/sglang/bin/python3", "-m", "sglang.launch_server", "--model-path",
                                    "moonshotai/Kimi-K2-Instruct", "--trust-remote-code", "--tp-size", "8"))
    plan = build_plan(corpus("qwen3__Qwen3-8B"), offline_target(1, H200), Wishes(tp=1, engine_version="0.5.23", like=prev))
    assert "--trust-remote-code" not in flags_of(plan)
    dropped = {r.removes[0]: r.why for r in plan.rules if r.id == "like-drop"}
    assert "without the checkpoint's own Python" in dropped["--trust-remote-code"]
    kept = build_plan(corpus("kimi_k2__Kimi-K2-Instruct"), offline_target(8, H200),
                      Wishes(tp=8, engine_version="0.5.23", like=prev))
    assert "--trust-remote-code" in flags_of(kept)


def test_an_auto_map_of_another_shape_still_counts_but_never_reaches_the_plan_as_written():
    entries = auto_map_entries({"AutoTokenizer": ["x; rm -rf / #.Tok", None], "Auto Bad": "m.C",
                                "AutoConfig": "org/repo--configuration_x.XConfig"})
    assert entries == (("AutoTokenizer", "?"), ("?", "m.C"), ("AutoConfig", "org/repo--configuration_x.XConfig"))
    assert auto_map_entries(["not", "a", "dict"]) == ()
    tok = corpus("qwen3__Qwen3-8B")
    odd = facts_from_config(json.loads((CONFIGS / "qwen3__Qwen3-8B.json").read_text()), id="org/x",
                            tokenizer_config={"tokenizer_class": "OddTokenizer", "auto_map": {"AutoTokenizer": "$(id).T"}})
    need = rc.remote_code(odd, "0.5.23")
    assert need.needed and need.files == ("its own code",) and "$(" not in " ".join(need.reasons)
    assert tok.tokenizer_class is None


def test_a_local_model_folders_tokenizer_config_is_read(tmp_path):
    (tmp_path / "config.json").write_text((CONFIGS / "kimi_k2__Kimi-K2-Instruct.json").read_text())
    (tmp_path / "tokenizer_config.json").write_text((CONFIGS / "tokenizers" / "kimi_k2__Kimi-K2-Instruct.json").read_text())
    facts = load_model_facts(str(tmp_path))
    assert facts.tokenizer_class == "TikTokenTokenizer"
    assert facts.tokenizer_auto_map == (("AutoTokenizer", "tokenization_kimi.TikTokenTokenizer"),)


def test_the_host_program_returns_the_tokenizers_class_and_code(tmp_path):
    from gpuops.core.hosts.host import script_source
    from gpuops.core.hosts.programs import model_config

    (tmp_path / "config.json").write_text("{}")
    (tmp_path / "tokenizer_config.json").write_text(json.dumps({
        "tokenizer_class": "TikTokenTokenizer",
        "auto_map": {"AutoTokenizer": ["tokenization_kimi.TikTokenTokenizer", None]}}))
    out = subprocess.run(["python3", "-c", script_source(model_config), str(tmp_path)], capture_output=True, text=True,
                         timeout=30)
    doc = json.loads(out.stdout)
    assert doc["tokenizer"]["tokenizer_class"] == "TikTokenTokenizer"
    assert doc["tokenizer"]["auto_map"] == {"AutoTokenizer": ["tokenization_kimi.TikTokenTokenizer", None]}
    assert doc["chat_template"] is None  # (no chat_template.jinja; its template and tokens: tests/test_parsers.py)


# ------------------------------------------------------------------ the extractor, on sources of each shape


def test_the_extractor_finds_every_way_sglang_registers_a_config_type():
    sources = {
        "sglang/srt/configs/a.py": 'class AConfig:\n    model_type = "a_type"\n'
                                   'class BConfig:\n    model_type: str = "b_type"\n'
                                   'class CConfig:\n    model_type = "c_type"\n'
                                   'LISTED = [CConfig]\n',
        "sglang/srt/configs/d.py": 'class DConfig:\n    model_type = "d_type"\n'
                                   'for cls in (DConfig,):\n    CONFIG_MAPPING.register(cls.model_type, cls)\n'
                                   'for name, cls in {"e_type": object}.items():\n    CONFIG_MAPPING.register(name, cls)\n'
                                   'CONFIG_MAPPING._extra_content["f_type"] = object\n'
                                   'AutoConfig.register("g_type", object)\n',
        "sglang/srt/utils/hf_transformers/common.py": '_CONFIG_REGISTRY = {c.model_type: c for c in [AConfig, BConfig]}\n'
                                                      '_CONFIG_REGISTRY["h_type"] = object\n'
                                                      '_CONFIG_REGISTRY.update({c.model_type: c for c in LISTED})\n',
        "sglang/srt/configs/unused.py": 'class ZConfig:\n    model_type = "never_registered"\n',
    }
    assert sglang_config_types(sources) == ["a_type", "b_type", "c_type", "d_type", "e_type", "f_type", "g_type",
                                            "h_type"]


def test_the_extractor_reads_transformers_config_names_and_tokenizer_classes(tmp_path):
    wheel = tmp_path / "transformers-9.9.9-py3-none-any.whl"
    with zipfile.ZipFile(wheel, "w") as z:
        z.writestr("transformers/models/auto/auto_mappings.py",
                   'CONFIG_MAPPING_NAMES = OrderedDict([("llama", "LlamaConfig"), ("qwen3", "Qwen3Config")])\n')
        z.writestr("transformers/models/auto/configuration_auto.py",
                   'CONFIG_MAPPING_NAMES.update([("extra", "ExtraConfig")])\n'
                   'CONFIG_MAPPING_NAMES = OrderedDict(**{"gpt-sw3": "GPT2Config"}, **CONFIG_MAPPING_NAMES)\n')
        z.writestr("transformers/models/llama/tokenization_llama.py", "class LlamaTokenizer:\n    pass\n")
        z.writestr("transformers/tokenization_utils_base.py", "class PreTrainedTokenizerBase:\n    pass\n")
    types, tokenizers = read_transformers(wheel)
    assert types == ["extra", "gpt-sw3", "llama", "qwen3"]
    assert tokenizers == ["LlamaTokenizer", "PreTrainedTokenizerBase"]


def test_the_shipped_data_cites_its_wheels_and_pins():
    data = json.loads(rc.DATA.read_text())
    assert data["sglang"]["0.5.23"]["transformers"] == "5.19.0" and data["sglang"]["0.5.9"]["transformers"] == "4.57.1"
    for pin in {e["transformers"] for e in data["sglang"].values()}:
        assert f"transformers {pin}" in data["wheels"] and len(data["wheels"][f"transformers {pin}"]["sha256"]) == 64
    assert rc.transformers_of("0.5.23") == "5.19.0"
    assert {"kimi_k2", "qwen3_5_moe", "nemotron_h", "deepseek_v3", "llama"} <= rc.config_types("0.5.23")
    assert "kimi_k2" not in rc.config_types("0.5.10")


@pytest.mark.slow
def test_the_data_agrees_with_the_genuine_sglang_and_its_transformers(sglang_venv):
    """What SGLang 0.5.23 and transformers 5.19.0, imported in the host venv, read: the config types
    (transformers' own and those SGLang registers) and the tokenizer classes transformers exports."""
    program = (
        "import json, transformers\n"
        "from transformers.models.auto.configuration_auto import CONFIG_MAPPING_NAMES, CONFIG_MAPPING\n"
        "from transformers.models.auto.tokenization_auto import TOKENIZER_MAPPING_NAMES\n"
        "import sglang\n"
        "from sglang.srt.utils.hf_transformers.common import _CONFIG_REGISTRY\n"
        "import sglang.srt.utils.hf_transformers\n"
        "names = {n for v in TOKENIZER_MAPPING_NAMES.values() for n in (v if isinstance(v, tuple) else (v,)) if n}\n"
        "print(json.dumps({'sglang': sglang.__version__, 'transformers': transformers.__version__,\n"
        "  'types': sorted(set(CONFIG_MAPPING_NAMES) | set(_CONFIG_REGISTRY) | set(CONFIG_MAPPING._extra_content)),\n"
        "  'mapped_tokenizers': sorted(names),\n"
        "  'exported': sorted(n for n in dir(transformers) if 'Tokenizer' in n)}))\n")
    out = subprocess.run([str(sglang_venv / "bin" / "python"), "-c", program], capture_output=True, text=True, timeout=240)
    assert out.returncode == 0, out.stderr[-2000:]
    real = json.loads(out.stdout.strip().splitlines()[-1])
    version = real["sglang"]
    assert rc.transformers_of(version) == real["transformers"]
    assert sorted(rc.config_types(version)) == real["types"]
    ours = rc.tokenizer_classes(version)
    # every tokenizer class transformers maps a model type to, and every one its top level exports, is one
    # the data knows: gpuops never says "no transformers class" of a class transformers has
    assert set(real["mapped_tokenizers"]) <= ours, sorted(set(real["mapped_tokenizers"]) - ours)
    exported = {n for n in real["exported"] if n.endswith(("Tokenizer", "TokenizerFast"))}
    assert exported <= ours, sorted(exported - ours)


def test_no_name_reaches_the_data_that_is_not_an_identifier():
    data = json.loads(rc.DATA.read_text())
    for section in ("sglang", "transformers"):
        for entry in data[section].values():
            for key, names in entry.items():
                if isinstance(names, list):
                    assert all(isinstance(n, str) and n and len(n) < 100 and n.replace("-", "_").replace(".", "_")
                               .isidentifier() for n in names), (key, [n for n in names if not n.isidentifier()][:5])
