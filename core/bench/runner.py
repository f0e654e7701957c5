"""Benchmarks: the engine's own benchmark and eval, run on the host against a deployment, stored, compared.

- Profiles (``DEFAULT_PROFILES``, overridden by ``[bench.profiles.NAME]`` in config.toml): ``smoke``,
  ``latency``, ``throughput`` and ``sweep`` run the engine's serving benchmark (bench_serving:
  ``Engine.bench_module`` for the host's version, its command line ``Engine.bench_argv``) once per
  concurrency, its ``--backend`` the engine's (``Engine.bench_backend``); ``quality`` runs the
  engine's evaluation (``Engine.eval_argv``: run_eval ``--eval-name gsm8k``) on a dataset file the
  profile names (hosts may be offline). Inputs default to ``random-ids``, which needs no download.
- The runner (``BenchRunner``) runs them with the host's python through ``Host.stream`` under a small
  relay (``core/hosts/programs/bench_relay.py``) that merges stderr into stdout and splits tqdm's
  ``\\r`` updates into lines, so progress ("n/N") arrives while it runs; closing the stream (cancel) ends the remote
  process group. The deployment's API key goes from its 0600 env file into the benchmark's
  environment (``OPENAI_API_KEY``, which bench_serving and run_eval send as a Bearer token) on the
  host: it is never in an argv, an event or the store, and gpuops itself never reads it.
- Records: bench_serving's ``--output-file`` JSONL objects, read back when a run ends, kept as
  written with two changes (``normalize_record``): ``request_rate`` Infinity (bench_serving's
  unlimited rate, which is not JSON) becomes the string ``"inf"`` (the same word config.toml uses)
  and any other non-finite number ``null``; secrets (``server_info``'s ``api_key``) become ``"***"``.
- ``poll_metrics`` follows the server's ``/metrics`` from the host (prometheus_client's parser) for
  live views: running and queued requests, generation throughput, token usage, accept length
  (the engine's metric names, ``Engine.metrics``).
- ``compare`` and ``export`` put stored runs side by side with deltas.
"""

from __future__ import annotations

import asyncio
import csv
import io
import json
import math
import re
import secrets
import time
from dataclasses import dataclass
from datetime import datetime, timezone
from typing import Any, AsyncIterator, Callable
from urllib.parse import urlsplit

from .. import engines
from ..engines.base import NoBenchmark
from ..config import BENCH_PATHS, BENCH_VALUES, validate_host_name
from ..hosts.host import Host, HostError, host_python, script_source
from ..hosts.programs import bench_relay as bench_relay_program
from ..deploy.store import Store
from ..domain import (BENCH_EVENT_KINDS, BenchChecksEvent, BenchEvent, BenchLogEvent, BenchProgressEvent,
                      BenchQualityEvent, BenchResultEvent, BenchRun, BenchStateEvent, BenchStepEvent, Deployment,
                      Plan, client_host, url_host, utc_now)
from ..redact import redact_all

SCHEMA = 1

# a serving profile's "backend" is the engine's (Engine.bench_backend), put first when resolved
_SERVING_BASE: dict[str, Any] = {"dataset_name": "random-ids", "request_rate": "inf",
                                 "random_range_ratio": 0.0, "warmup_requests": 1}
DEFAULT_PROFILES: dict[str, dict[str, Any]] = {
    "smoke": {**_SERVING_BASE, "num_prompts": 16, "max_concurrency": 4, "random_input_len": 256,
              "random_output_len": 64},
    "latency": {**_SERVING_BASE, "num_prompts": 32, "max_concurrency": 1, "random_input_len": 1024,
                "random_output_len": 256},
    "throughput": {**_SERVING_BASE, "num_prompts": 1000, "max_concurrency": 256, "random_input_len": 1024,
                   "random_output_len": 1024},
    # one run per concurrency; each sends max(num_prompts, 4 x concurrency) prompts (several waves)
    "sweep": {**_SERVING_BASE, "num_prompts": 32, "concurrencies": [1, 4, 16, 64], "random_input_len": 1024,
              "random_output_len": 256},
    # max_concurrency: the eval's parallel requests (run_eval --num-threads)
    "quality": {"eval_name": "gsm8k", "num_examples": 200, "max_concurrency": 64},
}
QUALITY_KEYS = frozenset({"eval_name", "num_examples", "eval_data_path", "max_concurrency"})
SERVING_KEYS = (frozenset(BENCH_VALUES) | frozenset(BENCH_PATHS)) - (QUALITY_KEYS - {"max_concurrency"})
EVALS = ("gsm8k",)  # run_eval's evals that read a local file (--gsm8k-data-path): hosts may be offline
SWEEP_WAVES = 4
RUN_DIR = ".local/state/gpuops/bench"  # under the host user's home: RUN_DIR/RUNKEY/
CHECK_WORDS = {True: "pass", False: "FAIL", None: "skipped", "not run": "-"}  # a check's ok, as a word
EVENT_KINDS = BENCH_EVENT_KINDS  # what BenchRunner emits (core/domain.py's BenchEvent, one struct a kind)

