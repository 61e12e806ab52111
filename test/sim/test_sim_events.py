"""The sim events (physai_ros/sim/events.py): the intruding arm and injected drop / knock
failures, their ground truth (snapshot, TaskStatus) and their visibility in the rendered views."""
from __future__ import annotations

import dataclasses
import json

import numpy as np
import pytest

from physai_ros.sim.events import (DONE, DROPPED, FAILED, FLOOR_Z, KNOCKED, ONGOING, TIMEOUT, EventConfig,
                                   on_table)
from physai_ros.sim.expert import ScriptedExpert
from physai_ros.sim.render import Renderer
from physai_ros.sim.runtime import SimRobotConfig, SimRobotRuntime, TaskStatus, check_sim_params
from physai_ros.sim.world import SimWorld

DT = 1 / 480


def _run(world: SimWorld, seconds: float, expert: bool = True, every: int = 8):
    """Step the world (the expert commanding every `every` steps); a snapshot per step."""
    ex = ScriptedExpert(world) if expert else None
    snaps = []
    for n in range(int(seconds / DT)):
        if ex is not None and n % every == 0:
            world.set_command(ex.act(world.snapshot(), every * DT))
        world.step(DT)
        snaps.append(world.snapshot())
    return snaps


INTRUDER = EventConfig(intruder_rate_per_min=20.0, intruder_duration_s=1.5)


def test_intruder_visits_are_seeded_and_ground_truth_is_the_hand_over_the_table():
    a, b, c = (SimWorld(task="pick_and_place", seed=s, events=INTRUDER) for s in (7, 7, 8))
    sa, sb, sc = (_run(w, 20.0, expert=False, every=1) for w in (a, b, c))
    present = np.array([s.intruder_present for s in sa])
    assert a.events.intruder.visits >= 2 and present.any() and not present.all()
    # The same seed gives the same visits; another seed other ones.
    assert present.tolist() == [s.intruder_present for s in sb]
    assert present.tolist() != [s.intruder_present for s in sc]
    for s in sa:
        # Present exactly while the hand is over the workcell; a pose only during a visit.
        assert s.intruder_present == (s.intruder is not None and on_table(s.intruder.hand[:2]))
    # Each visit: in (sweeping), present for about its duration, out; 0.75-1.25 x 1.5 s.
    edges = np.flatnonzero(np.diff(present.astype(int)))
    starts, ends = edges[present[edges + 1]], edges[~present[edges + 1]]
    lengths = [(e - s) * DT for s, e in zip(starts, ends[ends > starts[0]])]
    assert lengths and all(0.75 * 1.5 - 0.6 <= t <= 1.25 * 1.5 for t in lengths), lengths


def test_intruder_leaves_the_robots_trajectory_and_sensor_noise_unchanged():
    """Events draw from a child generator: with only the intruder on, the cell's placements,
    expert motion and wrench noise are those of the default cell."""
    w, ref = SimWorld(task="pick_and_place", seed=3, events=INTRUDER), SimWorld(task="pick_and_place", seed=3)
    for s, r in zip(_run(w, 6.0), _run(ref, 6.0)):
        np.testing.assert_array_equal(s.positions, r.positions)
        np.testing.assert_array_equal(s.wrench, r.wrench)
        np.testing.assert_array_equal(s.object_pos, r.object_pos)
    assert ref.events is None and ref.snapshot().intruder is None and not ref.snapshot().intruder_present


