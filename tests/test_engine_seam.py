"""The Engine seam: a second serving engine, written here and nowhere else, plugs in.

The toy engine has its own server (a small http.server script this test writes onto the simulated
host), its own command line (``python -m toyserve.serve``), its own install check, a tiny phase
grammar of four lines mapped onto gpuops' phases, and one finding rule. It is registered at run
time (``engines.register``) and a plan naming it is deployed on a simulated host, through the same
use case as SGLang's, to ready: the install check refuses it before the server is there; once it
is, the watch reads the toy's log with the toy's tracker, the quick check gets an answer, triage
finds the toy rule's finding, and stop stops it.
"""

from __future__ import annotations

import asyncio
import os
import subprocess
import sys
from pathlib import Path

import pytest

from gpuops.core import engines
from gpuops.core.config import load_inventory
from gpuops.core.domain import Finding, Invalid, ModelSummary, Plan, event_json
from gpuops.core.engines.records import LogLine, PhaseChange, Progress
from gpuops.core.ops import Ops, Refused
from gpuops.sim.host import setup_simhost
from tests.conftest import kill_marked
from tests.ports import free_port

# --------------------------------------------------------------------------------- the toy engine

TOY_SERVER = r'''
import argparse, json, sys
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

ap = argparse.ArgumentParser()
ap.add_argument("--model-path")
ap.add_argument("--host", default="127.0.0.1")
ap.add_argument("--port", type=int, required=True)
ap.add_argument("--shards", type=int, default=3)
a = ap.parse_args()


def say(text):
    print("toy| " + text, flush=True)


say("booting " + str(a.model_path))
for i in range(1, a.shards + 1):
    say("loading shard %d/%d" % (i, a.shards))
say("WARN the disk is slow")


class Handler(BaseHTTPRequestHandler):
    def do_POST(self):
        body = json.loads(self.rfile.read(int(self.headers["Content-Length"])))
        out = json.dumps({"choices": [{"message": {"role": "assistant", "content": "hello from the toy engine"}}],
                          "usage": {"completion_tokens": 5}, "model": body.get("model")}).encode()
        self.send_response(200)
        self.send_header("Content-Type", "application/json")
        self.send_header("Content-Length", str(len(out)))
        self.end_headers()
        self.wfile.write(out)

    def log_message(self, *args):
        pass


server = ThreadingHTTPServer((a.host, a.port), Handler)
say("listening on %d" % a.port)
say("ready")
server.serve_forever()
'''


def toy_clean(raw: str) -> LogLine:
    text = raw.rstrip("\r\n")
    return LogLine(raw=raw, text=text[len("toy| "):] if text.startswith("toy| ") else text)


class ToyTracker:
    """The toy's phase grammar: a table of (line prefix, the toy's phase)."""

    GRAMMAR = (("booting", "boot"), ("loading shard", "load"), ("listening on", "listen"), ("ready", "up"))

    def __init__(self, engine: Toy) -> None:
        self.engine = engine
        self.phase: str | None = None
        self.line_no = 0
        self.crash = None
        self._ready = False

    @property
    def outcome(self) -> str:
        return "ready" if self._ready else "incomplete"

    def feed(self, raw: str | LogLine) -> list:
        self.line_no += 1
        ln = raw if isinstance(raw, LogLine) else toy_clean(raw)
        out: list = []
        for prefix, toy_phase in self.GRAMMAR:
            if ln.text.startswith(prefix):
                phase = self.engine.state_of(toy_phase)
                if phase != self.phase:
                    self.phase = phase
                    out.append(PhaseChange(phase, self.line_no, ln.text, None))
                if toy_phase == "load":
                    done, total = ln.text.rsplit(" ", 1)[1].split("/")
                    out.append(Progress(phase, int(done), int(total), "shards"))
                self._ready = self._ready or toy_phase == "up"
        return out

    def idle(self) -> list:
        return []

    def finish(self) -> list:
        return []

    def resume(self, phase: str) -> None:
        self.phase = phase


