"""Host triage checks (core/triage.py, core/triage_probe.py): each one made to fire and made to
pass, against the simulated GPU host (its python, fake pynvml and nvidia-smi, its root tree of
kernel and driver files), prepared root trees, real sockets, real processes and real py-spy."""

from __future__ import annotations

import json
import os
import pwd
import signal
import socket
import subprocess
import sys
import tempfile
from pathlib import Path

import pytest

from gpuops.core.diagnose import host_checks as triage
from gpuops.core.config import HostConfig, parse_inventory
from gpuops.core.diagnose.fixes import apply_patch
from gpuops.core.hosts.host import LocalHost, SshHost
from gpuops.sim.host import setup_simhost
from tests.plans import make_plan
from tests.sshd import free_port

GIB = 1024**3
# a rank says "rank" once it is about to loop (a dump taken before could still be in its imports), in
# one write (the two ranks share the server's stdout: print's text and newline could interleave)
RANK_CODE = "import os, time\ndef rank_loop():\n    while True:\n        time.sleep(1)\nos.write(1, b'rank\\n')\nrank_loop()\n"


@pytest.fixture
def simdir():
    # sshd's user must reach it: not under pytest's 0700 tmp dir
    d = Path(tempfile.mkdtemp(prefix="gpuops-triage-"))
    d.chmod(0o755)
    yield d
    subprocess.run(["rm", "-rf", str(d)])


@pytest.fixture
def spawn():
    """Start real processes (each leads its own session); all of them end with the test."""
    procs: list[subprocess.Popen] = []

    def start(argv: list[str], **kw) -> subprocess.Popen:
        proc = subprocess.Popen(argv, start_new_session=True, stdout=subprocess.PIPE, text=True, **kw)
        procs.append(proc)
        return proc

    yield start
    for proc in procs:
        try:
            os.killpg(proc.pid, signal.SIGKILL)
        except ProcessLookupError:
            pass
        proc.wait()


def sim_host(directory: Path, sshd=None, **setup):
    sim = setup_simhost(directory, **{"gpus": 2, **setup})
    return sim, reach(sim, sshd)


def reach(sim, sshd=None):
    """A Host for the simulated host: local, or over the real sshd."""
    cfg = parse_inventory(sim.host_block("sim", ssh=sshd.target() if sshd else None), source="t.toml").hosts[0]
    return SshHost(cfg, connect_options=sshd.options()) if sshd else LocalHost(cfg)


def plan_for(gpu_ids=(0, 1), port=None, argv=(), env=None, python=None):
    port = port if port is not None else free_port()  # never a fixed port another process may hold
    return make_plan("t", gpu_ids=gpu_ids, port=port, argv=["--port", str(port), *argv], env=dict(env or {}),
                     python=python)


async def checks(host, plan, **kw) -> dict[str, triage.HostCheckResult]:
    try:
        results = await triage.run_checks(host, plan, **kw)
    finally:
        await host.close()
    assert [r.name for r in results] == list(triage.CHECKS)
    for r in results:  # a finding exactly when a check fails (nvml-init/py-spy may fail without one)
        assert (r.ok is False) == bool(r.findings) or r.name in ("nvml-init", "py-spy"), r
        for f in r.findings:  # an applicable fix is a plan change that core/fixes.py applies
            assert f.fix is not None and f.fix.applicable == (f.fix.plan_patch is not None)
            if f.fix.applicable:
                assert apply_patch(plan, f.fix.plan_patch)[1], f.fix.plan_patch  # a non-empty diff
    return {r.name: r for r in results}


def only(result: triage.HostCheckResult):
    assert result.ok is False and len(result.findings) == 1, result
    finding = result.findings[0]
    assert finding.code == result.name
    return finding


def readings(finding) -> str:
    return "\n".join(f"{e.source} {e.reading or ''} {e.line or ''}" for e in finding.evidence)


def plain_host(**env) -> LocalHost:
    return LocalHost(HostConfig(name="box", local=True, ssh=None, python=None, env=tuple(env.items())))


