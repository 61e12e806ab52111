"""Deterministic discrete-event trace simulator of a robot factory served by a GPU pool under one
FactorySchedule (ROSA §3.4 and §4.2): the schedule's placement, routing, batching and request
rates are replayed against GPU service-time models (bench/physai_bench/factory/profiles.py), so the ROSA
solver's schedule and the paper's baselines (bench/physai_bench/factory/baselines.py) are judged by the same
clock.

Robots (closed loop, ROSA §3.4.1's synchronous execution, Figure 4). Each served robot, from a
seeded random phase over its nominal cycle (1 / f_c when capped, else t_act):
  1. every H-th action (k % H == 0, H = system2_ratio) it sends a System 2 request and waits for
     the plan (blocking, eq. 4's l_S2 / H amortization);
  2. it sends a System 1 request, not before 1 / f_c after its previous System 1 send when the
     schedule caps its rate (Route.rate_hz finite and > 0, and SimConfig.cap_rates); the
     baselines carry rate_hz = inf (ROSA §4.1: they send as soon as they have an observation);
  3. on the chunk it executes for t_act seconds, then goes to 1.
Obligation components (safety, monitor) are independent open-loop periodic requests at the task's
freq_hz from a seeded phase, whether or not the previous one has answered.

Servers (bench/physai_bench/factory/queues.py), from the schedule's assignments grouped by server id (standbys
are not simulated):
  - System 1 alone: static batching - when idle it takes up to `batch` waiting requests (FIFO) and
    serves them together in s(k) for the k it took (no waiting for the batch to fill);
  - one VLM alone: continuous batching - an iteration admits waiting requests up to the engine's
    max_num_seqs and its prefill budget (prefills_per_iteration), costs decode_step(B running) + prefill of the newly admitted, and gives every
    running request one token; a request completes after its output_tokens iterations, so its
    latency grows with the concurrency it shares the GPU with;
  - (several assignments of the same model on one server count as one server of that model)
  - several models on one server (Baseline 1: one GPU per robot, time-shared): one FIFO
    queue, one request at a time, each at its isolated batch-1 time.
Network latency and fallbacks (stop and resend) are not modelled; every request is answered.

At `duration_s` robots stop sending; requests already sent are drained, so every sent request
completes exactly once (RequestTrace lets a test check that).

SLO-qualified action (ROSA §4.2: "a robot action is counted only when the latency and invocation
requirements introduced in §3.4 are satisfied"), defined here as: an action of robot r whose
System 1 request was sent at time t counts when
  (a) its System 1 latency <= the class's System 1 SLO;
  (b) if it waited on a System 2 request (the first action after each plan), that request's
      latency <= the System 2 SLO;
  (c) for every obligation component of r, the verdict in force at t - the latest request of that
      component issued at or before t - met its SLO (a late safety / monitor answer leaves the
      robot without a valid verdict for that period). Invocation rates hold by construction (the
      sim issues obligation requests at the task's freq_hz).
Throughputs count actions whose System 1 send time lies in [warmup_s, duration_s), divided by
duration_s - warmup_s. Per component: SLO attainment (fraction of requests sent in that window
answered within the SLO) and p50 / p99 latency.
"""
from __future__ import annotations

import math
from dataclasses import dataclass, field
from typing import Mapping

import numpy as np

from physai_bench.factory.queues import (ContinuousServer, RequestTrace, SharedServer, StaticServer, _Clock,
                                         isolated_s, run_arrivals, run_open_loop)
from physai_ros.scheduler.factory.types import (COMPONENTS, FactoryProblem,
                                                FactorySchedule)

# run_arrivals / run_open_loop / RequestTrace are re-exported: profiling and tests use them from here
__all__ = ["COMP_INDEX", "ComponentStats", "FactorySim", "RequestTrace", "SimConfig", "SimResult", "build_servers",
           "run_arrivals", "run_open_loop", "simulate"]
COMP_INDEX = {c: i for i, c in enumerate(COMPONENTS)}


@dataclass(frozen=True)
class SimConfig:
    duration_s: float = 60.0
    warmup_s: float = 5.0
    seed: int = 0
    cap_rates: bool = True  # False: ignore the schedule's System 1 rates (uncapped ablation)
    record: bool = False  # keep the per-request trace (tests)
    # physical execution time varies: t_act * U(1 - j, 1 + j). Without it, robots served in one
    # batch (or admitted in one VLM iteration) finish together and stay in lockstep, a convoy no
    # real cell keeps (mean t_act unchanged).
    t_act_jitter: float = 0.1
    # "interval": the next System 1 send not before 1 / f_c after the previous one (a robot that
    # waited on System 2 cannot catch up); "average": the n-th send not before start + n / f_c
    # (the rate eq. 4 amortizes: time lost waiting on a plan is made up afterwards)
    cap_mode: str = "interval"
    synchronized_start: bool = False  # True: every robot starts within one t_act and plans first (worst case)


@dataclass(frozen=True)
class ComponentStats:
    sent: int
    slo_attainment: float
    p50_s: float
    p99_s: float
    mean_s: float


