"""A LeRobot checkpoint's cameras matched to a robot's by name (serving.validation.camera_slots):
the rule, the server's reordering of the views, and the pre-start refusal."""
import dataclasses

import pytest
import torch
import yaml
from lerobot_layout import write_v04

from physai_ros.client.robot_client import RobotClientCore
from physai_ros.config.fleet import default_fleet_path, load_fleet
from physai_ros.engine.processor.prompt import PromptStyle
from physai_ros.serving.action_runner import ActionModelRunner
from physai_ros.serving.startup.engine_builder import build_core
from physai_ros.serving.startup.preflight import ServerFilesError, check_server_files, checkpoint_cameras
from physai_ros.serving.validation import BAD_REGISTRATION, ModelLimits, camera_slots, check_registration

from observation_builders import make_image, make_obs

CAMS = ("observation.images.top", "observation.images.wrist")


@pytest.mark.parametrize("named, views, expected", [
    ((), 2, (0, 1)),  # unnamed: the checkpoint's order
    (("wrist", "top"), 2, (1, 0)),  # short names, any order
    (("observation.images.top", "wrist"), 2, (0, 1)),
    ((), 1, "1 camera(s), the checkpoint has 2"),
    (("top", "side"), 2, "camera feature 'observation.images.side' is not one of the checkpoint's"),
    (("top", "top"), 2, "each camera feeds a different feature"),
    (("top",), 1, "no camera feeds the checkpoint's observation.images.wrist"),
    (("top",), 2, "1 camera feature(s) for 2 view(s)"),
])
def test_camera_slots(named, views, expected):
    got = camera_slots(named, views, CAMS)
    assert got == expected if isinstance(expected, tuple) else expected in got
    assert camera_slots(("anything",), 1, ()) == (0,)  # our own checkpoints: views in the robot's order


def test_a_robot_whose_cameras_do_not_match_is_refused_at_registration(fleet):
    reg = dataclasses.replace(RobotClientCore(fleet.robots[0]).registration(), camera_features=("top", "side"))
    refusal = check_registration(reg, ModelLimits(3, 8, 8, CAMS))
    assert refusal.reason == BAD_REGISTRATION and "'observation.images.side' is not one of" in refusal.detail
    assert check_registration(dataclasses.replace(reg, camera_features=("top", "wrist")), ModelLimits(3, 8, 8, CAMS)) \
        is None


def test_views_named_in_another_order_reach_the_model_in_the_checkpoints_order(fleet):
    core = build_core(fleet)  # the tiny model's sizes and tokenizer; only prepare() runs here
    runner = ActionModelRunner(core.model_config, core.action_runner.tokenizer, None, PromptStyle("lerobot_pi0"), CAMS)
    robot = fleet.robots[0]
    a, b = make_image(40, 60, seed=1), make_image(30, 50, seed=2)
    reg = dataclasses.replace(RobotClientCore(robot).registration(), camera_features=("wrist", "top"))
    named = runner.prepare(make_obs(robot, 1, images=(b, a)), reg)  # wrist first on this robot
    plain = runner.prepare(make_obs(robot, 1, images=(a, b)), dataclasses.replace(reg, camera_features=()))
    assert [tuple(f.shape) for f in named.images] == [(3, 40, 60), (3, 30, 50)]
    assert all(torch.equal(x, y) for x, y in zip(named.images, plain.images))


def test_a_fleet_whose_cameras_do_not_match_the_checkpoint_stops_before_anything_starts(tmp_path):
    write_v04(tmp_path / "ckpt")
    assert checkpoint_cameras(tmp_path / "ckpt") == ("observation.images.base_0_rgb",
                                                     "observation.images.left_wrist_0_rgb")
    doc = yaml.safe_load(default_fleet_path().read_text())
    for task in doc["tasks"].values():
        task.pop("mode", None)
    doc["server"]["model"]["checkpoint"] = "ckpt"
    robot = doc["robots"][0]
    doc["robots"] = [dict(robot, cameras=[{"topic": "camera_0/image_raw", "feature": "left_wrist_0_rgb"},
                                          {"topic": "camera_1/image_raw", "feature": "base_0_rgb"}])]
    fleet = tmp_path / "fleet.yaml"
    fleet.write_text(yaml.safe_dump(doc))
    check_server_files(load_fleet(fleet))  # named, in another order: accepted
    doc["robots"][0]["cameras"][1]["feature"] = "right_wrist_0_rgb"
    fleet.write_text(yaml.safe_dump(doc))
    with pytest.raises(ServerFilesError, match=r"^robots\[0\]\.cameras \(robot_0\): camera feature "
                                               r"'observation\.images\.right_wrist_0_rgb' is not one of"):
        check_server_files(load_fleet(fleet))