def lib(root: Path, folder: str, stem: str, version: str, link: bool = True) -> None:
    d = root / folder.lstrip("/")
    d.mkdir(parents=True, exist_ok=True)
    (d / f"{stem}.{version}").write_bytes(b"\x7fELF placeholder\n")
    if link:
        os.symlink(f"{stem}.{version}", d / f"{stem}.1")


def module_file(root: Path, version: str) -> None:
    path = root / "proc/driver/nvidia/version"
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(f"NVRM version: NVIDIA UNIX Open Kernel Module for x86_64  {version}  Release Build  "
                    "(dvs-builder@U16-I1-N07-12-3)  Sun Oct 12 2025\n")


# ------------------------------------------------------------------ driver / userspace libraries


async def test_the_seed_mismatch_590_module_565_libraries(simdir):
    sim, host = sim_host(simdir, driver_version="590.48.01", nvml="mismatch", library_version="565.57.01")
    got = await checks(host, plan_for())
    f = only(got["driver-library-mismatch"])
    assert f.severity == "error" and "590.48.01" in f.summary and "565.57.01" in f.summary
    ev = readings(f)
    assert "kernel module 590.48.01" in ev
    assert "/usr/lib/x86_64-linux-gnu/libnvidia-ml.so.565.57.01: libnvidia-ml 565.57.01" in ev
    assert "/usr/lib/x86_64-linux-gnu/libcuda.so.565.57.01: libcuda 565.57.01" in ev
    assert "nvmlInit: RM has detected an NVML/RM version mismatch." in ev
    assert "NVRM: API mismatch: the client has the version 565.57.01, but" in ev  # the kernel log
    assert f.fix and not f.fix.applicable and f.fix.plan_patch is None and "recreate" in f.fix.summary
    # NVML's own error is part of that finding, not a second one
    assert got["nvml-init"].ok is False and "see driver-library-mismatch" in got["nvml-init"].detail
    assert not got["nvml-init"].findings


async def test_matching_module_and_libraries_pass(simdir):
    sim, host = sim_host(simdir, driver_version="580.159.04")
    got = await checks(host, plan_for())
    r = got["driver-library-mismatch"]
    assert r.ok is True and r.detail == ("kernel module 580.159.04 matches libnvidia-ml 580.159.04, "
                                         "libcuda 580.159.04 (on disk)")


async def test_a_prepared_root_tree_through_the_root_argument(tmp_path):
    root = tmp_path / "root"
    module_file(root, "590.48.01")
    lib(root, "/usr/local/nvidia/lib64", "libnvidia-ml.so", "565.57.01")
    lib(root, "/usr/lib/x86_64-linux-gnu", "libcuda.so", "590.48.01")
    lib(root, "/usr/lib/x86_64-linux-gnu", "libnvidia-ml.so", "535.104.05", link=False)  # stray, not linked: unused
    got = await checks(plain_host(), plan_for(), root=str(root), py_spy=False)
    f = only(got["driver-library-mismatch"])
    assert f.data == {"module_version": "590.48.01", "library_versions": ["565.57.01"]}
    assert "/usr/local/nvidia/lib64/libnvidia-ml.so.565.57.01: libnvidia-ml 565.57.01" in readings(f)
    assert "535.104.05" not in readings(f)

    # a CUDA forward-compatibility libcuda newer than the module is on purpose
    root2 = tmp_path / "root2"
    module_file(root2, "590.48.01")
    lib(root2, "/usr/lib/x86_64-linux-gnu", "libnvidia-ml.so", "590.48.01")
    lib(root2, "/usr/local/cuda/compat", "libcuda.so", "595.45.04")
    got = await checks(plain_host(), plan_for(), root=str(root2), py_spy=False)
    assert got["driver-library-mismatch"].ok is True, got["driver-library-mismatch"]
    assert "libcuda 595.45.04" in got["driver-library-mismatch"].detail

    empty = tmp_path / "empty"
    module_file(empty, "590.48.01")
    got = await checks(plain_host(), plan_for(), root=str(empty), py_spy=False)
    assert got["driver-library-mismatch"].ok is None and "no libnvidia-ml / libcuda found" in \
        got["driver-library-mismatch"].detail


