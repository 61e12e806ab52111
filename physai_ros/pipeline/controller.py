"""One robot's task pipeline (ROSA §3.3; the semantics are docs/pipelines.md "Semantics"): which
component queries are due, what their answers, misses and errors mean, holds, retries and the
latched escalation.

Driven by plain calls with explicit times (no threads, no sleeps, no ROS): `start(now)` once,
then `step(now)` periodically (SLO checks, then the queries due), `on_answer` for each answer,
`on_system1_prediction` for each System 1 chunk, `acknowledge` after an escalation. Each returns
plain data (pipeline.decisions) for the caller to carry out.
"""
from __future__ import annotations

import math
from dataclasses import dataclass

from physai_ros.pipeline.answers import Parsed, parse_answer
from physai_ros.pipeline.backend import ComponentAnswer
from physai_ros.pipeline.config import PERIODIC, TaskPipelineConfig
from physai_ros.pipeline.decisions import (Acknowledged, ComponentCounters, Decision, DropPlan, DueQuery, EndTask,
                                           Escalate, GraspLost, Hold, PipelineCounters, Replan, ResetEpisode, Resume,
                                           SetPrompt, Step)
from physai_ros.protocol.component import QUESTION_COMPONENTS

# Issued ids remembered so a late answer to a given-up query is counted on its component.
_ISSUED_KEEP = 256


@dataclass
class _InFlight:
    query_id: int
    asked_at: float
    deadline: float  # re-armed once, one SLO later, while `hold` / `use_last_plan` keep waiting
    missed: bool = False  # its SLO passed once: awaited only until the component is next asked


