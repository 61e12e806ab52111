"""The server's side of real-time chunking (docs/rtc.md): what it sent each robot, and from
that, the execution info an observation carries and the measured latency, the guide
(engine.rtc.RtcGuide) for the robot's next chunk.

Per robot with `chunk_merge: rtc` the planner keeps the last chunk it answered: its round, the
capture time it answers (action k due at stamp + k dt on the robot's clock), dt, horizon, and the
actions in the model's normalised space, padded, as the engine produced them. An observation
then says which round the controller executes (`executing_round_id`) and when that round's
first node was committed (`exec_phase_start`, i.e. when it arrived); so

- the latency of that round, capture -> arrival at the controller, is measured on the robot's
  own clock: exec_phase_start - stamp (one sample per round);
- the inference delay of the chunk now being made is d = floor(L / dt) + 2, L the largest of
  the last `latency_window` samples: the paper's d = ceil(L / dt) actions are due before the
  chunk lands, and since the buffer interpolates linearly between actions, the segment the
  robot is on when it lands also reads the next action, so that one is frozen too (a delay
  guessed too short lets the new chunk take over where the mask is already below 1; too long
  only freezes a little more of the old plan);
- the leftover is the old chunk re-indexed to the new chunk's action times: row k is the old
  plan at stamp_new + k dt, interpolated linearly between its actions as the trajectory buffer
  does. When the old chunk's executed part (its horizon; the buffer then holds its last action)
  covers the delay, rows continue into its unexecuted tail, the paper's soft-masked overlap,
  up to where it ends or the task's execution horizon; otherwise the robot will be holding
  when the new chunk lands, so the rows are what the buffer does (the held action) and only
  the delay is guided.

No guide (the chunk is made as without RTC) when there is no previous chunk, the controller is
not executing it (a refused chunk, a restarted robot, or the client's SLO hold, which it reports
as round 0), or the action period changed. Each case is counted in `stats`. A buffer that ran
to the end of the old chunk still executes it (it holds the last action): the leftover is then
that held action, as above.

The same memory and latency samples are kept for every robot, whatever its merge rule, for one
more use: a chunk's horizon is raised to the delay d where the horizon policy chose fewer
actions than land alive (`fit_horizon`).
"""
from __future__ import annotations

import dataclasses
import math
import threading
from collections import Counter, deque
from dataclasses import dataclass
from typing import Mapping, Optional

import numpy as np

from physai_ros.config.chunk_merge import ChunkMergeConfig
from physai_ros.protocol.chunk import STATUS_OK
from physai_ros.protocol.observation import ObservationData


@dataclass(frozen=True)
class SentChunk:
    """The last chunk the server answered a robot with (the model's side of it)."""

    round_id: int
    stamp: float  # capture time of the observation it answered, robot clock
    dt: float
    horizon: int
    actions: np.ndarray  # [chunk, max_action_dim] float32, normalised, padded (empty: a task without rtc)


@dataclass(frozen=True)
class GuidePlan:
    """What the next chunk is guided towards, before it becomes an engine.rtc.RtcGuide."""

    leftover: np.ndarray  # [chunk, max_action_dim] float32
    delay: int
    execution_horizon: int
    latency_s: float


_NO_ACTIONS = np.zeros((0, 0), dtype=np.float32)  # a task without rtc: its chunks are never read back


def old_plan_at(actions: np.ndarray, index: np.ndarray, last: int) -> np.ndarray:
    """Rows of `actions` at fractional indices `index` (>= 0), linear between neighbours, held at
    row `last` beyond it (the trajectory buffer's interpolation and hold)."""
    j = np.clip(index, 0.0, float(last))
    lo = np.floor(j).astype(np.int64)
    hi = np.minimum(lo + 1, last)
    frac = (j - lo)[:, None].astype(np.float64)
    return ((1.0 - frac) * actions[lo] + frac * actions[hi]).astype(np.float32)


