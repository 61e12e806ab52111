"""Closed-loop episodes through the serving path, in simulated time, in one process.

Per robot slot, the same pure-logic pieces the ROS nodes wrap run on one simulated clock:
  sim_robot            -> physai_ros.sim.runtime.SimRobotRuntime (world, renderer, trajectory follower)
  robot_client         -> physai_ros.client.robot_client.RobotClientCore (trigger, rounds, SLO fallbacks)
  trajectory_controller-> physai_ros.control.trajectory_buffer.TrajectoryBuffer + joint_trajectory plans
  policy_server        -> a `Server` (physai_ros.serving.serving_core.ServingCore, or the scripted expert)
What replaces DDS: messages are handed over in the same step (sensor data, execution info,
registration), except chunks, which arrive `latency_s` of simulated time after the observation
was submitted. Inference itself takes no simulated time: lockstep, so results do not depend on
how loaded the machine is, and many episodes run faster than real time.

Every slot runs episodes back to back: a fresh sim robot (arm at home, placement from the
episode's seed), a fresh client and buffer, the same server (the client re-registers, keeping
its round ids increasing as a restarted robot does).
"""
from __future__ import annotations

import dataclasses
import heapq
import itertools
from collections import deque
from dataclasses import dataclass
from typing import Callable, Iterable, Protocol, Sequence

import numpy as np

from physai_ros.client.robot_client import RobotClientCore
from physai_ros.config.robot import RobotConfig
from physai_ros.config.robot_params import merge_params, sim_params
from physai_ros.control.hold import apply_hold
from physai_ros.control.joint_trajectory import hold_plan, to_joint_trajectory
from physai_ros.control.trajectory_buffer import TrajectoryBuffer
from physai_ros.protocol.chunk import STATUS_OK, ActionChunkData
from physai_ros.protocol.observation import ImageData, ObservationData
from physai_ros.protocol.registration import RegistrationResult, RobotRegistration
from physai_ros.sim.runtime import SimRobotConfig, SimRobotRuntime

from physai_lab.evaluation.results import EpisodeResult


class Server(Protocol):
    """What the policy server does for the robots (ServingCore has exactly these methods)."""

    def register(self, reg: RobotRegistration) -> RegistrationResult: ...

    def submit(self, obs: ObservationData, now: float | None = None) -> list[ActionChunkData]: ...

    def step(self, now: float | None = None): ...  # -> object with .chunks and .refresh


@dataclass(frozen=True)
class LockstepConfig:
    # Observation -> chunk delivery, simulated seconds (what the robot would wait for the
    # server over DDS on a loaded CPU; the ROS run's measured p50 is in docs/policy_eval.md).
    latency_s: float = 0.05
    physics_rate_hz: float = 480.0  # one lockstep tick; also the controller and wrench rate
    client_rate_hz: float = 100.0   # robot_client timer (its default tick_rate_hz)
    exec_info_rate_hz: float = 50.0  # trajectory_controller execution_info rate (its default)
    lookahead_stride: int = 8       # trajectory_controller defaults
    lookahead_points: int = 6
    max_episode_s: float | None = None  # cut episodes short (tests); None: the task's timeout

    def __post_init__(self) -> None:
        if not self.latency_s >= 0:
            raise ValueError(f"latency_s must be >= 0, got {self.latency_s}")
        for name in ("physics_rate_hz", "client_rate_hz", "exec_info_rate_hz"):
            if not getattr(self, name) > 0:
                raise ValueError(f"{name} must be > 0, got {getattr(self, name)}")
        if self.client_rate_hz > self.physics_rate_hz or self.exec_info_rate_hz > self.physics_rate_hz:
            raise ValueError("client and execution-info rates cannot exceed the physics (tick) rate")


class SimClock:
    """The one clock every component reads (ServingCore.clock included)."""

    def __init__(self) -> None:
        self.now = 0.0

    def __call__(self) -> float:
        return self.now


def rendered_image_data(rgb: np.ndarray) -> ImageData:
    """A rendered HxWx3 RGB frame as the camera message's plain data (rgb8)."""
    h, w = rgb.shape[:2]
    return ImageData(h, w, "rgb8", w * 3, np.ascontiguousarray(rgb).tobytes())


