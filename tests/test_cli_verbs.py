"""The command line as an operator at 2 a.m. uses it (issue 23): `deploy MODEL` with plan's options,
`restart` and `fix`, conflicts refused before any question, `status NAME` condensed, piped tables
whole, a stalled deploy that says what still holds the GPUs. The CLI runs as a subprocess against the
simulated GPU host (local: its programs stand in for the host's, gpuops' code is the real one)."""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import tempfile
from pathlib import Path

import pytest

from gpuops.core.deploy.store import Store
from gpuops.sim.host import setup_simhost
from tests.conftest import PACE, kill_marked, operator_hub
from tests.test_cli import GPUOPS
from tests.ports import free_port



class World:
    """Simulated 4-GPU hosts on this machine (one per scenario), an operator's HF cache holding
    Qwen3-8B's config, a state folder of the test's own."""

    def __init__(self, tmp_path: Path):
        self.root = Path(tempfile.mkdtemp(prefix="gpuops-cliverbs-"))
        self.tmp = tmp_path
        hub = operator_hub(tmp_path / "hub")
        home = tmp_path / "home"  # the process launcher's files (~/.local/state/gpuops) are this test's own
        home.mkdir()
        self.env = dict(os.environ, HOME=str(home), XDG_STATE_HOME=str(tmp_path / "state"),
                        XDG_CONFIG_HOME=str(tmp_path / "cfg"), XDG_CACHE_HOME=str(tmp_path / "cache"),
                        HF_HUB_CACHE=str(hub), HF_HUB_OFFLINE="1")
        for key in ("GPUOPS_CONFIG", "HF_TOKEN"):
            self.env.pop(key, None)
        self.cfg = tmp_path / "config.toml"
        self.cfg.write_text("")
        self.sims: dict[str, object] = {}

    def host(self, name: str, scenario: str = "ok", extra: str = "") -> object:
        sim = setup_simhost(self.root / name, gpus=4, engine_version="0.5.23", scenario=scenario, pace=PACE)
        self.sims[name] = sim
        self.cfg.write_text(self.cfg.read_text() + sim.host_block(name) + extra)
        return sim

    def stall(self, **seconds: float) -> None:
        self.cfg.write_text(self.cfg.read_text() + "[stall]\n" + "".join(f"{k} = {v}\n" for k, v in seconds.items()))

    def run(self, *args: str, timeout: float = 120, stdin: str | None = None) -> subprocess.CompletedProcess:
        return subprocess.run([GPUOPS, "--config", str(self.cfg), *args], capture_output=True, text=True,
                              env=self.env, timeout=timeout, input=stdin,
                              stdin=subprocess.DEVNULL if stdin is None else None)

    def store(self) -> Store:
        return Store(Path(self.env["XDG_STATE_HOME"]) / "gpuops" / "gpuops.db")

    def deployment(self, name: str):  # type: ignore[no-untyped-def]
        store = self.store()
        try:
            return store.deployment(name)
        finally:
            store.close()


@pytest.fixture
def world(tmp_path):
    w = World(tmp_path)
    yield w
    kill_marked(str(w.root))
    subprocess.run(["rm", "-rf", str(w.root)])


def events(out: subprocess.CompletedProcess) -> list[dict]:
    return [json.loads(line) for line in out.stdout.splitlines() if line.startswith("{")]


def one_line(out: subprocess.CompletedProcess) -> str:
    err = out.stderr.strip()
    assert "Traceback" not in out.stderr and "\n" not in err, out.stderr
    return err


# ------------------------------------------------------------------ deploy MODEL takes plan's options


