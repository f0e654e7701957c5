"""The simulated GPU host: fake host programs that gpuops reaches like a real GPU box.

``setup_simhost(DIR)`` writes a host into DIR that replaces the *host's* programs, never
gpuops code::

    DIR/bin/python          the host's python: a /bin/sh wrapper around the real interpreter
    DIR/bin/nvidia-smi      a fake nvidia-smi (template sim/files/nvidia-smi)
    DIR/lib/pynvml.py       a fake nvidia-ml-py (template sim/files/pynvml.py)
    DIR/lib-absent/pynvml.py  (nvml="absent" only) makes ``import pynvml`` fail
    DIR/lib/PACKAGE/        the engine's stand-in package (PACKAGE: its import name), its version
                            only (engine_version=...), or one whose import fails (engine_version="none")
    DIR/lib/PACKAGE-V.dist-info/  its package metadata (importlib.metadata.version(PACKAGE))
    DIR/lib/SERVER.py       runs the server (``-m SERVER``, the engine's server module, as a path
                            under lib/): DIR/lib/PACKAGE-sim/PACKAGE_sim
    DIR/lib/PACKAGE-sim/    the server and its data: PACKAGE_sim.py (the product's small server,
                            sim/files/demo_server.py) with demo.json (its script, the engine's), or
                            the package PACKAGE_sim/ that GPUOPS_SIM_SERVER (or server=) names (the
                            tests' scenario engine); SERVER_NAME.help (``--help`` of that version, from the
                            engine's version data) and the engine's server files (e.g. that version's
                            options, for the simulator's argparse)
    DIR/lib/sim-data/models.json  known repos: config.json, checkpoint size, shards (fake hf, simulator)
    DIR/bin/hf              a fake huggingface_hub CLI (``hf download``; template sim/files/hf)
    DIR/bin/systemctl       a fake systemctl writing real journal files (template sim/files/systemctl)
    DIR/journal/            the journal (``journalctl --directory=DIR/journal``), written by
                            systemd-journal-remote for the fake systemctl's units
    DIR/state/gpus.json     the GPUs, which tests and the server simulator change
    DIR/state/sim.json      the scenario, the pace and the simulator's knobs (``SimHost.set_sim``)
    DIR/state/server.json   which server the host runs and the scenarios it knows (``SimHost.scenarios``)
    DIR/state/calls.log     one line per run of the host's python (pid, arguments): what tests count
    DIR/state/systemd/      the fake systemctl's units: main pid, state, exit status
    DIR/root/...            host files the reporter and the triage probe read through GPUOPS_HOST_ROOT:
                            proc/driver/nvidia/version, usr/lib/x86_64-linux-gnu/libnvidia-ml.so.* and
                            libcuda.so.*, proc/cmdline, sys/kernel/iommu_groups/N/type and
                            sys/bus/pci/devices/BUS/iommu_group (iommu=...), var/log/kern.log, dev/shm/;
                            etc/systemd/system/ and etc/gpuops/ are looked up here first by the fake systemctl

gpuops sends its reporter (core/hosts/programs/reporter.py) as ``python -c SOURCE``; with
``python = "DIR/bin/python"`` in the host's config entry that runs the real interpreter
with the fake pynvml first on PYTHONPATH, so the reporter's ordinary code paths sample the
simulated GPUs. ``SimHost.host_block()`` gives that config entry.

What the host presents of the serving engine is the engine's (``engines.get(engine).simhost()``, a
``core.engines.base.SimHostPart``): the simulator renders its files from it and names none of them.
The host presents one engine version to every question: ``import PACKAGE`` and its package
metadata name it, and ``python -m SERVER --help`` (or ``-h``) lists exactly that version's options
(the engine's help text). Any other ``-m SERVER`` run starts the server: start-up lines at the
host's pace, GPU memory through the phases, then the HTTP API; the engine's other modules
(``real_modules``: its benchmark, its router) run from the engine's virtualenv given to setup. The
product's small server (sim/files/demo_server.py) knows the demo's scenarios (``SCENARIOS``); the
tests set GPUOPS_SIM_SERVER (``SERVER_ENV``) to their scenario engine (tests/simhost, not in the
wheel), which knows every scenario and version. The scenario and the pace live in DIR/state/sim.json; ``setup_simhost(..., scenario=,
pace=)`` or ``SimHost.set_sim`` change them.
"""

from __future__ import annotations

import contextlib
import fcntl
import json
import os
import re
import shutil
import signal
import stat
import sys
import time
import uuid
from dataclasses import dataclass
from pathlib import Path

from ..core import engines
from ..core.engines.base import SimHostPart
from ..core.paths import show_path

__all__ = ["SimHost", "setup_simhost", "SERVER_ENV", "server_scenarios", "resolve_server", "NVML_MODES", "IOMMU_MODES", "GPU_FIELDS", "SCENARIOS",
           "SIM_FIELDS", "LAUNCHERS"]

TEMPLATES = Path(__file__).resolve().parent / "files"

NVML_MODES = {
    # nvml=...        -> state "init_error" (None: nvmlInit works)
    "ok": None,
    "absent": None,  # no pynvml module at all: the reporter must fall back
    "no-driver": "library_not_found",  # no libnvidia-ml: reporter code "no-driver"
    "driver-not-loaded": "driver_not_loaded",  # libraries there, kernel module not loaded
    "mismatch": "lib_rm_version_mismatch",  # kernel module != userspace library
}

# What set_gpu accepts (besides the fields a GPU already has in the state).
GPU_FIELDS = frozenset(
    """name uuid memory_total memory_used memory_reserved util mem_util power_mw power_limit_mw
    temp_c sm_clock mem_clock pci_bus_id processes compute_capability max_sm_clock""".split()
)

# A real H200's memory.total (143771 MiB) and idle v2 "reserved", as read on one (tests/gpu/sampler-*.log).
H200_MEMORY_GIB = 143771 / 1024
H200_RESERVED_BYTES = 644_939_776