class ToyScanner:
    """The toy's one finding rule: a slow disk it warns about."""

    def __init__(self) -> None:
        self.slow: list[int] = []

    def feed(self, line: str | LogLine, tracker: ToyTracker | None = None) -> None:
        text = line.text if isinstance(line, LogLine) else toy_clean(line).text
        if text.startswith("WARN the disk is slow"):
            self.slow.append(tracker.line_no if tracker else 0)

    def findings(self, tracker: ToyTracker, plan: Plan | None = None) -> list[Finding]:
        return [Finding("toy-slow-disk", "warning", f"the toy says its disk is slow (line {n})") for n in self.slow]


class Toy(engines.Engine):
    name = "toy"
    title = "Toy"
    phases = ("boot", "load", "listen", "up")
    _STATES = {"boot": "starting", "load": "weights", "listen": "http", "up": "ready"}

    def server_module(self, *, router: bool = False) -> str:
        return "toyserve.serve"

    def version_program(self) -> str:
        return ("import importlib.util, sys\n"
                "sys.exit(3) if importlib.util.find_spec('toyserve') is None else sys.stdout.write('1.0.0')\n")

    def install_hint(self) -> str:
        return "put toyserve on its python's path"

    def state_of(self, phase: str) -> str:
        return self._STATES[phase]

    def clean(self, raw: str) -> LogLine:
        return toy_clean(raw)

    def tracker(self) -> ToyTracker:
        return ToyTracker(self)

    def scanner(self) -> ToyScanner:
        return ToyScanner()


# --------------------------------------------------------------------------------- the test



@pytest.fixture
def toy_engine():
    engine = engines.register(Toy)
    yield engine
    engines._LOADED.pop("toy", None)


def test_an_unknown_engine_is_refused_in_one_line(toy_engine):
    with pytest.raises(engines.UnknownEngine, match="no engine called 'nope'"):
        engines.get("nope")
    with pytest.raises(Invalid, match="engine: 'nope' is not an engine gpuops knows"):
        toy_plan(Path("/srv/m"), 30000).replace(engine="nope")


def test_a_plan_without_an_engine_is_sglangs(toy_engine):
    doc = toy_plan(Path("/srv/m"), 30000).to_json()
    del doc["engine"]  # a plan stored before engines had names
    plan = Plan.from_json(doc)
    assert plan.engine == "sglang" and plan.module == engines.get("sglang").server_module()


def toy_plan(model: Path, port: int) -> Plan:
    return Plan(name="toy1", host="gpu1", model=ModelSummary(id="toy/model"), tp=1, gpu_ids=(0,), port=port,
                launcher="process", engine_version="1.0.0", model_path=str(model), reuse_existing=True,
                argv=["--model-path", str(model), "--host", "127.0.0.1", "--port", str(port), "--shards", "3"],
                engine="toy")


async def test_a_toy_engine_plugs_in_and_deploys_to_ready(tmp_path, monkeypatch, toy_engine):
    for var, sub in (("HOME", "home"), ("XDG_STATE_HOME", "state"), ("XDG_CONFIG_HOME", "cfg"),
                     ("XDG_CACHE_HOME", "cache")):
        (tmp_path / sub).mkdir()
        monkeypatch.setenv(var, str(tmp_path / sub))
    sim = setup_simhost(tmp_path / "box", gpus=1, engine_version="none")
    model = tmp_path / "box" / "models" / "toy"
    model.mkdir(parents=True)
    (model / "config.json").write_text("{}")
    cfg = tmp_path / "gpuops.toml"
    cfg.write_text(sim.host_block("gpu1"))
    port = free_port()
    plan = toy_plan(model, port)
    assert plan.exec_argv()[1:3] == ["-m", "toyserve.serve"]
    ops = Ops(load_inventory(str(cfg)))
    try:
        # the toy's install check: refused, nothing recorded, while the host has no toyserve
        with pytest.raises(Refused, match="Toy is not installed on gpu1 .*put toyserve on its python's path"):
            await ops.deploy(plan, "gpu1", yes=True)
        assert ops.deployments() == []
        pkg = tmp_path / "box" / "lib" / "toyserve"  # the sim host's python has its lib/ on its path
        pkg.mkdir()
        (pkg / "__init__.py").write_text("")
        (pkg / "serve.py").write_text(TOY_SERVER)

        state = await asyncio.wait_for(ops.deploy(plan, "gpu1", yes=True), timeout=240)
        assert state == "ready"
        d = ops.deployment("toy1")
        assert d.state == "ready" and d.plan.engine == "toy"
        events = [event_json(e) for e in ops.events("toy1")]
        states = [e["state"] for e in events if e.get("event") == "state"]
        assert [s for s in states if s != "planned"] == ["starting", "weights", "http", "ready"], states
        phases = [e["phase"] for e in events if e.get("event") == "phase"]
        assert phases[-3:] == ["weights", "http", "ready"], phases  # the toy's load, listen, up
        shards = [e for e in events if e.get("event") == "progress" and e.get("phase") == "weights"]
        assert shards and shards[-1]["done"] == shards[-1]["total"] == 3
        ready = [e for e in events if e.get("event") == "state" and e.get("state") == "ready"]
        assert ready and ready[-1]["quick_check"]["content"] == "hello from the toy engine"

        report = await ops.triage("toy1")
        assert "toy-slow-disk" in [f.code for f in report.findings]
        assert report.outcome == "ready" and report.phase == "ready"

        await ops.stop("toy1", confirmed=True)
        assert ops.deployment("toy1").state == "stopped"
    finally:
        await ops.close()
        kill_marked(str(tmp_path / "box"))


