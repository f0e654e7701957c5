#!/usr/bin/env bash
# Build the "host" virtualenv: SGLang's real code as a GPU host would have it, for the tests that run
# bench_serving / run_eval over SSH against the simulated server, and for the tests that start the
# genuine `python -m sglang.launch_server --device cpu` through gpuops (tests/test_real_sglang.py).
#   usage: scripts/sglang-host-venv.sh DIR
# What goes in is exactly locks/sglang-host.txt (`pip install --no-deps -r`, and whatever the venv
# holds beyond it is removed): a release upstream changes nothing here until scripts/lock.sh is run
# on purpose. A venv already built from the same lock (its marker .gpuops-lock-HASH) is left as it is.
# Beside it, SGLang 0.5.10's code (--no-deps --target DIR/sglang-0.5.10, put first on PYTHONPATH by
# the test of the Qwen3.5 MTP crash: its ValueError exists in 0.5.10-0.5.13), marker .gpuops-ok.
#
# GPUOPS_HOST_VENV_RESOLVE=1 (scripts/lock.sh only) resolves the set afresh instead, from which the
# lock is written: the sglang wheel without its dependencies (most are for serving on a GPU), what the
# benchmark, the eval and the CPU server's imports need beside it, and both routers: smg (SGLang's
# gateway today) and sglang-router (its last release, what older hosts have). torch/torchvision
# are the CUDA builds that sglang's imports need (a CPU torch lacks torchvision's operators: 'operator
# torchvision::nms does not exist').
set -euo pipefail
DIR=${1:?usage: $0 DIR}
PY=${PYTHON:-python3}
HERE=$(cd "$(dirname "$0")/.." && pwd)
LOCK="$HERE/locks/sglang-host.txt"
VER=0.5.23        # the SGLang the resolve installs (the lock then says it)
OLD_VER=0.5.10    # the MTP-crash test's version
ROUTER_VER=0.3.2  # the last sglang-router on PyPI (its successor, smg, has no sglang_router module)
SMG_VER=1.13.0    # SGLang's gateway (PyPI smg), the router gpuops prefers where a host has it
# What `python -m sglang.launch_server --device cpu` imports beyond the base, at versions that worked
# with 0.5.23 (fastapi/starlette pinned: the newest fastapi imports opentelemetry, the newest
# starlette dropped on_startup). --no-deps: the rest of their requirements are in the base already.
SERVE_PINS=(uvicorn==0.54.0 fastapi==0.118.0 starlette==0.48.0 uvloop==0.23.0 setproctitle==1.3.8
    python-multipart==0.0.34 partial_json_parser==0.2.1.1.post7 interegular==0.3.3 blobfile==3.3.0
    einops==0.8.2 ninja==1.13.2 tiktoken==0.14.0 openai-harmony==0.0.8 xxhash==4.1.0 zstandard==0.25.0
    watchfiles==1.3.0 llguidance==1.9.1 xgrammar==0.2.7 jsonschema==4.26.0 referencing==0.37.0
    jsonschema-specifications==2025.9.1 rpds-py==2026.9.1 soundfile==0.14.0 cffi==2.1.1 pycparser==3.12
    h11==0.16.0 click==8.5.1 annotated-doc==0.0.7 typing-inspection==0.4.5 pycryptodomex==3.24.2
    lxml==6.1.3)
OLD="$DIR/sglang-$OLD_VER"
CHECK='import sglang.bench_serving, sglang.test.run_eval'  # the benchmark and the quality eval
SERVE_CHECK='import sglang.launch_server, sglang.srt.entrypoints.http_server, uvicorn, fastapi, xgrammar'
ROUTER_CHECK='import sglang_router.launch_router, sglang_router.sglang_router_rs, smg.launch_router, smg.smg_rs'
ALL_CHECK="$CHECK; $SERVE_CHECK; $ROUTER_CHECK; import httpx, openai"
LOG="$DIR.build.log"  # pip's output (its index warnings are many): shown only when it fails
PIP=("$DIR/bin/python" -m pip install -q --disable-pip-version-check)

