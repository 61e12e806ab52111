"""The robot client's logic: inputs, async trigger, round ids, registration, SLO fallbacks."""
import dataclasses

import numpy as np

from physai_ros.client.robot_client import RobotClientCore
from physai_ros.client.types import ClientState
from physai_ros.protocol.chunk import STATUS_OK, STATUS_REFUSED, ActionChunkData
from physai_ros.protocol.registration import RegistrationResult

from observation_builders import make_image


def client(fleet, fallback=None, max_miss=None, slo_ms=None, robot=0, startup_grace_s=None):
    r = fleet.robots[robot]
    task = r.task
    if startup_grace_s is not None:
        task = dataclasses.replace(task, slo_startup_grace_s=startup_grace_s)
    if fallback:
        task = dataclasses.replace(task, fallback=fallback)
    if max_miss:
        task = dataclasses.replace(task, max_consecutive_slo_violation=max_miss)
    if slo_ms:
        task = dataclasses.replace(task, slo_ms=slo_ms)
    c = RobotClientCore(dataclasses.replace(r, task=task))
    for v in range(r.num_views):
        c.on_image(v, make_image(), 10.0)
    c.on_joint_state(list(reversed(r.joints)), list(range(len(r.joints)))[::-1])
    return c


def ok_chunk(c, round_id, stamp, n=8):
    return ActionChunkData(robot_id=c.robot.id, task_id=c.task.name, round_id=round_id, stamp=stamp,
                       status=STATUS_OK, joint_names=c.robot.joints, dt=0.02,
                       actions=np.zeros((n, len(c.robot.joints)), np.float32), horizon=n)


def register(c, instance="A"):
    c.on_registered(RegistrationResult(True, "", instance))


def test_nothing_is_sent_before_registration_and_inputs(fleet):
    r = fleet.robots[0]
    c = RobotClientCore(r)
    out = c.tick(10.0)
    assert out.register and out.observation is None
    register(c)
    assert c.tick(10.0).observation is None  # no camera frames yet
    c2 = client(fleet)
    register(c2)
    obs = c2.tick(10.0).observation
    assert obs is not None and obs.round_id == 2 and obs.stamp == 10.0
    # joint states arrive in any order; the state follows the configured joint order
    np.testing.assert_array_equal(obs.state, np.arange(len(r.joints)))
    assert obs.prompt == r.task.prompt and obs.horizon_policy == r.task.horizon_policy


def test_async_trigger_sends_while_executing_when_buffer_runs_low(fleet):
    c = client(fleet)
    register(c)
    o1 = c.tick(10.0).observation
    assert c.tick(10.01).observation is None  # waiting for the reply
    assert c.on_chunk(ok_chunk(c, o1.round_id, 10.0), 10.05) == "answered"
    # 40 actions of 20 ms = 0.8 s left; latency estimate 0.05 s + margin: not yet.
    c.on_exec_info(10.05, 40, 0.02, 10.05)
    assert c.tick(10.06).observation is None
    assert c.tick(10.7).observation is None  # 5 actions = 0.1 s > 0.05 s latency + 0.02 margin
    # 0.75 s later 3 actions (0.06 s) remain -> send now, while the robot still executes.
    for v in range(c.robot.num_views):
        c.on_image(v, make_image(), 10.79)
    o2 = c.tick(10.8).observation
    assert o2 is not None and o2.round_id > o1.round_id and 0 < o2.actions_remaining <= 3
    assert c.counters.chunks_ok == 1 and c.latency.samples == 1


def test_chunks_for_other_robots_or_unsent_rounds_are_ignored(fleet):
    c = client(fleet)
    register(c)
    o = c.tick(10.0).observation
    other = dataclasses.replace(ok_chunk(c, o.round_id, 10.0), robot_id="robot_9")
    assert c.on_chunk(other, 10.01) == "foreign"
    assert c.on_chunk(ok_chunk(c, 999, 10.0), 10.01) == "unmatched"
    assert c.counters.chunks_ok == 0