def test_deploy_model_takes_the_planning_options_of_plan(world):
    """`deploy MODEL --port --tp --gpu-ids --download-dir` deploys what `plan` with the same options
    plans (they were unknown to deploy: exit 2); a PLAN.json refuses them (it is planned already)."""
    world.host("gpu1")
    port = free_port()
    into = world.root / "weights"
    opts = ["--host", "gpu1", "--name", "tuned", "--port", str(port), "--tp", "2", "--gpu-ids", "2,3",
            "--download-dir", str(into), "--no-mtp"]
    planned = world.run("plan", "Qwen/Qwen3-8B", *opts, "--json")
    assert planned.returncode == 0, planned.stderr
    out = world.run("deploy", "Qwen/Qwen3-8B", *opts, "--yes", "--json")
    assert out.returncode == 0, out.stderr
    assert [e["state"] for e in events(out) if e["event"] == "state"][-1] == "ready"
    plan = world.deployment("tuned").plan
    assert (plan.port, plan.tp, plan.gpu_ids, plan.download_dir) == (port, 2, (2, 3), str(into))
    assert plan.argv == json.loads(planned.stdout)["argv"]
    assert any(into.rglob("*.safetensors"))  # the weights went where it was told
    # a plan made already takes none of them: one line, exit 2, nothing deployed
    plan_file = world.tmp / "plan.json"
    plan_file.write_text(planned.stdout)
    out = world.run("deploy", str(plan_file), "--host", "gpu1", "--tp", "4", "--yes")
    assert out.returncode == 2 and "--tp" in one_line(out) and "is a plan already" in out.stderr
    out = world.run("deploy", "Qwen/Qwen3-8B", "--yes")
    assert out.returncode == 2 and "--host" in one_line(out)


# ------------------------------------------------------------------ restart and fix


def test_restart_and_fix_from_the_command_line(world):
    """`gpuops restart NAME` and `gpuops fix NAME [CODE]` go through the TUI's use cases: each asks
    first (without --yes and a terminal: refused, nothing changed), begins a new run, streams its
    events and exits 0 only when it is ready; a fix is the finding's plan patch, recorded with its
    code. A code that has no applicable fix, or --readonly, is refused in one line."""
    world.host("gpu1")
    world.host("gpu2", scenario="kv-cache-oom")
    assert world.run("deploy", "Qwen/Qwen3-8B", "--host", "gpu1", "--name", "svc", "--port", str(free_port()), "--yes").returncode == 0
    out = world.run("restart", "svc")
    assert out.returncode == 2 and one_line(out).endswith("needs confirmation: add --yes"), out.stderr
    assert world.deployment("svc").run == 1
    out = world.run("restart", "svc", "--yes", "--json")
    assert out.returncode == 0, out.stderr
    seen = events(out)
    assert seen[-1]["state"] == "ready" and {(e["deployment"], e["run"]) for e in seen} == {("svc", 2)}
    assert world.deployment("svc").run == 2

    out = world.run("deploy", "Qwen/Qwen3-8B", "--host", "gpu2", "--name", "oomy", "--port", str(free_port()), "--yes")
    assert out.returncode == 1 and "kv-cache-oom" in out.stdout
    out = world.run("fix", "oomy")
    assert out.returncode == 2 and one_line(out).endswith("needs confirmation: add --yes") and out.stdout == ""
    out = world.run("fix", "oomy", "nccl-init-stall", "--yes")
    assert out.returncode == 2 and one_line(out) == (
        "gpuops: oomy's run 1 has no applicable fix for nccl-init-stall; applicable: kv-cache-oom")
    out = world.run("--readonly", "fix", "oomy", "--yes")
    assert out.returncode == 2 and "read-only" in one_line(out)
    assert world.deployment("oomy").run == 1
    before = world.deployment("oomy").plan.argv
    out = world.run("fix", "oomy", "kv-cache-oom", "--yes", "--json")
    assert out.returncode == 1, out.stderr  # the simulated host runs out of KV cache again
    seen = events(out)
    (changed,) = [e for e in seen if e["event"] == "plan"]
    assert changed["code"] == "kv-cache-oom" and changed["run"] == 2
    assert ["+", "--mem-fraction-static 0.85"] in changed["diff"]
    assert seen[-1]["state"] == "crashed" and "+ --mem-fraction-static 0.85" in out.stderr  # shown before it ran
    after = world.deployment("oomy")
    assert after.run == 2 and after.plan.argv != before
    assert after.plan.argv[after.plan.argv.index("--mem-fraction-static") + 1] == "0.85"
    # without CODE the run's only applicable fix is the one (again: the next step up)
    out = world.run("fix", "oomy", "--yes")
    assert out.returncode == 1 and "fix for kv-cache-oom" in out.stdout and "+ --mem-fraction-static 0.9" in out.stdout
    assert world.deployment("oomy").run == 3


