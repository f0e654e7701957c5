"""Models on a host's disks: where they are, how big, complete or not, who uses them; and
removing one, carefully.

Everything is read on the host by gpuops' storage probe (``core/storage_probe.py``), sent
as source and run with the host's python, like the telemetry reporter. The probe finds:

- under each of the host's ``model_dirs``, every folder holding a ``config.json`` (at most
  three levels down): kind ``dir``, id = its path;
- in the host's HF hub cache (``$HF_HUB_CACHE``, else ``$HF_HOME/hub``, else
  ``~/.cache/huggingface/hub``, as the host's environment, its ``env`` config included,
  defines them), every ``models--owner--name`` folder: kind ``hf-cache``, id = the repo id.

Deleting re-checks everything on the host (``delete`` mode of the probe, after realpath),
and gpuops refuses before asking when it already knows the answer: read-only, in use by a
process or a deployment, outside the model dirs and the hub cache, through a symlink that
leaves them, or under a forbidden path.
"""

from __future__ import annotations

import json
from dataclasses import dataclass, field
from typing import Any, Mapping

from ..redact import redact, redact_all
from .programs import storage_probe
from .host import Host, HostError, host_python, script_source

SCAN_TIMEOUT_S = 300.0
DELETE_TIMEOUT_S = 900.0
KINDS = ("dir", "hf-cache")

# Why a model may not be removed (stable strings, shown with every refusal).
RULES = {
    "readonly": "gpuops runs read-only",
    "in-use": "a process or deployment uses it",
    "outside-model-dirs": "only the host's model_dirs and its HF hub cache are managed",
    "symlink-escapes": "it resolves (symlink) outside the model_dirs and the HF hub cache",
    "forbidden-path": "it lies under one of the host's forbidden_paths",
    "holds-managed-root": "it holds a model dir or the HF hub cache",
    "not-a-model": "it is not a model folder",
    "missing": "it no longer exists",
    "changed": "it changed while being removed (a folder swapped for a symlink?)",
}


class StorageError(HostError):
    """The probe could not run or answered nonsense."""


class DeleteRefused(Exception):
    """A removal gpuops will not do; ``rule`` is one of RULES (nothing was changed)."""

    def __init__(self, rule: str, message: str):
        super().__init__(f"refused ({rule}): {message}")
        self.rule = rule
        self.message = message


@dataclass(frozen=True)
class Refusal:
    rule: str
    message: str


@dataclass
class UsedBy:
    pid: int | None = None
    command: str | None = None
    deployment: str | None = None

    def to_json(self) -> dict[str, Any]:
        if self.deployment is not None:
            return {"deployment": self.deployment}
        return {"pid": self.pid, "command": self.command}

    def label(self) -> str:
        if self.deployment is not None:
            return f"deployment {self.deployment}"
        return f"pid {self.pid}"


@dataclass
class Mount:
    mount: str
    total_bytes: int | None
    free_bytes: int | None
    paths: list[str] = field(default_factory=list)  # the model dirs / hub cache it holds

    def to_json(self) -> dict[str, Any]:
        return {"mount": self.mount, "total_bytes": self.total_bytes, "free_bytes": self.free_bytes,
                "paths": list(self.paths)}


@dataclass
class ModelCopy:
    id: str
    path: str
    kind: str  # "dir" | "hf-cache"
    size_bytes: int | None  # apparent size (st_size), every file once
    disk_bytes: int | None  # blocks on disk (st_blocks * 512), every file once
    modified: str | None  # RFC 3339 UTC of the newest file
    complete: bool | None
    used_by: list[UsedBy] = field(default_factory=list)
    realpath: str | None = None
    refusal: Refusal | None = None  # the host policy's answer to "may gpuops delete it?"
    forbidden: str | None = None  # the forbidden_paths entry it is under: kept or deleted, never used anew

    def to_json(self) -> dict[str, Any]:
        return {
            "id": self.id, "path": self.path, "kind": self.kind, "size_bytes": self.size_bytes,
            "disk_bytes": self.disk_bytes, "modified": self.modified, "complete": self.complete,
            "used_by": [u.to_json() for u in self.used_by], "forbidden": self.forbidden,
        }


@dataclass
class HostStorage:
    name: str
    mounts: list[Mount] = field(default_factory=list)
    models: list[ModelCopy] = field(default_factory=list)
    hf_cache: str | None = None
    error: str | None = None
    hint: str | None = None

    def to_json(self) -> dict[str, Any]:
        return {
            "name": self.name, "error": self.error, "hint": self.hint, "hf_cache": self.hf_cache,
            "mounts": [m.to_json() for m in self.mounts],
            "models": [m.to_json() for m in self.models],
        }


