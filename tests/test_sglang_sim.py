"""The simulated host's SGLang server, fake hf and fake systemctl, run for real: the wrapper
python as a subprocess (``python -m sglang.launch_server ...``), gpuops' reporter reading the
fake pynvml, httpx against the HTTP API, prometheus_client's parser on /metrics, the real
systemd-journal-remote and journalctl behind the fake systemctl. No mocks."""

from __future__ import annotations

import json
import os
import re
import shutil
import signal
import subprocess
import threading
import time
from pathlib import Path

import httpx
import pytest

from gpuops.core.hosts.host import script_source
from gpuops.core.hosts.programs import reporter
from gpuops.core.engines.sglang import versions as sv
from gpuops.sim.host import SimHost, setup_simhost
from tests.sshd import free_port

REPORTER_SOURCE = script_source(reporter)  # exactly what gpuops sends
CONFIGS = Path(__file__).parent / "data" / "configs"
GIB = 1 << 30
MIB = 1 << 20
QWEN35 = "qwen3_5__Qwen3.5-122B-A10B.json"  # hybrid (GDN), 1 MTP layer
QWEN3 = "qwen3__Qwen3-8B.json"  # dense
LINE = re.compile(r"^\[\d{4}-\d\d-\d\d \d\d:\d\d:\d\d(?P<prefix>(?: TP\d+)?)\] (?P<msg>.*)$")
JOURNALCTL = shutil.which("journalctl")
JOURNAL_REMOTE = Path("/lib/systemd/systemd-journal-remote")


def model_dir(root: Path, config: str, total_size: int, shards: int = 4) -> Path:
    """A model folder as the planner and the simulator read it: config.json and the index."""
    d = root / config.split("__")[1].removesuffix(".json")
    d.mkdir(parents=True, exist_ok=True)
    shutil.copy(CONFIGS / config, d / "config.json")
    weight_map = {f"model.layers.{i}.w": f"model-{i + 1:05d}-of-{shards:05d}.safetensors" for i in range(shards)}
    (d / "model.safetensors.index.json").write_text(json.dumps({"metadata": {"total_size": total_size},
                                                                 "weight_map": weight_map}))
    return d


class Server:
    """`DIR/bin/python -m sglang.launch_server ARGS` with its output lines timestamped."""

    def __init__(self, host: SimHost, *args, env=None):
        self.port = free_port()
        argv = [str(host.python), "-m", "sglang.launch_server", *map(str, args)]
        if "--port" not in args:
            argv += ["--port", str(self.port)]
        else:
            self.port = int(args[list(args).index("--port") + 1])
        self.host = host
        self.lines: list[tuple[float, str]] = []
        self.proc = subprocess.Popen(argv, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True,
                                     env=dict(os.environ, **(env or {})))
        self.reader = threading.Thread(target=self._read, daemon=True)
        self.reader.start()
        self.url = f"http://127.0.0.1:{self.port}"

    def _read(self):
        for line in self.proc.stdout:
            self.lines.append((time.time(), line.rstrip("\n")))

    @property
    def text(self) -> list[str]:
        return [line for _, line in self.lines]

    def wait_for(self, pattern: str, timeout: float = 20) -> tuple[float, str]:
        rx = re.compile(pattern)
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            for t, line in list(self.lines):
                if rx.search(line):
                    return t, line
            if self.proc.poll() is not None and not self.reader.is_alive():
                break
            time.sleep(0.01)
        raise AssertionError(f"no line matching {pattern!r}; got:\n" + "\n".join(x[:200] for x in self.text[-40:]))

    def first(self, pattern: str) -> float:
        rx = re.compile(pattern)
        return next(t for t, line in self.lines if rx.search(line))

    def wait(self, timeout: float = 20) -> int:
        rc = self.proc.wait(timeout)
        self.reader.join(5)
        return rc

    def stop(self):
        if self.proc.poll() is None:
            self.proc.kill()
        self.wait(10)


def report(host: SimHost) -> dict:
    res = subprocess.run([str(host.python), "-c", REPORTER_SOURCE, "--once"], capture_output=True, text=True,
                         timeout=20)
    assert res.returncode == 0, res.stderr
    return json.loads(res.stdout)


def messages(lines):
    """(prefix, message) of the logged lines, in order."""
    out = []
    for line in lines:
        m = LINE.match(line)
        if m:
            out.append((m.group("prefix").strip(), m.group("msg")))
    return out


def in_order(lines: list[str], patterns: list[str]) -> None:
    i = 0
    for p in patterns:
        rx = re.compile(p)
        while i < len(lines) and not rx.search(lines[i]):
            i += 1
        assert i < len(lines), f"{p!r} missing or out of order; lines:\n" + "\n".join(x[:160] for x in lines)
        i += 1


@pytest.fixture
def models(tmp_path) -> dict[str, Path]:
    root = tmp_path / "models"
    return {"qwen35": model_dir(root, QWEN35, 250_170_000_000, shards=39),
            "qwen3": model_dir(root, QWEN3, 16_381_470_720, shards=5)}


# ------------------------------------------------------------------ startup lines, two wordings


def test_startup_lines_0_5_10_old_wording_with_mtp(tmp_path, models):
    host = setup_simhost(tmp_path / "sim", gpus=4, engine_version="0.5.10", pace=0.05)
    host.set_sim(token_delay_s=0.001)
    srv = Server(host, "--model-path", models["qwen35"], "--tp-size", "2", "--reasoning-parser", "qwen3",
                 "--tool-call-parser", "qwen3_coder", "--speculative-algorithm", "NEXTN",
                 "--speculative-num-steps", "3", "--speculative-eagle-topk", "1", "--speculative-num-draft-tokens",
                 "4", "--mamba-scheduler-strategy", "extra_buffer", "--mem-fraction-static", "0.9")
    try:
        srv.wait_for("The server is fired up and ready to roll!")
        lines = srv.text
        in_order(lines, [
            r"/sglang/launch_server\.py:51: UserWarning: 'python -m sglang\.launch_server' is still supported",
            r"^Max running requests is reset to 48 for speculative decoding\.",
            r"^\[[^]]+\] server_args=ServerArgs\(model_path='%s', " % re.escape(str(models["qwen35"])),
            r"^\[[^]]+ TP0\] Init torch distributed begin\.$",
            r"^\[[^]]+ TP1\] Init torch distributed begin\.$",
            r"^\[[^]]+ TP0\] sglang is using nccl==2\.27\.5$",
            r"^\[[^]]+ TP0\] Init torch distributed ends\. elapsed=\d+\.\d\d s, mem usage=0\.00 GB$",
            r"^\[[^]]+ TP0\] Load weight begin\. avail mem=\d+\.\d\d GB$",
            r"^Loading safetensors checkpoint shards:   0% Completed \| 0/39 \[00:00<\?, \?it/s\]$",
            r"^Loading safetensors checkpoint shards: 100% Completed \| 39/39 \[\d\d:\d\d<00:00, +\d+\.\d\d(it/s|s/it)\]$",
            r"^\[[^]]+ TP1\] Load weight end\. elapsed=\d+\.\d\d s, type=Qwen3_5MoeForConditionalGeneration, "
            r"avail mem=\d+\.\d\d GB, mem usage=\d+\.\d\d GB\.$",
            r"^\[[^]]+ TP0\] Mamba Cache is allocated\. max_mamba_cache_size: \d+, conv_state size: \d+\.\d\dGB, "
            r"ssm_state size: \d+\.\d\dGB intermediate_ssm_state_cache size: \d+\.\d\dGB "
            r"intermediate_conv_window_cache size: \d+\.\d\dGB $",
            r"^\[[^]]+ TP0\] KV Cache is allocated\. #tokens: \d+, K size: \d+\.\d\d GB, V size: \d+\.\d\d GB$",
            r"^\[[^]]+ TP0\] Memory pool end\. avail mem=\d+\.\d\d GB$",
            r"^\[[^]]+ TP0\] Capture cuda graph begin\. This can take up to several minutes\. avail mem=\d+\.\d\d GB$",
            r"^\[[^]]+ TP0\] Capture cuda graph bs \[1, 2, 3, 4, 5, 6, 7, 8, 10, ",
            r"^Capturing batches \(bs=\d+ avail_mem=\d+\.\d\d GB\): ",
            r"^\[[^]]+ TP1\] Capture cuda graph end\. Time elapsed: \d+\.\d\d s\. mem usage=\d+\.\d\d GB\. "
            r"avail mem=\d+\.\d\d GB\.$",
            r"^\[[^]]+ TP0\] Init torch distributed begin\.$",  # the draft worker's own model runner
            r"^\[[^]]+ TP0\] Load weight end\. elapsed=\d+\.\d\d s, type=Qwen3_5ForCausalLMMTP, ",
            r"^\[[^]]+ TP0\] Capture draft cuda graph begin\. This can take up to several minutes\. ",
            r"^\[[^]]+ TP0\] Capture draft cuda graph end\. Time elapsed: ",
            r"^\[[^]]+ TP0\] Capture draft extend cuda graph begin\. ",
            r"^\[[^]]+ TP1\] Capture draft extend cuda graph end\. ",
            r"^\[[^]]+ TP0\] max_total_num_tokens=\d+, chunked_prefill_size=8192, max_prefill_tokens=16384, "
            r"max_running_requests=48, context_len=262144, available_gpu_mem=\d+\.\d\d GB$",
            r"^INFO:     Started server process \[%d\]$" % srv.proc.pid,
            r"^INFO:     Waiting for application startup\.$",
            r"^INFO:     Application startup complete\.$",
            r"^INFO:     Uvicorn running on http://127\.0\.0\.1:%d \(Press CTRL\+C to quit\)$" % srv.port,
            r'^INFO:     127\.0\.0\.1:\d+ - "GET /model_info HTTP/1\.1" 200 OK$',
            r"^\[[^]]+ TP0\] Prefill batch, #new-seq: 1, #new-token: 6, #cached-token: 0, full token usage: ",
            r'^INFO:     127\.0\.0\.1:\d+ - "POST /generate HTTP/1\.1" 200 OK$',
            r"^\[[^]]+\] The server is fired up and ready to roll!$",
        ])
        # the new wordings are absent
        assert not any("Init parallel" in x or "Memory baseline" in x or "dtype: torch" in x for x in lines)
        # every logged line has SGLang's format; rank prefixes only on the schedulers' lines
        msgs = messages(lines)
        assert {p for p, _ in msgs} == {"", "TP0", "TP1"}
        assert [m for p, m in msgs if p == ""][:1][0].startswith("server_args=ServerArgs(")
        sa = next(m for p, m in msgs if m.startswith("server_args="))
        assert len(sa) > 5000 and "tp_size=2" in sa and "speculative_algorithm='EAGLE'" in sa
        assert "mamba_scheduler_strategy='extra_buffer'" in sa and "tensor_parallel_size" not in sa
        # /server_info: MTP accept length after the warmup request
        info = httpx.get(srv.url + "/server_info", timeout=10).json()
        assert info["version"] == "0.5.10" and info["tp_size"] == 2 and info["speculative_algorithm"] == "EAGLE"
        assert info["speculative_num_draft_tokens"] == 4 and info["status"] == "ready"
        assert info["max_total_num_tokens"] > 0 and "internal_states" in info
        state = info["internal_states"][0]
        assert state["avg_spec_accept_length"] > 1 and set(state["memory_usage"]) == {"weight", "kvcache",
                                                                                       "token_capacity", "graph"}
        # 0.5.10's chat JSON: every chunk pydantic with all delta fields; null content beside tool_calls
        tools = [{"type": "function", "function": {"name": "f", "parameters": {"type": "object", "properties": {}}}}]
        body = {"messages": [{"role": "user", "content": "hi"}], "tools": tools}
        message = httpx.post(srv.url + "/v1/chat/completions", json=body, timeout=10).json()["choices"][0]["message"]
        assert message["content"] is None and message["tool_calls"][0]["function"] == {"name": "f", "arguments": "{}"}
        with httpx.stream("POST", srv.url + "/v1/chat/completions", json=dict(body, stream=True), timeout=10) as r:
            data = [json.loads(x) for x in sse(r)[:-1]]
        assert all(d["usage"] is None and set(d["choices"][0]["delta"]) == {"role", "content", "reasoning_content",
                                                                           "tool_calls"} for d in data)
    finally:
        srv.stop()


