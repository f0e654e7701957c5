"""Functional checks of a deployment through its OpenAI API: tool calling, thinking, MTP.

A server can answer every benchmark request and still be wrong for its users: started without
``--tool-call-parser`` it leaves the model's tool call as raw text in ``content``; without
``--reasoning-parser`` the thinking leaks into ``content``; with MTP misconfigured no draft token
is ever accepted. Each check asks what a client would ask and says in one line why it failed.

What the server runs with comes from its ``/server_info`` (``tool_call_parser``,
``reasoning_parser``, ``speculative_algorithm``); what the operator wanted from the plan's argv.
A feature the plan asked for fails when the server cannot do it; a feature neither asked for
nor configured is skipped (``ok`` None), not failed. The API key only ever goes into the
Authorization header: never into a reason, the details or a log.
"""

from __future__ import annotations

import asyncio
import json
from typing import Any

import httpx
from prometheus_client.parser import text_string_to_metric_families

from .. import engines
from ..domain import FunctionalCheck, Plan, split_flags

INFO_TIMEOUT = 10.0  # s, /server_info and /metrics
ANSWER_TIMEOUT = 300.0  # s, one whole chat completion, streamed or not
MAX_TOKENS = 2048  # room for a thinking model's reasoning before its answer or its call
MTP_REQUESTS = 3  # requests decoded before the accept length is read
THINK_TAGS = ("<think>", "</think>")
RAW_TOOL_CALL = ("<tool_call>", "<function=", "[TOOL_CALLS]", "<|tool_call")

WEATHER = {
    "type": "function",
    "function": {
        "name": "get_weather",
        "description": "Current weather in a city.",
        "parameters": {
            "type": "object",
            "properties": {"city": {"type": "string", "description": "City name, e.g. Paris"},
                           "unit": {"type": "string", "enum": ["celsius", "fahrenheit"]}},
            "required": ["city", "unit"],
            "additionalProperties": False,
        },
    },
}
TYPES: dict[str, type | tuple[type, ...]] = {"string": str, "integer": int, "number": (int, float), "boolean": bool, "object": dict, "array": list,
         "null": type(None)}


class CheckError(Exception):
    """A request that got no usable answer; the message is the check's one-line reason."""

    def __init__(self, message: str, status: int | None = None):
        super().__init__(message)
        self.status = status  # the HTTP status, when there was an answer


def _line(text: object, limit: int = 200) -> str:
    s = " ".join(str(text).split())
    return s if len(s) <= limit else s[: limit - 1] + "…"


def _transport_error(url: str, e: Exception, timeout: float) -> CheckError:
    """One line for a request that got no HTTP answer."""
    if isinstance(e, (asyncio.TimeoutError, httpx.TimeoutException)):
        return CheckError(f"no answer from {url} within {timeout:g} s")
    if isinstance(e, httpx.ConnectError):
        return CheckError(f"cannot reach {url}: {_line(e) or 'connection failed'}")
    return CheckError(f"request to {url} failed: {_line(e) or type(e).__name__}")


