"""The process plan physai-fleet, the launch file and the tests share."""
from physai_ros.config.robot_params import sim_params
from physai_ros.fleet.plan import fleet_plan
from physai_ros.fleet.report import summary_fields


def test_plan_has_server_then_sim_client_controller_per_robot(fleet):
    plan = fleet_plan(fleet)
    assert [s.name for s in plan[:4]] == ["policy_server", "robot_0/sim_robot", "robot_0/robot_client",
                                          "robot_0/trajectory_controller"]
    assert len(plan) == 1 + 3 * len(fleet.robots)
    cmd = plan[2].argv("py")
    assert cmd[:6] == ["py", "-m", "physai_ros.nodes.robot_client", "--ros-args", "-r", "__ns:=/robot_0"]
    assert f"fleet_file:={fleet.source}" in cmd and "robot_id:=robot_0" in cmd
    ctrl = plan[3].argv("py")
    assert "joint_names:=[joint_0,joint_1,joint_2,joint_3,gripper]" in ctrl and "control_rate_hz:=100.0" in ctrl
    assert [s.name for s in fleet_plan(fleet, controller=False)][:3] == [
        "policy_server", "robot_0/sim_robot", "robot_0/robot_client"]


def test_plan_specs_carry_what_physai_fleet_and_the_launch_file_need(fleet):
    specs = fleet_plan(fleet.with_num_robots(5))
    assert len(specs) == 16 and specs[-1].namespace == "robot_4"
    # The launch file starts the console script with the same parameters physai-fleet passes.
    assert [s.executable for s in specs[:4]] == ["policy_server", "sim_robot", "robot_client",
                                                 "trajectory_controller"]
    assert specs[0].params["num_robots"] == 5 and specs[2].params["robot_id"] == "robot_0"


def test_summary_fields_from_client_status():
    s = summary_fields({"chunks_ok": 12, "latency_ms_p50": 5.0, "latency_ms_p99": 9.0, "slo_misses": 1,
                        "refused": 2, "state": "running"})
    assert s == {"rounds": 12, "latency_ms_p50": 5.0, "latency_ms_p99": 9.0, "slo_misses": 1,
                 "refused_inputs": 2, "client_state": "running", "round_ledger": None}
    assert summary_fields(None)["rounds"] == 0
    ledger = {"sent": 3, "answered": 3, "lost": 0, "duplicated": 0}
    assert summary_fields({"round_ledger": ledger})["round_ledger"] == ledger


def test_integer_sim_rates_reach_the_node_as_floats(fleet):
    """`camera_rate_hz: 15` in fleet.yaml: rclpy would refuse the INTEGER for the sim's DOUBLE
    parameter and the sim_robot process would die at start."""
    from dataclasses import replace

    robot = replace(fleet.robots[0], sim={**fleet.robots[0].sim, "camera_rate_hz": 15, "seed": 3})
    params = sim_params(robot)
    assert params["camera_rate_hz"] == 15.0 and isinstance(params["camera_rate_hz"], float)
    assert params["seed"] == 3 and isinstance(params["seed"], int)
