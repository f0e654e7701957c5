"""The storage view end to end: real model folders and a huggingface_hub-shaped cache on a
simulated host, reached locally and over the real sshd; gpuops' storage probe run with the
host's python; `gpuops models` / `models rm` as subprocesses; the Storage screen by pilot."""

from __future__ import annotations

import argparse
import hashlib
import json
import os
import pty
import re
import struct
import subprocess
import sys
import tempfile
import time
from dataclasses import dataclass
from pathlib import Path

import pytest
from textual.widgets import DataTable

from gpuops.core.hosts.programs import storage_probe
from gpuops.core.config import parse_inventory
from gpuops.core.hosts.host import LocalHost, SshHost
from gpuops.sim.host import setup_simhost
from gpuops.core.hosts.model_copies import DeleteRefused, HostStorage, ModelCopy, delete, matches, scan
from gpuops.screens.base import MUTATING_ACTIONS
from gpuops.screens.confirm import ConfirmScreen
from gpuops.screens.storage import StorageScreen
from gpuops.tui.app import GpuopsApp
from tests.test_cli import GPUOPS
from tests.tui_helpers import screen_text, until

# Unusual names, so that no other process on this machine mentions them by chance.
OWNER = f"gpuopstest{os.getpid()}"
REPO = f"{OWNER}/Qwen3-8B"
BROKEN = f"{OWNER}/broken-dl"
RFC3339 = re.compile(r"^\d{4}-\d\d-\d\dT\d\d:\d\d:\d\dZ$")


# ------------------------------------------------------------------ a host with models on disk


def safetensors(n_floats: int, seed: int = 0) -> bytes:
    """A valid safetensors file holding one F32 tensor of n_floats values."""
    header = json.dumps({"w": {"dtype": "F32", "shape": [n_floats], "data_offsets": [0, 4 * n_floats]},
                         "__metadata__": {"format": "pt"}}).encode()
    return struct.pack("<Q", len(header)) + header + bytes((seed + i) % 251 for i in range(4 * n_floats))


def write(path: Path, data: bytes | str) -> int:
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_bytes(data.encode() if isinstance(data, str) else data)
    return len(data.encode() if isinstance(data, str) else data)


def index_json(shards: list[str]) -> str:
    return json.dumps({"metadata": {"total_size": 0}, "weight_map": {f"t{i}": s for i, s in enumerate(shards)}})


def hf_repo(hub: Path, repo_id: str, revisions: dict[str, dict[str, bytes]], main: str,
            incomplete: dict[str, bytes] | None = None) -> tuple[Path, int]:
    """A repo laid out as huggingface_hub does: blobs/<sha256>, snapshots/<rev>/<file> as
    relative symlinks into blobs, refs/main, .locks. Returns (folder, bytes of its files:
    blobs and refs; the snapshot links are not counted again)."""
    folder = hub / f"models--{repo_id.replace('/', '--')}"
    blobs = {}
    for rev, files in revisions.items():
        for name, data in files.items():
            sha = hashlib.sha256(data).hexdigest()
            blobs[sha] = data
            link = folder / "snapshots" / rev / name
            link.parent.mkdir(parents=True, exist_ok=True)
            depth = len(Path(name).parts) + 1
            os.symlink("/".join([".."] * depth) + f"/blobs/{sha}", link)
    for sha, data in blobs.items():
        write(folder / "blobs" / sha, data)
        write(hub / ".locks" / folder.name / f"{sha}.lock", b"")
    for name, data in (incomplete or {}).items():
        blobs[name] = data
        write(folder / "blobs" / f"{hashlib.sha256(name.encode()).hexdigest()}.incomplete", data)
    refs = write(folder / "refs" / "main", main)
    return folder, sum(len(d) for d in blobs.values()) + refs