class _Api:
    """The deployment's HTTP API: the key in the header, a timeout on every request, and a
    one-line CheckError for anything that is not a 2xx answer."""

    def __init__(self, client: httpx.AsyncClient, base_url: str, api_key: str | None,
                 engine: str = engines.DEFAULT):
        self.client = client
        self.engine = engine  # the server's engine (its metrics names)
        self.base = base_url.rstrip("/")
        self.keyed = api_key is not None
        self.headers = {"Authorization": f"Bearer {api_key}"} if api_key is not None else {}

    def _check(self, r: httpx.Response, path: str) -> None:
        if r.is_success:
            return
        if r.status_code == 401:
            why = "the server refused the API key" if self.keyed else "the server needs an API key"
            raise CheckError(f"HTTP 401 from {path}: {why}", 401)
        try:
            doc = r.json()
        except ValueError:
            doc = r.text
        if isinstance(doc, dict):
            doc = doc.get("message") or doc.get("detail") or doc.get("error") or doc
        raise CheckError(f"HTTP {r.status_code} from {path}: {_line(doc)}", r.status_code)

    async def get(self, path: str) -> httpx.Response:
        """GET PATH, bounded by INFO_TIMEOUT."""
        url = self.base + path
        try:
            r = await self.client.get(url, headers=self.headers, timeout=INFO_TIMEOUT)
        except httpx.HTTPError as e:
            raise _transport_error(url, e, INFO_TIMEOUT) from None
        self._check(r, path)
        return r

    async def server_info(self) -> dict:
        """The engine's server info (``Engine.server_info_paths``: the first path that is not a 404)."""
        engine = engines.get(self.engine)
        paths = engine.server_info_paths
        if not paths:
            raise CheckError(f"{engine.title} has no server info gpuops knows")
        for path in paths[:-1]:
            try:
                r = await self.get(path)
                break
            except CheckError as e:
                if e.status != 404:
                    raise
        else:
            r = await self.get(paths[-1])
        try:
            info = r.json()
        except ValueError:
            info = None
        if not isinstance(info, dict):
            raise CheckError(f"{r.url.path} is not a JSON object: {_line(r.text, 80)}")
        return info

    async def chat(self, body: dict, stream: bool) -> tuple[dict, str | None]:
        """(message, finish_reason) of one chat completion. A stream is put together as OpenAI
        clients do: content and reasoning_content concatenated, tool_calls merged by index."""
        url = self.base + "/v1/chat/completions"
        try:
            return await asyncio.wait_for(self._chat(url, dict(body, stream=stream)), ANSWER_TIMEOUT)
        except (asyncio.TimeoutError, httpx.HTTPError) as e:
            raise _transport_error(url, e, ANSWER_TIMEOUT) from None
        except ValueError as e:  # a body or an SSE line that is not JSON
            raise CheckError(f"the answer from {url} is not JSON: {_line(e)}") from None

    async def _chat(self, url: str, body: dict) -> tuple[dict, str | None]:
        path = "/v1/chat/completions"
        if not body["stream"]:
            r = await self.client.post(url, json=body, headers=self.headers, timeout=ANSWER_TIMEOUT)
            self._check(r, path)
            choice = (r.json().get("choices") or [{}])[0]
            return choice.get("message") or {}, choice.get("finish_reason")
        content, reasoning, finish = "", "", None
        calls: dict[int, dict[str, Any]] = {}
        async with self.client.stream("POST", url, json=body, headers=self.headers, timeout=ANSWER_TIMEOUT) as r:
            if not r.is_success:
                await r.aread()
                self._check(r, path)
            async for line in r.aiter_lines():
                if not line.startswith("data: ") or line == "data: [DONE]":
                    continue
                data = json.loads(line[6:])
                if "error" in data:  # serving_base.py create_streaming_error_response
                    err = data["error"]
                    raise CheckError(f"error in the stream from {path}: "
                                     f"{_line(err.get('message') if isinstance(err, dict) else err)}")
                for choice in data.get("choices") or []:
                    delta = choice.get("delta") or {}
                    content += delta.get("content") or ""
                    reasoning += delta.get("reasoning_content") or ""
                    _add_tool_calls(calls, delta.get("tool_calls") or [])
                    finish = choice.get("finish_reason") or finish
        message = {"content": content, "reasoning_content": reasoning or None,
                   "tool_calls": [calls[i] for i in sorted(calls)] or None}
        return message, finish


