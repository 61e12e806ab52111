"""How well a robot's grasp watch sees drops in simulated shifts: recall per cause, precision and
detection delay, against the sim's ground truth (pipeline_shift.ShiftResult.drops and
.grasp_lost_at).

A "lost" is a true detection when it comes within `window_s` after a drop that no earlier
detection claimed (the delay is the difference); of two such drops it claims the later: a
"lost" reports the grasp's latest change (a release the watch missed, then a slip 0.8 s later
and a "lost" 38 ms after it: the slip was seen, not the release). Any other "lost" is a false
alarm. Recall is
per cause: "slip" (the cube fell through the fingers) and "released" (the policy let go away from
the pad, which a gripper's position cannot tell from a placement). False alarms that came just
after one of the sim's episode ends (ShiftResult.sim_resets: its success or time-limit reset, or
one asked for) are counted apart, by its cause: the reset takes a held cube out of the fingers,
and of the sim's own resets the robot client is not told.
"""
from __future__ import annotations

import statistics
from typing import Sequence

MATCH_WINDOW_S = 1.0


def match(drops: Sequence[tuple[float, str]], detections: Sequence[float],
          window_s: float = MATCH_WINDOW_S) -> tuple[list[tuple[str, float]], list[float]]:
    """One shift: ([(cause, delay_s)] of the drops detected, the false alarms' times)."""
    open_drops = sorted(drops)
    claimed = [False] * len(open_drops)
    hits: list[tuple[str, float]] = []
    false_alarms: list[float] = []
    for t in sorted(detections):
        for i in reversed(range(len(open_drops))):  # the latest drop before t first
            td, cause = open_drops[i]
            if not claimed[i] and td <= t + 1e-9 <= td + window_s + 1e-9:
                claimed[i] = True
                hits.append((cause, round(t - td, 3)))
                break
        else:
            false_alarms.append(t)
    return hits, false_alarms


def score(results: Sequence, window_s: float = MATCH_WINDOW_S) -> dict:
    """Totals over shifts (ShiftResult-like: .drops, .grasp_lost_at, .shift_s)."""
    truth: dict[str, int] = {}
    found: dict[str, int] = {}
    delays: list[float] = []
    detections = false_alarms = 0
    after_reset: dict[str, int] = {}  # false alarms within window_s after a sim reset, by its cause
    hours = sum(r.shift_s for r in results) / 3600
    for r in results:
        for _, cause in r.drops:
            truth[cause] = truth.get(cause, 0) + 1
        hits, fa = match(r.drops, r.grasp_lost_at, window_s)
        detections += len(r.grasp_lost_at)
        false_alarms += len(fa)
        for t in fa:
            cause = next((c for tr, c in getattr(r, "sim_resets", ()) if tr <= t <= tr + window_s), None)
            if cause is not None:
                after_reset[cause] = after_reset.get(cause, 0) + 1
        for cause, delay in hits:
            found[cause] = found.get(cause, 0) + 1
            delays.append(delay)
    true_detections = detections - false_alarms
    return {
        "drops": truth, "detected": found,
        "recall": {c: round(found.get(c, 0) / n, 3) for c, n in truth.items()},
        "detections": detections, "false_alarms": false_alarms, "false_alarms_after_sim_reset": after_reset,
        "precision": round(true_detections / detections, 3) if detections else None,
        "false_alarms_per_hour": round(false_alarms / hours, 2) if hours else None,
        "delay_s": ({"median": round(statistics.median(delays), 3), "max": max(delays), "n": len(delays)}
                    if delays else None),
        "window_s": window_s,
    }
