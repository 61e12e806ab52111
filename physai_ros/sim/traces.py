"""Task traces for the trace-driven fleet simulator (Kairos §5.1) and their file format.

A trace is what one task looked like when it ran alone: a sequence of rounds, each with the
number of actions the robot executed from that round's chunk (the execution horizon) and the
number of those actions still queued when the robot sent the next request (the recorded
trigger index of asynchronous inference; 0 means synchronous). Replaying it under contention
keeps both, so a task's execution is the same and only queueing differs.

File format (JSON, one object, versioned):
    {"format": "physai-trace/1",
     "meta": {...free-form: source, workload, seed...},
     "tasks": [{"task_id": "t0", "robot_id": "robot_0", "control_period": 0.0333,
                "arrival_s": 0.0,            # optional: when the task started (online replay)
                "rounds": [[horizon, trigger_remaining], ...],
                "timing": {"generation_s": [...], "queue_s": [...], "latency_s": [...],
                           "exec_s": [...], "chunk_horizon": [...]}}, ...]}
                                             # optional, one value (or null) per round
`physai-fleet --record-trace PATH` records such a file from our simulated robots
(physai_ros/sim/trace_capture.py, through TraceRecorder). The timing block is what the recorded
run measured (server inference, server queueing, capture -> chunk received, horizon x dt, and
the horizon the chunk asked for); the simulator does not replay it (it models generation from
the engine profile) but keeps it.

Synthetic traces come from a workload description (bench/workloads/*.yaml): total actions per
task, the best per-task horizon (distribution shaped like Kairos Fig. 3), and for the dynamic
horizon the per-round multiplier of it (shaped like Fig. 4), with persistence between rounds
(Fig. 10: most consecutive rounds execute for about as long as the previous one).
"""
from __future__ import annotations

import bisect
import json
import math
import random
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Optional, Sequence

FORMAT = "physai-trace/1"


TIMING_FIELDS = ("generation_s", "queue_s", "latency_s", "exec_s", "chunk_horizon")


@dataclass(frozen=True)
class RoundTrace:
    horizon: int              # actions executed from this round's chunk (>= 1)
    trigger_remaining: int    # actions of this chunk still queued when the next request is sent
    # Measured when the trace was recorded (None for synthetic traces): engine time (Kairos G),
    # server queueing, capture -> chunk at the robot, execution duration (horizon x dt), and the
    # horizon the chunk asked for (the robot may execute fewer: see trace_capture.py).
    generation_s: Optional[float] = None
    queue_s: Optional[float] = None
    latency_s: Optional[float] = None
    exec_s: Optional[float] = None
    chunk_horizon: Optional[int] = None

    def __post_init__(self) -> None:
        if self.horizon < 1 or not (0 <= self.trigger_remaining <= self.horizon):
            raise ValueError(f"bad round: horizon={self.horizon}, trigger_remaining={self.trigger_remaining}")
        for name in TIMING_FIELDS:
            v = getattr(self, name)
            if v is not None and not (math.isfinite(v) and v >= 0):
                raise ValueError(f"bad round: {name}={v!r} (must be finite and >= 0)")

    @property
    def has_timing(self) -> bool:
        return any(getattr(self, n) is not None for n in TIMING_FIELDS)


@dataclass
class TaskTrace:
    task_id: str
    rounds: list[RoundTrace]
    control_period: float = 1.0 / 30.0
    robot_id: str = ""
    arrival_s: Optional[float] = None

    def __post_init__(self) -> None:
        if not self.rounds:
            raise ValueError(f"task {self.task_id!r} has no rounds")
        if not (self.control_period > 0 and math.isfinite(self.control_period)):
            raise ValueError(f"task {self.task_id!r}: control_period must be > 0")

    @property
    def total_actions(self) -> int:
        return sum(r.horizon for r in self.rounds)

    @property
    def isolated_exec_s(self) -> float:
        return self.total_actions * self.control_period


@dataclass
class TraceSet:
    tasks: list[TaskTrace]
    meta: dict[str, Any] = field(default_factory=dict)


# ---- file I/O -------------------------------------------------------------------------------
def _task_doc(t: TaskTrace) -> dict[str, Any]:
    d: dict[str, Any] = {"task_id": t.task_id, "robot_id": t.robot_id, "control_period": t.control_period}
    if t.arrival_s is not None:
        d["arrival_s"] = t.arrival_s
    d["rounds"] = [[r.horizon, r.trigger_remaining] for r in t.rounds]
    if any(r.has_timing for r in t.rounds):
        d["timing"] = {n: [getattr(r, n) for r in t.rounds] for n in TIMING_FIELDS}
    return d


