"""Run report: a one-page PNG dashboard from a physai-fleet summary JSON.

    .venv/bin/python -m physai_ros.monitoring.report out/summary.json -o out/report.png

Input: the `physai-fleet --summary-json` document. Used fields (all but `id` optional):
  robots: [{id (or robot_id), rounds, chunks_executed, latency_ms_p50, latency_ms_p99,
            slo_misses, refused_inputs (a count, or {reason: count}), tasks_completed, slo_ms,
            latency_samples_ms: [...], rates_hz: {stream: Hz}}]
  duration_s                                               # served time: from server-up to the end
  warmup_s                                                 # start-up before server-up (physai-fleet)
  series: {wait_ratio: {label: {t: [...], v: [...]}},      # per robot, t in s (see below)
           queue_depth: {label: {t: [...], v: [...]}},     # per engine instance
           stream_rates_hz: {label: {t: [...], v: [...]}}} # per robot stream
With warmup_s, t = 0 is when the policy server served and t < 0 is the warm-up (shaded, and
named in the title); without it (older summaries) t counts from the start of the monitor.
Panels: latency CDF per robot (p50/p99 markers when no samples), wait ratio and queue depth
over time, stream rates over time (final rates as bars when no series), and a per-robot table.
Malformed input raises ValueError naming the offending field.
"""
from __future__ import annotations

import argparse
import re
import sys
from pathlib import Path

from physai_ros.monitoring.run_summary import RobotRun, RunSummary, Series, load_summary

MAX_LEGEND = 10


def _natural(label: str):
    """robot_2 before robot_10."""
    return [int(p) if p.isdigit() else p for p in re.split(r"(\d+)", label)]


def _no_data(ax, what: str) -> None:
    ax.text(0.5, 0.5, f"no {what} in this summary", ha="center", va="center", color="0.45",
            fontsize=11, transform=ax.transAxes)
    ax.set_xticks([])
    ax.set_yticks([])


def _legend(ax) -> None:
    handles, labels = ax.get_legend_handles_labels()
    if not handles:
        return
    if len(handles) > MAX_LEGEND:
        extra = len(handles) - MAX_LEGEND + 1
        handles, labels = handles[:MAX_LEGEND - 1], labels[:MAX_LEGEND - 1]
        from matplotlib.lines import Line2D

        handles.append(Line2D([], [], color="none"))
        labels.append(f"+{extra} more")
    ax.legend(handles, labels, fontsize=8, loc="best", framealpha=0.85)


def _color_for(label: str, i: int, robot_ids: list[str], colors):
    """A series about a robot ("robot_3" or "robot_3/camera_0") wears that robot's colour."""
    for k, rid in enumerate(robot_ids):
        if label == rid or label.startswith(rid + "/"):
            return colors(k)
    return colors(i)


def time_axis_label(run: RunSummary) -> str:
    """What the x axis of the time panels counts: physai-fleet's series start before the
    server-up wait, its duration after it, so the axis says which origin it uses."""
    if run.warmup_s is None:
        return "time since start (s)"
    return "time since server-up (s); t < 0, shaded: warm-up"


def report_title(run: RunSummary, title: str = "physai-fleet run report") -> str:
    """'... 8 robot(s), 40 s served after 182 s warm-up': the duration is the served time (what
    --duration asked for); the warm-up, often longer on a loaded machine, is named beside it so
    a time axis reaching past the duration is not a surprise."""
    text = f"{title}: {len(run.robots)} robot(s)"
    if run.duration_s is not None:
        text += f", {run.duration_s:.0f} s" + (" served" if run.warmup_s is not None else "")
    if run.warmup_s:
        text += f" after {run.warmup_s:.0f} s warm-up (t < 0)"
    return text


def _mark_warmup(ax, run: RunSummary, series: dict[str, Series]) -> None:
    """Shade the part of t < 0 (server start-up: no round can be served there) that this panel
    has data for, and mark t = 0 (the axis label names the shade). Only that part: the server's
    own series start at server-up, and the whole warm-up there would squeeze the served time
    into a sliver."""
    if not run.warmup_s:
        return
    ts = [t for s in series.values() for t in s.t]
    if not ts or min(ts) >= 0:
        return
    ax.axvspan(max(-run.warmup_s, min(ts)), 0.0, color="0.88", zorder=0, lw=0)
    ax.axvline(0.0, color="0.35", lw=1.0, ls="--", zorder=1)