# The headline figures, in the order compare and export show them: (key, label, unit, better).
# "quality_score" is the run's eval score; the others are bench_serving record keys.
METRICS: tuple[tuple[str, str, str, str], ...] = (
    ("output_throughput", "Output throughput", "tok/s", "higher"),
    ("request_throughput", "Request throughput", "req/s", "higher"),
    ("total_throughput", "Total throughput", "tok/s", "higher"),
    ("median_ttft_ms", "TTFT median", "ms", "lower"),
    ("p90_ttft_ms", "TTFT p90", "ms", "lower"),
    ("p99_ttft_ms", "TTFT p99", "ms", "lower"),
    ("median_itl_ms", "ITL median", "ms", "lower"),
    ("p95_itl_ms", "ITL p95", "ms", "lower"),
    ("p99_itl_ms", "ITL p99", "ms", "lower"),
    ("median_tpot_ms", "TPOT median", "ms", "lower"),
    ("median_e2e_latency_ms", "E2E median", "ms", "lower"),
    ("p90_e2e_latency_ms", "E2E p90", "ms", "lower"),
    ("p99_e2e_latency_ms", "E2E p99", "ms", "lower"),
    ("accept_length", "Accept length", "tokens", "higher"),
    ("quality_score", "Quality score", "", "higher"),
)


class BenchInputError(Exception):
    """Bad input (profile, target, file) found before anything ran: one line, exit 2."""


class BenchFailed(Exception):
    """The benchmark ran and failed (the line that says why)."""


# ------------------------------------------------------------------ profiles


@dataclass(frozen=True)
class Profile:
    name: str
    kind: str  # "serving" | "quality"
    settings: dict[str, Any]

    def steps(self) -> list[int | None]:
        """The concurrency of each bench_serving run (None: unlimited)."""
        if self.kind == "quality":
            return [self.settings.get("max_concurrency")]
        return list(self.settings.get("concurrencies") or [self.settings.get("max_concurrency")])

    def num_prompts(self, concurrency: int | None) -> int:
        n = self.settings["num_prompts"]
        return max(n, SWEEP_WAVES * concurrency) if self.settings.get("concurrencies") and concurrency else n

    def to_json(self) -> dict:
        return {"name": self.name, "kind": self.kind, "settings": dict(self.settings)}


def validate_settings(settings: dict[str, Any], where: str) -> dict[str, Any]:
    """Each setting checked as config.toml's ``[bench.profiles.NAME]`` checks it (one table of rules)."""
    out: dict[str, Any] = {}
    for key, value in settings.items():
        if key in BENCH_PATHS:
            if not (isinstance(value, str) and value.startswith("/") and "\n" not in value and "\0" not in value):
                raise BenchInputError(f"{where}.{key}: expected an absolute path, got {value!r}")
            out[key] = value
            continue
        if key not in BENCH_VALUES:
            known = ", ".join(sorted({*BENCH_VALUES, *BENCH_PATHS}))
            raise BenchInputError(f"{where}: unknown setting {key!r} (known: {known})")
        check, expected = BENCH_VALUES[key]
        checked = check(value)
        if checked is None:
            raise BenchInputError(f"{where}.{key}: expected {expected}, got {value!r}")
        out[key] = checked
    return out


