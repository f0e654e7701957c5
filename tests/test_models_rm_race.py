"""`gpuops models rm` cannot escape its model dir, even while a parent folder of the model is
swapped for a symlink: real files on disk, gpuops' storage probe called as it runs on a host
(its `delete`, its source run with a python, and `gpuops models rm` on a local simulated host),
and a real process doing the swapping."""

from __future__ import annotations

import glob
import hashlib
import json
import os
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

from gpuops.core.hosts.host import script_source
from gpuops.core.hosts.programs import storage_probe
from gpuops.sim.host import setup_simhost
from tests.test_storage import models_cli

TRIES = 200
NOTHING_REMOVED = {"symlink-escapes", "changed", "missing", "not-a-model", "outside-model-dirs"}

# A separate process that swaps B (a real folder) for a symlink to the victim's parent and back,
# as fast as it can, while the go-file exists; it says "started" and, once B is a folder again,
# "idle N" (N: swaps done). The holds vary how long each state lasts (pacing, not waiting).
SWAPPER = r"""
import os, random, sys
b, real, link, go, seed = sys.argv[1:6]
rnd = random.Random(int(seed))
def hold():
    for _ in range(rnd.randrange(0, 4000)):
        pass
for line in sys.stdin:
    if line.strip() != "go":
        break
    n = 0
    sys.stdout.write("started\n")
    sys.stdout.flush()
    while os.path.exists(go):
        os.rename(b, real)
        os.rename(link, b)    # B is a symlink to the victim's parent
        hold()
        os.rename(b, link)
        os.rename(real, b)    # B is the real folder again
        hold()
        n += 1
    sys.stdout.write("idle %d\n" % n)
    sys.stdout.flush()
"""


def tree(root: Path) -> dict[str, str]:
    """Everything under ``root``: files by content hash, symlinks by target, folders."""
    out = {}
    for dirpath, dirnames, filenames in os.walk(root):
        for name in dirnames + filenames:
            p = Path(dirpath, name)
            rel = str(p.relative_to(root))
            if p.is_symlink():
                out[rel] = "-> " + os.readlink(p)
            elif p.is_dir():
                out[rel] = "dir"
            else:
                out[rel] = hashlib.sha256(p.read_bytes()).hexdigest()
    return out


def make_model(folder: Path, marker: str = "model") -> int:
    """A model folder with nested files; returns the bytes of its regular files."""
    files = {
        "config.json": b'{"architectures": ["Qwen3ForCausalLM"]}',
        "model.safetensors": marker.encode() * 500,
        "tokenizer/tokenizer.json": b"{}" * 50,
        "tokenizer/deeper/vocab.txt": b"a\nb\n" * 20,
    }
    for rel, data in files.items():
        (folder / rel).parent.mkdir(parents=True, exist_ok=True)
        (folder / rel).write_bytes(data)
    return sum(len(d) for d in files.values())


class Layout:
    """models/A/B/model (the model to delete) and, outside the model dir, outside/vp/model: the
    victim, a folder with the same shape that models/A/B/model names once B is a symlink to vp."""

    def __init__(self, root: Path):
        self.root = root
        self.models = root / "models"
        self.b = self.models / "A" / "B"
        self.model = self.b / "model"
        self.vp = root / "outside" / "vp"
        self.victim = self.vp / "model"
        self.hub = root / "hf" / "hub"
        self.hub.mkdir(parents=True)
        self.b.mkdir(parents=True)
        make_model(self.victim, "victim")
        (self.vp / "not-a-model.txt").write_text("keep me")
        self.victim_tree = tree(root / "outside")

    def fresh_model(self) -> int:
        shutil.rmtree(self.model, ignore_errors=True)
        return make_model(self.model)

    def swap_b_for_symlink(self) -> Path:
        """B moved aside (returned) and a symlink to the victim's parent in its place."""
        aside = self.b.with_name("B.real")
        os.rename(self.b, aside)
        os.symlink(self.vp, self.b)
        return aside

    def victim_intact(self) -> bool:
        return tree(self.root / "outside") == self.victim_tree


@pytest.fixture
def lay(tmp_path, monkeypatch) -> Layout:
    lay = Layout(tmp_path)
    monkeypatch.setenv("HF_HUB_CACHE", str(lay.hub))
    return lay


def probe_delete(lay: Layout, path: Path, kind: str = "dir", repo_id: str | None = None) -> dict:
    return storage_probe.delete([str(lay.models)], [], kind, str(path), repo_id)