@dataclass(frozen=True)
class SimResult:
    qualified_actions_per_s: float
    raw_actions_per_s: float
    robots_served: int
    robots_total: int
    components: Mapping[str, ComponentStats]
    qualified_per_class: Mapping[str, float]  # actions/s
    raw_per_class: Mapping[str, float]
    requests: int
    trace: RequestTrace | None = None
    max_s1_rate_per_robot: float = 0.0  # highest System 1 send rate of any robot (measured window)

    def summary(self) -> dict:
        return {"qualified_actions_per_s": round(self.qualified_actions_per_s, 2),
                "raw_actions_per_s": round(self.raw_actions_per_s, 2),
                "robots_served": self.robots_served, "robots_total": self.robots_total,
                "components": {c: {"slo_attainment": round(s.slo_attainment, 4),
                                   "p99_ms": round(s.p99_s * 1e3, 1), "p50_ms": round(s.p50_s * 1e3, 1),
                                   "sent": s.sent} for c, s in self.components.items()},
                "qualified_per_class": {k: round(v, 2) for k, v in self.qualified_per_class.items()}}


def build_servers(clock: _Clock, schedule: FactorySchedule, services: Mapping[str, object]) -> dict:
    by_server: dict[int, list] = {}
    for a in schedule.assignments:
        if a.standby_for is None:
            by_server.setdefault(a.server, []).append(a)
    servers = {}
    for sid, assigns in by_server.items():
        if len({a.model for a in assigns}) == 1:  # one model (possibly one entry per class)
            svc = services[assigns[0].model]
            batch = max(a.batch for a in assigns)
            servers[sid] = StaticServer(clock, svc, batch) if hasattr(svc, "service_s") else \
                ContinuousServer(clock, svc)
        else:
            servers[sid] = SharedServer(clock, {COMP_INDEX[a.component]: isolated_s(services[a.model])
                                                for a in assigns})
    return servers


@dataclass
class _Robot:
    index: int
    cls_index: int
    t_act: float
    horizon_h: int
    s1: object  # server
    s2: object | None
    s1_period: float  # 0: uncapped
    k: int = 0
    last_s1_send: float = -math.inf
    first_s1_send: float = 0.0
    sent_s1: int = 0
    waited_s2: int = -1
    actions: list = field(default_factory=list)  # (s1 rid, s2 rid or -1)