def test_a_stalled_deploy_says_what_holds_the_gpus_and_what_to_do(world):
    """A deploy that stalls exits 1 and says so: its server still runs and holds the plan's GPUs,
    and the next steps (triage, stop) by name."""
    world.host("gpu1", scenario="hang-at-dist-init")
    world.stall(dist_init=3)
    out = world.run("deploy", "Qwen/Qwen3-8B", "--host", "gpu1", "--name", "hung", "--gpu-ids", "2", "--port", str(free_port()), "--yes")
    assert out.returncode == 1, out.stderr
    assert "hung is stalled in dist_init: its server still runs on gpu1 and holds GPU 2." in out.stderr
    assert "gpuops triage --deployment hung" in out.stderr and "gpuops stop hung (frees the GPUs)" in out.stderr
    status = json.loads(world.run("status", "hung", "--json").stdout)
    assert status["deployment"]["state"] == "stalled"


# ------------------------------------------------------------------ refusals before questions


def test_what_refuses_a_deploy_is_said_before_anything_is_asked(world):
    """A deploy that would be refused (here: too little room in --download-dir) is refused before
    the question about GPUs already in use: on a terminal nothing is asked, the reason is the
    refusal's. With room it asks as before."""
    import pty

    from tests.test_store_hardening import tmpfs

    sim = world.host("gpu1")
    other = subprocess.Popen(["sleep", "300"])
    try:
        sim.set_gpu(0, processes=[{"pid": other.pid, "used": 40 * 1024**3}], memory_used=40 * 1024**3)
        with tmpfs("4m") as small:
            for into, refused in ((small, "B free; the model needs"), (world.root / "roomy", "(refusing without --yes)")):
                master, slave = pty.openpty()  # stdin a terminal: a question would be asked there
                try:
                    os.write(master, b"n\n")  # the answer, if it is asked
                    out = subprocess.run([GPUOPS, "--config", str(world.cfg), "deploy", "Qwen/Qwen3-8B", "--host",
                                          "gpu1", "--name", "second", "--gpu-ids", "0", "--download-dir", str(into),
                                          "--port", str(free_port())],
                                         stdin=slave, capture_output=True, text=True, env=world.env, timeout=120)
                finally:
                    os.close(slave)
                    os.close(master)
                assert out.returncode == 2 and refused in one_line(out), out.stderr
                asked = "continue? [y/N]" in out.stdout
                assert asked == (into != small), out.stdout
                assert world.deployment("second") is None  # nothing recorded
    finally:
        other.kill()
        other.wait()


async def test_plan_review_says_a_taken_name_or_port_before_asking(world, monkeypatch):
    """Plan review's `d` checks what would refuse the deploy (a name in use, a port in use) before
    its summary asks: the operator is never asked to confirm a deploy that will be refused."""
    from gpuops.core.config import load_inventory
    from gpuops.core.planning.hostfacts import read_target
    from gpuops.core.planning.model_facts import load_model_facts
    from gpuops.core.planning.plan import Wishes
    from gpuops.screens.confirm import ConfirmScreen
    from gpuops.screens.plan_review import PlanReviewScreen
    from gpuops.tui.app import GpuopsApp
    from tests.tui_helpers import until

    world.host("gpu1")
    port = free_port()
    out = world.run("deploy", "Qwen/Qwen3-8B", "--host", "gpu1", "--name", "taken", "--port", str(port), "--yes")
    assert out.returncode == 0, out.stderr
    for key in ("HOME", "XDG_STATE_HOME", "XDG_CONFIG_HOME", "XDG_CACHE_HOME", "HF_HUB_CACHE", "HF_HUB_OFFLINE"):
        monkeypatch.setenv(key, world.env[key])
    app = GpuopsApp(load_inventory(str(world.cfg)), interval=0.5)
    async with app.run_test(size=(170, 50)) as pilot:
        target = await read_target(app.monitor.hosts["gpu1"])
        facts = load_model_facts("Qwen/Qwen3-8B")
        for wishes, says in ((Wishes(tp=1, name="taken"), "a deployment named 'taken' exists (ready on gpu1)"),
                             (Wishes(tp=1, name="other", port=port), f"port {port} is in use on gpu1"),
                             (Wishes(tp=1, name="fresh"), None)):
            screen = PlanReviewScreen(facts, target, wishes)
            await app.push_screen(screen)
            assert await until(pilot, lambda: screen.plan is not None)
            await pilot.press("d")
            if says is None:  # nothing refuses it: the summary asks
                assert await until(pilot, lambda: isinstance(app.screen, ConfirmScreen), timeout=30)
                await pilot.press("n")
                assert await until(pilot, lambda: app.screen is screen)
            else:
                assert await until(pilot, lambda: any(says in str(n.message) for n in app._notifications),
                                   timeout=30), [str(n.message) for n in app._notifications]
                await pilot.pause(0.5)
                assert app.screen is screen  # never asked
            await pilot.press("escape")
            assert await until(pilot, lambda: app.screen is not screen)
    assert world.deployment("other") is None and world.deployment("fresh") is None


