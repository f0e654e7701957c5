"""Multi-node deployments (`gpuops plan MODEL --hosts H1,H2 --tp N`, then `deploy`): TP split evenly over
the nodes, the fit per node, SGLang's own --nnodes/--node-rank/--dist-init-addr with node 0 holding the
rendezvous, the inventory's node address and NCCL interface, one launch per node; the plan JSON that
carries it, validated when read back; and the deploy over real SSH to two simulated hosts (node 0
first, every node watched, ready; stop on every node; the node that never joins named)."""

from __future__ import annotations

import json
import shutil
import tempfile
from dataclasses import replace
from pathlib import Path

import pytest

from gpuops.core.config import parse_inventory
from gpuops.core.domain import Invalid, Plan
from gpuops.core.planning import PlanError
from gpuops.core.planning.plan import GpuInfo, Node, Target, Wishes, build_multinode_plan, build_plan
from gpuops.sim.host import setup_simhost
from tests.sshd import free_port
from tests.conftest import operator_env, operator_hub, restart_deployment, two_sim_hosts
from tests.test_cli import gpuops
from tests.test_plan import GIB, H200, QWEN122, facts


def target(host: str, n: int = 4, mem: float = H200, **kw) -> Target:
    base = dict(host=host, gpus=tuple(GpuInfo(i, int(mem * GIB)) for i in range(n)), engine_version="0.5.23",
                python="/opt/sgl/bin/python", launcher="process")
    base.update(kw)
    return Target(**base)  # type: ignore[arg-type]


def two(**kw) -> list[Node]:
    return [Node(target("gpu1", **kw), "10.0.0.1", "ib0"), Node(target("gpu2", **kw), "10.0.0.2")]


def test_tp8_over_two_4_gpu_nodes():
    plan = build_multinode_plan(facts(*QWEN122), two(), Wishes(tp=8))
    argv = " ".join(plan.argv)
    assert plan.tp == 8 and "--tp-size 8" in argv
    assert "--nnodes 2 --node-rank 0 --dist-init-addr 10.0.0.1:5000" in argv and plan.dist_init_addr == "10.0.0.1:5000"
    assert [(m.host, m.node_rank, m.gpu_ids) for m in plan.members] == [("gpu1", 0, (0, 1, 2, 3)),
                                                                          ("gpu2", 1, (0, 1, 2, 3))]
    assert plan.fit.fits and "4 GPUs on each of 2 nodes" in plan.fit.verdict
    ids = [r.id for r in plan.rules]
    assert "multi-node" in ids and "nccl-interface" in ids and "mtp" in ids
    # each node's own launch: its host, GPUs and node rank; node 0's NCCL interface stays node 0's
    assert plan.env["NCCL_SOCKET_IFNAME"] == "ib0" and plan.env["CUDA_VISIBLE_DEVICES"] == "0,1,2,3"
    node1 = plan.member_plan(1)
    assert (node1.name, node1.host, node1.gpu_ids) == (f"{plan.name}-n1", "gpu2", (0, 1, 2, 3))
    assert node1.argv[node1.argv.index("--node-rank") + 1] == "1"
    assert "NCCL_SOCKET_IFNAME" not in node1.env and node1.env["CUDA_VISIBLE_DEVICES"] == "0,1,2,3"
    assert node1.unit_name != plan.unit_name and not node1.members
    assert plan.member_plan(0).argv == plan.argv and plan.member_plan(0).name == plan.name
    # the plan JSON carries the nodes and reads back the same
    assert Plan.from_json(json.loads(json.dumps(plan.to_json()))) == plan


def test_without_tp_every_gpu_of_the_smallest_node():
    nodes = [Node(target("gpu1", n=8), "10.0.0.1"), Node(target("gpu2", n=4), "10.0.0.2")]
    plan = build_multinode_plan(facts(*QWEN122), nodes, Wishes())
    assert plan.tp == 8 and [len(m.gpu_ids) for m in plan.members] == [4, 4]