# --------------------------------------------------------------------------------- the planner asks the engine


class ToyVersions(engines.VersionData):
    def newest(self) -> str:
        return "1.0.0"

    def flags_for(self, version: str) -> frozenset[str]:
        return frozenset({"--model-path", "--host", "--port", "--shards"})


class ToyWithRules(Toy):
    """The toy with a planner's knowledge: its own flag rules and version data."""

    name = "toy-planned"
    versions = ToyVersions()
    owned_flags = frozenset({"--shards"})

    def plan_rules(self):
        from gpuops.core.planning.rules import Rule

        return (Rule("toy-serve", lambda c: True,
                     lambda c: [("--model-path", [c.model_path]), ("--port", [str(c.wishes.port)]),
                                ("--shards", [str(c.tp * 3)]), ("--speed", ["fast"])],
                     lambda c: "the toy serves the model on its port"),)

    def max_running(self, spec: bool) -> int:
        return 1


def _facts():
    from gpuops.core.planning.model_facts import facts_from_config

    config = {"architectures": ["LlamaForCausalLM"], "model_type": "llama", "hidden_size": 4096,
              "num_attention_heads": 32, "num_key_value_heads": 8, "num_hidden_layers": 32,
              "intermediate_size": 14336, "vocab_size": 128256, "max_position_embeddings": 8192,
              "torch_dtype": "bfloat16"}
    return facts_from_config(config, id="toy/model", source="hub")


def test_the_planner_asks_the_plans_engine_for_its_rules_and_version_data(toy_engine):
    """A plan is made with its engine's flag rules, flags and version data; an engine that knows
    none of it (the toy) still plans (no rules: no flags), and SGLang's rules stay SGLang's."""
    from gpuops.core.planning import edits
    from gpuops.core.planning.hostfacts import offline_target
    from gpuops.core.planning.plan import Wishes, build_plan

    engines.register(ToyWithRules)
    try:
        facts, target = _facts(), offline_target(2, 80.0)
        plan = build_plan(facts, target, Wishes(tp=2, port=31000, engine="toy-planned"))
        assert plan.engine == "toy-planned" and plan.engine_version == "1.0.0"
        assert plan.argv[:6] == ["--model-path", plan.model_path, "--port", "31000", "--shards", "6"]
        assert [r.id for r in plan.rules if r.id.startswith("toy")] == ["toy-serve"]
        assert plan.unknown_flags == ["--speed"]  # checked against the toy's flags, not SGLang's
        assert not any(a.startswith("--reasoning-parser") or a == "--tp-size" for a in plan.argv)
        with pytest.raises(edits.EditError, match="--shards is the planner's"):
            edits.parse("flag --shards 2", engine="toy-planned")
        assert edits.parse("flag --shards 2")[0] == "edit"  # SGLang's planner does not own it

        bare = build_plan(facts, target, Wishes(tp=1, port=31001, engine="toy"))
        assert bare.engine == "toy" and bare.argv == [] and bare.unknown_flags == []
        sglang = build_plan(facts, target, Wishes(tp=1, port=31002, engine_version="0.5.10"))
        assert sglang.engine == "sglang" and "--tp-size" in sglang.argv and "--model-path" in sglang.argv
    finally:
        engines._LOADED.pop("toy-planned", None)