def _add_tool_calls(calls: dict[int, dict[str, Any]], deltas: list[dict]) -> None:
    """A streamed answer's tool-call pieces added to the calls so far (by their index): the id and
    name once, the arguments' text piece by piece."""
    for tc in deltas:
        slot = calls.setdefault(tc.get("index") or 0, {"id": None, "type": "function",
                                                       "function": {"name": None, "arguments": ""}})
        fn = tc.get("function") or {}
        slot["id"] = tc.get("id") or slot["id"]
        slot["function"]["name"] = fn.get("name") or slot["function"]["name"]
        slot["function"]["arguments"] += fn.get("arguments") or ""


# ------------------------------------------------------------------ the checks


def _type_problem(value: object, schema: dict, name: str) -> str | None:
    """VALUE against the schema's type and enum (a bool is no number)."""
    t = schema.get("type")
    types = [t] if isinstance(t, str) else list(t or [])
    if types and not any(isinstance(value, TYPES.get(x, object)) and not (isinstance(value, bool) and x != "boolean")
                         for x in types):
        return f"argument {name}={value!r} is not of type {'/'.join(types)}"
    if "enum" in schema and value not in schema["enum"]:
        return f"argument {name}={value!r} not in enum {schema['enum']}"
    return None


def _object_problem(value: dict, schema: dict, where: str) -> str | None:
    """An object against the schema's required keys, its properties and additionalProperties."""
    props = schema.get("properties") or {}
    for key in schema.get("required") or []:
        if key not in value:
            return f"missing required argument {where + '.' if where else ''}{key!r}"
    for key, v in value.items():
        if key in props:
            problem = schema_problem(v, props[key], f"{where}.{key}" if where else key)
            if problem:
                return problem
        elif schema.get("additionalProperties") is False:
            return f"unexpected argument {where + '.' if where else ''}{key!r}"
    return None


def schema_problem(value: object, schema: dict, where: str = "") -> str | None:
    """The first way VALUE breaks the JSON SCHEMA (type, enum, required, properties,
    additionalProperties, items), in words; None when it matches."""
    name = where or "arguments"
    problem = _type_problem(value, schema, name)
    if problem is None and isinstance(value, dict):
        problem = _object_problem(value, schema, where)
    if problem is None and isinstance(value, list) and isinstance(schema.get("items"), dict):
        for i, v in enumerate(value):
            problem = schema_problem(v, schema["items"], f"{name}[{i}]")
            if problem:
                return problem
    return problem


def tool_call_problem(message: dict, finish: str | None, parser: str | None) -> str | None:
    """Why MESSAGE (finished with FINISH) is not a valid get_weather call, in one line; None when it
    is one. PARSER, the server's --tool-call-parser, explains a call that stayed text."""
    calls = message.get("tool_calls") or []
    if not calls:
        content = message.get("content") or ""
        raw = any(mark in content for mark in RAW_TOOL_CALL)
        if not parser:
            return "no tool_calls in the answer: server started without --tool-call-parser" + (
                " (the call is raw text in content)" if raw else "")
        if raw:
            return (f"no tool_calls in the answer: the call stayed raw text in content; "
                    f"--tool-call-parser {parser} does not read this model's format")
        if finish == "length":
            return f"no tool_calls in the answer: it hit max_tokens ({MAX_TOKENS}) first"
        return f"no tool_calls in the answer (finish_reason={finish!r}): the model did not call get_weather"
    fn = calls[0].get("function") or {}
    if fn.get("name") != "get_weather":
        return f"the call is to {fn.get('name')!r}, not 'get_weather'"
    text = fn.get("arguments")
    if not isinstance(text, str):
        return f"arguments are a {type(text).__name__}, not a JSON string"
    try:
        args = json.loads(text)
    except ValueError as e:
        return f"arguments are not JSON: {e}: {_line(text, 80)}"
    problem = schema_problem(args, WEATHER["function"]["parameters"])  # type: ignore[index]
    if problem:
        return problem
    if finish != "tool_calls":
        return f"finish_reason is {finish!r}, not 'tool_calls'"
    return None


