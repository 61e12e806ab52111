"""Plain data of the request path: what the scheduler's decision becomes on the way to the
engine instances (serving.serving_core dispatches it, serving.serving_threads's threads execute it)."""
from __future__ import annotations

from dataclasses import dataclass

from physai_ros.protocol.chunk import ActionChunkData
from physai_ros.scheduler.types import ACTION, Batch, Request


@dataclass(frozen=True)
class BatchWork:
    """One dispatched batch: the requests the scheduler put on one instance at `dispatched`."""

    batch: Batch
    requests: list[Request]
    dispatched: float

    @property
    def instance_id(self) -> str:
        return self.batch.instance_id


@dataclass(frozen=True)
class Dispatch:
    work: list[BatchWork]
    refresh: list[tuple[str, int]]  # (robot_id, round_id) to ask for a fresh observation


@dataclass(frozen=True)
class StepOutput:
    chunks: list[ActionChunkData]
    # (robot_id, round_id) the server asks to resend a fresh observation for.
    refresh: list[tuple[str, int]]


def scheduler_task_key(robot_id: str, task_id: str, component: str = ACTION) -> str:
    """The scheduler's "task" is one robot's task (its rounds and history) for one component:
    two robots running the same fleet.yaml task are two tasks."""
    return f"{robot_id}/{task_id}" if component == ACTION else f"{robot_id}/{task_id}/{component}"