# Bus ids of an 8-GPU HGX board, as nvidia-smi prints them.
_BUS_IDS = ("18", "2A", "3A", "5D", "9A", "AB", "BA", "DB")

# A path safe in a TOML basic string, in PATH/PYTHONPATH and unquoted on a remote shell line.
_SAFE_PATH = re.compile(r"^[A-Za-z0-9_./+,@%=-]+$")
_HOST_NAME = re.compile(r"^[a-z0-9][a-z0-9._-]*$")
_VERSION = re.compile(r"^\d+\.\d+(\.\d+)?$")

# iommu=...: the kernel's IOMMU as /proc/cmdline, /sys and the kernel log show it. "off": no IOMMU
# groups; "pt": groups in pass-through (identity); "translated": DMA translation (what breaks PCIe
# peer-to-peer); "sev-snp": translated, in an AMD SEV-SNP confidential VM.
IOMMU_MODES = ("off", "pt", "translated", "sev-snp")

# The server behind ``python -m SERVER`` (the engine's server module) on the host: the product's small one (the demo's
# scenarios, SCENARIOS), or the one GPUOPS_SIM_SERVER (or setup_simhost's server=) names: the tests'
# scenario engine (tests/simhost), a package folder or a file with a main(argv) and a literal SCENARIOS.
SERVER_ENV = "GPUOPS_SIM_SERVER"
DEMO_SERVER = TEMPLATES / "demo_server.py"


_SCENARIOS_LINE = re.compile(r"""^SCENARIOS = \(((?:\s*(?:"[a-z0-9-]+"|'[a-z0-9-]+'),?)+)\s*\)\s*$""", re.MULTILINE)


def server_scenarios(server: str | Path) -> tuple[str, ...]:
    """The scenarios SERVER knows: its line ``SCENARIOS = ("ok", ...)`` (either quotes; of a package folder: in its
    __init__.py, then its modules by name). ValueError when it is not a server (one line). (Read as
    text, not parsed: a package's modules are thousands of lines, and CPython 3.11.7's ast.parse has
    failed here under load with "AST constructor recursion depth mismatch".)"""
    path = Path(server)
    files = [path] if path.is_file() else ([path / "__init__.py"] + sorted(path.glob("*.py")) if path.is_dir() else [])
    for f in files:
        try:
            text = f.read_text(encoding="utf-8", errors="replace")
        except OSError:
            continue
        m = _SCENARIOS_LINE.search(text)
        if m is not None:
            return tuple(re.findall(r"""["']([a-z0-9-]+)["']""", m.group(1)))
    raise ValueError("simulator server %s is not one: no file or package folder there with a literal "
                     "SCENARIOS = (...)" % show_path(str(path)))


def resolve_server(server: str | Path | None = None) -> Path:
    """SERVER, else $GPUOPS_SIM_SERVER, else the product's small server (DEMO_SERVER)."""
    chosen = server if server is not None else os.environ.get(SERVER_ENV) or None
    return DEMO_SERVER if chosen is None else Path(os.path.abspath(str(chosen)))


SCENARIOS = server_scenarios(DEMO_SERVER)  # the product's small server's: what `gpuops demo` shows
LAUNCHERS = ("process", "systemd")

# DIR/state/sim.json: what set_sim accepts, with the defaults setup writes.
SIM_DEFAULTS = {
    "scenario": "ok",
    "pace": 1.0,  # multiplies every simulated delay: 1 starts a big model in ~5-10 s, 60 is about real time
    "token_delay_s": 0.01,  # per generated token (divided by the accept length with speculative decoding)
    "download_rate": 2 * 1024**3,  # fake hf: bytes of apparent size per second at pace 1
    "slow_download_rate": 64 * 1024**2,  # the slow-download scenario's rate at pace 1, before it stalls
    "stall_after_bytes": 1024**3,  # slow-download: no progress at all once this much was written
    "gated_repos": [],  # fake hf: repos that need HF_TOKEN (besides the known gated ones)
    "hang_after_s": 2.0,  # hang-after-ready: wall seconds after ready before the scheduler deadlocks
    "hang_for_s": 0,  # hang-after-ready: wall seconds the deadlock lasts (0: for ever)
}
SIM_FIELDS = frozenset(SIM_DEFAULTS)


def _check_path(what: str, path: str) -> None:
    if not path or not _SAFE_PATH.match(path):
        raise ValueError(
            "%s %r must be made of letters, digits and ._/+,@%%=- only "
            "(no whitespace, quotes, ':' or shell metacharacters)" % (what, path)
        )


# Where a simulated host is never written: the system's own folders (and anything under those in
# _SYSTEM_TREES), and the operator's HOME itself.
SYSTEM_DIRS = ("/", "/etc", "/usr", "/bin", "/sbin", "/lib", "/lib32", "/lib64", "/libx32", "/var", "/boot",
               "/proc", "/sys", "/dev", "/run", "/root", "/home", "/opt", "/srv", "/mnt", "/media", "/tmp",
               "/var/tmp")
_SYSTEM_TREES = ("/etc", "/usr", "/bin", "/sbin", "/lib", "/lib32", "/lib64", "/libx32", "/boot", "/proc", "/sys",
                 "/dev", "/run")
SIM_MARKER = Path("state") / "sim.json"  # what makes a directory a simulated host (setup writes it)


def is_simhost_dir(path: str | Path) -> bool:
    """Whether PATH holds a simulated host written by :func:`setup_simhost` (its state/sim.json)."""
    return (Path(path) / SIM_MARKER).is_file()


