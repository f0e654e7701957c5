"""gpuops' host reporter: one JSON line per interval describing a host and its GPUs.

This file is sent as source to every host and run there with the host's python
(``python -c SOURCE --interval 1``), so it must stay standalone: standard library
only, plus ``pynvml`` (nvidia-ml-py) when the host has it (a serving engine's host often does:
engines depend on it). gpuops also imports it to sample the local host in-process.

Output line (schema ``v`` 1)::

    {"v": 1, "t": 1700000000.0,
     "host": {"hostname", "cpu_percent", "mem_total_bytes", "mem_used_bytes",
              "disks": [{"mount", "total_bytes", "free_bytes"}]},
     "nvml": {"ok", "code", "error", "hint", "driver_version", "nvml_version",
              "cuda_driver_version"},
     "gpus": [{"index", "uuid", "name", "memory_total_bytes", "memory_used_bytes",
               "memory_reserved_bytes", "util_percent", "power_w", "temp_c",
               "sm_clock_mhz", "processes": [{"pid", "user", "command", "used_bytes"}]}]}

Anything NVML cannot answer is ``null``. Memory "used" is NVML's v2 ``used``, which
is what nvidia-smi prints: v1's ``used`` also counts the driver's reserved memory.
"""

import json
import os
import re
import socket
import sys
import time

from .common import LIB_DIRS, _MODULE_VERSION, _read  # gpuops: inlined when sent to a host

# Filesystems that hold no user data: never shown as disks.
_PSEUDO_FS = frozenset(
    """autofs binfmt_misc bpf cgroup cgroup2 configfs debugfs devpts devtmpfs efivarfs
    fusectl hugetlbfs mqueue nsfs proc pstore ramfs rpc_pipefs securityfs selinuxfs
    squashfs sysfs tmpfs tracefs fuse.lxcfs fuse.gvfsd-fuse fuse.portal nfsd overlay""".split()
)
_SO_VERSION = re.compile(r"\.so\.(\d+\.\d+(?:\.\d+)?)$")


def host_root():
    """The filesystem root the host files are read under ("/" on a real host)."""
    return os.environ.get("GPUOPS_HOST_ROOT", "/")


def _under_root(path):
    return os.path.join(host_root(), path.lstrip("/"))


# ---------------------------------------------------------------- host stats


class HostStats:
    """CPU (needs the previous /proc/stat reading), memory and disks."""

    def __init__(self, extra_paths=()):
        self._prev_cpu = None
        self._extra_paths = tuple(extra_paths)

    def _cpu_times(self):
        text = _read("/proc/stat") or ""
        for line in text.splitlines():
            if line.startswith("cpu "):
                values = [int(v) for v in line.split()[1:]]
                idle = values[3] + (values[4] if len(values) > 4 else 0)
                return sum(values[:8]), idle
        return None

    def cpu_percent(self):
        now = self._cpu_times()
        prev, self._prev_cpu = self._prev_cpu, now
        if now is None or prev is None or now[0] <= prev[0]:
            return None
        total = now[0] - prev[0]
        busy = total - (now[1] - prev[1])
        return round(100.0 * busy / total, 1)

    @staticmethod
    def memory():
        info = {}
        for line in (_read("/proc/meminfo") or "").splitlines():
            key, _, rest = line.partition(":")
            parts = rest.split()
            if parts:
                info[key] = int(parts[0]) * 1024
        total = info.get("MemTotal")
        avail = info.get("MemAvailable")
        if total is None:
            return None, None
        if avail is None:
            avail = info.get("MemFree", 0) + info.get("Buffers", 0) + info.get("Cached", 0)
        return total, total - avail

    def disks(self):
        seen_dev = set()
        out = []
        mounts = []
        for line in (_read("/proc/self/mounts") or "").splitlines():
            parts = line.split()
            if len(parts) < 3:
                continue
            mount = parts[1].replace("\\040", " ")
            fstype = parts[2]
            if fstype in _PSEUDO_FS and mount != "/":
                continue
            mounts.append(mount)
        for path in mounts + list(self._extra_paths):
            try:
                st = os.statvfs(path)
                dev = os.stat(path).st_dev
            except OSError:
                continue
            if dev in seen_dev or st.f_blocks == 0:
                continue
            seen_dev.add(dev)
            out.append(
                {
                    "mount": path,
                    "total_bytes": st.f_blocks * st.f_frsize,
                    "free_bytes": st.f_bavail * st.f_frsize,
                }
            )
        return out

    def sample(self):
        total, used = self.memory()
        return {
            "hostname": socket.gethostname(),
            "cpu_percent": self.cpu_percent(),
            "mem_total_bytes": total,
            "mem_used_bytes": used,
            "disks": self.disks(),
        }


