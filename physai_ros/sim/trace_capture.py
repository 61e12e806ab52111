"""Task traces from a running fleet: what `physai-fleet --record-trace` writes.

An observer of a robot's topics sees, per round, the request (Observation: round id, capture
stamp, actions still queued when it was sent) and the answer (ActionChunk: the same round id,
horizon, dt, server queue and inference times), and from execution_info which round the
controller is executing. FleetTraceCapture turns that into one TaskTrace per robot in the
physai-trace/1 format (traces.py), through TraceRecorder:
  horizon            actions the robot executed from the chunk. The chunk's horizon is what it
                     was told to execute, but the controller times action k at capture + k*dt
                     (so actions due before the chunk arrived are skipped) and the next chunk
                     replaces the rest when it comes. When execution_info gave the execution
                     start of this round and of the next one: round((next start - start) / dt),
                     in [1, chunk horizon]; otherwise (last round, unseen start) the chunk horizon.
  trigger_remaining  with a measured execution: horizon minus the actions executed before the
                     robot's next request was seen; otherwise that request's actions_remaining,
                     capped at the horizon. 0 for the last round (the recorded task ends there).
  timing             generation_s = inference_ms, queue_s = queue_ms, latency_s = capture stamp ->
                     chunk seen by the observer, exec_s = horizon x dt, chunk_horizon
Only chunks that answered OK count; a round the controller never executed (it saw a later round
executing) is dropped. Everything else that does not fit is counted by reason, never raised.
No rclpy here: the monitor node decodes the messages (physai_ros/ros/codecs) and hands over the
plain ObservationData and ActionChunkData.
"""
from __future__ import annotations

import bisect
import math
import statistics
from collections import Counter
from dataclasses import dataclass, field
from typing import Any, Optional

from physai_ros.protocol.chunk import STATUS_OK, ActionChunkData, is_hold_chunk
from physai_ros.protocol.observation import ObservationData
from physai_ros.sim.traces import TraceRecorder, TraceSet


@dataclass(frozen=True)
class _SeenRequest:
    round_id: int
    task_id: str
    capture_s: float
    received_s: float
    actions_remaining: int
    control_period: float
    refresh: bool


@dataclass(frozen=True)
class _SeenChunk:
    round_id: int
    task_id: str
    horizon: int
    dt: float
    capture_s: float
    received_s: float
    queue_ms: float
    inference_ms: float


@dataclass
class _Robot:
    requests: dict[int, _SeenRequest] = field(default_factory=dict)
    chunks: dict[int, _SeenChunk] = field(default_factory=dict)
    executed: set[int] = field(default_factory=set)
    exec_start: dict[int, float] = field(default_factory=dict)  # round -> first action committed


def _finite(*vals: float) -> bool:
    return all(math.isfinite(v) for v in vals)