async def test_the_libraries_a_running_server_maps_win_over_the_files(tmp_path, spawn):
    """A real process mapping a libcuda.so.565.57.01 file (as a CUDA process maps the driver's):
    /proc/PID/maps names the library the server really loaded."""
    root = tmp_path / "root"
    module_file(root, "590.48.01")
    lib(root, "/usr/lib/x86_64-linux-gnu", "libcuda.so", "590.48.01")  # on disk: matches
    mapped = tmp_path / "container/usr/lib/x86_64-linux-gnu/libcuda.so.565.57.01"
    mapped.parent.mkdir(parents=True)
    mapped.write_bytes(b"\x7fELF" + b"\0" * 4096)
    server = spawn([sys.executable, "-c", "import mmap, sys\nf = open(sys.argv[1], 'rb')\n"
                    "m = mmap.mmap(f.fileno(), 0, access=mmap.ACCESS_READ)\nprint('mapped', flush=True)\n"
                    "sys.stdin.read()", str(mapped)], stdin=subprocess.PIPE)
    assert server.stdout.readline().strip() == "mapped"
    got = await checks(plain_host(), plan_for(), root=str(root), server_pids=[server.pid], py_spy=False)
    f = only(got["driver-library-mismatch"])
    assert "(mapped by the server)" in f.summary
    assert any(e.source == f"/proc/{server.pid}/maps" and e.reading == f"{mapped}: libcuda 565.57.01"
               for e in f.evidence)


# ------------------------------------------------------------------ NVML init, CUDA driver vs torch


async def test_nvml_init_error_and_pass(simdir):
    sim, host = sim_host(simdir / "a", nvml="driver-not-loaded")
    got = await checks(host, plan_for())
    r = got["nvml-init"]
    assert r.ok is False and r.findings[0].code == "nvml-init-error"
    assert "Driver Not Loaded" in r.findings[0].summary and "modprobe nvidia" in r.findings[0].fix.summary
    assert got["driver-library-mismatch"].ok is None  # no /proc/driver/nvidia/version: nothing to compare
    sim, host = sim_host(simdir / "b")
    got = await checks(host, plan_for())
    assert got["nvml-init"].ok is True and got["nvml-init"].detail == "NVML 13.580.159.04, driver 580.159.04, CUDA 13.0"


@pytest.mark.parametrize("driver, torch_cuda, ok, severity", [
    ("565.57.01", "12.9", False, "warning"),  # CUDA 12.7 driver, cu129 torch: minor-version compatibility
    ("535.104.05", "13.0", False, "error"),  # CUDA 12.2 driver, cu130 torch
    ("580.159.04", "12.9", True, None),  # CUDA 13.0 driver
])
async def test_cuda_driver_against_torchs_cuda(simdir, driver, torch_cuda, ok, severity):
    sim, host = sim_host(simdir, driver_version=driver, torch_cuda=torch_cuda)
    r = (await checks(host, plan_for()))["cuda-driver-too-old"]
    assert r.ok is ok, r
    if ok:
        assert r.detail == "driver CUDA 13.0 >= torch 2.9.1+cu%s's CUDA %s" % (torch_cuda.replace(".", ""), torch_cuda)
        return
    f = only(r)
    assert f.severity == severity and f"built for CUDA {torch_cuda}" in f.summary
    assert f"cuda = '{torch_cuda}'" in readings(f) and str(sim.directory / "lib/torch/version.py") in readings(f)


async def test_no_torch_cannot_be_checked(simdir):
    sim, host = sim_host(simdir)
    r = (await checks(host, plan_for()))["cuda-driver-too-old"]
    assert r.ok is None and "no torch for" in r.detail


# ------------------------------------------------------------------ P2P / IOMMU