def test_stop_and_resend_holds_gives_up_and_resends(fleet):
    c = client(fleet, fallback="stop_and_resend", slo_ms=100, max_miss=5)
    register(c)
    o1 = c.tick(10.0).observation
    out = c.tick(10.2)  # 200 ms > SLO
    assert out.hold is not None and out.hold.round_id == o1.round_id + 1
    assert out.observation is None  # resend waits for a frame newer than the given-up one
    for v in range(c.robot.num_views):
        c.on_image(v, make_image(), 10.21)
    resent = c.tick(10.21).observation
    assert resent is not None and resent.round_id > out.hold.round_id and resent.stamp == 10.21
    np.testing.assert_array_equal(out.hold.positions, np.arange(5))
    assert c.counters.slo_misses == 1 and c.state == ClientState.RUNNING
    # the late answer to the given-up round does not count as an answer
    assert c.on_chunk(ok_chunk(c, o1.round_id, 10.0), 10.25) == "late"


def test_hold_keeps_waiting_with_a_hold_below_the_awaited_round(fleet):
    c = client(fleet, fallback="hold", slo_ms=100, max_miss=5)
    register(c)
    o1 = c.tick(10.0).observation
    out = c.tick(10.15)
    assert out.hold is not None and out.hold.round_id == o1.round_id - 1
    assert out.observation is None  # still waiting for round o1
    assert c.on_chunk(ok_chunk(c, o1.round_id, 10.0), 10.2) == "answered"


def test_use_last_plan_continues_without_hold(fleet):
    c = client(fleet, fallback="use_last_plan", slo_ms=100, max_miss=5)
    register(c)
    c.tick(10.0)
    out = c.tick(10.15)
    assert out.hold is None and c.counters.slo_misses == 1
    assert c.counters.fallbacks.get("continue") == 1


def test_consecutive_misses_escalate_to_stopped_until_operator_resumes(fleet):
    c = client(fleet, fallback="stop_and_resend", slo_ms=100, max_miss=2, startup_grace_s=0)
    register(c)
    c.tick(10.0)
    assert c.tick(10.11).observation is None  # miss 1; the resend waits for a fresh frame
    for v in range(c.robot.num_views):
        c.on_image(v, make_image(), 10.12)
    assert c.tick(10.12).observation is not None
    out = c.tick(10.25)  # miss 2 -> stopped
    assert c.state == ClientState.STOPPED and out.hold is not None and out.observation is None
    assert c.escalations and "operator" in c.escalations[-1]
    assert c.fault().startswith("stopped (2 consecutive SLO misses")  # the client's ERROR diagnostic
    assert c.tick(11.0).observation is None
    c.resume()
    assert c.fault() is None
    for v in range(c.robot.num_views):
        c.on_image(v, make_image(), 11.05)
    assert c.state == ClientState.RUNNING and c.tick(11.1).observation is not None


def test_slow_first_rounds_hold_the_robot_without_stopping_it(fleet):
    """The fleet's default start-up grace: misses before the first on-time chunk hold the robot
    and are counted apart, and the first on-time chunk lets it run."""
    c = client(fleet, fallback="stop_and_resend", slo_ms=100, max_miss=2)
    assert c.deadline.config.startup_grace_s == fleet.robots[0].task.slo_startup_grace_s > 0
    register(c)
    c.tick(10.0)
    t = 10.0
    for k in range(5):  # five slow rounds: each missed, resent on a fresh frame, never stopped
        t += 0.11
        c.tick(t)
        for v in range(c.robot.num_views):
            c.on_image(v, make_image(), t + 0.005)
        o = c.tick(t + 0.01).observation
        assert o is not None and c.state == ClientState.RUNNING, k
        t += 0.01
    assert c.counters.slo_misses == 5 and c.counters.slo_startup_misses == 5
    c.on_chunk(ok_chunk(c, o.round_id, o.stamp), t + 0.05)
    assert c.state == ClientState.RUNNING and c.deadline.consecutive_misses == 0


