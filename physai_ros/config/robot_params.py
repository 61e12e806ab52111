"""The parameters of a fleet robot's robot-side nodes (sim_robot, trajectory_controller), derived
from its fleet.yaml entry. One derivation for the launcher's process plan (physai_ros.fleet.plan)
and for evaluation's lock-step episodes, which build the same simulated robot without ROS, so
the two cannot drift apart; it sits here, beside RobotConfig, below both.
"""
from __future__ import annotations

from typing import Any

from physai_ros.config.robot import RobotConfig


def sim_params(robot: RobotConfig) -> dict[str, Any]:
    """The sim_robot node's parameters (SimRobotConfig fields) for this robot, as rclpy takes them.
    A sim task whose goal follows its instruction (place_in_order) gets the fleet task's prompt,
    the one the robot's client sends, unless `sim.prompt` sets another."""
    from physai_ros.sim.runtime import SimRobotConfig
    from physai_ros.sim.tasks import TASKS

    defaults = vars(SimRobotConfig())
    p: dict[str, Any] = {"robot_id": robot.id, "num_views": robot.num_views,
                         "image_width": robot.image_width, "image_height": robot.image_height}
    if robot.camera_sizes:
        p["view_sizes"] = ",".join(f"{h}x{w}" for h, w in robot.camera_sizes)
    task_cls = TASKS.get(robot.sim.get("task", defaults["task"]))
    if task_cls is not None and task_cls.reads_prompt:
        p["prompt"] = robot.task.prompt
    for key, value in robot.sim.items():
        # rclpy refuses an INTEGER for a DOUBLE parameter: `camera_rate_hz: 15` in fleet.yaml
        # must reach the node as 15.0, not crash it.
        if isinstance(defaults.get(key), float) and isinstance(value, int) and not isinstance(value, bool):
            value = float(value)
        p[key] = value
    return p


def merge_params(robot: RobotConfig) -> dict[str, Any]:
    """The trajectory buffer's merge rule for this robot's task (`chunk_merge`, docs/rtc.md):
    crossfade blends; off and rtc replace (an RTC chunk already continues the old plan where it
    lands, so a blend would only pull it back towards the old chunk's later actions)."""
    cm = robot.task.chunk_merge
    return {"merge": cm.controller_merge, "crossfade_s": float(cm.crossfade_s)}


def controller_params(robot: RobotConfig) -> dict[str, Any]:
    """The trajectory_controller node's parameters for this robot (its joints, control rate and
    merge rule)."""
    return {"robot_id": robot.id, "joint_names": list(robot.joints),
            "control_rate_hz": float(robot.control_rate_hz), **merge_params(robot)}
