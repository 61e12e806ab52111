"""What the policy server shows per robot on /diagnostics and the metric topics, as plain data.

The serving core counts rounds and refusals; this adds what an operator grades: capture-to-
publish latency p50/p99 and the SLO meet rate over a sliding window (from the chunks the node
publishes), and refusals in the last minute (from the core's growing totals). No rclpy.

Latency here is the server's view: publish time minus the observation's capture stamp, so it
includes the robot->server transport but not server->robot (the robot_client reports that full
round trip). Robot and server clocks must agree (one host, or NTP/PTP).
"""
from __future__ import annotations

import threading
import time
from typing import Any, Callable, Mapping

from physai_ros.monitoring.window import CounterRate, SlidingWindow

STATUS_OK = 0  # ActionChunk.status of a served round


class RobotWindow:
    def __init__(self, window_s: float, slo_ms: float | None, now: float):
        self.slo_ms = slo_ms
        self.since = now
        self.waited_s = 0.0
        self.latency = SlidingWindow(window_s, max_samples=5000)
        self.met = SlidingWindow(window_s, max_samples=5000)
        self.refused = CounterRate(60.0)
        self.errors = CounterRate(60.0)


class ServerView:
    """Per-robot windows (created for robots the server knows, never for claimed ids)."""

    def __init__(self, window_s: float, slo_ms: Callable[[str], float | None],
                 clock: Callable[[], float] = time.time):
        self.window_s = float(window_s)
        self._slo_ms = slo_ms
        self.clock = clock
        self._robots: dict[str, RobotWindow] = {}
        self._lock = threading.Lock()  # runner threads publish chunks, the timer reads

    def _robot(self, robot_id: str) -> RobotWindow:
        w = self._robots.get(robot_id)
        if w is None:
            w = self._robots[robot_id] = RobotWindow(self.window_s, self._slo_ms(robot_id), self.clock())
        return w

    def track(self, robot_id: str) -> bool:
        """Follow `robot_id` from now on; True when it was not followed before."""
        with self._lock:
            new = robot_id not in self._robots
            self._robot(robot_id)
            return new

    def on_chunk(self, robot_id: str, status: int, capture_stamp: float, now: float | None = None,
                 queue_ms: float = 0.0) -> None:
        """A chunk the server published for a robot it tracks (others are ignored)."""
        if status != STATUS_OK:
            return
        now = self.clock() if now is None else now
        with self._lock:
            w = self._robots.get(robot_id)
            if w is None:
                return
            w.waited_s += max(0.0, queue_ms) * 1e-3
            lat_ms = (now - capture_stamp) * 1e3
            w.latency.add(now, lat_ms)
            if w.slo_ms is not None:
                w.met.add(now, 1.0 if lat_ms <= w.slo_ms else 0.0)

    def robot_metrics(self, robot_id: str, core: Mapping[str, Any] | None, now: float | None = None) -> dict:
        """The core's counters for the robot plus the graded window metrics."""
        now = self.clock() if now is None else now
        core = dict(core or {})
        with self._lock:
            w = self._robot(robot_id)
            out = {
                "latency_ms_p50": w.latency.percentile(50, now),
                "latency_ms_p99": w.latency.percentile(99, now),
                "slo_ms": w.slo_ms,
                "slo_meet_rate": w.met.mean(now),
                # Kairos' wait ratio as the server sees it: time this robot's requests waited in
                # the queue over the time since the server first tracked the robot.
                "wait_ratio": w.waited_s / (now - w.since) if now > w.since else None,
                "refused_per_min": w.refused.update(now, float(core.get("refused_total", 0))),
                "errors_per_min": w.errors.update(now, float(core.get("errors", 0))),
            }
        return {**core, **out}

    def robots(self) -> list[str]:
        with self._lock:
            return sorted(self._robots)
