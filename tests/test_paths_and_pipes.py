"""Path arguments refused before use (one line, exit 2, nothing written) and output piped into a
reader that goes away (`gpuops ... | head -1`: exit 141, no traceback). Real CLI subprocesses, real
files in tmp dirs."""

from __future__ import annotations

import fcntl
import json
import os
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

from gpuops.core.deploy.store import Store
from gpuops.core.paths import NAME_MAX, PATH_MAX, check_path, show_path
from gpuops.core.planning.model_facts import validate_model_ref
from gpuops.sim.host import SYSTEM_DIRS, check_setup_dir, is_simhost_dir
from tests.plans import make_plan

GPUOPS = str(Path(sys.executable).with_name("gpuops"))
DATA = Path(__file__).parent / "data"
LONG = "/" + "a" * 20_000  # over PATH_MAX
LONG_PART = "/tmp/" + "b" * (NAME_MAX + 1)  # a component over NAME_MAX
NEWLINE = "/tmp/gpuops-x\ny"
OFFLINE = ("--gpus", "8", "--gpu-memory", "80")


@pytest.fixture
def env(tmp_path) -> dict:
    """An operator environment of its own: config, state and HOME in tmp_path."""
    home = tmp_path / "home"
    home.mkdir()
    e = dict(os.environ, XDG_CONFIG_HOME=str(tmp_path / "cfg"), XDG_STATE_HOME=str(tmp_path / "state"),
             HOME=str(home), HF_HUB_OFFLINE="1")
    e.pop("GPUOPS_CONFIG", None)
    e.pop("SSH_AUTH_SOCK", None)
    return e


def gpuops(*args: str, env: dict, timeout: float = 60) -> subprocess.CompletedProcess:
    return subprocess.run([GPUOPS, *args], capture_output=True, text=True, env=env, timeout=timeout)


def refused(out: subprocess.CompletedProcess, *needles: str) -> str:
    """Exit 2, nothing on stdout, exactly one short line on stderr (no traceback) holding NEEDLES."""
    err = out.stderr
    assert out.returncode == 2, (out.returncode, err[-2000:])
    assert err.count("\n") == 1 and err.endswith("\n") and err.startswith("gpuops: "), err[-2000:]
    assert "Traceback" not in err and len(err) < 400, err[-2000:]
    assert out.stdout == ""
    for needle in needles:
        assert needle in err, err
    return err


def tree(path: Path) -> list[str]:
    """Everything under PATH (names relative to it), to compare before and after."""
    return sorted(str(p.relative_to(path)) for p in path.rglob("*"))


@pytest.fixture
def model_dir(tmp_path) -> Path:
    d = tmp_path / "models" / "qwen"
    d.mkdir(parents=True)
    shutil.copy(DATA / "configs" / "qwen3_5__Qwen3.5-122B-A10B.json", d / "config.json")
    return d


# ------------------------------------------------------------------ the shared check


def test_check_path_refuses_the_absurd_in_one_line():
    assert check_path("/models/x", "p") == "/models/x"
    assert check_path("rel/../x.json", "p") == "rel/../x.json"  # '..' allowed unless asked
    ok_part = "/tmp/" + "c" * NAME_MAX
    assert check_path(ok_part, "p") == ok_part
    ok_len = ("/" + "/".join(["d" * 200] * 21))[:PATH_MAX - 1]
    assert len(ok_len) == PATH_MAX - 1
    assert check_path(ok_len, "p") == ok_len
    for bad, needle in [
        ("", "empty"),
        ("/tmp/a\nb", r"'\n'"), ("/tmp/a\rb", r"'\r'"), ("/tmp/a\x1b[31mb", r"'\x1b'"), ("/tmp/a\x7fb", r"'\x7f'"),
        ("/tmp/a\u2028b", r"'\u2028'"), ("/tmp/a\u202eb", r"'\u202e'"), ("/tmp/a\udcffb", r"'\udcff'"),
        (LONG, "PATH_MAX"), (ok_len + "e", "PATH_MAX"), (LONG_PART, "NAME_MAX"),
    ]:
        with pytest.raises(ValueError) as err:
            check_path(bad, "--thing")
        msg = str(err.value)
        assert msg.startswith("--thing: ") and needle in msg and len(msg) < 300, msg
        assert msg.isascii() and msg.isprintable(), msg  # shown escaped: one line on any terminal
    with pytest.raises(ValueError, match="canonical path"):
        check_path("/a/b/../c", "p", dotdot=False)
    assert check_path("/a/b..c/..d", "p", dotdot=False) == "/a/b..c/..d"  # not a '..' segment
    assert show_path("x" * 500).endswith("(500 characters)") and len(show_path("x" * 500)) < 120