@dataclass
class Deleted:
    host: str
    model: ModelCopy
    freed_bytes: int | None

    def to_json(self) -> dict[str, Any]:
        return {"host": self.host, "id": self.model.id, "path": self.model.path, "kind": self.model.kind,
                "deleted": True, "freed_bytes": self.freed_bytes}


# ------------------------------------------------------------------ running the probe

def probe_source() -> str:
    return script_source(storage_probe)


def probe_argv(host: Host, mode: str, *extra: str) -> list[str]:
    """The probe run with the host's python: ``python -c SOURCE --gpuops-storage-probe MODE …``
    with the host's policy (model dirs, forbidden paths) from its validated config."""
    argv = [host_python(host), "-c", probe_source(), storage_probe.MARKER, mode]
    for d in host.config.model_dirs:
        argv += ["--model-dir", d]
    for f in host.config.forbidden_paths:
        argv += ["--forbidden", f]
    return [*argv, *extra]


async def _run_probe(host: Host, argv: list[str], timeout: float) -> dict[str, Any]:
    res = await host.run(argv, timeout=timeout)
    if res.returncode != 0:
        last = next((ln for ln in reversed(res.stderr.splitlines()) if ln.strip()), "no output")
        hint = None
        if res.returncode == 127 or "not found" in last:
            hint = f"no {host_python(host)} on {host.name}: set `python` in its [hosts.{host.name}] entry"
        raise StorageError(f"{host.name}: storage probe exited ({res.returncode}): {last}", hint)
    try:
        doc = json.loads(res.stdout.strip().splitlines()[-1])
        if not isinstance(doc, dict) or doc.get("v") != 1:
            raise ValueError("not a v1 document")
    except (ValueError, IndexError) as exc:
        raise StorageError(f"{host.name}: storage probe answered nonsense ({exc})") from exc
    shown: dict[str, Any] = redact_all(doc)
    return shown  # the command lines of the processes that use a copy


def _int(value: Any) -> int | None:
    return value if isinstance(value, int) and not isinstance(value, bool) else None


def _copy_from(row: dict[str, Any]) -> ModelCopy:
    refusal = row.get("refusal")
    complete = row.get("complete")
    return ModelCopy(
        id=str(row["id"]),
        path=str(row["path"]),
        kind=row["kind"] if row.get("kind") in KINDS else "dir",
        size_bytes=_int(row.get("size_bytes")),
        disk_bytes=_int(row.get("disk_bytes")),
        modified=row.get("modified") if isinstance(row.get("modified"), str) else None,
        complete=complete if isinstance(complete, bool) else None,
        used_by=[UsedBy(pid=_int(u.get("pid")), command=redact(u["command"]) if isinstance(u.get("command"), str) else None)
                 for u in row.get("used_by") or []],
        realpath=row.get("realpath"),
        forbidden=row.get("forbidden") if isinstance(row.get("forbidden"), str) else None,
        refusal=Refusal(str(refusal["rule"]), str(refusal["message"])) if isinstance(refusal, dict) else None,
    )


def deployment_users(model: ModelCopy, deployments: Mapping[str, str]) -> list[UsedBy]:
    """The stored deployments (name → model path or repo id) that serve ``model``."""
    found = []
    places = {p for p in (model.path, model.realpath) if p}
    for name, target in deployments.items():
        target = str(target).rstrip("/") or "/"
        hit = any(target == p or target.startswith(p.rstrip("/") + "/") for p in places)
        if model.kind == "hf-cache" and target == model.id:
            hit = True
        if hit:
            found.append(UsedBy(deployment=name))
    return found


def storage_from_probe(name: str, doc: dict[str, Any], deployments: Mapping[str, str] = {}) -> HostStorage:
    try:
        models = [_copy_from(row) for row in doc.get("models") or []]
        mounts = [
            Mount(str(m["mount"]), _int(m.get("total_bytes")), _int(m.get("free_bytes")),
                  [str(p) for p in m.get("paths") or []])
            for m in doc.get("mounts") or []
        ]
    except (KeyError, TypeError, AttributeError) as exc:
        raise StorageError(f"{name}: storage probe answered nonsense ({exc!r})") from exc
    for m in models:
        m.used_by += deployment_users(m, deployments)
    models.sort(key=lambda m: (m.kind != "dir", m.id.lower(), m.path))
    return HostStorage(name=name, mounts=mounts, models=models, hf_cache=doc.get("hf_cache"))


