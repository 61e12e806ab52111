"""Kairos multi-agent language-request scheduling: the deterministic discrete-event
simulation of a robot factory's language components sharing VLM instances, run and compared by
the CLI bench/factory_agents.py (workload, engine/instance model, policies, one run).

Compared (Kairos §7 baselines): "kairos" (workflow-aware priority queue + memory-aware time-slot
dispatcher), "fifo_rr" (Parrot: FCFS + round-robin), "spf_rr" (shortest-predicted-first by the
agent's expected time + round-robin), and the ablations "kairos_rr" (priority, no packing) and
"fifo_slots" (packing, no priority), at several Poisson workflow loads.

Where the numbers come from (all illustrative unless marked measured):
- Workflow = one robot pipeline step (msg_id); four task classes (TASKS): assembly (plan ->
  System 1 chunk), inspection (monitor || safety -> replan with p=0.3 -> chunk), transport
  (safety -> replan with p=0.15 -> chunk), narration (text stream). Class mix 0.2/0.3/0.3/0.2.
- Output lengths: lognormal per agent (AGENTS: median, sigma), capped at 4x the median. Chosen to
  span the classes: plans 60-140 tokens, safety verdicts ~6, monitor answers ~12, narration ~40.
  Not measured from a physai_ros deployment (none recorded yet).
- Prompt tokens: views x 256 (pi0's tokens per view, bench/physai_bench/roofline.py) + text, +-10 % uniform.
- KV bytes per token: 18,432 (pi0's gemma_2b: 18 layers x K,V x 1 head x 256 x bf16;
  bench/physai_bench/language_roofline.py). Instance KV budget: --kv-tokens (default 16,000 tokens = 0.27 GiB,
  ~18 concurrent requests), illustrative and deliberately small: an H100 would hold far more pi0
  KV; it is scaled down so that memory binds at the loads simulated, as it does in the paper's
  setting (equivalently: a larger VLM with more KV bytes per token).
- Decode step time ("measured" model, default): linear interpolation of the physai_ros engine's
  decode step on an H100 at batch 1 / 16 / 128 = 19.6 / 36 / 132 ms (docs/language.md, h100_probe,
  host-bound), plus prefill 21 ms per admitted request (the measured batch-1 prefix) scaled by its
  tokens / 816. "roofline" model: physai_bench.language_roofline.decode_step_ms (a lower bound, 1.5 ms
  at batch 1) and its prefill. System 1 chunk: 0.152 s (measured prefix + eager denoise, same probe),
  on separate action GPUs (no contention).
- Engine: vLLM-like continuous batching per instance: a local FIFO, admission when the prompt's
  KV fits, one token per running request per step; when the batch's next token does not fit, the
  latest-admitted request is preempted and recomputed later (prefill of prompt + generated): each
  preemption is one OOM-risk event. Every instance caps running+waiting at --max-seqs; a global
  queue holds the rest, and the policy decides its order and placement.
"""
from __future__ import annotations

import heapq
from collections import deque
from dataclasses import dataclass
from typing import Dict, List, Optional

import numpy as np

from physai_bench import language_roofline
from physai_ros.scheduler.agents import (
    AgentLatencyProfiler, ConvergenceConfig, ExecRecord, InstanceSpec, LanguageRequest, MemoryDemand,
    RoundRobinDispatcher, TimeSlotDispatcher, WorkflowAnalyzer, agent_priorities, make_queue,
)

KV_BYTES = language_roofline.KV_BYTES_PER_TOKEN
MEASURED_STEP_MS = ((1, 19.6), (16, 36.0), (128, 132.0))
MEASURED_PREFILL_MS, PREFILL_REF_TOKENS = 21.0, 816
S1_CHUNK_S = 0.152
POLICIES = ("kairos", "fifo_rr", "spf_rr", "kairos_rr", "fifo_slots")


@dataclass(frozen=True)
class AgentSpec:
    views: int
    text_tokens: int
    out_median: float
    out_sigma: float


