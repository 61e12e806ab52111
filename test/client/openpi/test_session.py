"""One openpi connection as a fleet robot (client.openpi.session and .layouts): each layout's
keys become the robot's views, state and prompt; a chunk becomes openpi's answer; a late round
gets the task's fallback."""
import dataclasses

import numpy as np
import pytest

from physai_ros.client.openpi.layouts import LayoutError
from physai_ros.client.openpi.session import OpenpiSession
from physai_ros.protocol.chunk import STATUS_OK, STATUS_REFUSED, ActionChunkData
from physai_ros.protocol.openpi_layouts import LAYOUTS
from physai_ros.protocol.registration import RegistrationResult


@pytest.fixture
def robot(fleet):
    r = fleet.robots[0]  # two 224x224 cameras in the shipped fleet
    return dataclasses.replace(r, joints=tuple(f"j{i}" for i in range(8)))


def _libero(h=224, w=224, state_dim=8, prompt="put the cube in the bowl"):
    rng = np.random.default_rng(0)
    return {"observation/image": rng.integers(0, 255, (h, w, 3), dtype=np.uint8),
            "observation/wrist_image": rng.integers(0, 255, (h, w, 3), dtype=np.uint8),
            "observation/state": rng.normal(size=state_dim).astype(np.float32), "prompt": prompt}


def test_a_libero_message_becomes_the_robots_round(robot):
    s = OpenpiSession(robot, LAYOUTS["libero"], hold_fallback=True)
    s.on_registered(RegistrationResult(True, "", "srv", last_round_id=40))
    msg = _libero()
    obs = s.observation(msg, now=100.0)
    assert obs.round_id == 42 and obs.robot_id == robot.id and obs.task_id == robot.task.name and obs.stamp == 100.0
    np.testing.assert_array_equal(obs.images[0].array(), msg["observation/image"])  # no resampling
    np.testing.assert_array_equal(obs.images[1].array(), msg["observation/wrist_image"])
    np.testing.assert_array_equal(obs.state, msg["observation/state"])
    assert obs.prompt == "put the cube in the bowl"
    assert s.observation({**msg, "prompt": ""}, 101.0).prompt == robot.task.prompt
    assert s.registration().robot_id == robot.id and s.registration().num_views == robot.num_views


def test_aloha_sends_channels_first_and_droid_splits_its_state(robot):
    aloha = OpenpiSession(robot, LAYOUTS["aloha"], hold_fallback=False)
    chw = np.random.default_rng(1).integers(0, 255, (3, 224, 224), dtype=np.uint8)
    msg = {"images": {"cam_high": chw, "cam_low": chw}, "state": np.zeros(8), "prompt": "fold"}
    np.testing.assert_array_equal(aloha.observation(msg, 1.0).images[0].array(), chw.transpose(1, 2, 0))
    droid = OpenpiSession(robot, LAYOUTS["droid"], hold_fallback=False)
    img = np.zeros((224, 224, 3), np.uint8)
    obs = droid.observation({"observation/exterior_image_1_left": img, "observation/wrist_image_left": img,
                             "observation/joint_position": np.arange(7.0), "observation/gripper_position": [0.5]}, 1.0)
    np.testing.assert_array_equal(obs.state, [0, 1, 2, 3, 4, 5, 6, 0.5])


@pytest.mark.parametrize("change, reason", [
    (lambda m: m.pop("observation/wrist_image"), "missing_key"),
    (lambda m: m.update({"observation/image": m["observation/image"].astype(np.float32)}), "bad_image"),
    (lambda m: m.update({"observation/image": np.zeros((224, 224, 4), np.uint8)}), "bad_image"),
    (lambda m: m.update({"observation/state": np.zeros(7)}), "bad_state"),
    (lambda m: m.update({"observation/state": np.full(8, np.nan)}), "bad_state"),
    (lambda m: m.update({"observation/state": "eight"}), "bad_state"),
    (lambda m: m.update({"prompt": 3}), "bad_prompt"),
    (lambda m: m.update({"prompt": "x\x00y"}), "bad_prompt"),
])
def test_a_wrong_message_is_refused_by_reason_and_uses_no_round(robot, change, reason):
    s = OpenpiSession(robot, LAYOUTS["libero"], hold_fallback=True)
    msg = _libero()
    change(msg)
    with pytest.raises(LayoutError) as e:
        s.observation(msg, 1.0)
    assert e.value.reason == reason and s.round_id == 0 and s.counters.rounds == 0


def test_chunks_become_openpis_answer_and_late_rounds_the_fallback(robot):
    s = OpenpiSession(robot, LAYOUTS["libero"], hold_fallback=True)
    obs = s.observation(_libero(), 5.0)
    assert s.deadline() == pytest.approx(5.0 + robot.task.slo_ms / 1e3)
    actions = np.arange(50 * 8, dtype=np.float32).reshape(50, 8)
    out = s.answer(ActionChunkData(robot.id, robot.task.name, obs.round_id, 5.0, STATUS_OK, actions=actions,
                                   horizon=20, dt=0.02, inference_ms=30.0, queue_ms=1.0))
    np.testing.assert_array_equal(out["actions"], actions)
    assert out["physai"]["horizon"] == 20 and out["server_timing"]["infer_ms"] == 30.0
    with pytest.raises(ValueError, match="superseded"):
        s.observation(_libero(), 6.0)
        s.answer(ActionChunkData(robot.id, robot.task.name, s.round_id, 6.0, STATUS_REFUSED, error="superseded: x"))
    held = s.observation(_libero(), 7.0)
    out = s.fallback(50)
    np.testing.assert_array_equal(out["actions"], np.repeat(held.state[None], 50, axis=0))
    assert out["physai"]["fallback"] == "hold" and s.counters.fallbacks == 1
    strict = OpenpiSession(robot, LAYOUTS["libero"], hold_fallback=False)
    strict.observation(_libero(), 1.0)
    with pytest.raises(ValueError, match="late"):
        strict.fallback(50)
    assert strict.counters.refused == {"late": 1}


def test_optional_execution_info_reaches_the_round_and_is_checked(robot):
    s = OpenpiSession(robot, LAYOUTS["libero"], hold_fallback=True)
    first = s.observation(_libero(), 1.0)
    assert (first.actions_remaining, first.executing_round_id) == (0, 0)
    assert first.control_period == robot.task.action_period_s
    obs = s.observation({**_libero(), "physai/actions_remaining": np.int64(7), "physai/control_period": 0.02,
                         "physai/executing_round_id": first.round_id}, 2.0)
    assert (obs.actions_remaining, obs.control_period, obs.executing_round_id) == (7, 0.02, first.round_id)
    for bad in ({"physai/actions_remaining": -1}, {"physai/control_period": "fast"},
                {"physai/executing_round_id": 999}):
        with pytest.raises(LayoutError, match="bad_execution_info"):
            s.observation({**_libero(), **bad}, 3.0)