async def test_p2p_iommu_translating_on_a_pcie_path_fires(simdir):
    sim, host = sim_host(simdir, iommu="translated")
    sim.update_state(gpu_link="PHB")
    got = await checks(host, plan_for())
    f = only(got["p2p-unavailable"])
    assert f.severity == "warning" and "IOMMU translates DMA" in f.summary
    ev = readings(f)
    assert "nvidia-smi topo -m GPU0-GPU1 PHB" in ev
    assert "GPU0: IOMMU group 10 type DMA-FQ" in ev and "GPU1: IOMMU group 11 type DMA-FQ" in ev
    assert f.fix.applicable and f.fix.plan_patch == {"set_env": {"NCCL_P2P_DISABLE": "1"}}
    assert f.data == {"links": {"0-1": "PHB"}, "iommu": "translated"}


async def test_p2p_nvml_refusal_and_sev_snp_fire(simdir):
    sim, host = sim_host(simdir / "a")
    sim.update_state(p2p_status=2)  # NVML_P2P_STATUS_GPU_NOT_SUPPORTED (consumer cards)
    f = only((await checks(host, plan_for()))["p2p-unavailable"])
    assert "GPU0-GPU1 P2P read GPU_NOT_SUPPORTED, write GPU_NOT_SUPPORTED" in readings(f)
    sim, host = sim_host(simdir / "b", iommu="sev-snp")  # NVLink, but a confidential VM
    f = only((await checks(host, plan_for()))["p2p-unavailable"])
    assert "confidential-computing" in f.summary
    assert "Memory Encryption Features active: AMD SEV SEV-ES SEV-SNP" in readings(f)


@pytest.mark.parametrize("iommu, link, plan, detail", [
    ("off", None, plan_for(), "GPU0-GPU1 NV18; NVML P2P read/write OK; IOMMU off"),
    ("pt", "PHB", plan_for(), "GPU0-GPU1 PHB; NVML P2P read/write OK; IOMMU pass-through"),
    ("translated", None, plan_for(), "GPU0-GPU1 NV18; NVML P2P read/write OK; IOMMU translated"),  # NVLink path
    ("translated", "PHB", plan_for((0,)), "one GPU: no peer-to-peer between ranks"),
    ("translated", "PHB", plan_for(env={"NCCL_P2P_DISABLE": "1"}),
     "NCCL_P2P_DISABLE=1 is set: NCCL does not use peer-to-peer"),
])
async def test_p2p_passes(simdir, iommu, link, plan, detail):
    sim, host = sim_host(simdir, iommu=iommu)
    if link:
        sim.update_state(gpu_link=link)
    r = (await checks(host, plan))["p2p-unavailable"]
    assert (r.ok, r.detail) == (True, detail)


async def test_p2p_cannot_be_told_when_neither_topo_nor_nvml_answers(simdir):
    sim, host = sim_host(simdir, driver_version="590.48.01", nvml="mismatch")
    r = (await checks(host, plan_for()))["p2p-unavailable"]
    assert r.ok is None and r.detail == (
        "links unknown (Failed to initialize NVML: Driver/library version mismatch); "
        "NVML P2P N/A (RM has detected an NVML/RM version mismatch.); IOMMU off")


async def test_nvml_p2p_index_quirk_is_a_hint_not_a_crash(simdir):
    sim, host = sim_host(simdir)
    doc = await triage.run_probe(host, plan_for(), py_spy=False)
    assert doc["nvml"]["p2p"] == [{"a": 0, "b": 1, "read": "OK", "write": "OK", "nvlink": "OK"}]
    assert any("NVML_P2P_CAPS_INDEX_READ is the tuple (0,)" in h for h in doc["nvml"]["hints"])


