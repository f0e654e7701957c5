"""A fake ``pynvml`` (nvidia-ml-py 13.x) for gpuops' simulated GPU host.

This file is a template: ``gpuops.sim.host.setup_simhost`` copies it to
``DIR/lib/pynvml.py`` and the host's ``python`` wrapper puts ``DIR/lib`` first on
PYTHONPATH, so ``import pynvml`` on the simulated host gets this module instead of the
real binding. Standard library only.

The GPUs are described by ``DIR/state/gpus.json`` (found from this file's own path, no
environment needed), re-read whenever the file changes, so a test or the server
simulator can move memory and processes while a reporter keeps sampling.

Where gpuops looks, it behaves like the real binding (checked against nvidia-ml-py 13
and a real H200 with driver 580.159.04):
- ``NVMLError(value)`` maps to the ``NVMLError_*`` subclass of that code; ``str()`` gives
  the real strings ("NVML Shared Library Not Found", "Not Supported", ...).
- ``nvmlInit`` raises per the state's ``init_error``; calls before ``nvmlInit`` or after
  the last ``nvmlShutdown`` raise ``NVMLError_Uninitialized``.
- strings come back as ``str`` (the real 13.x binding decodes them).
- ``nvmlDeviceGetMemoryInfo(h)`` (v1) counts the driver's reserved memory in ``used``;
  with ``version=nvmlMemory_v2`` ``used`` excludes it and ``reserved`` is separate.
- ``NVML_P2P_CAPS_INDEX_READ`` is the tuple ``(0,)`` (a stray comma in the real module),
  and passing it to ``nvmlDeviceGetP2PStatus`` raises ``ctypes.ArgumentError``
  ("argument 3: TypeError: Don't know how to convert parameter 3"), as the real one does.
- a GPU field set to ``null`` in the state makes the call that reads it raise
  ``NVMLError_NotSupported`` (gpuops shows N/A). nvml* device/system functions this
  fake does not model also raise ``NVMLError_NotSupported``.
- a process whose pid no longer exists (or is a zombie, or, when its entry has a ``start``
  time, is another process that reused the pid) is left out and its ``used`` memory no longer
  counts in the GPU's used memory: a SIGKILLed server frees its memory as the driver would.
"""

import ctypes
import json
import os
import re
import string
import sys
import threading
import time

GPUOPS_SIMULATED = True

_STATE_FILE = os.path.join(
    os.path.dirname(os.path.dirname(os.path.abspath(__file__))), "state", "gpus.json"
)

# ---------------------------------------------------------------- constants (real values)

NVML_SUCCESS = 0
NVML_ERROR_UNINITIALIZED = 1
NVML_ERROR_INVALID_ARGUMENT = 2
NVML_ERROR_NOT_SUPPORTED = 3
NVML_ERROR_NO_PERMISSION = 4
NVML_ERROR_ALREADY_INITIALIZED = 5
NVML_ERROR_NOT_FOUND = 6
NVML_ERROR_INSUFFICIENT_SIZE = 7
NVML_ERROR_INSUFFICIENT_POWER = 8
NVML_ERROR_DRIVER_NOT_LOADED = 9
NVML_ERROR_TIMEOUT = 10
NVML_ERROR_IRQ_ISSUE = 11
NVML_ERROR_LIBRARY_NOT_FOUND = 12
NVML_ERROR_FUNCTION_NOT_FOUND = 13
NVML_ERROR_CORRUPTED_INFOROM = 14
NVML_ERROR_GPU_IS_LOST = 15
NVML_ERROR_RESET_REQUIRED = 16
NVML_ERROR_OPERATING_SYSTEM = 17
NVML_ERROR_LIB_RM_VERSION_MISMATCH = 18
NVML_ERROR_IN_USE = 19
NVML_ERROR_MEMORY = 20
NVML_ERROR_NO_DATA = 21
NVML_ERROR_VGPU_ECC_NOT_SUPPORTED = 22
NVML_ERROR_INSUFFICIENT_RESOURCES = 23
NVML_ERROR_FREQ_NOT_SUPPORTED = 24
NVML_ERROR_ARGUMENT_VERSION_MISMATCH = 25
NVML_ERROR_DEPRECATED = 26
NVML_ERROR_NOT_READY = 27
NVML_ERROR_GPU_NOT_FOUND = 28
NVML_ERROR_INVALID_STATE = 29
NVML_ERROR_RESET_TYPE_NOT_SUPPORTED = 30
NVML_ERROR_UNKNOWN = 999