def test_busy_gpus_are_avoided_on_each_node():
    busy = target("gpu2", n=8, gpus=tuple(GpuInfo(i, int(H200 * GIB), processes=int(i < 4)) for i in range(8)))
    nodes = [Node(target("gpu1", n=8), "10.0.0.1"), Node(busy, "10.0.0.2")]
    plan = build_multinode_plan(facts(*QWEN122), nodes, Wishes(tp=8))
    assert plan.members[1].gpu_ids == (4, 5, 6, 7) and plan.members[0].gpu_ids == (0, 1, 2, 3)


@pytest.mark.parametrize("nodes, wishes, says", [
    (lambda: [*two(), Node(target("gpu3"), "10.0.0.3")], Wishes(tp=8), "does not split evenly over 3 nodes"),
    (lambda: two(), Wishes(tp=16), r"needs 8 GPUs on each: gpu1 has 4, gpu2 has 4"),
    (lambda: two()[:1], Wishes(tp=4), "two or more hosts"),
    (lambda: [two()[0], two()[0]], Wishes(tp=8), "distinct inventory host"),
    (lambda: two(), Wishes(tp=8, gpu_ids=(0, 1, 2, 3)), "GPU ids name one host's GPUs"),
])
def test_what_cannot_be_split_is_refused_in_one_line(nodes, wishes, says):
    with pytest.raises(PlanError, match=says):
        build_multinode_plan(facts(*QWEN122), nodes(), wishes)


def test_what_the_nodes_disagree_on_is_said():
    nodes = [Node(target("gpu1"), "127.0.0.1"), Node(target("gpu2", engine_version="0.5.10"), "10.0.0.2")]
    plan = build_multinode_plan(facts(*QWEN122), nodes, Wishes(tp=8, engine_version="0.5.23"))
    text = " ".join(plan.warnings)
    assert "different SGLang versions (gpu1 0.5.23, gpu2 0.5.10)" in text
    assert "loopback address the other nodes cannot reach: set node_addr in [hosts.gpu1]" in text
    forbidden = [Node(target("gpu1", model_dirs=("/m",)), "10.0.0.1"),
                 Node(target("gpu2", forbidden_paths=("/m",)), "10.0.0.2")]
    with pytest.raises(PlanError, match="under /m on gpu2"):
        build_multinode_plan(facts(*QWEN122), forbidden, Wishes(tp=8))


def test_the_rendezvous_port_moves_off_a_taken_one():
    nodes = two()
    nodes[0] = replace(nodes[0], target=replace(nodes[0].target, ports_taken={5000: "pid 1 (x)", 5001: ""}))
    plan = build_multinode_plan(facts(*QWEN122), nodes, Wishes(tp=8))
    assert plan.dist_init_addr == "10.0.0.1:5002"


@pytest.mark.parametrize("tamper, says", [
    (lambda d: d["members"].reverse(), "node ranks must be 0..1 in order"),
    (lambda d: d.update(dist_init_addr="10.9.9.9:1"), "dist_init_addr"),
    (lambda d: d["members"][1].update(host=d["members"][0]["host"]), "each node on its own host"),
    (lambda d: d["members"][1].update(gpu_ids=[0, 1]), r"GPUs on each"),
    (lambda d: d["members"][1]["env"].update({"1BAD": "x"}), "not an environment variable name"),
    (lambda d: d["members"][1].update(host="a b"), "members"),
])
def test_a_tampered_multi_node_plan_is_refused(tamper, says):
    doc = build_multinode_plan(facts(*QWEN122), two(), Wishes(tp=8)).to_json()
    tamper(doc)
    with pytest.raises(Invalid, match=says):
        Plan.from_json(json.loads(json.dumps(doc)))


def test_the_inventory_names_node_addresses_and_interfaces():
    inv = parse_inventory('[hosts.a]\nssh = "root@10.0.0.5:2222"\nnccl_interface = "ib0"\n'
                          '[hosts.b]\nssh = "alias-b"\nnode_addr = "10.0.0.6"\n[hosts.c]\nlocal = true\n', source="t.toml")
    assert (inv.host("a").reachable_addr, inv.host("a").nccl_interface) == ("10.0.0.5", "ib0")
    assert inv.host("b").reachable_addr == "10.0.0.6" and inv.host("c").reachable_addr == "127.0.0.1"
    for bad, says in (('node_addr = "a b"', "hosts.c.node_addr: expected an IP address or a host name"),
                      ('nccl_interface = "eth0; rm"', "hosts.c.nccl_interface: expected a network interface name")):
        with pytest.raises(Exception, match=says):
            parse_inventory(f"[hosts.c]\nlocal = true\n{bad}\n", source="t.toml")