class ToyWords(ToyWithRules):
    """The toy with its own words and its own knowledge of a previous deployment's flags."""

    name = "toy-words"
    version_option = "--toy-version"
    flag_aliases = {"--shard-count": "--shards"}

    def like_drop_reason(self, name, values, ctx):
        return "the toy has no turbo any more" if name == "--turbo" else None

    def like_env_reason(self, key, value, ctx):
        return "the toy reads no turbo variable" if key == "TOY_TURBO" else None


def test_the_planners_words_and_like_knowledge_are_the_plans_engines(toy_engine):
    """What a plan says of its engine comes from the engine: its title in the warnings, its version
    option as the version's source; --like drops and renames a previous deployment's flags and
    variables by the plan's engine's knowledge (SGLang's FP4 and SGLANG_ENABLE_SPEC_V2 rules are
    not the toy's: the toy has no --quantization, and the variable is kept)."""
    from dataclasses import replace

    from gpuops.core.planning.hostfacts import offline_target
    from gpuops.core.planning.like import previous_from_unit
    from gpuops.core.planning.plan import Wishes, build_plan

    engines.register(ToyWords)
    try:
        facts = _facts()
        target = replace(offline_target(2, 80.0), host="gpu9", engine_version="0.9.0", python="/usr/bin/python3")
        plan = build_plan(facts, target, Wishes(tp=2, port=31000, engine="toy-words", engine_version="1.0.0"))
        assert plan.engine_version_source == "--toy-version"
        assert "planning for Toy 1.0.0 but the host has 0.9.0" in plan.warnings
        assert any(w.startswith("flags unknown to Toy 1.0.0: --speed") for w in plan.warnings)
        assert plan.to_json()["sglang_version"] == "1.0.0"  # the key every plan JSON has carried
        helped = build_plan(facts, replace(target, engine_version="1.0.0", help_flags=frozenset({"--port"})),
                            Wishes(tp=2, port=31002, engine="toy-words"))
        assert helped.flags_checked_against == "gpu9's `serve --help` (Toy 1.0.0)"  # its server module's --help

        unit = ("[Service]\nEnvironment=TOY_TURBO=1 SGLANG_ENABLE_SPEC_V2=1\n"
                "ExecStart=/usr/bin/python3 -m toyserve.serve --model-path /m --shard-count 2 --turbo "
                "--quantization modelopt_fp4\n")
        like = build_plan(facts, offline_target(2, 80.0),
                          Wishes(tp=2, port=31001, engine="toy-words", like=previous_from_unit(unit, "unit u")))
        drops = {r.removes[0]: r.why for r in like.rules if r.id == "like-drop"}
        assert drops == {"--turbo": "the toy has no turbo any more",
                         "--quantization": "Toy 1.0.0 has no --quantization",
                         "TOY_TURBO=1": "the toy reads no turbo variable"}
        assert "--shard-count" not in like.argv and like.env.get("SGLANG_ENABLE_SPEC_V2") == "1"
    finally:
        engines._LOADED.pop("toy-words", None)


def test_a_servers_ranks_are_known_by_its_engines_process_titles(toy_engine):
    """The stall watcher's rank count: the processes whose title starts with the engine's
    rank_title (SGLang's schedulers); an engine that names none counts no ranks."""
    from gpuops.core.hosts.procs import ProcessTree

    tree = ProcessTree([10, 11, 12, 13], {10: "python3 -m sglang.launch_server --port 30000",
                                          11: "sglang::scheduler_TP0", 12: "sglang::scheduler_DP1_TP1",
                                          13: "sglang::detokenizer"})
    assert tree.ranks(engines.get("sglang").rank_title) == [11, 12]
    assert engines.get("toy").rank_title is None and tree.ranks(engines.get("toy").rank_title) == []