def test_validate_model_ref_paths():
    assert validate_model_ref("/models/x") == "/models/x"
    assert validate_model_ref("/models//x/./y/") == "/models/x/y"  # canonicalised
    for bad, needle in [("/models/../etc/x", "canonical path"), ("/models/x/..", "canonical path"),
                        (LONG, "PATH_MAX"), ("/m/" + "x" * 300, "NAME_MAX"), ("/m/a\nb", r"'\n'"),
                        ("owner/na\nme", r"\n")]:
        with pytest.raises(ValueError) as err:
            validate_model_ref(bad)
        assert needle in str(err.value) and "\n" not in str(err.value) and len(str(err.value)) < 300


# ------------------------------------------------------------------ local model paths


def test_model_path_with_dotdot_is_refused(env, model_dir):
    (model_dir.parent / "sub").mkdir()
    climbing = str(model_dir.parent / "sub" / ".." / "qwen")
    assert Path(climbing, "config.json").is_file()  # it does reach a model
    refused(gpuops("plan", climbing, *OFFLINE, env=env), "MODEL", "'..'", "canonical path")
    store_before = tree(Path(env["XDG_STATE_HOME"])) if Path(env["XDG_STATE_HOME"]).exists() else []
    refused(gpuops("deploy", climbing, "--host", "localhost", "--yes", env=env), "canonical path")
    assert (tree(Path(env["XDG_STATE_HOME"])) if Path(env["XDG_STATE_HOME"]).exists() else []) == store_before
    # the canonical one plans, and a trailing slash is collapsed
    out = gpuops("plan", str(model_dir) + "/", *OFFLINE, "--json", env=env)
    assert out.returncode == 0, out.stderr
    assert json.loads(out.stdout)["model"]["id"] == str(model_dir)


@pytest.mark.parametrize("bad,needle", [(LONG, "PATH_MAX"), (LONG_PART, "NAME_MAX"), (NEWLINE, r"'\n'")])
def test_absurd_model_path_is_one_line(env, bad, needle):
    refused(gpuops("plan", bad, *OFFLINE, env=env), "MODEL", needle)
    refused(gpuops("deploy", bad, "--host", "localhost", env=env), "MODEL", needle)


# ------------------------------------------------------------------ every other path argument


def _path_cases(tmp: Path, bad: str) -> list[tuple[str, ...]]:
    return [
        ("triage", bad),
        ("plan", "Qwen/Qwen3-8B", *OFFLINE, "--like", bad),
        ("plan", "Qwen/Qwen3-8B", *OFFLINE, "--download-dir", bad),
        ("deploy", bad + ".json", "--host", "localhost"),
        ("--config", bad, "hosts"),
        ("bench", "import", bad),
        ("bench", "export", "1", "--format", "md", "-o", bad),
        ("models", "rm", bad, "--host", "localhost", "--yes"),
        ("sim", "setup", str(tmp / "sim"), "--sglang-venv", bad),
        ("sim", "setup", bad),
    ]


@pytest.mark.parametrize("kind", ["long", "long-part", "newline", "escape"])
def test_every_path_argument_refuses_the_absurd(env, tmp_path, kind):
    bad, needle = {"long": (LONG, "PATH_MAX"), "long-part": (LONG_PART, "NAME_MAX"),
                   "newline": (str(tmp_path / "x\ny"), r"'\n'"),
                   "escape": (str(tmp_path / "x\x1b]0;pwned\x07y"), r"'\x1b'")}[kind]
    before = tree(tmp_path)
    for argv in _path_cases(tmp_path, bad):
        refused(gpuops(*argv, env=env), needle)
    assert tree(tmp_path) == before  # nothing written anywhere (no store, no sim, no -o file)


