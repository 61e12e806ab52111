"""The `monitoring:` block of fleet.yaml (all keys optional):

    monitoring:
      diagnostics_period_s: 1.0      # /diagnostics publishing period (rqt_robot_monitor)
      metrics_period_s: 0.1          # newest value of each metric topic at most this often
      window_s: 30.0                 # sliding window of the p50/p99 and rate estimates
      thresholds:                    # merged over DEFAULT_THRESHOLDS, per metric
        latency_ms_p99: {warn: 400, error: 800}
        slo_meet_rate: {warn_below: 0.99, error_below: 0.9}
"""
from __future__ import annotations

import math
from dataclasses import dataclass, field
from typing import Mapping

from physai_ros.monitoring.diagnostics import Thresholds

# Defaults for the default fleet (slo_ms 500): p99 latency near the SLO warns, past it errors.
DEFAULT_THRESHOLDS = {
    "latency_ms_p99": {"warn": 400.0, "error": 500.0},
    "slo_meet_rate": {"warn_below": 0.99, "error_below": 0.9},
    "wait_ratio": {"warn": 0.3, "error": 0.6},
    "queue_depth": {"warn": 8.0, "error": 32.0},
}
_KEYS = ("diagnostics_period_s", "metrics_period_s", "window_s", "thresholds")


@dataclass(frozen=True)
class MonitoringConfig:
    diagnostics_period_s: float = 1.0
    metrics_period_s: float = 0.1
    window_s: float = 30.0
    thresholds: Thresholds = field(default_factory=lambda: Thresholds.from_config(DEFAULT_THRESHOLDS))

    @classmethod
    def from_dict(cls, doc: Mapping | None) -> "MonitoringConfig":
        if doc is None:
            return cls()
        if not isinstance(doc, Mapping):
            raise ValueError(f"monitoring must be a mapping, got {type(doc).__name__}")
        unknown = set(doc) - set(_KEYS)
        if unknown:
            raise ValueError(f"monitoring: unknown keys {sorted(unknown)}; allowed {_KEYS}")
        periods = {}
        for key in _KEYS[:3]:
            if key in doc:
                v = doc[key]
                if isinstance(v, bool) or not isinstance(v, (int, float)) or not (math.isfinite(v) and v > 0):
                    raise ValueError(f"monitoring.{key} must be a positive number of seconds, got {v!r}")
                periods[key] = float(v)
        user = doc.get("thresholds") or {}
        if not isinstance(user, Mapping):
            raise ValueError("monitoring.thresholds must be a mapping of metric -> limits")
        return cls(**periods, thresholds=Thresholds.from_config({**DEFAULT_THRESHOLDS, **user}))