# ------------------------------------------------------------------ what status and piped tables print


def test_status_of_a_deployment_shows_the_latest_progress_of_each_kind(world):
    """`status NAME` prints where each kind of progress got to (shards 5/5, batch sizes 37/37), not
    every step (a run of Qwen3-8B had 48 progress lines, pushing its first events out)."""
    world.host("gpu1")
    assert world.run("deploy", "Qwen/Qwen3-8B", "--host", "gpu1", "--name", "st", "--port", str(free_port()),
                     "--yes").returncode == 0
    out = world.run("status", "st")
    assert out.returncode == 0, out.stderr
    lines = out.stdout.splitlines()
    shards = [line for line in lines if "weights: shards" in line]
    graphs = [line for line in lines if "cuda_graph: batch sizes" in line]
    assert len(shards) == 1 and shards[0].endswith("shards 5/5"), lines
    assert len(graphs) == 1 and graphs[0].endswith("batch sizes 37/37"), lines
    assert len([line for line in lines if " downloading " in line and "iB" in line]) == 1
    assert lines[1].endswith("  planned") and lines[-2].split()[1] == "ready", lines  # the run from its start
    stored = json.loads(world.run("status", "st", "--json").stdout)["events"]  # JSON: the stored events
    assert sum(e["event"] == "progress" for e in stored) > 10


def test_piped_tables_print_every_cell_whole(world):
    """Piped (`| grep`, `> file`), a table never wraps a cell: a model folder's long path is on its
    row's line, whole (at 80 columns it was cut into pieces over several lines)."""
    deep = world.root / ("models-on-a-volume-with-a-long-name/" * 3).rstrip("/")
    folder = deep / "Qwen3-8B"
    folder.mkdir(parents=True)
    (folder / "config.json").write_text((Path(__file__).parent / "data/configs/qwen3__Qwen3-8B.json").read_text())
    world.host("gpu1", extra=f'model_dirs = ["{deep}"]\n')
    out = world.run("models", "--host", "gpu1")
    assert out.returncode == 0, out.stderr
    rows = [line for line in out.stdout.splitlines() if str(folder) in line]
    assert len(rows) == 1, out.stdout + out.stderr
    row = rows[0]
    assert row.split()[:2] == [str(folder), "dir"]
    assert f"({deep}, " in out.stdout  # the mount's line names the model dir whole too
    out = world.run("hosts")
    assert out.returncode == 0 and len(out.stdout.splitlines()) == 2, out.stdout  # the header and one row
    # COLUMNS set (a terminal's width carried into `| less`, or a script's own): the table keeps to it,
    # a long cell wrapped in its column and nothing cut (it printed 150-column lines whatever COLUMNS said)
    narrow = subprocess.run([GPUOPS, "--config", str(world.cfg), "models", "--host", "gpu1"], capture_output=True,
                            text=True, env={**world.env, "COLUMNS": "80"}, stdin=subprocess.DEVNULL, timeout=120)
    assert narrow.returncode == 0, narrow.stderr
    assert max(map(len, narrow.stdout.splitlines())) <= 80 and str(folder) not in narrow.stdout, narrow.stdout
    table = narrow.stdout.splitlines()
    first = next(i for i, line in enumerate(table) if line.split()[:1] == ["MODEL"]) + 1
    cells = [line.split()[0] for line in table[first:] if line.strip()]
    assert "".join(cells).startswith(str(folder)), narrow.stdout  # its column's lines, read down, are it whole