def test_on_time_chunk_resets_the_miss_count(fleet):
    c = client(fleet, fallback="stop_and_resend", slo_ms=100, max_miss=2)
    register(c)
    c.tick(10.0)
    assert c.tick(10.11).observation is None  # miss 1; no new frame yet
    for v in range(c.robot.num_views):
        c.on_image(v, make_image(), 10.2)
    o = c.tick(10.21).observation
    assert o is not None and o.stamp == 10.2
    c.on_chunk(ok_chunk(c, o.round_id, 10.2), 10.25)
    assert c.deadline.consecutive_misses == 0 and c.state == ClientState.RUNNING


def test_server_restart_reregisters_and_round_ids_keep_increasing(fleet):
    c = client(fleet)
    register(c, "A")
    o1 = c.tick(10.0).observation
    reg = c.registration()
    assert reg.last_round_id == o1.round_id and reg.state_dim == 5 and reg.num_views == 2
    # the new server does not know us: refused as unknown_robot -> register again
    refused = dataclasses.replace(ok_chunk(c, o1.round_id, 10.0), status=STATUS_REFUSED,
                                  error="unknown_robot: robot 'robot_0' is not registered")
    c.on_chunk(refused, 10.01)
    assert c.state == ClientState.UNREGISTERED and c.tick(10.02).register
    register(c, "B")
    assert c.counters.server_restarts == 1 and c.state == ClientState.RUNNING
    for v in range(c.robot.num_views):
        c.on_image(v, make_image(), 10.03)
    o2 = c.tick(10.03).observation
    assert o2.round_id > o1.round_id


def _buffer_chunk(c, round_id, capture, positions, n, dt):
    return ActionChunkData(robot_id=c.robot.id, task_id=c.task.name, round_id=round_id, stamp=capture,
                           dt=dt, joint_names=c.robot.joints,
                           actions=np.tile(np.asarray(positions, float).reshape(1, -1), (n, 1)), horizon=n)


def _hold_data(c, h):
    """The hold chunk the robot client sends for HoldCommand `h`."""
    from physai_ros.control.hold import hold_chunk

    return hold_chunk(c.robot.id, c.task.name, h, c.robot.joints)


def test_hold_chunks_work_with_the_real_trajectory_buffer(fleet):
    from physai_ros.control.trajectory_buffer import TrajectoryBuffer

    # hold: the buffer takes the hold, then still takes the awaited (late) answer.
    c = client(fleet, fallback="hold", slo_ms=300, max_miss=5)
    register(c)
    buf = TrajectoryBuffer(c.robot.joints, rate_hz=480.0)
    o = c.tick(10.0).observation
    h = c.tick(10.31).hold
    assert h is not None and h.capture_time == o.stamp and h.num_actions * h.dt >= 0.3
    assert buf.insert(_hold_data(c, h), 10.31).accepted
    late = _buffer_chunk(c, o.round_id, o.stamp, np.ones(5), 8, 0.1)
    assert buf.insert(late, 10.35).accepted
    # stop_and_resend: the buffer takes the hold and refuses the given-up answer as stale.
    c = client(fleet, fallback="stop_and_resend", slo_ms=300, max_miss=5)
    register(c)
    buf = TrajectoryBuffer(c.robot.joints, rate_hz=480.0)
    o = c.tick(10.0).observation
    h = c.tick(10.31).hold
    assert buf.insert(_hold_data(c, h), 10.31).accepted
    out = buf.insert(_buffer_chunk(c, o.round_id, o.stamp, np.ones(5), 8, 0.1), 10.35)
    assert not out.accepted and out.reason == "stale_round"
    # ... and takes the answer to the resent observation (newer frame, newer round).
    for v in range(c.robot.num_views):
        c.on_image(v, make_image(), 10.33)
    o2 = c.tick(10.34).observation
    assert buf.insert(_buffer_chunk(c, o2.round_id, o2.stamp, np.ones(5), 8, 0.1), 10.4).accepted


def test_a_refused_registration_is_a_fault_until_one_is_accepted(fleet):
    c = client(fleet)
    assert c.fault() is None
    c.on_registered(RegistrationResult(False, "capacity: 2 robots registered", "A"))
    assert c.fault() == "registration refused: capacity: 2 robots registered"
    register(c)
    assert c.fault() is None and c.state == ClientState.RUNNING
