"""What the fleet monitor reads from /diagnostics (monitoring.diagnostics_reader), as the nodes
write it: FrequencyStatus rates, the controller's rejections and holds, the policy server's wait
ratio, SLO and queue depth; other robots' statuses left out, unreadable ones named."""
from physai_ros.monitoring.diagnostics_reader import PUBLISHED_STREAMS, DiagnosticsReader


def test_publisher_rates_become_summary_rates_and_series():
    r = DiagnosticsReader(["robot_0"])
    assert set(r.published["robot_0"]) == set(PUBLISHED_STREAMS)  # every stream present, 0 Hz until reported
    for k, (stamp, events, hz) in enumerate([(10.0, 100, 99.0), (11.0, 200, 101.0)]):
        assert r.on_status("robot_0/sim_robot: camera rate", "robot_0",
                           {"Events since startup": str(events), "Actual frequency (Hz)": str(hz)}, stamp, t=k) is None
    assert round(r.published["robot_0"]["camera"].rate_hz) == 100
    assert r.series()["stream_rates_hz"]["robot_0/camera"] == {"t": [0, 1], "v": [99.0, 101.0]}


def test_controller_rejections_and_holds_are_kept_per_robot():
    r = DiagnosticsReader(["robot_0"])
    r.on_status("robot_0/trajectory_controller: rejections", "robot_0",
                {"rejected.wrong_robot": "2", "rejected.stale": "1", "rejected_total": "3"}, 1.0, 1.0)
    r.on_status("robot_0/trajectory_controller: buffer", "robot_0", {"holds_applied": "4"}, 1.0, 1.0)
    assert r.refused["robot_0"] == {"wrong_robot": 2, "stale": 1} and r.holds["robot_0"] == 4


def test_server_statuses_feed_wait_ratio_slo_and_queue_depth_for_watched_robots_only():
    r = DiagnosticsReader(["robot_0"])
    r.on_status("policy_server: robot_0", "srv", {"wait_ratio": "0.25", "slo_ms": "300"}, 1.0, 2.0)
    r.on_status("policy_server: robot_9", "srv", {"wait_ratio": "0.9", "slo_ms": "100"}, 1.0, 2.0)
    r.on_status("policy_server: fleet", "srv", {"queue_depth": "3"}, 1.0, 2.0)
    r.on_status("policy_server: robot_0", "srv", {"wait_ratio": "n/a"}, 1.0, 3.0)  # no data yet: skipped
    s = r.series()
    assert s["wait_ratio"] == {"robot_0": {"t": [2.0], "v": [0.25]}}
    assert s["queue_depth"] == {"scheduler": {"t": [2.0], "v": [3.0]}}
    assert r.slo_ms == {"robot_0": 300.0}


def test_an_unreadable_status_is_named_and_others_are_ignored():
    r = DiagnosticsReader(["robot_0"])
    why = r.on_status("robot_0/sim_robot: wrench rate", "robot_0", {"Actual frequency (Hz)": "x"}, 1.0, 1.0)
    assert why == "unreadable diagnostics status 'robot_0/sim_robot: wrench rate'"
    assert r.on_status("robot_5/sim_robot: wrench rate", "robot_5", {}, 1.0, 1.0) is None  # not watched
    assert r.on_status("aggregator", "robot_0", {}, 1.0, 1.0) is None  # no "node: task" name
