"""Paired comparisons over shifts run on the same seeds: a rate's 95 % bootstrap interval, the
paired difference's interval, and the Wilcoxon signed-rank test (bench/pipeline_value.py)."""
from __future__ import annotations

from typing import Sequence

import numpy as np

DRAWS = 4000


def rate_ci(counts: Sequence[float], seconds: Sequence[float], per_s: float = 3600.0, seed: int = 0) -> list[float]:
    """Pooled rate (counts per `per_s` seconds) with its 95 % interval, shifts resampled."""
    c, s = np.asarray(counts, float), np.asarray(seconds, float)
    if len(c) < 2 or s.sum() <= 0:
        return [round(float(c.sum() / s.sum() * per_s), 2) if s.sum() > 0 else 0.0] * 2
    picks = np.random.default_rng(seed).integers(0, len(c), (DRAWS, len(c)))
    rates = c[picks].sum(1) / s[picks].sum(1) * per_s
    return [round(float(x), 2) for x in np.percentile(rates, [2.5, 97.5])]


def share_ci(part: Sequence[float], whole: Sequence[float], seed: int = 0) -> list[float] | None:
    """sum(part) / sum(whole) with its 95 % interval, shifts resampled (None: no whole)."""
    p, w = np.asarray(part, float), np.asarray(whole, float)
    if w.sum() <= 0:
        return None
    picks = np.random.default_rng(seed).integers(0, len(p), (DRAWS, len(p)))
    tot = w[picks].sum(1)
    shares = p[picks].sum(1)[tot > 0] / tot[tot > 0]
    return [round(float(x), 4) for x in np.percentile(shares, [2.5, 97.5])]


def paired(a: Sequence[float], b: Sequence[float], seed: int = 0) -> dict:
    """a - b over pairs (the same seed): mean difference with its 95 % bootstrap interval, how
    many pairs each side wins, and the two-sided Wilcoxon signed-rank p (Pratt's treatment of
    zero differences; 1.0 when every pair ties)."""
    from scipy.stats import wilcoxon

    x, y = np.asarray(a, float), np.asarray(b, float)
    if x.shape != y.shape or not len(x):
        raise ValueError("paired: two equal, non-empty samples")
    d = x - y
    picks = np.random.default_rng(seed).integers(0, len(d), (DRAWS, len(d)))
    lo, hi = np.percentile(d[picks].mean(1), [2.5, 97.5])
    p = 1.0 if not np.any(d) else float(wilcoxon(x, y, zero_method="pratt").pvalue)
    return {"mean_diff": round(float(d.mean()), 3), "ci95": [round(float(lo), 3), round(float(hi), 3)],
            "wins": int((d > 0).sum()), "losses": int((d < 0).sum()), "ties": int((d == 0).sum()),
            "wilcoxon_p": round(p, 4)}