def _plot_series(ax, series: dict[str, Series], colors, ylabel: str, title: str, what: str, step=False,
                 robot_ids: list[str] = (), xlabel: str = "time since start (s)"):
    ax.set_title(title, fontsize=12, loc="left", fontweight="bold")
    if not series:
        _no_data(ax, what)
        return
    for i, (label, s) in enumerate(sorted(series.items(), key=lambda kv: _natural(kv[0]))):
        c = _color_for(label, i, list(robot_ids), colors)
        if step:
            ax.step(s.t, s.v, where="post", label=label, color=c, lw=1.5)
        else:
            ax.plot(s.t, s.v, label=label, color=c, lw=1.5)
    ax.set_xlabel(xlabel)
    ax.set_ylabel(ylabel)
    ax.grid(alpha=0.3)
    _legend(ax)


def _plot_latency(ax, robots: list[RobotRun], colors) -> None:
    ax.set_title("Observation -> chunk latency (CDF)", fontsize=12, loc="left", fontweight="bold")
    drawn = False
    slos = set()
    for i, r in enumerate(robots):
        c = colors(i)
        if r.latency_samples_ms:
            xs = sorted(r.latency_samples_ms)
            ys = [(k + 1) / len(xs) for k in range(len(xs))]
            ax.step(xs, ys, where="post", color=c, lw=1.6, label=f"{r.robot_id} (n={len(xs)})")
            drawn = True
        elif r.latency_ms_p50 is not None or r.latency_ms_p99 is not None:
            pts = [(x, y) for x, y in ((r.latency_ms_p50, 0.5), (r.latency_ms_p99, 0.99)) if x is not None]
            ax.plot([p[0] for p in pts], [p[1] for p in pts], "o--", color=c, label=f"{r.robot_id} p50/p99")
            drawn = True
        if r.slo_ms is not None:
            slos.add(r.slo_ms)
    if not drawn:
        _no_data(ax, "latency")
        return
    for slo in sorted(slos):
        ax.axvline(slo, color="crimson", ls=":", lw=1.5)
        ax.text(slo, 0.02, f" SLO {slo:g} ms", color="crimson", fontsize=8, rotation=90, va="bottom")
    for q in (0.5, 0.99):
        ax.axhline(q, color="0.6", lw=0.8, ls="--")
    ax.set_xlabel("latency (ms)")
    ax.set_ylabel("fraction of rounds <= x")
    ax.set_ylim(0, 1.02)
    ax.grid(alpha=0.3)
    _legend(ax)


_STREAM_STYLES = ("-", "--", ":", "-.")


def _log_axis(ax, lo: float, hi: float, axis: str = "x") -> None:
    """A log axis with plain-number ticks, for 5 Hz cameras and 480 Hz wrench streams together."""
    from matplotlib.ticker import NullFormatter, ScalarFormatter

    getattr(ax, f"set_{axis}scale")("log")
    a = getattr(ax, f"{axis}axis")
    a.set_major_formatter(ScalarFormatter())
    a.set_minor_formatter(NullFormatter())
    getattr(ax, f"set_{axis}ticks")([t for t in (1, 3, 10, 30, 100, 300, 1000, 3000, 10000) if lo / 3 <= t <= hi * 3])


