"""Host triage: the checks that say why a deployment's server is stuck, each a finding or a pass.

One round trip runs :mod:`gpuops.core.hosts.programs.triage_probe` on the host with the server's python
(driver module and userspace libraries, NVML, torch's CUDA, kernel command line / IOMMU /
kernel log, /dev/shm, listening ports, the server's process tree, ``nvidia-smi topo -m``,
py-spy dumps of the ranks); at the same time a telemetry snapshot lists the GPUs' processes.
:func:`run_checks` turns both into :class:`HostCheckResult` rows, in :data:`CHECKS` order:

- ``driver-library-mismatch``: /proc/driver/nvidia/version's module against the libnvidia-ml /
  libcuda the server maps (else the files it would load): the seed's 590.48.01 vs 565 hang.
- ``nvml-init``: NVML's init error, if any (``nvml-init-error``; a version mismatch is left to
  the check above).
- ``cuda-driver-too-old``: the driver's CUDA version (NVML) against the CUDA torch was built for.
- ``p2p-unavailable``: the link between the plan's GPUs (``nvidia-smi topo -m``), NVML's P2P
  status, an IOMMU translating DMA on a PCIe path, confidential-computing (SEV-SNP/TDX) signs.
- ``shm-too-small``: /dev/shm as the server sees it, for TP > 1.
- ``port-in-use``: the server port and the dist-init port held by another process.
- ``leftover-gpu-process``: processes on the plan's GPUs outside the deployment's process tree.
- ``py-spy``: ``py-spy dump`` of each rank (``data["stacks"]``), when py-spy is on the host.

``ok`` is True (pass), False (a finding, or for ``nvml-init``/``py-spy`` a failure) or None
(could not check: the detail says why). Every fix here is a :class:`~gpuops.core.findings.Fix`;
only the ones that are plan changes carry a ``plan_patch`` (the :mod:`gpuops.core.diagnose.fixes` format).
"""

from __future__ import annotations

import asyncio
import json
import re
from dataclasses import dataclass, field
from typing import Any, Iterable

from .. import engines
from ..hosts.programs import triage_probe
from ..domain import Evidence, Finding, Fix, HostCheck, Plan
from ..hosts.host import Host, HostError, host_python, script_source
from ..redact import redact_all
from ..telemetry.samples import Snapshot, plain, snapshot

CHECKS = ("driver-library-mismatch", "nvml-init", "cuda-driver-too-old", "p2p-unavailable", "shm-too-small",
          "port-in-use", "leftover-gpu-process", "py-spy")

# NCCL's troubleshooting guide asks Docker for `--shm-size=1g` (Docker's default /dev/shm is
# 64 MiB, where ncclShmOpen fails or hangs); the engine's own docker command may ask more (32g). Below 1 GiB
# (total, or free) with TP > 1 is a finding.
SHM_MIN_BYTES = 1024**3
NVML_ERROR_LIB_RM_VERSION_MISMATCH = 18
PROBE_TIMEOUT_S = 120.0  # py-spy on every rank of a big box takes a while
GIB = 1024**3

_NVML_INIT_HINTS = {
    9: "load the NVIDIA kernel module (modprobe nvidia) and read dmesg for why it did not load",
    12: "the driver's libraries are not visible to the server's environment: in a container, run it "
        "with the NVIDIA runtime (--gpus all / --runtime=nvidia)",
    4: "this user cannot open /dev/nvidia*: check the device permissions (or the container's device list)",
    17: "the operating system blocks GPU access (a cgroup device rule, or the GPUs are not passed to this VM)",
}
_PCIE_LINKS = ("SYS", "NODE", "PHB", "PXB", "PIX")
# an SEV-SNP or TDX guest ("Memory Encryption Features active: AMD SEV SEV-ES SEV-SNP" / "... Intel TDX"),
# or a host whose IOMMU serves SNP; plain SME (host memory encryption) is not one
_CONFIDENTIAL = re.compile(r"SEV-SNP|\bSNP\b|Intel TDX|tdx: Guest detected")
_PASSTHROUGH_ARGS = re.compile(r"(^|\s)(iommu=pt|iommu\.passthrough=(1|on|y))(\s|$)")
_ANSI = re.compile(r"\x1b\[[0-9;]*m")


