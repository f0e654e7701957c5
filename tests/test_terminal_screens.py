"""80x24 in a real terminal: the real `gpuops` in tmux, against a simulated host on this machine (local,
no sshd), walks every screen an operator reaches (dashboard, `?`, `:`, the model picker, plan review with
its edit line and the deploy question, storage, the deployments view, a deployed server's screen,
triage, the bench launcher, the runs list, a run's results, a comparison, and a whole swap) and reads
each one off the pane: its title and main content are there, the columns that matter are not cut, the
footer shows the screen's main keys, and esc goes back. The human-mode CLI output of deploy, status,
bench, plan and triage is checked at 80 columns beside it.

Only SGLang's bench_serving is a stand-in (tests/test_bench_screens.py's: tqdm's lines and a real
record), so a benchmark takes a second and the swap a few."""

from __future__ import annotations

import re
import shutil
import subprocess
import sys
import tempfile
import time
import uuid
from pathlib import Path

import pytest

from gpuops.sim.host import setup_simhost
from tests.sshd import free_port
from tests.conftest import kill_marked
from tests.test_bench_screens import FIXTURE, STAND_IN
from tests.test_sglang_sim import QWEN3, model_dir

GPUOPS = str(Path(sys.executable).with_name("gpuops"))
# a dict printed as it is after a label, `00:16:53  state: {"state": …` (a tool call's JSON arguments are fine)
RAW_JSON = re.compile(r"(^|:\s+)[{\[]\s*['\"][a-z_]+['\"]\s*:")


class Pane:
    """gpuops in a tmux session of 80x24: keys in, the screen's text out."""

    def __init__(self, command: str):
        self.session = f"gpuops80-{uuid.uuid4().hex[:8]}"
        subprocess.run(["tmux", "new-session", "-d", "-s", self.session, "-x", "80", "-y", "24", command], check=True)
        self.text = ""

    def capture(self) -> str:
        self.text = subprocess.run(["tmux", "capture-pane", "-t", self.session, "-p"], capture_output=True,
                                   text=True).stdout
        return self.text

    def wait_for(self, *needles: str, gone: tuple[str, ...] = (), timeout: float = 30.0) -> str:
        """The screen once every needle is on it (and none of `gone`), re-captured until the deadline."""
        deadline = time.monotonic() + timeout
        while True:
            text = self.capture()
            if all(n in text for n in needles) and not any(g in text for g in gone):
                return text
            if time.monotonic() > deadline:
                missing = [n for n in needles if n not in text] + [f"(still) {g}" for g in gone if g in text]
                raise AssertionError(f"{missing} never on the 80x24 terminal:\n{text}")
            time.sleep(0.1)

    def keys(self, *keys: str) -> None:
        subprocess.run(["tmux", "send-keys", "-t", self.session, *keys], check=True)

    def type(self, text: str) -> None:
        subprocess.run(["tmux", "send-keys", "-t", self.session, "-l", text], check=True)

    @property
    def footer(self) -> str:
        return self.text.rstrip("\n").splitlines()[-1]

    @property
    def title(self) -> str:
        return self.text.splitlines()[0]

    def line_with(self, needle: str) -> str:
        return next(ln for ln in self.text.splitlines() if needle in ln)

    def alive(self) -> bool:
        return subprocess.run(["tmux", "has-session", "-t", self.session], capture_output=True).returncode == 0

    def close(self) -> None:
        subprocess.run(["tmux", "kill-session", "-t", self.session], capture_output=True)


def has_keys(pane: Pane, *keys: str, timeout: float = 10.0) -> None:
    """Each `key Label` is in the footer (the bottom line), whole (re-captured while a frame is drawn)."""
    deadline = time.monotonic() + timeout
    while True:
        missing = [k for k in keys if k not in pane.footer]
        if not missing:
            return
        if time.monotonic() > deadline:
            raise AssertionError(f"{missing} not in the footer at 80 columns: {pane.footer!r}\n{pane.text}")
        time.sleep(0.1)
        pane.capture()


