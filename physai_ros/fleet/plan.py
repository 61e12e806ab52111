"""Which processes a fleet runs, derived from fleet.yaml (one plan for physai-fleet, the launch
file and the tests): the policy server, and per robot sim_robot (when simulated), robot_client
and trajectory_controller in the robot's namespace. The robot-side nodes' parameters come from
physai_ros.config.robot_params, which evaluation's lock-step episodes share without ROS.
With security.sros2_enclaves, every node gets the SROS2 enclave /physai_ros/<namespace>/<node>
(`ros2 security create_enclave` makes them; see docs/security.md).
"""
from __future__ import annotations

import dataclasses

from physai_ros.config.fleet import FleetConfig
from physai_ros.config.robot import RobotConfig
from physai_ros.config.robot_params import controller_params, sim_params
from physai_ros.fleet.processes import ProcessSpec


def enclave_name(namespace: str, executable: str) -> str:
    return "/physai_ros/" + "/".join(p for p in (namespace.strip("/"), executable) if p)


def _with_enclave(cfg: FleetConfig, spec: ProcessSpec) -> ProcessSpec:
    if not cfg.security.sros2_enclaves:
        return spec
    return dataclasses.replace(spec, enclave=enclave_name(spec.namespace, spec.executable))


def server_spec(cfg: FleetConfig) -> ProcessSpec:
    # The robot count tells the server which robots were started (cfg may be with_num_robots'
    # clone of the file's list), so it neither waits for nor reports robots never launched.
    return _with_enclave(cfg, ProcessSpec("policy_server", "physai_ros.nodes.policy_server", "",
                                          {"fleet_file": cfg.source, "num_robots": len(cfg.robots)},
                                          executable="policy_server"))


def aggregator_spec() -> ProcessSpec:
    """/diagnostics -> /diagnostics_agg, the tree rqt_robot_monitor reads (nodes/diagnostics_aggregator)."""
    return ProcessSpec("diagnostics_aggregator", "physai_ros.nodes.diagnostics_aggregator", "", {},
                       executable="diagnostics_aggregator")


def robot_specs(cfg: FleetConfig, robot: RobotConfig, controller: bool = True) -> list[ProcessSpec]:
    ns = robot.namespace
    specs = []
    if robot.simulated:
        specs.append(ProcessSpec(f"{ns}/sim_robot", "physai_ros.nodes.sim_robot", ns,
                                 {**sim_params(robot), "fleet_file": cfg.source}, executable="sim_robot"))
    specs.append(ProcessSpec(f"{ns}/robot_client", "physai_ros.nodes.robot_client", ns,
                             {"fleet_file": cfg.source, "robot_id": robot.id}, executable="robot_client"))
    if controller:
        specs.append(ProcessSpec(f"{ns}/trajectory_controller", "physai_ros.nodes.trajectory_controller", ns,
                                 {**controller_params(robot), "fleet_file": cfg.source},
                                 executable="trajectory_controller"))
    return [_with_enclave(cfg, s) for s in specs]


def check_sim(cfg: FleetConfig) -> None:
    """Every simulated robot's `sim:` mapping as its sim_robot will take it (known keys, types,
    values; the sim's event parameters among them), before any process starts: FleetConfigError naming
    the key path, e.g. "robots[1].sim.drop_prob: drop_prob must be within 0..1, got 2.0"."""
    from physai_ros.config_fields import FleetConfigError
    from physai_ros.sim.runtime import check_sim_params
    from physai_ros.sim.tasks import make_task

    for i, robot in enumerate(cfg.robots):
        if robot.simulated:
            try:
                check_sim_params(robot.sim, f"robots[{i}].sim")
            except ValueError as exc:
                raise FleetConfigError(str(exc)) from None
            prompt = sim_params(robot).get("prompt")
            if prompt and "prompt" not in robot.sim:
                # The sim task follows the fleet task's prompt (robot_params.sim_params).
                try:
                    make_task(robot.sim["task"], prompt)
                except ValueError as exc:
                    raise FleetConfigError(f"tasks.{robot.task.name}.prompt (robots[{i}].sim.task "
                                           f"{robot.sim['task']!r} follows it): {exc}") from None


def gateway_specs(cfg: FleetConfig) -> list[ProcessSpec]:
    """The openpi gateway when fleet.yaml has a gateway.openpi section: it stands in for the
    robot-side nodes of the robots it serves (their robots run openpi's client instead)."""
    if cfg.gateway is None:
        return []
    return [_with_enclave(cfg, ProcessSpec("openpi_gateway", "physai_ros.nodes.openpi_gateway", "",
                                           {"fleet_file": cfg.source}, executable="openpi_gateway"))]


def fleet_plan(cfg: FleetConfig, controller: bool = True) -> list[ProcessSpec]:
    check_sim(cfg)
    plan = [server_spec(cfg)]
    for r in cfg.ros_robots():
        plan += robot_specs(cfg, r, controller)
    return plan + gateway_specs(cfg)
