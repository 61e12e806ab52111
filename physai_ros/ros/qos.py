"""QoS profiles of the robot-side topics (their names: physai_ros.protocol.topics).

Camera and wrench streams are best effort (a late frame is worthless; retransmitting it would
delay the next one), so their subscribers must be best effort too: a reliable subscriber never
matches a best-effort publisher. Everything else is reliable, which both kinds of subscriber
accept.
"""
from __future__ import annotations

from rclpy.qos import DurabilityPolicy, HistoryPolicy, QoSProfile, ReliabilityPolicy


def sensor_data_qos(depth: int = 5) -> QoSProfile:
    return QoSProfile(history=HistoryPolicy.KEEP_LAST, depth=depth,
                      reliability=ReliabilityPolicy.BEST_EFFORT, durability=DurabilityPolicy.VOLATILE)


def reliable_qos(depth: int = 10) -> QoSProfile:
    return QoSProfile(history=HistoryPolicy.KEEP_LAST, depth=depth,
                      reliability=ReliabilityPolicy.RELIABLE, durability=DurabilityPolicy.VOLATILE)


def latched_qos(depth: int = 1) -> QoSProfile:
    """Reliable + transient local: a late subscriber still gets the newest message."""
    return QoSProfile(history=HistoryPolicy.KEEP_LAST, depth=depth,
                      reliability=ReliabilityPolicy.RELIABLE, durability=DurabilityPolicy.TRANSIENT_LOCAL)

