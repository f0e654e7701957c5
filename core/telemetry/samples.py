"""GPU and host telemetry: typed samples, the NA value, and where samples come from.

Local hosts without a configured ``python`` are sampled in-process (NVML through
nvidia-ml-py, in a thread). Every other host runs gpuops' reporter
(``core/hosts/programs/reporter.py``) with the host's python over one long-lived channel, one
JSON line per interval. Where that python has no pynvml, the GPU rows come from
``nvidia-smi --query-gpu … --format=csv,noheader,nounits -lms``.
"""

from __future__ import annotations

import asyncio
import functools
import json
import math
import time
from dataclasses import dataclass, field
from typing import Any, AsyncGenerator, AsyncIterator, Callable, Container, Iterable, Optional

from ..hosts.programs import reporter
from ..redact import redact
from ..hosts.host import Host, HostError, LocalHost, host_python, script_source

MIB = 1024 * 1024


class _NAType(float):
    """The one value for anything NVML can't answer: prints "N/A", behaves like NaN."""

    def __new__(cls) -> "_NAType":
        return float.__new__(cls, "nan")

    def __repr__(self) -> str:
        return "N/A"

    __str__ = __repr__

    def __format__(self, spec: str) -> str:
        width = "".join(ch for ch in spec.split(".")[0] if ch.isdigit())
        align = "<" if spec.startswith("<") else ">"
        return format("N/A", f"{align}{width}") if width else "N/A"

    def __bool__(self) -> bool:
        return False

    def __reduce__(self) -> str:
        return "NA"


NA: Any = _NAType()


def na(value: Any) -> Any:
    return NA if value is None else value


def is_na(value: Any) -> bool:
    return value is None or value is NA or (isinstance(value, float) and math.isnan(value))


def plain(value: Any) -> Any:
    """For JSON: NA (and NaN) become null."""
    return None if is_na(value) else value


def memory_used(gpus: Iterable[GpuSample], gpu_ids: Container[int] | None = None) -> dict[int, int | None]:
    """Bytes used per GPU index (None where NVML said N/A), for the GPUs in `gpu_ids` (all when
    None): the stall watcher's memory reading."""
    out: dict[int, int | None] = {}
    for g in gpus:
        if gpu_ids is None or g.index in gpu_ids:
            v = plain(g.memory_used)
            out[g.index] = None if v is None else int(v)
    return out


@dataclass
class GpuProcess:
    pid: int
    user: str | None
    command: str | None
    used_bytes: Any  # int or NA

    def to_json(self) -> dict[str, Any]:
        return {"pid": self.pid, "user": self.user, "command": self.command, "used_bytes": plain(self.used_bytes)}


@dataclass
class GpuSample:
    index: int
    uuid: str | None
    name: str | None
    memory_total: Any
    memory_used: Any
    memory_reserved: Any
    util: Any
    power_w: Any
    temp_c: Any
    sm_clock: Any = NA
    processes: list[GpuProcess] = field(default_factory=list)

    @property
    def memory_fraction(self) -> Any:
        if is_na(self.memory_used) or is_na(self.memory_total) or not self.memory_total:
            return NA
        return self.memory_used / self.memory_total

    def to_json(self) -> dict[str, Any]:
        return {
            "index": self.index,
            "uuid": self.uuid,
            "name": self.name,
            "memory_total_bytes": plain(self.memory_total),
            "memory_used_bytes": plain(self.memory_used),
            "memory_reserved_bytes": plain(self.memory_reserved),
            "util_percent": plain(self.util),
            "power_w": plain(self.power_w),
            "temp_c": plain(self.temp_c),
            "processes": [p.to_json() for p in self.processes],
        }


@dataclass
class Disk:
    mount: str
    total_bytes: int
    free_bytes: int

    def to_json(self) -> dict[str, Any]:
        return {"mount": self.mount, "total_bytes": self.total_bytes, "free_bytes": self.free_bytes}


