"""builtin_interfaces Time/Duration <-> float seconds (ROS time, nanosecond exact where it can be)."""
from __future__ import annotations

import math

from builtin_interfaces.msg import Duration, Time

_NS = 1_000_000_000


def to_sec(t: Time | Duration) -> float:
    return t.sec + t.nanosec * 1e-9


def to_ns(t: Time | Duration) -> int:
    return t.sec * _NS + t.nanosec


def time_from_sec(seconds: float) -> Time:
    if not math.isfinite(seconds) or seconds < 0:
        raise ValueError(f"a ROS Time needs finite non-negative seconds, got {seconds!r}")
    return time_from_ns(round(seconds * _NS))


def time_from_ns(ns: int) -> Time:
    sec, nsec = divmod(int(ns), _NS)
    return Time(sec=sec, nanosec=nsec)


def duration_from_sec(seconds: float) -> Duration:
    if not math.isfinite(seconds):
        raise ValueError(f"a ROS Duration needs finite seconds, got {seconds!r}")
    sec, nsec = divmod(round(seconds * _NS), _NS)
    return Duration(sec=sec, nanosec=nsec)


def now_sec(node) -> float:
    """The node's clock (ROS time) in float seconds."""
    return node.get_clock().now().nanoseconds * 1e-9