def run_probe_source(python: str, lay: Layout, path: Path) -> dict:
    """The probe as gpuops runs it on a host: ``python -c SOURCE --gpuops-storage-probe delete ...``."""
    argv = [python, "-c", script_source(storage_probe), storage_probe.MARKER, "delete",
            "--model-dir", str(lay.models), "--kind", "dir", "--path", str(path)]
    done = subprocess.run(argv, capture_output=True, text=True, timeout=60,
                          env=dict(os.environ, HF_HUB_CACHE=str(lay.hub)))
    assert done.returncode == 0, done.stderr
    lines = done.stdout.strip().splitlines()
    assert len(lines) == 1, done.stdout
    return json.loads(lines[0])


def old_pythons() -> list[str]:
    """The oldest pythons the probe must run on (3.8), where this machine has one."""
    found = sorted(glob.glob(os.path.expanduser("~/.pyenv/versions/3.8*/bin/python3.8"))) + [shutil.which("python3.8")]
    for python in filter(None, found):
        try:
            done = subprocess.run([python, "-c", "import sys; print(sys.version_info[:2] == (3, 8))"],
                                  capture_output=True, text=True, timeout=30)
        except OSError:
            continue
        if done.stdout.strip() == "True":  # a real 3.8, not a shim that answers for none
            return [python]
    return []


def assert_refused_in_one_line(doc: dict) -> None:
    assert doc["v"] == 1 and doc["ok"] is False, doc
    assert isinstance(doc["rule"], str) and doc["rule"], doc
    assert doc["message"] and "\n" not in doc["message"] and "\r" not in doc["message"], doc
    assert doc["used_by"] == []


# ------------------------------------------------------------------ the race


class Swapper:
    def __init__(self, lay: Layout, seed: int):
        self.go = lay.root / "swap.go"
        link = lay.b.with_name("B.link")
        os.symlink(lay.vp, link)
        self.proc = subprocess.Popen(
            [sys.executable, "-c", SWAPPER, str(lay.b), str(lay.b.with_name("B.real")), str(link), str(self.go),
             str(seed)],
            stdin=subprocess.PIPE, stdout=subprocess.PIPE, text=True)
        self.swaps = 0

    def __enter__(self):
        self.go.touch()
        self.proc.stdin.write("go\n")
        self.proc.stdin.flush()
        assert self.proc.stdout.readline().strip() == "started"
        return self

    def __exit__(self, *exc):
        self.go.unlink()
        line = self.proc.stdout.readline().split()
        assert line[:1] == ["idle"], line  # B is a real folder again
        self.swaps += int(line[1])

    def close(self):
        if self.go.exists():
            self.go.unlink()
        self.proc.stdin.close()
        try:
            self.proc.wait(timeout=30)
        except subprocess.TimeoutExpired:
            self.proc.kill()
            self.proc.wait()


def test_swapping_a_parent_for_a_symlink_during_delete_never_escapes(lay):
    swapper = Swapper(lay, seed=os.getpid())
    outcomes: dict[str, int] = {}
    try:
        for _ in range(TRIES):
            size = lay.fresh_model()
            before = tree(lay.model)
            with swapper:
                doc = probe_delete(lay, lay.model)
            assert lay.victim_intact(), doc
            assert lay.b.is_dir() and not lay.b.is_symlink()
            if doc["ok"]:
                assert not os.path.lexists(lay.model), doc
                assert doc["path"] == str(lay.model) and doc["size_bytes"] == size, doc
                outcomes["deleted"] = outcomes.get("deleted", 0) + 1
            else:
                assert_refused_in_one_line(doc)
                if doc["rule"] in NOTHING_REMOVED:
                    assert tree(lay.model) == before, doc
                outcomes[doc["rule"]] = outcomes.get(doc["rule"], 0) + 1
    finally:
        swapper.close()
    print(outcomes, "swaps:", swapper.swaps)
    assert swapper.swaps > 0
    # the race was run both ways: some tries saw the swap, some deleted the model
    assert outcomes.get("deleted", 0) > 0 and sum(n for k, n in outcomes.items() if k != "deleted") > 0, outcomes


def test_the_cli_under_the_same_race(lay, tmp_path):
    """`gpuops models rm --yes` on a local host while B is being swapped: each run deletes the
    model or says why not in one line, and the victim is never touched."""
    cfg = write_config(lay, tmp_path)
    env = cli_env(tmp_path)
    swapper = Swapper(lay, seed=os.getpid() + 1)
    try:
        for _ in range(4):
            lay.fresh_model()
            with swapper:
                out = models_cli("--config", str(cfg), "models", "rm", str(lay.model), "--host", "sim", "--yes",
                                 env=env)
            assert lay.victim_intact(), (out.stdout, out.stderr)
            if out.returncode == 0:
                assert not os.path.lexists(lay.model) and "deleted" in out.stdout
            else:
                assert out.returncode in (1, 2), out.stderr
                assert len(out.stderr.strip().splitlines()) == 1, out.stderr
    finally:
        swapper.close()


