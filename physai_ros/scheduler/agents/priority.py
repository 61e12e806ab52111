"""Agent-level priority from remaining-latency distributions (Kairos §5.1).

Pairwise Wasserstein distances among the agents' remaining end-to-end latency distributions plus
an ideal "zero latency" anchor distribution are embedded in one dimension with metric MDS
(sklearn.manifold.MDS, metric="precomputed"). The embedding has no direction (a sign flip is an
equally good solution), so priority is the distance to the anchor's coordinate: closer to zero
latency = shorter remaining work = served first.

Unconverged agents (their remaining-latency distribution has not passed the §4.3 convergence test
yet) do not enter the MDS, whose coordinates they would distort with noise. Their key is their
sample mean instead: for non-negative latencies the Wasserstein-1 distance to the zero anchor is
exactly the mean, and the 1-D MDS distance to the anchor approximates that same W1, so both keys
are on one scale (seconds) and converged and unconverged agents interleave sensibly. Agents with
no samples at all get +inf (served after every known agent; FIFO among themselves through the
queue's tie-breakers). The paper is silent on both cases; this is our choice.
"""
from __future__ import annotations

from dataclasses import dataclass, field
from typing import Dict, Iterable, Mapping, Optional, Sequence, Tuple

import numpy as np
from scipy.stats import wasserstein_distance
from sklearn.manifold import MDS

ZERO_ANCHOR = np.zeros(1)
UNKNOWN_KEY = float("inf")


@dataclass(frozen=True)
class AgentPriority:
    """keys[agent]: lower = higher priority. source[agent]: "mds", "mean" or "unknown".
    coordinates: raw 1-D MDS coordinates (anchor included under anchor_name), for inspection."""
    keys: Mapping[str, float]
    source: Mapping[str, str]
    coordinates: Mapping[str, float] = field(default_factory=dict)
    stress: Optional[float] = None
    anchor_name: str = "__zero__"

    @property
    def order(self) -> Tuple[str, ...]:
        """Agents from highest to lowest priority (ties by name, for determinism)."""
        return tuple(sorted(self.keys, key=lambda a: (self.keys[a], a)))

    def key(self, agent: str) -> float:
        return self.keys.get(agent, UNKNOWN_KEY)

    def rank(self, agent: str) -> int:
        order = self.order
        return order.index(agent) if agent in self.keys else len(order)


def wasserstein_matrix(dists: Sequence[np.ndarray]) -> np.ndarray:
    n = len(dists)
    d = np.zeros((n, n))
    for i in range(n):
        for j in range(i + 1, n):
            d[i, j] = d[j, i] = wasserstein_distance(dists[i], dists[j])
    return d


def mds_coordinates(dist: np.ndarray, random_state: int = 0) -> Tuple[np.ndarray, float]:
    """1-D metric MDS of a precomputed distance matrix; classical-MDS init makes it deterministic."""
    mds = MDS(n_components=1, metric_mds=True, metric="precomputed", init="classical_mds",
              random_state=random_state, normalized_stress="auto")
    coords = mds.fit_transform(dist)[:, 0]
    return coords, float(mds.stress_)


def agent_priorities(remaining: Mapping[str, Sequence[float]],
                     converged: Optional[Mapping[str, bool]] = None,
                     agents: Iterable[str] = (),
                     random_state: int = 0) -> AgentPriority:
    """Priority keys for every agent in `remaining` (and `agents`, which may have no samples).

    converged None: every agent with samples counts as converged (e.g. offline profiles)."""
    all_agents = sorted(set(remaining) | set(agents))
    samples = {a: np.asarray(remaining.get(a, ()), dtype=float) for a in all_agents}
    known = [a for a in all_agents if samples[a].size]
    conv = [a for a in known if converged is None or converged.get(a, False)]
    keys: Dict[str, float] = {}
    source: Dict[str, str] = {}
    coords_out: Dict[str, float] = {}
    stress = None
    anchor = "__zero__"
    if len(conv) >= 2:
        d = wasserstein_matrix([samples[a] for a in conv] + [ZERO_ANCHOR])
        coords, stress = mds_coordinates(d, random_state)
        for a, c in zip(conv, coords[:-1]):
            keys[a] = float(abs(c - coords[-1]))
            source[a] = "mds"
            coords_out[a] = float(c)
        coords_out[anchor] = float(coords[-1])
    for a in known:
        if a not in keys:
            keys[a] = float(samples[a].mean())     # = W1(samples, zero anchor) for latencies >= 0
            source[a] = "mean"
    for a in all_agents:
        if a not in keys:
            keys[a] = UNKNOWN_KEY
            source[a] = "unknown"
    return AgentPriority(keys, source, coords_out, stress, anchor)
