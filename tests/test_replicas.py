"""Replicas behind the engine's router (`gpuops plan MODEL --host H --replicas K`, then `deploy`): K one-host
plans on GPUs and ports of their own, the router's plan holding them (its --worker-urls, health
settings, metrics port), validated when read back; and over real SSH to a simulated host with the
real routers from PyPI (smg chosen where the host has both): the replicas then the router deployed and ready, requests routed,
a replica killed and seen lost by the router and by gpuops, SGLang's real benchmark through the
router, stop and forget on every part."""

from __future__ import annotations

import json
import os
import shutil
import signal
import subprocess
import sys
import tempfile
from dataclasses import replace
from pathlib import Path

import httpx
import msgspec
import pytest

from gpuops.core.deploy.router import parse_view, replica_findings
from gpuops.core.domain import Invalid, Plan
from gpuops.core.planning import PlanError
from gpuops.core.planning.plan import Node, Wishes, build_replicated_plan
from gpuops.sim.host import setup_simhost
from tests.conftest import PACE, kill_marked, operator_env, operator_hub, restart_deployment, two_sim_hosts
from tests.test_cli import gpuops
from tests.sshd import free_port, ssh_user_home
from tests.test_multinode_plan import target
from tests.test_plan import facts


def _replicated(k: int = 2, **wishes) -> Plan:
    return build_replicated_plan(facts("qwen3__Qwen3-8B", "Qwen/Qwen3-8B"), [Node(target("gpu1"), "10.0.0.1")], Wishes(**wishes), k)


def test_the_replicas_ports_sit_above_the_routers_port_when_one_is_asked():
    """Without --port the router takes 30000 and its replicas the next ones; with --port P, the
    replicas take P+1, P+2 (they took 30000 and up whatever P was, far from the port asked)."""
    plan = _replicated(2, name="duo")
    assert [plan.port, *(r.port for r in plan.replicas)] == [30000, 30001, 30002]
    plan = _replicated(2, name="duo", port=41000)
    assert [plan.port, *(r.port for r in plan.replicas)] == [41000, 41001, 41002]
    assert not any("is in use" in w for w in plan.warnings)


def test_the_router_and_its_replicas_start_at_the_hosts_first_port():
    plan = build_replicated_plan(facts("qwen3__Qwen3-8B", "Qwen/Qwen3-8B"),
                                 [Node(replace(target("gpu1"), first_port=32100), "10.0.0.1")], Wishes(name="duo"), 2)
    assert [plan.port, *(r.port for r in plan.replicas)] == [32100, 32101, 32102]


def test_two_replicas_on_one_host_get_gpus_and_ports_of_their_own_behind_the_router():
    plan = _replicated(2, name="duo")
    assert [r.name for r in plan.replicas] == ["duo-r1", "duo-r2"]
    assert all(r.replica_of == "duo" and r.host == "gpu1" for r in plan.replicas)
    gpus = [r.gpu_ids for r in plan.replicas]
    assert len(set(g for ids in gpus for g in ids)) == sum(len(ids) for ids in gpus)  # no GPU twice
    assert [r.env["CUDA_VISIBLE_DEVICES"] for r in plan.replicas] == [",".join(map(str, ids)) for ids in gpus]
    ports = [plan.port] + [r.port for r in plan.replicas]
    assert len(set(ports)) == 3
    assert plan.worker_urls == [f"http://127.0.0.1:{r.port}" for r in plan.replicas]
    argv = plan.exec_argv()
    # the router chosen at deploy: smg where the host has it (the preferred), else sglang-router
    assert plan.router is None and argv[1:3] == ["-m", "smg.launch_router"]
    assert plan.replace(router="sglang-router").exec_argv()[1:3] == ["-m", "sglang_router.launch_router"]
    assert argv[argv.index("--port") + 1] == str(plan.port)
    # its metrics on its own address, not the routers' default of every address with no key
    assert argv[argv.index("--prometheus-host") + 1] == argv[argv.index("--host") + 1] == "127.0.0.1"
    assert argv[argv.index("--health-check-interval-secs") + 1] == "5"  # not the router's 60 s
    assert int(argv[argv.index("--prometheus-port") + 1]) not in ports
    # above this plan's own ports, from the host's first port on: not the router's default 29000, which
    # every router of the host (and two test runs on one machine) would take
    assert int(argv[argv.index("--prometheus-port") + 1]) == max(ports) + 1
    assert plan.gpu_ids == () and plan.served_name == plan.replicas[0].served_name == "Qwen/Qwen3-8B"
    for r in plan.replicas:  # each replica is a whole SGLang launch of its own
        assert r.exec_argv()[1:3] == ["-m", "sglang.launch_server"]
        assert r.exec_argv()[r.exec_argv().index("--port") + 1] == str(r.port)
    assert {rule.id for rule in plan.rules} >= {"replicas", "router", "router-health"}
    assert plan.part_names == ["duo-r1", "duo-r2"]


