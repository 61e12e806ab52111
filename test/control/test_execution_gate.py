"""What reaches a robot's trajectory buffer (control.execution_gate), with the real buffer: the
first joint state as the start, messages for another robot refused and counted, holds that stop
the buffer, and the execution state counting refusals made before the buffer saw a message."""
import numpy as np

from physai_ros.control.execution_gate import ExecutionGate
from physai_ros.control.trajectory_buffer import TrajectoryBuffer
from physai_ros.protocol.chunk import ActionChunkData

NAMES = ("j0", "j1")


def gate():
    return ExecutionGate("robot_0", TrajectoryBuffer(NAMES, rate_hz=100.0))


def chunk(rnd, t0, n=20, dt=0.1, value=1.0):
    return ActionChunkData("robot_0", "t", rnd, t0, dt=dt, joint_names=NAMES, actions=np.full((n, 2), value),
                           horizon=n)


def test_the_first_complete_joint_state_is_the_start_and_later_ones_change_nothing():
    g = gate()
    g.on_joint_state(["j0"], [0.5])  # incomplete: not a start
    assert not g.have_start and g.buffer.advance(0.0) is None
    g.on_joint_state(["j1", "j0"], [0.2, 0.1])
    assert g.have_start
    np.testing.assert_allclose(g.buffer.advance(0.0), [0.1, 0.2])
    g.on_joint_state(["j0", "j1"], [9.0, 9.0])
    np.testing.assert_allclose(g.buffer.advance(0.01), [0.1, 0.2])


def test_a_message_for_another_robot_is_refused_and_counted():
    g = gate()
    assert g.wrong_robot("", "chunk") is None and g.wrong_robot("robot_0", "chunk") is None
    why = g.wrong_robot("robot_7", "chunk")
    assert why == "chunk for robot 'robot_7' reached 'robot_0'"
    assert g.rejections()["wrong_robot"] == 1 and g.rejected_total == 1 and g.last_reason() == "wrong_robot"


def test_an_accepted_chunk_clears_a_hold_and_the_buffers_own_refusal_is_the_last_reason():
    g = gate()
    g.on_joint_state(NAMES, [0.0, 0.0])
    assert g.insert_chunk(chunk(2, 1.0), now=1.0).accepted and g.seen_chunk
    g.buffer.advance(1.5)
    assert g.on_hold(3, now=2.2)  # what the hold did, for the log
    assert g.holding_round == 3 and g.holds["applied"] == 1 and len(g.buffer.tentative_nodes()) == 0
    assert g.insert_chunk(chunk(4, 2.3, value=2.0), now=2.4).accepted and g.holding_round is None
    g.reject("unauthenticated_bad_mac")
    stale = g.insert_chunk(chunk(1, 0.5), now=2.5)  # older than what runs: the buffer refuses it
    assert not stale.accepted
    assert g.last_reason() == g.buffer.last_reject_reason == stale.reason


def test_the_execution_state_counts_refusals_before_the_buffer_too():
    g = gate()
    g.on_joint_state(NAMES, [0.0, 0.0])
    g.wrong_robot("robot_9", "segment")
    g.reject("malformed_message")
    st = g.execution_state(0.0)
    assert st.chunks_rejected == 2 and st.last_reject_reason == "malformed_message"


def test_the_servers_answers_for_the_client_are_counted_apart_and_never_rejections():
    """A refused or error ActionChunk is the robot client's business (fall back, ask again): the
    gate counts it by status, the buffer is untouched and nothing counts as rejected."""
    g = gate()
    g.on_joint_state(NAMES, [0.0, 0.0])
    g.on_client_answer("refused")
    g.on_client_answer("refused")
    g.on_client_answer("error")
    st = g.execution_state(0.0)
    assert g.client_answers == {"refused": 2, "error": 1}
    assert st.chunks_rejected == 0 and st.last_reject_reason == "" and not g.seen_chunk

