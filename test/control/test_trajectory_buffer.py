"""TrajectoryBuffer: grid resampling, latency compensation, merge rules, horizon, rejections,
dry hold, execution info, streamed segments."""
import dataclasses
import math

import numpy as np
import pytest
from hypothesis import given, settings, strategies as st

from physai_ros.control.plan_checks import RejectReason
from physai_ros.control.trajectory_buffer import MergeRule, TrajectoryBuffer
from physai_ros.protocol.chunk import ActionChunkData

JOINTS = ("j1", "j2", "j3")
RATE = 100.0  # 10 ms nodes keep the arithmetic readable; 480 Hz is covered separately


def ramp(n, start=0.0, step=1.0, dim=3):
    """Action k = start + k*step on joint 0, 10x that on joint 1, -k on joint 2."""
    k = start + step * np.arange(n, dtype=float)
    return np.stack([k, 10 * k, -k], axis=1)[:, :dim]


def chunk(round_id=1, t0=1.0, dt=0.1, actions=None, horizon=None, names=JOINTS, **kw):
    actions = ramp(5) if actions is None else actions
    return ActionChunkData(robot_id="r0", task_id="t", round_id=round_id, stamp=t0, dt=dt,
                           joint_names=tuple(names), actions=actions,
                           horizon=len(actions) if horizon is None else horizon, **kw)


def buf(**kw):
    kw.setdefault("rate_hz", RATE)
    return TrajectoryBuffer(JOINTS, **kw)


def snapshot(b: TrajectoryBuffer):
    t, c = b.tentative_nodes(), b.committed_nodes()
    return (t.times.tolist(), t.positions.tolist(), t.round_ids.tolist(), c.times.tolist(),
            c.positions.tolist(), b.last_round_id, b.chunks_accepted, b.underruns,
            None if b.last_command is None else b.last_command.tolist())


# ---------------------------------------------------------------- resampling and compensation
def test_chunk_nodes_lie_on_grid_interpolated_and_last_action_held_for_dt():
    b = buf()
    out = b.insert(chunk(t0=1.0, dt=0.1, actions=ramp(3)), now=0.999)
    assert out.accepted and out.reason is None
    nodes = b.tentative_nodes()
    # [t0, t0 + 3*dt) at 10 ms: 30 nodes
    assert out.nodes_added == 30 == len(nodes)
    np.testing.assert_allclose(nodes.times, 1.0 + 0.01 * np.arange(30), atol=1e-12)
    # linear between actions, constant over the last dt
    np.testing.assert_allclose(nodes.positions[:21, 0], np.arange(21) / 10.0, atol=1e-9)
    np.testing.assert_allclose(nodes.positions[20:, 0], 2.0)
    np.testing.assert_allclose(nodes.positions[:, 1], 10 * nodes.positions[:, 0])
    assert set(nodes.round_ids.tolist()) == {1}


def test_latency_compensation_drops_actions_whose_time_passed():
    b = buf()
    # The chunk answers an observation from 1.0 but arrives at 1.234: nodes up to 1.23 passed.
    out = b.insert(chunk(t0=1.0, dt=0.1, actions=ramp(5)), now=1.234)
    nodes = b.tentative_nodes()
    assert out.accepted
    assert nodes.times[0] == pytest.approx(1.24)
    assert out.nodes_added == 50 - 24
    # the remaining nodes keep the values they have on the full chunk's timeline
    np.testing.assert_allclose(nodes.positions[0], [2.4, 24.0, -2.4], atol=1e-9)
    cmd = b.advance(1.24)
    np.testing.assert_allclose(cmd, [2.4, 24.0, -2.4], atol=1e-9)


def test_chunk_entirely_in_the_past_is_rejected_as_expired():
    b = buf()
    out = b.insert(chunk(t0=1.0, dt=0.1, actions=ramp(5)), now=1.6)
    assert not out.accepted and out.reason == RejectReason.EXPIRED == "expired"
    assert len(b.tentative_nodes()) == 0


def test_resampling_at_480hz_has_exact_node_spacing():
    b = TrajectoryBuffer(JOINTS, rate_hz=480.0)
    b.insert(chunk(t0=10.0, dt=0.02, actions=ramp(50)), now=9.99)
    t = b.tentative_nodes().times
    assert len(t) == 480  # 50 actions * 20 ms = 1 s
    np.testing.assert_allclose(np.diff(t), 1 / 480.0, rtol=1e-9)


