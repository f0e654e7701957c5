"""gpuops' triage probe: what a host says about why a deployment's server is stuck, in one go.

Like ``reporter.py`` and ``storage_probe.py`` this file is sent as source to a host and run
there with the server's python (``python -c SOURCE --gpuops-triage-probe ...``), so it stays
standalone: standard library only, plus ``pynvml`` when that python has it. One round trip,
one JSON document on stdout; every section catches its own failures (an ``error`` string in
that section), so a broken host still answers. gpuops.core.diagnose.host_checks turns it into checks.

Arguments: ``--root DIR`` (default ``$GPUOPS_HOST_ROOT``, else ``/``), ``--pid N`` for each of
the deployment's server pids, ``--gpus 0,1`` (the plan's GPUs), ``--port N`` for each port to
look up (the server's, the dist-init one), ``--rank-title T`` (the start of each rank's process
title: the engine's ``rank_title``), ``--py-spy`` (dump the ranks' stacks).

The root prefixes the paths that describe the machine: /proc/driver/nvidia/version,
/proc/cmdline, /sys (IOMMU groups), the library folders and /etc/ld.so.conf, the kernel log
files and /dev/shm; tests point it at a prepared tree. What describes live processes is read
from the real /proc: the process tree, /proc/PID/maps, /proc/PID/net/tcp and the fd tables; and
when the server's root is not ours (it runs in a container) its library folders and /dev/shm are
read under /proc/PID/root. ``dmesg`` is only asked when the root is ``/``.

Document (``v`` 1)::

    {"v": 1, "root", "server_root": "/proc/PID/root" (the server runs in a container) | null, "took_s",
     "driver": {"path", "module_version", "line", "error"},
     "libraries": {"source": "maps"|"files"|null, "pids": [..], "searched": [..],
                   "files": [{"kind": "nvml"|"cuda", "path", "version", "compat", "pid"}]},
     "nvml": {"available", "ok", "error", "error_code", "driver_version", "nvml_version",
              "cuda_driver_version", "gpus": [{"index", "pci_bus_id"}],
              "p2p": [{"a", "b", "read", "write", "nvlink"}], "hints": [..]},
     "torch": {"found", "path", "version", "cuda", "error"},
     "kernel": {"cmdline", "iommu_groups", "gpu_iommu": [{"index", "pci_bus_id", "group", "type"}],
                "log_source": "dmesg"|"file:/var/log/kern.log"|null, "log_error", "log_lines": [..]},
     "shm": {"path", "total_bytes", "free_bytes", "error"},
     "ports": {"table": PATH, "listening": [port, ..],
               "listeners": [{"port", "address", "inode", "pid", "user", "command"}], "error"},
     "tree": [{"pid", "ppid", "user", "command"}],
     "topo": {"rc", "stdout", "error"},
     "py_spy": {"path", "stacks": [{"pid", "rank", "title", "ok", "native", "text", "error"}],
                "error"} | null}

P2P statuses are NVML's names ("OK", "CHIPSET_NOT_SUPPORTED", ...) or null (N/A, with a hint).
"""

import ast
import glob
import json
import os
import re
import shutil
import socket
import struct
import subprocess
import sys
import time

from .common import LIB_DIRS, _MODULE_VERSION, _read  # gpuops: inlined when sent to a host

MARKER = "--gpuops-triage-probe"

_LIB = re.compile(r"^lib(nvidia-ml|cuda)\.so\.(\d+\.\d+(?:\.\d+)?)$")
KERNEL_LOG_FILES = ("/var/log/kern.log", "/var/log/dmesg", "/var/log/messages")
KERNEL_LOG_TAIL = 8 * 1024 * 1024  # a kernel log file is read from its last 8 MiB
# IOMMU, confidential computing, and the NVIDIA driver's own lines (API mismatch, Xid)
KERNEL_LINE = re.compile(r"iommu|AMD-Vi|DMAR|\bSEV|\bSNP\b|Memory Encryption|\btdx\b|NVRM:", re.I)
KERNEL_LINES_KEPT = 40  # the first and the last this many matching lines
P2P_STATUS = {0: "OK", 1: "CHIPSET_NOT_SUPPORTED", 2: "GPU_NOT_SUPPORTED", 3: "IOH_TOPOLOGY_NOT_SUPPORTED",
              4: "DISABLED_BY_REGKEY", 5: "NOT_SUPPORTED", 6: "UNKNOWN"}
