"""gpuops.tui."""
