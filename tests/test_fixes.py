"""Applying a fix to a plan (gpuops.core.diagnose.fixes): on real plans built by the planner, the new plan
changes exactly as the diff says, the unit is rendered as the planner renders it, bad patches
are refused with nothing changed, and the input plan is never touched."""

from __future__ import annotations

import copy
import json
from pathlib import Path

import pytest

from gpuops.core.diagnose.fixes import apply_patch, describe_patch, validate_patch
from gpuops.core.planning.hostfacts import offline_target
from gpuops.core.planning.model_facts import facts_from_config
from gpuops.core.domain import Invalid, Plan, split_flags
from gpuops.core.planning.plan import Wishes, build_plan

CONFIGS = Path(__file__).parent / "data" / "configs"
H200 = 143771 / 1024  # GiB


def apply(doc: dict, patch, **kw) -> tuple[dict, list]:
    """apply_patch on the typed plan of a plan document; the new plan as a document."""
    new, diff = apply_patch(Plan.from_json(doc), patch, **kw)
    return new.to_json(), diff


def qwen35_plan(version: str = "0.5.10", launcher: str = "systemd", **wishes) -> dict:
    facts = facts_from_config(json.loads((CONFIGS / "qwen3_5__Qwen3.5-122B-A10B.json").read_text()),
                              id="Qwen/Qwen3.5-122B-A10B", source="hub")
    return build_plan(facts, offline_target(4, H200, launcher=launcher),
                      Wishes(tp=4, engine_version=version, **wishes)).to_json()


def flag_lines(plan: dict) -> list[str]:
    return [" ".join([n, *v]) for n, v in split_flags(plan["argv"])]


def assert_diff_is_the_change(before: dict, after: dict, diff: list[tuple[str, str]]) -> None:
    """The diff's "-" lines are exactly what left argv/env, its "+" lines what came in."""
    old = flag_lines(before) + [f"{k}={v}" for k, v in before["env"].items()]
    new = flag_lines(after) + [f"{k}={v}" for k, v in after["env"].items()]
    assert sorted(t for op, t in diff if op == "-") == sorted(x for x in old if x not in new)
    assert sorted(t for op, t in diff if op == "+") == sorted(x for x in new if x not in old)


def test_a_flag_change_edits_argv_and_the_unit_exactly_as_the_planner_would():
    plan = qwen35_plan()
    before = copy.deepcopy(plan)
    new, diff = apply(plan, {"set_flags": {"--mem-fraction-static": ["0.85"]}}, why="kv-cache-oom")
    assert plan == before  # never mutated
    assert diff == [("-", "--mem-fraction-static 0.8"), ("+", "--mem-fraction-static 0.85")]
    assert_diff_is_the_change(plan, new, diff)
    # the flag kept its place; nothing else moved
    assert [n for n, _ in split_flags(new["argv"])] == [n for n, _ in split_flags(plan["argv"])]
    # the planner asked for 0.85 writes the same argv and the same unit, byte for byte
    planned = qwen35_plan(mem_fraction_static=0.85)
    assert new["argv"] == planned["argv"] and new["unit"] == planned["unit"]
    assert "    --mem-fraction-static 0.85 \\\n" in new["unit"]["text"]
    assert "--mem-fraction-static 0.8 " not in new["unit"]["text"]
    assert new["rules"][-1] == {"id": "fix", "why": "kv-cache-oom", "adds": ["--mem-fraction-static", "0.85"],
                                "removes": ["--mem-fraction-static", "0.8"]}
    assert new["warnings"][-1] == "a fix changed --mem-fraction-static: the fit figures are from before it"
    assert json.loads(json.dumps(new)) == new


def test_the_mtp_fix_on_a_plan_that_lacks_the_two_flags():
    """The motivating crash: a plan without the mamba strategy flag and SGLANG_ENABLE_SPEC_V2."""
    good = qwen35_plan("0.5.10")
    broken, diff = apply(good, {"remove_flags": ["--mamba-scheduler-strategy"],
                                      "unset_env": ["SGLANG_ENABLE_SPEC_V2"]})
    assert diff == [("-", "--mamba-scheduler-strategy extra_buffer"), ("-", "SGLANG_ENABLE_SPEC_V2=1")]
    assert "--mamba-scheduler-strategy" not in broken["unit"]["text"]
    fixed, diff = apply(broken, {"set_flags": {"--mamba-scheduler-strategy": ["extra_buffer"]},
                                       "set_env": {"SGLANG_ENABLE_SPEC_V2": "1"}})
    assert diff == [("+", "--mamba-scheduler-strategy extra_buffer"), ("+", "SGLANG_ENABLE_SPEC_V2=1")]
    assert_diff_is_the_change(broken, fixed, diff)
    assert fixed["env"] == good["env"]
    assert "    --mamba-scheduler-strategy extra_buffer\n" in fixed["unit"]["text"]  # appended: the last line
    assert sorted(flag_lines(fixed)) == sorted(flag_lines(good))


