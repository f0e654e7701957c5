"""The simulated GPU host, run for real: its python wrapper, fake pynvml and fake nvidia-smi
as subprocesses, with gpuops' own reporter source (no mocks)."""

from __future__ import annotations

import json
import os
import re
import signal
import subprocess
import sys
import time
import tomllib
from pathlib import Path

import pytest

from gpuops.core.hosts.host import script_source
from gpuops.core.hosts.programs import reporter
from gpuops.sim import host as sim_host
from gpuops.sim.host import SimHost, setup_simhost

REPORTER_SOURCE = script_source(reporter)  # exactly what gpuops sends
MIB = 1024 * 1024
GIB = 1024 * MIB


def run(argv, timeout=10, **kw) -> subprocess.CompletedProcess:
    return subprocess.run([str(a) for a in argv], capture_output=True, text=True, timeout=timeout, **kw)


def report(host: SimHost) -> dict:
    res = run([host.python, "-c", REPORTER_SOURCE, "--once"])
    assert res.returncode == 0, res.stderr
    lines = res.stdout.splitlines()
    assert len(lines) == 1
    return json.loads(lines[0])


def smi(host: SimHost, *args, timeout=10) -> subprocess.CompletedProcess:
    return run([host.bin_dir / "nvidia-smi", *args], timeout=timeout)


@pytest.fixture
def host(tmp_path) -> SimHost:
    return setup_simhost(tmp_path / "sim", gpus=2)


# ------------------------------------------------------------------ setup


@pytest.mark.parametrize(
    "bad", ["/tmp/a b", "/tmp/a\tb", "/tmp/a;b", "/tmp/$HOME", "/tmp/a'b", '/tmp/a"b', "/tmp/a:b",
            "/tmp/a`b`", "/tmp/a|b", "/tmp/a&b", "/tmp/a*b", "/tmp/a\nb", "rel dir", ""]
)
def test_unsafe_directory_refused(tmp_path, bad):
    with pytest.raises(ValueError) as err:
        setup_simhost(bad)
    assert "\n" not in str(err.value).replace("\\n", "")
    assert not os.path.exists(bad) or bad == ""


def test_layout_paths_and_state(tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)
    host = setup_simhost("relative/sim", gpus=3, gpu_memory_gib=80, gpu_name="NVIDIA H100 80GB HBM3")
    d = tmp_path / "relative" / "sim"
    assert host.directory == d and host.directory.is_absolute()
    assert host.python == d / "bin" / "python" and host.bin_dir == d / "bin"
    assert host.state_file == d / "state" / "gpus.json"
    assert (host.python.stat().st_mode & 0o777) == 0o755
    assert os.access(host.bin_dir / "nvidia-smi", os.X_OK)
    wrapper = host.python.read_text()
    assert wrapper.startswith("#!/bin/sh\n")
    assert f"REAL_PYTHON='{os.path.abspath(sys.executable)}'" in wrapper
    assert f"SIM_DIR='{d}'" in wrapper and 'exec "$REAL_PYTHON" "$@"' in wrapper
    assert "sglang.launch_server" in wrapper  # the simulator's branch point
    assert (host.bin_dir / "nvidia-smi").read_text().startswith(f"#!{os.path.abspath(sys.executable)} ")
    for tool in ("hf", "systemctl"):
        assert os.access(host.bin_dir / tool, os.X_OK)
        assert (host.bin_dir / tool).read_text().startswith(f"#!{os.path.abspath(sys.executable)} -I\n")
    assert (d / "lib" / "sglang" / "launch_server.py").is_file()
    assert (d / "lib" / "sglang-sim" / "sglang_sim" / "server.py").is_file()
    assert json.loads((d / "lib" / "sim-data" / "models.json").read_text())["models"]["Qwen/Qwen3-8B"]["shards"] == 5
    assert host.journal_dir == d / "journal" and host.journal_dir.is_dir()
    assert (d / "state" / "systemd").is_dir()
    assert (host.scenario, host.pace) == ("ok", 1.0)
    assert json.loads((d / "state" / "sim.json").read_text())["scenario"] == "ok"
    assert (d / "lib" / "pynvml.py").is_file()
    assert not (d / "lib" / "__init__.py").exists()
    assert (d / "root/proc/driver/nvidia/version").read_text().startswith(
        "NVRM version: NVIDIA UNIX Open Kernel Module for x86_64  580.159.04  Release Build  "
    )
    assert os.path.realpath(d / "root/usr/lib/x86_64-linux-gnu/libnvidia-ml.so.1").endswith(
        "libnvidia-ml.so.580.159.04"
    )

    state = host.read_state()
    assert state["driver_version"] == "580.159.04"
    assert state["nvml_version"] == "13.580.159.04"
    assert state["cuda_driver_version"] == 13000
    assert state["init_error"] is None
    assert len(state["gpus"]) == 3
    g0, g1 = state["gpus"][:2]
    assert g0["name"] == "NVIDIA H100 80GB HBM3"
    assert g0["memory_total"] == 80 * GIB
    assert (g0["memory_used"], g0["memory_reserved"], g0["util"]) == (0, 644_939_776, 0)
    assert (g0["power_mw"], g0["temp_c"], g0["sm_clock"], g0["processes"]) == (75000, 31, 345, [])
    assert re.fullmatch(r"GPU-[0-9a-f]{8}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{12}", g0["uuid"])
    assert g0["uuid"] != g1["uuid"] and g0["pci_bus_id"] != g1["pci_bus_id"]
    assert g0["pci_bus_id"] == "00000000:18:00.0"
    # deterministic: the same directory gives the same uuids
    again = setup_simhost(d, gpus=3)
    assert [g["uuid"] for g in again.read_state()["gpus"]] == [g["uuid"] for g in state["gpus"]]