class TriageError(HostError):
    pass


@dataclass(frozen=True)
class HostCheckResult:
    """One check: ``ok`` True (pass) / False / None (could not check), a one-line ``detail``,
    the findings it raised, and check-specific data (the py-spy stacks)."""

    name: str
    ok: bool | None
    detail: str
    findings: tuple[Finding, ...] = ()
    data: dict[str, Any] = field(default_factory=dict[str, Any])

    def summary(self) -> HostCheck:
        """The check as reported and stored (name, ok, detail)."""
        return HostCheck(self.name, self.ok, self.detail)

    def to_json(self) -> dict[str, Any]:
        return {"name": self.name, "ok": self.ok, "detail": self.detail}


# ------------------------------------------------------------------ running


def probe_argv(host: Host, plan: Plan, *, server_pids: Iterable[int] = (), root: str | None = None,
               py_spy: bool = True) -> list[str]:
    """The probe with the server's python (the plan's, else the host's) and the plan's GPUs and ports."""
    argv = [plan.python or host_python(host), "-c", script_source(triage_probe), triage_probe.MARKER]
    if root is not None:
        argv += ["--root", root]
    for pid in server_pids:
        argv += ["--pid", str(_positive_int("server pid", pid))]
    gpu_ids = [_positive_int("gpu id", g, zero=True) for g in plan.gpu_ids]
    if gpu_ids:
        argv += ["--gpus", ",".join(map(str, gpu_ids))]
    for port in _ports(plan).values():
        argv += ["--port", str(port)]
    rank_title = engines.get(plan.engine).rank_title
    if rank_title:  # py-spy's ranks: the processes whose title starts with it
        argv += ["--rank-title", rank_title]
    return argv + (["--py-spy"] if py_spy else [])


async def run_probe(host: Host, plan: Plan, *, server_pids: Iterable[int] = (), root: str | None = None,
                    py_spy: bool = True, timeout: float = PROBE_TIMEOUT_S) -> dict[str, Any]:
    res = await host.run(probe_argv(host, plan, server_pids=server_pids, root=root, py_spy=py_spy), timeout=timeout)
    lines = res.stdout.strip().splitlines()
    try:
        doc = json.loads(lines[-1])
        if not isinstance(doc, dict) or doc.get("v") != 1:
            raise ValueError("not a v1 document")
    except (ValueError, IndexError):
        said = next((ln for ln in reversed(res.stderr.splitlines()) if ln.strip()), "no output")
        raise TriageError(f"{host.name}: triage probe exited ({res.returncode}): {said}",
                          f"is {plan.python or host_python(host)} a python on {host.name}?") from None
    shown: dict[str, Any] = redact_all(doc)
    return shown  # command lines, environments and stacks, as shown and stored


async def run_checks(host: Host, plan: Plan, *, server_pids: Iterable[int] = (), root: str | None = None,
                     shm_min_bytes: int = SHM_MIN_BYTES, py_spy: bool = True) -> list[HostCheckResult]:
    """Every check of :data:`CHECKS` against ``host`` for ``plan``; ``server_pids`` are the
    deployment's running server processes (its descendants count as its own), ``root`` points
    the probe at a prepared tree (default: the host's GPUOPS_HOST_ROOT, else /)."""
    pids = tuple(server_pids)
    doc, snap = await asyncio.gather(run_probe(host, plan, server_pids=pids, root=root, py_spy=py_spy),
                                     _snapshot_or_error(host))
    return checks_from(doc, plan, snap, shm_min_bytes=shm_min_bytes)


async def _snapshot_or_error(host: Host) -> Snapshot | str:
    try:
        return await snapshot(host)
    except HostError as exc:
        return exc.message


def checks_from(doc: dict[str, Any], plan: Plan, snap: Snapshot | str, *, shm_min_bytes: int = SHM_MIN_BYTES
                ) -> list[HostCheckResult]:
    """The checks from a probe document and a telemetry snapshot (or the error it gave)."""
    return [
        check_driver_libraries(doc),
        check_nvml_init(doc),
        check_cuda_driver(doc, engines.get(plan.engine).title),
        check_p2p(doc, plan),
        check_shm(doc, plan, shm_min_bytes),
        check_ports(doc, plan),
        check_leftover(doc, plan, snap),
        check_py_spy(doc),
    ]