def check_setup_dir(directory: str | Path) -> Path:
    """The absolute directory ``setup_simhost`` may write a simulated host into, or ValueError (one
    line): a path that is absurd (gpuops.core.paths.check_path) or has a ``..`` segment, a system
    location (SYSTEM_DIRS, anything under /etc, /usr, /bin, /lib, /boot, /proc, /sys, /dev, /run;
    symlinks resolved), HOME itself, something that is not a directory, or a directory that is not
    empty and not already a simulated host (setup runs again on its own directory). Writes nothing."""
    from ..core.paths import check_path, show_path

    raw = check_path(str(directory), "simulated host directory", dotdot=False)
    root = os.path.abspath(raw)
    check_path(root, "simulated host directory", dotdot=False)
    real = os.path.realpath(root)
    home = os.path.realpath(os.path.expanduser("~"))
    shown = show_path(raw) if real == root else "%s (%s)" % (show_path(raw), show_path(real))
    if real in SYSTEM_DIRS or any(real.startswith(t + "/") for t in _SYSTEM_TREES):
        raise ValueError("simulated host directory %s is a system location: give a folder of its own "
                         "(e.g. under /tmp or your home)" % shown)
    if real == home:
        raise ValueError("simulated host directory %s is your HOME itself: give a folder of its own in it" % shown)
    if os.path.lexists(root):
        if not os.path.isdir(root):
            raise ValueError("simulated host directory %s exists and is not a directory" % shown)
        try:
            with os.scandir(root) as entries:
                empty = next(entries, None) is None
        except OSError as exc:
            raise ValueError("simulated host directory %s: cannot read it (%s)" % (shown, exc.strerror or exc)) from None
        if not empty and not is_simhost_dir(root):
            raise ValueError("simulated host directory %s is not empty and not a simulated host: give a new or "
                             "empty folder" % shown)
    return Path(root)


def _cuda_for_driver(driver_version: str) -> tuple[int, int]:
    """(CUDA driver API version as NVML reports it, NVML major) for a driver branch."""
    try:
        branch = int(driver_version.split(".")[0])
    except ValueError:
        branch = 580
    table = [
        (580, 13000), (575, 12090), (570, 12080), (565, 12070), (560, 12060), (555, 12050),
        (550, 12040), (545, 12030), (535, 12020), (530, 12010), (525, 12000), (520, 11080),
        (515, 11070), (510, 11060), (495, 11050), (470, 11040), (465, 11030), (460, 11020),
    ]
    for first, cuda in table:
        if branch >= first:
            return cuda, cuda // 1000
    return 11000, 11


def _bus_id(index: int) -> str:
    bus = _BUS_IDS[index] if index < len(_BUS_IDS) else "%02X" % ((0xE0 + index - len(_BUS_IDS)) % 256)
    return "00000000:%s:00.0" % bus


def default_state(
    directory: Path,
    *,
    gpus: int,
    gpu_memory_gib: float,
    gpu_name: str,
    driver_version: str,
    init_error: str | None,
    library_version: str,
) -> dict:
    cuda, nvml_major = _cuda_for_driver(driver_version)
    memory_total = int(round(gpu_memory_gib * 1024)) * 1024 * 1024  # whole MiB, like a real card
    rows = []
    for i in range(gpus):
        gpu_uuid = uuid.uuid5(uuid.NAMESPACE_URL, "gpuops-simhost:%s:%d" % (directory, i))
        rows.append(
            {
                "name": gpu_name,
                "uuid": "GPU-%s" % gpu_uuid,
                "memory_total": memory_total,
                "memory_used": 0,
                "memory_reserved": H200_RESERVED_BYTES,
                "util": 0,
                "mem_util": 0,
                "power_mw": 75000,
                "power_limit_mw": 700000,
                "temp_c": 31,
                "sm_clock": 345,
                "mem_clock": 3201,
                "pci_bus_id": _bus_id(i),
                "processes": [],
            }
        )
    return {
        "driver_version": driver_version,
        "nvml_version": "%d.%s" % (nvml_major, driver_version),
        "cuda_driver_version": cuda,
        "library_version": library_version,
        "init_error": init_error,
        "p2p_status": 0,
        "gpus": rows,
    }


