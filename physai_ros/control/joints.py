"""The default joint names of an arm with `num_joints` revolute joints: joint_0 .. joint_{n-1},
then the gripper. The trajectory controller falls back to them when it is given no joint_names
(a robot-only deployment configured by num_joints alone); the simulated arm (physai_ros.sim.robot)
names its joints with the same function, so a controller and a simulated robot agree without the
controller depending on the simulator.
"""
from __future__ import annotations

MIN_JOINTS = 2  # base yaw + at least one pitch joint


def default_joint_names(num_joints: int) -> tuple[str, ...]:
    if num_joints < MIN_JOINTS:
        raise ValueError(f"num_joints must be >= {MIN_JOINTS} (base yaw + at least one pitch), got {num_joints}")
    return tuple(f"joint_{i}" for i in range(num_joints)) + ("gripper",)