async def test_forgetting_a_running_deployment_is_refused_without_asking(world, monkeypatch):
    """The deployments view's forget (del) on a deployment whose server runs says so and asks
    nothing (it asked y/n and then refused); once stopped it asks, and yes forgets it."""
    from gpuops.core.config import load_inventory
    from gpuops.screens.confirm import ConfirmScreen
    from gpuops.screens.deployments import DeploymentsScreen
    from gpuops.tui.app import GpuopsApp
    from tests.tui_helpers import until

    world.host("gpu1")
    assert world.run("deploy", "Qwen/Qwen3-8B", "--host", "gpu1", "--name", "up", "--port", str(free_port()),
                     "--yes").returncode == 0
    for key in ("HOME", "XDG_STATE_HOME", "XDG_CONFIG_HOME", "XDG_CACHE_HOME"):
        monkeypatch.setenv(key, world.env[key])
    app = GpuopsApp(load_inventory(str(world.cfg)), interval=0.5)
    async with app.run_test(size=(160, 45)) as pilot:
        app.open_deployments(select="up")
        assert await until(pilot, lambda: isinstance(app.screen, DeploymentsScreen) and "up" in app.screen.rows)
        view = app.screen
        assert view.select("up")
        await pilot.press("delete")
        assert await until(pilot, lambda: any("up's server runs on gpu1" in str(n.message) and "stop it first" in
                                              str(n.message) for n in app._notifications), timeout=30)
        await pilot.pause(0.5)
        assert app.screen is view  # never asked
        assert world.run("stop", "up", "--yes").returncode == 0
        await pilot.press("delete")
        assert await until(pilot, lambda: isinstance(app.screen, ConfirmScreen), timeout=30)
        await pilot.press("y")
        assert await until(pilot, lambda: world.deployment("up") is None, timeout=30)


def test_an_offline_plan_says_the_hosts_python_runs_it(world):
    """A plan made offline has no python yet (the host's is bound at deploy): it says so, never
    `None -m sglang.launch_server`; a host's plan names that host's python."""
    out = world.run("plan", "Qwen/Qwen3-8B", "--gpus", "2", "--gpu-memory", "80")
    assert out.returncode == 0, out.stderr
    assert "None" not in out.stdout
    assert "<host python> -m sglang.launch_server" in out.stdout
    assert "ExecStart=<host python> -m sglang.launch_server" in out.stdout  # the unit it shows, the same
    sim = world.host("gpu1")
    out = world.run("plan", "Qwen/Qwen3-8B", "--host", "gpu1")
    assert out.returncode == 0 and str(sim.python) in out.stdout and "<host python>" not in out.stdout


# ------------------------------------------------------------------ bench: a record without a max concurrency


async def test_a_record_without_max_concurrency_is_labelled_c_infinity_everywhere(world, monkeypatch):
    """bench_serving run without --max-concurrency records null: compare (text and JSON), the
    markdown export and the TUI's compare label it c=∞, never c=None."""
    from textual.widgets import DataTable

    from gpuops.screens.bench_results import BenchCompareScreen
    from gpuops.tui.app import GpuopsApp
    from tests.tui_helpers import until

    source = Path(__file__).parent / "data" / "bench" / "bench_serving-0.5.23.jsonl"
    records = [json.loads(line) for line in source.read_text().splitlines()]
    records[1]["max_concurrency"] = None  # the second step ran unlimited
    jsonl = world.tmp / "unlimited.jsonl"
    jsonl.write_text("".join(json.dumps(r) + "\n" for r in records))
    out = world.run("bench", "import", str(jsonl), "--json")
    assert out.returncode == 0, out.stderr
    run = str(json.loads(out.stdout)["run"]["id"])
    for what, out in (("compare", world.run("bench", "compare", run, run)),
                      ("md", world.run("bench", "export", run, "--format", "md"))):
        assert out.returncode == 0 and "None" not in out.stdout, (what, out.stdout)
        assert f"#{run} c=∞" in out.stdout and f"#{run} c=1" in out.stdout, (what, out.stdout)
    out = world.run("bench", "compare", run, run, "--json")
    assert out.returncode == 0, out.stderr
    labels = [c["label"] for c in json.loads(out.stdout)["columns"]]
    assert labels == [f"#{run} c=1", f"#{run} c=∞"] * 2
    for key in ("HOME", "XDG_STATE_HOME", "XDG_CONFIG_HOME", "XDG_CACHE_HOME"):
        monkeypatch.setenv(key, world.env[key])
    app = GpuopsApp(__import__("gpuops.core.config", fromlist=["x"]).parse_inventory("", source="t.toml"),
                    interval=0.5)
    async with app.run_test(size=(170, 50)) as pilot:
        await app.push_screen(BenchCompareScreen([int(run), int(run)]))
        assert await until(pilot, lambda: app.screen.query(DataTable) and len(app.screen.query_one(DataTable).columns) > 1)
        shown = [str(c.label) for c in app.screen.query_one(DataTable).columns.values()]
        assert shown[1:] == labels, shown


