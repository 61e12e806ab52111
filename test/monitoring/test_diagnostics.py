"""The pure diagnostics core (no rclpy): status wrapper, task runner, frequency status,
thresholds. The published form is tested over DDS in test_ros_glue.py."""
import math

import pytest

from physai_ros.monitoring.diagnostics import (ERROR, OK, STALE, WARN, DiagnosticStatusWrapper, DiagnosticTaskVector, FrequencyStatus, FrequencyStatusParam, FunctionDiagnosticTask, as_level, level_byte)
from physai_ros.monitoring.thresholds import MetricsTask, Thresholds


class FakeClock:
    def __init__(self, t=0.0):
        self.t = t

    def __call__(self):
        return self.t


def test_levels_accept_int_and_message_bytes():
    assert [as_level(x) for x in (0, 1, 2, 3, b"\x00", b"\x02")] == [OK, WARN, ERROR, STALE, OK, ERROR]
    assert level_byte(WARN) == b"\x01"
    for bad in (4, -1, b"0", "OK", True, 1.0):
        with pytest.raises(ValueError):
            as_level(bad)


def test_merge_summary_follows_diagnostic_updater_rules():
    s = DiagnosticStatusWrapper()
    s.summary(OK, "fine")
    s.mergeSummary(OK, "also fine")
    assert (s.level, s.message) == (OK, "fine; also fine")
    s.mergeSummary(WARN, "slow")
    assert (s.level, s.message) == (WARN, "slow")  # a problem replaces OK chatter
    s.mergeSummary(OK, "nothing")
    assert (s.level, s.message) == (WARN, "slow")  # OK never hides a problem
    s.mergeSummary(b"\x02", "dead")
    assert (s.level, s.message) == (ERROR, "slow; dead")
    other = DiagnosticStatusWrapper(level=STALE, message="old")
    s.mergeSummary(other)
    assert s.level == STALE
    s.clearSummary()
    assert (s.level, s.message) == (OK, "")


def test_add_formats_values_as_strings():
    s = DiagnosticStatusWrapper()
    s.add("p99", 123.456789)
    s.add("count", 7)
    assert s.values == [("p99", "123.457"), ("count", "7")]


def test_task_vector_names_statuses_node_colon_task():
    v = DiagnosticTaskVector()
    v.add("engine", lambda st: (st.summary(OK, "running"), st)[1])
    v.add(FunctionDiagnosticTask("queue", lambda st: (st.summary(WARN, "deep"), st.add("depth", 9), st)[2]))
    v.add("silent", lambda st: st)  # forgets to set a summary
    out = v.run_tasks("policy_server", "gpu0")
    assert [s.name for s in out] == ["policy_server: engine", "policy_server: queue", "policy_server: silent"]
    assert [s.level for s in out] == [OK, WARN, ERROR]
    assert out[2].message == "No message was set"
    assert all(s.hardware_id == "gpu0" for s in out)
    assert out[1].values == [("depth", "9")]
    assert v.removeByName("queue") and not v.removeByName("queue")
    assert len(v.run_tasks("n", "h")) == 2


def test_a_task_that_raises_is_reported_and_does_not_stop_the_others():
    v = DiagnosticTaskVector()
    v.add("broken", lambda st: 1 / 0)
    v.add("wrong_return", lambda st: 42)
    v.add("fine", lambda st: (st.summary(OK, "ok"), st)[1])
    out = v.run_tasks("n", "h")
    assert [s.level for s in out] == [ERROR, ERROR, OK]
    assert "ZeroDivisionError" in out[0].message and out[0].name == "n: broken"
    assert "not a status" in out[1].message
    assert v.task_errors == {"broken": 1, "wrong_return": 1}
    with pytest.raises(ValueError):
        v.add("", lambda st: st)


def _values(stat):
    return dict(stat.values)