@pytest.fixture
def two_sims():
    root = Path(tempfile.mkdtemp(prefix="gpuops-mn-"))
    root.chmod(0o755)
    sims = [setup_simhost(root / name, gpus=4, engine_version="0.5.23") for name in ("a", "b")]
    yield root, sims
    for sim in sims:
        sim.shutdown()
    shutil.rmtree(root, ignore_errors=True)


@pytest.fixture
def op_env(tmp_path) -> dict:
    """A clean operator environment: no config, empty state, a HOME of its own."""
    import os

    home = tmp_path / "home"
    home.mkdir(exist_ok=True)
    e = dict(os.environ, XDG_CONFIG_HOME=str(tmp_path / "cfg"), XDG_STATE_HOME=str(tmp_path / "state"), HOME=str(home))
    e.pop("GPUOPS_CONFIG", None)
    e.pop("SSH_AUTH_SOCK", None)
    return e


def test_plan_hosts_on_the_command_line(two_sims, op_env, tmp_path):
    env = op_env
    root, sims = two_sims
    hub = operator_hub(tmp_path / "hub")  # the model's config.json in the operator's HF cache (no Hub here)
    env = dict(env, HF_HUB_CACHE=str(hub), HF_HUB_OFFLINE="1")
    cfg = tmp_path / "c.toml"
    cfg.write_text(sims[0].host_block("gpu1") + 'node_addr = "127.0.0.1"\nnccl_interface = "lo"\n'
                   + sims[1].host_block("gpu2") + 'node_addr = "127.0.0.1"\n')
    out = gpuops("--config", str(cfg), "plan", "Qwen/Qwen3-8B", "--hosts", "gpu1,gpu2", "--tp", "8", "--json",
                 env=env, timeout=120)
    assert out.returncode == 0, out.stderr
    doc = json.loads(out.stdout)
    assert [m["host"] for m in doc["members"]] == ["gpu1", "gpu2"]
    # 5000, or (another test process's rendezvous holding it) the next free one: the unit test above
    # holds which one
    assert doc["dist_init_addr"].startswith("127.0.0.1:50") and int(doc["dist_init_addr"][10:]) >= 5000
    assert doc["members"][0]["env"]["NCCL_SOCKET_IFNAME"] == "lo"
    assert "--nnodes" in doc["argv"] and doc["members"][1]["python"] == str(sims[1].python)
    human = gpuops("--config", str(cfg), "plan", "Qwen/Qwen3-8B", "--hosts", "gpu1,gpu2", "--tp", "8",
                   env=dict(env, COLUMNS="200"), timeout=120)
    assert human.returncode == 0 and "2 nodes: one server each" in human.stdout and "node 1: gpu2" in human.stdout
    for args, says in ((("--hosts", "gpu1"), "two or more hosts"), (("--hosts", "gpu1,nope"), "unknown host 'nope'"),
                       (("--hosts", "gpu1,gpu2", "--host", "gpu1"), "not both"),
                       (("--hosts", "gpu1,gpu2", "--tp", "3"), "does not split evenly")):
        bad = gpuops("--config", str(cfg), "plan", "Qwen/Qwen3-8B", *args, env=env, timeout=120)
        assert bad.returncode == 2 and says in bad.stderr and len(bad.stderr.strip().splitlines()) == 1, bad.stderr
    # deployed from its node 0 only: another host is refused in one line, nothing recorded
    (tmp_path / "mn.json").write_text(out.stdout)
    dep = gpuops("--config", str(cfg), "deploy", str(tmp_path / "mn.json"), "--host", "gpu2", "--yes", env=env)
    assert dep.returncode == 2 and "2-node plan whose node 0 is gpu1, not gpu2" in dep.stderr, dep.stderr
    assert gpuops("--config", str(cfg), "status", "--json", env=env).stdout.count(doc["name"]) == 0


