"""The pure parts behind the nodes' /diagnostics: refusal logs, the client's and the server's
per-robot views, per-minute counter rates, and the fleet file's monitoring block."""
from __future__ import annotations

import math

import pytest
import yaml
from hypothesis import given, settings
from hypothesis import strategies as st

from physai_ros.monitoring.client_view import ClientView, finite_wrench
from physai_ros.monitoring.config import MonitoringConfig, load_monitoring
from physai_ros.monitoring.diagnostics import ERROR, OK, WARN, DiagnosticStatusWrapper
from physai_ros.monitoring.thresholds import MetricsTask
from physai_ros.monitoring.refusals import MAX_ID_CHARS, OTHER, RefusalHealth, RefusalLog
from physai_ros.monitoring.server_view import ServerView
from physai_ros.monitoring.window import CounterRate


# ---- RefusalLog / RefusalHealth ----------------------------------------------------------

def test_refusal_log_counts_per_source_and_keeps_the_last_reason():
    log = RefusalLog(max_ids=8)
    log.add("junk_a", "bad_registration", "num_views=0")
    log.add("junk_a", "bad_registration", "prompt is empty")
    log.add("junk_b", "capacity", "16 robots served")
    snap = log.snapshot()
    assert snap["junk_a"].count == 2 and snap["junk_a"].last_detail == "prompt is empty"
    assert snap["junk_b"].by_reason == {"capacity": 1} and log.total == 3


@settings(max_examples=15, deadline=None)
@given(ids=st.lists(st.text(max_size=400), min_size=1, max_size=60),
       detail=st.text(max_size=2000))
def test_refusal_log_stays_bounded_whatever_ids_arrive(ids, detail):
    log = RefusalLog(max_ids=16)
    for rid in ids:
        log.add(rid, "bad_registration", detail)
    snap = log.snapshot()
    assert len(snap) <= 16
    assert sum(r.count for r in snap.values()) == len(ids) == log.total
    widest = len(repr(chr(0x10FFFF) * MAX_ID_CHARS)) + 3  # every char escaped as \U0010ffff, then "..."
    assert all(len(k) <= widest for k in snap)
    assert all(len(r.last_detail) <= 160 for r in snap.values())
    if len(set(RefusalLog._key(i) for i in ids)) > 16:
        assert OTHER in snap


def test_a_huge_unprintable_id_is_cut_before_it_is_escaped():
    log = RefusalLog()
    key = log.add("\x1f" * 100_000 + "'", "bad_registration")
    assert key == repr("\x1f" * MAX_ID_CHARS) + "..." and len(key) < 300


def test_refusal_health_warns_on_new_refusals_and_recovers():
    log = RefusalLog()
    health = RefusalHealth(log, "registration(s)")
    st = health.run(DiagnosticStatusWrapper())
    assert st.level == OK
    log.add("junk_1", "bad_registration", "robot_id is empty")
    st = health.run(DiagnosticStatusWrapper())
    assert st.level == WARN and "junk_1: bad_registration" in st.message
    vals = dict(st.values)
    assert vals["junk_1.count"] == "1" and vals["junk_1.last_reason"] == "bad_registration: robot_id is empty"
    st = health.run(DiagnosticStatusWrapper())
    assert st.level == OK and "(1 in total)" in st.message and dict(st.values)["refused_total"] == "1"


# ---- CounterRate ---------------------------------------------------------------------------

def test_counter_rate_counts_growth_over_the_last_span():
    c = CounterRate(60.0)
    assert [c.update(t, v) for t, v in [(0, 0), (1, 1), (30, 3), (61, 3), (91, 3), (200, 10)]] == \
        [0, 1, 3, 2, 0, 7]
    assert c.update(201, 2) == 2  # the counter restarted (a process restart): counts from its new value
    with pytest.raises(ValueError):
        c.update(202, math.nan)


# ---- ClientView ----------------------------------------------------------------------------

def test_finite_wrench():
    assert finite_wrench([0.0, 1, 2, 3, 4, 5])
    assert not finite_wrench([0.0, math.nan, 0, 0, 0, 0])
    assert not finite_wrench([math.inf] * 6)
    assert not finite_wrench([0.0] * 5)
    assert not finite_wrench(["x"] * 6)


