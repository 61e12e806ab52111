"""Plain data crossing the scheduler's boundary (server <-> scheduler, simulator <-> scheduler).

All times are seconds on one clock shared by the server and its robots (ROS time in the
server, simulated time in the fleet simulator). The scheduler never reads a clock itself:
every entry point takes `now`, which keeps it deterministic and testable.
"""
from __future__ import annotations

import bisect
import math
from dataclasses import dataclass, field
from typing import Any, Literal, Optional, Sequence

Tier = Literal["edge", "cloud"]


@dataclass(frozen=True)
class LatencyProfile:
    """Generation latency (seconds) versus batch size for one engine instance.

    Profiles are measured points; between points latency is interpolated linearly and
    beyond the last point extrapolated with the last segment's slope (never below it), so a
    caller can ask about any batch size >= 1.
    """

    batch_sizes: tuple[int, ...]
    latencies_s: tuple[float, ...]

    def __post_init__(self) -> None:
        if len(self.batch_sizes) == 0 or len(self.batch_sizes) != len(self.latencies_s):
            raise ValueError("LatencyProfile needs equally long, non-empty batch_sizes and latencies_s")
        if any(b < 1 for b in self.batch_sizes) or list(self.batch_sizes) != sorted(set(self.batch_sizes)):
            raise ValueError(f"batch sizes must be >= 1 and strictly increasing, got {self.batch_sizes}")
        if any(not (math.isfinite(t) and t > 0) for t in self.latencies_s):
            raise ValueError(f"latencies must be finite and > 0, got {self.latencies_s}")

    @classmethod
    def from_pairs(cls, pairs: Sequence[Sequence[float]]) -> "LatencyProfile":
        """From [[batch, latency_s], ...] (the form used in workload files and fleet.yaml)."""
        pts = sorted((int(b), float(t)) for b, t in pairs)
        return cls(tuple(b for b, _ in pts), tuple(t for _, t in pts))

    @classmethod
    def constant(cls, latency_s: float) -> "LatencyProfile":
        """Batch-size independent latency with no batching benefit (saturates at batch 1)."""
        return cls((1, 2), (latency_s, 2 * latency_s))

    def latency(self, batch: int) -> float:
        if batch < 1:
            raise ValueError(f"batch size must be >= 1, got {batch}")
        bs, ts = self.batch_sizes, self.latencies_s
        if batch <= bs[0]:
            return ts[0]
        i = bisect.bisect_left(bs, batch)
        if i < len(bs):
            if bs[i] == batch:
                return ts[i]
            b0, b1, t0, t1 = bs[i - 1], bs[i], ts[i - 1], ts[i]
            return t0 + (t1 - t0) * (batch - b0) / (b1 - b0)
        if len(bs) == 1:
            # One measured point: assume no batching benefit beyond it.
            return ts[0] * batch / bs[0]
        slope = max(0.0, (ts[-1] - ts[-2]) / (bs[-1] - bs[-2]))
        return ts[-1] + slope * (batch - bs[-1])

    def saturation_batch(self, tolerance: float = 0.05) -> int:
        """Smallest measured batch whose throughput is within `tolerance` of the best measured.

        Past this point a bigger batch raises latency without buying throughput (Kairos §3.2.2).
        """
        thr = [b / t for b, t in zip(self.batch_sizes, self.latencies_s)]
        best = max(thr)
        for b, x in zip(self.batch_sizes, thr):
            if x >= (1.0 - tolerance) * best:
                return b
        return self.batch_sizes[-1]  # unreachable: the best point qualifies

    def to_pairs(self) -> list[list[float]]:
        return [[b, t] for b, t in zip(self.batch_sizes, self.latencies_s)]


# The component of a request for the action model (the only one today; the pipeline and
# language issues add planner, monitor and text components, each with its own model runner).
ACTION = "action"


@dataclass
class Request:
    """One pending inference request: one round of one task (Kairos §4's client fields).

    exec_phase_start / actions_remaining / control_period are the robot's piggybacked
    execution info at the moment it sent the request: the phase that is executing now started
    at exec_phase_start and ends actions_remaining * control_period after arrival_time.
    exec_phase_start is None when nothing is executing yet (a task's first round).
    last_exec_duration is an optional client-side hint (seconds) for the previous round's
    execution length, used when the server has no history for the task (e.g. after restart).
    payload is the server's opaque observation object; the scheduler never looks inside.
    component names the model component the request is for (the action model today; planner,
    monitor and language components later): the server picks the model runner by it.
    """

    request_id: str
    robot_id: str
    task_id: str
    round_id: int
    arrival_time: float
    obs_capture_time: float
    exec_phase_start: Optional[float]
    actions_remaining: int
    control_period: float
    last_exec_duration: Optional[float] = None
    # True when this observation answers a refresh the scheduler asked for (Observation.refresh).
    refresh: bool = False
    component: str = ACTION
    payload: Any = field(default=None, repr=False, compare=False)


@dataclass
class EngineInstanceInfo:
    """What the scheduler needs to know about one engine instance right now.

    busy_until: when the instance finishes its current batch (<= now: idle). network_rtt_s:
    round trip between server and instance (0 in-process, ~0.1 s for a WAN cloud tier).
    max_batch: hard cap from the engine (None: use the profile's saturation point only).
    """

    instance_id: str
    tier: Tier
    profile: LatencyProfile
    network_rtt_s: float = 0.0
    busy_until: float = 0.0
    max_batch: Optional[int] = None

    def batch_cap(self, tolerance: float = 0.05) -> int:
        cap = self.profile.saturation_batch(tolerance)
        if self.max_batch is not None:
            cap = min(cap, self.max_batch)
        return max(1, cap)

    def service_time(self, batch: int) -> float:
        """Dispatch-to-result time for a batch of this size: network round trip + compute."""
        return self.network_rtt_s + self.profile.latency(batch)


@dataclass(frozen=True)
class Batch:
    instance_id: str
    request_ids: tuple[str, ...]
    # The scheduler's estimate of dispatch-to-result time (rtt + profile latency).
    est_latency_s: float = 0.0


@dataclass
class SchedulerDecision:
    """The plain-data output of one scheduling cycle; the server executes it.

    refresh_request_ids: selected requests whose observation went stale while queued. They are
    NOT in any batch: the server asks each robot for a fresh observation and submits it (same
    task_id and round_id, Request.refresh=True); the scheduler then serves it ahead of
    everything else. If no fresh observation arrives within the scheduler's refresh_timeout_s
    the request is dispatched with the observation it has.
    """

    batches: list[Batch]
    refresh_request_ids: list[str]
    now: float

    @property
    def dispatched_request_ids(self) -> list[str]:
        return [rid for b in self.batches for rid in b.request_ids]


@dataclass(frozen=True)
class SubmitResult:
    accepted: bool
    reason: str = ""
    # Pending requests this submission replaced (an older round of the same task, or the
    # stale copy of a refreshed request with a different request_id): they left the queue, and
    # the server answers them (it gets them back here because the queue was their only home).
    superseded: tuple[Request, ...] = ()
