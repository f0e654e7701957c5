"""The API key of a deployment that listens beyond loopback appears nowhere but its 0600 env file:
not in any process's command line (the launcher), not in the server's log or the journal (the
launcher masks its output), not in what gpuops relays, shows or stores (one redaction function at
every entry). The simulated host over a real sshd, both launchers (the systemd one through the fake
systemctl into a real journal)."""

from __future__ import annotations

import json
import os
import re
import subprocess
from pathlib import Path

import pytest

from gpuops.core.redact import redact, redact_all
from tests.test_cli import GPUOPS
from tests.sshd import ssh_user_home
from tests.ports import free_port


MASKED = re.compile(r"""api_key'?(?:=|: )'\*\*\*'""")



def gpuops(cfg: Path, env: dict, *args: str, timeout: float = 120) -> subprocess.CompletedProcess:
    return subprocess.run([GPUOPS, "--config", str(cfg), *args], capture_output=True, text=True, env=env,
                          timeout=timeout, stdin=subprocess.DEVNULL)


def env_value(path: Path, key: str) -> str:
    for line in path.read_text().splitlines():
        if line.startswith(key + "="):
            return line.split("=", 1)[1].strip("'\"")
    raise AssertionError(f"{key} not in {path}")


def every_cmdline() -> list[bytes]:
    out = []
    for entry in Path("/proc").iterdir():
        if entry.name.isdigit():
            try:
                out.append((entry / "cmdline").read_bytes())
            except OSError:
                pass
    return out


def files_under(root: Path) -> list[Path]:
    return [p for p in root.rglob("*") if p.is_file() and not p.is_symlink()]


@pytest.mark.parametrize("launcher", ["process", "systemd"])
def test_the_api_key_is_nowhere_but_the_env_file(world, launcher):
    make, env = world
    cfg, sim = make("ok")
    cfg.write_text(sim.host_block("gpu1", ssh="simbox", launcher=launcher).replace(
        "[hosts.gpu1]\n", '[hosts.gpu1]\nserve_host = "0.0.0.0"\n', 1)
        + f'model_dirs = ["{sim.directory / "models"}"]\n')
    name, port = f"key{os.getpid()}{launcher[0]}", free_port()
    state = Path(env["XDG_STATE_HOME"])
    if launcher == "systemd":
        env_file = Path(f"/etc/gpuops/{name}.env")
        own = [env_file, Path(f"/etc/gpuops/{name}.launch.py"), Path(f"/etc/systemd/system/gpuops-{name}.service")]
    else:
        env_file = ssh_user_home() / ".local/state/gpuops/deployments" / name / "env"
        own = [env_file.parent]
    try:
        out = gpuops(cfg, env, "plan", "Qwen/Qwen3-8B", "--host", "gpu1", "--name", name, "--port", str(port),
                     "--json", timeout=180)
        assert out.returncode == 0, out.stderr
        plan_file = state.parent / f"{name}.plan.json"
        plan_file.write_text(out.stdout)
        out = gpuops(cfg, env, "deploy", str(plan_file), "--host", "gpu1", "--json", "--yes", timeout=180)
        assert out.returncode == 0, out.stderr + out.stdout[-3000:]
        key = env_value(env_file, "GPUOPS_API_KEY")
        assert key.startswith("sk-gpuops-") and len(key) > 30
        events = [json.loads(line) for line in out.stdout.splitlines() if line.startswith("{")]
        ready = events[-1]
        assert ready["state"] == "ready" and ready["quick_check"]["content"]  # the key works (quick check)
        # the server's own `server_args=…` line was relayed, with its key masked by the launcher
        (args_line,) = [e["line"] for e in events if e["event"] == "log" and "server_args=" in e["line"]]
        assert MASKED.search(args_line), args_line  # 0.5.23 prints a dict: 'api_key': '***'
        shown = {"deploy --json": out.stdout + out.stderr}
        # every process's command line: the launcher's and the server's hold only the placeholder
        assert not [c for c in every_cmdline() if key.encode() in c]
        ps = subprocess.run(["ps", "-ww", "-eo", "pid,args"], capture_output=True, text=True).stdout
        (server,) = [ln for ln in ps.splitlines() if name in ln and "sglang.launch_server" in ln
                     and "launch.py" in ln and "--port" in ln and str(port) in ln][:1]
        assert "${GPUOPS_API_KEY}" in server
        shown["ps"] = ps
        for verb in (["logs", name], ["triage", "--deployment", name, "--json"], ["gpus", "--json"],
                     ["models", "--json"], ["status", name, "--json"]):
            res = gpuops(cfg, env, *verb, timeout=180)
            assert res.returncode in (0, 1), (verb, res.stderr)
            shown[" ".join(verb)] = res.stdout + res.stderr
        assert "server_args=" in shown[f"logs {name}"] and MASKED.search(shown[f"logs {name}"])
        gpus = json.loads(shown["gpus --json"])
        commands = [p["command"] for h in gpus["hosts"] for g in h["gpus"] for p in g["processes"]]
        assert commands, gpus  # the server's GPU processes are listed...
        for where, text in shown.items():  # ...and nothing shows the key
            assert key not in text, where
        # nothing gpuops stores, nothing the server logged (its log file or the journal) holds it
        stored = files_under(state)
        assert stored
        logs = files_under(sim.journal_dir) if launcher == "systemd" else [env_file.parent / "log"]
        assert logs and all(p.exists() for p in logs)
        for path in stored + logs:
            assert key.encode() not in path.read_bytes(), path
        if launcher == "systemd":
            journal = subprocess.run(["journalctl", f"--directory={sim.journal_dir}", "-o", "json", "--all",
                                      "--no-pager"], capture_output=True, text=True, timeout=60).stdout
            assert "server_args=" in journal and key not in journal
        else:  # the deployment's folder: only the env file (0600) holds it
            for path in files_under(env_file.parent):
                assert (key.encode() in path.read_bytes()) == (path == env_file), path
        res = gpuops(cfg, env, "stop", name, "--yes", timeout=120)
        assert res.returncode == 0, res.stderr
    finally:
        sim.shutdown()
        for path in own:
            subprocess.run(["rm", "-rf", str(path)])