def test_the_routers_policy_is_the_operators_where_a_router_has_it_and_names_the_router_that_does():
    """--router-policy: one both routers accept (round_robin) is passed as --policy and leaves the
    router to the host; one only smg has (least_load, read from its wheel) makes the plan smg's; one
    neither has is refused in one line with what each accepts."""
    both = _replicated(2, name="duo", router_policy="round_robin")
    argv = both.exec_argv()
    assert argv[argv.index("--policy") + 1] == "round_robin" and both.router is None
    rule = next(r for r in both.rules if r.id == "router-policy")
    assert rule.why == "the router spreads the requests by round_robin, not its default cache_aware"
    smg_only = _replicated(2, name="duo", router_policy="least_load")
    assert smg_only.router == "smg" and smg_only.exec_argv()[1:3] == ["-m", "smg.launch_router"]
    assert "(only smg has it: the plan runs smg)" in next(r.why for r in smg_only.rules if r.id == "router-policy")
    assert "--policy" not in _replicated(2, name="duo").exec_argv()  # the router's own default
    with pytest.raises(PlanError) as refused:
        _replicated(2, name="duo", router_policy="fastest")
    assert str(refused.value) == (
        "--router-policy fastest: no router of SGLang has it (smg: cache_aware, random, round_robin, passthrough, "
        "power_of_two, least_load, manual, consistent_hashing, prefix_hash; sglang-router: cache_aware, random, "
        "round_robin, power_of_two, manual)")
    # a plan with no router has no policy to set
    from gpuops.core.planning.request import build

    with pytest.raises(PlanError) as alone:
        build(facts("qwen3__Qwen3-8B", "Qwen/Qwen3-8B"), target("gpu1"), Wishes(router_policy="round_robin"))
    assert str(alone.value) == "a routing policy is the router's: plan replicas behind one first (--replicas K)"
    # plan review's word for it, read before it reaches a plan
    from gpuops.core.planning.edits import EditError, parse

    assert parse("policy least_load") == ("wish", {"router_policy": "least_load"})
    assert parse("policy -") == ("wish", {"router_policy": None})
    with pytest.raises(EditError):
        parse("policy 'rr; rm -rf /'")


def test_the_replicas_take_tp_gpus_each_and_too_many_are_refused_in_one_line():
    plan = _replicated(2, tp=2)
    assert [r.gpu_ids for r in plan.replicas] == [(0, 1), (2, 3)]
    with pytest.raises(PlanError, match="no GPU left for replica 3"):
        _replicated(3, tp=2)
    with pytest.raises(PlanError, match="two or more"):
        _replicated(1)
    with pytest.raises(PlanError, match="--gpu-ids"):
        _replicated(2, gpu_ids=(0, 1))


def test_a_replicated_plan_is_shown_as_the_router_it_launches_over_the_replicas_gpus(capsys):
    """`gpuops plan --replicas` and the plan review show the router's own command line (not SGLang's
    server with the router's flags), and where the replicas run (not an empty GPU list)."""
    from gpuops.cli.plan import print_plan
    from gpuops.tui.plan_view import fit_bars, launch_text, launch_title, where_text

    plan = _replicated(2, tp=2, name="duo")
    assert launch_text(plan).plain.startswith(f"{plan.python} -m smg.launch_router \\\n  --worker-urls")
    assert all(f"\\\n{r.python} -m sglang.launch_server \\" in launch_text(r).plain for r in plan.replicas)  # after its env
    assert launch_title(plan) == "router (smg or sglang-router)" and launch_title(plan.replicas[0]).startswith("launch (SGLang")
    assert launch_title(plan.replace(router="sglang-router")) == "router (sglang-router)"  # the one deploy chose
    assert where_text(plan) == "2 replicas: gpu1 GPUs 0,1, gpu1 GPUs 2,3"
    assert where_text(plan.replicas[1]) == "GPUs 2,3"
    from rich.console import Console

    console = Console(width=100, record=True)
    console.print(fit_bars(plan))
    assert [line.split()[0] for line in console.export_text().splitlines()[:-1]] == ["GPU0", "GPU1"]  # one replica's
    print_plan(facts("qwen3__Qwen3-8B", "Qwen/Qwen3-8B"), plan)
    shown = capsys.readouterr().out
    assert "fit: TP2 on 2 replicas: gpu1 GPUs 0,1, gpu1 GPUs 2,3" in shown and "router (smg or sglang-router)" in shown
    assert "-m smg.launch_router" in shown and "-m sglang.launch_server" not in shown


def test_the_replicas_edit_is_read_in_one_line_and_flag_edits_go_to_each_replica():
    """Plan review's `replicas K [H2,…]`: a count and the other hosts, or - for one server; anything
    else one line. A flag or env edit of a replicated plan is each replica's (SGLang's flags), never
    the router's command line."""
    from gpuops.core.planning.edits import EditError, apply, parse, with_edit

    assert parse("replicas 3") == ("replicas", (3, ()))
    assert parse("replicas 2 gpu2,gpu3") == ("replicas", (2, ("gpu2", "gpu3")))
    assert parse("replicas -") == ("replicas", (0, ()))
    for bad, said in [("replicas", "a count 2..16"), ("replicas 1", "a count 2..16"), ("replicas 17", "2..16"),
                      ("replicas two", "2..16"), ("replicas 2 gpu2,gpu2", "replicas: each host once"),
                      ("replicas 2 -", "replicas: "), ("replicas 2 a b", "a count")]:
        with pytest.raises(EditError, match=said):
            parse(bad)
    plan = _replicated(2, name="duo")
    _, chunk = parse("flag --chunked-prefill-size 4096")
    _, env = parse("env NCCL_DEBUG=INFO")
    edits = with_edit(plan, with_edit(plan, [], chunk), env)
    edited = apply(plan, edits)
    assert edited.argv == plan.argv and edited.env == plan.env  # the router's own: as planned
    for r in edited.replicas:
        argv = r.exec_argv()
        assert argv[argv.index("--chunked-prefill-size") + 1] == "4096" and r.env["NCCL_DEBUG"] == "INFO"
    assert edited.rules[-1].id == "you" and "--chunked-prefill-size 4096" in edited.rules[-1].adds
    with pytest.raises(EditError, match="the plan has no --max-running-requests"):
        with_edit(plan, [], parse("-flag --max-running-requests")[1])


