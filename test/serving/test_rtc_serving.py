"""Real-time chunking on the serving side (docs/rtc.md): fleet.yaml's `chunk_merge`, the guide the
server builds from the chunk it sent and the execution info an observation carries, and the
serving core with RTC and non-RTC robots in one batch (tiny random model, no ROS)."""
import copy
import dataclasses

import numpy as np
import pytest
import yaml

from physai_ros.client.robot_client import RobotClientCore
from physai_ros.config.chunk_merge import RTC_JACOBIANS, RTC_SCHEDULES, ChunkMergeConfig
from physai_ros.config.fleet import FleetConfigError, default_fleet_path, parse_fleet
from physai_ros.config.robot_params import controller_params
from physai_ros.engine.rtc import JACOBIANS, SCHEDULES
from physai_ros.protocol.chunk import STATUS_OK
from physai_ros.serving.rtc_planner import RtcPlanner, SentChunk, plan_guide

from observation_builders import make_obs
from tiny_fleet import fleet_with

T0 = 1_000_000.0


@pytest.fixture(scope="module")
def doc():
    return yaml.safe_load(default_fleet_path().read_text())


def _with(doc, merge, task="pick_place", tiny=False):
    return fleet_with(doc, task, "chunk_merge", merge, tiny)


# ---- fleet.yaml ------------------------------------------------------------------------------

def test_chunk_merge_forms(doc):
    d = copy.deepcopy(doc)
    del d["tasks"]["pick_place"]["chunk_merge"]
    assert parse_fleet(d).tasks["pick_place"].chunk_merge == ChunkMergeConfig()  # absent: off
    # YAML 1.1 reads a bare `off` as false: it still means off (the shipped fleet.yaml says so).
    assert yaml.safe_load("chunk_merge: off") == {"chunk_merge": False}
    assert parse_fleet(doc).tasks["pick_place"].chunk_merge == ChunkMergeConfig()
    assert _with(doc, "off").tasks["pick_place"].chunk_merge.name == "off"
    assert _with(doc, "rtc").tasks["pick_place"].chunk_merge == ChunkMergeConfig(name="rtc")
    cf = _with(doc, {"name": "crossfade", "crossfade_s": 0.1}).tasks["pick_place"].chunk_merge
    assert (cf.name, cf.crossfade_s, cf.controller_merge) == ("crossfade", 0.1, "crossfade")
    rtc = _with(doc, {"name": "rtc", "execution_horizon": 8, "max_guidance_weight": 10,
                      "schedule": "linear", "latency_window": 5, "jacobian": "identity"}).tasks["pick_place"].chunk_merge
    assert (rtc.execution_horizon, rtc.max_guidance_weight, rtc.schedule, rtc.latency_window, rtc.jacobian) == (
        8, 10.0, "linear", 5, "identity")
    assert rtc.controller_merge == "replace"
    assert RTC_SCHEDULES == SCHEDULES and RTC_JACOBIANS == JACOBIANS  # the config's copies (no torch)


@pytest.mark.parametrize("merge,match", [
    ("blend", r"^tasks\.pick_place\.chunk_merge: expected one of \['off', 'crossfade', 'rtc'\], got 'blend'"),
    ({"execution_horizon": 4}, r"^tasks\.pick_place\.chunk_merge\.name: missing"),
    ({"name": "crossfade", "execution_horizon": 4}, r"^tasks\.pick_place\.chunk_merge\.execution_horizon: unknown key"),
    ({"name": "rtc", "crossfade_s": 0.1}, r"^tasks\.pick_place\.chunk_merge\.crossfade_s: unknown key"),
    ({"name": "rtc", "execution_horizon": 0}, r"^tasks\.pick_place\.chunk_merge\.execution_horizon: expected an integer >= 1"),
    ({"name": "rtc", "execution_horizon": 2.5}, r"execution_horizon: expected an integer"),
    ({"name": "rtc", "max_guidance_weight": 0}, r"\.max_guidance_weight: expected a finite number > 0"),
    ({"name": "rtc", "max_guidance_weight": float("inf")}, r"\.max_guidance_weight: expected a finite number"),
    ({"name": "rtc", "schedule": "cosine"}, r"\.schedule: expected one of \['exp', 'linear', 'ones', 'zeros'\]"),
    ({"name": "rtc", "latency_window": 0}, r"\.latency_window: expected an integer >= 1"),
    ({"name": "rtc", "jacobian": "exact"}, r"\.jacobian: expected one of \['vjp', 'identity'\]"),
    ({"name": "crossfade", "crossfade_s": -1}, r"\.crossfade_s: expected a finite number >= 0"),
    (["rtc"], r"^tasks\.pick_place\.chunk_merge: expected one of"),
])
def test_chunk_merge_errors_name_the_key(doc, merge, match):
    with pytest.raises(FleetConfigError, match=match):
        _with(doc, merge)


