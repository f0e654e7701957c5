"""The `gpuops` command line, run as the operator runs it: a subprocess."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

GPUOPS = str(Path(sys.executable).with_name("gpuops"))


def gpuops(*args: str, env: dict | None = None, timeout: float = 60) -> subprocess.CompletedProcess:
    return subprocess.run([GPUOPS, *args], capture_output=True, text=True, env=env, timeout=timeout)


@pytest.fixture
def env(tmp_path, monkeypatch) -> dict:
    """A clean operator environment: no config, empty state, a HOME of its own."""
    home = tmp_path / "home"
    home.mkdir(exist_ok=True)
    e = dict(os.environ, XDG_CONFIG_HOME=str(tmp_path / "cfg"), XDG_STATE_HOME=str(tmp_path / "state"))
    e.setdefault("HOME", str(home))
    e.pop("GPUOPS_CONFIG", None)
    e.pop("SSH_AUTH_SOCK", None)
    return e


def write_config(tmp_path: Path, text: str) -> Path:
    path = tmp_path / "config.toml"
    path.write_text(text)
    return path


def test_version():
    out = gpuops("--version")
    assert out.returncode == 0 and out.stdout.startswith("gpuops ") and out.stdout.split()[1][0].isdigit()


def test_the_dashboards_start_leaves_slow_modules_unread_and_the_collector_on():
    """What `gpuops` reads before its first frame (the command line, its parser, the TUI's modules)
    imports none of the modules only later steps need (SSH, HTTP, the Hub, NVML, the package
    metadata --version reads), and the garbage collector that was off during the TUI's imports is
    on again after them, with what they made set aside (frozen): not a young generation of tens of
    thousands of objects for its next collection to walk."""
    code = ("import gc, sys; import gpuops.cli.main as m, gpuops.tui.app; young, frozen = gc.get_count()[0], "
            "gc.get_freeze_count(); m.build_parser(); "
            "print(sorted(n for n in ('asyncssh', 'httpx', 'huggingface_hub', 'pynvml', 'importlib.metadata') "
            "if n in sys.modules), gc.isenabled(), young, frozen)")
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=60)
    assert out.returncode == 0, out.stderr
    modules, enabled, young, frozen = out.stdout.split()
    assert (modules, enabled) == ("[]", "True")
    assert int(young) < 1000 and int(frozen) > 20_000, (young, frozen)


@pytest.mark.parametrize("argv", [
    [], ["--readonly"], ["--config", "inv.toml"], ["--config=inv.toml"], ["--readonly", "--config", "a b.toml"],
    ["--config", "x.toml", "--readonly", "--config", "y.toml"], ["--config", ""],
])
def test_the_dashboards_command_line_reads_as_the_whole_parser_reads_it(argv):
    """`gpuops` with only the shared options skips building every verb's parser; what it reads is
    what the whole parser reads, and the verb modules are not imported for it."""
    from gpuops.cli.main import build_parser, dashboard_args

    fast = dashboard_args(argv)
    assert fast is not None and vars(fast) == vars(build_parser().parse_args(argv))
    code = ("import sys; import gpuops.cli.main as m; m.dashboard_args(sys.argv[1:]); "
            "print(sorted(n for n in ('gpuops.cli.bench', 'gpuops.cli.plan', 'gpuops.cli.deploy', 'gpuops.cli.models') "
            "if n in sys.modules))")
    out = subprocess.run([sys.executable, "-c", code, *argv], capture_output=True, text=True, timeout=60)
    assert out.returncode == 0 and out.stdout.split() == ["[]"], out.stderr


@pytest.mark.parametrize("argv", [
    ["hosts"], ["--readonly", "gpus"], ["--help"], ["--version"], ["--config"], ["--config", "--readonly"],
    ["--config="], ["--read"], ["--readonly", "extra"], ["-h"], ["--config", "f", "plan", "m"],
])
def test_any_other_command_line_goes_to_the_whole_parser(argv):
    from gpuops.cli.main import dashboard_args

    assert dashboard_args(argv) is None


def test_a_verbs_bad_input_still_exits_2_with_one_line(env):
    out = gpuops("plan", "org/model", "--gpu-ids", "zero", env=env)
    assert out.returncode == 2 and out.stderr.count("\n") == 1 and "--gpu-ids" in out.stderr, out.stderr
    out = gpuops("bench", "show", "x", env=env)
    assert out.returncode == 2 and out.stderr.startswith("gpuops: RUN is a run id"), out.stderr


def test_hosts_json_default_is_localhost(env):
    out = gpuops("hosts", "--json", env=env)
    assert out.returncode == 0, out.stderr
    doc = json.loads(out.stdout)
    assert doc["schema"] == 1 and [h["name"] for h in doc["hosts"]] == ["localhost"]
    h = doc["hosts"][0]
    assert set(h) == {"name", "kind", "address", "reachable", "cpu_percent", "mem_total_bytes",
                      "mem_used_bytes", "disks", "error", "hint"}
    assert h["kind"] == "local" and h["reachable"] is True and h["error"] is None
    assert isinstance(h["mem_total_bytes"], int) and 0 < h["mem_used_bytes"] < h["mem_total_bytes"]
    assert 0 <= h["cpu_percent"] <= 100
    root = next(d for d in h["disks"] if d["mount"] == "/")
    st = os.statvfs("/")
    assert root["total_bytes"] == st.f_blocks * st.f_frsize


def test_gpus_json_without_a_driver_is_an_entry_with_a_hint(env):
    out = gpuops("gpus", "--json", env=env)
    assert out.returncode == 0, out.stderr
    doc = json.loads(out.stdout)
    entry = doc["hosts"][0]
    assert set(entry) == {"name", "error", "hint", "driver_version", "gpus"}
    if entry["error"] is None:  # a machine with GPUs
        assert entry["gpus"] and entry["driver_version"]
    else:
        assert entry["error"] == "NVML library not found" and "driver" in entry["hint"]
        assert entry["gpus"] == [] and "Traceback" not in out.stderr


def test_unreachable_host_is_reported_not_fatal(env, tmp_path):
    cfg = write_config(tmp_path, '[hosts.deadbox]\nssh = "root@127.0.0.1:1"\n\n[hosts.localhost]\nlocal = true\n')
    out = gpuops("--config", str(cfg), "hosts", "--json", env=env)
    assert out.returncode == 0, out.stderr
    by_name = {h["name"]: h for h in json.loads(out.stdout)["hosts"]}
    dead = by_name["deadbox"]
    assert dead["reachable"] is False and dead["kind"] == "ssh" and dead["address"] == "root@127.0.0.1:1"
    assert "cannot connect" in dead["error"] and dead["hint"]
    assert by_name["localhost"]["reachable"] is True
    out = gpuops("gpus", "--json", "--config", str(cfg), "--host", "deadbox", env=env)
    assert out.returncode == 0
    entry = json.loads(out.stdout)["hosts"][0]
    assert entry["name"] == "deadbox" and entry["error"] and entry["gpus"] == []


def test_unknown_host_is_exit_2(env):
    out = gpuops("gpus", "--host", "nope", "--json", env=env)
    assert out.returncode == 2 and out.stdout == ""
    assert out.stderr.strip() == "gpuops: unknown host 'nope' (known: localhost)"


def test_broken_config_is_one_line_and_exit_2(env, tmp_path):
    cfg = write_config(tmp_path, '[hosts.gpu1]\nssh = "root@10.0.0.5"\ngpu_ids = "0,1"\n')
    for args in (["--config", str(cfg), "hosts"], ["hosts", "--config", str(cfg)]):
        out = gpuops(*args, env=env)
        assert out.returncode == 2
        lines = out.stderr.strip().splitlines()
        assert len(lines) == 1 and lines[0].startswith(f"gpuops: {cfg}:3: hosts.gpu1.gpu_ids")
    out = gpuops("hosts", env=dict(env, GPUOPS_CONFIG=str(tmp_path / "missing.toml")))
    assert out.returncode == 2 and "missing.toml" in out.stderr


def test_hosts_over_ssh_with_the_operators_ssh_config(env, sshd, ssh_home, tmp_path):
    """`ssh = "simbox"`: an alias resolved by ~/.ssh/config, default key and known_hosts."""
    cfg = write_config(tmp_path, '[hosts.box]\nssh = "simbox"\n')
    out = gpuops("--config", str(cfg), "hosts", "--json", env=dict(env, HOME=str(ssh_home)))
    assert out.returncode == 0, out.stderr
    box = json.loads(out.stdout)["hosts"][0]
    assert box["reachable"] is True and box["error"] is None and box["mem_total_bytes"] > 0


def test_unknown_host_key_over_cli_names_the_fingerprint(env, sshd, ssh_home, tmp_path):
    (ssh_home / ".ssh" / "known_hosts").write_text("")
    cfg = write_config(tmp_path, '[hosts.box]\nssh = "simbox"\n')
    out = gpuops("--config", str(cfg), "hosts", "--json", env=dict(env, HOME=str(ssh_home)))
    assert out.returncode == 0
    box = json.loads(out.stdout)["hosts"][0]
    fp = subprocess.run(["ssh-keygen", "-lf", f"{sshd.host_key}.pub"], capture_output=True, text=True).stdout.split()[1]
    assert box["reachable"] is False and fp in box["error"] and "ssh-keyscan" in box["hint"]
    assert (ssh_home / ".ssh" / "known_hosts").read_text() == ""


def test_no_library_warning_reaches_the_output_of_an_ssh_verb(env, sshd, ssh_home, tmp_path):
    """cryptography 51 deprecates DSA, and asyncssh's import printed about ten lines of warnings on
    every SSH verb, breaking one-line errors and JSON read beside stderr. With every warning turned
    on (PYTHONWARNINGS=always, as a developer's shell may have it), stderr stays empty."""
    cfg = write_config(tmp_path, '[hosts.box]\nssh = "simbox"\n')
    out = gpuops("--config", str(cfg), "hosts", "--json",
                 env=dict(env, HOME=str(ssh_home), PYTHONWARNINGS="always"))
    assert out.returncode == 0, out.stderr
    assert out.stderr == ""
    assert json.loads(out.stdout)["hosts"][0]["reachable"] is True


def test_the_warning_policy_drops_a_librarys_warnings_and_keeps_gpuops_own():
    code = ("import warnings\n"
            "from gpuops.cli.main import quiet_library_warnings\n"
            "quiet_library_warnings()\n"
            "warnings.warn_explicit('from-a-library', DeprecationWarning, 'misc.py', 32, module='asyncssh.crypto.misc')\n"
            "warnings.warn_explicit('from-a-library-too', UserWarning, 'x.py', 1, module='gpuopsfoo')\n"
            "warnings.warn_explicit('from-gpuops', UserWarning, 'watch.py', 9, module='gpuops.core.deploy.watch')\n")
    out = subprocess.run([sys.executable, "-W", "always", "-c", code], capture_output=True, text=True, timeout=60)
    assert out.returncode == 0, out.stderr
    assert "from-a-library" not in out.stderr and "from-gpuops" in out.stderr