COMMAND_LIMIT = 300
STACK_LIMIT = 64 * 1024


class Probe:
    def __init__(self, root, pids, gpus, ports, rank_title=None):
        self.root = root
        self.rank_title = rank_title  # the start of each rank's process title (the engine's; None: it gives none)
        self.pids = [p for p in pids if os.path.isdir("/proc/%d" % p)]  # the ones still running
        self.gpus = gpus
        self.ports = ports
        self.procs = _processes()
        self.server_root = self._server_root()

    def _server_root(self):
        """/proc/PID/root of the server when its root is not ours (a container), else None."""
        if not self.pids:
            return None
        path = "/proc/%d/root" % self.pids[0]
        try:
            theirs, ours = os.stat(path), os.stat("/")
        except OSError:
            return None
        return None if (theirs.st_dev, theirs.st_ino) == (ours.st_dev, ours.st_ino) else path

    def path(self, path):
        """PATH on the host's machine files (under the root)."""
        return os.path.join(self.root, path.lstrip("/"))

    # ------------------------------------------------------------ driver and libraries

    def driver(self):
        path = "/proc/driver/nvidia/version"
        text = _read(self.path(path))
        if text is None:
            return {"path": path, "module_version": None, "line": None,
                    "error": "%s: missing (no NVIDIA kernel module loaded)" % path}
        m = _MODULE_VERSION.search(text)
        return {"path": path, "module_version": m.group(1) if m else None,
                "line": text.splitlines()[0].strip() if text.strip() else None, "error": None}

    def tree(self):
        """The deployment's processes: the server pids and all their descendants."""
        children = {}
        for pid, info in self.procs.items():
            children.setdefault(info["ppid"], []).append(pid)
        out, todo, seen = [], list(self.pids), set()
        while todo:
            pid = todo.pop(0)
            if pid in seen or pid not in self.procs:
                continue
            seen.add(pid)
            info = self.procs[pid]
            out.append({"pid": pid, "ppid": info["ppid"], "user": _owner(pid), "command": _command(pid)})
            todo.extend(sorted(children.get(pid, [])))
        return out

    def libraries(self, tree):
        """The libnvidia-ml / libcuda the server maps, else the files in the usual folders."""
        files, seen = [], set()
        for proc in tree:
            for line in (_read("/proc/%d/maps" % proc["pid"]) or "").splitlines():
                parts = line.split(None, 5)
                path = parts[5].strip() if len(parts) == 6 else ""
                name = os.path.basename(path)
                if not name.startswith(("libnvidia-ml.so", "libcuda.so")) or path in seen:
                    continue
                seen.add(path)
                m = _LIB.match(name) or _LIB.match(os.path.basename(
                    os.path.realpath("/proc/%d/root%s" % (proc["pid"], path))))
                files.append({"kind": "nvml" if "nvidia-ml" in name else "cuda", "path": path,
                              "version": m.group(2) if m else None, "compat": "/compat/" in path,
                              "pid": proc["pid"]})
        if files:
            return {"source": "maps", "pids": [p["pid"] for p in tree], "searched": [], "files": files}
        # not loaded (yet): what the server would load, seen from its container's root when it has one
        base = self.server_root or self.root
        dirs = list(LIB_DIRS) + [d for d in self._ld_conf_dirs(base) if d not in LIB_DIRS]
        for d in dirs:
            full = os.path.join(base, d.lstrip("/"))
            for kind, link in (("nvml", "libnvidia-ml.so.1"), ("cuda", "libcuda.so.1")):
                # the loader opens the soname link (ldconfig makes it); a versioned file without one is unused
                if not os.path.lexists(os.path.join(full, link)):
                    continue
                m = _LIB.match(os.path.basename(os.path.realpath(os.path.join(full, link))))
                if m:
                    files.append({"kind": kind, "path": os.path.join(d, m.group(0)), "version": m.group(2),
                                  "compat": d.rstrip("/").endswith("/compat"), "pid": None})
        return {"source": "files" if files else None, "pids": [], "searched": dirs, "files": files}

    def _ld_conf_dirs(self, base):
        dirs, todo, done = [], ["/etc/ld.so.conf"], set()
        while todo:
            conf = todo.pop(0)
            if conf in done:
                continue
            done.add(conf)
            for line in (_read(os.path.join(base, conf.lstrip("/"))) or "").splitlines():
                line = line.split("#", 1)[0].strip()
                if line.startswith("include "):
                    pattern = line.split(None, 1)[1]
                    if not pattern.startswith("/"):
                        pattern = os.path.join(os.path.dirname(conf), pattern)
                    for path in sorted(glob.glob(os.path.join(base, pattern.lstrip("/")))):
                        todo.append("/" + os.path.relpath(path, base))
                elif line.startswith("/"):
                    dirs.append(line)
        return dirs

    # ------------------------------------------------------------ NVML

    def nvml(self):
        out = {"available": False, "ok": False, "error": None, "error_code": None, "driver_version": None,
               "nvml_version": None, "cuda_driver_version": None, "gpus": [], "p2p": [], "hints": []}
        try:
            import pynvml
        except ImportError:
            out["error"] = "pynvml (nvidia-ml-py) is not installed for %s" % sys.executable
            return out
        out["available"] = True
        try:
            pynvml.nvmlInit()
        except Exception as exc:  # NVMLError and its subclasses
            out["error"], out["error_code"] = str(exc) or type(exc).__name__, getattr(exc, "value", None)
            return out
        try:
            out["ok"] = True
            out["driver_version"] = _text(self._call(out, pynvml.nvmlSystemGetDriverVersion))
            out["nvml_version"] = _text(self._call(out, pynvml.nvmlSystemGetNVMLVersion))
            cuda = getattr(pynvml, "nvmlSystemGetCudaDriverVersion_v2", None) or pynvml.nvmlSystemGetCudaDriverVersion
            out["cuda_driver_version"] = self._call(out, cuda)
            handles = {}
            for index in self.gpus:
                h = self._call(out, pynvml.nvmlDeviceGetHandleByIndex, index)
                if h is None:
                    continue
                handles[index] = h
                pci = self._call(out, pynvml.nvmlDeviceGetPciInfo, h)
                out["gpus"].append({"index": index, "pci_bus_id": _text(getattr(pci, "busId", None))})
            caps = {}
            for cap in ("READ", "WRITE", "NVLINK"):
                value = getattr(pynvml, "NVML_P2P_CAPS_INDEX_" + cap, None)
                if isinstance(value, tuple) and len(value) == 1:  # nvidia-ml-py's stray comma: (0,)
                    out["hints"].append("pynvml.NVML_P2P_CAPS_INDEX_%s is the tuple %r in this nvidia-ml-py; "
                                        "asked with %r" % (cap, value, value[0]))
                    value = value[0]
                caps[cap.lower()] = value
            indices = sorted(handles)
            for i, a in enumerate(indices):
                for b in indices[i + 1:]:
                    row = {"a": a, "b": b}
                    for cap, value in caps.items():
                        status = None if value is None else self._call(
                            out, pynvml.nvmlDeviceGetP2PStatus, handles[a], handles[b], value)
                        row[cap] = P2P_STATUS.get(status, None if status is None else "STATUS_%s" % status)
                    out["p2p"].append(row)
        finally:
            try:
                pynvml.nvmlShutdown()
            except Exception:
                pass
        return out

    @staticmethod
    def _call(out, fn, *args):
        """One NVML reading; a failure or an API quirk is None (N/A) plus a hint, never a crash."""
        try:
            return fn(*args)
        except Exception as exc:
            hint = "%s: %s: %s" % (getattr(fn, "__name__", "nvml"), type(exc).__name__, exc)
            if hint not in out["hints"]:
                out["hints"].append(hint)
            return None

    # ------------------------------------------------------------ torch (never imported)

    @staticmethod
    def torch():
        out = {"found": False, "path": None, "version": None, "cuda": None, "error": None}
        try:
            import importlib.util

            spec = importlib.util.find_spec("torch")  # finds the package without running it
        except Exception as exc:
            out["error"] = "%s: %s" % (type(exc).__name__, exc)
            return out
        if spec is None or not spec.submodule_search_locations:
            out["error"] = "no torch for %s" % sys.executable
            return out
        path = os.path.join(list(spec.submodule_search_locations)[0], "version.py")
        out["path"] = path
        text = _read(path)
        if text is None:
            out["error"] = "%s: unreadable" % path
            return out
        out["found"] = True
        try:
            for node in ast.parse(text).body:
                target = node.targets[0] if isinstance(node, ast.Assign) and len(node.targets) == 1 else \
                    getattr(node, "target", None) if isinstance(node, ast.AnnAssign) else None
                if isinstance(target, ast.Name) and target.id in ("__version__", "cuda") and node.value is not None:
                    value = ast.literal_eval(node.value)
                    out["version" if target.id == "__version__" else "cuda"] = value
        except (SyntaxError, ValueError) as exc:
            out["error"] = "%s: %s" % (path, exc)
        return out

    # ------------------------------------------------------------ kernel: cmdline, IOMMU, log

    def kernel(self, nvml_gpus):
        out = {"cmdline": None, "iommu_groups": None, "gpu_iommu": [], "log_source": None, "log_error": None,
               "log_lines": []}
        cmdline = _read(self.path("/proc/cmdline"))
        out["cmdline"] = cmdline.strip() if cmdline is not None else None
        try:
            out["iommu_groups"] = len(os.listdir(self.path("/sys/kernel/iommu_groups")))
        except OSError:
            pass
        for gpu in nvml_gpus:
            bus = _sysfs_bus_id(gpu.get("pci_bus_id"))
            if not bus:
                continue
            link = self.path("/sys/bus/pci/devices/%s/iommu_group" % bus)
            group = os.path.basename(os.readlink(link)) if os.path.islink(link) else None
            kind = _read(self.path("/sys/kernel/iommu_groups/%s/type" % group)) if group else None
            out["gpu_iommu"].append({"index": gpu["index"], "pci_bus_id": bus, "group": group,
                                     "type": kind.strip() if kind else None})
        text = None
        if self.root == "/":  # the live ring buffer; never on a prepared tree (it would be this machine's)
            try:
                res = subprocess.run(["dmesg"], capture_output=True, timeout=10)
                if res.returncode == 0:
                    text, out["log_source"] = res.stdout.decode("utf-8", "replace"), "dmesg"
                else:
                    out["log_error"] = "dmesg: %s" % (res.stderr.decode("utf-8", "replace").strip()[:200]
                                                      or "exit %d" % res.returncode)
            except (OSError, subprocess.SubprocessError) as exc:
                out["log_error"] = "dmesg: %s" % exc
        if text is None:
            for path in KERNEL_LOG_FILES:
                text = _tail(self.path(path), KERNEL_LOG_TAIL)
                if text is not None:
                    out["log_source"] = "file:%s" % path
                    break
        if text is None:
            out["log_error"] = (out["log_error"] + "; " if out["log_error"] else "") + \
                "no kernel log file (%s)" % ", ".join(KERNEL_LOG_FILES)
            return out
        lines = [ln.rstrip() for ln in text.splitlines() if KERNEL_LINE.search(ln)]
        if len(lines) > 2 * KERNEL_LINES_KEPT:
            lines = lines[:KERNEL_LINES_KEPT] + lines[-KERNEL_LINES_KEPT:]
        out["log_lines"] = lines
        return out

    # ------------------------------------------------------------ /dev/shm, ports

    def shm(self):
        """/dev/shm as the server sees it (its container's), else the host's."""
        path = (self.server_root + "/dev/shm") if self.server_root else self.path("/dev/shm")
        try:
            st = os.statvfs(path)
        except OSError as exc:
            return {"path": path, "total_bytes": None, "free_bytes": None, "error": str(exc)}
        return {"path": path, "total_bytes": st.f_blocks * st.f_frsize, "free_bytes": st.f_bavail * st.f_frsize,
                "error": None}

    def ports_in_use(self):
        """Listening TCP sockets, in the server's network namespace when it runs."""
        base = ("/proc/%d/net" % self.pids[0]) if self.pids else "/proc/net"
        out = {"table": base + "/tcp", "listening": [], "listeners": [], "error": None}
        wanted = {}
        listening = set()
        for name, family in (("tcp", socket.AF_INET), ("tcp6", socket.AF_INET6)):
            text = _read(os.path.join(base, name))
            if text is None:
                if name == "tcp":
                    out["error"] = "%s/tcp: unreadable" % base
                continue
            for line in text.splitlines()[1:]:
                parts = line.split()
                if len(parts) < 10 or parts[3] != "0A":  # 0A: TCP_LISTEN
                    continue
                addr, port = _address(parts[1], family)
                listening.add(port)
                if port in self.ports:
                    wanted[parts[9]] = {"port": port, "address": addr, "inode": int(parts[9]), "pid": None,
                                        "user": None, "command": None}
        owners = _socket_owners(set(wanted)) if wanted else {}
        for inode, row in sorted(wanted.items(), key=lambda kv: kv[1]["port"]):
            pid = owners.get(inode)
            if pid is not None:
                row.update(pid=pid, user=_owner(pid), command=_command(pid))
            out["listeners"].append(row)
        out["listening"] = sorted(listening)
        return out

    # ------------------------------------------------------------ nvidia-smi topo, py-spy

    @staticmethod
    def topo():
        try:
            res = subprocess.run(["nvidia-smi", "topo", "-m"], capture_output=True, timeout=20)
        except (OSError, subprocess.SubprocessError) as exc:
            return {"rc": None, "stdout": "", "error": "nvidia-smi topo -m: %s" % exc}
        said = res.stdout.decode("utf-8", "replace")
        error = None if res.returncode == 0 else (said.strip() or res.stderr.decode("utf-8", "replace").strip())[:300]
        return {"rc": res.returncode, "stdout": said, "error": error}

    def py_spy(self, tree):
        """``py-spy dump --native`` (then without --native, as the engine's own watchdog does) of
        each rank: the processes whose title starts with the engine's rank title (``--rank-title``),
        else the server processes themselves."""
        beside = os.path.join(os.path.dirname(sys.executable), "py-spy")
        exe = beside if os.access(beside, os.X_OK) else shutil.which("py-spy")
        out = {"path": exe, "stacks": [], "error": None}
        if exe is None:
            out["error"] = "py-spy is not installed next to %s or on PATH" % sys.executable
            return out
        title_start = self.rank_title
        ranks = [p for p in tree if title_start and (p["command"] or "").startswith(title_start)]
        for proc in ranks or [p for p in tree if p["pid"] in self.pids]:
            title = proc["command"] or ""
            rank = None
            if proc in ranks:  # the rank title "x::scheduler" and "x::scheduler_DP0_TP1" -> "DP0_TP1"
                rank = title.split()[0][len(title_start):].lstrip("_") or None
            row = {"pid": proc["pid"], "rank": rank, "title": title[:COMMAND_LIMIT], "ok": False, "native": None,
                   "text": None, "error": None}
            for native in (True, False):
                argv = [exe, "dump"] + (["--native"] if native else []) + ["--pid", str(proc["pid"])]
                try:
                    res = subprocess.run(argv, capture_output=True, timeout=30)
                except (OSError, subprocess.SubprocessError) as exc:
                    row["error"] = str(exc)
                    continue
                if res.returncode == 0:
                    row.update(ok=True, native=native, error=None,
                               text=res.stdout.decode("utf-8", "replace")[:STACK_LIMIT])
                    break
                row["error"] = (res.stderr or res.stdout).decode("utf-8", "replace").strip()[-500:]
            out["stacks"].append(row)
        return out


