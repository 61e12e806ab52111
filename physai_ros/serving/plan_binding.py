"""The serving core's side of a factory plan (serving.factory_runtime): each System 1 instance
takes only its own robots' rounds (the scheduler's lanes, scheduler.routed), at the plan's batch
cap, and both follow the plan whenever it changes (a robot admitted, a plan re-solved, an
instance lost or back). Called under the core's lock."""
from __future__ import annotations

from typing import Any

from physai_ros.scheduler.routed import RoutedScheduler
from physai_ros.serving.instances import EngineSlot, InstancePool


class PlanBinding:
    def __init__(self, runtime: Any, scheduler: RoutedScheduler, pool: InstancePool, events: Any):
        self.runtime, self.scheduler, self.pool, self.events = runtime, scheduler, pool, events
        self._caps = {iid: slot.max_batch for iid, slot in pool.slots.items()}  # without a plan
        self._synced: tuple | None = None

    def action_slots(self, now: float) -> list[EngineSlot]:
        """The serving instances that take System 1 batches now, the plan brought up to date first."""
        self.sync(now)
        hosts = self.runtime.action_instances(self._usable)
        return [e for e in self.pool.serving() if e.instance_id in hosts]

    def sync(self, now: float) -> None:
        usable = frozenset(iid for iid, e in self.pool.slots.items() if self.pool.usable(e))
        key = (self.runtime.version, usable)
        if key == self._synced:
            return
        if self._synced is None or self._synced[1] != usable:
            self.runtime.instances_changed(usable)
        self._synced = key
        for iid, slot in self.pool.slots.items():
            cap = self.runtime.batch_cap(iid)
            slot.max_batch = min(self._caps[iid], cap) if cap is not None else self._caps[iid]
        moved = self.scheduler.set_routes(self.runtime.lane_routes(self._usable), now)
        self.scheduler.serve_lanes(self.runtime.serving_lanes(self._usable))
        if moved:
            self.events.append(f"factory plan: {len(moved)} robot(s) moved to their new System 1 instance "
                               f"({', '.join(moved[:8])}{', ...' if len(moved) > 8 else ''})")

    def observe(self, instance_id: str, batch: int, service_s: float) -> None:
        self.runtime.observe_batch(instance_id, batch, service_s)

    def _usable(self, instance_id: str) -> bool:
        slot = self.pool.slots.get(instance_id)
        return slot is not None and self.pool.usable(slot)
