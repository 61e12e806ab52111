"""QoS profiles of the robot-side topics.

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


# Topic names inside a robot's namespace (the contract the other nodes code against).
CAMERA_TOPIC = "camera_{i}/image_raw"
WRENCH_TOPIC = "wrench"
JOINT_STATES_TOPIC = "joint_states"
ACTION_CHUNK_TOPIC = "action_chunk"
TRAJECTORY_SEGMENT_TOPIC = "trajectory_segment"
EXECUTION_INFO_TOPIC = "execution_info"
JOINT_TRAJECTORY_TOPIC = "joint_trajectory"
TASK_STATUS_TOPIC = "task_status"


def camera_topic(i: int) -> str:
    return CAMERA_TOPIC.format(i=i)
