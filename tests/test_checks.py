"""The functional checks (core/checks.py) against the simulated SGLang server, run for real as
`python -m sglang.launch_server` on a simulated host: with both parsers and MTP, with neither,
with an API key, and through a deployment made by `gpuops deploy` over SSH."""

from __future__ import annotations

import json
import socket
import subprocess

import httpx
import pytest

from tests.plans import make_plan

from gpuops.core.bench import functional as checks
from gpuops.core.bench.functional import accept_length_from_metrics, run_checks, schema_problem, tool_call_problem, WEATHER
from gpuops.sim.host import setup_simhost
from gpuops.core.deploy.store import Store
from tests.sshd import free_port
from tests.test_cli import GPUOPS
from tests.test_deploy import deploy
from tests.test_sglang_sim import MTP, QWEN35, Server, model_dir

KEY = "sk-checks-Secret-9f3a"
LLAMA = "llama3__Llama-3.1-8B-Instruct.json"
PARSERS = ["--reasoning-parser", "qwen3", "--tool-call-parser", "qwen3_coder"]
# what a plan for Qwen3.5 with tool calling, thinking and MTP launches with
PLAN = make_plan("qwen122", model="Qwen/Qwen3.5-122B-A10B",
                 argv=["--model-path", "Qwen/Qwen3.5-122B-A10B", *PARSERS, "--speculative-algorithm", "NEXTN",
                       "--speculative-num-steps", "3"])


@pytest.fixture(scope="module")
def servers(tmp_path_factory):
    """Qwen3.5 with both parsers, MTP, metrics and an API key; Qwen3.5 without parsers or MTP (metrics
    on); a Llama that does not think."""
    root = tmp_path_factory.mktemp("checks")
    qwen = model_dir(root / "models", QWEN35, 250_170_000_000, shards=39)
    llama = model_dir(root / "models", LLAMA, 16_060_522_496, shards=4)
    host = setup_simhost(root / "sim", gpus=5, engine_version="0.5.23", pace=0.02)
    host.set_sim(token_delay_s=0.001)
    big = ["--model-path", qwen, "--tp", "2", "--served-model-name", "qwen122", "--mem-fraction-static", "0.9"]
    full = Server(host, *big, *PARSERS, *MTP, "--mamba-radix-cache-strategy", "extra_buffer", "--enable-metrics",
                  "--api-key", KEY, env={"CUDA_VISIBLE_DEVICES": "0,1"})
    bare = Server(host, *big, "--enable-metrics", env={"CUDA_VISIBLE_DEVICES": "2,3"})
    plain = Server(host, "--model-path", llama, "--served-model-name", "llama8b", env={"CUDA_VISIBLE_DEVICES": "4"})
    try:
        for srv in (full, bare, plain):
            srv.wait_for("fired up")
        yield {"full": full, "bare": bare, "plain": plain}
    finally:
        for srv in (full, bare, plain):
            srv.stop()


def by_name(results) -> dict:
    assert [r.name for r in results] == ["tool_calls", "thinking", "mtp"]
    return {r.name: r for r in results}


async def test_everything_passes_with_both_parsers_and_mtp(servers):
    full = servers["full"]
    res = by_name(await run_checks(full.url, model="qwen122", api_key=KEY, plan=PLAN))
    assert all(r.ok is True for r in res.values()), [r.to_json() for r in res.values()]
    tools = res["tool_calls"]
    assert tools.details["tool_call_parser"] == tools.details["plan_tool_call_parser"] == "qwen3_coder"
    for mode in ("non-stream", "stream"):
        (call,) = tools.details[mode]["tool_calls"]
        assert json.loads(call["function"]["arguments"]) == {"city": "Paris", "unit": "celsius"}
        assert tools.details[mode]["finish_reason"] == "tool_calls"
    assert tools.reason.startswith("get_weather({")
    thinking = res["thinking"]
    assert thinking.details["stream"]["reasoning_chars"] > 0
    assert thinking.details["thinking-off"]["reasoning_chars"] == 0
    mtp = res["mtp"]
    assert mtp.details["source"] == "/server_info" and mtp.details["accept_length"] == pytest.approx(3.13)
    assert mtp.reason == "accept length 3.13 (EAGLE, from /server_info)"
    # the key went only into the header: nowhere in what the checks report
    assert KEY not in json.dumps([r.to_json() for r in res.values()])


