"""LIBERO-like task traces for the scheduling benchmark, shaped like Kairos's evaluation (§5.1).

Why this exists: the synthetic workload of traces.py (pi0_edge.yaml) draws every task's length
from one narrow uniform range and its per-round horizon from a ratio CDF with no notion of
where in the task a round is. Kairos replays recorded traces of benchmark suites whose tasks
"vary widely in length and phase structure". This module generates tasks with that shape, as
the sequence of motion phases a LIBERO manipulation task goes through, so that the static
horizon (one H for the whole task, set by its hardest phase) and the dynamic horizon (a per-round
H that follows the phase) come from the same task, and so that some rounds and tasks are
execution-dominant and others generation-dominant.

Where the numbers come from (checked against public code with the code-search tools):
- Task length. openpi's LIBERO client (Physical-Intelligence/openpi, examples/libero/main.py)
  caps each suite at its longest training demo plus a margin, with the demo lengths in comments:
  spatial 193, object 254, goal 270, libero_10 505, libero_90 373 steps. VERIFIED. Typical
  lengths are shorter than the longest; a third-party dataset note gives ~214 steps on average
  for libero_10's 379 no-noop demos (NOT verified against the data; policy rollouts keep the
  pauses that no-noop demos drop, so they run longer). Each suite's length here is triangular on
  [lo, mode, hi] x longest demo, default (0.3, 0.4, 1.0), mean 0.57 x longest: spatial ~110
  steps (5.5 s), libero_10 ~286 (14 s), 58 to 505 steps over all suites: an ASSUMPTION shaped to
  the verified maxima.
- Control rate. LIBERO's environment base class (Lifelong-Robot-Learning/LIBERO,
  libero/libero/envs/bddl_base_domain.py) defaults to control_freq=20: 20 Hz. VERIFIED.
- Static horizon. openpi's LIBERO client replans every 5 actions (replan_steps=5, VERIFIED);
  openpi's pi05_libero config has action_horizon=10 (chunk 10) and pi0 the default 50 (VERIFIED
  for pi05_libero in src/openpi/training/config.py). Kairos gives each task the largest static
  H that keeps its best accuracy; the default per-task CDF is centred on openpi's 5 (ASSUMED).
- Asynchronous trigger. LeRobot's async client (huggingface/lerobot,
  src/lerobot/async_inference/configs.py) sends the next observation when the action queue
  falls below chunk_size_threshold = 0.5 by default (VERIFIED); Kairos is built on LeRobot.
  Here: the next request leaves when trigger_fraction of the round's horizon is left.
- Phase structure (ASSUMED, shaped like Kairos §2.2/Fig. 4): each pick-and-place sub-goal is
  approach (free motion), grasp (contact), transport (free), place (contact); libero_10 tasks
  have two sub-goals, libero_goal tasks one approach+manipulate pair of varying share. A contact
  phase tolerates the task's static H; a free phase tolerates a multiple of it (1.5-3x, clipped
  to the chunk), so about half the rounds of a dynamic-horizon run use >= 2x the static H, as
  in Fig. 4. Consecutive rounds keep their horizon within a phase (Fig. 10).
Engine profiles, network links and arrival rates are not here: they live in the workload file
(bench/workloads/libero_a6000.yaml) next to where they come from.
"""
from __future__ import annotations

import math
import random
from dataclasses import dataclass, field
from typing import Any, Optional, Sequence

from physai_ros.scheduler import LatencyProfile
from physai_ros.sim.traces import PiecewiseCdf, RoundTrace, TaskTrace

# Longest training demo per suite, in 20 Hz steps (openpi examples/libero/main.py comments).
LONGEST_DEMO = {"libero_spatial": 193, "libero_object": 254, "libero_goal": 270,
                "libero_10": 505, "libero_90": 373}


@dataclass(frozen=True)
class PhaseSpec:
    """One motion phase of a sub-goal: its mean share of the sub-goal's steps and the range of
    per-round horizon multiples (of the task's static H) it tolerates."""

    name: str
    share: float
    ratio: tuple[float, float] = (1.0, 1.0)