def resolve_profile(name: str, configured: dict[str, dict[str, Any]] | None = None,
                    overrides: dict[str, Any] | None = None, engine: str = engines.DEFAULT) -> Profile:
    """The profile NAME: its defaults (a serving profile's ``backend`` is ENGINE's), then
    config.toml's table, then OVERRIDES (a screen's edits).

    A name with no defaults must be in config.toml; it starts from ``quality`` when it sets an
    eval key, else from ``smoke``. Setting ``max_concurrency`` on a profile with ``concurrencies``
    (or the other way round) replaces it."""
    try:
        validate_host_name(name)
    except ValueError as exc:
        raise BenchInputError(f"profile: {exc}") from None
    configured = configured or {}
    if name not in DEFAULT_PROFILES and name not in configured:
        known = ", ".join(sorted({*DEFAULT_PROFILES, *configured}))
        raise BenchInputError(f"unknown profile {name!r} (known: {known})")
    where = f"bench.profiles.{name}"
    layers = [validate_settings(configured.get(name, {}), where),
              validate_settings(overrides or {}, f"{where} (overrides)")]
    quality_only = QUALITY_KEYS - {"max_concurrency"}
    settings = dict(DEFAULT_PROFILES.get(name) or (
        DEFAULT_PROFILES["quality"] if any(k in quality_only for layer in layers for k in layer)
        else DEFAULT_PROFILES["smoke"]))
    backend = engines.get(engine).bench_backend
    if "eval_name" not in settings and backend is not None:
        settings = {"backend": backend, **settings}
    for layer in layers:
        if "max_concurrency" in layer and "concurrencies" in layer:
            raise BenchInputError(f"{where}: set max_concurrency (one run) or concurrencies (a sweep), not both")
        for one, other in (("max_concurrency", "concurrencies"), ("concurrencies", "max_concurrency")):
            if one in layer:
                settings.pop(other, None)
        settings.update(layer)
    kind = "quality" if "eval_name" in settings else "serving"
    allowed = QUALITY_KEYS if kind == "quality" else SERVING_KEYS
    stray = sorted(set(settings) - allowed)
    if stray:
        raise BenchInputError(f"{where}: {', '.join(stray)} does not apply to a {kind} profile")
    if kind == "quality":
        if settings["eval_name"] not in EVALS:
            raise BenchInputError(f"{where}.eval_name: only {', '.join(EVALS)} runs from a local file "
                                  f"(hosts may be offline), got {settings['eval_name']!r}")
        if "eval_data_path" not in settings:
            raise BenchInputError(f"{where}: set eval_data_path to a gsm8k-format JSONL file on the host "
                                  "(hosts may be offline)")
    elif settings.get("dataset_name") != "random-ids" and "dataset_path" not in settings:
        raise BenchInputError(f"{where}: dataset_name {settings.get('dataset_name')!r} needs dataset_path "
                              "(a file on the host; without one bench_serving downloads ShareGPT)")
    return Profile(name, kind, settings)


# ------------------------------------------------------------------ records


def _finite(value: Any) -> Any:
    if isinstance(value, float) and not math.isfinite(value):
        return None
    if isinstance(value, dict):
        return {k: _finite(v) for k, v in value.items()}
    if isinstance(value, list):
        return [_finite(v) for v in value]
    return value


def normalize_record(record: dict) -> dict:
    """A bench_serving record as stored: ``request_rate`` inf -> "inf", other non-finite numbers ->
    null, secrets redacted (the server's /server_info, in ``server_info``, carries ``api_key``)."""
    out = dict(record)
    rate = out.get("request_rate")
    if isinstance(rate, float) and math.isinf(rate) and rate > 0:
        out["request_rate"] = "inf"
    return _finite(redact_all(out))


def parse_jsonl(text: str, source: str, engine: str = engines.DEFAULT) -> list[dict]:
    """bench_serving's ``--output-file``: one JSON object per line, each one of ENGINE's records
    (``Engine.bench_record``). Python's json reads the ``Infinity`` bench_serving writes (strict
    parsers refuse it)."""
    is_record = engines.get(engine).bench_record
    records = []
    for n, line in enumerate(text.splitlines(), start=1):
        if not line.strip():
            continue
        try:
            doc = json.loads(line)
        except ValueError as exc:
            raise BenchInputError(f"{source}:{n}: not JSON ({exc})") from None
        if not is_record(doc):
            raise BenchInputError(f"{source}:{n}: not a bench_serving record (no backend/output_throughput)")
        records.append(normalize_record(doc))
    if not records:
        raise BenchInputError(f"{source}: no bench_serving records")
    return records


_PROGRESS = re.compile(r"\|\s*(\d+)/(\d+)\s*\[")  # tqdm: " 40%|████      | 8/20 [00:00<00:00, 66.50it/s]"


def parse_progress(line: str) -> tuple[int, int] | None:
    """(done, total) from one of tqdm's progress lines, else None."""
    m = _PROGRESS.search(line)
    return (int(m.group(1)), int(m.group(2))) if m else None


# ------------------------------------------------------------------ on the host


# ------------------------------------------------------------------ targets


@dataclass
class Target:
    """What a benchmark runs against, as seen from the host that runs it."""

    host: Host
    url: str  # base URL the host reaches the server at
    home: str  # the host user's home (run folders live under it)
    deployment: str | None = None
    model: str | None = None  # the model id, for the store
    model_path: str | None = None  # on the host: bench_serving's --model (and --tokenizer, unless below)
    tokenizer_path: str | None = None  # on the host: a folder holding the tokenizer (None: model_path)
    served_name: str | None = None
    env_file: str | None = None  # the deployment's 0600 env file holding GPUOPS_API_KEY
    plan: Plan | None = None
    gpus: dict | None = None  # {"count", "ids", "names"}


def check_url(url: str) -> str:
    """An http(s) base URL without credentials, path, query or whitespace (it goes into an argv)."""
    try:
        parts = urlsplit(url)
        port = parts.port
    except ValueError as exc:
        raise BenchInputError(f"--url {url!r}: {exc}") from None
    if (parts.scheme not in ("http", "https") or not parts.hostname or parts.username or parts.password
            or parts.path not in ("", "/") or parts.query or parts.fragment or re.search(r"\s", url)):
        raise BenchInputError(f"--url must look like http://HOST:PORT, got {url!r}")
    return f"{parts.scheme}://{url_host(parts.hostname)}" + (f":{port}" if port else "")


