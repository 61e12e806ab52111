"""One queue per engine instance, robots placed on them by a plan (ROSA §3.4: each System 1
instance serves the robots its plan routes to it; the scheduling policy orders each queue).

Without routes every robot's rounds are in the shared queue and every instance takes from it:
that is the server without a factory plan, and it behaves exactly as the policy alone. With
routes (set_routes), a robot's rounds queue in its instance's lane and only the instances
serving that lane take them: the instance itself, or the hot standby standing in for it
(serve_lanes). A route change moves the robot's queued rounds and its task histories to the new
lane (hand_over / take_over), so no round is lost or answered twice; a round already in flight
completes in the lane that dispatched it.

Plain data in and out, like every scheduler here: the serving core calls it under its lock.
"""
from __future__ import annotations

from collections import Counter
from typing import Any, Callable, Mapping, Sequence

from physai_ros.scheduler.types import Batch, EngineInstanceInfo, Request, SchedulerDecision, SubmitResult

SHARED = ""  # the lane of robots without a route, served by instances without a lane


class RoutedScheduler:
    def __init__(self, shared: Any, make_lane: Callable[[], Any] | None = None):
        self.shared = shared
        self.name = shared.name
        self._make_lane = make_lane or _same_settings(shared)
        self.lanes: dict[str, Any] = {SHARED: shared}
        self._route: dict[str, str] = {}  # robot id -> lane
        self._serves: dict[str, str] = {}  # instance id -> the lane it takes work from
        self._tasks: dict[str, set[str]] = {}  # robot id -> its task keys seen (to move their histories)
        self.moves: Counter = Counter()  # robots moved, rounds moved

    # ---- routes --------------------------------------------------------------------------

    def set_routes(self, routes: Mapping[str, str], now: float) -> list[str]:
        """Robot id -> lane (its System 1 instance). Robots whose lane changes take their queued
        rounds and histories along; robots not named go back to the shared lane. Returns the
        robots that moved."""
        moved = []
        for robot in sorted(set(self._route) | set(routes)):
            old, new = self._route.get(robot, SHARED), routes.get(robot, SHARED)
            if old == new:
                continue
            moved.append(robot)
            handover = self.lanes[old].hand_over(sorted(self._tasks.get(robot, ())))
            self._lane(new).take_over(handover, now)
            self.moves["robots"] += 1
            self.moves["rounds"] += len(handover.queued)
        self._route = {r: lane for r, lane in routes.items() if lane != SHARED}
        return moved

    def serve_lanes(self, serves: Mapping[str, str]) -> None:
        """Instance id -> the lane it takes work from (a standby: the lane of the instance it
        stands in for). Instances not named take from the shared lane."""
        self._serves = dict(serves)

    def lane_of(self, robot_id: str) -> str:
        return self._route.get(robot_id, SHARED)

    def queued_by_lane(self) -> dict[str, int]:
        return {lane: s.pending() for lane, s in self.lanes.items()}

    # ---- the Scheduler protocol -----------------------------------------------------------

    def submit(self, request: Request, now: float) -> SubmitResult:
        robot = getattr(request, "robot_id", None)
        if isinstance(robot, str) and isinstance(getattr(request, "task_id", None), str):
            self._tasks.setdefault(robot, set()).add(request.task_id)
        return self.lanes[self._route.get(robot, SHARED)].submit(request, now)

    def schedule(self, now: float, instances: Sequence[EngineInstanceInfo]) -> SchedulerDecision:
        groups: dict[str, list[EngineInstanceInfo]] = {}
        for info in instances:
            groups.setdefault(self._serves.get(info.instance_id, SHARED), []).append(info)
        batches, refresh = [], []
        for lane, infos in groups.items():
            if lane in self.lanes:
                d = self.lanes[lane].schedule(now, infos)
                batches += d.batches
                refresh += d.refresh_request_ids
        return SchedulerDecision(batches, refresh, now)

    def on_dispatched(self, batch: Batch, now: float) -> None:
        by_lane: dict[str, list[str]] = {}
        for rid in batch.request_ids:
            lane = self._holder(rid)
            if lane is not None:
                by_lane.setdefault(lane, []).append(rid)
        for lane, mine in by_lane.items():
            self.lanes[lane].on_dispatched(Batch(batch.instance_id, tuple(mine), batch.est_latency_s), now)

    def on_completed(self, request_id: str, now: float, generation_s: float) -> None:
        self.lanes[self._holder(request_id) or SHARED].on_completed(request_id, now, generation_s)

    def on_task_finished(self, task_id: str) -> list[Request]:
        for tasks in self._tasks.values():
            tasks.discard(task_id)
        return [r for s in self.lanes.values() for r in s.on_task_finished(task_id)]

    def requeue(self, request_id: str, now: float) -> bool:
        """Back into the lane that dispatched it; when its robot has moved since, on to the
        robot's lane now (first in line there)."""
        lane = self._holder(request_id)
        if lane is None:
            return self.shared.requeue(request_id, now)  # refused there, and counted
        if not self.lanes[lane].requeue(request_id, now):
            return False
        req = self.lanes[lane].request(request_id)
        target = self._route.get(req.robot_id, SHARED)
        if target != lane:
            self._lane(target).take_over(self.lanes[lane].hand_over([req.task_id]), now)
        return True

    def queued(self) -> list[Request]:
        return [r for s in self.lanes.values() for r in s.queued()]

    def pending(self) -> int:
        return sum(s.pending() for s in self.lanes.values())

    def request(self, request_id: str) -> Request | None:
        lane = self._holder(request_id)
        return self.lanes[lane].request(request_id) if lane is not None else None

    def stats(self) -> dict[str, Any]:
        if len(self.lanes) == 1:
            return self.shared.stats()
        out: dict[str, Any] = {"scheduler": self.name}
        for s in self.lanes.values():
            for k, v in s.stats().items():
                if isinstance(v, (int, float)) and not isinstance(v, bool):
                    out[k] = out.get(k, 0) + v
                elif isinstance(v, dict):
                    merged = out.setdefault(k, {})
                    for kk, vv in v.items():
                        merged[kk] = merged.get(kk, 0) + vv
        out["lanes"] = {lane or "shared": s.pending() for lane, s in self.lanes.items()}
        out["route_moves"] = dict(self.moves)
        return out

    def _lane(self, name: str) -> Any:
        """The lane's queue, made (with the shared queue's settings) the first time it is named."""
        if name not in self.lanes:
            self.lanes[name] = self._make_lane()
        return self.lanes[name]

    def _holder(self, request_id: str) -> str | None:
        """The lane holding this request (queued or in flight)."""
        for lane, s in self.lanes.items():
            if s.request(request_id) is not None:
                return lane
        return None


def _same_settings(shared: Any) -> Callable[[], Any]:
    def make() -> Any:
        from physai_ros.scheduler.base import make_scheduler

        return make_scheduler(shared.name, **getattr(shared, "lane_params", {}))
    return make
