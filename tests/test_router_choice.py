"""Which router a replicated deployment runs: the one its plan names, else the first of the engine's
routers that the host's python has (SGLang: smg, its gateway today, else the last sglang-router); the
stored plan then names it. Neither there: refused in one line saying what to install, nothing started.

Against real pythons with the real routers from PyPI: the SGLang host venv (smg and sglang-router),
a venv with only sglang-router 0.3.2 (tests/router_util.py installs it), and gpuops' own (neither)."""

from __future__ import annotations

import os
import sys
from pathlib import Path

import pytest

from gpuops.core.config import HostConfig
from gpuops.core.deploy.deployer import DeployError, Deployer
from gpuops.core.deploy.store import Store
from gpuops.core.deploy.watch import Bus
from gpuops.core.hosts.host import LocalHost
from tests.router_util import ROUTER_VERSION, install_router, python_or_skip
from tests.test_replicas import _replicated


def deployer(python: Path | str, tmp_path: Path, router: str | None = None) -> Deployer:
    plan = _replicated(2, name="duo").replace(python=str(python), router=router)
    host = LocalHost(HostConfig(name="gpu1", local=True, ssh=None, python=str(python)))
    return Deployer(host, plan, Store(tmp_path / "state.db"), Bus())


@pytest.fixture(scope="module")
def old_router_only() -> Path:
    """A python with sglang-router 0.3.2 and no smg (what a host set up before smg has)."""
    return python_or_skip(install_router, f"sglang-router {ROUTER_VERSION} could not be installed")


async def test_a_host_with_both_routers_runs_smg_unless_the_plan_names_the_other(sglang_venv, tmp_path):
    python = sglang_venv / "bin" / "python"
    d = deployer(python, tmp_path)
    await d.choose_router()
    assert d.plan.router == "smg" and d.plan.module == "smg.launch_router"
    named = deployer(python, tmp_path, router="sglang-router")
    await named.choose_router()
    assert named.plan.router == "sglang-router" and named.plan.module == "sglang_router.launch_router"


async def test_a_host_with_only_sglang_router_runs_it_and_a_plan_naming_smg_is_refused(old_router_only, tmp_path):
    d = deployer(old_router_only, tmp_path)
    await d.choose_router()
    assert d.plan.router == "sglang-router" and d.plan.exec_argv()[1:3] == ["-m", "sglang_router.launch_router"]
    named = deployer(old_router_only, tmp_path, router="smg")
    with pytest.raises(DeployError) as refused:
        await named.choose_router()
    assert str(refused.value) == (f"smg is not installed on gpu1 (python {old_router_only}): "
                                  "pip install smg there first")
    assert named.plan.router == "smg"


async def test_a_host_with_neither_router_is_refused_saying_what_to_install(tmp_path):
    d = deployer(sys.executable, tmp_path)  # gpuops' own python: no router
    with pytest.raises(DeployError) as refused:
        await d.checks()
    assert str(refused.value) == (f"smg or sglang-router is not installed on gpu1 (python {sys.executable}): "
                                  "pip install smg there first")
    assert d.plan.router is None


async def test_the_routers_own_view_is_asked_at_an_ipv6_address_it_binds(sglang_venv, tmp_path):
    """A router bound to ::1 (a host whose serve_host is IPv6), started with the plan's own command
    line: gpuops' probe asks it there (at http://[::1]:PORT; Python's http.client also took the bare
    form it was given before) and reads the real smg's answer (no replica up: none listed, not ready)."""
    import asyncio
    import signal
    import subprocess
    import time

    from gpuops.core.deploy.router import router_view
    from tests.sshd import free_port

    python = sglang_venv / "bin" / "python"
    plan = _replicated(2, name="duo")
    argv = list(plan.argv)
    for flag, value in (("--host", "::1"), ("--prometheus-host", "::1"), ("--prometheus-port", str(free_port()))):
        argv[argv.index(flag) + 1] = value
    port = free_port()
    argv[argv.index("--port") + 1] = str(port)
    plan = plan.replace(argv=argv, port=port, python=str(python), router="smg")
    assert plan.client_host == "::1"
    host = LocalHost(HostConfig(name="gpu1", local=True, ssh=None, python=str(python)))
    proc = subprocess.Popen(plan.exec_argv(), stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL,
                            start_new_session=True)
    try:
        deadline = time.monotonic() + 90
        view = await router_view(host, plan)
        while not view.answering and time.monotonic() < deadline and proc.poll() is None:
            await asyncio.sleep(0.5)
            view = await router_view(host, plan)
        assert view.answering, view.error
        assert not view.ready and view.healthy == 0 and view.workers == ()
    finally:
        os.killpg(proc.pid, signal.SIGKILL)
        proc.wait(10)


def test_the_routers_policies_are_those_their_own_parsers_accept(sglang_venv):
    """data/sglang_routers.json (read from the wheels by extract/routers.py) against each router's own
    --help in the host venv: the --policy choices argparse prints, in its order."""
    import re
    import subprocess

    from gpuops.core.engines.sglang import routers

    for package, module in (("smg", "smg.launch_router"), ("sglang-router", "sglang_router.launch_router")):
        out = subprocess.run([str(sglang_venv / "bin" / "python"), "-m", module, "--help"], capture_output=True,
                             text=True, timeout=120)
        m = re.search(r"\[--policy \{([a-z_,]+)\}\]", out.stdout)
        assert m is not None, out.stdout[-2000:]
        assert routers.policies(package) == tuple(m.group(1).split(",")), package
        assert routers.default_policy(package) == "cache_aware"
