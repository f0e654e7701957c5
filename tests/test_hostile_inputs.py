"""Hostile input on the command line and in config.toml: one line on stderr (exit 2), no
traceback, nothing written."""

from __future__ import annotations

import os
import subprocess
from pathlib import Path

import pytest

from tests.test_cli import GPUOPS

NAMES = ["a b", "$(id)", "`id`", 'x"y', "x'y", "[hosts.evil]", "a\nb", "a\x1b]0;pwned\x07b", "UPPER", "../up",
         "a;rm -rf ~", "x" * 64, "é", ""]


def run(*args: str, env: dict | None = None) -> subprocess.CompletedProcess:
    return subprocess.run([GPUOPS, *args], capture_output=True, text=True, timeout=60, stdin=subprocess.DEVNULL,
                          env=env)


def one_line(res: subprocess.CompletedProcess) -> str:
    err = res.stderr.strip()
    assert "Traceback" not in res.stderr and "\n" not in err and err.startswith("gpuops"), res.stderr[-2000:]
    return err


@pytest.mark.parametrize("name", NAMES, ids=range(len(NAMES)))
def test_sim_setup_refuses_a_hostile_name_before_writing_anything(tmp_path, name):
    target = tmp_path / "sim"
    res = run("sim", "setup", str(target), "--name", name)
    line = one_line(res)
    assert res.returncode == 2 and "--name" in line, line
    assert "\x1b" not in line and "\x07" not in line  # shown escaped
    assert not target.exists()  # checked before the folder was made


def test_sim_setup_with_a_good_name_still_writes_and_prints_its_block(tmp_path):
    res = run("sim", "setup", str(tmp_path / "sim"), "--name", "box-1", "--gpus", "1")
    assert res.returncode == 0, res.stderr
    assert res.stdout.startswith("[hosts.box-1]\n") and (tmp_path / "sim").is_dir()


def config_error(tmp_path: Path, text: str) -> str:
    cfg = tmp_path / "config.toml"
    cfg.write_text(text)
    env = dict(os.environ, XDG_STATE_HOME=str(tmp_path / "state"), XDG_CACHE_HOME=str(tmp_path / "cache"))
    env.pop("GPUOPS_CONFIG", None)
    res = run("--config", str(cfg), "hosts", env=env)
    line = one_line(res)
    assert res.returncode == 2, (res.returncode, line)
    assert line.startswith(f"gpuops: {cfg}"), line
    assert len(line) < 400, line
    return line


@pytest.mark.parametrize("host", ["x" * 100_000, "x" * 64, "a." * 130 + "b"], ids=["100k", "label-64", "name-261"])
def test_an_absurd_ssh_host_is_a_config_error(tmp_path, host):
    line = config_error(tmp_path, f'[hosts.a]\nssh = "root@{host}:22"\n')
    assert ":2: hosts.a.ssh: invalid ssh target" in line and f"{len(host)} characters long" in line, line


def test_a_long_but_valid_ssh_host_is_accepted(tmp_path):
    from gpuops.core.config import SshTarget

    host = ".".join(["a" * 63] * 3) + ".example"  # 200 characters, every label within 63
    assert SshTarget.parse(f"me@{host}:2222").host == host


@pytest.mark.parametrize("depth", [5000, 950])
def test_a_deeply_nested_array_is_a_config_error(tmp_path, depth):
    line = config_error(tmp_path, "[hosts.a]\nlocal = true\nmodel_dirs = " + "[" * depth + "]" * depth + "\n")
    assert "nested too deeply" in line, line
