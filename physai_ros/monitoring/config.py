"""The `monitoring:` block of fleet.yaml (all keys optional):

    monitoring:
      diagnostics_period_s: 1.0      # /diagnostics publishing period (rqt_robot_monitor)
      metrics_period_s: 0.1          # newest value of each metric topic at most this often
      window_s: 30.0                 # sliding window of the p50/p99 and rate estimates
      rate_tolerance: 0.1            # FrequencyStatus: WARN outside [min*(1-tol), max*(1+tol)]
      buffer_dry_error_s: 2.0        # trajectory_controller: ERROR once dry this long
      thresholds:                    # merged over DEFAULT_THRESHOLDS, per metric
        latency_ms_p99: {warn: 400, error: 800}
        slo_meet_rate: {warn_below: 0.99, error_below: 0.9}

Every node reads the block of the fleet file it is given (`load_monitoring`); the policy server
and the robot clients grade their per-robot metrics with `thresholds`, the trajectory controller
and sim_robot use the periods, `rate_tolerance` and `buffer_dry_error_s`.
"""
from __future__ import annotations

import math
from dataclasses import dataclass, field
from pathlib import Path
from typing import Mapping

from physai_ros.monitoring.thresholds import Thresholds

# Defaults for the default fleet (slo_ms 500): p99 latency near the SLO warns, past it errors.
DEFAULT_THRESHOLDS = {
    "latency_ms_p99": {"warn": 400.0, "error": 500.0},
    "slo_meet_rate": {"warn_below": 0.99, "error_below": 0.9},
    "wait_ratio": {"warn": 0.3, "error": 0.6},
    "queue_depth": {"warn": 8.0, "error": 32.0},
    # robot_client: input streams (floors for the whole fleet; the sim sends 30 Hz / 480 Hz),
    # refusals and fallbacks per minute, the trajectory buffer's underruns per minute.
    "camera_hz": {"warn_below": 10.0, "error_below": 2.0},
    "wrench_hz": {"warn_below": 100.0, "error_below": 10.0},
    "joint_states_hz": {"warn_below": 10.0, "error_below": 2.0},
    "refused_per_min": {"warn": 0.0, "error": 30.0},
    "errors_per_min": {"warn": 0.0, "error": 10.0},
    "fallbacks_per_min": {"warn": 0.0, "error": 10.0},
    "underruns_per_min": {"warn": 0.0, "error": 30.0},
    "wrench_dropped_per_min": {"warn": 0.0, "error": 600.0},
    # The client's round ledger: a round never answered, or answered twice, is a serving bug.
    "rounds_lost": {"warn": 0.0, "error": 0.0},
    "rounds_duplicated": {"warn": 0.0, "error": 0.0},
}
_PERIODS = ("diagnostics_period_s", "metrics_period_s", "window_s", "buffer_dry_error_s")
_KEYS = (*_PERIODS, "rate_tolerance", "thresholds")


@dataclass(frozen=True)
class MonitoringConfig:
    diagnostics_period_s: float = 1.0
    metrics_period_s: float = 0.1
    window_s: float = 30.0
    buffer_dry_error_s: float = 2.0
    rate_tolerance: float = 0.1
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
        for key in _PERIODS:
            if key in doc:
                v = doc[key]
                if isinstance(v, bool) or not isinstance(v, (int, float)) or not (math.isfinite(v) and v > 0):
                    raise ValueError(f"monitoring.{key} must be a positive number of seconds, got {v!r}")
                periods[key] = float(v)
        if "rate_tolerance" in doc:
            v = doc["rate_tolerance"]
            if isinstance(v, bool) or not isinstance(v, (int, float)) or not 0 <= v < 1:
                raise ValueError(f"monitoring.rate_tolerance must be a number in [0, 1), got {v!r}")
            periods["rate_tolerance"] = float(v)
        user = doc.get("thresholds") or {}
        if not isinstance(user, Mapping):
            raise ValueError("monitoring.thresholds must be a mapping of metric -> limits")
        return cls(**periods, thresholds=Thresholds.from_config({**DEFAULT_THRESHOLDS, **user}))


def load_monitoring(fleet_file: str | Path | None = None) -> MonitoringConfig:
    """The `monitoring:` block of a fleet file (the embedded config/fleet.yaml when None or "").

    Reads only that block, so robot-side nodes that need nothing else from the fleet file (the
    trajectory controller, sim_robot) do not depend on the rest of its schema."""
    import yaml

    if not fleet_file:
        from physai_ros.install_paths import default_fleet_file

        fleet_file = default_fleet_file()
    try:
        doc = yaml.safe_load(Path(fleet_file).read_text())
    except (OSError, yaml.YAMLError) as e:
        raise ValueError(f"monitoring: cannot read {str(fleet_file)!r}: {e}") from e
    return MonitoringConfig.from_dict(doc.get("monitoring") if isinstance(doc, Mapping) else None)