def test_paths_that_must_not_climb(env, tmp_path):
    refused(gpuops("models", "rm", "/models/../etc", "--host", "localhost", "--yes", env=env), "canonical path")
    refused(gpuops("plan", "Qwen/Qwen3-8B", *OFFLINE, "--download-dir", "/srv/../etc", env=env), "'..'")
    # files the operator hands in may be relative to anywhere: refused only because they are missing
    (tmp_path / "w").mkdir()
    out = gpuops("triage", str(tmp_path / "w" / ".." / "nope.log"), env=env)
    assert out.returncode == 2 and "no such file" in out.stderr


# ------------------------------------------------------------------ sim setup DIR


def test_sim_setup_dotdot_escape_writes_nothing(env, tmp_path):
    # DIR/../.. resolves into another folder (as DIR/../../../etc did into /etc)
    start = tmp_path / "a" / "b"
    start.mkdir(parents=True)
    victim = tmp_path / "victim"
    victim.mkdir()
    climbing = str(start) + "/../../victim"
    assert os.path.abspath(climbing) == str(victim)
    before = tree(tmp_path)
    refused(gpuops("sim", "setup", climbing, env=env), "'..'", "canonical path")
    assert tree(tmp_path) == before and not any(victim.iterdir()) and not any(start.iterdir())
    with pytest.raises(ValueError, match="canonical path"):
        check_setup_dir(climbing)


def test_sim_setup_refuses_a_folder_that_holds_something_else(env, tmp_path):
    d = tmp_path / "stuff"
    d.mkdir()
    (d / "notes.txt").write_text("mine\n")
    before, parent_before = tree(d), tree(tmp_path)
    refused(gpuops("sim", "setup", str(d), env=env), "not empty", "not a simulated host")
    assert tree(d) == before and tree(tmp_path) == parent_before
    f = tmp_path / "file"
    f.write_text("x")
    refused(gpuops("sim", "setup", str(f), env=env), "not a directory")
    assert f.read_text() == "x"


def test_sim_setup_runs_again_on_its_own_directory_and_into_an_empty_one(env, tmp_path):
    d = tmp_path / "sim"
    out = gpuops("sim", "setup", str(d), "--gpus", "1", env=env)
    assert out.returncode == 0, out.stderr
    assert is_simhost_dir(d)
    again = gpuops("sim", "setup", str(d), "--gpus", "2", "--scenario", "kv-cache-oom", env=env)
    assert again.returncode == 0, again.stderr
    assert json.loads((d / "state" / "sim.json").read_text())["scenario"] == "kv-cache-oom"
    empty = tmp_path / "empty"
    empty.mkdir()
    assert gpuops("sim", "setup", str(empty), "--gpus", "1", env=env).returncode == 0
    assert is_simhost_dir(empty)


def test_sim_setup_refuses_home_itself(env):
    home = Path(env["HOME"])
    assert not any(home.iterdir())  # empty: only the HOME rule refuses it
    refused(gpuops("sim", "setup", str(home), env=env), "HOME")
    assert not any(home.iterdir())
    assert gpuops("sim", "setup", str(home / "sim"), "--gpus", "1", env=env).returncode == 0


def test_sim_setup_refuses_system_locations(env, tmp_path):
    # /proc cannot be written even if the check failed: safe to run through the CLI
    refused(gpuops("sim", "setup", "/proc", env=env), "system location")
    refused(gpuops("sim", "setup", "/proc/gpuops-sim", env=env), "system location")
    # the others only through the check itself, which reads and never writes
    for d in ["/", "/etc", "/usr", "/bin", "/lib", "/var", "/boot", "/proc", "/sys", "/dev", "/etc/gpuops-sim",
              "/usr/local/sim", "//etc", "/etc/", "/./etc"]:
        with pytest.raises(ValueError, match="system location") as err:
            check_setup_dir(d)
        assert "\n" not in str(err.value)
    assert {"/", "/etc", "/usr", "/bin", "/lib", "/var", "/boot", "/proc", "/sys", "/dev"} <= set(SYSTEM_DIRS)
    link = tmp_path / "innocent"
    link.symlink_to("/etc")
    with pytest.raises(ValueError, match="system location"):
        check_setup_dir(link)
    assert check_setup_dir(tmp_path / "new") == tmp_path / "new" and not (tmp_path / "new").exists()


