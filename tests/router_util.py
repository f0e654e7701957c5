"""The real sglang-router from PyPI for tests: find or install it, start it on free loopback ports in
front of given worker URLs, wait for it with bounded deadlines, and read its own view of the workers.

sglang-router is a Rust router shipped as a Python wheel (cp38-abi3, manylinux x86_64, ~31 MB; the
Rust code is sglang_router/sglang_router_rs.abi3.so, loaded by python). It is started the way a GPU
host starts it, ``python -m sglang_router.launch_router --worker-urls URL ...``; it needs no network
at start (worker metadata and the tokenizer come from the workers and their model folder).

Where the router comes from (``router_python``), first that works:
  GPUOPS_TEST_ROUTER_PYTHON   a python that imports sglang_router ROUTER_VERSION
  GPUOPS_TEST_SGLANG_VENV     the SGLang host venv (scripts/sglang-host-venv.sh), if it has the router
  GPUOPS_TEST_ROUTER_VENV     a venv that ``install_router`` makes (pip install sglang-router==VERSION;
                              default: TMPDIR/gpuops-sglang-router-VERSION), kept between runs
``RouterUnavailable`` says why none could be had (a test skips with it).

Its HTTP API, as 0.3.2 answers it (on --port): GET /health and /liveness "OK" (the process only, never
the workers); GET /readiness 200 {"status":"ready","healthy_workers":N,"total_workers":M}, or 503
{"status":"not ready","reason":"insufficient healthy workers"}; GET /workers {"workers":[{"id","url",
"model_id","is_healthy","load",...}],"total":M,"stats":{...}}; GET /workers/{id}; GET /health_generate;
GET /v1/models, /get_model_info, /get_server_info, /get_loads; POST /generate, /v1/completions,
/v1/chat/completions (routed). Prometheus text on --prometheus-port (not on --port): smg_worker_health
{worker=URL} 1/0, smg_worker_health_checks_total, smg_worker_retries_total, smg_worker_cb_state, ...
"""

from __future__ import annotations

import contextlib
import fcntl
import os
import re
import shutil
import signal
import subprocess
import sys
import tempfile
import threading
import time
from pathlib import Path
from typing import Callable

import httpx
import pytest

from tests.sshd import free_port

ROUTER_VERSION = "0.3.2"  # the newest sglang-router on PyPI (2026-01); its successor is PyPI's `smg`
ROUTER_MODULE = "sglang_router.launch_router"
MARKER = f".gpuops-sglang-router-{ROUTER_VERSION}"
ANSI = re.compile(r"\x1b\[[0-9;]*m")  # the router colours its log even into a pipe (NO_COLOR ignored)
# What the router logs, colours stripped ("2026-12-01 17:30:13  WARN smg::core::worker: /home/.../worker.rs:948: ...")
LOG_LINE = re.compile(r"^(?P<ts>\d{4}-\d\d-\d\d \d\d:\d\d:\d\d) +(?P<level>TRACE|DEBUG|INFO|WARN|ERROR) (?P<rest>.*)$")
_CHECK = ("import importlib.metadata as m, sglang_router.sglang_router_rs as rs; "
          "print(m.version('sglang-router'))")


class RouterUnavailable(RuntimeError):
    """The router could not be found or installed: the message says why."""


def router_version(python: str | os.PathLike) -> str | None:
    """The sglang-router version that PYTHON imports (its Rust part included), or None."""
    try:
        out = subprocess.run([str(python), "-c", _CHECK], capture_output=True, text=True, timeout=60)
    except (OSError, subprocess.TimeoutExpired):
        return None
    return out.stdout.strip() if out.returncode == 0 else None


def default_venv() -> Path:
    return Path(os.environ.get("GPUOPS_TEST_ROUTER_VENV")
                or Path(tempfile.gettempdir()) / f"gpuops-sglang-router-{ROUTER_VERSION}")