@dataclass
class World:
    sim: object
    root: Path
    models: Path
    hub: Path
    outside: Path
    sizes: dict  # id -> expected size_bytes

    def block(self, name: str = "sim", ssh: str | None = None, model_dirs: list[Path] | None = None) -> str:
        lines = self.sim.host_block(name, ssh=ssh).splitlines()
        out = []
        for line in lines:
            if line.startswith("env = "):
                path = re.search(r'PATH = ("[^"]*")', line).group(1)
                line = f'env = {{ PATH = {path}, HF_HOME = "{self.root / "hf"}" }}'
            out.append(line)
        dirs = model_dirs if model_dirs is not None else [self.models]
        out.append("model_dirs = [%s]" % ", ".join(f'"{d}"' for d in dirs))
        out.append(f'forbidden_paths = ["{self.models / "retired"}", "/data"]')
        return "\n".join(out) + "\n"

    def path(self, rel: str) -> Path:
        return self.models / rel


def build_world(root: Path) -> World:
    sim = setup_simhost(root / "h", gpus=1)
    m, hub, outside = root / "models", root / "hf" / "hub", root / "outside"
    sizes = {}
    # a complete sharded copy, with a hard link that must count once
    d = m / OWNER / "Qwen3-8B"
    shards = ["model-00001-of-00002.safetensors", "model-00002-of-00002.safetensors"]
    n = write(d / "config.json", '{"architectures": ["Qwen3ForCausalLM"]}')
    n += write(d / "model.safetensors.index.json", index_json(shards))
    n += write(d / shards[0], safetensors(300, 1)) + write(d / shards[1], safetensors(200, 2))
    os.link(d / shards[0], d / "hardlink-of-shard-1")
    sizes[str(d)] = n
    # a copy missing one shard of three
    d = m / "qwen122"
    shards = [f"model-0000{i}-of-00003.safetensors" for i in (1, 2, 3)]
    n = write(d / "config.json", "{}") + write(d / "model.safetensors.index.json", index_json(shards))
    n += write(d / shards[0], safetensors(100)) + write(d / shards[1], safetensors(100, 3))
    sizes[str(d)] = n
    # a single-file model (used by a process in the tests), one whose shard is cut short,
    # one that says nothing about its weights, one three levels down, one too deep
    sizes[str(m / "tiny")] = write(m / "tiny" / "config.json", "{}") + write(m / "tiny" / "model.safetensors", safetensors(10))
    sizes[str(m / "cut")] = write(m / "cut" / "config.json", "{}") + write(m / "cut" / "model.safetensors", safetensors(50)[:-7])
    sizes[str(m / "nometa")] = write(m / "nometa" / "config.json", "{}")
    sizes[str(m / "a" / "b" / "deep")] = write(m / "a" / "b" / "deep" / "config.json", "{}")
    write(m / "a" / "b" / "c" / "toodeep" / "config.json", "{}")
    write(m / "notes" / "README.md", "not a model")
    # a symlink that leaves the model dir, and a model under a forbidden path
    sizes[str(m / "escape")] = write(outside / "stolen" / "config.json", "{}") + write(outside / "stolen" / "w.bin", b"x" * 999)
    os.symlink(outside / "stolen", m / "escape")
    sizes[str(m / "retired" / "old")] = write(m / "retired" / "old" / "config.json", "{}")
    # the HF cache: two revisions sharing blobs; a download cut short
    cfg, idx = b'{"architectures": ["Qwen3ForCausalLM"]}', index_json(["model-00001-of-00001.safetensors"]).encode()
    _, blob_bytes = hf_repo(hub, REPO, {
        "a" * 40: {"config.json": cfg, "model.safetensors.index.json": idx,
                   "model-00001-of-00001.safetensors": safetensors(400, 5), "sub/tokenizer.json": b"{}"},
        "b" * 40: {"config.json": cfg, "old.bin": b"o" * 333},
    }, main="a" * 40)
    sizes[REPO] = blob_bytes
    _, blob_bytes = hf_repo(hub, BROKEN, {
        "c" * 40: {"config.json": b"{}", "model.safetensors.index.json": index_json(["s1.safetensors", "s2.safetensors"]).encode(),
                   "s1.safetensors": safetensors(20)},
    }, main="c" * 40, incomplete={"s2.safetensors": safetensors(20, 9)[:40]})
    sizes[BROKEN] = blob_bytes
    return World(sim, root, m, hub, outside, sizes)


@pytest.fixture
def world():
    # sshd's users must be able to reach it: not under pytest's 0700 tmp dir
    d = Path(tempfile.mkdtemp(prefix="gpuops-storage-"))
    d.chmod(0o755)
    yield build_world(d)
    subprocess.run(["rm", "-rf", str(d)])