# ------------------------------------------------------------------ a download that stalls


def test_a_stalled_download_says_its_code_once_and_how_to_resume(world):
    """A download that stops growing is one download-stalled finding: its code said once, the bytes
    on disk and the room left as evidence, and a fix to act on (restart: it resumes; if it
    stalls again, the host's network), and the deploy's last word says no GPU is held."""
    models = world.root / "models"
    models.mkdir()
    world.host("gpu1", scenario="slow-download", extra=f'model_dirs = ["{models}"]\n')
    world.stall(download=3)
    out = world.run("deploy", "Qwen/Qwen3-8B", "--host", "gpu1", "--name", "slowdl", "--port", str(free_port()),
                    "--yes")
    assert out.returncode == 1, out.stderr
    (line,) = [line for line in out.stdout.splitlines() if "error: download-stalled" in line]
    assert "error: download-stalled: no bytes for " in line and line.count("download-stalled") == 1, line
    assert "fix: `gpuops restart slowdl`: the download resumes from the disk" in out.stdout \
        and "does not reach the Hub" in out.stdout
    assert "no server runs and no GPU is held" in out.stderr
    doc = json.loads(world.run("status", "slowdl", "--json").stdout)
    (finding,) = [e for e in doc["events"] if e["event"] == "finding"]
    readings = {e["source"]: e["reading"] for e in finding["evidence"]}
    assert readings["disk"].endswith(f"iB of 15.3 GiB in {models}/Qwen/Qwen3-8B") and "iB free" in readings["df"]
    assert finding["data"]["done_bytes"] > 0 and finding["data"]["free_bytes"] > 0
    # the fix as said: once the host reaches the Hub again, `gpuops restart` resumes it and the server starts
    world.sims["gpu1"].set_sim(scenario="ok")
    out = world.run("restart", "slowdl", "--yes")
    assert out.returncode == 0, out.stdout + out.stderr
    assert "ready (endpoint" in out.stdout, out.stdout


# ------------------------------------------------------------------ a stall: one finding everywhere


