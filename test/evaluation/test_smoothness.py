"""Chunk-boundary smoothness metrics (lab/physai_lab/evaluation/smoothness.py), checked by hand and on
the real trajectory buffer with each merge rule."""
import numpy as np
import pytest

from physai_ros.control.trajectory_buffer import TrajectoryBuffer
from physai_ros.control.types import TrajectoryNodes
from physai_lab.evaluation.smoothness import (SmoothnessRecorder, boundary_jump, command_jerk,
                                              old_command_at, summary)
from physai_ros.protocol.chunk import ActionChunkData


def nodes(times, pos, rounds):
    return TrajectoryNodes(np.asarray(times, float), np.asarray(pos, float), np.asarray(rounds, np.int64))


def test_old_command_is_the_node_then_the_held_last_then_the_last_command():
    old = nodes([0.1, 0.2], [[1.0, 0.0], [2.0, 0.0]], [2, 2])
    assert old_command_at(0.2, old, None).tolist() == [2.0, 0.0]
    assert old_command_at(0.35, old, None).tolist() == [2.0, 0.0]  # plan ended: held
    assert old_command_at(0.05, nodes([], np.zeros((0, 2)), []), [5.0, 0.0]).tolist() == [5.0, 0.0]
    assert old_command_at(0.05, nodes([], np.zeros((0, 2)), []), None) is None


def test_boundary_jump_by_hand():
    old = nodes([0.1, 0.2, 0.3], [[1.0, 9.0], [2.0, 9.0], [3.0, 9.0]], [2, 2, 2])
    new = nodes([0.1, 0.2, 0.3], [[1.0, 9.0], [2.5, 0.0], [3.5, 0.0]], [2, 4, 4])
    # Round 4's first node (t=0.2) moves joint 0 from 2.0 to 2.5; joint 1 is the gripper: ignored.
    assert boundary_jump(old, None, new, 4, slice(0, -1)) == pytest.approx(0.5)
    assert boundary_jump(old, None, new, 6, slice(0, -1)) is None


def test_command_jerk_by_hand():
    t = np.arange(8) * 0.01
    assert np.allclose(command_jerk(np.stack([t, 2 * t], 1), 0.01), 0.0)  # constant velocity
    step = np.array([[0.0], [0.0], [0.0], [1.0], [1.0]])  # a 1 rad step: third differences 1, -2
    assert command_jerk(step, 0.1).tolist() == pytest.approx([1000.0, 2000.0])
    assert command_jerk(np.zeros((3, 1)), 0.1).size == 0
    assert summary([]) == {"n": 0, "mean": None, "p50": None, "p99": None, "max": None}
    assert summary([1.0, 3.0])["mean"] == 2.0


@pytest.mark.parametrize("merge,expect", [("replace", 1.0), ("crossfade", 1.0 / 6.0)])
def test_recorder_on_the_real_buffer(merge, expect):
    """A chunk at 1.0 rad replacing a plan at 0 rad: replace jumps the whole way, a 5-node
    crossfade moves by w = 1/(n+1) at the first node."""
    buf = TrajectoryBuffer(["j0", "gripper"], rate_hz=100.0, merge=merge, crossfade_s=0.05)
    buf.set_hold_position([0.0, 0.0])
    rec = SmoothnessRecorder(100.0)

    def insert(rid, stamp, value, now):
        c = ActionChunkData(robot_id="r", task_id="t", round_id=rid, stamp=stamp, dt=0.1,
                            actions=np.full((5, 2), value, np.float32), horizon=5, joint_names=("j0", "gripper"))
        snap = rec.before_merge(buf)
        out = buf.insert(c, now)
        rec.after_merge(snap, buf, rid, out.accepted)

    insert(2, 0.0, 0.0, 0.0)  # the episode's first chunk: joins the hold, not counted
    for k in range(1, 20):
        rec.tick(k * 0.01, buf.advance(k * 0.01))
    insert(4, 0.15, 1.0, 0.2)
    for k in range(20, 60):
        rec.tick(k * 0.01, buf.advance(k * 0.01))
    rec.end_episode()
    assert rec.jumps == [pytest.approx(expect)]
    assert len(rec.jerks) == 59 - 3 and max(rec.jerks) > 0
