from __future__ import annotations

import os
import shutil
import signal
import subprocess
import tempfile
from pathlib import Path

import pytest

from gpuops.sim.host import SERVER_ENV, setup_simhost
from tests.ports import first_port
from tests.sshd import Sshd, ssh_user_home, start_sshd

REPO = Path(__file__).resolve().parent.parent
# The tests' hook: every simulated host a test writes (setup_simhost here, `gpuops sim setup` run as a
# subprocess) runs the scenario engine, not the product's small server (gpuops.sim.host.SERVER_ENV).
SIM_SERVER = REPO / "tests" / "simhost"  # the scenario engine
os.environ[SERVER_ENV] = str(SIM_SERVER)

# No test inherits the runner's terminal size: pytest-xdist's workers run with COLUMNS=80 (a serial run
# has none), which every gpuops a test starts took as its width (a piped table wrapped at 80 under
# `scripts/test-all.sh` alone). A test that wants a width sets it.
for _key in ("COLUMNS", "LINES"):
    os.environ.pop(_key, None)

# Signals as a terminal gives them, whatever this run inherited: a runner started in the background
# without job control (or under nohup) passes SIGINT, SIGQUIT or SIGHUP on as ignored, and every gpuops a
# test starts would inherit that (a loaded full run so started failed the tests that end gpuops with
# SIGHUP, and the bench cancel that sends SIGINT, waiting on a gpuops that never saw them).
for _sig, _handler in ((signal.SIGINT, signal.default_int_handler), (signal.SIGQUIT, signal.SIG_DFL),
                       (signal.SIGHUP, signal.SIG_DFL)):
    if signal.getsignal(_sig) == signal.SIG_IGN:
        signal.signal(_sig, _handler)

# Each worker's plans without --port start at a port of the worker's own (tests/ports.py says why): set
# for this process and every gpuops it starts.
os.environ["GPUOPS_FIRST_PORT"] = str(first_port())


def pytest_collection_modifyitems(config, items) -> None:
    """The fast tier (`pytest -m "not slow"`): tests/tiers.py says which tests are slow; and the
    heaviest files first (tests/tiers.py HEAVY_FIRST: a parallel run's workers take whole files in
    this order), each file's tests in their own order."""
    from tests.tiers import is_slow, run_order

    for item in items:
        if is_slow(item.nodeid, getattr(item, "fixturenames", ())):
            item.add_marker(pytest.mark.slow)
    items.sort(key=lambda item: run_order(item.nodeid))  # (stable)


@pytest.fixture(scope="session")
def sshd(tmp_path_factory) -> Sshd:
    """A real sshd on 127.0.0.1 with a throwaway host key and client key."""
    if not shutil.which("sshd") and not os.path.exists("/usr/sbin/sshd"):
        pytest.fail("sshd is not installed: run the README's test command (it installs openssh-server)")
    # Not under pytest's tmp dir: that is mode 0700, and sshd reads the non-root
    # user's authorized_keys as that user.
    root = Path(tempfile.mkdtemp(prefix="gpuops-sshd-"))
    root.chmod(0o755)
    shutil.rmtree(ssh_user_home(), ignore_errors=True)  # a folder a process of the same id left
    server = start_sshd(root / "sshd")
    yield server
    server.stop()
    shutil.rmtree(root, ignore_errors=True)
    shutil.rmtree(server.home, ignore_errors=True)


@pytest.fixture
def ssh_home(tmp_path, sshd, monkeypatch) -> Path:
    """A HOME whose ~/.ssh holds the test key, known_hosts and a config alias, so that
    gpuops run as a subprocess uses exactly what an operator's ~/.ssh would give it."""
    home = tmp_path / "home"
    ssh = home / ".ssh"
    ssh.mkdir(parents=True)
    shutil.copy(sshd.client_key, ssh / "id_ed25519")
    os.chmod(ssh / "id_ed25519", 0o600)
    shutil.copy(sshd.known_hosts, ssh / "known_hosts")
    (ssh / "config").write_text(
        f"Host simbox\n  HostName 127.0.0.1\n  Port {sshd.port}\n  User {sshd.user}\n"
    )
    monkeypatch.setenv("HOME", str(home))
    monkeypatch.delenv("SSH_AUTH_SOCK", raising=False)
    return home


@pytest.fixture(scope="session")
def sglang_venv() -> Path:
    """The "host" virtualenv with SGLang's real bench_serving and run_eval: scripts/test-all.sh builds
    it (scripts/sglang-host-venv.sh) and exports GPUOPS_TEST_SGLANG_VENV. Unset: the tests that need
    it are skipped here, and fail in CI (CI=true)."""
    path = os.environ.get("GPUOPS_TEST_SGLANG_VENV")
    if not path:
        why = ("GPUOPS_TEST_SGLANG_VENV is not set: build the SGLang host venv with scripts/sglang-host-venv.sh "
               "DIR and export GPUOPS_TEST_SGLANG_VENV=DIR (scripts/test-all.sh does both)")
        if os.environ.get("CI", "").lower() == "true":
            pytest.fail(why)
        pytest.skip(why)
    venv = Path(path).resolve()
    if not os.access(venv / "bin" / "python", os.X_OK):
        pytest.fail(f"GPUOPS_TEST_SGLANG_VENV={path} has no bin/python: rebuild it with scripts/sglang-host-venv.sh")
    return venv


