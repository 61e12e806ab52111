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

from physai_ros.client.streaming import summary_fields as streaming_fields
from physai_ros.monitoring.robot_summary import RobotSummary


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


def run_frames(frames: dict[str, list[tuple[float, np.ndarray]]], origin_s: float
               ) -> list[tuple[str, list[tuple[float, np.ndarray]]]]:
    """The contact sheet's rows: each robot's (monitor time, frame) cells from origin_s on (the
    moment the policy server served), timed from it like rebase_series. Frames from the warm-up
    show robots standing still before anything was served (the first 30 s demo's sheet was 10
    of them and 6 of the run); all are kept when none is later."""
    later = {ns: [(round(t - origin_s, 3), f) for t, f in cells if t >= origin_s] for ns, cells in frames.items()}
    if not any(later.values()):
        later = {ns: [(round(t - origin_s, 3), f) for t, f in cells] for ns, cells in frames.items()}
    return list(later.items())


CAPTION_FONT, CAPTION_SCALE, CAPTION_LINE_PX = cv2.FONT_HERSHEY_SIMPLEX, 0.35, 12
CAPTION_MAX_LINES = 3  # per caption line once wrapped; the rest is cut with "..."
CAPTION_COLOURS = [(255, 255, 255), (140, 230, 255)]  # BGR: what the robot said, then the simulator


def wrap_caption(text: str, width_px: int, max_lines: int = CAPTION_MAX_LINES) -> list[str]:
    """Greedy word wrap to width_px as cv2.putText draws it; a word wider than a line is broken,
    and what does not fit in max_lines ends the last line with "..."."""
    def fits(s: str) -> bool:
        return cv2.getTextSize(s, CAPTION_FONT, CAPTION_SCALE, 1)[0][0] <= width_px

    lines, cur = [], ""
    for word in text.split():
        while word:
            cand = f"{cur} {word}" if cur else word
            if fits(cand):
                cur, word = cand, ""
            elif cur:
                lines.append(cur)
                cur = ""
            else:  # one word wider than the line: as many characters as fit
                n = max(1, max(k for k in range(1, len(word) + 1) if k == 1 or fits(word[:k])))
                lines.append(word[:n])
                word = word[n:]
    if cur:
        lines.append(cur)
    if len(lines) > max_lines:
        last = lines[max_lines - 1]
        while last and not fits(last + "..."):
            last = last[:-1]
        lines = lines[:max_lines - 1] + [last + "..."]
    return lines


def _caption_band(lines: list[str], width: int, height: int) -> np.ndarray:
    band = np.zeros((height, width, 3), np.uint8)
    y = CAPTION_LINE_PX - 2
    for i, text in enumerate(lines):
        for row in wrap_caption(text, width - 6):
            cv2.putText(band, row, (3, y), CAPTION_FONT, CAPTION_SCALE, CAPTION_COLOURS[min(i, 1)], 1, cv2.LINE_AA)
            y += CAPTION_LINE_PX
    return band


def contact_sheet(rows: list[tuple[str, list[tuple[float, np.ndarray]]]], cell_height: int = 224,
                  captions: list[list[list[str]]] | None = None) -> np.ndarray:
    """One row per robot of (time, RGB frame) cells, labelled; returns a BGR image for cv2.imwrite.
    captions[row][cell]: lines written under that frame (monitoring.text_report.frame_caption: what
    the robot had said by then and what the simulator knew), wrapped to the cell's width; every
    cell gets a band as tall as the longest caption needs."""
    if not rows or not any(cells for _, cells in rows):
        raise ValueError("no frames to put on a contact sheet")
    ncols = max(len(cells) for _, cells in rows)
    band_h = 0
    if captions:
        widths = [[max(1, round(f.shape[1] * cell_height / f.shape[0])) for _, f in cells] for _, cells in rows]
        band_h = max((sum(len(wrap_caption(line, w - 6)) for line in cap) for row_caps, row_w in zip(captions, widths)
                      for cap, w in zip(row_caps, row_w)), default=0) * CAPTION_LINE_PX + 4
    out_rows = []
    for r, (label, cells) in enumerate(rows):
        imgs = []
        for c, (t, frame) in enumerate(cells):
            h, w = frame.shape[:2]
            cell = cv2.resize(frame, (max(1, round(w * cell_height / h)), cell_height))
            cell = cv2.cvtColor(cell, cv2.COLOR_RGB2BGR)
            cv2.putText(cell, f"{label} t={t:.1f}s", (4, 14), cv2.FONT_HERSHEY_SIMPLEX, 0.4, (255, 255, 255), 1,
                        cv2.LINE_AA)
            if band_h:
                cap = captions[r][c] if r < len(captions) and c < len(captions[r]) else []
                cell = np.concatenate([cell, _caption_band(cap, cell.shape[1], band_h)], axis=0)
            imgs.append(cell)
        width = imgs[0].shape[1] if imgs else cell_height
        while len(imgs) < ncols:
            imgs.append(np.zeros((cell_height + band_h, width, 3), np.uint8))
        out_rows.append(np.concatenate(imgs, axis=1))
    width = max(r.shape[1] for r in out_rows)
    out_rows = [np.pad(r, ((0, 0), (0, width - r.shape[1]), (0, 0))) for r in out_rows]
    return np.concatenate(out_rows, axis=0)