@dataclass
class SimHost:
    directory: Path
    python: Path
    bin_dir: Path
    state_file: Path
    engine_version: str | None = None  # None: the host has no engine
    scenario: str = "ok"
    pace: float = 1.0

    @property
    def journal_dir(self) -> Path:
        """Where the fake systemctl's units log (``journalctl --directory=...``)."""
        return self.directory / "journal"

    @property
    def sim_file(self) -> Path:
        return self.state_file.with_name("sim.json")

    def host_block(self, name: str, ssh: str | None = None, launcher: str = "process") -> str:
        """The config's ``[hosts.NAME]`` entry that reaches this simulated host (LAUNCHER:
        "process", or "systemd" for the fake systemctl and its journal)."""
        if not _HOST_NAME.match(name or ""):
            raise ValueError("host name %r must match [a-z0-9][a-z0-9._-]*" % (name,))
        if launcher not in LAUNCHERS:
            raise ValueError("launcher must be one of %s, not %r" % (", ".join(LAUNCHERS), launcher))
        key = name if re.match(r"^[A-Za-z0-9_-]+$", name) else _toml_string(name)
        lines = ["[hosts.%s]" % key]
        lines.append("ssh = %s" % _toml_string(ssh) if ssh else "local = true")
        lines.append("python = %s" % _toml_string(str(self.python)))
        lines.append("launcher = %s" % _toml_string(launcher))
        lines.append("journal_dir = %s" % _toml_string(str(self.journal_dir)))
        # the host's own HF cache (the fake hf and the servers' repo ids use it), not the ssh user's
        lines.append("env = { PATH = %s, HF_HOME = %s }" % (_toml_string("%s:$PATH" % self.bin_dir),
                                                          _toml_string(str(self.hf_home))))
        return "\n".join(lines) + "\n"

    @property
    def hf_home(self) -> Path:
        """The simulated host's HF_HOME (its hub cache is HF_HOME/hub)."""
        return self.directory / "hf-home"

    @property
    def scenarios(self) -> tuple[str, ...]:
        """The scenarios this host's server knows (written by setup)."""
        known = _read_json(self.state_file.with_name("server.json")).get("scenarios")
        return tuple(known) if isinstance(known, list) and known else SCENARIOS

    def read_sim(self) -> dict:
        try:
            with open(self.sim_file) as f:
                return dict(SIM_DEFAULTS, **json.load(f))
        except (OSError, ValueError):
            return dict(SIM_DEFAULTS)

    def set_sim(self, **fields) -> None:
        """Change the scenario, the pace or a simulator knob (SIM_FIELDS) of this host; servers
        and downloads started afterwards see it."""
        unknown = sorted(k for k in fields if k not in SIM_FIELDS)
        if unknown:
            raise ValueError("unknown simulator field(s): %s (known: %s)" % (", ".join(unknown), ", ".join(sorted(SIM_FIELDS))))
        if "scenario" in fields:
            _check_scenario(fields["scenario"], self.scenarios)
        if "pace" in fields:
            fields["pace"] = _check_pace(fields["pace"])
        with self._locked():
            sim = self.read_sim()
            sim.update(fields)
            _write_json_atomic(self.sim_file, sim)
        self.scenario, self.pace = sim["scenario"], float(sim["pace"])

    def shutdown(self, timeout: float = 10.0) -> None:
        """Stop what this host runs in the background: the fake systemctl's units (SIGTERM to
        their process groups, SIGKILL after TIMEOUT) and its systemd-journal-remote."""
        units = self.directory / "state" / "systemd"
        pids = []
        for f in sorted(units.glob("*.state")) if units.is_dir() else []:
            try:
                st = json.loads(f.read_text())
            except (OSError, ValueError):
                continue
            for key in ("main_pid", "supervisor_pid"):
                if st.get(key):
                    pids.append(int(st[key]))
        jr = self.directory / "state" / "journal-remote.pid"
        with contextlib.suppress(OSError, ValueError):
            pids.append(int(jr.read_text().split()[0]))
        for pid in pids:
            with contextlib.suppress(OSError):
                os.killpg(pid, signal.SIGTERM)
            with contextlib.suppress(OSError):
                os.kill(pid, signal.SIGTERM)
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline and any(_pid_alive(p) for p in pids):
            time.sleep(0.05)
        for pid in pids:
            if _pid_alive(pid):
                with contextlib.suppress(OSError):
                    os.killpg(pid, signal.SIGKILL)
                with contextlib.suppress(OSError):
                    os.kill(pid, signal.SIGKILL)

    def read_state(self) -> dict:
        with open(self.state_file) as f:
            return json.load(f)

    def write_state(self, state: dict) -> None:
        """Replace the state atomically (readers see the old or the new file, never half)."""
        _write_json_atomic(self.state_file, state)

    @contextlib.contextmanager
    def _locked(self):
        with open(self.state_file.with_name(".gpus.lock"), "a") as lock:
            fcntl.flock(lock, fcntl.LOCK_EX)
            try:
                yield
            finally:
                fcntl.flock(lock, fcntl.LOCK_UN)

    def update_state(self, **fields) -> None:
        """Change top-level state fields (driver_version, init_error, p2p_status, ...)."""
        with self._locked():
            state = self.read_state()
            state.update(fields)
            self.write_state(state)

    def set_gpu(self, index: int, **fields) -> None:
        """Change one GPU's fields, e.g. ``set_gpu(0, memory_used=..., util=..., processes=[...])``.

        ``processes`` is a list of ``{"pid": int, "used": bytes|None, "name": str (optional)}``.
        A field set to None makes NVML answer Not Supported for it (N/A).
        """
        with self._locked():
            state = self.read_state()
            gpus = state.get("gpus") or []
            if not 0 <= index < len(gpus):
                raise IndexError("no GPU %d on this simulated host (it has %d)" % (index, len(gpus)))
            unknown = sorted(k for k in fields if k not in GPU_FIELDS and k not in gpus[index])
            if unknown:
                raise ValueError("unknown GPU field(s): %s" % ", ".join(unknown))
            if fields.get("processes") is not None:
                procs = []
                for p in fields["processes"]:
                    if "pid" not in p:
                        raise ValueError("a process needs a pid: %r" % (p,))
                    procs.append(dict(p, pid=int(p["pid"]), used=p.get("used")))
                fields["processes"] = procs
            gpus[index].update(fields)
            self.write_state(state)


def _pid_alive(pid: int) -> bool:
    try:
        with open("/proc/%d/stat" % pid, "rb") as f:
            return f.read().rsplit(b")", 1)[1].split()[0] not in (b"Z", b"X")
    except (OSError, IndexError):
        return False


def _check_scenario(scenario: str, known: tuple[str, ...] = SCENARIOS) -> str:
    if scenario not in known:
        raise ValueError("scenario must be one of %s, not %r" % (", ".join(known), scenario))
    return scenario


def _read_json(path: Path) -> dict:
    try:
        with open(path) as f:
            doc = json.load(f)
    except (OSError, ValueError):
        return {}
    return doc if isinstance(doc, dict) else {}


def _check_pace(pace) -> float:
    try:
        value = float(pace)
    except (TypeError, ValueError):
        value = float("nan")
    if not 0 < value <= 10000:
        raise ValueError("pace must be a number > 0 (1: a start of ~5-10 s; 60: about real time), not %r" % (pace,))
    return value


def _toml_string(value: str) -> str:
    out = ['"']
    for ch in value:
        if ch == '"':
            out.append('\\"')
        elif ch == "\\":
            out.append("\\\\")
        elif ch == "\n":
            out.append("\\n")
        elif ch == "\t":
            out.append("\\t")
        elif ord(ch) < 0x20 or ord(ch) == 0x7F:
            out.append("\\u%04X" % ord(ch))
        else:
            out.append(ch)
    out.append('"')
    return "".join(out)


