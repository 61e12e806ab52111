"""Full streaming inference's logic (realtime-vla section 6, Figure 5): a VLM stream beside an
action-expert stream, force in the fast loop, gradual generation into a dense trajectory.

`StreamingCore` is driven by explicit calls (tests call it tick by tick): `vlm_pass(now)`
encodes every robot's newest observation into a KV cache and publishes it to a double buffer
(kv_exchange.py); `tick(now)` runs one action-expert step for every robot that has a row in the
newest cache, with its newest state and wrench, and returns one `StreamSegment` per robot
(committed + tentative nodes on the absolute node grid). stream_engine.StreamingEngine runs the
two on threads (or the VLM in its own process).

Robots are slots in the batch of the shared streams: `add_robot` takes a free slot (or raises
StreamCapacityError), `remove_robot` frees it at once; the next VLM pass leaves it out.
Bad input (wrong shapes, NaN, unknown robot) raises StreamInputError and is counted in
`stats`; it never reaches the streams.
"""
from __future__ import annotations

import math
import threading
import time
from dataclasses import dataclass, field
from typing import Callable, Dict, List, Optional

import numpy as np
import torch

from physai_ros.engine.engine import Pi0Engine
from physai_ros.engine.streaming.expert import ExpertKV, StreamingExpert
from physai_ros.engine.streaming.force_token import WrenchError, WrenchMailbox
from physai_ros.engine.streaming.kv_exchange import KVDoubleBuffer
from physai_ros.engine.streaming.schedule import StaggeredSchedule, dense_nodes
from physai_ros.engine.types import EngineInput


class StreamInputError(ValueError):
    """Input the streams cannot use; the message names the robot and the field."""


class StreamCapacityError(RuntimeError):
    """No free slot in the shared streams' batch."""


@dataclass(frozen=True)
class StreamingConfig:
    vlm_hz: float = 30.0
    ae_hz: float = 480.0
    node_hz: float = 480.0  # density of the output trajectory (the robot's buffer grid)
    action_hz: float = 50.0  # the checkpoint's control rate: token j is due j / action_hz later
    steps_per_token: Optional[float] = None  # ticks from noise to final; None = config.num_steps
    lead_ticks: float = 1.0  # a node is final this many ticks before it is due
    max_robots: int = 4
    stagger: bool = True  # False: all tokens share one flow time (one chunk; tests)
    # The AE thread's OS scheduling (Linux): 0 = ordinary; N > 0 = SCHED_FIFO priority N (root or
    # CAP_SYS_NICE; refused -> ordinary, said in metrics()["ae_scheduling"]). Ticks that overrun the
    # period then run back to back, bounded only by RT throttling (docs/streaming.md, "The tick").
    ae_priority: int = 0

    def schedule(self, num_steps: int) -> StaggeredSchedule:
        n = float(self.steps_per_token if self.steps_per_token is not None else num_steps)
        return StaggeredSchedule.for_rates(self.ae_hz, self.action_hz, n, self.lead_ticks, self.stagger)

    def validate(self, chunk_size: int, num_steps: int) -> None:
        for name in ("vlm_hz", "ae_hz", "node_hz", "action_hz", "lead_ticks"):
            v = getattr(self, name)
            if not (math.isfinite(v) and v >= 0) or (name != "lead_ticks" and v == 0):
                raise ValueError(f"StreamingConfig.{name} must be a positive finite number, got {v!r}")
        if not 0 <= int(self.ae_priority) <= 99:
            raise ValueError(f"StreamingConfig.ae_priority must lie in 0..99, got {self.ae_priority!r}")
        if self.max_robots < 1:
            raise ValueError(f"StreamingConfig.max_robots must be >= 1, got {self.max_robots}")
        self.schedule(num_steps).validate(chunk_size)