@dataclass
class HostSample:
    hostname: str | None
    cpu_percent: Any
    mem_total: Any
    mem_used: Any
    disks: list[Disk]


@dataclass
class NvmlStatus:
    ok: bool
    code: str | None = None
    error: str | None = None
    hint: str | None = None
    driver_version: str | None = None
    nvml_version: str | None = None
    cuda_driver_version: int | None = None


@dataclass
class Snapshot:
    """One reading of a host: its stats, NVML's state and its GPUs."""

    t: float
    host: HostSample | None
    nvml: NvmlStatus
    gpus: list[GpuSample]
    source: str = "nvml"  # "nvml" | "nvidia-smi" | "none"


# ------------------------------------------------------------------ parsing


@functools.lru_cache(maxsize=4096)
def _command(command: Any) -> str | None:
    """A process's command line as gpuops shows it: secrets masked (the same few commands come
    every second, so each is redacted once)."""
    return redact(command) if isinstance(command, str) else None


def _gpu_from_report(row: dict[str, Any]) -> GpuSample:
    return GpuSample(
        index=int(row["index"]),
        uuid=row.get("uuid"),
        name=row.get("name"),
        memory_total=na(row.get("memory_total_bytes")),
        memory_used=na(row.get("memory_used_bytes")),
        memory_reserved=na(row.get("memory_reserved_bytes")),
        util=na(row.get("util_percent")),
        power_w=na(row.get("power_w")),
        temp_c=na(row.get("temp_c")),
        sm_clock=na(row.get("sm_clock_mhz")),
        processes=[
            GpuProcess(int(p["pid"]), p.get("user"), _command(p.get("command")), na(p.get("used_bytes")))
            for p in row.get("processes") or []
        ],
    )


def snapshot_from_report(data: dict[str, Any]) -> Snapshot:
    """A reporter line (already JSON-decoded) as a Snapshot."""
    h = data.get("host") or {}
    host = HostSample(
        hostname=h.get("hostname"),
        cpu_percent=na(h.get("cpu_percent")),
        mem_total=na(h.get("mem_total_bytes")),
        mem_used=na(h.get("mem_used_bytes")),
        disks=[Disk(d["mount"], int(d["total_bytes"]), int(d["free_bytes"])) for d in h.get("disks") or []],
    )
    n = data.get("nvml") or {}
    status = NvmlStatus(
        ok=bool(n.get("ok")),
        code=n.get("code"),
        error=n.get("error"),
        hint=n.get("hint"),
        driver_version=n.get("driver_version"),
        nvml_version=n.get("nvml_version"),
        cuda_driver_version=n.get("cuda_driver_version"),
    )
    gpus = [_gpu_from_report(row) for row in data.get("gpus") or [] if "error" not in row]
    return Snapshot(float(data.get("t") or time.time()), host, status, gpus, "nvml" if status.ok else "none")


@functools.lru_cache(maxsize=None)
def _wire() -> tuple[Any, Any]:
    """(the decoder of a reporter line into typed fields, msgspec.UNSET), made on first use: msgspec
    is not imported before the first sample (nothing at start-up pays for it).

    A fleet sends one line per host per second: this is the hot path. A line these types do not
    fit goes the general way (json + dicts), which says the same of every line, malformed ones
    included."""
    import msgspec

    def struct(name: str, required: tuple[str, ...], optional: tuple[str, ...], **typed: Any) -> Any:
        fields: list[Any] = [(f, Any) for f in required]
        fields += [(f, typed.get(f, Any), None) for f in optional]
        if "error" in typed:  # a GPU NVML could not read: the row is left out
            fields.append(("error", Any, msgspec.UNSET))
        # gc=False: of decoded JSON only (no cycles), so the garbage collector never tracks one
        # (a fleet's lines are ~20 of these each, a hundred lines a second); comparable (==), so a
        # GPU row can be told unchanged from the last line's
        return msgspec.defstruct(name, fields, gc=False)

    def list_of(t: Any) -> Any:
        return Optional[list[t]]

    process = struct("WireProcess", ("pid",), ("user", "command", "used_bytes"))
    gpu = struct("WireGpu", ("index",), ("uuid", "name", "memory_total_bytes", "memory_used_bytes",
                                         "memory_reserved_bytes", "util_percent", "power_w", "temp_c",
                                         "sm_clock_mhz", "processes"),
                 processes=list_of(process), error=True)
    disk = struct("WireDisk", ("mount", "total_bytes", "free_bytes"), ())
    host = struct("WireHost", (), ("hostname", "cpu_percent", "mem_total_bytes", "mem_used_bytes", "disks"),
                  disks=list_of(disk))
    nvml = struct("WireNvml", (), ("ok", "code", "error", "hint", "driver_version", "nvml_version",
                                   "cuda_driver_version"))
    report = struct("WireReport", (), ("v", "t", "host", "nvml", "gpus"), host=Optional[host],
                    nvml=Optional[nvml], gpus=list_of(gpu))
    return msgspec.json.Decoder(report), msgspec.UNSET


