"""A physai-fleet run summary (the `--summary-json` document) read into plain data: per robot,
its rounds, latency, refusals and rates; the series over time (wait ratio, queue depth, stream
rates). Malformed input raises ValueError naming the offending field. The run report
(monitoring.report) draws it."""
from __future__ import annotations

import json
import math
from dataclasses import dataclass, field
from pathlib import Path


SERIES_KINDS = ("wait_ratio", "queue_depth", "stream_rates_hz")


@dataclass
class Series:
    t: list[float]
    v: list[float]


@dataclass
class RobotRun:
    robot_id: str
    rounds: int | None = None
    chunks_executed: int | None = None
    latency_ms_p50: float | None = None
    latency_ms_p99: float | None = None
    slo_misses: int | None = None
    refused_inputs: int | None = None
    tasks_completed: int | None = None
    slo_ms: float | None = None
    latency_samples_ms: list[float] = field(default_factory=list)
    rates_hz: dict[str, float] = field(default_factory=dict)
    pipeline: str = ""  # one line of the task pipeline's counters ("" without one)


@dataclass
class RunSummary:
    robots: list[RobotRun]
    duration_s: float | None = None
    series: dict[str, dict[str, Series]] = field(default_factory=dict)
    # Seconds between the start and server-up; the series' t = 0 is server-up when it is set.
    warmup_s: float | None = None


def _num(x, where: str, integer: bool = False):
    if x is None:
        return None
    if isinstance(x, bool) or not isinstance(x, (int, float)) or not math.isfinite(x):
        raise ValueError(f"{where} must be a finite number, got {x!r}")
    if integer:
        if x != int(x):
            raise ValueError(f"{where} must be an integer, got {x!r}")
        return int(x)
    return float(x)


def _num_list(xs, where: str) -> list[float]:
    if not isinstance(xs, list):
        raise ValueError(f"{where} must be a list of numbers, got {type(xs).__name__}")
    return [_num(x, f"{where}[{i}]") for i, x in enumerate(xs)]


def _series(doc, where: str) -> Series:
    if not isinstance(doc, dict) or "t" not in doc or "v" not in doc:
        raise ValueError(f"{where} must be an object with lists 't' and 'v'")
    t, v = _num_list(doc["t"], f"{where}.t"), _num_list(doc["v"], f"{where}.v")
    if len(t) != len(v):
        raise ValueError(f"{where}: 't' has {len(t)} points, 'v' has {len(v)}")
    return Series(t, v)


def parse_summary(doc) -> RunSummary:
    if not isinstance(doc, dict):
        raise ValueError(f"a run summary is a JSON object, got {type(doc).__name__}")
    robots_doc = doc.get("robots")
    if not isinstance(robots_doc, list):
        raise ValueError("summary.robots must be a list")
    robots = []
    for i, r in enumerate(robots_doc):
        where = f"robots[{i}]"
        if not isinstance(r, dict):
            raise ValueError(f"{where} must be an object")
        rid = r.get("id", r.get("robot_id"))
        if not isinstance(rid, str) or not rid:
            raise ValueError(f"{where} needs a non-empty string 'id'")
        refused = r.get("refused_inputs")
        if isinstance(refused, dict):
            refused = sum(_num(c, f"{where}.refused_inputs[{k!r}]", True) for k, c in refused.items())
        rates = r.get("rates_hz") or {}
        if not isinstance(rates, dict):
            raise ValueError(f"{where}.rates_hz must be an object of stream -> Hz")
        robots.append(RobotRun(
            robot_id=rid,
            rounds=_num(r.get("rounds"), f"{where}.rounds", True),
            chunks_executed=_num(r.get("chunks_executed"), f"{where}.chunks_executed", True),
            latency_ms_p50=_num(r.get("latency_ms_p50"), f"{where}.latency_ms_p50"),
            latency_ms_p99=_num(r.get("latency_ms_p99"), f"{where}.latency_ms_p99"),
            slo_misses=_num(r.get("slo_misses"), f"{where}.slo_misses", True),
            refused_inputs=_num(refused, f"{where}.refused_inputs", True),
            tasks_completed=_num(r.get("tasks_completed"), f"{where}.tasks_completed", True),
            slo_ms=_num(r.get("slo_ms"), f"{where}.slo_ms"),
            latency_samples_ms=_num_list(r.get("latency_samples_ms", []), f"{where}.latency_samples_ms"),
            rates_hz={str(k): _num(v, f"{where}.rates_hz[{k!r}]") for k, v in rates.items()},
            pipeline=_pipeline_text(r.get("pipeline"), f"{where}.pipeline")))
    series_doc = doc.get("series") or {}
    if not isinstance(series_doc, dict):
        raise ValueError("summary.series must be an object")
    unknown = set(series_doc) - set(SERIES_KINDS)
    if unknown:
        raise ValueError(f"summary.series: unknown kinds {sorted(unknown)}; known {SERIES_KINDS}")
    series = {}
    for kind, per_label in series_doc.items():
        if not isinstance(per_label, dict):
            raise ValueError(f"series.{kind} must be an object of label -> {{t, v}}")
        series[kind] = {str(k): _series(s, f"series.{kind}[{k!r}]") for k, s in per_label.items()}
    warmup = _num(doc.get("warmup_s"), "warmup_s")
    if warmup is not None and warmup < 0:
        raise ValueError(f"warmup_s must be >= 0, got {warmup!r}")
    return RunSummary(robots, _num(doc.get("duration_s"), "duration_s"), series, warmup)


def _pipeline_text(p, where: str) -> str:
    """robots[].pipeline (monitoring.pipeline_report.pipeline_fields) as the table's text line."""
    if not p:
        return ""
    from physai_ros.monitoring.pipeline_report import dashboard_lines

    try:
        return "; ".join(dashboard_lines({"pipeline": p}))
    except (KeyError, TypeError, AttributeError) as exc:
        raise ValueError(f"{where}: not a pipeline block ({exc!r})") from None


def load_summary(path: str | Path) -> RunSummary:
    try:
        doc = json.loads(Path(path).read_text())
    except json.JSONDecodeError as exc:
        raise ValueError(f"{path}: not JSON: {exc}") from exc
    return parse_summary(doc)
