"""Hold chunks and the controller/sim diagnostics as plain logic (no DDS): the robot client's own
hold_chunk_msg is recognised, both hold variants keep or refuse the awaited answer as intended,
and the health tasks grade what they see."""
import numpy as np
import pytest

from physai_ros.control.trajectory_buffer import TrajectoryBuffer
from physai_ros.control.types import ActionChunkData, ExecutionState
from physai_ros.monitoring.diagnostics import ERROR, OK, WARN, DiagnosticStatusWrapper
from physai_ros.ros.chunks import chunk_to_msg
from physai_ros.ros.health import BufferHealth, CommandHealth, RejectionHealth, episode_status
from physai_ros.ros.hold import apply_hold, is_hold_chunk
from physai_ros.serving.client_core import HoldCommand
from physai_ros.serving.ros_msgs import hold_chunk_msg

NAMES = ("j0", "j1")


def buf():
    b = TrajectoryBuffer(NAMES, rate_hz=100.0)
    b.set_hold_position([0.0, 0.0])
    return b


def chunk(rnd, t0, n=20, dt=0.1, value=1.0):
    return ActionChunkData("r", "t", rnd, t0, dt, NAMES, np.full((n, 2), value), n)


def test_the_clients_hold_chunk_is_recognised_and_an_ordinary_chunk_is_not():
    hold = hold_chunk_msg("r", "t", HoldCommand(3, np.array([0.1, 0.2]), "miss", 5.0, 0.02, 4), NAMES)
    assert is_hold_chunk(hold.status, hold.error, hold.engine_instance)
    plain = chunk_to_msg(chunk(4, 5.0))
    assert not is_hold_chunk(plain.status, plain.error, plain.engine_instance)
    # one marker alone is not enough: a server error text "hold" is not a client hold
    assert not is_hold_chunk(0, "hold", "engine_0")
    assert not is_hold_chunk(1, "hold", "robot_client")


def test_keep_waiting_hold_stops_and_the_late_answer_is_still_executed():
    b = buf()
    assert b.insert(chunk(2, 1.0), now=1.0).accepted
    b.advance(1.5)
    # observation round 4 captured at 1.6; SLO miss at 2.2 -> hold round 3 stamped 2.2
    out = apply_hold(b, 3, now=2.2)
    assert out.applied and out.dropped_nodes > 0 and len(b.tentative_nodes()) == 0
    held = b.advance(2.25)
    np.testing.assert_allclose(held, [1.0, 1.0])
    assert b.underruns == 0  # a deliberate stop is not an underrun
    late = b.insert(chunk(4, 1.6, value=2.0), now=2.4)  # capture time older than the hold
    assert late.accepted, late
    np.testing.assert_allclose(b.advance(2.5), [2.0, 2.0])


def test_give_up_hold_refuses_the_given_up_answer_and_takes_the_resend():
    b = buf()
    assert b.insert(chunk(2, 1.0), now=1.0).accepted
    assert apply_hold(b, 5, now=2.2).applied  # round 4 given up
    assert b.insert(chunk(4, 1.6, value=3.0), now=2.3).reason == "stale_round"
    # the resend's image was captured before the hold's stamp: still taken
    assert b.insert(chunk(6, 2.15, value=4.0), now=2.35).accepted
    # a second miss on the resend escalates with another give-up hold; its answer is refused
    assert apply_hold(b, 7, now=2.9).applied
    assert b.insert(chunk(6, 2.15), now=3.0).reason == "stale_round"
    assert b.insert(chunk(8, 2.85, value=5.0), now=3.0).accepted
    np.testing.assert_allclose(b.advance(3.05), [5.0, 5.0])


def test_a_keep_waiting_hold_that_crossed_its_answer_is_ignored():
    b = buf()
    assert b.insert(chunk(4, 1.6), now=1.7).accepted  # the answer arrived first
    out = apply_hold(b, 3, now=1.71)
    assert not out.applied and "already" in out.detail
    assert len(b.tentative_nodes()) > 0  # the answer keeps executing