def _write_json_atomic(path: Path, data: dict) -> None:
    path = Path(path)
    tmp = path.with_name(".%s.%d.tmp" % (path.name, os.getpid()))
    with open(tmp, "w") as f:
        json.dump(data, f, indent=1)
        f.write("\n")
        f.flush()
    os.replace(tmp, path)


def _write(path: Path, text: str | bytes, mode: int = 0o644) -> None:
    path.parent.mkdir(parents=True, exist_ok=True)
    tmp = path.with_name(".%s.tmp" % path.name)
    with open(tmp, "wb") as f:
        f.write(text.encode() if isinstance(text, str) else text)
    os.chmod(tmp, mode)
    os.replace(tmp, path)


_WRAPPER = """#!/bin/sh
# The "python" of gpuops' simulated GPU host, written by gpuops.sim.host: it stands in
# for the host's interpreter and runs the real one ({real}).
SIM_DIR='{dir}'
REAL_PYTHON='{real}'
{var}_VERSION='{version}'  # empty: this host has no {title}
{var}_VENV='{venv}'  # empty: no real {title} for its benchmark and eval modules
SIM_PYTHONPATH="{pythonpath}"  # the stand-ins (pynvml, {package}) this wrapper puts first on PYTHONPATH
# every run, one line in state/calls.log (what tests count: log followers, probes, reporters):
# its pid and its arguments, the source of a `python -c SOURCE` left out
if [ "${{1:-}}" = "-c" ]; then _calls=$(shift 2; printf '%s ' "$@"); else _calls="$*"; fi
printf '%s -- %s\n' "$$" "$_calls" | cut -c1-2000 >> "$SIM_DIR/state/calls.log" 2>/dev/null || :
# the module run: `python -m MODULE`, or through gpuops' key launcher, `python DIR/launch.py -m MODULE`
case "${{1:-}}" in
    -m) _module=${{2:-}} ;;
    */launch.py) if [ "${{2:-}}" = "-m" ]; then _module=${{3:-}}; else _module=; fi ;;
    *) _module= ;;
esac
case "$_module" in
    {server_module}) ;;
    {real_modules})
        # {title}'s other modules (its benchmark and eval modules, its router in front of simulated
        # servers, keyed, through gpuops' launcher) run for real from the {title} virtualenv given to
        # setup, without the stand-ins on PYTHONPATH.
        # (With no {title} they fall through to the real python below: No module named '{package}'.)
        if [ -n "${var}_VERSION" ]; then
            if [ -z "${var}_VENV" ]; then
                echo "gpuops simulated host: python -m $_module needs a real {title} virtualenv; set one up with" \
                     "gpuops sim setup DIR {venv_option} PATH" >&2
                exit 1
            fi
            while :; do  # a parent python run by this wrapper left the stand-ins on PYTHONPATH
                case "${{PYTHONPATH:-}}" in
                    "$SIM_PYTHONPATH") unset PYTHONPATH; break ;;
                    "$SIM_PYTHONPATH:"*) PYTHONPATH=${{PYTHONPATH#"$SIM_PYTHONPATH:"}} ;;
                    *) break ;;
                esac
            done
            exec "${var}_VENV/bin/python" "$@"
        fi ;;
esac
export GPUOPS_HOST_ROOT="$SIM_DIR/root"
export PYTHONPATH="$SIM_PYTHONPATH${{PYTHONPATH:+:$PYTHONPATH}}"
case "$1 $2" in
    "-m {server_module}")
        # The {title} server simulator's branch point: --help answers for the host's version;
        # anything else runs $SIM_DIR/lib/{server_path} (the simulator) with the
        # real python below, so the process looks like `python -m {server_module} ...`.
        # (With no {title} the real python runs it and fails: No module named '{package}'.)
        if [ -n "${var}_VERSION" ]; then
            for arg in "$@"; do
                case "$arg" in
                    -h|--help) exec cat "$SIM_DIR/lib/{sim_folder}/{help_file}" ;;
                esac
            done
        fi ;;
    *) ;;
esac
exec "$REAL_PYTHON" "$@"
"""

# lib/SERVER.py: `python -m SERVER` runs the simulator (lib/PACKAGE-sim/PACKAGE_sim, DEPTH folders up)
_LAUNCH_SERVER = '''"""gpuops' simulated host: `python -m {server_module}` runs the {title} server simulator."""

import os
import sys

sys.path.insert(0, os.path.join({lib}, "{sim_folder}"))

import {sim_module}  # noqa: E402

if __name__ == "__main__":
    sys.exit({sim_module}.main(sys.argv[1:]))
'''

_ABSENT_PYNVML = '''"""gpuops' simulated host, nvml="absent": this python has no pynvml (nvidia-ml-py)."""
raise ModuleNotFoundError("No module named 'pynvml'", name="pynvml")
'''

_PROC_VERSION = (
    "NVRM version: NVIDIA UNIX Open Kernel Module for x86_64  {v}  Release Build  "
    "(dvs-builder@U16-I1-N07-12-3)  Sun Oct 12 2025\n"
    "GCC version:  gcc version 13.3.0 (Ubuntu 13.3.0-6ubuntu2~24.04) \n"
)

# What an engine's part may put into the wrapper (a /bin/sh script) and the host's paths.
_PART_WORDS = {
    "title": re.compile(r"^[A-Za-z0-9][A-Za-z0-9 .+_-]*$"),
    "package": re.compile(r"^[A-Za-z_][A-Za-z0-9_]*$"),
    "server_module": re.compile(r"^[A-Za-z_][A-Za-z0-9_]*(\.[A-Za-z_][A-Za-z0-9_]*)+$"),
    "venv_option": re.compile(r"^--[a-z0-9][a-z0-9-]*$"),
}
_MODULE_PATTERN = re.compile(r"^[A-Za-z_][A-Za-z0-9_.*]*$")