NVML_TEMPERATURE_GPU = 0

NVML_CLOCK_GRAPHICS = 0
NVML_CLOCK_SM = 1
NVML_CLOCK_MEM = 2
NVML_CLOCK_VIDEO = 3

NVML_P2P_CAPS_INDEX_READ = (0,)  # sic: a tuple in nvidia-ml-py 13.x (trailing comma)
NVML_P2P_CAPS_INDEX_WRITE = 1
NVML_P2P_CAPS_INDEX_NVLINK = 2
NVML_P2P_CAPS_INDEX_ATOMICS = 3
NVML_P2P_CAPS_INDEX_PROP = 4
NVML_P2P_CAPS_INDEX_PCI = 4
NVML_P2P_CAPS_INDEX_UNKNOWN = 5

NVML_P2P_STATUS_OK = 0
NVML_P2P_STATUS_CHIPSET_NOT_SUPPORED = 1
NVML_P2P_STATUS_CHIPSET_NOT_SUPPORTED = NVML_P2P_STATUS_CHIPSET_NOT_SUPPORED
NVML_P2P_STATUS_GPU_NOT_SUPPORTED = 2
NVML_P2P_STATUS_IOH_TOPOLOGY_NOT_SUPPORTED = 3
NVML_P2P_STATUS_DISABLED_BY_REGKEY = 4
NVML_P2P_STATUS_NOT_SUPPORTED = 5
NVML_P2P_STATUS_UNKNOWN = 6

NVML_FEATURE_DISABLED = 0
NVML_FEATURE_ENABLED = 1

nvmlMemory_v2 = 0x02000028

# ---------------------------------------------------------------- errors (as the real module)


class NVMLLibraryMismatchError(Exception):
    pass


class NVMLError(Exception):
    _valClassMapping = dict()
    _errcode_to_string = {
        NVML_ERROR_UNINITIALIZED: "Uninitialized",
        NVML_ERROR_INVALID_ARGUMENT: "Invalid Argument",
        NVML_ERROR_NOT_SUPPORTED: "Not Supported",
        NVML_ERROR_NO_PERMISSION: "Insufficient Permissions",
        NVML_ERROR_ALREADY_INITIALIZED: "Already Initialized",
        NVML_ERROR_NOT_FOUND: "Not Found",
        NVML_ERROR_INSUFFICIENT_SIZE: "Insufficient Size",
        NVML_ERROR_INSUFFICIENT_POWER: "Insufficient External Power",
        NVML_ERROR_DRIVER_NOT_LOADED: "Driver Not Loaded",
        NVML_ERROR_TIMEOUT: "Timeout",
        NVML_ERROR_IRQ_ISSUE: "Interrupt Request Issue",
        NVML_ERROR_LIBRARY_NOT_FOUND: "NVML Shared Library Not Found",
        NVML_ERROR_FUNCTION_NOT_FOUND: "Function Not Found",
        NVML_ERROR_CORRUPTED_INFOROM: "Corrupted infoROM",
        NVML_ERROR_GPU_IS_LOST: "GPU is lost",
        NVML_ERROR_RESET_REQUIRED: "GPU requires restart",
        NVML_ERROR_OPERATING_SYSTEM: "The operating system has blocked the request.",
        NVML_ERROR_LIB_RM_VERSION_MISMATCH: "RM has detected an NVML/RM version mismatch.",
        NVML_ERROR_MEMORY: "Insufficient Memory",
        NVML_ERROR_UNKNOWN: "Unknown Error",
    }

    def __new__(typ, value):
        if typ == NVMLError:
            typ = NVMLError._valClassMapping.get(value, typ)
        obj = Exception.__new__(typ)
        obj.value = value
        return obj

    def __str__(self):
        # The real binding asks libnvidia-ml (nvmlErrorString) for codes it has no text for.
        return NVMLError._errcode_to_string.get(self.value, "NVML Error with code %d" % self.value)

    def __eq__(self, other):
        return self.value == other.value


def nvmlExceptionClass(nvmlErrorCode):
    if nvmlErrorCode not in NVMLError._valClassMapping:
        raise ValueError("nvmlErrorCode %s is not valid" % nvmlErrorCode)
    return NVMLError._valClassMapping[nvmlErrorCode]