def test_controller_gets_the_merge_rule_of_its_task(doc):
    cfg = _with(_with_doc(doc, "reach_goal", {"name": "crossfade", "crossfade_s": 0.08}), "rtc")
    by_id = {r.id: controller_params(r) for r in cfg.robots}
    assert (by_id["robot_0"]["merge"], by_id["robot_1"]["merge"]) == ("replace", "crossfade")
    assert by_id["robot_1"]["crossfade_s"] == pytest.approx(0.08)


def _with_doc(doc, task, merge):
    d = copy.deepcopy(doc)
    d["tasks"][task]["chunk_merge"] = merge
    return d


def test_execution_horizon_beyond_the_model_chunk_is_refused(doc):
    from physai_ros.serving.startup.engine_builder import build_core

    with pytest.raises(FleetConfigError, match=r"^tasks\.pick_place\.chunk_merge\.execution_horizon: expected "
                                               r"at most the model's chunk size 8, got 9"):
        build_core(_with(doc, {"name": "rtc", "execution_horizon": 9}, tiny=True))


# ---- the guide from the sent chunk and the execution info -------------------------------------

def _prev(horizon=6, chunk=8, dims=8):
    # Row j of action dim a is j + 10 a: interpolation is easy to check by hand.
    acts = (np.arange(chunk)[:, None] + 10.0 * np.arange(dims)[None]).astype(np.float32)
    return SentChunk(round_id=2, stamp=10.0, dt=0.1, horizon=horizon, actions=acts)


def test_leftover_continues_the_old_plan_when_its_executed_part_covers_the_delay():
    # New capture 0.25 s later: new action k sits at old index 2.5 + k. Latency 0.05 s -> d = 2.
    # The old chunk's executed part (horizon 6: indices <= 5) covers k = 0..2, so d fits and the
    # rows follow the old plan into its unexecuted tail; it ends at index 7 (k = 4).
    p = plan_guide(_prev(), 10.25, 0.05, 3, ChunkMergeConfig(name="rtc"))
    assert (p.delay, p.execution_horizon) == (2, 5)
    np.testing.assert_allclose(p.leftover[:, 0], [2.5, 3.5, 4.5, 5.5, 6.5, 7, 7, 7])
    np.testing.assert_allclose(p.leftover[:, 2], [22.5, 23.5, 24.5, 25.5, 26.5, 27, 27, 27])
    assert not p.leftover[:, 3:].any()  # padding and dims beyond the robot's stay zero
    # The task's execution horizon caps the guided span (never below the delay).
    assert plan_guide(_prev(), 10.25, 0.05, 3, ChunkMergeConfig(name="rtc", execution_horizon=3)).execution_horizon == 3
    assert plan_guide(_prev(), 10.25, 0.05, 3, ChunkMergeConfig(name="rtc", execution_horizon=1)).execution_horizon == 2


def test_leftover_is_the_held_action_when_the_old_plan_ends_before_the_chunk_lands():
    # New capture 0.45 s later (index 4.5 + k); latency 0.15 s -> d = 3, but the executed part
    # (indices <= 5) has only k = 0: the buffer will hold action 5 until the chunk comes.
    p = plan_guide(_prev(), 10.45, 0.15, 3, ChunkMergeConfig(name="rtc"))
    assert (p.delay, p.execution_horizon) == (3, 3)
    np.testing.assert_allclose(p.leftover[:3, 0], [4.5, 5, 5])


