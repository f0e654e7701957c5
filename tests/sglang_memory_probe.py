"""Run by the SGLang host venv's python (tests/test_sglang_memory.py): the --mem-fraction-static SGLang
resolves itself for each case's command line, on a GPU of the case's size. The SGLang is whichever
the python imports (the venv's 0.5.23, or 0.5.10's code put first on PYTHONPATH).

This machine has no GPU, so what only a GPU answers is stood in for: the device's memory capacity
(``get_device_memory_capacity``, what torch reports in MiB, where the version's resolution reads it)
and that the platform is CUDA where the resolution asks (0.5.2x: ``default_prefill_backend``, which
is BREAKABLE on CUDA, so prefill CUDA graphs are on by default as on a GPU host, and
``_platform_supports_mamba_cache_extra_buffer``; 0.5.10: ``server_args.is_cuda``, which decides
piecewise CUDA graphs and the Mamba state's extra buffer). Nothing is patched before SGLang's modules
are imported: their import-time checks see this machine as it is. The rest is SGLang's
own resolution of its arguments (``prepare_server_args(argv)``, then ``resolve_once()`` where the
version defers it), the model's config.json read from disk. Input: a JSON list of {"gpu_mib": N,
"argv": [...]} as argv[1]; output: a JSON list, each {"mem_fraction_static": F} or {"error": "..."}."""

import json
import sys

import sglang.srt.server_args as server_args

try:  # 0.5.2x resolves memory settings in arg_groups; 0.5.10 in ServerArgs.__post_init__
    import sglang.srt.arg_groups.mamba_hook as mamba_hook
    import sglang.srt.arg_groups.memory_hook as memory_hook
except ImportError:
    mamba_hook = memory_hook = None

if mamba_hook is not None:
    import sglang.srt.model_executor.cuda_graph_config as cuda_graph_config

    cuda_graph_config.default_prefill_backend = lambda: cuda_graph_config.Backend.BREAKABLE
    mamba_hook._platform_supports_mamba_cache_extra_buffer = lambda: True
else:
    server_args.is_cuda = lambda: True
out = []
for case in json.loads(sys.argv[1]):
    capacity = lambda device=None, _mib=case["gpu_mib"]: float(_mib)  # noqa: E731
    server_args.get_device_memory_capacity = capacity
    if memory_hook is not None:
        memory_hook.get_device_memory_capacity = capacity
    try:
        args = server_args.prepare_server_args([*case["argv"], "--device", "cuda", "--skip-tokenizer-init"])
        if hasattr(args, "resolve_once"):
            args.resolve_once()
            value = args.resolved_dict()["mem_fraction_static"]
        else:
            value = args.mem_fraction_static
        out.append({"mem_fraction_static": value})
    except BaseException as e:  # argparse's SystemExit too: the case's error, shown beside its command line
        out.append({"error": f"{type(e).__name__}: {e}"[:400]})
print(json.dumps(out))
