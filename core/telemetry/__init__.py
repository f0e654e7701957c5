"""GPU and host telemetry: samples, samplers, the Monitor."""