async def url_target(host: Host, url: str) -> Target:
    from ..hosts.files import remote_home

    return Target(host=host, url=check_url(url), home=await remote_home(host))


async def deployment_target(host: Host, d: Deployment) -> Target:
    """A ready deployment: its port on the host's loopback, its model folder as tokenizer, its env
    file for the API key, its GPUs' names."""
    from ..deploy.launchers import launcher_for
    from ..hosts.files import remote_home

    plan = d.plan
    home = await remote_home(host)
    url = check_url(f"http://{url_host(plan.client_host)}:{plan.port}")
    env_file = getattr(launcher_for(host, plan, home), "env_path", None) if plan.uses_api_key else None
    return Target(host=host, url=url, home=home, deployment=d.name, model=d.model,
                  model_path=plan.model_path, tokenizer_path=await _tokenizer_folder(host, plan.model_path),
                  served_name=plan.served_name, env_file=env_file, plan=plan,
                  gpus=await _gpus(host, list(plan.gpu_ids) or  # a router's: its replicas' on its host
                                   [g for r in plan.replicas if r.host == plan.host for g in r.gpu_ids]))


async def _tokenizer_folder(host: Host, model_path: str | None) -> str | None:
    """A folder on the host with the model's tokenizer: the model folder, or for a repo id served
    from the host's HF cache its snapshot there (bench_serving given a repo id asks the Hub,
    which a host without a way out cannot reach). None: bench_serving gets the repo id."""
    if not model_path or model_path.startswith("/"):
        return model_path
    from ..hosts.model_copies import snapshot_folder

    try:
        return await snapshot_folder(host, model_path)
    except HostError:
        return None


async def _gpus(host: Host, ids: list[int]) -> dict:
    from ..telemetry.samples import snapshot

    names: list[str | None] | None = None
    try:
        snap = await snapshot(host)
        by_index = {g.index: g.name for g in snap.gpus}
        names = [by_index.get(i) for i in ids] if by_index else None
    except HostError:
        pass
    return {"count": len(ids), "ids": ids, "names": names}


# ------------------------------------------------------------------ the runner


def serving_argv(python: str, module: str, target: Target, profile: Profile, concurrency: int | None,
                 output_file: str) -> list[str]:
    """The target's engine's serving benchmark (``Engine.bench_argv``) for one step of PROFILE."""
    try:
        return _engine(target).bench_argv(
            python, module, url=target.url, settings=profile.settings, num_prompts=profile.num_prompts(concurrency),
            concurrency=concurrency, output_file=output_file, model_path=target.model_path,
            tokenizer_path=target.tokenizer_path, served_name=target.served_name)
    except NoBenchmark as exc:
        raise BenchInputError(str(exc)) from None


def _engine(target: Target) -> engines.Engine:
    return engines.get(target.plan.engine if target.plan else engines.DEFAULT)


def engine_title(plan: Plan | None) -> str:
    """How text names the engine `plan` runs (None, a --url run: the default engine)."""
    return engines.get(plan.engine if plan else engines.DEFAULT).title


def _eval_module(target: Target) -> str:
    engine = _engine(target)
    module = engine.eval_module()
    if module is None:
        raise BenchInputError(f"{engine.title} has no accuracy evaluation gpuops knows")
    return module


def quality_argv(python: str, target: Target, profile: Profile) -> list[str]:
    """The target's engine's accuracy evaluation (``Engine.eval_argv``) with PROFILE's settings."""
    _eval_module(target)  # the refusal of an engine without one
    try:
        return _engine(target).eval_argv(python, url=target.url, settings=profile.settings,
                                         served_name=target.served_name)
    except NoBenchmark as exc:
        raise BenchInputError(str(exc)) from None