def test_startup_lines_0_5_23_new_wording(tmp_path, models):
    host = setup_simhost(tmp_path / "sim", gpus=4, engine_version="0.5.23", pace=0.05)
    srv = Server(host, "--model-path", models["qwen3"], "--tp", "2", "--served-model-name", "q8")
    try:
        srv.wait_for("The server is fired up and ready to roll!")
        lines = srv.text
        in_order(lines, [
            r"/sglang/launch_server\.py:71: UserWarning: ",
            r"^\[[^]]+\] server_args=\{'model_path': '%s', " % re.escape(str(models["qwen3"])),
            r"^\[[^]]+ TP0\] Init parallel begin\.$",
            r"^\[[^]]+ TP1\] Init parallel begin\.$",
            r"^\[[^]]+ TP0\] sglang is using nccl==",
            r"^\[[^]]+ TP1\] Init parallel ends\. elapsed=\d+\.\d\d s$",
            r"^\[[^]]+ TP0\] Memory baseline taken\. mem usage=0\.00 GB$",
            r"^\[[^]]+ TP0\] Load weight begin\. avail mem=",
            r"^Loading safetensors checkpoint shards: 100% Completed \| 5/5 ",
            r"^\[[^]]+ TP0\] Load weight end\. elapsed=\d+\.\d\d s, type=Qwen3ForCausalLM, avail mem=",
            r"^\[[^]]+ TP0\] KV Cache is allocated\. dtype: torch\.bfloat16, #tokens: \d+, K size: \d+\.\d\d GB, "
            r"V size: \d+\.\d\d GB$",
            r"^\[[^]]+ TP1\] Memory pool end\. avail mem=",
            r"^\[[^]]+ TP0\] Capture target decode CUDA graph begin\. backend=full, num_tokens_per_req=1, "
            r"avail mem=\d+\.\d\d GB$",
            r"^\[[^]]+ TP1\] Capture target decode CUDA graph end\. bs=\[1, 2, 4, 8, 12, 16, 24, .*\], "
            r"elapsed=\d+\.\d\d s, mem usage=\d+\.\d\d GB, avail mem=\d+\.\d\d GB\.$",
            r"^\[[^]]+ TP0\] max_total_num_tokens=\d+, chunked_prefill_size=8192, ",
            r"^INFO:     Uvicorn running on ",
            r"^\[[^]]+ TP0\] Prefill batch, #new-seq: 1, #new-token: 6, #cached-token: 0, token usage: 0\.00, "
            r"#running-req: 0, #queue-req: 0, #pending-token: 0, cuda graph: False, input throughput",
            r"^\[[^]]+\] The server is fired up and ready to roll!$",
        ])
        logged = [m for _, m in messages(lines) if not m.startswith("server_args=")]
        assert not any("Init torch distributed" in m or "Mamba Cache" in m or "draft" in m for m in logged)
        assert not any("Capture cuda graph bs" in x for x in lines)
        models_doc = httpx.get(srv.url + "/v1/models", timeout=10).json()
        assert models_doc["data"][0]["id"] == "q8" and models_doc["data"][0]["root"] == "q8"
        assert models_doc["data"][0]["max_model_len"] == 40960
        info = httpx.get(srv.url + "/server_info", timeout=10).json()
        assert "avg_spec_accept_length" not in info["internal_states"][0]
        assert info["served_model_name"] == "q8" and info["version"] == "0.5.23"
    finally:
        srv.stop()


@pytest.mark.parametrize("version,old", [("0.5.13", True), ("0.5.20", True), ("0.5.21", False)])
def test_dist_init_wording_changes_at_0_5_21(tmp_path, models, version, old):
    host = setup_simhost(tmp_path / "sim", gpus=2, engine_version=version, pace=0.02)
    srv = Server(host, "--model-path", models["qwen3"], "--skip-server-warmup")
    try:
        srv.wait_for("fired up")
        lines = srv.text
        assert any(x.endswith("] Init torch distributed begin.") for x in lines) is old
        assert any(x.endswith("] Init parallel begin.") for x in lines) is not old
        assert all(not LINE.match(x) or not LINE.match(x).group("prefix") for x in lines)  # TP1: no prefix
        kv = next(x for x in lines if "KV Cache is allocated." in x)
        assert ("dtype: torch.bfloat16" in kv) is (version != "0.5.12")
        graph = next(x for x in lines if "graph begin" in x)
        if version == "0.5.13":
            assert re.search(r"\] Capture cuda graph begin\. This can take up to several minutes\. "
                             r"avail mem=\d+\.\d\d GB$", graph)
        else:
            assert re.search(r"\] Capture target decode CUDA graph begin\. backend=full, num_tokens_per_req=1, "
                             r"bs=\[1, 2, 4, .*\], avail mem=\d+\.\d\d GB$", graph)
    finally:
        srv.stop()


# ------------------------------------------------------------------ memory through the phases