def test_joint_order_of_chunk_is_mapped_onto_buffer_order():
    b = buf()
    acts = ramp(3)
    b.insert(chunk(actions=acts[:, [2, 0, 1]], names=("j3", "j1", "j2")), now=0.5)
    ref = buf()
    ref.insert(chunk(actions=acts), now=0.5)
    np.testing.assert_allclose(b.tentative_nodes().positions, ref.tentative_nodes().positions)


# ---------------------------------------------------------------- horizon
def test_only_the_first_horizon_actions_are_used():
    b = buf()
    out = b.insert(chunk(t0=1.0, dt=0.1, actions=ramp(10), horizon=4), now=0.9)
    nodes = b.tentative_nodes()
    assert out.nodes_added == 40
    assert nodes.times[-1] == pytest.approx(1.39)
    assert nodes.positions[:, 0].max() == pytest.approx(3.0)  # action 4.. never appears


# ---------------------------------------------------------------- merge rules
def _two_chunks(rule, **kw):
    b = buf(merge=rule, **kw)
    b.insert(chunk(round_id=1, t0=1.0, dt=0.1, actions=np.zeros((10, 3))), now=1.0)
    b.advance(1.2)
    out = b.insert(chunk(round_id=2, t0=1.2, dt=0.1, actions=np.ones((5, 3))), now=1.25)
    return b, out


def test_replace_new_chunk_supersedes_overlap_and_old_tail():
    b, out = _two_chunks(MergeRule.REPLACE)
    n = b.tentative_nodes()
    # old nodes 1.21..1.25 stay (not yet due but before the new chunk's first free node)
    old = n.times <= 1.25 + 1e-9
    np.testing.assert_allclose(n.positions[old], 0.0)
    np.testing.assert_allclose(n.positions[~old], 1.0)
    assert n.times[-1] == pytest.approx(1.69)  # old chunk's tail beyond 1.7 dropped
    assert set(n.round_ids[~old].tolist()) == {2}
    assert out.nodes_added == int((~old).sum())


def test_crossfade_ramps_linearly_from_old_to_new_over_the_window():
    b, _ = _two_chunks(MergeRule.CROSSFADE, crossfade_s=0.05)
    n = b.tentative_nodes()
    new = n.times > 1.25 + 1e-9
    w = n.positions[new, 0]  # old is 0, new is 1: the value is the new weight
    np.testing.assert_allclose(w[:6], [1 / 6, 2 / 6, 3 / 6, 4 / 6, 5 / 6, 1.0], atol=1e-9)
    np.testing.assert_allclose(w[6:], 1.0)
    assert np.all(np.diff(w) >= 0)


def test_crossfade_with_no_known_position_takes_the_new_chunk_as_is():
    b = buf(merge=MergeRule.CROSSFADE, crossfade_s=0.05)
    b.insert(chunk(round_id=1, t0=1.0, dt=0.1, actions=np.ones((3, 3))), now=1.0)
    np.testing.assert_allclose(b.tentative_nodes().positions, 1.0)


def test_crossfade_after_a_dry_spell_starts_from_the_held_position():
    b = buf(merge=MergeRule.CROSSFADE, crossfade_s=0.03, hold_position=[2.0, 2.0, 2.0])
    b.insert(chunk(round_id=1, t0=1.0, dt=0.1, actions=np.full((3, 3), 5.0)), now=0.99)
    w = np.array([1, 2, 3]) / 4.0
    np.testing.assert_allclose(b.tentative_nodes().positions[:4, 0],
                               list((1 - w) * 2.0 + w * 5.0) + [5.0])


def test_crossfade_holds_the_old_plans_last_value_where_it_ends_inside_the_window():
    b = buf(merge=MergeRule.CROSSFADE, crossfade_s=0.05)
    b.insert(chunk(round_id=1, t0=1.0, dt=0.02, actions=np.zeros((1, 3))), now=0.99)
    b.insert(chunk(round_id=2, t0=1.0, dt=0.1, actions=np.ones((3, 3))), now=0.99)
    # old plan: 0 at 1.00 and 1.01, then nothing; its last value 0 is held through the window
    np.testing.assert_allclose(b.tentative_nodes().positions[:6, 0], np.arange(1, 7) / 6.0)


def test_weighted_average_blends_the_whole_overlap_then_takes_the_new_tail():
    b, _ = _two_chunks(MergeRule.WEIGHTED_AVERAGE, average_weight=0.25)
    n = b.tentative_nodes()
    new = n.times > 1.25 + 1e-9
    overlap = new & (n.times < 2.0 - 1e-9)  # old chunk covered [1.0, 2.0)
    np.testing.assert_allclose(n.positions[overlap], 0.25)
    assert n.times[-1] == pytest.approx(1.69)


