"""Tests for gpuops.core.config: real files in tmp_path, real environment variables."""

from __future__ import annotations

import json
import os
import textwrap
from pathlib import Path

import pytest

from gpuops.core.config import (
    PHASES,
    ConfigError,
    HostConfig,
    SshTarget,
    default_config_path,
    default_inventory,
    load_inventory,
    parse_inventory,
    resolve_config_path,
    validate_abs_path,
    validate_env_name,
    validate_env_value,
    validate_host_name,
)

SRC = "/etc/gpuops.toml"

FULL = """\
# the fleet
[hosts.gpu1]
ssh = "root@10.0.0.5:2222"
python = "/opt/sglang/bin/python"
model_dirs = ["/shared/models", "/nvme//models/"]
forbidden_paths = ["/data"]
gpu_ids = [0, 1, 2, 3]
serve_host = "0.0.0.0"
launcher = "process"
journal_dir = "/var/log/journal"
first_port = 31000
env = { HF_HOME = "/shared/hf", PATH = "/opt/x/bin:/opt/y/bin:$PATH" }

[hosts."gpu2"]
local = true

[hosts.box-3]
ssh = "box3"

[stall]
dist_init = 120
download = 30.5

[bench.profiles.smoke]
num_prompts = 16
concurrencies = [1, 4, 16]
request_rate = "inf"
random_range_ratio = 0.5
dataset_name = "random"
dataset_path = "/data/sets//sharegpt.json"
warmup_requests = 0
backend = "sglang-oai"
"""