def test_port_moves_in_both_places_and_env_and_switches():
    plan = qwen35_plan("0.5.23")
    new, diff = apply(plan, {"port": 30001, "set_flags": {"--disable-custom-all-reduce": []},
                                   "set_env": {"NCCL_DEBUG": "INFO"}, "unset_env": ["CUDA_VISIBLE_DEVICES"]})
    assert new["port"] == 30001 and dict(split_flags(new["argv"]))["--port"] == ("30001",)
    assert diff == [("+", "--disable-custom-all-reduce"),
                    ("-", "--port 30000"), ("+", "--port 30001"),
                    ("-", "CUDA_VISIBLE_DEVICES=0,1,2,3"), ("+", "NCCL_DEBUG=INFO")]
    assert_diff_is_the_change(plan, new, diff)
    assert new["env"] == {"NCCL_DEBUG": "INFO"}
    assert "    --port 30001 \\\n" in new["unit"]["text"] and new["unit"]["text"].endswith(
        "    --disable-custom-all-reduce\nRestart=no\nKillMode=control-group\nTimeoutStopSec=60\n"
        "LimitNOFILE=1048576\nStandardOutput=journal\nStandardError=journal\n\n[Install]\n"
        "WantedBy=multi-user.target\n")


def test_a_patch_that_changes_nothing_gives_an_empty_diff_and_the_same_plan():
    plan = qwen35_plan()
    for patch in ({"set_flags": {"--mem-fraction-static": ["0.8"]}}, {"remove_flags": ["--disable-radix-cache"]},
                  {"unset_env": ["NCCL_DEBUG"]}, {"port": 30000}, {}):
        new, diff = apply(plan, patch)
        assert diff == [] and new == plan


def test_repeated_flags_are_replaced_by_one_and_removed_everywhere():
    plan = qwen35_plan()
    plan["argv"] += ["--json-model-override-args", "{}", "--json-model-override-args", "{\"a\": 1}"]
    new, diff = apply(plan, {"set_flags": {"--json-model-override-args": ["{\"b\": 2}"]}})
    assert diff == [("-", "--json-model-override-args {}"), ("-", "--json-model-override-args {\"a\": 1}"),
                    ("+", "--json-model-override-args {\"b\": 2}")]
    assert [v for n, v in split_flags(new["argv"]) if n == "--json-model-override-args"] == [("{\"b\": 2}",)]
    new, diff = apply(plan, {"remove_flags": ["--json-model-override-args"]})
    assert len(diff) == 2 and "--json-model-override-args" not in new["argv"]


def test_a_process_plan_has_no_unit_to_render():
    plan = qwen35_plan(launcher="process")
    new, diff = apply(plan, {"set_flags": {"--context-length": ["131072"]}})
    assert new["unit"] is None and diff == [("-", "--context-length 262144"), ("+", "--context-length 131072")]


@pytest.mark.parametrize("patch, message", [
    ("nope", "a plan_patch must be a JSON object"),
    ({"set_flag": {}}, "plan_patch: unknown key(s) set_flag"),
    ({"set_flags": {"-x": []}}, "'-x' is not a flag name"),
    ({"set_flags": {"--Mem": ["1"]}}, "'--Mem' is not a flag name"),
    ({"set_flags": {"--a b": []}}, "'--a b' is not a flag name"),
    ({"set_flags": {"--x": "1"}}, "values must be a list"),
    ({"set_flags": {"--x": [1]}}, "values must be strings"),
    ({"set_flags": {"--x": ["a\nExecStartPre=/bin/sh"]}}, "may not contain a newline"),
    ({"set_flags": {"--port": ["1"]}}, "--port cannot be patched"),
    ({"remove_flags": ["--api-key"]}, "--api-key cannot be patched (secrets never go in argv)"),
    ({"remove_flags": "--x"}, "remove_flags must be a list"),
    ({"set_env": {"A-B": "1"}}, "'A-B' is not an environment variable name"),
    ({"set_env": {"A": "1\n"}}, "may not contain a newline"),
    ({"unset_env": ["1A"]}, "'1A' is not an environment variable name"),
    ({"port": True}, "port must be an integer 1..65535"),
    ({"port": 70000}, "port must be an integer 1..65535"),
    ({"port": "30001"}, "port must be an integer 1..65535"),
    ({"set_flags": {"--x": []}, "remove_flags": ["--x"]}, "--x both set and removed"),
    ({"set_env": {"A": "1"}, "unset_env": ["A"]}, "A both set and removed"),
])
def test_bad_patches_are_refused_and_nothing_changes(patch, message):
    plan = qwen35_plan()
    before = copy.deepcopy(plan)
    with pytest.raises(ValueError) as exc:
        apply(plan, patch)
    assert message in str(exc.value) and "\n" not in str(exc.value)
    assert plan == before


def test_not_a_plan_is_refused():
    with pytest.raises(Invalid, match="missing required field"):
        apply({"env": {}}, {"port": 1})


def test_describe_patch_and_validate_normalizes():
    patch = {"set_flags": {"--mem-fraction-static": ["0.85"], "--enable-metrics": []},
             "remove_flags": ["--disable-radix-cache"], "set_env": {"NCCL_DEBUG": "INFO"},
             "unset_env": ["NCCL_P2P_DISABLE"], "port": 30001}
    assert describe_patch(patch) == ("set --mem-fraction-static 0.85; set --enable-metrics; remove --disable-radix-cache; "
                                     "set NCCL_DEBUG=INFO; unset NCCL_P2P_DISABLE; port 30001")
    assert validate_patch({"port": 1}) == {"set_flags": {}, "remove_flags": [], "set_env": {}, "unset_env": [], "port": 1}