def _engine_part(engine: str | None = None) -> SimHostPart:
    """The engine's (default: the default engine's) simulated-host part, what the host presents of it,
    its words checked: they go into a shell script and the host's paths. ValueError (one line) when
    there is no such engine or it has no simulated host."""
    part = engines.get(engine or engines.DEFAULT).simhost()
    for field, pattern in _PART_WORDS.items():
        if not pattern.match(str(getattr(part, field, ""))):
            raise ValueError("the engine's simulated host gives a %s gpuops cannot use: %r" % (field, getattr(part, field, None)))
    if not part.server_module.startswith(part.package + "."):
        raise ValueError("the engine's server module %r is not in its package %r" % (part.server_module, part.package))
    if not part.real_modules or not all(_MODULE_PATTERN.match(m) for m in part.real_modules):
        raise ValueError("the engine's simulated host gives modules gpuops cannot use: %r" % (part.real_modules,))
    return part


def _sim_names(part: SimHostPart) -> tuple[str, str, str]:
    """(the simulator's folder under lib/, its module's name, the --help file in that folder)."""
    return part.package + "-sim", part.package + "_sim", part.server_module.rsplit(".", 1)[1] + ".help"


def _wrapper(part: SimHostPart, *, root: Path, real: str, pythonpath: str, version: str, venv: str) -> str:
    """The host's bin/python (a /bin/sh script): the engine's server module goes to the simulator, its
    other modules to the engine's virtualenv, everything else to the real interpreter."""
    sim_folder, _, help_file = _sim_names(part)
    return _WRAPPER.format(dir=root, real=real, pythonpath=pythonpath, version=version, venv=venv,
                           var=part.package.upper(), title=part.title, package=part.package,
                           server_module=part.server_module, real_modules="|".join(part.real_modules),
                           server_path=part.server_module.replace(".", "/") + ".py", venv_option=part.venv_option,
                           sim_folder=sim_folder, help_file=help_file)


def _write_engine(lib_dir: Path, part: SimHostPart, version: str | None, server: Path) -> None:
    """The engine's stand-in package, its metadata, its --help text and the server (or an import that
    fails, for a host without the engine)."""
    for name, text in part.package_files(version).items():
        _write(lib_dir / name, text)
    if version is None:
        return
    sim_folder, sim_module, help_file = _sim_names(part)
    sim_dir = lib_dir / sim_folder
    _write(sim_dir / help_file, part.help_text(version))
    for name, data in part.server_files(version).items():
        _write(sim_dir / name, data)
    if server.is_dir():  # a package (the tests' scenario engine)
        _copy_package(server, sim_dir / sim_module)
    else:
        _write(sim_dir / (sim_module + ".py"), server.read_bytes())
        _write(sim_dir / "demo.json", json.dumps(part.demo_script(), indent=1) + "\n")
    depth = part.server_module.count(".")  # lib/ is DEPTH folders above lib/SERVER.py
    lib = "os.path.abspath(__file__)"
    for _ in range(depth + 1):
        lib = "os.path.dirname(%s)" % lib
    _write(lib_dir / (part.server_module.replace(".", "/") + ".py"),
           _LAUNCH_SERVER.format(server_module=part.server_module, title=part.title, lib=lib,
                                 sim_folder=sim_folder, sim_module=sim_module))


def _copy_package(source: Path, target: Path) -> None:
    """Copy the simulator's package folder SOURCE (its .py files) to TARGET on the host."""
    for f in sorted(source.glob("*.py")):
        _write(target / f.name, f.read_bytes())


_TORCH_INIT = '''"""gpuops' simulated host: a stand-in torch with only its version.py (what triage reads)."""
raise ImportError("gpuops simulated host: torch is a stand-in here (torch/version.py only)")
'''

# torch's generated version.py, as a cu129 wheel ships it
_TORCH_VERSION = '''from typing import Optional

__all__ = ['__version__', 'debug', 'cuda', 'git_version', 'hip', 'xpu']
__version__ = '2.9.1+cu{tag}'
debug = False
cuda: Optional[str] = '{cuda}'
git_version = 'd38164a545b4a4e4e0cf73ce67173f70574890b6'
hip: Optional[str] = None
xpu: Optional[str] = None
'''

# A kernel log (dmesg with timestamps) of an Ubuntu 24.04 GPU box; the IOMMU lines follow the mode.
_KERN_BOOT = """[    0.000000] Linux version 6.8.0-60-generic (buildd@lcy02-amd64-054) (x86_64-linux-gnu-gcc-13 (Ubuntu 13.3.0-6ubuntu2~24.04) 13.3.0, GNU ld (GNU Binutils for Ubuntu) 2.42) #63-Ubuntu SMP PREEMPT_DYNAMIC Tue Apr 15 19:04:15 UTC 2025
[    0.000000] Command line: {cmdline}
"""
_KERN_IOMMU = {
    "off": "[    0.391502] iommu: Default domain type: Translated\n",  # printed even with no IOMMU at all
    "pt": "[    0.391502] iommu: Default domain type: Passthrough (set via kernel command line)\n"
          "[    1.117342] pci 0000:00:00.2: AMD-Vi: IOMMU performance counters supported\n"
          "[    1.120786] AMD-Vi: Interrupt remapping enabled\n",
    "translated": "[    0.391502] iommu: Default domain type: Translated\n"
                  "[    0.391505] iommu: DMA domain TLB invalidation policy: lazy mode\n"
                  "[    1.117342] pci 0000:00:00.2: AMD-Vi: IOMMU performance counters supported\n"
                  "[    1.120786] AMD-Vi: Interrupt remapping enabled\n",
}
_KERN_IOMMU["sev-snp"] = ("[    0.000000] Memory Encryption Features active: AMD SEV SEV-ES SEV-SNP\n"
                          + _KERN_IOMMU["translated"])
_KERN_CMDLINE = "BOOT_IMAGE=/vmlinuz-6.8.0-60-generic root=UUID=4c1f7d2e-95b1-4b8e-8f3e-2f0c6b1d7a90 ro "
_KERN_CMDLINE_IOMMU = {"off": "quiet", "pt": "amd_iommu=on iommu=pt", "translated": "amd_iommu=on",
                       "sev-snp": "amd_iommu=on"}
