"""SGLang's HTTP API as the simulator serves it once ready: the request handlers, the scheduler loop's
log lines, /metrics, and the Server's Serving part."""

from __future__ import annotations

import contextlib
import hashlib
import json
import math
import os
import random
import re
import socket
import threading
import time
import uuid
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

from .common import DEFAULT_MODEL, Exit, PACE_DIVISOR, THOUGHTS, WORDS


class Histogram:
    def __init__(self, buckets):
        self.buckets = list(buckets)
        self.counts = [0] * len(self.buckets)
        self.sum = 0.0
        self.count = 0

    def observe(self, v):
        self.sum += v
        self.count += 1
        for i, b in enumerate(self.buckets):
            if v <= b:
                self.counts[i] += 1


TTFT_BUCKETS = [0.1, 0.2, 0.4, 0.6, 0.8, 1, 2, 4, 6, 8, 10, 20, 40, 60, 80, 100, 200, 400]


E2E_BUCKETS = [0.1, 0.2, 0.4, 0.6, 0.8, 1, 2, 4, 6, 8, 10, 20, 40, 60, 80, 100, 200, 400, 600, 1200, 1800, 2400]


ITL_BUCKETS = [0.002, 0.004, 0.006, 0.008, 0.010, 0.015, 0.020, 0.025, 0.030, 0.035, 0.040, 0.060, 0.080,
               0.100, 0.200, 0.400, 0.600, 0.800, 1.000, 2.000, 4.000, 6.000, 8.000]


QUEUE_BUCKETS = [0.0, 0.1, 0.2, 0.5, 1, 2, 3, 4, 5, 10, 15, 20, 30, 40, 50, 60, 70, 80, 90, 100, 200, 300,
                 400, 500, 600, 1200, 1800, 2400]


def fnum(v):
    """A sample value as prometheus_client writes it."""
    if isinstance(v, float) and math.isinf(v):
        return "+Inf" if v > 0 else "-Inf"
    return repr(float(v))


def count_tokens(value):
    """A tokenizer-free count: words and punctuation of a text, the length of token ids."""
    if value is None:
        return 0
    if isinstance(value, list):
        if value and isinstance(value[0], int):
            return len(value)
        return sum(count_tokens(v) for v in value)
    if isinstance(value, dict):
        return count_tokens(value.get("text") or value.get("content"))
    return max(1, len(re.findall(r"\w+|[^\w\s]", str(value)))) if str(value) else 0


def example_value(schema, name="", depth=0):
    """A value that matches a JSON schema (types, enums, required properties)."""
    if not isinstance(schema, dict):
        return "example"
    if "enum" in schema and schema["enum"]:
        return schema["enum"][0]
    if "const" in schema:
        return schema["const"]
    for key in ("anyOf", "oneOf"):
        if schema.get(key):
            return example_value(schema[key][0], name, depth)
    t = schema.get("type")
    if isinstance(t, list):
        t = next((x for x in t if x != "null"), "string")
    if t == "object" or (t is None and "properties" in schema):
        props = schema.get("properties") or {}
        return dict((k, example_value(v, k, depth + 1)) for k, v in props.items()) if depth < 4 else {}
    if t == "array":
        return [example_value(schema.get("items") or {"type": "string"}, name, depth + 1)] if depth < 4 else []
    if t == "integer":
        lo = schema.get("minimum", 0)
        return int(max(lo, min(3, schema.get("maximum", 3))))
    if t == "number":
        return float(max(schema.get("minimum", 0), min(1.5, schema.get("maximum", 1.5))))
    if t == "boolean":
        return True
    if t == "null":
        return None
    words = {"city": "Paris", "location": "Paris, France", "unit": "celsius", "query": "sglang", "name": "gpuops",
             "date": "2026-11-30", "timezone": "UTC", "language": "en"}
    return words.get(name.lower(), "example")


def compact(obj):
    """JSON as SGLang's encoders write it (orjson, pydantic's model_dump_json, msgspec): no spaces, UTF-8."""
    return json.dumps(obj, separators=(",", ":"), ensure_ascii=False)


def tool_call_pieces(call, xml):
    """The model's raw text for CALL, one piece a token: Qwen3-Coder/Qwen3.5's XML
    (``<tool_call><function=NAME><parameter=K>V</parameter>...``) or the Qwen2.5/Qwen3 JSON."""
    if xml:
        raw = "<tool_call>\n<function=%s>\n" % call["name"]
        for k, v in call["arguments"].items():
            raw += "<parameter=%s>\n%s\n</parameter>\n" % (k, v if isinstance(v, str) else json.dumps(v))
        raw += "</function>\n</tool_call>"
    else:
        raw = "<tool_call>\n%s\n</tool_call>" % json.dumps({"name": call["name"], "arguments": call["arguments"]})
    return re.findall(r"\s*\S+", raw) or [raw]


