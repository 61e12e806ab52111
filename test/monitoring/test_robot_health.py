"""The controller's and sim robot's diagnostics as plain logic (no DDS): the health tasks grade
what they see."""
import pytest

from physai_ros.control.types import ExecutionState
from physai_ros.monitoring.diagnostics import ERROR, OK, WARN, DiagnosticStatusWrapper
from physai_ros.monitoring.robot_health import BufferHealth, CommandHealth, RejectionHealth, episode_status


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
    common = dict(holds={"applied": 0}, client_answers={})
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
    st = _run(h, 7.0, dry, have_start=True, seen_chunk=True, holding_round=5, holds={"applied": 1},
              client_answers={"refused": 3, "error": 1})
    assert st.level == WARN and "rounds <= 5" in st.message and dict(st.values)["holds_applied"] == "1"
    # the server's answers for the client are shown apart from the rejections
    assert (dict(st.values)["server_refusals_seen"], dict(st.values)["server_errors_seen"]) == ("3", "1")
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
