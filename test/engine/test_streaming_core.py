"""StreamingCore driven tick by tick on a virtual clock: commit semantics, force in the fast
loop, slots, bad input, and the hand-over to the robot's TrajectoryBuffer."""
import numpy as np
import pytest
import torch

from physai_ros.control.trajectory_buffer import TrajectoryBuffer
from physai_ros.engine.streaming.streams import StreamCapacityError, StreamInputError

from streaming_helpers import one_torch_thread  # noqa: F401 (autouse)
from streaming_helpers import CFG, build, robot_input, run_ticks

P = 1 / 480


def flat(segs_per_tick):
    return [s for segs in segs_per_tick for s in segs]


def test_nodes_commit_in_time_order_and_committed_nodes_never_change():
    core = build(force="random")
    core.add_robot("r", robot_input(1), seed=4)
    seen = {}  # node tick -> value when committed
    finals = {}  # token due time -> value once final

    def check_finals():
        due, vals, tau = core.window("r")
        for d, v, t in zip(due.tolist(), vals, tau.tolist()):
            key = round(d * 1e9)
            if t == 0:
                if key in finals:
                    assert torch.equal(finals[key], v), "a final token changed"
                finals[key] = v.clone()

    def inputs(k, now):  # nothing frozen: new wrench, state and observations all the time
        if k:
            check_finals()
        core.set_wrench("r", [np.sin(k), 0, np.cos(k), 0, 0, 0.1 * k])
        core.set_state("r", torch.full((CFG.max_state_dim,), 0.01 * k))
        if k % 16 == 8:
            core.update_observation("r", robot_input(100 + k))

    for segs in run_ticks(core, 70, vlm_every=16, on_tick=inputs):
        for s in segs:
            c = s.committed
            n = int(c.sum())
            assert c[:n].all() and not c[n:].any(), "committed nodes form a prefix (time order)"
            for tick, pos, com in zip(np.round(s.node_times() * 480).astype(int), s.positions, c):
                if tick in seen:
                    pytest.fail(f"node {tick} sent again after it was committed")
                if com:
                    seen[tick] = pos.copy()
    check_finals()
    assert len(seen) > 50 and len(finals) > 20
    assert core.stats.late_nodes == 0


def test_force_step_changes_every_uncommitted_node_within_one_tick():
    a, b = build(force="random"), build(force="random")
    for core in (a, b):
        core.add_robot("r", robot_input(2), seed=9)
    step_at = 30
    for k in range(step_at + 1):
        now = k * P
        if k % 16 == 0:
            a.vlm_pass(now)
            b.vlm_pass(now)
        if k == step_at:
            b.set_wrench("r", [0.0, 0.0, -40.0, 0.0, 0.0, 0.0])  # contact: 40 N
        sa, sb = a.tick(now), b.tick(now)
        if k < step_at:
            assert np.array_equal(sa[0].positions, sb[0].positions)
    sa, sb = sa[0], sb[0]
    assert sb.wrench_version > sa.wrench_version
    assert np.array_equal(sa.node_times(), sb.node_times())
    tentative = ~sa.committed
    assert tentative.sum() > 10
    diff = np.abs(sa.positions - sb.positions).max(axis=1)
    assert (diff[tentative] > 0).all(), "every uncommitted node reacts on the first tick"


def test_robots_share_the_batch_and_get_what_they_get_alone():
    alone = build()
    alone.add_robot("a", robot_input(3), seed=1)
    shared = build()
    shared.add_robot("b", robot_input(4, views=1, prompt=11), seed=2)
    shared.add_robot("a", robot_input(3), seed=1)
    for k in range(25):
        if k % 10 == 0:
            alone.vlm_pass(k * P)
            shared.vlm_pass(k * P)
        sa = alone.tick(k * P)[0]
        sb = {s.robot_id: s for s in shared.tick(k * P)}
        assert set(sb) == {"a", "b"}
        assert np.allclose(sa.positions, sb["a"].positions, atol=1e-5, rtol=0)
        assert np.array_equal(sa.committed, sb["a"].committed)


def test_slots_are_freed_by_leaving_robots_and_capacity_is_enforced():
    core = build(max_robots=2)
    assert core.add_robot("a", robot_input(1)) == 0
    assert core.add_robot("b", robot_input(2)) == 1
    with pytest.raises(StreamCapacityError):
        core.add_robot("c", robot_input(3))
    core.vlm_pass(0.0)
    assert {s.robot_id for s in core.tick(0.0)} == {"a", "b"}
    core.remove_robot("a")
    assert [s.robot_id for s in core.tick(P)] == ["b"], "served no more, even from the old cache"
    assert core.add_robot("c", robot_input(3)) == 0
    assert [s.robot_id for s in core.tick(2 * P)] == ["b"], "c waits for a VLM pass with its row"
    core.vlm_pass(2 * P)
    assert {s.robot_id for s in core.tick(3 * P)} == {"b", "c"}
    assert core.robot_ids == ["c", "b"]
    core.remove_robot("b")
    core.add_robot("b", robot_input(9))
    assert [s.robot_id for s in core.tick(4 * P)] == ["c"], "a returning robot waits for its own cache row"