_KERN_NVIDIA = """[    5.218841] nvidia: loading out-of-tree module taints kernel.
[    5.402113] NVRM: loading NVIDIA UNIX Open Kernel Module for x86_64  {v}  Release Build  (dvs-builder@U16-I1-N07-12-3)  Sun Oct 12 2025
"""
# What the driver logs when a process's userspace library is not the kernel module's version.
_KERN_API_MISMATCH = """[  312.881234] NVRM: API mismatch: the client has the version {lib}, but
[  312.881236] NVRM: this kernel module has the version {v}.  Please
[  312.881237] NVRM: make sure that this kernel module and all NVIDIA driver
[  312.881238] NVRM: components have the same version.
"""


def _write_kernel_files(host_root: Path, *, iommu: str, gpus: int, driver_version: str,
                        mismatch: str | None) -> None:
    """The kernel's side of the host: /proc/cmdline, IOMMU groups in /sys (one per GPU, plus a
    few others), the kernel log, and a /dev/shm folder (its size is the filesystem it lives on)."""
    cmdline = _KERN_CMDLINE + _KERN_CMDLINE_IOMMU[iommu]
    _write(host_root / "proc/cmdline", cmdline + "\n")
    log = _KERN_BOOT.format(cmdline=cmdline) + _KERN_IOMMU[iommu] + _KERN_NVIDIA.format(v=driver_version)
    if mismatch:
        log += _KERN_API_MISMATCH.format(lib=mismatch, v=driver_version)
    _write(host_root / "var/log/kern.log", log)
    (host_root / "dev/shm").mkdir(parents=True, exist_ok=True)
    groups = host_root / "sys/kernel/iommu_groups"
    groups.mkdir(parents=True, exist_ok=True)  # there (and empty) with no IOMMU too
    if iommu == "off":
        return
    kind = "identity" if iommu == "pt" else "DMA-FQ"
    for n in range(4):  # host bridges and the like
        _write(groups / str(n) / "type", kind + "\n")
    for i in range(gpus):
        group = str(10 + i)
        _write(groups / group / "type", kind + "\n")
        device = host_root / "sys/bus/pci/devices" / _bus_id(i)[4:].lower()
        device.mkdir(parents=True, exist_ok=True)
        os.symlink("../../../../kernel/iommu_groups/" + group, device / "iommu_group")


