"""`gpuops sim setup` and `gpuops demo`: the entry points of the simulated host (the only modules
outside gpuops.sim that import it)."""

from __future__ import annotations

import argparse
import sys

from .common import UsageError
from .dashboard import run_dashboard


def cmd_sim_setup(args: argparse.Namespace) -> int:
    from ..core.config import SshTarget, validate_host_name
    from ..sim.host import check_setup_dir, setup_simhost

    try:  # every argument checked before anything is written
        validate_host_name(args.name)
    except ValueError as exc:
        raise UsageError(f"--name: {exc}") from None
    if args.gpus < 1 or args.gpus > 64:
        raise UsageError(f"--gpus must be 1..64, got {args.gpus}")
    if args.gpu_memory is not None and not 1 <= args.gpu_memory <= 4096:
        raise UsageError(f"--gpu-memory must be 1..4096 GiB, got {args.gpu_memory:g}")
    if args.ssh is not None:
        try:
            SshTarget.parse(args.ssh)
        except ValueError as exc:
            raise UsageError(f"--ssh: {exc}") from None
    try:
        # before anything is written: not a system location, HOME, a '..' path or a folder that
        # holds something else (setup runs again on a simulated host's own directory)
        check_setup_dir(args.dir)
        memory = {} if args.gpu_memory is None else {"gpu_memory_gib": args.gpu_memory}
        sim = setup_simhost(args.dir, gpus=args.gpus, nvml=args.nvml, engine_version=args.sglang_version,
                            scenario=args.scenario, pace=args.pace, engine_venv=args.sglang_venv, **memory)
    except ValueError as exc:
        raise UsageError(str(exc)) from None
    except OSError as exc:
        from ..core.paths import show_path

        where = show_path(exc.filename) if isinstance(exc.filename, str) else show_path(args.dir)
        print(f"gpuops: cannot write the simulated host: {where}: {exc.strerror or exc}", file=sys.stderr)
        return 1
    print(sim.host_block(args.name, ssh=args.ssh), end="")
    return 0


def cmd_demo(args: argparse.Namespace) -> int:
    import tempfile

    from ..core.config import parse_inventory
    from ..sim.host import resolve_server, server_scenarios, setup_simhost

    try:  # the small server's scenarios (or those of the server GPUOPS_SIM_SERVER names)
        known = server_scenarios(resolve_server())
    except ValueError as exc:
        raise UsageError(str(exc)) from None
    if args.scenario not in known:
        raise UsageError(f"--scenario must be one of {', '.join(known)}, got {args.scenario!r}")
    with tempfile.TemporaryDirectory(prefix="gpuops-demo-") as tmp:
        sim = setup_simhost(tmp, gpus=args.gpus, scenario=args.scenario)
        inv = parse_inventory(sim.host_block("sim"), source=f"{tmp}/demo.toml")
        return run_dashboard(inv, readonly=getattr(args, "readonly", False), simulated=True)