def test_host_block_is_valid_config(host):
    local = host.host_block("sim1")
    doc = tomllib.loads(local)["hosts"]["sim1"]
    assert doc == {"local": True, "python": str(host.python), "launcher": "process",
                   "journal_dir": str(host.directory / "journal"),
                   "env": {"PATH": f"{host.bin_dir}:$PATH", "HF_HOME": str(host.directory / "hf-home")}}
    remote = tomllib.loads(host.host_block("gpu.lab-2", ssh='root@10.0.0.5:22'))
    assert remote["hosts"]["gpu.lab-2"]["ssh"] == "root@10.0.0.5:22"
    assert "local" not in remote["hosts"]["gpu.lab-2"]
    with pytest.raises(ValueError):
        host.host_block("Bad Name")
    with pytest.raises(ValueError, match="launcher"):
        host.host_block("sim1", launcher="docker")
    # gpuops' own config parser takes it
    from gpuops.core.config import parse_inventory

    cfg = parse_inventory(local, "test").hosts[0]
    assert cfg.local and cfg.python == str(host.python) and cfg.path_prefix() == str(host.bin_dir)
    assert cfg.launcher == "process" and cfg.journal_dir == str(host.journal_dir)
    cfg = parse_inventory(host.host_block("sim1", launcher="systemd"), "test").hosts[0]
    assert cfg.launcher == "systemd" and cfg.journal_dir == str(host.journal_dir)


def test_write_state_is_atomic_and_set_gpu_validates(host):
    state = host.read_state()
    state["gpus"][0]["temp_c"] = 55
    host.write_state(state)
    assert host.read_state()["gpus"][0]["temp_c"] == 55
    assert sorted(p.name for p in host.state_file.parent.iterdir() if p.name.endswith(".tmp")) == []
    with pytest.raises(IndexError):
        host.set_gpu(2, util=1)
    with pytest.raises(ValueError, match="memory_use"):
        host.set_gpu(0, memory_use=1)
    host.set_gpu(1, util=42, processes=[{"pid": 7, "used": GIB}])
    g1 = host.read_state()["gpus"][1]
    assert g1["util"] == 42 and g1["processes"] == [{"pid": 7, "used": GIB}]


# ------------------------------------------------------------------ fake pynvml


PYNVML_PROBE = r"""
import ctypes, json, pynvml as p
out = {"file": p.__file__}
def err(fn, *a, **k):
    try:
        fn(*a, **k)
    except Exception as e:
        return [type(e).__name__, getattr(e, "value", None), str(e)]
    return None
out["before_init"] = err(p.nvmlDeviceGetCount)
p.nvmlInit()
out["driver"] = p.nvmlSystemGetDriverVersion()
out["nvml"] = p.nvmlSystemGetNVMLVersion()
out["cuda"] = [p.nvmlSystemGetCudaDriverVersion(), p.nvmlSystemGetCudaDriverVersion_v2()]
out["count"] = p.nvmlDeviceGetCount()
h0, h1 = p.nvmlDeviceGetHandleByIndex(0), p.nvmlDeviceGetHandleByIndex(1)
out["bad_index"] = err(p.nvmlDeviceGetHandleByIndex, 5)
out["name"], out["uuid"] = p.nvmlDeviceGetName(h1), p.nvmlDeviceGetUUID(h1)
out["bus"] = p.nvmlDeviceGetPciInfo(h1).busId
m1 = p.nvmlDeviceGetMemoryInfo(h1)
m2 = p.nvmlDeviceGetMemoryInfo(h1, version=p.nvmlMemory_v2)
out["v1"] = [m1.total, m1.free, m1.used]
out["v2"] = [m2.total, m2.free, m2.used, m2.reserved]
u = p.nvmlDeviceGetUtilizationRates(h1)
out["util"] = [u.gpu, u.memory]
out["power"] = p.nvmlDeviceGetPowerUsage(h1)
out["temp"] = p.nvmlDeviceGetTemperature(h1, p.NVML_TEMPERATURE_GPU)
out["sm"] = p.nvmlDeviceGetClockInfo(h1, p.NVML_CLOCK_SM)
out["procs"] = [[x.pid, x.usedGpuMemory] for x in p.nvmlDeviceGetComputeRunningProcesses(h1)]
out["gprocs"] = p.nvmlDeviceGetGraphicsRunningProcesses(h1)
out["p2p_write"] = p.nvmlDeviceGetP2PStatus(h0, h1, p.NVML_P2P_CAPS_INDEX_WRITE)
out["p2p_read_const"] = list(p.NVML_P2P_CAPS_INDEX_READ)
try:
    p.nvmlDeviceGetP2PStatus(h0, h1, p.NVML_P2P_CAPS_INDEX_READ)
except ctypes.ArgumentError as e:
    out["p2p_read"] = str(e)
out["na_power"] = err(p.nvmlDeviceGetPowerUsage, h0)
out["na_is_subclass"] = issubclass(p.NVMLError_NotSupported, p.NVMLError)
out["mapped"] = type(p.NVMLError(p.NVML_ERROR_LIB_RM_VERSION_MISMATCH)).__name__
out["strings"] = [str(p.NVMLError(c)) for c in (12, 18, 9, 3, 1)]
out["consts"] = [p.NVML_ERROR_LIBRARY_NOT_FOUND, p.NVML_ERROR_LIB_RM_VERSION_MISMATCH,
                 p.NVML_ERROR_DRIVER_NOT_LOADED, p.NVML_ERROR_NOT_SUPPORTED, p.NVML_ERROR_UNINITIALIZED,
                 p.NVML_ERROR_INVALID_ARGUMENT, p.nvmlMemory_v2, p.NVML_P2P_STATUS_OK]
out["unmodelled"] = err(p.nvmlDeviceGetBAR1MemoryInfo, h0)
p.nvmlShutdown()
out["after_shutdown"] = err(p.nvmlDeviceGetCount)
print(json.dumps(out))
"""


@pytest.fixture
def sleeper():
    proc = subprocess.Popen(["sleep", "300"])
    yield proc
    proc.kill()
    proc.wait()