def save_traces(path: str | Path, traces: TraceSet) -> None:
    doc = {"format": FORMAT, "meta": traces.meta, "tasks": [_task_doc(t) for t in traces.tasks]}
    Path(path).write_text(json.dumps(doc, indent=1) + "\n")


def _rounds(t: dict[str, Any]) -> list[RoundTrace]:
    pairs = t["rounds"]
    timing = t.get("timing") or {}
    cols = {}
    for name in TIMING_FIELDS:
        col = timing.get(name)
        if col is None:
            continue
        if not isinstance(col, list) or len(col) != len(pairs):
            raise ValueError(f"timing.{name} must be a list with one value per round")
        conv = int if name == "chunk_horizon" else float
        cols[name] = [None if v is None else conv(v) for v in col]
    return [RoundTrace(int(h), int(r), **{n: c[i] for n, c in cols.items()})
            for i, (h, r) in enumerate(pairs)]


def load_traces(path: str | Path) -> TraceSet:
    """Read a trace file; raises ValueError naming the file and the offending task."""
    try:
        doc = json.loads(Path(path).read_text())
    except (OSError, json.JSONDecodeError) as exc:
        raise ValueError(f"{path}: cannot read trace file: {exc}") from None
    if not isinstance(doc, dict) or doc.get("format") != FORMAT:
        raise ValueError(f"{path}: not a {FORMAT} file (format={doc.get('format') if isinstance(doc, dict) else None!r})")
    tasks = []
    for i, t in enumerate(doc.get("tasks", [])):
        try:
            tasks.append(TaskTrace(
                task_id=str(t["task_id"]),
                rounds=_rounds(t),
                control_period=float(t.get("control_period", 1.0 / 30.0)),
                robot_id=str(t.get("robot_id", "")),
                arrival_s=None if t.get("arrival_s") is None else float(t["arrival_s"])))
        except (KeyError, TypeError, ValueError) as exc:
            raise ValueError(f"{path}: task #{i}: {exc}") from None
    if not tasks:
        raise ValueError(f"{path}: no tasks")
    return TraceSet(tasks, dict(doc.get("meta", {})))


class TraceRecorder:
    """Records tasks as they run (robot client side): one call per executed chunk."""

    def __init__(self, meta: Optional[dict[str, Any]] = None) -> None:
        self.meta = dict(meta or {})
        self._open: dict[str, dict[str, Any]] = {}
        self.done: list[TaskTrace] = []

    def begin_task(self, task_id: str, robot_id: str, control_period: float, t: float) -> None:
        self._open[task_id] = {"robot_id": robot_id, "control_period": control_period,
                               "arrival_s": t, "rounds": []}

    def record_round(self, task_id: str, horizon: int, trigger_remaining: int, **timing: Optional[float]) -> None:
        """horizon: actions executed from the chunk; trigger_remaining: actions of it still
        queued when the next request was sent (0 if the task ended or ran synchronously);
        timing: any of generation_s, queue_s, latency_s, exec_s, chunk_horizon as measured."""
        self._open[task_id]["rounds"].append(
            RoundTrace(int(horizon), int(min(trigger_remaining, horizon)), **timing))

    def end_task(self, task_id: str) -> None:
        d = self._open.pop(task_id)
        if d["rounds"]:
            self.done.append(TaskTrace(task_id, d["rounds"], d["control_period"], d["robot_id"],
                                       d["arrival_s"]))

    def trace_set(self) -> TraceSet:
        return TraceSet(list(self.done), self.meta)