class _Head:
    """A host's disks and NVML state as its last line had them (wire struct, what was made of it): a
    line whose disks or NVML state equal the last line's (most lines: both change seldom) shares
    what was made then (read-only, as every snapshot's parts are) instead of making them again."""

    __slots__ = ("disks_wire", "disks", "nvml_wire", "nvml")

    def __init__(self) -> None:
        self.disks_wire: Any = None
        self.disks: list[Disk] | None = None
        self.nvml_wire: Any = None
        self.nvml: NvmlStatus | None = None


def _host_from_wire(h: Any, head: _Head | None) -> HostSample:
    """The host's figures; its disks those of the line before when they are equal (`head`)."""
    if h is None:
        return HostSample(None, NA, NA, NA, [])
    wire_disks = h.disks
    if head is not None and head.disks is not None and wire_disks == head.disks_wire:
        disks = head.disks
    else:
        disks = [Disk(d.mount, int(d.total_bytes), int(d.free_bytes)) for d in wire_disks or ()]
        if head is not None:
            head.disks_wire, head.disks = wire_disks, disks
    return HostSample(
        h.hostname,
        NA if h.cpu_percent is None else h.cpu_percent,
        NA if h.mem_total_bytes is None else h.mem_total_bytes,
        NA if h.mem_used_bytes is None else h.mem_used_bytes,
        disks,
    )


def _nvml_from_wire(n: Any, head: _Head | None) -> NvmlStatus:
    """NVML's state; that of the line before when it is equal (`head`)."""
    if head is not None and head.nvml is not None and n is not None and n == head.nvml_wire:
        return head.nvml
    status = (NvmlStatus(ok=False) if n is None else
              NvmlStatus(bool(n.ok), n.code, n.error, n.hint, n.driver_version, n.nvml_version,
                         n.cuda_driver_version))
    if head is not None and n is not None:
        head.nvml_wire, head.nvml = n, status
    return status


def _gpu_from_wire(g: Any) -> GpuSample:
    command = _command
    return GpuSample(
        int(g.index), g.uuid, g.name,
        NA if g.memory_total_bytes is None else g.memory_total_bytes,
        NA if g.memory_used_bytes is None else g.memory_used_bytes,
        NA if g.memory_reserved_bytes is None else g.memory_reserved_bytes,
        NA if g.util_percent is None else g.util_percent,
        NA if g.power_w is None else g.power_w,
        NA if g.temp_c is None else g.temp_c,
        NA if g.sm_clock_mhz is None else g.sm_clock_mhz,
        [GpuProcess(int(p.pid), p.user, command(p.command), NA if p.used_bytes is None else p.used_bytes)
         for p in g.processes or ()],
    )