class ToyBench(Toy):
    """The toy with a benchmark of its own: its command line, its records, its eval, its metrics."""

    name = "toy-bench"
    bench_backend = "toy"
    metrics = {"running_reqs": "toy_running"}

    def bench_module(self, version: str) -> str | None:
        return "toyserve.bench"

    def bench_argv(self, python, module, *, url, settings, num_prompts, concurrency, output_file,
                   model_path=None, tokenizer_path=None, served_name=None) -> list[str]:
        return [python, "-m", module, "--url", url, "-n", str(num_prompts), "--out", output_file]

    def bench_record(self, doc: object) -> bool:
        return isinstance(doc, dict) and "toy_tok_s" in doc

    def eval_module(self) -> str | None:
        return "toyserve.eval"

    def eval_argv(self, python, *, url, settings, served_name=None) -> list[str]:
        return [python, "-m", "toyserve.eval", url]

    def read_eval_output(self, lines) -> dict[str, float]:
        scores = [float(line.split()[-1]) for line in lines if line.startswith("toy score")]
        return {"score": scores[-1]} if scores else {}


def test_a_benchmark_is_its_engines_and_one_without_is_refused_in_one_line(toy_engine):
    """bench's command lines, its records, its eval's figures and the /metrics names are the target's
    engine's: SGLang's bench_serving by default, the toy-bench's own, and the toy (which has no
    benchmark) is refused in one line before anything runs; its profiles carry no --backend."""
    from gpuops.core.bench import runner

    engines.register(ToyBench)
    try:
        url = "http://127.0.0.1:30000"
        smoke, quality = runner.resolve_profile("smoke"), runner.resolve_profile(
            "quality", overrides={"eval_data_path": "/data/gsm8k.jsonl"})
        assert list(smoke.settings)[0] == "backend" and smoke.settings["backend"] == "sglang"
        sglang_target = runner.Target(host=None, url=url, home="/h")  # type: ignore[arg-type]
        argv = runner.serving_argv("py", "sglang.bench_serving", sglang_target, smoke, 4, "/o.jsonl")
        assert argv[:7] == ["py", "-m", "sglang.bench_serving", "--backend", "sglang", "--base-url", url]
        assert runner.quality_argv("py", sglang_target, quality)[:3] == ["py", "-m", "sglang.test.run_eval"]

        toy = runner.Target(host=None, url=url, home="/h",  # type: ignore[arg-type]
                            plan=toy_plan(Path("/srv/m"), 30000))
        toy_smoke = runner.resolve_profile("smoke", engine="toy")
        assert "backend" not in toy_smoke.settings and toy_smoke.settings["dataset_name"] == "random-ids"
        with pytest.raises(runner.BenchInputError, match=r"^Toy has no serving benchmark gpuops knows$"):
            runner.serving_argv("py", "toyserve.bench", toy, toy_smoke, 4, "/o.jsonl")
        with pytest.raises(runner.BenchInputError, match=r"^Toy has no accuracy evaluation gpuops knows$"):
            runner.quality_argv("py", toy, quality)
        sglang_record = '{"backend": "sglang", "output_throughput": 10.0}\n'
        with pytest.raises(runner.BenchInputError, match="not a bench_serving record"):
            runner.parse_jsonl(sglang_record, "f.jsonl", engine="toy")

        bench = runner.Target(host=None, url=url, home="/h",  # type: ignore[arg-type]
                              plan=toy_plan(Path("/srv/m"), 30000).replace(engine="toy-bench"))
        assert runner.resolve_profile("smoke", engine="toy-bench").settings["backend"] == "toy"
        assert runner.serving_argv("py", "toyserve.bench", bench, smoke, 4, "/o.jsonl") == \
            ["py", "-m", "toyserve.bench", "--url", url, "-n", "16", "--out", "/o.jsonl"]
        assert runner.quality_argv("py", bench, quality) == ["py", "-m", "toyserve.eval", url]
        assert runner.parse_jsonl('{"toy_tok_s": 5}\n', "t.jsonl", engine="toy-bench") == [{"toy_tok_s": 5}]
        with pytest.raises(runner.BenchInputError, match="not a bench_serving record"):
            runner.parse_jsonl(sglang_record, "f.jsonl", engine="toy-bench")
        assert engines.get("toy-bench").read_eval_output(["toy score 0.75"]) == {"score": 0.75}

        import msgspec

        from gpuops.core.domain import BenchRun

        run = BenchRun(id=7, source="gpuops", profile="smoke", settings={}, status="ok", created_at="t",
                       engine_version="1.0.0", plan=toy_plan(Path("/srv/m"), 30000))
        assert ", Toy 1.0.0, " in runner.describe_run(run)  # the run's engine, named as it names itself
        assert ", SGLang 1.0.0, " in runner.describe_run(msgspec.structs.replace(run, plan=None))  # a --url run

        text = "toy_running 3\nsglang:num_running_reqs 9\n"
        assert runner.parse_metrics(text, engine="toy-bench").running_reqs == 3
        assert runner.parse_metrics(text).running_reqs == 9
    finally:
        engines._LOADED.pop("toy-bench", None)


