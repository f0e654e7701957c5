"""The small server of gpuops' simulated host (``gpuops demo``, ``gpuops sim setup``).

A template: ``gpuops.sim.host.setup_simhost`` copies it to ``DIR/lib/PACKAGE-sim/PACKAGE_sim.py`` next
to ``demo.json`` (the engine's start-up lines, crash text, metric names and server module, from its
simulated-host part: ``engines.get().simhost().demo_script()``); ``python -m SERVER_MODULE ...`` on the
simulated host runs it. Standard library only. It replays the start-up at the host's pace (``DIR/state/sim.json``),
moves the GPUs' memory in ``DIR/state/gpus.json`` through the phases, then serves the API the
dashboard reads: /health, /health_generate, /v1/models, /model_info, /server_info, /metrics,
/v1/chat/completions (streaming too), /v1/completions, /generate.

Scenarios (``SCENARIOS``): ok; slow-download (only the fake hf is slow); hang-at-dist-init (silent
after the dist-init begin lines, until stopped); kv-cache-oom (the KV cache does not fit: each
rank's traceback, then the process kills itself). The tests' scenario engine (``GPUOPS_SIM_SERVER``)
knows more.
"""

from __future__ import annotations

import argparse
import contextlib
import fcntl
import json
import os
import signal
import sys
import threading
import time
import uuid
from http import HTTPStatus
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

SCENARIOS = ("ok", "slow-download", "hang-at-dist-init", "kv-cache-oom")

HERE = os.path.dirname(os.path.abspath(__file__))  # DIR/lib/PACKAGE-sim
LIB = os.path.dirname(HERE)
STATE = os.path.join(os.path.dirname(LIB), "state")
GiB = 1 << 30
PACE_DIVISOR = 60.0  # real seconds of a start are divided by this at pace 1 (as the scenario engine does)
WORDS = "the quick model answers with plain words so that a client can count its tokens".split()


def read_json(path, default=None):
    try:
        with open(path) as f:
            return json.load(f)
    except (OSError, ValueError):
        return default


class Stopped(Exception):
    """SIGTERM or SIGINT before the server was ready."""


class Gpus:
    """This process's memory on its GPUs in DIR/state/gpus.json (under SimHost's lock file)."""

    def __init__(self, indices):
        self.indices, self.pid = indices, os.getpid()

    def set(self, used):
        with open(os.path.join(STATE, ".gpus.lock"), "a") as lock:
            fcntl.flock(lock, fcntl.LOCK_EX)
            state = read_json(os.path.join(STATE, "gpus.json"), {}) or {}
            gpus = state.get("gpus") or []
            for i in self.indices:
                if i >= len(gpus):
                    continue
                procs = [p for p in gpus[i].get("processes") or [] if p.get("pid") != self.pid]
                mine = sum(int(p.get("used") or 0) for p in gpus[i].get("processes") or [] if p.get("pid") == self.pid)
                if used:
                    procs.append({"pid": self.pid, "used": int(used)})
                gpus[i]["processes"] = procs
                gpus[i]["memory_used"] = max(0, int(gpus[i].get("memory_used") or 0) - mine + int(used))
                gpus[i]["util"] = 0
            tmp = os.path.join(STATE, ".gpus.json.%d.tmp" % self.pid)
            with open(tmp, "w") as f:
                json.dump(state, f, indent=1)
            os.replace(tmp, os.path.join(STATE, "gpus.json"))

    def free(self):
        gpus = (read_json(os.path.join(STATE, "gpus.json"), {}) or {}).get("gpus") or []
        if not self.indices or self.indices[0] >= len(gpus):
            return 0
        g = gpus[self.indices[0]]
        return int(g.get("memory_total") or 0) - int(g.get("memory_reserved") or 0) - int(g.get("memory_used") or 0)


