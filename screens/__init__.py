"""gpuops.screens."""