def test_parse_topo_of_a_real_matrix_with_a_nic():
    text = ("\t\x1b[4mGPU0\tGPU1\tGPU2\tNIC0\tCPU Affinity\tNUMA Affinity\tGPU NUMA ID\x1b[0m\n"
            "GPU0\t X \tNV18\tSYS\tPXB\t0-47,96-143\t0\t\tN/A\n"
            "GPU1\tNV18\t X \tSYS\tPXB\t0-47,96-143\t0\t\tN/A\n"
            "GPU2\tSYS\tSYS\t X \tSYS\t48-95,144-191\t1\t\tN/A\n"
            "NIC0\tPXB\tPXB\tSYS\t X \t\t\t\t\n\nLegend:\n\n  X    = Self\n  NV#  = Connection traversing a bonded "
            "set of # NVLinks\n\nNIC Legend:\n\n  NIC0: mlx5_0\n")
    assert triage.parse_topo(text) == {(0, 1): "NV18", (0, 2): "SYS", (1, 2): "SYS"}


# ------------------------------------------------------------------ /dev/shm


async def test_shm_threshold_on_a_real_directory(simdir):
    """The probe reads /dev/shm under the root with statvfs: a real directory, so its size is
    that of the filesystem it lives on. The threshold is what decides."""
    sim, host = sim_host(simdir)
    st = os.statvfs(simdir / "root/dev/shm")
    total = st.f_blocks * st.f_frsize
    assert total > triage.SHM_MIN_BYTES  # this machine's tmp filesystem is bigger than 1 GiB
    r = (await checks(host, plan_for()))["shm-too-small"]
    assert r.ok is True and r.detail.endswith("(>= 1.00 GiB for TP 2)")
    f = only((await checks(reach(sim), plan_for(), shm_min_bytes=total + 1))["shm-too-small"])
    assert f.data["total_bytes"] == total and f.data["min_bytes"] == total + 1 and "total, under" in f.summary
    assert f.evidence[0].source == str(simdir / "root/dev/shm")
    # TP 1: no NCCL between ranks, whatever the size
    r = (await checks(reach(sim), plan_for((0,)), shm_min_bytes=total + 1))["shm-too-small"]
    assert r.ok is True and "TP 1" in r.detail


async def test_a_server_in_its_own_root_is_read_through_proc_pid_root(simdir, spawn, tmp_path):
    """A server whose root is not the host's (a container; here a real process that chroot()s):
    its /dev/shm and the driver libraries it would load are read under /proc/PID/root."""
    if os.geteuid() != 0:
        pytest.skip("needs root to chroot a process")
    sim, host = sim_host(simdir)
    container = tmp_path / "container"
    (container / "dev/shm").mkdir(parents=True)
    lib(container, "/usr/lib/x86_64-linux-gnu", "libnvidia-ml.so", "565.57.01")
    server = spawn([sys.executable, "-c", "import os, sys, time\nos.chroot(sys.argv[1])\nprint('in', flush=True)\n"
                    "time.sleep(600)", str(container)])
    assert server.stdout.readline().strip() == "in"
    doc = await triage.run_probe(host, plan_for(), server_pids=[server.pid], py_spy=False)
    assert doc["server_root"] == f"/proc/{server.pid}/root"
    assert doc["shm"]["path"] == f"/proc/{server.pid}/root/dev/shm"
    assert doc["libraries"]["files"] == [{"kind": "nvml", "path": "/usr/lib/x86_64-linux-gnu/libnvidia-ml.so.565.57.01",
                                          "version": "565.57.01", "compat": False, "pid": None}]
    # a server sharing the host's root: the host's files (here the simulated host's tree)
    plain = spawn(["sleep", "3001.25"])
    doc = await triage.run_probe(reach(sim), plan_for(), server_pids=[plain.pid], py_spy=False)
    assert doc["server_root"] is None and doc["shm"]["path"] == str(simdir / "root/dev/shm")


# ------------------------------------------------------------------ ports


def listener() -> socket.socket:
    s = socket.socket()
    s.bind(("127.0.0.1", 0))
    s.listen()
    return s