def _plot_stream_series(ax, series: dict[str, Series], robot_ids: list[str], colors,
                        xlabel: str = "time since start (s)") -> None:
    """Colour = robot, line style = stream; the legend lists each once instead of every pair."""
    from matplotlib.lines import Line2D

    ax.set_title("Stream rates (publisher side)", fontsize=12, loc="left", fontweight="bold")
    streams = sorted({label.rsplit("/", 1)[-1] for label in series})
    style = {st: _STREAM_STYLES[i % len(_STREAM_STYLES)] for i, st in enumerate(streams)}
    robots_seen, vals = [], []
    for i, (label, s) in enumerate(sorted(series.items(), key=lambda kv: _natural(kv[0]))):
        robot, _, stream = label.rpartition("/")
        c = _color_for(label, i, robot_ids, colors)
        ax.plot(s.t, [max(v, 0.5) for v in s.v], color=c, ls=style[stream], lw=1.3)
        vals += [v for v in s.v if v > 0]
        if robot and robot not in robots_seen:
            robots_seen.append(robot)
    if vals and max(vals) > 10 * min(vals):
        _log_axis(ax, max(min(vals), 0.5), max(vals), "y")
    shown = robots_seen[:MAX_LEGEND - len(streams) - 1] if len(robots_seen) + len(streams) > MAX_LEGEND else robots_seen
    handles = [Line2D([], [], color=_color_for(r, k, robot_ids, colors), lw=3) for k, r in enumerate(shown)]
    labels = list(shown)
    if len(shown) < len(robots_seen):
        handles.append(Line2D([], [], color="none"))
        labels.append(f"+{len(robots_seen) - len(shown)} robots")
    handles += [Line2D([], [], color="0.3", ls=style[st], lw=1.5) for st in streams]
    labels += streams
    ax.legend(handles, labels, fontsize=8, loc="best", framealpha=0.85, ncol=2)
    ax.set_xlabel(xlabel)
    ax.set_ylabel("Hz")
    ax.grid(alpha=0.3, which="both")


def _plot_rates(ax, run: RunSummary, colors) -> None:
    series = run.series.get("stream_rates_hz", {})
    if series:
        _plot_stream_series(ax, series, [r.robot_id for r in run.robots], colors, time_axis_label(run))
        _mark_warmup(ax, run, series)
        return
    ax.set_title("Stream rates (whole run)", fontsize=12, loc="left", fontweight="bold")
    bars = [(f"{r.robot_id}/{k}", v, i) for i, r in enumerate(run.robots) for k, v in sorted(r.rates_hz.items())]
    if not bars:
        _no_data(ax, "stream rates")
        return
    ax.barh(range(len(bars)), [max(v, 1e-3) for _, v, _ in bars], color=[colors(i) for _, _, i in bars])
    ax.set_yticks(range(len(bars)), [k for k, _, _ in bars], fontsize=6 if len(bars) > 16 else 9)
    ax.invert_yaxis()
    lo, hi = max(min(v for _, v, _ in bars), 1e-3), max(v for _, v, _ in bars)
    if hi > 10 * lo:
        _log_axis(ax, lo, hi, "x")  # 30 Hz cameras and 480 Hz wrench streams on one readable axis
    ax.set_xlabel("Hz")
    ax.grid(alpha=0.3, axis="x")


def _cell(x, fmt="{:d}") -> str:
    return "-" if x is None else fmt.format(x)


def _total(xs):
    xs = [x for x in xs if x is not None]
    return sum(xs) if xs else None


def _plot_table(ax, robots: list[RobotRun], colors) -> None:
    ax.set_title("Per robot", fontsize=12, loc="left", fontweight="bold")
    ax.axis("off")
    if not robots:
        _no_data(ax, "robots")
        return
    cols = ["robot", "rounds", "chunks", "p50 ms", "p99 ms", "SLO miss", "refused", "tasks"]
    rows = [[r.robot_id, _cell(r.rounds), _cell(r.chunks_executed), _cell(r.latency_ms_p50, "{:.0f}"),
             _cell(r.latency_ms_p99, "{:.0f}"), _cell(r.slo_misses), _cell(r.refused_inputs),
             _cell(r.tasks_completed)] for r in robots]
    if len(robots) > 1:
        rows.append(["fleet total"] + [_cell(_total(getattr(r, f) for r in robots)) for f in
                                        ("rounds", "chunks_executed")] + ["", ""] +
                    [_cell(_total(getattr(r, f) for r in robots)) for f in
                     ("slo_misses", "refused_inputs", "tasks_completed")])
    table = ax.table(cellText=rows, colLabels=cols, loc="upper center", cellLoc="center")
    table.auto_set_font_size(False)
    table.set_fontsize(9 if len(rows) <= 12 else 7)
    table.scale(1.0, 1.3 if len(rows) <= 12 else 1.0)
    for (row, col), cell in table.get_celld().items():
        if row == 0:
            cell.set_facecolor("#dde3ea")
            cell.set_text_props(fontweight="bold")
            continue
        if col in (5, 6) and rows[row - 1][col] not in ("-", "0"):
            cell.set_facecolor("#f8d7d4")  # any SLO miss or refusal stands out
        if col == 0 and row <= len(robots):
            r, g, b, _ = colors(row - 1)
            cell.set_facecolor((r, g, b, 0.45))  # same colour as the robot's curves
            cell.set_text_props(fontweight="bold")
        if row == len(robots) + 1:
            cell.set_text_props(fontweight="bold")
    piped = [f"{r.robot_id} {r.pipeline}" for r in robots if r.pipeline]
    if piped:  # task pipelines: a text line per robot under the table
        ax.text(0.0, 0.0, "\n".join(piped[:12]), transform=ax.transAxes, fontsize=8, family="monospace",
                va="bottom", ha="left")


