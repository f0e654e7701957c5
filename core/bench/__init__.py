"""Benchmarks: the engine's own benchmark and eval against a deployment, functional checks, results."""