def findings(results: Iterable[HostCheckResult]) -> list[Finding]:
    return [f for r in results for f in r.findings]


# ------------------------------------------------------------------ driver and libraries


def check_driver_libraries(doc: dict[str, Any]) -> HostCheckResult:
    name = "driver-library-mismatch"
    drv, libs, nvml = _section(doc, "driver"), _section(doc, "libraries"), _section(doc, "nvml")
    module = drv.get("module_version")
    if module is None:
        return HostCheckResult(name, None, drv.get("error") or "the NVIDIA kernel module's version is unknown")
    files = [f for f in libs.get("files") or [] if f.get("version")]
    where = "mapped by the server" if libs.get("source") == "maps" else "on disk"
    bad = [f for f in files if _mismatched(f, module)]
    nvml_says = nvml.get("error_code") == NVML_ERROR_LIB_RM_VERSION_MISMATCH
    if not bad and not nvml_says:
        if not files:
            return HostCheckResult(name, None, f"kernel module {module}; no libnvidia-ml / libcuda found in "
                               + ", ".join(libs.get("searched") or ()))
        shown = ", ".join(f"{_lib_name(f)} {f['version']}" for f in files)
        return HostCheckResult(name, True, f"kernel module {module} matches {shown} ({where})")
    evidence = _mismatch_evidence(doc, module, bad or files, nvml_says)
    versions = sorted({f["version"] for f in bad})
    said = (f"the server's userspace driver libraries are {', '.join(versions)} ({where})" if bad
            else "NVML reports a driver/library version mismatch")
    finding = Finding(
        name, "error",
        f"the NVIDIA kernel module is {module} but {said}: CUDA and NVML cannot talk to the driver, "
        "so CUDA/NCCL initialisation fails or hangs",
        tuple(evidence),
        Fix(f"the driver was upgraded under a running system or container: recreate the server's container "
            f"so it mounts the host's {module} libraries (and avoid images that bundle their own libnvidia-ml), "
            "or reboot the host after the driver upgrade"),
        data={"module_version": module, "library_versions": versions},
    )
    return HostCheckResult(name, False, finding.summary, (finding,))


def _mismatch_evidence(doc: dict[str, Any], module: str, libs: list[dict[str, Any]], nvml_says: bool) -> list[Evidence]:
    """The kernel module's version, the libraries' (`libs`), NVML's word and the kernel log's NVRM lines."""
    drv, nvml = _section(doc, "driver"), _section(doc, "nvml")
    evidence = [Evidence(drv.get("path") or "/proc/driver/nvidia/version", reading=f"kernel module {module}"
                         + (f": {drv['line']}" if drv.get("line") else ""))]
    for f in libs:
        source = f"/proc/{f['pid']}/maps" if f.get("pid") else f["path"]
        evidence.append(Evidence(source, reading=f"{f['path']}: {_lib_name(f)} {f['version']}"))
    if nvml_says:
        evidence.append(Evidence("nvml", reading=f"nvmlInit: {nvml.get('error')}"))
    kernel = _section(doc, "kernel")
    evidence += [Evidence(kernel.get("log_source") or "kernel log", line=ln)
                 for ln in kernel.get("log_lines") or [] if "NVRM: API mismatch" in ln
                 or "NVRM: this kernel module has the version" in ln][-4:]
    return evidence


def _mismatched(lib: dict[str, Any], module: str) -> bool:
    """A library whose version is not the module's. A CUDA forward-compatibility libcuda
    (/usr/local/cuda/compat) is newer than the module on purpose: it counts only when the
    server maps one older than the module."""
    if lib.get("compat"):
        return lib.get("pid") is not None and _version_key(lib["version"]) < _version_key(module)
    return bool(lib["version"] != module)


def _lib_name(lib: dict[str, Any]) -> str:
    return "libnvidia-ml" if lib.get("kind") == "nvml" else "libcuda"


# ------------------------------------------------------------------ NVML, CUDA


