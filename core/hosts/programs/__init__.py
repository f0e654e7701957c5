"""Programs gpuops sends to a host as source and runs with the host's python (standard library only)."""