# ------------------------------------------------------------------ deterministic cases


def test_a_parent_already_swapped_for_a_symlink_is_refused(lay):
    lay.fresh_model()
    aside = lay.swap_b_for_symlink()
    before = tree(lay.root)
    doc = probe_delete(lay, lay.model)
    assert_refused_in_one_line(doc)
    assert doc["rule"] == "symlink-escapes" and str(lay.victim) in doc["message"], doc
    assert tree(lay.root) == before and lay.victim_intact()
    assert (aside / "model" / "config.json").exists()


@pytest.mark.parametrize("python", [sys.executable, *old_pythons()])
def test_the_probe_source_refuses_a_swapped_parent_and_deletes_otherwise(lay, python):
    """The program as sent to a host, run with that python (3.8 too where there is one)."""
    size = lay.fresh_model()
    aside = lay.swap_b_for_symlink()
    before = tree(lay.root)
    doc = run_probe_source(python, lay, lay.model)
    assert_refused_in_one_line(doc)
    assert doc["rule"] == "symlink-escapes"
    assert tree(lay.root) == before
    os.unlink(lay.b)
    os.rename(aside, lay.b)
    doc = run_probe_source(python, lay, lay.model)
    assert doc == {"v": 1, "ok": True, "path": str(lay.model), "freed_bytes": doc["freed_bytes"], "size_bytes": size}
    assert doc["freed_bytes"] > 0
    assert not os.path.lexists(lay.model) and lay.b.is_dir() and lay.victim_intact()


def test_the_walk_refuses_a_symlink_component_past_the_policy_check(lay):
    """The fd walk itself, below the path checks: a component that is a symlink is never entered,
    even one that points back inside the root."""
    lay.fresh_model()
    aside = lay.swap_b_for_symlink()
    os.unlink(lay.b)
    os.symlink(aside, lay.b)  # models/A/B -> models/A/B.real: inside, but not the folder checked
    with pytest.raises(storage_probe.Changed) as exc:
        storage_probe._open_chain(str(lay.models), str(lay.model))
    assert exc.value.symlink and str(lay.b) in str(exc.value) and "\n" not in str(exc.value)
    assert (aside / "model" / "config.json").exists()


def test_a_symlink_inside_the_model_is_removed_as_a_link(lay):
    size = lay.fresh_model()
    keep = lay.root / "outside" / "keep"
    keep.mkdir()
    (keep / "data.bin").write_bytes(b"k" * 1000)
    (keep / "sub").mkdir()
    (keep / "sub" / "x").write_text("x")
    os.symlink(keep, lay.model / "link-to-dir")
    os.symlink(keep / "data.bin", lay.model / "tokenizer" / "link-to-file")
    os.symlink(lay.root / "nowhere", lay.model / "dangling")
    outside = tree(lay.root / "outside")
    doc = probe_delete(lay, lay.model)
    assert doc["ok"] is True, doc
    assert doc["size_bytes"] == size  # the links' targets are not counted: they are not freed
    assert not os.path.lexists(lay.model)
    assert tree(lay.root / "outside") == outside


def test_a_symlink_to_a_model_in_the_model_dir_goes_with_its_target(lay):
    """As before: ``rm models/alias`` (alias -> models/A/B/model) removes the model and the link."""
    lay.fresh_model()
    alias = lay.models / "alias"
    os.symlink(lay.model, alias)
    doc = probe_delete(lay, alias)
    assert doc["ok"] is True and doc["path"] == str(alias), doc
    assert not os.path.lexists(alias) and not os.path.lexists(lay.model) and lay.b.is_dir()
    assert lay.victim_intact()