def test_fake_pynvml_mimics_the_binding(host, sleeper):
    host.set_gpu(1, memory_used=11_291_918_336, util=87, mem_util=40, power_mw=412_345, temp_c=58,
                 sm_clock=1980, processes=[{"pid": sleeper.pid, "used": 11_282_677_760}])
    host.set_gpu(0, power_mw=None)
    res = run([host.python, "-c", PYNVML_PROBE])
    assert res.returncode == 0, res.stderr
    out = json.loads(res.stdout)
    g1 = host.read_state()["gpus"][1]
    total, reserved = g1["memory_total"], 644_939_776
    assert out["file"] == str(host.directory / "lib" / "pynvml.py")
    assert out["before_init"] == ["NVMLError_Uninitialized", 1, "Uninitialized"]
    assert (out["driver"], out["nvml"], out["cuda"], out["count"]) == ("580.159.04", "13.580.159.04", [13000, 13000], 2)
    assert out["bad_index"] == ["NVMLError_InvalidArgument", 2, "Invalid Argument"]
    assert (out["name"], out["uuid"], out["bus"]) == ("NVIDIA H200", g1["uuid"], g1["pci_bus_id"])
    # v1 counts reserved memory as used; v2 separates it (what a real H200 does)
    used = 11_291_918_336
    assert out["v1"] == [total, total - used - reserved, used + reserved]
    assert out["v2"] == [total, total - used - reserved, used, reserved]
    assert out["util"] == [87, 40]
    assert (out["power"], out["temp"], out["sm"]) == (412_345, 58, 1980)
    assert out["procs"] == [[sleeper.pid, 11_282_677_760]] and out["gprocs"] == []
    assert out["p2p_write"] == 0 and out["p2p_read_const"] == [0]
    assert out["p2p_read"] == "argument 3: TypeError: Don't know how to convert parameter 3"
    assert out["na_power"] == ["NVMLError_NotSupported", 3, "Not Supported"] and out["na_is_subclass"]
    assert out["mapped"] == "NVMLError_LibRmVersionMismatch"
    assert out["strings"] == ["NVML Shared Library Not Found", "RM has detected an NVML/RM version mismatch.",
                              "Driver Not Loaded", "Not Supported", "Uninitialized"]
    assert out["consts"] == [12, 18, 9, 3, 1, 2, 0x02000028, 0]
    assert out["unmodelled"] == ["NVMLError_NotSupported", 3, "Not Supported"]
    assert out["after_shutdown"] == ["NVMLError_Uninitialized", 1, "Uninitialized"]


def test_fake_pynvml_matches_real_module_names():
    """Every name the fake shares with the real nvidia-ml-py has the same value."""
    import importlib.util

    real = pytest.importorskip("pynvml")
    spec = importlib.util.spec_from_file_location("fake_pynvml", Path(sim_host.__file__).parent / "files" / "pynvml.py")
    fake = importlib.util.module_from_spec(spec)
    sys.modules["fake_pynvml"] = fake  # the error classes look their module up by name
    try:
        spec.loader.exec_module(fake)
    finally:
        del sys.modules["fake_pynvml"]
    consts = [n for n in dir(fake) if n.startswith("NVML_") or n == "nvmlMemory_v2"]
    assert len(consts) > 40
    for n in consts:
        assert getattr(real, n) == getattr(fake, n), n
    for n in dir(fake):
        if n.startswith("NVMLError_") or (n.startswith("nvml") and callable(getattr(fake, n))):
            assert hasattr(real, n), n


# ------------------------------------------------------------------ the reporter on the simulated host


def test_reporter_reads_the_simulated_gpus(host):
    host.set_gpu(1, memory_used=20 * GIB, util=93, processes=[{"pid": os.getpid(), "used": 20 * GIB - 8 * MIB}])
    data = report(host)
    assert data["v"] == 1
    nvml = data["nvml"]
    assert nvml["ok"] and nvml["code"] is None
    assert (nvml["driver_version"], nvml["nvml_version"], nvml["cuda_driver_version"]) == (
        "580.159.04", "13.580.159.04", 13000)
    state = host.read_state()
    assert len(data["gpus"]) == 2
    for row, gpu in zip(data["gpus"], state["gpus"]):
        assert row["uuid"] == gpu["uuid"] and row["name"] == "NVIDIA H200"
        assert row["memory_total_bytes"] == gpu["memory_total"]
        assert row["memory_used_bytes"] == gpu["memory_used"]  # v2 used, reserved apart
        assert row["memory_reserved_bytes"] == 644_939_776
        assert row["power_w"] == 75.0 and row["temp_c"] == 31 and row["sm_clock_mhz"] == 345
    assert data["gpus"][1]["util_percent"] == 93
    (proc,) = data["gpus"][1]["processes"]
    assert proc["pid"] == os.getpid() and proc["used_bytes"] == 20 * GIB - 8 * MIB
    assert proc["command"] and proc["user"]
    assert data["gpus"][0]["processes"] == []

    host.set_gpu(0, memory_used=5 * GIB, temp_c=None)
    again = report(host)
    assert again["gpus"][0]["memory_used_bytes"] == 5 * GIB
    assert again["gpus"][0]["temp_c"] is None  # N/A


def test_running_reporter_sees_set_gpu(host, sleeper):
    proc = subprocess.Popen([str(host.python), "-c", REPORTER_SOURCE, "--interval", "0.05"],
                            stdout=subprocess.PIPE, text=True)
    try:
        first = json.loads(proc.stdout.readline())
        assert first["gpus"][0]["memory_used_bytes"] == 0
        host.set_gpu(0, memory_used=7 * GIB, processes=[{"pid": sleeper.pid, "used": 7 * GIB}])
        deadline = time.monotonic() + 1.5
        while time.monotonic() < deadline:
            row = json.loads(proc.stdout.readline())["gpus"][0]
            if row["memory_used_bytes"] == 7 * GIB:
                assert [p["pid"] for p in row["processes"]] == [sleeper.pid]
                break
        else:
            pytest.fail("the running reporter never saw set_gpu's change")
    finally:
        proc.terminate()
        proc.wait(5)