# ------------------------------------------------------------------ deploying over real SSH


@pytest.fixture
def mn(ssh_home, tmp_path):
    """Two simulated 4-GPU hosts reached over the real sshd on 127.0.0.1 (two "nodes" of one machine),
    the operator's HF cache with Qwen3-8B's config, and a short dist_init stall threshold."""

    from tests.conftest import PACE

    root = Path(tempfile.mkdtemp(prefix="gpuops-mnd-"))
    root.chmod(0o755)
    hub = operator_hub(tmp_path / "hub")
    env = operator_env(ssh_home, tmp_path, hub)
    sims = [setup_simhost(root / n, gpus=4, engine_version="0.5.23", pace=PACE) for n in ("a", "b")]
    cfg = tmp_path / "gpuops.toml"
    cfg.write_text(sims[0].host_block("gpu1", ssh="simbox") + f'model_dirs = ["{root / "models"}"]\n'
                   'node_addr = "127.0.0.1"\n' + sims[1].host_block("gpu2", ssh="simbox")
                   + f'model_dirs = ["{root / "models"}"]\nnode_addr = "127.0.0.1"\n' + "[stall]\ndist_init = 4\n")
    yield cfg, env, sims
    for name in ("duo", "halt", "wide"):
        gpuops("--config", str(cfg), "stop", name, "--yes", env=env, timeout=120)
    for sim in sims:
        sim.shutdown()
    from tests.conftest import kill_marked

    kill_marked(str(root))
    shutil.rmtree(root, ignore_errors=True)


def _plan(cfg, env, tmp_path, name: str, **member1_env: str) -> Path:
    # on a free port of its own: 30000 (or the next free one) is raced for by other test processes
    # between this plan and the deploy's bind
    out = gpuops("--config", str(cfg), "plan", "Qwen/Qwen3-8B", "--hosts", "gpu1,gpu2", "--tp", "8", "--name", name,
                 "--port", str(free_port()), "--json", env=env, timeout=120)
    assert out.returncode == 0, out.stderr
    doc = json.loads(out.stdout)
    doc["members"][1]["env"].update(member1_env)
    path = tmp_path / f"{name}.json"
    path.write_text(json.dumps(doc))
    return path


def _status(cfg, env, name: str) -> dict | None:
    out = gpuops("--config", str(cfg), "status", name, "--json", env=env)
    return json.loads(out.stdout)["deployment"] if out.returncode == 0 else None


async def _the_screen_merges_both_nodes_logs(cfg, env, monkeypatch) -> None:
    """The deployment screen of node 0: both nodes' log lines, node 1's labelled with its node, and
    each node's state beside them."""
    from gpuops.core.config import load_inventory
    from gpuops.screens.deployment import DeploymentScreen
    from gpuops.tui.app import GpuopsApp
    from gpuops.tui.logview import LogView
    from tests.tui_helpers import until

    for key in ("HOME", "XDG_STATE_HOME", "XDG_CONFIG_HOME", "XDG_CACHE_HOME"):
        monkeypatch.setenv(key, env[key])
    app = GpuopsApp(load_inventory(str(cfg)), interval=0.5)
    async with app.run_test(size=(170, 50)) as pilot:
        await pilot.press("colon", *"dep duo", "enter")
        assert await until(pilot, lambda: isinstance(app.screen, DeploymentScreen))
        log = app.screen.query_one(LogView)

        def merged() -> bool:
            lines = log.plain_lines()
            return any(ln.startswith("[node 1] ") and "Dummy health check server" in ln for ln in lines) and \
                any("fired up and ready" in ln and not ln.startswith("[node") for ln in lines)
        assert await until(pilot, merged, timeout=60), log.plain_lines()[-20:]
        side = app.screen.query_one("#dep-gpus").text.plain
        assert "Nodes (2" in side and "duo-n1" in side, side