def test_intruder_is_visible_where_geometry_puts_it():
    w = SimWorld(task="pick_and_place", seed=2, events=INTRUDER)
    r = Renderer(w.arm.cfg, num_views=3)
    seen = 0
    for s in _run(w, 30.0, expert=False, every=1)[::24]:
        without = r.render(dataclasses.replace(s, intruder=None, intruder_present=False))
        imgs = r.render(s)
        if s.intruder is None:
            assert all(np.array_equal(x, y) for x, y in zip(imgs, without))
            continue
        for P, img, base in zip(r._proj, imgs, without):
            u, v = P(s.intruder.hand)[0]
            radius = int(P.f * s.intruder.hand_radius / P.depth(s.intruder.hand)[0])
            if not (radius <= u < r.width - radius and radius <= v < r.height - radius):
                continue  # the hand is outside this view
            # Around the hand's projection the picture changed, to skin-coloured pixels.
            k = max(2, radius // 2)
            patch = (slice(v - k, v + k + 1), slice(u - k, u + k + 1))
            changed = np.any(img[patch] != base[patch], axis=2).mean()
            skin = img[patch].astype(int)
            skin_like = ((skin[..., 0] > 200) & (skin[..., 1] > 150) & (skin[..., 2] > 120)).mean()
            if s.intruder_present:
                assert changed > 0.5 and skin_like > 0.5, (s.time, changed, skin_like)
                seen += 1
    assert seen >= 10


def test_injected_drop_fails_the_episode_visibly_and_the_expert_retries():
    w = SimWorld(task="pick_and_place", seed=1, events=EventConfig(drop_prob=1.0))
    r = Renderer(w.arm.cfg, num_views=2)
    snaps = _run(w, 12.0)
    labels = [s.progress for s in snaps]
    k = labels.index(FAILED)
    assert set(labels[:k]) == {ONGOING} and snaps[k].failure == DROPPED and snaps[k - 1].grasped
    assert not snaps[k].grasped and w.events.failures.drops == 1
    # Transport: lifted and away from the pad when it slipped.
    assert snaps[k].tool[2] > 0.07 and np.linalg.norm(snaps[k].object_pos[:2] - snaps[k].goal[:2]) > 0.04
    # Visible: 0.2 s later the cube has fallen away from the closed fingers.
    later = snaps[k + 96]
    assert later.tool[2] - later.object_pos[2] > 0.05
    held_look = r.render(dataclasses.replace(later, object_pos=later.tool.copy(), objects=(later.tool.copy(),)))
    assert all(np.any(a != b, axis=2).mean() > 0.002 for a, b in zip(r.render(later), held_look))
    # Latched until success: the expert picks the cube up again and completes the task.
    done = labels.index(DONE)
    assert set(labels[k:done]) == {FAILED} and w.success


def test_injected_knock_sends_the_cube_off_the_table_and_fails_until_the_reset():
    w = SimWorld(task="pick_and_place", seed=4, events=EventConfig(knock_prob=1.0))
    r = Renderer(w.arm.cfg, num_views=2)
    first = w.snapshot()
    before = r.render(first)
    snaps = _run(w, w.task.timeout_s + 0.5)
    labels = [s.progress for s in snaps]
    k = labels.index(FAILED)
    assert snaps[k].failure == KNOCKED and not snaps[k].grasped
    end = snaps[-1]
    assert not on_table(end.object_pos[:2]) and end.object_pos[2] == pytest.approx(FLOOR_Z + 0.02)
    assert not w.success and set(labels[k:]) == {FAILED} and end.failure == KNOCKED  # first reason kept
    # Visible: the blue cube's pixels at its starting place are gone.
    u, v = (int(x) for x in r._proj[0](first.object_pos)[0])
    blue = lambda img: int(img[v, u, 2]) - int(img[v, u, 0]) > 80  # noqa: E731
    assert blue(before[0]) and not blue(r.render(end)[0])
    w.reset(keep_arm=True)
    assert w.snapshot().progress == ONGOING and w.snapshot().failure == ""


def test_timeout_is_a_failure():
    w = SimWorld(task="reach", seed=0)
    _run(w, w.task.timeout_s + 0.01, expert=False, every=1)
    assert w.progress() == (FAILED, TIMEOUT)


def test_task_status_carries_the_event_ground_truth_and_publishes_changes_at_once():
    rt = SimRobotRuntime(SimRobotConfig(task="pick_and_place", seed=5, intruder_rate_per_min=30.0,
                                        intruder_duration_s=1.0, status_rate_hz=0.5))
    t, seen = 100.0, []
    for _ in range(int(30 / DT)):
        t += DT
        out = rt.tick(t)
        if out.status is not None:
            seen.append((out.snapshot.intruder_present, out.status.intruder))
            assert out.status.intruder == out.snapshot.intruder_present
            assert TaskStatus.from_json(out.status.to_json()) == out.status  # plain JSON types only
    # A status at every change of the intruder ground truth, not only every 2 s.
    assert any(v for v, _ in seen) and len(seen) > 30 / 2 + 2
    st = rt.status()
    assert TaskStatus.from_json(st.to_json()) == st and st.progress in (ONGOING, DONE, FAILED)
    assert st.subgoal == "pick up the blue cube and place it on the green pad" and len(st.objects) == 1
    old = {k: v for k, v in json.loads(st.to_json()).items()
           if k not in ("intruder", "progress", "failure", "subgoal", "objects", "held")}
    back = TaskStatus.from_json(json.dumps(old))
    assert back.intruder is False and back.progress == "" and back.objects == [] and back.held == -1


@pytest.mark.parametrize("params,message", [
    ({"drop_prob": 2.0}, r"robots\[1\]\.sim\.drop_prob: drop_prob must be within 0\.\.1"),
    ({"intruder_rate_per_min": -1}, r"robots\[1\]\.sim\.intruder_rate_per_min: "),
    ({"intruder_duration_s": "long"}, r"robots\[1\]\.sim\.intruder_duration_s: expected float"),
    ({"knock_probability": 0.1}, r"robots\[1\]\.sim\.knock_probability: unknown sim parameter"),
    ({"task": "juggle"}, r"robots\[1\]\.sim\.task: expected one of"),
    ({"seed": True}, r"robots\[1\]\.sim\.seed: expected int"),
])
def test_sim_params_errors_name_the_key_path(params, message):
    with pytest.raises(ValueError, match=message):
        check_sim_params(params, "robots[1].sim")


def test_sim_params_accept_the_new_keys_and_integers_for_floats():
    cfg = check_sim_params({"task": "place_in_order", "intruder_rate_per_min": 2, "drop_prob": 0.25,
                            "knock_prob": 0.1, "camera_rate_hz": 15}, "robots[0].sim")
    assert cfg.events == EventConfig(intruder_rate_per_min=2.0, drop_prob=0.25, knock_prob=0.1)
    assert not SimRobotConfig().events.enabled


def test_fleet_plan_rejects_a_bad_sim_key_with_its_path():
    from physai_ros.config_fields import FleetConfigError
    from physai_ros.fleet.plan import fleet_plan
    from physai_ros.config.fleet import load_fleet

    fleet = load_fleet()

    bad = dataclasses.replace(fleet.robots[1], sim={**fleet.robots[1].sim, "knock_prob": 1.5})
    with pytest.raises(FleetConfigError, match=r"robots\[1\]\.sim\.knock_prob"):
        fleet_plan(dataclasses.replace(fleet, robots=(fleet.robots[0], bad, *fleet.robots[2:])))


def test_a_place_in_order_sim_follows_its_fleet_tasks_prompt():
    """The order is the robot's instruction: the sim gets the fleet task's prompt (which its
    client sends), and a prompt that does not name both cubes is refused before anything starts,
    naming the task's key; `sim.prompt` overrides it."""
    from physai_ros.config_fields import FleetConfigError
    from physai_ros.fleet.plan import fleet_plan
    from physai_ros.config.fleet import default_fleet_path, load_fleet
    from physai_ros.config.robot_params import sim_params

    fleet = load_fleet(default_fleet_path().parent / "fleet_pipeline.yaml")
    i = next(k for k, r in enumerate(fleet.robots) if r.sim.get("task") == "place_in_order")
    robot = fleet.robots[i]
    assert sim_params(robot)["prompt"] == robot.task.prompt
    assert "prompt" not in sim_params(fleet.robots[1 - i])  # pick and place does not read one

    def plan_with(task_prompt, sim=None):
        task = dataclasses.replace(robot.task, prompt=task_prompt)
        r = dataclasses.replace(robot, task=task, sim={**robot.sim, **(sim or {})})
        return fleet_plan(dataclasses.replace(fleet, robots=(*fleet.robots[:i], r, *fleet.robots[i + 1:])))

    blue_first = "place the blue cube then the red cube on the green pad"
    spec = next(s for s in plan_with(blue_first) if s.executable == "sim_robot" and s.params["task"] == "place_in_order")
    assert spec.params["prompt"] == blue_first
    with pytest.raises(FleetConfigError, match=rf"tasks\.{robot.task.name}\.prompt \(robots\[{i}\]\.sim\.task "
                                               r"'place_in_order' follows it\): .*must name both cubes"):
        plan_with("stack the cubes")
    with pytest.raises(FleetConfigError, match=rf"robots\[{i}\]\.sim\.prompt: .*must name both cubes"):
        plan_with(blue_first, {"prompt": "stack the cubes"})
    spec = next(s for s in plan_with("stack the cubes", {"prompt": blue_first}) if s.executable == "sim_robot"
                and s.params["task"] == "place_in_order")
    assert spec.params["prompt"] == blue_first


def test_a_requested_reset_starts_the_next_episode_and_clears_the_failure():
    """What a progress monitor's "failed" leads to: reset and retry."""
    rt = SimRobotRuntime(SimRobotConfig(task="pick_and_place", seed=2, knock_prob=1.0))
    t = 50.0
    while rt.world.failure != KNOCKED:
        t += DT
        rt.tick(t)
    assert rt.status().progress == FAILED and rt.status().failure == KNOCKED
    episode = rt.world.episode
    rt.request_reset()
    out = rt.tick(t + DT)
    assert out.status is not None and out.status.episode == episode + 1 and out.status.progress == ONGOING
    assert rt.episodes_finished == 1 and rt.resets_requested == 1 and rt.timeouts == 0
    assert on_table(rt.world.object_pos[:2])