@dataclass
class StreamSegment:
    """One tick's output for one robot; maps 1:1 onto physai_ros_interfaces/TrajectorySegment
    and TrajectoryBuffer.insert_segment(start_time, dt, positions, committed, round_id, now).
    Node i is due at start_time + i * dt (stream clock seconds, the clock `now` was given in)."""

    robot_id: str
    round_id: int  # version of the KV snapshot (VLM pass) this tick read; never decreases
    segment_id: int
    start_time: float
    dt: float
    positions: np.ndarray  # float32 [N, action_dim], the model's normalised action space
    committed: np.ndarray  # bool [N]; True = final, never sent with another value
    tick_time: float  # the `now` of the tick
    wrench_version: int  # newest wrench sample the tick read (quick-loop tracing)
    observation_time: float  # capture time of the observation behind round_id (slow loop)
    late_nodes: int = 0  # committed nodes already due at tick_time
    wrench_stamp: float = math.nan  # capture time of that sample (stream clock; quick loop over ROS)

    @property
    def num_nodes(self) -> int:
        return int(self.positions.shape[0])

    def node_times(self) -> np.ndarray:
        return self.start_time + np.arange(self.num_nodes) * self.dt

    def insert_args(self, now: float) -> dict:
        """Keyword arguments for TrajectoryBuffer.insert_segment."""
        return dict(start_time=self.start_time, dt=self.dt, positions=self.positions,
                    committed_flags=self.committed, round_id=self.round_id, now=now)


@dataclass
class StreamStats:
    ticks: int = 0
    vlm_passes: int = 0
    segments: int = 0
    late_nodes: int = 0
    rejected: int = 0
    errors_by_field: Dict[str, int] = field(default_factory=dict)
    last_error: str = ""


class _Robot:
    """One robot's window of C action tokens and where its stream stands."""

    _serials = 0

    def __init__(self, robot_id: str, slot: int, obs: EngineInput, action_dim: int, seed: int,
                 noise: Optional[torch.Tensor], captured_at: float):
        self.robot_id = robot_id
        self.slot = slot
        # Cache rows are keyed by id and registration, so a robot that leaves and comes back
        # under the same id is never served from a cache of its previous visit.
        _Robot._serials += 1
        self.key = f"{robot_id}#{_Robot._serials}"
        self.obs = obs
        self.captured_at = captured_at
        self.state = obs.state.float().clone()
        self.action_dim = action_dim
        self.gen = torch.Generator().manual_seed(seed)
        self.first_noise = noise
        self.started = False
        self.segment_id = 0
        # Set by start():
        self.x = self.tau = self.finish = self.due = self.preview = None
        self.next_node_tick = 0

    def start(self, now: float, sched: StaggeredSchedule, chunk: int, adim: int, period: float, action_dt: float):
        """First tick: a window of fresh noise, token 0 final after span / period ticks."""
        self.x = self.first_noise.float().clone() if self.first_noise is not None else \
            torch.randn(chunk, adim, generator=self.gen)
        self.tau = torch.ones(chunk, dtype=torch.float64)
        idx = torch.arange(chunk, dtype=torch.float64)
        first_finish = now + sched.span_s - period
        self.finish = first_finish + idx * sched.stagger_s
        # Nodes between tokens j-1 and j need both final, so token j finishes one action
        # interval (plus the lead) before it is due: every node is then final lead_s early.
        self.due = first_finish + sched.lead_s + action_dt + idx * action_dt
        self.started = True

    def slide(self, action_dt: float, stagger: float, earliest_finish: float = -math.inf,
              node_hz: float = 480.0, lead_s: float = 0.0) -> None:
        """Drop token 0 once token 1 is final (every node between them is then committed and
        sent); a fresh noise token enters at the far end at tau = 1.

        A fresh token finishes no earlier than `earliest_finish` (the tick's time plus one
        span): on schedule that is always already true, but after a stall longer than the
        window the continued schedule would lie in the past, every fresh token would be final
        at the next tick and every node late. Pushing its finish (and due time) later leaves
        a longer interpolated stretch before it instead, so the stream catches up with time.
        Nodes of that stretch due before the fresh token can be final (+ lead) are skipped: they
        could only be sent late, and the controller holds its last command meanwhile."""
        while float(self.tau[1]) <= 0:
            finish = max(float(self.finish[-1]) + stagger, earliest_finish)
            delay = finish - (float(self.finish[-1]) + stagger)
            if delay > 0:
                self.next_node_tick = max(self.next_node_tick, math.ceil((finish + lead_s) * node_hz - 1e-6))
            self.x = torch.cat([self.x[1:], torch.randn(1, self.x.shape[1], generator=self.gen)])
            self.preview = torch.cat([self.preview[1:], self.x[-1:]])
            self.tau = torch.cat([self.tau[1:], torch.ones(1, dtype=torch.float64)])
            self.finish = torch.cat([self.finish[1:], torch.tensor([finish], dtype=self.finish.dtype)])
            self.due = torch.cat([self.due[1:], self.due[-1:] + action_dt + delay])