class BenchRunner:
    """One profile against one target: stored as it goes (``running`` → ``ok``/``failed``/
    ``cancelled``), every step an event (``EVENT_KINDS``) passed to EMIT. Cancelling the task
    that awaits ``run()`` stops the benchmark on the host and records ``cancelled``."""

    def __init__(self, target: Target, profile: Profile, store: Store, *, emit: Callable[[BenchEvent], Any],
                 clock: Callable[[], float] = time.monotonic):
        self.target = target
        self.profile = profile
        self.store = store
        self.emit_cb = emit
        self.clock = clock
        self.run_id: int | None = None

    def emit(self, event: BenchEvent) -> None:
        self.emit_cb(event)

    async def prepare(self) -> tuple[str, str]:
        """(engine version, module) of the host; BenchInputError when it cannot run there."""
        from ..planning.hostfacts import engine_version

        host = self.target.host
        engine = _engine(self.target)
        version = await engine_version(host, engine.name)
        if version is None:
            raise BenchInputError(f"{engine.title} is not installed on {host.name} (python {host_python(host)})")
        module = engine.bench_module(version)
        if module is None:
            raise BenchInputError(f"{engine.title} has no serving benchmark gpuops knows")
        for key in ("dataset_path", "eval_data_path"):
            path = self.profile.settings.get(key)
            if path and not (await host.run(["test", "-r", path], timeout=30)).ok:
                raise BenchInputError(f"{key} {path}: no such readable file on {host.name}")
        return version, module

    async def run(self) -> BenchRun:
        version, module = await self.prepare()
        t = self.target
        run_dir = f"{t.home.rstrip('/')}/{RUN_DIR}/" \
                  f"{datetime.now(timezone.utc):%Y%m%dT%H%M%SZ}-{secrets.token_hex(3)}"
        run = self.store.add_bench_run(
            profile=self.profile.name, settings=self.profile.settings, deployment=t.deployment, host=t.host.name,
            url=t.url, model=t.model, engine_version=version, gpus=t.gpus, plan=t.plan, remote_dir=run_dir,
            started_at=utc_now())
        self.run_id = run.id
        self.emit(BenchStateEvent(run=self.run_id, state="running", profile=self.profile.to_json(),
                                  deployment=t.deployment, host=t.host.name, url=t.url, engine_version=version,
                                  module=_eval_module(t) if self.profile.kind == "quality" else module))
        quality = None
        try:
            await self._functional_checks()
            if self.profile.kind == "quality":
                quality = await self._quality(run_dir)
            else:
                for i, concurrency in enumerate(self.profile.steps()):
                    await self._serving_step(module, run_dir, i, concurrency)
        except asyncio.CancelledError:
            self._finish("cancelled", None, None)
            raise
        except (BenchFailed, HostError) as exc:
            return self._finish("failed", str(exc) if isinstance(exc, BenchFailed) else exc.message, None)
        return self._finish("ok", None, quality)

    async def _functional_checks(self) -> None:
        """Tool calls, the reasoning split and the MTP accept length (core/checks.py), over
        httpx through a port forward to the server as the host sees it; stored with the run and
        emitted as one ``checks`` event. The API key, when the deployment has one, is read from
        its 0600 env file into memory only (the Authorization header)."""
        from .functional import run_checks
        from ..hosts.files import read_env_value

        t = self.target
        parts = urlsplit(t.url)
        address = client_host(parts.hostname or "")
        port = parts.port or (443 if parts.scheme == "https" else 80)
        key = await read_env_value(t.host, t.env_file, "GPUOPS_API_KEY") if t.env_file else None
        async with t.host.forward(address, port) as (local, lport):
            results = await run_checks(f"{parts.scheme}://{local}:{lport}", model=t.served_name or "default",
                                       api_key=key, plan=t.plan)
        assert self.run_id is not None
        self.store.set_bench_checks(self.run_id, results)
        self.emit(BenchChecksEvent(run=self.run_id, checks=[r.to_json() for r in results]))

    def _finish(self, status: str, error: str | None, quality: dict | None) -> BenchRun:
        assert self.run_id is not None
        run = self.store.finish_bench_run(self.run_id, status, error=error, quality=quality)
        if run.model is None:  # a --url run: the model the server said it serves
            info: dict[str, Any] = next((r["server_info"] for r in run.records
                                         if isinstance(r.get("server_info"), dict)), {})
            model = info.get("served_model_name") or info.get("model_path")
            run = self.store.set_bench_model(run.id, model) if model else run
        self.emit(BenchStateEvent(run=self.run_id, state=status, error=error))
        return run

    async def _stream(self, argv: list[str], run_dir: str, step: int, steps: int) -> list[str]:
        """Run ARGV on the host under the relay; progress and log events; the output lines.
        BenchFailed with its last words when it exits non-zero."""
        t = self.target
        started = self.clock()
        lines: list[str] = []
        last: tuple[int, int] | None = None
        command = [host_python(t.host), "-c", script_source(bench_relay_program), "run", t.env_file or "", run_dir,
                   *argv]
        async with t.host.stream(command) as stream:
            async for line in stream:
                progress = parse_progress(line)
                if progress is not None:
                    if progress == last:  # tqdm repeats its last bar when it closes
                        continue
                    last = progress
                    self.emit(BenchProgressEvent(run=self.run_id, step=step, steps=steps, done=progress[0],
                                                 total=progress[1], elapsed_s=round(self.clock() - started, 3)))
                    continue
                lines.append(line)
                self.emit(BenchLogEvent(run=self.run_id, step=step, line=line))
        if stream.returncode != 0:
            said = [x for x in [*lines, *stream.stderr_tail] if x.strip()]
            reason = said[-1].strip() if said else "no output"
            raise BenchFailed(f"{argv[2]} exited with status {stream.returncode}: {reason}")
        return lines

    async def _serving_step(self, module: str, run_dir: str, step: int, concurrency: int | None) -> None:
        steps = len(self.profile.steps())
        output = f"{run_dir}/step-{step}.jsonl"
        self.emit(BenchStepEvent(run=self.run_id, step=step, steps=steps, max_concurrency=concurrency,
                                 num_prompts=self.profile.num_prompts(concurrency)))
        await self._stream(serving_argv(host_python(self.target.host), module, self.target, self.profile,
                                        concurrency, output), run_dir, step, steps)
        res = await self.target.host.run(["cat", output], timeout=60)
        if not res.ok:
            raise BenchFailed(f"no results in {output} on {self.target.host.name}: {res.stderr.strip()}")
        try:
            records = parse_jsonl(res.stdout, output, _engine(self.target).name)
        except BenchInputError as exc:
            raise BenchFailed(str(exc)) from None
        assert self.run_id is not None
        self.store.add_bench_records(self.run_id, records)
        for record in records:
            self.emit(BenchResultEvent(run=self.run_id, step=step, summary=summary(record)))

    async def _quality(self, run_dir: str) -> dict:
        s = self.profile.settings
        self.emit(BenchStepEvent(run=self.run_id, step=0, steps=1, max_concurrency=s["max_concurrency"],
                                 num_examples=s["num_examples"]))
        lines = await self._stream(quality_argv(host_python(self.target.host), self.target, self.profile),
                                   run_dir, 0, 1)
        found = _engine(self.target).read_eval_output(lines)
        if "score" not in found:
            raise BenchFailed("run_eval printed no score")
        quality = {"eval": s["eval_name"], "score": found["score"], "num_examples": s["num_examples"],
                   "latency_s": found.get("latency_s"), "output_throughput": found.get("output_throughput")}
        self.emit(BenchQualityEvent(run=self.run_id, **quality))
        return quality