# ------------------------------------------------------------------ broken pipes

F_SETPIPE_SZ = 1031  # fcntl.F_SETPIPE_SZ (Linux)


def pipe_run(argv: list[str], env: dict, *, close_at_once: bool = False) -> tuple[int, bytes, str]:
    """Run gpuops with stdout into a pipe (4 KiB) read like `head -1` reads it: one line, then the
    read end closed while gpuops still has more to write (close_at_once: before it writes at all)."""
    r, w = os.pipe()
    fcntl.fcntl(w, getattr(fcntl, "F_SETPIPE_SZ", F_SETPIPE_SZ), 4096)
    if close_at_once:
        os.close(r)
    proc = subprocess.Popen([GPUOPS, *argv], stdout=w, stderr=subprocess.PIPE, env=env)
    os.close(w)
    line = b""
    if not close_at_once:
        while not line.endswith(b"\n"):
            ch = os.read(r, 1)
            if not ch:
                break
            line += ch
        os.close(r)
    _out, err = proc.communicate(timeout=120)
    return proc.returncode, line, err.decode(errors="replace")


def quiet_sigpipe(result: tuple[int, bytes, str]) -> None:
    rc, line, err = result
    assert line, "nothing was printed before the pipe closed"
    assert rc == 141, (rc, err[-2000:])
    assert "Traceback" not in err and "BrokenPipeError" not in err and "Exception ignored" not in err, err[-2000:]


@pytest.fixture
def bench_runs(env) -> dict:
    for _ in range(2):
        out = gpuops("bench", "import", str(DATA / "bench" / "bench_serving-0.5.23.jsonl"), env=env)
        assert out.returncode == 0, out.stderr
    return env


def test_plan_piped_to_head(env, model_dir):
    out = gpuops("plan", str(model_dir), *OFFLINE, env=env)
    assert out.returncode == 0 and len(out.stdout.encode()) > 2 * 4096 and out.stdout.count("\n") > 20
    quiet_sigpipe(pipe_run(["plan", str(model_dir), *OFFLINE], env))  # rich's Console
    quiet_sigpipe(pipe_run(["plan", str(model_dir), *OFFLINE, "--json"], env))


def test_bench_compare_json_piped_to_head(bench_runs):
    out = gpuops("bench", "compare", "1", "2", "--json", env=bench_runs)
    assert out.returncode == 0 and len(out.stdout) > 4096 and out.stdout.count("\n") > 20
    quiet_sigpipe(pipe_run(["bench", "compare", "1", "2", "--json"], bench_runs))
    quiet_sigpipe(pipe_run(["bench", "show", "1", "--json"], bench_runs))


def test_status_piped_to_head(env, monkeypatch):
    monkeypatch.setenv("XDG_STATE_HOME", env["XDG_STATE_HOME"])
    store = Store()
    try:
        for i in range(300):
            store.add_deployment("localhost", make_plan(f"dep-{i:03d}", model="Qwen/Qwen3-8B"))
    finally:
        store.close()
    out = gpuops("status", env=env)
    assert out.returncode == 0 and out.stdout.count("\n") == 300 and len(out.stdout) > 3 * 4096, out.stderr
    quiet_sigpipe(pipe_run(["status"], env))
    quiet_sigpipe(pipe_run(["status", "--json"], env))


def test_reader_gone_before_anything_is_written(env):
    # the whole output still in the buffer when the reader is gone: the flush fails, quietly
    log = str(DATA / "logs" / "crash-spec-config-0.5.10.log")
    rc, _line, err = pipe_run(["triage", log], env, close_at_once=True)
    assert rc == 141 and "Traceback" not in err and "Exception ignored" not in err, (rc, err)
    rc, _line, err = pipe_run(["triage", log, "--json"], env, close_at_once=True)
    assert rc == 141 and "Traceback" not in err and "Exception ignored" not in err, (rc, err)
    # argparse's --help drops a failed write itself: no traceback, whatever the status
    rc, _line, err = pipe_run(["--help"], env, close_at_once=True)
    assert rc in (0, 141) and "Traceback" not in err and "Exception ignored" not in err, (rc, err)