def back(pane: Pane, *needles: str, gone: tuple[str, ...] = ()) -> str:
    """esc, then wait for the screen it returns to (the next key is sent only then: an esc and a key
    sent together read as alt+key)."""
    pane.keys("Escape")
    return pane.wait_for(*needles, gone=gone)


@pytest.fixture
def box(tmp_path):
    """A simulated 2-GPU host reached as the local machine, its SGLang venv's bench_serving the
    stand-in, Qwen3-8B's folder in its model dir; the environment of an operator on it."""
    if not shutil.which("tmux"):
        pytest.fail("tmux is not installed: run the README's test command (it installs tmux)")
    # a short folder, as an operator's /shared/models is (pytest's tmp_path is 70 characters long)
    root = Path(tempfile.mkdtemp(prefix="g80-"))
    venv = root / "venv"
    (venv / "bin").mkdir(parents=True)
    (venv / "bin" / "python").write_text(STAND_IN.format(python=sys.executable, fixture=str(FIXTURE)))
    (venv / "bin" / "python").chmod(0o755)
    sim = setup_simhost(root / "sim", gpus=2, engine_version="0.5.23", pace=0.02, engine_venv=str(venv))
    sim.set_sim(token_delay_s=0.002)
    model = model_dir(root / "models", QWEN3, 16_381_470_720, shards=5)
    cfg = tmp_path / "config.toml"
    cfg.write_text(sim.host_block("gpu1") + f'model_dirs = ["{root / "models"}"]\n')
    (tmp_path / "home").mkdir()
    env = {"HOME": str(tmp_path / "home"), "XDG_STATE_HOME": str(tmp_path / "state"),
           "XDG_CONFIG_HOME": str(tmp_path / "cfg"), "XDG_CACHE_HOME": str(tmp_path / "cache"),
           "HF_HUB_OFFLINE": "1", "HF_HUB_CACHE": str(tmp_path / "hub"), "TERM": "xterm-256color"}
    try:
        yield cfg, model, env, sim
    finally:
        for name in ("alpha", "beta", "oom"):
            cli(cfg, env, "stop", name, "--yes")
        kill_marked(str(root))
        kill_marked(str(tmp_path))
        shutil.rmtree(root, ignore_errors=True)


def cli(cfg: Path, env: dict, *args: str, timeout: float = 180) -> subprocess.CompletedProcess:
    """A verb in human mode as an 80-column terminal's user sees it (COLUMNS=80, no --json)."""
    import os

    full = {k: v for k, v in os.environ.items() if k not in ("GPUOPS_CONFIG", "HF_TOKEN", "SSH_AUTH_SOCK")}
    full.update(env, COLUMNS="80", LINES="24")
    return subprocess.run([GPUOPS, "--config", str(cfg), *args], capture_output=True, text=True, env=full,
                          timeout=timeout)


def readable(res: subprocess.CompletedProcess, *says: str) -> str:
    """Exit 0, no traceback, no dict printed raw (`ts state: {json}`), and what it should say."""
    out = res.stdout + res.stderr
    assert res.returncode == 0, out
    assert "Traceback" not in out, out
    assert not [ln for ln in res.stdout.splitlines() if RAW_JSON.search(ln)], out
    for s in says:
        assert s in out, (s, out)
    return res.stdout