@pytest.fixture(scope="session")
def bench_tokenizer(sglang_venv, tmp_path_factory) -> Path:
    """A tiny tokenizer built offline with the host venv's tokenizers (tests/data/bench/make_tokenizer.py),
    to copy into a model folder that bench_serving reads as --tokenizer."""
    out = tmp_path_factory.mktemp("tokenizer")
    subprocess.run([str(sglang_venv / "bin" / "python"), str(REPO / "tests" / "data" / "bench" / "make_tokenizer.py"),
                    str(out)], check=True, capture_output=True, timeout=120)
    return out


PACE = 0.05  # the simulated server's pace in deploy tests


def operator_hub(hub: Path, *repos: tuple[str, str]) -> Path:
    """An operator's HF hub cache holding only each repo's config.json (REPO, the file in
    tests/data/configs), laid out as huggingface_hub does: what planning reads with no Hub."""
    sha = "0123456789abcdef0123456789abcdef01234567"
    for repo, config in repos or (("Qwen/Qwen3-8B", "qwen3__Qwen3-8B.json"),):
        folder = hub / f"models--{repo.replace('/', '--')}"
        (folder / "snapshots" / sha).mkdir(parents=True)
        (folder / "refs").mkdir()
        (folder / "refs" / "main").write_text(sha)
        shutil.copy(Path(__file__).parent / "data" / "configs" / config, folder / "snapshots" / sha / "config.json")
    return hub


def two_sim_hosts(root: Path, sglang_venv: Path) -> list:
    """Two simulated 4-GPU hosts under ROOT ("a" with the real SGLang venv: its bench_serving and
    sglang-router; "b" without), their servers quick to answer (1 ms a token)."""
    from gpuops.sim.host import setup_simhost

    sims = [setup_simhost(root / "a", gpus=4, engine_version="0.5.23", pace=PACE, engine_venv=str(sglang_venv)),
            setup_simhost(root / "b", gpus=4, engine_version="0.5.23", pace=PACE)]
    for sim in sims:
        sim.set_sim(token_delay_s=0.001)
    return sims


def operator_env(ssh_home: Path, tmp_path: Path, hub: Path) -> dict:
    """An operator's environment for the gpuops CLI: ~/.ssh reaching the test sshd (SSH_HOME), state,
    config and cache of the test's own, HUB as the HF cache, offline, no config or token inherited."""
    env = dict(os.environ, HOME=str(ssh_home), XDG_STATE_HOME=str(tmp_path / "state"),
               XDG_CONFIG_HOME=str(tmp_path / "cfg"), XDG_CACHE_HOME=str(tmp_path / "cache"), HF_HUB_CACHE=str(hub),
               HF_HUB_OFFLINE="1")
    for key in ("GPUOPS_CONFIG", "HF_TOKEN"):
        env.pop(key, None)
    return env


@pytest.fixture
def world(tmp_path, sshd, ssh_home):
    """A simulated 4-GPU host reached over SSH, an operator HF cache holding Qwen3-8B's config."""
    root = Path(tempfile.mkdtemp(prefix="gpuops-deploy-"))
    root.chmod(0o755)
    hub = operator_hub(tmp_path / "hub")
    env = dict(os.environ, HOME=str(ssh_home), XDG_STATE_HOME=str(tmp_path / "state"),
               XDG_CONFIG_HOME=str(tmp_path / "cfg"), XDG_CACHE_HOME=str(tmp_path / "cache"),
               HF_HUB_CACHE=str(hub), HF_HUB_OFFLINE="1")
    env.pop("GPUOPS_CONFIG", None)
    env.pop("HF_TOKEN", None)

    def make(scenario: str = "ok", stall: str = "") -> tuple[Path, object]:
        sim = setup_simhost(root / scenario, gpus=4, engine_version="0.5.23", scenario=scenario, pace=PACE)
        cfg = tmp_path / f"{scenario}.toml"
        cfg.write_text(sim.host_block("gpu1", ssh="simbox") + f'model_dirs = ["{root / scenario / "models"}"]\n'
                       + stall)
        return cfg, sim

    yield make, env
    kill_marked(str(root))
    subprocess.run(["rm", "-rf", str(root)])


def kill_marked(marker: str) -> None:
    """End the processes this test started on its simulated host: those whose command line or
    environment names `marker` (its folder; a server the sim's python exec'd into gpuops' venv
    keeps the sim's PATH in its environment), never another test's."""
    import signal

    needle = marker.encode()
    for proc in Path("/proc").iterdir():
        if not proc.name.isdigit() or int(proc.name) == os.getpid():
            continue
        try:
            if needle in (proc / "cmdline").read_bytes() or needle in (proc / "environ").read_bytes():
                os.kill(int(proc.name), signal.SIGKILL)
        except (OSError, ProcessLookupError):
            continue