async def test_a_two_node_deploy_starts_node_0_then_node_1_and_reaches_ready(mn, tmp_path, monkeypatch):
    cfg, env, sims = mn
    plan = _plan(cfg, env, tmp_path, "duo")
    out = gpuops("--config", str(cfg), "deploy", str(plan), "--host", "gpu1", "--yes", env=env, timeout=300)
    assert out.returncode == 0, out.stderr + out.stdout[-3000:]
    assert "[node 0]" in out.stdout and "[node 1]" in out.stdout  # node 1's events beside node 0's, each labelled
    node0, node1 = _status(cfg, env, "duo"), _status(cfg, env, "duo-n1")
    assert node0["state"] == "ready" and node0["host"] == "gpu1"
    assert node1["state"] == "ready" and node1["host"] == "gpu2"  # its health-check server: as ready as a node gets
    import httpx

    port = json.loads(plan.read_text())["port"]
    assert httpx.get(f"http://127.0.0.1:{port}/v1/models", timeout=10).status_code == 200  # node 0 serves
    # status of the deployment lists its other node; stop asks naming it, then acts on every node
    shown = gpuops("--config", str(cfg), "status", "duo", env=env, timeout=120)
    assert shown.stdout.splitlines()[1].startswith("  node 1: duo-n1 ready on gpu2 (run 1, since "), shown.stdout
    asked = gpuops("--config", str(cfg), "stop", "duo", env=env, timeout=120)
    assert asked.returncode != 0 and "on gpu1 and its node duo-n1 on gpu2 needs confirmation" in asked.stderr, asked.stderr
    assert _status(cfg, env, "duo-n1")["state"] == "ready"  # nothing changed
    stop = gpuops("--config", str(cfg), "stop", "duo", "--yes", env=env, timeout=180)
    assert stop.returncode == 0 and "; duo-n1: " in stop.stdout, stop.stderr
    assert _status(cfg, env, "duo")["state"] == "stopped" and _status(cfg, env, "duo-n1")["state"] == "stopped"
    # restart starts every node again (a new run of each); forget takes the nodes with it
    again = restart_deployment(cfg, env, "duo", timeout=300)
    assert again.returncode == 0 and again.stdout.strip() == "ready", again.stderr[-3000:]
    node0, node1 = _status(cfg, env, "duo"), _status(cfg, env, "duo-n1")
    assert (node0["state"], node0["run"], node1["state"], node1["run"]) == ("ready", 2, "ready", 2)
    await _the_screen_merges_both_nodes_logs(cfg, env, monkeypatch)
    assert gpuops("--config", str(cfg), "stop", "duo", "--yes", env=env, timeout=180).returncode == 0
    gone = gpuops("--config", str(cfg), "forget", "duo", "--yes", env=env, timeout=120)
    assert gone.returncode == 0, gone.stderr
    assert _status(cfg, env, "duo") is None and _status(cfg, env, "duo-n1") is None