def test_frequency_status_levels_over_its_window():
    clock = FakeClock(0.0)
    fs = FrequencyStatus(FrequencyStatusParam({"min": 28.0, "max": 32.0}, tolerance=0.1, window_size=2),
                         name="camera", clock=clock)
    st = fs.run(DiagnosticStatusWrapper())
    assert (st.level, st.message) == (ERROR, "No events recorded.")
    for _ in range(30):  # 30 ticks per second for 2 s, updated every second
        fs.tick()
    clock.t = 1.0
    fs.run(DiagnosticStatusWrapper())
    for _ in range(30):
        fs.tick()
    clock.t = 2.0
    st = fs.run(DiagnosticStatusWrapper())
    assert (st.level, st.message) == (OK, "Desired frequency met")
    assert float(_values(st)["Actual frequency (Hz)"]) == pytest.approx(30.0)
    assert _values(st)["Events in window"] == "60"
    assert float(_values(st)["Minimum acceptable frequency (Hz)"]) == pytest.approx(25.2)
    for _ in range(10):  # slows to 10 Hz: the 2-update window sees (30+10)/2 s = 20 Hz
        fs.tick()
    clock.t = 3.0
    st = fs.run(DiagnosticStatusWrapper())
    assert (st.level, st.message) == (WARN, "Frequency too low.")
    assert float(_values(st)["Actual frequency (Hz)"]) == pytest.approx(20.0)
    for _ in range(100):
        fs.tick()
    clock.t = 4.0
    assert fs.achieved_hz() == pytest.approx(55.0)  # (170-60) ticks over 2 s; peeking does not advance
    st = fs.run(DiagnosticStatusWrapper())
    assert (st.level, st.message) == (WARN, "Frequency too high.")
    assert _values(st)["Events since startup"] == "170"
    clock.t = 6.0
    fs.run(DiagnosticStatusWrapper())
    clock.t = 7.0
    st = fs.run(DiagnosticStatusWrapper())
    assert (st.level, st.message) == (ERROR, "No events recorded.")  # the stream died


def test_frequency_band_without_max_and_with_target():
    clock = FakeClock()
    fs = FrequencyStatus(FrequencyStatusParam({"min": 480.0, "max": 480.0}, 0.05, 1), clock=clock)
    for _ in range(470):
        fs.tick()
    clock.t = 1.0
    st = fs.run(DiagnosticStatusWrapper())
    assert st.level == OK and float(_values(st)["Target frequency (Hz)"]) == 480.0
    lo_only = FrequencyStatus(FrequencyStatusParam({"min": 1.0}), clock=clock)
    for _ in range(10_000):
        lo_only.tick()
    clock.t = 2.0
    st = lo_only.run(DiagnosticStatusWrapper())
    assert st.level == OK and "Maximum acceptable frequency (Hz)" not in _values(st)
    for bad in ({"max": 3.0}, {"min": 5.0, "max": 1.0}, {"min": math.nan}):
        with pytest.raises(ValueError):
            FrequencyStatusParam(bad)
    with pytest.raises(ValueError):
        FrequencyStatusParam({"min": 1.0}, tolerance=1.5)


CONFIG = {"latency_ms_p99": {"warn": 150, "error": 300}, "slo_meet_rate": {"warn_below": 0.99, "error_below": 0.9}}


@pytest.mark.parametrize("values,level,fragment", [
    ({"latency_ms_p99": 120.0, "slo_meet_rate": 1.0}, OK, ""),
    ({"latency_ms_p99": 150.0}, OK, ""),  # at the limit is still fine
    ({"latency_ms_p99": 151.0}, WARN, "latency_ms_p99 151 > warn 150"),
    ({"latency_ms_p99": 301.0}, ERROR, "latency_ms_p99 301 > error 300"),
    ({"slo_meet_rate": 0.95}, WARN, "slo_meet_rate 0.95 < warn 0.99"),
    ({"slo_meet_rate": 0.5, "latency_ms_p99": 200.0}, ERROR, "slo_meet_rate 0.5 < error 0.9"),
    ({"latency_ms_p99": None}, OK, ""),
    ({"latency_ms_p99": math.nan}, ERROR, "latency_ms_p99 is nan"),
    ({"unruled": math.inf}, ERROR, "unruled is inf"),
    ({"unruled": 1e9}, OK, ""),
])
def test_threshold_levels(values, level, fragment):
    got, problems = Thresholds.from_config(CONFIG).evaluate(values)
    assert got == level
    assert fragment in "; ".join(problems)