def install_router(venv: Path | None = None, timeout: float = 300) -> Path:
    """A venv with sglang-router ROUTER_VERSION (and its dependencies) from PyPI; kept and reused
    (a marker file says it is complete). Returns its python. Raises RouterUnavailable."""
    venv = Path(venv or default_venv())
    python = venv / "bin" / "python"
    venv.parent.mkdir(parents=True, exist_ok=True)
    with open(venv.parent / f".{venv.name}.lock", "w") as lock:  # two pytest runs at once: one installs
        fcntl.flock(lock, fcntl.LOCK_EX)
        if (venv / MARKER).is_file() and router_version(python) == ROUTER_VERSION:
            return python
        shutil.rmtree(venv, ignore_errors=True)
        steps = [[sys.executable, "-m", "venv", str(venv)],
                 [str(python), "-m", "pip", "install", "-q", "--disable-pip-version-check",
                  f"sglang-router=={ROUTER_VERSION}"]]
        deadline = time.monotonic() + timeout
        for argv in steps:
            try:
                res = subprocess.run(argv, capture_output=True, text=True,
                                     timeout=max(1.0, deadline - time.monotonic()))
            except subprocess.TimeoutExpired:
                shutil.rmtree(venv, ignore_errors=True)
                raise RouterUnavailable(f"installing sglang-router=={ROUTER_VERSION} took over {timeout:.0f} s") from None
            if res.returncode != 0:
                shutil.rmtree(venv, ignore_errors=True)
                tail = "\n".join(line for line in (res.stderr or res.stdout).splitlines()
                                 if "is ignored" not in line)[-1500:]
                what = "pip install" if "pip" in argv else "python -m venv"
                raise RouterUnavailable(f"{what} sglang-router=={ROUTER_VERSION} into {venv} failed "
                                        f"(exit {res.returncode}): {tail}")
        got = router_version(python)
        if got != ROUTER_VERSION:
            raise RouterUnavailable(f"sglang-router installed in {venv} does not import (got {got!r})")
        (venv / MARKER).touch()
        return python


def python_or_skip(get: Callable[[], Path], what: str) -> Path:
    """`get()`'s python, or the test skipped saying why (failed in CI, where the set-up provides it)."""
    try:
        return get()
    except RouterUnavailable as e:
        why = f"{what}: {e}"
        if os.environ.get("CI", "").lower() == "true":  # scripts/sglang-host-venv.sh installs it there
            pytest.fail(why)
        pytest.skip(why)


def router_python(install: bool = True) -> Path:
    """A python that runs ``-m sglang_router.launch_router`` ROUTER_VERSION (see the module's doc)."""
    tried = []
    explicit = os.environ.get("GPUOPS_TEST_ROUTER_PYTHON")
    if explicit:
        got = router_version(explicit)
        if got == ROUTER_VERSION:
            return Path(explicit)
        raise RouterUnavailable(f"GPUOPS_TEST_ROUTER_PYTHON={explicit} imports sglang-router {got!r}, "
                                f"not {ROUTER_VERSION}")
    host = os.environ.get("GPUOPS_TEST_SGLANG_VENV")
    if host:
        py = Path(host) / "bin" / "python"
        got = router_version(py)
        if got == ROUTER_VERSION:
            return py
        tried.append(f"the SGLang host venv {host} has sglang-router {got!r}")
    if not install:
        raise RouterUnavailable("; ".join(tried) or "no sglang-router found")
    return install_router()