def test_a_stall_is_one_finding_on_its_screen_and_in_triage_and_its_fix_follows_the_evidence(world):
    """A start stuck in NCCL's init: the stall watcher's finding (what the deployment screen shows)
    and `triage --deployment` are one finding: one severity, one fix. Without NCCL's log the fix
    turns it on; with it on and the P2P check passed, nothing is patched and NCCL_P2P_DISABLE is
    never suggested (triage offered it as an experiment while its own P2P check said ok)."""
    world.host("gpu1", scenario="hang-at-dist-init")
    world.stall(dist_init=3)

    def stall_and_triage() -> tuple[dict, dict, dict]:
        doc = json.loads(world.run("status", "hung", "--json").stdout)
        (stall,) = [e for e in doc["events"] if e["event"] == "finding" and e["code"] == "nccl-init-stall"]
        out = world.run("triage", "--deployment", "hung", "--json")
        assert out.returncode == 0, out.stderr
        report = json.loads(out.stdout)
        (said,) = [f for f in report["findings"] if f["code"] == "nccl-init-stall"]
        assert (said["severity"], said["fix"]) == (stall["severity"], stall["fix"]), (said, stall)
        assert said["summary"] == stall["summary"]
        return stall, said, report

    out = world.run("deploy", "Qwen/Qwen3-8B", "--host", "gpu1", "--name", "hung", "--tp", "2", "--gpu-ids", "0,1",
                    "--port", str(free_port()), "--yes")
    assert out.returncode == 1, out.stderr
    stall, _, report = stall_and_triage()
    assert stall["severity"] == "error" and stall["fix"]["applicable"]
    assert stall["fix"]["plan_patch"] == {"set_env": {"NCCL_DEBUG": "INFO", "NCCL_DEBUG_SUBSYS": "INIT,P2P"}}
    # its fix applied: NCCL's INFO lines now show the communicators' Init START that never completes
    out = world.run("fix", "hung", "nccl-init-stall", "--yes", "--json")
    assert out.returncode == 1 and any(e["event"] == "log" and "NCCL INFO" in e["line"] for e in events(out))
    stall, said, report = stall_and_triage()
    (p2p,) = [c for c in report["checks"] if c["name"] == "p2p-unavailable"]
    assert p2p["ok"] is True, p2p
    assert stall["severity"] == "error" and not stall["fix"]["applicable"] and stall["fix"]["plan_patch"] is None
    assert "the P2P check passed" in stall["fix"]["summary"]
    assert "NCCL_P2P_DISABLE" not in json.dumps([f["fix"] for f in report["findings"]])


def test_triage_of_a_run_whose_server_never_started_reads_no_earlier_run(world):
    """A deployment that was ready once, restarted, and whose new run failed in its download: triage
    --deployment read the log from its start (the run's position was never recorded) and said the
    earlier run's 'outcome: ready'. It says the run has no log, and no earlier run's outcome. The restart's
    download is a deploy's: the inventory's [stall] limit (it waited 120 s) and the operator's HF token."""
    models = world.root / "models"
    models.mkdir()
    world.host("gpu1", extra=f'model_dirs = ["{models}"]\n')
    port = str(free_port())
    assert world.run("deploy", "Qwen/Qwen3-8B", "--host", "gpu1", "--name", "twice", "--port", port,
                     "--yes").returncode == 0
    assert world.run("triage", "--deployment", "twice").stdout.count("outcome: ready") == 1  # run 1's own log
    assert world.run("stop", "twice", "--yes").returncode == 0
    world.sims["gpu1"].set_sim(scenario="slow-download", stall_after_bytes=1)
    world.stall(download=2)
    shutil.rmtree(models / "Qwen")  # (the copy gone: the restart downloads it again)
    out = world.run("restart", "twice", "--yes")
    assert out.returncode == 1 and "download-stalled" in out.stdout, out.stdout + out.stderr
    out = world.run("triage", "--deployment", "twice")
    assert out.returncode == 0, out.stderr
    assert "outcome: ready" not in out.stdout, out.stdout
    assert "run 2 has no log: its server was never started" in out.stdout, out.stdout
    # the restart downloads as deploy does: with the operator's HF token for a gated repo (it was given none)
    world.sims["gpu1"].set_sim(scenario="ok", gated_repos=["Qwen/Qwen3-8B"])
    out = world.run("restart", "twice", "--yes")
    assert out.returncode == 1, out.stdout + out.stderr
    # what the download said (not hf's "Hint: set HF_DEBUG=1", nor its colours), and what to do
    assert "failed (exit 1): Error: Access denied. Model 'Qwen/Qwen3-8B' requires approval." in out.stdout, out.stdout
    assert "HF_DEBUG" not in out.stdout and "\\x1b" not in out.stdout, out.stdout
    assert "needs a Hugging Face token with access to it: set HF_TOKEN where gpuops runs" in out.stdout, out.stdout
    out = subprocess.run([GPUOPS, "--config", str(world.cfg), "restart", "twice", "--yes"], capture_output=True,
                         text=True, env={**world.env, "HF_TOKEN": "hf_" + "x" * 34}, stdin=subprocess.DEVNULL,
                         timeout=120)
    assert out.returncode == 0 and "ready (endpoint" in out.stdout, out.stdout + out.stderr