def test_delay_freezes_the_actions_the_command_reads_until_the_chunk_lands():
    # Landing L after capture, the robot is between actions floor(L/dt) and floor(L/dt) + 1
    # (linear interpolation): both are frozen.
    assert plan_guide(_prev(), 10.05, 0.15, 3, ChunkMergeConfig(name="rtc")).delay == 3
    assert plan_guide(_prev(), 10.05, 0.1, 3, ChunkMergeConfig(name="rtc")).delay == 3   # on action 1 exactly
    assert plan_guide(_prev(), 10.05, 0.0999, 3, ChunkMergeConfig(name="rtc")).delay == 2
    assert plan_guide(_prev(), 10.05, 0.0, 3, ChunkMergeConfig(name="rtc")).delay == 2
    assert plan_guide(_prev(), 10.05, 5.0, 3, ChunkMergeConfig(name="rtc")).delay == 8


def _obs_for(robot, round_id, stamp, executing, phase, remaining=3):
    return make_obs(robot, round_id, stamp=stamp, executing_round_id=executing, exec_phase_start=phase,
                    actions_remaining=remaining)


def test_planner_reads_the_execution_info(doc):
    cfg = _with(doc, {"name": "rtc", "latency_window": 2})
    robot = cfg.robot("robot_0")
    planner = RtcPlanner({n: t.chunk_merge for n, t in cfg.tasks.items()})
    a, dt = len(robot.joints), robot.task.action_period_s
    assert planner.plan(_obs_for(robot, 2, 10.0, 0, 0.0), a, dt) is None
    planner.remember(_obs_for(robot, 2, 10.0, 0, 0.0), _prev().actions, dt, 6)
    # Round 2 arrived 0.13 s after its capture (exec_phase_start): d = floor(1.3) + 2 = 3.
    p = planner.plan(_obs_for(robot, 4, 10.3, 2, 10.13), a, dt)
    assert p.delay == 3 and p.latency_s == pytest.approx(0.13)
    np.testing.assert_allclose(p.leftover[0, :a], _prev().actions[3, :a])
    # The controller runs something else (a hold uses an odd round), is dry, or the period changed.
    assert planner.plan(_obs_for(robot, 4, 10.3, 3, 10.2), a, dt) is None
    assert planner.plan(_obs_for(robot, 4, 10.3, 2, 10.13), a, 0.05) is None
    assert dict(planner.stats) == {"no_previous_chunk": 1, "guided": 1, "not_executing_previous": 1,
                                   "timing_changed": 1}
    # A buffer at the end of the old chunk still runs it (holding its last action): guided.
    late = planner.plan(_obs_for(robot, 4, 10.9, 2, 10.13, remaining=0), a, dt)
    np.testing.assert_allclose(late.leftover[:late.delay, :a], np.repeat(_prev().actions[5:6, :a], late.delay, 0))
    # One latency sample per round; the delay follows the largest of the last `latency_window`.
    planner.remember(_obs_for(robot, 4, 10.3, 2, 10.13), _prev().actions, dt, 6)
    planner.remember(dataclasses.replace(_obs_for(robot, 4, 10.3, 2, 10.13), round_id=4, stamp=10.3),
                     _prev().actions, dt, 6)
    p = planner.plan(_obs_for(robot, 6, 10.6, 4, 10.61), a, dt)  # round 4 took 0.31 s
    assert p.delay == 5
    # A task without rtc: remembered (for its latency and horizon floor), never guided.
    other = cfg.robot("robot_1")
    planner.remember(_obs_for(other, 2, 10.0, 0, 0.0), _prev().actions, dt, 6)
    assert planner.plan(_obs_for(other, 4, 10.3, 2, 10.13), a, dt) is None and "robot_1" in planner._sent


