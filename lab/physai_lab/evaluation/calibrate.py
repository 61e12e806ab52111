"""Choose the confidence thresholds t to sweep from what the model's confidences look like.

Where the interesting t lie depends on the model: how much larger than its earlier updates an
action's final Euler update is. Since ConfidenceHorizon stops at the first action with
final > (1 + t) x earlier mean, i.e. confidence c_a < 1 / (1 + t) (engine/horizon.py), the
horizon any t would choose can be recomputed from the per-action confidences a chunk carries.
A pilot run's confidences therefore give the t that reach chosen average horizons, so the sweep
covers the whole range instead of bunching at H_min or at the full chunk.
"""
from __future__ import annotations

import math
from typing import Sequence

import numpy as np


def horizons_for(confidence: np.ndarray, t: float, h_min: int) -> np.ndarray:
    """[rounds, chunk] per-action confidences -> the horizon ConfidenceHorizon(t, h_min) picks."""
    c = np.asarray(confidence, dtype=np.float64)
    if c.ndim != 2 or c.shape[1] < 1:
        raise ValueError(f"confidence: expected [rounds, chunk], got shape {list(c.shape)}")
    bad = c < 1.0 / (1.0 + float(t))
    h_thresh = np.where(bad.any(axis=1), bad.argmax(axis=1), c.shape[1])
    return np.minimum(np.maximum(h_thresh, int(h_min)), c.shape[1])


def thresholds_for(confidence: np.ndarray, targets: Sequence[float], h_min: int,
                   grid: Sequence[float] | None = None) -> list[float]:
    """For each target average horizon, the smallest t on `grid` whose average horizon reaches
    it (rounded up to 3 significant digits, so the target is still reached: the average horizon
    never falls as t grows; duplicates dropped; sorted)."""
    grid = np.concatenate([[0.0], np.geomspace(1e-3, 20.0, 240)]) if grid is None else np.asarray(grid)
    means = np.array([horizons_for(confidence, t, h_min).mean() for t in grid])
    out = []
    for target in targets:
        ok = np.nonzero(means >= target - 1e-9)[0]
        if ok.size:
            out.append(_round_up(float(grid[ok[0]])))
    return sorted(set(out))


def _round_up(t: float) -> float:
    if t <= 0:
        return 0.0
    step = 10.0 ** (math.floor(math.log10(t)) - 2)
    return float(f"{math.ceil(t / step - 1e-9) * step:.3g}")