@pytest.fixture
def users(world):
    """Real processes that load a model folder and an HF repo id from the world's hub cache."""
    hub_env = dict(os.environ, HF_HOME=str(world.root / "hf"))
    procs = [
        subprocess.Popen(["python3", "-c", "import time; time.sleep(120)", "--model-path", str(world.path("tiny"))]),
        subprocess.Popen(["python3", "-c", "import time; time.sleep(120)", f"--model={BROKEN}"], env=hub_env),
    ]
    time.sleep(0.2)
    yield procs
    for p in procs:
        p.kill()
        p.wait()


def host_from(block: str, sshd=None):
    cfg = parse_inventory(block, source="t.toml").hosts[0]
    return SshHost(cfg, connect_options=sshd.options()) if sshd else LocalHost(cfg)


def by_id(storage) -> dict:
    return {m.id: m for m in storage.models}


def _models_wired() -> bool:
    from gpuops.cli.main import build_parser

    for action in build_parser()._actions:
        if isinstance(action, argparse._SubParsersAction):
            return "models" in action.choices
    return False


def models_cli(*args: str, env: dict, stdin=subprocess.DEVNULL, timeout: float = 120) -> subprocess.CompletedProcess:
    """`gpuops ARGS` (or, until the verb is wired into gpuops, the same through cli_models)."""
    head = [GPUOPS] if _models_wired() else [sys.executable, "-m", "gpuops.cli.models"]
    return subprocess.run([*head, *args], capture_output=True, text=True, env=env, stdin=stdin, timeout=timeout)


@pytest.fixture
def cli_env(tmp_path) -> dict:
    e = dict(os.environ, XDG_CONFIG_HOME=str(tmp_path / "cfg"), XDG_STATE_HOME=str(tmp_path / "state"))
    e.pop("GPUOPS_CONFIG", None)
    e.pop("SSH_AUTH_SOCK", None)
    return e


# ------------------------------------------------------------------ listing


@pytest.mark.parametrize("over", ["local", "ssh"])
async def test_listing_sizes_completeness_and_users(world, users, sshd, over):
    host = host_from(world.block(ssh=sshd.target() if over == "ssh" else None), sshd if over == "ssh" else None)
    try:
        s = await scan(host)
    finally:
        await host.close()
    assert s.error is None and s.hf_cache == str(world.hub)
    got = by_id(s)
    m = world.models
    assert set(got) == {str(m / OWNER / "Qwen3-8B"), str(m / "qwen122"), str(m / "tiny"), str(m / "cut"),
                        str(m / "nometa"), str(m / "a/b/deep"), str(m / "escape"), str(m / "retired/old"),
                        REPO, BROKEN}
    for model_id, size in world.sizes.items():
        assert got[model_id].size_bytes == size, model_id  # hard links and HF blobs count once
        assert got[model_id].disk_bytes is not None and got[model_id].disk_bytes >= 0
        assert RFC3339.match(got[model_id].modified), got[model_id].modified
    assert got[REPO].kind == "hf-cache" and got[REPO].path == str(world.hub / f"models--{OWNER}--Qwen3-8B")
    assert got[str(m / "tiny")].kind == "dir" and got[str(m / "tiny")].path == str(m / "tiny")
    complete = {k: v.complete for k, v in got.items()}
    assert complete == {
        str(m / OWNER / "Qwen3-8B"): True, str(m / "qwen122"): False, str(m / "tiny"): True,
        str(m / "cut"): False, str(m / "nometa"): None, str(m / "a/b/deep"): None, str(m / "escape"): None,
        str(m / "retired/old"): None, REPO: True, BROKEN: False,
    }
    tiny_user, broken_user = users
    assert [(u.pid, u.deployment) for u in got[str(m / "tiny")].used_by] == [(tiny_user.pid, None)]
    assert str(m / "tiny") in got[str(m / "tiny")].used_by[0].command
    assert [u.pid for u in got[BROKEN].used_by] == [broken_user.pid]
    assert all(not got[k].used_by for k in got if k not in (str(m / "tiny"), BROKEN))
    # what the host's policy says before anyone asks
    assert got[str(m / "escape")].refusal.rule == "symlink-escapes"
    # a model on a forbidden path is listed, marked, and may be deleted (nothing new goes there)
    assert got[str(m / "retired/old")].refusal is None
    assert got[str(m / "retired/old")].forbidden == str(m / "retired")
    assert all(got[k].forbidden is None for k in got if k != str(m / "retired/old"))
    assert got[str(m / "qwen122")].refusal is None and got[REPO].refusal is None
    # the mounts holding the model dir and the hub cache
    assert s.mounts and all(x.total_bytes >= x.free_bytes > 0 for x in s.mounts)
    assert {p for x in s.mounts for p in x.paths} == {str(m), str(world.hub)}