class FleetTraceCapture:
    """Collects the events of every robot; trace_set() builds the traces at the end (the
    observer may see round j+1's request before round j's chunk, so rounds are matched by id)."""

    def __init__(self, robots: list[str], t0: float, meta: Optional[dict[str, Any]] = None) -> None:
        self.t0 = t0
        self.meta = dict(meta or {})
        self._robots = {r: _Robot() for r in robots}
        self.ignored: Counter = Counter()       # reason -> messages not used

    def on_request(self, robot: str, obs: ObservationData, received_s: float) -> None:
        """An observation seen on `robot`'s topic at `received_s`."""
        r = self._robots.get(robot)
        if r is None or (obs.robot_id and obs.robot_id != robot):
            self.ignored["wrong_robot"] += 1
            return
        req = _SeenRequest(int(obs.round_id), str(obs.task_id), float(obs.stamp), float(received_s),
                           int(obs.actions_remaining), float(obs.control_period), bool(obs.refresh))
        if req.round_id < 1 or req.actions_remaining < 0 or not _finite(req.capture_s, req.control_period):
            self.ignored["bad_request"] += 1
            return
        if req.round_id in r.requests:
            # a refresh (same round, newer frame) or a duplicate: the trigger was the first send
            self.ignored["refresh" if req.refresh else "duplicate_request"] += 1
            return
        r.requests[req.round_id] = req

    def on_chunk(self, robot: str, chunk: ActionChunkData, received_s: float) -> None:
        """A chunk seen on `robot`'s topic at `received_s`."""
        r = self._robots.get(robot)
        if r is None or (chunk.robot_id and chunk.robot_id != robot):
            self.ignored["wrong_robot"] += 1
            return
        if is_hold_chunk(chunk.status, chunk.error, chunk.engine_instance):
            self.ignored["hold_chunk"] += 1
            return
        if chunk.status != STATUS_OK:
            self.ignored["not_ok"] += 1
            return
        ch = _SeenChunk(int(chunk.round_id), str(chunk.task_id), int(chunk.horizon), float(chunk.dt),
                        float(chunk.stamp), float(received_s), float(chunk.queue_ms), float(chunk.inference_ms))
        num_actions = int(chunk.actions.shape[0]) if chunk.actions.ndim == 2 else 0
        if not (1 <= ch.horizon <= num_actions) or not _finite(ch.dt, ch.capture_s, ch.queue_ms, ch.inference_ms) \
                or ch.dt <= 0 or ch.queue_ms < 0 or ch.inference_ms < 0:
            self.ignored["bad_chunk"] += 1
            return
        if ch.round_id in r.chunks:
            self.ignored["duplicate_chunk"] += 1
            return
        r.chunks[ch.round_id] = ch

    def on_executing(self, robot: str, executing_round_id: int, exec_phase_start: float = math.nan) -> None:
        r = self._robots.get(robot)
        if r is None or executing_round_id <= 0:
            return
        rid = int(executing_round_id)
        r.executed.add(rid)
        if math.isfinite(exec_phase_start) and exec_phase_start > 0:
            r.exec_start.setdefault(rid, float(exec_phase_start))

    def trace_set(self) -> TraceSet:
        """One task per robot with at least one usable round; robots without are listed in
        meta["robots_without_rounds"]."""
        rec = TraceRecorder({**self.meta, "source": self.meta.get("source", "physai-fleet --record-trace")})
        empty, dropped = [], Counter()  # dropped: OK chunks left out of the traces, by reason
        source: Counter = Counter()     # where each round's horizon came from
        for name, r in self._robots.items():
            last_exec = max(r.executed, default=0)
            ids = []
            for rid in sorted(r.chunks):
                if rid < last_exec and rid not in r.executed:
                    dropped["not_executed"] += 1  # refused by the controller or superseded
                else:
                    ids.append(rid)
            if not ids:
                empty.append(name)
                continue
            later = sorted(r.requests)
            first = r.chunks[ids[0]]
            dts = [r.chunks[i].dt for i in ids]
            task_id = f"{name}/{first.task_id}" if first.task_id else name
            first_seen = min([first.capture_s] + [q.received_s for q in r.requests.values()])
            rec.begin_task(task_id, name, statistics.median(dts), round(max(0.0, first_seen - self.t0), 6))
            for k, rid in enumerate(ids):
                ch = r.chunks[rid]
                i = bisect.bisect_right(later, rid)
                nxt = r.requests[later[i]] if i < len(later) else None
                start = r.exec_start.get(rid)
                end = r.exec_start.get(ids[k + 1]) if k + 1 < len(ids) else None
                if start is not None and end is not None and end > start:
                    h = min(ch.horizon, max(1, round((end - start) / ch.dt)))
                    source["executed"] += 1
                else:
                    h = ch.horizon
                    source["chunk"] += 1
                if nxt is None or k + 1 == len(ids):
                    trig = 0  # the trace's task ends with its last round: nothing is triggered from it
                elif start is not None:
                    trig = h - min(h, max(0, round((nxt.received_s - start) / ch.dt)))
                else:
                    trig = min(nxt.actions_remaining, h)
                rec.record_round(task_id, h, trig,
                                 generation_s=ch.inference_ms / 1e3, queue_s=ch.queue_ms / 1e3,
                                 latency_s=max(0.0, ch.received_s - ch.capture_s),
                                 exec_s=h * ch.dt, chunk_horizon=ch.horizon)
            rec.end_task(task_id)
        ts = rec.trace_set()
        ts.meta = {**ts.meta, "robots_without_rounds": empty, "ignored_messages": dict(self.ignored),
                   "dropped_rounds": dict(dropped), "horizon_source": dict(source)}
        return ts