def test_a_horizon_shorter_than_the_measured_delay_is_raised_so_the_chunk_lands_alive(doc):
    """A chunk lands L after its capture: with H dt <= L all its horizon is due before it lands
    and the controller refuses it as expired (bench/rtc.py at 636 ms: 77 % of the rtc chunks,
    0/50 episodes; crossfade 0/20). The horizon is raised to the delay d = floor(L / dt) + 2, at
    most the chunk, whatever the merge rule."""
    from physai_ros.protocol.chunk import ActionChunkData

    cfg = _with(doc, {"name": "rtc"})
    robot, other = cfg.robot("robot_0"), cfg.robot("robot_1")
    planner = RtcPlanner({n: t.chunk_merge for n, t in cfg.tasks.items()})
    a, dt = len(robot.joints), robot.task.action_period_s

    def chunk(r, rid, horizon):
        return ActionChunkData(r.id, r.task.name, rid, 10.0, STATUS_OK, dt=dt,
                               actions=np.zeros((10, a), np.float32), horizon=horizon)

    obs2 = _obs_for(robot, 2, 10.0, 0, 0.0)
    first = planner.answer(obs2, _prev(chunk=10).actions, chunk(robot, 2, 6))
    assert first.horizon == 6  # no latency measured yet: the policy's horizon stands
    # Round 2 landed 0.636 s after its capture: d = floor(6.36) + 2 = 8.
    obs4 = _obs_for(robot, 4, 10.3, 2, 10.636)
    assert planner.plan(obs4, a, dt).delay == 8
    raised = planner.answer(obs4, _prev(chunk=10).actions, chunk(robot, 4, 6))
    assert raised.horizon == 8 and planner._sent["robot_0"].horizon == 8
    assert planner.stats["horizon_raised_to_delay"] == 1
    assert planner.answer(obs4, _prev(chunk=10).actions, chunk(robot, 4, 9)).horizon == 9  # long enough
    # Beyond the chunk: the whole chunk, no more.
    planner._latency["robot_0"].append(2.0)
    assert planner.answer(obs4, _prev(chunk=10).actions, chunk(robot, 4, 6)).horizon == 10
    # Any merge rule: a task without rtc samples its latency from its observations (observe,
    # called by attach for such tasks) and gets the same floor, but never a guide.
    assert not cfg.tasks[other.task.name].chunk_merge.rtc
    assert planner.answer(_obs_for(other, 2, 10.0, 0, 0.0), _prev().actions, chunk(other, 2, 6)).horizon == 6
    obs_other = _obs_for(other, 4, 10.3, 2, 10.636)
    planner.observe(obs_other, dt)
    assert planner.plan(obs_other, a, dt) is None
    assert planner.answer(obs_other, _prev().actions, chunk(other, 4, 6)).horizon == 8


# ---- the serving core, RTC and non-RTC robots in one batch -----------------------------------

