"""A synthetic run summary in the physai-fleet --summary-json format (for report tests/docs)."""
from __future__ import annotations

import numpy as np


def synthetic_summary(n_robots: int = 4, duration_s: float = 120.0, seed: int = 0) -> dict:
    rng = np.random.default_rng(seed)
    robots, wait, rates = [], {}, {}
    t = np.arange(0.0, duration_s, 1.0)
    for k in range(n_robots):
        rid = f"robot_{k}"
        base = 60.0 + 25.0 * k  # later robots sit further from the engine: slower
        lat = base + rng.gamma(2.0, 12.0 + 4 * k, size=400)
        slo = 250.0
        robots.append({
            "id": rid, "rounds": 400, "chunks_executed": 396 - k, "tasks_completed": max(0, 12 - k),
            "latency_ms_p50": float(np.percentile(lat, 50)), "latency_ms_p99": float(np.percentile(lat, 99)),
            "slo_misses": int((lat > slo).sum()), "refused_inputs": {"stale_round": k % 2, "bad_time": 0},
            "slo_ms": slo, "latency_samples_ms": [round(float(x), 2) for x in lat],
            "rates_hz": {"camera_0/image_raw": 30.0 - 0.2 * k, "wrench": 480.0 - k},
        })
        wait[rid] = {"t": t.tolist(),
                     "v": np.clip(0.05 * k + 0.02 * np.cumsum(rng.normal(0, 0.3, t.size)) / np.sqrt(t + 1), 0, 1).round(4).tolist()}
        rates[f"{rid}/camera_0"] = {"t": t.tolist(), "v": (30.0 + rng.normal(0, 0.4, t.size) - (t > 80) * 6 * (k == 1)).round(2).tolist()}
    depth = {f"engine_{e}": {"t": t.tolist(), "v": rng.poisson(1.5 + 1.5 * e + np.sin(t / 15.0) + 1, t.size).tolist()}
             for e in range(2)}
    return {"duration_s": duration_s, "robots": robots,
            "series": {"wait_ratio": wait, "queue_depth": depth, "stream_rates_hz": rates}}
