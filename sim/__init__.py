"""The simulated GPU host: fake host programs that gpuops reaches like a real GPU box. Product code never imports it; only its entry points (`gpuops sim`, `gpuops demo`) do."""
