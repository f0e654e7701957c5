#!/usr/bin/env bash
# Build the "host" virtualenv: SGLang's real code as a GPU host would have it, for the tests that run
# bench_serving / run_eval over SSH against the simulated server, and for the tests that start the
# genuine `python -m sglang.launch_server --device cpu` through gpuops (tests/test_real_sglang.py).
# The sglang wheel goes in without its dependencies (most are for serving on a GPU); what the
# benchmark, the eval and the CPU server's imports need is installed beside it. torch/torchvision are
# the CUDA builds that sglang's imports need (a CPU torch lacks torchvision's operators: 'operator
# torchvision::nms does not exist').
#   usage: scripts/sglang-host-venv.sh DIR [SGLANG_VERSION]
# Three steps, each with its own marker in DIR, so a cached venv is only topped up:
#   .gpuops-sglang-VER            the base: torch, transformers, the benchmark's and eval's imports, sglang VER
#   .gpuops-sglang-serve-N        the server's imports (uvicorn, fastapi, xgrammar, ...), pinned, --no-deps
#                                 (bump SERVE_REV when SERVE_PINS change: a venv is then topped up again)
#   .gpuops-sglang-router-VER     sglang-router (`python -m sglang_router.launch_router`, the replicas'
#                                 load balancer), --no-deps: its imports are the serving pins above
#   sglang-0.5.10/.gpuops-ok      SGLang 0.5.10's code (--no-deps --target), put first on PYTHONPATH by
#                                 the test of the Qwen3.5 MTP crash (its ValueError exists in 0.5.10-0.5.13)
# Idempotent: a step whose marker is there is left as it is.
set -euo pipefail
DIR=${1:?usage: $0 DIR [VERSION]}
VER=${2:-0.5.23}
PY=${PYTHON:-python3}
OLD_VER=0.5.10   # the MTP-crash test's version
SERVE_REV=1
ROUTER_VER=0.3.2  # the last sglang-router on PyPI (its successor, smg, has no sglang_router module)
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
BASE="$DIR/.gpuops-sglang-$VER"
SERVE="$DIR/.gpuops-sglang-serve-$SERVE_REV"
OLD="$DIR/sglang-$OLD_VER"
ROUTER="$DIR/.gpuops-sglang-router-$ROUTER_VER"
CHECK='import sglang.bench_serving, sglang.test.run_eval'  # the benchmark and the quality eval
SERVE_CHECK='import sglang.launch_server, sglang.srt.entrypoints.http_server, uvicorn, fastapi, xgrammar'
if [ -f "$BASE" ] && [ -f "$SERVE" ] && [ -f "$OLD/.gpuops-ok" ] && [ -f "$ROUTER" ] \
        && "$DIR/bin/python" -c 'import sglang, httpx, openai, uvicorn, fastapi' 2>/dev/null; then
    echo "== SGLang host venv $DIR ($VER, serving rev $SERVE_REV, $OLD_VER beside) is ready"
    exit 0
fi
LOG="$DIR.build.log"  # pip's output (its index warnings are many): shown only when it fails
trap 'echo "building $DIR failed; the end of $LOG:" >&2; tail -n 40 "$LOG" >&2' ERR
PIP=("$DIR/bin/python" -m pip install -q --disable-pip-version-check)

if [ ! -f "$BASE" ] || ! "$DIR/bin/python" -c 'import sglang, httpx, openai' 2>/dev/null; then
    echo "== building the SGLang host venv in $DIR (sglang $VER; a few minutes, ~6 GB)"
    rm -rf "$DIR"
    "$PY" -m venv "$DIR"
    "${PIP[@]}" torch==2.14.1 torchvision==0.29.1 triton aiohttp msgspec numpy orjson requests tqdm \
        transformers==5.19.0 tokenizers psutil pybase64 pillow starlette pyzmq ipython pydantic datasets \
        apache-tvm-ffi sentencepiece compressed-tensors gguf openai jinja2 httpx prometheus_client >"$LOG" 2>&1
    WHL=$(mktemp -d)
    "$DIR/bin/python" -m pip download -q --disable-pip-version-check --no-deps "sglang==$VER" -d "$WHL" >>"$LOG" 2>&1
    "${PIP[@]}" --no-deps "$WHL"/sglang-*.whl >>"$LOG" 2>&1
    rm -rf "$WHL"
    "$DIR/bin/python" -c "$CHECK" >/dev/null 2>&1 || {
        echo "sglang.bench_serving or sglang.test.run_eval does not import in $DIR" >&2
        "$DIR/bin/python" -c "$CHECK" >&2
        exit 1
    }
    touch "$BASE"
    echo "== SGLang host venv $DIR ($VER) built"
fi

if [ ! -f "$SERVE" ]; then
    echo "== adding the SGLang server's imports to $DIR (serving rev $SERVE_REV; under a minute)"
    rm -f "$DIR"/.gpuops-sglang-serve-*
    "${PIP[@]}" --no-deps "${SERVE_PINS[@]}" >>"$LOG" 2>&1
    "$DIR/bin/python" -c "$SERVE_CHECK" >/dev/null 2>&1 || {
        echo "the SGLang server (sglang.launch_server) does not import in $DIR" >&2
        "$DIR/bin/python" -c "$SERVE_CHECK" >&2
        exit 1
    }
    touch "$SERVE"
fi

if [ ! -f "$ROUTER" ]; then
    echo "== adding sglang-router $ROUTER_VER to $DIR (the replicas' router; ~30 MB)"
    rm -f "$DIR"/.gpuops-sglang-router-*
    "${PIP[@]}" --no-deps "sglang-router==$ROUTER_VER" >>"$LOG" 2>&1
    "$DIR/bin/python" -c 'import sglang_router.launch_router, sglang_router.sglang_router_rs' >>"$LOG" 2>&1 || {
        echo "sglang-router $ROUTER_VER does not import in $DIR" >&2; exit 1; }
    touch "$ROUTER"
fi

if [ ! -f "$OLD/.gpuops-ok" ]; then
    echo "== adding SGLang $OLD_VER's code in $OLD (for the MTP-crash test; PYTHONPATH=$OLD)"
    rm -rf "$OLD"
    WHL=$(mktemp -d)
    "$DIR/bin/python" -m pip download -q --disable-pip-version-check --no-deps "sglang==$OLD_VER" -d "$WHL" >>"$LOG" 2>&1
    "${PIP[@]}" --no-deps --target "$OLD" "$WHL"/sglang-*.whl >>"$LOG" 2>&1
    rm -rf "$WHL"
    rm -rf "$OLD"/bin  # its console scripts would point at this folder's code with the venv's python
    PYTHONPATH="$OLD" "$DIR/bin/python" -c "import sglang.version as v; assert v.__version__ == '$OLD_VER', v.__version__" \
        >>"$LOG" 2>&1 || { echo "SGLang $OLD_VER in $OLD does not import" >&2; exit 1; }
    touch "$OLD/.gpuops-ok"
fi
trap - ERR
echo "== SGLang host venv $DIR ($VER, serving rev $SERVE_REV, $OLD_VER beside) is ready"
