"""Charts of the LIBERO-like scheduling benchmark (bench/sched_libero.py results), drawn like
Kairos Figure 12 (avg task latency vs arrival rate per policy, P25-P95 bars), with the §5.5
bucket-count (Fig. 15) and intra-bucket (Fig. 16) ablations beside it. matplotlib, Agg backend,
so it runs headless.

    .venv/bin/python bench/sched_chart.py RESULT.json [MORE.json ...] --out docs/images/x.png \
        [--titles 'A|B'] [--ablation-from 1]
(or bench/scheduler.py --libero --chart PATH, which calls figure12 on its own result)."""
from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path

import matplotlib

matplotlib.use("Agg")
import matplotlib.pyplot as plt  # noqa: E402

STYLE = {  # policy key -> (label, colour, marker)
    "fifo/static": ("FIFO", "tab:gray", "o"),
    "autellix/static": ("Autellix", "tab:brown", "s"),
    "wait_ratio/static": ("wait ratio, static H", "tab:blue", "^"),
    "fifo/dynamic": ("FIFO + dynamic H", "tab:olive", "v"),
    "wait_ratio/dynamic": ("Kairos (wait ratio + dynamic H)", "tab:orange", "D"),
}


def _latency_panel(ax, res: dict, title: str) -> None:
    rates = sorted(res["by_rate"], key=float)
    xs = [float(r) for r in rates]
    width = (max(xs) - min(xs)) / 60 if len(xs) > 1 else 0.01
    for k, (key, (label, colour, marker)) in enumerate(STYLE.items()):
        cells = [res["by_rate"][r][key] for r in rates]
        off = (k - 2) * width
        avg = [c["avg_s"] for c in cells]
        lo = [c["avg_s"] - c["p25_s"] for c in cells]
        hi = [c["p95_s"] - c["avg_s"] for c in cells]
        ax.errorbar([x + off for x in xs], avg, yerr=[lo, hi], label=label, color=colour, marker=marker,
                    ms=4, lw=1.2, capsize=2, elinewidth=0.8)
    top = res.get("highest_stable_rate_per_s")
    if top is not None:
        ax.axvline(top, color="k", ls=":", lw=0.8)
        ax.text(top, ax.get_ylim()[1] * 0.97, " highest stable", fontsize=7, va="top")
    ax.set_xlabel("task arrival rate (tasks/s, Poisson)")
    ax.set_ylabel("task latency (s): avg, bars P25-P95")
    ax.set_title(title, fontsize=9)
    ax.grid(alpha=0.3)


def _ablation_panel(ax, res: dict, title: str) -> None:
    """Bucket count (Fig. 15) and intra-bucket order (Fig. 16): wait ratio with the static horizon
    (the scheduler alone) and Kairos (dynamic horizon), avg with P25-P95 bars."""
    ab = res.get("ablations", {})
    labels, cells = [], []
    for g, prefix in (("buckets", "B="), ("intra_bucket", "")):
        for name, cell in ab.get(g, {}).items():
            if "skipped" not in cell:
                labels.append(prefix + {"longest_exec": "longest exec first", "fifo": "FIFO in bucket",
                                        "shortest_exec": "shortest exec first"}.get(name, name))
                cells.append(cell)
    for k, (h, colour, lab) in enumerate((("static", "tab:blue", "wait ratio, static H"),
                                          ("dynamic", "tab:orange", "Kairos (dynamic H)"))):
        xs = [i + (k - 0.5) * 0.38 for i in range(len(cells))]
        avg = [c[h]["avg_s"] for c in cells]
        ax.bar(xs, avg, width=0.38, color=colour, alpha=0.85, label=lab,
               yerr=[[a - c[h]["p25_s"] for a, c in zip(avg, cells)], [c[h]["p95_s"] - a for a, c in zip(avg, cells)]],
               capsize=2, error_kw={"elinewidth": 0.8})
    ax.set_xticks(range(len(labels)))
    ax.set_xticklabels(labels, rotation=30, ha="right", fontsize=7)
    ax.set_ylabel("task latency (s): avg, bars P25-P95")
    ax.set_title(title, fontsize=9)
    ax.legend(fontsize=7, loc="upper right")
    ax.grid(alpha=0.3, axis="y")


def figure12(results, path, titles=None, ablation_index: int = 0) -> None:
    """One latency-vs-rate panel per result, plus one ablation panel for results[ablation_index]."""
    if isinstance(results, dict):
        results = [results]
    titles = titles or [r.get("title") or r.get("workload_file", "workload") for r in results]
    n = len(results) + 1
    cols = 2 if n > 2 else n
    rows = (n + cols - 1) // cols
    fig, grid = plt.subplots(rows, cols, figsize=(6.0 * cols, 4.3 * rows), squeeze=False)
    axes = [ax for row in grid for ax in row]
    for ax in axes[n:]:
        ax.set_visible(False)
    axes = axes[:n]
    for ax, res, title in zip(axes, results, titles):
        _latency_panel(ax, res, title)
    axes[0].legend(fontsize=7, loc="upper left")
    r0 = results[ablation_index]
    _ablation_panel(axes[-1], r0, f"§5.5 ablations, Kairos at {r0.get('highest_stable_rate_per_s')} tasks/s\n"
                                  f"({titles[ablation_index]})")
    fig.tight_layout()
    Path(path).parent.mkdir(parents=True, exist_ok=True)
    fig.savefig(path, dpi=110)
    plt.close(fig)


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("results", nargs="+", type=Path)
    ap.add_argument("--out", type=Path, required=True)
    ap.add_argument("--titles", help="panel titles separated by '|'")
    ap.add_argument("--ablation-from", type=int, default=0, help="index of the result whose ablations are drawn")
    args = ap.parse_args(argv)
    res = [json.loads(p.read_text()) for p in args.results]
    figure12(res, args.out, args.titles.split("|") if args.titles else None, args.ablation_from)
    return 0


if __name__ == "__main__":
    sys.exit(main())
