"""The GPUs this server uses: its entries in DIR/state/gpus.json (what the fake pynvml and nvidia-smi read)."""

from __future__ import annotations

import contextlib
import fcntl
import json
import os

from .common import GPUS_FILE, GiB, LOCK_FILE, STATE_DIR, proc_start, read_json


class Gpus:
    """This server's entries in DIR/state/gpus.json: one process (this pid) on each GPU it uses."""

    def __init__(self, indices):
        self.indices = indices  # GPU index per rank
        self.pid = os.getpid()
        self.start = proc_start(self.pid)
        self.used = {}  # gpu index -> bytes this process holds there

    @contextlib.contextmanager
    def _locked(self):
        with open(LOCK_FILE, "a") as lock:
            fcntl.flock(lock, fcntl.LOCK_EX)
            try:
                yield
            finally:
                fcntl.flock(lock, fcntl.LOCK_UN)

    def read(self):
        return read_json(GPUS_FILE, {"gpus": []})

    def _write(self, state):
        tmp = os.path.join(STATE_DIR, ".gpus.json.%d.tmp" % os.getpid())
        with open(tmp, "w") as f:
            json.dump(state, f, indent=1)
            f.write("\n")
        os.replace(tmp, GPUS_FILE)

    def set(self, per_rank=None, util=None, power_mw=None):
        """Set this process's memory on each rank's GPU (bytes; None: leave it). util/power
        apply to all its GPUs. Entries of processes that no longer exist are dropped."""
        with self._locked():
            state = self.read()
            gpus = state.get("gpus") or []
            changed = False
            for rank, index in enumerate(self.indices):
                if index >= len(gpus):
                    continue
                gpu = gpus[index]
                procs = []
                mem = int(gpu.get("memory_used") or 0)
                for p in gpu.get("processes") or []:
                    pid = p.get("pid")
                    mine = pid == self.pid
                    if mine or not _alive(pid, p.get("start")):
                        mem -= int(p.get("used") or 0)
                        changed = True
                        continue
                    procs.append(p)
                new = self.used.get(index) if per_rank is None else per_rank[rank]  # None: not (or no longer) there
                if new is not None:
                    procs.append({"pid": self.pid, "used": int(new), "start": self.start})
                    mem += int(new)
                    self.used[index] = int(new)
                else:
                    self.used.pop(index, None)
                gpu["processes"] = procs
                gpu["memory_used"] = max(0, mem)
                if util is not None:
                    gpu["util"] = util
                    gpu["mem_util"] = min(100, util // 2)
                    gpu["sm_clock"] = 1980 if util else 345
                if power_mw is not None:
                    gpu["power_mw"] = power_mw
                changed = True
            if changed:
                self._write(state)

    def release(self):
        with contextlib.suppress(Exception):
            self.set([None] * len(self.indices), util=0, power_mw=75000)

    def avail(self, rank):
        """Free memory of RANK's GPU in GB (as torch.cuda.mem_get_info sees it)."""
        state = self.read()
        gpus = state.get("gpus") or []
        index = self.indices[rank]
        if index >= len(gpus):
            return 0.0
        gpu = gpus[index]
        used = int(gpu.get("memory_used") or 0)
        for p in gpu.get("processes") or []:
            if p.get("pid") != self.pid and not _alive(p.get("pid"), p.get("start")):
                used -= int(p.get("used") or 0)
        total = int(gpu.get("memory_total") or 0)
        return max(0, total - int(gpu.get("memory_reserved") or 0) - max(0, used)) / GiB

    def total(self, rank):
        gpus = self.read().get("gpus") or []
        index = self.indices[rank]
        return int(gpus[index].get("memory_total") or 0) if index < len(gpus) else 0


def _alive(pid, start=None):
    try:
        with open("/proc/%d/stat" % int(pid), "rb") as f:
            fields = f.read().rsplit(b")", 1)[1].split()
    except (OSError, IndexError, ValueError, TypeError):
        return not os.path.isdir("/proc/self")
    if fields[0] in (b"Z", b"X"):
        return False
    return start is None or fields[19].decode() == str(start)
