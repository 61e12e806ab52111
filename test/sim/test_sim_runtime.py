import numpy as np
import pytest

from physai_ros.control.joint_trajectory import JointTrajectoryPlan, TrajectoryPoint
from physai_ros.control.trajectory_buffer import TrajectoryBuffer
from physai_ros.sim.command import TrajectoryFollower
from physai_ros.sim.planner import ScriptedChunkPlanner
from physai_ros.sim.runtime import SimRobotConfig, SimRobotRuntime, TaskStatus


def test_streams_are_decimated_to_their_rates():
    rt = SimRobotRuntime(SimRobotConfig(num_views=2, camera_rate_hz=30, joint_state_rate_hz=100))
    counts = dict(wrench=0, js=0, img=0)
    for k in range(2 * 480):
        out = rt.tick(50.0 + k / 480)
        counts["wrench"] += len(out.wrench_samples)
        counts["js"] += out.joint_state is not None
        if out.images is not None:
            counts["img"] += 1
            assert len(out.images) == 2
    assert counts == dict(wrench=pytest.approx(960, abs=1), js=pytest.approx(200, abs=2), img=pytest.approx(60, abs=2))
    assert rt.world.time == pytest.approx(2.0, abs=1 / 480)


def test_runtime_catches_up_in_bounded_steps():
    rt = SimRobotRuntime(SimRobotConfig(max_catch_up_s=0.1))
    rt.tick(10.0)
    out = rt.tick(10.02)  # a late tick: every physics step since the last one gives a sample
    assert len(out.wrench_samples) == pytest.approx(round(0.02 * 480), abs=1)
    times = [t for t, _ in out.wrench_samples]
    assert times == sorted(times) and times[-1] == pytest.approx(10.02, abs=1 / 480)
    out = rt.tick(15.0)  # a 5 s stall: simulate 0.1 s, skip the rest
    assert rt.world.time == pytest.approx(0.12, abs=2 / 480)
    assert rt.steps_skipped > 0 and len(out.wrench_samples) == SimRobotRuntime.MAX_SAMPLES_PER_TICK


def test_follower_interpolates_reorders_and_rejects():
    f = TrajectoryFollower(("a", "b"))
    assert f.sample(0.0) is None
    plan = JointTrajectoryPlan(10.0, ("b", "a"), (TrajectoryPoint((1.0, 0.0), 0.1), TrajectoryPoint((3.0, 2.0), 0.3)))
    assert f.set_plan(plan)
    np.testing.assert_allclose(f.sample(9.0), [0.0, 1.0])
    np.testing.assert_allclose(f.sample(10.2), [1.0, 2.0])
    np.testing.assert_allclose(f.sample(99.0), [2.0, 3.0])
    assert not f.set_plan(JointTrajectoryPlan(0.0, ("a",), (TrajectoryPoint((1.0,), 0.1),)))
    assert f.rejected == 1 and "missing" in f.last_error
    np.testing.assert_allclose(f.sample(10.2), [1.0, 2.0])  # the old plan stays


def test_runtime_executes_a_plan_and_resets_finished_episodes():
    rt = SimRobotRuntime(SimRobotConfig(task="reach", reset_delay_s=0.2))
    target = rt.world.arm.cfg.home() + [0.3, 0.2, -0.2, 0.1]
    rt.on_plan(JointTrajectoryPlan(0.0, rt.joint_names, (TrajectoryPoint(tuple(target) + (0.01,), 0.5),)))
    t = 0.0
    for _ in range(3 * 480):
        t += 1 / 480
        rt.tick(t)
    np.testing.assert_allclose(rt.world.arm.state.q, target, atol=1e-6)
    rt.world.success = True
    for _ in range(200):
        t += 1 / 480
        out = rt.tick(t)
    assert rt.episodes_finished == 1 and rt.world.episode == 2
    status = TaskStatus.from_json(rt.status().to_json())
    assert status.episodes_finished == 1 and status.episode == 2 and status.task == "reach"


def test_scripted_planner_chunks_are_accepted_by_the_trajectory_buffer():
    rt = SimRobotRuntime(SimRobotConfig(task="pick_and_place", seed=3))
    planner = ScriptedChunkPlanner("robot_0", "pick_and_place", num_actions=30, dt=0.02, horizon=20)
    buf = TrajectoryBuffer(planner.joint_names, rate_hz=480.0)
    chunk = planner.plan(rt.world.arm.positions(), rt.status(), capture_time=100.0, round_id=1)
    assert chunk.actions.shape == (30, 5) and chunk.horizon == 20
    out = buf.insert(chunk, now=100.01)
    assert out.accepted, out
    with pytest.raises(ValueError, match="reports"):
        planner.plan(rt.world.arm.positions(), rt.status().__class__(**{**rt.status().__dict__, "task": "reach"}),
                     100.0, 2)


def test_planner_drives_the_sim_to_success_through_the_buffer():
    """Expert chunks -> trajectory buffer -> runtime: the whole demo loop without ROS."""
    rt = SimRobotRuntime(SimRobotConfig(task="pick_and_place", seed=2, reset_delay_s=10.0))
    planner = ScriptedChunkPlanner("r", "pick_and_place", num_actions=40, dt=0.02, horizon=25)
    buf = TrajectoryBuffer(planner.joint_names, rate_hz=480.0, hold_position=rt.world.arm.positions())
    t, rnd = 0.0, 0
    from physai_ros.control.joint_trajectory import to_joint_trajectory
    for k in range(int(12 * 480)):
        t = k / 480
        if k % 192 == 0:  # a chunk every 0.4 s
            rnd += 1
            assert buf.insert(planner.plan(rt.world.arm.positions(), rt.status(), t, rnd), t).accepted
        buf.advance(t)
        plan = to_joint_trajectory(buf.tentative_nodes(), t, planner.joint_names, stride=8, max_points=6)
        if plan.points:
            rt.on_plan(plan)
        rt.tick(t)
        if rt.world.success:
            break
    assert rt.world.success