class Router:
    """``PYTHON -m sglang_router.launch_router`` on 127.0.0.1 (a free port, and a free Prometheus port),
    in front of WORKER_URLS, its output lines kept with their arrival times (colours stripped).

    Health checking is fast by default for tests (every HEALTH_INTERVAL s, FAILURES misses mark a
    worker unhealthy, SUCCESSES hits healthy again); the router's own defaults are 60 s / 3 / 2."""

    def __init__(self, python: str | os.PathLike, worker_urls: list[str], *, policy: str = "round_robin",
                 health_interval: int = 1, health_timeout: int = 1, failures: int = 2, successes: int = 1,
                 extra: tuple[str, ...] = (), env: dict | None = None, module: str = ROUTER_MODULE):
        self.port = free_port()
        self.prometheus_port = free_port()
        self.worker_urls = list(worker_urls)
        self.url = f"http://127.0.0.1:{self.port}"
        self.argv = [str(python), "-m", module, "--host", "127.0.0.1", "--port", str(self.port),
                     "--prometheus-host", "127.0.0.1", "--prometheus-port", str(self.prometheus_port),
                     "--worker-urls", *self.worker_urls, "--policy", policy,
                     "--health-check-interval-secs", str(health_interval),
                     "--health-check-timeout-secs", str(health_timeout),
                     "--health-failure-threshold", str(failures), "--health-success-threshold", str(successes),
                     "--worker-startup-check-interval", "1", "--log-level", "info", *extra]
        self.lines: list[tuple[float, str]] = []
        self.started = time.time()
        self.proc = subprocess.Popen(self.argv, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True,
                                     errors="replace", start_new_session=True,
                                     env=dict(os.environ, **(env or {})))
        self.reader = threading.Thread(target=self._read, daemon=True)
        self.reader.start()

    def _read(self):
        for line in self.proc.stdout:
            self.lines.append((time.time(), ANSI.sub("", line.rstrip("\n"))))

    @property
    def text(self) -> list[str]:
        return [line for _, line in self.lines]

    def tail(self, n: int = 40) -> str:
        return "\n".join(x[:300] for x in self.text[-n:])

    def _alive(self) -> None:
        if self.proc.poll() is not None:
            self.reader.join(5)
            raise AssertionError(f"the router exited with {self.proc.returncode}; its output:\n{self.tail()}")

    # ---------------------------------------------------------------- its own view

    def get(self, path: str, timeout: float = 5) -> httpx.Response:
        return httpx.get(self.url + path, timeout=timeout)

    def workers(self) -> dict[str, dict]:
        """GET /workers: each worker's record by its URL."""
        return {w["url"]: w for w in self.get("/workers").json()["workers"]}

    def readiness(self) -> tuple[int, dict]:
        r = self.get("/readiness")
        return r.status_code, r.json()

    def metrics(self) -> str:
        return httpx.get(f"http://127.0.0.1:{self.prometheus_port}/metrics", timeout=5).text

    # ---------------------------------------------------------------- bounded waits

    def wait_ready(self, timeout: float = 90) -> float:
        """Until /readiness says every worker is healthy; returns the seconds since the start.
        (0.3.2 in a venv that also has SGLang spends ~10 s importing it: launch_router's mini_lb
        imports sglang.srt.tracing if it can.)"""
        deadline = time.monotonic() + timeout
        last = None
        while time.monotonic() < deadline:
            self._alive()
            with contextlib.suppress(httpx.HTTPError, ValueError):
                code, body = self.readiness()
                last = (code, body)
                if code == 200 and body.get("healthy_workers") == len(self.worker_urls):
                    return time.time() - self.started
            time.sleep(0.2)
        raise AssertionError(f"the router was not ready in {timeout:.0f} s (last /readiness: {last}); "
                             f"its output:\n{self.tail()}")

    def wait_worker(self, url: str, healthy: bool, timeout: float = 20) -> float:
        """Until the router's /workers says URL is_healthy == HEALTHY; returns the seconds waited."""
        t0 = time.monotonic()
        deadline = t0 + timeout
        seen = None
        while time.monotonic() < deadline:
            self._alive()
            with contextlib.suppress(httpx.HTTPError, ValueError, KeyError):
                seen = self.workers()[url]
                if seen["is_healthy"] is healthy:
                    return time.monotonic() - t0
            time.sleep(0.1)
        raise AssertionError(f"the router did not see {url} as {'healthy' if healthy else 'unhealthy'} in "
                             f"{timeout:.0f} s (last: {seen}); its output:\n{self.tail()}")

    def wait_for(self, pattern: str, timeout: float = 20) -> tuple[float, str]:
        rx = re.compile(pattern)
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            for t, line in list(self.lines):
                if rx.search(line):
                    return t, line
            if self.proc.poll() is not None and not self.reader.is_alive():
                break
            time.sleep(0.05)
        raise AssertionError(f"no router line matching {pattern!r}; its output:\n{self.tail()}")

    # ---------------------------------------------------------------- the end

    def stop(self, timeout: float = 15) -> int:
        """SIGTERM (it logs 'Received terminate signal, starting graceful shutdown'), SIGKILL after TIMEOUT."""
        if self.proc.poll() is None:
            self.proc.send_signal(signal.SIGTERM)
            try:
                self.proc.wait(timeout)
            except subprocess.TimeoutExpired:
                self.proc.kill()
                self.proc.wait(10)
        self.reader.join(5)
        return self.proc.returncode

    def __enter__(self) -> "Router":
        return self

    def __exit__(self, *exc) -> None:
        self.stop()
