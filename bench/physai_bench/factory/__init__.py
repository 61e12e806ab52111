"""ROSA's factory at GPU scale, simulated: request queues (queues), the trace-driven simulator (sim),
GPU-scale model profiles (profiles) and the paper's dedicated and shared baselines (baselines)."""