def test_bad_input_is_refused_counted_and_the_stream_goes_on():
    core = build(force="random")
    core.add_robot("r", robot_input(1))
    core.vlm_pass(0.0)
    bad = robot_input(2)
    bad.images[0, 0, 0, 0] = float("nan")
    calls = [
        (lambda: core.set_wrench("r", [1.0, float("inf"), 0, 0, 0, 0]), "wrench"),
        (lambda: core.set_wrench("r", [1.0, 2.0]), "wrench"),
        (lambda: core.set_wrench("r", "abc"), "wrench"),
        (lambda: core.set_wrench("ghost", [0] * 6), "robot_id"),
        (lambda: core.set_state("r", torch.zeros(3)), "state"),
        (lambda: core.update_observation("r", bad), "observation"),
        (lambda: core.add_robot("r", robot_input(3)), "robot_id"),
        (lambda: core.add_robot("x", robot_input(3), action_dim=99), "action_dim"),
    ]
    for call, field in calls:
        with pytest.raises(StreamInputError):
            call()
        assert core.stats.errors_by_field.get(field, 0) >= 1, field
    assert core.stats.rejected == len(calls)
    assert "robot 'r'" in core.stats.last_error or "robot 'x'" in core.stats.last_error
    segs = run_ticks(core, 3)
    assert all(np.isfinite(s.positions).all() for s in flat(segs))


def test_segments_feed_the_robots_trajectory_buffer():
    core = build()
    core.add_robot("r", robot_input(1), action_dim=3, seed=5)
    buf = TrajectoryBuffer(["j0", "j1", "j2"], rate_hz=480.0)
    sent = {}
    for k, segs in enumerate(run_ticks(core, 60, vlm_every=20)):
        now = k * P
        for s in segs:
            assert s.positions.shape[1] == 3
            out = buf.insert_segment(**s.insert_args(now))
            assert out.accepted, out
            for t, p, c in zip(s.node_times(), s.positions, s.committed):
                if c:
                    sent[int(round(t * 480))] = p
        buf.advance(now)
    buf.advance(70 * P)
    nodes = buf.committed_nodes()
    got = {int(round(t * 480)): p for t, p in zip(nodes.times, nodes.positions)}
    common = sorted(set(got) & set(sent))
    assert len(common) > 20
    for t in common:
        assert np.allclose(got[t], sent[t], atol=1e-6)
    assert buf.segments_rejected == 0


def test_late_ticks_take_bigger_steps_and_keep_the_commit_order():
    core = build()
    core.add_robot("r", robot_input(1), seed=3)
    core.vlm_pass(0.0)
    times = [k * P for k in (0, 1, 2, 9, 10, 11, 25, 26, 40)]  # three stalls of several ticks
    last_committed = -1
    for now in times:
        for s in core.tick(now):
            ticks = np.round(s.node_times() * 480).astype(int)
            assert ticks[0] > last_committed, "nothing already committed is sent again"
            n = int(s.committed.sum())
            assert s.committed[:n].all() and not s.committed[n:].any()
            if n:
                last_committed = int(ticks[n - 1])
        due, _, tau = core.window("r")
        expected = core.schedule.tau(core._robots["r"].finish, now)
        # Tokens that were in the window follow the schedule exactly; tokens that entered after a
        # stall start from noise (tau = 1) and catch up with one big step at the next tick.
        assert bool((tau >= expected).all()) and float(tau[0]) == float(expected[0])
    assert core.stats.late_nodes > 0, "stalls longer than the lead commit nodes late, and say so"


def test_the_step_runs_without_the_lock_and_a_robot_gone_meanwhile_gets_nothing():
    # A step at pi0's widths outlasts the tick period; holding the lock through back-to-back
    # steps starved the server's callbacks (observations, registrations) behind it.
    import threading

    core = build()
    core.add_robot("a", robot_input(1), seed=1)
    core.add_robot("b", robot_input(2), seed=2)
    core.vlm_pass(0.0)
    seen = {}
    step = core.expert.step

    def step_watching_the_lock(*args):
        def other_thread():
            seen["lock_free"] = core._lock.acquire(blocking=False)
            if seen["lock_free"]:
                core.update_observation("a", robot_input(3))  # a callback gets through
                core.remove_robot("b")  # and a robot leaves while the step runs
                core._lock.release()
        t = threading.Thread(target=other_thread)
        t.start()
        t.join()
        return step(*args)

    core.expert.step = step_watching_the_lock
    segs = core.tick(P)
    assert seen["lock_free"] is True
    assert [s.robot_id for s in segs] == ["a"], "the robot that left during the step gets no segment"
    core.expert.step = step
    core.add_robot("b", robot_input(2), seed=2)  # back in a fresh slot: starts anew, not from the old state
    core.vlm_pass(2 * P)
    assert {s.robot_id for s in core.tick(3 * P)} == {"a", "b"}


@pytest.mark.parametrize("bad, why", [([None] * 6, "not a numeric vector"), (["a"] * 6, "not a numeric vector"),
                                      ([[1.0, 2.0], [3.0]], "not a numeric vector"), ([1.0] * 5, "expected 6"),
                                      ([1.0] * 5 + [float("inf")], "NaN or Inf")])
def test_a_wrench_that_is_not_six_finite_numbers_is_refused_with_its_reason(bad, why):
    from physai_ros.engine.streaming.force_token import WrenchError, check_wrench

    with pytest.raises(WrenchError, match=why):
        check_wrench(bad)
    assert check_wrench(np.arange(6, dtype=np.float64)).dtype == torch.float32
