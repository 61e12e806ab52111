"""The scheduler interface the policy server and the fleet simulator program against.

Call pattern (one server event loop):
    result = sched.submit(request, now)            # a robot's Observation arrived
    decision = sched.schedule(now, instances)      # whenever an instance may be idle
    for batch in decision.batches: run it, then sched.on_dispatched(batch, t_sent)
    when a batch returns: sched.on_completed(request_id, t_done, generation_s) per request
    for rid in decision.refresh_request_ids: ask that robot for a fresh observation and
        submit it (same task_id and round_id, refresh=True)
    when a task ends: dropped = sched.on_task_finished(task_id)
    when an instance was lost with a batch: sched.requeue(request_id, now) per request
The scheduler never calls an engine or a robot itself; its decision is plain data. Its queue is
the only place a queued request lives: the server keeps no second one (requests carry their
payload), and lost work goes back through requeue, never around the scheduler.
"""
from __future__ import annotations

from typing import Any, Protocol, Sequence, runtime_checkable

from physai_ros.scheduler.types import (
    Batch,
    EngineInstanceInfo,
    Request,
    SchedulerDecision,
    SubmitResult,
)

SCHEDULER_NAMES = ("fifo", "autellix", "wait_ratio")


@runtime_checkable
class Scheduler(Protocol):
    name: str

    def submit(self, request: Request, now: float) -> SubmitResult:
        """Queue a request (or a refreshed observation for a queued one). Never raises on bad
        input: a rejected request comes back with accepted=False and a reason, and is counted."""

    def on_dispatched(self, batch: Batch, now: float) -> None:
        """The server actually sent `batch` at `now` (defaults to the decision time if never called)."""

    def on_completed(self, request_id: str, now: float, generation_s: float) -> None:
        """The chunk for request_id came back at `now`; generation_s is the engine's compute time."""

    def on_task_finished(self, task_id: str) -> list[Request]:
        """Forget a task's history and drop its queued requests; returns them (to answer)."""

    def requeue(self, request_id: str, now: float) -> bool:
        """An in-flight request whose instance was lost before it ran: queue it again, ahead of
        everything else (it has waited longest). False when it was not in flight."""

    def queued(self) -> list[Request]:
        """The requests queued and not dispatched (requeued ones included)."""

    def schedule(self, now: float, instances: Sequence[EngineInstanceInfo]) -> SchedulerDecision:
        """One scheduling cycle: batches for the idle instances among `instances`."""

    def pending(self) -> int:
        """Requests queued and not yet dispatched (including those awaiting a refresh)."""

    def request(self, request_id: str) -> Request | None:
        """The queued or in-flight Request with this id (the server keeps payloads there)."""

    def stats(self) -> dict[str, Any]:
        """Counters for diagnostics: submitted, rejected (by reason), dispatched, refreshes..."""


def make_scheduler(name: str, **params: Any) -> Scheduler:
    """Build a scheduler by its fleet.yaml name: "fifo" | "autellix" | "wait_ratio".

    params go to the scheduler's constructor (e.g. buckets=10, aging_interval=4,
    stale_after_s=0.2 for wait_ratio); unknown names or parameters raise ValueError.
    """
    from physai_ros.scheduler.baselines import AutellixScheduler, FifoScheduler
    from physai_ros.scheduler.wait_ratio import WaitRatioScheduler

    classes = {"fifo": FifoScheduler, "autellix": AutellixScheduler, "wait_ratio": WaitRatioScheduler}
    key = str(name).strip().lower().replace("-", "_")
    if key not in classes:
        raise ValueError(f"unknown scheduler {name!r}; expected one of {', '.join(SCHEDULER_NAMES)}")
    try:
        sched = classes[key](**params)
    except TypeError as exc:
        raise ValueError(f"bad parameters for scheduler {key!r}: {exc}") from None
    # A queue per engine instance (scheduler.routed) builds its others with the same settings.
    sched.lane_params = dict(params)
    return sched