# ------------------------------------------------------------------ live server metrics


@dataclass(frozen=True)
class ServerMetrics:
    """One reading of the server's /metrics (None: the server does not report it)."""

    ts: str
    running_reqs: float | None = None
    queued_reqs: float | None = None
    gen_throughput: float | None = None  # tok/s
    token_usage: float | None = None  # 0..1 of the KV pool
    accept_length: float | None = None  # speculative decoding only
    error: str | None = None

    def to_json(self) -> dict:
        return {"ts": self.ts, "running_reqs": self.running_reqs, "queued_reqs": self.queued_reqs,
                "gen_throughput": self.gen_throughput, "token_usage": self.token_usage,
                "accept_length": self.accept_length, "error": self.error}


def parse_metrics(text: str, ts: str | None = None, engine: str = engines.DEFAULT) -> ServerMetrics:
    """The engine's Prometheus text (its ``metrics`` names): counts are summed over ranks (DP),
    ratios averaged."""
    from prometheus_client.parser import text_string_to_metric_families

    ts = ts or utc_now()
    values: dict[str, list[float]] = {}
    try:
        for family in text_string_to_metric_families(text):
            for sample in family.samples:
                values.setdefault(sample.name, []).append(sample.value)
    except ValueError as exc:
        return ServerMetrics(ts, error=f"unreadable /metrics: {exc}")

    def total(name: str) -> float | None:
        return sum(values[name]) if name in values else None

    def mean(name: str) -> float | None:
        return sum(values[name]) / len(values[name]) if values.get(name) else None

    names = engines.get(engine).metrics
    usage = mean(names.get("token_usage", ""))
    return ServerMetrics(ts, running_reqs=total(names.get("running_reqs", "")),
                         queued_reqs=total(names.get("queued_reqs", "")),
                         gen_throughput=total(names.get("gen_throughput", "")),
                         token_usage=usage if usage is not None else mean(names.get("full_token_usage", "")),
                         accept_length=mean(names.get("accept_length", "")))


async def poll_metrics(target: Target, interval: float = 1.0) -> AsyncIterator[ServerMetrics]:
    """The server's /metrics every INTERVAL seconds, read on the target's host (the server may
    listen on the host's loopback only). A reading that failed carries ``error`` (e.g. a server
    started without --enable-metrics answers 404). Closing the iterator ends the remote poller."""
    if not interval > 0:
        raise ValueError(f"interval must be > 0, got {interval!r}")
    argv = [host_python(target.host), "-c", script_source(bench_relay_program), "metrics", target.env_file or "",
            target.url + "/metrics", repr(float(interval))]
    async with target.host.stream(argv) as stream:
        async for line in stream:
            try:
                doc = json.loads(line)
            except ValueError:
                continue
            if doc.get("status") == 200 and isinstance(doc.get("text"), str):
                yield parse_metrics(doc["text"], engine=_engine(target).name)
            else:
                hint = " (start the server with --enable-metrics)" if doc.get("status") == 404 else ""
                yield ServerMetrics(utc_now(), error=f"{doc.get('error') or 'no answer'}{hint}")