def test_merge_rule_parses_config_strings_and_names_bad_ones():
    assert MergeRule.parse("crossfade") is MergeRule.CROSSFADE
    assert MergeRule.parse(" Weighted_Average ") is MergeRule.WEIGHTED_AVERAGE
    with pytest.raises(ValueError, match="replace, crossfade, weighted_average"):
        MergeRule.parse("blend")


# ---------------------------------------------------------------- commit semantics
def test_advance_commits_due_nodes_and_returns_the_newest():
    b = buf()
    b.insert(chunk(t0=1.0, dt=0.1, actions=ramp(3)), now=0.99)
    cmd = b.advance(1.055)
    np.testing.assert_allclose(cmd, [0.5, 5.0, -0.5], atol=1e-9)
    c = b.committed_nodes()
    np.testing.assert_allclose(c.times, [1.0, 1.01, 1.02, 1.03, 1.04, 1.05], atol=1e-12)
    assert b.tentative_nodes().times[0] == pytest.approx(1.06)


def test_insert_never_touches_nodes_due_by_now_even_before_advance():
    b = buf()
    b.insert(chunk(round_id=1, t0=1.0, dt=0.1, actions=np.zeros((5, 3))), now=1.0)
    b.insert(chunk(round_id=2, t0=1.0, dt=0.1, actions=np.ones((5, 3))), now=1.1)
    n = b.tentative_nodes()
    np.testing.assert_allclose(n.positions[n.times <= 1.1 + 1e-9], 0.0)
    np.testing.assert_allclose(n.positions[n.times > 1.1 + 1e-9], 1.0)


JOINT_MIX = np.array([1.0, -2.0, 0.5])  # one drawn value per node drives all joints (faster)


@st.composite
def _schedules(draw):
    steps = []
    t = 1.0
    rnd = 0
    for _ in range(draw(st.integers(3, 12))):
        t += draw(st.floats(0.0, 0.15))
        kind = draw(st.sampled_from(["insert", "segment", "advance"]))
        if kind == "segment":
            n = draw(st.integers(1, 20))
            pos = np.array(draw(st.lists(st.floats(-5, 5), min_size=n, max_size=n)))
            flags = draw(st.lists(st.booleans(), min_size=n, max_size=n))
            steps.append(("segment", t, rnd, draw(st.floats(-0.05, 0.1)),
                          np.outer(pos, JOINT_MIX),
                          flags, draw(st.floats(0.0, 0.05))))
        elif kind == "insert":
            rnd += 1
            n = draw(st.integers(1, 8))
            acts = np.array(draw(st.lists(st.floats(-5, 5), min_size=n, max_size=n)))
            # `skew`: the caller's clock may lag the last advance; committed nodes stay safe.
            steps.append(("insert", t, rnd, draw(st.floats(0.0, 0.2)), np.outer(acts, JOINT_MIX),
                          draw(st.integers(1, n)), draw(st.floats(0.0, 0.05))))
        else:
            steps.append(("advance", t))
    return steps


@settings(max_examples=50, deadline=None)
@given(_schedules(), st.sampled_from(list(MergeRule)))
def test_committed_nodes_never_change(steps, rule):
    """Also: a node a segment marked committed (locked) keeps its value until and after it is
    committed."""
    b = buf(merge=rule, crossfade_s=0.03, history_s=100.0)
    seen: dict[float, list] = {}
    locked: dict[float, list] = {}
    for step in steps:
        if step[0] == "insert":
            _, t, rnd, lag, acts, h, skew = step
            b.insert(chunk(round_id=rnd, t0=t - lag, dt=0.05, actions=acts, horizon=h),
                     now=t - skew)
        elif step[0] == "segment":
            _, t, rnd, offset, pos, flags, skew = step
            b.insert_segment(t + offset, 0.01, pos, flags, round_id=rnd, now=t - skew)
        else:
            b.advance(step[1])
        c = b.committed_nodes()
        for tm, p in zip(c.times.tolist(), c.positions.tolist()):
            assert seen.setdefault(tm, p) == p
        tn = b.tentative_nodes()
        for tm, p, lk in zip(tn.times.tolist(), tn.positions.tolist(), b.tentative_locked()):
            if lk:
                assert locked.setdefault(tm, p) == p
        for tm, p in locked.items():
            assert seen.get(tm, p) == p
        # nothing due stays tentative after an advance, and tentative is after committed
        if len(c) and len(b.tentative_nodes()):
            assert b.tentative_nodes().times[0] > c.times[-1]
    assert np.all(np.diff(b.committed_nodes().times) > 0)