def inference_delay(latency_s: float, dt: float, chunk: int) -> int:
    """d = floor(L / dt) + 2 actions, at most the chunk: the buffer interpolates linearly between
    actions, so the command just after a chunk lands (between actions floor(L/dt) and
    floor(L/dt) + 1) still reads both."""
    return min(chunk, max(0, math.floor(latency_s / dt + 1e-9) + 2))


def plan_guide(prev: SentChunk, stamp: float, latency_s: float, action_dim: int,
               cfg: ChunkMergeConfig) -> GuidePlan:
    """The guide for a chunk answering an observation captured at `stamp` (pure: tested by hand)."""
    chunk = prev.actions.shape[0]
    dt = prev.dt
    delay = inference_delay(latency_s, dt, chunk)  # both actions the landing command reads are frozen
    index = (stamp - prev.stamp) / dt + np.arange(chunk, dtype=np.float64)
    executed = int(np.count_nonzero(index <= prev.horizon - 1 + 1e-9))  # rows on the executed plan
    if delay <= executed:
        rows = old_plan_at(prev.actions, index, chunk - 1)
        reach = int(np.count_nonzero(index <= chunk - 1 + 1e-9))  # rows the old chunk predicts
        horizon = min(cfg.execution_horizon or chunk, reach, chunk)
    else:
        rows = old_plan_at(prev.actions, index, prev.horizon - 1)
        horizon = delay
    leftover = np.zeros_like(prev.actions, dtype=np.float32)
    leftover[:, :action_dim] = rows[:, :action_dim]
    return GuidePlan(leftover, delay, max(delay, horizon), float(latency_s))


