"""Benchmarks: SGLang's own bench_serving and run_eval against a deployment, functional checks, results."""