# ---------------------------------------------------------------- helpers


def _tail(path, limit):
    try:
        with open(path, "rb") as f:
            f.seek(0, 2)
            size = f.tell()
            f.seek(max(0, size - limit))
            return f.read().decode("utf-8", "replace")
    except OSError:
        return None


def _text(value):
    return value.decode("utf-8", "replace") if isinstance(value, bytes) else value


def _processes():
    """{pid: {"ppid"}} of every process (from /proc/PID/stat)."""
    out = {}
    for name in os.listdir("/proc"):
        if not name.isdigit():
            continue
        raw = _read("/proc/%s/stat" % name)
        if raw is None or ")" not in raw:
            continue
        fields = raw.rsplit(")", 1)[1].split()
        if len(fields) > 1:
            out[int(name)] = {"ppid": int(fields[1])}
    return out


def _command(pid):
    raw = _read("/proc/%d/cmdline" % pid)
    if raw:
        return " ".join(part for part in raw.split("\0") if part)[:COMMAND_LIMIT]
    comm = _read("/proc/%d/comm" % pid)
    return comm.strip() if comm else None


def _owner(pid):
    for line in (_read("/proc/%d/status" % pid) or "").splitlines():
        if line.startswith("Uid:"):
            uid = int(line.split()[1])
            try:
                import pwd

                return pwd.getpwuid(uid).pw_name
            except (KeyError, ImportError):
                return str(uid)
    return None


