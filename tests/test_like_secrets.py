"""Secrets carried by `--like` (an old unit's or plan's `--api-key sk-…`, `--admin-api-key`,
`--ssl-keyfile-password`, `HF_TOKEN`, `OPENAI_API_KEY`, `SGLANG_API_KEY`) take gpuops' own key's path:
the deployment's 0600 env file only. Never the plan (printed or JSON), a command line, the `cmd` or
`log` file, the unit, the journal or the store; the server still gets every value, and its clients
keep the old key. The simulated host over a real sshd, both launchers."""

from __future__ import annotations

import json
import os
import stat
import subprocess
import sys
from pathlib import Path

import pytest

from gpuops.core.planning.like import load_previous, previous_from_unit
from tests.plans import make_plan
from tests.sshd import ssh_user_home
from tests.test_cli import GPUOPS
from tests.test_secrets import env_value, every_cmdline, files_under, free_port

KEY = f"sk-old-{os.getpid()}-clients-use-this-key"
SECRETS = {"--api-key": KEY, "--admin-api-key": f"adm-{os.getpid()}-admin-secret",
           "--ssl-keyfile-password": f"pw-{os.getpid()}-keyfile-secret",
           "HF_TOKEN": f"hf_{os.getpid()}abcdefghijklmnopqrstuvwxyz", "OPENAI_API_KEY": f"sk-openai-{os.getpid()}x",
           "SGLANG_API_KEY": f"sk-sglang-{os.getpid()}y"}
ENV_NAMES = {"--api-key": "GPUOPS_API_KEY", "--admin-api-key": "GPUOPS_ADMIN_API_KEY",
             "--ssl-keyfile-password": "GPUOPS_SSL_KEYFILE_PASSWORD"}


def old_unit(model: str, port: int) -> str:
    flags = " ".join(f"{k} {v}" if k != "--admin-api-key" else f"{k}={v}" for k, v in SECRETS.items()
                     if k.startswith("--"))
    env = " ".join(f"{k}={v}" for k, v in SECRETS.items() if not k.startswith("--"))
    return ("[Service]\n"
            f"Environment={env}\n"
            'Environment="SGLANG_ENABLE_METRICS_EXTRA=1"\n'
            f"ExecStart=/opt/sglang/bin/python -m sglang.launch_server --model-path {model} --port {port} {flags} "
            "--tp 1\n")


def nothing_secret(text: str | bytes, where: str) -> None:
    for name, value in SECRETS.items():
        assert (value.encode() if isinstance(text, bytes) else value) not in text, f"{name}'s value in {where}"


def test_like_takes_the_secrets_out_of_what_it_reads(tmp_path):
    unit = tmp_path / "old.service"
    unit.write_text(old_unit("Qwen/Qwen3-8B", 30000))
    prev = load_previous(str(unit))
    assert "--api-key" in prev.argv and "${GPUOPS_API_KEY}" in prev.argv
    assert prev.argv[prev.argv.index("--admin-api-key") + 1] == "${GPUOPS_ADMIN_API_KEY}"  # (its --x=v form too)
    assert dict(prev.env) == {"SGLANG_ENABLE_METRICS_EXTRA": "1"}
    assert prev.secret_env == ("HF_TOKEN", "OPENAI_API_KEY", "SGLANG_API_KEY")
    assert dict(prev.secrets) == {ENV_NAMES.get(k, k): v for k, v in SECRETS.items()}
    nothing_secret(repr(prev) + " ".join(prev.argv) + str(prev.env), "the Previous shown")
    # a unit gpuops wrote (placeholders only) carries no value
    mine = make_plan(launcher="systemd", argv=["--model-path", "/m", "--host", "0.0.0.0", "--api-key",
                                               "${GPUOPS_API_KEY}"])
    assert previous_from_unit(mine.unit_text(), "u").secrets == ()


