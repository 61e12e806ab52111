"""Trace-driven fleet simulator for scheduling studies (Kairos §5.1). No ROS, simulated time.

Each task replays a TaskTrace: the robot sends round 0's request when the task starts; when a
chunk arrives the robot executes its `horizon` actions (after finishing the previous chunk),
and sends the next request when `trigger_remaining` of them are still queued (asynchronous
inference at the recorded action index; 0 = synchronous). Requests go through a real
Scheduler (physai_ros.scheduler) to engine instances whose generation latency comes from
their latency-vs-batch profile (optionally with log-normal jitter). A task's latency is from
its first request to its last executed action, as in the paper.

online:  tasks arrive by a Poisson process, each on its own robot (run_online)
offline: a fleet of n robots works through a fixed list of tasks back to back (run_offline)
Everything random is drawn from `seed`, so a run is a pure function of its inputs.
"""
from __future__ import annotations

import heapq
import math
import random
import statistics
import time
from dataclasses import dataclass, field
from typing import Any, Optional, Sequence

from physai_ros.scheduler import EngineInstanceInfo, LatencyProfile, Request, make_scheduler
from physai_ros.sim.traces import TaskTrace


@dataclass
class InstanceSpec:
    instance_id: str
    tier: str
    profile: LatencyProfile
    network_rtt_s: float = 0.0
    max_batch: Optional[int] = None


@dataclass
class SimConfig:
    scheduler: str = "wait_ratio"
    scheduler_params: dict[str, Any] = field(default_factory=dict)
    instances: list[InstanceSpec] = field(default_factory=list)
    # One-way robot <-> server latency (Kairos §5.1: Wi-Fi 7, 2.5 ms base latency).
    client_link_s: float = 0.0025
    # Sigma of a log-normal factor on each batch's generation latency (0: the profile exactly).
    latency_jitter: float = 0.0
    seed: int = 0
    # Wall-clock time each schedule() call takes, keyed by pending count (not deterministic).
    measure_decisions: bool = False


@dataclass
class TaskResult:
    task_id: str
    robot_id: str
    start: float
    end: float
    rounds: int
    robot_idle_s: float       # time the robot had no action to execute before the task ended

    @property
    def latency(self) -> float:
        return self.end - self.start


@dataclass
class SimResult:
    tasks: list[TaskResult]
    scheduler_stats: dict[str, Any]
    decision_samples: list[tuple[int, float]]   # (pending requests, seconds) per schedule call
    dispatched_by_tier: dict[str, int]

    def summary(self) -> dict[str, float]:
        lat = sorted(t.latency for t in self.tasks)
        return {"tasks": len(lat), "avg_s": statistics.fmean(lat), "p25_s": percentile(lat, 25),
                "p50_s": percentile(lat, 50), "p95_s": percentile(lat, 95),
                "avg_robot_idle_s": statistics.fmean(t.robot_idle_s for t in self.tasks),
                "requests": sum(t.rounds for t in self.tasks),
                "makespan_s": max(t.end for t in self.tasks) - min(t.start for t in self.tasks)}


def percentile(sorted_vals: Sequence[float], q: float) -> float:
    """Linear-interpolated percentile of an already sorted list."""
    if not sorted_vals:
        return float("nan")
    k = (len(sorted_vals) - 1) * q / 100.0
    lo, hi = math.floor(k), math.ceil(k)
    return sorted_vals[lo] + (sorted_vals[hi] - sorted_vals[lo]) * (k - lo)


def poisson_arrivals(n: int, rate_per_s: float, rng: random.Random) -> list[float]:
    t, out = 0.0, []
    for _ in range(n):
        t += rng.expovariate(rate_per_s)
        out.append(t)
    return out


class _TaskRun:
    __slots__ = ("trace", "robot_id", "start", "round", "prev_e_end", "idle", "done")

    def __init__(self, trace: TaskTrace, robot_id: str, start: float) -> None:
        self.trace, self.robot_id, self.start = trace, robot_id, start
        self.round = 0
        self.prev_e_end = start      # the robot is idle from the start until its first chunk
        self.idle = 0.0
        self.done = False


