"""The policy server's pipeline components (docs/pipelines.md "Serving the components"):
robots' questions to their task's System 2, safety and monitor, answered by the component
backends (physai_ros.pipeline.backend), without ROS (nodes/policy_server_pipeline is the adapter).

- Backends: per (task, component) of fleet.yaml's pipelines, `model: vla` is one shared
  VLABackboneBackend on the served model (the language stream's prefix when the robot ran a
  System 1 round lately, its own prefill otherwise); `model: {hf: DIR, device}` is one
  HFVisionLanguageBackend per distinct (resolved DIR, device), loaded at start-up. Tests inject
  their own (a ScriptedBackend) by key.
- Every query is checked before it is queued (serving.pipeline.query_check): a refused query gets
  an answer with error "<reason>: <detail>", counted per reason; nothing a robot sends raises here.
- A bounded queue per backend (full: `busy`); per robot and component at most one query waits:
  a newer one replaces the queued older one, which is answered `superseded` (the robot's pipeline
  keeps one query per component in flight, so an older one is one it gave up).
- One worker thread takes a batch (up to max_batch, in serving.pipeline.order's order: Kairos
  multi-agent priority, or arrival) per backend in turn and calls
  backend.answer(batch); a backend that raises costs that batch an error answer each, never the
  thread. Every query gets exactly one answer through `on_answers(list)` (refusals included,
  from the caller's thread; answers from the worker thread).
- With `kv_budget_mb` or `placement: memory`, the VLA backbone's questions are admitted by the
  K/V memory they will need, Kairos's time-slot dispatcher (serving.pipeline.memory_dispatch):
  a question that fits no instance waits; with memory placement, one queue feeds every instance.
"""
from __future__ import annotations

import threading
import time
from collections import Counter, OrderedDict, deque
from dataclasses import dataclass, field
from typing import Any, Callable, Mapping

import numpy as np

from physai_ros.config.fleet import FleetConfig
from physai_ros.protocol.component import QUESTION_COMPONENTS
from physai_ros.protocol.component import (BAD_QUESTION, BUSY, CLOSED, SUPERSEDED, UNKNOWN_COMPONENT,
                                           UNKNOWN_ROBOT, ComponentAnswerData, ComponentRequest, refusal)
from physai_ros.serving.compute_threads import use_threads
from physai_ros.serving.pipeline.backends import (VLA_KEY, _key_paths, answer_data, ask, distinct, instance_key,
                                                  load_backends, plan_routes)
from physai_ros.serving.pipeline.memory_dispatch import PLACEMENTS, ComponentMemoryDispatch, demand_of, gated_instances
from physai_ros.serving.pipeline.order import ComponentOrder, agent_name
from physai_ros.serving.pipeline.query_check import check_request

POOL_KEY = "vla@any"  # with memory placement, the queue of every `model: vla` question


@dataclass(frozen=True)
class ComponentServiceSettings:
    max_queue: int = 32  # queries waiting per backend; more are refused `busy`
    max_batch: int = 8  # queries per backend.answer call
    max_question_chars: int = 1000
    max_answer_tokens: int = 256
    latency_window: int = 512  # answers per component kept for the percentiles
    order: str = "kairos"  # which waiting questions go first: kairos | fifo (serving.pipeline.order)
    kv_budget_mb: float | None = None  # K/V memory per instance for `model: vla` questions (memory_dispatch)
    placement: str = "route"  # route: a question runs where its route says | memory: any free instance


@dataclass
class _Waiting:
    req: ComponentRequest
    key: str  # backend key
    received: float  # service clock
    route: str | None = None  # the instance its route names (memory placement prefers it)
    kv: Any = None  # the backend's KVDemand, asked once (memory dispatch)
    ticket: int | None = None  # its memory admission, completed when its batch ends