AGENTS: Dict[str, AgentSpec] = {
    "assembly/planner": AgentSpec(3, 96, 140, 0.35),
    "inspection/monitor": AgentSpec(3, 24, 12, 0.4),
    "inspection/safety": AgentSpec(2, 32, 6, 0.3),
    "inspection/planner": AgentSpec(3, 96, 90, 0.35),
    "transport/safety": AgentSpec(2, 32, 6, 0.3),
    "transport/planner": AgentSpec(3, 96, 60, 0.35),
    "narration/text": AgentSpec(1, 64, 40, 0.5),
}
TASKS = {"assembly": 0.2, "inspection": 0.3, "transport": 0.3, "narration": 0.2}
REPLAN_P = {"inspection": 0.3, "transport": 0.15}


@dataclass
class SimReq:
    req: LanguageRequest
    out_len: int
    generated: int = 0
    dispatched_s: float = -1.0
    instance: str = ""
    done: bool = False
    preempted: bool = False


@dataclass
class Flow:
    msg_id: str
    task: str
    app_start: float
    replan: bool
    pending: int = 0
    end_s: float = -1.0


class StepModel:
    def __init__(self, kind: str) -> None:
        self.kind = kind
        self._gpu = language_roofline.GPUS["h100_sxm"]
        self._roof_prefill = language_roofline.frame_parts_ms(self._gpu, 1, 3, 48)["prefill"]
        self._roof: Dict[int, float] = {}

    def decode_ms(self, batch: int) -> float:
        if self.kind == "roofline":      # context fixed at ~900 tokens; cached per batch size
            if batch not in self._roof:
                self._roof[batch] = language_roofline.decode_step_ms(self._gpu, batch, 900.0)
            return self._roof[batch]
        (b0, t0), (b1, t1), (b2, t2) = MEASURED_STEP_MS
        if batch <= b1:
            return t0 + (t1 - t0) * (batch - b0) / (b1 - b0)
        return t1 + (t2 - t1) * (batch - b1) / (b2 - b1)

    def prefill_ms(self, tokens: int) -> float:
        base = self._roof_prefill if self.kind == "roofline" else MEASURED_PREFILL_MS
        return base * tokens / PREFILL_REF_TOKENS


class Instance:
    def __init__(self, name: str, cap_tokens: int) -> None:
        self.name, self.cap = name, cap_tokens
        self.running: List[SimReq] = []
        self.waiting: deque = deque()
        self.busy = False

    def used(self) -> int:
        return sum(r.req.prompt_tokens + r.generated for r in self.running)

    def load(self) -> int:
        return len(self.running) + len(self.waiting)


