"""physai_ros_interfaces/ExecutionInfo <-> control.types.ExecutionState (the trajectory
controller's report to the robot client and the fleet monitor)."""
from __future__ import annotations

from physai_ros_interfaces.msg import ExecutionInfo

from physai_ros.control.types import ExecutionState
from physai_ros.ros.time_conv import time_from_sec, to_sec


def execution_info_to_msg(st: ExecutionState, robot_id: str, stamp: float) -> ExecutionInfo:
    msg = ExecutionInfo()
    msg.header.stamp = time_from_sec(stamp)
    msg.robot_id = robot_id
    msg.executing_round_id = st.executing_round_id
    msg.exec_phase_start = time_from_sec(max(st.exec_phase_start, 0.0))
    msg.actions_remaining = st.actions_remaining
    msg.control_period = st.control_period
    msg.buffer_nodes = st.buffer_nodes
    msg.buffer_dry = st.buffer_dry
    msg.underruns = st.underruns
    msg.chunks_accepted = st.chunks_accepted
    msg.chunks_rejected = st.chunks_rejected
    msg.last_reject_reason = str(st.last_reject_reason or "")
    return msg


def execution_state_from_msg(msg: ExecutionInfo) -> ExecutionState:
    return ExecutionState(
        executing_round_id=int(msg.executing_round_id), exec_phase_start=to_sec(msg.exec_phase_start),
        actions_remaining=int(msg.actions_remaining), control_period=float(msg.control_period),
        buffer_nodes=int(msg.buffer_nodes), buffer_dry=bool(msg.buffer_dry), underruns=int(msg.underruns),
        chunks_accepted=int(msg.chunks_accepted), chunks_rejected=int(msg.chunks_rejected),
        last_reject_reason=msg.last_reject_reason)