async def test_a_real_listener_on_the_server_and_dist_init_ports(simdir):
    sim, host = sim_host(simdir)
    with listener() as a, listener() as b:
        port, dist = a.getsockname()[1], b.getsockname()[1]
        plan = plan_for(port=port, argv=["--dist-init-addr", f"127.0.0.1:{dist}"])
        got = await checks(host, plan)
        for f in got["port-in-use"].findings:  # the fixes applied: both ports move, and the check passes
            plan = apply_patch(plan, f.fix.plan_patch)[0]
        again = (await checks(reach(sim), plan))["port-in-use"]
        assert again.ok is True and again.detail.startswith(f"server {plan.port} free; dist-init ")
    r = got["port-in-use"]
    assert r.ok is False and len(r.findings) == 2
    server, rendezvous = r.findings
    assert server.summary.startswith(f"the server port {port} is already in use by pid {os.getpid()} (")
    assert f"127.0.0.1:{port} LISTEN pid {os.getpid()}" in readings(server)
    spare = server.fix.plan_patch["port"]
    assert server.fix.applicable and spare > port and spare != dist
    assert rendezvous.data["what"] == "dist-init" and rendezvous.fix.plan_patch == {
        "set_flags": {"--dist-init-addr": [f"127.0.0.1:{rendezvous.data['free_port']}"]}}


async def test_nccl_port_taken_and_ports_held_by_the_deployment_itself(simdir, spawn):
    sim, host = sim_host(simdir)
    with listener() as a:
        taken = a.getsockname()[1]
        r = (await checks(host, plan_for(port=1, argv=["--nccl-port", str(taken)])))["port-in-use"]
        assert only(r).fix.plan_patch == {"set_flags": {"--nccl-port": [str(only(r).data["free_port"])]}}
    # the deployment's own server (a child of the pid gpuops knows) listening on its port: a pass
    server = spawn([sys.executable, "-c", "import socket, subprocess, sys\n"
                    "kid = subprocess.Popen([sys.executable, '-c', 'import socket, time\\ns = socket.socket()\\n"
                    "s.bind((\"127.0.0.1\", 0))\\ns.listen()\\nprint(s.getsockname()[1], flush=True)\\n"
                    "time.sleep(600)'], stdout=subprocess.PIPE, text=True)\n"
                    "print(kid.stdout.readline().strip(), flush=True)\nkid.wait()"])
    port = int(server.stdout.readline())
    got = await checks(reach(sim), plan_for(port=port), server_pids=[server.pid], py_spy=False)
    r = got["port-in-use"]
    assert r.ok is True and r.detail.startswith(f"server {port} held by the deployment; dist-init port: SGLang picks")


# ------------------------------------------------------------------ leftover GPU processes


async def test_a_real_process_on_the_plans_gpus_is_a_leftover(simdir, spawn):
    sim, host = sim_host(simdir, gpus=4)
    ours, other, elsewhere = spawn(["sleep", "3002.5"]), spawn(["sleep", "3003.75"]), spawn(["sleep", "3004.5"])
    sim.set_gpu(0, processes=[{"pid": ours.pid, "used": 40 * GIB}, {"pid": other.pid, "used": 2 * GIB}])
    sim.set_gpu(3, processes=[{"pid": elsewhere.pid, "used": GIB}])  # not one of the plan's GPUs
    got = await checks(host, plan_for((0, 1)), server_pids=[ours.pid])
    f = only(got["leftover-gpu-process"])
    assert f.data["processes"] == [{"gpu": 0, "pid": other.pid, "user": pwd.getpwuid(os.getuid()).pw_name,
                                    "command": "sleep 3003.75", "used_bytes": 2 * GIB}]
    assert f"pid {other.pid}" in f.summary and "asks first" in f.fix.summary and not f.fix.applicable
    sim.set_gpu(0, processes=[{"pid": ours.pid, "used": 40 * GIB}])
    r = (await checks(reach(sim), plan_for((0, 1)), server_pids=[ours.pid]))["leftover-gpu-process"]
    assert (r.ok, r.detail) == (True, "no other process on GPU0, GPU1")  # the deployment's own is no leftover


# ------------------------------------------------------------------ py-spy