def _snapshot_from_wire(r: Any, unset: Any, rows: dict[str, Any] | None = None, head: _Head | None = None) -> Snapshot:
    """`rows`: a host's GPU rows as its last line had them (index -> (wire row, GpuSample)), kept up
    to date here; a row equal to the one before gives the same GpuSample (nothing is made for a GPU
    whose figures did not change: most of a fleet's, most seconds). Equal rows are alike in type
    too: the reporter writes each figure as one JSON type (NVML's integers; power rounded to a
    float, which JSON keeps as 75.0). `head`: the same for the host's disks and NVML state."""
    host = _host_from_wire(r.host, head)
    status = _nvml_from_wire(r.nvml, head)
    gpus = []
    for g in r.gpus or ():
        if g.error is not unset:
            continue
        if rows is not None:
            last = rows.get(g.index)
            if last is not None and last[0] == g:
                gpus.append(last[1])
                continue
        gpu = _gpu_from_wire(g)
        gpus.append(gpu)
        if rows is not None:
            rows[g.index] = (g, gpu)
    if rows is not None and len(rows) > len(gpus):  # GPUs that left (or failed): forget their rows
        shown = {g.index for g in r.gpus or () if g.error is unset}
        for index in [i for i in rows if i not in shown]:
            del rows[index]
    return Snapshot(float(r.t or time.time()), host, status, gpus, "nvml" if status.ok else "none")


def parse_report_line(line: str, rows: dict[str, Any] | None = None, head: _Head | None = None) -> Snapshot | None:
    """A reporter line as a Snapshot (None: not one). `rows`: the host's GPU rows from its last line
    (an empty dict at first, then kept by this function): what a stream of one host's lines passes,
    so that a GPU whose row did not change keeps its GpuSample."""
    line = line.strip()
    if not line.startswith("{"):
        return None
    decoder, unset = _wire()
    try:
        wire = decoder.decode(line)
    except ValueError:  # msgspec.DecodeError: not JSON msgspec reads, or not of the reporter's shape
        pass
    else:
        return _snapshot_from_wire(wire, unset, rows, head) if wire.v == 1 else None
    try:
        data = json.loads(line)
    except ValueError:
        return None
    if not isinstance(data, dict) or data.get("v") != 1:
        return None
    if rows is not None:
        rows.clear()  # (made the general way: the next line's rows are made anew)
    return snapshot_from_report(data)


# nvidia-smi's fallback: the fields in this order; memory.reserved is newer, so a
# driver that rejects it is asked again without it.
NVSMI_FIELDS = (
    "index", "uuid", "name", "memory.total", "memory.used", "memory.reserved",
    "utilization.gpu", "power.draw", "temperature.gpu", "clocks.sm",
)
NVSMI_APPS_FIELDS = ("gpu_uuid", "pid", "used_memory", "process_name")


def _nvsmi_value(text: str) -> str | None:
    text = text.strip()
    if not text or (text.startswith("[") and text.endswith("]")) or text in ("N/A", "Not Supported"):
        return None
    return text


def _num(text: str | None, scale: float = 1.0, integer: bool = False) -> Any:
    if text is None:
        return NA
    try:
        value = float(text) * scale
    except ValueError:
        return NA
    return int(value) if integer else value


def nvsmi_query_argv(fields: tuple[str, ...], loop_ms: int | None = None) -> list[str]:
    argv = ["nvidia-smi", f"--query-gpu={','.join(fields)}", "--format=csv,noheader,nounits"]
    if loop_ms:
        argv += ["-lms", str(loop_ms)]
    return argv


def parse_nvsmi_gpu_line(line: str, fields: tuple[str, ...] = NVSMI_FIELDS) -> GpuSample | None:
    parts = [p for p in line.split(", ")]
    if len(parts) != len(fields):
        return None
    v = {f: _nvsmi_value(p) for f, p in zip(fields, parts)}
    index = v.get("index")
    if index is None or not index.isdigit():
        return None
    return GpuSample(
        index=int(index),
        uuid=v.get("uuid"),
        name=v.get("name"),
        memory_total=_num(v.get("memory.total"), MIB, True),
        memory_used=_num(v.get("memory.used"), MIB, True),
        memory_reserved=_num(v.get("memory.reserved"), MIB, True),
        util=_num(v.get("utilization.gpu"), integer=True),
        power_w=_num(v.get("power.draw")),
        temp_c=_num(v.get("temperature.gpu"), integer=True),
        sm_clock=_num(v.get("clocks.sm"), integer=True),
    )