async def _tool_calls(api: _Api, model: str, info: dict, asked: dict) -> FunctionalCheck:
    parser = info.get("tool_call_parser")
    wanted = asked.get("--tool-call-parser")
    details = {"tool_call_parser": parser, "plan_tool_call_parser": wanted}
    if not parser and wanted is None:
        return FunctionalCheck("tool_calls", None, "the server runs without --tool-call-parser and no plan asks "
                           "for tool calling", details)
    body = {"model": model, "temperature": 0, "max_tokens": MAX_TOKENS, "tools": [WEATHER], "tool_choice": "auto",
            "messages": [{"role": "user", "content": "What is the weather in Paris right now, in celsius? "
                                                     "Use the get_weather tool."}]}
    for stream in (False, True):
        message, finish = await api.chat(body, stream)
        mode = "stream" if stream else "non-stream"
        details[mode] = {"finish_reason": finish, "tool_calls": message.get("tool_calls")}
        problem = tool_call_problem(message, finish, parser)
        if problem:
            return FunctionalCheck("tool_calls", False, f"{problem} ({mode})", details)
    args = details["non-stream"]["tool_calls"][0]["function"]["arguments"]  # type: ignore[index]
    return FunctionalCheck("tool_calls", True, f"get_weather({_line(args, 120)}) as tool_calls, streamed and not",
                       details)


async def _thinking(api: _Api, model: str, info: dict, asked: dict) -> FunctionalCheck:
    parser = info.get("reasoning_parser")
    wanted = asked.get("--reasoning-parser")
    details = {"reasoning_parser": parser, "plan_reasoning_parser": wanted}
    # both switches: Qwen3-style templates read enable_thinking, DeepSeek-V3.1-style ones thinking
    on = {"model": model, "temperature": 0, "max_tokens": MAX_TOKENS,
          "messages": [{"role": "user", "content": "What is 17 * 23? Answer with the number only."}],
          "chat_template_kwargs": {"enable_thinking": True, "thinking": True}}
    for stream in (False, True):
        message, finish = await api.chat(on, stream)
        mode = "stream" if stream else "non-stream"
        content, reasoning = message.get("content") or "", message.get("reasoning_content") or ""
        details[mode] = {"finish_reason": finish, "reasoning_chars": len(reasoning), "content_chars": len(content)}
        leaked = next((tag for tag in THINK_TAGS if tag in content), None)
        if leaked:
            why = (f"--reasoning-parser {parser} left {leaked} in content" if parser
                   else "server started without --reasoning-parser")
            return FunctionalCheck("thinking", False, f"reasoning text is in content: {why} ({mode})", details)
        if not reasoning:
            if not parser and wanted is None:
                return FunctionalCheck("thinking", None, "the server runs without --reasoning-parser, no plan asks for "
                                   "thinking, and the answer has no reasoning text", details)
            why = "server started without --reasoning-parser" if not parser else f"finish_reason={finish!r}"
            return FunctionalCheck("thinking", False, f"no reasoning_content with thinking on: {why} ({mode})", details)
    off = dict(on, chat_template_kwargs={"enable_thinking": False, "thinking": False})
    message, finish = await api.chat(off, False)
    content = message.get("content") or ""
    details["thinking-off"] = {"finish_reason": finish, "reasoning_chars": len(message.get("reasoning_content") or ""),
                               "content_chars": len(content)}
    if message.get("reasoning_content"):
        return FunctionalCheck("thinking", False, "reasoning_content is present with enable_thinking=false", details)
    if any(tag in content for tag in THINK_TAGS):
        return FunctionalCheck("thinking", False, "reasoning text is in content with enable_thinking=false", details)
    if not content:
        return FunctionalCheck("thinking", False, f"no content with enable_thinking=false (finish_reason={finish!r})",
                           details)
    return FunctionalCheck("thinking", True, "reasoning_content with thinking on, kept out of content (streamed and "
                       "not); none with enable_thinking=false", details)