@dataclass
class _ComponentStats:
    asked: int = 0
    answered: int = 0  # answers with text
    errors: Counter = field(default_factory=Counter)  # backend errors by first word
    refused: Counter = field(default_factory=Counter)  # reason -> count
    latency_ms: deque = field(default_factory=lambda: deque(maxlen=512))  # received -> answered


def _percentile(values, q: float) -> float:
    return float(np.percentile(np.fromiter(values, float), q)) if values else 0.0


# ---- the service --------------------------------------------------------------------------------

class ComponentService:
    """fleet: the served FleetConfig (its tasks' pipelines); core: the ServingCore (registrations,
    and the engine of `model: vla`); on_answers(list[ComponentAnswerData]): publishes answers.
    backends: key -> ComponentBackend replacing the ones fleet.yaml names (keys: plan_routes);
    every key must be given or none."""

    def __init__(self, fleet: FleetConfig, core: Any, on_answers: Callable[[list], None],
                 backends: Mapping[str, Any] | None = None,
                 settings: ComponentServiceSettings = ComponentServiceSettings(),
                 clock: Callable[[], float] = time.monotonic, start: bool = True):
        self.fleet, self.core, self.on_answers, self.settings, self.clock = fleet, core, on_answers, settings, clock
        self.routes = plan_routes(fleet)
        self.backends = dict(backends) if backends is not None else load_backends(fleet, core)
        missing = sorted(set(self.routes.values()) - set(self.backends))
        if missing:
            raise ValueError(f"no backend for {', '.join(missing)} (needed by "
                             f"{_key_paths(fleet, self.routes, missing[0])})")
        self._queues: dict[str, OrderedDict] = {k: OrderedDict() for k in self.backends}  # (robot, comp) -> _Waiting
        self._running: dict[tuple[str, str], int] = {}  # (robot, comp) -> query_id in a batch now
        self._stats = {c: _ComponentStats(latency_ms=deque(maxlen=settings.latency_window)) for c in QUESTION_COMPONENTS}
        self.refused = Counter()  # reason -> count, every component (and the adapter's own refusals)
        self.batches: Counter = Counter()  # backend key -> batches run
        self.delivery_errors = 0
        self._lock = threading.Lock()
        self._cv = threading.Condition(self._lock)
        self._stop = False
        self._turn = 0
        self.order = ComponentOrder(settings.order)
        self._gate_backends(settings)
        self._threads: list[threading.Thread] = []
        if start:
            self.start()

    def start(self) -> "ComponentService":
        """One worker thread per backend (keys sharing a backend share its thread), so backends
        on different engine instances answer at the same time."""
        if not self._threads:
            groups: dict[int, list[str]] = {}
            for key, b in self.backends.items():
                groups.setdefault(id(b), []).append(key)
            for n, keys in enumerate(groups.values()):
                me = self._instance.get(keys[0])
                if me is not None and POOL_KEY in self._queues:  # memory placement: every gated worker draws on it
                    keys.append(POOL_KEY)
                t = threading.Thread(target=self._work, args=(tuple(keys), me), name=f"component_service_{n}",
                                     daemon=True)
                self._threads.append(t)
                t.start()
        return self

    # ---- requests ----------------------------------------------------------------------------

    def submit(self, req: ComponentRequest) -> ComponentAnswerData | None:
        """Queue a robot's question; None when queued, else the refusal (already passed to
        on_answers: the caller only logs it). Never raises for what the request holds."""
        key = ""
        try:
            bad = check_request(req, self.core.registration, self.routes, self.settings)
            if bad is None:
                key, bad = self._route(req)
        except Exception as e:  # a request of the wrong types: still only its own problem
            bad = (BAD_QUESTION, f"unreadable request: {type(e).__name__}: {e}")
        now = self.clock()
        out: list[ComponentAnswerData] = []
        component = getattr(getattr(req, "query", None), "component", "")
        with self._lock:
            stats = self._stats.get(component)
            if stats is not None:
                stats.asked += 1
            if bad is None and self._stop:
                bad = (CLOSED, "the server is shutting down")
            if bad is None:
                route = self._instance.get(key) if self.memory is not None else None
                if route is not None and POOL_KEY in self._queues:
                    key = POOL_KEY
                queue = self._queues[key]
                slot = (req.robot_id, req.component)
                older = queue.pop(slot, None)
                if older is not None:
                    out.append(self._refused_locked(older.req, SUPERSEDED, f"query {req.query_id} replaced it"))
                if len(queue) >= self.settings.max_queue:
                    bad = (BUSY, f"{len(queue)} queries wait for {getattr(self.backends.get(key), 'name', key)}")
                else:
                    queue[slot] = _Waiting(req, key, now, route)
                    self._cv.notify_all()
            refused = None
            if bad is not None:
                refused = self._refused_locked(req, *bad)
                out.append(refused)
        self._deliver(out)
        return refused

    def refuse(self, robot_id: str, query_id: int, component: str, reason: str, detail: str,
               answer: bool = True) -> ComponentAnswerData:
        """The adapter's own refusals (unreadable, unauthenticated, robot_id_mismatch), counted
        here; answered through on_answers only with answer=True."""
        a = refusal(str(robot_id)[:64], int(query_id), str(component)[:32], reason, detail, stamp=time.time())
        with self._lock:
            self.refused[reason] += 1
            stats = self._stats.get(component)
            if stats is not None:
                stats.refused[reason] += 1
        if answer:
            self._deliver([a])
        return a

    def _route(self, req: ComponentRequest) -> tuple[str, tuple[str, str] | None]:
        """The backend key, read again: the robot may have left or changed task since _check."""
        reg = self.core.registration(req.robot_id)
        if reg is None:
            return "", (UNKNOWN_ROBOT, f"{req.robot_id[:64]!r} is not registered with this server")
        key = self.routes.get((reg.task_id, req.component))
        if key == VLA_KEY:  # a factory plan routes each robot's component to one instance
            factory = getattr(self.core, "factory", None)
            iid = factory.route_instance(req.robot_id, req.component) if factory is not None else None
            if iid is not None and instance_key(iid) in self.backends:
                key = instance_key(iid)
        return (key, None) if key is not None else ("", (UNKNOWN_COMPONENT, f"task {reg.task_id!r} has none"))

    def _refused_locked(self, req: ComponentRequest, reason: str, detail: str) -> ComponentAnswerData:
        self.refused[reason] += 1
        stats = self._stats.get(req.component)
        if stats is not None:
            stats.refused[reason] += 1
        return refusal(str(req.robot_id)[:64], req.query_id, str(req.component)[:32], reason, detail,
                       stamp=time.time())

    def _deliver(self, answers: list[ComponentAnswerData]) -> None:
        if not answers:
            return
        try:
            self.on_answers(answers)
        except Exception:  # publishing failed (shutting down): the service carries on
            with self._lock:
                self.delivery_errors += 1

    # ---- the worker --------------------------------------------------------------------------

    def _gate_backends(self, settings: ComponentServiceSettings) -> None:
        """Backends that can say a question's K/V (kv_demand: the VLA backbone) are admitted by
        memory when a budget or memory placement is set: one instance per backend, named by its
        instance key (`vla` without a factory plan)."""
        self._instance = gated_instances(self.backends, VLA_KEY)  # gated backend key -> its instance (a key)
        if settings.placement not in PLACEMENTS:
            raise ValueError(f"placement {settings.placement!r}: expected one of {', '.join(PLACEMENTS)}")
        wanted = settings.kv_budget_mb is not None or settings.placement == "memory"
        budget = settings.kv_budget_mb * (1 << 20) if settings.kv_budget_mb is not None else None
        self.memory = ComponentMemoryDispatch(set(self._instance.values()), budget) \
            if wanted and self._instance else None
        if self.memory is not None and settings.placement == "memory":
            self._queues[POOL_KEY] = OrderedDict()
        self._busy: set[str] = set()  # gated instances running a batch

    def _take_locked(self, mine: tuple[str, ...] | None = None,
                     me: str | None = None) -> tuple[str, list[_Waiting]] | None:
        """The next batch of one of `mine`'s queues, in the order's order; `me`: the worker's
        gated instance (None: not gated), which runs the pooled questions it is given."""
        keys = [k for k in self._queues if self._queues[k] and (mine is None or k in mine)]
        if not keys:
            return None
        key = keys[self._turn % len(keys)]
        self._turn += 1
        queue = self._queues[key]
        gate = self.memory if me is not None and (key == POOL_KEY or key in self._instance) else None
        free = {i for i in self.memory.instances if i not in self._busy} if key == POOL_KEY else set()
        now, batch, left = self.clock(), [], False
        for w in self.order.ordered(list(queue.values())):
            if len(batch) >= self.settings.max_batch:
                break
            slot = (w.req.robot_id, w.req.component)
            if slot in self._running:  # its older query is in a batch now: this one waits for the next
                continue
            if gate is not None:
                w.kv = w.kv or demand_of(self.backends[me], w.req.query)
                adm = gate.admit(agent_name(w.req.task_id, w.req.component), w.kv, me, free | {me}, now, w.route)
                if adm.instance != me:  # no memory (it waits), or another free instance's: left for it
                    left = left or adm.instance is not None
                    continue
                w.ticket = adm.ticket
            batch.append(queue.pop(slot))
            if gate is not None and adm.over_budget:  # it needs the instance alone
                break
        for w in batch:
            self._running[(w.req.robot_id, w.req.component)] = w.req.query_id
        if left:
            self._cv.notify_all()
        if batch and gate is not None:
            self._busy.add(me)
        return ((me if key == POOL_KEY else key), batch) if batch else None

    def _work(self, mine: tuple[str, ...], me: str | None = None) -> None:
        # With server.torch_threads N >= 1 (one spinning OpenMP team per engine), one intra-op
        # thread: a second team beside System 1's made its calls 2.6x slower. By default torch's
        # own setup, as the engines' threads: their teams are throttled already, and in `make
        # demo-pipeline` a single-threaded component thread bought nothing (2 runs each, 60 s:
        # 4 and 7 tasks, System 1 round trip 201-271 ms p50, against 11 and 6 tasks, 163-242 ms).
        use_threads(1 if self.fleet.server.torch_threads else None)
        while True:
            with self._lock:
                took = self._take_locked(mine, me)
                while took is None and not self._stop:
                    self._cv.wait(0.5)
                    took = self._take_locked(mine, me)
                if took is None:
                    return
            self.run_batch(*took)

    def run_batch(self, key: str, batch: list[_Waiting]) -> list[ComponentAnswerData]:
        """One backend call for `batch` (the worker thread's step; tests may call it)."""
        backend = self.backends[key]
        started = self.clock()
        raw = ask(backend, [w.req.query for w in batch])
        done = self.clock()
        out = []
        with self._lock:
            self.batches[key] += 1
            for w, a in zip(batch, raw):
                self._running.pop((w.req.robot_id, w.req.component), None)
                out.append(self._answer_locked(w, a, backend, started, done))
            if self.memory is not None and key in self._instance:
                for w in batch:
                    if w.ticket is not None:
                        self.memory.complete(w.ticket, done)
                        w.ticket = None
                    self.memory.observed(agent_name(w.req.task_id, w.req.component), done - started)
                self._busy.discard(self._instance[key])
            self._cv.notify_all()
        self._deliver(out)
        due = [self.order.on_answered(w.req.robot_id, w.req.task_id, w.req.component, w.received, done,
                                      getattr(a, "text", "") or "") for w, a in zip(batch, raw)]
        if any(due):
            self.order.refresh()  # Kairos agent priorities, outside the service's lock
        return out

    def _answer_locked(self, w: _Waiting, a: Any, backend: Any, started: float, done: float) -> ComponentAnswerData:
        stats = self._stats[w.req.component]
        stats.latency_ms.append((done - w.received) * 1e3)
        error = getattr(a, "error", "") or ""
        if error:
            stats.errors[error.split(":")[0][:40]] += 1
        else:
            stats.answered += 1
        return answer_data(w.req, a, backend, queue_ms=(started - w.received) * 1e3)

    # ---- diagnostics and shutdown ----------------------------------------------------------

    def queued(self) -> int:
        with self._lock:
            return sum(len(q) for q in self._queues.values())

    def diagnostics(self) -> dict[str, Any]:
        """Plain counters: asked, answered, refused (by reason), backend errors, latency
        p50/p99 per component, queue depth, batches per backend."""
        with self._lock:
            d: dict[str, Any] = {
                "asked": sum(s.asked for s in self._stats.values()),
                "answered": sum(s.answered for s in self._stats.values()),
                "refused": sum(self.refused.values()),
                "backend_errors": sum(sum(s.errors.values()) for s in self._stats.values()),
                "queued": sum(len(q) for q in self._queues.values()),
                "delivery_errors": self.delivery_errors,
            }
            for reason, n in sorted(self.refused.items()):
                d[f"refused.{reason}"] = n
            for key in sorted(self.backends):
                d[f"backend.{key}"] = f"{self.backends[key].name}, {self.batches[key]} batches"
            for comp, s in self._stats.items():
                if not (s.asked or s.refused or any(c == comp for (_, c) in self.routes)):
                    continue
                lat = list(s.latency_ms)
                d[f"{comp}.asked"], d[f"{comp}.answered"] = s.asked, s.answered
                d[f"{comp}.refused"] = sum(s.refused.values())
                d[f"{comp}.errors"] = sum(s.errors.values())
                d[f"{comp}.latency_ms_p50"] = round(_percentile(lat, 50), 2)
                d[f"{comp}.latency_ms_p99"] = round(_percentile(lat, 99), 2)
            if self.memory is not None:
                d.update(self.memory.diagnostics(), placement=self.settings.placement)
        d.update(self.order.diagnostics())
        return d

    def forget(self, robot_id: str) -> None:
        """The robot was released (silent past server.robot_timeout_s, or gone): its questions
        still waiting are answered `closed`, and the backends drop what they keep for it (the
        VLA backbone's kept prefix, which no longer shows its world)."""
        with self._lock:
            mine = [(q, slot) for q in self._queues.values() for slot in q if slot[0] == robot_id]
            out = [self._refused_locked(q.pop(slot).req, CLOSED, "the robot was released") for q, slot in mine]
        self.order.forget(robot_id)  # its open pipeline step will not complete
        for b in distinct(self.backends):
            drop = getattr(b, "forget", None)
            if callable(drop):
                drop(robot_id)
        self._deliver(out)

    def close(self, timeout_s: float = 5.0) -> bool:
        """Stop the worker (within timeout_s: a batch in progress is waited for that long),
        answer what still waits `closed`, close the backends. True when the thread ended."""
        with self._lock:
            self._stop = True
            left = [w for q in self._queues.values() for w in q.values()]
            for q in self._queues.values():
                q.clear()
            out = [self._refused_locked(w.req, CLOSED, "the server is shutting down") for w in left]
            self._cv.notify_all()
        self._deliver(out)
        end = time.monotonic() + max(0.0, timeout_s)
        for t in self._threads:
            t.join(timeout=max(0.0, end - time.monotonic()))
        stopped = not any(t.is_alive() for t in self._threads)
        if stopped:
            for b in distinct(self.backends):
                try:
                    b.close()
                except Exception:
                    pass
        return stopped
