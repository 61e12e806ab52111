"""Streaming service of the policy server (realtime-vla section 6), without ROS.

Robots whose fleet.yaml task has `mode: streaming` get a slot in the shared streams of one
`StreamingEngine` (VLM stream + action-expert stream; physai_ros.engine.streaming.stream_engine). The policy
server node feeds this service plain data and publishes what it hands back:

- `admit(reg, task)` at registration: a slot, or (no slot free) the `server.streaming.when_full`
  policy: `chunked` (accepted, served by the chunked path; the reply's reason says so) or
  `refuse` (registration refused with reason `streaming_capacity`). First come, first served:
  a robot keeps its slot until it leaves, so a running stream is never preempted.
- `on_observation(obs)`: validated like a chunked observation (same reasons, counted per robot),
  preprocessed into the VLM stream's input (the first one adds the robot to the streams and
  starts them); the joint state rides along as the action expert's state.
- `on_wrench(robot_id, wrench, stamp)`: the newest force/torque sample, at its native rate.
- Segments: the action-expert thread's StreamSegments are moved to the ROS clock, unnormalised
  and published at most `segment_rate_hz` per robot. Committed nodes are sent exactly once, so a
  published message carries every node committed since the previous one plus the newest
  tentative nodes (`SegmentMerger`).
- `release(robot_id)` / `reap(now)`: a robot that re-registers without streaming, or is silent
  for `timeout_s`, loses its slot at once; the streams stop when no robot is left and start again
  (fresh windows) with the next one.

Times: the engine runs on time.perf_counter (monotonic). ROS time = stream time + offset, with
the offset sampled at each start and rounded to the node grid (1 / node_hz), so segment nodes
land exactly on the trajectory buffer's 480 Hz grid; the rounding costs at most half a node
period (1 ms) of absolute time error, the same for every node.
"""
from __future__ import annotations

import math
import threading
import time
from collections import Counter, OrderedDict
from dataclasses import dataclass, field
from typing import Any, Callable, Optional

from physai_ros.config.fleet import FleetConfig, FleetConfigError
from physai_ros.config.server import StreamingServerConfig
from physai_ros.config.task import TaskConfig
from physai_ros.protocol.observation import ObservationData
from physai_ros.protocol.registration import RobotRegistration
from physai_ros.protocol.segment import TrajectorySegmentData
from physai_ros.serving.action_runner import ActionModelRunner
from physai_ros.serving.compute_priority import ChunkedCompute
from physai_ros.serving.streaming.segments import SegmentMerger, merge_segments
from physai_ros.serving.validation import ObservationValidator, Refusal

STREAMING_CAPACITY = "streaming_capacity"
CHUNKED_FALLBACK = "chunked"  # reason prefix of an accepted registration served chunked
STREAMING = "streaming"  # reason prefix of an accepted registration served by the streams
NOT_STREAMING = "not_streaming"
BAD_WRENCH = "wrench"
_ROUND_MEMORY = 256  # capture time -> round id entries kept per robot


@dataclass(frozen=True)
class Admission:
    accepted: bool
    streaming: bool
    reason: str = ""


@dataclass
class _Slot:
    reg: RobotRegistration
    task: TaskConfig
    merger: SegmentMerger
    added: bool = False  # in the engine's robot table (after its first observation)
    last_input: float = 0.0  # ROS seconds of the newest observation or wrench
    rounds: "OrderedDict[float, int]" = field(default_factory=OrderedDict)
    segment_id: int = 0
    segments: int = 0
    nodes_committed: int = 0
    late_nodes: int = 0
    last_round: int = 0


