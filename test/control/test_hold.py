"""Hold chunks as plain logic: the robot client's own hold chunk is recognised by both markers,
and both hold variants keep or refuse the awaited answer as intended."""
import numpy as np

from physai_ros.client.types import HoldCommand
from physai_ros.control.hold import apply_hold, hold_chunk
from physai_ros.control.trajectory_buffer import TrajectoryBuffer
from physai_ros.protocol.chunk import is_hold_chunk
from physai_ros.protocol.chunk import ActionChunkData

NAMES = ("j0", "j1")


def buf():
    b = TrajectoryBuffer(NAMES, rate_hz=100.0)
    b.set_hold_position([0.0, 0.0])
    return b


def chunk(rnd, t0, n=20, dt=0.1, value=1.0):
    return ActionChunkData("r", "t", rnd, t0, dt=dt, joint_names=NAMES, actions=np.full((n, 2), value), horizon=n)


def test_the_clients_hold_chunk_is_recognised_and_an_ordinary_chunk_is_not():
    hold = hold_chunk("r", "t", HoldCommand(3, np.array([0.1, 0.2]), "miss", 5.0, 0.02, 4), NAMES)
    assert is_hold_chunk(hold.status, hold.error, hold.engine_instance)
    assert hold.round_id == 3 and hold.stamp == 5.0 and hold.horizon == 4 and hold.dt == 0.02
    np.testing.assert_allclose(hold.actions, np.tile([0.1, 0.2], (4, 1)), rtol=1e-6)
    plain = chunk(4, 5.0)
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
