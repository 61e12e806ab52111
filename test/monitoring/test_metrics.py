import math

import pytest

from physai_ros.monitoring.metrics import MetricBoard, metric_topic


def test_topic_names():
    assert metric_topic("robot_0", "latency_ms_p99") == "/robot_0/metrics/latency_ms_p99"
    assert metric_topic(None, "queue_depth") == "/fleet/metrics/queue_depth"
    assert metric_topic("robot_1", "stream_rate_hz/camera_0") == "/robot_1/metrics/stream_rate_hz/camera_0"


@pytest.mark.parametrize("robot,name", [
    ("robot 0", "x"), ("0robot", "x"), ("", "x"), ("fleet", "x"), ("robot_0", ""), ("robot_0", "p99-ms"),
    ("robot_0", "/abs"), ("robot_0", "a//b"), ("robot_0", "9lives"), (7, "x"), ("robot_0", None),
])
def test_bad_names_raise(robot, name):
    with pytest.raises(ValueError):
        metric_topic(robot, name)


def test_board_keeps_only_the_newest_value_per_topic():
    b = MetricBoard()
    for i in range(100):
        assert b.set("robot_0", "wait_ratio", i / 100)
    b.set(None, "robots_connected", 3)
    assert b.take_pending() == [("/fleet/metrics/robots_connected", 3.0), ("/robot_0/metrics/wait_ratio", 0.99)]
    assert b.take_pending() == []
    assert b.accepted == 101
    assert b.topics == {"/fleet/metrics/robots_connected", "/robot_0/metrics/wait_ratio"}


def test_bad_input_is_counted_with_a_reason_and_publishes_nothing():
    b = MetricBoard()
    assert not b.set("robot_0", "latency", math.nan)
    assert b.last_refusal == "non_finite: latency: nan"
    assert not b.set("robot_0", "latency", -math.inf)
    assert not b.set("robot_0", "latency", "12")
    assert not b.set("robot_0", "latency", True)
    assert not b.set("robot 0", "latency", 1.0)
    assert "not a valid ROS name token" in b.last_refusal
    assert b.refused == {"non_finite": 2, "not_numeric": 2, "bad_name": 1}
    assert b.take_pending() == [] and b.accepted == 0
    assert b.set_many("robot_0", {"a": 1, "b": math.nan, "c": 2.5}) == 2
    assert b.take_pending() == [("/robot_0/metrics/a", 1.0), ("/robot_0/metrics/c", 2.5)]
