"""Hand-computed cases for the dominant-phase wait rule and the ongoing-wait reading."""
import numpy as np
import pytest
from hypothesis import given, settings, strategies as st

from physai_ros.scheduler import EngineInstanceInfo, LatencyProfile, Request, make_scheduler
from physai_ros.scheduler.bookkeeping import TaskBook


def test_generation_dominant_round_waits_on_the_generation_side():
    b = TaskBook("t", t_start=0.0)
    b.on_request(0, 0.0, None, 0, 0.1)
    b.on_dispatch(0, 0.5)
    b.on_complete(0, 1.5, 1.0)                   # G0 = [0.5, 1.5], |G0| = 1.0
    b.on_request(1, 1.8, 1.6, 2, 0.1)            # E0 = [1.6, 1.8 + 2 * 0.1] = [1.6, 2.0]
    assert b.ongoing_wait(2.5, 1) == pytest.approx(1.0)        # 2.5 - G0.end
    assert b.wait_ratio(2.5, 1) == pytest.approx(1.0 / 2.5)
    b.on_dispatch(1, 3.0)                        # W0 = G1.start - G0.end = 1.5
    assert b.wait_sum == pytest.approx(1.5)


def test_execution_dominant_round_waits_on_the_execution_side():
    b = TaskBook("t", t_start=0.0)
    b.on_request(0, 0.0, None, 0, 0.1)
    b.on_dispatch(0, 0.5)
    b.on_complete(0, 1.0, 0.5)                   # G0 = [0.5, 1.0], |G0| = 0.5
    b.on_request(1, 2.0, 1.1, 30, 0.1)           # E0 = [1.1, 5.0], |E0| = 3.9 > |G0|
    # The robot is still executing E0: it is not waiting (the paper's reading).
    assert b.ongoing_wait(2.0, 1) == 0.0
    assert b.ongoing_wait(4.8, 1) == 0.0
    assert b.ongoing_wait(5.3, 1) == pytest.approx(0.3)        # ran dry at 5.0
    # The earlier "lookahead" reading already counts from E0.end - |G0| = 4.5.
    look = TaskBook("t", t_start=0.0, lookahead=True)
    look.on_request(0, 0.0, None, 0, 0.1)
    look.on_dispatch(0, 0.5)
    look.on_complete(0, 1.0, 0.5)
    look.on_request(1, 2.0, 1.1, 30, 0.1)
    assert look.ongoing_wait(4.5, 1) == 0.0 and look.ongoing_wait(4.8, 1) == pytest.approx(0.3)
    b.on_dispatch(1, 4.9)
    assert b.wait_sum == 0.0                     # execution side closes only at E1.start
    b.on_complete(1, 5.4, 0.5)
    b.on_request(2, 6.0, 5.4, 20, 0.1)           # E1 starts at 5.4: W0 = 5.4 - 5.0
    assert b.wait_sum == pytest.approx(0.4)


@pytest.mark.parametrize("reading, ratio, bucket", [("paper", 0.3125 / 3.0625, 1), ("lookahead", 1.25 / 3.0625, 4)])
def test_the_audit_example_a_robot_busy_executing_is_not_waiting(reading, ratio, bucket):
    """The audit example: the task started at 0.75 s, G0 = [1.5625, 2.5], E0 = [2.5, 3.5]
    (execution-dominant), round 1 queued since 3.0 s, now 3.8125 s. Paper: the robot waits
    since E0.end, W = 0.3125, w = 0.3125 / 3.0625 = 0.102 (bucket 1 of 10). Lookahead: W =
    3.8125 + 0.9375 - 3.5 = 1.25, w = 0.408 (bucket 4)."""
    from physai_ros.scheduler.wait_ratio import bucket_of

    s = make_scheduler("wait_ratio", provisional_wait=reading)
    p = 0.0625
    s.submit(Request("r0", "rb", "t", 0, 0.75, 0.75, None, 0, p), 0.75)
    inst = [EngineInstanceInfo("gpu", "edge", LatencyProfile.constant(0.9375))]
    s.schedule(1.5625, inst)
    s.on_completed("r0", 2.5, 0.9375)
    s.submit(Request("r1", "rb", "t", 1, 3.0, 3.0, 2.5, 8, p), 3.0)   # E0 ends 3.0 + 8 p = 3.5
    w = s.wait_ratio("r1", 3.8125)
    assert w == pytest.approx(ratio)
    assert bucket_of(w, 0, 10, 20) == bucket