# ------------------------------------------------------------------ import, compare, export


def import_jsonl(store: Store, text: str, source: str, engine: str = engines.DEFAULT) -> BenchRun:
    """Results bench_serving wrote outside gpuops (its --output-file): one stored run, its records
    in order (ENGINE's records). The model and the engine's version come from the records'
    server_info when present."""
    records = parse_jsonl(text, source, engine)
    info: dict[str, Any] = next((r["server_info"] for r in records if isinstance(r.get("server_info"), dict)), {})
    first = records[0]
    settings = {"file": source, **{k: first.get(k) for k in ("backend", "dataset_name", "request_rate",
                                                              "random_input_len", "random_output_len")}}
    return store.add_bench_run(profile="imported", settings=settings, source="import", status="ok",
                               model=info.get("served_model_name") or info.get("model_path"),
                               engine_version=info.get("version"), records=records)


def summary(record: dict) -> dict:
    """The headline figures of one record (what a results table shows)."""
    keys = ("max_concurrency", "request_rate", "completed", "duration")
    return {**{k: record.get(k) for k in keys},
            **{k: record.get(k) for k, *_ in METRICS if k != "quality_score"}}


UNLIMITED = "∞"  # the concurrency of a record run without --max-concurrency (bench_serving's null)


def concurrency_label(max_concurrency: Any) -> str:
    """A record's concurrency as compare and export label it: the number, or ∞ when it had none."""
    return str(max_concurrency) if max_concurrency else UNLIMITED


def _columns(runs: list[BenchRun]) -> list[dict]:
    cols = []
    for run in runs:
        score = (run.quality or {}).get("score")
        records = run.records or [{}]
        for record in records:
            mc = record.get("max_concurrency")
            label = f"#{run.id}" + (f" c={concurrency_label(mc)}" if len(records) > 1 else "")
            values = {k: (score if k == "quality_score" else record.get(k)) for k, *_ in METRICS}
            cols.append({"run": run.id, "label": label, "max_concurrency": mc, "values": values,
                         "measured": bool(run.records)})
    return cols


def _delta(value: Any, base: Any) -> float | None:
    if not isinstance(value, (int, float)) or not isinstance(base, (int, float)) or base == 0:
        return None
    return round((value - base) / abs(base) * 100, 2)


def _pair_columns(cols: list[dict], first: list[dict]) -> None:
    """Each column's baseline: the first run's column of the same concurrency (None: it has none);
    with several concurrencies measured, each label says its own."""
    if len({c["max_concurrency"] for c in cols if c["measured"]}) > 1:  # the reader sees what is paired
        for c in cols:
            if c["measured"] and " c=" not in c["label"]:
                c["label"] += f" c={concurrency_label(c['max_concurrency'])}"
    for c in cols:
        same = [b for b in first if b["max_concurrency"] == c["max_concurrency"]]
        c["baseline"] = cols.index(same[0]) if same else None


def _compare_note(cols: list[dict], first: list[dict], first_id: int) -> str | None:
    """What has no delta, and why (None: every measured column has its baseline)."""
    unmatched = [c["label"] for c in cols if c["baseline"] is None and c["measured"]]
    others = [c for c in cols if c["run"] != first_id and c["measured"]]
    if others and all(c["baseline"] is None for c in others):
        return (f"no run shares a concurrency with #{first_id} "
                f"({', '.join(concurrency_label(c['max_concurrency']) for c in first)}): no deltas")
    if unmatched:
        return f"no delta for {', '.join(unmatched)}: #{first_id} has no run at that concurrency"
    return None


def _compare_metrics(cols: list[dict]) -> list[dict]:
    """Each metric any column has: its values and their deltas in percent against their baselines."""
    metrics = []
    for key, label, unit, better in METRICS:
        values = [c["values"][key] for c in cols]
        if all(v is None for v in values):
            continue
        deltas = [None if c["baseline"] is None or i == c["baseline"]
                  else _delta(c["values"][key], cols[c["baseline"]]["values"][key]) for i, c in enumerate(cols)]
        metrics.append({"key": key, "label": label, "unit": unit, "better": better, "values": values,
                        "delta_percent": deltas})
    return metrics


