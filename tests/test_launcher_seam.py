"""The launcher seam: a third launcher, written here and registered by name, plugs in without a change to
any file of gpuops; a simulated-host model goes plan → deploy → ready → stop through it over real SSH.

The toy launcher runs the server under ``setsid`` itself, with its own folder on the host
(``~/.local/state/gpuops-toy/NAME``) and a log file of its own name (``NAME.toylog``), read by byte
offset with gpuops' file follower."""

from __future__ import annotations

import asyncio
import shlex
from typing import Any

import pytest

from gpuops.core.config import LAUNCHERS, ConfigError, load_inventory
from gpuops.core.deploy import launchers
from gpuops.core.deploy.journal import FileFollower
from gpuops.core.deploy.launchers import Launcher, LaunchError, LaunchStatus, WatchLog
from gpuops.core.domain import Deployment, Invalid, Plan
from gpuops.core.hosts.files import env_file_text, remote_home, write_private_file
from gpuops.core.hosts.host import Host
from tests.test_hosts import processes_matching

TOY = "toy-setsid"


class ToyLauncher(Launcher):
    """The server in a session of its own (``setsid``), its pid in ``pid``, its log in ``NAME.toylog``."""

    kind = TOY
    private_files = True

    def __init__(self, host: Host, name: str, exec_argv: list[str], env: dict[str, str], home: str):
        super().__init__(host, name, exec_argv, env)
        self.dir = f"{home.rstrip('/')}/.local/state/gpuops-toy/{name}"
        self.env_path = f"{self.dir}/env"
        self.launch_path = f"{self.dir}/launch.py"
        self.log_path = f"{self.dir}/{name}.toylog"

    @classmethod
    async def open(cls, host: Host, plan: Plan) -> Launcher:
        return cls.for_plan(host, plan, await remote_home(host))

    @classmethod
    def for_plan(cls, host: Host, plan: Plan, home: str | None) -> Launcher:
        assert home is not None
        launcher = cls(host, plan.name, [], dict(plan.env), home)
        launcher.exec_argv = plan.exec_argv(launcher.launch_path)
        return launcher

    async def _sh(self, script: str, *args: str, timeout: float = 30) -> Any:
        return await self.host.run(["sh", "-c", script, "toy", self.dir, *args], timeout=timeout)

    async def install(self, secrets_env: dict[str, str]) -> None:
        await self._sh('mkdir -p "$1" && chmod 700 "$1"')
        await write_private_file(self.host, self.env_path, env_file_text({**self.env, **secrets_env}, "toy"))
        await self._write_launch_script()

    async def start(self) -> None:
        script = ('cd "$1" && shift && set -a && . ./env && set +a && '
                  f'{{ setsid "$@" </dev/null >>{shlex.quote(self.name)}.toylog 2>&1 & echo $! > pid; }}')
        res = await self._sh(script, *self.exec_argv)
        if not res.ok:
            raise LaunchError(f"toy: could not start {self.name}: {res.stderr.strip()}")

    async def status(self) -> LaunchStatus:
        res = await self._sh('p=$(cat "$1/pid" 2>/dev/null) || { echo none; exit; }; '
                             'if kill -0 "$p" 2>/dev/null; then echo "running $p"; else echo "exited $p"; fi')
        word, _, pid = res.stdout.strip().partition(" ")
        return LaunchStatus(word == "running", int(pid) if pid.isdigit() else None, word)

    async def stop(self) -> LaunchStatus:
        res = await self._sh('p=$(cat "$1/pid" 2>/dev/null) || { echo "not started"; exit; }; kill -TERM -"$p"; '
                             'i=0; while kill -0 -"$p" 2>/dev/null && [ $i -lt 300 ]; do sleep 0.2; i=$((i+1)); done; '
                             'kill -KILL -"$p" 2>/dev/null; echo stopped', timeout=90)
        return LaunchStatus(False, None, res.stdout.strip())

    async def log_end(self, journal_dir: str | None) -> dict[str, Any]:
        res = await self._sh('wc -c < "$1/$2.toylog" 2>/dev/null || echo 0', self.name)
        size = res.stdout.strip()
        return {"log_offset": int(size) if size.isdigit() else 0}

    def watch_log(self, d: Deployment, *, journal_dir: str | None, follow: bool, backlog_bytes: int,
                  backlog_lines: int) -> WatchLog:
        start = d.log_offset if d.log_offset is not None else (d.run_offset or 0)
        follower = FileFollower(self.host, self.log_path, offset=start, follow=follow)

        async def records() -> Any:
            async for rec in follower.records():
                yield rec, True

        return WatchLog(records(), parsed_from=start, read_from=start, position={"log_offset": start})

    def follower(self, *, journal_dir: str | None, follow: bool) -> Any:
        return FileFollower(self.host, self.log_path, follow=follow)

    def run_log(self, d: Deployment, *, journal_dir: str | None) -> Any:
        return FileFollower(self.host, self.log_path, offset=d.run_offset or 0, follow=False)