def test_gpu_memory_follows_the_phases_and_sigterm_frees_it(tmp_path, models):
    host = setup_simhost(tmp_path / "sim", gpus=4, engine_version="0.5.10", pace=0.4)
    sampler = subprocess.Popen([str(host.python), "-c", REPORTER_SOURCE, "--interval", "0.02"],
                               stdout=subprocess.PIPE, text=True)
    samples: list[tuple[float, list[int], list[list[dict]]]] = []

    def read():
        for line in sampler.stdout:
            d = json.loads(line)
            samples.append((d["t"], [g["memory_used_bytes"] for g in d["gpus"]], [g["processes"] for g in d["gpus"]]))

    threading.Thread(target=read, daemon=True).start()
    while not samples:
        time.sleep(0.01)
    srv = Server(host, "--model-path", models["qwen35"], "--tp", "2", "--mem-fraction-static", "0.9",
                 env={"CUDA_VISIBLE_DEVICES": "1,3"})
    try:
        t_ready, _ = srv.wait_for("fired up")
        time.sleep(0.1)
        t_load = srv.first(r"TP0\] Load weight begin")
        t_loaded = srv.first(r"TP1\] Load weight end")
        t_dist = srv.first(r"Init torch distributed begin")
        total = host.read_state()["gpus"][1]["memory_total"]
        weights = 250_170_000_000 / 2 * 48 / 49  # per GPU, the MTP layer's share left to the draft
        before = [s for s in samples if s[0] < t_load - 0.05]
        assert before and any(t >= t_dist for t, _, _ in before)  # sampled during dist init
        assert all(used == [0, 0, 0, 0] and procs == [[], [], [], []] for _, used, procs in before)
        loading = [s for s in samples if t_load < s[0] < t_loaded - 0.05]
        assert any(0 < s[1][1] < 0.9 * weights and s[1][1] == s[1][3] for s in loading), loading  # growing
        after = [s for s in samples if s[0] > t_ready]
        used = after[-1][1]
        assert used[0] == used[2] == 0 and used[1] == used[3]  # the GPUs of CUDA_VISIBLE_DEVICES only
        assert 0.88 * total < used[1] < 0.95 * total  # weights + KV cache + graphs ~ mem_fraction_static
        assert [p["pid"] for p in after[-1][2][1]] == [srv.proc.pid]
        assert after[-1][2][1][0]["used_bytes"] == used[1]
        # nvidia-smi agrees
        smi = subprocess.run([str(host.bin_dir / "nvidia-smi"), "--query-compute-apps=pid,used_memory",
                              "--format=csv,noheader,nounits"], capture_output=True, text=True)
        assert smi.stdout.splitlines() == [f"{srv.proc.pid}, {-(-used[1] // MIB)}"] * 2
        # the log's numbers agree with the GPUs
        kv = next(x for x in srv.text if "TP0] KV Cache is allocated" in x)
        assert int(re.search(r"#tokens: (\d+)", kv).group(1)) > 0
        # SIGTERM: a graceful stop, exit 0, memory freed
        srv.proc.send_signal(signal.SIGTERM)
        assert srv.wait(10) == 0
        assert srv.text[-4:] == ["INFO:     Shutting down", "INFO:     Waiting for application shutdown.",
                                 "INFO:     Application shutdown complete.",
                                 f"INFO:     Finished server process [{srv.proc.pid}]"]
        data = report(host)
        assert [g["memory_used_bytes"] for g in data["gpus"]] == [0, 0, 0, 0]
        assert all(g["processes"] == [] for g in data["gpus"])
        assert all(g["processes"] == [] and g["memory_used"] == 0 for g in host.read_state()["gpus"])
    finally:
        srv.stop()
        sampler.kill()
        sampler.wait()


def test_sigkill_leaves_no_counted_memory(tmp_path, models):
    host = setup_simhost(tmp_path / "sim", gpus=2, pace=0.02)
    srv = Server(host, "--model-path", models["qwen3"], "--tp", "2")
    try:
        srv.wait_for("fired up")
        assert report(host)["gpus"][0]["memory_used_bytes"] > 10 * GIB
        srv.proc.send_signal(signal.SIGKILL)
        assert srv.wait(10) == -signal.SIGKILL
        state = host.read_state()  # the entries are still written there ...
        assert [p["pid"] for p in state["gpus"][0]["processes"]] == [srv.proc.pid]
        data = report(host)  # ... but the dead process counts for nothing
        assert [g["memory_used_bytes"] for g in data["gpus"]] == [0, 0]
        assert all(g["processes"] == [] for g in data["gpus"])
        smi = subprocess.run([str(host.bin_dir / "nvidia-smi"), "--query-gpu=memory.used",
                              "--format=csv,noheader,nounits"], capture_output=True, text=True)
        assert smi.stdout == "0\n0\n"
        # the next server cleans the stale entries up when it writes its own
        again = Server(host, "--model-path", models["qwen3"], "--tp", "2")
        try:
            again.wait_for("fired up")
            assert [p["pid"] for p in host.read_state()["gpus"][0]["processes"]] == [again.proc.pid]
        finally:
            again.stop()
    finally:
        srv.stop()


# ------------------------------------------------------------------ scenarios


def test_hang_at_dist_init(tmp_path, models):
    host = setup_simhost(tmp_path / "sim", gpus=2, engine_version="0.5.10", scenario="hang-at-dist-init", pace=0.02)
    # without NCCL_DEBUG a real hang says nothing after "sglang is using nccl"; with it, NCCL's INFO lines
    srv = Server(host, "--model-path", models["qwen35"], "--tp", "2")
    try:
        srv.wait_for(r"sglang is using nccl==")
        time.sleep(1.0)
        assert srv.proc.poll() is None and not any("NCCL INFO" in x for x in srv.text)
        assert [m for _, m in messages(srv.text)][-1] == "sglang is using nccl==2.27.5"
    finally:
        srv.stop()
    srv = Server(host, "--model-path", models["qwen35"], "--tp", "2", env={"NCCL_DEBUG": "INFO"})
    try:
        srv.wait_for(r"NCCL INFO ncclCommInitRank .* rank 1 nranks 2 .* - Init START$")
        time.sleep(1.0)  # a whole ok start at this pace is well under this
        assert srv.proc.poll() is None
        lines = srv.text
        assert [m for _, m in messages(lines)][-3:] == ["Init torch distributed begin.", "Init torch distributed begin.",
                                                         "sglang is using nccl==2.27.5"]
        assert re.match(r"^\S+:%d:\d+ \[0\] NCCL INFO ncclCommInitRank comm 0x[0-9a-f]+ rank 0 nranks 2 cudaDev 0 "
                        r"nvmlDev 0 busId 18000 commId 0x[0-9a-f]{16} - Init START$" % srv.proc.pid, lines[-2])
        assert not any("Load weight" in x for x in lines)
        data = report(host)
        assert [g["memory_used_bytes"] for g in data["gpus"]] == [0, 0]
        srv.proc.send_signal(signal.SIGTERM)  # no handler gets there in a real NCCL hang: it dies of it
        assert srv.wait(10) == -signal.SIGTERM
    finally:
        srv.stop()
    # the new wording in a new version
    host = setup_simhost(tmp_path / "sim", gpus=2, engine_version="0.5.23", scenario="hang-at-dist-init", pace=0.02)
    srv = Server(host, "--model-path", models["qwen3"], "--tp", "2", env={"NCCL_DEBUG": "INFO"})
    try:
        srv.wait_for(r"rank 1 nranks 2 .* - Init START$")
        assert [m for _, m in messages(srv.text)][-3:] == ["Init parallel begin.", "Init parallel begin.",
                                                            "sglang is using nccl==2.27.5"]
    finally:
        srv.stop()


SPEC_ERROR = ("ValueError: Speculative decoding for Qwen3_5MoeForConditionalGeneration is not compatible with radix "
              "cache when using --mamba-scheduler-strategy no_buffer.To use radix cache with speculative decoding, "
              "please use --mamba-scheduler-strategy extra_buffer and set SGLANG_ENABLE_SPEC_V2=1.")
MTP = ["--speculative-algorithm", "NEXTN", "--speculative-num-steps", "3", "--speculative-eagle-topk", "1",
       "--speculative-num-draft-tokens", "4"]


def test_spec_config_crash(tmp_path, models):
    host = setup_simhost(tmp_path / "sim", gpus=2, engine_version="0.5.10", scenario="spec-config-crash", pace=0.02)
    srv = Server(host, "--model-path", models["qwen35"], "--tp", "2", *MTP)
    assert srv.wait(20) == 1
    lines = srv.text
    assert lines[-1] == SPEC_ERROR
    tb = lines[lines.index("Traceback (most recent call last):"):]
    assert tb[3].endswith('/sglang/launch_server.py", line 59, in <module>')
    assert tb[-3].endswith('/sglang/srt/server_args.py", line 2206, in _handle_mamba_radix_cache')
    assert not any("server_args=" in x for x in lines)  # it fails while ServerArgs is built
    assert [g["memory_used_bytes"] for g in report(host)["gpus"]] == [0, 0]
    # with the flag that version needs, or a dense model, or no speculative decoding: an ok start
    for args in (["--model-path", models["qwen35"], *MTP, "--mamba-scheduler-strategy", "extra_buffer"],
                 ["--model-path", models["qwen3"], *MTP], ["--model-path", models["qwen35"]]):
        srv = Server(host, *args, "--tp", "2", "--skip-server-warmup")
        try:
            srv.wait_for("fired up")
        finally:
            srv.stop()
    # 0.5.13 raises it too (its own line numbers); 0.5.23 has no such error
    host = setup_simhost(tmp_path / "sim", gpus=2, engine_version="0.5.13", scenario="spec-config-crash", pace=0.02)
    srv = Server(host, "--model-path", models["qwen35"], "--tp", "2", *MTP)
    assert srv.wait(20) == 1 and srv.text[-1] == SPEC_ERROR
    assert any(x.endswith('server_args.py", line 2754, in _handle_mamba_radix_cache') for x in srv.text)
    host = setup_simhost(tmp_path / "sim", gpus=2, engine_version="0.5.23", scenario="spec-config-crash", pace=0.02)
    srv = Server(host, "--model-path", models["qwen35"], "--tp", "2", *MTP, "--skip-server-warmup")
    try:
        srv.wait_for("fired up")
    finally:
        srv.stop()


def test_kv_cache_oom(tmp_path, models):
    host = setup_simhost(tmp_path / "sim", gpus=2, engine_version="0.5.10", scenario="kv-cache-oom", pace=0.02)
    srv = Server(host, "--model-path", models["qwen3"], "--tp", "2", "--mem-fraction-static", "0.8")
    assert srv.wait(20) == -signal.SIGKILL  # kill_process_tree after the child's SIGQUIT
    lines = srv.text
    in_order(lines, [r"TP0\] Load weight end\.", r"^\[[^]]+ TP0\] Scheduler hit an exception: Traceback \(most recent "
                     r"call last\):$", r'model_runner_kv_cache_mixin.py", line 60, in __post_init__$',
                     r"^RuntimeError: Not enough memory\. Please try to increase --mem-fraction-static\. "
                     r"Current value: mem_fraction_static=0\.8$",
                     r"^\[[^]]+ TP1\] Scheduler hit an exception: Traceback",
                     r"^\[[^]]+\] Received sigquit from a child process\. It usually means the child failed\.$"])
    assert not any("KV Cache is allocated" in x for x in lines)
    assert [g["memory_used_bytes"] for g in report(host)["gpus"]] == [0, 0]
    # 0.5.23's text has no "Current value" (calculate_pool_sizes passes no mem_fraction_static)
    host = setup_simhost(tmp_path / "sim", gpus=1, engine_version="0.5.23", scenario="kv-cache-oom", pace=0.02)
    srv = Server(host, "--model-path", models["qwen3"])
    assert srv.wait(20) == -signal.SIGKILL
    assert "RuntimeError: Not enough memory. Please try to increase --mem-fraction-static." in srv.text
    assert any(x.endswith('pool_configurator.py", line 99, in __post_init__') for x in srv.text)