PICK_PLACE = (PhaseSpec("approach", 0.35, (1.5, 3.0)), PhaseSpec("grasp", 0.20),
              PhaseSpec("transport", 0.30, (1.5, 3.0)), PhaseSpec("place", 0.15))
MANIPULATE = (PhaseSpec("approach", 0.55, (1.5, 3.0)), PhaseSpec("manipulate", 0.45))


@dataclass(frozen=True)
class SuiteSpec:
    name: str
    longest_demo: int                       # steps
    length_frac: tuple[float, float, float] = (0.3, 0.4, 1.0)   # triangular lo, mode, hi
    subgoals: int = 1
    phases: tuple[PhaseSpec, ...] = PICK_PLACE
    weight: float = 1.0                     # share of tasks drawn from this suite
    task_horizon_cdf: Optional[PiecewiseCdf] = None   # overrides the workload's
    trigger_fraction: Optional[float] = None          # overrides the workload's


def default_suites() -> dict[str, SuiteSpec]:
    return {
        "libero_spatial": SuiteSpec("libero_spatial", LONGEST_DEMO["libero_spatial"]),
        "libero_object": SuiteSpec("libero_object", LONGEST_DEMO["libero_object"]),
        "libero_goal": SuiteSpec("libero_goal", LONGEST_DEMO["libero_goal"], phases=MANIPULATE),
        "libero_10": SuiteSpec("libero_10", LONGEST_DEMO["libero_10"], subgoals=2),
    }


@dataclass
class LiberoWorkload:
    """Everything that shapes the tasks (not the engines): see the module docstring."""

    control_period_s: float = 0.05          # LIBERO: 20 Hz
    chunk_size: int = 10                    # pi0.5 on LIBERO (openpi pi05_libero)
    h_min: int = 3                          # smallest horizon the dynamic policy may pick
    task_horizon_cdf: PiecewiseCdf = field(default_factory=lambda: PiecewiseCdf(
        [[3, 0.0], [4, 0.15], [5, 0.6], [8, 0.9], [10, 1.0]]))
    trigger_fraction: float = 0.5           # LeRobot chunk_size_threshold default; 0 = synchronous
    suites: dict[str, SuiteSpec] = field(default_factory=default_suites)
    share_jitter: float = 0.3               # phase shares vary +-30% (renormalised)
    horizon_noise: float = 0.15             # log-normal sigma on the dynamic per-round H
    noise_persistence: float = 0.7          # P(a round keeps the previous round's noise)

    def __post_init__(self) -> None:
        if not (self.control_period_s > 0 and 1 <= self.h_min <= self.chunk_size):
            raise ValueError("need control_period_s > 0 and 1 <= h_min <= chunk_size")
        if not (0 <= self.trigger_fraction < 1) or not (0 <= self.noise_persistence <= 1):
            raise ValueError("trigger_fraction must be in [0, 1), noise_persistence in [0, 1]")
        if not self.suites or any(s.weight < 0 for s in self.suites.values()) \
                or sum(s.weight for s in self.suites.values()) <= 0:
            raise ValueError("need at least one suite with a positive weight")
        for s in self.suites.values():
            lo, mode, hi = s.length_frac
            if not (0 < lo <= mode <= hi) or s.longest_demo < 1 or s.subgoals < 1 or not s.phases:
                raise ValueError(f"suite {s.name!r}: bad length_frac, longest_demo, subgoals or phases")
            if s.trigger_fraction is not None and not (0 <= s.trigger_fraction < 1):
                raise ValueError(f"suite {s.name!r}: trigger_fraction must be in [0, 1)")

    @classmethod
    def from_dict(cls, d: dict[str, Any]) -> "LiberoWorkload":
        """From the `workload:` block of a workload file (bench/workloads/libero_a6000.yaml)."""
        kw: dict[str, Any] = {k: d[k] for k in ("control_period_s", "chunk_size", "h_min",
                                                 "trigger_fraction", "share_jitter", "horizon_noise",
                                                 "noise_persistence") if k in d}
        if "task_horizon_cdf" in d:
            kw["task_horizon_cdf"] = PiecewiseCdf(d["task_horizon_cdf"])
        if "suites" in d:
            kw["suites"] = {name: _suite_from_dict(name, s or {}) for name, s in d["suites"].items()}
        return cls(**kw)