# ---------------------------------------------------------------- rejections
def _bad_chunks():
    good = chunk(round_id=5, t0=2.0)
    r = dataclasses.replace
    nan = ramp(5).copy()
    nan[2, 1] = np.nan
    inf = ramp(5).copy()
    inf[0, 0] = np.inf
    return [
        ("wrong_dimension", r(good, actions=ramp(5, dim=2), joint_names=("j1", "j2"))),
        ("wrong_dimension", r(good, actions=ramp(5)[:, :, None])),
        ("wrong_dimension", r(good, joint_names=("j1", "j2"))),
        ("unknown_joint", r(good, joint_names=("j1", "j2", "elbow"))),
        ("duplicate_joint", r(good, joint_names=("j1", "j2", "j2"))),
        ("non_finite", r(good, actions=nan)),
        ("non_finite", r(good, actions=inf)),
        ("non_finite", r(good, confidence=np.array([1, 1, np.nan, 1, 1.0]))),
        ("bad_confidence", r(good, confidence=np.ones(3))),
        ("stale_round", r(good, round_id=4)),
        ("stale_round", r(good, round_id=3, stamp=2.5)),
        ("time_backwards", r(good, round_id=6, stamp=1.5)),
        ("empty", r(good, actions=np.zeros((0, 3)), horizon=0)),
        ("bad_dt", r(good, dt=0.0)),
        ("bad_dt", r(good, dt=-0.1)),
        ("bad_dt", r(good, dt=float("nan"))),
        ("bad_dt", r(good, dt=5.0)),
        ("bad_horizon", r(good, horizon=0)),
        ("bad_horizon", r(good, horizon=6)),
        ("bad_horizon", r(good, horizon=2.5)),
        ("bad_time", r(good, stamp=float("inf"))),
        ("capture_in_future", r(good, round_id=6, stamp=9.0)),
        ("malformed", r(good, actions="not numbers")),
        ("malformed", r(good, round_id="seven")),
    ]


@pytest.mark.parametrize("reason,bad", _bad_chunks(), ids=[f"{i}-{r}" for i, (r, _) in
                                                           enumerate(_bad_chunks())])
def test_every_rejection_is_named_counted_and_leaves_the_buffer_untouched(reason, bad):
    b = buf()
    assert b.insert(chunk(round_id=5, t0=2.0, dt=0.1, actions=ramp(8)), now=2.0).accepted
    b.advance(2.1)
    before = snapshot(b)
    out = b.insert(bad, now=2.2)
    assert not out.accepted
    assert out.reason == reason and out.nodes_added == 0 and out.detail
    assert snapshot(b) == before
    assert b.rejections == {reason: 1}
    assert b.chunks_rejected == 1
    st_ = b.execution_state(2.2)
    assert st_.chunks_rejected == 1 and st_.last_reject_reason == reason
    # and the buffer still works afterwards
    assert b.insert(chunk(round_id=7, t0=2.2, dt=0.1, actions=ramp(3)), now=2.2).accepted


def test_round_zero_is_stale_because_rounds_start_at_one():
    assert buf().insert(chunk(round_id=0), now=1.0).reason == "stale_round"


def test_rejection_counters_accumulate_per_reason():
    b = buf()
    b.insert(chunk(round_id=2), now=1.0)
    for _ in range(3):
        b.insert(chunk(round_id=1), now=1.0)
    b.insert(chunk(round_id=3, dt=0), now=1.0)
    assert b.rejections == {"stale_round": 3, "bad_dt": 1}
    assert b.chunks_rejected == 4 and b.chunks_accepted == 1


def test_chunk_with_empty_joint_names_is_taken_in_buffer_order():
    b = buf()
    assert b.insert(chunk(names=()), now=1.0).accepted