def test_a_model_that_does_not_fit_crashes_in_the_ok_scenario_too(tmp_path, models):
    # weights larger than the GPU: torch's CUDA OOM while loading
    host = setup_simhost(tmp_path / "sim", gpus=1, engine_version="0.5.10", pace=0.02)
    srv = Server(host, "--model-path", models["qwen35"])  # 245 GB on one 140 GiB GPU
    assert srv.wait(20) == -signal.SIGKILL
    oom = next(x for x in srv.text if x.startswith("torch.OutOfMemoryError: "))
    assert re.match(r"torch\.OutOfMemoryError: CUDA out of memory\. Tried to allocate \d+\.\d\d GiB\. GPU 0 has a "
                    r"total capacity of 140\.40 GiB of which \d+\.\d\d MiB is free\. ", oom)
    assert any(x.endswith('model_runner.py", line 1159, in load_model') for x in srv.text)
    assert not any("Load weight end" in x for x in srv.text)
    assert [g["memory_used_bytes"] for g in report(host)["gpus"]] == [0]
    # weights that fit, but no room left for the KV cache: SGLang's own error
    host = setup_simhost(tmp_path / "sim2", gpus=1, gpu_memory_gib=24, pace=0.02)
    srv = Server(host, "--model-path", models["qwen3"], "--mem-fraction-static", "0.6")
    assert srv.wait(20) == -signal.SIGKILL
    assert "RuntimeError: Not enough memory. Please try to increase --mem-fraction-static." in srv.text


def test_ok_with_mtp_gives_a_dense_model_an_mtp_layer(tmp_path, models):
    host = setup_simhost(tmp_path / "sim", gpus=1, engine_version="0.5.23", scenario="ok-with-mtp", pace=0.02)
    srv = Server(host, "--model-path", models["qwen3"], *MTP, "--enable-metrics")
    try:
        srv.wait_for("fired up")
        assert any("Capture draft extend CUDA graph end." in x for x in srv.text)
        assert any(re.search(r"Load weight end\. .*type=Qwen3ForCausalLM, ", x) for x in srv.text)
        assert any(re.search(r"\] Capture target verify CUDA graph begin\. backend=full, num_tokens_per_req=4, "
                             r"avail mem=\d+\.\d\d GB$", x) for x in srv.text)
        info = httpx.get(srv.url + "/server_info", timeout=10).json()
        assert info["internal_states"][0]["avg_spec_accept_length"] == pytest.approx(3.13)
    finally:
        srv.stop()


# ------------------------------------------------------------------ the command line


def usage_of(version: str) -> str:
    text = sv.format_help(version)
    return text[: text.index("\n\n") + 1]


@pytest.mark.parametrize("version", ["0.5.10", "0.5.23"])
def test_unknown_flag_is_refused_like_argparse(tmp_path, version):
    host = setup_simhost(tmp_path / "sim", gpus=1, engine_version=version, pace=0.02)
    prog = sv.help_prog(version)
    res = subprocess.run([str(host.python), "-m", "sglang.launch_server", "--model-path", "m", "--bogus-flag", "3"],
                         capture_output=True, text=True, timeout=20)
    assert res.returncode == 2 and res.stdout == ""
    assert res.stderr.endswith(usage_of(version) + f"{prog}: error: unrecognized arguments: --bogus-flag 3\n")
    # the mamba flag exists in one of them only (0.5.21 dropped the old name)
    old = "--mamba-scheduler-strategy"
    res = subprocess.run([str(host.python), "-m", "sglang.launch_server", "--model-path", "m", old, "x"],
                         capture_output=True, text=True, timeout=20)
    if version == "0.5.10":
        assert res.returncode == 2 and res.stderr.endswith(
            f"{prog}: error: argument {old}: invalid choice: 'x' (choose from 'auto', 'no_buffer', 'extra_buffer')\n")
    else:
        assert res.stderr.endswith(f"{prog}: error: unrecognized arguments: {old} x\n")
    # no --model-path: argparse's required-argument error
    res = subprocess.run([str(host.python), "-m", "sglang.launch_server", "--tp", "2"], capture_output=True, text=True)
    assert res.returncode == 2 and "error: the following arguments are required: --model-path" in res.stderr


def test_flags_are_matched_like_sglang_versions_match_flag(tmp_path):
    """argparse's prefix matching, checked against gpuops' own match_flag: a FLAG followed by a
    flag no version has is refused for that other flag alone when FLAG is known."""
    version = "0.5.23"
    host = setup_simhost(tmp_path / "sim", gpus=1, engine_version=version, pace=0.02)
    flags = sv.flags_for(version)
    spec = json.loads((host.directory / "lib/sglang-sim/launch_server.json").read_text())
    assert {o for a in spec["args"] for o in a["opts"]} | {"-h", "--help"} == flags
    prog = sv.help_prog(version)
    for flag in ("--tp", "--tensor-parallel", "--mem-fraction", "--served-model", "--mamba-scheduler-strategy",
                 "--nope", "--spec"):
        res = subprocess.run([str(host.python), "-m", "sglang.launch_server", "--model-path", "m", flag, "2",
                              "--zzz-unknown"], capture_output=True, text=True, timeout=20)
        assert res.returncode == 2, flag
        last = res.stderr.splitlines()[-1]
        if sv.match_flag(flag, flags) is not None:
            assert last == f"{prog}: error: unrecognized arguments: --zzz-unknown", (flag, last)
        elif flag == "--spec":  # ambiguous
            assert last.startswith(f"{prog}: error: ambiguous option: --spec could match --spec"), last
        else:
            assert last == f"{prog}: error: unrecognized arguments: {flag} 2 --zzz-unknown", (flag, last)


# ------------------------------------------------------------------ the HTTP API


@pytest.fixture(scope="module")
def served(tmp_path_factory):
    """One MTP server with both parsers, metrics and an API key, and one bare server."""
    root = tmp_path_factory.mktemp("served")
    models_ = {"qwen35": model_dir(root / "models", QWEN35, 250_170_000_000, shards=39),
               "qwen3": model_dir(root / "models", QWEN3, 16_381_470_720, shards=5)}
    host = setup_simhost(root / "sim", gpus=4, engine_version="0.5.23", pace=0.02)
    host.set_sim(token_delay_s=0.002)
    full = Server(host, "--model-path", models_["qwen35"], "--tp", "2", "--served-model-name", "qwen122",
                  "--reasoning-parser", "qwen3", "--tool-call-parser", "qwen3_coder", *MTP,
                  "--mamba-radix-cache-strategy", "extra_buffer", "--enable-metrics", "--api-key", "sk-test-key",
                  "--mem-fraction-static", "0.9", env={"CUDA_VISIBLE_DEVICES": "0,1"})
    bare = Server(host, "--model-path", models_["qwen3"], "--tp", "2", env={"CUDA_VISIBLE_DEVICES": "2,3"})
    try:
        full.wait_for("fired up")
        bare.wait_for("fired up")
        yield {"full": full, "bare": bare, "auth": {"Authorization": "Bearer sk-test-key"}, "host": host}
    finally:
        full.stop()
        bare.stop()


def sse(resp) -> list:
    out = []
    for line in resp.iter_lines():
        if line.startswith("data: "):
            out.append(line[6:])
    return out


def test_health_model_info_and_api_key(served):
    full, bare, auth = served["full"], served["bare"], served["auth"]
    with httpx.Client(base_url=full.url, timeout=10) as c:
        assert c.get("/health").status_code == 200  # no key needed
        assert c.get("/health_generate").status_code == 200
        r = c.get("/v1/models")
        assert r.status_code == 401 and r.json() == {"error": "Unauthorized"}
        assert c.get("/v1/models", headers={"Authorization": "Bearer wrong"}).status_code == 401
        models_doc = c.get("/v1/models", headers=auth).json()
        assert [m["id"] for m in models_doc["data"]] == ["qwen122"] and models_doc["data"][0]["max_model_len"] == 262144
        info = c.get("/model_info", headers=auth).json()
        assert info["architectures"] == ["Qwen3_5MoeForConditionalGeneration"] and info["is_generation"] is True
        assert info["model_type"] == "qwen3_5_moe" and info["model_path"].endswith("Qwen3.5-122B-A10B")
        assert c.get("/get_model_info", headers=auth).json() == info  # deprecated, with a warning
        assert any("Endpoint '/get_model_info' is deprecated" in x for x in full.text)
        assert c.post("/v1/completions", json={"prompt": "x", "max_tokens": 1}).status_code == 401
        assert c.get("/nope", headers=auth).status_code == 404
    with httpx.Client(base_url=bare.url, timeout=10) as c:
        assert c.get("/v1/models").status_code == 200  # no --api-key: open
        assert c.get("/metrics").status_code == 404  # no --enable-metrics
        assert c.post("/flush_cache").text.startswith("Cache flushed.\n")