async def test_real_py_spy_dumps_each_rank(simdir, spawn):
    """Two rank processes titled as SGLang titles them (argv[0] ``sglang::scheduler_TP0``, as
    setproctitle leaves /proc/PID/cmdline), children of the server pid: one real dump each."""
    sim, host = sim_host(simdir)
    server = spawn([sys.executable, "-c", "import subprocess, sys, time\n"
                    f"kids = [subprocess.Popen(['sglang::scheduler_TP%d' % r, '-c', {RANK_CODE!r}], "
                    "executable=sys.executable) for r in range(2)]\nprint('up', flush=True)\ntime.sleep(600)"])
    # the server and both ranks said they are up (the ranks print to the server's stdout): every
    # dump then finds rank_loop on its stack (one taken earlier, under load, was still importing)
    assert sorted(server.stdout.readline().strip() for _ in range(3)) == ["rank", "rank", "up"]
    got = await checks(host, plan_for(), server_pids=[server.pid])
    r = got["py-spy"]
    assert r.ok is True and r.detail.startswith("dumped TP0 ") and ", TP1 " in r.detail
    dumps = triage.stacks(got.values())
    assert [d["rank"] for d in dumps] == ["TP0", "TP1"]
    for d in dumps:
        assert d["ok"] and d["native"] is True and d["title"].startswith("sglang::scheduler_TP")
        assert "rank_loop (<string>:4)" in d["text"] and f"Process {d['pid']}" in d["text"]


async def test_no_py_spy_on_the_host_or_no_server(tmp_path, monkeypatch):
    # a python with nothing beside it, and a PATH without py-spy
    bare = tmp_path / "bin"
    bare.mkdir()
    os.symlink(os.path.realpath(sys.executable), bare / "python3")
    monkeypatch.setenv("PATH", "/usr/bin:/bin")
    r = (await checks(plain_host(), plan_for(python=str(bare / "python3")), server_pids=[os.getpid()]))["py-spy"]
    assert r.ok is None and r.detail.startswith(f"py-spy is not installed next to {bare / 'python3'}")
    r = (await checks(plain_host(), plan_for()))["py-spy"]
    assert r.ok is None and r.detail == "the server is not running: no stacks to dump"


# ------------------------------------------------------------------ the kernel log: which one


async def test_the_kernel_log_says_where_it_came_from(simdir):
    sim, host = sim_host(simdir, iommu="pt")
    doc = await triage.run_probe(host, plan_for(), py_spy=False)
    assert doc["kernel"]["log_source"] == "file:/var/log/kern.log"  # a prepared tree: never this machine's dmesg
    assert "[    0.391502] iommu: Default domain type: Passthrough (set via kernel command line)" in \
        doc["kernel"]["log_lines"]
    doc = await triage.run_probe(plain_host(), plan_for(), py_spy=False)  # root /: the live ring buffer
    kernel = doc["kernel"]
    assert kernel["log_source"] == "dmesg" or kernel["log_error"].startswith("dmesg: "), kernel


# ------------------------------------------------------------------ over real SSH


async def test_every_check_over_ssh_against_the_simulated_host(simdir, sshd, spawn):
    sim, host = sim_host(simdir, sshd, driver_version="590.48.01", nvml="mismatch", iommu="sev-snp",
                         torch_cuda="12.9")
    with listener() as a:
        got = await checks(host, plan_for(port=a.getsockname()[1]))
    assert {n: r.ok for n, r in got.items()} == {
        "driver-library-mismatch": False, "nvml-init": False, "cuda-driver-too-old": None, "p2p-unavailable": False,
        "shm-too-small": True, "port-in-use": False, "leftover-gpu-process": None, "py-spy": None}
    assert only(got["driver-library-mismatch"]).data["library_versions"] == ["565.57.01"]
    # sshd's user cannot see root's socket owner: said, not guessed
    holder = got["port-in-use"].findings[0].data["holders"][0]
    assert holder["pid"] in (os.getpid(), None)
    json.dumps([f.to_json() for f in triage.findings(got.values())])  # plain data all the way