class Sim:
    """One run: policy x load x seed. Deterministic given the seed."""

    def __init__(self, policy: str, rate: float, duration_s: float, seed: int = 0, n_instances: int = 3,
                 kv_tokens: int = 16_000, max_seqs: int = 32, step_model: str = "measured",
                 warmup_frac: float = 0.2, refresh_s: float = 5.0, scan_limit: int = 64,
                 prior_expected_s: float = 2.0, oom_resume: str = "recovered",
                 converge_threshold: float = 0.05, slot_s: float = 0.5) -> None:
        if policy not in POLICIES:
            raise ValueError(policy)
        self.policy, self.rate, self.duration, self.max_seqs = policy, rate, duration_s, max_seqs
        self.rng = np.random.default_rng(seed)
        self.steps = StepModel(step_model)
        self.warmup_s = warmup_frac * duration_s
        self.refresh_s, self.scan_limit, self.prior = refresh_s, scan_limit, prior_expected_s
        if oom_resume not in ("recovered", "drain"):
            raise ValueError(oom_resume)
        self.oom_resume = oom_resume
        self.kv_token_s = 0.0          # integral of true KV tokens in use over time, all instances
        self.kv_cap = kv_tokens
        self.insts = {f"vlm{i}": Instance(f"vlm{i}", kv_tokens) for i in range(n_instances)}
        specs = [InstanceSpec(n, kv_tokens * KV_BYTES) for n in self.insts]
        self.dispatcher = (TimeSlotDispatcher(specs, slot_s) if policy in ("kairos", "fifo_slots")
                           else RoundRobinDispatcher(specs))
        self.tick_s = slot_s              # a blocked request is retried every slot
        self.profiler = AgentLatencyProfiler(ConvergenceConfig(rel_threshold=converge_threshold))
        self.analyzer = WorkflowAnalyzer(self.profiler)
        self.priority = None
        self.expected: Dict[str, float] = {}
        qpol = {"kairos": "kairos", "kairos_rr": "kairos", "fifo_rr": "fifo", "fifo_slots": "fifo",
                "spf_rr": "spf"}[policy]
        self.queue = make_queue(qpol, priority=lambda: self.priority, expected_time=self.expected_time)
        self.decode_rate = KV_BYTES / (self.steps.decode_ms(16) / 1e3)   # "hardware profiling" constant
        self.events: list = []
        self.seq = 0
        self.reqs: Dict[int, SimReq] = {}
        self.flows: Dict[str, Flow] = {}
        self.completions: Dict[int, int] = {}
        self.preemptions = 0
        self.now = 0.0
        self.queue_wait: List[float] = []

    # ---- plumbing -------------------------------------------------------------------------
    def push(self, t: float, kind: str, payload=None) -> None:
        self.seq += 1
        heapq.heappush(self.events, (t, self.seq, kind, payload))

    def expected_time(self, agent: str) -> float:
        return self.expected.get(agent, self.prior)

    def refresh(self) -> None:
        """Periodic background update (Kairos §7.7): expected times and agent priorities."""
        for a, d in self.profiler.single.items():
            if len(d) >= 2:
                self.expected[a] = d.mode()
        rem = self.profiler.remaining_samples()
        if rem:
            self.priority = agent_priorities(rem, self.profiler.remaining_converged(), agents=AGENTS)
        self.queue.reprioritize()

    # ---- workload -------------------------------------------------------------------------
    def new_flow(self, t: float) -> None:
        task = str(self.rng.choice(list(TASKS), p=list(TASKS.values())))
        flow = Flow(f"w{len(self.flows)}", task, t, bool(self.rng.random() < REPLAN_P.get(task, 0.0)))
        self.flows[flow.msg_id] = flow
        roots = {"assembly": ["planner"], "inspection": ["monitor", "safety"], "transport": ["safety"],
                 "narration": ["text"]}[task]
        for name in roots:
            self.submit(flow, f"{task}/{name}", None, t)

    def submit(self, flow: Flow, agent: str, upstream: Optional[str], t: float) -> None:
        spec = AGENTS[agent]
        prompt = int(round((spec.views * 256 + spec.text_tokens) * self.rng.uniform(0.9, 1.1)))
        out = int(min(max(1, round(self.rng.lognormal(np.log(spec.out_median), spec.out_sigma))),
                      4 * spec.out_median))
        req = LanguageRequest(len(self.reqs), agent, flow.msg_id, flow.app_start, t, prompt, upstream)
        self.reqs[req.request_id] = SimReq(req, out)
        flow.pending += 1
        self.queue.push(req)

    def on_request_done(self, sr: SimReq, t: float) -> None:
        r = sr.req
        self.analyzer.add(ExecRecord(r.agent, r.msg_id, r.upstream, sr.dispatched_s, t))
        flow = self.flows[r.msg_id]
        flow.pending -= 1
        task, role = r.agent.split("/")
        if flow.pending == 0 and role != "planner" and flow.replan:
            self.submit(flow, f"{task}/planner", f"{task}/safety", t)
        if flow.pending == 0:
            self.analyzer.complete(flow.msg_id)
            if task == "narration":
                flow.end_s = t
            else:
                self.push(t + S1_CHUNK_S, "chunk", flow.msg_id)

    # ---- scheduling -----------------------------------------------------------------------
    def schedule(self, t: float) -> None:
        for req in self.queue.ordered(self.scan_limit):
            eligible = {n for n, i in self.insts.items() if i.load() < self.max_seqs}
            if not eligible:
                return
            demand = MemoryDemand(req.prompt_tokens * KV_BYTES, self.decode_rate, self.expected_time(req.agent))
            placed = self.dispatcher.dispatch(req.request_id, demand, t, eligible)
            if placed is None:
                continue           # Kairos: stays queued; the next request may fit
            self.queue.remove(req.request_id)
            sr = self.reqs[req.request_id]
            sr.dispatched_s, sr.instance = t, placed.instance
            self.queue_wait.append(t - req.arrival_s)
            inst = self.insts[placed.instance]
            inst.waiting.append(sr)
            if not inst.busy:
                self.start_step(inst, t)

    def start_step(self, inst: Instance, t: float) -> None:
        prefill = 0.0
        used = inst.used()
        while inst.waiting:
            sr = inst.waiting[0]
            need = sr.req.prompt_tokens + sr.generated        # recompute covers generated tokens
            if used + need > inst.cap:
                break
            inst.waiting.popleft()
            inst.running.append(sr)
            sr.preempted = False
            used += need
            prefill += self.steps.prefill_ms(need)
        while inst.running and used + len(inst.running) > inst.cap and len(inst.running) > 1:
            victim = inst.running.pop()                       # vLLM: preempt the latest admitted
            used -= victim.req.prompt_tokens + victim.generated
            inst.waiting.appendleft(victim)
            victim.preempted = True
            self.preemptions += 1
            self.dispatcher.report_oom(inst.name, t)
        if self.oom_resume == "recovered" and not any(w.preempted for w in inst.waiting):
            self.dispatcher.resume(inst.name)    # status monitor: no preempted request left
        if not inst.running:
            inst.busy = False
            return
        inst.busy = True
        dt = (self.steps.decode_ms(len(inst.running)) + prefill) / 1e3
        self.kv_token_s += used * dt
        self.push(t + dt, "step", inst.name)

    def end_step(self, inst: Instance, t: float) -> None:
        still = []
        finished = []
        for sr in inst.running:
            sr.generated += 1
            (finished if sr.generated >= sr.out_len else still).append(sr)
        inst.running = still
        for sr in finished:
            sr.done = True
            self.completions[sr.req.request_id] = self.completions.get(sr.req.request_id, 0) + 1
            self.dispatcher.complete(sr.req.request_id, t)
            self.on_request_done(sr, t)
        self.start_step(inst, t)
        if finished:
            self.schedule(t)

    # ---- run ------------------------------------------------------------------------------
    def run(self) -> dict:
        t = float(self.rng.exponential(1.0 / self.rate))
        self.push(t, "arrival")
        self.push(self.tick_s, "tick")
        self.push(self.refresh_s, "refresh")
        while self.events:
            t, _, kind, payload = heapq.heappop(self.events)
            self.now = t
            if t > 20 * self.duration:      # guard: a request no instance can ever take
                break
            if kind == "arrival":
                self.new_flow(t)
                nxt = t + float(self.rng.exponential(1.0 / self.rate))
                if nxt < self.duration:
                    self.push(nxt, "arrival")
                self.schedule(t)
            elif kind == "step":
                self.end_step(self.insts[payload], t)
            elif kind == "chunk":
                self.flows[payload].end_s = t
            elif kind in ("tick", "refresh"):
                if kind == "refresh":
                    self.refresh()
                if len(self.queue):
                    self.schedule(t)
                busy = len(self.queue) or any(i.load() for i in self.insts.values()) or t < self.duration
                if busy:
                    self.push(t + (self.tick_s if kind == "tick" else self.refresh_s), kind)
        return self.summary()

    def summary(self) -> dict:
        done_once = all(n == 1 for n in self.completions.values()) and len(self.completions) == len(self.reqs)
        measured = [f.end_s - f.app_start for f in self.flows.values() if f.app_start >= self.warmup_s]
        e2e = np.asarray(measured)
        return {"policy": self.policy, "rate_wf_s": self.rate, "workflows": len(self.flows),
                "workflows_measured": int(e2e.size), "requests": len(self.reqs),
                "requests_completed": len(self.completions), "each_request_once": bool(done_once),
                "unfinished_workflows": sum(1 for f in self.flows.values() if f.end_s < 0),
                "mean_e2e_s": float(e2e.mean()) if e2e.size else float("nan"),
                "p95_e2e_s": float(np.percentile(e2e, 95)) if e2e.size else float("nan"),
                "p99_e2e_s": float(np.percentile(e2e, 99)) if e2e.size else float("nan"),
                "mean_queue_wait_s": float(np.mean(self.queue_wait)) if self.queue_wait else 0.0,
                "oom_risk_events": self.preemptions,
                "kv_utilisation": self.kv_token_s / (self.kv_cap * len(self.insts) * max(self.now, 1e-9)),
                "priority_order": list(self.priority.order) if self.priority else [],
                "priority_source": dict(self.priority.source) if self.priority else {}}


def simulate(policy: str, rate: float, duration_s: float, seed: int = 0, **kw) -> dict:
    return Sim(policy, rate, duration_s, seed, **kw).run()
