"""ServingCore's clock may be replaced after construction (evaluation runs the server in simulated
time): what arrives is judged by the clock set last, robots in (serving.intake) included."""
import dataclasses

from physai_ros.client.robot_client import RobotClientCore
from physai_ros.serving.startup.engine_builder import build_core

from observation_builders import make_obs


def test_observations_are_judged_by_the_clock_set_on_the_core(fleet):
    core = build_core(dataclasses.replace(fleet, server=dataclasses.replace(fleet.server, max_observation_age_s=2.0)),
                      instance_id="clock")
    robot = fleet.robots[0]
    core.clock = lambda: 1000.0
    assert core.register(RobotClientCore(robot).registration()).accepted
    assert core.submit(make_obs(robot, 2, stamp=999.5)) == []  # fresh by the core's clock, not the wall's
    core.clock = lambda: 1010.0
    [refused] = core.submit(make_obs(robot, 4, stamp=1000.0))
    assert refused.error.startswith("stale_timestamp")