@pytest.mark.parametrize("config,fragment", [
    ([1, 2], "mapping"),
    ({"x": 5}, "must be a mapping"),
    ({"x": {"warm": 1}}, "unknown keys ['warm']"),
    ({"x": {"warn": "high"}}, "finite number"),
    ({"x": {"warn": math.inf}}, "finite number"),
    ({"x": {}}, "sets no limit"),
    ({"x": {"warn": 300, "error": 150}}, "warn 300.0 above error 150.0"),
    ({"x": {"warn_below": 0.5, "error_below": 0.9}}, "under error_below"),
    ({"": {"warn": 1}}, "non-empty"),
])
def test_bad_threshold_config_is_a_clear_error(config, fragment):
    with pytest.raises(ValueError) as exc:
        Thresholds.from_config(config)
    assert fragment in str(exc.value)


def test_metrics_task_reports_values_and_grades_them():
    data = {"latency_ms_p50": 80.0, "latency_ms_p99": 320.5, "rounds": 12, "slo_meet_rate": None}
    task = MetricsTask("robot_0", lambda: data, Thresholds.from_config(CONFIG))
    v = DiagnosticTaskVector()
    v.add(task)
    (st,) = v.run_tasks("policy_server", "")
    assert st.name == "policy_server: robot_0"
    assert st.level == ERROR and st.message == "latency_ms_p99 320.5 > error 300"
    assert _values(st) == {"latency_ms_p50": "80", "latency_ms_p99": "320.5", "rounds": "12", "slo_meet_rate": "n/a"}
    data.update(latency_ms_p99=100.0, slo_meet_rate=1.0)
    (st,) = v.run_tasks("policy_server", "")
    assert (st.level, st.message) == (OK, "OK")
    data["latency_ms_p99"] = "fast"  # a graded key must hold a number
    (st,) = v.run_tasks("policy_server", "")
    assert st.level == ERROR and "not numeric: latency_ms_p99" in st.message and _values(st)["latency_ms_p99"] == "fast"
    data["latency_ms_p99"] = [1, 2]
    (st,) = v.run_tasks("policy_server", "")
    assert st.level == ERROR and _values(st)["latency_ms_p99"] == "[1, 2]"


def test_metrics_task_shows_strings_bools_and_nested_counts():
    status = {"state": "running", "registered": True, "refused": {"stale_round": 2, "bad_time": 0},
              "latency_ms_p99": 90.0}
    task = MetricsTask("client", lambda: status, Thresholds.from_config(CONFIG), ok_message=lambda: "executing")
    st = task.run(DiagnosticStatusWrapper())
    assert (st.level, st.message) == (OK, "executing")
    assert _values(st) == {"state": "running", "registered": "true", "refused.stale_round": "2",
                           "refused.bad_time": "0", "latency_ms_p99": "90"}


def test_metrics_task_fault_is_an_error_that_leads_the_message():
    """A state the numbers cannot show (a robot stopped by its SLO escalation) is an ERROR
    whatever the numbers say, and clears when the fault does."""
    fault = ["stopped (3 consecutive SLO misses); operator resume required (physai-fleet operator resume robot_0)"]
    task = MetricsTask("client", lambda: {"latency_ms_p99": 90.0}, Thresholds.from_config(CONFIG),
                       ok_message="running", fault=lambda: fault[0])
    st = task.run(DiagnosticStatusWrapper())
    assert (st.level, st.message) == (ERROR, fault[0])
    fault[0] = None
    st = task.run(DiagnosticStatusWrapper())
    assert (st.level, st.message) == (OK, "running")


def test_metrics_task_whose_source_raises_is_an_error_status():
    def source():
        raise KeyError("engine_0")

    v = DiagnosticTaskVector()
    v.add(MetricsTask("engine", source))
    (st,) = v.run_tasks("policy_server", "")
    assert st.level == ERROR and "KeyError" in st.message