def _state(**kw):
    base = dict(executing_round_id=2, exec_phase_start=1.0, actions_remaining=3, control_period=0.1,
                buffer_nodes=30, buffer_dry=False, underruns=0, chunks_accepted=1, chunks_rejected=0,
                last_reject_reason="")
    base.update(kw)
    return ExecutionState(**base)


def _run(task, *args, **kw):
    return task.run(DiagnosticStatusWrapper(), *args, **kw)


def test_rejection_health_grades_new_refusals_by_reason_and_recovers():
    h = RejectionHealth()
    assert _run(h, {}).level == OK
    st = _run(h, {"stale_round": 1})
    assert st.level == WARN and "stale_round 1" in st.message
    st = _run(h, {"stale_round": 1, "non_finite": 2})
    assert st.level == ERROR and st.message.startswith("2 refused") and "stale_round" not in st.message
    st = _run(h, {"stale_round": 1, "non_finite": 2})
    assert st.level == OK and "3 in total" in st.message
    assert dict(st.values)["rejected.non_finite"] == "2" and dict(st.values)["rejected_total"] == "3"


def test_buffer_health_levels():
    h = BufferHealth(rate_hz=100.0, dry_error_s=2.0)
    common = dict(holds={"applied": 0})
    st = _run(h, 0.0, _state(buffer_dry=True), have_start=False, seen_chunk=False, holding_round=None, **common)
    assert st.level == WARN and "joint_states" in st.message
    st = _run(h, 1.0, _state(buffer_dry=True), have_start=True, seen_chunk=False, holding_round=None, **common)
    assert st.level == OK and "idle" in st.message
    st = _run(h, 2.0, _state(), have_start=True, seen_chunk=True, holding_round=None, **common)
    assert st.level == OK and "0.30 s planned" in st.message
    st = _run(h, 3.0, _state(underruns=2), have_start=True, seen_chunk=True, holding_round=None, **common)
    assert st.level == WARN and "2 underrun" in st.message
    dry = _state(buffer_dry=True, underruns=2, buffer_nodes=0)
    assert _run(h, 4.0, dry, have_start=True, seen_chunk=True, holding_round=None, **common).level == WARN
    st = _run(h, 6.5, dry, have_start=True, seen_chunk=True, holding_round=None, **common)
    assert st.level == ERROR and "2.5 s" in st.message
    # a client hold explains the dry buffer: WARN with the round, and the dry clock restarts
    st = _run(h, 7.0, dry, have_start=True, seen_chunk=True, holding_round=5, holds={"applied": 1})
    assert st.level == WARN and "rounds <= 5" in st.message and dict(st.values)["holds_applied"] == "1"
    assert _run(h, 7.5, dry, have_start=True, seen_chunk=True, holding_round=None, **common).level == WARN


def test_command_health_and_episode_status():
    h = CommandHealth()
    assert _run(h, 0, 0, "").level == WARN
    assert _run(h, 10, 0, "").level == OK
    assert _run(h, 10, 0, "").level == WARN  # nothing new: holding the last command
    st = _run(h, 12, 1, "joint names do not match")
    assert st.level == ERROR and "joint names" in st.message
    st = episode_status(DiagnosticStatusWrapper(), {"task": "reach", "episode": 3, "episode_time": 1.5,
                                                    "episodes_finished": 2, "successes": 2, "timeouts": 0,
                                                    "grasped": False})
    assert st.level == OK and "2 done" in st.message


@pytest.mark.parametrize("reason", ["expired", "time_backwards", "capture_in_future", "stale_round"])
def test_timing_refusals_are_warnings_data_refusals_errors(reason):
    assert RejectionHealth.level_of(reason) == WARN
    assert RejectionHealth.level_of("unknown_joint") == ERROR
    assert RejectionHealth.level_of("wrong_robot") == ERROR
