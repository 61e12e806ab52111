"""AsyncTrigger: send when the buffer's time left falls to latency + margin; one outstanding."""
import math

import pytest

from physai_ros.control.async_trigger import AsyncTrigger


def test_sends_at_once_with_no_plan():
    d = AsyncTrigger().decide(now=0.0, actions_remaining=0, action_period=0.02, latency_s=0.2)
    assert d.send and d.reason == "no_plan"


def test_waits_while_the_buffer_outlasts_latency_plus_margin_then_sends():
    trig = AsyncTrigger(margin_s=0.05)
    # 20 ms actions, 200 ms latency + 50 ms margin: send when <= 12.5 actions are left
    d = trig.decide(0.0, actions_remaining=13, action_period=0.02, latency_s=0.2)
    assert not d.send and d.reason == "enough_buffer"
    assert d.time_left_s == pytest.approx(0.26) and d.lead_s == pytest.approx(0.25)
    d = trig.decide(0.0, actions_remaining=12, action_period=0.02, latency_s=0.2)
    assert d.send and d.reason == "low_buffer"


def test_never_two_outstanding_until_the_first_times_out():
    trig = AsyncTrigger(request_timeout_s=1.0)
    trig.on_sent(round_id=1, now=0.0)
    for t in (0.1, 0.5, 0.99):
        d = trig.decide(t, 0, 0.02, 0.2)
        assert not d.send and d.reason == "waiting_for_reply"
    d = trig.decide(1.0, 0, 0.02, 0.2)
    assert d.send and trig.timeouts == 1 and trig.outstanding is None
    trig.on_sent(2, 1.0)
    assert trig.outstanding.round_id == 2
    # the late answer to round 1 is recognised; round 2 is still awaited
    assert trig.on_reply(1, 1.1) == "late"
    assert trig.outstanding.round_id == 2
    assert trig.on_reply(2, 1.2) == "answered" and trig.outstanding is None
    assert trig.on_reply(2, 1.3) == "unmatched"  # a duplicate
    assert trig.late_replies == 1 and trig.unmatched_replies == 1


def test_abandon_allows_an_immediate_resend():
    trig = AsyncTrigger(request_timeout_s=5.0)
    trig.on_sent(7, 0.0)
    assert trig.abandon() == 7 and trig.abandon() is None
    assert trig.decide(0.1, 0, 0.02, 0.2).send
    assert trig.on_reply(7, 0.2) == "late"


def test_min_interval_limits_the_send_rate():
    trig = AsyncTrigger(min_interval_s=0.1)
    trig.on_sent(1, 0.0)
    trig.on_reply(1, 0.01)
    assert trig.decide(0.05, 0, 0.02, 0.0).reason == "min_interval"
    assert trig.decide(0.1, 0, 0.02, 0.0).send


@pytest.mark.parametrize("args", [(math.nan, 3, 0.02, 0.1), (0.0, 3, math.inf, 0.1),
                                  (0.0, 3, 0.02, "slow"), (0.0, None, 0.02, 0.1)])
def test_bad_inputs_do_not_send_and_do_not_raise(args):
    assert AsyncTrigger().decide(*args) .reason == "bad_input"


def test_given_up_memory_is_bounded():
    trig = AsyncTrigger()
    for r in range(1, 200):
        trig.on_sent(r, float(r))
    assert trig.abandoned == 198
    assert trig.on_reply(1, 300.0) == "unmatched"  # forgotten
    assert trig.on_reply(198, 300.0) == "late"


def _closed_loop(assumed_latency, true_latency=0.15, period=0.02, horizon=25, steps=500):
    """Execution at 50 Hz; each chunk answers the observation sent ``true_latency`` earlier and
    replaces the plan, minus the actions that came due during the round trip."""
    trig = AsyncTrigger(margin_s=0.03)
    remaining, pending, idle_ticks, chunks = 0, None, 0, 0
    for step in range(steps):
        now = step * period
        if pending and now >= pending[1] - 1e-9:
            assert trig.on_reply(pending[0], now) == "answered"
            remaining = horizon - round(true_latency / period)
            pending, chunks = None, chunks + 1
        d = trig.decide(now, remaining, period, assumed_latency)
        if d.send:
            trig.on_sent(step + 1, now)
            pending = (step + 1, now + true_latency)
        if remaining == 0 and chunks:
            idle_ticks += 1
        remaining = max(0, remaining - 1)
    return chunks, idle_ticks


def test_closed_loop_keeps_the_robot_busy_when_the_latency_is_measured():
    chunks, idle = _closed_loop(assumed_latency=0.15)
    assert chunks > 20 and idle == 0


def test_closed_loop_idles_when_the_latency_is_underestimated():
    chunks, idle = _closed_loop(assumed_latency=0.02)
    assert chunks > 20 and idle > chunks


def test_rate_pacing_keeps_the_average_rate_and_makes_up_a_wait_up_to_the_burst():
    t = AsyncTrigger(margin_s=0.0, request_timeout_s=100.0)
    t.set_rate(4.0, burst_s=0.5)  # 4 Hz: the n-th send not before start + n / 4

    def send_when_allowed(now, rid):
        d = t.decide(now, 0, 0.1, 0.0)
        if d.send:
            t.on_sent(rid, now)
            t.on_reply(rid, now)
        return d

    sent = [now for k, now in enumerate(x / 100 for x in range(0, 200)) if send_when_allowed(now, k).send]
    # 2 s at 4 Hz from t = 0: sends at 0, 0.25, ..., 1.75 (8), never faster on average.
    assert sent == pytest.approx([0.25 * k for k in range(8)])
    # A 0.4 s stall (a System 2 wait): the time is made up by sending sooner afterwards.
    t.on_sent(100, 2.0)
    t.on_reply(100, 2.4)
    assert t.decide(2.4, 0, 0.1, 0.0).send  # 2.25 was due: allowed at once
    t.on_sent(101, 2.4)
    t.on_reply(101, 2.41)
    # The next at 2.5, on the original grid (a minimum gap would say 2.65 and lose the stall).
    assert t.decide(2.49, 0, 0.1, 0.0).reason == "rate_cap" and t.decide(2.5, 0, 0.1, 0.0).send
    # A long stall makes up at most burst_s of it: then back to one send per 0.25 s.
    t.on_sent(102, 2.5)
    t.on_reply(102, 10.0)
    allowed = 0
    for k in range(10):
        if t.decide(10.0, 0, 0.1, 0.0).send:
            t.on_sent(200 + k, 10.0)
            t.on_reply(200 + k, 10.0)
            allowed += 1
    assert allowed == 3  # the one due now and the 0.5 s burst's two at 4 Hz, then the cap
    assert t.decide(10.0, 0, 0.1, 0.0).reason == "rate_cap"
    t.set_rate(0.0)  # no plan: no cap
    assert t.decide(10.0, 0, 0.1, 0.0).send