def check_nvml_init(doc: dict[str, Any]) -> HostCheckResult:
    name = "nvml-init"
    nvml = _section(doc, "nvml")
    if not nvml.get("available"):
        return HostCheckResult(name, None, nvml.get("error") or "NVML was not asked")
    if nvml.get("ok"):
        return HostCheckResult(name, True, f"NVML {nvml.get('nvml_version') or '?'}, driver "
                           f"{nvml.get('driver_version') or '?'}, CUDA {_cuda_text(nvml.get('cuda_driver_version'))}")
    code, error = nvml.get("error_code"), nvml.get("error") or "unknown error"
    if code == NVML_ERROR_LIB_RM_VERSION_MISMATCH:
        return HostCheckResult(name, False, f"nvmlInit: {error} (see driver-library-mismatch)")
    finding = Finding("nvml-init-error", "error", f"NVML cannot initialise: {error}",
                      (Evidence("nvml", reading=f"nvmlInit: {error}" + (f" (code {code})" if code else "")),),
                      Fix(_NVML_INIT_HINTS.get(code, "run nvidia-smi on the host to see why") if code is not None
                          else "run nvidia-smi on the host to see why"))
    return HostCheckResult(name, False, finding.summary, (finding,))


def check_cuda_driver(doc: dict[str, Any], engine_title: str | None = None) -> HostCheckResult:
    name = "cuda-driver-too-old"
    nvml, torch = _section(doc, "nvml"), _section(doc, "torch")
    driver = nvml.get("cuda_driver_version")
    if not torch.get("found"):
        return HostCheckResult(name, None, f"cannot tell the CUDA runtime: {torch.get('error') or 'no torch'}")
    runtime = torch.get("cuda")
    if not runtime:
        return HostCheckResult(name, None, f"torch {torch.get('version')} is not a CUDA build")
    if not isinstance(driver, int):
        return HostCheckResult(name, None, f"torch {torch.get('version')} wants CUDA {runtime}; the driver's CUDA "
                           f"version is unknown ({nvml.get('error') or 'NVML did not say'})")
    want = _cuda_int(runtime)
    if want is None or driver >= want:
        return HostCheckResult(name, True, f"driver CUDA {_cuda_text(driver)} >= torch {torch.get('version')}'s CUDA {runtime}")
    major = driver // 1000 < want // 1000
    finding = Finding(
        name, "error" if major else "warning",
        f"the driver supports CUDA {_cuda_text(driver)} but torch {torch.get('version')} is built for CUDA {runtime}"
        + ("" if major else ": minor-version compatibility runs most kernels, PTX JIT and newer APIs fail"),
        (Evidence("nvml", reading=f"nvmlSystemGetCudaDriverVersion_v2 = {driver} (driver "
                  f"{nvml.get('driver_version') or '?'})"),
         Evidence(torch.get("path") or "torch/version.py", reading=f"__version__ = {torch.get('version')!r}, "
                  f"cuda = {runtime!r}")),
        Fix(f"upgrade the host's NVIDIA driver to one for CUDA {runtime} (on data-center GPUs the cuda-compat "
            f"package for {runtime} also works), or run a torch/{engine_title or engines.get().title} build "
            f"for CUDA {_cuda_text(driver)}"),
        data={"driver_cuda": driver, "torch_cuda": runtime},
    )
    return HostCheckResult(name, False, finding.summary, (finding,))


# ------------------------------------------------------------------ P2P, IOMMU