# ---------------------------------------------------------------- processes


def _proc_owner(pid):
    text = _read("/proc/%d/status" % pid)
    if not text:
        return None
    for line in text.splitlines():
        if line.startswith("Uid:"):
            uid = int(line.split()[1])
            try:
                import pwd

                return pwd.getpwuid(uid).pw_name
            except (KeyError, ImportError):
                return str(uid)
    return None


def _proc_command(pid):
    raw = _read("/proc/%d/cmdline" % pid)
    if raw:
        return " ".join(part for part in raw.split("\0") if part)[:500]
    comm = _read("/proc/%d/comm" % pid)
    return comm.strip() if comm else None


# ---------------------------------------------------------------- NVML


def kernel_module_version():
    """The loaded NVIDIA kernel module's version, from /proc/driver/nvidia/version."""
    text = _read(_under_root("/proc/driver/nvidia/version"))
    if not text:
        return None
    m = _MODULE_VERSION.search(text)
    return m.group(1) if m else None


def loaded_library_version():
    """Version suffix of the libnvidia-ml this process loaded, else the one on disk."""
    maps = _read("/proc/self/maps") or ""
    for line in maps.splitlines():
        path = line.split()[-1] if line.split() else ""
        if "libnvidia-ml.so" in path:
            m = _SO_VERSION.search(os.path.realpath(path))
            if m:
                return m.group(1), path
    for d in LIB_DIRS:
        d = _under_root(d)
        try:
            names = sorted(os.listdir(d))
        except OSError:
            continue
        for name in names:
            if name.startswith("libnvidia-ml.so"):
                m = _SO_VERSION.search(os.path.realpath(os.path.join(d, name)))
                if m:
                    return m.group(1), os.path.join(d, name)
    return None, None


def _nvml_failure(pynvml, exc):
    """Turn an nvmlInit() failure into (code, error, hint): a hint, never a traceback."""
    value = getattr(exc, "value", None)
    text = str(exc)
    if value == getattr(pynvml, "NVML_ERROR_LIBRARY_NOT_FOUND", 12):
        return (
            "no-driver",
            "NVML library not found",
            "no NVIDIA driver here: libnvidia-ml.so was not found (no GPUs on this host, "
            "or the driver's libraries are not visible in this container)",
        )
    if value == getattr(pynvml, "NVML_ERROR_LIB_RM_VERSION_MISMATCH", 18):
        module = kernel_module_version()
        lib, path = loaded_library_version()
        where = " (%s)" % path if path else ""
        return (
            "driver-library-mismatch",
            "Driver/library version mismatch",
            "kernel module %s (/proc/driver/nvidia/version) but user-space library %s%s: "
            "reboot or reload the nvidia module after a driver upgrade; in a container, "
            "recreate it so it mounts the host's libraries"
            % (module or "unknown", lib or "unknown", where),
        )
    if value == getattr(pynvml, "NVML_ERROR_DRIVER_NOT_LOADED", 9):
        return (
            "driver-not-loaded",
            "NVIDIA driver not loaded",
            "the NVIDIA kernel module is not loaded: check `lsmod | grep nvidia` and dmesg",
        )
    if value == getattr(pynvml, "NVML_ERROR_NO_PERMISSION", 4):
        return (
            "nvml-no-permission",
            "no permission to use NVML",
            "this user cannot open /dev/nvidia*: check the device permissions",
        )
    return ("nvml-error", "NVML init failed: %s" % text, "run nvidia-smi on the host to see why")


def _call(fn, *args, **kwargs):
    """One NVML reading; anything NVML can't answer (or an API quirk) is None."""
    try:
        return fn(*args, **kwargs)
    except Exception:
        return None


def _text(value):
    if isinstance(value, bytes):
        return value.decode("utf-8", "replace")
    return value