def test_core_guides_rtc_robots_and_leaves_the_others_alone(doc):
    from physai_ros.serving.startup.engine_builder import build_core

    cfg = _with(doc, {"name": "rtc", "max_guidance_weight": 5.0}, tiny=True)
    rtc_robot, plain_robot = cfg.robot("robot_0"), cfg.robot("robot_1")
    core = build_core(cfg, instance_id="rtc")
    core.clock = lambda: T0
    seen = []
    slot = core.engines["engine_0"]
    infer = slot.engine.infer
    slot.engine.infer = lambda inputs: seen.append([i.rtc for i in inputs]) or infer(inputs)
    for r in (rtc_robot, plain_robot):
        assert core.register(RobotClientCore(r).registration()).accepted

    def round_(rid, stamp, executing, phase):
        for r in (rtc_robot, plain_robot):
            assert core.submit(_obs_for(r, rid, stamp, executing, phase), now=T0) == []
        chunks = {c.robot_id: c for c in core.step(T0).chunks}
        assert all(c.status == STATUS_OK for c in chunks.values()), [c.error for c in chunks.values()]
        return chunks

    first = round_(2, T0 - 1.0, 0, 0.0)
    assert seen[-1] == [None, None]  # nothing to continue yet
    # Round 2 arrived 0.25 s after capture; the next capture is 0.3 s (3 actions) after round 2's.
    second = round_(4, T0 - 0.7, 2, T0 - 0.75)
    guides = seen[-1]
    assert len(seen[-1]) == 2 and guides[1] is None and guides[0] is not None
    g = guides[0]
    # d = floor(0.25 / 0.1) + 2. The new chunk's action i is round 2's action i + 3 (0.3 s later).
    # When round 2's executed plan (its horizon, >= H_min 6) still runs at the delay, the guide
    # reaches as far as round 2's chunk predicts (8 - 3 rows); otherwise only the delay, towards
    # round 2's last executed action, held.
    h = first["robot_0"].horizon
    chunk = first["robot_0"].actions.shape[0]
    reach = chunk - 3 if h - 3 >= 4 else 4
    assert (g.delay, g.execution_horizon, g.action_dim, g.jacobian) == (4, reach, len(rtc_robot.joints), "vjp")
    # In robot units, the new chunk's first d actions repeat what round 2 commits there.
    old, new = first["robot_0"].actions, second["robot_0"].actions
    target = old[np.minimum(np.arange(3, 7), chunk - 1 if h - 3 >= 4 else h - 1)]
    err = np.abs(new[:4] - target).max()
    assert err < 0.1 * np.abs(target).max() + 1e-3, err
    assert core.rtc.stats["guided"] == 1 and core.rtc.stats["no_previous_chunk"] == 1


def test_observation_carries_the_executing_round_over_the_wire(doc):
    """The client copies the controller's executing round into each observation; the message
    codec keeps it (the server's planner reads it with exec_phase_start)."""
    from physai_ros.ros.codecs.observation import observation_from_msg, observation_to_msg
    from observation_builders import make_image

    robot = parse_fleet(doc).robot("robot_0")
    client = RobotClientCore(robot)
    client.on_registered(core_result())
    for v in range(robot.num_views):
        client.on_image(v, make_image(robot.image_height, robot.image_width, seed=v), 10.0)
    client.on_joint_state(list(robot.joints), [0.0] * len(robot.joints))
    client.on_exec_info(10.0, 0, 0.1, 9.5, executing_round_id=6)
    obs = client.tick(10.01).observation
    assert obs is not None and obs.executing_round_id == 6 and obs.exec_phase_start == 9.5
    assert observation_from_msg(observation_to_msg(obs)).executing_round_id == 6


def core_result():
    from physai_ros.protocol.registration import RegistrationResult

    return RegistrationResult(True, "", "server-1")


def test_rtc_is_refused_where_it_cannot_run(doc):
    """Guides are not carried to engine workers: a fleet with rtc and remote engines is refused
    at start (naming the key), and the worker codec refuses a guided input instead of dropping it."""
    import torch

    from physai_ros.engine import EngineInputError, Pi0Config
    from physai_ros.engine.rtc import RtcGuide
    from physai_ros.serving.startup.engine_builder import build_core
    from physai_ros.workers import codec

    class Remote:
        alive = True

        def __init__(self, model):
            self.config = model

    d = copy.deepcopy(doc)
    d["server"]["remote_engines"] = [{"instance_id": "worker_0"}]
    cfg = _with(d, "rtc", tiny=True)
    with pytest.raises(FleetConfigError, match=r"^tasks\.pick_place\.chunk_merge: rtc guides are not carried "
                                               r"to remote engine workers"):
        build_core(cfg, remote_engine=lambda r, model: Remote(model))
    tiny = Pi0Config.preset("tiny")
    core = build_core(_with(doc, "rtc", tiny=True))
    robot = cfg.robot("robot_0")
    reg = RobotClientCore(robot).registration()
    inp = core.action_runner.prepare(make_obs(robot, 2, stamp=T0), reg)
    guided = dataclasses.replace(inp, rtc=RtcGuide(torch.zeros(tiny.chunk_size, tiny.max_action_dim), 1, 2))
    with pytest.raises(EngineInputError, match="robot 0: rtc: real-time chunking guides are not carried"):
        codec.encode_request([guided], tiny, "b1")


