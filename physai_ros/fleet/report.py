"""What physai-fleet prints and writes at the end of a run: the per-robot summary lines, the task
completion line, the serving fields from each robot client's status, the --summary-json document
(also what physai_ros.monitoring.report renders) and the contact sheet. Plain data, no rclpy, so
all of it is testable directly; the counts come from the monitor node (physai_ros.nodes.fleet_monitor)
as physai_ros.monitoring.robot_summary.RobotSummary."""
from __future__ import annotations

from dataclasses import asdict
from typing import Any

import cv2
import numpy as np

from physai_ros.monitoring.robot_summary import RobotSummary
from physai_ros.serving.streaming_client import summary_fields as streaming_fields


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


def summary_fields(client_status: dict | None) -> dict[str, Any]:
    """The serving part of a robot's physai-fleet summary, from its robot_client's client_status
    JSON (topic /<ns>/client_status)."""
    st = client_status or {}
    refused = st.get("refused", 0)
    return {
        "rounds": st.get("chunks_ok", 0),
        "latency_ms_p50": st.get("latency_ms_p50"),
        "latency_ms_p99": st.get("latency_ms_p99"),
        "slo_misses": st.get("slo_misses", 0),
        "refused_inputs": refused,
        "client_state": st.get("state", "unknown"),
        "round_ledger": st.get("round_ledger"),
    }


def serving_summary(summaries: list[RobotSummary], client_status: dict[str, dict]) -> list[dict]:
    """Per robot: the monitor's summary plus the serving fields from its client_status."""
    out = []
    for s in summaries:
        st = client_status.get(s.robot_id)
        out.append({"id": s.robot_id, **asdict(s), **summary_fields(st), **streaming_fields(st)})
    return out


def format_serving(serving: list[dict]) -> list[str]:
    """One line per robot of serving_summary()."""
    return [f"  {r['id']} serving: rounds {r['rounds']}, chunks executed {r['chunks_executed']}, "
            f"latency p50 {_ms(r['latency_ms_p50'])} p99 {_ms(r['latency_ms_p99'])}, "
            f"SLO misses {r['slo_misses']}, refused inputs {r['refused_inputs']}, "
            f"tasks completed {r['tasks_completed']}, client {r['client_state']}"
            + (f", streaming ({r['stream_observations']} observations streamed; segments, not chunks)"
               if r.get("mode") == "streaming" else "") for r in serving]


def task_completion_line(summaries: list[RobotSummary]) -> str:
    """Fleet total from the sim robots' task_status. An episode still running at the end is
    neither a success nor a failure yet, so the rate is over ended episodes only: successes
    count the moment they happen, timeouts when the robot resets, so ended = both together."""
    done = sum(s.tasks_completed for s in summaries)
    ended = done + sum(s.timeouts for s in summaries)
    rate = f"{done / ended:.0%} of ended episodes" if ended else "no episode ended yet"
    per = ", ".join(f"{s.robot_id} {s.tasks_completed}/{s.tasks_completed + s.timeouts}" for s in summaries)
    return f"physai-fleet: tasks completed {done} ({rate}); per robot completed/ended: {per}"


def _ms(v) -> str:
    return "-" if v is None else f"{v:.1f} ms"


def rebase_series(series: dict[str, dict[str, dict[str, list[float]]]], origin_s: float) -> dict:
    """The monitor's `series` block with t counted from origin_s (monitor time) instead of from
    the monitor's start. physai-fleet passes the moment the policy server served: the monitor
    starts before the server-up wait, the run's duration_s counts after it, so without this a
    40 s run's axis reached 220 s; samples from the warm-up keep a negative t."""
    return {kind: {label: {"t": [round(t - origin_s, 3) for t in s["t"]], "v": list(s["v"])}
                   for label, s in per_label.items()}
            for kind, per_label in series.items()}


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