def test_the_functional_checks_ask_the_engines_server_info_and_one_without_is_failed_in_one_line(toy_engine):
    """The functional checks read the server's info where its engine says (SGLang: /server_info,
    then /get_server_info); an engine that names none (the toy) fails each check with one line,
    asking nothing of the server."""
    from gpuops.core.bench.functional import run_checks

    assert engines.get("sglang").server_info_paths == ("/server_info", "/get_server_info")
    url = f"http://127.0.0.1:{free_port()}"  # a port nothing listens on: a request would fail another way
    plan = toy_plan(Path("/srv/m"), 30000)
    checks = asyncio.run(run_checks(url, model="toy/model", plan=plan))
    assert [(c.name, c.ok, c.reason) for c in checks] == [
        (name, False, "Toy has no server info gpuops knows") for name in ("tool_calls", "thinking", "mtp")]
    sglang = asyncio.run(run_checks(url, model="m", plan=plan.replace(engine="sglang")))
    assert all(c.ok is False and "Toy" not in c.reason for c in sglang)  # SGLang's asks (and finds nothing)


def test_triage_dumps_the_ranks_its_engine_names(toy_engine, tmp_path, monkeypatch):
    """The triage probe is told the engine's rank title (``--rank-title``): py-spy dumps the
    processes whose title starts with it, never another engine's; an engine that names none
    (the toy) gets no --rank-title, and the server processes themselves are dumped."""
    from gpuops.core.diagnose.host_checks import probe_argv
    from gpuops.core.hosts.programs import triage_probe

    toy = toy_plan(Path("/srv/m"), 30000).replace(python="/v/bin/python")
    sglang = toy.replace(engine="sglang")
    assert "--rank-title" not in probe_argv(None, toy)  # type: ignore[arg-type]
    argv = probe_argv(None, sglang)  # type: ignore[arg-type]
    assert argv[argv.index("--rank-title") + 1] == engines.get("sglang").rank_title

    spy = tmp_path / "py-spy"
    spy.write_text("#!/bin/sh\necho stack of \"$@\"\n")
    spy.chmod(0o755)
    monkeypatch.setattr(sys, "executable", str(tmp_path / "python"))  # py-spy is looked for beside it first
    server = os.getpid()  # a running process stands for the server (the probe keeps live pids only)
    tree = [{"pid": 101, "command": "toy::rank_R3"}, {"pid": 102, "command": "sglang::scheduler_TP0"},
            {"pid": server, "command": "python -m toyserve.serve"}]
    ranked = triage_probe.Probe("/", [server], [], [], "toy::rank").py_spy(tree)
    assert [(s["pid"], s["rank"]) for s in ranked["stacks"]] == [(101, "R3")]
    unranked = triage_probe.Probe("/", [server], [], [], None).py_spy(tree)
    assert [(s["pid"], s["rank"]) for s in unranked["stacks"]] == [(server, None)]  # not SGLang's scheduler
    assert unranked["stacks"][0]["text"].strip() == f"stack of dump --native --pid {server}"


def test_a_previous_command_lines_flags_are_what_follows_its_engines_server(toy_engine):
    """--like reads a unit's ExecStart: the flags after the plan's engine's server command."""
    sglang, toy = engines.get("sglang"), engines.get("toy")
    assert sglang.command_flags(["/v/bin/python", "-m", "sglang.launch_server", "--tp-size", "2"]) == ["--tp-size", "2"]
    assert sglang.command_flags(["sglang", "serve", "--port", "1"]) == ["--port", "1"]
    assert toy.command_flags(["/v/bin/python", "-m", "toyserve.serve", "--shards", "3"]) == ["--shards", "3"]
    assert toy.command_flags(["toyserve", "--shards", "3"]) == ["--shards", "3"]
    assert toy.command_flags(["/v/bin/python", "-m", "sglang.launch_server", "serve"]) == \
        ["/v/bin/python", "-m", "sglang.launch_server", "serve"]  # not the toy's server: nothing taken for it