def test_the_cli_and_every_screen_at_80x24(box):
    cfg, model, env, sim = box
    started = time.monotonic()

    # ------------------------------------------------------------ the CLI, human mode, 80 columns
    out = readable(cli(cfg, env, "deploy", str(model), "--host", "gpu1", "--name", "alpha", "--port", str(free_port()), "--yes"),
                   "planned", "weights: shards 5/5", "ready (endpoint http://127.0.0.1:")
    port = int(re.search(r"ready \(endpoint http://127\.0\.0\.1:(\d+)\)", out).group(1))
    assert all(re.match(r"^(\d\d:\d\d:\d\d|  )  ", ln) for ln in out.splitlines()), out  # time, then what
    for _ in range(2):
        readable(cli(cfg, env, "bench", "alpha", "--profile", "smoke"), "smoke against alpha on gpu1",
                 "step 1/1: concurrency 4, 16 requests", "tok/s out", ": ok")
    out = readable(cli(cfg, env, "status"))
    (row,) = out.splitlines()  # one line a deployment, the state and the host in it
    assert row.split()[:3] == ["alpha", "ready", "gpu1"] and "(run 1, since 20" in row, out
    readable(cli(cfg, env, "status", "alpha"), "alpha: ready on gpu1", "ready (endpoint")
    out = readable(cli(cfg, env, "plan", str(model), "--host", "gpu1"), "fits at TP1", "--tp-size 1",
                   "flags checked against gpu1's", "why each flag")
    assert max(map(len, out.splitlines())) <= 80, out  # the panels fit the terminal
    readable(cli(cfg, env, "triage", "--deployment", "alpha"), "outcome: ready", "[  ok] nvml-init",
             "leftover-gpu-process")
    out = readable(cli(cfg, env, "bench", "list"), "RUN", "OUT TOK/S", "QUALITY")
    assert max(map(len, out.splitlines())) <= 80, out
    rows = [ln.split() for ln in out.splitlines() if ln.strip().startswith("#")]
    # nothing cut to "/tmp/ex…": the model is its folder's name, every figure whole
    assert [r[:5] for r in rows] == [["#1", "ok", "smoke", "alpha", "Qwen3-8B"], ["#2", "ok", "smoke", "alpha",
                                                                               "Qwen3-8B"]], out
    assert all("…" not in ln for ln in out.splitlines()) and all("400.0" in r for r in rows), out
    out = readable(cli(cfg, env, "bench", "compare", "1", "2"), "deltas: against #1", "(+0.0%)")
    table = [ln for ln in out.splitlines() if ln.startswith(" ")]  # the lines about each run wrap as text
    assert len(table) > 10 and max(map(len, table)) <= 80 and "…" not in out, out
    cli_s = time.monotonic() - started

    # ------------------------------------------------------------ the TUI in tmux, 80x24
    exports = " ".join(f"{k}={v}" for k, v in env.items())
    pane = Pane(f"env {exports} {GPUOPS} --config {cfg}")
    try:
        # the dashboard
        pane.wait_for("GPU0", "GPU1", "/140.4 GiB", "q Quit")
        assert "gpu1" in pane.text and "Processes holding GPU memory" in pane.text
        has_keys(pane, ": Cmd", "d Deploys", "p Plan", "s Storage", "b Bench", "q Quit")

        # ? : the keys of the screen underneath, esc closes it
        pane.keys("?")
        pane.wait_for("Keys: dashboard", "esc to close", "Plan", "Storage")
        back(pane, "GPU0", gone=("Keys: dashboard",))

        # : the command line, which says what it takes; esc closes it
        pane.keys(":")
        pane.wait_for("host NAME · dep [NAME] · swap NAME")
        back(pane, "GPU0", gone=("host NAME · dep",))

        # p: the model picker: the host's copy with its size and whether it is complete, its facts
        pane.keys("p")
        pane.wait_for("pick a model for gpu1", "Models on gpu1: 1", "Qwen3ForCausalLM")
        header = pane.line_with(" kind ")
        assert all(c in header for c in ("kind", "size", "complete")), pane.text
        row = pane.line_with(str(model))  # its size as the storage screen says sizes (binary units)
        assert "NO" in row and re.search(r" \d+(\.\d)? (B|KiB|MiB|GiB) ", row) and " GB " not in row, pane.text
        has_keys(pane, "↓ Copies", "esc Back")  # the id box has the keys: what is typed goes there
        pane.keys("Down")  # the host's copies: their keys
        has_keys(pane, "/ Type an id", "r Rescan", "esc Back")

        # enter: plan review: the verdict and the launch at the top, its keys in the footer
        pane.keys("Enter")
        pane.wait_for("plan for gpu1", "fits at TP1", "--tp-size 1", timeout=60)
        assert "Launch" in pane.text and f"--model-path {model}" in pane.text
        has_keys(pane, "+ TP+", "- TP-", "m MTP", "l Like", "e Edit", "d Deploy", "esc Back")
        # e: the edit line, what it takes, esc closes it
        pane.keys("e")
        pane.wait_for("edit", "name N · port N · tp N")
        assert "esc Back" in pane.footer
        back(pane, "fits at TP1", gone=("name N · port N",))
        # d: the question before a deploy, its answers in view; n declines
        pane.keys("d")
        pane.wait_for("Deploy qwen3-8b", "on gpu1?", "Deploy (y)", "No (n)")
        assert "fit: fits at TP1" in pane.text and "serves http://127.0.0.1:" in pane.text
        pane.keys("n")
        pane.wait_for("fits at TP1", "d Deploy", gone=("Deploy (y)",))
        back(pane, "Models on gpu1: 1")
        back(pane, "GPU0", "Processes holding GPU memory")

        # s: storage: the copy, its size, complete or not and who uses it (the columns a deletion needs)
        pane.keys("s")
        pane.wait_for("Storage gpu1", "1 model", "deployment alpha")
        header = pane.line_with("Model ")
        assert all(c in header for c in ("Size", "Complete", "Used by")), pane.text
        assert str(model) in pane.line_with("deployment alpha"), pane.text
        has_keys(pane, "r Rescan", "^d Delete", "esc Back")
        back(pane, "GPU0", gone=("Storage gpu1",))

        # d: the deployments view: alpha ready, its port and GPU memory, every action's key
        pane.keys("d")
        pane.wait_for("gpuops — deployments", "alpha", "ready", "GiB")
        assert all(c in pane.line_with("Name ") for c in ("State", "Host", "Port", "GPU mem")), pane.text
        row = pane.line_with("alpha  ready")
        assert "gpu1" in row and str(port) in row and "GiB" in row, pane.text
        has_keys(pane, "s Stop", "r Restart", "x Triage", "b Bench", "n Swap", "del Forget", "esc Back")

        # enter: the deployment's screen: the phases, the endpoint, its GPU, the log and its keys
        pane.keys("Enter")
        pane.wait_for(f"ready: http://127.0.0.1:{port}", "✔ ready", "GPU0:", "/ filter  s follow")
        assert "alpha" in pane.title and "✔ weights" in pane.text and "✔ cuda_graph" in pane.text
        has_keys(pane, "k Quick check", "b Bench", "f Apply fix", "x Triage", "n Swap", "esc Back")

        # x: triage: the outcome in full (it wraps), the host checks, its keys
        pane.keys("x")
        pane.wait_for("triage · alpha on gpu1", "Host checks", "nvml-init", "NCCL_DEBUG=INFO.",
                      timeout=60)
        assert "no findings (phase ready, outcome ready)" in pane.text
        has_keys(pane, "f Apply fix", "n Restart w/ NCCL_DEBUG", "r Re-run", "esc Back")
        back(pane, "✔ ready", "/ filter  s follow")

        # b: the bench launcher: the target, the profiles, the settings and what will run
        pane.keys("b")
        pane.wait_for("Benchmark alpha", "smoke", "latency", "Prompts", "Concurrency",
                      "smoke: 1 run (c=4 × 16 prompts)")
        has_keys(pane, "^s Start", "esc Back")
        back(pane, "✔ ready", "/ filter  s follow")
        back(pane, "gpuops — deployments", "del Forget")
        back(pane, "GPU0", "Processes holding GPU memory")

        # b: the runs list: both runs, the figures right after the profile
        pane.keys("b")
        pane.wait_for("benchmark runs", "2 runs", "#1", "#2")
        assert all(c in pane.line_with("Run ") for c in ("Status", "Profile", "Out tok/s", "Target")), pane.text
        assert "400.0" in pane.line_with("#2") and "alpha" in pane.line_with("#2")
        has_keys(pane, "space Mark", "c Compare", "n New run", "esc Back")
        # enter: a run's results: what ran where at the top, the table under it
        pane.keys("Enter")
        pane.wait_for("benchmark run #1", "#1 smoke (ok) alpha:", "Output throughput (tok/s)", "TTFT median (ms)")
        has_keys(pane, "esc Back")
        back(pane, "2 runs", "space Mark")
        # space space c: the comparison, the baseline said, the deltas whole
        pane.keys("Space")
        pane.wait_for("marked: #1")
        pane.keys("Space")
        pane.wait_for("marked: #1 #2")
        pane.keys("c")
        pane.wait_for("compare #1 #2", "baseline: the first run", "base #1 smoke", "vs   #2 smoke",
                      "400.0 (+0.0%)")
        has_keys(pane, "esc Back")
        back(pane, "marked: #1 #2")
        back(pane, "GPU0", "Processes holding GPU memory")

        # :swap alpha: the picker for the new model, its plan like alpha's, the question, the swap's steps
        pane.keys(":")
        pane.wait_for("host NAME · dep [NAME]")
        pane.type("swap alpha")
        pane.keys("Enter")
        pane.wait_for("pick the model that replaces alpha on gpu1", "Models on gpu1: 1", "Qwen3ForCausalLM")
        pane.keys("Enter")
        pane.wait_for("swap alpha on gpu1", "fits at TP1", f"--port {port}", timeout=60)
        has_keys(pane, "e Edit", "d Swap", "esc Back")
        pane.keys("e")
        pane.wait_for("name N · port N")
        pane.type("name beta")
        pane.keys("Enter")
        pane.wait_for("changed: name beta", gone=("name N · port N",))
        pane.keys("d")
        pane.wait_for("Swap alpha", "Swap (y)", "No (n)", "benchmark alpha (smoke")
        pane.keys("y")
        pane.wait_for("swap alpha → beta", "alpha: stopped", "stopping alpha", "o Open new", timeout=60)
        has_keys(pane, "o Open new", "esc Back")
        # the end: the comparison with the question, both answers in view; y keeps beta (r would roll back)
        pane.wait_for("Keep beta, or roll back to alpha?", "Keep beta (y)", "Roll back to alpha (r)", timeout=120)
        pane.keys("y")
        pane.wait_for("beta kept: it serves in alpha's place", "kept beta", "beta: ready", "Output throughput",
                      gone=("Keep beta (y)",))
        has_keys(pane, "o Open new", "esc Back")
        back(pane, "swap alpha on gpu1", "d Swap")  # the swap's plan review, under it
        back(pane, "pick the model that replaces alpha")
        back(pane, "GPU0", "Processes holding GPU memory")

        # a crash: the CLI says it in lines (exit 1); its screen keeps the finding and the fix in view
        sim.set_sim(scenario="kv-cache-oom")
        res = cli(cfg, env, "deploy", str(model), "--host", "gpu1", "--name", "oom", "--port", str(free_port()), "--yes")
        assert res.returncode == 1 and "Traceback" not in res.stdout + res.stderr, res.stdout + res.stderr
        assert "error: kv-cache-oom: " in res.stdout and "crashed (phase kv_cache)" in res.stdout, res.stdout
        assert not [ln for ln in res.stdout.splitlines() if RAW_JSON.search(ln)], res.stdout
        pane.keys(":")
        pane.wait_for("host NAME · dep [NAME]")
        pane.type("dep oom")
        pane.keys("Enter")
        pane.wait_for("crashed in kv_cache", "error: kv-cache-oom: No room was left", "f: Raise --mem-fraction",
                      "/ filter  s follow")
        has_keys(pane, "f Apply fix", "x Triage", "esc Back")
        back(pane, "GPU0", "Processes holding GPU memory")

        pane.keys("q")
        deadline = time.monotonic() + 15
        while pane.alive() and time.monotonic() < deadline:
            time.sleep(0.1)
        assert not pane.alive(), "gpuops did not quit on q"
    finally:
        pane.close()
    print(f"\nCLI checks {cli_s:.1f} s, the TUI walk {time.monotonic() - started - cli_s:.1f} s")
