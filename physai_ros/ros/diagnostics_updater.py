"""The one import switch: ROS's diagnostic_updater when it is installed, ours otherwise.

    from physai_ros.ros.diagnostics_updater import Updater, FrequencyStatus, FrequencyStatusParam

Both offer Updater(node, period), setHardwareID, add(task) / add(name, fn), and status wrappers
with summary/mergeSummary/add, so node code does not care which one it got. `MetricsTask` and
`Thresholds` from physai_ros.monitoring.diagnostics work with either. Importing this module
imports rclpy, so it is ROS glue (here) while the tasks it runs stay in monitoring/.
"""
from __future__ import annotations

try:
    from diagnostic_updater import (  # type: ignore[import-not-found]
        DiagnosticStatusWrapper,
        DiagnosticTask,
        FrequencyStatus,
        FrequencyStatusParam,
        FunctionDiagnosticTask,
        Updater,
    )

    BACKEND = "diagnostic_updater"
except ImportError:
    from physai_ros.monitoring.diagnostics import (
        DiagnosticStatusWrapper,
        DiagnosticTask,
        FrequencyStatus,
        FrequencyStatusParam,
        FunctionDiagnosticTask,
    )
    from physai_ros.ros.diagnostics_publisher import Updater

    BACKEND = "physai_ros"

__all__ = ["BACKEND", "DiagnosticStatusWrapper", "DiagnosticTask", "FrequencyStatus", "FrequencyStatusParam",
           "FunctionDiagnosticTask", "Updater"]