def test_plan_like_never_shows_a_secret_and_the_plan_holds_none(tmp_path):
    """`gpuops plan --like` (offline): the printed plan and its JSON hold placeholders and names."""
    from tests.conftest import operator_hub

    hub = operator_hub(tmp_path / "hub")
    unit = tmp_path / "old.service"
    unit.write_text(old_unit("Qwen/Qwen3-8B", 30000))
    env = dict(os.environ, HF_HUB_CACHE=str(hub), HF_HUB_OFFLINE="1", XDG_STATE_HOME=str(tmp_path / "state"),
               XDG_CACHE_HOME=str(tmp_path / "cache"))
    env.pop("GPUOPS_CONFIG", None)
    for fmt in ([], ["--json"]):
        res = subprocess.run([GPUOPS, "plan", "Qwen/Qwen3-8B", "--gpus", "1", "--gpu-memory", "80", "--like", str(unit),
                              *fmt], capture_output=True, text=True, env=env, timeout=120)
        assert res.returncode == 0, res.stderr
        nothing_secret(res.stdout + res.stderr, f"plan {fmt}")
    doc = json.loads(res.stdout)
    assert doc["argv"][doc["argv"].index("--api-key") + 1] == "${GPUOPS_API_KEY}"
    assert doc["argv"][doc["argv"].index("--ssl-keyfile-password") + 1] == "${GPUOPS_SSL_KEYFILE_PASSWORD}"
    assert doc["secret_env"] == ["GPUOPS_API_KEY", "GPUOPS_ADMIN_API_KEY", "GPUOPS_SSL_KEYFILE_PASSWORD", "HF_TOKEN",
                                 "OPENAI_API_KEY", "SGLANG_API_KEY"]  # names only: what the env file gets
    assert "HF_TOKEN" not in doc["env"] and doc["env"]["SGLANG_ENABLE_METRICS_EXTRA"] == "1"
    assert "$${GPUOPS_ADMIN_API_KEY}" in doc["unit"]["text"]  # the unit runs gpuops' launcher
    assert ".launch.py -m sglang.launch_server" in doc["unit"]["text"]
    (rule,) = [r for r in doc["rules"] if r["id"] == "like-secrets"]
    assert rule["adds"] == ["GPUOPS_API_KEY", "GPUOPS_ADMIN_API_KEY", "GPUOPS_SSL_KEYFILE_PASSWORD", "HF_TOKEN",
                            "OPENAI_API_KEY", "SGLANG_API_KEY"]


def test_the_launcher_fills_in_and_masks_every_secret_flag(tmp_path):
    from gpuops.core.hosts.programs import launcher

    (tmp_path / "shows.py").write_text("import sys\nprint('args', sys.argv[1:])\n")
    env = dict(os.environ, PYTHONPATH=str(tmp_path), GPUOPS_API_KEY="key-one-value",
               GPUOPS_ADMIN_API_KEY="admin-two-value")
    argv = [sys.executable, launcher.__file__, "-m", "shows", "--api-key", "${GPUOPS_API_KEY}", "--admin-api-key",
            "${GPUOPS_ADMIN_API_KEY}"]
    out = subprocess.run(argv, capture_output=True, text=True, env=env, timeout=30)
    assert out.returncode == 0 and out.stdout == "args ['--api-key', '***', '--admin-api-key', '***']\n", out
    env.pop("GPUOPS_ADMIN_API_KEY")
    out = subprocess.run(argv, capture_output=True, text=True, env=env, timeout=30)
    assert out.returncode == 2 and "GPUOPS_ADMIN_API_KEY is not set" in out.stderr