def parse_nvsmi_apps(text: str) -> dict[str, list[GpuProcess]]:
    """`--query-compute-apps=gpu_uuid,pid,used_memory,process_name` → processes per GPU uuid."""
    out: dict[str, list[GpuProcess]] = {}
    for line in text.splitlines():
        parts = line.split(", ", 3)
        if len(parts) != 4 or not parts[1].strip().isdigit():
            continue
        uuid, pid, used, name = parts
        out.setdefault(uuid.strip(), []).append(
            GpuProcess(int(pid), None, _command(_nvsmi_value(name)), _num(_nvsmi_value(used), MIB, True))
        )
    return out


# ------------------------------------------------------------------ sources


def reporter_source() -> str:
    return script_source(reporter)


def reporter_argv(host: Host, interval: float | None) -> list[str]:
    """The reporter run with the host's python: `python -c SOURCE --interval N`."""
    argv = [host_python(host), "-c", reporter_source()]
    argv += ["--once"] if interval is None else ["--interval", f"{interval:g}"]
    for d in host.config.model_dirs:
        argv += ["--path", d]
    return argv


def in_process(host: Host) -> bool:
    return isinstance(host, LocalHost) and host.config.python is None


class ReporterFailed(HostError):
    pass


def _reporter_failure(host: Host, rc: int | None, stderr: Iterable[str] | str) -> ReporterFailed:
    lines = stderr.splitlines() if isinstance(stderr, str) else list(stderr)
    last = next((line for line in reversed(lines) if line.strip()), "no output")
    python = host_python(host)
    hint = None
    if rc == 127 or "not found" in last:
        hint = f"no {python} on {host.name}: set `python` in its [hosts.{host.name}] entry"
    return ReporterFailed(f"{host.name}: telemetry reporter exited ({rc}): {last}", hint)


async def _nvsmi_processes(host: Host) -> dict[str, list[GpuProcess]]:
    res = await host.run(
        ["nvidia-smi", f"--query-compute-apps={','.join(NVSMI_APPS_FIELDS)}", "--format=csv,noheader,nounits"],
        timeout=10,
    )
    return parse_nvsmi_apps(res.stdout) if res.ok else {}


def _with_processes(gpus: list[GpuSample], procs: dict[str, list[GpuProcess]]) -> list[GpuSample]:
    for g in gpus:
        g.processes = list(procs.get(g.uuid or "", []))
    return gpus


async def nvsmi_once(host: Host) -> tuple[list[GpuSample], str | None]:
    """One nvidia-smi reading: (gpus, error)."""
    fields: tuple[str, ...] = NVSMI_FIELDS
    for _ in range(2):
        res = await host.run(nvsmi_query_argv(fields), timeout=15)
        if res.ok:
            gpus = [g for g in map(lambda l: parse_nvsmi_gpu_line(l, fields), res.stdout.splitlines()) if g]
            return _with_processes(gpus, await _nvsmi_processes(host)), None
        if "memory.reserved" in res.stdout + res.stderr and "memory.reserved" in fields:
            fields = tuple(f for f in fields if f != "memory.reserved")
            continue
        said = (res.stdout + res.stderr).strip().splitlines()
        return [], said[-1] if said else f"nvidia-smi exited {res.returncode}"
    return [], "nvidia-smi refused the query"


def _with_fallback(snap: Snapshot, gpus: list[GpuSample], error: str | None) -> None:
    """A snapshot whose python has no pynvml gets nvidia-smi's GPU rows (or both errors)."""
    status = snap.nvml
    snap.gpus = gpus
    if error is None:
        hint = f"{status.error}; GPU rows from nvidia-smi" if status.error else None
        snap.nvml, snap.source = NvmlStatus(ok=True, hint=hint), "nvidia-smi"
    else:
        snap.nvml = NvmlStatus(ok=False, code=status.code, error=f"{status.error}; nvidia-smi: {error}",
                               hint=status.hint)
        snap.source = "none"


