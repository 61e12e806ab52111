"""Fleet sizes fine enough to find each system's peak: a coarse grid, then bisection around every
system's best fleet size and around every collapse (qualified throughput falling by more than half
from one fleet size to the next), until neighbouring sizes are `resolution` robots apart. A coarse
grid that steps over a shared baseline's peak understates that baseline and overstates our ratio
over it; the refinement spends its runs only where a curve turns.
"""
from __future__ import annotations

from typing import Callable, Iterable, Mapping

Measure = Callable[[int], Mapping[str, float]]  # fleet size -> {system: qualified actions/s}


def refine(measure: Measure, coarse: Iterable[int], resolution: int = 2, max_runs: int = 64) -> dict[int, dict]:
    """{fleet size: measure(fleet size)} over the coarse grid and the sizes the refinement added."""
    seen: dict[int, dict] = {}

    def at(k: int) -> dict:
        if k not in seen:
            seen[k] = dict(measure(k))
        return seen[k]

    for k in sorted(set(coarse)):
        at(k)
    for _ in range(max_runs):
        gaps = _gaps_to_split(seen, resolution)
        if not gaps:
            break
        lo, hi = gaps[0]
        at((lo + hi) // 2)
    return dict(sorted(seen.items()))


def _gaps_to_split(seen: Mapping[int, Mapping[str, float]], resolution: int) -> list[tuple[int, int]]:
    sizes = sorted(seen)
    systems = sorted({s for row in seen.values() for s in row})
    want: set[tuple[int, int]] = set()
    for s in systems:
        values = [_value(seen[k], s) for k in sizes]
        best = max(range(len(sizes)), key=lambda i: values[i])
        for j in (best - 1, best):  # both sides of the peak
            if 0 <= j < len(sizes) - 1:
                want.add((sizes[j], sizes[j + 1]))
        for j in range(len(sizes) - 1):  # a collapse
            if values[j] > 0 and values[j + 1] < 0.5 * values[j]:
                want.add((sizes[j], sizes[j + 1]))
    return sorted(((lo, hi) for lo, hi in want if hi - lo > resolution), key=lambda g: (-(g[1] - g[0]), g))


def _value(row: Mapping[str, float], system: str) -> float:
    v = row.get(system)
    return float(v) if v is not None else 0.0


def peak(rows: Mapping[int, Mapping[str, float]], system: str) -> tuple[int, float]:
    """(fleet size, qualified actions/s) where `system` does best over the rows."""
    k = max(rows, key=lambda k: (_value(rows[k], system), -k))
    return k, _value(rows[k], system)