def _extractNVMLErrorsAsClasses():
    this_module = sys.modules[__name__]
    for err_name in [x for x in dir(this_module) if x.startswith("NVML_ERROR_")]:
        class_name = "NVMLError_" + string.capwords(err_name.replace("NVML_ERROR_", ""), "_").replace("_", "")
        err_val = getattr(this_module, err_name)

        def gen_new(val):
            def new(typ, *args):
                return NVMLError.__new__(typ, val)

            return new

        cls = type(class_name, (NVMLError,), {"__new__": gen_new(err_val)})
        cls.__module__ = __name__
        setattr(this_module, class_name, cls)
        NVMLError._valClassMapping[err_val] = cls


_extractNVMLErrorsAsClasses()

# ---------------------------------------------------------------- result objects


class _Struct(object):
    """Prints like the real binding's ctypes structures."""

    _fields_ = ()
    _fmt_ = {}

    def __init__(self, **values):
        for key in self._fields_:
            setattr(self, key, values.get(key))

    def __str__(self):
        parts = []
        for key in self._fields_:
            fmt = self._fmt_.get(key, self._fmt_.get("<default>", "%s"))
            parts.append(("%s: " + fmt) % (key, getattr(self, key)))
        return self.__class__.__name__ + "(" + ", ".join(parts) + ")"

    __repr__ = object.__repr__


class c_nvmlMemory_t(_Struct):
    _fields_ = ("total", "free", "used")
    _fmt_ = {"<default>": "%d B"}


class c_nvmlMemory_v2_t(_Struct):
    _fields_ = ("version", "total", "reserved", "free", "used")
    _fmt_ = {"<default>": "%d B"}


class c_nvmlUtilization_t(_Struct):
    _fields_ = ("gpu", "memory")
    _fmt_ = {"<default>": "%d %%"}


class nvmlPciInfo_t(_Struct):
    _fields_ = ("busIdLegacy", "domain", "bus", "device", "pciDeviceId", "pciSubSystemId", "busId")
    _fmt_ = {
        "domain": "0x%08X",
        "bus": "0x%02X",
        "device": "0x%02X",
        "pciDeviceId": "0x%08X",
        "pciSubSystemId": "0x%08X",
    }


class nvmlFriendlyObject(object):
    def __init__(self, dictionary):
        for x in dictionary:
            setattr(self, x, dictionary[x])

    def __str__(self):
        return self.__dict__.__str__()


class LP_struct_c_nvmlDevice_t(object):
    """A device handle (the real one is a ctypes pointer); only this module reads it."""

    __slots__ = ("_index",)

    def __init__(self, index):
        self._index = index


# ---------------------------------------------------------------- state

_lock = threading.Lock()
_refcount = 0
_cache = {"key": None, "raw": None, "state": None, "checked": None}
_handles = {}


def _pid_alive(pid, start=None):
    """Whether PID is a live process (not a zombie), and the same one when START (its start
    time in clock ticks, field 22 of /proc/PID/stat) is given."""
    try:
        with open("/proc/%d/stat" % int(pid), "rb") as f:
            fields = f.read().rsplit(b")", 1)[1].split()
    except (OSError, IndexError, ValueError):
        if os.path.isdir("/proc/self"):
            return False
        try:  # no procfs: all that can be asked is whether the pid exists
            os.kill(int(pid), 0)
        except ProcessLookupError:
            return False
        except (OSError, ValueError):
            pass
        return True
    if fields[0] in (b"Z", b"X"):
        return False
    return start is None or fields[19].decode() == str(start)


def _drop_dead(state):
    """The state without the processes that no longer exist, their memory no longer counted
    as used (a server killed with SIGKILL leaves its entries behind; the driver frees its memory)."""
    gpus = state.get("gpus") or []
    if not any(gpu.get("processes") for gpu in gpus):
        return state
    out = dict(state)
    out["gpus"] = []
    for gpu in gpus:
        procs = gpu.get("processes") or []
        live = [p for p in procs if _pid_alive(p.get("pid", -1), p.get("start"))]
        if len(live) != len(procs):
            gpu = dict(gpu, processes=live)
            dead = sum(int(p.get("used") or 0) for p in procs if p not in live)
            if gpu.get("memory_used") is not None:
                gpu["memory_used"] = max(0, int(gpu["memory_used"]) - dead)
        out["gpus"].append(gpu)
    return out