def test_replicas_beyond_loopback_and_their_router_share_one_api_key():
    """A host whose serve_host is beyond loopback: each replica is keyed, and the router carries the
    key (the router's --api-key: it checks clients with it and sends it to the replicas)."""
    keyed = [Node(target("gpu1", serve_host="0.0.0.0"), "10.0.0.1")]
    plan = build_replicated_plan(facts("qwen3__Qwen3-8B", "Qwen/Qwen3-8B"), keyed, Wishes(name="duo"), 2)
    assert all(r.uses_api_key for r in plan.replicas) and plan.uses_api_key
    argv = plan.exec_argv("/x/launch.py")
    assert argv[1:4] == ["/x/launch.py", "-m", "smg.launch_router"]  # through the key's launcher
    assert argv[argv.index("--api-key") + 1] == "${GPUOPS_API_KEY}"
    assert "router-api-key" in {rule.id for rule in plan.rules}
    plain = _replicated(2)  # on loopback: no key anywhere
    assert not plain.uses_api_key and "--api-key" not in plain.argv


def test_a_router_plan_read_back_is_checked():
    plan = _replicated(2, name="duo")
    doc = json.loads(msgspec.json.encode(plan))
    again = msgspec.convert(doc, Plan)
    assert again.replicas == plan.replicas
    bad = json.loads(json.dumps(doc))
    bad["argv"][bad["argv"].index("--worker-urls") + 2] = "--host"  # a replica left out of --worker-urls
    with pytest.raises((Invalid, msgspec.ValidationError), match="worker-urls"):
        msgspec.convert(bad, Plan)
    bad = json.loads(json.dumps(doc))
    bad["replicas"][1]["port"] = bad["replicas"][0]["port"]
    with pytest.raises((Invalid, msgspec.ValidationError), match="port of its own"):
        msgspec.convert(bad, Plan)
    bad = json.loads(json.dumps(doc))
    bad["replicas"][1]["name"] = "other"
    with pytest.raises((Invalid, msgspec.ValidationError), match="duo-r1..duo-r2"):
        msgspec.convert(bad, Plan)
    bad = json.loads(json.dumps(doc))
    bad["router"] = "nginx"  # a router the engine does not have
    with pytest.raises((Invalid, msgspec.ValidationError), match="not a router of sglang"):
        msgspec.convert(bad, Plan)
    assert msgspec.convert(dict(doc, router="sglang-router"), Plan).module == "sglang_router.launch_router"
    with pytest.raises((Invalid, msgspec.ValidationError), match="router"):
        msgspec.convert(dict(doc["replicas"][0], router="smg"), Plan)  # a server of its own runs no router


def test_the_routers_view_says_which_replica_is_lost_and_when_it_is_back():
    plan = _replicated(2, name="duo")
    one, two = plan.worker_urls

    def view(healthy: dict[str, bool]) -> str:  # the probe's line, in sglang-router 0.3.2's shapes
        n = sum(healthy.values())
        ready = [200, {"status": "ready", "healthy_workers": n, "total_workers": 2}] if n else \
            [503, {"status": "not ready", "reason": "insufficient healthy workers"}]
        return json.dumps({"/readiness": ready, "/workers": [200, {"workers": [
            {"id": str(i), "url": u, "model_id": "m", "is_healthy": h, "load": 0}
            for i, (u, h) in enumerate(healthy.items())], "total": 2}]})

    both = parse_view(view({one: True, two: True}))
    assert both.answering and both.ready and (both.healthy, both.total) == (2, 2)
    found, lost = replica_findings(plan, both, set(), {})
    assert found == [] and lost == set()
    half = parse_view(view({one: True, two: False}))
    found, lost = replica_findings(plan, half, set(), {"duo-r2": "ready"})
    assert [f.code for f in found] == ["replica-lost"] and lost == {two}
    assert "duo-r2" in found[0].summary and "1 of 2" in found[0].summary and found[0].fix is not None
    again, lost = replica_findings(plan, half, lost, {})
    assert again == [] and lost == {two}  # said once
    back, lost = replica_findings(plan, both, lost, {})
    assert [f.code for f in back] == ["replica-back"] and lost == set()
    assert not parse_view(json.dumps({"/readiness": [None, "Connection refused"], "/workers": [None, "x"]})).answering
    assert not parse_view("Traceback").answering