# ---------------------------------------------------------------- dry buffer
def test_dry_buffer_holds_last_commanded_position_and_counts_one_underrun():
    b = buf()
    assert b.advance(0.5) is None  # nothing known yet
    b.set_hold_position([7.0, 7.0, 7.0])
    np.testing.assert_allclose(b.advance(0.6), 7.0)
    assert b.execution_state(0.6).buffer_dry and b.underruns == 0
    b.insert(chunk(t0=1.0, dt=0.1, actions=ramp(2)), now=0.9)
    assert not np.allclose(b.advance(1.05), 7.0)
    assert not b.execution_state(1.05).buffer_dry
    last = b.advance(1.19)
    np.testing.assert_allclose(last, [1, 10, -1])
    for t in (1.2, 1.3, 1.5):
        np.testing.assert_allclose(b.advance(t), last)
        assert b.execution_state(t).buffer_dry
    assert b.underruns == 1
    st_ = b.execution_state(1.5)
    assert st_.buffer_dry and st_.underruns == 1 and st_.actions_remaining == 0


def test_advance_with_an_older_now_changes_nothing():
    b = buf()
    b.insert(chunk(t0=1.0, dt=0.1, actions=ramp(3)), now=0.99)
    cmd = b.advance(1.1)
    before = snapshot(b)
    np.testing.assert_allclose(b.advance(1.05), cmd)
    assert snapshot(b) == before and b.underruns == 0


def test_gap_between_chunks_runs_dry_then_resumes():
    b = buf()
    b.insert(chunk(round_id=1, t0=1.0, dt=0.1, actions=ramp(1)), now=1.0)
    b.insert(chunk(round_id=2, t0=1.3, dt=0.1, actions=ramp(2, start=5)), now=1.05)
    b.advance(1.09)
    assert not b.execution_state(1.09).buffer_dry
    np.testing.assert_allclose(b.advance(1.2), [0, 0, 0])
    assert b.execution_state(1.2).buffer_dry
    np.testing.assert_allclose(b.advance(1.3), [5, 50, -5])
    assert not b.execution_state(1.3).buffer_dry
    b.advance(1.6)
    assert b.underruns == 2


def test_stop_drops_plan_holds_position_and_is_not_an_underrun():
    b = buf()
    b.insert(chunk(t0=1.0, dt=0.1, actions=ramp(5)), now=1.0)
    held = b.advance(1.1)
    dropped = b.stop(1.1)
    assert dropped == 39 and len(b.tentative_nodes()) == 0
    np.testing.assert_allclose(b.advance(1.3), held)
    assert b.underruns == 0 and b.execution_state(1.3).buffer_dry


def test_stop_can_refuse_the_answer_to_a_given_up_request():
    b = buf()
    b.insert(chunk(round_id=2, t0=1.0, dt=0.1, actions=ramp(5)), now=1.0)
    b.advance(1.6)
    b.stop(1.6, refuse_through_round=4)  # round 4 was given up, round 5 is the resend
    assert b.insert(chunk(round_id=4, t0=1.1, dt=0.1, actions=ramp(10)), now=1.7).reason \
        == "stale_round"
    # the resend's answer is taken even though its observation is older than `now` at stop
    assert b.insert(chunk(round_id=5, t0=1.55, dt=0.1, actions=ramp(10)), now=1.75).accepted
    np.testing.assert_allclose(b.advance(1.76), [2.1, 21.0, -2.1], atol=1e-9)


# ---------------------------------------------------------------- execution info
def test_execution_state_reports_phase_start_and_actions_remaining():
    b = buf()
    st0 = b.execution_state(0.0)
    assert (st0.executing_round_id, st0.actions_remaining, st0.buffer_nodes) == (0, 0, 0)
    assert st0.control_period == pytest.approx(0.01)
    b.insert(chunk(round_id=3, t0=1.0, dt=0.1, actions=ramp(5)), now=1.02)
    st1 = b.execution_state(1.02)
    assert st1.executing_round_id == 0  # nothing of round 3 committed yet
    assert st1.actions_remaining == 5  # 47 nodes * 10 ms / 100 ms -> 4.7, rounded up
    b.advance(1.031)
    st2 = b.execution_state(1.031)
    assert st2.executing_round_id == 3
    assert st2.exec_phase_start == pytest.approx(1.03)
    assert st2.control_period == pytest.approx(0.1)
    assert st2.buffer_nodes == 46 and st2.actions_remaining == 5
    b.advance(1.25)
    assert b.execution_state(1.25).actions_remaining == 3  # 24 nodes = 2.4 actions
    b.insert(chunk(round_id=4, t0=1.3, dt=0.1, actions=ramp(5)), now=1.3)
    b.advance(1.35)
    st3 = b.execution_state(1.35)
    assert st3.executing_round_id == 4 and st3.exec_phase_start == pytest.approx(1.31)
    assert st3.chunks_accepted == 2 and not st3.buffer_dry


