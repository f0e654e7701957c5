#!/usr/bin/env bash
# Build the "host" virtualenv: SGLang's real benchmark and eval modules, as a GPU host would have
# them, for the tests that run bench_serving / run_eval over SSH against the simulated server.
# The sglang wheel goes in without its dependencies (most are for serving on a GPU); what the
# benchmark and the eval import is installed beside it. torch/torchvision are the CUDA builds
# that sglang's imports need (a CPU torch lacks torchvision's operators: 'operator torchvision::nms does
# not exist').
#   usage: scripts/sglang-host-venv.sh DIR [SGLANG_VERSION]
# Idempotent: a DIR whose marker names the same version is left as it is.
set -euo pipefail
DIR=${1:?usage: $0 DIR [VERSION]}
VER=${2:-0.5.23}
PY=${PYTHON:-python3}
if [ -f "$DIR/.gpuops-sglang-$VER" ] && "$DIR/bin/python" -c 'import sglang, httpx, openai' 2>/dev/null; then
    echo "== SGLang host venv $DIR ($VER) is ready"
    exit 0
fi
echo "== building the SGLang host venv in $DIR (sglang $VER; a few minutes, ~6 GB)"
rm -rf "$DIR"
LOG="$DIR.build.log"  # pip's output (its index warnings are many): shown only when it fails
trap 'echo "building $DIR failed; the end of $LOG:" >&2; tail -n 40 "$LOG" >&2' ERR
"$PY" -m venv "$DIR"
PIP=("$DIR/bin/python" -m pip install -q --disable-pip-version-check)
"${PIP[@]}" torch==2.14.1 torchvision==0.29.1 triton aiohttp msgspec numpy orjson requests tqdm \
    transformers==5.19.0 tokenizers psutil pybase64 pillow starlette pyzmq ipython pydantic datasets \
    apache-tvm-ffi sentencepiece compressed-tensors gguf openai jinja2 httpx prometheus_client >"$LOG" 2>&1
WHL=$(mktemp -d)
"$DIR/bin/python" -m pip download -q --disable-pip-version-check --no-deps "sglang==$VER" -d "$WHL" >>"$LOG" 2>&1
"${PIP[@]}" --no-deps "$WHL"/sglang-*.whl >>"$LOG" 2>&1
rm -rf "$WHL"
trap - ERR
CHECK='import sglang.bench_serving, sglang.test.run_eval'  # the benchmark and the quality eval
"$DIR/bin/python" -c "$CHECK" >/dev/null 2>&1 || {
    echo "sglang.bench_serving or sglang.test.run_eval does not import in $DIR" >&2
    "$DIR/bin/python" -c "$CHECK" >&2
    exit 1
}
touch "$DIR/.gpuops-sglang-$VER"
echo "== SGLang host venv $DIR ($VER) built"
