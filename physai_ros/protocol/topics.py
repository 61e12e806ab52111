"""Every topic and service name of the system, in one place.

Names without a leading slash are relative to a robot's namespace (the contract the robot-side
nodes code against); absolute ones are global. QoS profiles live with the ROS glue
(physai_ros/ros/qos.py); the names are plain strings so launchers, tests and benches can use
them without rclpy.
"""
from __future__ import annotations

import re

# ---- robot side (in the robot's namespace) ----------------------------------------------
CAMERA_TOPIC = "camera_{i}/image_raw"
WRENCH_TOPIC = "wrench"
JOINT_STATES_TOPIC = "joint_states"
ACTION_CHUNK_TOPIC = "action_chunk"
TRAJECTORY_SEGMENT_TOPIC = "trajectory_segment"
EXECUTION_INFO_TOPIC = "execution_info"
JOINT_TRAJECTORY_TOPIC = "joint_trajectory"
TASK_STATUS_TOPIC = "task_status"

# ---- serving path (in the robot's namespace; the service is global) -----------------------
OBSERVATION_TOPIC = "observation"  # robot_client -> policy_server
REFRESH_TOPIC = "observation_refresh"  # policy_server -> robot_client: resend this round fresh
CLIENT_STATUS_TOPIC = "client_status"  # robot_client counters (JSON), 1 Hz
OPERATOR_COMMAND_SERVICE = "operator_command"  # robot_client: signed resume / acknowledge (OperatorCommand)
STREAM_WRENCH_TOPIC = "stream_wrench"  # robot_client -> policy_server, streaming mode
REGISTER_SERVICE = "/policy_server/register_robot"
# Task pipelines (ComponentQuery/ComponentAnswer are protocol.component's topics).
PIPELINE_EVENT_TOPIC = "pipeline_event"  # robot_client: one PipelineEvent per pipeline decision
RESET_EPISODE_SERVICE = "reset_episode"  # sim_robot: end the episode now (a monitor's "failed")

# ---- monitoring ---------------------------------------------------------------------------
DIAGNOSTICS_TOPIC = "/diagnostics"  # absolute: every node's statuses; the aggregator listens there
DIAGNOSTICS_AGG_TOPIC = "/diagnostics_agg"  # the aggregated tree: what rqt_robot_monitor reads
DIAGNOSTICS_TOPLEVEL_TOPIC = "/diagnostics_toplevel_state"  # the tree's worst level (DiagnosticStatus)

# ---- engine workers (the contract between a worker and its proxy in the server) -----------
WORKER_NAMESPACE = "/engine_workers"
_ID = re.compile(r"^[A-Za-z][A-Za-z0-9_]*$")


def camera_topic(i: int) -> str:
    return CAMERA_TOPIC.format(i=i)


def robot_topic(namespace: str, name: str) -> str:
    """`name` in a robot's namespace as an absolute topic ("/<ns>/<name>"; "/<name>" for none)."""
    ns = namespace.strip("/")
    return f"/{ns}/{name}" if ns else f"/{name}"


def check_instance_id(instance_id: str) -> str:
    # The id becomes a ROS name token, so it must be one.
    if not isinstance(instance_id, str) or not _ID.match(instance_id):
        raise ValueError(f"instance_id: expected letters, digits and '_' starting with a letter, "
                         f"got {instance_id!r}")
    return instance_id


def request_topic(instance_id: str) -> str:
    return f"{WORKER_NAMESPACE}/{check_instance_id(instance_id)}/batch_request"


def result_topic(instance_id: str) -> str:
    return f"{WORKER_NAMESPACE}/{check_instance_id(instance_id)}/batch_result"


def status_topic(instance_id: str) -> str:
    return f"{WORKER_NAMESPACE}/{check_instance_id(instance_id)}/status"


def component_request_topic(instance_id: str) -> str:
    """Pipeline component questions for the VLM components a factory plan puts on this worker."""
    return f"{WORKER_NAMESPACE}/{check_instance_id(instance_id)}/component_query"


def component_result_topic(instance_id: str) -> str:
    return f"{WORKER_NAMESPACE}/{check_instance_id(instance_id)}/component_answer"