# ------------------------------------------------------------------ over SSH, with the real router


@pytest.fixture
def rep(ssh_home, tmp_path, sglang_venv):
    """A simulated 4-GPU host reached over the real sshd, with the real SGLang venv (its routers
    and bench_serving), and the operator's HF cache with Qwen3-8B's config."""
    root = Path(tempfile.mkdtemp(prefix="gpuops-rep-"))
    root.chmod(0o755)
    hub = operator_hub(tmp_path / "hub")
    env = operator_env(ssh_home, tmp_path, hub)
    sim = setup_simhost(root / "sim", gpus=4, engine_version="0.5.23", pace=PACE, engine_venv=str(sglang_venv))
    sim.set_sim(token_delay_s=0.001)
    cfg = tmp_path / "gpuops.toml"
    cfg.write_text(sim.host_block("gpu1", ssh="simbox") + f'model_dirs = ["{root / "models"}"]\n')
    yield cfg, env, root
    gpuops("--config", str(cfg), "stop", "trio", "--yes", env=env, timeout=120)
    sim.shutdown()
    kill_marked(str(root))
    shutil.rmtree(root, ignore_errors=True)


def _status(cfg, env, name: str) -> dict | None:
    out = gpuops("--config", str(cfg), "status", name, "--json", env=env, timeout=120)
    return json.loads(out.stdout)["deployment"] if out.returncode == 0 else None


WATCH_FOR_LOST = """\
import asyncio, sys
from gpuops.core.config import load_inventory
from gpuops.core.domain import FindingEvent
from gpuops.core.ops import Ops
async def main():
    ops = Ops(load_inventory(sys.argv[1]))
    seen = asyncio.get_running_loop().create_future()
    def heard(event):
        if isinstance(event, FindingEvent) and event.code == "replica-lost" and not seen.done():
            seen.set_result(event)
    ops.bus.listen("trio", heard)
    try:
        ops.watch("trio")  # the TUI's watch of the router: it goes on after ready
        print("watching", flush=True)
        event = await asyncio.wait_for(seen, 120)
        print(event.summary, flush=True)
        print(event.data["replica"], flush=True)
    finally:
        await ops.close()
asyncio.run(main())
"""


