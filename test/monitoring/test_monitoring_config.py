import pytest
import yaml

from physai_ros.monitoring.config import DEFAULT_THRESHOLDS, MonitoringConfig
from physai_ros.monitoring.diagnostics import ERROR, OK, WARN


def test_defaults_and_yaml_overrides():
    assert MonitoringConfig.from_dict(None).thresholds.rules.keys() == DEFAULT_THRESHOLDS.keys()
    doc = yaml.safe_load("""
monitoring:
  diagnostics_period_s: 2
  thresholds:
    latency_ms_p99: {warn: 150, error: 300}
    underruns: {warn: 1}
""")
    cfg = MonitoringConfig.from_dict(doc["monitoring"])
    assert cfg.diagnostics_period_s == 2.0 and cfg.metrics_period_s == 0.1
    th = cfg.thresholds
    assert th.evaluate({"latency_ms_p99": 200.0})[0] == WARN  # user value replaced the default
    assert th.evaluate({"underruns": 3})[0] == WARN
    assert th.evaluate({"slo_meet_rate": 0.5})[0] == ERROR  # defaults kept for the rest
    assert th.evaluate({"queue_depth": 0})[0] == OK


@pytest.mark.parametrize("doc,fragment", [
    ([], "must be a mapping"),
    ({"period": 1}, "unknown keys ['period']"),
    ({"metrics_period_s": 0}, "positive number"),
    ({"window_s": "long"}, "positive number"),
    ({"thresholds": [1]}, "mapping of metric"),
    ({"thresholds": {"latency_ms_p99": {"warn": 900, "error": 100}}}, "above error"),
])
def test_bad_monitoring_config(doc, fragment):
    with pytest.raises(ValueError) as exc:
        MonitoringConfig.from_dict(doc)
    assert fragment in str(exc.value)


def test_pure_modules_do_not_import_rclpy():
    import subprocess
    import sys

    code = ("import sys; import physai_ros.monitoring, physai_ros.monitoring.report, physai_ros.monitoring.config, "
            "physai_ros.monitoring.metrics; print('rclpy' in sys.modules, 'diagnostic_msgs' in sys.modules)")
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=120)
    assert out.returncode == 0, out.stderr
    assert out.stdout.split() == ["False", "False"]
