"""Plain data of ROSA §3.4's steady-state factory scheduling: the problem (task classes, their
components and SLOs, the server pool), the measured serving profiles L(b, lambda), and the
schedule (placement, routing, batching, request rates) the solver returns.

Everything here is frozen and JSON-friendly (`to_dict`), so a schedule can be printed by
`physai-fleet plan`, written to a file, sent to robots at registration and replayed by the trace
simulator (bench/factory.py) without the solver.
"""
from __future__ import annotations

import bisect
import math
from dataclasses import asdict, dataclass, field, replace
from typing import Mapping

from physai_ros.protocol.component import COMPONENTS  # noqa: F401 (the package exports it)

# ROSA §3.4.1: goal-coupled models set the robot's action rate; obligation models run at fixed
# rates and only have to meet their SLOs (serving them faster buys nothing).
GOAL_COUPLED = ("system1", "system2")
OBLIGATION = ("safety", "monitor")
# System 1 is batched statically (a batch size per server); the autoregressive VLMs use
# continuous batching, which the paper models as batch size 1 with the rate as the only knob.
STATIC, CONTINUOUS = "static", "continuous"


@dataclass(frozen=True)
class ComponentSpec:
    """One component of a task class (fleet.yaml `components.<name>`)."""

    component: str  # one of COMPONENTS
    model: str  # the profile key: which model serves it (profiles are per model and hardware)
    slo_s: float  # latency deadline D_{r,m} at slo_quantile
    freq_hz: float | None = None  # obligation models: fixed invocation rate per robot
    slo_quantile: float = 0.99


@dataclass(frozen=True)
class TaskClass:
    """Robots that run the same task (ROSA §3.4.3's class c with K_c robots)."""

    name: str
    robot_ids: tuple[str, ...]
    components: tuple[ComponentSpec, ...]
    action_period_s: float  # t_act: physical execution of one System 1 prediction
    system2_ratio: int = 1  # H: System 1 calls per System 2 call
    value_weight: float = 1.0  # v_c in eq. (1)
    min_throughput: float = 0.0  # F_c^min in eq. (1): actions/s for the whole class

    @property
    def num_robots(self) -> int:
        return len(self.robot_ids)

    def component(self, name: str) -> ComponentSpec | None:
        return next((c for c in self.components if c.component == name), None)

    def f_max(self) -> float:
        """Upper bound of the class's action rate: zero inference latency in eq. (4)."""
        return 1.0 / self.action_period_s


@dataclass(frozen=True)
class ServerPool:
    num_servers: int  # serving servers (GPUs / engine instances), standbys not included
    hardware: str  # profile key, e.g. "H100", "cpu-2core"
    standby: int = 0  # hot standbys kept loaded and off the routes (§3.4.4)
    memory_gb: float = math.inf  # per server: a configuration must fit


@dataclass(frozen=True)
class FactoryProblem:
    classes: tuple[TaskClass, ...]
    servers: ServerPool

    @property
    def homogeneous(self) -> bool:
        return len(self.classes) == 1

    def robot_ids(self) -> set[str]:
        return {r for c in self.classes for r in c.robot_ids}

    def with_robot(self, task: str, robot_id: str) -> "FactoryProblem":
        """One more robot in class `task` (unchanged when it is listed already)."""
        return replace(self, classes=tuple(replace(c, robot_ids=c.robot_ids + (robot_id,))
                                           if c.name == task and robot_id not in c.robot_ids else c
                                           for c in self.classes))

    def without_robot(self, robot_id: str) -> "FactoryProblem":
        return replace(self, classes=tuple(replace(c, robot_ids=tuple(r for r in c.robot_ids if r != robot_id))
                                           for c in self.classes))


@dataclass(frozen=True)
class ProfilePoint:
    """Latency of one server at batch size `batch` under aggregate request rate `rate_hz`."""

    batch: int
    rate_hz: float
    mean_s: float
    p99_s: float
    p50_s: float | None = None


@dataclass(frozen=True)
class ModelProfile:
    """L_{m,h}(b, lambda) for one model on one hardware type (ROSA §3.4.2 Step 1).

    Points at each batch size are measured at several rates (the paper: ten, from 10 % to 100 % of
    that batch size's maximum throughput). Between measured rates latency is interpolated
    linearly; above the highest measured rate the server is taken as saturated (infinite
    latency), never extrapolated. `source` says where the numbers come from: "measured" (on this
    project's engines), "roofline" (bench/physai_bench/roofline.py's bound plus a stated overhead) or "paper".
    """

    model: str
    hardware: str
    batching: str  # STATIC | CONTINUOUS
    points: tuple[ProfilePoint, ...]
    weights_gb: float = 0.0
    source: str = "measured"
    note: str = ""

    def batch_sizes(self) -> list[int]:
        return sorted({p.batch for p in self.points})

    def _curve(self, batch: int) -> list[ProfilePoint]:
        return sorted((p for p in self.points if p.batch == batch), key=lambda p: p.rate_hz)

    def max_rate(self, batch: int) -> float:
        curve = self._curve(batch)
        return curve[-1].rate_hz if curve else 0.0

    def latency(self, batch: int, rate_hz: float, quantile: str = "p99") -> float:
        """Interpolated latency (seconds) at this batch size and rate; inf past the curve."""
        curve = self._curve(batch)
        if not curve or rate_hz > curve[-1].rate_hz * (1 + 1e-9):
            return math.inf
        attr = {"p99": "p99_s", "mean": "mean_s", "p50": "p50_s"}[quantile]
        values = [getattr(p, attr) if getattr(p, attr) is not None else p.mean_s for p in curve]
        rates = [p.rate_hz for p in curve]
        if rate_hz <= rates[0]:
            return values[0]
        k = bisect.bisect_left(rates, rate_hz)
        r0, r1, v0, v1 = rates[k - 1], rates[k], values[k - 1], values[k]
        return v0 + (v1 - v0) * (rate_hz - r0) / (r1 - r0) if r1 > r0 else v1

    def to_dict(self) -> dict:
        return asdict(self)

    @classmethod
    def from_dict(cls, d: Mapping) -> "ModelProfile":
        points = tuple(ProfilePoint(**p) for p in d["points"])
        return cls(**{**d, "points": points})


@dataclass(frozen=True)
class ServerAssignment:
    """What one server does: the model component it hosts, its batch configuration, whom it
    serves and the load and latency the profile predicts for that."""

    server: int
    component: str
    model: str
    batch: int
    robot_ids: tuple[str, ...]
    load_hz: float
    predicted_mean_s: float
    predicted_p99_s: float
    standby_for: int | None = None  # a hot standby: the server whose streams it takes over


@dataclass(frozen=True)
class Route:
    robot_id: str
    component: str
    server: int
    rate_hz: float  # this robot's request rate for this component


@dataclass(frozen=True)
class FactorySchedule:
    feasible: bool
    reason: str  # why not, when not feasible; a short summary otherwise
    assignments: tuple[ServerAssignment, ...] = ()
    routes: tuple[Route, ...] = ()
    action_rate_hz: Mapping[str, float] = field(default_factory=dict)  # per task class: f_c
    factory_throughput: float = 0.0  # sum_c K_c f_c (actions/s)
    weighted_objective: float = 0.0  # sum_c v_c K_c f_c, eq. (1)
    predicted_slo_attainment: Mapping[str, float] = field(default_factory=dict)  # per component
    solver_time_s: float = 0.0

    def route(self, robot_id: str, component: str) -> Route | None:
        return next((r for r in self.routes if r.robot_id == robot_id and r.component == component), None)

    def to_dict(self) -> dict:
        return asdict(self)