def _load():
    """The state, re-read only when the file changed (mtime, inode or size); processes that
    have exited are dropped (checked at most every 0.1 s)."""
    try:
        st = os.stat(_STATE_FILE)
        key = (st.st_mtime_ns, st.st_ctime_ns, st.st_ino, st.st_size)
        if key != _cache["key"]:
            with open(_STATE_FILE, "r") as f:
                state = json.load(f)
            _cache["key"], _cache["raw"], _cache["checked"] = key, state, None
    except (OSError, ValueError):
        if _cache.get("raw") is None:
            raise NVMLError(NVML_ERROR_UNKNOWN)
    now = time.monotonic()
    if _cache.get("checked") is None or now - _cache["checked"] > 0.1:
        _cache["state"], _cache["checked"] = _drop_dead(_cache["raw"]), now
    return _cache["state"]


def _require_init():
    if _refcount <= 0:
        raise NVMLError(NVML_ERROR_UNINITIALIZED)
    return _load()


def _gpu(handle):
    state = _require_init()
    if not isinstance(handle, LP_struct_c_nvmlDevice_t):
        raise NVMLError(NVML_ERROR_INVALID_ARGUMENT)
    gpus = state.get("gpus") or []
    if handle._index >= len(gpus):
        raise NVMLError(NVML_ERROR_GPU_IS_LOST)
    return gpus[handle._index]


def _field(gpu, key):
    value = gpu.get(key)
    if value is None:
        raise NVMLError(NVML_ERROR_NOT_SUPPORTED)
    return value


def _system(key):
    value = _require_init().get(key)
    if value is None:
        raise NVMLError(NVML_ERROR_NOT_SUPPORTED)
    return value


_INIT_ERRORS = {
    "library_not_found": NVML_ERROR_LIBRARY_NOT_FOUND,
    "lib_rm_version_mismatch": NVML_ERROR_LIB_RM_VERSION_MISMATCH,
    "driver_not_loaded": NVML_ERROR_DRIVER_NOT_LOADED,
    "no_permission": NVML_ERROR_NO_PERMISSION,
    "operating_system": NVML_ERROR_OPERATING_SYSTEM,
}

# ---------------------------------------------------------------- init


def nvmlInitWithFlags(flags):
    global _refcount
    try:
        state = _load()
    except NVMLError:
        raise NVMLError(NVML_ERROR_LIBRARY_NOT_FOUND)
    err = state.get("init_error")
    if err:
        raise NVMLError(_INIT_ERRORS.get(err, NVML_ERROR_UNKNOWN))
    with _lock:
        _refcount += 1
    return None


def nvmlInit():
    nvmlInitWithFlags(0)
    return None


def nvmlShutdown():
    global _refcount
    with _lock:
        if _refcount <= 0:
            raise NVMLError(NVML_ERROR_UNINITIALIZED)
        _refcount -= 1
    return None


def nvmlErrorString(result):
    return str(NVMLError(result))


# ---------------------------------------------------------------- system


def nvmlSystemGetDriverVersion():
    return str(_system("driver_version"))


def nvmlSystemGetNVMLVersion():
    return str(_system("nvml_version"))


def nvmlSystemGetCudaDriverVersion():
    return int(_system("cuda_driver_version"))


def nvmlSystemGetCudaDriverVersion_v2():
    return int(_system("cuda_driver_version"))


def _process_name(pid, state=None):
    for gpu in (state or {}).get("gpus") or []:
        for proc in gpu.get("processes") or []:
            if proc.get("pid") == pid and proc.get("name"):
                return proc["name"]
    try:
        with open("/proc/%d/cmdline" % pid, "rb") as f:
            argv0 = f.read().split(b"\0")[0].decode("utf-8", "replace")
    except OSError:
        argv0 = ""
    if not argv0:
        raise NVMLError(NVML_ERROR_NOT_FOUND)
    return argv0


def nvmlSystemGetProcessName(pid):
    return _process_name(int(pid), _require_init())


# ---------------------------------------------------------------- devices


def nvmlDeviceGetCount():
    return len(_require_init().get("gpus") or [])