class StreamingCore:
    def __init__(self, engine: Pi0Engine, expert: StreamingExpert, config: StreamingConfig = StreamingConfig(),
                 clock: Callable[[], float] = time.perf_counter):
        cfg = engine.config
        config.validate(cfg.chunk_size, cfg.num_steps)
        self.engine, self.expert, self.config, self.clock = engine, expert, config, clock
        self.schedule = config.schedule(cfg.num_steps)
        self.period = 1.0 / config.ae_hz
        self.action_dt = 1.0 / config.action_hz
        self.kv = KVDoubleBuffer()
        self.wrench = WrenchMailbox(config.max_robots, engine.device)
        self.stats = StreamStats()
        self._robots: Dict[str, _Robot] = {}
        self._lock = threading.RLock()
        self._kv: Optional[ExpertKV] = None
        self._kv_key = None
        # VLM stream in its own process (StreamingEngine(vlm="process")): called with every
        # robot-table change, under the lock: ("set", key, slot, observation, captured_at) /
        # ("remove", key).
        self.vlm_sink: Optional[Callable] = None

    def _to_vlm(self, *msg) -> None:
        if self.vlm_sink is not None:
            self.vlm_sink(*msg)

    def vlm_table(self) -> list:
        """Every robot's ("set", ...) message, for a VLM process starting."""
        with self._lock:
            return [("set", r.key, r.slot, r.obs, r.captured_at) for r in self._robots.values()]

    # ------------------------------------------------------------------ bad input
    def _reject(self, robot_id, fieldname: str, msg: str) -> StreamInputError:
        with self._lock:
            self.stats.rejected += 1
            self.stats.errors_by_field[fieldname] = self.stats.errors_by_field.get(fieldname, 0) + 1
            self.stats.last_error = f"robot {robot_id!r}: {msg}"
        return StreamInputError(self.stats.last_error)

    def _get(self, robot_id) -> _Robot:
        r = self._robots.get(robot_id)
        if r is None:
            raise self._reject(robot_id, "robot_id", "unknown robot (not streaming)")
        return r

    def _check_obs(self, robot_id, obs) -> EngineInput:
        err = self.engine.check(obs)
        if err is not None:
            raise self._reject(robot_id, "observation", err)
        return obs

    def _check_state(self, robot_id, state) -> torch.Tensor:
        n = self.engine.config.max_state_dim
        try:
            s = torch.as_tensor(state, dtype=torch.float32).reshape(-1)
        except Exception as exc:
            raise self._reject(robot_id, "state", f"not numeric ({type(exc).__name__})") from None
        if s.shape != (n,) or not bool(torch.isfinite(s).all()):
            raise self._reject(robot_id, "state", f"expected {n} finite values, got {list(s.shape)}")
        return s

    # ------------------------------------------------------------------ robots
    @property
    def robot_ids(self) -> List[str]:
        with self._lock:
            return sorted(self._robots, key=lambda k: self._robots[k].slot)

    def slot_of(self, robot_id: str) -> int:
        return self._get(robot_id).slot

    def restart_robots(self) -> None:
        """Every robot starts a fresh window at its next tick (after the streams were stopped,
        its old tokens' finish times have passed). Nodes already committed are never sent again."""
        with self._lock:
            for r in self._robots.values():
                r.started = False
                r.first_noise = None

    def window(self, robot_id: str):
        """(due times [C], token values [C, action_dim], flow times [C]) of a robot's current
        window, copies; None before its first tick."""
        with self._lock:
            r = self._get(robot_id)
            if not r.started:
                return None
            return r.due.clone(), r.x[:, : r.action_dim].clone(), r.tau.clone()

    def add_robot(self, robot_id: str, observation: EngineInput, action_dim: Optional[int] = None,
                  seed: Optional[int] = None, noise: Optional[torch.Tensor] = None,
                  captured_at: Optional[float] = None) -> int:
        """Give a robot a slot. It is served from the first VLM pass that includes it."""
        cfg = self.engine.config
        adim = cfg.max_action_dim if action_dim is None else int(action_dim)
        if not 1 <= adim <= cfg.max_action_dim:
            raise self._reject(robot_id, "action_dim", f"must lie in 1..{cfg.max_action_dim}, got {action_dim}")
        if noise is not None and tuple(noise.shape) != (cfg.chunk_size, cfg.max_action_dim):
            raise self._reject(robot_id, "noise", f"expected [{cfg.chunk_size}, {cfg.max_action_dim}]")
        self._check_obs(robot_id, observation)
        with self._lock:
            if robot_id in self._robots:
                raise self._reject(robot_id, "robot_id", "already streaming")
            used = {r.slot for r in self._robots.values()}
            free = [s for s in range(self.config.max_robots) if s not in used]
            if not free:
                raise StreamCapacityError(f"all {self.config.max_robots} streaming slots are taken")
            slot = free[0]
            self.wrench.clear(slot)
            r = self._robots[robot_id] = _Robot(robot_id, slot, observation, adim,
                                                seed if seed is not None else 1000 + slot, noise,
                                                self.clock() if captured_at is None else captured_at)
            self._to_vlm("set", r.key, r.slot, r.obs, r.captured_at)
            return slot

    def remove_robot(self, robot_id: str) -> None:
        with self._lock:
            r = self._get(robot_id)
            del self._robots[robot_id]
            self.wrench.clear(r.slot)
            self._to_vlm("remove", r.key)

    def update_observation(self, robot_id: str, observation: EngineInput, captured_at: Optional[float] = None) -> None:
        self._check_obs(robot_id, observation)
        with self._lock:
            r = self._get(robot_id)
            r.obs = observation
            r.captured_at = self.clock() if captured_at is None else captured_at
            self._to_vlm("set", r.key, r.slot, r.obs, r.captured_at)

    def set_state(self, robot_id: str, state) -> None:
        s = self._check_state(robot_id, state)
        with self._lock:
            self._get(robot_id).state = s

    def set_wrench(self, robot_id: str, wrench, stamp: Optional[float] = None) -> int:
        """Newest force/torque sample (fx fy fz tx ty tz). Returns its version."""
        r = self._get(robot_id)  # no stream lock: a sample never waits for a tick
        try:
            return self.wrench.write(r.slot, wrench, self.clock() if stamp is None else stamp)
        except WrenchError as exc:
            raise self._reject(robot_id, "wrench", str(exc)) from None

    # ------------------------------------------------------------------ VLM stream
    def vlm_pass(self, now: Optional[float] = None) -> Optional[int]:
        """Encode every robot's newest observation; publish the cache. Returns its version."""
        with self._lock:
            robots = sorted(self._robots.values(), key=lambda r: r.slot)
            items = [(r.key, r.obs, r.captured_at) for r in robots]
        if not items:
            return None
        cache = self.engine.prefix([o for _, o, _ in items])
        now = self.clock() if now is None else now
        version = self.kv.publish(cache, [i for i, _, _ in items], [c for _, _, c in items], now)
        with self._lock:
            self.stats.vlm_passes += 1
        return version

    # ------------------------------------------------------------------ action-expert stream
    def tick(self, now: float) -> List[StreamSegment]:
        """One action-expert step at stream time `now` for every robot the newest cache covers.
        The lock is not held during the step: at pi0's widths back-to-back steps kept it (Python's
        lock is not fair) and starved the server's callbacks that feed the streams."""
        cfg, sched = self.engine.config, self.schedule
        with self._lock:
            with self.kv.read() as snap:
                if snap is None:
                    return []
                robots = [r for r in sorted(self._robots.values(), key=lambda r: r.slot)
                          if r.key in snap.robot_ids]
                if not robots:
                    return []
                key = (snap.version, tuple(r.key for r in robots))
                if key != self._kv_key:
                    rows = torch.tensor([snap.robot_ids.index(r.key) for r in robots])
                    self._kv = self.expert.prepare(snap.cache, rows)
                    self._kv_key = key
                round_id = snap.version
                captured = dict(zip(snap.robot_ids, snap.captured_at))
            for r in robots:
                if not r.started:
                    r.start(now, sched, cfg.chunk_size, cfg.max_action_dim, self.period, self.action_dt)
            tau = torch.stack([r.tau for r in robots])
            finish = torch.stack([r.finish for r in robots])
            tau_new = torch.minimum(sched.tau(finish, now), tau)
            x = torch.stack([r.x for r in robots])
            state = torch.stack([r.state for r in robots])
            wrench, versions, wstamps = self.wrench.read([r.slot for r in robots])
        x_new, preview = self.expert.step(self._kv, state, wrench, x, tau, tau_new)
        if x_new.device.type != "cpu":
            x_new, preview = x_new.cpu(), preview.cpu()
        out = []
        with self._lock:
            for i, r in enumerate(robots):
                if self._robots.get(r.robot_id) is not r:  # left (or left and came back) during the step
                    continue
                r.x, r.tau, r.preview = x_new[i], tau_new[i], preview[i]
                seg = self._emit(r, now, round_id, versions[i], captured.get(r.key, math.nan))
                if seg is not None:
                    seg.wrench_stamp = float(wstamps[i])
                    out.append(seg)
                if sched.sliding:
                    r.slide(self.action_dt, sched.stagger_s, now + sched.span_s - self.period,
                            self.config.node_hz, sched.lead_s)
            self.stats.ticks += 1
            self.stats.segments += len(out)
            self.stats.late_nodes += sum(s.late_nodes for s in out)
        return out

    def _emit(self, r: _Robot, now: float, round_id: int, wrench_version: int, obs_time: float) -> Optional[StreamSegment]:
        hz = self.config.node_hz
        due = r.due.numpy()
        first = max(r.next_node_tick, math.ceil(due[0] * hz - 1e-6))
        # Final tokens are sent as they are, the others as the clean-action estimate.
        ticks, pos, committed = dense_nodes(due, r.preview.numpy()[:, : r.action_dim], r.tau.numpy() <= 0, hz, first)
        if ticks.size == 0:
            return None
        ncommit = int(np.argmin(committed)) if not committed.all() else int(committed.size)
        if ncommit:
            r.next_node_tick = int(ticks[ncommit - 1]) + 1
        late = int(np.count_nonzero(ticks[:ncommit] / hz < now))
        seg = StreamSegment(r.robot_id, int(round_id), r.segment_id, float(ticks[0] / hz), 1.0 / hz,
                            pos.astype(np.float32), committed, float(now), int(wrench_version), float(obs_time), late)
        r.segment_id += 1
        return seg