class EpisodeSlot:
    """One robot (sim + client + controller) running one episode at a time."""

    def __init__(self, robot: RobotConfig, cfg: LockstepConfig, setting: str):
        self.robot = robot
        self.cfg = cfg
        self.setting = setting
        self.episode_id = 0
        self.active = False
        self._round_base = 0

    # ---- episode lifecycle ---------------------------------------------------------------

    def start(self, seed: int, now: float) -> None:
        params = {**sim_params(self.robot), "seed": int(seed),
                  "physics_rate_hz": self.cfg.physics_rate_hz}
        self.runtime = SimRobotRuntime(SimRobotConfig(**{k: v for k, v in params.items()
                                                         if k in SimRobotConfig.__dataclass_fields__}))
        self.client = RobotClientCore(self.robot)
        self.client.round_id = self._round_base  # the server saw these ids already
        self.buffer = TrajectoryBuffer(self.robot.joints, rate_hz=self.robot.control_rate_hz,
                                       **merge_params(self.robot))
        self.buffer.set_hold_position(self.runtime.world.arm.positions())
        self.seed = int(seed)
        self.started = now
        self.horizons: list[int] = []
        self.episode_id += 1
        self.active = True

    def finish(self) -> EpisodeResult:
        w = self.runtime.world
        c = self.client.counters
        self._round_base = self.client.round_id
        self.active = False
        return EpisodeResult(
            setting=self.setting, robot_id=self.robot.id, task=w.task.name, seed=self.seed,
            success=bool(w.success), sim_time_s=round(w.episode_time, 4), horizons=tuple(self.horizons),
            refused=c.refused, errors=c.errors, underruns=self.buffer.underruns, slo_misses=c.slo_misses)

    def over(self) -> bool:
        w = self.runtime.world
        if w.done:
            return True
        return self.cfg.max_episode_s is not None and w.episode_time >= self.cfg.max_episode_s

    # ---- one tick of the robot side ------------------------------------------------------

    def control(self, now: float):
        """trajectory_controller._tick, then sim_robot's physics and sensors (returns the sim's
        TickOutput, whose snapshot is the ground truth of this instant)."""
        cmd = self.buffer.advance(now)
        if cmd is not None:
            plan = to_joint_trajectory(self.buffer.tentative_nodes(), now, self.robot.joints,
                                       stride=self.cfg.lookahead_stride, max_points=self.cfg.lookahead_points)
            if not plan.points:
                plan = hold_plan(cmd, now, self.robot.joints, settle_s=1.0 / self.robot.control_rate_hz)
            self.runtime.on_plan(plan)
        out = self.runtime.tick(now)
        if out.images is not None:
            for i, rgb in enumerate(out.images):
                self.client.on_image(i, rendered_image_data(rgb), now)
        if out.joint_state is not None:
            self.client.on_joint_state(list(self.runtime.joint_names), list(out.joint_state[0]))
        if out.wrench is not None:
            self.client.on_wrench(out.wrench, now)
        return out

    def exec_info(self, now: float) -> None:
        st = self.buffer.execution_state(now)
        self.client.on_exec_info(now, st.actions_remaining, st.control_period, st.exec_phase_start,
                                 st.executing_round_id)

    def deliver(self, chunk: ActionChunkData, now: float) -> None:
        """The chunk reaches robot_client and trajectory_controller (both subscribe)."""
        self.client.on_chunk(chunk, now)
        if chunk.status == STATUS_OK:
            self.horizons.append(int(chunk.horizon))
            self.buffer.insert(chunk, now)


class TickSide(Protocol):
    """Work that runs beside the robots on the same clock (evaluation.pipeline_shift: the
    pipeline components' questions and answers). Called each tick after the due chunks are
    delivered (begin), for each running slot after its client's tick (client_tick), and after
    every slot has ticked (end)."""

    def begin_tick(self, now: float) -> None: ...

    def client_tick(self, slot: "EpisodeSlot", now: float) -> None: ...

    def end_tick(self, now: float) -> None: ...


@dataclass
class RunStats:
    ticks: int = 0
    sim_time_s: float = 0.0
    submitted: int = 0
    chunks: int = 0