# ---------------------------------------------------------------- streamed segments
def test_segment_nodes_commit_like_chunk_nodes_and_keep_the_future_tail():
    b = buf()
    pos = np.tile(np.arange(10, dtype=float)[:, None], (1, 3))
    out = b.insert_segment(1.0, 0.01, pos, [False] * 10, round_id=1, now=0.995)
    assert out.accepted and out.nodes_added == 10
    np.testing.assert_allclose(b.tentative_nodes().times, 1.0 + 0.01 * np.arange(10))
    # an update of the middle replaces only the span it covers
    out = b.insert_segment(1.03, 0.01, np.full((3, 3), -1.0), [False] * 3, round_id=1,
                           now=1.0)
    assert out.accepted
    np.testing.assert_allclose(b.tentative_nodes().positions[:, 0],
                               [0, 1, 2, -1, -1, -1, 6, 7, 8, 9])
    np.testing.assert_allclose(b.advance(1.04), -1.0)
    # committed nodes are out of reach: the part due by now is dropped
    b.insert_segment(1.0, 0.01, np.full((10, 3), 5.0), [False] * 10, round_id=2, now=1.04)
    c = b.committed_nodes()
    np.testing.assert_allclose(c.positions[:, 0], [0, 1, 2, -1, -1])
    np.testing.assert_allclose(b.tentative_nodes().positions, 5.0)


def test_segment_nodes_marked_committed_are_locked_against_later_updates():
    b = buf()
    flags = [True] * 4 + [False] * 4
    b.insert_segment(1.0, 0.01, np.zeros((8, 3)), flags, round_id=1, now=0.99)
    b.insert_segment(1.0, 0.01, np.ones((8, 3)), [False] * 8, round_id=1, now=0.99)
    np.testing.assert_allclose(b.tentative_nodes().positions[:, 0], [0] * 4 + [1] * 4)
    assert b.tentative_locked().tolist() == flags
    # a chunk cannot move them either
    b.insert(chunk(round_id=2, t0=1.0, dt=0.1, actions=np.full((1, 3), 9.0)), now=0.99)
    np.testing.assert_allclose(b.tentative_nodes().positions[:4, 0], 0.0)


def test_segment_off_grid_is_interpolated():
    b = buf()
    b.insert_segment(1.005, 0.02, np.array([[0.0] * 3, [2.0] * 3, [4.0] * 3]), [False] * 3,
                     round_id=1, now=0.9)
    n = b.tentative_nodes()
    np.testing.assert_allclose(n.times, [1.01, 1.02, 1.03, 1.04])
    np.testing.assert_allclose(n.positions[:, 0], [0.5, 1.5, 2.5, 3.5], atol=1e-9)


@pytest.mark.parametrize("kwargs,reason", [
    (dict(positions=np.zeros((4, 2))), "wrong_dimension"),
    (dict(positions=np.zeros((0, 3)), committed_flags=[]), "empty"),
    (dict(committed_flags=[True]), "wrong_dimension"),
    (dict(positions=np.full((4, 3), np.nan)), "non_finite"),
    (dict(dt=0.0), "bad_dt"),
    (dict(start_time=float("nan")), "bad_time"),
    (dict(round_id=1), "stale_round"),
    (dict(start_time=0.5), "expired"),
    (dict(joint_names=("j1", "j2", "x")), "unknown_joint"),
])
def test_segment_rejections_leave_the_buffer_untouched(kwargs, reason):
    b = buf()
    b.insert_segment(1.0, 0.01, np.ones((20, 3)), [False] * 20, round_id=2, now=0.99)
    b.advance(1.05)
    before = snapshot(b)
    args = dict(start_time=1.1, dt=0.01, positions=np.zeros((4, 3)),
                committed_flags=[False] * 4, round_id=2, now=1.06)
    args.update(kwargs)
    out = b.insert_segment(**args)
    assert not out.accepted and out.reason == reason
    assert snapshot(b) == before and b.segments_rejected == 1 and b.rejections == {reason: 1}


def test_constructor_names_bad_settings():
    with pytest.raises(ValueError, match="joint"):
        TrajectoryBuffer([])
    with pytest.raises(ValueError, match="duplicates"):
        TrajectoryBuffer(["a", "a"])
    with pytest.raises(ValueError, match="rate_hz"):
        TrajectoryBuffer(JOINTS, rate_hz=0)
    with pytest.raises(ValueError, match="position"):
        TrajectoryBuffer(JOINTS, hold_position=[0.0, math.nan, 0.0])