def _p2p_against(nvml: dict[str, Any], kernel: dict[str, Any],
                 known: dict[tuple[int, int], str]) -> tuple[list[str], list[Evidence], list[Any], str | None]:
    """What speaks against peer-to-peer: NVML's refusal, a translating IOMMU on a PCIe path, a
    confidential-computing kernel. (reasons, evidence, NVML's refused pairs, the IOMMU mode)."""
    evidence: list[Evidence] = []
    reasons: list[str] = []
    refused = [r for r in nvml.get("p2p") or [] if any(r.get(c) not in (None, "OK") for c in ("read", "write"))]
    for r in refused:
        evidence.append(Evidence("nvml", reading=f"GPU{r['a']}-GPU{r['b']} P2P read {r.get('read') or 'N/A'}, "
                                 f"write {r.get('write') or 'N/A'}"))
    if refused:
        reasons.append("NVML says peer-to-peer is not available between "
                       + ", ".join(f"GPU{r['a']}-GPU{r['b']}" for r in refused))

    mode, iommu_evidence = iommu_mode(kernel)
    pcie = {p: link for p, link in known.items() if link in _PCIE_LINKS}
    if mode == "translated" and pcie:
        evidence += [Evidence("nvidia-smi topo -m", reading=f"GPU{a}-GPU{b} {link}") for (a, b), link in pcie.items()]
        evidence += iommu_evidence
        reasons.append("the IOMMU translates DMA (not in pass-through) on a PCIe path between the GPUs, "
                       "which breaks peer-to-peer DMA")
    cc = [ln for ln in kernel.get("log_lines") or [] if _CONFIDENTIAL.search(ln)]
    if cc:
        evidence += [Evidence(kernel.get("log_source") or "kernel log", line=ln) for ln in cc[:3]]
        reasons.append("the kernel runs in a confidential-computing mode (SEV-SNP/TDX), where GPU peer-to-peer "
                       "is restricted")
    return reasons, evidence, refused, mode


def _p2p_detail(topo: dict[str, Any], nvml: dict[str, Any], known: dict[tuple[int, int], str], refused: list[Any],
                mode: str | None) -> tuple[str, bool]:
    """The check's one line (the links, NVML's word, the IOMMU), and whether NVML answered for every pair."""
    shown_links = ", ".join(f"GPU{a}-GPU{b} {link}" for (a, b), link in sorted(known.items())) or \
        f"links unknown ({(topo.get('error') or 'no GPU matrix in nvidia-smi topo -m').splitlines()[0]})"
    rows = nvml.get("p2p") or []
    answered = bool(rows) and all(r.get("read") and r.get("write") for r in rows)
    if refused:
        shown_nvml = "NVML P2P refused"
    elif answered:
        shown_nvml = "NVML P2P read/write OK"
    else:  # N/A: NVML's error, else the first hint (an API quirk)
        shown_nvml = f"NVML P2P N/A ({nvml.get('error') or next(iter(nvml.get('hints') or []), 'no reading')})"
    return f"{shown_links}; {shown_nvml}; IOMMU {mode or 'unknown'}", answered


def check_p2p(doc: dict[str, Any], plan: Plan) -> HostCheckResult:
    name = "p2p-unavailable"
    gpu_ids = sorted(set(plan.gpu_ids))
    if len(gpu_ids) < 2:
        return HostCheckResult(name, True, "one GPU: no peer-to-peer between ranks")
    if plan.env.get("NCCL_P2P_DISABLE") == "1":
        return HostCheckResult(name, True, "NCCL_P2P_DISABLE=1 is set: NCCL does not use peer-to-peer")
    topo, nvml, kernel = _section(doc, "topo"), _section(doc, "nvml"), _section(doc, "kernel")
    links = parse_topo(topo.get("stdout") or "")
    pairs = [(a, b) for i, a in enumerate(gpu_ids) for b in gpu_ids[i + 1:]]
    known = {p: links[p] for p in pairs if p in links}
    reasons, evidence, refused, mode = _p2p_against(nvml, kernel, known)
    detail, answered = _p2p_detail(topo, nvml, known, refused, mode)
    if not reasons:
        # nothing against P2P; but with neither the links nor NVML's word nothing for it either
        return HostCheckResult(name, True if known or answered else None, detail)
    finding = Finding(
        name, "warning", "; ".join(reasons) + ": NCCL can hang in its init or first collective",
        tuple(evidence),
        Fix("restart with NCCL_P2P_DISABLE=1 as an experiment: NCCL then moves data through shared memory "
            "(slower, and /dev/shm must be big enough); if the server then starts, fix the P2P path (iommu=pt on "
            "the kernel command line, ACS off on the PCIe switches) and remove the variable; "
            f"--disable-custom-all-reduce avoids {engines.get(plan.engine).title}'s own P2P all-reduce",
            applicable=True,
            plan_patch={"set_env": {"NCCL_P2P_DISABLE": "1"}}),
        data={"links": {f"{a}-{b}": link for (a, b), link in known.items()}, "iommu": mode},
    )
    return HostCheckResult(name, False, finding.summary, (finding,))


