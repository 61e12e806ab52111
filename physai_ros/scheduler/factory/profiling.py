"""L(b, lambda) from batch service times, the way ROSA §3.4.2 Step 1 profiles a server: for each
batch size b, open-loop Poisson arrivals at ten rates from 10 % to 100 % of that batch size's
maximum throughput (b / s(b)), each request's latency (queueing + batching + service) recorded,
mean and p99 kept.

The server here is the one physai_ros runs: it takes up to b waiting requests whenever it is idle
(no waiting for a batch to fill; serving.serving_core dispatches that way) and a batch of k takes s(k).
The service times are what the serving engines measure at start-up (workers.profiling) or what a
roofline model predicts for a GPU (bench/physai_bench/factory/profiles.py); the queueing is simulated here,
not measured, and a profile made this way says so in its `note`.
"""
from __future__ import annotations

from typing import Mapping, Sequence

import numpy as np

from physai_ros.scheduler.factory.types import CONTINUOUS, STATIC, ModelProfile, ProfilePoint

RATE_FRACTIONS = tuple(np.round(np.linspace(0.1, 1.0, 10), 2))
# Just below 1.0: at exactly the maximum throughput an open queue grows without bound, and its p99
# would be the length of the simulated window rather than a property of the server.
TOP_FRACTION = 0.97


def service_time(service_s: Mapping[int, float], k: int) -> float:
    """s(k) for a batch of k: measured points, linear between them, the last slope beyond."""
    sizes = sorted(service_s)
    if k in service_s:
        return float(service_s[k])
    if k < sizes[0]:
        return float(service_s[sizes[0]])
    below = [b for b in sizes if b < k]
    above = [b for b in sizes if b > k]
    if above:
        b0, b1 = below[-1], above[0]
    else:
        b0, b1 = (sizes[-2], sizes[-1]) if len(sizes) > 1 else (sizes[-1], sizes[-1])
    if b1 == b0:
        return float(service_s[b0]) * k / b0
    s0, s1 = service_s[b0], service_s[b1]
    return float(s0 + (s1 - s0) * (k - b0) / (b1 - b0))


def simulate_queue(arrivals: Sequence[float], batch: int, service_s: Mapping[int, float]) -> np.ndarray:
    """Latency of each request (arrival order) at a server that takes up to `batch` waiting
    requests whenever it is idle."""
    arrivals = np.asarray(arrivals, dtype=float)
    latency = np.empty(len(arrivals))
    free_at, i, n = 0.0, 0, len(arrivals)
    waiting: list[int] = []
    while i < n or waiting:
        if not waiting:
            waiting.append(i)
            i += 1
        start = max(free_at, arrivals[waiting[0]])
        while i < n and arrivals[i] <= start:
            waiting.append(i)
            i += 1
        take, waiting = waiting[:batch], waiting[batch:]
        free_at = start + service_time(service_s, len(take))
        latency[take] = free_at - arrivals[take]
    return latency


def profile_from_service_times(model: str, hardware: str, service_s: Mapping[int, float], *,
                               batching: str = STATIC, batch_sizes: Sequence[int] | None = None,
                               requests: int = 4000, seed: int = 0, weights_gb: float = 0.0,
                               source: str = "measured", note: str = "") -> ModelProfile:
    """A ModelProfile of a server with batch service times `service_s` ({batch: seconds}).

    STATIC (System 1): one curve per batch size. CONTINUOUS (the VLM components): one curve, as
    ROSA models continuous batching (b = 1 in the profile), simulated with the largest measured
    batch as the number of requests the server runs together.
    """
    if not service_s or any(s <= 0 for s in service_s.values()):
        raise ValueError(f"{model}@{hardware}: service times must be positive, got {dict(service_s)}")
    rng = np.random.default_rng(seed)
    sizes = sorted(batch_sizes or service_s)
    curves = [(b, b) for b in sizes] if batching == STATIC else [(1, max(sizes))]
    points = []
    for label, together in curves:
        capacity = together / service_time(service_s, together)
        for frac in RATE_FRACTIONS:
            rate = capacity * min(float(frac), TOP_FRACTION)
            arrivals = np.cumsum(rng.exponential(1.0 / rate, requests))
            lat = simulate_queue(arrivals, together, service_s)[requests // 10:]  # warm-up dropped
            points.append(ProfilePoint(label, round(rate, 6), float(lat.mean()), float(np.percentile(lat, 99)),
                                       float(np.percentile(lat, 50))))
    how = (f"service times {', '.join(f'b{b}={service_time(service_s, b) * 1e3:.1f} ms' for b in sizes)} "
           f"({source}); queueing simulated (Poisson arrivals, {requests} requests per rate)")
    return ModelProfile(model, hardware, CONTINUOUS if batching == CONTINUOUS else STATIC, tuple(points),
                        weights_gb=weights_gb, source=source, note=f"{note}; {how}" if note else how)