def tool_call_deltas(call, pieces, xml):
    """What the tool-call parser streams as the model writes PIECES: {piece index: [(name or
    None, arguments fragment)]}. Qwen3CoderDetector (function_call/qwen3_coder_detector.py:270-383):
    the name with arguments "" once ``<function=NAME>`` is complete, "{" and '"key": value' as each
    ``</parameter>`` closes, "}" at ``</function>``. The JSON detectors (base_format_detector.py:260,
    330): the name first, then the arguments as they are written."""
    out = {}
    if not xml:
        args = json.dumps(call["arguments"], ensure_ascii=False)
        out[0] = [(call["name"], "")]
        step = max(1, len(args) // 4)
        out.setdefault(len(pieces) - 1, []).extend((None, args[j:j + step]) for j in range(0, len(args), step))
        return out
    params = iter(call["arguments"].items())
    count = 0
    for i, piece in enumerate(pieces):
        tag = piece.strip()
        if tag.startswith("<function="):
            out[i] = [(call["name"], "")]
        elif tag == "</parameter>":
            k, v = next(params)
            fragment = "%s: %s" % (json.dumps(k), json.dumps(v, ensure_ascii=False))
            out[i] = ([(None, "{")] if count == 0 else []) + [(None, fragment if count == 0 else ", " + fragment)]
            count += 1
        elif tag == "</function>":
            out[i] = ([(None, "{")] if count == 0 else []) + [(None, "}")]
    return out


class Generation:
    """What one request produces: a list of (kind, text) tokens and how it finishes."""

    def __init__(self, server, rng):
        self.server = server
        self.rng = rng

    def words(self, n, pool):
        i = self.rng.randrange(len(pool))
        return [" " + pool[(i + k) % len(pool)] for k in range(n)]


def _make_http_server(host, port, handler):
    family = socket.AF_INET6 if ":" in host else socket.AF_INET

    class HTTPServer(ThreadingHTTPServer):
        address_family = family
        daemon_threads = True
        allow_reuse_address = True
        request_queue_size = 1024

    return HTTPServer((host, port), handler)


def health_handler(server):
    """A node R>0's dummy health-check server (srt/utils/common.py launch_dummy_health_check_server):
    GET /ping, /health and /health_generate answer 200 with an empty body, /metrics with
    --enable-metrics; anything else FastAPI's 404. uvicorn runs at log level warning: no access lines."""

    class Handler(BaseHTTPRequestHandler):
        protocol_version = "HTTP/1.1"
        server_version = "uvicorn"
        sys_version = ""

        def log_message(self, fmt, *args):
            pass

        def answer(self):
            path = self.path.split("?", 1)[0]
            n = int(self.headers.get("Content-Length") or 0)
            if n:
                self.rfile.read(n)
            routes = ("/ping", "/health", "/health_generate") + (("/metrics",) if server.enable_metrics else ())
            ctype = "application/json"
            if path in routes and self.command == "GET":
                status, body = 200, b""
                if path == "/metrics":
                    ctype = "text/plain; version=0.0.4; charset=utf-8"
            elif path in routes:
                status, body = 405, b'{"detail":"Method Not Allowed"}'
            else:
                status, body = 404, b'{"detail":"Not Found"}'
            self.send_response(status)
            if body or path == "/metrics":
                self.send_header("content-type", ctype)
            self.send_header("content-length", str(len(body)))
            self.end_headers()
            if self.command != "HEAD":
                self.wfile.write(body)

        do_GET = do_POST = do_HEAD = do_PUT = do_DELETE = answer

    return Handler


def make_handler(server):
    out = server.out

    class Handler(BaseHTTPRequestHandler):
        protocol_version = "HTTP/1.1"
        server_version = "uvicorn"
        sys_version = ""

        def log_message(self, fmt, *args):
            pass

        def access(self, status):
            reason = {200: "OK", 400: "Bad Request", 401: "Unauthorized", 404: "Not Found",
                      405: "Method Not Allowed", 503: "Service Unavailable"}.get(status, "")
            out.bare('INFO:     %s:%d - "%s %s %s" %d %s' % (self.client_address[0], self.client_address[1],
                                                            self.command, self.path, self.request_version, status,
                                                            reason))

        # ---------------------------------------------------- plumbing

        def body(self):
            n = int(self.headers.get("Content-Length") or 0)
            if n:
                return self.rfile.read(n)
            if "chunked" in (self.headers.get("Transfer-Encoding") or "").lower():
                data = b""
                while True:
                    size = int(self.rfile.readline().strip() or b"0", 16)
                    if size == 0:
                        self.rfile.readline()
                        return data
                    data += self.rfile.read(size)
                    self.rfile.readline()
            return b""

        def send(self, status, payload=None, ctype="application/json", text=None):
            self.access(status)
            if text is not None:
                data = text.encode()
            elif payload is None:
                data = b""
            else:
                data = compact(payload).encode()
            self.send_response(status)
            if data or ctype:
                self.send_header("content-type", ctype)
            self.send_header("content-length", str(len(data)))
            self.end_headers()
            if self.command != "HEAD":
                self.wfile.write(data)

        def error(self, status, message, typ="BadRequestError"):
            self.send(status, {"object": "error", "message": message, "type": typ, "param": None, "code": status})

        def start_stream(self):
            self.access(200)
            self.send_response(200)
            self.send_header("content-type", "text/event-stream; charset=utf-8")
            self.send_header("transfer-encoding", "chunked")
            self.end_headers()

        def chunk(self, data):
            if isinstance(data, str):
                data = data.encode()
            self.wfile.write(b"%x\r\n%s\r\n" % (len(data), data))
            self.wfile.flush()

        def sse(self, obj):
            self.chunk("data: " + (obj if isinstance(obj, str) else compact(obj)) + "\n\n")

        def end_stream(self):
            self.chunk("data: [DONE]\n\n")
            self.wfile.write(b"0\r\n\r\n")
            self.wfile.flush()

        def authorized(self, path):
            """srt/utils/auth.py decide_request_auth: probes and Prometheus scrapes need no key."""
            if not server.api_key or path.startswith(("/health", "/metrics")):
                return True
            auth = self.headers.get("Authorization") or ""
            parts = auth.split(" ", 1)
            return len(parts) == 2 and parts[0].lower() == "bearer" and parts[1] == server.api_key

        # ---------------------------------------------------- routes

        def do_GET(self):
            self.route("GET")

        def do_POST(self):
            self.route("POST")

        def do_HEAD(self):
            self.route("GET")

        def route(self, method):
            path = self.path.split("?", 1)[0]
            try:
                raw = self.body() if method == "POST" else b""
                if not self.authorized(path):
                    return self.send(401, {"error": "Unauthorized"})
                get_routes = {
                    "/health": self.health, "/health_generate": self.health, "/model_info": self.model_info,
                    "/get_model_info": self.get_model_info, "/server_info": self.server_info,
                    "/get_server_info": self.get_server_info, "/v1/models": self.models, "/metrics": self.metrics,
                    "/flush_cache": self.flush_cache, "/ping": self.ping, "/v1/loads": self.loads,
                }
                post_routes = {"/v1/completions": self.completions, "/v1/chat/completions": self.chat,
                               "/generate": self.generate, "/flush_cache": self.flush_cache}
                routes = get_routes if method == "GET" else post_routes
                fn = routes.get(path)
                if fn is None:
                    if path in get_routes or path in post_routes:
                        return self.send(405, {"detail": "Method Not Allowed"})
                    return self.send(404, {"detail": "Not Found"})
                if method == "POST":
                    try:
                        body = json.loads(raw or b"{}")
                        if not isinstance(body, dict):
                            raise ValueError("expected a JSON object")
                    except ValueError as e:
                        return self.error(400, "Invalid request body: %s" % e)
                    return fn(body)
                return fn()
            except (BrokenPipeError, ConnectionResetError):
                with server.lock:
                    server.metrics["aborted"] += 1
            except Exception as e:  # a bug of the simulator: answer like FastAPI's 500, keep serving
                with contextlib.suppress(Exception):
                    self.error(500, "Internal server error: %r" % (e,), "InternalServerError")

        def health(self):
            if server.hung:  # SGLang's /health runs a one-token request and gives up after its timeout
                server.stop_event.wait(0.5)
                return self.send(503)
            if not server.ready or server.term:
                return self.send(503)
            return self.send(200)

        def ping(self):
            return self.send(200)

        def model_info(self):
            return self.send(200, server.model_info())

        def get_model_info(self):
            server.log("Endpoint '/get_model_info' is deprecated and will be removed in a future version. "
                       "Please use '/model_info' instead.")
            return self.model_info()

        def server_info(self):
            return self.send(200, server.server_info())

        def get_server_info(self):
            server.log("Endpoint '/get_server_info' is deprecated and will be removed in a future version. "
                       "Please use '/server_info' instead.")
            return self.server_info()

        def models(self):
            return self.send(200, {"object": "list", "data": [{
                "id": server.served, "object": "model", "created": int(server.t0), "owned_by": "sglang",
                "root": server.served, "parent": None, "max_model_len": server.context}]})

        def loads(self):
            return self.send(200, {"num_running_reqs": server.running, "num_waiting_reqs": 0,
                                   "num_used_tokens": server.used_tokens})

        def metrics(self):
            if not server.enable_metrics:
                return self.send(404, {"detail": "Not Found"})
            return self.send(200, ctype="text/plain; version=0.0.4; charset=utf-8", text=server.metrics_text())

        def flush_cache(self, body=None):
            server.log("Cache flushed successfully!", 0 if server.world > 1 else None)
            return self.send(200, ctype="text/plain; charset=utf-8", text=(
                "Cache flushed.\nPlease check backend logs for more details. "
                "(When there are running or waiting requests, the operation will not be performed.)\n"))

        # ---------------------------------------------------- generation

        def run_tokens(self, prompt_tokens, tokens, emit):
            """Prefill, then one token at a time: EMIT(i, token) for each; metrics. Returns e2e."""
            t0 = time.time()
            with server.cond:
                server.running += 1
                server.metrics["requests"] += 1
                server.metrics["prompt"] += prompt_tokens
                server.used_tokens += prompt_tokens
                server.pending_prefill.append(prompt_tokens)
                server.prefills_queued += 1
                ticket = server.prefills_queued
                server.cond.notify_all()
                # the scheduler loop logs the Prefill batch line before the first token (bounded: a loop
                # that is not running never holds a request)
                waited = time.time() + 2.0
                while server.prefills_logged < ticket and not server.term and time.time() < waited:
                    server.cond.wait(0.05)
            server.metrics["queue"].observe(0.0)
            delay = server.token_delay / (server.accept_len or 1.0)
            try:
                time.sleep(max(server.token_delay, prompt_tokens * server.token_delay / 500.0))
                last = time.time()
                server.metrics["ttft"].observe(last - t0)
                for i, tok in enumerate(tokens):
                    if i:
                        time.sleep(delay)
                        now = time.time()
                        server.metrics["itl"].observe(now - last)
                        last = now
                    emit(i, tok)
                    server.note_tokens(1)
            finally:
                with server.cond:
                    server.running -= 1
                    server.used_tokens = max(0, server.used_tokens - prompt_tokens - len(tokens))
                e2e = time.time() - t0
                server.metrics["e2e"].observe(e2e)
            return e2e

        def rng_for(self, body):
            return random.Random(hashlib.sha1(json.dumps(body, sort_keys=True, default=str).encode()).hexdigest())

        def max_tokens(self, body, default):
            for key in ("max_completion_tokens", "max_tokens"):
                v = body.get(key)
                if v is not None:
                    try:
                        v = int(v)
                    except (TypeError, ValueError):
                        return None, "%s must be an integer" % key
                    if v < 0:
                        return None, "max_tokens must be at least 0, got %d." % v
                    return v, None
            return default, None

        def completions(self, body):
            """serving_completions.py (0.5.23): the last token's chunk carries finish_reason (:374-403);
            the usage-only chunk, only with stream_options.include_usage, is dumped without nulls (:495)."""
            prompt = body.get("prompt")
            if prompt is None:
                return self.error(400, "Field required: prompt")
            n, err = self.max_tokens(body, 16)
            if err:
                return self.error(400, err)
            ptoks = count_tokens(prompt)
            gen = Generation(server, self.rng_for(body))
            tokens = gen.words(n, WORDS)
            rid = uuid.uuid4().hex
            created = int(time.time())
            model = body.get("model") or DEFAULT_MODEL
            usage = server.usage(ptoks, n)
            if not body.get("stream"):
                self.run_tokens(ptoks, tokens, lambda i, t: None)
                return self.send(200, {"id": rid, "object": "text_completion", "created": created, "model": model,
                                       "choices": [{"index": 0, "text": "".join(tokens), "logprobs": None,
                                                    "finish_reason": "length", "matched_stop": None}],
                                       "usage": usage, "metadata": {"weight_version": "default"}})
            include_usage = bool((body.get("stream_options") or {}).get("include_usage"))
            self.start_stream()

            def emit(i, tok):
                self.sse({"id": rid, "object": "text_completion", "created": created, "model": model,
                          "choices": [{"index": 0, "text": tok, "logprobs": None,
                                       "finish_reason": "length" if i == n - 1 else None, "matched_stop": None}],
                          "usage": None})

            self.run_tokens(ptoks, tokens, emit)
            if not tokens:
                emit(-1, "")
            if include_usage:
                self.sse({"id": rid, "object": "text_completion", "created": created, "model": model,
                          "choices": [], "usage": dict((k, v) for k, v in usage.items() if v is not None)})
            self.end_stream()

        def generate(self, body):
            text = body.get("text", body.get("input_ids"))
            if text is None:
                return self.error(400, "Either text or input_ids should be provided.")
            sp = body.get("sampling_params") or {}
            n = int(sp.get("max_new_tokens", 128) if sp.get("max_new_tokens") is not None else 128)
            ptoks = count_tokens(text)
            tokens = Generation(server, self.rng_for(body)).words(n, WORDS)
            rid = uuid.uuid4().hex
            ids = [1000 + (hash(t) % 50000) for t in tokens]

            def meta(k, done, e2e=None):
                m = {"id": rid, "finish_reason": {"type": "length", "length": n} if done else None,
                     "prompt_tokens": ptoks, "weight_version": "default", "completion_tokens": k,
                     "cached_tokens": 0}
                if e2e is not None:
                    m["e2e_latency"] = e2e
                return m

            if not body.get("stream"):
                e2e = self.run_tokens(ptoks, tokens, lambda i, t: None)
                return self.send(200, {"text": "".join(tokens), "output_ids": ids, "meta_info": meta(n, True, e2e)})
            self.start_stream()

            def emit(i, tok):
                self.sse({"text": "".join(tokens[: i + 1]), "output_ids": ids[: i + 1],
                          "meta_info": meta(i + 1, i + 1 == n)})

            self.run_tokens(ptoks, tokens, emit)
            self.end_stream()

        def chat(self, body):
            """serving_chat.py (0.5.23). The model writes raw text: its reasoning up to </think> when
            thinking is on (chat_template_kwargs enable_thinking / thinking false turns it off), then
            an answer or a tool call in its own format. SGLang's parsers split that text only when the
            server was started with them: --reasoning-parser moves the reasoning to reasoning_content
            (separate_reasoning, the default), --tool-call-parser turns the call into tool_calls with
            finish_reason "tool_calls" (:3150-3214, :2641-2662). Without them everything stays in
            content, as real SGLang leaves it. The JSON changed across releases (read from the wheels):
            up to 0.5.12 every chunk is a pydantic ChatCompletionStreamResponse with all delta fields and
            an empty non-streaming content is null; from 0.5.13 role, reasoning, plain content and the
            finish are sse_utils.build_sse_content's msgspec chunks (nulls left out), the tool-call
            parser's output stays pydantic (:3656-3756), and empty content is "" (:2994-2997); 0.5.23
            leaves a null tool_calls out (protocol.py:1299, :1380; still there in 0.5.19)."""
            messages = body.get("messages")
            if not isinstance(messages, list) or not messages:
                return self.error(400, "Field required: messages")
            n_given, err = self.max_tokens(body, None)
            if err:
                return self.error(400, err)
            ptoks = sum(count_tokens(m.get("content") if isinstance(m, dict) else m) + 4 for m in messages) + 3
            kwargs = body.get("chat_template_kwargs") or {}
            thinking_on = kwargs.get("enable_thinking", True) is not False and kwargs.get("thinking", True) is not False
            think = thinking_on and (server.reasoning_parser is not None or server.model.thinks)
            separate = server.reasoning_parser is not None and body.get("separate_reasoning", True) is not False
            tools = body.get("tools") or []
            choice = body.get("tool_choice", "auto")
            gen = Generation(server, self.rng_for(body))
            call = None
            if tools and choice != "none":
                fn = tools[0].get("function", {}) if isinstance(tools[0], dict) else {}
                if isinstance(choice, dict):
                    want = (choice.get("function") or {}).get("name")
                    fn = next((t.get("function", {}) for t in tools if (t.get("function") or {}).get("name") == want), fn)
                args = example_value(fn.get("parameters") or {"type": "object", "properties": {}})
                call = {"name": fn.get("name") or "tool", "arguments": args}
            # _tool_call_parsing_active (:1080): a tool-call parser, tools, tool_choice other than "none"
            parse_tools = call is not None and server.tool_parser is not None
            # the plan: reasoning tokens, content tokens (a word each), or a tool call; the answer ends at
            # its EOS unless max_tokens cuts it short or the request sets ignore_eos (as bench_serving does)
            r_n, c_n = (12 if think else 0), 20
            finish = "stop"
            if n_given is not None and (n_given < r_n + c_n or body.get("ignore_eos")):
                r_n = n_given // 2 if think else 0
                c_n = n_given - r_n
                finish = "length"
            if call is not None:
                r_n = min(r_n, 8) if think else 0
                finish = "tool_calls" if parse_tools else "stop"
            reasoning = gen.words(r_n, THOUGHTS)
            content = gen.words(c_n, WORDS) if call is None else []
            pieces = tool_call_pieces(call, server.model.xml_tools) if call is not None else []
            # the tokens as (where SGLang's parsers put them, text)
            seq = []
            if reasoning and separate:
                seq += [("reasoning", t) for t in reasoning]
            elif reasoning:
                seq += [("content", ("<think>\n" if i == 0 else "") + t) for i, t in enumerate(reasoning)]
                if content:
                    content[0] = "\n</think>\n\n" + content[0].lstrip()
                else:
                    seq.append(("content", "\n</think>\n\n"))
            elif content:
                content[0] = content[0].lstrip()
            seq += [("content", t) for t in content]
            first_piece = len(seq)
            seq += [("tool" if parse_tools else "content", t) for t in pieces]
            deltas = tool_call_deltas(call, pieces, server.model.xml_tools) if parse_tools else {}
            rid = uuid.uuid4().hex
            created = int(time.time())
            model = body.get("model") or DEFAULT_MODEL
            tool_calls = None
            if parse_tools:
                tool_calls = [{"id": "call_%s" % uuid.uuid4().hex[:24], "index": 0, "type": "function",
                               "function": {"name": call["name"],
                                            "arguments": json.dumps(call["arguments"], ensure_ascii=False)}}]
            usage = server.usage(ptoks, len(seq), len(reasoning) if separate else 0)
            matched = 151645 if finish == "stop" else None  # <|im_end|>
            msgspec_chunks = server.V >= (0, 5, 13)
            drop_null_calls = server.V >= (0, 5, 23)
            if not body.get("stream"):
                self.run_tokens(ptoks, seq, lambda i, t: None)
                text = "".join(t for k, t in seq if k == "content")
                message = {"role": "assistant", "content": text or ("" if msgspec_chunks else None),
                           "reasoning_content": "".join(t for k, t in seq if k == "reasoning").lstrip() or None,
                           "tool_calls": tool_calls}
                if tool_calls is None and drop_null_calls:
                    del message["tool_calls"]
                return self.send(200, {"id": rid, "object": "chat.completion", "created": created, "model": model,
                                       "choices": [{"index": 0, "message": message, "logprobs": None,
                                                    "finish_reason": finish, "matched_stop": matched}],
                                       "usage": usage, "metadata": {"weight_version": "default"}})
            include_usage = bool((body.get("stream_options") or {}).get("include_usage"))
            self.start_stream()

            def chunk(delta, finish_reason=None, matched_stop=None, parsed=False):
                """build_sse_content's msgspec chunk (reasoning_content always, role and content when set)
                from 0.5.13 unless PARSED by the tool-call parser; else the pydantic one."""
                doc = {"id": rid, "object": "chat.completion.chunk", "created": created, "model": model,
                       "choices": [{"index": 0, "delta": None, "logprobs": None, "finish_reason": finish_reason,
                                    "matched_stop": matched_stop}]}
                if msgspec_chunks and not parsed:
                    d = {"reasoning_content": delta.get("reasoning_content")}
                    d.update((k, delta[k]) for k in ("role", "content") if delta.get(k) is not None)
                else:
                    d = dict((k, delta.get(k)) for k in ("role", "content", "reasoning_content", "tool_calls"))
                    if d["tool_calls"] is None and drop_null_calls:
                        del d["tool_calls"]
                    doc["usage"] = None
                doc["choices"][0]["delta"] = d
                self.sse(doc)

            chunk({"role": "assistant", "content": ""})

            def emit(i, item):
                kind, text = item
                if kind == "reasoning":
                    chunk({"reasoning_content": text.lstrip() if i == 0 else text})
                elif kind == "content":
                    chunk({"content": text}, parsed=parse_tools)
                for name, args in deltas.get(i - first_piece, ()):
                    chunk({"tool_calls": [{"id": tool_calls[0]["id"] if name else None, "index": 0, "type": "function",
                                           "function": {"name": name, "arguments": args}}]}, parsed=True)

            self.run_tokens(ptoks, seq, emit)
            chunk({}, finish, matched)
            if include_usage:
                self.sse({"id": rid, "object": "chat.completion.chunk", "created": created, "model": model,
                          "choices": [], "usage": usage})
            self.end_stream()

    return Handler


class Serving:
    """The serving part of :class:`Server`: the HTTP server, the scheduler loop, metrics and info."""

    def _serve(self):
        family = socket.AF_INET6 if ":" in self.host else socket.AF_INET
        handler = make_handler(self)

        class HTTPServer(ThreadingHTTPServer):
            address_family = family
            daemon_threads = True
            allow_reuse_address = True
            request_queue_size = 1024

        pid = os.getpid()
        self.out.bare("INFO:     Started server process [%d]" % pid)
        self.out.bare("INFO:     Waiting for application startup.")
        self.out.bare("INFO:     Application startup complete.")
        try:
            self.httpd = HTTPServer((self.host, self.port), handler)
        except OSError as e:
            self.out.bare("ERROR:    [Errno %d] error while attempting to bind on address (%r, %d): %s"
                          % (e.errno or 98, self.host, self.port, (e.strerror or str(e)).lower()))
            self.gpus.release()
            raise Exit(1)
        shown = self.host if family == socket.AF_INET else "[%s]" % self.host
        self.out.bare("INFO:     Uvicorn running on http://%s:%d (Press CTRL+C to quit)" % (shown, self.port))
        threading.Thread(target=self.httpd.serve_forever, kwargs={"poll_interval": 0.2}, daemon=True).start()
        threading.Thread(target=self._scheduler_loop, daemon=True).start()
        if not self.term and not self.skip_warmup:
            self.stop_event.wait(0.5 * self.pace / PACE_DIVISOR)
            self._warmup()
        if not self.term:
            self.ready = True
            self.log("The server is fired up and ready to roll!")
        if self.scenario == "hang-after-ready" and not self.term:
            # a scheduler that deadlocks a while after ready (a first-request deadlock, a stuck
            # collective): nothing more is logged, requests wait for ever, /health answers 503 once
            # its own check times out; the processes live on
            self.stop_event.wait(float(self.sim.get("hang_after_s", 2.0)))
            with self.cond:
                self.hung = True
            lasts = float(self.sim.get("hang_for_s") or 0)
            if lasts > 0:  # it comes back by itself (a collective that finally completes)
                self.stop_event.wait(lasts)
                with self.cond:
                    self.hung = False
                    self.cond.notify_all()
        while not self.term:
            self.stop_event.wait(1.0)
        return self._shutdown()

    def _shutdown(self):
        self.closing = True
        if self.rendezvous is not None:  # tokenizer_manager's ShutdownReq reaches every node's schedulers
            self.rendezvous.shutdown()
        self.out.bare("INFO:     Shutting down")
        with contextlib.suppress(Exception):
            self.httpd.shutdown()
            self.httpd.server_close()
        self.out.bare("INFO:     Waiting for application shutdown.")
        self.out.bare("INFO:     Application shutdown complete.")
        self.out.bare("INFO:     Finished server process [%d]" % os.getpid())
        self.gpus.release()
        return 0

    def _scheduler_loop(self):
        """Prefill batch lines for new requests; GPU utilisation follows the load."""
        last_util = None
        while not self.term:
            with self.cond:
                self.cond.wait(0.05)
                if self.hung:  # deadlocked: nothing is scheduled again
                    continue
                new = self.pending_prefill
                self.pending_prefill = []
                running = self.running
            if new:
                tokens = sum(new)
                gap = max(1e-3, time.time() - getattr(self, "_last_prefill", self.t0))
                self._last_prefill = time.time()
                usage = self.used_tokens / float(self.max_total_tokens or 1)
                if self.model.hybrid:
                    usage_msg = "full token usage: %.2f, mamba usage: %.2f, " % (usage, min(1.0, running / 256.0))
                else:
                    usage_msg = "token usage: %.2f, " % usage
                pending = "#pending-token: 0, " if self.V >= (0, 5, 23) else ""
                self.log("Prefill batch, #new-seq: %d, #new-token: %d, #cached-token: 0, %s#running-req: %d, "
                         "#queue-req: 0, %scuda graph: False, input throughput (token/s): %.2f"
                         % (len(new), tokens, usage_msg, max(0, running - len(new)), pending, tokens / gap),
                         0 if self.world > 1 else None)
                with self.cond:  # as SGLang's scheduler: a request's tokens come after its prefill is logged
                    self.prefills_logged += len(new)
                    self.cond.notify_all()
            util = min(97, 35 + running * 6) if running else 0
            if util != last_util:
                last_util = util
                with contextlib.suppress(Exception):
                    self.gpus.set(None, util=util, power_mw=75000 + util * 4500)

    def note_tokens(self, n):
        """Count generated tokens; log a Decode batch line every decode_log_interval steps."""
        with self.lock:
            self.metrics["gen"] += n
            self.gen_since_log += n
            self.used_tokens = max(0, self.used_tokens + n)
            # SGLang logs every decode_log_interval decode steps; a step makes one token per running request
            if self.gen_since_log < self.decode_log_interval * max(1, self.running):
                return
            now = time.time()
            gap = max(1e-3, now - self.last_decode_log)
            self.last_gen_throughput = self.gen_since_log / gap
            self.gen_since_log = 0
            self.last_decode_log = now
            running = self.running
            used = self.used_tokens
        usage = used / float(self.max_total_tokens or 1)
        if self.model.hybrid:
            usage_msg = ("#full token: %d, full token usage: %.2f, mamba num: %d, mamba usage: %.2f, "
                         % (used, usage, running, min(1.0, running / 256.0)))
        else:
            usage_msg = "#token: %d, token usage: %.2f, " % (used, usage)
        spec = ""
        if self.spec_on:
            spec = "accept len: %.2f, accept rate: %.2f, " % (self.accept_len,
                                                               (self.accept_len - 1) / max(1, self.spec_draft_tokens - 1))
        self.log("Decode batch, #running-req: %d, %s%scuda graph: True, gen throughput (token/s): %.2f, #queue-req: 0"
                 % (running, usage_msg, spec, self.last_gen_throughput), 0 if self.world > 1 else None)

    def usage(self, prompt, completion, reasoning=0):
        """UsageInfo as SGLang dumps it (entrypoints/openai/protocol.py UsageInfo); 0.5.23 adds
        completion_tokens_details (usage_processor.py:117-131; not in 0.5.19)."""
        usage = {"prompt_tokens": prompt, "total_tokens": prompt + completion, "completion_tokens": completion,
                 "prompt_tokens_details": None, "reasoning_tokens": reasoning}
        if self.V >= (0, 5, 23):
            usage["completion_tokens_details"] = {"reasoning_tokens": reasoning} if reasoning else None
        return usage

    def model_info(self):
        return {
            "model_path": self.model_path, "tokenizer_path": self.arg("--tokenizer-path") or self.model_path,
            "is_generation": True, "preferred_sampling_params": None, "weight_version": "default",
            "has_image_understanding": "vision_config" in self.model.config, "has_audio_understanding": False,
            "model_type": self.model.model_type, "architectures": self.model.config.get("architectures"),
        }

    def internal_state(self):
        order, values = self._server_args_values()
        state = dict((k, values[k]) for k in order)
        state["last_gen_throughput"] = round(self.last_gen_throughput, 4)
        state["memory_usage"] = {"weight": round(self.weight_mem_gb, 2), "kvcache": round(self.kv_mem_gb, 2),
                                 "token_capacity": int(self.max_total_tokens), "graph": round(self.graph_mem_gb, 2)}
        state["effective_max_running_requests_per_dp"] = self.max_running
        if self.spec_on and self.metrics["gen"] > 0:
            state["avg_spec_accept_length"] = self.accept_len
        return state

    def server_info(self):
        order, values = self._server_args_values()
        info = dict((k, values[k]) for k in order)
        info.update({"status": "ready" if self.ready else "starting", "max_total_num_tokens": self.max_total_tokens,
                     "max_req_input_len": max(1, min(self.context, self.max_total_tokens) - 5)})
        if self.V >= (0, 5, 23):
            info.update({"launch_command": "python -m sglang.launch_server " + " ".join(self._redacted_argv()),
                         "kv_events": None, "startup_time": self.startup_time, "frontend": "python"})
        info["internal_states"] = [self.internal_state()]
        info["version"] = self.version
        return info

    def _redacted_argv(self):
        out, hide = [], False
        for a in self.argv:
            if hide:
                out.append("<redacted>")
                hide = False
                continue
            if a.startswith("--api-key"):
                if "=" in a:
                    out.append("--api-key=<redacted>")
                    continue
                hide = True
            out.append(a)
        return out

    def metrics_text(self):
        labels = 'model_name="%s",engine_type="unified",tp_rank="0",pp_rank="0"' % self.served.replace(
            "\\", "\\\\").replace('"', '\\"')
        lines = []

        def gauge(name, doc, value):
            lines.extend(["# HELP %s %s" % (name, doc), "# TYPE %s gauge" % name,
                          "%s{%s} %s" % (name, labels, fnum(value))])

        def counter(name, doc, value):
            lines.extend(["# HELP %s %s" % (name, doc), "# TYPE %s counter" % name,
                          "%s{%s} %s" % (name, labels, fnum(value))])

        def histogram(name, doc, h):
            lines.extend(["# HELP %s %s" % (name, doc), "# TYPE %s histogram" % name])
            for b, c in zip(h.buckets, h.counts):
                lines.append('%s_bucket{%s,le="%s"} %s' % (name, labels, fnum(float(b)), fnum(c)))
            lines.append('%s_bucket{%s,le="+Inf"} %s' % (name, labels, fnum(h.count)))
            lines.append("%s_count{%s} %s" % (name, labels, fnum(h.count)))
            lines.append("%s_sum{%s} %s" % (name, labels, fnum(h.sum)))

        with self.lock:
            m = self.metrics
            running = self.running
            used = self.used_tokens
            gauge("sglang:num_running_reqs", "The number of running requests.", running)
            gauge("sglang:num_used_tokens", "The number of used tokens.", used)
            gauge("sglang:token_usage", "The token usage.", used / float(self.max_total_tokens or 1))
            gauge("sglang:gen_throughput", "The generation throughput (token/s).", self.last_gen_throughput)
            gauge("sglang:num_queue_reqs", "The number of requests in the waiting queue.", 0)
            gauge("sglang:cache_hit_rate", "The prefix cache hit rate.", 0.0)
            gauge("sglang:max_total_num_tokens", "Maximum total number of tokens in the KV cache pool.",
                  self.max_total_tokens)
            if self.spec_on:
                gauge("sglang:spec_accept_length", "The average acceptance length of speculative decoding.",
                      self.accept_len if m["gen"] else 0.0)
                gauge("sglang:spec_accept_rate", "The average acceptance rate of speculative decoding "
                      "(`accepted tokens / total draft tokens` in batch).",
                      (self.accept_len - 1) / max(1, self.spec_draft_tokens - 1) if m["gen"] else 0.0)
            gauge("sglang:utilization", "The utilization.", min(1.0, running / float(self.max_running or 1)))
            gauge("sglang:engine_startup_time", "The time taken for the engine to start up.", self.startup_time)
            gauge("sglang:engine_load_weights_time", "The time taken for the engine to load weights.",
                  self.load_time)
            counter("sglang:prompt_tokens_total", "Number of prefill tokens processed.", m["prompt"])
            counter("sglang:generation_tokens_total", "Number of generation tokens processed.", m["gen"])
            counter("sglang:cached_tokens_total", "Number of cached prompt tokens.", m["cached"])
            counter("sglang:num_requests_total", "Number of requests processed.", m["requests"])
            counter("sglang:num_aborted_requests_total", "Number of requests aborted.", m["aborted"])
            histogram("sglang:time_to_first_token_seconds", "Histogram of time to first token in seconds.", m["ttft"])
            histogram("sglang:inter_token_latency_seconds", "Histogram of inter-token latency in seconds.", m["itl"])
            histogram("sglang:e2e_request_latency_seconds", "Histogram of End-to-end request latency in seconds",
                      m["e2e"])
            histogram("sglang:queue_time_seconds", "Histogram of queueing time in seconds.", m["queue"])
        return "\n".join(lines) + "\n"