class Nvml:
    """NVML through pynvml, initialised once; every reading wrapped."""

    def __init__(self):
        self.status = {
            "ok": False,
            "code": None,
            "error": None,
            "hint": None,
            "driver_version": None,
            "nvml_version": None,
            "cuda_driver_version": None,
        }
        self._pynvml = None
        self._handles = []
        self._init()

    def _init(self):
        try:
            import pynvml
        except ImportError:
            self.status.update(
                code="no-pynvml",
                error="pynvml (nvidia-ml-py) is not installed for %s" % sys.executable,
                hint="install nvidia-ml-py in that python, or gpuops reads nvidia-smi instead",
            )
            return
        try:
            pynvml.nvmlInit()
        except Exception as exc:  # NVMLError and its subclasses
            code, error, hint = _nvml_failure(pynvml, exc)
            self.status.update(code=code, error=error, hint=hint)
            return
        self._pynvml = pynvml
        count = _call(pynvml.nvmlDeviceGetCount) or 0
        self._handles = [_call(pynvml.nvmlDeviceGetHandleByIndex, i) for i in range(count)]
        self.status.update(
            ok=True,
            driver_version=_text(_call(pynvml.nvmlSystemGetDriverVersion)),
            nvml_version=_text(_call(pynvml.nvmlSystemGetNVMLVersion)),
            cuda_driver_version=_call(
                getattr(pynvml, "nvmlSystemGetCudaDriverVersion_v2", None)
                or pynvml.nvmlSystemGetCudaDriverVersion
            ),
        )

    def _memory(self, h):
        p = self._pynvml
        v2 = getattr(p, "nvmlMemory_v2", None)
        if v2 is not None:
            info = _call(p.nvmlDeviceGetMemoryInfo, h, version=v2)
            if info is not None:
                return info.total, info.used, getattr(info, "reserved", None)
        info = _call(p.nvmlDeviceGetMemoryInfo, h)
        if info is None:
            return None, None, None
        # v1 only (old driver or binding): its "used" includes reserved memory.
        return info.total, info.used, None

    def _processes(self, h):
        p = self._pynvml
        procs = {}
        for fn_name in ("nvmlDeviceGetComputeRunningProcesses", "nvmlDeviceGetGraphicsRunningProcesses"):
            fn = getattr(p, fn_name, None)
            for proc in (_call(fn, h) if fn else None) or []:
                used = getattr(proc, "usedGpuMemory", None)
                if not isinstance(used, int) or used < 0 or used >= 2**63:
                    used = None
                pid = int(proc.pid)
                if pid not in procs:
                    procs[pid] = {
                        "pid": pid,
                        "user": _proc_owner(pid),
                        "command": _proc_command(pid),
                        "used_bytes": used,
                    }
        return sorted(procs.values(), key=lambda r: -(r["used_bytes"] or 0))

    def sample(self):
        if self._pynvml is None:
            return []
        p = self._pynvml
        rows = []
        for index, h in enumerate(self._handles):
            if h is None:
                rows.append({"index": index, "error": "handle unavailable"})
                continue
            total, used, reserved = self._memory(h)
            util = _call(p.nvmlDeviceGetUtilizationRates, h)
            power = _call(p.nvmlDeviceGetPowerUsage, h)
            rows.append(
                {
                    "index": index,
                    "uuid": _text(_call(p.nvmlDeviceGetUUID, h)),
                    "name": _text(_call(p.nvmlDeviceGetName, h)),
                    "memory_total_bytes": total,
                    "memory_used_bytes": used,
                    "memory_reserved_bytes": reserved,
                    "util_percent": getattr(util, "gpu", None),
                    "power_w": round(power / 1000.0, 1) if isinstance(power, (int, float)) else None,
                    "temp_c": _call(p.nvmlDeviceGetTemperature, h, getattr(p, "NVML_TEMPERATURE_GPU", 0)),
                    "sm_clock_mhz": _call(p.nvmlDeviceGetClockInfo, h, getattr(p, "NVML_CLOCK_SM", 1)),
                    "processes": self._processes(h),
                }
            )
        return rows


class Collector:
    """Everything one reporter line holds; keeps state between samples (CPU deltas)."""

    def __init__(self, extra_paths=()):
        self.host = HostStats(extra_paths)
        self.nvml = Nvml()

    def sample(self):
        return {
            "v": 1,
            "t": time.time(),
            "host": self.host.sample(),
            "nvml": dict(self.nvml.status),
            "gpus": self.nvml.sample(),
        }


def main(argv):
    interval = 1.0
    once = False
    paths = []
    args = list(argv)
    while args:
        arg = args.pop(0)
        if arg == "--interval":
            interval = max(0.05, float(args.pop(0)))
        elif arg == "--once":
            once = True
        elif arg == "--path":
            paths.append(args.pop(0))
        else:
            sys.stderr.write("reporter: unknown argument %r\n" % arg)
            return 2
    collector = Collector(paths)
    collector.host.cpu_percent()  # prime the CPU delta
    time.sleep(0.2 if once else min(interval, 0.2))
    while True:
        line = json.dumps(collector.sample(), separators=(",", ":"))
        try:
            sys.stdout.write(line + "\n")
            sys.stdout.flush()
        except BrokenPipeError:
            return 0
        if once:
            return 0
        # The next sample at the next multiple of the interval on the wall clock: the reporters of
        # a fleet (clocks kept by NTP) send at about the same moment, so the one process reading
        # them all wakes once per interval, not once per host. (Never two samples within a tenth
        # of the interval: a slow sample skips to the multiple after.)
        delay = interval - time.time() % interval
        if delay < interval / 10:
            delay += interval
        time.sleep(delay)


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