@pytest.mark.parametrize("launcher", ["process", "systemd"])
def test_deploy_like_an_old_unit_keeps_its_secrets_in_the_env_file_only(world, tmp_path, launcher):
    make, env = world
    cfg, sim = make("ok")
    cfg.write_text(sim.host_block("gpu1", ssh="simbox", launcher=launcher)
                   + f'model_dirs = ["{sim.directory / "models"}"]\n')
    name, port = f"likesec{os.getpid()}{launcher[0]}", free_port()
    state = Path(env["XDG_STATE_HOME"])
    if launcher == "systemd":
        env_file = Path(f"/etc/gpuops/{name}.env")
        own = [env_file, Path(f"/etc/gpuops/{name}.launch.py"), Path(f"/etc/systemd/system/gpuops-{name}.service")]
    else:
        env_file = ssh_user_home() / ".local/state/gpuops/deployments" / name / "env"
        own = [env_file.parent]
    unit = tmp_path / "old.service"
    unit.write_text(old_unit("Qwen/Qwen3-8B", port))

    def gpuops(*args: str) -> subprocess.CompletedProcess:
        return subprocess.run([GPUOPS, "--config", str(cfg), *args], capture_output=True, text=True, env=env,
                              timeout=180, stdin=subprocess.DEVNULL)
    shown: dict[str, str] = {}
    try:
        out = gpuops("plan", "Qwen/Qwen3-8B", "--host", "gpu1", "--name", name, "--like", str(unit), "--json")
        assert out.returncode == 0, out.stderr
        shown["plan"] = out.stdout + out.stderr
        plan_file = tmp_path / "new.plan.json"
        plan_file.write_text(out.stdout)
        out = gpuops("deploy", str(plan_file), "--host", "gpu1", "--json", "--yes")
        shown["deploy"] = out.stdout + out.stderr
        assert out.returncode == 0, out.stderr + out.stdout[-3000:]
        events = [json.loads(line) for line in out.stdout.splitlines() if line.startswith("{")]
        assert events[-1]["state"] == "ready" and events[-1]["quick_check"]["content"]  # the old key works
        # the env file (0600) holds every value, as the old unit had it
        assert stat.S_IMODE(env_file.stat().st_mode) == 0o600
        for flag_or_name, value in SECRETS.items():
            assert env_value(env_file, ENV_NAMES.get(flag_or_name, flag_or_name)) == value
        # the server got them: its environment (HF_TOKEN, …) and, masked in what it printed, its flags
        ps = subprocess.run(["ps", "-ww", "-eo", "pid,args"], capture_output=True, text=True).stdout
        shown["ps"] = ps
        servers = [int(ln.split()[0]) for ln in ps.splitlines() if name in ln and "sglang.launch_server" in ln
                   and "launch.py" in ln and str(port) in ln]
        assert servers, ps
        environ = Path(f"/proc/{servers[-1]}/environ").read_bytes().split(b"\0")
        assert f"HF_TOKEN={SECRETS['HF_TOKEN']}".encode() in environ
        assert f"SGLANG_API_KEY={SECRETS['SGLANG_API_KEY']}".encode() in environ
        for verb in (["logs", name], ["status", name, "--json"], ["triage", "--deployment", name, "--json"]):
            res = gpuops(*verb)
            assert res.returncode in (0, 1), (verb, res.stderr)
            shown[" ".join(verb)] = res.stdout + res.stderr
        assert "server_args=" in shown[f"logs {name}"]
        for where, text in shown.items():
            nothing_secret(text, where)
        for cmdline in every_cmdline():
            nothing_secret(cmdline, "a process's command line")
        stored = files_under(state)
        logs = (files_under(sim.journal_dir) + [Path(f"/etc/systemd/system/gpuops-{name}.service")]
                if launcher == "systemd" else [p for p in files_under(env_file.parent) if p != env_file])
        assert stored and logs and all(p.exists() for p in logs)
        for path in stored + logs:  # the store, the unit or the cmd and log files, the journal
            nothing_secret(path.read_bytes(), str(path))
        res = gpuops("stop", name, "--yes")
        assert res.returncode == 0, res.stderr
    finally:
        sim.shutdown()
        for path in own:
            subprocess.run(["rm", "-rf", str(path)])