def nvmlDeviceGetHandleByIndex(index):
    state = _require_init()
    try:
        index = int(index)
    except (TypeError, ValueError):
        raise ctypes.ArgumentError("argument 1: TypeError: wrong type")
    if index < 0 or index >= len(state.get("gpus") or []):
        raise NVMLError(NVML_ERROR_INVALID_ARGUMENT)
    handle = _handles.get(index)
    if handle is None:
        handle = _handles[index] = LP_struct_c_nvmlDevice_t(index)
    return handle


def nvmlDeviceGetHandleByUUID(uuid):
    if isinstance(uuid, bytes):
        uuid = uuid.decode()
    for i, gpu in enumerate(_require_init().get("gpus") or []):
        if gpu.get("uuid") == uuid:
            return nvmlDeviceGetHandleByIndex(i)
    raise NVMLError(NVML_ERROR_NOT_FOUND)


def nvmlDeviceGetHandleByPciBusId(pciBusId):
    if isinstance(pciBusId, bytes):
        pciBusId = pciBusId.decode()
    want = pciBusId.upper()[-12:]
    for i, gpu in enumerate(_require_init().get("gpus") or []):
        if (gpu.get("pci_bus_id") or "").upper()[-12:] == want:
            return nvmlDeviceGetHandleByIndex(i)
    raise NVMLError(NVML_ERROR_NOT_FOUND)


def nvmlDeviceGetIndex(handle):
    _gpu(handle)
    return handle._index


def nvmlDeviceGetMinorNumber(handle):
    _gpu(handle)
    return handle._index


def nvmlDeviceGetName(handle):
    return str(_field(_gpu(handle), "name"))


def nvmlDeviceGetUUID(handle):
    return str(_field(_gpu(handle), "uuid"))


_BUS_ID = re.compile(r"^([0-9A-Fa-f]+):([0-9A-Fa-f]+):([0-9A-Fa-f]+)\.([0-9A-Fa-f]+)$")


def nvmlDeviceGetPciInfo_v3(handle):
    bus_id = str(_field(_gpu(handle), "pci_bus_id"))
    m = _BUS_ID.match(bus_id)
    domain, bus, device = (int(m.group(1), 16), int(m.group(2), 16), int(m.group(3), 16)) if m else (0, 0, 0)
    return nvmlPciInfo_t(
        busIdLegacy="%04X:%02X:%02X.%s" % (domain, bus, device, m.group(4) if m else "0"),
        domain=domain,
        bus=bus,
        device=device,
        pciDeviceId=0x233510DE,  # what a real H200 reported
        pciSubSystemId=0x18BF10DE,
        busId=bus_id,
    )


def nvmlDeviceGetPciInfo(handle):
    return nvmlDeviceGetPciInfo_v3(handle)


def nvmlDeviceGetMemoryInfo(handle, version=None):
    gpu = _gpu(handle)
    total = int(_field(gpu, "memory_total"))
    used = int(_field(gpu, "memory_used"))
    reserved = gpu.get("memory_reserved")
    if not version:
        # v1: "used" also counts the driver's reserved memory (a real idle H200: 615 MiB).
        used_v1 = used + int(reserved or 0)
        return c_nvmlMemory_t(total=total, free=max(0, total - used_v1), used=used_v1)
    if version != nvmlMemory_v2:
        raise NVMLError(NVML_ERROR_ARGUMENT_VERSION_MISMATCH)
    if reserved is None:
        raise NVMLError(NVML_ERROR_NOT_SUPPORTED)
    reserved = int(reserved)
    return c_nvmlMemory_v2_t(
        version=version, total=total, reserved=reserved, free=max(0, total - used - reserved), used=used
    )


def nvmlDeviceGetUtilizationRates(handle):
    gpu = _gpu(handle)
    util = int(_field(gpu, "util"))
    mem_util = gpu.get("mem_util", 0)
    return c_nvmlUtilization_t(gpu=util, memory=int(mem_util or 0))


def nvmlDeviceGetPowerUsage(handle):
    return int(_field(_gpu(handle), "power_mw"))


def nvmlDeviceGetPowerManagementLimit(handle):
    return int(_field(_gpu(handle), "power_limit_mw"))


def nvmlDeviceGetEnforcedPowerLimit(handle):
    return int(_field(_gpu(handle), "power_limit_mw"))


