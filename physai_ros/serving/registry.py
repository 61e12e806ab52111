"""The robots a policy server serves: registration, sessions, admission, release, per-robot
counters and observation validation. Apart from the request path (serving.serving_core): this decides
who may send work; the scheduler's queue holds the work.

Not thread-safe by itself: ServingCore calls it under its lock. Methods that end a robot's task
history (a restart, a new task, a release) return `TaskEnded` records; the core then drops the
task's queued request from the scheduler and answers it, so nothing accepted goes unanswered.
"""
from __future__ import annotations

import dataclasses
from collections import Counter, deque
from dataclasses import dataclass, field
from typing import Any, Collection

import numpy as np

from physai_ros.protocol.observation import ObservationData
from physai_ros.protocol.registration import RegistrationResult, RobotRegistration
from physai_ros.serving.validation import UNKNOWN_ROBOT, ModelLimits, ObservationValidator, Refusal, check_registration

# Registration refusal when the server is full (ROSA 3.4.4 admission control).
CAPACITY = "capacity"


@dataclass(frozen=True)
class TaskEnded:
    """A robot's task history ended (its queued request, if any, must be answered)."""

    robot_id: str
    task_id: str
    why: str
    released: bool = False  # the robot itself was forgotten, not only its task
    # The registration the robot held when the task ended (None once it is released): the
    # answer to a dropped request names that registration's joints.
    registration: RobotRegistration | None = None


@dataclass
class UnregisteredStats:
    """Everything refused from robots that hold no registration, in one bounded record."""

    refused: Counter = field(default_factory=Counter)  # reason -> count (observations)
    registrations_refused: Counter = field(default_factory=Counter)  # reason -> count
    recent_ids: deque = field(default_factory=lambda: deque(maxlen=8))  # newest claimed ids

    def note(self, robot_id: str) -> None:
        rid = robot_id if len(robot_id) <= 64 else robot_id[:64] + "..."
        if rid in self.recent_ids:
            self.recent_ids.remove(rid)
        self.recent_ids.append(rid)


@dataclass
class RobotStats:
    rounds: int = 0
    errors: int = 0
    queue_ms: list[float] = field(default_factory=list)
    inference_ms: list[float] = field(default_factory=list)