def _sysfs_bus_id(bus_id):
    """NVML's "00000000:18:00.0" as sysfs names it: "0000:18:00.0"."""
    m = re.match(r"^(?:[0-9A-Fa-f]*?([0-9A-Fa-f]{4}):)?([0-9A-Fa-f]{2}:[0-9A-Fa-f]{2}\.[0-7])$", bus_id or "")
    return ("%s:%s" % (m.group(1) or "0000", m.group(2))).lower() if m else None


def _address(text, family):
    """/proc/net/tcp's "0100007F:1F90" as ("127.0.0.1", 8080)."""
    host, port = text.split(":")
    raw = bytes.fromhex(host)
    # the kernel prints each 32-bit word in host (little-endian) order
    words = b"".join(struct.pack("<I", struct.unpack(">I", raw[i:i + 4])[0]) for i in range(0, len(raw), 4))
    return socket.inet_ntop(family, words), int(port, 16)


def _socket_owners(inodes):
    """{inode: pid} for the sockets whose inodes are given (from /proc/*/fd; unreadable ones skipped)."""
    owners = {}
    links = {"socket:[%s]" % inode: inode for inode in inodes}
    for name in os.listdir("/proc"):
        if not name.isdigit():
            continue
        try:
            fds = os.listdir("/proc/%s/fd" % name)
        except OSError:
            continue
        for fd in fds:
            try:
                target = os.readlink("/proc/%s/fd/%s" % (name, fd))
            except OSError:
                continue
            if target in links and links[target] not in owners:
                owners[links[target]] = int(name)
        if len(owners) == len(inodes):
            break
    return owners


