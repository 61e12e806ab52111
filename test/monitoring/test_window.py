import math

import numpy as np
import pytest

from physai_ros.monitoring.window import RateEstimator, SlidingWindow


def test_percentiles_match_numpy_over_the_window():
    w = SlidingWindow(span_s=10.0)
    rng = np.random.default_rng(0)
    vals = rng.gamma(2.0, 30.0, 500)
    for i, v in enumerate(vals):
        w.add(i * 0.01, v)  # all within 5 s
    for q in (0, 50, 90, 99, 100):
        assert w.percentile(q, now=5.0) == pytest.approx(np.percentile(vals, q))
    assert w.mean(5.0) == pytest.approx(vals.mean())


def test_old_samples_leave_the_window():
    w = SlidingWindow(span_s=1.0)
    w.add(0.0, 1000.0)
    w.add(0.9, 1.0)
    assert w.percentile(100, now=0.95) == 1000.0
    assert w.percentile(100, now=1.5) == 1.0  # the 1000 at t=0 is older than 1 s
    assert w.count(10.0) == 0 and w.percentile(50, now=10.0) is None and w.mean(10.0) is None


def test_bounded_by_max_samples():
    w = SlidingWindow(span_s=100.0, max_samples=10)
    for i in range(100):
        w.add(float(i) * 0.001, float(i))
    assert w.values(1.0) == [float(i) for i in range(90, 100)]


def test_bad_samples_are_counted_not_stored():
    w = SlidingWindow()
    assert not w.add(0.0, math.nan)
    assert not w.add(math.inf, 1.0)
    assert not w.add(0.0, "fast")
    assert w.rejected == 3 and w.count(0.0) == 0
    with pytest.raises(ValueError):
        w.percentile(101, 0.0)
    with pytest.raises(ValueError):
        SlidingWindow(span_s=0)


def test_rate_of_a_steady_stream_and_of_a_young_one():
    r = RateEstimator(span_s=5.0)
    for k in range(300):  # 30 Hz for 10 s
        r.tick(k / 30.0)
    assert r.rate_hz(299 / 30.0) == pytest.approx(30.0, rel=1e-6)
    young = RateEstimator(span_s=5.0)
    for k in range(10):  # 0.3 s old: reads its true rate, not 10/5 s
        young.tick(100.0 + k / 30.0)
    assert young.rate_hz(100.0 + 9 / 30.0) == pytest.approx(30.0)


def test_rate_of_a_stopped_stream_falls_to_zero():
    r = RateEstimator(span_s=2.0)
    for k in range(60):
        r.tick(k / 30.0)
    last = 59 / 30.0
    assert r.rate_hz(last + 0.5) < 30.0 * 0.8
    assert r.rate_hz(last + 2.5) == 0.0
    assert r.total == 60


def test_rate_refuses_time_going_backwards():
    r = RateEstimator()
    assert r.tick(1.0) and not r.tick(0.5) and not r.tick(math.nan)
    assert r.rejected == 2 and r.total == 1


def test_series_recorder_stays_bounded_and_evenly_spaced():
    from physai_ros.monitoring.window import SeriesRecorder

    rec = SeriesRecorder(max_points=100)
    for k in range(10_000):
        rec.add("robot_0", k * 0.1, float(k))
    rec.add("robot_1", 0.0, 1.0)
    assert not rec.add("robot_1", 1.0, math.nan) and rec.rejected == 1
    out = rec.to_json()
    t = out["robot_0"]["t"]
    assert 50 <= len(t) <= 100 and t[0] == 0.0 and t[-1] > 900.0
    gaps = np.diff(t)
    assert np.allclose(gaps, gaps[0])  # decimation kept the spacing even
    assert np.allclose(out["robot_0"]["v"], np.array(t) * 10)
    assert out["robot_1"] == {"t": [0.0], "v": [1.0]}