async def test_plan_review_plans_over_two_nodes_and_deploys_both(mn, monkeypatch):
    """The TUI's way to a multi-node deployment: on plan review `e` then `nodes gpu2` reads gpu2 as
    the picker read gpu1 and plans one SGLang over both (TP over both nodes' GPUs, the node list,
    TP steps of the node count); an unknown host is one line with the plan as it was; `d` lists the
    nodes and asks; yes starts node 0 then node 1, and both are ready."""
    from gpuops.core.config import load_inventory
    from gpuops.core.planning.hostfacts import read_target
    from gpuops.core.planning.model_facts import load_model_facts
    from gpuops.screens.confirm import ConfirmScreen
    from gpuops.screens.deployment import DeploymentScreen
    from gpuops.screens.plan_review import PlanReviewScreen
    from gpuops.tui.app import GpuopsApp
    from tests.tui_helpers import until

    cfg, env, sims = mn
    for key in ("HOME", "XDG_STATE_HOME", "XDG_CONFIG_HOME", "XDG_CACHE_HOME", "HF_HUB_CACHE", "HF_HUB_OFFLINE"):
        monkeypatch.setenv(key, env[key])
    app = GpuopsApp(load_inventory(str(cfg)), interval=0.5)
    async with app.run_test(size=(170, 50)) as pilot:
        facts = load_model_facts("Qwen/Qwen3-8B")
        screen = PlanReviewScreen(facts, await read_target(app.monitor.hosts["gpu1"]), Wishes(name="wide"))
        await app.push_screen(screen)
        assert await until(pilot, lambda: screen.plan is not None), screen.error
        said = lambda: [str(n.message) for n in app._notifications]  # noqa: E731

        async def edit(line: str) -> None:
            await pilot.press("e")
            await pilot.press(*line)
            await pilot.press("enter")

        await edit("nodes gpu2")
        assert await until(pilot, lambda: screen.plan is not None and screen.plan.nnodes == 2, timeout=60), said()
        plan = screen.plan
        assert (plan.tp, [m.host for m in plan.members]) == (8, ["gpu1", "gpu2"])
        assert "--nnodes" in plan.argv and plan.dist_init_addr and plan.dist_init_addr.startswith("127.0.0.1:")
        assert "2 nodes: one server each" in str(screen.query_one("#plan-parts-title").render())
        parts = screen.query_one("#plan-parts").text.plain
        assert "node 0: gpu1, GPUs 0,1,2,3" in parts and "node 1: gpu2, GPUs 0,1,2,3" in parts, parts
        assert "gpu1 GPUs 0,1,2,3 + gpu2 GPUs 0,1,2,3" in verdict_of(screen)
        await edit("nodes gpu1,nope")  # gpu1 is node 0 already; nothing changes
        assert await until(pilot, lambda: any("node 0 already" in m for m in said()))
        await edit("nodes nope")
        assert await until(pilot, lambda: any("unknown host 'nope'" in m for m in said()))
        assert screen.plan.nnodes == 2 and screen.plan.tp == 8
        await pilot.press("minus")  # TP6 does not divide 32 heads: TP4 over 2 nodes, 2 GPUs each
        assert await until(pilot, lambda: screen.plan.tp == 4 and [len(m.gpu_ids) for m in screen.plan.members] == [2, 2])
        await pilot.press("plus")
        assert await until(pilot, lambda: screen.plan.tp == 8)
        await pilot.press("d")
        assert await until(pilot, lambda: isinstance(app.screen, ConfirmScreen))
        assert "TP 8 over 2 nodes" in app.screen.detail and "node 1: gpu2 GPUs 0,1,2,3" in app.screen.detail, \
            app.screen.detail
        await pilot.press("y")
        assert await until(pilot, lambda: isinstance(app.screen, DeploymentScreen), timeout=60), said()

        def both_ready() -> bool:
            try:
                return app.ops.deployment("wide").state == "ready" and app.ops.deployment("wide-n1").state == "ready"
            except Exception:
                return False
        assert await until(pilot, both_ready, timeout=240), said()
        assert app.ops.deployment("wide-n1").host == "gpu2"


def verdict_of(screen) -> str:
    return screen.query_one("#plan-verdict").text.plain


def test_the_node_that_never_joins_is_named(mn, tmp_path):
    """Node 1 starts but hangs before it reaches the rendezvous: node 0 sits in dist_init, the stall
    is flagged, and the finding names node 1, its host and its deployment."""
    cfg, env, sims = mn
    plan = _plan(cfg, env, tmp_path, "halt", GPUOPS_SIM_SCENARIO="node-hangs-before-join")
    out = gpuops("--config", str(cfg), "deploy", str(plan), "--host", "gpu1", "--yes", "--json", env=env, timeout=300)
    assert out.returncode == 1, out.stderr + out.stdout[-3000:]
    events = [json.loads(ln) for ln in out.stdout.splitlines() if ln.startswith("{")]
    mine = [e for e in events if e.get("deployment") == "halt"]
    said = [(e["state"], e.get("reason")) for e in mine if e["event"] == "state"]
    assert said[-1][0] == "stalled", (said, [e for e in mine if e["event"] == "finding"])
    named = [e for e in mine if e["event"] == "finding" and e["data"].get("member") == "halt-n1"]
    assert named, [e for e in mine if e["event"] == "finding"]
    f = named[0]
    assert f["code"] == "nccl-init-stall" and f["severity"] == "error"
    assert f["summary"].startswith("node 1 (gpu2, deployment halt-n1) never reached the rendezvous at 127.0.0.1:")
    assert _status(cfg, env, "halt-n1")["state"] in ("starting", "stalled")
    # triage runs the host checks on both nodes and compares them: node 0 waits at its rendezvous,
    # which node 1 (its host, for real) reaches; the two simulated hosts have the same driver
    tri = gpuops("--config", str(cfg), "triage", "halt", "--json", env=env, timeout=300)
    assert tri.returncode == 0, tri.stderr
    checks = {c["name"]: c for c in json.loads(tri.stdout)["checks"]}
    assert checks["nodes-rendezvous"]["ok"] is True, checks["nodes-rendezvous"]
    assert checks["nodes-driver"]["ok"] is True and "580.159.04" in checks["nodes-driver"]["detail"]
    assert checks["shm-too-small@gpu2"]["detail"].startswith("node 1 (gpu2): ")


