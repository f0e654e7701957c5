"""Downloading a model's weights on its host, with progress measured on disk.

`hf download REPO --local-dir DIR` (huggingface_hub's CLI beside the host's python)
runs on the host; progress is the apparent size of DIR (incomplete files included)
against the expected total, sampled once a second; no growth for `stall_after`
seconds while the download runs is a stall (`download-stalled`). An HF token travels
only through a 0600 env file the command sources: never argv, never printed.

The download runs under gpuops' tether (``core/hosts/programs/tether.py``): it ends with the
gpuops process that started it (a ``kill -9`` included), locally and over SSH, so no
downloader is left writing into a folder that a later deploy or restart resumes.
"""

from __future__ import annotations

import asyncio
import posixpath
import re
import time
from dataclasses import dataclass
from typing import AsyncIterator

from ..hosts.host import Host, HostError, host_python, script_source
from ..hosts.files import env_file_text, write_private_file
from ..hosts.programs import tether
from ..hosts.programs import folder_size as folder_size_program


# $1: env file to source (may be empty), then the command
_WITH_ENV = 'f=$1; shift; if [ -n "$f" ]; then set -a; . "$f"; set +a; rm -f "$f"; fi; exec "$@"'


class DownloadError(HostError):
    pass


_CSI = re.compile(r"\x1b\[[0-9;?]*[ -/]*[@-~]")


def _said(lines: list[str]) -> str:
    """What a failed download said: its last line that is not the CLI's "Hint: set HF_DEBUG=1" (which
    follows every error of `hf download`), its colours taken off."""
    plain = [_CSI.sub("", ln).strip() for ln in lines]
    meant = [ln for ln in plain if ln and not ln.startswith("Hint:")]
    return (meant or plain or ["no output"])[-1]


@dataclass(frozen=True)
class DownloadProgress:
    done_bytes: int
    total_bytes: int | None
    rate_bps: float  # over the last few seconds
    eta_s: float | None
    stalled_for_s: float
    finished: bool = False

    @property
    def fraction(self) -> float | None:
        return min(1.0, self.done_bytes / self.total_bytes) if self.total_bytes else None


def hf_argv(host: Host) -> list[str]:
    """`hf` from the environment that has the host's python (a venv's bin), else PATH."""
    python = host.config.python
    if python and "/" in python:
        return [posixpath.join(posixpath.dirname(python), "hf")]
    return ["hf"]


def tethered(host: Host, argv: list[str]) -> list[str]:
    """`argv` run on `host` under gpuops' tether: it dies with the process that runs it here."""
    return [host_python(host), "-c", script_source(tether), tether.MARKER, *argv]


async def bytes_on_disk(host: Host, path: str) -> int:
    res = await host.run([host_python(host), "-c", script_source(folder_size_program), path], timeout=60)
    try:
        return int(res.stdout.strip())
    except ValueError:
        return 0


class Download:
    def __init__(self, host: Host, repo_id: str, local_dir: str | None, expected_bytes: int | None, *,
                 token: str | None = None, token_file: str | None = None, stall_after_s: float = 120.0,
                 poll_s: float = 1.0, cache_folder: str | None = None):
        """Into `local_dir`; with `local_dir` None into the host's HF hub cache, whose entry for the
        repo (`cache_folder`, models--owner--name) is where the bytes are counted."""
        self.host = host
        self.repo_id = repo_id
        self.local_dir = local_dir
        self.cache_folder = cache_folder
        self.expected = expected_bytes
        self.token = token
        self.token_file = token_file  # where the 0600 env file with the token goes on the host
        self.stall_after = stall_after_s
        self.poll = poll_s
        self.stderr_tail: list[str] = []

    @property
    def into(self) -> str:
        return self.local_dir or self.cache_folder or "the HF cache"

    def argv(self) -> list[str]:
        where = ["--local-dir", self.local_dir] if self.local_dir else []  # none: the host's HF cache
        return [*hf_argv(self.host), "download", self.repo_id, *where]

    async def progress(self) -> AsyncIterator[DownloadProgress]:
        """Run the download, yielding progress about once a second; raises DownloadError
        when it fails or stalls (the remote download is ended either way)."""
        env_file = ""
        if self.token:
            if not self.token_file:
                raise DownloadError("a token needs a token_file path on the host")
            await write_private_file(self.host, self.token_file, env_file_text({"HF_TOKEN": self.token}, "gpuops"))
            env_file = self.token_file
        stream = self.host.stream(tethered(self.host, ["sh", "-c", _WITH_ENV, "gpuops-download", env_file,
                                                       *self.argv()]))
        output: list[str] = []

        async def drain() -> None:
            async for line in stream:
                output.append(line)
                del output[:-20]

        reader = asyncio.create_task(drain())
        history: list[tuple[float, int]] = []
        last_growth = time.monotonic()
        last_bytes = -1
        try:
            while True:
                counted = self.local_dir or self.cache_folder
                done = await bytes_on_disk(self.host, counted) if counted else 0
                now = time.monotonic()
                if done > last_bytes:
                    last_bytes, last_growth = done, now
                history = [(t, b) for t, b in history if now - t <= 5.0] + [(now, done)]
                rate = (history[-1][1] - history[0][1]) / (history[-1][0] - history[0][0]) \
                    if len(history) > 1 and history[-1][0] > history[0][0] else 0.0
                eta = (self.expected - done) / rate if self.expected and rate > 0 else None
                stalled = now - last_growth
                finished = reader.done()
                yield DownloadProgress(done, self.expected, rate, eta, stalled, finished)
                if finished:
                    break
                if stalled >= self.stall_after:
                    raise DownloadError(
                        f"download-stalled: no bytes for {stalled:.0f}s at {done / 1e9:.2f} GB "
                        f"of {self.repo_id} into {self.into}",
                        "check the host's network and the Hub; restarting resumes from what is on disk",
                    )
                try:
                    await asyncio.wait_for(asyncio.shield(reader), self.poll)
                except asyncio.TimeoutError:
                    pass
            await reader
            self.stderr_tail = list(stream.stderr_tail)
            if stream.returncode not in (0, None):
                said = _said(list(stream.stderr_tail) or output)
                denied = any(w in said.lower() for w in ("access denied", "gated", "restricted", "401", "403"))
                raise DownloadError(f"download of {self.repo_id} failed (exit {stream.returncode}): {said}",
                                    f"{self.repo_id} needs a Hugging Face token with access to it: set HF_TOKEN "
                                    "where gpuops runs (or `hf auth login` there), then deploy or restart again"
                                    if denied and not self.token else None)
        finally:
            reader.cancel()
            await stream.aclose()


def local_hf_token() -> str | None:
    """The operator's Hugging Face token on this machine (HF_TOKEN, else huggingface_hub's stored
    token), which a download on a host is given through a 0600 env file there; None when there is none.
    Every front end's deploy, restart and swap take it from here (a restart of a gated model needs it too)."""
    import os

    token = os.environ.get("HF_TOKEN")
    if token:
        return token
    try:
        from huggingface_hub import get_token

        return get_token()
    except Exception:
        return None