async def test_used_by_means_really_uses(world):
    """Only processes that load the copy or hold its files are its users: a server whose served
    name is the repo id, one that loads the repo from another hub cache, or one that names a
    sibling folder are not; one that holds a shard open (and names nothing) is."""
    q122 = world.path("qwen122")
    shard = q122 / "model-00001-of-00003.safetensors"
    holder = ("import sys, time; f = open(sys.argv[1], 'rb'); print('held', flush=True); time.sleep(120)")
    other_hub = dict(os.environ, HF_HOME=str(world.root / "elsewhere"))
    procs = [
        subprocess.Popen(["python3", "-c", "import time; time.sleep(120)", "--model-path", str(world.path("cut")),
                          "--served-model-name", REPO]),
        subprocess.Popen(["python3", "-c", "import time; time.sleep(120)", "--model-path", REPO], env=other_hub),
        subprocess.Popen(["python3", "-c", "import time; time.sleep(120)", str(world.path("qwen1220"))]),
        subprocess.Popen(["python3", "-c", holder, str(shard)], stdout=subprocess.PIPE, text=True),
    ]
    try:
        assert procs[3].stdout.readline().strip() == "held"
        host = host_from(world.block())
        try:
            got = by_id(await scan(host))
        finally:
            await host.close()
        assert [u.pid for u in got[REPO].used_by] == []  # neither the served name nor another cache
        assert [u.pid for u in got[str(world.path("cut"))].used_by] == [procs[0].pid]
        assert [u.pid for u in got[str(q122)].used_by] == [procs[3].pid]  # the open shard
    finally:
        for p in procs:
            p.kill()
            p.wait()


async def test_deployments_count_as_users(world):
    host = host_from(world.block())
    q = str(world.path("qwen122"))
    s = await scan(host, deployments={"prod": q, "hf": REPO, "other": "/elsewhere"})
    got = by_id(s)
    assert [u.to_json() for u in got[q].used_by] == [{"deployment": "prod"}]
    assert [u.to_json() for u in got[REPO].used_by] == [{"deployment": "hf"}]
    with pytest.raises(DeleteRefused) as exc:
        await delete(host, got[q], deployments={"prod": q})
    assert exc.value.rule == "in-use" and "deployment prod" in exc.value.message
    assert Path(q, "config.json").exists()


def test_cli_json_over_ssh(world, users, sshd, ssh_home, cli_env, tmp_path):
    cfg = tmp_path / "c.toml"
    cfg.write_text(world.block("gpu1", ssh="simbox"))
    env = dict(cli_env, HOME=str(ssh_home))
    out = models_cli("--config", str(cfg), "models", "--host", "gpu1", "--json", env=env)
    assert out.returncode == 0, out.stderr
    doc = json.loads(out.stdout)
    assert doc["schema"] == 1 and len(doc["hosts"]) == 1
    (h,) = doc["hosts"]
    assert set(h) >= {"name", "error", "hint", "mounts", "models"} and h["name"] == "gpu1" and h["error"] is None
    for mount in h["mounts"]:
        assert set(mount) >= {"mount", "total_bytes", "free_bytes"}
        assert isinstance(mount["total_bytes"], int) and isinstance(mount["free_bytes"], int)
    rows = {m["id"]: m for m in h["models"]}
    for m in h["models"]:
        assert set(m) >= {"id", "path", "kind", "size_bytes", "modified", "complete", "used_by"}
        assert m["kind"] in ("dir", "hf-cache")
    assert rows[REPO]["size_bytes"] == world.sizes[REPO] and rows[REPO]["complete"] is True
    assert rows[BROKEN]["complete"] is False and rows[str(world.path("nometa"))]["complete"] is None
    tiny = rows[str(world.path("tiny"))]
    (user,) = tiny["used_by"]
    assert set(user) == {"pid", "command"} and user["pid"] == users[0].pid
    assert user["command"].endswith(f" -c import time; time.sleep(120) --model-path {world.path('tiny')}")
    out = models_cli("--config", str(cfg), "models", env=dict(env, COLUMNS="200"))  # the human view
    assert out.returncode == 0, out.stderr
    assert REPO in out.stdout and "qwen122" in out.stdout and f"pid {users[0].pid}" in out.stdout


