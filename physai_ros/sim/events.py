"""Things that happen to a sim cell besides the robot's own actions: a human arm that
enters the workcell (a safety event) and injected failures (a cube dropped during transport, a
cube knocked off the table), each with its ground truth.

Everything here is off by default (EventConfig()), and a world without events never builds an
EventEngine, so default cells keep their byte-identical trajectories and renders. When on, the
randomness comes from a child generator spawned from the world's (Generator.spawn does not draw
from the parent's stream), so a cell with events has exactly the placements, sensor noise and
motion of the same cell without them until the first event acts.
"""
from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Optional, Protocol

import numpy as np

# The workcell is the table's footprint (render.py draws the same rectangle).
TABLE_X = (-0.2, 0.8)
TABLE_Y = (-0.55, 0.55)
FLOOR_Z = -0.30  # a cube knocked off the table lands here, out of the arm's reach

# Progress labels (what a perfect task-progress monitor answers) and the failure reasons.
ONGOING, DONE, FAILED = "ongoing", "done", "failed"
PROGRESS_LABELS = (ONGOING, DONE, FAILED)
DROPPED, KNOCKED, WRONG_ORDER, TIMEOUT = "dropped", "knocked", "wrong_order", "timeout"


class EventWorld(Protocol):
    """What the events read and change in a cell (sim.world.SimWorld is one): named here so that
    the world imports its events and not the other way round."""

    held: Optional[int]
    objects: list
    arm: object
    time: float

    @property
    def episode_time(self) -> float: ...

    def near_goal(self, pos: np.ndarray) -> bool: ...

    def release(self, slipped: bool = False) -> None: ...

    def mark_failure(self, reason: str) -> None: ...

    def focus_index(self) -> int: ...


@dataclass(frozen=True)

class EventConfig:
    intruder_rate_per_min: float = 0.0  # mean arrivals per minute of sim time (Poisson); 0: never
    intruder_duration_s: float = 3.0  # mean time in the workcell (each visit 0.75-1.25 x this)
    drop_prob: float = 0.0  # per episode: the held cube slips out during transport
    knock_prob: float = 0.0  # per episode: the cube to pick is knocked off the table before the grasp

    def __post_init__(self) -> None:
        if not (math.isfinite(self.intruder_rate_per_min) and self.intruder_rate_per_min >= 0):
            raise ValueError(f"intruder_rate_per_min must be >= 0, got {self.intruder_rate_per_min}")
        if not (math.isfinite(self.intruder_duration_s) and self.intruder_duration_s > 0):
            raise ValueError(f"intruder_duration_s must be positive, got {self.intruder_duration_s}")
        for name in ("drop_prob", "knock_prob"):
            v = getattr(self, name)
            if not (0.0 <= v <= 1.0):
                raise ValueError(f"{name} must be within 0..1, got {v}")

    @property
    def enabled(self) -> bool:
        return self.intruder_rate_per_min > 0 or self.drop_prob > 0 or self.knock_prob > 0


def on_table(xy: np.ndarray) -> bool:
    return bool(TABLE_X[0] <= xy[0] <= TABLE_X[1] and TABLE_Y[0] <= xy[1] <= TABLE_Y[1])


# -- intruder ------------------------------------------------------------------------------------
@dataclass(frozen=True)
class IntruderPose:
    """A forearm (capsule from elbow to wrist) and a hand (sphere) at one instant, world frame."""
    elbow: np.ndarray
    wrist: np.ndarray
    hand: np.ndarray
    arm_radius: float = 0.03
    hand_radius: float = 0.045


@dataclass(frozen=True)
class _Visit:
    start: float
    end: float
    side: float  # +1: enters over the robot's left table edge (+y), -1: the right one
    x: float  # where along the edge
    reach: float  # how far past the edge the hand gets, m
    height: float  # hand height above the table

IN_OUT_S = 0.3  # the arm sweeps in (and out) over this long


class IntruderSchedule:
    """Poisson arrivals in sim time (not per episode: a person walks up whenever), one visit at a
    time. The arm sweeps in from outside a side edge of the table, holds, sweeps out."""

    def __init__(self, cfg: EventConfig, rng: np.random.Generator):
        self.cfg, self.rng = cfg, rng
        self.visit: Optional[_Visit] = None
        self.visits = 0
        self._next = self._arrival(0.0)

    def _arrival(self, after: float) -> float:
        if self.cfg.intruder_rate_per_min <= 0:
            return math.inf
        return after + float(self.rng.exponential(60.0 / self.cfg.intruder_rate_per_min))

    def update(self, t: float) -> None:
        if self.visit is not None and t >= self.visit.end:
            self._next = self._arrival(self.visit.end)
            self.visit = None
        if self.visit is None and t >= self._next:
            r = self.rng
            dur = self.cfg.intruder_duration_s * float(r.uniform(0.75, 1.25))
            self.visit = _Visit(start=self._next, end=self._next + dur, side=1.0 if r.random() < 0.5 else -1.0,
                                x=float(r.uniform(0.2, 0.5)), reach=float(r.uniform(0.25, 0.45)),
                                height=float(r.uniform(0.12, 0.25)))
            self.visits += 1

    def pose(self, t: float) -> Optional[IntruderPose]:
        v = self.visit
        if v is None or not v.start <= t < v.end:
            return None
        # 0 -> 1 over IN_OUT_S after arriving, back to 0 over the last IN_OUT_S.
        span = max(v.end - v.start, 1e-6)
        frac = min(1.0, (t - v.start) / IN_OUT_S, (v.end - t) / IN_OUT_S) if span > 2 * IN_OUT_S else 1.0
        edge = TABLE_Y[1] if v.side > 0 else TABLE_Y[0]
        outside = edge + v.side * 0.30  # the hand starts and ends this far outside the edge
        hand_y = outside + (edge - v.side * v.reach - outside) * frac
        hand = np.array([v.x, hand_y, v.height])
        wrist = hand + np.array([0.0, v.side * 0.07, 0.01])
        elbow = np.array([v.x + 0.05, hand_y + v.side * 0.32, v.height + 0.12])
        return IntruderPose(elbow=elbow, wrist=wrist, hand=hand)