def model_facts(path):
    """(architecture, checkpoint bytes, shards, context) from the model folder (or the HF cache)."""
    folder = path if os.path.isdir(path) else None
    if folder is None and path.count("/") == 1:
        snaps = os.path.join(os.environ.get("HF_HOME") or os.path.expanduser("~/.cache/huggingface"), "hub",
                             "models--" + path.replace("/", "--"), "snapshots")
        with contextlib.suppress(OSError):
            folder = os.path.join(snaps, sorted(os.listdir(snaps))[-1])
    config = (read_json(os.path.join(folder, "config.json")) if folder else None) or {}
    index = (read_json(os.path.join(folder, "model.safetensors.index.json")) if folder else None) or {}
    size = int((index.get("metadata") or {}).get("total_size") or 0)
    shards = len(set((index.get("weight_map") or {}).values()))
    if not size and folder:
        sizes = [os.path.getsize(os.path.join(folder, f)) for f in os.listdir(folder) if f.endswith(".safetensors")]
        size, shards = sum(sizes), len(sizes)
    arch = (config.get("architectures") or ["LlamaForCausalLM"])[0]
    return arch, size or 8 * GiB, shards or 1, int(config.get("max_position_embeddings") or 32768)


class Demo:
    def __init__(self, argv):
        p = argparse.ArgumentParser(prog="launch_server.py")
        p.add_argument("--model-path", "--model", required=True)
        p.add_argument("--served-model-name")
        p.add_argument("--host", default="127.0.0.1")
        p.add_argument("--port", type=int, default=30000)
        p.add_argument("--tp-size", "--tp", "--tensor-parallel-size", type=int, default=1)
        p.add_argument("--api-key")
        p.add_argument("--context-length", type=int)
        self.args, _ = p.parse_known_args(argv)  # the other flags change nothing here
        self.argv = argv
        self.script = read_json(os.path.join(HERE, "demo.json"))
        sim = read_json(os.path.join(STATE, "sim.json"), {}) or {}
        self.scenario, self.pace = sim.get("scenario") or "ok", float(sim.get("pace") or 1.0)
        self.token_delay = float(sim.get("token_delay_s", 0.01))
        self.tp = max(1, self.args.tp_size)
        visible = [v for v in os.environ.get("CUDA_VISIBLE_DEVICES", "").split(",") if v.strip().isdigit()]
        self.gpus = Gpus([int(v) for v in visible][: self.tp] if visible else list(range(self.tp)))
        self.stop = threading.Event()
        self.ready = False
        self.served = self.args.served_model_name or self.args.model_path
        arch, size, shards, context = model_facts(self.args.model_path)
        self.requests = self.generated = 0
        self.engine = str((self.script or {}).get("engine") or "")  # who owns the models it serves
        package = str((self.script or {}).get("module") or "").split(".")[0]  # the stand-in package
        self.figures = {"package_dir": os.path.join(LIB, package), "pid": os.getpid(), "host": self.args.host,
                        "port": self.args.port, "arch": arch, "shards": shards, "shard_rate": 1.0, "dist_s": 0.5,
                        "context": self.args.context_length or context, "weights_gb": size / self.tp / GiB,
                        "client_port": 40000 + os.getpid() % 20000, "graph_gb": 0.5, "graph_s": 1.0,
                        "load_s": 60.0 * self.pace / PACE_DIVISOR, "load_t": "00:01",
                        "server_args": "ServerArgs(model_path=%r, tp_size=%d, port=%d)" % (
                            self.args.model_path, self.tp, self.args.port)}

    # ---------------------------------------------------------------- output

    def emit(self, where, text, template=True):
        if template:  # a line of the script (a request's line is literal text)
            text = text.format(**dict(self.figures, avail=self.gpus.free() / GiB))
        stamp = time.strftime("%Y-%m-%d %H:%M:%S")
        if where in ("out", "err"):
            out = text + "\n"
        elif where == "main" or self.tp == 1:
            out = "[%s] %s\n" % (stamp, text)
        else:
            out = "".join("[%s TP%d] %s\n" % (stamp, r, text) for r in range(1 if where == "rank0" else self.tp))
        stream = sys.stderr if where == "err" else sys.stdout
        with contextlib.suppress(OSError, ValueError):
            stream.write(out)
            stream.flush()

    def wait(self, real_seconds):
        if self.stop.wait(max(0.0, real_seconds) * self.pace / PACE_DIVISOR):
            raise Stopped()

    # ---------------------------------------------------------------- the start

    def run(self):
        signal.signal(signal.SIGTERM, lambda *_: self.stop.set())
        signal.signal(signal.SIGINT, lambda *_: self.stop.set())
        if not self.script:
            sys.stderr.write("gpuops simulated host: %s is missing (run gpuops sim setup again)\n"
                             % os.path.join(HERE, "demo.json"))
            return 1
        try:
            for step in self.script["startup"]:
                self.wait(step["before_s"])
                self.phase(step["phase"])
                for where, text in step["lines"]:
                    self.emit(where, text)
                if step["phase"] == "dist-init" and self.scenario == "hang-at-dist-init":
                    self.stop.wait()  # alive and silent until stopped
                    raise Stopped()
            while not self.stop.wait(1.0):
                pass
            for where, text in self.script["shutdown"]:
                self.emit(where, text)
            return 0
        except Stopped:  # stopped during the start: die of the signal, as the engine does
            with contextlib.suppress(Exception):
                self.gpus.set(0)
            signal.signal(signal.SIGTERM, signal.SIG_DFL)
            os.kill(os.getpid(), signal.SIGTERM)
            return 143
        except SystemExit as e:
            return e.code
        finally:
            with contextlib.suppress(Exception):
                self.gpus.set(0)

    def phase(self, name):
        w = self.figures["weights_gb"] * GiB
        if name == "weights-end":
            self.gpus.set(w)
        elif name == "kv-cache":
            if self.scenario == "kv-cache-oom":
                for where, text in self.script["kv_crash"]:
                    self.emit(where, text)
                self.gpus.set(0)
                os.kill(os.getpid(), signal.SIGKILL)
            kv = max(0, int(self.gpus.free() * 0.85))
            self.figures.update(kv_half_gb=kv / 2 / GiB, kv_tokens=max(1, kv // (128 * 1024)))
            self.gpus.set(w + kv)
        elif name == "cuda-graph-end":
            self.gpus.set(w + self.figures["kv_half_gb"] * 2 * GiB + self.figures["graph_gb"] * GiB)
        elif name == "http":
            self.serve()
        elif name == "warmup":
            self.ready = True

    def serve(self):
        demo = self

        class Server(ThreadingHTTPServer):
            daemon_threads = True
            allow_reuse_address = True

        try:
            self.httpd = Server((self.args.host, self.args.port), make_handler(demo))
        except OSError as e:
            self.emit("out", "ERROR:    [Errno %d] error while attempting to bind on address (%r, %d): %s"
                      % (e.errno or 98, self.args.host, self.args.port, (e.strerror or str(e)).lower()), False)
            raise SystemExit(1) from None
        threading.Thread(target=self.httpd.serve_forever, kwargs={"poll_interval": 0.2}, daemon=True).start()

    def metrics(self):
        names = self.script["metrics"]
        values = {"running_reqs": 0, "queued_reqs": 0, "gen_throughput": 0.0, "token_usage": 0.0}
        label = 'model_name="%s"' % self.served.replace("\\", "\\\\").replace('"', '\\"')
        lines = []
        for key, value in values.items():
            lines += ["# TYPE %s gauge" % names[key], "%s{%s} %s" % (names[key], label, float(value))]
        return "\n".join(lines) + "\n"


def make_handler(demo):
    class Handler(BaseHTTPRequestHandler):
        protocol_version = "HTTP/1.1"

        def log_message(self, fmt, *args):  # uvicorn's access line
            code = str(args[1]) if len(args) > 1 else ""
            phrase = HTTPStatus(int(code)).phrase if code.isdigit() else ""
            demo.emit("out", 'INFO:     %s:%d - "%s" %s %s' % (self.client_address[0], self.client_address[1],
                                                               self.requestline, code, phrase), template=False)

        def send(self, code, body, ctype="application/json"):
            data = body if isinstance(body, bytes) else json.dumps(body).encode()
            self.send_response(code)
            self.send_header("Content-Type", ctype)
            self.send_header("Content-Length", str(len(data)))
            self.end_headers()
            self.wfile.write(data)

        def do_GET(self):
            path = self.path.split("?", 1)[0]
            if not self.authorized():
                return None
            if path in ("/health", "/health_generate"):
                return self.send(200 if demo.ready else 503, b"", "text/plain")
            if path == "/v1/models":
                return self.send(200, {"object": "list", "data": [{"id": demo.served, "object": "model",
                                                                   "owned_by": demo.engine, "root": demo.served}]})
            if path in ("/model_info", "/get_model_info"):
                return self.send(200, {"model_path": demo.args.model_path, "is_generation": True})
            if path in ("/server_info", "/get_server_info"):
                return self.send(200, {"model_path": demo.args.model_path, "tp_size": demo.tp, "port": demo.args.port,
                                       "internal_states": [{"avg_spec_accept_length": None}]})
            if path == "/metrics":
                return self.send(200, demo.metrics().encode(), "text/plain; version=0.0.4")
            return self.send(404, {"detail": "Not Found"})

        def authorized(self):
            key = demo.args.api_key
            if key and self.headers.get("Authorization") != "Bearer " + key:
                self.send(401, {"error": "Unauthorized"})
                return False
            return True

        def do_POST(self):
            path = self.path.split("?", 1)[0]
            n = int(self.headers.get("Content-Length") or 0)
            try:
                body = json.loads(self.rfile.read(n) or b"{}")
            except ValueError:
                return self.send(400, {"error": {"message": "Invalid request body"}})
            if not self.authorized():
                return None
            if path not in ("/v1/chat/completions", "/v1/completions", "/generate"):
                return self.send(404, {"detail": "Not Found"})
            if not demo.ready:
                return self.send(503, {"error": {"message": "The server is not ready"}})
            try:
                count = int(body.get("max_tokens") or body.get("max_completion_tokens") or 16)
            except (TypeError, ValueError):
                return self.send(400, {"error": {"message": "max_tokens must be an integer"}})
            words = [(" " if i else "") + WORDS[i % len(WORDS)] for i in range(max(1, min(count, 4096)))]
            demo.requests += 1
            demo.generated += len(words)
            rid, model = uuid.uuid4().hex, body.get("model") or "default"
            chat = path == "/v1/chat/completions"
            usage = {"prompt_tokens": 8, "completion_tokens": len(words), "total_tokens": 8 + len(words)}
            if not body.get("stream"):
                time.sleep(demo.token_delay * len(words))
                text = "".join(words)
                if path == "/generate":
                    return self.send(200, {"text": text, "meta_info": {"id": rid, "completion_tokens": len(words)}})
                choice = ({"index": 0, "message": {"role": "assistant", "content": text}, "finish_reason": "length"}
                          if chat else {"index": 0, "text": text, "finish_reason": "length"})
                return self.send(200, {"id": rid, "object": "chat.completion" if chat else "text_completion",
                                       "created": int(time.time()), "model": model, "choices": [choice],
                                       "usage": usage})
            self.send_response(200)
            self.send_header("Content-Type", "text/event-stream")
            self.send_header("Connection", "close")
            self.end_headers()
            self.close_connection = True
            for i, w in enumerate(words):
                time.sleep(demo.token_delay)
                last = "length" if i == len(words) - 1 else None
                choice = ({"index": 0, "delta": {"content": w}, "finish_reason": last} if chat
                          else {"index": 0, "text": w, "finish_reason": last})
                self.chunk({"id": rid, "object": "chat.completion.chunk" if chat else "text_completion",
                            "created": int(time.time()), "model": model, "choices": [choice]})
            if (body.get("stream_options") or {}).get("include_usage"):
                self.chunk({"id": rid, "model": model, "choices": [], "usage": usage})
            self.wfile.write(b"data: [DONE]\n\n")
            return None

        def chunk(self, doc):
            self.wfile.write(b"data: " + json.dumps(doc).encode() + b"\n\n")
            self.wfile.flush()

    return Handler


def main(argv=None):
    return Demo(sys.argv[1:] if argv is None else argv).run()


if __name__ == "__main__":
    sys.exit(main())