def test_cli_unreachable_host_is_reported_inside_the_json(world, cli_env, tmp_path):
    cfg = tmp_path / "c.toml"
    cfg.write_text(world.block("sim") + '[hosts.down]\nssh = "nobody@127.0.0.1:1"\n')
    out = models_cli("--config", str(cfg), "models", "--json", env=cli_env)
    assert out.returncode == 0, out.stderr
    hosts = {h["name"]: h for h in json.loads(out.stdout)["hosts"]}
    assert hosts["sim"]["error"] is None and hosts["sim"]["models"]
    assert hosts["down"]["error"] and hosts["down"]["models"] == [] and hosts["down"]["mounts"] == []
    out = models_cli("--config", str(cfg), "models", "--host", "nope", env=cli_env)
    assert out.returncode == 2 and "unknown host 'nope'" in out.stderr


# ------------------------------------------------------------------ deleting


@pytest.mark.parametrize("over", ["local", "ssh"])
def test_rm_with_yes_removes_and_the_listing_forgets(world, sshd, ssh_home, cli_env, tmp_path, over):
    cfg = tmp_path / "c.toml"
    cfg.write_text(world.block("sim", ssh="simbox" if over == "ssh" else None))
    env = dict(cli_env, HOME=str(ssh_home))
    q = world.path("qwen122")
    out = models_cli("--config", str(cfg), "models", "rm", "qwen122", "--host", "sim", "--yes", env=env)
    assert out.returncode == 0, out.stderr
    assert "deleted" in out.stdout and str(q) in out.stdout
    assert not q.exists()
    # an HF cache entry goes as a whole models--owner--name folder (its locks too)
    entry = world.hub / f"models--{OWNER}--Qwen3-8B"
    out = models_cli("--config", str(cfg), "models", "rm", str(entry), "--host", "sim", "--yes", "--json", env=env)
    assert out.returncode == 0, out.stderr
    doc = json.loads(out.stdout)
    assert doc["schema"] == 1 and doc["deleted"] is True and doc["id"] == REPO and doc["freed_bytes"] > 0
    assert not entry.exists() and not (world.hub / ".locks" / entry.name).exists()
    assert (world.hub / f"models--{OWNER}--broken-dl").exists()
    out = models_cli("--config", str(cfg), "models", "--json", env=env)
    ids = {m["id"] for m in json.loads(out.stdout)["hosts"][0]["models"]}
    assert str(q) not in ids and REPO not in ids and str(world.path(f"{OWNER}/Qwen3-8B")) in ids


def test_a_retiring_volume_is_listed_deletable_and_never_reused(world, cli_env, tmp_path):
    """The seed's situation: the models still on a forbidden path (a retiring volume that is a model
    dir) are listed as such and may be deleted; the planner reuses no copy there."""
    import asyncio

    from gpuops.core.planning.hostfacts import existing_copies

    retired = world.path("retired")
    write(retired / "kept" / "config.json", "{}")
    write(retired / "kept" / "model.safetensors", safetensors(10))
    cfg = tmp_path / "c.toml"
    block = world.block("sim", model_dirs=[world.models, retired]).replace(
        f'forbidden_paths = ["{retired}", "/data"]', f'forbidden_paths = ["{retired}"]')
    cfg.write_text(block)
    out = models_cli("--config", str(cfg), "models", "--json", env=cli_env)
    assert out.returncode == 0, out.stderr
    rows = {m["id"]: m for m in json.loads(out.stdout)["hosts"][0]["models"]}
    assert rows[str(retired / "kept")]["forbidden"] == str(retired) and rows[str(retired / "kept")]["complete"] is True
    assert rows[str(world.path("tiny"))]["forbidden"] is None
    host = host_from(block)
    try:
        copies = asyncio.run(existing_copies(host))
    finally:
        asyncio.run(host.close())
    assert str(world.path("tiny")) in copies.values() and str(retired / "kept") not in copies.values()
    out = models_cli("--config", str(cfg), "models", env=dict(cli_env, COLUMNS="200"))
    assert out.returncode == 0 and "forbidden" in out.stdout, out.stdout
    out = models_cli("--config", str(cfg), "models", "rm", str(retired / "old"), "--host", "sim", "--yes", env=cli_env)
    assert out.returncode == 0, out.stderr
    assert not (retired / "old").exists() and (retired / "kept").exists()


