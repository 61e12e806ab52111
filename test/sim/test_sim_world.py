import numpy as np
import pytest

from physai_ros.sim.contact import GRAVITY
from physai_ros.sim.expert import ScriptedExpert
from physai_ros.sim.robot import ArmConfig, inverse_kinematics
from physai_ros.sim.world import SimWorld


def run_expert(world: SimWorld, control_every: int = 10, dt: float = 1 / 480) -> list:
    expert = ScriptedExpert(world)
    trace, n = [], 0
    while not world.done:
        if n % control_every == 0:
            world.set_command(expert.act(world.snapshot(), control_every * dt))
        world.step(dt)
        n += 1
        if n % 48 == 0:
            trace.append(world.snapshot())
    return trace


def test_same_seed_same_episode_different_seed_different_placement():
    a, b, c = (SimWorld(task="pick_and_place", seed=s) for s in (5, 5, 6))
    ta, tb = run_expert(a), run_expert(b)
    assert len(ta) == len(tb)
    for x, y in zip(ta, tb):
        np.testing.assert_array_equal(x.positions, y.positions)
        np.testing.assert_array_equal(x.object_pos, y.object_pos)
        np.testing.assert_array_equal(x.wrench, y.wrench)
    assert not np.allclose(SimWorld(seed=5).object_pos, c.object_pos)


@pytest.mark.parametrize("task", ["reach", "pick_and_place"])
def test_scripted_expert_succeeds(task):
    successes = 0
    for seed in range(6):
        w = SimWorld(task=task, seed=seed)
        run_expert(w)
        successes += w.success
    assert successes == 6


def test_pick_and_place_success_needs_object_on_goal():
    w = SimWorld(task="pick_and_place", seed=1)
    for _ in range(480):
        w.step(1 / 480)
    assert not w.success
    assert w.done is False
    w.object_pos = np.array([w.goal[0], w.goal[1], w.goal[2] + w.scene.object_size / 2])
    w.step(1 / 480)
    assert w.success and w.successes == 1


def test_reset_resamples_and_keep_arm_keeps_the_arm():
    w = SimWorld(task="reach", seed=2)
    w.set_command(np.concatenate([w.arm.cfg.home() + 0.3, [0.05]]))
    for _ in range(480):
        w.step(1 / 480)
    q = w.arm.state.q.copy()
    goal = w.goal.copy()
    w.reset(keep_arm=True)
    assert w.episode == 2 and not w.success
    np.testing.assert_array_equal(w.arm.state.q, q)
    assert not np.allclose(goal, w.goal)
    w.reset()
    np.testing.assert_allclose(w.arm.state.q, w.arm.cfg.home())


def _drive_tool_to(w: SimWorld, target: np.ndarray, gripper: float, seconds: float = 2.0) -> None:
    q = inverse_kinematics(w.arm.cfg, target, w.arm.state.q, iterations=200)
    w.set_command(np.concatenate([q, [gripper]]))
    for _ in range(int(seconds * 480)):
        w.step(1 / 480)


def test_wrench_from_table_contact_pushes_up():
    w = SimWorld(task="reach", seed=3)
    w.contact = type(w.contact)(noise_std=0.0)
    far_from_cube = np.array([0.3, -0.3 if w.object_pos[1] > 0 else 0.3, 0.0])
    _drive_tool_to(w, far_from_cube + [0, 0, 0.05], 0.08)
    assert np.linalg.norm(w.snapshot().wrench[:3]) < 1e-9
    _drive_tool_to(w, far_from_cube + [0, 0, 0.01], 0.08)  # fingertips 1 cm into the table
    s = w.snapshot()
    assert "table" in s.contacts
    assert s.wrench[2] == pytest.approx(w.contact.stiffness * 0.01, rel=0.05)


def test_wrench_of_a_held_object_is_its_weight_and_placing_touches_the_goal():
    w = SimWorld(task="pick_and_place", seed=4)
    w.contact = type(w.contact)(noise_std=0.0)
    obj = w.object_pos.copy()
    _drive_tool_to(w, obj + [0, 0, 0.1], 0.08)
    _drive_tool_to(w, obj, 0.08)
    _drive_tool_to(w, obj, 0.0, seconds=0.5)
    assert w.grasped
    _drive_tool_to(w, obj + [0, 0, 0.1], 0.0)
    s = w.snapshot()
    assert s.contacts == ("object",)
    assert s.wrench[2] == pytest.approx(-w.scene.object_mass * GRAVITY)
    # Lower the cube onto the pad until it presses in: a goal contact pushing up.
    _drive_tool_to(w, np.array([*w.goal[:2], 0.12]), 0.0)
    _drive_tool_to(w, np.array([*w.goal[:2], w.scene.goal_height + w.scene.object_size / 2 - 0.002]), 0.0)
    s = w.snapshot()
    assert "goal" in s.contacts
    assert s.wrench[2] > 0


def test_closed_fingers_pushing_the_cube_feel_it_and_move_it():
    w = SimWorld(task="pick_and_place", seed=0)
    w.contact = type(w.contact)(noise_std=0.0)
    obj = w.object_pos.copy()
    radial = obj[:2] / np.linalg.norm(obj[:2])
    start = np.array([*(obj[:2] - radial * 0.06), obj[2]])
    _drive_tool_to(w, start + [0, 0, 0.1], 0.0)
    _drive_tool_to(w, start, 0.0)
    seen_object = False
    q_goal = inverse_kinematics(w.arm.cfg, np.array([*(obj[:2] + radial * 0.03), obj[2]]), w.arm.state.q, 200)
    w.set_command(np.concatenate([q_goal, [0.0]]))
    for _ in range(480):
        w.step(1 / 480)
        seen_object |= "object" in w.snapshot().contacts
    assert seen_object
    assert np.linalg.norm(w.object_pos[:2] - obj[:2]) > 0.02


def test_step_rejects_non_positive_dt():
    with pytest.raises(ValueError):
        SimWorld().step(0.0)


@pytest.mark.parametrize("lift, dropped", [(0.0, False), (0.08, True)])
def test_a_cube_let_go_at_table_height_is_set_down_and_one_let_go_above_it_is_dropped(lift, dropped):
    w = SimWorld(task="pick_and_place", seed=1)
    cube = w.object_pos.copy()
    assert not w.near_goal(cube)
    _drive_tool_to(w, cube + [0, 0, 0.05], 0.08)
    _drive_tool_to(w, cube, 0.08)
    _drive_tool_to(w, cube, 0.0, seconds=1.0)
    assert w.grasped
    _drive_tool_to(w, cube + [0, 0, lift], 0.0)
    _drive_tool_to(w, cube + [0, 0, lift], 0.08, seconds=1.0)
    assert not w.grasped and w._resting(0)
    assert w.progress() == (("failed", "dropped") if dropped else ("ongoing", ""))