# ---- synthetic workloads --------------------------------------------------------------------
class PiecewiseCdf:
    """Inverse-transform sampling from a piecewise-linear CDF given as [[x, F(x)], ...].

    A step (two points with the same x) is a point mass, e.g. [[1,0],[1,0.2]] puts 20% at 1."""

    def __init__(self, points: Sequence[Sequence[float]]) -> None:
        pts = [(float(x), float(f)) for x, f in points]
        if len(pts) < 2 or pts[0][1] != 0.0 or pts[-1][1] != 1.0:
            raise ValueError(f"CDF points must start at F=0 and end at F=1: {points}")
        if any(b[0] < a[0] or b[1] < a[1] for a, b in zip(pts, pts[1:])):
            raise ValueError(f"CDF points must be non-decreasing in x and F: {points}")
        self.xs = [x for x, _ in pts]
        self.fs = [f for _, f in pts]

    def sample(self, rng: random.Random) -> float:
        u = rng.random()
        i = bisect.bisect_right(self.fs, u)
        if i >= len(self.fs):
            return self.xs[-1]
        f0, f1, x0, x1 = self.fs[i - 1], self.fs[i], self.xs[i - 1], self.xs[i]
        return x0 if f1 == f0 else x0 + (x1 - x0) * (u - f0) / (f1 - f0)


@dataclass
class WorkloadSpec:
    """One workload's task statistics (documented in bench/workloads/README.md)."""

    name: str
    control_period_s: float
    chunk_size: int
    total_actions: tuple[int, int]            # uniform range of actions per task
    task_horizon_cdf: PiecewiseCdf            # best static horizon per task (Fig. 3 shape)
    round_ratio_cdf: PiecewiseCdf             # per-round / per-task horizon ratio (Fig. 4 shape)
    h_min: int
    trigger_fraction: float                   # request when this fraction of the chunk remains
    ratio_persistence: float                  # P(round keeps the previous round's ratio)

    @classmethod
    def from_dict(cls, d: dict[str, Any]) -> "WorkloadSpec":
        try:
            spec = cls(
                name=str(d["name"]), control_period_s=float(d["control_period_s"]),
                chunk_size=int(d["chunk_size"]),
                total_actions=(int(d["total_actions"][0]), int(d["total_actions"][1])),
                task_horizon_cdf=PiecewiseCdf(d["task_horizon_cdf"]),
                round_ratio_cdf=PiecewiseCdf(d["round_ratio_cdf"]), h_min=int(d["h_min"]),
                trigger_fraction=float(d["trigger_fraction"]),
                ratio_persistence=float(d.get("ratio_persistence", 0.0)))
        except (KeyError, TypeError, IndexError) as exc:
            raise ValueError(f"workload {d.get('name', '?')!r}: missing or bad field: {exc}") from None
        if not (0 < spec.h_min <= spec.chunk_size) or not (0 <= spec.trigger_fraction < 1) \
                or not (0 < spec.total_actions[0] <= spec.total_actions[1]) \
                or not (0 <= spec.ratio_persistence <= 1) or spec.control_period_s <= 0:
            raise ValueError(f"workload {spec.name!r}: parameter out of range")
        return spec


@dataclass(frozen=True)
class TaskSpec:
    """A task independent of the horizon policy, so static and dynamic runs replay the same
    tasks: how many actions it needs, its best static horizon, and a seed for its rounds."""

    task_id: str
    total_actions: int
    task_horizon: int
    seed: int


def sample_task_specs(spec: WorkloadSpec, n: int, rng: random.Random, prefix: str = "task") -> list[TaskSpec]:
    out = []
    for i in range(n):
        total = rng.randint(*spec.total_actions)
        h = int(round(spec.task_horizon_cdf.sample(rng)))
        h = max(spec.h_min, min(spec.chunk_size, h))
        out.append(TaskSpec(f"{prefix}{i}", total, h, rng.randrange(2**31)))
    return out


def build_trace(spec: WorkloadSpec, task: TaskSpec, dynamic: bool) -> TaskTrace:
    """Rounds of one task: static repeats the task horizon; dynamic multiplies it per round by a
    ratio drawn from the Fig. 4-shaped distribution, kept from round to round with probability
    ratio_persistence, clipped to [h_min, chunk_size]. The last round executes what is left."""
    rng = random.Random(task.seed)
    rounds: list[RoundTrace] = []
    left = task.total_actions
    ratio = spec.round_ratio_cdf.sample(rng)
    while left > 0:
        if dynamic:
            if rounds and rng.random() >= spec.ratio_persistence:
                ratio = spec.round_ratio_cdf.sample(rng)
            h = max(spec.h_min, min(spec.chunk_size, int(round(task.task_horizon * ratio))))
        else:
            h = task.task_horizon
        h = min(h, left)
        left -= h
        trig = 0 if left == 0 else min(h - 1, int(round(spec.trigger_fraction * h)))
        rounds.append(RoundTrace(h, max(0, trig)))
    return TaskTrace(task.task_id, rounds, spec.control_period_s)