def intruder_present(pose: Optional[IntruderPose]) -> bool:
    """Ground truth for the safety checker: the hand is inside the workcell (over the table)."""
    return pose is not None and on_table(pose.hand[:2])


# -- injected failures ----------------------------------------------------------------------------
@dataclass(frozen=True)
class _EpisodePlan:
    drop: bool
    drop_after_s: float  # of transport (held, lifted, away from the pad)
    knock: bool
    knock_at_s: float  # episode time; skipped when the cube is held or placed by then


KNOCK_SPEED = 1.2  # m/s: the cube slides off the table in a few frames, visibly
TRANSPORT_Z = 0.07  # the tool above this (the expert lifts to 0.12) counts as transport


class FailureInjector:
    """Per episode, draws whether a drop and a knock happen and when (always the same number of
    draws, so the event stream does not depend on what the robot did)."""

    def __init__(self, cfg: EventConfig, rng: np.random.Generator):
        self.cfg, self.rng = cfg, rng
        self.plan = _EpisodePlan(False, 0.0, False, 0.0)
        self.transport_s = 0.0
        self.knock_target: Optional[np.ndarray] = None  # xy the knocked cube slides to
        self.knocked_index: Optional[int] = None
        self.drops = self.knocks = 0

    def new_episode(self) -> None:
        r = self.rng
        u_drop, drop_after, u_knock, knock_at = r.random(), r.uniform(0.1, 0.5), r.random(), r.uniform(0.3, 1.5)
        self.plan = _EpisodePlan(drop=bool(u_drop < self.cfg.drop_prob), drop_after_s=float(drop_after),
                                 knock=bool(u_knock < self.cfg.knock_prob), knock_at_s=float(knock_at))
        self.transport_s = 0.0
        self.knock_target = None
        self.knocked_index = None

    def step(self, w: EventWorld, dt: float) -> None:
        p = self.plan
        if p.drop and w.held is not None and not w.near_goal(w.objects[w.held]) and w.arm.tool()[2] > TRANSPORT_Z:
            self.transport_s += dt
            if self.transport_s >= p.drop_after_s:
                w.release(slipped=True)
                w.mark_failure(DROPPED)
                self.plan = _EpisodePlan(False, p.drop_after_s, p.knock, p.knock_at_s)
                self.drops += 1
        if p.knock and self.knock_target is None and w.episode_time >= p.knock_at_s:
            i = w.focus_index()
            if w.held is None and not w.near_goal(w.objects[i]):
                self.knocked_index = i
                self.knock_target = _off_table_target(w.objects[i][:2])
                w.mark_failure(KNOCKED)
                self.knocks += 1
            self.plan = _EpisodePlan(p.drop, p.drop_after_s, False, p.knock_at_s)
        if self.knock_target is not None and self.knocked_index is not None:
            pos = w.objects[self.knocked_index]
            d = self.knock_target - pos[:2]
            dist = float(np.linalg.norm(d))
            if dist > 1e-9:
                pos[:2] += d * min(1.0, KNOCK_SPEED * dt / dist)  # in place: falls once off the table
            else:
                self.knock_target = None

    @property
    def knocking(self) -> Optional[int]:
        """The cube being knocked away (the hand's push model leaves it alone meanwhile)."""
        return self.knocked_index if self.knock_target is not None else None


def _off_table_target(xy: np.ndarray) -> np.ndarray:
    """Radially away from the robot's base to 6 cm past the table's edge."""
    u = xy / max(float(np.linalg.norm(xy)), 1e-9)
    ts = []
    for k, (lo, hi) in enumerate((TABLE_X, TABLE_Y)):
        if u[k] > 1e-9:
            ts.append((hi - xy[k]) / u[k])
        elif u[k] < -1e-9:
            ts.append((lo - xy[k]) / u[k])
    return xy + u * (min(ts) + 0.06)


class EventEngine:
    """The world's one handle on its events."""

    def __init__(self, cfg: EventConfig, rng: np.random.Generator):
        self.cfg = cfg
        self.intruder = IntruderSchedule(cfg, rng.spawn(1)[0])
        self.failures = FailureInjector(cfg, rng.spawn(1)[0])
        self.pose: Optional[IntruderPose] = None

    def new_episode(self) -> None:
        self.failures.new_episode()

    def step(self, w: EventWorld, dt: float) -> None:
        """After the world's time has advanced by dt."""
        self.failures.step(w, dt)
        self.intruder.update(w.time)
        self.pose = self.intruder.pose(w.time)