@pytest.fixture
def toy():
    launchers.register(ToyLauncher)
    yield ToyLauncher
    launchers.unregister(TOY)


def test_a_launcher_registers_by_name_and_goes_away(toy, tmp_path):
    assert launchers.get(TOY) is toy and TOY in launchers.names() and TOY in LAUNCHERS
    assert {"systemd", "process"} <= set(launchers.names())
    launchers.unregister(TOY)
    assert TOY not in launchers.names() and TOY not in LAUNCHERS
    cfg = tmp_path / "inv.toml"
    cfg.write_text(f'[hosts.a]\nlocal = true\nlauncher = "{TOY}"\n')
    with pytest.raises(ConfigError, match=f'expected "systemd" or "process", got "{TOY}"'):
        load_inventory(str(cfg))
    launchers.register(ToyLauncher)
    assert load_inventory(str(cfg)).host("a").launcher == TOY


def test_a_plan_names_only_a_registered_launcher(toy):
    from tests.plans import make_plan

    doc = make_plan("p").to_json()
    assert Plan.from_json({**doc, "launcher": TOY}).launcher == TOY
    with pytest.raises(Invalid, match="launcher"):
        Plan.from_json({**doc, "launcher": "nonesuch"})


def test_a_toy_launcher_deploys_a_model_to_ready_and_stops_it(toy, world, monkeypatch):
    from gpuops.core.ops import Ops
    from gpuops.core.planning.request import PlanRequest

    make, env = world
    cfg, sim = make("ok")
    cfg.write_text(cfg.read_text().replace('launcher = "process"', f'launcher = "{TOY}"'))
    for var in ("HOME", "XDG_STATE_HOME", "XDG_CONFIG_HOME", "XDG_CACHE_HOME", "HF_HUB_CACHE", "HF_HUB_OFFLINE"):
        monkeypatch.setenv(var, env[var])
    inv = load_inventory(str(cfg))
    assert inv.host("gpu1").launcher == TOY

    async def scenario() -> tuple[str, str, list[str], str]:
        ops = Ops(inv)
        try:
            _facts, plan = await ops.plan(PlanRequest(model="Qwen/Qwen3-8B", host="gpu1", name="toy1"))
            assert plan.launcher == TOY
            state = await ops.deploy(plan, "gpu1", yes=True)
            lines = [rec.text async for rec in ops.logs("toy1")]
            launcher = await launchers.open_launcher(ops.host("gpu1"), ops.deployment("toy1").plan)
            running = processes_matching("sglang.launch_server", str(sim.directory))
            where = (await launcher.host.run(["sh", "-c", 'ls "$1"', "ls", launcher.dir])).stdout  # type: ignore[attr-defined]
            assert running, "the toy launcher's server runs"
            await ops.stop("toy1", confirmed=True)
            return state, where, lines, ops.deployment("toy1").state
        finally:
            await ops.close()

    state, where, lines, after = asyncio.run(scenario())
    assert state == "ready"
    assert "toy1.toylog" in where.split()  # its own log file, under its own folder
    assert any("fired up and ready" in line for line in lines)  # `logs` read it through the toy's follower
    assert after == "stopped"
    assert not processes_matching("sglang.launch_server", str(sim.directory))