names() { sed 's/[=@ ].*//; s/[_.]/-/g' | tr '[:upper:]' '[:lower:]' | sort -u; }  # PEP 503 names of freeze lines
imports_ok() { "$DIR/bin/python" -c "$ALL_CHECK" >/dev/null 2>&1; }

resolve() {  # scripts/lock.sh: today's PyPI, unpinned but for what must be
    echo "== resolving the SGLang host venv in $DIR (sglang $VER; a few minutes, ~6 GB)"
    rm -rf "$DIR"
    "$PY" -m venv "$DIR"
    "${PIP[@]}" torch==2.14.1 torchvision==0.29.1 triton aiohttp msgspec numpy orjson requests tqdm \
        transformers==5.19.0 tokenizers psutil pybase64 pillow starlette pyzmq ipython pydantic datasets \
        apache-tvm-ffi sentencepiece compressed-tensors gguf openai jinja2 httpx prometheus_client >"$LOG" 2>&1
    "${PIP[@]}" --no-deps "sglang==$VER" >>"$LOG" 2>&1
    "${PIP[@]}" --no-deps "${SERVE_PINS[@]}" >>"$LOG" 2>&1
    "${PIP[@]}" --no-deps "sglang-router==$ROUTER_VER" >>"$LOG" 2>&1
    "${PIP[@]}" "smg==$SMG_VER" >>"$LOG" 2>&1  # (with its own few: grpcio, grpcio-health-checking, pyyaml)
}

from_lock() {  # exactly the lock: what it names, at its versions, and nothing more
    [ -x "$DIR/bin/python" ] || { rm -rf "$DIR"; "$PY" -m venv "$DIR"; }
    echo "== installing the SGLang host venv in $DIR from locks/sglang-host.txt (the first time: a few minutes, ~6 GB)"
    "${PIP[@]}" --no-deps -r "$LOCK" >"$LOG" 2>&1
    local extra
    extra=$(comm -23 <("$DIR/bin/python" -m pip freeze --all --exclude pip --exclude setuptools --exclude wheel \
                           | names) \
                     <(grep -v '^#' "$LOCK" | names))
    if [ -n "$extra" ]; then
        echo "== removing what the lock does not name: $(echo $extra)"
        "$DIR/bin/python" -m pip uninstall -q -y $extra >>"$LOG" 2>&1
    fi
}

trap 'echo "building $DIR failed; the end of $LOG:" >&2; tail -n 40 "$LOG" >&2' ERR
mkdir -p "$(dirname "$DIR")"
if [ "${GPUOPS_HOST_VENV_RESOLVE:-}" = 1 ]; then
    resolve
    MARK=""
else
    MARK="$DIR/.gpuops-lock-$(sha256sum "$LOCK" | cut -c1-12)"
    if [ -f "$MARK" ] && [ -f "$OLD/.gpuops-ok" ] && imports_ok; then
        echo "== SGLang host venv $DIR (locks/sglang-host.txt, $OLD_VER beside) is ready"
        exit 0
    fi
    rm -f "$DIR"/.gpuops-lock-* "$DIR"/.gpuops-sglang-*  # (the markers of earlier builds)
    from_lock
fi
imports_ok || {
    echo "the SGLang host venv in $DIR does not import what the tests use:" >&2
    "$DIR/bin/python" -c "$ALL_CHECK" >&2
    exit 1
}
[ -z "$MARK" ] || touch "$MARK"

if [ ! -f "$OLD/.gpuops-ok" ]; then
    echo "== adding SGLang $OLD_VER's code in $OLD (for the MTP-crash test; PYTHONPATH=$OLD)"
    rm -rf "$OLD"
    "${PIP[@]}" --no-deps --target "$OLD" "sglang==$OLD_VER" >>"$LOG" 2>&1
    rm -rf "$OLD"/bin  # its console scripts would point at this folder's code with the venv's python
    PYTHONPATH="$OLD" "$DIR/bin/python" -c "import sglang.version as v; assert v.__version__ == '$OLD_VER', v.__version__" \
        >>"$LOG" 2>&1 || { echo "SGLang $OLD_VER in $OLD does not import" >&2; exit 1; }
    touch "$OLD/.gpuops-ok"
fi
trap - ERR
echo "== SGLang host venv $DIR (locks/sglang-host.txt, $OLD_VER beside) is ready"