@pytest.fixture(autouse=True)
def _clean_env(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> Path:
    """No config from the machine running the tests: an empty XDG dir, no GPUOPS_CONFIG and no
    GPUOPS_FIRST_PORT (the test process's own, conftest)."""
    xdg = tmp_path / "xdg"
    xdg.mkdir()
    monkeypatch.setenv("XDG_CONFIG_HOME", str(xdg))
    monkeypatch.delenv("GPUOPS_CONFIG", raising=False)
    monkeypatch.delenv("GPUOPS_FIRST_PORT", raising=False)
    return xdg


def write(path: Path, text: str) -> Path:
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(text)
    return path


def error_of(text: str) -> ConfigError:
    with pytest.raises(ConfigError) as info:
        parse_inventory(textwrap.dedent(text), SRC)
    err = info.value
    assert "\n" not in str(err)
    assert err.path == SRC
    return err


# --- round trip and defaults


def test_full_config_round_trip(tmp_path: Path) -> None:
    path = write(tmp_path / "fleet.toml", FULL)
    inv = load_inventory(str(path))

    assert inv.source == str(path)
    assert inv.names() == ["gpu1", "gpu2", "box-3"]
    gpu1 = inv.host("gpu1")
    assert gpu1 == HostConfig(
        name="gpu1",
        local=False,
        ssh=SshTarget(user="root", host="10.0.0.5", port=2222),
        python="/opt/sglang/bin/python",
        model_dirs=("/shared/models", "/nvme/models"),
        forbidden_paths=("/data",),
        gpu_ids=(0, 1, 2, 3),
        serve_host="0.0.0.0",
        launcher="process",
        journal_dir="/var/log/journal",
        env=(("HF_HOME", "/shared/hf"), ("PATH", "/opt/x/bin:/opt/y/bin:$PATH")),
        first_port=31000,
    )
    assert gpu1.address == "root@10.0.0.5:2222"

    gpu2 = inv.host("gpu2")
    assert gpu2.local and gpu2.ssh is None and gpu2.address == "local"
    assert gpu2.gpu_ids is None and gpu2.launcher == "systemd" and gpu2.serve_host == "127.0.0.1"
    assert gpu2.first_port == 30000
    box = inv.host("box-3")
    assert box.ssh == SshTarget(user=None, host="box3", port=None)
    assert box.address == "box3"

    assert inv.stall == {"dist_init": 120.0, "download": 30.5}
    assert inv.bench_profiles == {
        "smoke": {
            "num_prompts": 16,
            "concurrencies": [1, 4, 16],
            "request_rate": "inf",
            "random_range_ratio": 0.5,
            "dataset_name": "random",
            "dataset_path": "/data/sets/sharegpt.json",
            "warmup_requests": 0,
            "backend": "sglang-oai",
        }
    }
    profile = inv.bench_profile("smoke")
    assert profile.name == "smoke" and profile.settings["num_prompts"] == 16
    with pytest.raises(KeyError):
        inv.host("gpu9")
    with pytest.raises(KeyError):
        inv.bench_profile("nightly")


def test_no_file_gives_localhost(_clean_env: Path) -> None:
    assert resolve_config_path(None) == (_clean_env / "gpuops" / "config.toml", False)
    inv = load_inventory()
    assert inv == default_inventory()
    assert inv.source is None
    assert inv.names() == ["localhost"]
    assert inv.host("localhost").local is True
    assert inv.host("localhost").address == "local"
    assert inv.stall == {} and inv.bench_profiles == {}


def test_file_without_host_tables_gives_localhost() -> None:
    inv = parse_inventory("[hosts]\n[stall]\nweights = 600\n", SRC)
    assert inv.names() == ["localhost"]
    assert inv.host("localhost").local
    assert inv.stall == {"weights": 600.0}
    assert inv.source == SRC
    assert parse_inventory("", SRC).names() == ["localhost"]


def test_precedence_explicit_then_env_then_xdg(
    monkeypatch: pytest.MonkeyPatch, tmp_path: Path, _clean_env: Path
) -> None:
    xdg_file = write(_clean_env / "gpuops" / "config.toml", '[hosts.fromxdg]\nlocal = true\n')
    env_file = write(tmp_path / "env.toml", '[hosts.fromenv]\nlocal = true\n')
    arg_file = write(tmp_path / "arg.toml", '[hosts.fromarg]\nlocal = true\n')

    assert load_inventory().names() == ["fromxdg"]
    assert load_inventory().source == str(xdg_file)
    monkeypatch.setenv("GPUOPS_CONFIG", str(env_file))
    assert resolve_config_path(None) == (env_file, True)
    assert load_inventory().names() == ["fromenv"]
    assert resolve_config_path(str(arg_file)) == (arg_file, True)
    assert load_inventory(str(arg_file)).names() == ["fromarg"]


def test_xdg_unset_means_home_dot_config(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> None:
    monkeypatch.setenv("HOME", str(tmp_path))
    monkeypatch.delenv("XDG_CONFIG_HOME")
    assert default_config_path() == tmp_path / ".config" / "gpuops" / "config.toml"
    monkeypatch.setenv("XDG_CONFIG_HOME", "relative/dir")  # not absolute: ignored, as XDG says
    assert default_config_path() == tmp_path / ".config" / "gpuops" / "config.toml"


def test_explicit_missing_file_is_an_error(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> None:
    missing = tmp_path / "nope.toml"
    with pytest.raises(ConfigError) as info:
        load_inventory(str(missing))
    assert info.value.line is None
    assert str(info.value) == f"{missing}: config file not found"

    monkeypatch.setenv("GPUOPS_CONFIG", str(missing))
    with pytest.raises(ConfigError, match="config file not found"):
        load_inventory()


def test_unreadable_file(tmp_path: Path) -> None:
    folder = tmp_path / "conf.toml"
    folder.mkdir()
    with pytest.raises(ConfigError) as info:
        load_inventory(str(folder))
    assert info.value.line is None
    assert str(info.value).startswith(f"{folder}: cannot read: ")

    if os.geteuid() != 0:  # root reads anything
        locked = write(tmp_path / "locked.toml", "")
        locked.chmod(0)
        with pytest.raises(ConfigError, match="cannot read: Permission denied"):
            load_inventory(str(locked))


def test_xdg_default_that_is_a_directory_is_reported(_clean_env: Path) -> None:
    (_clean_env / "gpuops" / "config.toml").mkdir(parents=True)
    with pytest.raises(ConfigError, match="cannot read"):
        load_inventory()


def test_not_utf8_reports_the_line(tmp_path: Path) -> None:
    path = tmp_path / "bad.toml"
    path.write_bytes(b"[hosts.a]\nlocal = true\n# caf\xe9\n")
    with pytest.raises(ConfigError) as info:
        load_inventory(str(path))
    assert info.value.line == 3
    assert "not UTF-8" in str(info.value)


# --- TOML syntax


def test_toml_syntax_error_line() -> None:
    err = error_of(
        """\
        [hosts.gpu1]
        local = true
        gpu_ids = [0, 1
        python = "/x"
        """
    )
    assert err.line == 4
    assert str(err).startswith(f"{SRC}:4: invalid TOML: ")
    assert "(at line" not in str(err)


def test_toml_error_at_end_of_document() -> None:
    err = error_of("[hosts.a]\nssh =")
    assert err.line == 2
    assert str(err) == f"{SRC}:2: invalid TOML: Invalid value"


def test_duplicate_key_is_a_toml_error() -> None:
    err = error_of('[hosts.a]\nlocal = true\nlocal = true\n[stall]\n')
    assert err.line == 3 and "invalid TOML" in str(err)


# --- validation rules: exact line and key in the message


@pytest.mark.parametrize(
    ("text", "line", "needle"),
    [
        # unknown keys, with suggestions
        ("[hosts.a]\nlocal = true\n[hostz]\n", 3, "hostz: unknown key 'hostz' (did you mean 'hosts'?)"),
        (
            "[hosts.a]\nlocal = true\npyhton = '/usr/bin/python'\n",
            3,
            "hosts.a.pyhton: unknown key 'pyhton' (did you mean 'python'?)",
        ),
        ("[stall]\n\ndist_int = 5\n", 3, "stall.dist_int: unknown key 'dist_int' (did you mean 'dist_init'?)"),
        ("[bench]\nprofile = {}\n", 2, "bench.profile: unknown key 'profile' (did you mean 'profiles'?)"),
        (
            "[bench.profiles.p]\nnum_prompts = 1\nzzz = 2\n",
            3,
            "bench.profiles.p.zzz: unknown key 'zzz' (known: num_prompts,",
        ),
        # host name and ssh/local
        ("[hosts.GPU1]\nlocal = true\n", 1, 'hosts.GPU1: invalid name "GPU1"'),
        ("[hosts._a]\nlocal = true\n", 1, 'hosts._a: invalid name "_a"'),
        (f"[hosts.{'a' * 64}]\nlocal = true\n", 1, "at most 63 characters"),
        ("[hosts.a]\nlocal = true\nssh = 'x'\n", 3, "hosts.a.ssh: give either ssh or local = true, not both"),
        ("\n[hosts.a]\npython = '/x'\n", 2, "hosts.a: needs ssh ="),
        ("[hosts.a]\nlocal = false\n", 1, "hosts.a: needs ssh ="),
        ("[hosts.a]\nlocal = 'yes'\n", 2, 'hosts.a.local: expected true or false, got "yes"'),
        ("[hosts.a]\nssh = ''\n", 2, 'hosts.a.ssh: expected a non-empty string, got ""'),
        ("[hosts.a]\nssh = 'root@h; rm -rf /'\n", 2, 'hosts.a.ssh: invalid ssh target "root@h; rm -rf /"'),
        ("[hosts.a]\nssh = 'root@h:0'\n", 2, "hosts.a.ssh: invalid ssh target \"root@h:0\": port must be 1..65535"),
        ("[hosts.a]\nssh = 'h:70000'\n", 2, "port must be 1..65535"),
        ("[hosts.a]\nssh = '-oProxyCommand=x'\n", 2, "hosts.a.ssh: invalid ssh target"),
        ("[hosts.a]\nssh = '[1::2::3]:22'\n", 2, "hosts.a.ssh: invalid ssh target \"[1::2::3]:22\": bad IPv6 address"),
        ("[hosts.a]\nssh = '::1'\n", 2, "hosts.a.ssh: invalid ssh target"),
        # paths
        ("[hosts.a]\nlocal = true\npython = 'bin/python'\n", 3, "hosts.a.python: must be an absolute path"),
        ("[hosts.a]\nlocal = true\njournal_dir = '/var/../log'\n", 3, "hosts.a.journal_dir: \"/var/../log\" must not contain '..'"),
        ("[hosts.a]\nlocal = true\nmodel_dirs = '/m'\n", 3, 'hosts.a.model_dirs: expected a list of absolute paths, got "/m"'),
        (
            "[hosts.a]\nlocal = true\nmodel_dirs = [\n  '/ok',\n  '/a b',\n]\n",
            3,
            "hosts.a.model_dirs[1]: \"/a b\" contains ' '",
        ),
        ("[hosts.a]\nlocal = true\nforbidden_paths = ['~/x']\n", 3, "hosts.a.forbidden_paths[0]: must be an absolute path"),
        # gpu_ids
        (
            "[hosts.gpu1]\nlocal = true\n\n\n\n\ngpu_ids = \"0,1\"\n",
            7,
            'hosts.gpu1.gpu_ids: expected a non-empty list of GPU indices (integers >= 0), got "0,1"',
        ),
        ("[hosts.a]\nlocal = true\ngpu_ids = [0, true]\n", 3, "hosts.a.gpu_ids: expected a non-empty list"),
        ("[hosts.a]\nlocal = true\ngpu_ids = [-1]\n", 3, "hosts.a.gpu_ids: expected a non-empty list"),
        ("[hosts.a]\nlocal = true\ngpu_ids = [1.0]\n", 3, "hosts.a.gpu_ids: expected a non-empty list"),
        ("[hosts.a]\nlocal = true\ngpu_ids = []\n", 3, "hosts.a.gpu_ids: expected a non-empty list"),
        ("[hosts.a]\nlocal = true\ngpu_ids = [0, 1, 1]\n", 3, "hosts.a.gpu_ids: GPU index 1 is listed twice"),
        # serve_host, launcher
        ("[hosts.a]\nlocal = true\nserve_host = 'localhost'\n", 3, 'hosts.a.serve_host: expected an IP address such as "127.0.0.1" or "0.0.0.0", got "localhost"'),
        ("[hosts.a]\nlocal = true\nserve_host = 1\n", 3, "hosts.a.serve_host: expected an IP address"),
        ("[hosts.a]\nlocal = true\nlauncher = 'docker'\n", 3, 'hosts.a.launcher: expected "systemd" or "process", got "docker"'),
        # first_port
        ("[hosts.a]\nlocal = true\nfirst_port = 80\n", 3, "hosts.a.first_port: expected a port number 1024..65535, got 80"),
        ("[hosts.a]\nlocal = true\nfirst_port = 65536\n", 3, "hosts.a.first_port: expected a port number 1024..65535, got 65536"),
        ("[hosts.a]\nlocal = true\nfirst_port = '31000'\n", 3, 'hosts.a.first_port: expected a port number 1024..65535, got "31000"'),
        ("[hosts.a]\nlocal = true\nfirst_port = true\n", 3, "hosts.a.first_port: expected a port number 1024..65535, got true"),
        # env
        ("[hosts.a]\nlocal = true\nenv = 'x'\n", 3, 'hosts.a.env: expected a table, got "x"'),
        ("[hosts.a]\nlocal = true\nenv = { 1X = 'v' }\n", 3, 'hosts.a.env.1X: invalid environment variable name "1X"'),
        ("[hosts.a]\nlocal = true\n[hosts.a.env]\nOK = 'v'\nN = 5\n", 5, "hosts.a.env.N: environment variable value: expected a string, got 5"),
        ("[hosts.a]\nlocal = true\nenv = { X = \"a\\nb\" }\n", 3, 'hosts.a.env.X: environment variable value "a\\nb" contains a newline'),
        ("[hosts.a]\nlocal = true\nenv = { PATH = '/a:$PATH:/b' }\n", 3, "hosts.a.env.PATH: PATH may only be extended at the end"),
        ("[hosts.a]\nlocal = true\nenv = { PATH = 'bin:$PATH' }\n", 3, "hosts.a.env.PATH: must be an absolute path"),
        # stall
        ("[stall]\ndist_init = 0\n", 2, "stall.dist_init: expected a positive number of seconds, got 0"),
        ("[stall]\nweights = true\n", 2, "stall.weights: expected a positive number of seconds, got true"),
        ("[stall]\nweights = '60'\n", 2, 'stall.weights: expected a positive number of seconds, got "60"'),
        ("[stall]\nweights = inf\n", 2, "stall.weights: expected a positive number of seconds"),
        ("stall = 5\n", 1, "stall: expected a table, got 5"),
        # bench profiles
        ("[bench.profiles.Smoke]\nnum_prompts = 1\n", 1, 'bench.profiles.Smoke: invalid name "Smoke"'),
        ("[bench.profiles.p]\nnum_prompts = 0\n", 2, "bench.profiles.p.num_prompts: expected an integer > 0, got 0"),
        ("[bench.profiles.p]\nmax_concurrency = true\n", 2, "bench.profiles.p.max_concurrency: expected an integer > 0, got true"),
        ("[bench.profiles.p]\nconcurrencies = [1, 0]\n", 2, "bench.profiles.p.concurrencies: expected a non-empty list of integers > 0"),
        ("[bench.profiles.p]\nrequest_rate = 'fast'\n", 2, 'bench.profiles.p.request_rate: expected a number > 0 or "inf", got "fast"'),
        ("[bench.profiles.p]\nrequest_rate = -1.5\n", 2, "bench.profiles.p.request_rate: expected a number > 0"),
        ("[bench.profiles.p]\nrandom_range_ratio = 1.5\n", 2, "bench.profiles.p.random_range_ratio: expected a number from 0 to 1, got 1.5"),
        ("[bench.profiles.p]\ndataset_name = 'mmlu'\n", 2, 'bench.profiles.p.dataset_name: expected one of random-ids, random, sharegpt, custom, got "mmlu"'),
        ("[bench.profiles.p]\ndataset_path = 'data.json'\n", 2, "bench.profiles.p.dataset_path: must be an absolute path"),
        ("[bench.profiles.p]\neval_data_path = '/x/$(id)'\n", 2, "bench.profiles.p.eval_data_path: \"/x/$(id)\" contains '$'"),
        ("[bench.profiles.p]\nwarmup_requests = -1\n", 2, "bench.profiles.p.warmup_requests: expected an integer >= 0, got -1"),
        ("[bench.profiles.p]\nnum_examples = 2.0\n", 2, "bench.profiles.p.num_examples: expected an integer > 0, got 2.0"),
        ("[bench.profiles.p]\neval_name = ''\n", 2, "bench.profiles.p.eval_name: expected a non-empty one-line string"),
        ("[bench.profiles.p]\nbackend = 3\n", 2, "bench.profiles.p.backend: expected a non-empty one-line string, got 3"),
        ("[bench.profiles]\np = 3\n", 2, "bench.profiles.p: expected a table, got 3"),
        # non-table values where tables belong
        ("hosts = 3\n", 1, "hosts: expected a table, got 3"),
        ("[hosts]\ngpu1 = 'root@x'\n", 2, 'hosts.gpu1: expected a table, got "root@x"'),
    ],
)
def test_validation_rule(text: str, line: int, needle: str) -> None:
    err = error_of(text)
    assert err.line == line, str(err)
    assert needle in str(err)
    assert str(err) == f"{SRC}:{line}: {err.problem}"


def test_errors_locate_dotted_and_quoted_keys() -> None:
    # A dotted key at top level, and a quoted table header.
    err = error_of('hosts.gpu1.local = true\nhosts.gpu1.launcher = "lxc"\n')
    assert err.line == 2 and "hosts.gpu1.launcher" in str(err)
    err = error_of('\n[hosts."gpu1"]\nlocal = true\ngpu_ids = "all"\n')
    assert err.line == 4 and "hosts.gpu1.gpu_ids" in str(err)
    # A quoted env name in an inline table that follows a multi-line string.
    err = error_of(
        '[hosts.a]\nlocal = true\npython = """/x"""\n'
        'env = { OK = "1", "BAD NAME" = "2" }\n'
    )
    assert err.line == 4 and 'hosts.a.env."BAD NAME"' in str(err)


def test_locator_is_not_fooled_by_strings_and_arrays() -> None:
    # Brackets and header-like text inside strings, comments and a multi-line array must neither
    # open a value nor move the table the locator thinks it is in.
    err = error_of(
        """\
        [hosts.a]
        local = true
        model_dirs = [
          "/m",  # [hosts.b] {
        ]
        env = { X = "[[stall]", Y = '{ z = 1' }
        launcher = "none"
        """
    )
    assert err.line == 7 and "hosts.a.launcher" in str(err)


def test_locator_does_not_read_array_elements_as_headers() -> None:
    # "  [1]" inside a multi-line array looks like a table header; launcher is checked first.
    err = error_of('[hosts.a]\nlocal = true\ngpu_ids = [\n  [1]\n]\nlauncher = "lxc"\n')
    assert err.line == 6 and "hosts.a.launcher" in str(err)


def test_locator_skips_multi_line_strings() -> None:
    err = error_of(
        '[hosts.a]\nlocal = true\nenv = { NOTE = """\n[hosts.b]\nlauncher = 1\n[""", Z = "1" }\n'
        "launcher = 'lxc'\n"
    )
    assert err.line == 7 and "hosts.a.launcher" in str(err)
    err = error_of("[hosts.a]\nlocal = true\nx = '''\nssh = 1\n'''\n")
    assert err.line == 3 and "hosts.a.x: unknown key 'x'" in str(err)


def test_locator_counts_lines_as_toml_does() -> None:
    err = error_of('[hosts.a]\r\nlocal = true\r\n\r\nlauncher = "lxc"\r\n')
    assert err.line == 4
    # U+2028 is a line break to str.splitlines but not to TOML.
    err = error_of('[hosts.a]\nlocal = true\nenv = { A = "x\u2028y" }\nlauncher = "lxc"\n')
    assert err.line == 4


def test_list_element_errors_name_the_index_at_the_key_line() -> None:
    # List elements are not located: the message names the index, the line is the key's.
    err = error_of("[hosts.a]\nlocal = true\n\nmodel_dirs = [{ a = 1 }]\n")
    assert err.line == 4
    assert "hosts.a.model_dirs[0]: expected a string" in str(err)


# --- PATH prefix


def host_with_env(env: str) -> HostConfig:
    return parse_inventory(f"[hosts.a]\nlocal = true\nenv = {{ {env} }}\n", SRC).host("a")


def test_a_hosts_first_port_is_its_own_else_the_environments_else_30000(monkeypatch: pytest.MonkeyPatch) -> None:
    text = "[hosts.a]\nlocal = true\nfirst_port = 31000\n[hosts.b]\nlocal = true\n"
    monkeypatch.delenv("GPUOPS_FIRST_PORT", raising=False)
    inv = parse_inventory(text, SRC)
    assert (inv.host("a").first_port, inv.host("b").first_port) == (31000, 30000)
    assert default_inventory().host("localhost").first_port == 30000
    monkeypatch.setenv("GPUOPS_FIRST_PORT", " 40000 ")
    inv = parse_inventory(text, SRC)
    assert (inv.host("a").first_port, inv.host("b").first_port) == (31000, 40000)
    assert default_inventory().host("localhost").first_port == 40000
    monkeypatch.setenv("GPUOPS_FIRST_PORT", "")  # empty: as unset
    assert parse_inventory(text, SRC).host("b").first_port == 30000


@pytest.mark.parametrize("value", ["80", "65536", "3e4", "30000x", "١٢٣٤٥", "-1"])
def test_a_first_port_variable_that_is_no_port_is_refused_in_one_line(monkeypatch: pytest.MonkeyPatch,
                                                                      value: str) -> None:
    monkeypatch.setenv("GPUOPS_FIRST_PORT", value)
    with pytest.raises(ConfigError) as info:
        parse_inventory("[hosts.b]\nlocal = true\n", SRC)
    assert str(info.value) == f"GPUOPS_FIRST_PORT: expected a port number 1024..65535, got {json.dumps(value, ensure_ascii=False)}"
    assert parse_inventory("[hosts.a]\nlocal = true\nfirst_port = 31000\n", SRC).host("a").first_port == 31000


def test_path_prefix() -> None:
    host = host_with_env('HF_HOME = "/hf", PATH = "/opt/x/bin:/opt/y/bin:$PATH"')
    assert host.path_prefix() == "/opt/x/bin:/opt/y/bin"
    assert host.env_dict() == {"HF_HOME": "/hf"}
    assert host.env == (("HF_HOME", "/hf"), ("PATH", "/opt/x/bin:/opt/y/bin:$PATH"))

    assert host_with_env('PATH = "/opt/x/bin:${PATH}"').path_prefix() == "/opt/x/bin"


def test_path_replacement_stays_in_env() -> None:
    host = host_with_env('PATH = "/usr/bin:/bin", LANG = "C.UTF-8"')
    assert host.path_prefix() is None
    assert host.env_dict() == {"PATH": "/usr/bin:/bin", "LANG": "C.UTF-8"}


def test_no_path_no_prefix() -> None:
    host = host_with_env('HOME_HINT = "$PATH"')  # only PATH's $PATH is special; others are literal
    assert host.path_prefix() is None
    assert host.env_dict() == {"HOME_HINT": "$PATH"}


# --- ssh targets


@pytest.mark.parametrize(
    ("text", "target", "shown"),
    [
        ("root@10.0.0.5:22", SshTarget("root", "10.0.0.5", 22), "root@10.0.0.5:22"),
        ("gpu-box", SshTarget(None, "gpu-box", None), "gpu-box"),
        ("ops.admin@gpu1.example.com", SshTarget("ops.admin", "gpu1.example.com", None), "ops.admin@gpu1.example.com"),
        ("host:2200", SshTarget(None, "host", 2200), "host:2200"),
        ("[::1]:22", SshTarget(None, "::1", 22), "[::1]:22"),
        ("me@[fe80::1]", SshTarget("me", "fe80::1", None), "me@[fe80::1]"),
    ],
)
def test_ssh_target_parse_and_display(text: str, target: SshTarget, shown: str) -> None:
    assert SshTarget.parse(text) == target
    assert target.display() == shown
    assert SshTarget.parse(shown) == target


@pytest.mark.parametrize(
    "text",
    ["", "a b", "root@", "@host", "host:", "host:abc", "h;id", "$(id)", "-oProxyCommand=sh", "a@b@c", "::1", "h:22\n"],
)
def test_ssh_target_rejects(text: str) -> None:
    with pytest.raises(ValueError, match="invalid ssh target"):
        SshTarget.parse(text)


# --- validators on hostile input


@pytest.mark.parametrize(
    "bad",
    ["/a b", "/x;rm -rf /", "$(id)", "/tmp/$(id)", "../etc", "/srv/../etc", "relative/path", "", "~/models",
     "/a\nb", "/a`id`", "/a|b", "/a'b", '/a"b', "/a*", "/a\0", "/a\\b", "/" + "a" * 4096],
)
def test_validate_abs_path_rejects(bad: str) -> None:
    with pytest.raises(ValueError) as info:
        validate_abs_path(bad, "download dir")
    message = str(info.value)
    assert message.startswith("download dir: ")
    assert "\n" not in message


def test_validate_abs_path_rejects_non_strings() -> None:
    with pytest.raises(ValueError, match="path: expected a string, got 5"):
        validate_abs_path(5)


@pytest.mark.parametrize(
    ("given", "normalised"),
    [
        ("/", "/"),
        ("//", "/"),
        ("/models/", "/models"),
        ("//shared///models//qwen/", "/shared/models/qwen"),
        ("/a/./b", "/a/b"),
        ("/opt/sglang-0.5.2+cu128/bin/python3.11", "/opt/sglang-0.5.2+cu128/bin/python3.11"),
        ("/x/user@host/a=b,c", "/x/user@host/a=b,c"),
        ("/a/..b/c..", "/a/..b/c.."),
    ],
)
def test_validate_abs_path_normalises(given: str, normalised: str) -> None:
    assert validate_abs_path(given) == normalised


@pytest.mark.parametrize("good", ["gpu1", "a", "0box", "gpu-1.rack_2", "a" * 63])
def test_validate_host_name_accepts(good: str) -> None:
    assert validate_host_name(good) == good


@pytest.mark.parametrize(
    "bad", ["", "GPU1", "-a", ".a", "_a", "a b", "a;b", "$(id)", "a/b", "a\n", "a" * 64, 3]
)
def test_validate_host_name_rejects(bad: object) -> None:
    with pytest.raises(ValueError) as info:
        validate_host_name(bad)
    assert "\n" not in str(info.value)


@pytest.mark.parametrize("good", ["HF_HOME", "_x", "a1", "PATH"])
def test_validate_env_name_accepts(good: str) -> None:
    assert validate_env_name(good) == good


@pytest.mark.parametrize("bad", ["", "1A", "A-B", "A B", "A=B", "$(id)", "A\n", None])
def test_validate_env_name_rejects(bad: object) -> None:
    with pytest.raises(ValueError, match="environment variable name"):
        validate_env_name(bad)


def test_validate_env_value() -> None:
    assert validate_env_value("") == ""
    assert validate_env_value("a b; $(id) 'q'") == "a b; $(id) 'q'"  # literal; quoting is the caller's
    for bad in ("a\nb", "a\rb", "a\0b"):
        with pytest.raises(ValueError) as info:
            validate_env_value(bad)
        assert "\n" not in str(info.value)
    with pytest.raises(ValueError, match="expected a string"):
        validate_env_value(1)


def test_phases_vocabulary() -> None:
    assert PHASES == ("starting", "dist_init", "weights", "kv_cache", "cuda_graph", "draft", "http", "ready")
    inv = parse_inventory("[stall]\n" + "".join(f"{p} = 1\n" for p in PHASES), SRC)
    assert list(inv.stall) == list(PHASES)


def test_config_error_format() -> None:
    assert str(ConfigError("/f.toml", 7, "boom")) == "/f.toml:7: boom"
    assert str(ConfigError("/f.toml", None, "cannot read: x")) == "/f.toml: cannot read: x"


async def test_the_dashboard_follows_config_toml_without_a_restart(tmp_path: Path) -> None:
    """Hosts added to config.toml appear, removed ones go, a changed entry starts over; a file with
    an error changes nothing and says where, in one notification."""
    import shutil
    import tempfile

    from gpuops.core.config import load_inventory
    from gpuops.sim.host import setup_simhost
    from gpuops.tui.app import GpuopsApp
    from gpuops.tui.widgets import RowTable
    from tests.tui_helpers import until

    root = Path(tempfile.mkdtemp(prefix="gpuops-reload-"))
    try:
        a, b = (setup_simhost(root / n, gpus=2) for n in ("a", "b"))
        cfg = tmp_path / "config.toml"
        cfg.write_text(a.host_block("alpha"))
        app = GpuopsApp(load_inventory(str(cfg)), interval=0.5, config_path=str(cfg))
        async with app.run_test(size=(160, 45)) as pilot:
            table = app.screen.query_one("#hosts", RowTable)

            def rows() -> set:
                return {table.get_row_at(i)[1] for i in range(table.row_count)}

            assert await until(pilot, lambda: app.monitor.states["alpha"].updates >= 1, timeout=30)
            cfg.write_text(a.host_block("alpha") + b.host_block("beta"))
            assert await until(pilot, lambda: "beta" in app.monitor.states and rows() == {"alpha", "beta"}, timeout=20)
            assert await until(pilot, lambda: app.monitor.states["beta"].updates >= 1, timeout=30)
            assert any("hosts +beta" in str(n.message) for n in app._notifications)
            cfg.write_text(a.host_block("alpha") + "[hosts.beta]\nsssh = 1\n")  # an error: nothing changes
            assert await until(pilot, lambda: any("config not reloaded" in str(n.message) and "sssh" in str(n.message)
                                                  for n in app._notifications), timeout=20)
            assert set(app.monitor.states) == {"alpha", "beta"}
            cfg.write_text(b.host_block("beta"))
            assert await until(pilot, lambda: set(app.monitor.states) == {"beta"} and rows() == {"beta"}, timeout=20)
            assert app.inventory.names() == ["beta"] and app.ops.host("alpha") is None
    finally:
        for sim in (a, b):
            sim.shutdown()
        shutil.rmtree(root, ignore_errors=True)