class StreamingService:
    def __init__(self, core, cfg: StreamingServerConfig, publish: Callable[[TrajectorySegmentData], None],
                 runner: ActionModelRunner, max_observation_age_s: float = 2.0,
                 ros_clock: Callable[[], float] = time.time,
                 engine_factory: Optional[Callable[..., Any]] = None, log: Callable[[str], None] = print,
                 chunked: Optional[ChunkedCompute] = None):
        """runner: the action model's runner, the chunked path's own (one way from an
        observation to engine inputs and from model actions to robot units). chunked: local chunked
        batches, which each stream waits for (cfg.*_waits_for_chunked_s; serving.compute_priority)."""
        from physai_ros.engine.streaming.stream_engine import StreamingEngine

        self.core = core  # StreamingCore (its clock is the stream clock)
        self.cfg = cfg
        self.publish = publish
        self.action_runner = runner
        self.ros_clock = ros_clock
        self.log = log
        self.validator = ObservationValidator(max_observation_age_s)
        # vlm only when not the default: a test's engine_factory need not know the keyword.
        extra = {"vlm": cfg.vlm} if cfg.vlm != "thread" else {}
        waits = {"vlm": cfg.vlm_waits_for_chunked_s, "tick": cfg.tick_waits_for_chunked_s}
        if chunked is not None and any(waits.values()):  # none at all on CUDA (both bounds 0)
            extra["wait_turn"] = lambda stream: chunked.wait_idle(waits[stream])
        self.engine = (engine_factory or StreamingEngine)(core, on_segment=self._on_segment, **extra)
        self.offset_s = self._offset()
        self._slots: dict[str, _Slot] = {}
        self._lock = threading.RLock()
        self.refused: Counter = Counter()  # admissions: reason -> count
        self.released: Counter = Counter()  # why slots were freed
        self.publish_errors = 0
        self.starts = 0
        # Highest round id published per robot, kept across its visits: a robot client that
        # restarts counts its rounds from 2 again, but its controller refuses decreasing ids.
        self._published_round: dict[str, int] = {}

    # ---------------------------------------------------------------- clocks
    def _offset(self) -> float:
        hz = self.core.config.node_hz
        return round((self.ros_clock() - self.core.clock()) * hz) / hz

    def to_ros(self, t_stream: float) -> float:
        return t_stream + self.offset_s

    def to_stream(self, t_ros: float) -> float:
        return t_ros - self.offset_s

    # ---------------------------------------------------------------- slots
    @property
    def capacity(self) -> int:
        return self.cfg.slots

    def streaming_robots(self) -> list[str]:
        with self._lock:
            return sorted(self._slots)

    def is_streaming(self, robot_id: str) -> bool:
        with self._lock:
            return robot_id in self._slots

    def admit(self, reg: RobotRegistration, task: TaskConfig, now: Optional[float] = None) -> Admission:
        """Decide at registration whether `reg` is served by the streams."""
        now = self.ros_clock() if now is None else now
        with self._lock:
            if task.mode != "streaming" or not reg.streaming:
                if reg.robot_id in self._slots:  # switched to a chunked task
                    self.release(reg.robot_id, "left_streaming")
                return Admission(True, False)
            slot = self._slots.get(reg.robot_id)
            if slot is not None:  # periodic re-registration: keep the slot (and its stream)
                slot.reg, slot.task, slot.last_input = reg, task, now
                self.validator.last_round[reg.robot_id] = max(
                    self.validator.last_round.get(reg.robot_id, 0), reg.last_round_id)
                return Admission(True, True, self._granted())
            if len(self._slots) >= self.cfg.slots:
                why = (f"all {self.cfg.slots} streaming slot(s) taken by "
                       f"{', '.join(sorted(self._slots))}")
                self.refused[STREAMING_CAPACITY] += 1
                if self.cfg.when_full == "refuse":
                    return Admission(False, False, f"{STREAMING_CAPACITY}: {why}")
                return Admission(True, False, f"{CHUNKED_FALLBACK}: {why}; served chunked")
            if len(reg.joint_names) != reg.action_dim:
                return Admission(False, False, "bad_registration: streaming needs one joint name per action")
            self._slots[reg.robot_id] = _Slot(reg, task, SegmentMerger(task.segment_rate_hz), last_input=now,
                                              last_round=self._published_round.get(reg.robot_id, 0))
            self.validator.reset_robot(reg.robot_id, reg.last_round_id)
            return Admission(True, True, self._granted())

    def _granted(self) -> str:
        # The client streams only on this explicit answer: a server without streaming tasks
        # (or an older one) accepts with an empty reason, and the robot then stays chunked.
        return f"{STREAMING}: {len(self._slots)}/{self.cfg.slots} slot(s) used"

    def release(self, robot_id: str, reason: str = "released") -> bool:
        """Free a robot's slot now (the engine stops delivering its segments before this returns)."""
        with self._lock:
            slot = self._slots.pop(robot_id, None)
            if slot is None:
                return False
            self.released[reason] += 1
            if slot.added:
                try:
                    self.core.remove_robot(robot_id)
                except Exception as e:  # already gone: nothing left to free
                    self.log(f"streaming: removing {robot_id}: {e}")
            if not self._slots and self.engine.running:
                self.engine.stop()
            return True

    def reap(self, now: Optional[float] = None) -> list[str]:
        """Free the slots of robots silent for more than timeout_s. Returns their ids."""
        now = self.ros_clock() if now is None else now
        with self._lock:
            gone = [rid for rid, s in self._slots.items() if now - s.last_input > self.cfg.timeout_s]
            for rid in gone:
                self.release(rid, "timeout")
            return gone

    # ---------------------------------------------------------------- inputs
    def on_observation(self, obs: ObservationData, now: Optional[float] = None) -> Optional[Refusal]:
        """Newest frames + state for the VLM stream. Returns the refusal (counted) or None."""
        now = self.ros_clock() if now is None else now
        with self._lock:
            slot = self._slots.get(obs.robot_id)
            if slot is None:
                return self.validator.count(obs.robot_id, Refusal(NOT_STREAMING, f"robot {obs.robot_id!r} has no streaming slot"))
            refusal = self.validator.check(obs, slot.reg, now)
            if refusal is not None:
                return refusal
            try:
                inp = self.action_runner.prepare(obs, slot.reg)
            except (ValueError, KeyError) as e:
                return self.validator.count(obs.robot_id, Refusal("preprocessing", str(e)))
            captured = self.to_stream(obs.stamp)
            from physai_ros.engine.streaming.streams import StreamInputError

            try:
                if not slot.added:
                    self.core.add_robot(obs.robot_id, inp, action_dim=slot.reg.action_dim, captured_at=captured)
                    slot.added = True
                else:
                    self.core.update_observation(obs.robot_id, inp, captured_at=captured)
                    self.core.set_state(obs.robot_id, inp.state)
            except StreamInputError as e:
                return self.validator.count(obs.robot_id, Refusal("observation", str(e)))
            slot.rounds[captured] = int(obs.round_id)
            while len(slot.rounds) > _ROUND_MEMORY:
                slot.rounds.popitem(last=False)
            slot.last_input = now
            if not self.engine.running:
                self._start()
            return None

    def on_wrench(self, robot_id: str, wrench, stamp: float, now: Optional[float] = None) -> Optional[str]:
        """Newest force/torque sample (fx fy fz tx ty tz, stamp in ROS seconds); never waits for
        a tick. Returns why it was dropped, or None."""
        slot = self._slots.get(robot_id)  # dict read: no lock on the 480 Hz path
        if slot is None:
            self.refused[NOT_STREAMING] += 1
            return f"{NOT_STREAMING}: robot {robot_id!r} has no streaming slot"
        if not slot.added:
            return "waiting_for_observation"  # its slot joins the streams with its first frame
        from physai_ros.engine.streaming.streams import StreamInputError

        try:
            self.core.set_wrench(robot_id, wrench, self.to_stream(stamp) if stamp > 0 else None)
        except StreamInputError as e:
            self.validator.count(robot_id, Refusal(BAD_WRENCH, str(e)))
            return f"{BAD_WRENCH}: {e}"
        slot.last_input = self.ros_clock() if now is None else now
        return None

    # ---------------------------------------------------------------- streams
    def _start(self) -> None:
        import torch

        # Process-wide: the tick is ~150 tiny ops, for which extra intra-op threads only add
        # synchronisation (docs/streaming.md).
        torch.set_num_threads(self.cfg.torch_threads)
        self.offset_s = self._offset()
        self.engine.start()
        self.starts += 1

    def stop(self) -> None:
        """Stop the streams (slots are kept; the next observation starts them again)."""
        with self._lock:
            if self.engine.running:
                self.engine.stop()

    def close(self, timeout: float = 10.0) -> None:
        """Stop the streams (waiting at most `timeout` s; RuntimeError when a thread is still
        running then), then free the slots. Stopping first keeps the wait to one bounded join:
        freeing the last slot would stop the engine with its own timeout."""
        with self._lock:
            if self.engine.running:
                self.engine.stop(timeout)
            for rid in list(self._slots):
                self.release(rid, "shutdown")

    def _on_segment(self, seg) -> None:
        """Action-expert thread, under the engine's robot-table lock: merge and maybe publish."""
        slot = self._slots.get(seg.robot_id)
        if slot is None:
            return
        for group in slot.merger.add(seg, seg.tick_time):
            self._publish(slot, group)

    def _publish(self, slot: _Slot, group: list) -> None:
        pos, committed = merge_segments(group)
        last = group[-1]
        reg = slot.reg
        round_id = slot.rounds.get(last.observation_time, slot.last_round)
        slot.last_round = max(slot.last_round, round_id)  # never decreases (buffer rule)
        self._published_round[reg.robot_id] = slot.last_round
        out = TrajectorySegmentData(
            robot_id=reg.robot_id, round_id=slot.last_round, segment_id=slot.segment_id,
            joint_names=tuple(reg.joint_names), start_time=self.to_ros(group[0].start_time), dt=last.dt,
            positions=self.action_runner.unnormalize(pos, reg.action_dim), committed=committed,
            tick_time=self.to_ros(last.tick_time),
            wrench_stamp=self.to_ros(last.wrench_stamp) if math.isfinite(last.wrench_stamp) else math.nan,
            ticks_merged=len(group))
        slot.segment_id += 1
        slot.segments += 1
        slot.nodes_committed += int(committed.sum())
        slot.late_nodes += sum(int(p.late_nodes) for p in group)
        try:
            self.publish(out)
        except Exception as e:  # a failing publisher (shutdown) must not kill the stream
            self.publish_errors += 1
            self.log(f"streaming: publishing a segment for {reg.robot_id} failed: {e}")

    # ---------------------------------------------------------------- reporting
    def diagnostics(self) -> dict[str, Any]:
        with self._lock:
            robots = {rid: {"slot_joined_streams": s.added, "segments": s.segments,
                            "nodes_committed": s.nodes_committed, "late_nodes": s.late_nodes,
                            "round_id": s.last_round,
                            "refused": dict(self.validator.refused.get(rid, Counter()))}
                      for rid, s in self._slots.items()}
            m = self.engine.metrics() if self.engine.started_at is not None else {}
            out = {"slots": self.cfg.slots, "streaming_robots": sorted(self._slots), "running": self.engine.running,
                   "starts": self.starts, "admissions_refused": dict(self.refused), "released": dict(self.released),
                   "publish_errors": self.publish_errors, "engine_errors": self.engine.error_count,
                   "running_s": m.get("duration_s")}
            # Counts since the streams started, so a reader can take rates over its own window.
            keys = ("vlm_hz", "ae_hz", "missed_tick_fraction", "ticks", "vlm_passes", "scheduled_ticks", "missed_ticks",
                    "vlm_waits", "vlm_waited_s", "tick_waits", "tick_waited_s", "ae_scheduling")
            return {**out, **{k: m.get(k) for k in keys}, "robots": robots}