@pytest.fixture
def models(tmp_path) -> dict[str, Path]:
    """Model folders the simulated server reads: Qwen3.5-122B-A10B (hybrid, MTP) and Qwen3-8B."""
    from tests.test_sglang_sim import QWEN3, QWEN35, model_dir

    root = tmp_path / "models"
    return {"qwen35": model_dir(root, QWEN35, 250_170_000_000, shards=39),
            "qwen3": model_dir(root, QWEN3, 16_381_470_720, shards=5)}


@pytest.fixture(scope="session")
def sglang_server_venv(sglang_venv) -> Path:
    """The host venv with what the genuine `python -m sglang.launch_server --device cpu` imports and
    SGLang 0.5.10's code beside it (scripts/sglang-host-venv.sh builds both; its marker
    .gpuops-lock-HASH says the venv was installed from locks/sglang-host.txt as it is now)."""
    import hashlib

    missing = []
    lock_hash = hashlib.sha256((REPO / "locks" / "sglang-host.txt").read_bytes()).hexdigest()[:12]
    if not (sglang_venv / f".gpuops-lock-{lock_hash}").is_file():
        missing.append("what locks/sglang-host.txt names (the server's imports among them)")
    if not (sglang_venv / "sglang-0.5.10" / ".gpuops-ok").is_file():
        missing.append("SGLang 0.5.10's code in sglang-0.5.10/")
    if missing:
        pytest.fail(f"the SGLang host venv {sglang_venv} lacks {' and '.join(missing)}: top it up with "
                    f"scripts/sglang-host-venv.sh {sglang_venv}")
    return sglang_venv


@pytest.fixture(scope="session")
def sglang_0510(sglang_server_venv) -> Path:
    """SGLang 0.5.10's code (installed --no-deps --target): a folder to put first on PYTHONPATH."""
    return sglang_server_venv / "sglang-0.5.10"


@pytest.fixture(scope="session")
def tiny_qwen3(sglang_server_venv, bench_tokenizer) -> Path:
    """A tiny Qwen3 (random weights, safetensors; tests/data/real_sglang/make_tiny_qwen3.py) with the
    bench tokenizer in the same folder: a model the genuine SGLang server loads on a CPU. Outside
    pytest's tmp dir (mode 0700) so that a host user reached over SSH can read it."""
    root = Path(tempfile.mkdtemp(prefix="gpuops-tiny-"))
    root.chmod(0o755)
    out = root / "tiny-qwen3"
    res = subprocess.run([str(sglang_server_venv / "bin" / "python"),
                          str(REPO / "tests" / "data" / "real_sglang" / "make_tiny_qwen3.py"), str(out)],
                         capture_output=True, text=True, timeout=300)
    if res.returncode != 0:
        pytest.fail(f"making the tiny Qwen3 failed: {res.stderr[-2000:]}")
    for f in bench_tokenizer.iterdir():
        shutil.copy(f, out / f.name)
    out.chmod(0o755)
    for f in out.iterdir():
        f.chmod(0o644)
    yield out
    shutil.rmtree(root, ignore_errors=True)


@pytest.fixture(scope="session")
def qwen35_moe_config() -> Path:
    """A Qwen3.5-MoE model folder holding only its config.json (Qwen3.5-122B-A10B's; no weights): enough
    for SGLang to check its server arguments against the model."""
    root = Path(tempfile.mkdtemp(prefix="gpuops-qwen35-"))
    root.chmod(0o755)
    out = root / "Qwen3.5-122B-A10B"
    out.mkdir(mode=0o755)
    shutil.copy(REPO / "tests" / "data" / "configs" / "qwen3_5__Qwen3.5-122B-A10B.json", out / "config.json")
    (out / "config.json").chmod(0o644)
    yield out
    shutil.rmtree(root, ignore_errors=True)


RESTART = ("import asyncio, sys\n"
           "from gpuops.core.config import load_inventory\n"
           "from gpuops.core.ops import Ops\n"
           "async def main():\n"
           "    ops = Ops(load_inventory(sys.argv[1]))\n"
           "    try:\n"
           "        print(await ops.restart(sys.argv[2], confirmed=True))\n"
           "    finally:\n"
           "        await ops.close()\n"
           "asyncio.run(main())\n")


def restart_deployment(cfg: Path, env: dict, name: str, timeout: float = 420) -> subprocess.CompletedProcess:
    """Ops.restart(NAME) in a process of its own, as the deployments view's r does (no CLI verb
    restarts): its stdout is the state the restart reached."""
    import sys

    return subprocess.run([sys.executable, "-c", RESTART, str(cfg), name], capture_output=True, text=True, env=env,
                          timeout=timeout)