def test_an_hf_cache_entry_and_its_locks_without_following_a_swapped_locks_folder(lay):
    """The hub's .locks folder swapped for a symlink to a folder outside holding a same-named
    entry: the model's cache entry goes, the folder outside stays."""
    entry = lay.hub / "models--o--n"
    blob = entry / "blobs" / ("0" * 64)
    blob.parent.mkdir(parents=True)
    blob.write_bytes(b"w" * 321)
    snap = entry / "snapshots" / ("a" * 40)
    snap.mkdir(parents=True)
    os.symlink("../../blobs/" + "0" * 64, snap / "model.safetensors")
    (entry / "refs").mkdir()
    (entry / "refs" / "main").write_text("a" * 40)
    elsewhere = lay.root / "outside" / "locks"
    (elsewhere / entry.name).mkdir(parents=True)
    (elsewhere / entry.name / "precious.lock").write_text("keep")
    os.symlink(elsewhere, lay.hub / ".locks")
    outside = tree(lay.root / "outside")
    doc = probe_delete(lay, entry, "hf-cache", "o/n")
    assert doc["ok"] is True and doc["size_bytes"] == 321 + 40, doc
    assert not os.path.lexists(entry)
    assert tree(lay.root / "outside") == outside
    # and with a real .locks folder, the entry's locks go too
    os.unlink(lay.hub / ".locks")
    (lay.hub / ".locks" / entry.name).mkdir(parents=True)
    (lay.hub / ".locks" / entry.name / "x.lock").write_text("")
    (lay.hub / ".locks" / "models--o--other").mkdir()
    blob.parent.mkdir(parents=True)
    blob.write_bytes(b"w")
    doc = probe_delete(lay, entry, "hf-cache", "o/n")
    assert doc["ok"] is True, doc
    assert not os.path.lexists(entry) and not os.path.lexists(lay.hub / ".locks" / entry.name)
    assert (lay.hub / ".locks" / "models--o--other").is_dir()


# ------------------------------------------------------------------ the CLI, deterministically


def write_config(lay: Layout, tmp_path: Path, python: str | None = None, swap_before_delete: bool = False) -> Path:
    """A local simulated host whose model_dirs is lay.models. With ``swap_before_delete`` its
    python swaps B for the symlink when it is started for the probe's delete (after the scan)."""
    sim = setup_simhost(tmp_path / "h", gpus=1, python=python)
    host_python = str(sim.python)
    if swap_before_delete:
        wrapper = tmp_path / "swapping-python"
        wrapper.write_text(
            "#!/bin/sh\n"
            f'if [ "$3" = "{storage_probe.MARKER}" ] && [ "$4" = delete ]; then\n'
            f'  mv "{lay.b}" "{lay.b.with_name("B.real")}" && ln -s "{lay.vp}" "{lay.b}"\n'
            "fi\n"
            f'exec "{sim.python}" "$@"\n')
        wrapper.chmod(0o755)
        host_python = str(wrapper)
    lines = []
    for line in sim.host_block("sim").splitlines():
        if line.startswith("python = "):
            line = f'python = "{host_python}"'
        lines.append(line)
    lines.append(f'model_dirs = ["{lay.models}"]')
    cfg = tmp_path / "c.toml"
    cfg.write_text("\n".join(lines) + "\n")
    return cfg


def cli_env(tmp_path: Path) -> dict:
    e = dict(os.environ, XDG_CONFIG_HOME=str(tmp_path / "cfg"), XDG_STATE_HOME=str(tmp_path / "state"),
             HF_HUB_CACHE=str(tmp_path / "hub-of-the-cli"))
    e.pop("GPUOPS_CONFIG", None)
    e.pop("SSH_AUTH_SOCK", None)
    return e


@pytest.mark.parametrize("python", [None, *old_pythons()])
def test_cli_rm_refuses_when_the_host_finds_a_parent_swapped(lay, tmp_path, python):
    """The scan sees models/A/B/model as a model; by the time the host runs the delete, B is a
    symlink to the victim's parent: refused in one line, nothing deleted on either side."""
    lay.fresh_model()
    cfg = write_config(lay, tmp_path, python=python, swap_before_delete=True)
    before = tree(lay.models)
    out = models_cli("--config", str(cfg), "models", "rm", "A/B/model", "--host", "sim", "--yes", env=cli_env(tmp_path))
    assert out.returncode == 2, (out.stdout, out.stderr)
    assert "symlink-escapes" in out.stderr and len(out.stderr.strip().splitlines()) == 1, out.stderr
    assert out.stdout == ""
    assert lay.victim_intact()
    moved = {("A/B.real" + k[3:] if k == "A/B" or k.startswith("A/B/") else k): v for k, v in before.items()}
    assert tree(lay.models) == {**moved, "A/B": "-> " + str(lay.vp)}  # only the swap itself changed


def test_cli_rm_deletes_a_model_holding_an_escaping_symlink(lay, tmp_path):
    lay.fresh_model()
    os.symlink(lay.vp, lay.model / "escape")
    cfg = write_config(lay, tmp_path)
    out = models_cli("--config", str(cfg), "models", "rm", "A/B/model", "--host", "sim", "--yes", "--json",
                     env=cli_env(tmp_path))
    assert out.returncode == 0, out.stderr
    doc = json.loads(out.stdout)
    assert doc["deleted"] is True and doc["path"] == str(lay.model) and doc["freed_bytes"] > 0
    assert not os.path.lexists(lay.model) and lay.victim_intact()