async def test_parsers_off_fail_with_the_reason_when_the_plan_asked(servers):
    bare = servers["bare"]
    res = by_name(await run_checks(bare.url, model="qwen122", plan=PLAN))
    assert res["tool_calls"].ok is False
    assert res["tool_calls"].reason == ("no tool_calls in the answer: server started without --tool-call-parser "
                                        "(the call is raw text in content) (non-stream)")
    assert res["thinking"].ok is False
    assert res["thinking"].reason == ("reasoning text is in content: server started without --reasoning-parser "
                                      "(non-stream)")
    assert res["mtp"].ok is False
    assert res["mtp"].reason == ("the plan asks for --speculative-algorithm NEXTN but the server runs without "
                                 "speculative decoding")


async def test_without_a_plan_what_is_not_configured_is_skipped(servers):
    # no tool parser, no speculative decoding, no plan: skipped; Qwen3.5 thinks anyway, so its <think> text
    # leaking into content is a failure even though nobody asked for thinking
    res = by_name(await run_checks(servers["bare"].url, model="qwen122"))
    assert res["tool_calls"].ok is None and "without --tool-call-parser" in res["tool_calls"].reason
    assert res["thinking"].ok is False and "server started without --reasoning-parser" in res["thinking"].reason
    assert res["mtp"].ok is None and res["mtp"].reason == "no speculative decoding on this server"
    # a model that does not think: thinking is skipped too
    res = by_name(await run_checks(servers["plain"].url, model="llama8b"))
    assert [r.ok for r in res.values()] == [None, None, None]
    assert res["thinking"].reason == ("the server runs without --reasoning-parser, no plan asks for thinking, and "
                                      "the answer has no reasoning text")


async def test_the_api_key_is_needed_and_never_reported(servers):
    full = servers["full"]
    res = await run_checks(full.url, model="qwen122", plan=PLAN)
    assert [(r.ok, r.reason) for r in res] == [(False, "HTTP 401 from /server_info: the server needs an API key")] * 3
    res = await run_checks(full.url, model="qwen122", api_key="sk-wrong-Secret", plan=PLAN)
    assert {r.reason for r in res} == {"HTTP 401 from /server_info: the server refused the API key"}
    assert "sk-wrong-Secret" not in json.dumps([r.to_json() for r in res])
    # a client the caller owns is used as given and left open
    async with httpx.AsyncClient() as client:
        res = await run_checks(full.url, model="qwen122", api_key=KEY, plan=PLAN, client=client)
        assert [r.ok for r in res] == [True, True, True]
        assert not client.is_closed


async def test_an_unreachable_server_fails_every_check_in_one_line():
    url = f"http://127.0.0.1:{free_port()}"
    res = await run_checks(url, model="m", api_key=KEY)
    assert len({r.reason for r in res}) == 1 and all(r.ok is False for r in res)
    reason = res[0].reason
    assert reason.startswith(f"cannot reach {url}/server_info: ") and "\n" not in reason and KEY not in reason


async def test_a_server_that_never_answers_times_out(monkeypatch):
    monkeypatch.setattr(checks, "INFO_TIMEOUT", 0.3)
    with socket.socket() as listener:  # the kernel completes the handshake; nobody ever reads or answers
        listener.bind(("127.0.0.1", 0))
        listener.listen()
        url = f"http://127.0.0.1:{listener.getsockname()[1]}"
        res = await run_checks(url, model="m")
    assert {r.reason for r in res} == {f"no answer from {url}/server_info within 0.3 s"}


