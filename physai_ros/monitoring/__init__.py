"""Monitoring: /diagnostics statuses, numeric metric topics for rqt_plot, run reports.

Importing this package does not import rclpy; the Updater that publishes the statuses is ROS glue
(physai_ros.ros.diagnostics_updater), and `metrics.MetricsPublisher` imports std_msgs when
constructed.
"""
from physai_ros.monitoring.diagnostics import (ERROR, OK, STALE, WARN, DiagnosticStatusWrapper, DiagnosticTask, DiagnosticTaskVector, FrequencyStatus, FrequencyStatusParam, FunctionDiagnosticTask)
from physai_ros.monitoring.thresholds import MetricsTask, ThresholdRule, Thresholds
from physai_ros.monitoring.metrics import MetricBoard, metric_topic
from physai_ros.monitoring.window import RateEstimator, SeriesRecorder, SlidingWindow

__all__ = ["ERROR", "OK", "STALE", "WARN", "DiagnosticStatusWrapper", "DiagnosticTask", "DiagnosticTaskVector",
           "FrequencyStatus", "FrequencyStatusParam", "FunctionDiagnosticTask", "MetricsTask", "ThresholdRule",
           "Thresholds", "MetricBoard", "metric_topic", "RateEstimator", "SeriesRecorder", "SlidingWindow"]
