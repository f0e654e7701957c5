"""The `gpuops` command line: the verbs, which call the use cases (gpuops.core.ops) and print."""
