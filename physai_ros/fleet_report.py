"""Plain-data side of the fleet monitor: stream rate counters, per-robot summaries, the contact
sheet. No rclpy here, so all of it is testable directly."""
from __future__ import annotations

import json
from dataclasses import asdict, dataclass, field

import cv2
import numpy as np


class RateCounter:
    """Arrivals of one stream; rate over the span between the first and the last arrival."""

    def __init__(self) -> None:
        self.count = 0
        self.first: float | None = None
        self.last: float | None = None

    def add(self, t: float) -> None:
        if self.first is None:
            self.first = t
        self.last = t
        self.count += 1

    @property
    def rate_hz(self) -> float:
        if self.count < 2 or self.last == self.first:
            return 0.0
        return (self.count - 1) / (self.last - self.first)


class PublishedRate:
    """Rate from a publisher's own running count sampled at two times (first and newest)."""

    def __init__(self) -> None:
        self.first: tuple[float, int] | None = None
        self.last: tuple[float, int] | None = None

    def add(self, stamp: float, count: int) -> None:
        if self.first is None:
            self.first = (stamp, count)
        self.last = (stamp, count)

    @property
    def rate_hz(self) -> float:
        if self.first is None or self.last[0] <= self.first[0]:
            return 0.0
        return (self.last[1] - self.first[1]) / (self.last[0] - self.first[0])


@dataclass
class RobotSummary:
    robot_id: str
    task: str = ""
    chunks_executed: int = 0  # accepted by the trajectory buffer
    chunks_rejected: int = 0
    underruns: int = 0
    last_reject_reason: str = ""
    refused_inputs: dict[str, int] = field(default_factory=dict)  # controller refusals by reason
    holds_applied: int = 0  # robot_client hold chunks that stopped the buffer
    episodes_finished: int = 0
    tasks_completed: int = 0
    timeouts: int = 0
    published_hz: dict[str, float] = field(default_factory=dict)  # publisher side
    rates_hz: dict[str, float] = field(default_factory=dict)  # measured by the monitor's subscribers
    counts: dict[str, int] = field(default_factory=dict)  # messages the monitor received
    # served rounds as the monitor saw them arrive: capture stamp -> arrival, ms (newest 5000)
    latency_samples_ms: list[float] = field(default_factory=list)
    slo_ms: float | None = None  # from the policy server's status of this robot


def format_summary(robots: list[RobotSummary], duration_s: float) -> str:
    lines = [f"physai-fleet: {len(robots)} robot(s), {duration_s:.1f} s"]
    for r in robots:
        lines.append(
            f"  {r.robot_id} [{r.task}]: tasks completed {r.tasks_completed} (episodes ended {r.episodes_finished}, "
            f"timeouts {r.timeouts}), "
            f"chunks executed {r.chunks_executed}, rejected {r.chunks_rejected}, underruns {r.underruns}, "
            f"holds {r.holds_applied}")
        pub = ", ".join(f"{k} {v:.1f}" for k, v in sorted(r.published_hz.items()))
        rates = ", ".join(f"{k} {v:.1f}" for k, v in sorted(r.rates_hz.items()))
        lines.append(f"      published Hz: {pub}")
        lines.append(f"      received Hz: {rates}")
    return "\n".join(lines)


def summary_doc(robots: list[RobotSummary], duration_s: float, extra: dict | None = None) -> dict:
    """The --summary-json document; also what physai_ros.monitoring.report renders."""
    return {"duration_s": duration_s, "robots": [asdict(r) for r in robots], **(extra or {})}


def rebase_series(series: dict[str, dict[str, dict[str, list[float]]]], origin_s: float) -> dict:
    """The monitor's `series` block with t counted from origin_s (monitor time) instead of from
    the monitor's start. physai-fleet passes the moment the policy server served: the monitor
    starts before the server-up wait, the run's duration_s counts after it, so without this a
    40 s run's axis reached 220 s; samples from the warm-up keep a negative t."""
    return {kind: {label: {"t": [round(t - origin_s, 3) for t in s["t"]], "v": list(s["v"])}
                   for label, s in per_label.items()}
            for kind, per_label in series.items()}


def summary_json(robots: list[RobotSummary], duration_s: float, extra: dict | None = None) -> str:
    return json.dumps(summary_doc(robots, duration_s, extra), indent=2)


def contact_sheet(rows: list[tuple[str, list[tuple[float, np.ndarray]]]], cell_height: int = 224) -> np.ndarray:
    """One row per robot of (time, RGB frame) cells, labelled; returns a BGR image for cv2.imwrite."""
    if not rows or not any(cells for _, cells in rows):
        raise ValueError("no frames to put on a contact sheet")
    ncols = max(len(cells) for _, cells in rows)
    out_rows = []
    for label, cells in rows:
        imgs = []
        for t, frame in cells:
            h, w = frame.shape[:2]
            cell = cv2.resize(frame, (max(1, round(w * cell_height / h)), cell_height))
            cell = cv2.cvtColor(cell, cv2.COLOR_RGB2BGR)
            cv2.putText(cell, f"{label} t={t:.1f}s", (4, 14), cv2.FONT_HERSHEY_SIMPLEX, 0.4, (255, 255, 255), 1,
                        cv2.LINE_AA)
            imgs.append(cell)
        width = imgs[0].shape[1] if imgs else cell_height
        while len(imgs) < ncols:
            imgs.append(np.zeros((cell_height, width, 3), np.uint8))
        out_rows.append(np.concatenate(imgs, axis=1))
    width = max(r.shape[1] for r in out_rows)
    out_rows = [np.pad(r, ((0, 0), (0, width - r.shape[1]), (0, 0))) for r in out_rows]
    return np.concatenate(out_rows, axis=0)