def test_reporters_started_apart_sample_on_the_same_wall_clock_beat(host):
    """Each sample after the first comes at a multiple of the interval on the wall clock, so a
    fleet's reporters send together and the dashboard wakes once per interval, not once per host."""
    interval = 0.5
    procs = []
    try:
        for _ in range(2):
            procs.append(subprocess.Popen([str(host.python), "-c", REPORTER_SOURCE, "--interval", str(interval)],
                                          stdout=subprocess.PIPE, text=True))
            time.sleep(0.23)  # started apart: a plain every-interval loop would stay 0.23 s apart
        for proc in procs:
            proc.stdout.readline()  # the first sample comes when it is ready
            ts = [json.loads(proc.stdout.readline())["t"] for _ in range(6)]
            late = sorted(t % interval for t in ts)  # how far past its beat each sample came
            assert late[len(late) // 2] < 0.1, ts  # (scheduling delays on a loaded machine: the median)
            assert all(b - a > interval * 0.5 for a, b in zip(ts, ts[1:])), ts  # never two samples at once
    finally:
        for proc in procs:
            proc.terminate()
            proc.wait(5)


def test_nvml_absent_reporter_reports_no_pynvml(tmp_path):
    host = setup_simhost(tmp_path / "sim", gpus=1, nvml="absent")
    # the real interpreter has nvidia-ml-py installed; the wrapper must hide it
    res = run([host.python, "-c", "import pynvml"])
    assert res.returncode != 0 and "No module named 'pynvml'" in res.stderr
    data = report(host)
    assert data["nvml"]["code"] == "no-pynvml" and not data["nvml"]["ok"]
    assert data["gpus"] == []
    # nvidia-smi still answers: gpuops falls back to it
    assert smi(host, "-L").stdout.startswith("GPU 0: NVIDIA H200 (UUID: GPU-")


def test_nvml_no_driver(tmp_path):
    host = setup_simhost(tmp_path / "sim", gpus=2, nvml="no-driver")
    data = report(host)
    assert data["nvml"]["code"] == "no-driver" and data["nvml"]["hint"]
    assert data["gpus"] == []
    assert not (host.directory / "root/proc/driver/nvidia/version").exists()
    res = smi(host, "--query-gpu=index", "--format=csv,noheader,nounits")
    assert res.returncode == 12
    assert res.stdout.startswith("NVIDIA-SMI couldn't find libnvidia-ml.so library in your system.")


def test_nvml_driver_not_loaded(tmp_path):
    host = setup_simhost(tmp_path / "sim", gpus=1, nvml="driver-not-loaded")
    assert report(host)["nvml"]["code"] == "driver-not-loaded"
    res = smi(host)
    assert res.returncode == 9
    assert res.stdout == ("NVIDIA-SMI has failed because it couldn't communicate with the NVIDIA driver. "
                          "Make sure that the latest NVIDIA driver is installed and running.\n")


def test_nvml_mismatch_names_both_versions(tmp_path):
    host = setup_simhost(tmp_path / "sim", gpus=8, nvml="mismatch", driver_version="590.48.01",
                         library_version="565.57.01")
    data = report(host)
    nvml = data["nvml"]
    assert nvml["code"] == "driver-library-mismatch" and data["gpus"] == []
    assert "kernel module 590.48.01" in nvml["hint"]
    assert "library 565.57.01" in nvml["hint"]
    res = smi(host, "-L")
    assert res.returncode == 18
    assert res.stdout == "Failed to initialize NVML: Driver/library version mismatch\nNVML library version: 565.57\n"


# ------------------------------------------------------------------ fake nvidia-smi

# Read off a real nvidia-smi 580.159.04 on an H200 (2026-11-30).
REAL_QUERY_LINE = ("0, GPU-9aa1e10e-80f3-d617-27b6-554a1c9887e8, NVIDIA H200, 143771, 0, 616, 143156, 0, "
                   "124.92, 33, 465, 00000000:00:06.0, 580.159.04, [N/A]")
REAL_QUERY_HEADER = ("index, uuid, name, memory.total [MiB], memory.used [MiB], memory.reserved [MiB], "
                     "memory.free [MiB], utilization.gpu [%], power.draw [W], temperature.gpu, "
                     "clocks.current.sm [MHz], pci.bus_id, driver_version, fan.speed [%]")
REAL_QUERY_UNITS = ("0, GPU-9aa1e10e-80f3-d617-27b6-554a1c9887e8, NVIDIA H200, 143771 MiB, 0 MiB, 616 MiB, "
                    "143156 MiB, 0 %, 124.92 W, 33, 465 MHz, 00000000:00:06.0, 580.159.04, [N/A]")
ALL_FIELDS = ("index,uuid,name,memory.total,memory.used,memory.reserved,memory.free,utilization.gpu,"
              "power.draw,temperature.gpu,clocks.sm,pci.bus_id,driver_version,fan.speed")
REAL_TABLE = """\
+-----------------------------------------------------------------------------------------+
| NVIDIA-SMI 580.159.04             Driver Version: 580.159.04     CUDA Version: 13.0     |
+-----------------------------------------+------------------------+----------------------+
| GPU  Name                 Persistence-M | Bus-Id          Disp.A | Volatile Uncorr. ECC |
| Fan  Temp   Perf          Pwr:Usage/Cap |           Memory-Usage | GPU-Util  Compute M. |
|                                         |                        |               MIG M. |
|=========================================+========================+======================|
|   0  NVIDIA H200                    On  |   00000000:00:06.0 Off |                    0 |
| N/A   32C    P0             80W /  700W |       0MiB / 143771MiB |      0%      Default |
|                                         |                        |             Disabled |
+-----------------------------------------+------------------------+----------------------+

+-----------------------------------------------------------------------------------------+
| Processes:                                                                              |
|  GPU   GI   CI              PID   Type   Process name                        GPU Memory |
|        ID   ID                                                               Usage      |
|=========================================================================================|
|  No running processes found                                                             |
+-----------------------------------------------------------------------------------------+
"""


@pytest.fixture
def real_h200(tmp_path) -> SimHost:
    """One GPU set to what the real H200 read when the formats above were recorded."""
    host = setup_simhost(tmp_path / "sim", gpus=1)
    host.set_gpu(0, uuid="GPU-9aa1e10e-80f3-d617-27b6-554a1c9887e8", memory_total=150_754_820_096,
                 pci_bus_id="00000000:00:06.0", power_mw=124_920, temp_c=33, sm_clock=465)
    return host


def test_nvidia_smi_query_gpu_matches_real_output(real_h200):
    res = smi(real_h200, f"--query-gpu={ALL_FIELDS}", "--format=csv,noheader,nounits")
    assert (res.returncode, res.stdout, res.stderr) == (0, REAL_QUERY_LINE + "\n", "")
    res = smi(real_h200, f"--query-gpu={ALL_FIELDS}", "--format=csv")
    assert res.stdout == REAL_QUERY_HEADER + "\n" + REAL_QUERY_UNITS + "\n"
    res = smi(real_h200, f"--query-gpu={ALL_FIELDS}", "--format=csv,nounits")  # units stay in the header
    assert res.stdout == REAL_QUERY_HEADER + "\n" + REAL_QUERY_LINE + "\n"
    # memory rounds up to whole MiB (a real card: 10768.8 MiB used -> 10769, 132387.1 free -> 132388)
    real_h200.set_gpu(0, memory_used=11_291_918_336)
    res = smi(real_h200, "--query-gpu=memory.used,memory.reserved,memory.free,memory.total", "--format=csv")
    assert res.stdout == ("memory.used [MiB], memory.reserved [MiB], memory.free [MiB], memory.total [MiB]\n"
                          "10769 MiB, 616 MiB, 132388 MiB, 143771 MiB\n")
    # a null field is [N/A], with or without units
    real_h200.set_gpu(0, power_mw=None)
    assert smi(real_h200, "--query-gpu=index,power.draw", "--format=csv,noheader").stdout == "0, [N/A]\n"


def test_nvidia_smi_default_eight_gpus(tmp_path):
    host = setup_simhost(tmp_path / "sim")
    res = smi(host, "--query-gpu=index,memory.used,utilization.gpu,power.draw", "--format=csv,noheader,nounits")
    assert res.stdout.splitlines() == [f"{i}, 0, 0, 75.00" for i in range(8)]


def test_nvidia_smi_list_and_version(host):
    uuids = [g["uuid"] for g in host.read_state()["gpus"]]
    res = smi(host, "-L")
    assert res.stdout == "".join(f"GPU {i}: NVIDIA H200 (UUID: {u})\n" for i, u in enumerate(uuids))
    res = smi(host, "-L", "-lms", "100")
    assert res.returncode == 2
    assert res.stdout == "ERROR: Option -lms is not valid for this command. Please run 'nvidia-smi -h' for help.\n\n"
    assert smi(host, "--version").stdout.splitlines() == [
        "NVIDIA-SMI version  : 580.159.04", "NVML version        : 580.159",
        "DRIVER version      : 580.159.04", "CUDA Version        : 13.0"]


def test_nvidia_smi_compute_apps(host):
    sleeper = subprocess.Popen(["sleep", "30"])
    try:
        uuid1 = host.read_state()["gpus"][1]["uuid"]
        waker = subprocess.Popen(["sleep", "30"])
        host.set_gpu(1, processes=[{"pid": sleeper.pid, "used": 11_282_677_760},
                                   {"pid": waker.pid, "used": None, "name": ""}])
        res = smi(host, "--query-compute-apps=gpu_uuid,pid,used_memory,process_name", "--format=csv,noheader,nounits")
        assert res.returncode == 0
        assert res.stdout.splitlines() == [f"{uuid1}, {sleeper.pid}, 10760, sleep",
                                           f"{uuid1}, {waker.pid}, [N/A], sleep"]
        waker.kill()
        waker.wait()  # a process that is gone is no longer listed
        res = smi(host, "--query-compute-apps=gpu_uuid,pid,used_memory,process_name", "--format=csv,noheader,nounits")
        assert res.stdout.splitlines() == [f"{uuid1}, {sleeper.pid}, 10760, sleep"]
        res = smi(host, "--query-compute-apps=gpu_uuid,pid,used_memory,process_name", "--format=csv")
        assert res.stdout.splitlines()[:2] == ["gpu_uuid, pid, used_gpu_memory [MiB], process_name",
                                               f"{uuid1}, {sleeper.pid}, 10760 MiB, sleep"]
        # the table lists it too
        assert f"|    1   N/A  N/A{sleeper.pid:>16}      C   {'sleep':<38}10760MiB |\n" in smi(host).stdout
    finally:
        sleeper.kill()
        sleeper.wait()
    host.set_gpu(1, processes=[])
    res = smi(host, "--query-compute-apps=gpu_uuid,pid,used_memory,process_name", "--format=csv")
    assert res.stdout == "gpu_uuid, pid, used_gpu_memory [MiB], process_name\n"


def test_nvidia_smi_loop_prints_blocks_until_terminated(host):
    proc = subprocess.Popen([str(host.bin_dir / "nvidia-smi"), "--query-gpu=index,memory.used",
                             "--format=csv,noheader,nounits", "-lms", "100"],
                            stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    try:
        lines = [proc.stdout.readline() for _ in range(4)]  # two blocks of two GPUs
        assert lines == ["0, 0\n", "1, 0\n", "0, 0\n", "1, 0\n"]
        host.set_gpu(1, memory_used=3 * GIB)
        deadline = time.monotonic() + 1.5
        while proc.stdout.readline() != "1, 3072\n":
            assert time.monotonic() < deadline, "the loop never re-read the state"
    finally:
        proc.send_signal(signal.SIGTERM)
        proc.wait(5)
    assert proc.stderr.read() == ""  # quiet: no traceback
    # --loop-ms=N works as well, and a closed pipe ends it
    res = subprocess.run(f"'{host.bin_dir}/nvidia-smi' --query-gpu=index --format=csv --loop-ms=50 | head -3",
                         shell=True, capture_output=True, text=True, timeout=5)
    assert res.stdout == "index\n0\n1\n" and res.stderr == ""


def test_nvidia_smi_invalid_field_and_format(host):
    res = smi(host, "--query-gpu=index,bogus", "--format=csv,noheader,nounits")
    assert (res.returncode, res.stdout) == (2, 'Field "bogus" is not a valid field to query.\n\n')
    res = smi(host, "--query-compute-apps=gpu_uuid,nope", "--format=csv")
    assert (res.returncode, res.stdout) == (2, 'Field "nope" is not a valid field to query.\n\n')
    res = smi(host, "--query-gpu=index", "--format=xml")
    assert (res.returncode, res.stdout) == (2, "Format modifier is not recognized.\n")
    res = smi(host, "--query-gpu=index")  # no --format: csv with a header
    assert res.stdout == "index\n0\n1\n"


def test_nvidia_smi_table_matches_real_layout(real_h200, sleeper):
    real_h200.set_gpu(0, power_mw=80_236, temp_c=32)
    out = smi(real_h200).stdout
    date, rest = out.split("\n", 1)
    assert re.fullmatch(r"\w{3} \w{3} [ \d]\d \d\d:\d\d:\d\d \d{4} {7}", date)
    assert rest == REAL_TABLE
    # with a process (the real row, recorded with a 10 GiB PyTorch allocation by pid 566)
    real_h200.set_gpu(0, memory_used=11_291_918_336,
                      processes=[{"pid": sleeper.pid, "used": 11_282_677_760, "name": "python3"}])
    out = smi(real_h200).stdout
    assert "|   10769MiB / 143771MiB |" in out
    assert f"|    0   N/A  N/A{sleeper.pid:>16}      C   python3                               10760MiB |\n" in out


# ------------------------------------------------------------------ over SSH, as gpuops reaches a host


async def test_reporter_and_nvidia_smi_over_ssh(sshd, tmp_path_factory):
    from gpuops.core.config import parse_inventory
    from gpuops.core.hosts.host import SshHost
    from gpuops.core.telemetry.samples import reporter_argv

    base = tmp_path_factory.mktemp("simssh")
    host = setup_simhost(base / "sim", gpus=2)
    host.set_gpu(0, memory_used=GIB)
    cfg = parse_inventory(host.host_block("simbox", ssh=f"{sshd.user}@127.0.0.1:{sshd.port}"), "test").hosts[0]
    ssh = SshHost(cfg, connect_options=sshd.options())
    try:
        res = await ssh.run(reporter_argv(ssh, None), timeout=10)
        assert res.returncode == 0, res.stderr
        data = json.loads(res.stdout)
        assert data["nvml"]["ok"] and [g["memory_used_bytes"] for g in data["gpus"]] == [GIB, 0]
        res = await ssh.run(["nvidia-smi", "-L"], timeout=10)  # found through the PATH prefix
        assert res.stdout.startswith("GPU 0: NVIDIA H200 (UUID: GPU-")
    finally:
        await ssh.close()


# ------------------------------------------------------------------ SGLang on the simulated host


def test_default_sglang_version_is_the_newest_known(host):
    from gpuops.core.engines.sglang import versions as sv

    assert host.engine_version == sv.newest_version()
    res = run([host.python, "-c", "import sglang; print(sglang.__version__)"])
    assert (res.returncode, res.stdout) == (0, sv.newest_version() + "\n")
    res = run([host.python, "-c", "from importlib.metadata import version; print(version('sglang'))"])
    assert (res.returncode, res.stdout) == (0, sv.newest_version() + "\n")
    assert f"SGLANG_VERSION='{sv.newest_version()}'" in host.python.read_text()


def test_sglang_version_through_the_wrapper(tmp_path):
    host = setup_simhost(tmp_path / "sim", gpus=1, engine_version="0.5.13")
    assert host.engine_version == "0.5.13"
    res = run([host.python, "-c", "import sglang, sglang.version; print(sglang.__version__, sglang.version.__version__)"])
    assert (res.returncode, res.stdout, res.stderr) == (0, "0.5.13 0.5.13\n", "")
    res = run([host.python, "-c", "from importlib.metadata import version; print(version('sglang'))"])
    assert res.stdout == "0.5.13\n"
    # only through the wrapper: the real interpreter has no sglang
    res = run([sys.executable, "-c", "import sglang"], env={k: v for k, v in os.environ.items() if k != "PYTHONPATH"})
    assert res.returncode != 0
    # the reporter still works beside it
    assert report(host)["nvml"]["ok"]


@pytest.mark.parametrize("version", ["0.5.9", "0.5.15", "0.5.23"])
def test_launch_server_help_lists_that_versions_flags(tmp_path, version):
    from gpuops.core.engines.sglang import versions as sv

    host = setup_simhost(tmp_path / "sim", gpus=1, engine_version=version)
    res = run([host.python, "-m", "sglang.launch_server", "--help"])
    assert res.returncode == 0 and res.stderr == ""
    assert res.stdout.startswith(f"usage: {sv.help_prog(version)} [-h] ")
    assert res.stdout == sv.format_help(version)
    flags = sv.parse_help_flags(res.stdout)
    assert flags == sv.flags_for(version) - sv.hidden_flags(version)
    assert flags | sv.hidden_flags(version) == sv.flags_for(version)
    old, new = "--mamba-scheduler-strategy", "--mamba-radix-cache-strategy"
    assert (old in flags, new in flags) == {"0.5.9": (True, False), "0.5.15": (True, True),
                                            "0.5.23": (False, True)}[version]
    # -h, and a help flag after other arguments, answer the same
    assert run([host.python, "-m", "sglang.launch_server", "-h"]).stdout == res.stdout
    again = run([host.python, "-m", "sglang.launch_server", "--model-path", "Qwen/Qwen3.5-122B-A10B", "--help"])
    assert (again.returncode, again.stdout) == (0, res.stdout)


def test_launch_server_runs_the_simulator(host):
    from gpuops.core.engines.sglang import versions as sv

    # the simulator's own argparse answers: an unknown flag is refused as SGLang refuses it
    res = run([host.python, "-m", "sglang.launch_server", "--model-path", "Qwen/Qwen3.5-122B-A10B", "--tp", "2",
               "--no-such-flag"])
    assert res.returncode == 2 and res.stdout == ""
    assert res.stderr.endswith("%s: error: unrecognized arguments: --no-such-flag\n" % sv.help_prog(host.engine_version))
    # the process is `python -m sglang.launch_server ...` with the real interpreter
    assert 'exec "$REAL_PYTHON" "$@"' in host.python.read_text()
    # other modules and scripts still reach the real interpreter
    res = run([host.python, "-m", "json.tool", "--help"])
    assert res.returncode == 0 and "usage:" in res.stdout


def test_unknown_sglang_version_uses_the_nearest_known_flags(tmp_path):
    from gpuops.core.engines.sglang import versions as sv

    host = setup_simhost(tmp_path / "sim", gpus=1, engine_version="0.5.10.post1")
    assert run([host.python, "-c", "import sglang; print(sglang.__version__)"]).stdout == "0.5.10.post1\n"
    help_text = run([host.python, "-m", "sglang.launch_server", "--help"]).stdout
    assert sv.parse_help_flags(help_text) == sv.flags_for("0.5.10")
    host = setup_simhost(tmp_path / "sim2", gpus=1, engine_version="v0.9.0")
    assert host.engine_version == "0.9.0"
    assert run([host.python, "-m", "sglang.launch_server", "--help"]).stdout == sv.format_help(sv.newest_version())


@pytest.mark.parametrize("none", ["none", "None", "absent"])
def test_host_without_sglang(tmp_path, none):
    host = setup_simhost(tmp_path / "sim", gpus=1, engine_version=none)
    assert host.engine_version is None
    res = run([host.python, "-c", "import sglang"])
    assert res.returncode == 1 and res.stderr.endswith("ModuleNotFoundError: No module named 'sglang'\n")
    res = run([host.python, "-c", "from importlib.metadata import version; version('sglang')"])
    assert res.returncode == 1 and "PackageNotFoundError" in res.stderr
    # the real interpreter answers, as on a box without SGLang
    res = run([host.python, "-m", "sglang.launch_server", "--help"])
    assert res.returncode == 1 and res.stdout == ""
    assert "Error while finding module specification for 'sglang.launch_server' (ModuleNotFoundError: " \
           "No module named 'sglang')" in res.stderr
    assert "SGLANG_VERSION=''" in host.python.read_text()
    assert report(host)["nvml"]["ok"]  # GPUs still answer


def test_sglang_with_nvml_absent(tmp_path):
    host = setup_simhost(tmp_path / "sim", gpus=1, nvml="absent", engine_version="0.5.18")
    assert run([host.python, "-c", "import sglang; print(sglang.__version__)"]).stdout == "0.5.18\n"
    res = run([host.python, "-c", "import pynvml"])
    assert res.returncode != 0 and "No module named 'pynvml'" in res.stderr


def test_rerun_setup_changes_the_sglang_version(tmp_path):
    d = tmp_path / "sim"
    setup_simhost(d, gpus=1, engine_version="0.5.13")
    host = setup_simhost(d, gpus=1, engine_version="none")
    assert not list((d / "lib").glob("sglang-*.dist-info")) and not (d / "lib/sglang-sim").exists()
    assert run([host.python, "-c", "import sglang"]).returncode == 1
    host = setup_simhost(d, gpus=1, engine_version="0.5.9")
    assert [p.name for p in (d / "lib").glob("sglang-*.dist-info")] == ["sglang-0.5.9.dist-info"]
    assert run([host.python, "-c", "import sglang; print(sglang.__version__)"]).stdout == "0.5.9\n"
    assert "--mamba-radix-cache-strategy" not in run([host.python, "-m", "sglang.launch_server", "-h"]).stdout


@pytest.mark.parametrize("bad", ["", "latest", "0.5;rm -rf /", "0.5.23'", "$(id)", "0.5 .9", 5, "x" * 60])
def test_bad_sglang_version_refused(tmp_path, bad):
    with pytest.raises(ValueError) as err:
        setup_simhost(tmp_path / "sim", gpus=1, engine_version=bad)
    assert "sglang_version" in str(err.value)
    assert not (tmp_path / "sim").exists()


async def test_launch_server_help_over_ssh(sshd, tmp_path_factory):
    from gpuops.core.engines.sglang import versions as sv
    from gpuops.core.config import parse_inventory
    from gpuops.core.hosts.host import SshHost

    base = tmp_path_factory.mktemp("simssh-sglang")
    host = setup_simhost(base / "sim", gpus=1, engine_version="0.5.15")
    cfg = parse_inventory(host.host_block("simbox", ssh=f"{sshd.user}@127.0.0.1:{sshd.port}"), "test").hosts[0]
    ssh = SshHost(cfg, connect_options=sshd.options())
    try:
        res = await ssh.run([str(host.python), "-c", "import sglang; print(sglang.__version__)"], timeout=10)
        assert res.stdout == "0.5.15\n"
        res = await ssh.run([str(host.python), "-m", "sglang.launch_server", "--help"], timeout=10)
        assert res.returncode == 0
        assert sv.parse_help_flags(res.stdout) == sv.flags_for("0.5.15") - sv.hidden_flags("0.5.15")
    finally:
        await ssh.close()


# ------------------------------------------------------------------ scenario, pace, liveness


def test_scenario_and_pace_are_stored_and_changed(tmp_path):
    from gpuops.sim.host import SCENARIOS

    d = tmp_path / "sim"
    host = setup_simhost(d, gpus=1, scenario="hang-at-dist-init", pace=0.5)
    assert (host.scenario, host.pace) == ("hang-at-dist-init", 0.5)
    assert host.read_sim()["scenario"] == "hang-at-dist-init" and host.read_sim()["pace"] == 0.5
    host.set_sim(scenario="kv-cache-oom", token_delay_s=0.02)
    assert host.read_sim()["scenario"] == "kv-cache-oom" and host.scenario == "kv-cache-oom"
    with pytest.raises(ValueError, match="scenario"):
        host.set_sim(scenario="nope")
    with pytest.raises(ValueError, match="pace"):
        host.set_sim(pace=0)
    with pytest.raises(ValueError, match="unknown simulator field"):
        host.set_sim(colour="red")
    with pytest.raises(ValueError, match="scenario"):
        setup_simhost(d, scenario="crash")
    # a later setup changes them (and keeps the host's own files under DIR/root/etc)
    unit = d / "root/etc/systemd/system/x.service"
    unit.parent.mkdir(parents=True)
    unit.write_text("[Service]\nExecStart=/bin/true\n")
    host = setup_simhost(d, gpus=1, scenario="slow-download")
    assert (host.scenario, host.pace) == ("slow-download", 1.0) and unit.is_file()
    # the tests' scenario engine (the hook conftest sets) knows more than the product's small server
    assert set(host.scenarios) == {"ok", "ok-with-mtp", "hang-at-dist-init", "spec-config-crash", "kv-cache-oom",
                                   "slow-download", "hang-after-ready"}
    assert set(SCENARIOS) == {"ok", "slow-download", "hang-at-dist-init", "kv-cache-oom"} < set(host.scenarios)


def test_cli_sim_setup_scenario_and_pace(tmp_path):
    res = run([Path(sys.executable).parent / "gpuops", "sim", "setup", tmp_path / "sim", "--scenario",
               "spec-config-crash", "--pace", "0.5", "--gpus", "2"], timeout=60)
    assert res.returncode == 0, res.stderr
    doc = tomllib.loads(res.stdout)["hosts"]["sim"]
    assert doc["launcher"] == "process" and doc["journal_dir"] == str(tmp_path / "sim" / "journal")
    sim = json.loads((tmp_path / "sim" / "state" / "sim.json").read_text())
    assert (sim["scenario"], sim["pace"]) == ("spec-config-crash", 0.5)
    bad = run([Path(sys.executable).parent / "gpuops", "sim", "setup", tmp_path / "sim2", "--scenario", "x"])
    assert bad.returncode == 2 and "scenario must be one of" in bad.stderr


def test_dead_processes_are_dropped_and_their_memory_freed(host, sleeper):
    victim = subprocess.Popen(["sleep", "300"])
    host.set_gpu(0, memory_used=30 * GIB, processes=[{"pid": victim.pid, "used": 20 * GIB},
                                                      {"pid": sleeper.pid, "used": 10 * GIB}])
    # a reused pid: same number, another start time
    host.set_gpu(1, memory_used=5 * GIB, processes=[{"pid": sleeper.pid, "used": 5 * GIB, "start": 1}])
    data = report(host)
    assert data["gpus"][0]["memory_used_bytes"] == 30 * GIB
    assert [p["pid"] for p in data["gpus"][0]["processes"]] == [victim.pid, sleeper.pid]
    assert data["gpus"][1]["memory_used_bytes"] == 0 and data["gpus"][1]["processes"] == []
    victim.kill()
    victim.wait()
    data = report(host)
    assert data["gpus"][0]["memory_used_bytes"] == 10 * GIB
    assert [p["pid"] for p in data["gpus"][0]["processes"]] == [sleeper.pid]
    res = smi(host, "--query-gpu=memory.used", "--format=csv,noheader,nounits")
    assert res.stdout == "10240\n0\n"
    res = smi(host, "--query-compute-apps=pid,used_memory", "--format=csv,noheader,nounits")
    assert res.stdout == f"{sleeper.pid}, 10240\n"
    # a zombie counts as gone too
    zombie = subprocess.Popen(["true"])
    time.sleep(0.2)  # exited, not yet reaped
    host.set_gpu(1, memory_used=3 * GIB, processes=[{"pid": zombie.pid, "used": 3 * GIB}])
    assert report(host)["gpus"][1]["memory_used_bytes"] == 0
    zombie.wait()


def test_a_simulated_download_has_a_tokenizer_the_real_libraries_load(tmp_path, sglang_venv):
    """The simulator's `hf download` writes a real (tiny) byte-level tokenizer: transformers loads
    it, it round-trips text, and it has a vocabulary to draw random prompts from (bench_serving's
    random dataset failed on the empty one: "high <= 0")."""
    sim = setup_simhost(tmp_path / "sim", gpus=1)
    out = tmp_path / "model"
    res = run([str(sim.bin_dir / "hf"), "download", "Qwen/Qwen3-8B", "--local-dir", str(out)], timeout=60,
              env=dict(os.environ, HF_HUB_OFFLINE=""))
    assert res.returncode == 0, res.stderr
    probe = ("import sys; from transformers import AutoTokenizer; t = AutoTokenizer.from_pretrained(sys.argv[1]); "
             "ids = t.encode('the quick brown fox, 42!'); print(t.vocab_size, t.decode(ids) == 'the quick brown fox, 42!')")
    res = run([str(sglang_venv / "bin" / "python"), "-c", probe, str(out)], timeout=120)
    assert res.returncode == 0, res.stderr[-2000:]
    size, roundtrip = res.stdout.split()
    assert int(size) >= 256 and roundtrip == "True"