def compare(runs: list[BenchRun]) -> dict:
    """Runs side by side: one column per record (a sweep gives one per concurrency), each with its
    delta in percent against the first run's column of the same concurrency. A column whose
    concurrency the first run lacks has no baseline and no deltas (a c=256 run is never compared
    with a c=4 one); ``note`` says so."""
    cols = _columns(runs)
    first = [c for c in cols if c["run"] == runs[0].id]
    _pair_columns(cols, first)
    note = _compare_note(cols, first, runs[0].id)
    metrics = _compare_metrics(cols)
    by_id = {r.id: r for r in runs}
    names = list(dict.fromkeys(c.name for r in runs for c in r.checks or []))
    checks = [{"name": n, "values": [next((c.ok for c in by_id[col["run"]].checks or [] if c.name == n),
                                          "not run") for col in cols]} for n in names]
    return {"schema": SCHEMA, "runs": [r.to_json(full=False) for r in runs],
            "columns": [{"run": c["run"], "label": c["label"], "max_concurrency": c["max_concurrency"],
                         "baseline": c["baseline"]} for c in cols],
            "metrics": metrics, "checks": checks, "note": note}


def fmt(value: Any) -> str:
    if value is None:
        return "-"
    if isinstance(value, float):
        return f"{value:,.2f}" if abs(value) < 100 else f"{value:,.1f}"
    return str(value)


def compare_rows(doc: dict) -> tuple[list[str], list[list[str]]]:
    """compare()'s document as a header and rows of text cells ("1,234.5 (+3.2%)")."""
    header = ["metric", *[c["label"] for c in doc["columns"]]]
    rows = []
    for m in doc["metrics"]:
        cells = [f"{m['label']}" + (f" ({m['unit']})" if m["unit"] else "")]
        for v, d in zip(m["values"], m["delta_percent"]):
            cells.append(fmt(v) + (f" ({d:+.1f}%)" if d is not None else ""))
        rows.append(cells)
    for c in doc.get("checks") or []:
        rows.append([f"check {c['name']}", *[CHECK_WORDS[v] for v in c["values"]]])
    return header, rows


def describe_run(run: BenchRun) -> str:
    gpus = run.gpus or {}
    names = ", ".join(sorted({n for n in gpus.get("names") or [] if n})) or "?"
    where = run.deployment or run.url or run.settings.get("file") or "-"
    return (f"#{run.id} {run.profile} ({run.status}) {where}: {run.model or '?'}, {engine_title(run.plan)} "
            f"{run.engine_version or '?'}, " + (f"{gpus.get('count')}x {names}" if gpus else "GPUs ?")
            + f", started {run.started_at or '-'}")


def describe_profile(p: Profile) -> str:
    """What a profile runs, in one line (the launch form's preview, the run screen's title)."""
    s = p.settings
    if p.kind == "quality":
        return (f"{s['eval_name']}: {s['num_examples']} examples, {s['max_concurrency']} in parallel, "
                f"data {s['eval_data_path']}")
    steps = ", ".join(f"c={c or 'unlimited'} × {p.num_prompts(c)}" for c in p.steps())
    dataset = s["dataset_name"] + (f" ({s['dataset_path']})" if s.get("dataset_path") else "")
    return (f"{len(p.steps())} run{'s' if len(p.steps()) > 1 else ''} ({steps} prompts); input {s['random_input_len']}"
            f" / output {s['random_output_len']} tokens; {dataset}; request rate {s['request_rate']}")


def export(runs: list[BenchRun], kind: str) -> str:
    """Runs as ``md`` (the compare table under one line per run), ``csv`` (one row per record) or
    ``json`` (the stored runs, records included)."""
    if kind == "json":
        return json.dumps({"schema": SCHEMA, "runs": [r.to_json() for r in runs]}, indent=2, allow_nan=False) + "\n"
    if kind == "md":
        header, rows = compare_rows(compare(runs))
        lines = [f"- {describe_run(r)}" for r in runs] + ["", "| " + " | ".join(header) + " |",
                                                          "|" + "---|" * len(header)]
        lines += ["| " + " | ".join(c.replace("|", "\\|") for c in row) + " |" for row in rows]
        return "\n".join(lines) + "\n"
    if kind == "csv":
        buf = io.StringIO()
        out = csv.writer(buf, lineterminator="\n")
        keys = [k for k, *_ in METRICS if k != "quality_score"]
        out.writerow(["run", "source", "deployment", "url", "model", engines.plan_key("engine_version"), "gpu_count", "gpu_names",
                      "profile", "status", "started_at", "max_concurrency", "request_rate", "completed", "duration",
                      *keys, "quality_score"])
        for run in runs:
            gpus = run.gpus or {}
            head = [run.id, run.source, run.deployment, run.url, run.model, run.engine_version, gpus.get("count"),
                    ";".join(n or "" for n in gpus.get("names") or []), run.profile, run.status, run.started_at]
            for record in run.records or [{}]:
                out.writerow([*("" if v is None else v for v in head),
                              *("" if record.get(k) is None else record.get(k)
                                for k in ("max_concurrency", "request_rate", "completed", "duration", *keys)),
                              "" if not run.quality else run.quality.get("score")])
        return buf.getvalue()
    raise BenchInputError(f"--format must be md, csv or json, got {kind!r}")