def test_health_is_503_until_ready(tmp_path, models):
    # with the warmup request slowed down, /health answers 503 until the server says it is ready
    host = setup_simhost(tmp_path / "sim", gpus=1, pace=0.02)
    host.set_sim(token_delay_s=0.3)
    srv = Server(host, "--model-path", models["qwen3"])
    try:
        srv.wait_for("Uvicorn running on")
        assert httpx.get(srv.url + "/health", timeout=5).status_code == 503
        srv.wait_for("fired up")
        assert httpx.get(srv.url + "/health", timeout=5).status_code == 200
    finally:
        srv.stop()


def test_completions_stream_and_usage(served):
    bare = served["bare"]
    with httpx.Client(base_url=bare.url, timeout=20) as c:
        r = c.post("/v1/completions", json={"model": "m", "prompt": "The capital of France is", "max_tokens": 7})
        doc = r.json()
        assert doc["object"] == "text_completion" and doc["choices"][0]["finish_reason"] == "length"
        assert len(doc["choices"][0]["text"].split()) == 7 and doc["usage"]["completion_tokens"] == 7
        assert doc["usage"]["prompt_tokens"] == 5 and doc["usage"]["total_tokens"] == 12
        t0 = time.monotonic()
        with c.stream("POST", "/v1/completions", json={"prompt": "hi", "max_tokens": 20, "stream": True,
                                                       "stream_options": {"include_usage": True}}) as r:
            assert r.headers["content-type"].startswith("text/event-stream")
            chunks = sse(r)
        elapsed = time.monotonic() - t0
        assert chunks[-1] == "[DONE]"
        data = [json.loads(x) for x in chunks[:-1]]
        texts = [d["choices"][0]["text"] for d in data if d["choices"] and d["choices"][0]["text"]]
        assert len(texts) == 20 and all(t.startswith(" ") and len(t.split()) == 1 for t in texts)
        assert data[-2]["choices"][0]["finish_reason"] == "length" and data[-2]["choices"][0]["text"]  # the 20th
        assert [d["choices"][0]["finish_reason"] for d in data[:-2]] == [None] * 19
        assert data[-1]["choices"] == [] and data[-1]["usage"] == {"prompt_tokens": 1, "total_tokens": 21,
                                                                    "completion_tokens": 20, "reasoning_tokens": 0}
        assert elapsed >= 19 * 0.002  # the per-token delay: throughput is measurable
        # without include_usage: no usage-only chunk (bench_serving reads choices[0] of every chunk)
        with c.stream("POST", "/v1/completions", json={"prompt": "hi", "max_tokens": 3, "stream": True}) as r:
            data = [json.loads(x) for x in sse(r)[:-1]]
        assert all(d["choices"] for d in data)
        # SGLang's native /generate, streaming as bench_serving's default backend reads it
        with c.stream("POST", "/generate", json={"text": "hello", "sampling_params": {"max_new_tokens": 5},
                                                 "stream": True}) as r:
            data = [json.loads(x) for x in sse(r)[:-1]]
        assert [d["meta_info"]["completion_tokens"] for d in data] == [1, 2, 3, 4, 5]
        assert len(data[-1]["text"].split()) == 5


def test_chat_reasoning_and_tool_calls_with_parsers(served):
    full, auth = served["full"], served["auth"]
    tools = [{"type": "function", "function": {"name": "get_weather", "description": "Weather in a city",
              "parameters": {"type": "object", "properties": {
                  "city": {"type": "string"}, "unit": {"type": "string", "enum": ["celsius", "fahrenheit"]},
                  "days": {"type": "integer", "minimum": 1}}, "required": ["city"]}}}]
    with httpx.Client(base_url=full.url, timeout=20, headers=auth) as c:
        msg = [{"role": "user", "content": "What is 2+2?"}]
        doc = c.post("/v1/chat/completions", json={"model": "qwen122", "messages": msg, "max_tokens": 10}).json()
        m = doc["choices"][0]["message"]
        assert m["reasoning_content"] and m["content"] and "<think>" not in m["content"]
        assert doc["usage"]["completion_tokens"] == 10 and doc["usage"]["reasoning_tokens"] == 5
        off = c.post("/v1/chat/completions", json={"messages": msg, "max_tokens": 6,
                                                   "chat_template_kwargs": {"enable_thinking": False}}).json()
        assert off["choices"][0]["message"]["reasoning_content"] is None
        assert len(off["choices"][0]["message"]["content"].split()) == 6
        # a tool call: tool_calls with JSON arguments that match the schema
        doc = c.post("/v1/chat/completions", json={"messages": [{"role": "user", "content": "Weather in Paris?"}],
                                                   "tools": tools}).json()
        choice = doc["choices"][0]
        assert choice["finish_reason"] == "tool_calls"
        (call,) = choice["message"]["tool_calls"]
        assert call["type"] == "function" and call["function"]["name"] == "get_weather" and call["id"].startswith("call_")
        args = json.loads(call["function"]["arguments"])
        assert isinstance(args["city"], str) and args["unit"] in ("celsius", "fahrenheit")
        assert isinstance(args["days"], int) and args["days"] >= 1
        assert "<tool_call>" not in (choice["message"]["content"] or "")
        # streaming: role first, reasoning_content, then the call's name and its arguments in pieces
        with c.stream("POST", "/v1/chat/completions", json={"messages": msg, "tools": tools, "stream": True,
                                                            "stream_options": {"include_usage": True}}) as r:
            chunks = sse(r)
        assert chunks[-1] == "[DONE]"
        data = [json.loads(x) for x in chunks[:-1]]
        deltas = [d["choices"][0]["delta"] for d in data if d["choices"]]
        assert deltas[0]["role"] == "assistant"
        assert any(d.get("reasoning_content") for d in deltas)
        calls = [tc for d in deltas for tc in (d.get("tool_calls") or [])]
        assert calls[0]["function"]["name"] == "get_weather" and calls[0]["id"].startswith("call_")
        streamed = "".join(tc["function"]["arguments"] or "" for tc in calls)
        assert json.loads(streamed)["city"]
        assert [d for d in data if d["choices"]][-1]["choices"][0]["finish_reason"] == "tool_calls"
        assert data[-1]["choices"] == [] and data[-1]["usage"]["completion_tokens"] > 0


def test_chat_json_has_sglang_0_5_23s_shapes(served):
    """The chunks of serving_chat.py/sse_utils.py as 0.5.23 writes them: compact JSON, msgspec chunks
    for role, reasoning and the finish, pydantic ones for the tool-call parser's output, the
    Qwen3-Coder detector's argument fragments, and an answer that ends at its EOS."""
    full, auth = served["full"], served["auth"]
    weather = {"type": "function", "function": {"name": "get_weather", "parameters": {
        "type": "object", "properties": {"city": {"type": "string"}, "unit": {"type": "string",
                                                                             "enum": ["celsius", "fahrenheit"]}}}}}
    msg = [{"role": "user", "content": "Weather in Paris?"}]
    with httpx.Client(base_url=full.url, timeout=20, headers=auth) as c:
        with c.stream("POST", "/v1/chat/completions", json={"messages": msg, "tools": [weather], "stream": True,
                                                            "stream_options": {"include_usage": True}}) as r:
            lines = sse(r)
        assert lines[-1] == "[DONE]" and lines[0].startswith('{"id":"')  # compact, as orjson/msgspec write it
        data = [json.loads(x) for x in lines[:-1]]
        assert all(d["model"] == "default" and d["object"] == "chat.completion.chunk" for d in data)
        first, *middle, finish, usage = data
        assert "usage" not in first and first["choices"][0]["delta"] == {"reasoning_content": None, "role": "assistant",
                                                                         "content": ""}
        reasoning = [d for d in middle if "tool_calls" not in d["choices"][0]["delta"]]
        calls = [d for d in middle if "tool_calls" in d["choices"][0]["delta"]]
        assert reasoning and all(set(d["choices"][0]["delta"]) == {"reasoning_content"} for d in reasoning)
        assert all(d["usage"] is None and d["choices"][0]["delta"]["content"] is None for d in calls)
        fragments = [d["choices"][0]["delta"]["tool_calls"][0]["function"] for d in calls]
        assert fragments == [{"name": "get_weather", "arguments": ""}, {"name": None, "arguments": "{"},
                             {"name": None, "arguments": '"city": "Paris"'},
                             {"name": None, "arguments": ', "unit": "celsius"'}, {"name": None, "arguments": "}"}]
        assert finish["choices"][0] == {"index": 0, "delta": {"reasoning_content": None}, "logprobs": None,
                                        "finish_reason": "tool_calls", "matched_stop": None}
        assert usage["choices"] == [] and usage["usage"]["completion_tokens_details"] == {"reasoning_tokens": 8}
        # not streamed: content "" beside tool_calls; no tool_calls key when there are none
        doc = c.post("/v1/chat/completions", json={"messages": msg, "tools": [weather]}).json()
        message = doc["choices"][0]["message"]
        assert message["content"] == "" and json.loads(message["tool_calls"][0]["function"]["arguments"]) == {
            "city": "Paris", "unit": "celsius"}
        doc = c.post("/v1/chat/completions", json={"messages": msg, "max_tokens": 100}).json()
        assert "tool_calls" not in doc["choices"][0]["message"]
        # the answer ends at its EOS under max_tokens; ignore_eos (bench_serving's default) runs to max_tokens
        assert doc["choices"][0]["finish_reason"] == "stop" and doc["choices"][0]["matched_stop"] == 151645
        assert doc["usage"]["completion_tokens"] < 100
        doc = c.post("/v1/chat/completions", json={"messages": msg, "max_tokens": 100, "ignore_eos": True}).json()
        assert doc["choices"][0]["finish_reason"] == "length" and doc["usage"]["completion_tokens"] == 100


