"""The grasp watch: a lost grasp from the gripper's own position (pipeline.grasp_watch), on
hand-made width traces and on the sim's own gripper with an injected drop."""
import math

import pytest

from physai_ros.pipeline.grasp_watch import GraspWatch, GraspWatchConfig

DT = 0.02


def feed(watch, widths, t0=0.0):
    """(time, event) for each non-empty event of the width trace, one sample per DT."""
    out = []
    for i, w in enumerate(widths):
        ev = watch.update(t0 + i * DT, w)
        if ev:
            out.append((round(t0 + i * DT, 3), ev))
    return out


def ramp(a, b, n):
    return [a + (b - a) * i / n for i in range(1, n + 1)]


def test_a_cube_held_then_slipping_out_is_lost_within_a_sample():
    w = GraspWatch()
    trace = [0.08] * 20 + ramp(0.08, 0.04, 8) + [0.04] * 20 + ramp(0.04, 0.0, 6) + [0.0] * 5
    events = feed(w, trace)
    assert [e for _, e in events] == ["grasped", "lost"]
    first_slip_sample = (20 + 8 + 20) * DT
    assert events[1][0] == pytest.approx(first_slip_sample)  # 0.0333 is already over lost_by under 0.04
    assert w.counts == {"grasped": 1, "lost": 1, "closed": 0, "released": 0} and not w.holding


def test_a_placement_is_a_release_not_a_loss():
    w = GraspWatch()
    events = feed(w, [0.08] * 5 + ramp(0.08, 0.04, 8) + [0.04] * 20 + ramp(0.04, 0.08, 8) + [0.08] * 5)
    assert [e for _, e in events] == ["grasped", "released"]


def test_closing_on_nothing_and_an_open_gripper_are_no_grasp():
    w = GraspWatch()
    # fingers close straight through to zero (a missed grasp), stay shut, open again, stay open
    events = feed(w, [0.08] * 20 + ramp(0.08, 0.0, 10) + [0.0] * 30 + ramp(0.0, 0.08, 10) + [0.08] * 30)
    assert events == [] and w.counts["grasped"] == 0


def test_a_short_pause_mid_close_is_not_a_grasp_and_noise_is_ignored():
    w = GraspWatch()
    trace = [0.08] * 5 + ramp(0.08, 0.05, 5) + [0.05] * 5 + ramp(0.05, 0.0, 5) + [math.nan, math.inf, 0.0]
    assert feed(w, trace) == []  # 5 samples (0.1 s) still is under settle_s


def test_a_loss_needs_the_arm_to_have_carried_the_object():
    """A policy that parks the gripper half-open over a cube and then closes it never held
    anything: with the arm still since the "grasp" that is "closed", not "lost" (the false
    alarm seen on held-out place_in_order shifts); once a joint moved `carried`, it is a loss."""
    trace = [0.08] * 5 + ramp(0.08, 0.0444, 8) + [0.0444] * 20 + ramp(0.0444, 0.0, 6)
    still = GraspWatch()
    assert [e for _, e in feed_arm(still, trace, lambda i: [0.3, -0.2])] == ["grasped", "closed"]
    carried = GraspWatch()
    lift = [[0.3, -0.2 + 0.01 * max(0, i - 13)] for i in range(len(trace))]  # lifts after the grasp settles
    assert [e for _, e in feed_arm(carried, trace, lambda i: lift[i])] == ["grasped", "lost"]
    assert still.counts["closed"] == 1 and carried.counts["lost"] == 1


def feed_arm(watch, widths, arm_at):
    return [(i, ev) for i, w in enumerate(widths) if (ev := watch.update(i * DT, w, arm_at(i)))]


def test_thresholds_follow_the_config_and_bad_ones_are_refused():
    w = GraspWatch(GraspWatchConfig(min_object=0.002, settle_s=0.05, lost_by=0.001))
    assert [e for _, e in feed(w, [0.005] * 5 + [0.0035])] == ["grasped", "lost"]
    with pytest.raises(ValueError, match="on_lost must be one of"):
        GraspWatchConfig(on_lost="panic")
    with pytest.raises(ValueError, match="settle_s must be a finite number > 0"):
        GraspWatchConfig(settle_s=0)
    with pytest.raises(ValueError, match=r"min_object \(0.09\) must be under open_width"):
        GraspWatchConfig(min_object=0.09)


def test_the_sims_injected_drop_is_seen_from_the_joint_positions():
    """The sim's own arm and a scripted expert, a drop injected in every episode: the watch fed
    the joint positions says "lost" within 0.1 s of the slip, and nothing else before it."""
    from physai_ros.sim.events import EventConfig
    from physai_ros.sim.expert import ScriptedExpert
    from physai_ros.sim.world import SimWorld

    world = SimWorld(task="pick_and_place", seed=1, events=EventConfig(drop_prob=1.0))
    expert, watch, dt, every = ScriptedExpert(world), GraspWatch(), 1 / 480, 8
    lost = slip = None
    for n in range(int(6.0 / dt)):
        if n % every == 0:
            world.set_command(expert.act(world.snapshot(), every * dt))
        world.step(dt)
        if slip is None and world.events.failures.drops:
            slip = world.time
        positions = world.snapshot().positions
        if watch.update(world.time, float(positions[-1]), positions[:-1]) == "lost":
            lost = world.time
            break
    assert slip is not None and lost is not None and 0 <= lost - slip <= 0.1
    assert watch.counts["grasped"] == 1 and watch.counts["released"] == 0


def test_after_a_reset_nothing_is_a_grasp_until_the_gripper_opens():
    """A reset (the pipeline asked for one, or an operator's) takes the cube out of the fingers:
    their closing then is no lost grasp, and a hold seen before they open again is no grasp."""
    w = GraspWatch()
    assert [e for _, e in feed(w, [0.08] * 5 + ramp(0.08, 0.04, 8) + [0.04] * 20)] == ["grasped"]
    w.reset()
    assert feed(w, [0.04] * 30 + ramp(0.04, 0.0, 6), t0=1.0) == [] and not w.holding
    events = feed(w, [0.08] * 5 + ramp(0.08, 0.04, 8) + [0.04] * 20 + [0.0], t0=3.0)
    assert [e for _, e in events] == ["grasped", "lost"]
