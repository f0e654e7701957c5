"""The tools that write SGLang's engine data from its wheels (run by hand, never by gpuops):

    .venv/bin/python -m gpuops.core.engines.sglang.extract.flags      # data/sglang_versions.json
    .venv/bin/python -m gpuops.core.engines.sglang.extract.log_lines  # the log lines phases.py reads

Each reads the wheels statically (``ast``); SGLang is never installed or imported.
"""