def _client(robot, t):
    from observation_builders import make_image

    client = RobotClientCore(robot)
    client.on_registered(core_result())
    for v in range(robot.num_views):
        client.on_image(v, make_image(robot.image_height, robot.image_width, seed=v), t)
    client.on_joint_state(list(robot.joints), [0.0] * len(robot.joints))
    return client


@pytest.mark.parametrize("merge", ["rtc", "off"])
def test_client_reports_the_chunk_it_just_took_for_rtc_tasks(doc, merge):
    """The controller's execution report lags up to 20 ms; an observation sent right after a
    chunk arrived names that chunk for an rtc task (both nodes got it at the same time), and the
    controller's possibly stale report otherwise (unchanged behaviour)."""
    from physai_ros.protocol.chunk import ActionChunkData
    from observation_builders import make_image

    robot = _with(doc, merge).robot("robot_0")
    client = _client(robot, 10.0)
    client.on_exec_info(10.0, 0, 0.1, 0.0, executing_round_id=0)
    first = client.tick(10.01).observation
    assert first.round_id == 2 and first.executing_round_id == 0
    chunk = ActionChunkData(robot_id=robot.id, task_id=robot.task.name, round_id=2, stamp=10.0, dt=0.1,
                            actions=np.zeros((8, len(robot.joints)), np.float32), horizon=6,
                            joint_names=robot.joints)
    assert client.on_chunk(chunk, 10.2) == "answered"
    for v in range(robot.num_views):
        client.on_image(v, make_image(robot.image_height, robot.image_width, seed=7 + v), 10.21)
    obs = client.tick(10.22).observation  # the stale report (0 actions left) triggers at once
    assert obs is not None
    if merge == "rtc":
        assert (obs.executing_round_id, obs.exec_phase_start, obs.actions_remaining) == (2, 10.2, 4)
    else:
        assert (obs.executing_round_id, obs.exec_phase_start, obs.actions_remaining) == (0, 0.0, 0)


def test_client_reports_nothing_executing_while_its_hold_stops_the_controller(doc):
    """An SLO hold stops the controller where it is; the chunk it last committed no longer runs,
    so an rtc client reports round 0 (no guide) until it takes a chunk again."""
    from physai_ros.protocol.chunk import ActionChunkData
    from observation_builders import make_image

    d = copy.deepcopy(doc)
    d["tasks"]["pick_place"].update(chunk_merge="rtc", slo_ms=100, fallback="hold")
    robot = parse_fleet(d).robot("robot_0")
    client = _client(robot, 10.0)
    client.on_exec_info(10.0, 0, 0.1, 9.8, executing_round_id=0)
    assert client.tick(10.01).observation.round_id == 2
    out = client.tick(10.2)  # no answer 0.2 s after capture: SLO missed, hold
    assert out.hold is not None and client._executing(0, 0.1) == (0, 0.0, 0)
    client.on_exec_info(10.21, 0, 0.1, 9.8, executing_round_id=0)
    chunk = ActionChunkData(robot_id=robot.id, task_id=robot.task.name, round_id=2, stamp=10.0, dt=0.1,
                            actions=np.zeros((8, len(robot.joints)), np.float32), horizon=8,
                            joint_names=robot.joints)
    client.on_chunk(chunk, 10.25)  # the late answer is taken (hold keeps waiting): it runs again
    client.on_exec_info(10.3, 3, 0.1, 10.25, executing_round_id=2)
    for v in range(robot.num_views):
        client.on_image(v, make_image(robot.image_height, robot.image_width, seed=9 + v), 10.5)
    obs = client.tick(10.6).observation
    assert obs is not None and obs.executing_round_id == 2
    assert client._executing(0, 0.1)[0] == 2
    client._holding = True
    assert client._executing(3, 0.1) == (0, 0.0, 3)