async def test_replicas_and_the_router_deploy_route_lose_a_replica_bench_and_stop(rep, tmp_path, monkeypatch):
    cfg, env, root = rep
    # on a free port and the ones above it (30000 and up are raced for by other test processes)
    out = gpuops("--config", str(cfg), "plan", "Qwen/Qwen3-8B", "--host", "gpu1", "--replicas", "2", "--tp", "1",
                 "--name", "trio", "--port", str(free_port()), "--json", env=env, timeout=120)
    assert out.returncode == 0, out.stderr
    plan_file = tmp_path / "trio.json"
    plan_file.write_text(out.stdout)
    plan = json.loads(out.stdout)
    ports = {r["name"]: r["port"] for r in plan["replicas"]}
    human = gpuops("--config", str(cfg), "plan", "Qwen/Qwen3-8B", "--host", "gpu1", "--replicas", "2", "--tp", "1",
                   "--name", "trio", env=env, timeout=120)
    assert human.returncode == 0 and "2 replicas behind smg or sglang-router" in human.stdout, human.stderr

    out = gpuops("--config", str(cfg), "deploy", str(plan_file), "--host", "gpu1", "--yes", env=env, timeout=420)
    assert out.returncode == 0, out.stderr + out.stdout[-3000:]
    assert "[replica 1]" in out.stdout and "[replica 2]" in out.stdout  # each replica's events, labelled
    assert "[router] " in out.stdout and all(ln.startswith("[") for ln in out.stdout.splitlines() if ln[:1].isdigit())
    states = {n: (_status(cfg, env, n) or {}).get("state") for n in ("trio", "trio-r1", "trio-r2")}
    assert states == {"trio": "ready", "trio-r1": "ready", "trio-r2": "ready"}, states
    # the host venv has both routers: the deploy ran smg, SGLang's gateway, and the stored plan says so
    assert (_status(cfg, env, "trio") or {})["router"] == "smg" and "router" not in _status(cfg, env, "trio-r1")
    # what listens on the router's port titles itself as smg does (sglang-router's says sglang::router)
    assert _listener(plan["port"]) == ("127.0.0.1", "smg::router")
    # and its metrics only where it serves (the routers' default is every address, with no key)
    metrics_port = int(plan["argv"][plan["argv"].index("--prometheus-port") + 1])
    assert _listener(metrics_port) == ("127.0.0.1", "smg::router")
    assert "smg_worker_health" in httpx.get(f"http://127.0.0.1:{metrics_port}/metrics", timeout=10).text

    # the router routes to the replicas: its own /workers lists both healthy
    workers = httpx.get(f"http://127.0.0.1:{plan['port']}/workers", timeout=10).json()["workers"]
    assert sorted(w["url"] for w in workers if w["is_healthy"]) == sorted(plan["argv"][1:3])
    chat = httpx.post(f"http://127.0.0.1:{plan['port']}/v1/chat/completions", timeout=60,
                      json={"model": "Qwen/Qwen3-8B", "messages": [{"role": "user", "content": "hi"}],
                            "max_tokens": 4})
    assert chat.status_code == 200 and chat.json()["choices"], chat.text[:500]

    # SGLang's real benchmark through the router (its tokenizer: the replicas' model on the host)
    bench = gpuops("--config", str(cfg), "bench", "trio", "--json", env=env, timeout=420)
    assert bench.returncode == 0, bench.stderr + bench.stdout[-3000:]
    events = [json.loads(line) for line in bench.stdout.splitlines() if line.startswith("{")]
    (result,) = [e for e in events if e["event"] == "result"]
    assert result["summary"]["completed"] > 0 and result["summary"]["output_throughput"] > 0

    # replica 2's server killed: the router counts it unhealthy, and gpuops' watch of the router says so
    watcher = subprocess.Popen([sys.executable, "-c", WATCH_FOR_LOST, str(cfg)], stdout=subprocess.PIPE,
                               stderr=subprocess.PIPE, text=True, env=env)
    try:
        assert watcher.stdout is not None and watcher.stdout.readline().strip() == "watching"
        victims = _server_pids(root, ports["trio-r2"])
        assert victims, "replica 2's server process was not found"
        for pid in victims:
            os.kill(pid, signal.SIGKILL)
        said, err = watcher.communicate(timeout=180)
    finally:
        watcher.kill()
    assert watcher.returncode == 0, err[-3000:]
    summary, replica = said.strip().splitlines()[-2:]
    assert replica == "trio-r2" and "unhealthy" in summary and "1 of 2" in summary, said
    workers = httpx.get(f"http://127.0.0.1:{plan['port']}/workers", timeout=10).json()["workers"]
    assert [w["is_healthy"] for w in workers if w["url"].endswith(f":{ports['trio-r2']}")] == [False]
    assert _status(cfg, env, "trio-r2")["state"] == "crashed"  # reconciled: its server is gone
    shown = gpuops("--config", str(cfg), "status", "trio", env=env, timeout=120)
    assert "replica-lost" in shown.stdout or "unhealthy" in shown.stdout, shown.stdout
    assert ", router smg, run 1," in shown.stdout.splitlines()[0], shown.stdout

    # the TUI's deployment screen of the router: each replica, its state, and the one the router lost
    from gpuops.core.config import load_inventory
    from gpuops.screens.deployment import DeploymentScreen
    from gpuops.tui.app import GpuopsApp
    from tests.tui_helpers import until

    for key in ("HOME", "XDG_STATE_HOME", "XDG_CONFIG_HOME", "XDG_CACHE_HOME"):
        monkeypatch.setenv(key, env[key])
    app = GpuopsApp(load_inventory(str(cfg)), interval=0.5)
    async with app.run_test(size=(170, 50)) as pilot:
        await pilot.press("colon", *"dep trio", "enter")
        assert await until(pilot, lambda: isinstance(app.screen, DeploymentScreen))
        screen = app.screen
        side = screen.query_one("#dep-gpus")
        assert await until(pilot, lambda: "lost (router)" in side.text.plain, timeout=30), side.text.plain
        text = side.text.plain
        assert "Replicas (1 of 2 healthy by the router)" in text
        r1, r2 = (next(ln for ln in text.splitlines() if ln.strip().startswith(n)) for n in ("trio-r1", "trio-r2"))
        assert "ready" in r1 and "lost" not in r1 and "crashed" in r2 and "lost (router)" in r2
        assert "replica-lost" in screen.query_one("#dep-banner").text.plain

    # restart starts every part again (the lost replica included), as a new run of each
    again = restart_deployment(cfg, env, "trio")
    assert again.returncode == 0 and again.stdout.strip() == "ready", again.stderr[-3000:]
    after = {n: ((d := _status(cfg, env, n) or {}).get("state"), d.get("run")) for n in ("trio", "trio-r1", "trio-r2")}
    assert after == {"trio": ("ready", 2), "trio-r1": ("ready", 2), "trio-r2": ("ready", 2)}, after

    # a swap of it is not built yet: one line, nothing changed
    swap = gpuops("--config", str(cfg), "swap", "trio", "Qwen/Qwen3-8B", "--name", "other", "--yes", env=env, timeout=120)
    assert swap.returncode == 2 and "replicas behind a router: a swap of it is not built yet" in swap.stderr, swap.stderr
    assert (_status(cfg, env, "trio") or {}).get("state") == "ready"

    # stop acts on the router and every replica; forget takes them all
    stop = gpuops("--config", str(cfg), "stop", "trio", "--yes", env=env, timeout=180)
    assert stop.returncode == 0, stop.stderr
    assert [(_status(cfg, env, n) or {}).get("state") for n in ("trio", "trio-r1", "trio-r2")] == ["stopped"] * 3
    forget = gpuops("--config", str(cfg), "forget", "trio", "--yes", env=env, timeout=120)
    assert forget.returncode == 0, forget.stderr
    assert all(_status(cfg, env, n) is None for n in ("trio", "trio-r1", "trio-r2"))


def _server_pids(root: Path, port: int) -> list[int]:
    """The simulated server processes of this test's host listening on `port` (by command line)."""
    return _pids(root, "sglang.launch_server", str(port))