class FactorySim:
    def __init__(self, problem: FactoryProblem, schedule: FactorySchedule, services: Mapping[str, object],
                 config: SimConfig = SimConfig()) -> None:
        self.problem, self.schedule, self.config = problem, schedule, config
        self.clock = _Clock()
        self.servers = build_servers(self.clock, schedule, services)
        self.rng = np.random.default_rng(config.seed)
        self.robots: list[_Robot] = []
        self.robot_ids: list[str] = []
        self.obligations: dict[tuple[int, int], list[int]] = {}  # (robot, comp) -> rids in issue order
        self.slo: dict[tuple[int, int], float] = {}  # (class, comp) -> SLO
        routes = {(r.robot_id, r.component): r for r in schedule.routes}
        for ci, cls in enumerate(problem.classes):
            for spec in cls.components:
                self.slo[(ci, COMP_INDEX[spec.component])] = spec.slo_s
            for rid in cls.robot_ids:
                self._add_robot(ci, cls, rid, routes)

    def _add_robot(self, ci: int, cls, robot_id: str, routes: Mapping) -> None:
        s1 = routes.get((robot_id, "system1"))
        if s1 is None or s1.server not in self.servers:
            return  # not served by this schedule (dedicated baselines run out of GPUs)
        index = len(self.robots)
        capped = self.config.cap_rates and math.isfinite(s1.rate_hz) and s1.rate_hz > 0
        s2 = routes.get((robot_id, "system2")) if cls.component("system2") else None
        robot = _Robot(index, ci, cls.action_period_s, max(1, cls.system2_ratio), self.servers[s1.server],
                       self.servers[s2.server] if s2 else None, 1.0 / s1.rate_hz if capped else 0.0)
        # and at a seeded point of its System 2 cycle (else every robot would plan at once, forever)
        robot.k = 0 if self.config.synchronized_start else int(self.rng.integers(robot.horizon_h))
        self.robots.append(robot)
        self.robot_ids.append(robot_id)
        # robots are not synchronized: each starts at a seeded phase over its own nominal cycle
        # (1 / f_c when capped, t_act otherwise). Phases all within t_act would make capped robots
        # send in one burst per 1 / f_c forever (see SimConfig.synchronized_start).
        cycle = cls.action_period_s if (self.config.synchronized_start or not capped) else max(robot.s1_period,
                                                                                               cls.action_period_s)
        self.clock.at(float(self.rng.uniform(0, cycle)), self._step, robot)
        for spec in cls.components:
            if spec.component in ("system1", "system2"):
                continue
            route = routes.get((robot_id, spec.component))
            if route is None or route.server not in self.servers or not spec.freq_hz:
                continue
            comp = COMP_INDEX[spec.component]
            self.obligations[(index, comp)] = []
            period = 1.0 / spec.freq_hz
            self.clock.at(float(self.rng.uniform(0, period)), self._periodic,
                          (robot, comp, self.servers[route.server], period))

    # --- robot loop -------------------------------------------------------------------------
    def _step(self, now: float, robot: _Robot) -> None:
        if now >= self.config.duration_s:
            return
        if robot.s2 is not None and robot.k % robot.horizon_h == 0:
            rid = self.clock.new_request(COMP_INDEX["system2"], robot.index, now,
                                         lambda t, r, robot=robot: self._s2_done(t, r, robot))
            robot.s2.arrive(now, rid)
        else:
            robot.waited_s2 = -1
            self._send_s1(now, robot)

    def _s2_done(self, now: float, rid: int, robot: _Robot) -> None:
        robot.waited_s2 = rid
        self._send_s1(now, robot)

    def _send_s1(self, now: float, robot: _Robot) -> None:
        if now >= self.config.duration_s:
            return  # a capped send deferred past the end of the run
        if self.config.cap_mode == "average":  # the n-th send not before start + n / f
            t = robot.first_s1_send + robot.sent_s1 * robot.s1_period
        else:  # the schedule's rate cap: not before 1 / f after the previous send
            t = robot.last_s1_send + robot.s1_period
        if t > now:
            self.clock.at(t, self._send_s1, robot)
            return
        if robot.sent_s1 == 0:
            robot.first_s1_send = now
        robot.sent_s1 += 1
        robot.last_s1_send = now
        rid = self.clock.new_request(COMP_INDEX["system1"], robot.index, now,
                                     lambda t, r, robot=robot: self._s1_done(t, r, robot))
        robot.s1.arrive(now, rid)

    def _s1_done(self, now: float, rid: int, robot: _Robot) -> None:
        robot.actions.append((rid, robot.waited_s2))
        robot.k += 1
        jitter = self.config.t_act_jitter
        t_act = robot.t_act * (1.0 + float(self.rng.uniform(-jitter, jitter))) if jitter else robot.t_act
        self.clock.at(now + t_act, self._step, robot)

    def _periodic(self, now: float, arg) -> None:
        robot, comp, server, period = arg
        if now >= self.config.duration_s:
            return
        rid = self.clock.new_request(comp, robot.index, now, None)
        self.obligations[(robot.index, comp)].append(rid)
        server.arrive(now, rid)
        self.clock.at(now + period, self._periodic, arg)

    # --- accounting -------------------------------------------------------------------------
    def run(self) -> SimResult:
        self.clock.run()
        cfg = self.config
        tr = self.clock.trace()
        lat = tr.done - tr.send
        cls_of_robot = np.array([r.cls_index for r in self.robots] + [0], dtype=np.int32)
        slo = np.full(len(lat), math.inf)
        for (ci, comp), d in self.slo.items():
            slo[(tr.comp == comp) & (cls_of_robot[tr.robot] == ci)] = d
        ok = lat <= slo
        window = (tr.send >= cfg.warmup_s) & (tr.send < cfg.duration_s)
        span = cfg.duration_s - cfg.warmup_s
        components = {}
        for comp, ci in COMP_INDEX.items():
            sel = window & (tr.comp == ci)
            if sel.any():
                x = lat[sel]
                components[comp] = ComponentStats(int(sel.sum()), float(ok[sel].mean()), float(np.percentile(x, 50)),
                                                  float(np.percentile(x, 99)), float(x.mean()))
        oblig: dict[int, list] = {}  # robot -> [(issue times, met SLO)] per obligation component
        for (ri, _comp), rids in self.obligations.items():
            idx = np.asarray(rids, dtype=np.int64)
            oblig.setdefault(ri, []).append((tr.send[idx], ok[idx]))
        names = [c.name for c in self.problem.classes]
        qualified = dict.fromkeys(names, 0.0)
        raw = dict.fromkeys(names, 0.0)
        max_rate = 0.0
        for robot in self.robots:
            if not robot.actions:
                continue
            acts = np.asarray(robot.actions, dtype=np.int64)
            s1, s2 = acts[:, 0], acts[:, 1]
            t = tr.send[s1]
            inwin = (t >= cfg.warmup_s) & (t < cfg.duration_s)
            good = ok[s1] & ((s2 < 0) | ok[np.maximum(s2, 0)])
            for times, oks in oblig.get(robot.index, ()):
                k = np.searchsorted(times, t, side="right") - 1
                good &= (k < 0) | oks[np.maximum(k, 0)]
            name = names[robot.cls_index]
            qualified[name] += float((good & inwin).sum()) / span
            raw[name] += float(inwin.sum()) / span
            max_rate = max(max_rate, float(inwin.sum()) / span)
        return SimResult(sum(qualified.values()), sum(raw.values()), len(self.robots),
                         sum(c.num_robots for c in self.problem.classes), components, qualified, raw,
                         len(lat), tr if cfg.record else None, max_rate)


def simulate(problem: FactoryProblem, schedule: FactorySchedule, services: Mapping[str, object],
             config: SimConfig = SimConfig()) -> SimResult:
    return FactorySim(problem, schedule, services, config).run()