def test_first_round_queueing_counts_only_when_asked():
    off, on = TaskBook("a", 1.0), TaskBook("b", 1.0, count_first_wait=True)
    assert off.wait_ratio(3.0, 0) == 0.0
    assert on.wait_ratio(3.0, 0) == 1.0
    on.on_dispatch(0, 2.0)
    assert on.wait_sum == pytest.approx(1.0)


@settings(max_examples=60, deadline=None)
@given(g=st.floats(0.01, 2.0), e=st.floats(0.0, 4.0), lead=st.floats(0.0, 2.0),
       steps=st.lists(st.floats(0.001, 1.0), min_size=1, max_size=12))
@pytest.mark.parametrize("hold", [False, True])
def test_a_skipped_request_never_loses_priority(hold, g, e, lead, steps):
    """Whatever the dominant phase, waiting in the queue never lowers the wait ratio here: a
    task's first wait (none recorded before it) stays 0 while the robot executes and only grows
    once it runs dry, the paper's reading; hold_ratio_floor holds it in general (the ratio of a
    task with earlier waits falls while its robot is busy executing: not urgent, by design)."""
    s = make_scheduler("wait_ratio", hold_ratio_floor=hold)
    p = 0.05
    s.submit(Request("r0", "rb", "t", 0, 0.0, 0.0, None, 0, p), 0.0)
    inst = [EngineInstanceInfo("gpu", "edge", LatencyProfile.constant(g))]
    s.schedule(0.0, inst)
    s.on_completed("r0", g, g)
    n_exec = int(round(e / p))
    t = g + max(0.0, e - lead)                   # request sent `lead` seconds before E0 ends
    remaining = min(n_exec, int(round(lead / p)))
    s.submit(Request("r1", "rb", "t", 1, t, t, g, remaining, p), t)
    prev = s.wait_ratio("r1", t)
    for dt in steps:
        t += dt
        r = s.wait_ratio("r1", t)
        assert r >= prev - 1e-12
        slot = np.array([s._pending["r1"].slot])
        assert s.ratios(slot, t)[0] == r          # vectorised form == scalar reference
        prev = r


def test_recorded_rounds_only_reading_would_starve_a_skipped_request():
    """Generation-dominant task, G0 = [0, 1], E0 = [1, 1.2], G1 = [1.5, 2.5] (W0 = 0.5),
    E1 = [2.5, 2.7]; round 2 is queued from t = 2.7 and keeps being skipped.
    Recorded rounds only: 0.5 / t falls (0.167, 0.1, 0.056 at t = 3, 5, 9).
    Ours: (0.5 + t - 2.5) / t rises (0.333, 0.6, 0.778)."""
    b = TaskBook("t", 0.0)
    b.on_request(0, 0.0, None, 0, 0.1)
    b.on_dispatch(0, 0.0)
    b.on_complete(0, 1.0, 1.0)
    b.on_request(1, 1.2, 1.0, 0, 0.1)
    b.on_dispatch(1, 1.5)
    b.on_complete(1, 2.5, 1.0)
    b.on_request(2, 2.7, 2.5, 0, 0.1)
    assert b.wait_sum == pytest.approx(0.5)
    recorded_only = [b.wait_sum / t for t in (3.0, 5.0, 9.0)]
    ours = [b.wait_ratio(t, 2) for t in (3.0, 5.0, 9.0)]
    assert recorded_only == pytest.approx([0.5 / 3, 0.1, 0.5 / 9])
    assert ours == pytest.approx([1.0 / 3, 0.6, 7.0 / 9])
