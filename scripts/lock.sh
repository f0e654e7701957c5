#!/usr/bin/env bash
# Refresh the locks on purpose: resolve gpuops' dependencies (with its test extras) and the SGLang
# host virtualenv's afresh, from PyPI as it is today, and write exactly what was installed to
#   locks/gpuops.txt        the test environment and the README's install (pip -c)
#   locks/sglang-host.txt   the SGLang "host" virtualenv (pip --no-deps -r: exactly this set)
# Nothing else changes them: a new release upstream changes nothing until someone runs this, runs
# the suite, and commits the new lock (its diff says what moved).
#   usage: scripts/lock.sh [gpuops|sglang-host|all]     (default: all)
set -euo pipefail
cd "$(dirname "$0")/.."
WHAT=${1:-all}
PY=${PYTHON:-python3}
TMP=$(mktemp -d)
trap 'rm -rf "$TMP"' EXIT

header() {  # $1: what the lock is for
    echo "# $1"
    echo "# Written by scripts/lock.sh on $(date -u +%Y-%m-%d) with $("$PY" -V 2>&1) on $(uname -m); refresh it with that script, never by hand."
}

if [ "$WHAT" = all ] || [ "$WHAT" = gpuops ]; then
    echo "== resolving gpuops[test] afresh"
    "$PY" -m venv "$TMP/gpuops"
    "$TMP/gpuops/bin/python" -m pip install -q --disable-pip-version-check '.[test]' >"$TMP/gpuops.log" 2>&1 \
        || { tail -n 40 "$TMP/gpuops.log" >&2; exit 1; }
    { header "gpuops and its test dependencies: pip install -c locks/gpuops.txt -e '.[test]'"
      "$TMP/gpuops/bin/python" -m pip freeze --all --exclude gpuops --exclude pip --exclude setuptools --exclude wheel \
          | LC_ALL=C sort -f; } >locks/gpuops.txt
    echo "== locks/gpuops.txt: $(grep -vc '^#' locks/gpuops.txt) distributions"
fi

if [ "$WHAT" = all ] || [ "$WHAT" = sglang-host ]; then
    echo "== resolving the SGLang host virtualenv afresh (a few minutes, ~6 GB)"
    GPUOPS_HOST_VENV_RESOLVE=1 bash scripts/sglang-host-venv.sh "$TMP/host"
    { header "the SGLang host virtualenv: pip install --no-deps -r locks/sglang-host.txt (scripts/sglang-host-venv.sh)"
      "$TMP/host/bin/python" -m pip freeze --all --exclude pip --exclude setuptools --exclude wheel \
          | LC_ALL=C sort -f; } >locks/sglang-host.txt
    if grep -q ' @ ' locks/sglang-host.txt; then
        echo "locks/sglang-host.txt names a file, not a version: $(grep ' @ ' locks/sglang-host.txt)" >&2; exit 1
    fi
    echo "== locks/sglang-host.txt: $(grep -vc '^#' locks/sglang-host.txt) distributions"
fi