def test_client_view_rates_latency_and_drops():
    v = ClientView(num_views=2, slo_ms=100.0, window_s=30.0, rate_span_s=5.0)
    for i in range(101):
        t = 10.0 + i * 0.01
        v.on_wrench([0.0] * 6, t)  # 100 Hz
        if i % 5 == 0:
            v.on_camera(0, t)  # 20 Hz
            v.on_joint_state(t)
        if i % 10 == 0:
            v.on_camera(1, t)  # 10 Hz: the slower view is what camera_hz shows
    assert not v.on_wrench([math.nan] + [0.0] * 5, 11.0)
    v.on_served(0.05, 11.0)
    v.on_served(0.50, 11.0)
    v.on_exec_info(actions_remaining=4, control_period=0.1, underruns=3)
    m = v.metrics({"state": "running", "refused": 2, "fallbacks": {"hold": 1}, "chunks_ok": 2}, 11.0)
    assert m["wrench_hz"] == pytest.approx(100.0, rel=0.02)
    assert m["camera_hz"] == pytest.approx(10.0, rel=0.02)
    assert m["joint_states_hz"] == pytest.approx(20.0, rel=0.02)
    assert m["slo_meet_rate"] == 0.5 and m["latency_ms_p99"] > 400
    assert m["buffer_actions"] == 4 and m["buffer_s"] == pytest.approx(0.4)
    assert m["wrench_dropped"] == 1 and m["wrench_dropped_per_min"] == 1
    assert m["refused_per_min"] == 2 and m["fallbacks_per_min"] == 1 and m["underruns_per_min"] == 3
    # graded with the default thresholds: a refusal, a fallback, underruns and a drop are WARN,
    # a 50 % SLO meet rate ERROR
    task = MetricsTask("client", lambda: m, MonitoringConfig().thresholds)
    st = task.run(DiagnosticStatusWrapper())
    assert st.level == ERROR and "slo_meet_rate 0.5 < error 0.9" in st.message
    # a minute later nothing new happened: the per-minute counts are back to 0
    m2 = v.metrics({"state": "running", "refused": 2, "fallbacks": {"hold": 1}}, 80.0)
    assert m2["refused_per_min"] == 0 and m2["fallbacks_per_min"] == 0 and m2["wrench_hz"] == 0.0


# ---- ServerView ----------------------------------------------------------------------------

def test_server_view_latency_slo_and_refusal_rate_only_for_tracked_robots():
    v = ServerView(window_s=30.0, slo_ms=lambda rid: {"r0": 200.0}.get(rid))
    assert v.track("r0") and not v.track("r0")  # new once: the server adds one diagnostics task
    v.on_chunk("r0", 0, capture_stamp=100.0, now=100.1)   # 100 ms: met
    v.on_chunk("r0", 0, capture_stamp=100.0, now=100.3)   # 300 ms: missed
    v.on_chunk("r0", 2, capture_stamp=100.0, now=100.3)   # a refusal is no served round
    v.on_chunk("ghost", 0, capture_stamp=100.0, now=100.3)  # never tracked: ignored, no memory
    m = v.robot_metrics("r0", {"rounds": 2, "refused_total": 5, "errors": 0}, now=101.0)
    assert m["slo_meet_rate"] == 0.5 and m["latency_ms_p50"] == pytest.approx(200.0)
    assert m["refused_per_min"] == 5 and m["rounds"] == 2 and m["slo_ms"] == 200.0
    assert v.robots() == ["r0"]
    assert v.robot_metrics("r0", {"refused_total": 5}, now=200.0)["refused_per_min"] == 0
    assert v.robot_metrics("r0", {}, now=200.0)["latency_ms_p99"] is None  # window passed


# ---- the fleet file's monitoring block ---------------------------------------------------------

def test_load_monitoring_reads_only_the_block(tmp_path):
    f = tmp_path / "fleet.yaml"
    f.write_text(yaml.safe_dump({"anything": 1, "monitoring": {
        "rate_tolerance": 0.3, "buffer_dry_error_s": 5, "thresholds": {"camera_hz": {"warn_below": 25}}}}))
    m = load_monitoring(f)
    assert m.rate_tolerance == 0.3 and m.buffer_dry_error_s == 5.0
    assert m.thresholds.evaluate({"camera_hz": 20.0})[0] == WARN
    assert m.thresholds.evaluate({"wrench_hz": 5.0})[0] == ERROR  # default kept
    (tmp_path / "none.yaml").write_text("server: {}\n")
    assert load_monitoring(tmp_path / "none.yaml").rate_tolerance == 0.1
    with pytest.raises(ValueError, match="cannot read"):
        load_monitoring(tmp_path / "missing.yaml")
    with pytest.raises(ValueError, match="rate_tolerance"):
        MonitoringConfig.from_dict({"rate_tolerance": 1.5})


def test_the_embedded_fleet_file_has_a_monitoring_block_and_a_bad_one_fails_the_fleet():
    from physai_ros.config.fleet import FleetConfigError, default_fleet_path, parse_fleet

    doc = yaml.safe_load(default_fleet_path().read_text())
    assert "monitoring" in doc
    parse_fleet(doc)
    m = load_monitoring(None)
    assert m.thresholds.rules["latency_ms_p99"].error == doc["monitoring"]["thresholds"]["latency_ms_p99"]["error"]
    doc["monitoring"]["thresholds"]["latency_ms_p99"] = {"warn": 10, "error": 5}
    with pytest.raises(FleetConfigError, match=r"^monitoring: .*latency_ms_p99"):
        parse_fleet(doc)


def test_echo_formats_statuses_worst_first():
    from physai_ros.monitoring.status_text import format_statuses

    text = format_statuses({"policy_server: robot_0": (0, "12 rounds", [("rounds", "12")]),
                            "robot_0/robot_client: client": (2, "camera_hz 0 < error 2", []),
                            "policy_server: fleet": (1, "queue_depth 9 > warn 8", [])}, values=True)
    assert text.splitlines() == ["ERROR robot_0/robot_client: client: camera_hz 0 < error 2",
                                 "WARN  policy_server: fleet: queue_depth 9 > warn 8",
                                 "OK    policy_server: robot_0: 12 rounds", "        rounds = 12"]
