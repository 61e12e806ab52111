"""What the fleet monitor measures per robot: stream rate counters (its own arrivals, and the
publishers' running counts) and the RobotSummary it builds from them. Plain data, no rclpy, so
the monitor node (physai_ros.nodes.fleet_monitor) and physai-fleet's report (physai_ros.fleet.report)
share it from below both."""
from __future__ import annotations

from dataclasses import dataclass, field


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