def test_chat_without_parsers_writes_everything_into_content(served):
    bare = served["bare"]
    tools = [{"type": "function", "function": {"name": "lookup", "parameters": {
        "type": "object", "properties": {"query": {"type": "string"}}, "required": ["query"]}}}]
    with httpx.Client(base_url=bare.url, timeout=20) as c:
        doc = c.post("/v1/chat/completions", json={"messages": [{"role": "user", "content": "find gpuops"}],
                                                   "tools": tools}).json()
        choice = doc["choices"][0]
        assert "tool_calls" not in choice["message"] and choice["finish_reason"] == "stop"
        content = choice["message"]["content"]
        body = content[content.index("<tool_call>") + len("<tool_call>"):content.index("</tool_call>")]
        assert json.loads(body) == {"name": "lookup", "arguments": {"query": "sglang"}}  # Qwen3's hermes style
        assert choice["message"]["reasoning_content"] is None
        doc = c.post("/v1/chat/completions", json={"messages": [{"role": "user", "content": "hi"}],
                                                   "max_tokens": 8}).json()
        content = doc["choices"][0]["message"]["content"]
        assert content.startswith("<think>\n") and "</think>" in content  # the model thinks, unparsed
        assert doc["choices"][0]["message"]["reasoning_content"] is None


def test_metrics_parse_with_prometheus_client(served):
    from prometheus_client.parser import text_string_to_metric_families

    full, auth = served["full"], served["auth"]
    with httpx.Client(base_url=full.url, timeout=20, headers=auth) as c:
        c.post("/v1/completions", json={"prompt": "a b c", "max_tokens": 50})
        text = httpx.get(full.url + "/metrics", timeout=10).text  # no key needed for /metrics
    fams = {f.name: f for f in text_string_to_metric_families(text)}
    for name in ("sglang:num_running_reqs", "sglang:num_queue_reqs", "sglang:gen_throughput", "sglang:token_usage",
                 "sglang:spec_accept_length", "sglang:max_total_num_tokens"):
        assert fams[name].type == "gauge", name
    for name in ("sglang:prompt_tokens", "sglang:generation_tokens", "sglang:num_requests"):
        assert fams[name].type == "counter", name
        assert fams[name].samples[0].name == name + "_total"
    for name in ("sglang:time_to_first_token_seconds", "sglang:inter_token_latency_seconds",
                 "sglang:e2e_request_latency_seconds"):
        assert fams[name].type == "histogram"
        count = next(s for s in fams[name].samples if s.name == name + "_count")
        assert count.value >= 1
    sample = fams["sglang:generation_tokens"].samples[0]
    assert sample.labels == {"model_name": "qwen122", "engine_type": "unified", "tp_rank": "0", "pp_rank": "0"}
    assert sample.value >= 50
    assert fams["sglang:spec_accept_length"].samples[0].value == pytest.approx(3.13)
    assert fams["sglang:gen_throughput"].samples[0].value > 0  # a Decode batch line was logged
    assert any(re.search(r"TP0\] Decode batch, #running-req: \d+, #full token: \d+, full token usage: "
                         r"\d\.\d\d, mamba num: \d+, mamba usage: \d\.\d\d, accept len: 3\.13, accept rate: "
                         r"\d\.\d\d, cuda graph: True, gen throughput \(token/s\): \d+\.\d\d, #queue-req: 0$", x)
               for x in full.text)


def test_server_info_carries_the_accept_length(served):
    full, bare, auth = served["full"], served["bare"], served["auth"]
    info = httpx.get(full.url + "/server_info", headers=auth, timeout=10).json()
    assert info["speculative_algorithm"] == "EAGLE" and info["speculative_num_steps"] == 3
    assert info["tp_size"] == 2 and info["model_path"].endswith("Qwen3.5-122B-A10B")
    assert info["internal_states"][0]["avg_spec_accept_length"] == pytest.approx(3.13)
    assert info["api_key"] == "sk-test-key" and "<redacted>" in info["launch_command"]
    assert httpx.get(full.url + "/get_server_info", headers=auth, timeout=10).json()["version"] == "0.5.23"
    info = httpx.get(bare.url + "/server_info", timeout=10).json()
    assert "avg_spec_accept_length" not in info["internal_states"][0]
    assert info["internal_states"][0]["last_gen_throughput"] >= 0


def test_concurrent_requests_are_served_in_parallel(served):
    import concurrent.futures

    bare = served["bare"]

    def one(i):
        with httpx.Client(base_url=bare.url, timeout=30) as c:
            return c.post("/v1/completions", json={"prompt": f"p{i}", "max_tokens": 50}).json()

    with concurrent.futures.ThreadPoolExecutor(16) as pool:
        docs = list(pool.map(one, range(16)))
    assert all(d["usage"]["completion_tokens"] == 50 for d in docs)  # 16 at once, each answered whole

    # Not one after the other: a short request sent while a long one streams is answered whole before the
    # long one's last token (served one after the other, its first token would come after that last one).
    # Shown by the order of the tokens, not by a wall-clock bound that a loaded machine overruns.
    seen: dict[str, list[float]] = {"long": [], "short": []}
    streaming = threading.Event()

    def stream(key: str, tokens: int) -> None:
        with httpx.Client(base_url=bare.url, timeout=60) as c, \
                c.stream("POST", "/v1/completions", json={"prompt": key, "max_tokens": tokens, "stream": True}) as r:
            for chunk in r.iter_lines():
                if chunk.startswith("data: {"):
                    seen[key].append(time.monotonic())
                    streaming.set()

    long = threading.Thread(target=stream, args=("long", 1000))  # 2 s of tokens at the host's 2 ms a token
    long.start()
    try:
        assert streaming.wait(30)
        stream("short", 5)
    finally:
        long.join(60)
    assert len(seen["short"]) == 5 and len(seen["long"]) == 1000
    assert seen["short"][-1] < seen["long"][-1], "the short request waited for the long one"


# ------------------------------------------------------------------ the fake hf


def hf(host: SimHost, *args, env=None, timeout=60):
    e = {k: v for k, v in os.environ.items() if not k.startswith(("HF_", "HUGGING"))}
    e.update(env or {})
    return subprocess.run([str(host.bin_dir / "hf"), "download", *map(str, args)], capture_output=True, text=True,
                          timeout=timeout, env=e)


def apparent(d: Path) -> int:
    return sum(p.stat().st_size for p in d.rglob("*") if p.is_file() and not p.is_symlink())


def apparent_settled(d: Path) -> int:
    """`apparent` of a folder being written to: a file renamed into place while the tree is walked
    (hf moves a finished shard out of .cache/huggingface/download) is missed or counted twice by one
    walk, so walk until two walks in a row find the same files, and give the last one's sizes."""
    before: set[Path] | None = None
    while True:
        try:
            sizes = {p: p.stat().st_size for p in d.rglob("*") if p.is_file() and not p.is_symlink()}
        except FileNotFoundError:  # moved between the listing and its stat
            before = None
            continue
        if set(sizes) == before:
            return sum(sizes.values())
        before = set(sizes)


def allocated(d: Path) -> int:
    return sum(p.stat().st_blocks * 512 for p in d.rglob("*") if p.is_file() and not p.is_symlink())


def test_hf_download_writes_sparse_shards_with_the_real_size(tmp_path):
    host = setup_simhost(tmp_path / "sim", gpus=1, pace=0.02)
    out = tmp_path / "q8"
    res = hf(host, "Qwen/Qwen3-8B", "--local-dir", out)
    assert res.returncode == 0, res.stderr
    assert res.stdout.splitlines()[-1] == f"  path: {out}"
    assert "Fetching 14 files: 100%" in res.stderr
    index = json.loads((out / "model.safetensors.index.json").read_text())
    assert index["metadata"]["total_size"] == 16_381_470_720
    shards = sorted(out.glob("*.safetensors"))
    assert [p.name for p in shards] == [f"model-{i:05d}-of-00005.safetensors" for i in range(1, 6)]
    assert sorted(set(index["weight_map"].values())) == [p.name for p in shards]
    assert json.loads((out / "config.json").read_text()) == json.loads((CONFIGS / QWEN3).read_text())
    # each shard is a valid safetensors file whose tensor bytes add up to total_size
    tensor_bytes = 0
    for p in shards:
        with open(p, "rb") as f:
            n = int.from_bytes(f.read(8), "little")
            header = json.loads(f.read(n))
        (name, t), = ((k, v) for k, v in header.items() if k != "__metadata__")
        assert p.stat().st_size == 8 + n + t["data_offsets"][1] and index["weight_map"][name] == p.name
        tensor_bytes += t["data_offsets"][1]
    assert tensor_bytes == 16_381_470_720
    assert allocated(out) < 2 * MIB < 15 * GIB < apparent(out)  # sparse: no real blocks
    assert not list((out / ".cache/huggingface/download").glob("*.incomplete"))
    # again: everything is complete, nothing is rewritten
    mtimes = {p.name: p.stat().st_mtime_ns for p in shards}
    assert hf(host, "Qwen/Qwen3-8B", "--local-dir", out, "-q").stdout == f"{out}\n"
    assert {p.name: p.stat().st_mtime_ns for p in shards} == mtimes
    # the simulator reads this folder as SGLang would
    srv = Server(host, "--model-path", out, "--skip-server-warmup")
    try:
        srv.wait_for("fired up")
        assert any("Loading safetensors checkpoint shards: 100% Completed | 5/5 " in x for x in srv.text)
    finally:
        srv.stop()