def _suite_from_dict(name: str, s: dict[str, Any]) -> SuiteSpec:
    presets = {"pick_place": PICK_PLACE, "manipulate": MANIPULATE}
    phases = s.get("phases", "pick_place")
    if isinstance(phases, str):
        if phases not in presets:
            raise ValueError(f"suite {name!r}: unknown phase preset {phases!r}")
        phases = presets[phases]
    else:
        phases = tuple(PhaseSpec(p["name"], float(p["share"]), tuple(p.get("ratio", (1.0, 1.0))))
                       for p in phases)
    cdf = s.get("task_horizon_cdf")
    return SuiteSpec(
        name, int(s.get("longest_demo", LONGEST_DEMO.get(name, 0))),
        tuple(float(x) for x in s.get("length_frac", (0.3, 0.4, 1.0))), int(s.get("subgoals", 1)),
        phases, float(s.get("weight", 1.0)), None if cdf is None else PiecewiseCdf(cdf),
        None if s.get("trigger_fraction") is None else float(s["trigger_fraction"]))


@dataclass(frozen=True)
class LiberoTask:
    """A task independent of the horizon policy (static and dynamic runs replay the same one):
    its phases as (name, steps, tolerated horizon multiple), its static H and a seed."""

    task_id: str
    suite: str
    phases: tuple[tuple[str, int, float], ...]
    task_horizon: int
    trigger_fraction: float
    seed: int

    @property
    def total_actions(self) -> int:
        return sum(steps for _, steps, _ in self.phases)


def sample_tasks(wl: LiberoWorkload, n: int, rng: random.Random, prefix: str = "task") -> list[LiberoTask]:
    """n tasks: suite by weight, length triangular per suite, phases with jittered shares."""
    names = list(wl.suites)
    weights = [wl.suites[k].weight for k in names]
    out = []
    for i in range(n):
        suite = wl.suites[rng.choices(names, weights)[0]]
        lo, mode, hi = suite.length_frac
        total = max(1, int(round(rng.triangular(lo, hi, mode) * suite.longest_demo)))
        cdf = suite.task_horizon_cdf or wl.task_horizon_cdf
        h = max(wl.h_min, min(wl.chunk_size, int(round(cdf.sample(rng)))))
        phases: list[tuple[str, int, float]] = []
        per_goal = _split(total, suite.subgoals, [1.0] * suite.subgoals)
        for goal_steps in per_goal:
            shares = [p.share * (1 + wl.share_jitter * (2 * rng.random() - 1)) for p in suite.phases]
            for p, steps in zip(suite.phases, _split(goal_steps, len(shares), shares)):
                if steps > 0:
                    phases.append((p.name, steps, rng.uniform(*p.ratio)))
        trig = wl.trigger_fraction if suite.trigger_fraction is None else suite.trigger_fraction
        out.append(LiberoTask(f"{prefix}{i}", suite.name, tuple(phases), h, trig, rng.randrange(2**31)))
    return out


def _split(total: int, k: int, weights: Sequence[float]) -> list[int]:
    """total split into k integer parts proportional to weights (largest remainder)."""
    s = sum(weights)
    raw = [total * w / s for w in weights]
    parts = [int(math.floor(x)) for x in raw]
    for j in sorted(range(k), key=lambda j: raw[j] - parts[j], reverse=True)[: total - sum(parts)]:
        parts[j] += 1
    return parts


