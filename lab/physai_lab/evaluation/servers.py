"""The two servers an evaluation runs against: the real serving core built from fleet.yaml, and
the scripted expert (the teacher the policy was trained from) answering the same observations.
"""
from __future__ import annotations

import copy
from dataclasses import dataclass, field
from typing import Callable

import numpy as np

from physai_ros.config.fleet import FleetConfig
from physai_ros.protocol.chunk import STATUS_OK, ActionChunkData
from physai_ros.protocol.observation import ObservationData
from physai_ros.protocol.registration import RegistrationResult, RobotRegistration
from physai_ros.sim.multi_step import make_expert
from physai_ros.sim.world import SimWorld

from physai_lab.evaluation.lockstep import SimClock


def build_policy_server(cfg: FleetConfig, clock: SimClock):
    """ServingCore exactly as the policy_server node builds it (serving.startup.engine_builder.build_core:
    engine from server.model, tokenizer, checkpoint normalisation statistics, scheduler), on the
    simulated clock. The start-up latency profile is not measured: lockstep time makes it moot."""
    from physai_ros.serving.startup.engine_builder import build_core

    core = build_core(cfg, instance_id="evaluation")
    core.clock = clock
    return core


def restart_noise(core) -> None:
    """Every local engine's and the server's starting-noise streams from their seeds again: each
    setting of a comparison on the same seeds then draws the same noise to start, whatever ran
    before it (remote engines draw their own and are refused)."""
    for slot in core.engines.values():
        if slot.remote:
            raise ValueError(f"engine {slot.instance_id} is remote: its noise cannot be restarted from here")
        slot.engine.restart_noise()
    core.action_runner.starting_noise.restart()


@dataclass
class _Step:
    chunks: list[ActionChunkData] = field(default_factory=list)
    refresh: list[tuple[str, int]] = field(default_factory=list)


class ExpertServer:
    """Answers each observation with a chunk the scripted expert plans on a copy of the robot's
    world (privileged: it sees the true object and goal), `chunk_size` actions at the robot's
    action period, executing the first `horizon`. Same chunk timing as the policy's answers."""

    def __init__(self, world_of: Callable[[str], SimWorld], chunk_size: int, horizon: int | None = None):
        if chunk_size < 1:
            raise ValueError(f"chunk_size must be >= 1, got {chunk_size}")
        self.world_of = world_of
        self.chunk_size = int(chunk_size)
        self.horizon = min(int(horizon or chunk_size), self.chunk_size)
        self.registrations: dict[str, RobotRegistration] = {}
        self._out: list[ActionChunkData] = []

    def register(self, reg: RobotRegistration) -> RegistrationResult:
        self.registrations[reg.robot_id] = reg
        return RegistrationResult(True, "", "expert")

    def submit(self, obs: ObservationData, now: float | None = None) -> list[ActionChunkData]:
        reg = self.registrations[obs.robot_id]
        world = copy.deepcopy(self.world_of(obs.robot_id))
        actions = make_expert(world).rollout(world, self.chunk_size, reg.control_period, in_place=True)
        self._out.append(ActionChunkData(
            robot_id=obs.robot_id, task_id=obs.task_id, round_id=obs.round_id, stamp=obs.stamp,
            status=STATUS_OK, joint_names=reg.joint_names, dt=reg.control_period,
            actions=actions.astype(np.float32), horizon=self.horizon,
            confidence=np.ones(self.chunk_size, np.float32), engine_instance="expert"))
        return []

    def pending(self) -> int:
        return len(self._out)

    def step(self, now: float | None = None) -> _Step:
        out, self._out = self._out, []
        return _Step(out)