def _snapshot(root: Path) -> list[str]:
    return sorted(str(p.relative_to(root)) for p in root.rglob("*"))


def test_each_refusal_leaves_the_files_in_place(world, users, cli_env, tmp_path):
    cfg = tmp_path / "c.toml"
    cfg.write_text(world.block("sim"))
    before = _snapshot(world.root)

    def rm(*args: str, stdin=subprocess.DEVNULL):
        return models_cli("--config", str(cfg), *args, env=cli_env, stdin=stdin)

    cases = [
        (rm("--readonly", "models", "rm", "qwen122", "--host", "sim", "--yes"), "readonly"),
        (rm("models", "rm", "tiny", "--host", "sim", "--yes"), "in-use"),
        (rm("models", "rm", BROKEN, "--host", "sim", "--yes"), "in-use"),
        (rm("models", "rm", "escape", "--host", "sim", "--yes"), "symlink-escapes"),
        (rm("models", "rm", REPO, "--host", "sim", "--yes"), "ambiguous"),
        (rm("models", "rm", "qwen122", "--host", "sim"), "refusing without --yes"),
        (rm("models", "rm", str(world.outside / "stolen"), "--host", "sim", "--yes"), "no model"),
        (rm("models", "rm", "qwen122", "--host", "nope", "--yes"), "unknown host"),
        (rm("models", "rm", "qwen122", "--yes"), "needs --host"),
    ]
    for out, needle in cases:
        assert out.returncode == 2, (needle, out.stdout, out.stderr)
        assert needle in out.stderr, (needle, out.stderr)
        assert len(out.stderr.strip().splitlines()) == 1, out.stderr
        assert out.stdout == ""
    in_use = cases[1][0].stderr
    assert f"pid {users[0].pid}" in in_use
    ambiguous = cases[4][0].stderr
    assert str(world.hub / f"models--{OWNER}--Qwen3-8B") in ambiguous and str(world.path(f"{OWNER}/Qwen3-8B")) in ambiguous
    assert _snapshot(world.root) == before


def test_the_host_checks_again_before_removing(world, users):
    """Entries forged past the client's checks: the probe's delete mode refuses them on the host."""
    host = host_from(world.block())

    async def attempt(path: Path, kind: str = "dir", model_id: str | None = None) -> str:
        forged = ModelCopy(id=model_id or str(path), path=str(path), kind=kind, size_bytes=0, disk_bytes=0,
                           modified=None, complete=None)
        with pytest.raises(DeleteRefused) as exc:
            await delete(host, forged)
        return exc.value.rule

    import asyncio

    before = _snapshot(world.root)
    assert asyncio.run(attempt(world.outside / "stolen")) == "outside-model-dirs"
    assert asyncio.run(attempt(world.path("escape"))) == "symlink-escapes"
    assert asyncio.run(attempt(world.path("tiny"))) == "in-use"  # a process uses it
    assert asyncio.run(attempt(world.hub / f"models--{OWNER}--broken-dl", "hf-cache", BROKEN)) == "in-use"
    assert asyncio.run(attempt(world.path("notes"))) == "not-a-model"
    assert asyncio.run(attempt(world.models)) == "outside-model-dirs"  # the model dir itself
    assert asyncio.run(attempt(world.path("qwen122"), "hf-cache")) == "outside-model-dirs"
    assert asyncio.run(attempt(world.path("gone"))) == "missing"
    assert _snapshot(world.root) == before


