"""What the planner asks a host: its GPUs, its engine's version and flags, free space, ports in use."""

from __future__ import annotations

import json
import os
from pathlib import Path

from .. import engines
from ..config import DEFAULT_LAUNCHER
from ..hosts.host import Host, HostError, host_python, script_source
from ..hosts.programs import free_space as free_space_program
from ..hosts.programs import listening as listening_program
from ..hosts.programs import model_config as model_config_program
from .inputs import GpuInfo, Target
from ..telemetry.samples import is_na, snapshot


def cache_dir() -> Path:
    base = os.environ.get("XDG_CACHE_HOME") or os.path.join(os.path.expanduser("~"), ".cache")
    return Path(base) / "gpuops"


async def engine_version(host: Host, engine: str = engines.DEFAULT) -> str | None:
    """The version of `engine` installed for the host's python; None when it is not installed."""
    python = host_python(host)
    res = await host.run([python, "-c", engines.get(engine).version_program()], timeout=60)
    out = res.stdout.strip()
    return out if res.ok and out and len(out) < 64 else None


async def help_flags(host: Host, version: str, engine: str = engines.DEFAULT) -> frozenset[str] | None:
    """The host's server `--help` flags (the engine's server module's), cached per engine version."""
    path = cache_dir() / f"{engine}-help" / f"{version}.json"
    try:
        return frozenset(json.loads(path.read_text()))
    except (OSError, ValueError):
        pass
    python = host_python(host)
    try:
        res = await host.run([python, "-m", engines.get(engine).server_module(), "--help"], timeout=180)
    except HostError:
        return None
    if not res.ok:
        return None
    flags = engines.get(engine).versions.parse_help_flags(res.stdout)
    if not flags:
        return None
    path.parent.mkdir(parents=True, exist_ok=True)
    tmp = path.with_suffix(".tmp")
    tmp.write_text(json.dumps(sorted(flags)))
    os.replace(tmp, path)
    return flags


async def free_space(host: Host, dirs: tuple[str, ...]) -> dict[str, int]:
    if not dirs:
        return {}
    python = host_python(host)
    res = await host.run([python, "-c", script_source(free_space_program), *dirs], timeout=30)
    try:
        data = json.loads(res.stdout) if res.ok else {}
    except ValueError:
        return {}
    return {k: int(v) for k, v in data.items() if k in dirs}


async def listening_ports(host: Host) -> dict[int, str]:
    """The TCP ports listening on the host: {port: holder} ("pid N (user: command)", "" when gpuops
    cannot see whose it is); {} when the host cannot say."""
    try:
        res = await host.run([host_python(host), "-c", script_source(listening_program)], timeout=30)
        data = json.loads(res.stdout)["listening"] if res.ok else {}
        # a command line may hold anything; no string of a plan holds a control character
        return {int(port): "".join(c if c.isprintable() else "?" for c in str(holder))[:200]
                for port, holder in data.items() if 0 < int(port) < 65536}
    except (HostError, ValueError, KeyError, TypeError, AttributeError):
        return {}


async def read_target(host: Host) -> Target:
    """Everything the planner needs from a host (raises HostError when unreachable)."""
    cfg = host.config
    snap = await snapshot(host)
    if not snap.nvml.ok and not snap.gpus:
        raise HostError(f"{host.name}: cannot read its GPUs: {snap.nvml.error}", snap.nvml.hint)
    gpus = tuple(
        GpuInfo(g.index, int(g.memory_total) if not is_na(g.memory_total) else 0,
                int(g.memory_used) if not is_na(g.memory_used) else 0, len(g.processes), g.name)
        for g in snap.gpus
    )
    version = await engine_version(host)
    flags = await help_flags(host, version) if version else None
    free = await free_space(host, cfg.model_dirs)
    ports = await listening_ports(host)
    return Target(
        host=cfg.name, gpus=gpus, engine_version=version, help_flags=flags, python=cfg.python or "python3",
        model_dirs=cfg.model_dirs, forbidden_paths=cfg.forbidden_paths, free_bytes=free,
        existing=await existing_copies(host), serve_host=cfg.serve_host, launcher=cfg.launcher,
        allowed_gpu_ids=cfg.gpu_ids, ports_taken=ports, first_port=cfg.first_port,
    )


def repo_id_for(path: str, model_dirs: tuple[str, ...]) -> str | None:
    """`/shared/models/Qwen/Qwen3.5-122B-A10B` under model dir `/shared/models` → `Qwen/Qwen3.5-122B-A10B`
    (the layout gpuops downloads into); None for any other folder."""
    for d in model_dirs:
        root = d.rstrip("/") + "/"
        if path.startswith(root):
            rel = path[len(root):].strip("/")
            if rel.count("/") == 1:
                return rel
    return None


async def existing_copies(host: Host) -> dict[str, str]:
    """Complete copies already on the host, but not those on a forbidden path: model id -> what
    --model-path should say
    (a folder; for the HF cache the repo id, which the engine resolves from that cache).
    A folder laid out as MODEL_DIR/owner/name also answers for the repo id owner/name."""
    from ..hosts.model_copies import scan_or_error

    storage = await scan_or_error(host)
    out: dict[str, str] = {}
    for m in storage.models:
        if not m.complete or m.forbidden:
            continue  # a copy on a forbidden path is not served from: nothing new uses it
        if m.kind == "hf-cache":
            out.setdefault(m.id, m.id)
            continue
        out.setdefault(m.id, m.path)
        repo = repo_id_for(m.path, host.config.model_dirs)
        if repo:
            out.setdefault(repo, m.path)
    return out


async def facts_on_host(host: Host, model_id: str, path: str):
    """Model facts from a copy on the host (its config.json, index and shard sizes)."""
    from .model_facts import ModelError, facts_from_config

    python = host_python(host)
    res = await host.run([python, "-c", script_source(model_config_program), path], timeout=30)
    if not res.ok:
        raise ModelError(f"{path} on {host.name}: no config.json found")
    try:
        doc = json.loads(res.stdout)
    except ValueError:
        raise ModelError(f"{path} on {host.name}: config.json is not valid JSON") from None
    return facts_from_config(doc["config"], id=model_id, source="local", local_path=doc["dir"],
                             index=doc.get("index"), file_sizes=doc.get("sizes") or None,
                             tokenizer_config=doc.get("tokenizer") if isinstance(doc.get("tokenizer"), dict) else None,
                             chat_template=doc.get("chat_template") if isinstance(doc.get("chat_template"), str) else None)


def offline_target(gpus: int, gpu_memory_gib: float, *, launcher: str = DEFAULT_LAUNCHER) -> Target:
    mem = int(gpu_memory_gib * 1024**3)
    return Target(host=None, gpus=tuple(GpuInfo(i, mem) for i in range(gpus)), engine_version=None,
                  launcher=launcher)