def streaming_tasks(fleet: FleetConfig) -> list[str]:
    return sorted(n for n, t in fleet.tasks.items() if t.mode == "streaming")


def can_share(fleet: FleetConfig, chunked) -> bool:
    """Whether the streams can run over the chunked engine's prepared model: a fast pi0 model,
    the VLM on a thread (a VLM process builds its own copy), and no force projection to take
    from the checkpoint (the chunked engine does not keep `force_proj.*`)."""
    from physai_ros.engine.streaming.expert import StreamingExpert

    srv, sc = fleet.server, fleet.server.streaming
    if sc.vlm != "thread" or not StreamingExpert.can_run_over(chunked):
        return False
    if sc.force != "checkpoint" or srv.model.preset is not None:
        return True
    from physai_ros.engine.checkpoint.format import weight_keys
    from physai_ros.engine.streaming.force_token import FORCE_KEYS
    from physai_ros.serving.startup.preflight import checkpoint_dir

    return not set(FORCE_KEYS) & set(weight_keys(checkpoint_dir(fleet)))


def build_streaming_service(fleet: FleetConfig, publish: Callable[[TrajectorySegmentData], None], runner: ActionModelRunner,
                            ros_clock: Callable[[], float] = time.time, log: Callable[[str], None] = print,
                            chunked=None, chunked_compute: Optional[ChunkedCompute] = None) -> StreamingService:
    """The streams for fleet.yaml's server.streaming over the server's model (the same weights
    as the chunked engine: the preset's seeded random weights, or the checkpoint's). With
    `chunked` (the server's first local engine) they run over its prepared model where
    `can_share` says they can, so the weights are held once; otherwise they load their own."""
    from physai_ros.engine.streaming.streams import StreamingConfig, StreamingCore
    from physai_ros.engine.streaming.expert import StreamingExpert

    srv, sc = fleet.server, fleet.server.streaming
    force = "random" if sc.force == "random" else None
    if sc.vlm == "process" and srv.device != "cpu":
        raise FleetConfigError(f"server.streaming.vlm: process runs on the CPU only (server.device is {srv.device!r}; "
                               "a CUDA KV cache would need IPC handles): use vlm: thread")
    if chunked is not None and chunked.config.policy == "pi0" and can_share(fleet, chunked):
        engine, expert = StreamingExpert.over(chunked, force=force, seed=srv.model.seed, tick=sc.tick)
    else:
        engine, expert = _own_model(fleet, force)
    if sc.force == "none":
        expert.force = None
    core = StreamingCore(engine, expert, StreamingConfig(
        vlm_hz=sc.vlm_hz, ae_hz=sc.ae_hz, action_hz=sc.action_hz, steps_per_token=sc.steps_per_token,
        max_robots=sc.slots, ae_priority=sc.ae_priority))
    return StreamingService(core, sc, publish, runner, max_observation_age_s=srv.max_observation_age_s,
                            ros_clock=ros_clock, log=log, chunked=chunked_compute)