def build_libero_trace(wl: LiberoWorkload, task: LiberoTask, dynamic: bool) -> TaskTrace:
    """Rounds of one task. Static: the task's H every round. Dynamic: the H of the phase the
    round starts in (task H x the phase's tolerated multiple x a persistent log-normal noise),
    clipped to [h_min, chunk]. The last round executes what is left; the next request leaves
    when trigger_fraction of the round's horizon is left (0 for the last round)."""
    rng = random.Random(task.seed)
    bounds, acc = [], 0
    for name, steps, ratio in task.phases:
        acc += steps
        bounds.append((acc, ratio))
    rounds: list[RoundTrace] = []
    pos, total, noise, k = 0, task.total_actions, 1.0, 0
    while pos < total:
        if dynamic:
            while bounds[k][0] <= pos:
                k += 1
            if not rounds or rng.random() >= wl.noise_persistence:
                noise = math.exp(rng.gauss(0.0, wl.horizon_noise))
            h = int(round(task.task_horizon * bounds[k][1] * noise))
            h = max(wl.h_min, min(wl.chunk_size, h))
        else:
            h = task.task_horizon
        h = min(h, total - pos)
        pos += h
        trig = 0 if pos == total else min(h - 1, int(round(task.trigger_fraction * h)))
        rounds.append(RoundTrace(h, max(0, trig)))
    return TaskTrace(task.task_id, rounds, wl.control_period_s)


def build_traces(wl: LiberoWorkload, tasks: Sequence[LiberoTask], dynamic: bool) -> list[TaskTrace]:
    return [build_libero_trace(wl, t, dynamic) for t in tasks]


# ---- load: capacity and the highest stable arrival rate -------------------------------------
def capacity_rps(profile: LatencyProfile, tolerance: float = 0.05, max_batch: Optional[int] = None) -> float:
    """Requests per second one instance serves at the batch size the scheduler caps it at (the
    profile's saturation point, as placement.py uses it)."""
    b = profile.saturation_batch(tolerance)
    if max_batch is not None:
        b = min(b, max_batch)
    return b / profile.latency(b)


def mean_rounds(traces: Sequence[TaskTrace]) -> float:
    return sum(len(t.rounds) for t in traces) / len(traces)


def saturation_rate(traces: Sequence[TaskTrace], profile: LatencyProfile, n_instances: int = 1) -> float:
    """Task arrival rate (per second) at which the requests of these tasks would keep the edge
    instances busy at their saturation batch: an upper bound of the highest stable rate (real
    batches are often smaller than the cap, so the stable rate is found lower, by the bench)."""
    return n_instances * capacity_rps(profile) / mean_rounds(traces)


def describe(tasks: Sequence[LiberoTask], traces: Sequence[TaskTrace],
             generation_s: Sequence[float] = ()) -> dict[str, Any]:
    """Shape of a generated task set: per suite count, length and rounds; share of rounds whose
    execution is shorter than each given generation time (generation-dominant at that latency)."""
    by_suite: dict[str, list[int]] = {}
    for task, tr in zip(tasks, traces):
        by_suite.setdefault(task.suite, []).append(len(tr.rounds))
    out: dict[str, Any] = {"tasks": len(tasks), "suites": {}}
    for name in by_suite:
        lens = sorted(t.total_actions for t in tasks if t.suite == name)
        out["suites"][name] = {"tasks": len(lens), "steps_min": lens[0], "steps_mean": round(sum(lens) / len(lens), 1),
                               "steps_max": lens[-1], "rounds_mean": round(sum(by_suite[name]) / len(lens), 1)}
    execs = [r.horizon * tr.control_period for tr in traces for r in tr.rounds]
    out["rounds_total"] = len(execs)
    out["exec_s_mean"] = round(sum(execs) / len(execs), 4)
    out["isolated_s"] = {"min": round(min(t.isolated_exec_s for t in traces), 2),
                         "max": round(max(t.isolated_exec_s for t in traces), 2)}
    out["generation_dominant_share"] = {f"{g:g}s": round(sum(e <= g for e in execs) / len(execs), 3)
                                        for g in generation_s}
    return out
