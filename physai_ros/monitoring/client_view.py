"""What a robot_client shows on /diagnostics and its metric topics, as plain data (no rclpy).

The node ticks the input streams and reports what the client core and the controller's
ExecutionInfo say; this turns that into rates, windowed latency and SLO meet rate, per-minute
counts of the bad things (refusals, fallbacks, buffer underruns, dropped wrench samples), and
the current buffer fill. Times are monotonic seconds except where noted.
"""
from __future__ import annotations

import math
import threading
from typing import Any, Mapping

from physai_ros.monitoring.window import CounterRate, RateEstimator, SlidingWindow


def finite_wrench(sample) -> bool:
    """A wrench sample is usable when all six components are finite numbers."""
    try:
        vals = [float(x) for x in sample]
    except (TypeError, ValueError):
        return False
    return len(vals) == 6 and all(math.isfinite(v) for v in vals)


class ClientView:
    def __init__(self, num_views: int, slo_ms: float, window_s: float = 30.0, rate_span_s: float = 5.0):
        self.slo_ms = float(slo_ms)
        self.cameras = [RateEstimator(rate_span_s) for _ in range(max(1, num_views))]
        self.wrench = RateEstimator(rate_span_s, max_events=20_000)
        self.joint_states = RateEstimator(rate_span_s)
        self.latency = SlidingWindow(window_s, max_samples=5000)
        self.met = SlidingWindow(window_s, max_samples=5000)
        self.wrench_dropped = 0
        self.last_wrench_drop = ""
        self.underruns = 0  # the controller's count (ExecutionInfo.underruns)
        self.buffer_actions = None  # actions the controller still had at its last report
        self.buffer_s = None
        self._per_min = {k: CounterRate(60.0) for k in ("refused", "fallbacks", "underruns", "wrench_dropped")}
        self._lock = threading.Lock()

    # ---- inputs (callbacks) ----------------------------------------------------------------

    def on_camera(self, view: int, now: float) -> None:
        if 0 <= view < len(self.cameras):
            self.cameras[view].tick(now)

    def on_wrench(self, sample, now: float) -> bool:
        """Counts the sample; returns False (and counts a drop) when it is not usable."""
        if not finite_wrench(sample):
            with self._lock:
                self.wrench_dropped += 1
                self.last_wrench_drop = "non-finite component: " + ", ".join(f"{float(x):g}" for x in sample)
            return False
        self.wrench.tick(now)
        return True

    def on_joint_state(self, now: float) -> None:
        self.joint_states.tick(now)

    def on_exec_info(self, actions_remaining: int, control_period: float, underruns: int) -> None:
        self.buffer_actions = int(actions_remaining)
        self.buffer_s = int(actions_remaining) * float(control_period) if control_period > 0 else None
        self.underruns = int(underruns)

    def on_served(self, latency_s: float, now: float) -> None:
        ms = latency_s * 1e3
        self.latency.add(now, ms)
        self.met.add(now, 1.0 if ms <= self.slo_ms else 0.0)

    # ---- report ----------------------------------------------------------------------------

    def metrics(self, status: Mapping[str, Any], now: float) -> dict:
        """`status` is the node's status() dict (the client core's counters)."""
        fallbacks = sum((status.get("fallbacks") or {}).values())
        with self._lock:
            dropped, last_drop = self.wrench_dropped, self.last_wrench_drop
        per_min = {
            "refused_per_min": self._per_min["refused"].update(now, float(status.get("refused", 0))),
            "fallbacks_per_min": self._per_min["fallbacks"].update(now, float(fallbacks)),
            "underruns_per_min": self._per_min["underruns"].update(now, float(self.underruns)),
            "wrench_dropped_per_min": self._per_min["wrench_dropped"].update(now, float(dropped)),
        }
        return {
            "state": status.get("state", ""),
            "round_id": status.get("round_id"),
            "rounds": status.get("chunks_ok", 0),
            "latency_ms_p50": self.latency.percentile(50, now),
            "latency_ms_p99": self.latency.percentile(99, now),
            "slo_ms": self.slo_ms,
            "slo_meet_rate": self.met.mean(now),
            "camera_hz": min(c.rate_hz(now) for c in self.cameras),
            "wrench_hz": self.wrench.rate_hz(now),
            "joint_states_hz": self.joint_states.rate_hz(now),
            "buffer_actions": self.buffer_actions,
            "buffer_s": self.buffer_s,
            "underruns": self.underruns,
            "fallbacks": dict(status.get("fallbacks") or {}),
            "fallbacks_total": fallbacks,
            "refused": status.get("refused", 0),
            "errors": status.get("errors", 0),
            "wrench_dropped": dropped,
            "last_wrench_drop": last_drop,
            "rounds_lost": (status.get("round_ledger") or {}).get("lost", 0),
            "rounds_duplicated": (status.get("round_ledger") or {}).get("duplicated", 0),
            **per_min,
        }