def _ints(text):
    return [int(v) for v in text.split(",") if v.strip()]


def main(argv):
    args = list(argv)
    if args and args[0] == MARKER:
        args.pop(0)
    root = os.environ.get("GPUOPS_HOST_ROOT") or "/"
    pids, gpus, ports, py_spy, rank_title = [], [], [], False, None
    while args:
        arg = args.pop(0)
        if arg == "--py-spy":
            py_spy = True
            continue
        if not args:
            sys.stderr.write("triage probe: %s needs a value\n" % arg)
            return 2
        value = args.pop(0)
        try:
            if arg == "--root":
                root = value
            elif arg == "--pid":
                pids.append(int(value))
            elif arg == "--gpus":
                gpus = _ints(value)
            elif arg == "--port":
                ports.append(int(value))
            elif arg == "--rank-title":
                rank_title = value
            else:
                sys.stderr.write("triage probe: unknown argument %r\n" % arg)
                return 2
        except ValueError:
            sys.stderr.write("triage probe: %s wants numbers, not %r\n" % (arg, value))
            return 2
    started = time.monotonic()
    probe = Probe(os.path.abspath(root), pids, gpus, ports, rank_title)
    doc = {"v": 1, "root": probe.root, "server_root": probe.server_root}

    def tree():
        return doc["tree"] if isinstance(doc.get("tree"), list) else []

    sections = (
        ("driver", probe.driver),
        ("tree", probe.tree),
        ("libraries", lambda: probe.libraries(tree())),
        ("nvml", probe.nvml),
        ("torch", probe.torch),
        ("kernel", lambda: probe.kernel((doc.get("nvml") or {}).get("gpus") or [])),
        ("shm", probe.shm),
        ("ports", probe.ports_in_use),
        ("topo", probe.topo),
        ("py_spy", lambda: probe.py_spy(tree()) if py_spy else None),
    )
    for key, section in sections:
        try:
            doc[key] = section()
        except Exception as exc:  # a section that breaks says so; the others still answer
            doc[key] = {"error": "%s: %s" % (type(exc).__name__, exc)}
    doc["took_s"] = round(time.monotonic() - started, 3)
    sys.stdout.write(json.dumps(doc, separators=(",", ":")) + "\n")
    sys.stdout.flush()
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
