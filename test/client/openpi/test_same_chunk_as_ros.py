"""A robot served through the openpi gateway gets the chunk a ROS robot gets: the same frames and
joint state, sent once as openpi's client sends them and once as the ROS robot client builds its
observation (through the Observation message both reach the server as), give the same engine
input and, with the same noise, the same chunk."""
import dataclasses

import numpy as np
import torch

from physai_ros.client.openpi.session import OpenpiSession
from physai_ros.client.robot_client import RobotClientCore
from physai_ros.protocol.openpi_layouts import LAYOUTS
from physai_ros.protocol.registration import RegistrationResult
from physai_ros.ros.codecs.observation import observation_from_msg, observation_to_msg
from physai_ros.serving.startup.engine_builder import build_core

from observation_builders import make_image


def test_the_gateways_round_and_the_ros_clients_round_give_the_same_chunk(fleet):
    robot = fleet.robots[1]
    frames = [make_image(*robot.camera_size(v), seed=7 + v) for v in range(robot.num_views)]
    state = np.linspace(-0.3, 0.4, len(robot.joints)).astype(np.float32)

    ros = RobotClientCore(robot)
    for v, im in enumerate(frames):
        ros.on_image(v, im, 10.0)
    ros.on_joint_state(list(robot.joints), state.tolist())
    ros.on_registered(RegistrationResult(True, "", "srv"))
    ros_obs = ros.tick(10.0).observation

    gateway = OpenpiSession(robot, LAYOUTS["libero"], hold_fallback=False)
    gateway.on_registered(RegistrationResult(True, "", "srv"))
    gw_obs = gateway.observation({"observation/image": frames[0].array(), "observation/wrist_image": frames[1].array(),
                                  "observation/state": state}, 10.0)

    # Both as the policy server reads them off the wire.
    ros_in, gw_in = (observation_from_msg(observation_to_msg(o)) for o in (ros_obs, gw_obs))
    core = build_core(dataclasses.replace(fleet, server=dataclasses.replace(fleet.server, max_observation_age_s=1e9)),
                      instance_id="same")
    runner, engine = core.action_runner, core.engines["engine_0"].engine
    reg = ros.registration()
    inputs = [runner.prepare(o, reg) for o in (ros_in, gw_in)]
    for a, b in zip(*(dataclasses.astuple(x) for x in inputs)):
        if isinstance(a, torch.Tensor):
            assert torch.equal(a, b)
    noise = torch.randn(engine.config.chunk_size, engine.config.max_action_dim, generator=torch.Generator().manual_seed(3))
    outs = runner.execute(engine, [dataclasses.replace(x, noise=noise) for x in inputs])
    chunks = [runner.finish(o, reg, runner.to_host(out), "engine_0", 0.0, 0.0) for o, out in zip((ros_in, gw_in), outs)]
    assert chunks[0].status == chunks[1].status == 0
    np.testing.assert_array_equal(chunks[0].actions, chunks[1].actions)
    assert chunks[0].horizon == chunks[1].horizon and chunks[0].joint_names == chunks[1].joint_names