@pytest.fixture
def mn_bench(ssh_home, tmp_path, sglang_venv):
    """As `mn`, node 0's host with the real SGLang venv (bench_serving for a swap's benchmarks) and a
    small smoke profile."""

    from tests.conftest import kill_marked
    from tests.test_bench_cli import PROFILES

    root = Path(tempfile.mkdtemp(prefix="gpuops-mns-"))
    root.chmod(0o755)
    hub = operator_hub(tmp_path / "hub")
    env = operator_env(ssh_home, tmp_path, hub)
    sims = two_sim_hosts(root, sglang_venv)
    cfg = tmp_path / "gpuops.toml"
    cfg.write_text(sims[0].host_block("gpu1", ssh="simbox") + f'model_dirs = ["{root / "models"}"]\nnode_addr = "127.0.0.1"\n'
                   + sims[1].host_block("gpu2", ssh="simbox") + f'model_dirs = ["{root / "models"}"]\n'
                   'node_addr = "127.0.0.1"\n' + PROFILES)
    yield cfg, env
    for name in ("duo", "duo2"):
        gpuops("--config", str(cfg), "stop", name, "--yes", env=env, timeout=120)
    for sim in sims:
        sim.shutdown()
    kill_marked(str(root))
    shutil.rmtree(root, ignore_errors=True)


@pytest.mark.timeout(600)  # two 2-node deploys and two real benchmarks
def test_swap_of_a_two_node_deployment_stays_on_its_nodes(mn_bench, tmp_path):
    """`gpuops swap OLD MODEL` of a 2-node deployment: the new one is planned over the same nodes at
    the same TP (like the old one: its port), the old one benchmarked and stopped on every node,
    the new one deployed on both nodes, benchmarked, compared and kept."""
    cfg, env = mn_bench
    plan = _plan(cfg, env, tmp_path, "duo")
    out = gpuops("--config", str(cfg), "deploy", str(plan), "--host", "gpu1", "--yes", env=env, timeout=300)
    assert out.returncode == 0, out.stderr + out.stdout[-3000:]
    old_port = json.loads(plan.read_text())["port"]
    out = gpuops("--config", str(cfg), "swap", "duo", "Qwen/Qwen3-8B", "--name", "duo2", "--yes", "--json", env=env,
                 timeout=540)
    events = [json.loads(ln) for ln in out.stdout.splitlines() if ln.startswith("{")]
    assert out.returncode == 0, out.stderr + json.dumps(events[-5:])
    steps = [e["step"] for e in events if e["event"] == "swap"]
    assert steps == ["plan", "fetch-new", "fetch-new", "bench-old", "bench-old", "stop-old", "deploy-new", "new-ready",
                     "bench-new", "compare", "kept"], steps
    assert not any("--nnodes" in d or "--dist-init-addr" in d for d in events[0]["diff"]), events[0]["diff"]
    new0, new1 = _status(cfg, env, "duo2"), _status(cfg, env, "duo2-n1")
    assert (new0["state"], new0["host"], new1["state"], new1["host"]) == ("ready", "gpu1", "ready", "gpu2")
    assert new0["port"] == old_port  # in the old one's place: its clients keep working
    assert [(_status(cfg, env, n) or {}).get("state") for n in ("duo", "duo-n1")] == ["stopped", "stopped"]