def test_hf_cache_layout_and_model_by_repo_id(tmp_path):
    host = setup_simhost(tmp_path / "sim", gpus=1, pace=0.02)
    hub = tmp_path / "hub"
    res = hf(host, "Qwen/Qwen3-8B", env={"HF_HUB_CACHE": str(hub)})
    assert res.returncode == 0, res.stderr
    repo = hub / "models--Qwen--Qwen3-8B"
    commit = (repo / "refs" / "main").read_text()
    snap = repo / "snapshots" / commit
    assert res.stdout.splitlines()[-1] == f"  path: {snap}"
    assert (snap / "config.json").is_symlink() and (snap / "config.json").resolve().parent == repo / "blobs"
    assert json.loads((snap / "config.json").read_text())["architectures"] == ["Qwen3ForCausalLM"]
    # --cache-dir, and HF_HOME/hub
    assert hf(host, "Qwen/Qwen3-8B", "--cache-dir", tmp_path / "c", "--include", "*.json").returncode == 0
    assert not list((tmp_path / "c").rglob("*.safetensors"))
    assert hf(host, "acme/tiny", env={"HF_HOME": str(tmp_path / "home")}).returncode == 0
    assert (tmp_path / "home/hub/models--acme--tiny/refs/main").is_file()
    # --model-path REPO_ID: the simulator finds it in the cache, like SGLang
    srv = Server(host, "--model-path", "Qwen/Qwen3-8B", "--skip-server-warmup", env={"HF_HUB_CACHE": str(hub)})
    try:
        srv.wait_for("fired up")
        assert any("type=Qwen3ForCausalLM" in x for x in srv.text)
        assert any("| 5/5 " in x for x in srv.text)
    finally:
        srv.stop()


def test_hf_apparent_size_grows_and_resumes_after_kill(tmp_path):
    host = setup_simhost(tmp_path / "sim", gpus=1, pace=1)
    host.set_sim(download_rate=8 * GIB)  # Qwen3-32B (65.5 GB) takes ~8 s
    out = tmp_path / "q32"
    env = {k: v for k, v in os.environ.items() if not k.startswith("HF_")}
    proc = subprocess.Popen([str(host.bin_dir / "hf"), "download", "Qwen/Qwen3-32B", "--local-dir", str(out)],
                            stdout=subprocess.PIPE, stderr=subprocess.PIPE, env=env)
    sizes = []
    try:
        deadline = time.monotonic() + 10
        while time.monotonic() < deadline and (not sizes or sizes[-1] < 12 * GIB):
            time.sleep(0.1)
            sizes.append(apparent_settled(out) if out.exists() else 0)
        assert sizes[-1] >= 12 * GIB and len(set(sizes)) > 3 and sizes == sorted(sizes), sizes
    finally:
        proc.kill()
        proc.wait()
    partial = list((out / ".cache/huggingface/download").glob("*.incomplete"))
    assert len(partial) == 1 and partial[0].stat().st_size > 0
    done = sorted(out.glob("model-*.safetensors"))
    assert done and all(p.stat().st_size > 3 * GIB for p in done)
    mtimes = {p.name: p.stat().st_mtime_ns for p in done}
    kept = partial[0].stat().st_size
    # resume: complete files are skipped, the partial one continues from its size
    host.set_sim(download_rate=64 * GIB)
    t0 = time.monotonic()
    res = hf(host, "Qwen/Qwen3-32B", "--local-dir", out)
    assert res.returncode == 0, res.stderr
    assert {p.name: p.stat().st_mtime_ns for p in done} == mtimes
    assert time.monotonic() - t0 < (65.5e9 - sum(p.stat().st_size for p in done) + 1e9) / (64 * GIB) + 3
    assert kept > 0 and not list((out / ".cache/huggingface/download").glob("*.incomplete"))
    assert json.loads((out / "model.safetensors.index.json").read_text())["metadata"]["total_size"] == 65_524_246_528
    assert allocated(out) < 4 * MIB


def test_hf_slow_download_stalls_alive(tmp_path):
    host = setup_simhost(tmp_path / "sim", gpus=1, scenario="slow-download", pace=1)
    host.set_sim(slow_download_rate=512 * MIB, stall_after_bytes=300 * MIB)
    out = tmp_path / "q8"
    proc = subprocess.Popen([str(host.bin_dir / "hf"), "download", "Qwen/Qwen3-8B", "--local-dir", str(out)],
                            stdout=subprocess.PIPE, stderr=subprocess.PIPE)
    try:
        deadline = time.monotonic() + 10
        while time.monotonic() < deadline and (not out.exists() or apparent(out) < 300 * MIB):
            time.sleep(0.05)
        stalled = apparent(out)
        assert 300 * MIB <= stalled < 310 * MIB
        time.sleep(1.0)
        assert apparent(out) == stalled and proc.poll() is None  # no progress at all, still alive
        proc.send_signal(signal.SIGTERM)
        assert proc.wait(5) == -signal.SIGTERM
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.wait()


def test_hf_gated_repo_needs_a_token_and_never_prints_it(tmp_path):
    host = setup_simhost(tmp_path / "sim", gpus=1, pace=0.02)
    res = hf(host, "meta-llama/Llama-3.1-8B-Instruct", "--local-dir", tmp_path / "l")
    assert res.returncode == 1 and res.stdout == ""
    assert "Error: Access denied. Model 'meta-llama/Llama-3.1-8B-Instruct' requires approval." in res.stderr
    assert "Hint: set HF_DEBUG=1 as environment variable for full traceback." in res.stderr
    assert not (tmp_path / "l").exists()
    token = "hf_SECRETtokenValue123"
    res = hf(host, "meta-llama/Llama-3.1-8B-Instruct", "--local-dir", tmp_path / "l", env={"HF_TOKEN": token})
    assert res.returncode == 0, res.stderr
    assert token not in res.stdout + res.stderr
    assert not any(token in p.read_text(errors="ignore") for p in (tmp_path / "l").rglob("*")
                   if p.is_file() and p.stat().st_size < MIB)
    # a repo the state marks as gated
    host.set_sim(gated_repos=["acme/private"])
    assert hf(host, "acme/private", "--local-dir", tmp_path / "p").returncode == 1
    assert hf(host, "acme/private", "--local-dir", tmp_path / "p", env={"HF_TOKEN": token}).returncode == 0


# ------------------------------------------------------------------ the fake systemctl and the journal


needs_journal = pytest.mark.skipif(not (JOURNALCTL and JOURNAL_REMOTE.exists()),
                                   reason="systemd-journal-remote and journalctl are installed by the README's "
                                          "test command (scripts/test-all.sh)")


def systemctl(host: SimHost, *args, timeout=90):
    return subprocess.run([str(host.bin_dir / "systemctl"), *args], capture_output=True, text=True, timeout=timeout)


def journal(host: SimHost, unit: str) -> list[dict]:
    res = subprocess.run([JOURNALCTL, f"--directory={host.journal_dir}", "-u", unit, "-o", "json", "--all", "--no-pager"],
                         capture_output=True, text=True, timeout=30)
    return [json.loads(x) for x in res.stdout.splitlines() if x.startswith("{")]


def write_unit(host: SimHost, name: str, model: Path, port: int, extra: str = "") -> None:
    etc = host.directory / "root" / "etc"
    (etc / "gpuops").mkdir(parents=True, exist_ok=True)
    (etc / "gpuops" / f"{name}.env").write_text("# gpuops\nGPUOPS_API_KEY='sk-unit'\"'\"'key'\nCUDA_VISIBLE_DEVICES=1\n")
    (etc / "systemd" / "system").mkdir(parents=True, exist_ok=True)
    (etc / "systemd" / "system" / f"gpuops-{name}.service").write_text(
        f"[Unit]\nDescription=gpuops: test ({name})\n\n[Service]\nType=simple\n"
        f"EnvironmentFile=/etc/gpuops/{name}.env\nEnvironment=\"SGLANG_ENABLE_SPEC_V2=1\"\n"
        f"ExecStart={host.python} -m sglang.launch_server \\\n    --model-path {model} \\\n"
        f"    --port {port} --api-key ${{GPUOPS_API_KEY}} {extra}\nRestart=no\nKillMode=control-group\n"
        "TimeoutStopSec=20\n")


@pytest.fixture
def sd_host(tmp_path):
    host = setup_simhost(tmp_path / "sim", gpus=2, pace=0.05)
    yield host
    host.shutdown()


