"""security.rate_limit's token bucket, as the openpi gateway and operator questions use it: a
burst passes, then the average rate; jitter around the rate is not refused; a refusal spends nothing."""
from physai_ros.security.rate_limit import TokenBucket


def test_a_burst_passes_then_only_the_rate():
    b = TokenBucket(rate_hz=10.0, burst=3.0)
    assert [b.take(0.0) for _ in range(4)] == [True, True, True, False]
    assert not b.take(0.05)  # half a token back
    assert b.take(0.1) and not b.take(0.1)


def test_a_sender_jittering_around_its_rate_is_never_refused():
    b = TokenBucket(rate_hz=20.0, burst=3.0)
    # Every other gap 30 ms and 70 ms: under the 50 ms minimum gap half the time, 20/s on average.
    t, taken = 0.0, []
    for k in range(200):
        taken.append(b.take(t))
        t += 0.03 if k % 2 else 0.07
    assert all(taken)


def test_a_refusal_spends_nothing_and_a_flood_gets_the_rate():
    b = TokenBucket(rate_hz=20.0, burst=2.0)
    taken = [b.take(k * 0.001) for k in range(1000)]  # 1000 messages/s for one second
    assert 2 + 19 <= sum(taken) <= 2 + 21