def run_episodes(server: Server, robots: Sequence[RobotConfig], seeds: Iterable[int],
                 cfg: LockstepConfig = LockstepConfig(), setting: str = "",
                 clock: SimClock | None = None,
                 on_episode: Callable[[EpisodeResult], None] | None = None,
                 slot_hook: Callable[[list[EpisodeSlot]], None] | None = None,
                 on_chunk: Callable[[ActionChunkData], None] | None = None,
                 on_tick: Callable[[EpisodeSlot, float], None] | None = None,
                 make_slot: Callable[[RobotConfig, LockstepConfig, str], EpisodeSlot] = EpisodeSlot,
                 side: TickSide | None = None) -> list[EpisodeResult]:
    """Run one episode per seed on the robots in `robots` (each a slot; free slots take the next
    seed), all sharing `server`. `clock` must be the clock the server reads (ServingCore.clock).
    on_chunk sees every chunk delivered to a running episode; on_tick(slot, now) runs after each
    running slot's physics tick (a recorder reads its world there). make_slot builds the slots (a
    subclass decides when an episode is over and what finish() reports); side runs beside them.
    Returns what the slots' finish() gave, in the order the episodes finished."""
    clock = clock or SimClock()
    queue = deque(int(s) for s in seeds)
    slots = [make_slot(r, cfg, setting) for r in robots]
    if slot_hook is not None:
        slot_hook(slots)
    by_id = {s.robot.id: s for s in slots}
    if len(by_id) != len(slots):
        raise ValueError("robot ids must be unique")
    dt = 1.0 / cfg.physics_rate_hz
    client_every = max(1, round(cfg.physics_rate_hz / cfg.client_rate_hz))
    info_every = max(1, round(cfg.physics_rate_hz / cfg.exec_info_rate_hz))
    pending: list[tuple[float, int, str, int, ActionChunkData]] = []  # (due, seq, robot, episode, chunk)
    seq = itertools.count()
    results: list[EpisodeResult] = []
    t0 = clock.now
    for s in slots:
        if queue:
            s.start(queue.popleft(), t0)

    def post(chunk: ActionChunkData, due: float) -> None:
        s = by_id.get(chunk.robot_id)
        if s is not None and s.active:
            heapq.heappush(pending, (due, next(seq), chunk.robot_id, s.episode_id, chunk))

    for tick in itertools.count(1):
        if not any(s.active for s in slots):
            break
        now = t0 + tick * dt
        clock.now = now
        while pending and pending[0][0] <= now + 1e-12:
            _, _, rid, ep, chunk = heapq.heappop(pending)
            s = by_id[rid]
            if s.active and s.episode_id == ep:  # a chunk for a finished episode is dropped
                s.deliver(chunk, now)
                if on_chunk is not None:
                    on_chunk(chunk)
        if side is not None:
            side.begin_tick(now)
        submitted = False
        for s in slots:
            if not s.active:
                continue
            s.control(now)
            if on_tick is not None:
                on_tick(s, now)
            if tick % info_every == 0:
                s.exec_info(now)
            if s.over():
                res = s.finish()
                results.append(res)
                if on_episode is not None:
                    on_episode(res)
                if queue:
                    s.start(queue.popleft(), now)
                continue
            if tick % client_every:
                continue
            out = s.client.tick(now)
            if out.register:
                s.client.on_registered(server.register(s.client.registration()))
            if out.hold is not None:
                apply_hold(s.buffer, out.hold.round_id, now)
            if out.observation is not None:
                for notice in server.submit(out.observation, now):
                    post(notice, now)  # refusals are answered at once
                submitted = True
            if side is not None:
                side.client_tick(s, now)
        if side is not None:
            side.end_tick(now)
        if submitted or _has_pending(server):
            step = server.step(now)
            for chunk in step.chunks:
                post(chunk, now + cfg.latency_s)
            for rid, round_id in step.refresh:
                s = by_id.get(rid)
                obs = s.client.refresh(round_id, now) if s is not None and s.active else None
                if obs is not None:
                    for notice in server.submit(obs, now):
                        post(notice, now)
    return results


def _has_pending(server: Server) -> bool:
    pending = getattr(server, "pending", None)
    return bool(pending()) if callable(pending) else False


def with_horizon(robot: RobotConfig, policy: str, params: Sequence[float]) -> RobotConfig:
    """The robot with its task's horizon policy replaced (what the sweeps vary)."""
    task = dataclasses.replace(robot.task, horizon_policy=policy, horizon_params=tuple(float(p) for p in params))
    return dataclasses.replace(robot, task=task)


def clone_robots(robot: RobotConfig, n: int, prefix: str = "eval") -> list[RobotConfig]:
    """n copies of one robot entry with ids/namespaces prefix_0..prefix_{n-1}."""
    return [dataclasses.replace(robot, id=f"{prefix}_{k}", namespace=f"{prefix}_{k}") for k in range(n)]