class FleetSim:
    """One simulation run. Use run_online / run_offline rather than this class directly."""

    def __init__(self, config: SimConfig) -> None:
        if not config.instances:
            raise ValueError("SimConfig needs at least one engine instance")
        self.cfg = config
        self.rng = random.Random(config.seed)
        self.sched = make_scheduler(config.scheduler, **config.scheduler_params)
        self.instances = [EngineInstanceInfo(s.instance_id, s.tier, s.profile, s.network_rtt_s,
                                             0.0, s.max_batch) for s in config.instances]
        self._events: list[tuple[float, int, str, Any]] = []
        self._seq = 0
        self._runs: dict[str, _TaskRun] = {}
        self.results: list[TaskResult] = []
        self.decisions: list[tuple[int, float]] = []
        self.by_tier: dict[str, int] = {}
        self._idle_robots: list[str] = []
        self._backlog: list[TaskTrace] = []

    # ---- driving ----------------------------------------------------------------------
    def push(self, t: float, kind: str, data: Any) -> None:
        self._seq += 1
        heapq.heappush(self._events, (t, self._seq, kind, data))

    def run(self) -> SimResult:
        ev = self._events
        while ev:
            now = ev[0][0]
            while ev and ev[0][0] <= now:
                _, _, kind, data = heapq.heappop(ev)
                getattr(self, "_on_" + kind)(now, data)
            if self.sched.pending() and any(i.busy_until <= now for i in self.instances):
                self._schedule(now)
        stats = self.sched.stats()
        if stats.get("pending", 0) or any(not r.done for r in self._runs.values()):
            raise RuntimeError(f"simulation ended with unfinished work: {stats}")
        return SimResult(self.results, stats, self.decisions, self.by_tier)

    def _schedule(self, now: float) -> None:
        if self.cfg.measure_decisions:
            n = self.sched.pending()
            t0 = time.perf_counter()
            d = self.sched.schedule(now, self.instances)
            self.decisions.append((n, time.perf_counter() - t0))
        else:
            d = self.sched.schedule(now, self.instances)
        for rid in d.refresh_request_ids:
            # Server asks the robot; its fresh observation comes back one round trip later.
            self.push(now + 2 * self.cfg.client_link_s, "refresh", rid)
        for b in d.batches:
            inst = next(i for i in self.instances if i.instance_id == b.instance_id)
            gen = inst.profile.latency(len(b.request_ids))
            if self.cfg.latency_jitter > 0:
                gen *= math.exp(self.rng.gauss(0.0, self.cfg.latency_jitter))
            done = now + inst.network_rtt_s + gen
            inst.busy_until = done
            self.by_tier[inst.tier] = self.by_tier.get(inst.tier, 0) + len(b.request_ids)
            self.push(done, "batch_done", (b.request_ids, gen))

    # ---- events -----------------------------------------------------------------------
    def _on_task_start(self, now: float, data: tuple[TaskTrace, str]) -> None:
        trace, robot = data
        run = self._runs[trace.task_id] = _TaskRun(trace, robot, now)
        self._send_request(now, run, exec_start=None, remaining=0)

    def _send_request(self, now: float, run: _TaskRun, exec_start: Optional[float], remaining: int) -> None:
        self.push(now + self.cfg.client_link_s, "request", (run, exec_start, remaining, now))

    def _on_request(self, now: float, data: tuple) -> None:
        run, exec_start, remaining, captured = data
        tr = run.trace
        req = Request(request_id=f"{tr.task_id}#{run.round}", robot_id=run.robot_id,
                      task_id=tr.task_id, round_id=run.round, arrival_time=now,
                      obs_capture_time=captured, exec_phase_start=exec_start,
                      actions_remaining=remaining, control_period=tr.control_period)
        res = self.sched.submit(req, now)
        if not res.accepted:
            raise RuntimeError(f"simulator produced a rejected request: {res.reason}")

    def _on_refresh(self, now: float, rid: str) -> None:
        old = self.sched.request(rid)
        if old is None:
            return  # already dispatched after a refresh timeout
        fresh = Request(**{**old.__dict__, "obs_capture_time": now - self.cfg.client_link_s,
                           "refresh": True})
        self.sched.submit(fresh, now)

    def _on_batch_done(self, now: float, data: tuple) -> None:
        rids, gen = data
        for rid in rids:
            self.sched.on_completed(rid, now, gen)
            task_id, rnd = rid.rsplit("#", 1)
            self.push(now + self.cfg.client_link_s, "chunk", (self._runs[task_id], int(rnd)))

    def _on_chunk(self, now: float, data: tuple) -> None:
        run, rnd = data
        tr, p = run.trace, run.trace.control_period
        r = tr.rounds[rnd]
        e_start = max(now, run.prev_e_end)
        run.idle += e_start - run.prev_e_end
        e_end = e_start + r.horizon * p
        run.prev_e_end = e_end
        if rnd + 1 == len(tr.rounds):
            self.push(e_end, "task_end", run)
            return
        run.round = rnd + 1
        self.push(e_start + (r.horizon - r.trigger_remaining) * p, "issue", (run, e_start, r.trigger_remaining))

    def _on_issue(self, now: float, data: tuple) -> None:
        run, e_start, remaining = data
        self._send_request(now, run, e_start, remaining)

    def _on_task_end(self, now: float, run: _TaskRun) -> None:
        run.done = True
        self.sched.on_task_finished(run.trace.task_id)
        self.results.append(TaskResult(run.trace.task_id, run.robot_id, run.start, now,
                                       len(run.trace.rounds), run.idle))
        if self._backlog:
            self.push(now, "task_start", (self._backlog.pop(), run.robot_id))


def run_online(traces: Sequence[TaskTrace], arrivals: Sequence[float], config: SimConfig) -> SimResult:
    """Each task starts at its arrival time on its own robot."""
    if len(traces) != len(arrivals):
        raise ValueError("one arrival time per trace")
    sim = FleetSim(config)
    for tr, t in zip(traces, arrivals):
        sim.push(float(t), "task_start", (tr, f"robot_{tr.task_id}"))
    return sim.run()


def run_offline(traces: Sequence[TaskTrace], n_robots: int, config: SimConfig) -> SimResult:
    """n robots start together and take the next task from the list as soon as they finish."""
    if n_robots < 1:
        raise ValueError("n_robots must be >= 1")
    sim = FleetSim(config)
    sim._backlog = list(reversed(traces))
    for k in range(min(n_robots, len(traces))):
        sim.push(0.0, "task_start", (sim._backlog.pop(), f"robot_{k}"))
    return sim.run()
