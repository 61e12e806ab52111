"""Per-agent latency samples with Kairos's convergence test and expected execution time (§4.3, §6).

Kairos keeps the execution-latency samples of each agent and uses an exponentially growing
sampling schedule to decide when a distribution can be trusted: each time the number of samples
doubles (from `min_samples`), the Wasserstein distance between the current sample set and the
set at the previous checkpoint is computed; below a threshold the distribution is converged.
The paper gives no threshold value, so it is a parameter here, relative to the current mean
(5 % by default) so that one setting works for 20 ms safety checks and 3 s plans alike.

The expected execution time of a request (§6, eq. 2) is the point of highest probability density
of its agent's single-request latency distribution: a Gaussian KDE evaluated on a grid, argmax.
Degenerate samples (fewer than 3, or no spread) fall back to the median, which is then also the
mode of the samples.

Memory: samples are kept until `max_samples`; after that the set becomes a window of the newest
`max_samples` and the check compares each full new window with the previous one, so a workload
that shifts after convergence is still detected (the doubling schedule alone would stop checking).
"""
from __future__ import annotations

from dataclasses import dataclass
from typing import Dict, Iterable, List, Optional, Sequence

import numpy as np
from scipy.stats import gaussian_kde, wasserstein_distance


@dataclass(frozen=True)
class ConvergenceConfig:
    min_samples: int = 16          # first checkpoint; checks at 32, 64, ... after it
    rel_threshold: float = 0.05    # converged when W1(current, previous) / mean(current) < this
    max_samples: int = 4096        # beyond this, a sliding window (see module docstring)
    kde_grid: int = 256            # grid points for the KDE argmax

    def __post_init__(self) -> None:
        if self.min_samples < 2:
            raise ValueError("min_samples must be >= 2")
        if self.max_samples < 2 * self.min_samples:
            raise ValueError("max_samples must be >= 2 * min_samples")
        if self.rel_threshold <= 0:
            raise ValueError("rel_threshold must be > 0")


@dataclass(frozen=True)
class ConvergenceCheck:
    """One checkpoint: the sample counts compared and the distance found."""
    n_previous: int
    n_current: int
    distance: float
    relative: float
    converged: bool


def mode_of(samples: Sequence[float], grid: int = 256) -> float:
    """Highest-density point of `samples` (Gaussian KDE argmax over a grid spanning the samples);
    the median for degenerate samples (too few, or zero spread, where the KDE is singular)."""
    x = np.asarray(samples, dtype=float)
    if x.size == 0:
        raise ValueError("no samples")
    if x.size < 3 or float(np.ptp(x)) <= 1e-12 * max(1.0, float(np.abs(x).max())):
        return float(np.median(x))
    try:
        kde = gaussian_kde(x)
    except np.linalg.LinAlgError:
        return float(np.median(x))
    xs = np.linspace(float(x.min()), float(x.max()), grid)
    return float(xs[int(np.argmax(kde(xs)))])


class LatencyDistribution:
    """Samples of one agent's latency (single-request or remaining end-to-end) and their
    convergence state. Not thread-safe: one owner feeds it."""

    def __init__(self, config: ConvergenceConfig = ConvergenceConfig()) -> None:
        self.config = config
        self._samples: List[float] = []
        self._snapshot: Optional[np.ndarray] = None   # sample set at the previous checkpoint
        self._next_check = config.min_samples
        self._since_window = 0                         # new samples since the window was full
        self._converged = False
        self._checks: List[ConvergenceCheck] = []
        self._mode_cache: Optional[float] = None

    # ---- feeding -------------------------------------------------------------------------
    def add(self, value: float) -> Optional[ConvergenceCheck]:
        """Record one sample; returns the check run at this sample, if it hit a checkpoint."""
        v = float(value)
        if not np.isfinite(v) or v < 0:
            raise ValueError(f"latency sample must be finite and >= 0, got {value!r}")
        self._mode_cache = None
        cfg = self.config
        self._samples.append(v)
        if len(self._samples) > cfg.max_samples:
            del self._samples[0]
            self._since_window += 1
            if self._since_window >= cfg.max_samples:
                self._since_window = 0
                return self._check()
            return None
        if len(self._samples) == self._next_check:
            self._next_check *= 2
            return self._check()
        return None

    def extend(self, values: Iterable[float]) -> None:
        for v in values:
            self.add(v)

    def _check(self) -> Optional[ConvergenceCheck]:
        current = np.asarray(self._samples, dtype=float)
        previous, self._snapshot = self._snapshot, current
        if previous is None:
            return None        # the first checkpoint only sets the reference
        d = float(wasserstein_distance(current, previous))
        mean = float(current.mean())
        rel = d / mean if mean > 0 else (0.0 if d == 0 else float("inf"))
        self._converged = rel < self.config.rel_threshold
        check = ConvergenceCheck(previous.size, current.size, d, rel, self._converged)
        self._checks.append(check)
        return check

    # ---- reading -------------------------------------------------------------------------
    @property
    def converged(self) -> bool:
        """State after the last checkpoint (a later checkpoint can revoke it)."""
        return self._converged

    @property
    def checks(self) -> List[ConvergenceCheck]:
        return list(self._checks)

    def __len__(self) -> int:
        return len(self._samples)

    def samples(self) -> np.ndarray:
        return np.asarray(self._samples, dtype=float)

    def mean(self) -> float:
        return float(np.mean(self._samples)) if self._samples else float("nan")

    def mode(self) -> float:
        """Expected execution time (§6): KDE argmax, cached until the next sample."""
        if self._mode_cache is None:
            self._mode_cache = mode_of(self._samples, self.config.kde_grid)
        return self._mode_cache


class AgentLatencyProfiler:
    """Kairos's Distribution Profiler: the two per-agent distributions of §4.3.

    single[agent]: execution latency of one request (drives the dispatcher's expected time).
    remaining[agent]: remaining end-to-end latency from that agent's request to the end of its
    workflow (drives the priority). Fed by workflow.WorkflowAnalyzer."""

    def __init__(self, config: ConvergenceConfig = ConvergenceConfig()) -> None:
        self.config = config
        self.single: Dict[str, LatencyDistribution] = {}
        self.remaining: Dict[str, LatencyDistribution] = {}

    def _get(self, table: Dict[str, LatencyDistribution], agent: str) -> LatencyDistribution:
        dist = table.get(agent)
        if dist is None:
            dist = table[agent] = LatencyDistribution(self.config)
        return dist

    def add_single(self, agent: str, latency_s: float) -> None:
        self._get(self.single, agent).add(latency_s)

    def add_remaining(self, agent: str, latency_s: float) -> None:
        self._get(self.remaining, agent).add(latency_s)

    def expected_time(self, agent: str, default: Optional[float] = None) -> Optional[float]:
        """Mode of the agent's single-request latency; `default` when it has no samples yet."""
        dist = self.single.get(agent)
        if dist is None or len(dist) == 0:
            return default
        return dist.mode()

    def remaining_samples(self) -> Dict[str, np.ndarray]:
        return {a: d.samples() for a, d in self.remaining.items() if len(d)}

    def remaining_converged(self) -> Dict[str, bool]:
        return {a: d.converged for a, d in self.remaining.items()}