def render_dashboard(run: RunSummary, path: str | Path, title: str = "physai-fleet run report",
                     dpi: int = 80, palette: int | None = None) -> Path:
    """Write the dashboard PNG. `palette`: quantize to that many colours (64 makes a ~40 KB file
    for docs, about a third of the full-colour one, with no visible change)."""
    import matplotlib

    matplotlib.use("Agg")  # no display on servers and CI
    import matplotlib.pyplot as plt

    cmap = plt.get_cmap("tab10" if len(run.robots) <= 10 else "tab20")
    colors = lambda i: cmap(i % cmap.N)  # noqa: E731
    fig, axes = plt.subplots(2, 3, figsize=(16, 9.5))
    try:
        _plot_latency(axes[0, 0], run.robots, colors)
        xlabel = time_axis_label(run)
        _plot_series(axes[0, 1], run.series.get("wait_ratio", {}), colors, "wait ratio (sum W / lifetime)",
                     "Wait ratio", "wait ratio series", robot_ids=[r.robot_id for r in run.robots], xlabel=xlabel)
        _plot_series(axes[0, 2], run.series.get("queue_depth", {}), colors, "pending requests",
                     "Scheduler queue depth", "queue depth series", step=True, xlabel=xlabel)
        for ax, kind in ((axes[0, 1], "wait_ratio"), (axes[0, 2], "queue_depth")):
            _mark_warmup(ax, run, run.series.get(kind, {}))
        _plot_rates(axes[1, 0], run, colors)
        axes[1, 2].remove()
        axes[1, 1].remove()
        _plot_table(fig.add_subplot(2, 3, (5, 6)), run.robots, colors)
        fig.suptitle(report_title(run, title), fontsize=15, fontweight="bold")
        fig.tight_layout(rect=(0, 0, 1, 0.96))
        path = Path(path)
        path.parent.mkdir(parents=True, exist_ok=True)
        fig.savefig(path, dpi=dpi)
    finally:
        plt.close(fig)
    if palette:
        from PIL import Image  # matplotlib's own dependency

        with Image.open(path) as im:
            small = im.convert("RGB").quantize(colors=int(palette), method=Image.Quantize.MEDIANCUT)
        small.save(path, optimize=True)
    return path


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(prog="python -m physai_ros.monitoring.report", description=__doc__.split("\n\n")[0])
    ap.add_argument("summary", help="summary JSON written by physai-fleet --summary-json")
    ap.add_argument("-o", "--out", default="out/report.png")
    ap.add_argument("--dpi", type=int, default=80)
    ap.add_argument("--palette", type=int, default=None, help="quantize to N colours (smaller file)")
    args = ap.parse_args(argv)
    try:
        run = load_summary(args.summary)
    except (OSError, ValueError) as exc:
        print(f"report: {exc}", file=sys.stderr)
        return 2
    print(render_dashboard(run, args.out, dpi=args.dpi, palette=args.palette))
    return 0


if __name__ == "__main__":
    sys.exit(main())