def setup_simhost(
    directory: str | Path,
    *,
    gpus: int = 8,
    gpu_memory_gib: float = H200_MEMORY_GIB,
    gpu_name: str = "NVIDIA H200",
    driver_version: str = "580.159.04",
    nvml: str = "ok",
    library_version: str = "565.57.01",
    python: str | None = None,
    engine_version: str | None = None,
    scenario: str = "ok",
    pace: float = 1.0,
    engine_venv: str | None = None,
    iommu: str = "off",
    torch_cuda: str | None = None,
    server: str | Path | None = None,
    engine: str | None = None,
) -> SimHost:
    """Write a simulated GPU host into DIRECTORY (created if missing) and return it.

    scenario (SCENARIOS): what its engine's server and hf do: "ok"; "ok-with-mtp" (as ok, the model
    gets one MTP layer if its config has none); "hang-at-dist-init"; "spec-config-crash";
    "kv-cache-oom"; "slow-download". pace: multiplies the simulated delays (1: a start of a big
    model takes ~5-10 s; 60: about real time; tests use much less than 1). Both are kept in
    DIR/state/sim.json; running setup again (or ``SimHost.set_sim``) changes them.

    nvml: "ok"; "absent" (no pynvml module: the reporter must fall back);
    "no-driver" (nvmlInit: LibraryNotFound); "driver-not-loaded" (DriverNotLoaded);
    "mismatch" (LibRmVersionMismatch: kernel module DRIVER_VERSION, userspace
    libnvidia-ml LIBRARY_VERSION on the fake root).

    engine_version: the release of the engine (``engines.get()``, the default one) the host presents
    (default: the newest gpuops has data for; any version string the engine's ``check_version``
    takes); one of its ``absent`` values ("none"): a host without it, where its import fails.

    engine_venv: a virtualenv with the real engine: its modules other than the server (its
    ``real_modules``: benchmark, evaluation, router) run its python. Without one those modules fail
    with a message saying so.

    iommu (IOMMU_MODES): the kernel command line, IOMMU groups (the GPUs' included) and kernel
    log of the host; the kernel log also carries NVRM's "API mismatch" lines with nvml="mismatch".
    server: what runs ``python -m SERVER`` there: a file or package folder with a ``main(argv)``
    and a literal ``SCENARIOS`` (the tests' scenario engine, tests/simhost); default: $GPUOPS_SIM_SERVER,
    else the product's small server (DEMO_SERVER: the scenarios of SCENARIOS). A scenario it does not
    know is refused (ValueError, naming those it knows).

    engine: the engine the host stands in for (``core.engines`` name; default: the default engine), through
    its ``simhost()`` part; ValueError (one line) for an engine that has none.

    torch_cuda: a stand-in torch package whose ``torch/version.py`` says this CUDA runtime
    (e.g. "12.9"; its import fails, only the file is there); None: no stand-in.
    """
    raw = str(directory)
    root = check_setup_dir(raw)  # absurd, '..', system locations, a folder that is not a simulated host
    _check_path("simulated host directory", raw)
    _check_path("simulated host directory", str(root))
    if nvml not in NVML_MODES:
        raise ValueError("nvml must be one of %s, not %r" % (", ".join(NVML_MODES), nvml))
    if not isinstance(gpus, int) or gpus < 0:
        raise ValueError("gpus must be a whole number >= 0, not %r" % (gpus,))
    if not gpu_memory_gib > 0:
        raise ValueError("gpu_memory_gib must be > 0, not %r" % (gpu_memory_gib,))
    for what, v in (("driver_version", driver_version), ("library_version", library_version)):
        if not _VERSION.match(v or ""):
            raise ValueError("%s must look like 580.159.04, not %r" % (what, v))
    part = _engine_part(engine)
    engine_version = part.check_version(engine_version)
    server_path = resolve_server(server)
    known = server_scenarios(server_path)
    scenario = _check_scenario(scenario, known)
    pace = _check_pace(pace)
    if iommu not in IOMMU_MODES:
        raise ValueError("iommu must be one of %s, not %r" % (", ".join(IOMMU_MODES), iommu))
    if torch_cuda is not None and not re.match(r"^\d+\.\d+$", str(torch_cuda)):
        raise ValueError("torch_cuda must look like 12.9, not %r" % (torch_cuda,))
    real = os.path.abspath(python or sys.executable)
    _check_path("python", real)
    if not os.access(real, os.X_OK):
        raise ValueError("python %r is not an executable" % real)
    venv = ""
    if engine_venv is not None:
        venv_name = part.venv_option.lstrip("-").replace("-", "_")  # how the operator gave it
        venv = os.path.abspath(str(engine_venv))
        _check_path(venv_name, venv)
        if not os.access(os.path.join(venv, "bin", "python"), os.X_OK):
            raise ValueError("%s %r is not a virtualenv (no bin/python)" % (venv_name, str(engine_venv)))

    bin_dir, lib_dir, absent_dir = root / "bin", root / "lib", root / "lib-absent"
    state_dir, host_root = root / "state", root / "root"
    for d in (bin_dir, lib_dir, state_dir, state_dir / "systemd", root / "journal"):
        d.mkdir(parents=True, exist_ok=True)
    # Start from a clean slate for what this function owns (a re-run may change modes); the
    # host's own files under DIR/root/etc (units, env files) stay.
    for d in (absent_dir, host_root / "proc", host_root / "usr", host_root / "sys", host_root / "dev",
              lib_dir / "torch"):
        shutil.rmtree(d, ignore_errors=True)
    with contextlib.suppress(FileNotFoundError):
        (host_root / "var/log/kern.log").unlink()
    with contextlib.suppress(FileNotFoundError):
        (lib_dir / "pynvml.py").unlink()
    shutil.rmtree(lib_dir / "__pycache__", ignore_errors=True)
    for d in [lib_dir / part.package, lib_dir / (part.package + "-sim"), lib_dir / "sim-data",
              *lib_dir.glob(part.package + "-*.dist-info")]:
        shutil.rmtree(d, ignore_errors=True)

    # The fakes.
    if nvml == "absent":
        _write(absent_dir / "pynvml.py", _ABSENT_PYNVML)
        pythonpath = "$SIM_DIR/lib-absent:$SIM_DIR/lib"  # lib still carries the engine's stand-in
    else:
        _write(lib_dir / "pynvml.py", (TEMPLATES / "pynvml.py").read_bytes())
        pythonpath = "$SIM_DIR/lib"
    _write_engine(lib_dir, part, engine_version, server_path)
    _write(bin_dir / "python", _wrapper(part, root=root, real=real, pythonpath=pythonpath, version=engine_version or "",
                                        venv=venv), 0o755)
    for tool in ("nvidia-smi", "hf", "systemctl"):
        text = (TEMPLATES / tool).read_text()
        _write(bin_dir / tool, "#!%s -I\n%s" % (real, text.split("\n", 1)[1]), 0o755)
    _write(lib_dir / "sim-data" / "models.json", (TEMPLATES / "hf-models.json").read_bytes())

    # The host's files, read by the reporter under GPUOPS_HOST_ROOT.
    init_error = NVML_MODES[nvml]
    lib_version = library_version if nvml == "mismatch" else driver_version
    if nvml not in ("no-driver", "driver-not-loaded"):  # the loaded kernel module
        _write(host_root / "proc/driver/nvidia/version", _PROC_VERSION.format(v=driver_version))
    if nvml != "no-driver":  # the driver's userspace library
        libdir = host_root / "usr/lib/x86_64-linux-gnu"
        for stem in ("libnvidia-ml.so", "libcuda.so"):
            libname = "%s.%s" % (stem, lib_version)
            _write(libdir / libname, b"\x7fELF gpuops simulated host: placeholder for %s\n" % libname.encode())
            os.symlink(libname, libdir / ("%s.1" % stem))
    _write_kernel_files(host_root, iommu=iommu, gpus=gpus, driver_version=driver_version,
                        mismatch=lib_version if nvml == "mismatch" else None)
    if torch_cuda is not None:
        _write(lib_dir / "torch" / "__init__.py", _TORCH_INIT)
        _write(lib_dir / "torch" / "version.py", _TORCH_VERSION.format(cuda=torch_cuda,
                                                                        tag=torch_cuda.replace(".", "")))

    state_file = state_dir / "gpus.json"
    (state_dir / "calls.log").touch()  # the wrapper appends a line per python run
    host = SimHost(directory=root, python=bin_dir / "python", bin_dir=bin_dir, state_file=state_file,
                   engine_version=engine_version, scenario=scenario, pace=pace)
    _write_json_atomic(host.sim_file, dict(SIM_DEFAULTS, scenario=scenario, pace=pace))
    _write_json_atomic(state_dir / "server.json", {"server": str(server_path), "scenarios": list(known)})
    host.write_state(
        default_state(
            root,
            gpus=gpus,
            gpu_memory_gib=gpu_memory_gib,
            gpu_name=gpu_name,
            driver_version=driver_version,
            init_error=init_error,
            library_version=lib_version,
        )
    )
    for p in (bin_dir / "python", bin_dir / "nvidia-smi", bin_dir / "hf", bin_dir / "systemctl"):
        os.chmod(p, os.stat(p).st_mode | stat.S_IXUSR | stat.S_IXGRP | stat.S_IXOTH)
    return host
