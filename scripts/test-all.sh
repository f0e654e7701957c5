#!/usr/bin/env bash
# Install everything the tests need on a fresh Debian/Ubuntu machine, then run them all.
# System packages: openssh-server (a real sshd on 127.0.0.1), tmux (the real-terminal check),
# systemd-journal-remote (writes real journal files that the real journalctl follows).
# The tests start the services they use themselves (sshd on a free port).
set -euo pipefail
cd "$(dirname "$0")/.."

need=()
command -v sshd >/dev/null 2>&1 || [ -x /usr/sbin/sshd ] || need+=(openssh-server)
command -v tmux >/dev/null 2>&1 || need+=(tmux)
command -v ssh-keygen >/dev/null 2>&1 || need+=(openssh-client)
[ -x /lib/systemd/systemd-journal-remote ] || need+=(systemd-journal-remote)  # real journal files (and journalctl)
if [ ${#need[@]} -gt 0 ]; then
    SUDO=""; [ "$(id -u)" -eq 0 ] || SUDO="sudo"
    echo "== installing system packages: ${need[*]}"
    $SUDO apt-get update -qq
    DEBIAN_FRONTEND=noninteractive $SUDO apt-get install -y -qq "${need[@]}" >/dev/null
fi

PY=${PYTHON:-python3}
if [ ! -x .venv/bin/python ]; then
    echo "== creating .venv"
    "$PY" -m venv .venv
fi
echo "== installing gpuops (editable) with its test dependencies, at the versions of locks/gpuops.txt"
.venv/bin/python -m pip install -q --disable-pip-version-check -c locks/gpuops.txt -e '.[test]'

echo "== the SGLang host virtualenv (real bench_serving, run_eval and the CPU server; locks/sglang-host.txt)"
bash scripts/sglang-host-venv.sh .cache/sglang-host-venv
export GPUOPS_TEST_SGLANG_VENV="$PWD/.cache/sglang-host-venv"

# Several test processes at once (pytest-xdist), a file to a worker: most tests wait on a server, an sshd or a
# subprocess, so 3 workers keep a 2-core machine busy. Each worker has its own sshd, and its sessions their own
# HOME (tests/sshd.py), so no two workers share a deployment's remote state; tests take free ports.
# GPUOPS_TEST_WORKERS=0 runs the suite in this one process.
WORKERS=${GPUOPS_TEST_WORKERS:-3}
echo "== running the test suite on $WORKERS workers (both tiers; the 40 slowest tests are listed at the end: tests/tiers.py)"
exec .venv/bin/python -m pytest -q -p no:cacheprovider --durations=40 -n "$WORKERS" --dist loadfile "$@"
