"""gpuops.core."""
