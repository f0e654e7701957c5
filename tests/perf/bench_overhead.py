#!/usr/bin/env python3
"""What gpuops adds to a benchmark: SGLang's real bench_serving against the same simulated
server with the same arguments, run directly (the host venv's python, locally) and through gpuops
(`gpuops bench --url ... --host sim` over a real sshd on 127.0.0.1: SSH, the guard, the relay,
progress parsing, the store), alternating A B B A so drift hits both equally. Prints each run's
output throughput and the ratio gpuops / direct of the medians (goal: 0.95-1.05).

    GPUOPS_TEST_SGLANG_VENV=DIR .venv/bin/python tests/perf/bench_overhead.py [--rounds 3] [--prompts 160]

The arguments are the ones gpuops builds (core.bench.serving_argv) for the profile below, so both
sides run the same command line.
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import sqlite3
import statistics
import subprocess
import sys
import tempfile
from pathlib import Path

REPO = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(REPO))

from gpuops.core.bench import runner as bench  # noqa: E402
from gpuops.core.config import HostConfig  # noqa: E402
from gpuops.core.hosts.host import LocalHost  # noqa: E402
from gpuops.sim.host import setup_simhost  # noqa: E402
from tests.sshd import start_sshd  # noqa: E402
from tests.test_sglang_sim import QWEN3, Server, model_dir  # noqa: E402

GPUOPS = str(Path(sys.executable).with_name("gpuops"))


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--rounds", type=int, default=3, help="A B B A pairs (default 3)")
    ap.add_argument("--prompts", type=int, default=160)
    ap.add_argument("--concurrency", type=int, default=16)
    ap.add_argument("--venv", default=os.environ.get("GPUOPS_TEST_SGLANG_VENV"), help="the SGLang host venv")
    args = ap.parse_args()
    if not args.venv:
        sys.exit("set GPUOPS_TEST_SGLANG_VENV (or --venv) to the SGLang host venv (scripts/sglang-host-venv.sh)")
    venv = Path(args.venv).resolve()
    root = Path(tempfile.mkdtemp(prefix="gpuops-bench-perf-"))
    root.chmod(0o755)
    sshd = start_sshd(root / "sshd")
    server = None
    try:
        model = model_dir(root / "models", QWEN3, 16_381_470_720, shards=5)
        subprocess.run([str(venv / "bin" / "python"), str(REPO / "tests/data/bench/make_tokenizer.py"), str(model)],
                       check=True, capture_output=True)
        sim = setup_simhost(root / "sim", gpus=1, engine_version="0.5.23", pace=0.02, engine_venv=str(venv),
                            server=REPO / "tests" / "simhost")  # the scenario engine: SGLang's whole API
        sim.set_sim(token_delay_s=0.005)
        server = Server(sim, "--model-path", model, "--enable-metrics")
        server.wait_for("fired up", timeout=60)

        home = root / "home"
        (home / ".ssh").mkdir(parents=True)
        shutil.copy(sshd.client_key, home / ".ssh" / "id_ed25519")
        os.chmod(home / ".ssh" / "id_ed25519", 0o600)
        shutil.copy(sshd.known_hosts, home / ".ssh" / "known_hosts")
        settings = {"num_prompts": args.prompts, "max_concurrency": args.concurrency, "random_input_len": 256,
                    "random_output_len": 128, "warmup_requests": 1}
        cfg = root / "gpuops.toml"
        cfg.write_text(sim.host_block("sim", ssh=sshd.target()) + "\n[bench.profiles.perf]\n"
                       + "".join(f"{k} = {v}\n" for k, v in settings.items()))
        env = dict(os.environ, HOME=str(home), XDG_STATE_HOME=str(root / "state"),
                   XDG_CONFIG_HOME=str(root / "cfg"))
        env.pop("GPUOPS_CONFIG", None)

        profile = bench.resolve_profile("perf", {"perf": settings})
        target = bench.Target(host=LocalHost(HostConfig(name="direct", local=True, ssh=None, python=None)),
                              url=server.url, home=str(root))

        def direct(i: int) -> float:
            out = root / f"direct-{i}.jsonl"
            argv = bench.serving_argv(str(venv / "bin" / "python"), "sglang.benchmark.serving", target, profile,
                                      args.concurrency, str(out))
            subprocess.run(argv, check=True, capture_output=True, cwd=root)
            return json.loads(out.read_text())["output_throughput"]

        def through_gpuops(i: int) -> float:
            res = subprocess.run([GPUOPS, "--config", str(cfg), "bench", "--url", server.url, "--host", "sim",
                                  "--profile", "perf", "--json"], capture_output=True, text=True, env=env)
            events = [json.loads(line) for line in res.stdout.splitlines()]
            if res.returncode != 0:
                sys.exit(f"gpuops bench failed: {res.stderr}{events[-1] if events else ''}")
            return next(e for e in events if e["event"] == "result")["summary"]["output_throughput"]

        figures: dict[str, list[float]] = {"direct": [], "gpuops": []}
        for r in range(args.rounds):
            order = [("direct", direct), ("gpuops", through_gpuops)]
            for name, fn in order if r % 2 == 0 else order[::-1]:
                figures[name].append(fn(r))
                print(f"round {r + 1} {name:7} {figures[name][-1]:9.1f} tok/s", flush=True)
        d, g = statistics.median(figures["direct"]), statistics.median(figures["gpuops"])
        print(f"\noutput throughput, median of {args.rounds}: direct {d:.1f} tok/s, through gpuops {g:.1f} tok/s")
        print(f"ratio gpuops/direct: {g / d:.3f} (goal 0.95-1.05; per round: "
              + ", ".join(f"{a / b:.3f}" for a, b in zip(figures["gpuops"], figures["direct"])) + ")")
        return 0
    finally:
        if server is not None:
            server.stop()
        sshd.stop()
        db = root / "state" / "gpuops" / "gpuops.db"
        if db.exists():  # the run folders gpuops left on the "host"
            for (remote_dir,) in sqlite3.connect(db).execute("SELECT remote_dir FROM bench_runs"):
                shutil.rmtree(remote_dir, ignore_errors=True)
        shutil.rmtree(root, ignore_errors=True)


if __name__ == "__main__":
    sys.exit(main())
