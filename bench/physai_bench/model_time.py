"""A stand-in for a model's compute in the anchor servers of bench/serving_vs_openpi.py.

Why: a server whose model runs for tens of milliseconds pays more per request than one that
answers at once, for reasons that are not serving logic: while the model computes, the robot's
process sleeps (its core drops into an idle state and its caches go cold) and the model's
working set evicts the server's own receive and publish paths. Measured here (2026-11-25, load
0.5): the rclpy echo's overhead rose from 0.47-0.56 ms to 1.18 ms p50 when its callback first
computed for 40 ms. Our server always runs its engine (sim_pi0 on this CPU: 16-25 ms with
server.torch_threads 1, 45-50 ms by default), so anchors at ~0 ms model time compare our
transport with theirs on unequal terms; the bench reports both.

numpy only: it is imported by the openpi server in .venv-openpi (numpy<2) as well.
"""
from __future__ import annotations

import time

import numpy as np

_A = np.random.default_rng(0).standard_normal((256, 256)).astype(np.float32)


def compute_for(ms: float) -> float:
    """Multiply matrices (BLAS on every core, as an engine does) for `ms` milliseconds; returns
    the milliseconds spent, which the server reports as its model time."""
    t0 = time.perf_counter()
    if ms > 0:
        end = t0 + ms / 1e3
        while time.perf_counter() < end:
            _A @ _A
    return (time.perf_counter() - t0) * 1e3