def _listener(port: int) -> tuple[str, str] | None:
    """The address and the command line (a title a process gave itself) of what listens on TCP `port`."""
    import psutil

    for c in psutil.net_connections("inet"):
        if c.status == psutil.CONN_LISTEN and c.laddr.port == port and c.pid:
            return c.laddr.ip, " ".join(psutil.Process(c.pid).cmdline()).strip()  # (a title is padded with spaces)
    return None


def _pids(root: Path, module: str, *args: str) -> list[int]:
    """This test host's processes running `module` with each of `args` (by command line)."""
    pids = []
    for proc in Path("/proc").iterdir():
        if not proc.name.isdigit():
            continue
        try:
            argv = (proc / "cmdline").read_bytes().split(b"\0")
            environ = (proc / "environ").read_bytes()
        except OSError:
            continue
        if module.encode() in argv and all(a.encode() in argv for a in args) and \
                str(root).encode() in b" ".join(argv) + environ:
            pids.append(int(proc.name))
    return pids


async def test_plan_review_makes_replicas_and_deploys_them_behind_the_real_router(rep, monkeypatch):
    """The TUI's way to replicas: on plan review `e` then `replicas 2` plans two servers on the host's
    GPUs behind the router (the router's command line shown, where each replica runs); `gpus` is
    refused in one line with the plan as it was; `d` lists the replicas and asks; yes deploys both
    and the real router, and the router's deployment screen counts both replicas healthy."""
    from gpuops.core.config import load_inventory
    from gpuops.core.planning.hostfacts import read_target
    from gpuops.core.planning.model_facts import load_model_facts
    from gpuops.screens.confirm import ConfirmScreen
    from gpuops.screens.deployment import DeploymentScreen
    from gpuops.screens.plan_review import PlanReviewScreen
    from gpuops.tui.app import GpuopsApp
    from tests.tui_helpers import screen_text, until

    cfg, env, root = rep
    for key in ("HOME", "XDG_STATE_HOME", "XDG_CONFIG_HOME", "XDG_CACHE_HOME", "HF_HUB_CACHE", "HF_HUB_OFFLINE"):
        monkeypatch.setenv(key, env[key])
    app = GpuopsApp(load_inventory(str(cfg)), interval=0.5)
    async with app.run_test(size=(170, 50)) as pilot:
        screen = PlanReviewScreen(load_model_facts("Qwen/Qwen3-8B"), await read_target(app.monitor.hosts["gpu1"]),
                                  Wishes(name="trio", port=free_port()))  # the replicas take the ports above
        await app.push_screen(screen)
        assert await until(pilot, lambda: screen.plan is not None), screen.error
        said = lambda: [str(n.message) for n in app._notifications]  # noqa: E731

        async def edit(line: str) -> None:
            await pilot.press("e", *line, "enter")

        await edit("replicas 2")
        assert await until(pilot, lambda: screen.plan is not None and len(screen.plan.replicas) == 2, timeout=60), said()
        plan = screen.plan
        assert [r.gpu_ids for r in plan.replicas] == [(0,), (1,)] and plan.tp == 1
        assert screen.query_one("#plan-verdict").text.plain.startswith("TP1 on 2 replicas: gpu1 GPUs 0, gpu1 GPUs 1")
        assert str(screen.query_one("#plan-launch-title").render()) == "Router (smg or sglang-router)"
        assert "-m smg.launch_router" in str(screen.query_one("#plan-launch").render())
        assert "2 replicas behind smg or sglang-router" in str(screen.query_one("#plan-parts-title").render())
        await pilot.press("plus")  # TP per replica: TP2 each, on GPUs 0,1 and 2,3
        assert await until(pilot, lambda: [r.gpu_ids for r in screen.plan.replicas] == [(0, 1), (2, 3)])
        await pilot.press("minus")
        assert await until(pilot, lambda: screen.plan.tp == 1)
        await edit("gpus 2,3")
        assert await until(pilot, lambda: any("each replica's GPUs are the planner's" in m for m in said()))
        assert [r.gpu_ids for r in screen.plan.replicas] == [(0,), (1,)]
        await edit("policy least_load")  # only smg has it (its wheel says): the plan runs smg, which takes it
        assert await until(pilot, lambda: screen.plan.router == "smg"), said()
        assert "--policy least_load" in str(screen.query_one("#plan-launch").render())
        await pilot.press("d")
        assert await until(pilot, lambda: isinstance(app.screen, ConfirmScreen))
        box = app.screen
        assert box.question.startswith("Deploy trio (2 replicas of Qwen/Qwen3-8B and their router) on gpu1?")
        assert "trio-r1: gpu1 GPUs 0 (TP 1)" in box.detail and "trio-r2: gpu1 GPUs 1 (TP 1)" in box.detail, box.detail
        await pilot.press("y")
        assert await until(pilot, lambda: isinstance(app.screen, DeploymentScreen), timeout=60), said()

        def all_ready() -> bool:
            try:
                return all(app.ops.deployment(n).state == "ready" for n in ("trio", "trio-r1", "trio-r2"))
            except Exception:
                return False
        assert await until(pilot, all_ready, timeout=300), said()
        shown = gpuops("--config", str(cfg), "status", "trio", env=env, timeout=120)  # the CLI says it too
        assert ", router smg (least_load), run 1," in shown.stdout.splitlines()[0], shown.stdout
        import re

        # each one line of the pane beside the phases, with the requests the router has at it (none: idle)
        rows = [re.compile(r"Replicas \(2 of 2 healthy by the router\)"),
                re.compile(r"trio-r1  gpu1:\d+   ready +0 in flight"), re.compile(r"trio-r2  gpu1:\d+   ready +0 in flight")]
        assert await until(pilot, lambda: all(r.search(screen_text(app)) for r in rows), timeout=60), screen_text(app)
        # the router's own log lines (smg colours them) are shown without terminal escapes
        assert await until(pilot, lambda: "http_request{method=GET" in screen_text(app), timeout=30), screen_text(app)
        assert "\x1b" not in screen_text(app) and "[0m" not in screen_text(app)
        # the router's own phases: it starts, then is ready (none of SGLang's start-up)
        assert re.search(r"✔ starting +[\d.]+s", screen_text(app)) and re.search(r"✔ ready", screen_text(app))
        assert not any(p in screen_text(app) for p in ("dist_init", "cuda_graph", "kv_cache")), screen_text(app)
        # the deployments view's stop names the replicas it stops too (n: nothing changes)
        from gpuops.screens.deployments import DeploymentsScreen

        await pilot.press("colon", *"dep", "enter")
        assert await until(pilot, lambda: isinstance(app.screen, DeploymentsScreen))
        assert await until(pilot, lambda: app.screen.select("trio"))
        await pilot.press("s")
        assert await until(pilot, lambda: isinstance(app.screen, ConfirmScreen))
        assert app.screen.question == "Stop trio on gpu1 and its replicas trio-r1, trio-r2 on gpu1?", app.screen.question
        await pilot.press("n")
        await pilot.pause(0.3)
        assert all_ready()


