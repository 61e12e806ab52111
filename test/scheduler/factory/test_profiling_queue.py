"""scheduler.factory.profiling: L(b, lambda) from batch service times, checked against queueing
results that hold exactly (one request alone; a deterministic D/D/1 queue) and ROSA's profile shape."""
import numpy as np
import pytest

from physai_ros.scheduler.factory.profiling import (RATE_FRACTIONS, profile_from_service_times, service_time,
                                                    simulate_queue)
from physai_ros.scheduler.factory.types import CONTINUOUS, STATIC


def test_service_time_interpolates_and_extends_the_last_slope():
    s = {1: 0.05, 2: 0.08, 4: 0.14}
    assert service_time(s, 2) == 0.08
    assert service_time(s, 3) == pytest.approx(0.11)
    assert service_time(s, 6) == pytest.approx(0.20)  # the last slope, 30 ms per request
    assert service_time({2: 0.1}, 4) == pytest.approx(0.2)  # one point: no batching benefit beyond it


def test_queue_matches_hand_computed_cases():
    s = {1: 0.1, 2: 0.15}
    # Spaced-out arrivals never queue: each waits exactly its service time.
    assert simulate_queue([0.0, 1.0, 2.0], 2, s) == pytest.approx([0.1, 0.1, 0.1])
    # Three at once with batch 2: the first two together (0.15), the third after them (0.15 + 0.1).
    assert simulate_queue([0.0, 0.0, 0.0], 2, s) == pytest.approx([0.15, 0.15, 0.25])
    # Batch 1 serialises them.
    assert simulate_queue([0.0, 0.0, 0.0], 1, s) == pytest.approx([0.1, 0.2, 0.3])
    # An arrival during a batch waits for it and is not added to it.
    assert simulate_queue([0.0, 0.05], 2, s) == pytest.approx([0.1, 0.15])


def test_profile_has_ten_rates_per_batch_size_and_latency_grows_with_load():
    p = profile_from_service_times("pi0", "cpu", {1: 0.05, 2: 0.08, 4: 0.14}, requests=2000)
    assert p.batching == STATIC and p.batch_sizes() == [1, 2, 4]
    for b in (1, 2, 4):
        curve = sorted((q for q in p.points if q.batch == b), key=lambda q: q.rate_hz)
        assert len(curve) == len(RATE_FRACTIONS) == 10
        capacity = b / {1: 0.05, 2: 0.08, 4: 0.14}[b]
        assert curve[0].rate_hz == pytest.approx(0.1 * capacity) and curve[-1].rate_hz < capacity
        # Light load: about the service time of a lone request; near capacity: much more.
        assert curve[0].p50_s == pytest.approx(0.05, rel=0.05)
        assert curve[-1].p99_s > 3 * curve[0].p99_s
        assert all(q.p99_s >= q.mean_s for q in curve)
    assert "queueing simulated" in p.note and p.source == "measured"
    # Deterministic for a seed.
    assert profile_from_service_times("pi0", "cpu", {1: 0.05, 2: 0.08, 4: 0.14}, requests=2000) == p


def test_continuous_profile_is_one_curve_and_bad_input_is_refused():
    p = profile_from_service_times("vlm", "cpu", {1: 0.2, 4: 0.3}, batching=CONTINUOUS, requests=1000)
    assert p.batching == CONTINUOUS and p.batch_sizes() == [1]
    assert max(q.rate_hz for q in p.points) == pytest.approx(0.97 * 4 / 0.3, rel=1e-3)
    assert np.isfinite(p.latency(1, 5.0))
    with pytest.raises(ValueError, match="service times must be positive"):
        profile_from_service_times("vlm", "cpu", {1: 0.0})