async def scan(host: Host, deployments: Mapping[str, str] = {}, timeout: float = SCAN_TIMEOUT_S) -> HostStorage:
    """The mounts and models of one host. ``deployments`` (name → model path or repo id)
    adds the stored deployments to each model's ``used_by``. Raises HostError."""
    doc = await _run_probe(host, probe_argv(host, "scan"), timeout)
    return storage_from_probe(host.name, doc, deployments)


async def hf_cache_entry(host: Host, repo_id: str) -> tuple[str | None, str | None]:
    """Where ``repo_id`` lies in ``host``'s HF hub cache: (its snapshot folder, None while there is
    none; its models--owner--name folder). Raises HostError."""
    doc = await _run_probe(host, probe_argv(host, "resolve", "--id", repo_id), SCAN_TIMEOUT_S)
    snap, folder = doc.get("path"), doc.get("folder")
    return (snap if isinstance(snap, str) and snap.startswith("/") else None,
            folder if isinstance(folder, str) and folder.startswith("/") else None)


async def copy_complete(host: Host, *, path: str | None = None, repo_id: str | None = None) -> bool | None:
    """Whether the model folder `path` (or `repo_id`'s entry in the host's HF hub cache) holds its
    whole checkpoint now: every shard its index names, each as long as its header says, and no
    download's ``.incomplete`` file under it. None: the folder says nothing about its weights (no
    safetensors index). Raises HostError."""
    extra = ["--id", repo_id] if repo_id else ["--path", path or ""]
    doc = await _run_probe(host, probe_argv(host, "check", *extra), SCAN_TIMEOUT_S)
    complete = doc.get("complete")
    return complete if isinstance(complete, bool) else None


async def snapshot_folder(host: Host, repo_id: str) -> str | None:
    """The snapshot folder of ``repo_id`` in ``host``'s HF hub cache (None: not there)."""
    return (await hf_cache_entry(host, repo_id))[0]


async def scan_or_error(host: Host, deployments: Mapping[str, str] = {}) -> HostStorage:
    """Like ``scan`` but a host problem becomes the result's ``error``/``hint``."""
    try:
        return await scan(host, deployments)
    except HostError as exc:
        return HostStorage(name=host.name, error=exc.message, hint=exc.hint)


# ------------------------------------------------------------------ choosing and deleting


def matches(storage: HostStorage, query: str) -> list[ModelCopy]:
    """The models ``query`` names: its id, its path, or a path ending in ``/QUERY``
    (so ``Qwen/Qwen3-8B`` names both the HF cache entry and ``/m/Qwen/Qwen3-8B``)."""
    q = query.strip()
    if not q:
        return []
    bare = q.rstrip("/") or "/"
    found = []
    for m in storage.models:
        if q in (m.id, m.path) or bare in (m.id, m.path) or (
            not bare.startswith("/") and m.path.endswith("/" + bare)
        ):
            found.append(m)
    return found


def refusal_for(model: ModelCopy, readonly: bool = False) -> Refusal | None:
    """Why ``model`` may not be deleted now, as far as the last scan knows; None if it may."""
    if readonly:
        return Refusal("readonly", "gpuops runs read-only (--readonly): nothing on the hosts is changed")
    if model.used_by:
        users = ", ".join(
            f"pid {u.pid} ({(u.command or '?')[:60]})" if u.deployment is None else f"deployment {u.deployment}"
            for u in model.used_by
        )
        return Refusal("in-use", f"{model.id} is in use by {users}")
    return model.refusal


async def delete(
    host: Host, model: ModelCopy, deployments: Mapping[str, str] = {}, readonly: bool = False
) -> Deleted:
    """Remove ``model`` (from a scan of ``host``) after the host re-checks the policy and
    that no process uses it. Raises DeleteRefused (nothing changed) or HostError."""
    refused = refusal_for(model, readonly)
    if refused is None:
        users = deployment_users(model, deployments)
        if users:
            refused = Refusal("in-use", f"{model.id} is in use by " + ", ".join(u.label() for u in users))
    if refused is not None:
        raise DeleteRefused(refused.rule, refused.message)
    extra = ["--kind", model.kind, "--path", model.path]
    if model.kind == "hf-cache":
        extra += ["--id", model.id]
    doc = await _run_probe(host, probe_argv(host, "delete", *extra), DELETE_TIMEOUT_S)
    if doc.get("ok") is True:
        return Deleted(host.name, model, _int(doc.get("freed_bytes")))
    rule = str(doc.get("rule") or "failed")
    message = str(doc.get("message") or "the host refused")
    if rule == "failed":
        raise StorageError(f"{host.name}: {message}")
    raise DeleteRefused(rule, message)
