"""A row of the README's performance summary and docs/results.md, and the number formats the
summarisers share (physai_bench.summaries_planning, physai_bench.summaries_serving)."""
from __future__ import annotations

from dataclasses import dataclass, replace


@dataclass(frozen=True)
class Row:
    question: str
    ours: str
    baseline: str
    ratio: str  # ours over the baseline, said which way is better
    paper: str  # the paper's figure at the same conditions ("-": the paper has none)
    verdict: str  # "win", "loss", "tie" or "mixed": said, not coloured
    headline: bool = True  # in the README's summary too (docs/results.md has every row)


def headlines(rows: list[Row], keep) -> list[Row]:
    """Rows with `keep(index, row)` as the README's (the first one when none is kept)."""
    flags = [bool(keep(i, r)) for i, r in enumerate(rows)]
    if rows and not any(flags):
        flags[0] = True
    return [replace(r, headline=f) for r, f in zip(rows, flags)]


def pct(x: float) -> str:
    return f"{100 * x:.1f} %"


def num(x: float) -> str:
    """Three significant figures without an exponent (1458, 7.8, 0.0015)."""
    return f"{x:.0f}" if abs(x) >= 100 else f"{x:.3g}"


def lower(reduction: float) -> str:
    """A latency reduction (0.3: 30 % less) in words."""
    return f"{reduction:.1%} lower" if reduction >= 0 else f"{-reduction:.1%} higher"


def side_by_side(question: str, rows: list[Row]) -> Row:
    """One README row for several of an entry's rows: each field's values joined by " / " in the
    rows' order (one value when all agree), the verdicts by "/". The rows themselves stay in
    docs/results.md."""
    def join(values: list[str], sep: str = " / ") -> str:
        return values[0] if len(set(values)) == 1 else sep.join(values)
    return Row(question, join([r.ours for r in rows]), join([r.baseline for r in rows]),
               join([r.ratio for r in rows]), join([r.paper for r in rows]), join([r.verdict for r in rows], "/"))