class PipelineController:
    def __init__(self, robot_id: str, config: TaskPipelineConfig, task_prompt: str | None = None):
        self.robot_id = robot_id
        self.config = config
        self.task_prompt = task_prompt if task_prompt is not None else config.system1.prompt
        self.counters = PipelineCounters(
            components={c.name: ComponentCounters() for c in config.vlm_components})
        self._components = {c.name: c for c in config.vlm_components}
        self._next_id = 1
        self._issued: dict[int, str] = {}  # query id -> component, insertion-ordered
        self._in_flight: dict[str, _InFlight] = {}
        self._holds: dict[str, str] = {}  # hold source -> reason
        self._subgoal: str | None = None
        self._system2_due = False
        self._predictions_since_system2 = 0
        self._next_periodic: dict[str, float] = {}
        self._ask_now: set[str] = set()  # re-asks of safety / monitor (their fallbacks, acknowledge)
        self._started = False

    # ---- what the caller reads ------------------------------------------------------------

    @property
    def held(self) -> bool:
        return bool(self._holds)

    @property
    def holds(self) -> dict[str, str]:
        return dict(self._holds)

    @property
    def escalated(self) -> str:
        return self.counters.escalated

    @property
    def subgoal(self) -> str | None:
        return self._subgoal

    @property
    def system1_prompt(self) -> str:
        """What System 1 is asked with: the current subgoal, else the task's prompt (with System 2
        the robot holds until the first subgoal, so it never acts on the task prompt then)."""
        return self._subgoal if self._subgoal is not None else self.task_prompt

    @property
    def in_flight(self) -> dict[str, int]:
        return {c: q.query_id for c, q in self._in_flight.items()}

    # ---- driving ----------------------------------------------------------------------------

    def start(self, now: float) -> list[Decision]:
        """The first episode; periodic components are first due now."""
        if self._started:
            raise RuntimeError("PipelineController.start called twice")
        self._started = True
        self._next_periodic = {c: now for c in PERIODIC if c in self._components}
        out: list[Decision] = []
        self._start_episode(out)
        return out

    def step(self, now: float) -> Step:
        decisions = self.check(now)
        return Step(tuple(decisions), tuple(self.due(now)))

    def check(self, now: float) -> list[Decision]:
        """The fallbacks of every in-flight query whose SLO passed by `now`."""
        out: list[Decision] = []
        for comp in QUESTION_COMPONENTS:
            q = self._in_flight.get(comp)
            if q is not None and not self.escalated and now > q.deadline:
                self._violation(comp, now, out, error="")
        return out

    def due(self, now: float) -> list[DueQuery]:
        """The queries to send now, marked in flight."""
        self._require_started()
        if self.escalated:
            return []
        queries = []
        for comp in QUESTION_COMPONENTS:
            if comp not in self._components:
                continue
            if comp == "system2":
                ratio = self.config.system2_to_system1_call_ratio or 1
                is_due = self._system2_due or self._predictions_since_system2 >= ratio
            else:
                is_due = comp in self._ask_now or now >= self._next_periodic[comp]
                if now >= self._next_periodic[comp]:
                    period = self._components[comp].period_s
                    # No catch-up burst: the next ask is the first period boundary after now.
                    self._next_periodic[comp] += period * (math.floor((now - self._next_periodic[comp]) / period) + 1)
            if not is_due:
                continue
            if comp in self._in_flight:
                if not self._in_flight[comp].missed:
                    if comp != "system2":
                        self.counters.components[comp].skipped += 1
                    continue
                # A query that missed its SLO may have been lost on the way (a subscriber not yet
                # matched, a dropped sample): it is given up and the component asked afresh, so one
                # lost message cannot hold the arm for ever.
                self._give_up(comp)
            queries.append(self._ask(comp, now))
        return queries

    def on_system1_prediction(self, now: float) -> list[Decision]:
        """System 1 produced a chunk: counts towards System 2's call ratio."""
        self.counters.system1_predictions += 1
        self._predictions_since_system2 += 1
        return []

    def on_answer(self, query_id: int, answer: ComponentAnswer, now: float) -> list[Decision]:
        comp = self._issued.get(query_id)
        if comp is None:
            self.counters.unknown_answers += 1
            return []
        cc = self.counters.components[comp]
        q = self._in_flight.get(comp)
        if q is None or q.query_id != query_id:
            cc.stale += 1
            return []
        del self._in_flight[comp]
        on_time = now - q.asked_at <= self._components[comp].slo_s
        if on_time:
            cc.on_time += 1
        else:
            cc.late += 1
        out: list[Decision] = []
        result = parse_answer(comp, answer)
        if not isinstance(result, Parsed):
            cc.errors[result.reason.value] = cc.errors.get(result.reason.value, 0) + 1
            self._violation(comp, now, out, error=f"{result.reason.value}: {result.detail}")
            return out
        cc.answered += 1
        if on_time:
            cc.consecutive_violations = 0
        getattr(self, f"_accept_{comp}")(result.value, query_id, out)
        return out

    def on_grasp_lost(self, now: float) -> list[Decision]:
        """The robot's grasp watch saw the held object slip out: reported (GraspLost), then
        task_retry.grasp_watch.on_lost: nothing, DropPlan (System 1's next round sees the scene
        as it is, not the plan made while holding) or a reset as for the monitor's "failed"."""
        self._require_started()
        self.counters.grasp_losses += 1
        watch = self.config.grasp_watch
        action = watch.on_lost if watch is not None else "ignore"
        out: list[Decision] = [GraspLost(action)]
        if self.escalated or action == "ignore":
            return out
        if action == "replan":
            out.append(DropPlan("monitor: grasp lost"))
        else:
            self._retry("grasp lost", out)
        return out

    def escalate(self, source: str, reason: str, now: float) -> list[Decision]:
        """Latch an escalation from outside (the robot client's System 1 deadline monitor)."""
        out: list[Decision] = []
        self._escalate(source, reason, self.config.on_max_violation, out)
        return out

    def acknowledge(self, now: float) -> list[Decision]:
        """An operator clears the latched escalation (docs/pipelines.md "Escalation")."""
        reason = self.escalated
        if not reason:
            return []
        self.counters.escalated = ""
        for cc in self.counters.components.values():
            cc.consecutive_violations = 0
        self.counters.consecutive_unsafe = 0
        self.counters.retries = 0
        out: list[Decision] = [Acknowledged(reason), DropPlan("acknowledged: a plan from before the stop is stale")]
        self._holds = {s: r for s, r in self._holds.items() if s == "safety"}
        self._ask_now.update(c for c in PERIODIC if c in self._components)
        if "system2" in self._components:
            self._drop_subgoal("awaiting a plan after acknowledge", out)
        if not self._holds:
            out.append(Resume())
        return out

    clear = acknowledge

    # ---- answers ----------------------------------------------------------------------------

    def _accept_system2(self, subgoal: str, query_id: int, out: list[Decision]) -> None:
        self._subgoal = subgoal
        out.append(SetPrompt(subgoal, query_id))
        self._unhold("system2", out)

    def _accept_safety(self, label: str, query_id: int, out: list[Decision]) -> None:
        c = self.counters
        if label == "safe":
            c.consecutive_unsafe = 0
            self._unhold("safety", out)
            return
        c.safety_stops += 1
        c.consecutive_unsafe += 1
        limit = self.config.max_consecutive_safety_replan
        if c.consecutive_unsafe > limit:
            self._escalate("safety", f"unsafe {c.consecutive_unsafe} times in a row ({limit} replans did not "
                           "resolve it)", self.config.on_max_violation, out)
            return
        self._hold("safety", "unsafe", out)
        self._replan(f"safety: unsafe ({c.consecutive_unsafe} in a row)", out)

    def _accept_monitor(self, label: str, query_id: int, out: list[Decision]) -> None:
        c = self.counters
        self._unhold("monitor", out)
        if label == "done":
            c.tasks_done += 1
            c.retries = 0
            out.append(EndTask("monitor: done"))
            self._start_episode(out)
        elif label == "failed":
            c.task_failures += 1
            self._retry("failed", out)

    def _retry(self, why: str, out: list[Decision]) -> None:
        """A failed attempt (the monitor's "failed", or a lost grasp with on_lost: reset): reset and
        try again, or escalate after max_task_retries."""
        c = self.counters
        limit = self.config.max_task_retries
        if c.retries >= limit:
            self._escalate("monitor", f"task failed {c.retries + 1} times ({limit} retries)",
                           self.config.on_max_task_retries, out)
            return
        c.retries += 1
        c.total_retries += 1
        out.append(ResetEpisode(c.retries, f"monitor: {why} (retry {c.retries} of {limit})"))
        self._start_episode(out)

    # ---- misses, errors, fallbacks ------------------------------------------------------------

    def _violation(self, comp: str, now: float, out: list[Decision], error: str) -> None:
        """An SLO miss (error == "") or an unparseable answer (its query already finished)."""
        cc = self.counters.components[comp]
        cfg = self._components[comp]
        cc.consecutive_violations += 1
        q = self._in_flight.get(comp)
        if not error:
            cc.slo_misses += 1
            reason = f"{comp}: query {q.query_id} waited {now - q.asked_at:.3f} s > SLO {cfg.slo_s:.3f} s"
        else:
            reason = f"{comp}: unparseable answer ({error})"
        limit = self.config.max_consecutive_slo_violation
        if cc.consecutive_violations >= limit:
            self._escalate(comp, f"{cc.consecutive_violations} consecutive SLO violations of {comp} (last: {reason})",
                           self.config.on_max_violation, out)
            return
        fb = cfg.fallback
        if not error and fb in ("hold", "use_last_plan") and not q.missed:
            # Keep waiting for a slow answer, until the next period re-asks (due) or one SLO more
            # passes (System 2 has no period): then it is given up and asked again.
            q.missed = True
            q.deadline = now + cfg.slo_s
        else:
            self._give_up(comp)
            self._reask(comp)
        if fb in ("hold", "stop_and_resend", "stop_and_replan"):
            self._hold(comp, reason, out)
        if fb == "stop_and_replan":
            self._replan(reason, out)

    def _escalate(self, source: str, reason: str, policy: str, out: list[Decision]) -> None:
        if self.escalated:
            return  # latched: reported once
        self.counters.escalated = reason
        self.counters.escalations += 1
        for comp in list(self._in_flight):
            self._give_up(comp)
        self._hold("escalation", reason, out)
        out.append(Escalate(source, reason, policy))

    def _replan(self, reason: str, out: list[Decision]) -> None:
        self.counters.replans += 1
        out.append(DropPlan(reason))
        out.append(Replan(reason))
        if "system2" in self._components:
            self._give_up("system2")
            self._drop_subgoal("replanning", out)

    # ---- state helpers ------------------------------------------------------------------------

    def _start_episode(self, out: list[Decision]) -> None:
        """Queries about the old episode (System 2, monitor) are given up; safety's are about the
        workcell and carry over, as do the safety hold and the consecutive counts."""
        self.counters.episodes += 1
        for comp in ("system2", "monitor"):
            self._give_up(comp)
        self._unhold("monitor", out)
        self._subgoal = None
        if "system2" in self._components:
            self._drop_subgoal("awaiting first plan", out)

    def _drop_subgoal(self, reason: str, out: list[Decision]) -> None:
        self._subgoal = None
        self._system2_due = True
        self._predictions_since_system2 = 0
        if "system2" not in self._holds:
            self._hold("system2", reason, out)

    def _hold(self, source: str, reason: str, out: list[Decision]) -> None:
        self._holds[source] = reason
        out.append(Hold(source, reason))

    def _unhold(self, source: str, out: list[Decision]) -> None:
        if self._holds.pop(source, None) is not None and not self._holds:
            out.append(Resume())

    def _ask(self, comp: str, now: float) -> DueQuery:
        cfg = self._components[comp]
        qid = self._next_id
        self._next_id += 1
        self._issued[qid] = comp
        while len(self._issued) > _ISSUED_KEEP:
            del self._issued[next(iter(self._issued))]
        q = _InFlight(qid, now, now + cfg.slo_s)
        self._in_flight[comp] = q
        self.counters.components[comp].asked += 1
        if comp == "system2":
            self._system2_due = False
            self._predictions_since_system2 = 0
        self._ask_now.discard(comp)
        return DueQuery(qid, comp, cfg.question(self.task_prompt), self.task_prompt, now, q.deadline)

    def _give_up(self, comp: str) -> None:
        """Its answer, when it comes, is stale (the id stays in _issued to be counted so)."""
        self._in_flight.pop(comp, None)

    def _reask(self, comp: str) -> None:
        if comp == "system2":
            self._system2_due = True
        else:
            self._ask_now.add(comp)

    def _require_started(self) -> None:
        if not self._started:
            raise RuntimeError("PipelineController.start(now) first")
