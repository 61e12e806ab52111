"""Which processes a fleet runs, derived from fleet.yaml (one plan for physai-fleet, the launch
file and the tests): the policy server, and per robot sim_robot (when simulated), robot_client
and trajectory_controller in the robot's namespace. The robot-side nodes' parameters come from
physai_ros.serving.robot_params, which evaluation's lock-step episodes share without ROS.
"""
from __future__ import annotations

import os
import subprocess
import sys
from dataclasses import dataclass, field
from typing import Any

from physai_ros.fleet.processes import ProcessSpec as FleetProcessSpec
from physai_ros.serving.config import FleetConfig, RobotConfig
from physai_ros.serving.robot_params import controller_params, sim_params


@dataclass(frozen=True)
class ProcessSpec:
    name: str  # unique in the plan, e.g. "robot_0/robot_client"
    executable: str  # console script / node name (setup.py NODES)
    module: str  # python -m target
    namespace: str  # "" for the server
    parameters: dict[str, Any] = field(default_factory=dict)

    def command(self, python: str = sys.executable) -> list[str]:
        return self.as_fleet_process().argv(python)

    def as_fleet_process(self):
        """This spec as physai_ros.fleet.processes.ProcessSpec (what physai-fleet's ProcessGroup
        runs, and the one place that renders ROS arguments)."""
        return FleetProcessSpec(self.name, self.module, self.namespace, dict(self.parameters))


def server_spec(cfg: FleetConfig) -> ProcessSpec:
    # The robot count tells the server which robots were started (cfg may be with_num_robots'
    # clone of the file's list), so it neither waits for nor reports robots never launched.
    return ProcessSpec("policy_server", "policy_server", "physai_ros.nodes.policy_server", "",
                       {"fleet_file": cfg.source, "num_robots": len(cfg.robots)})


def robot_specs(cfg: FleetConfig, robot: RobotConfig, controller: bool = True) -> list[ProcessSpec]:
    ns = robot.namespace
    specs = []
    if robot.simulated:
        specs.append(ProcessSpec(f"{ns}/sim_robot", "sim_robot", "physai_ros.nodes.sim_robot", ns,
                                 {**sim_params(robot), "fleet_file": cfg.source}))
    specs.append(ProcessSpec(f"{ns}/robot_client", "robot_client", "physai_ros.nodes.robot_client",
                             ns, {"fleet_file": cfg.source, "robot_id": robot.id}))
    if controller:
        specs.append(ProcessSpec(f"{ns}/trajectory_controller", "trajectory_controller",
                                 "physai_ros.nodes.trajectory_controller", ns,
                                 {**controller_params(robot), "fleet_file": cfg.source}))
    return specs


def fleet_plan(cfg: FleetConfig, controller: bool = True) -> list[ProcessSpec]:
    plan = [server_spec(cfg)]
    for r in cfg.robots:
        plan += robot_specs(cfg, r, controller)
    return plan


def start(spec: ProcessSpec, log_dir: str | None = None, env: dict | None = None) -> subprocess.Popen:
    """Start one process in its own session (so a Ctrl-C to the parent is delivered by us,
    in order, and a kill reaches its children)."""
    out = subprocess.DEVNULL
    if log_dir is not None:
        os.makedirs(log_dir, exist_ok=True)
        out = open(os.path.join(log_dir, spec.name.replace("/", "__") + ".log"), "wb")
    return subprocess.Popen(spec.command(), stdout=out, stderr=subprocess.STDOUT,
                            env={**os.environ, **(env or {})}, start_new_session=True)


def stop(procs: list[subprocess.Popen], timeout_s: float = 5.0) -> None:
    """SIGINT (clean rclpy shutdown), then SIGKILL whatever is still running."""
    import signal
    import time

    for p in procs:
        if p.poll() is None:
            try:
                p.send_signal(signal.SIGINT)
            except ProcessLookupError:
                pass
    deadline = time.monotonic() + timeout_s
    for p in procs:
        try:
            p.wait(timeout=max(0.1, deadline - time.monotonic()))
        except subprocess.TimeoutExpired:
            p.kill()
            p.wait(timeout=5)


def as_fleet_processes(plan: list[ProcessSpec]) -> list:
    """The plan as physai_ros.fleet.processes.ProcessSpec (what physai-fleet's ProcessGroup runs)."""
    return [s.as_fleet_process() for s in plan]
