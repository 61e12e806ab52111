"""Levels from numbers, for /diagnostics: `Thresholds` (warn / error limits per metric, from a
fleet.yaml-style mapping) and `MetricsTask` (a diagnostic task that reports a mapping of numbers
and grades them). Written to work with either diagnostic_updater implementation's status wrapper
(monitoring.diagnostics or ROS's): they only ever call `summary(level, message)` and
`add(key, value)` and pass levels as one byte, which both accept.
"""
from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Callable, Mapping

from physai_ros.monitoring.diagnostics import ERROR, OK, WARN, DiagnosticTask, format_number, level_byte


@dataclass(frozen=True)
class ThresholdRule:
    """Levels for one metric. `warn`/`error`: the metric is bad when ABOVE them (latency, misses);
    `warn_below`/`error_below`: bad when BELOW them (SLO meet rate, achieved rate)."""
    key: str
    warn: float | None = None
    error: float | None = None
    warn_below: float | None = None
    error_below: float | None = None

    def level(self, value: float | None) -> tuple[int, str]:
        if value is None:
            return OK, ""  # no data yet is not a fault; the value shows as "n/a"
        if not math.isfinite(value):
            return ERROR, f"{self.key} is {value}"
        for limit, lvl, word in ((self.error, ERROR, "error"), (self.warn, WARN, "warn")):
            if limit is not None and value > limit:
                return lvl, f"{self.key} {format_number(float(value))} > {word} {format_number(float(limit))}"
        for limit, lvl, word in ((self.error_below, ERROR, "error"), (self.warn_below, WARN, "warn")):
            if limit is not None and value < limit:
                return lvl, f"{self.key} {format_number(float(value))} < {word} {format_number(float(limit))}"
        return OK, ""


_RULE_KEYS = ("warn", "error", "warn_below", "error_below")


class Thresholds:
    """Metric name -> ThresholdRule, from a mapping such as fleet.yaml's
    `{"latency_ms_p99": {"warn": 150, "error": 300}, "slo_meet_rate": {"warn_below": 0.99}}`."""

    def __init__(self, rules: Mapping[str, ThresholdRule] | None = None):
        self.rules: dict[str, ThresholdRule] = dict(rules or {})

    @classmethod
    def from_config(cls, mapping: Mapping | None) -> "Thresholds":
        if mapping is None:
            return cls()
        if not isinstance(mapping, Mapping):
            raise ValueError(f"thresholds must be a mapping of metric -> limits, got {type(mapping).__name__}")
        rules = {}
        for key, limits in mapping.items():
            if not isinstance(key, str) or not key:
                raise ValueError(f"threshold metric names must be non-empty strings, got {key!r}")
            if not isinstance(limits, Mapping):
                raise ValueError(f"thresholds[{key!r}] must be a mapping with keys {_RULE_KEYS}")
            unknown = set(limits) - set(_RULE_KEYS)
            if unknown:
                raise ValueError(f"thresholds[{key!r}]: unknown keys {sorted(unknown)}; allowed {_RULE_KEYS}")
            vals = {}
            for k, v in limits.items():
                if isinstance(v, bool) or not isinstance(v, (int, float)) or not math.isfinite(v):
                    raise ValueError(f"thresholds[{key!r}][{k!r}] must be a finite number, got {v!r}")
                vals[k] = float(v)
            if not vals:
                raise ValueError(f"thresholds[{key!r}] sets no limit")
            if "warn" in vals and "error" in vals and vals["warn"] > vals["error"]:
                raise ValueError(f"thresholds[{key!r}]: warn {vals['warn']} above error {vals['error']}")
            if "warn_below" in vals and "error_below" in vals and vals["warn_below"] < vals["error_below"]:
                raise ValueError(f"thresholds[{key!r}]: warn_below {vals['warn_below']} "
                                 f"under error_below {vals['error_below']}")
            rules[key] = ThresholdRule(key, **vals)
        return cls(rules)

    def evaluate(self, values: Mapping[str, float | None]) -> tuple[int, list[str]]:
        """Worst level over the metrics that have a rule, and the message of every breach."""
        worst, problems = OK, []
        for key, value in values.items():
            rule = self.rules.get(key)
            lvl, msg = rule.level(value) if rule else (
                (ERROR, f"{key} is {value}") if value is not None and not math.isfinite(value) else (OK, ""))
            if lvl > OK:
                problems.append(msg)
            worst = max(worst, lvl)
        return worst, problems


def _flatten(values: Mapping, prefix: str = "") -> dict:
    out = {}
    for key, value in values.items():
        key = f"{prefix}{key}"
        if isinstance(value, Mapping):
            out.update(_flatten(value, f"{key}."))  # {"refused": {"nan": 2}} -> refused.nan
        else:
            out[key] = value
    return out


class MetricsTask(DiagnosticTask):
    """Reports `source()` as key/values and grades it with `thresholds`.

    `source` returns a mapping: numbers are graded (a rule's key must hold a number or None),
    None shows as "n/a" (no data yet, not a fault), strings and bools are shown as they are,
    nested mappings are flattened ("refused.stale_round"). The level is the worst breach; the
    message lists the breaches, or is `ok_message` (a string, or a callable giving one, e.g.
    "executing"/"idle") when there are none. A source that raises, a graded key holding a
    non-number, or a value of another type gives ERROR; so does `fault()` returning a message (a
    state the numbers cannot show, e.g. a robot stopped by its SLO escalation), which leads it.
    """

    def __init__(self, name: str, source: Callable[[], Mapping],
                 thresholds: Thresholds | None = None, ok_message: str | Callable[[], str] = "OK",
                 fault: Callable[[], str | None] | None = None):
        super().__init__(name)
        self.source = source
        self.thresholds = thresholds or Thresholds()
        self.ok_message = ok_message
        self.fault = fault

    def run(self, stat):
        values = _flatten(self.source())
        numeric: dict[str, float | None] = {}
        bad = []
        for key, value in values.items():
            if value is None or (isinstance(value, (int, float)) and not isinstance(value, bool)):
                numeric[key] = None if value is None else float(value)
            elif key in self.thresholds.rules or not isinstance(value, (str, bool)):
                bad.append(key)
        level, problems = self.thresholds.evaluate(numeric)
        if bad:
            level = ERROR
            problems.append(f"not numeric: {', '.join(sorted(bad))}")
        fault = self.fault() if self.fault is not None else None
        if fault:
            level = ERROR
            problems.insert(0, fault)
        ok = self.ok_message() if callable(self.ok_message) else self.ok_message
        stat.summary(level_byte(level), "; ".join(problems) if problems else ok)
        for key, value in values.items():
            if value is None:
                stat.add(key, "n/a")
            elif isinstance(value, bool):
                stat.add(key, "true" if value else "false")
            elif isinstance(value, (int, float, str)):
                stat.add(key, format_number(value))
            else:
                stat.add(key, repr(value))
        return stat