def parse_topo(text: str) -> dict[tuple[int, int], str]:
    """``nvidia-smi topo -m``'s GPU matrix: {(a, b): "NV18" | "PHB" | ...} for a < b.
    The header names the columns (GPUn, NICn, then the affinity columns); each GPU row gives
    its links in the same order."""
    lines = [_ANSI.sub("", ln) for ln in text.splitlines()]
    header = next((ln for ln in lines if re.search(r"\bGPU\d+\b", ln) and not re.match(r"GPU\d+\s", ln)), None)
    if header is None:
        return {}
    columns = re.findall(r"\b((?:GPU|NIC)\d+)\b", header)
    out: dict[tuple[int, int], str] = {}
    for ln in lines:
        m = re.match(r"^GPU(\d+)\s+(.*)$", ln)
        if not m:
            continue
        a = int(m.group(1))
        cells = m.group(2).split()
        for col, cell in zip(columns, cells):
            if col.startswith("GPU") and cell != "X":
                b = int(col[3:])
                out[(min(a, b), max(a, b))] = cell
    return out


def iommu_mode(kernel: dict[str, Any]) -> tuple[str | None, list[Evidence]]:
    """"off", "pass-through", "translated" or None (unknown), and what shows it: the GPUs'
    IOMMU group types when known, else the group count, the kernel command line and the log.
    Linux's default domain with an IOMMU present is translated, so groups with nothing that
    says pass-through count as translated."""
    groups = kernel.get("iommu_groups")
    cmdline = kernel.get("cmdline") or ""
    evidence: list[Evidence] = []
    types = [g for g in kernel.get("gpu_iommu") or [] if g.get("type")]
    if types:
        evidence = [Evidence(f"/sys/bus/pci/devices/{g['pci_bus_id']}/iommu_group",
                             reading=f"GPU{g['index']}: IOMMU group {g['group']} type {g['type']}") for g in types]
        if all(g["type"] == "identity" for g in types):
            return "pass-through", evidence
        return "translated", evidence
    if groups is None:
        return None, evidence
    evidence.append(Evidence("/sys/kernel/iommu_groups", reading=f"{groups} IOMMU groups"))
    if groups == 0:
        return "off", evidence
    evidence.append(Evidence("/proc/cmdline", reading=cmdline))
    domain = [ln for ln in kernel.get("log_lines") or [] if "Default domain type" in ln]
    evidence += [Evidence(kernel.get("log_source") or "kernel log", line=ln) for ln in domain[-1:]]
    if _PASSTHROUGH_ARGS.search(cmdline) or any("Passthrough" in ln for ln in domain):
        return "pass-through", evidence
    return "translated", evidence


# ------------------------------------------------------------------ /dev/shm


def check_shm(doc: dict[str, Any], plan: Plan, min_bytes: int = SHM_MIN_BYTES) -> HostCheckResult:
    name = "shm-too-small"
    shm = _section(doc, "shm")
    tp = plan.tp
    total, free = shm.get("total_bytes"), shm.get("free_bytes")
    if total is None:
        return HostCheckResult(name, None, f"{shm.get('path') or '/dev/shm'}: {shm.get('error') or 'no reading'}")
    size = f"{shm.get('path')}: {_gib(total)} total, {_gib(free)} free"
    if tp <= 1:
        return HostCheckResult(name, True, f"{size}; TP 1: no NCCL transport between ranks needs it")
    if total >= min_bytes and (free is None or free >= min_bytes):
        return HostCheckResult(name, True, f"{size} (>= {_gib(min_bytes)} for TP {tp})")
    which = "total" if total < min_bytes else "free"
    finding = Finding(
        name, "error",
        f"/dev/shm has {_gib(total if which == 'total' else free)} {which}, under {_gib(min_bytes)}, with TP {tp}: "
        "NCCL's shared-memory segments (ncclShmOpen) fail or hang",
        (Evidence(shm.get("path") or "/dev/shm", reading=f"statvfs: {total} bytes total, {free} bytes free"),),
        Fix("give the server's container a bigger /dev/shm (docker run --shm-size 32g, as "
            f"{engines.get(plan.engine).title}'s docs do, or "
            "--ipc=host) and recreate it" + ("; remove stale segments from /dev/shm" if which == "free" else "")),
        data={"total_bytes": total, "free_bytes": free, "min_bytes": min_bytes, "tp": tp},
    )
    return HostCheckResult(name, False, finding.summary, (finding,))