def test_like_a_multi_node_deployment_never_carries_its_node_flags():
    """The node flags are a multi-node plan's own: planned again over nodes they are set anew (once,
    not beside the old ones); a one-host plan like it drops them, each with its reason."""
    from gpuops.core.planning.like import previous_from_plan

    old = build_multinode_plan(facts(*QWEN122), two(), Wishes(tp=8, name="duo"))
    prev = previous_from_plan(old, "deployment duo")
    again = build_multinode_plan(facts(*QWEN122), two(), Wishes(tp=8, name="duo2", like=prev))
    assert [again.argv.count(f) for f in ("--nnodes", "--node-rank", "--dist-init-addr")] == [1, 1, 1]
    assert again.like is not None and again.like.diff == ()
    one = build_plan(facts(*QWEN122), target("gpu1", n=8), Wishes(tp=8, name="one", like=prev))
    assert "--nnodes" not in one.argv and "--dist-init-addr" not in one.argv
    gone = [c.text for c in one.like.diff if c.op == "-"]
    assert any(t.startswith("--dist-init-addr 10.0.0.1:5000  (a multi-node deployment's own") for t in gone), gone


async def test_the_swap_review_of_a_two_node_deployment_plans_over_its_nodes(mn, tmp_path, monkeypatch):
    """:swap NAME of a 2-node deployment: the review reads the other node and plans the new one over
    both at the old TP (its port kept); `d` waits for that and then asks, naming both nodes."""
    from textual.widgets import Input, Static

    from gpuops.core.config import load_inventory
    from gpuops.screens.confirm import ConfirmScreen
    from gpuops.screens.model_picker import ModelPickerScreen
    from gpuops.screens.plan_review import SwapReviewScreen
    from gpuops.tui.app import GpuopsApp
    from tests.tui_helpers import until

    cfg, env, sims = mn
    plan = _plan(cfg, env, tmp_path, "duo")
    out = gpuops("--config", str(cfg), "deploy", str(plan), "--host", "gpu1", "--yes", env=env, timeout=300)
    assert out.returncode == 0, out.stderr + out.stdout[-3000:]
    for key in ("HOME", "XDG_STATE_HOME", "XDG_CONFIG_HOME", "XDG_CACHE_HOME", "HF_HUB_CACHE", "HF_HUB_OFFLINE"):
        monkeypatch.setenv(key, env[key])
    app = GpuopsApp(load_inventory(str(cfg)), interval=0.5)
    async with app.run_test(size=(170, 50)) as pilot:
        await pilot.press("colon", *"swap duo", "enter")
        assert await until(pilot, lambda: isinstance(app.screen, ModelPickerScreen))
        picker = app.screen
        title = picker.query_one("#picker-title", Static)
        assert await until(pilot, lambda: "scanning" not in str(title.render()), timeout=60)
        await pilot.press(*"Qwen/Qwen3-8B")  # the id box has the keys from the start
        assert picker.query_one("#model-input", Input).value == "Qwen/Qwen3-8B"
        await pilot.press("enter")
        assert await until(pilot, lambda: isinstance(app.screen, SwapReviewScreen), timeout=240)
        review = app.screen
        assert await until(pilot, lambda: review.plan is not None and review.plan.nnodes == 2, timeout=120)
        assert [m.host for m in review.plan.members] == ["gpu1", "gpu2"] and review.plan.tp == 8
        assert review.plan.port == json.loads(plan.read_text())["port"]
        assert review.plan.argv.count("--nnodes") == 1
        await pilot.press("e", *"name duo2", "enter")
        assert await until(pilot, lambda: review.plan.name == "duo2")
        await pilot.press("d")
        assert await until(pilot, lambda: isinstance(app.screen, ConfirmScreen))
        assert app.screen.question.startswith("Swap duo (Qwen/Qwen3-8B) for duo2")
        assert "node 1: gpu2" in app.screen.detail, app.screen.detail
        await pilot.press("n")