async def snapshot(host: Host, timeout: float = 20.0) -> Snapshot:
    """One reading of a host (for `gpuops hosts` / `gpuops gpus`). Raises HostError."""
    if in_process(host):
        snap = await asyncio.to_thread(_local_once, host)
    else:
        res = await host.run(reporter_argv(host, None), timeout=timeout)
        read = next((s for s in map(parse_report_line, res.stdout.splitlines()) if s), None)
        if read is None:
            raise _reporter_failure(host, res.returncode, res.stderr)
        snap = read
    if snap.nvml.code == "no-pynvml":
        _with_fallback(snap, *await nvsmi_once(host))
    return snap


def _local_once(host: Host) -> Snapshot:
    collector = reporter.Collector(host.config.model_dirs)
    collector.host.cpu_percent()
    time.sleep(0.2)
    return snapshot_from_report(collector.sample())


_GPUS_KEY = ',"gpus":'  # where the reporter's lines (compact JSON, "gpus" last) hold their GPU rows


class _ReportReader:
    """A reporter's lines to snapshots: the GPU rows of the last line (unchanged ones are not made
    again) and, for a python without pynvml, nvidia-smi's rows from a follower of its own.

    A line whose GPU rows are, as text, those of the line before (a host whose GPUs' figures did not
    change) is decoded without them: its host stats and NVML state only, and the snapshot shares the
    last one's list of GpuSamples (the very same list: read-only, as every snapshot's is)."""

    def __init__(self, host: Host, interval: float):
        self.host = host
        self.interval = interval
        self.rows: dict[str, Any] = {}
        self.fallback: _NvsmiFollower | None = None
        self._gpus_text: str | None = None  # the last line's text from _GPUS_KEY on
        self._gpus: list[GpuSample] = []  # and its GPU rows
        self.head = _Head()  # its disks and NVML state

    def _parse(self, line: str) -> Snapshot | None:
        last = self._gpus_text
        # (the line ends as the last one did from _GPUS_KEY on: its GPU rows are the same text. The
        # line is then the head before them, a report of its own once closed, and those rows: as
        # if found by `find`, without a search of the whole line or a copy of its rows)
        if last is not None and line.endswith(last) and line.startswith(_GPUS_KEY, len(line) - len(last)):
            at = len(line) - len(last)
            decoder, unset = _wire()
            try:
                wire = decoder.decode(line[:at] + "}")
            except ValueError:
                wire = None
            if wire is not None and wire.v == 1 and wire.gpus is None:
                shared = _snapshot_from_wire(wire, unset, head=self.head)
                shared.gpus = self._gpus
                return shared
        at = line.find(_GPUS_KEY)
        gpus_text = line[at:] if at > 0 else None
        snap = parse_report_line(line, self.rows, self.head)
        if snap is None or not self.rows:  # (not a line of typed rows: nothing to share with the next)
            self._gpus_text = None
        else:
            self._gpus_text, self._gpus = gpus_text, snap.gpus
        return snap

    def snapshot(self, line: str) -> Snapshot | None:
        snap = self._parse(line)
        if snap is not None and snap.nvml.code == "no-pynvml":
            fallback = self.fallback
            if fallback is None:
                fallback = self.fallback = _NvsmiFollower(self.host, self.interval)
                fallback.start()
            _with_fallback(snap, fallback.latest(), fallback.error)
        return snap

    async def stop(self) -> None:
        if self.fallback is not None:
            await self.fallback.stop()