# ------------------------------------------------------------------ ports


def check_ports(doc: dict[str, Any], plan: Plan) -> HostCheckResult:
    name = "port-in-use"
    ports = _section(doc, "ports")
    wanted = _ports(plan)
    if ports.get("error") and not ports.get("listening"):
        return HostCheckResult(name, None, ports["error"])
    own = {p["pid"] for p in _tree(doc)}
    listening = set(ports.get("listening") or ())
    found: list[Finding] = []
    shown = []
    for what, port in wanted.items():
        foreign = [row for row in ports.get("listeners") or [] if row.get("port") == port and row.get("pid") not in own]
        mine = [row for row in ports.get("listeners") or [] if row.get("port") == port and row.get("pid") in own]
        if not foreign:
            shown.append(f"{what} {port} " + ("held by the deployment" if mine else "free"))
            continue
        taken = set(wanted.values()) | listening
        spare = next((p for p in range(port + 1, 65536) if p not in taken), None)
        holders = ", ".join(_holder(row) for row in foreign)
        found.append(Finding(
            name, "error", f"the {what} port {port} is already in use by {holders}",
            tuple(Evidence(ports.get("table") or "/proc/net/tcp",
                           reading=f"{row.get('address')}:{port} LISTEN {_holder(row)}") for row in foreign),
            Fix(f"move the deployment to port {spare}, or end the process holding {port}", applicable=True,
                plan_patch=_port_patch(plan, what, spare)) if spare is not None
            else Fix(f"end the process holding {port}: no free port above it"),
            data={"port": port, "what": what, "holders": foreign, "free_port": spare},
        ))
        shown.append(f"{what} {port} taken")
    if "dist-init" not in wanted:
        shown.append(f"dist-init port: {engines.get(plan.engine).title} picks a free one at start "
                     "(no --nccl-port / --dist-init-addr)")
    return HostCheckResult(name, not found, "; ".join(shown), tuple(found))


_DIST_FLAGS = ("--dist-init-addr", "--nccl-init-addr")


def _ports(plan: Plan) -> dict[str, int]:
    """{"server": port, "dist-init": port}: the plan's ``port`` and the rendezvous port its argv
    fixes, from ``--dist-init-addr HOST:PORT`` (alias ``--nccl-init-addr``) or ``--nccl-port`` (the
    engine's server arguments, as of its 0.5.23); without either the engine picks a free port itself
    at start, which cannot collide."""
    out: dict[str, int] = {}
    out["server"] = _positive_int("port", plan.port)
    value = _flag(plan.argv, _DIST_FLAGS)
    if value and value.rpartition(":")[2].isdigit():
        out["dist-init"] = int(value.rpartition(":")[2])
    elif (nccl := _flag(plan.argv, ("--nccl-port",))) and nccl.isdigit():
        out["dist-init"] = int(nccl)
    return out


def _flag(argv: list[str], names: tuple[str, ...]) -> str | None:
    for i, arg in enumerate(argv):
        key, eq, value = arg.partition("=")
        if key in names:
            return value if eq else (argv[i + 1] if i + 1 < len(argv) else None)
    return None


def _port_patch(plan: Plan, what: str, spare: int) -> dict[str, Any]:
    if what == "server":
        return {"port": spare}
    argv = plan.argv
    for flag in _DIST_FLAGS:
        value = _flag(argv, (flag,))
        if value:
            return {"set_flags": {flag: [f"{value.rpartition(':')[0]}:{spare}"]}}
    return {"set_flags": {"--nccl-port": [str(spare)]}}


def _holder(row: dict[str, Any]) -> str:
    if row.get("pid") is None:
        return "a process gpuops cannot see (another user's?)"
    return f"pid {row['pid']} ({row.get('user') or '?'}: {(row.get('command') or '?')[:120]})"


# ------------------------------------------------------------------ leftover GPU processes


