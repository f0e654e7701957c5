"""Hostile input on the command line and in config.toml: one line on stderr (exit 2), no
traceback, nothing written."""

from __future__ import annotations

import subprocess

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