def test_accept_length_from_the_real_metrics_text(servers):
    text = httpx.get(servers["full"].url + "/metrics", timeout=10).text  # /metrics needs no key
    assert accept_length_from_metrics(text) == pytest.approx(3.13)
    # no speculative decoding: no sglang:spec_accept_length family at all
    assert accept_length_from_metrics(httpx.get(servers["bare"].url + "/metrics", timeout=10).text) is None


def test_schema_problems_in_words():
    params = WEATHER["function"]["parameters"]
    assert schema_problem({"city": "Paris", "unit": "celsius"}, params) is None
    assert schema_problem({"city": "Paris", "unit": "kelvin"}, params) == (
        "argument unit='kelvin' not in enum ['celsius', 'fahrenheit']")
    assert schema_problem({"unit": "celsius"}, params) == "missing required argument 'city'"
    assert schema_problem({"city": 3, "unit": "celsius"}, params) == "argument city=3 is not of type string"
    assert schema_problem({"city": "P", "unit": "celsius", "when": "now"}, params) == "unexpected argument 'when'"
    assert schema_problem(["Paris"], params) == "argument arguments=['Paris'] is not of type object"
    nested = {"type": "object", "properties": {"days": {"type": "array", "items": {"type": "integer"}}}}
    assert schema_problem({"days": [1, True]}, nested) == "argument days[1]=True is not of type integer"


def test_tool_call_problems_in_words():
    def msg(arguments, name="get_weather"):
        return {"content": "", "tool_calls": [{"function": {"name": name, "arguments": arguments}}]}

    assert tool_call_problem(msg('{"city": "Paris", "unit": "celsius"}'), "tool_calls", "qwen3_coder") is None
    assert tool_call_problem(msg('{"city": "Paris", '), "tool_calls", "qwen3_coder").startswith(
        "arguments are not JSON: Expecting property name enclosed in double quotes")
    assert tool_call_problem(msg('{"city": "Paris", "unit": "kelvin"}'), "tool_calls", "x") == (
        "argument unit='kelvin' not in enum ['celsius', 'fahrenheit']")
    assert tool_call_problem(msg("{}", name="search"), "tool_calls", "x") == (
        "the call is to 'search', not 'get_weather'")
    assert tool_call_problem(msg('{"city": "Paris", "unit": "celsius"}'), "stop", "x") == (
        "finish_reason is 'stop', not 'tool_calls'")
    raw = {"content": "<tool_call>\n<function=get_weather>\n", "tool_calls": None}
    assert tool_call_problem(raw, "stop", "hermes").startswith("no tool_calls in the answer: the call stayed raw text")
    assert tool_call_problem({"content": "sunny"}, "length", "qwen3_coder") == (
        "no tool_calls in the answer: it hit max_tokens (2048) first")


async def test_checks_through_a_deployment_on_the_simulated_host(world):
    """`gpuops deploy` of Qwen3-8B over SSH; its stored plan asks for both parsers and no MTP."""
    make, env = world
    cfg, sim = make("ok")
    rc, events, err = deploy(cfg, env, "--name", "chk")
    try:
        assert rc == 0, err + "\n".join(map(json.dumps, events[-10:]))
        ready = events[-1]
        store = Store(f"{env['XDG_STATE_HOME']}/gpuops/gpuops.db")
        plan = store.deployment("chk").plan
        store.close()
        res = by_name(await run_checks(ready["endpoint"], model=ready["model"], plan=plan))
        assert res["tool_calls"].ok is True and res["tool_calls"].details["plan_tool_call_parser"] == "qwen"
        assert res["thinking"].ok is True and res["thinking"].details["plan_reasoning_parser"] == "qwen3"
        assert res["mtp"].ok is None
    finally:
        subprocess.run([GPUOPS, "--config", str(cfg), "stop", "chk", "--yes"], capture_output=True, env=env,
                       timeout=120)
