"""Plain data of the request path: what the scheduler's decision becomes on the way to the
engine instances (serving.serving_core dispatches it, serving.serving_threads's threads execute it)."""
from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any, Optional

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


@dataclass
class BatchRun:
    """One batch on its way through ServingCore.run_batch: prepare fills the inputs, execute the
    outputs (or the failure), complete turns them into chunks. `ok` are the requests still
    expected to get a chunk from the outputs; `out` the chunks so far (errors included)."""

    work: BatchWork
    slot: Any  # serving.instances.EngineSlot
    runner: Any  # the component's model runner (None: no runner for it)
    batch_no: int = 0
    t0: float = 0.0
    t1: float = 0.0
    inputs: list = field(default_factory=list)
    ok: list[Request] = field(default_factory=list)
    out: list[ActionChunkData] = field(default_factory=list)
    prepare_s: dict[str, float] = field(default_factory=dict)
    outputs: list = field(default_factory=list)
    lost: list[Request] = field(default_factory=list)
    lost_why: str = ""
    fatal: Optional[BaseException] = None
    rows: list = field(default_factory=list)  # the frame's robots (serving.language.stream.FrameRobot)
    frame: Optional[tuple] = None  # (prefix cache, collated inputs) held for the language stream


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