def test_replicas_over_several_hosts_go_round_them_with_the_key_the_router_carries():
    f = facts("qwen3__Qwen3-8B", "Qwen/Qwen3-8B")
    nodes = [Node(target("gpu1", n=8), "10.0.0.1"), Node(target("gpu2", serve_host="0.0.0.0"), "10.0.0.2")]
    plan = build_replicated_plan(f, nodes, Wishes(tp=4, name="wide"), 3)
    assert [(r.name, r.host, r.gpu_ids) for r in plan.replicas] == [
        ("wide-r1", "gpu1", (0, 1, 2, 3)), ("wide-r2", "gpu2", (0, 1, 2, 3)), ("wide-r3", "gpu1", (4, 5, 6, 7))]
    r1, r2, r3 = plan.replicas
    # the router (on gpu1) reaches its own host's replicas on loopback, gpu2's at gpu2's address
    assert plan.worker_urls == [f"http://127.0.0.1:{r1.port}", f"http://10.0.0.2:{r2.port}", f"http://127.0.0.1:{r3.port}"]
    assert r2.bind_host == "0.0.0.0" and r2.uses_api_key and not r1.uses_api_key
    assert plan.uses_api_key and plan.host == "gpu1" and plan.bind_host == "127.0.0.1"
    assert r1.port != r3.port and plan.port not in (r1.port, r3.port)
    # a host that serves on loopback only cannot be reached by the router elsewhere: one line
    shut = [Node(target("gpu1"), "10.0.0.1"), Node(target("gpu2"), "10.0.0.2")]
    with pytest.raises(PlanError, match="gpu2 serves on loopback only .* set serve_host in \\[hosts.gpu2\\]"):
        build_replicated_plan(f, shut, Wishes(tp=4, name="wide"), 2)
    # two inventory hosts at one address (one machine): their replicas' ports differ, and a warning
    same = [Node(target("a"), "127.0.0.1"), Node(target("b", serve_host="0.0.0.0"), "127.0.0.1")]
    both = build_replicated_plan(f, same, Wishes(tp=4, name="twin"), 2)
    assert len({both.port, *(r.port for r in both.replicas)}) == 3
    assert any("b is reached at 127.0.0.1, a loopback address" in w for w in both.warnings), both.warnings


@pytest.fixture
def wide(ssh_home, tmp_path, sglang_venv):
    """Two simulated 4-GPU hosts over the real sshd (two inventory hosts of this machine, both at
    127.0.0.1): gpu1 with the real SGLang venv (its sglang-router), serving on loopback; gpu2
    serving beyond it (serve_host 0.0.0.0), so its replicas are keyed."""
    root = Path(tempfile.mkdtemp(prefix="gpuops-wide-"))
    root.chmod(0o755)
    hub = operator_hub(tmp_path / "hub")
    env = operator_env(ssh_home, tmp_path, hub)
    sims = two_sim_hosts(root, sglang_venv)
    cfg = tmp_path / "gpuops.toml"
    cfg.write_text(sims[0].host_block("gpu1", ssh="simbox") + f'model_dirs = ["{root / "models"}"]\nnode_addr = "127.0.0.1"\n'
                   + sims[1].host_block("gpu2", ssh="simbox") + f'model_dirs = ["{root / "models-b"}"]\n'
                   'node_addr = "127.0.0.1"\nserve_host = "0.0.0.0"\n')
    yield cfg, env, root
    gpuops("--config", str(cfg), "stop", "wide", "--yes", env=env, timeout=120)
    for sim in sims:
        sim.shutdown()
    kill_marked(str(root))
    shutil.rmtree(root, ignore_errors=True)