class ToySimHost(engines.SimHostPart):
    """What gpuops' simulated host presents of the toy: written here alone, sim/host.py renders it."""

    title = "Toy"
    package = "toyserve"
    server_module = "toyserve.serve"
    real_modules = ("toyserve.bench", "toyserve.tools.*")
    venv_option = "--toy-venv"
    absent = ("gone",)

    def check_version(self, version: str | None) -> str | None:
        if version in self.absent:
            return None
        if version is not None and not version.replace(".", "").isdigit():
            raise ValueError(f"toy version must look like 1.2.3, not {version!r}")
        return version or "1.2.3"

    def package_files(self, version: str | None) -> dict[str, str]:
        if version is None:
            return {"toyserve/__init__.py": "raise ModuleNotFoundError('No module named toyserve', name='toyserve')\n"}
        return {"toyserve/__init__.py": f"__version__ = {version!r}\n"}

    def help_text(self, version: str) -> str:
        return f"usage: toyserve.serve [--shards N] (Toy {version})\n"

    def server_files(self, version: str) -> dict[str, str | bytes]:
        return {"flags.json": '{"version": "%s"}\n' % version}

    def demo_script(self) -> dict:
        return {"engine": "toy", "module": self.server_module, "startup": [], "kv_crash": [], "shutdown": [],
                "metrics": {}}


class ToyOnASimHost(Toy):
    def simhost(self) -> ToySimHost:
        return ToySimHost()


def test_the_simulated_host_presents_its_engines_stand_in(toy_engine, tmp_path):
    """gpuops sim renders the host from the engine's part: the toy's package and version, its server
    module's --help and start (the given server), its real modules refused without the toy's virtualenv;
    an engine without a part is refused in one line with nothing written."""
    with pytest.raises(engines.NoSimHost, match="^Toy has no simulated host"):
        setup_simhost(tmp_path / "bare", gpus=1, engine="toy")
    assert not (tmp_path / "bare").exists()
    engines.register(ToyOnASimHost)
    server = tmp_path / "toy_server.py"
    server.write_text("SCENARIOS = ('ok',)\n\ndef main(argv):\n    print('toy server', argv)\n    return 0\n")
    sim = setup_simhost(tmp_path / "box", gpus=1, engine="toy", engine_version="2.0", server=server)
    assert sim.engine_version == "2.0"

    def run(*args: str) -> tuple[int, str, str]:
        out = subprocess.run([str(sim.python), *args], capture_output=True, text=True, timeout=60)
        return out.returncode, out.stdout, out.stderr

    assert run("-c", "import toyserve; print(toyserve.__version__)") == (0, "2.0\n", "")
    assert run("-m", "toyserve.serve", "--help") == (0, "usage: toyserve.serve [--shards N] (Toy 2.0)\n", "")
    assert run("-m", "toyserve.serve", "--shards", "3") == (0, "toy server ['--shards', '3']\n", "")
    rc, _, err = run("-m", "toyserve.bench")
    assert rc == 1 and "python -m toyserve.bench needs a real Toy virtualenv" in err and "--toy-venv PATH" in err
    assert (tmp_path / "box" / "lib" / "toyserve-sim" / "flags.json").read_text() == '{"version": "2.0"}\n'
    assert not (tmp_path / "box" / "lib" / "sglang").exists()  # the default engine's stand-in is not there
    with pytest.raises(ValueError, match="toy version must look like 1.2.3"):
        setup_simhost(tmp_path / "box", gpus=1, engine="toy", engine_version="two", server=server)
    gone = setup_simhost(tmp_path / "box", gpus=1, engine="toy", engine_version="gone", server=server)
    assert gone.engine_version is None
    rc, _, err = run("-c", "import toyserve")
    assert rc == 1 and "No module named toyserve" in err