class Sampler:
    """Samples of one host, every `interval` seconds, from one long-lived source."""

    def __init__(self, host: Host, interval: float = 1.0):
        self.host = host
        self.interval = interval

    def samples(self) -> AsyncIterator[Snapshot]:
        """The snapshots, as they come (an async generator: close it to stop the source)."""
        return self._local() if in_process(self.host) else self._remote()

    async def follow(self, on_sample: Callable[[Snapshot], Any]) -> None:
        """Every snapshot to ``on_sample(snapshot)`` as it comes, until the source ends (raises
        ReporterFailed then, a HostError when the host is lost). Cancel it to stop the source.

        A reporter's line is parsed and handed over where the stream hands its lines over
        (`Stream.each_line`: over SSH, in the connection's data callback, no task woken per sample),
        so `on_sample` must be quick and must not block; what it raises is raised here."""
        if in_process(self.host):
            samples = self._local()
            try:
                async for snap in samples:
                    on_sample(snap)
            finally:
                await samples.aclose()
            return
        reader = _ReportReader(self.host, self.interval)

        def line(text: str) -> None:
            snap = reader.snapshot(text)
            if snap is not None:
                on_sample(snap)

        try:
            async with self.host.stream(reporter_argv(self.host, self.interval)) as lines:
                await lines.each_line(line)
            raise _reporter_failure(self.host, lines.returncode, lines.stderr_tail)
        finally:
            await reader.stop()

    async def _local(self) -> AsyncGenerator[Snapshot, None]:
        collector = await asyncio.to_thread(reporter.Collector, self.host.config.model_dirs)
        await asyncio.to_thread(collector.host.cpu_percent)
        next_at = time.monotonic() + min(self.interval, 0.2)
        while True:
            await asyncio.sleep(max(0.0, next_at - time.monotonic()))
            next_at = max(next_at + self.interval, time.monotonic())
            yield snapshot_from_report(await asyncio.to_thread(collector.sample))

    async def _remote(self) -> AsyncIterator[Snapshot]:
        reader = _ReportReader(self.host, self.interval)
        try:
            async with self.host.stream(reporter_argv(self.host, self.interval)) as lines:
                async for line in lines:
                    snap = reader.snapshot(line)
                    if snap is not None:
                        yield snap
            raise _reporter_failure(self.host, lines.returncode, lines.stderr_tail)
        finally:
            await reader.stop()


class _NvsmiFollower:
    """`nvidia-smi … -lms` on a channel of its own, keeping the latest block."""

    def __init__(self, host: Host, interval: float):
        self.host = host
        self.interval = interval
        self.error: str | None = None
        self._rows: dict[int, GpuSample] = {}
        self._procs: dict[str, list[GpuProcess]] = {}
        self._task: asyncio.Task[None] | None = None

    def start(self) -> None:
        self._task = asyncio.create_task(self._run())

    def latest(self) -> list[GpuSample]:
        return _with_processes([self._rows[i] for i in sorted(self._rows)], self._procs)

    async def _run(self) -> None:
        fields: tuple[str, ...] = NVSMI_FIELDS
        loop_ms = max(100, int(self.interval * 1000))
        procs_every = max(1, int(5 / self.interval))
        try:
            for _ in range(2):
                n = 0
                other: list[str] = []  # nvidia-smi prints its errors on stdout
                async with self.host.stream(nvsmi_query_argv(fields, loop_ms)) as lines:
                    async for line in lines:
                        gpu = parse_nvsmi_gpu_line(line, fields)
                        if gpu is None:
                            other = (other + [line])[-5:]
                            continue
                        if gpu.index == 0:
                            n += 1
                            if n % procs_every == 1:
                                self._procs = await _nvsmi_processes(self.host)
                        self._rows[gpu.index] = gpu
                        self.error = None
                tail = " ".join([*other, *lines.stderr_tail]).strip()
                if "memory.reserved" in tail and "memory.reserved" in fields:
                    fields = tuple(f for f in fields if f != "memory.reserved")
                    continue
                self.error = tail or f"nvidia-smi exited {lines.returncode}"
                return
        except HostError as exc:
            self.error = exc.message

    async def stop(self) -> None:
        if self._task is not None:
            self._task.cancel()
            try:
                await self._task
            except (asyncio.CancelledError, Exception):
                pass