def _own_model(fleet: FleetConfig, force):
    """The streams' own copy of the served model's weights (preset or checkpoint)."""
    import torch

    from physai_ros.engine.streaming.expert import StreamingExpert
    from physai_ros.engine.types import Pi0Config

    srv, sc = fleet.server, fleet.server.streaming
    if srv.model.preset is not None:
        mcfg, weights = Pi0Config.preset(srv.model.preset), None
        source = f"preset {srv.model.preset!r}"
    else:
        from physai_ros.engine.checkpoint.loader import load_lerobot_checkpoint

        from physai_ros.serving.startup.preflight import checkpoint_dir
        source = str(checkpoint_dir(fleet))
        mcfg, weights = load_lerobot_checkpoint(source, **srv.model.load_args())
    if mcfg.policy != "pi0":
        # The streaming expert's per-token schedule is built around pi0's state token and
        # action-time MLP; its pi0.5 counterpart (adaRMS per token time) is not written.
        raise FleetConfigError(f"tasks.{streaming_tasks(fleet)[0]}.mode: streaming serves pi0 checkpoints only; "
                               f"{source} is {mcfg.policy} (set `mode: chunked`)")
    return StreamingExpert.build(mcfg, weights, force=force, device=srv.device, seed=srv.model.seed,
                                 tick=sc.tick, dtype=getattr(torch, srv.torch_dtype))