def test_a_server_started_by_hand_with_its_key_in_argv_is_shown_redacted(world, models):
    """Not every server on a host went through gpuops: one started by hand with `--api-key K` still
    has K in its command line; gpuops' GPU process list and models list show `--api-key ***`."""
    make, env = world
    cfg, sim = make("ok")
    key = "handmade-" + os.urandom(8).hex()
    port = free_port()
    model = models["qwen3"]
    proc = subprocess.Popen([str(sim.bin_dir / "python"), "-m", "sglang.launch_server", "--model-path", str(model),
                             "--port", str(port), "--api-key", key], stdout=subprocess.DEVNULL,
                            stderr=subprocess.DEVNULL, env=dict(env, PATH=f"{sim.bin_dir}:{env['PATH']}"))
    try:
        def listed():
            res = gpuops(cfg, env, "gpus", "--json")
            doc = json.loads(res.stdout)
            return [p["command"] for h in doc["hosts"] for g in h["gpus"] for p in g["processes"]
                    if p.get("pid") == proc.pid]
        for _ in range(100):
            commands = listed()
            if commands:
                break
            proc.poll()
            assert proc.returncode is None, "the hand-started server exited"
        assert commands and all("--api-key ***" in c and key not in c for c in commands), commands
        res = gpuops(cfg, env, "models", "--json")
        assert key not in res.stdout and (str(proc.pid) not in res.stdout or "--api-key ***" in res.stdout)
    finally:
        proc.kill()
        proc.wait()
        sim.shutdown()


@pytest.mark.parametrize("text, shown", [
    ("python -m sglang.launch_server --api-key sk-1 --port 1", "python -m sglang.launch_server --api-key *** --port 1"),
    ("--api-key=sk-1", "--api-key=***"),
    ("['--api-key', 'sk-1', '--port', '1']", "['--api-key', '***', '--port', '1']"),
    ("server_args=ServerArgs(model_path='m', api_key='sk-1', admin_api_key=None, port=1)",
     "server_args=ServerArgs(model_path='m', api_key='***', admin_api_key=None, port=1)"),
    ("server_args={'api_key': 'sk-1', 'port': 1}", "server_args={'api_key': '***', 'port': 1}"),
    ('{"api_key": "sk-1"}', '{"api_key": "***"}'),
    ("Authorization: Bearer sk-1", "Authorization: Bearer ***"),
    ("HF_TOKEN=hf_abc OPENAI_API_KEY='sk-1'", "HF_TOKEN=*** OPENAI_API_KEY='***'"),
    ("downloading with hf_AbCdEfGhIjKlMnOpQrStUv", "downloading with hf_***"),
    ("key sk-gpuops-Ab_cD-9 leaked", "key sk-gpuops-*** leaked"),
    ("hf_token='abc', password: hunter2", "hf_token='***', password: ***"),
    # the field names written without a separator (they were missed: no needle held them)
    ("hftoken=abc authtoken: xyz", "hftoken=*** authtoken: ***"),
    ('{"accessToken": "abc", "HfToken": "x"}', '{"accessToken": "***", "HfToken": "***"}'),
    # what is not a secret stays exactly as it is
    ("--api-key ${GPUOPS_API_KEY}", "--api-key ${GPUOPS_API_KEY}"),
    ("Decode batch. #running-req: 1, #token: 1234, token usage: 0.01, gen throughput (token/s): 40.1",
     "Decode batch. #running-req: 1, #token: 1234, token usage: 0.01, gen throughput (token/s): 40.1"),
    ("max_total_tokens=1000, skip_tokenizer_init=False, api_key=None", "max_total_tokens=1000, "
     "skip_tokenizer_init=False, api_key=None"),
])
def test_redact(text, shown):
    assert redact(text) == shown