def test_deploy_refuses_when_a_carried_secret_cannot_be_read_and_writes_nothing(world, tmp_path):
    """The old unit is gone by deploy time and the deployment has no env file: refused before
    anything changes (exit 2), naming what is missing, never a server without its secrets."""
    make, env = world
    cfg, sim = make("ok")
    name, port = f"likegone{os.getpid()}", free_port()
    unit = tmp_path / "old.service"
    unit.write_text(old_unit("Qwen/Qwen3-8B", port))
    run = [GPUOPS, "--config", str(cfg)]
    try:
        out = subprocess.run([*run, "plan", "Qwen/Qwen3-8B", "--host", "gpu1", "--name", name, "--like", str(unit),
                              "--json"], capture_output=True, text=True, env=env, timeout=180)
        assert out.returncode == 0, out.stderr
        plan_file = tmp_path / "new.plan.json"
        plan_file.write_text(out.stdout)
        unit.unlink()
        out = subprocess.run([*run, "deploy", str(plan_file), "--host", "gpu1", "--yes"], capture_output=True,
                             text=True, env=env, timeout=180, stdin=subprocess.DEVNULL)
        err = out.stderr.strip()
        assert out.returncode == 2 and "\n" not in err and "Traceback" not in err, out.stderr
        assert "needs the secrets GPUOPS_API_KEY, GPUOPS_ADMIN_API_KEY, GPUOPS_SSL_KEYFILE_PASSWORD, HF_TOKEN" in err, err
        assert str(unit) in err
        nothing_secret(out.stdout + out.stderr, "the refusal")
        status = subprocess.run([*run, "status", "--json"], capture_output=True, text=True, env=env, timeout=60)
        assert name not in status.stdout  # nothing recorded
        assert not (ssh_user_home() / ".local/state/gpuops/deployments" / name).exists()
    finally:
        sim.shutdown()


def test_a_plan_holding_a_secret_value_is_refused_before_anything_changes(world, tmp_path):
    """A plan JSON written by hand (or an older gpuops') with `--api-key VALUE` in its argv: deploy
    refuses it (exit 2) without showing the value; nothing is recorded."""
    make, env = world
    cfg, sim = make("ok")
    name = f"literal{os.getpid()}"
    doc = make_plan(name, argv=["--model-path", "Qwen/Qwen3-8B", f"--api-key={KEY}"]).to_json()
    plan_file = tmp_path / "p.json"
    plan_file.write_text(json.dumps(doc))
    try:
        out = subprocess.run([GPUOPS, "--config", str(cfg), "deploy", str(plan_file), "--host", "gpu1", "--yes"],
                             capture_output=True, text=True, env=env, timeout=120, stdin=subprocess.DEVNULL)
        err = out.stderr.strip()
        assert out.returncode == 2 and "\n" not in err, out.stderr
        assert "--api-key" in err and "command line" in err and "--like" in err, err
        nothing_secret(out.stdout + out.stderr, "the refusal")
        status = subprocess.run([GPUOPS, "--config", str(cfg), "status"], capture_output=True, text=True, env=env,
                                timeout=60)
        assert name not in status.stdout
    finally:
        sim.shutdown()


@pytest.mark.parametrize("text, shown", [
    ("python -m sglang.launch_server --admin-api-key adm-1 --ssl-keyfile-password pw-2 --api-key k-3",
     "python -m sglang.launch_server --admin-api-key *** --ssl-keyfile-password *** --api-key ***"),
    ("--admin-api-key=adm-1 --ssl-keyfile-password=pw-2", "--admin-api-key=*** --ssl-keyfile-password=***"),
    ("server_args={'admin_api_key': 'adm-1', 'ssl_keyfile_password': 'pw-2', 'api_key': None}",
     "server_args={'admin_api_key': '***', 'ssl_keyfile_password': '***', 'api_key': None}"),
    ("ServerArgs(admin_api_key='adm-1', ssl_keyfile_password=None)",
     "ServerArgs(admin_api_key='***', ssl_keyfile_password=None)"),
])
def test_a_server_started_by_hand_shows_no_secret_flag(text, shown):
    """What gpuops shows of a server it did not start (its command line, its server_args line):
    SGLang's other secret flags are masked as --api-key is."""
    from gpuops.core.redact import _redact_everywhere, redact

    assert redact(text) == shown == _redact_everywhere(text)