def test_a_model_dir_that_is_a_symlink_still_works(world, tmp_path):
    """/shared/models -> /mnt/vol/models: its models resolve inside the resolved dir."""
    link = world.root / "models-link"
    os.symlink(world.models, link)
    host = host_from(world.block(model_dirs=[link]))
    import asyncio

    s = asyncio.run(scan(host))
    q = next(m for m in s.models if m.path == str(link / "qwen122"))
    assert q.refusal is None
    asyncio.run(delete(host, q))
    assert not (world.models / "qwen122").exists()


def test_interactive_prompt(world, cli_env, tmp_path):
    cfg = tmp_path / "c.toml"
    cfg.write_text(world.block("sim"))
    q = world.path("qwen122")
    for answer, code in ((b"n\n", 2), (b"y\n", 0)):
        master, slave = pty.openpty()
        try:
            head = [GPUOPS] if _models_wired() else [sys.executable, "-m", "gpuops.cli.models"]
            proc = subprocess.Popen([*head, "--config", str(cfg), "models", "rm", "qwen122", "--host", "sim"],
                                    stdin=slave, stdout=subprocess.PIPE, stderr=subprocess.PIPE, env=cli_env)
            os.write(master, answer)
            out, err = proc.communicate(timeout=120)
        finally:
            os.close(master)
            os.close(slave)
        assert proc.returncode == code, err
        assert b"Delete" in err and b"[y/N]" in err
        assert q.exists() == (answer == b"n\n")


def test_matching_and_probe_helpers():
    mentions = storage_probe.mentions
    assert mentions("python\0--model-path\0/m/qwen", "/m/qwen")
    assert mentions("python\0--model-path=/m/qwen/\0", "/m/qwen")
    assert mentions("sh\0-c\0exec python --model /m/qwen --tp 4", "/m/qwen")
    assert not mentions("python\0--model-path\0/m/qwen122", "/m/qwen")
    assert not mentions("python\0/x/m/qwen", "/m/qwen")
    assert mentions("python\0--model\0Qwen/Qwen3-8B", "Qwen/Qwen3-8B")
    assert not mentions("python\0--model\0Qwen/Qwen3-8B-FP8", "Qwen/Qwen3-8B")
    assert not mentions("python\0/m/Qwen/Qwen3-8B", "Qwen/Qwen3-8B")
    hub = storage_probe.hf_hub_cache
    assert hub({"HF_HUB_CACHE": "/a/hub", "HF_HOME": "/b"}) == "/a/hub"
    assert hub({"HF_HOME": "/b"}) == "/b/hub"
    assert hub({"XDG_CACHE_HOME": "/c"}) == "/c/huggingface/hub"
    assert hub({}) == os.path.expanduser("~/.cache/huggingface/hub")
    assert "delete_model" in MUTATING_ACTIONS

    def copy(model_id, path, kind="dir"):
        return ModelCopy(model_id, path, kind, 1, 1, None, None)

    s = HostStorage("h", models=[copy("/m/Qwen/X", "/m/Qwen/X"), copy("Qwen/X", "/hub/models--Qwen--X", "hf-cache"),
                                 copy("/m/qwen122", "/m/qwen122"), copy("/m/a/qwen122x", "/m/a/qwen122x")])
    assert [m.path for m in matches(s, "Qwen/X")] == ["/m/Qwen/X", "/hub/models--Qwen--X"]  # ambiguous
    assert [m.path for m in matches(s, "/hub/models--Qwen--X")] == ["/hub/models--Qwen--X"]
    assert [m.path for m in matches(s, "qwen122")] == ["/m/qwen122"]
    assert [m.path for m in matches(s, "/m/qwen122/")] == ["/m/qwen122"]
    assert matches(s, "wen122") == [] and matches(s, " ") == []


# ------------------------------------------------------------------ the screen


async def _open_storage(app, pilot, expected: int) -> DataTable:
    await app.push_screen(StorageScreen("sim"))
    table = app.screen.query_one("#storage-models", DataTable)
    assert await until(pilot, lambda: table.row_count == expected, timeout=30), screen_text(app)
    return table