def test_redact_all_masks_secret_fields_and_strings_inside():
    doc = {"server_info": {"api_key": "sk-1", "launch_command": "x --api-key sk-1", "port": 1,
                           "internal_states": [{"api_key": "sk-1", "hf_token": None}]}}
    assert redact_all(doc) == {"server_info": {"api_key": "***", "launch_command": "x --api-key ***", "port": 1,
                                               "internal_states": [{"api_key": "***", "hf_token": None}]}}
    named = {"apiKey": "a", "hfToken": "b", "accessToken": "c", "HF_TOKEN": "d", "client_secret": "e", "passwd": "f",
             "max_tokens": "10", "token_usage": "0.1", "keyring": "x"}
    assert redact_all(named) == {**dict.fromkeys(list(named)[:6], "***"), "max_tokens": "10", "token_usage": "0.1",
                                 "keyring": "x"}


def test_the_unit_passes_the_placeholder_to_the_launcher_not_the_key():
    """systemd expands ${VAR} in ExecStart=: the unit escapes the placeholder ($$), so the command
    line systemd starts holds the placeholder, which the launcher fills in."""
    from tests.plans import make_plan

    plan = make_plan(launcher="systemd", argv=["--model-path", "/m", "--host", "0.0.0.0", "--port", "30000",
                           "--api-key", "${GPUOPS_API_KEY}"])
    unit = plan.unit_text()
    assert f"ExecStart={plan.python or 'python3'} /etc/gpuops/{plan.name}.launch.py -m sglang.launch_server" in unit
    assert "$${GPUOPS_API_KEY}" in unit and not re.search(r"(?<!\$)\$\{GPUOPS_API_KEY\}", unit)
    # read back as a --like unit: systemd's own unescaping, so the same argv (and the placeholder)
    from gpuops.core.planning.like import previous_from_unit
    assert previous_from_unit(unit, "u").argv[-6:] == ("--host", "0.0.0.0", "--port", "30000", "--api-key",
                                                      "${GPUOPS_API_KEY}")
    loopback = make_plan(argv=["--model-path", "/m", "--port", "30000"])
    assert "launch.py" not in loopback.unit_text()  # nothing to hide: SGLang as it is


async def test_the_tui_shows_the_server_without_its_key(world, monkeypatch):
    """The dashboard's process table and the deployment screen's log: the key masked there too."""
    from gpuops.core.config import load_inventory
    from gpuops.screens.deployment import DeploymentScreen
    from gpuops.tui.app import GpuopsApp
    from gpuops.tui.logview import LogView
    from tests.tui_helpers import until

    make, env = world
    cfg, sim = make("ok")
    cfg.write_text(sim.host_block("gpu1", ssh="simbox").replace(
        "[hosts.gpu1]\n", '[hosts.gpu1]\nserve_host = "0.0.0.0"\n', 1) + f'model_dirs = ["{sim.directory / "models"}"]\n')
    name = f"tuikey{os.getpid()}"
    env_file = ssh_user_home() / ".local/state/gpuops/deployments" / name / "env"
    out = gpuops(cfg, env, "plan", "Qwen/Qwen3-8B", "--host", "gpu1", "--name", name, "--port", str(free_port()),
                 "--json")
    assert out.returncode == 0, out.stderr
    plan_file = Path(env["XDG_STATE_HOME"]).parent / f"{name}.plan.json"
    plan_file.write_text(out.stdout)
    try:
        out = gpuops(cfg, env, "deploy", str(plan_file), "--host", "gpu1", "--yes", "--json", timeout=180)
        assert out.returncode == 0, out.stderr
        key = env_value(env_file, "GPUOPS_API_KEY")
        for var in ("HOME", "XDG_STATE_HOME", "XDG_CONFIG_HOME", "XDG_CACHE_HOME"):
            monkeypatch.setenv(var, env[var])
        app = GpuopsApp(load_inventory(str(cfg)), interval=0.5)
        async with app.run_test(size=(200, 50)) as pilot:
            assert await until(pilot, lambda: app.screen.query("#procs"))  # mounted after the first frame
            procs = app.screen.query_one("#procs")
            assert await until(pilot, lambda: procs.row_count > 0, timeout=30)
            rows = [" ".join(map(str, procs.get_row_at(i))) for i in range(procs.row_count)]
            assert rows and all(key not in r for r in rows)
            await pilot.press("colon", *f"dep {name}", "enter")
            assert await until(pilot, lambda: isinstance(app.screen, DeploymentScreen))
            log = app.screen.query_one(LogView)
            assert await until(pilot, lambda: any("server_args=" in ln for ln in log.plain_lines()), timeout=30)
            lines = log.plain_lines()
            assert any(MASKED.search(ln) for ln in lines if "server_args=" in ln)
            assert all(key not in ln for ln in lines)
    finally:
        gpuops(cfg, env, "stop", name, "--yes")
        subprocess.run(["rm", "-rf", str(env_file.parent)])