def accept_length_from_metrics(text: str, engine: str = engines.DEFAULT) -> float | None:
    """The mean of the engine's accept-length samples (one per rank) of a /metrics text."""
    name = engines.get(engine).metrics.get("accept_length")
    values = [s.value for fam in text_string_to_metric_families(text) if fam.name == name for s in fam.samples]
    return sum(values) / len(values) if values else None


async def _accept_length(api: _Api) -> tuple[float | None, str | None]:
    """From /server_info first (the figure bench_serving prints as "Accept length:"), else /metrics
    (a server started without --enable-metrics has none: None)."""
    states = (await api.server_info()).get("internal_states") or []
    values = [s["avg_spec_accept_length"] for s in states
              if isinstance(s, dict) and isinstance(s.get("avg_spec_accept_length"), (int, float))]
    if values:
        return sum(values) / len(values), "/server_info"
    try:
        length = accept_length_from_metrics((await api.get("/metrics")).text, api.engine)
    except (CheckError, ValueError):
        return None, None
    return length, "/metrics" if length is not None else None


async def _mtp(api: _Api, model: str, info: dict, asked: dict) -> FunctionalCheck:
    algo = info.get("speculative_algorithm")
    wanted = asked.get("--speculative-algorithm")
    details = {"speculative_algorithm": algo, "plan_speculative_algorithm": wanted}
    if not algo:
        if wanted:
            return FunctionalCheck("mtp", False, f"the plan asks for --speculative-algorithm {wanted} but the server "
                               "runs without speculative decoding", details)
        return FunctionalCheck("mtp", None, "no speculative decoding on this server", details)
    body = {"model": model, "temperature": 0, "max_tokens": 128,
            "messages": [{"role": "user", "content": "Count from 1 to 40, separated by spaces."}],
            "chat_template_kwargs": {"enable_thinking": False, "thinking": False}}
    for _ in range(MTP_REQUESTS):
        await api.chat(body, False)
    length, source = await _accept_length(api)
    details.update(accept_length=length, source=source, requests=MTP_REQUESTS)
    if length is None:
        metric = engines.get(api.engine).metrics.get("accept_length")
        return FunctionalCheck("mtp", False, "no accept length: /server_info has no avg_spec_accept_length and /metrics "
                           f"no {metric} (--enable-metrics)", details)
    if length <= 1.0:
        return FunctionalCheck("mtp", False, f"accept length {length:.2f} after {MTP_REQUESTS} requests: no draft token "
                           "is accepted", details)
    return FunctionalCheck("mtp", True, f"accept length {length:.2f} ({algo}, from {source})", details)


CHECKS = (("tool_calls", _tool_calls), ("thinking", _thinking), ("mtp", _mtp))
ASKED = ("--tool-call-parser", "--reasoning-parser", "--speculative-algorithm")


async def run_checks(base_url: str, *, model: str, api_key: str | None = None, plan: Plan | None = None,
                     client: httpx.AsyncClient | None = None) -> list[FunctionalCheck]:
    """Tool calling, thinking and MTP against the OpenAI API at BASE_URL, one FunctionalCheck each,
    in that order. MODEL is the served model name; PLAN says what was asked for.
    A server that cannot be asked at all fails every check with the same reason."""
    asked = {name: values[0] if values else "" for name, values in split_flags(plan.argv if plan is not None else [])
             if name in ASKED}
    own = client is None
    api = _Api(client or httpx.AsyncClient(), base_url, api_key, plan.engine if plan is not None else engines.DEFAULT)
    try:
        try:
            info = await api.server_info()
        except CheckError as e:
            return [FunctionalCheck(name, False, str(e)) for name, _ in CHECKS]
        results = []
        for name, check in CHECKS:
            try:
                results.append(await check(api, model, info, asked))
            except CheckError as e:
                results.append(FunctionalCheck(name, False, str(e)))
        return results
    finally:
        if own:
            await api.client.aclose()