class RobotRegistry:
    def __init__(self, limits: ModelLimits, instance_id: str, max_observation_age_s: float = 2.0,
                 allowed_horizon_policies: Collection[str] = (), max_robots: int | None = None,
                 robot_idle_release_s: float = 10.0):
        """max_robots: robots registered at once (None: no limit); a new robot beyond it is
        refused with reason `capacity` unless a registered robot has been silent (no
        observation, no registration) for robot_idle_release_s, which then gives its place up."""
        if max_robots is not None and max_robots < 1:
            raise ValueError(f"max_robots must be >= 1 or None, got {max_robots}")
        self.limits = limits
        self.instance_id = instance_id
        self.max_robots = max_robots
        self.robot_idle_release_s = robot_idle_release_s
        self.validator = ObservationValidator(max_observation_age_s,
                                              allowed_policies=frozenset(allowed_horizon_policies))
        self.registrations: dict[str, RobotRegistration] = {}
        self.stats: dict[str, RobotStats] = {}
        self.admission = Counter()  # admitted, refused_capacity, released_idle, released_timeout
        # Registration refusals by reason (not by robot id: ids are whatever senders claim).
        self.registration_refusals: Counter[str] = Counter()
        self.unregistered = UnregisteredStats()
        self._last_seen: dict[str, float] = {}  # registered robot -> last registration/observation

    def get(self, robot_id: str) -> RobotRegistration | None:
        return self.registrations.get(robot_id)

    def __len__(self) -> int:
        return len(self.registrations)

    # ---- registration --------------------------------------------------------------------

    def register(self, reg: RobotRegistration, now: float,
                 busy: Collection[str] = ()) -> tuple[RegistrationResult, list[TaskEnded]]:
        """Admit or refuse `reg`. busy: robots with work queued (never released to make room)."""
        ended: list[TaskEnded] = []
        bad = check_registration(reg, self.limits)
        if bad is None and reg.robot_id not in self.registrations:
            bad = self._admit(now, busy, ended)
        if bad is not None:
            self.registration_refusals[bad.reason] += 1
            if reg.robot_id not in self.registrations:
                self.unregistered.registrations_refused[bad.reason] += 1
                self.unregistered.note(reg.robot_id)
            return RegistrationResult(False, str(bad), self.instance_id), ended
        self._last_seen[reg.robot_id] = now
        old = self.registrations.get(reg.robot_id)
        if old is not None and self._starts_over(old, reg):
            # Its previous task's round history no longer describes what it will do next.
            ended.append(TaskEnded(reg.robot_id, old.task_id, "the robot registered anew (restart or new setup)",
                                   registration=old))
        self.registrations[reg.robot_id] = reg
        self.stats.setdefault(reg.robot_id, RobotStats())
        # Continue above the robot's own history: its round ids survive server restarts.
        # last_round_id may be the round the robot has just sent and that is still on its
        # way here (the keep-alive overtook it): that one round is still accepted, once.
        prev = self.validator.last_round.get(reg.robot_id, 0)
        self.validator.reset_robot(reg.robot_id, max(prev, reg.last_round_id - 1))
        return RegistrationResult(True, "", self.instance_id, self.validator.last_round[reg.robot_id]), ended

    def _starts_over(self, old: RobotRegistration, reg: RobotRegistration) -> bool:
        """Whether a registered robot's new registration begins a new task history: a restarted
        client (another session) or another task or setup. A live client re-registers every few
        seconds as a keep-alive, and under load that call can arrive after observations it sent
        later (its last_round_id is then behind ours): that must not drop its queued request
        (seen in a 16-robot soak as a round never answered)."""
        if dataclasses.replace(old, last_round_id=0) != dataclasses.replace(reg, last_round_id=0):
            return True
        # A client that does not name its session: only its round ids going back tell a restart.
        return not reg.client_session and reg.last_round_id < self.validator.last_round.get(reg.robot_id, 0)

    def _admit(self, now: float, busy: Collection[str], ended: list[TaskEnded]) -> Refusal | None:
        """Room for one more robot? (ROSA 3.4.4: refuse a robot rather than degrade everyone.)
        The capacity is the configured server.max_robots; robots silent for longer than
        robot_idle_release_s (dead clients: a live one re-registers every few seconds) give
        their places up first."""
        if self.max_robots is None:
            self.admission["admitted"] += 1
            return None
        if len(self.registrations) >= self.max_robots:
            for rid in self._silent(now, self.robot_idle_release_s, busy):
                ended.append(self.release(rid))
                self.admission["released_idle"] += 1
        if len(self.registrations) >= self.max_robots:
            self.admission["refused_capacity"] += 1
            return Refusal(CAPACITY, f"{len(self.registrations)} robots registered, server.max_robots="
                                     f"{self.max_robots}; retry later")
        self.admission["admitted"] += 1
        return None

    def _silent(self, now: float, timeout_s: float, busy: Collection[str]) -> list[str]:
        return sorted(r for r, t in self._last_seen.items() if now - t > timeout_s and r not in busy)

    def release_silent(self, now: float, timeout_s: float, busy: Collection[str]) -> list[TaskEnded]:
        """Free every robot silent for longer than timeout_s (server.robot_timeout_s) that has
        no work queued; counted as released_timeout."""
        out = [self.release(rid) for rid in self._silent(now, timeout_s, busy)]
        self.admission["released_timeout"] += len(out)
        return out

    def release(self, robot_id: str) -> TaskEnded | None:
        """Forget a robot: registration, history, counters."""
        reg = self.registrations.pop(robot_id, None)
        if reg is None:
            return None
        for table in (self.stats, self._last_seen, self.validator.last_round, self.validator.refused,
                      self.validator.accepted):
            table.pop(robot_id, None)
        return TaskEnded(robot_id, reg.task_id, "the robot was released", released=True)

    # ---- observations --------------------------------------------------------------------

    def check(self, obs: ObservationData, now: float) -> tuple[RobotRegistration | None, Refusal | None]:
        """The sender's registration and why its observation is refused (None: valid)."""
        reg = self.registrations.get(obs.robot_id)
        if reg is None:
            # Counted in one aggregate: the validator would keep a table per claimed id.
            self.unregistered.refused[UNKNOWN_ROBOT] += 1
            self.unregistered.note(obs.robot_id)
            return None, Refusal(UNKNOWN_ROBOT, f"robot {obs.robot_id[:64]!r} is not registered")
        self._last_seen[obs.robot_id] = now
        return reg, self.validator.check(obs, reg, now)

    def count_refusal(self, robot_id: str, refusal: Refusal) -> Refusal:
        return self.validator.count(robot_id, refusal)

    def record_round(self, robot_id: str, queue_ms: float, inference_ms: float) -> None:
        st = self.stats.setdefault(robot_id, RobotStats())
        st.rounds += 1
        st.queue_ms.append(queue_ms)
        st.inference_ms.append(inference_ms)
        del st.queue_ms[:-1000], st.inference_ms[:-1000]

    def record_error(self, robot_id: str) -> None:
        self.stats.setdefault(robot_id, RobotStats()).errors += 1

    # ---- reporting -----------------------------------------------------------------------

    def diagnostics(self) -> dict[str, dict[str, Any]]:
        """Per registered robot. What unregistered senders caused is one aggregate
        (admission_diagnostics), never a table per claimed id."""
        out = {}
        for rid in sorted(self.registrations):
            st = self.stats.get(rid, RobotStats())
            refused = self.validator.refused.get(rid, Counter())
            q = np.array(st.queue_ms or [0.0])
            out[rid] = {
                "registered": True,
                "rounds": st.rounds, "errors": st.errors,
                "accepted": self.validator.accepted.get(rid, 0),
                "refused": dict(refused), "refused_total": sum(refused.values()),
                "queue_ms_p50": float(np.percentile(q, 50)),
                "inference_ms_p50": float(np.percentile(np.array(st.inference_ms or [0.0]), 50)),
            }
        return out

    def admission_diagnostics(self) -> dict[str, Any]:
        u = self.unregistered
        return {
            "max_robots": self.max_robots if self.max_robots is not None else "unlimited",
            "registered_robots": len(self.registrations),
            **{f"admission.{k}": v for k, v in sorted(self.admission.items())},
            **{f"unregistered.refused.{k}": v for k, v in sorted(u.refused.items())},
            **{f"unregistered.registration.{k}": v for k, v in sorted(u.registrations_refused.items())},
            "unregistered.recent_ids": ",".join(u.recent_ids),
        }