class RtcPlanner:
    """Thread-safe: guides are built in the instances' threads, chunks remembered under the
    serving core's lock. Guides go to the tasks with `chunk_merge: rtc`; the latency samples and
    the horizon's floor (fit_horizon) serve every task it is given."""

    def __init__(self, settings: Mapping[str, ChunkMergeConfig]):
        self.merges = dict(settings)  # task id -> its chunk_merge, every task
        self.settings = {k: v for k, v in settings.items() if v.rtc}  # the tasks that use rtc
        self._sent: dict[str, SentChunk] = {}
        self._latency: dict[str, deque] = {}
        self._sampled: dict[str, int] = {}  # robot -> round whose latency is recorded
        self._lock = threading.Lock()
        self.stats: Counter = Counter()

    def enabled(self, task_id: str) -> bool:
        return task_id in self.settings

    def plan(self, obs: ObservationData, action_dim: int, control_period: float) -> Optional[GuidePlan]:
        """The guide plan for this observation's chunk, or None (why: counted in stats)."""
        cfg = self.settings.get(obs.task_id)
        if cfg is None:
            return None
        with self._lock:
            prev = self._sent.get(obs.robot_id)
            why = self._why_not(obs, prev, control_period)
            if why is None:
                self._sample_latency(obs, prev, cfg)
                lat = self._latency.get(obs.robot_id)
                if not lat:
                    why = "no_latency"
            if why is not None:
                self.stats[why] += 1
                return None
            latency = max(lat)
            self.stats["guided"] += 1
        return plan_guide(prev, obs.stamp, latency, action_dim, cfg)

    @staticmethod
    def _why_not(obs: ObservationData, prev: Optional[SentChunk], control_period: float) -> Optional[str]:
        if prev is None:
            return "no_previous_chunk"
        if obs.executing_round_id != prev.round_id:
            return "not_executing_previous"  # a hold, a refused or lost chunk, a restart
        if not math.isclose(prev.dt, control_period, rel_tol=1e-6) or obs.stamp <= prev.stamp:
            return "timing_changed"
        return None

    def _sample_latency(self, obs: ObservationData, prev: SentChunk, cfg: ChunkMergeConfig) -> None:
        if self._sampled.get(obs.robot_id) == prev.round_id or not obs.exec_phase_start > prev.stamp:
            return
        self._sampled[obs.robot_id] = prev.round_id
        lat = self._latency.setdefault(obs.robot_id, deque(maxlen=cfg.latency_window))
        lat.append(obs.exec_phase_start - prev.stamp)

    def guide(self, obs: ObservationData, action_dim: int, control_period: float):
        """The engine.rtc.RtcGuide for this observation's chunk, or None."""
        p = self.plan(obs, action_dim, control_period)
        if p is None:
            return None
        import torch

        from physai_ros.engine.rtc import RtcGuide

        cfg = self.settings[obs.task_id]
        return RtcGuide(torch.from_numpy(p.leftover), p.delay, p.execution_horizon, cfg.schedule,
                        cfg.max_guidance_weight, action_dim, cfg.jacobian)

    def attach(self, inp, obs: ObservationData, reg):
        """The engine input `inp` of `obs` with its guide, when its task uses rtc and one applies."""
        if obs.task_id not in self.settings:
            self.observe(obs, reg.control_period)
            return inp
        g = self.guide(obs, reg.action_dim, reg.control_period)
        return inp if g is None else dataclasses.replace(inp, rtc=g)

    def observe(self, obs: ObservationData, control_period: float) -> None:
        """A latency sample from an observation of a task without rtc (`plan` takes those of
        rtc tasks): capture -> arrival of the round the controller executes."""
        cfg = self.merges.get(obs.task_id)
        if cfg is None or obs.task_id in self.settings:
            return
        with self._lock:
            prev = self._sent.get(obs.robot_id)
            if self._why_not(obs, prev, control_period) is None:
                self._sample_latency(obs, prev, cfg)

    def fit_horizon(self, obs: ObservationData, chunk):
        """The chunk with its horizon raised to the inference delay d of the robot's measured
        latency L (d = floor(L / dt) + 2, at most the chunk), whatever its merge rule: a chunk
        lands L after its capture, so a horizon of H actions with H dt <= L is all due before it
        lands, and the controller refuses it as expired. Real-time chunking states the same
        constraint (the execution horizon covers at least the delay). Seen in bench/rtc.py at
        636 ms with the confidence horizon's minimum of 6 actions at 10 Hz: 77 % of the rtc
        chunks expired on arrival and no episode succeeded (0/50; at 518 ms none expired), and at
        the same 636 ms the crossfade's chunks expired too (0/20)."""
        if obs.task_id not in self.merges or chunk.status != STATUS_OK or chunk.error or chunk.dt <= 0:
            return chunk
        with self._lock:
            lat = self._latency.get(obs.robot_id)
            if not lat:
                return chunk
            need = inference_delay(max(lat), chunk.dt, int(chunk.actions.shape[0]))
            if chunk.horizon >= need:
                return chunk
            self.stats["horizon_raised_to_delay"] += 1
        return dataclasses.replace(chunk, horizon=need)

    def answer(self, obs: ObservationData, actions: np.ndarray, chunk):
        """An answered chunk (the engine's normalised, padded actions on the host + the
        ActionChunkData to send): its horizon fitted (fit_horizon), and remembered if it is OK.
        Returns the chunk to send."""
        chunk = self.fit_horizon(obs, chunk)
        if obs.task_id in self.merges and chunk.status == STATUS_OK and not chunk.error:
            self.remember(obs, actions, chunk.dt, chunk.horizon)
        return chunk

    def remember(self, obs: ObservationData, actions: np.ndarray, dt: float, horizon: int) -> None:
        """The chunk just answered for `obs` (actions: the engine's normalised, padded output)."""
        if obs.task_id not in self.merges:
            return
        # Only rtc tasks guide from the actions; the others keep the round's timing alone (their
        # latency samples for the horizon floor), not a copy of every chunk.
        kept = np.array(actions, dtype=np.float32, copy=True) if obs.task_id in self.settings else _NO_ACTIONS
        sent = SentChunk(int(obs.round_id), float(obs.stamp), float(dt), int(horizon), kept)
        with self._lock:
            old = self._sent.get(obs.robot_id)
            if old is None or sent.round_id >= old.round_id:
                self._sent[obs.robot_id] = sent

    def forget(self, robot_id: str) -> None:
        with self._lock:
            for d in (self._sent, self._latency, self._sampled):
                d.pop(robot_id, None)