def _env_key(name: str) -> str | None:
    """GPUOPS_API_KEY in the 0600 env file of process-launched deployment NAME (the ssh user here)."""
    path = ssh_user_home() / ".local/state/gpuops/deployments" / name / "env"
    for line in path.read_text().splitlines():
        if line.startswith("GPUOPS_API_KEY="):
            return line.split("=", 1)[1].strip().strip("'\"")
    return None


@pytest.mark.timeout(600)  # five deploys and a benchmark; on a loaded machine more than the default 300 s
def test_replicas_over_two_hosts_share_the_key_the_router_carries(wide, tmp_path):
    """Replica 1 on gpu1 (loopback), replica 2 on gpu2 (beyond loopback, keyed), the real router on
    gpu1 with --api-key: deployed and ready (the router's watch reads its keyed /workers), one key
    for the router and the keyed replica in their env files and in no command line, a request
    without it refused by the router, with it routed; the benchmark through the router; a restart
    keeps the key; stop and forget take every part."""
    cfg, env, root = wide
    out = gpuops("--config", str(cfg), "plan", "Qwen/Qwen3-8B", "--hosts", "gpu1,gpu2", "--replicas", "2",
                 "--tp", "1", "--name", "wide", "--port", str(free_port()), "--json", env=env, timeout=120)
    assert out.returncode == 0, out.stderr
    plan = json.loads(out.stdout)
    r1, r2 = plan["replicas"]
    assert (r1["host"], r2["host"]) == ("gpu1", "gpu2")
    assert plan["argv"][plan["argv"].index("--api-key") + 1] == "${GPUOPS_API_KEY}"
    assert "${GPUOPS_API_KEY}" in r2["argv"] and "${GPUOPS_API_KEY}" not in r1["argv"]
    assert plan["argv"][1:3] == [f"http://127.0.0.1:{r1['port']}", f"http://127.0.0.1:{r2['port']}"]
    assert r1["port"] != r2["port"]  # two hosts of one address: ports of their own
    plan_file = tmp_path / "wide.json"
    plan_file.write_text(out.stdout)

    out = gpuops("--config", str(cfg), "deploy", str(plan_file), "--host", "gpu1", "--yes", env=env, timeout=420)
    assert out.returncode == 0, out.stderr + out.stdout[-3000:]
    states = {n: (_status(cfg, env, n) or {}).get("state") for n in ("wide", "wide-r1", "wide-r2")}
    assert states == {"wide": "ready", "wide-r1": "ready", "wide-r2": "ready"}, states
    key = _env_key("wide")
    assert key and key == _env_key("wide-r2"), "the router and the keyed replica have different keys"
    cmdlines = b"\n".join(p.read_bytes() for p in Path("/proc").glob("[0-9]*/cmdline") if p.exists())
    assert key.encode() not in cmdlines

    base = f"http://127.0.0.1:{plan['port']}"
    body = {"model": "Qwen/Qwen3-8B", "messages": [{"role": "user", "content": "hi"}], "max_tokens": 4}
    assert httpx.post(base + "/v1/chat/completions", json=body, timeout=60).status_code == 401
    auth = {"Authorization": f"Bearer {key}"}
    workers = httpx.get(base + "/workers", headers=auth, timeout=10).json()["workers"]
    assert sorted(w["url"] for w in workers if w["is_healthy"]) == sorted(plan["argv"][1:3])
    for _ in range(4):  # round robin: both replicas answer, replica 2 through the key the router sends it
        chat = httpx.post(base + "/v1/chat/completions", json=body, headers=auth, timeout=60)
        assert chat.status_code == 200 and chat.json()["choices"], chat.text[:500]

    bench = gpuops("--config", str(cfg), "bench", "wide", "--json", env=env, timeout=420)
    assert bench.returncode == 0, bench.stderr + bench.stdout[-3000:]
    (result,) = [e for e in map(json.loads, filter(lambda ln: ln.startswith("{"), bench.stdout.splitlines()))
                 if e["event"] == "result"]
    assert result["summary"]["completed"] > 0 and result["summary"]["output_throughput"] > 0
    assert key not in bench.stdout and key not in bench.stderr

    again = restart_deployment(cfg, env, "wide")
    assert again.returncode == 0 and again.stdout.strip() == "ready", again.stderr[-3000:]
    assert _env_key("wide") == key == _env_key("wide-r2")  # its clients keep working
    assert httpx.post(base + "/v1/chat/completions", json=body, headers=auth, timeout=60).status_code == 200

    assert gpuops("--config", str(cfg), "stop", "wide", "--yes", env=env, timeout=180).returncode == 0
    assert [(_status(cfg, env, n) or {}).get("state") for n in ("wide", "wide-r1", "wide-r2")] == ["stopped"] * 3
    assert gpuops("--config", str(cfg), "forget", "wide", "--yes", env=env, timeout=120).returncode == 0
