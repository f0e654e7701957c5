"""A stand-in SGLang server whose dist_init is a REAL NCCL rendezvous (tests/gpu/check_nccl_stall.py).

Run as the plan's "python -m sglang.launch_server --tp N --port P [--hold-back-rank R
--hold-back-s S]": the main process prints SGLang's ``server_args=`` line and starts N rank
processes; each prints SGLang 0.5.10's ``[ts TPr] Init torch distributed begin.``, then joins a
real ``torch.distributed`` NCCL group (world size N) and runs an all_reduce, which is where
NCCL's communicator is built (``ncclCommInitRank``). A rank held back sleeps before joining:
forever (``--hold-back-s -1``: the others wait in the rendezvous, as in a real 2x H200 run's
reproduction and the seed's ten-minute hang) or for S seconds (a slow peer that does join).
After the rendezvous each rank loads "weights" (a real 2 GiB allocation, so NVML sees memory
move) and the main process prints SGLang's ready lines.
"""

from __future__ import annotations

import argparse
import datetime
import multiprocessing as mp
import os
import sys
import time

BACKEND = os.environ.get("GPUOPS_STANDIN_BACKEND", "nccl")  # "gloo": CPU smoke run of the plumbing


def log(rank: int | None, msg: str) -> None:
    ts = datetime.datetime.now().strftime("%Y-%m-%d %H:%M:%S")
    prefix = f" TP{rank}" if rank is not None else ""
    print(f"[{ts}{prefix}] {msg}", flush=True)


def rank_main(rank: int, world: int, port: int, hold_rank: int | None, hold_s: float) -> None:
    import torch
    import torch.distributed as dist

    log(rank, "Init torch distributed begin.")
    if rank == hold_rank:
        if hold_s < 0:
            while True:  # held back for good: alive, never joining
                time.sleep(3600)
        time.sleep(hold_s)
    t0 = time.time()
    if BACKEND == "gloo":  # a CPU-only smoke run of the plumbing (no GPU): no CUDA at all
        dist.init_process_group("gloo", init_method=f"tcp://127.0.0.1:{port}", rank=rank, world_size=world)
        log(rank, f"Init torch distributed ends. elapsed={time.time() - t0:.2f} s, mem usage=0.00 GB")
        log(rank, "Load weight begin. avail mem=0.00 GB")
        log(rank, "Load weight end. elapsed=0.01 s, type=StandIn, avail mem=0.00 GB, mem usage=0.00 GB.")
        dist.barrier()
        dist.destroy_process_group()
        return
    torch.cuda.set_device(rank)
    dist.init_process_group("nccl", init_method=f"tcp://127.0.0.1:{port}", rank=rank, world_size=world,
                            timeout=datetime.timedelta(hours=2))
    x = torch.ones(1024, device=f"cuda:{rank}")
    dist.all_reduce(x)  # builds the NCCL communicator
    torch.cuda.synchronize()
    log(rank, f"sglang is using nccl=={'.'.join(map(str, torch.cuda.nccl.version()))}")
    used = torch.cuda.memory_reserved(rank) / 2**30
    log(rank, f"Init torch distributed ends. elapsed={time.time() - t0:.2f} s, mem usage={used:.2f} GB")
    free, _ = torch.cuda.mem_get_info(rank)
    log(rank, f"Load weight begin. avail mem={free / 2**30:.2f} GB")
    t1 = time.time()
    weights = torch.empty(2 * 2**30, dtype=torch.uint8, device=f"cuda:{rank}")
    weights.fill_(1)
    torch.cuda.synchronize()
    free, _ = torch.cuda.mem_get_info(rank)
    log(rank, f"Load weight end. elapsed={time.time() - t1:.2f} s, type=StandIn, avail mem={free / 2**30:.2f} GB, "
              f"mem usage={weights.numel() / 2**30:.2f} GB.")
    dist.barrier()
    time.sleep(2)
    dist.destroy_process_group()


def main(argv: list[str]) -> int:
    if argv[:2] == ["-m", "sglang.launch_server"]:
        argv = argv[2:]
    p = argparse.ArgumentParser()
    p.add_argument("--tp", type=int, default=2)
    p.add_argument("--port", type=int, default=30000)
    p.add_argument("--hold-back-rank", type=int, default=None)
    p.add_argument("--hold-back-s", type=float, default=-1)
    p.add_argument("--nccl-port", type=int, default=29511)
    a, _ = p.parse_known_args(argv)
    log(None, f"server_args=ServerArgs(model_path='stand-in', tp_size={a.tp}, port={a.port})")
    ctx = mp.get_context("spawn")
    procs = [ctx.Process(target=rank_main, args=(r, a.tp, a.nccl_port, a.hold_back_rank, a.hold_back_s))
             for r in range(a.tp)]
    for proc in procs:
        proc.start()
    for proc in procs:
        proc.join()
    if any(proc.exitcode for proc in procs):
        log(None, f"Received sigquit from a child process. It usually means the child failed. "
                  f"exit codes {[proc.exitcode for proc in procs]}")
        return 1
    print(f"INFO:     Uvicorn running on http://127.0.0.1:{a.port} (Press CTRL+C to quit)", flush=True)
    log(None, "The server is fired up and ready to roll!")
    time.sleep(3600)  # serve (the watcher returns at ready; the script stops us)
    return 0


if __name__ == "__main__":
    os.environ.setdefault("NCCL_DEBUG", "WARN")
    sys.exit(main(sys.argv[1:]))