async def test_screen_lists_and_deletes_after_confirmation(world, users, sshd):
    block = world.block(ssh=sshd.target())
    host = host_from(block, sshd)
    app = GpuopsApp(parse_inventory(block, source="t.toml"), interval=0.5, hosts=[host])
    q = world.path("qwen122")
    async with app.run_test(size=(180, 50)) as pilot:
        table = await _open_storage(app, pilot, 10)
        text = screen_text(app)
        assert REPO in text and "hf-cache" in text and f"pid {users[0].pid}" in text
        assert str(world.models) in text  # the mounts line names what each mount holds
        # in use: refused before any question
        table.move_cursor(row=table.get_row_index(str(world.path("tiny"))))
        await pilot.press("ctrl+d")
        assert await until(pilot, lambda: any("in-use" in str(n.message) for n in app._notifications))
        assert not isinstance(app.screen, ConfirmScreen)
        # declined, then confirmed
        table.move_cursor(row=table.get_row_index(str(q)))
        await pilot.press("ctrl+d")
        assert await until(pilot, lambda: isinstance(app.screen, ConfirmScreen))
        await pilot.press("n")
        await pilot.pause(0.3)
        assert q.exists()
        await pilot.press("ctrl+d")
        assert await until(pilot, lambda: isinstance(app.screen, ConfirmScreen))
        await pilot.press("y")
        assert await until(pilot, lambda: not q.exists(), timeout=30)
        assert await until(pilot, lambda: table.row_count == 9 and not app.screen.scanning, timeout=30)
        assert str(q) not in [r.value for r in table.rows]
        await pilot.press("r")  # rescan
        assert app.screen.scanning or table.row_count == 9
        assert await until(pilot, lambda: not app.screen.scanning and table.row_count == 9, timeout=30)
        await pilot.press("escape")
        assert await until(pilot, lambda: not isinstance(app.screen, StorageScreen))


async def test_screen_readonly_deletes_nothing(world):
    block = world.block()
    app = GpuopsApp(parse_inventory(block, source="t.toml"), interval=0.5, readonly=True)
    q = world.path("qwen122")
    async with app.run_test(size=(180, 50)) as pilot:
        table = await _open_storage(app, pilot, 10)
        assert "READONLY" in screen_text(app)
        table.move_cursor(row=table.get_row_index(str(q)))
        await pilot.press("ctrl+d")
        await pilot.pause(0.3)
        assert not isinstance(app.screen, ConfirmScreen)
        app.screen.action_delete_model()  # even if something calls it directly
        assert await until(pilot, lambda: any("read-only" in str(n.message) for n in app._notifications))
        assert not isinstance(app.screen, ConfirmScreen)
    assert q.exists()


async def test_screen_shows_a_scanning_state_then_the_models(world):
    slow = world.root / "slow-python"  # a host whose python takes its time
    slow.write_text(f"#!/bin/sh\nsleep 1.5\nexec {world.sim.python} \"$@\"\n")
    slow.chmod(0o755)
    block = world.block().replace(f'python = "{world.sim.python}"', f'python = "{slow}"')
    app = GpuopsApp(parse_inventory(block, source="t.toml"), interval=0.5)
    async with app.run_test(size=(180, 50)) as pilot:
        await app.push_screen(StorageScreen("sim"))
        screen = app.screen
        assert await until(pilot, lambda: screen.scanning and "scanning…" in screen_text(app))
        await pilot.press("down")  # the UI answers while the probe runs
        assert await until(pilot, lambda: not screen.scanning, timeout=30)
        assert screen.query_one("#storage-models", DataTable).row_count == 10
        assert "scanning" not in screen_text(app) and "10 models" in screen_text(app)


async def test_screen_shows_host_errors(world):
    block = world.block().replace(f'python = "{world.sim.python}"', 'python = "/nonexistent/python"')
    app = GpuopsApp(parse_inventory(block, source="t.toml"), interval=0.5)
    async with app.run_test(size=(180, 50)) as pilot:
        await app.push_screen(StorageScreen("sim"))
        screen = app.screen
        assert await until(pilot, lambda: "hint:" in screen_text(app), timeout=30)
        assert "storage probe exited" in screen_text(app) and screen.storage.error
        assert screen.query_one("#storage-models", DataTable).row_count == 0
