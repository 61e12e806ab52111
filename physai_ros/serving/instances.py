"""The engine instances behind the scheduler: which ones serve now, failures and hot standby.

Not thread-safe by itself: ServingCore calls it under its lock. Engines themselves run outside
that lock (serving.serving_core.run_batch).
"""
from __future__ import annotations

from collections import Counter, deque
from dataclasses import dataclass
from typing import Any, Callable, Sequence

from physai_ros.scheduler.types import EngineInstanceInfo, LatencyProfile


# While a batch runs its instance must look busy even past the scheduler's estimate, or a slow
# batch would get a second one stacked on the same engine.
RUNNING_MARGIN_S = 1e-3


@dataclass
class EngineSlot:
    """One engine instance behind the scheduler.

    A remote engine (physai_ros.ros.remote_engine.RemoteEngine) also has .alive, .profile, .tier,
    .max_batch and .network_rtt_s from its worker's advertisement; those override the slot's
    own values, and a slot whose engine is not alive gets no work.
    """

    instance_id: str
    engine: Any  # has .config (Pi0Config) and .infer(list[EngineInput]) -> list[EngineOutput]
    max_batch: int
    profile: LatencyProfile
    tier: str = "edge"
    busy_until: float = 0.0
    running: bool = False  # a batch is executing on it right now
    # Hot standby (ROSA 3.4.4): warm and loaded, but serves only while an active instance is
    # down, so the schedule of the healthy fleet never changes because of it.
    standby: bool = False
    failed: str = ""  # why this (local) instance is out of service for good; "" while usable
    batches: int = 0  # batches run_batch started on it
    # Called before each served batch with (instance_id, batch number from 1): a process-level
    # hook may set it (serving.slot_hook); None otherwise.
    before_batch: Callable[[str, int], None] | None = None

    @property
    def remote(self) -> bool:
        return hasattr(self.engine, "alive")


def default_profile(max_batch: int) -> LatencyProfile:
    # Before measuring, assume batching is free up to the engine's limit so the scheduler fills
    # batches (profiles from bench measurements replace this).
    sizes = tuple(range(1, max_batch + 1)) if max_batch > 1 else (1,)
    return LatencyProfile(sizes, tuple(0.05 for _ in sizes))


class InstancePool:
    def __init__(self, engines: Sequence[EngineSlot]):
        if not engines:
            raise ValueError("ServingCore needs at least one engine instance")
        if all(e.standby for e in engines):
            raise ValueError("ServingCore needs at least one engine instance that is not a standby")
        self.slots = {e.instance_id: e for e in engines}
        self._n_active = sum(not e.standby for e in engines)
        self.promoted: set[str] = set()  # standby instances serving right now
        self.events: deque[str] = deque(maxlen=32)  # failures, takeovers, releases; newest last
        # takeovers, instance_failures (instances); redispatched, redispatch_exhausted (requests)
        self.failover = Counter()

    @staticmethod
    def usable(e: EngineSlot) -> bool:
        return not e.failed and bool(getattr(e.engine, "alive", True))

    def serving(self) -> list[EngineSlot]:
        """The instances that take work now: every usable active one, plus as many usable
        standbys as active ones are down. A standby steps back when the instance it replaced
        returns (a remote worker that came back); a failed local instance never returns."""
        live = [e for e in self.slots.values() if self.usable(e)]
        active = [e for e in live if not e.standby]
        spare = [e for e in live if e.standby][:max(0, self._n_active - len(active))]
        ids = {e.instance_id for e in spare}
        for iid in sorted(ids - self.promoted):
            down = [f"{e.instance_id} ({e.failed or getattr(e.engine, 'why_not_alive', lambda: '')()})"
                    for e in self.slots.values() if not e.standby and not self.usable(e)]
            self.failover["takeovers"] += 1
            self.events.append(f"standby {iid} takes over for {', '.join(down) or 'a lost instance'}")
        for iid in sorted(self.promoted - ids):
            self.events.append(f"standby {iid} steps back")
        self.promoted = ids
        return active + spare

    def fail(self, slot: EngineSlot, why: str) -> None:
        """A local instance is out of service for good (its thread died)."""
        if not slot.failed:
            slot.failed = why or "failed"
            slot.running = False
            self.failover["instance_failures"] += 1
            self.events.append(f"instance {slot.instance_id} failed: {slot.failed}")

    def info(self, e: EngineSlot, now: float) -> EngineInstanceInfo:
        """What the scheduler sees of an instance (a remote worker's advertisement wins)."""
        eng = e.engine
        advertised = getattr(eng, "max_batch", None)
        busy = max(e.busy_until, now + RUNNING_MARGIN_S) if e.running else e.busy_until
        return EngineInstanceInfo(
            e.instance_id, getattr(eng, "tier", None) or e.tier,
            getattr(eng, "profile", None) or e.profile, float(getattr(eng, "network_rtt_s", 0.0)),
            busy, min(e.max_batch, advertised) if advertised else e.max_batch)

    def diagnostics(self, now: float, serving: set[str]) -> dict[str, dict[str, Any]]:
        """Per instance: liveness and what its worker advertises (remote ones). Called outside
        the core's lock (a remote engine answers from its own state); `serving` is the set of
        serving instance ids taken under it."""
        out = {}
        for e in self.slots.values():
            diag = getattr(e.engine, "diagnostics", None)
            d = dict(diag()) if callable(diag) else {"alive": True}
            info = self.info(e, now)
            d.update(tier=info.tier, max_batch=info.max_batch,
                     profile=info.profile.to_pairs(), remote=callable(diag))
            if e.failed:
                d.update(alive=False, why_not_alive=e.failed)
            d.update(standby=e.standby, serving=e.instance_id in serving, failed=e.failed, batches=e.batches)
            out[e.instance_id] = d
        return out