def check_leftover(doc: dict[str, Any], plan: Plan, snap: Snapshot | str) -> HostCheckResult:
    name = "leftover-gpu-process"
    if isinstance(snap, str):
        return HostCheckResult(name, None, f"no GPU process list: {snap}")
    if not snap.gpus:
        return HostCheckResult(name, None, f"no GPU process list: {snap.nvml.error or 'no GPUs seen'}")
    gpu_ids = set(plan.gpu_ids)
    own = {p["pid"] for p in _tree(doc)}
    rows = [{"gpu": g.index, "pid": p.pid, "user": p.user, "command": p.command, "used_bytes": plain(p.used_bytes)}
            for g in snap.gpus if not gpu_ids or g.index in gpu_ids for p in g.processes if p.pid not in own]
    gpus = ", ".join(f"GPU{i}" for i in sorted(gpu_ids)) or "all GPUs"
    if not rows:
        return HostCheckResult(name, True, f"no other process on {gpus}")
    evidence = tuple(Evidence("nvml", reading=f"GPU{r['gpu']}: pid {r['pid']} ({r['user'] or '?'}) "
                              f"{_gib(r['used_bytes'])}: {(r['command'] or '?')[:160]}") for r in rows)
    pids = sorted({r["pid"] for r in rows})
    finding = Finding(
        name, "warning",
        f"{len(pids)} process{'es' if len(pids) != 1 else ''} not of this deployment on {gpus} "
        f"(pid {', '.join(map(str, pids))}): they hold GPU memory and can stall the start-up",
        evidence,
        Fix("end them if they are leftovers: the dashboard's end-process action asks first, checks the pid "
            "still runs that command, then sends SIGTERM"),
        data={"processes": rows},
    )
    return HostCheckResult(name, False, finding.summary, (finding,))


# ------------------------------------------------------------------ py-spy


def check_py_spy(doc: dict[str, Any]) -> HostCheckResult:
    name = "py-spy"
    spy = doc.get("py_spy")
    if not isinstance(spy, dict):
        return HostCheckResult(name, None, "not asked")
    if spy.get("error") or not spy.get("path"):
        return HostCheckResult(name, None, spy.get("error") or "py-spy not found")
    stacks = spy.get("stacks") or []
    if not stacks:
        return HostCheckResult(name, None, "the server is not running: no stacks to dump")
    label = ", ".join(f"{s.get('rank') or 'pid'} {s['pid']}" + ("" if s.get("ok") else " failed") for s in stacks)
    failed = [s for s in stacks if not s.get("ok")]
    detail = f"dumped {label}" + (f": {failed[0].get('error')}" if failed else "")
    return HostCheckResult(name, not failed, detail, data={"stacks": stacks})


def stacks(results: Iterable[HostCheckResult]) -> list[dict[str, Any]]:
    """The py-spy dumps, one per rank: {pid, rank, title, ok, native, text, error}."""
    return [s for r in results if r.name == "py-spy" for s in r.data.get("stacks") or ()]


# ------------------------------------------------------------------ helpers


def _section(doc: dict[str, Any], key: str) -> dict[str, Any]:
    value = doc.get(key)
    return value if isinstance(value, dict) else {}


def _tree(doc: dict[str, Any]) -> list[dict[str, Any]]:
    value = doc.get("tree")
    return value if isinstance(value, list) else []


def _positive_int(what: str, value: Any, zero: bool = False) -> int:
    if isinstance(value, bool) or not isinstance(value, int) or value < (0 if zero else 1):
        raise ValueError(f"{what} must be a whole number{' >= 0' if zero else ' > 0'}, not {value!r}")
    return value


def _version_key(version: str) -> tuple[int, ...]:
    return tuple(int(p) for p in re.findall(r"\d+", version))


def _cuda_int(text: str) -> int | None:
    """"12.9" as the driver API number NVML uses (12090)."""
    m = re.match(r"^(\d+)\.(\d+)", str(text))
    return int(m.group(1)) * 1000 + int(m.group(2)) * 10 if m else None


def _cuda_text(value: Any) -> str:
    return f"{value // 1000}.{value % 1000 // 10}" if isinstance(value, int) else "N/A"


def _gib(value: Any) -> str:
    return "N/A" if not isinstance(value, int) else f"{value / GIB:.2f} GiB"