@needs_journal
def test_systemctl_start_journal_stop(sd_host, models):
    host = sd_host
    port = free_port()
    write_unit(host, "t1", models["qwen3"], port)
    assert systemctl(host, "daemon-reload").returncode == 0
    assert systemctl(host, "is-active", "gpuops-t1").stdout == "inactive\n"
    res = systemctl(host, "start", "gpuops-t1.service")
    assert res.returncode == 0, res.stderr
    show = dict(x.split("=", 1) for x in systemctl(host, "show", "-p", "MainPID,ActiveState,SubState,ExecMainStatus",
                                                            "gpuops-t1").stdout.splitlines())
    assert show["ActiveState"] == "active" and show["SubState"] == "running" and int(show["MainPID"]) > 0
    assert show["ExecMainStatus"] == "0"
    pid = int(show["MainPID"])
    assert "sglang.launch_server" in Path(f"/proc/{pid}/cmdline").read_bytes().decode().replace("\0", " ")
    # the real journalctl follows the unit's journal while the server starts
    follow = subprocess.Popen([JOURNALCTL, f"--directory={host.journal_dir}", "-u", "gpuops-t1.service", "-o", "json",
                               "-f", "-n", "all", "--no-pager"], stdout=subprocess.PIPE, text=True)
    try:
        seen = []
        deadline = time.monotonic() + 30
        for line in follow.stdout:
            seen.append(json.loads(line))
            if "fired up" in (seen[-1].get("MESSAGE") or "") or time.monotonic() > deadline:
                break
    finally:
        follow.kill()
        follow.wait()
    # journalctl -o json writes fields over 4 KiB as null without --all: the server_args line is one
    assert any(e["MESSAGE"] is None for e in seen)
    msgs = [e["MESSAGE"] for e in journal(host, "gpuops-t1.service")]
    assert any(m.endswith("] The server is fired up and ready to roll!") for m in msgs)
    server = [e for e in seen if e.get("_SYSTEMD_UNIT") == "gpuops-t1.service"]
    assert server and all(e["_PID"] == str(pid) and e["SYSLOG_IDENTIFIER"] == "python" and e["PRIORITY"] == "6"
                          and int(e["__REALTIME_TIMESTAMP"]) > 0 for e in server)
    assert any(m.startswith("[") and "] server_args={'model_path': " in m for m in msgs)
    assert any(m == "Started gpuops-t1.service - gpuops: test (t1)." for m in msgs)
    # EnvironmentFile= and ${VAR}: the API key reached the server, CUDA_VISIBLE_DEVICES too
    base = f"http://127.0.0.1:{port}"
    assert httpx.get(base + "/v1/models", timeout=10).status_code == 401
    assert httpx.get(base + "/v1/models", headers={"Authorization": "Bearer sk-unit'key"}, timeout=10).status_code == 200
    used = [g["memory_used_bytes"] for g in report(host)["gpus"]]
    assert used[0] == 0 and used[1] > 10 * GIB
    assert "sk-unit" not in "".join(m for m in msgs if "server_args" not in m)
    # stop: SIGTERM, a graceful exit, the unit inactive
    res = systemctl(host, "stop", "gpuops-t1")
    assert res.returncode == 0, res.stderr
    assert systemctl(host, "is-active", "gpuops-t1").stdout == "inactive\n"
    assert systemctl(host, "is-active", "gpuops-t1").returncode == 3
    assert systemctl(host, "show", "-p", "MainPID", "--value", "gpuops-t1").stdout == "0\n"
    tail = [e["MESSAGE"] for e in journal(host, "gpuops-t1.service")][-7:]
    assert tail == ["Stopping gpuops-t1.service - gpuops: test (t1)...", "INFO:     Shutting down",
                    "INFO:     Waiting for application shutdown.", "INFO:     Application shutdown complete.",
                    f"INFO:     Finished server process [{pid}]", "gpuops-t1.service: Deactivated successfully.",
                    "Stopped gpuops-t1.service - gpuops: test (t1)."]
    assert [g["memory_used_bytes"] for g in report(host)["gpus"]] == [0, 0]
    status = systemctl(host, "status", "gpuops-t1")
    assert status.returncode == 3 and "Active: inactive (dead)" in status.stdout
    # restart works, and a second journal-remote is not started
    jr = (host.directory / "state/journal-remote.pid").read_text()
    assert systemctl(host, "restart", "gpuops-t1").returncode == 0
    assert systemctl(host, "is-active", "gpuops-t1").stdout == "active\n"
    assert (host.directory / "state/journal-remote.pid").read_text() == jr
    assert systemctl(host, "stop", "gpuops-t1").returncode == 0


@needs_journal
def test_systemctl_failed_unit(sd_host, models):
    host = sd_host
    host.set_sim(scenario="kv-cache-oom")
    write_unit(host, "t2", models["qwen3"], free_port())
    assert systemctl(host, "start", "gpuops-t2").returncode == 0
    deadline = time.monotonic() + 20
    while systemctl(host, "is-active", "gpuops-t2").stdout.strip() in ("active", "deactivating"):
        assert time.monotonic() < deadline
        time.sleep(0.05)
    res = systemctl(host, "is-failed", "gpuops-t2")
    assert (res.returncode, res.stdout) == (0, "failed\n")
    show = dict(x.split("=", 1) for x in systemctl(host, "show", "-p", "ActiveState,SubState,ExecMainStatus,Result",
                                                            "gpuops-t2").stdout.splitlines())
    assert show == {"ActiveState": "failed", "SubState": "failed", "ExecMainStatus": "9", "Result": "signal"}
    msgs = [e["MESSAGE"] for e in journal(host, "gpuops-t2.service")]
    assert "RuntimeError: Not enough memory. Please try to increase --mem-fraction-static." in msgs
    assert msgs[-2:] == ["gpuops-t2.service: Main process exited, code=killed, status=9/KILL",
                         "gpuops-t2.service: Failed with result 'signal'."]
    assert systemctl(host, "reset-failed", "gpuops-t2").returncode == 0
    assert systemctl(host, "is-active", "gpuops-t2").stdout == "inactive\n"
    # an unknown unit
    res = systemctl(host, "start", "nope")
    assert res.returncode == 5 and res.stderr == "Failed to start nope.service: Unit nope.service not found.\n"
    assert systemctl(host, "enable", "gpuops-t2").returncode == 0
    assert systemctl(host, "show", "-p", "UnitFileState", "--value", "gpuops-t2").stdout == "enabled\n"
    assert systemctl(host, "disable", "gpuops-t2").returncode == 0


@needs_journal
def test_systemctl_stop_kills_after_the_timeout(sd_host):
    host = sd_host
    units = host.directory / "root/etc/systemd/system"
    units.mkdir(parents=True, exist_ok=True)
    # a service that ignores SIGTERM
    (units / "stubborn.service").write_text(
        "[Unit]\nDescription=Stubborn\n\n[Service]\nExecStart=/bin/sh -c 'trap \"\" TERM; echo up; "
        "while :; do sleep 0.05; done'\nTimeoutStopSec=1\n")
    assert systemctl(host, "start", "stubborn").returncode == 0
    deadline = time.monotonic() + 10
    while not any(e["MESSAGE"] == "up" for e in journal(host, "stubborn.service")):
        assert time.monotonic() < deadline
        time.sleep(0.05)
    t0 = time.monotonic()
    assert systemctl(host, "stop", "stubborn").returncode == 0
    assert 0.9 < time.monotonic() - t0 < 10
    msgs = [e["MESSAGE"] for e in journal(host, "stubborn.service")]
    assert msgs[-5:] == ["stubborn.service: State 'stop-sigterm' timed out. Killing.",
                         "stubborn.service: Killing process %s (sh) with signal SIGKILL." % msgs[-4].split()[3],
                         "stubborn.service: Main process exited, code=killed, status=9/KILL",
                         "stubborn.service: Failed with result 'timeout'.", "Stopped stubborn.service - Stubborn."]
    assert systemctl(host, "is-active", "stubborn").stdout == "failed\n"


def test_more_ranks_than_gpus_is_a_cuda_error(tmp_path, models):
    host = setup_simhost(tmp_path / "sim", gpus=2, engine_version="0.5.10", pace=0.02)
    srv = Server(host, "--model-path", models["qwen3"], "--tp", "4")
    assert srv.wait(20) == -signal.SIGKILL
    lines = srv.text
    assert any(re.match(r"^\[[^]]+ TP2\] Scheduler hit an exception: Traceback", x) for x in lines)
    assert "RuntimeError: CUDA error: invalid device ordinal" in lines
    assert not any("Load weight begin" in x for x in lines)


def test_a_requests_prefill_is_logged_before_its_answer(tmp_path, models):
    """As SGLang's scheduler: a request's Prefill batch line comes before its tokens, so before the access
    line of its answer, however busy the machine (the scheduler loop is a thread of its own)."""
    import concurrent.futures

    host = setup_simhost(tmp_path / "sim", gpus=4, engine_version="0.5.23", pace=0.02)
    host.set_sim(token_delay_s=0.0)
    srv = Server(host, "--model-path", models["qwen3"], "--tp-size", "1", "--skip-server-warmup")
    try:
        srv.wait_for("fired up")

        def one(i):
            with httpx.Client(base_url=srv.url, timeout=30) as c:
                return c.post("/generate", json={"text": f"p{i}", "sampling_params": {"max_new_tokens": 1}}).status_code

        with concurrent.futures.ThreadPoolExecutor(32) as pool:
            assert set(pool.map(one, range(200))) == {200}
        deadline = time.monotonic() + 20
        while sum('"POST /generate HTTP/1.1" 200' in x for x in srv.text) < 200 and time.monotonic() < deadline:
            time.sleep(0.05)
        prefilled, answered, early = 0, 0, []  # requests prefilled when the Nth answer was logged
        for line in srv.text:
            m = re.search(r"Prefill batch, #new-seq: (\d+)", line)
            if m:
                prefilled += int(m.group(1))
            elif '"POST /generate HTTP/1.1" 200' in line:
                answered += 1
                if prefilled < answered:
                    early.append((answered, prefilled))
        assert answered == 200 and prefilled == 200
        assert early == [], f"answers logged before their prefill (answers, prefilled): {early[:5]}"
    finally:
        srv.stop()