def nvmlDeviceGetTemperature(handle, sensor):
    gpu = _gpu(handle)
    if sensor != NVML_TEMPERATURE_GPU:
        raise NVMLError(NVML_ERROR_INVALID_ARGUMENT)
    return int(_field(gpu, "temp_c"))


def nvmlDeviceGetClockInfo(handle, type):
    gpu = _gpu(handle)
    if type in (NVML_CLOCK_SM, NVML_CLOCK_GRAPHICS):
        return int(_field(gpu, "sm_clock"))
    if type == NVML_CLOCK_MEM:
        return int(_field(gpu, "mem_clock"))
    if type == NVML_CLOCK_VIDEO:
        raise NVMLError(NVML_ERROR_NOT_SUPPORTED)
    raise NVMLError(NVML_ERROR_INVALID_ARGUMENT)


def nvmlDeviceGetMaxClockInfo(handle, type):
    gpu = _gpu(handle)
    if type in (NVML_CLOCK_SM, NVML_CLOCK_GRAPHICS):
        return int(gpu.get("max_sm_clock") or 1980)
    if type == NVML_CLOCK_MEM:
        return int(gpu.get("mem_clock") or 3201)
    raise NVMLError(NVML_ERROR_NOT_SUPPORTED)


def nvmlDeviceGetFanSpeed(handle):
    _gpu(handle)
    raise NVMLError(NVML_ERROR_NOT_SUPPORTED)  # data-center GPUs have no fan (real H200: Not Supported)


def nvmlDeviceGetPersistenceMode(handle):
    _gpu(handle)
    return NVML_FEATURE_ENABLED


def nvmlDeviceGetPerformanceState(handle):
    _gpu(handle)
    return 0


def nvmlDeviceGetCudaComputeCapability(handle):
    gpu = _gpu(handle)
    cc = gpu.get("compute_capability") or [9, 0]
    return (int(cc[0]), int(cc[1]))


def _processes(handle):
    gpu = _gpu(handle)
    procs = _field(gpu, "processes")
    out = []
    for proc in procs:
        used = proc.get("used")
        out.append(
            nvmlFriendlyObject(
                {
                    "pid": int(proc["pid"]),
                    "usedGpuMemory": None if used is None else int(used),
                    "gpuInstanceId": 0xFFFFFFFF,  # no MIG: what a real H200 reported
                    "computeInstanceId": 0xFFFFFFFF,
                }
            )
        )
    return out


def nvmlDeviceGetComputeRunningProcesses_v3(handle):
    return _processes(handle)


def nvmlDeviceGetComputeRunningProcesses_v2(handle):
    return _processes(handle)


def nvmlDeviceGetComputeRunningProcesses(handle):
    return _processes(handle)


def nvmlDeviceGetGraphicsRunningProcesses_v3(handle):
    _gpu(handle)
    return []


def nvmlDeviceGetGraphicsRunningProcesses_v2(handle):
    _gpu(handle)
    return []


def nvmlDeviceGetGraphicsRunningProcesses(handle):
    _gpu(handle)
    return []


def nvmlDeviceGetP2PStatus(device1, device2, p2pIndex):
    if not isinstance(p2pIndex, int):
        # The real binding hands the index straight to ctypes, which can't convert the
        # tuple NVML_P2P_CAPS_INDEX_READ.
        raise ctypes.ArgumentError("argument 3: TypeError: Don't know how to convert parameter 3")
    _gpu(device1)
    _gpu(device2)
    if device1._index == device2._index:
        return NVML_P2P_STATUS_NOT_SUPPORTED  # what a real H200 answered for itself
    status = _require_init().get("p2p_status")
    return NVML_P2P_STATUS_OK if status is None else int(status)


# ---------------------------------------------------------------- everything else

_UNMODELLED = re.compile(r"^nvml(Device|System|Unit|Vgpu|GpuInstance|ComputeInstance|Event)[A-Z]\w*$")


def __getattr__(name):
    """nvml* query functions this fake does not model answer Not Supported (N/A)."""
    if _UNMODELLED.match(name):

        def unmodelled(*args, **kwargs):
            _require_init()
            raise NVMLError(NVML_ERROR_NOT_SUPPORTED)

        unmodelled.__name__ = name
        return unmodelled
    raise AttributeError("module %r has no attribute %r" % (__name__, name))
