"""The language stream in the serving path (OxyGen §3, Algorithm 1): text from the
same prefill that produced a batch's actions.

For every batch an engine instance ran, the serving core hands this module the frame's prefix
cache after the chunks are published (the actions never wait for text): each robot of the batch
with a question due (an operator's, or its task's every `every_rounds` rounds) starts a text from
its row of that cache, then every active text on the instance, whatever frame or robot it came
from, decodes k tokens in one batch. k is the largest `tokens_per_frame` of the texts' tasks,
lowered so that actions plus text stay within 1 / the largest `min_action_rate_hz` (f_min): text
yields before the action rate does. Texts are bounded per robot in K/V memory and in number; a
text over its robot's memory is ended with the reason `memory`.

Each frame that adds tokens to a text gives one RobotTextData update (the whole text so far);
the last one has done = True and the reason. Only local engine instances speak: a remote
engine_worker returns actions, not its cache.
"""
from __future__ import annotations

import itertools
import threading
import time
from collections import Counter, deque
from dataclasses import dataclass, field
from typing import Any, Callable, Mapping, Sequence

from physai_ros.config.language import LanguageServerConfig, TaskLanguageConfig
from physai_ros.engine.language.decoder import SamplingParams
from physai_ros.engine.language.frame import DecodeBudget, decode_frame, start_texts
from physai_ros.engine.language.kv_manager import KVCacheManager
from physai_ros.protocol.text import REASON_REFUSED, SOURCE_TASK, QueryAnswer, RobotTextData, TextQuery
from physai_ros.serving.language.queries import PendingQuestion, QueryGate

UNKNOWN_ROBOT_KEY = "(not served here)"  # refusals of questions for robots this server does not serve
WINDOW_S = 10.0  # tokens/s and frame rates are measured over this window


@dataclass(frozen=True)
class FrameRobot:
    """One row of a batch that ran: who it was for."""

    robot_id: str
    task_id: str
    round_id: int


@dataclass(frozen=True)
class PrefixFrame:
    """A frame's prefix KV cache as the stream received it, offered to frame listeners that decode
    on it too (pipeline components: physai_ros.pipeline.vla_backend), so a component's question
    needs no second prefill. Read-only: a decoder's start() copies the rows it needs."""

    instance_id: str
    decoder: Any  # the instance's own decoder (the weights that made this cache)
    cache: Any
    batch: Any
    rows: tuple[FrameRobot, ...]
    stamp: float  # the stream's clock when the frame was handed over


@dataclass
class _Text:
    request_id: int
    robot_id: str
    task_id: str
    round_id: int
    question: str
    source: str
    task_cfg: TaskLanguageConfig
    seq: int = 0


@dataclass
class _Instance:
    engine: Any
    decoder: Any
    manager: KVCacheManager
    budget: DecodeBudget
    lock: threading.Lock = field(default_factory=threading.Lock)
    texts: dict[int, _Text] = field(default_factory=dict)  # manager id -> text
    frames: deque = field(default_factory=lambda: deque(maxlen=512))  # (t, actions_s, decode_s, f_min)
    last_k: int = 0
    below_floor: int = 0  # frames whose actions plus text took longer than 1 / f_min ...
    below_floor_text: int = 0  # ... of which the actions alone were within it (text's fault)


class LanguageStream:
    def __init__(self, cfg: LanguageServerConfig, tasks: Mapping[str, TaskLanguageConfig | None], tokenizer: Any,
                 clock: Callable[[], float] = time.monotonic):
        if tokenizer.eos_id is None:
            raise ValueError("the language stream needs a tokenizer with an <eos> token to end texts")
        self.cfg, self.tasks, self.tokenizer, self.clock = cfg, dict(tasks), tokenizer, clock
        self.gate = QueryGate(cfg, tokenizer.encode_text)
        self._instances: dict[str, _Instance] = {}
        self._pending: dict[str, deque] = {}  # robot -> PendingQuestion (operator questions)
        self._rounds_since_task_q: dict[str, int] = {}
        self._task_text: set[str] = set()  # robots whose task's own question is being answered
        self._ids = itertools.count(1)
        self._lock = threading.Lock()
        self._tokens: dict[str, deque] = {}  # robot -> (t, n) emitted
        self._done: dict[str, Counter] = {}  # robot -> end reason counts
        self._held: dict[str, tuple] = {}  # instance -> the frame waiting for run_held
        self._ended: deque = deque()  # (robot, why) to cancel outside the serving core's lock
        self._task_q_tokens = {name: tokenizer.encode_text(t.question) if t and t.question else []
                               for name, t in self.tasks.items()}
        self._listeners: list[Callable[[PrefixFrame], None]] = []
        self.listener_errors = 0

    # ---- set-up --------------------------------------------------------------------------

    def attach(self, instance_id: str, engine: Any) -> None:
        """Give a local engine instance a decoder, a KV cache manager and a decode budget; its
        infer() keeps each frame's prefix cache from now on (Pi0Engine.keep_prefix)."""
        engine.keep_prefix = True
        inst = _Instance(engine, engine.language_decoder(), KVCacheManager(self.cfg.kv_budget_bytes,
                                                                    self.cfg.max_requests_per_robot),
                         DecodeBudget(k_max=1, f_min_hz=1.0))
        self._instances[instance_id] = inst

    def speaks_on(self, instance_id: str, engine: Any) -> bool:
        """Whether this instance's frames start texts: it was attached, with this very engine (an
        engine swapped in later, e.g. a wrapper, has other weights or none to speak with)."""
        inst = self._instances.get(instance_id)
        return inst is not None and inst.engine is engine

    def add_frame_listener(self, listener: Callable[[PrefixFrame], None]) -> None:
        """Call `listener` with every frame's prefix before its texts start (on the instance
        thread, after the chunks are out). It must be quick: it runs before the frame's decoding."""
        self._listeners.append(listener)

    def _offer(self, frame: PrefixFrame) -> None:
        for listener in self._listeners:
            try:
                listener(frame)
            except Exception:  # a listener failing must not cost the robots their text
                self.listener_errors += 1

    def task_config(self, task_id: str) -> TaskLanguageConfig:
        return self.tasks.get(task_id) or TaskLanguageConfig()

    # ---- questions -----------------------------------------------------------------------

    def ask(self, q: TextQuery, registered: bool, now: float | None = None) -> QueryAnswer:
        """An operator's question for the robot's next frame (validated, rate-limited)."""
        now = self.clock() if now is None else now
        with self._lock:
            if not registered:
                return self._refuse(q, False, "unknown_robot", f"{q.robot_id[:64]!r} is not served here")
            pending = self._pending.setdefault(q.robot_id, deque())
            checked = self.gate.check(q, pending, now)
            if isinstance(checked, tuple):
                return QueryAnswer(False, f"{checked[0]}: {checked[1]}")
            rid = next(self._ids)
            pending.append(PendingQuestion(rid, q.question.strip(), checked, q.max_tokens, q.source, q.requester))
            return QueryAnswer(True, "", rid)

    def refuse(self, q: TextQuery, reason: str, detail: str, registered: bool) -> QueryAnswer:
        """A question refused before the gate (an unauthenticated one): counted like the rest."""
        with self._lock:
            return self._refuse(q, registered, reason, detail)

    def _refuse(self, q: TextQuery, registered: bool, reason: str, detail: str) -> QueryAnswer:
        # Under the lock. Counted with the robot it names when that robot is served here, else
        # under one key: a stream of made-up robot names must not grow the counters without end.
        key = q.robot_id[:64] if registered else UNKNOWN_ROBOT_KEY
        self.gate.refused.setdefault(key, Counter())[reason] += 1
        return QueryAnswer(False, f"{reason}: {detail}")

    def _due(self, fr: FrameRobot) -> PendingQuestion | None:
        """Under the lock: the question this robot's row starts this frame, if any (operators'
        first; the task's own when every_rounds have passed and its last one has ended)."""
        pending = self._pending.get(fr.robot_id)
        if pending:
            return pending.popleft()
        tcfg = self.tasks.get(fr.task_id)
        if tcfg is None or tcfg.every_rounds <= 0:
            return None
        due = self._task_question_due(fr)
        self._rounds_since_task_q[fr.robot_id] = self._rounds_since_task_q.get(fr.robot_id, tcfg.every_rounds - 1) + 1
        if not due:
            return None
        self._rounds_since_task_q[fr.robot_id] = 0
        self._task_text.add(fr.robot_id)  # until its text ends (_count)
        return PendingQuestion(next(self._ids), tcfg.question, list(self._task_q_tokens.get(fr.task_id, [])),
                               0, SOURCE_TASK)

    # ---- frames --------------------------------------------------------------------------

    def frame(self, instance_id: str, cache: Any, batch: Any, rows: Sequence[FrameRobot],
              actions_s: float) -> list[RobotTextData]:
        """Algorithm 1 after a batch's actions: start the due texts from this frame's cache,
        decode k tokens of every active text on the instance. Returns the updates to publish."""
        inst = self._instances[instance_id]
        now = self.clock()
        out: list[RobotTextData] = []
        if self._listeners:
            self._offer(PrefixFrame(instance_id, inst.decoder, cache, batch, tuple(rows), now))
        with self._lock:
            starts = {fr.robot_id: (fr, q) for fr in rows if (q := self._due(fr)) is not None}
        with inst.lock:
            ask, questions, names, texts = {}, {}, {}, {}
            for robot, (fr, q) in starts.items():
                tcfg = self.task_config(fr.task_id)
                ask[robot] = SamplingParams(max_tokens=q.max_tokens or tcfg.max_tokens, temperature=tcfg.temperature,
                                            top_p=tcfg.top_p, eos_id=self.tokenizer.eos_id, seed=q.request_id,
                                            tokens_per_frame=tcfg.tokens_per_frame)
                questions[robot], names[robot] = q.tokens, str(q.request_id)
                texts[robot] = _Text(q.request_id, robot, fr.task_id, fr.round_id, q.question, q.source, tcfg)
            new, refused = start_texts(inst.decoder, inst.manager, cache, batch, [fr.robot_id for fr in rows],
                                       ask, questions, names)
            for robot, text in texts.items():
                if new.get(robot) is None:
                    out.append(self._update(text, (), REASON_REFUSED, refused.get(robot, "not started")))
                else:
                    inst.texts[new[robot]] = text
            live = [inst.texts[i] for i in inst.manager.active() if i in inst.texts]
            k_max = max((t.task_cfg.tokens_per_frame for t in live), default=0)
            f_min = max((t.task_cfg.min_action_rate_hz for t in live), default=1.0)
            emitted, finished, inst.last_k, decode_s = decode_frame(
                inst.decoder, inst.manager, inst.budget, actions_s, k_max=k_max, f_min_hz=f_min)
            per_robot: Counter = Counter()
            for mid, toks in emitted.items():
                text = inst.texts.get(mid)
                if text is None:
                    continue
                per_robot[text.robot_id] += len(toks)
                if toks and mid not in finished:
                    out.append(self._update(text, inst.manager.retrieve(mid).tokens))
            for mid, req in finished.items():
                text = inst.texts.pop(mid, None)
                if text is not None:
                    out.append(self._update(text, req.tokens, req.reason))
            self._frame_stats(inst, now, actions_s, decode_s, f_min if live else None)
        self._count(out, now, per_robot)
        return out

    def _update(self, t: _Text, tokens: Sequence[int], reason: str = "", detail: str = "") -> RobotTextData:
        t.seq += 1
        toks = tuple(int(x) for x in tokens)
        return RobotTextData(robot_id=t.robot_id, task_id=t.task_id, round_id=t.round_id, request_id=t.request_id,
                             question=t.question, source=t.source, tokens=toks,
                             text=self.tokenizer.decode_ids(list(toks)), seq=t.seq, done=bool(reason),
                             reason=reason, detail=detail, stamp=time.time())

    def _frame_stats(self, inst: _Instance, now: float, actions_s: float, decode_s: float, f_min: float | None):
        inst.frames.append((now, actions_s, decode_s, f_min))
        if f_min is not None and actions_s + decode_s > 1.0 / f_min:
            inst.below_floor += 1
            if actions_s <= 1.0 / f_min:
                inst.below_floor_text += 1

    def _count(self, updates: Sequence[RobotTextData], now: float, tokens: Mapping[str, int] | None = None) -> None:
        with self._lock:
            for u in updates:
                if u.done:
                    self._done.setdefault(u.robot_id, Counter())[u.reason] += 1
                    if u.source == SOURCE_TASK:
                        self._task_text.discard(u.robot_id)
            for robot, n in (tokens or {}).items():
                q = self._tokens.setdefault(robot, deque())
                q.append((now, n))
                while q and q[0][0] < now - WINDOW_S:
                    q.popleft()

    # ---- hand-off from the serving core ---------------------------------------------------

    def wants_frame(self, instance_id: str, rows: Sequence[FrameRobot]) -> bool:
        """Whether this batch's frame has text work: a frame listener, a text still decoding on
        the instance, or a row whose question is due (an operator's, or its task's every_rounds).
        A frame without any is skipped: the instance is freed with the chunks instead of after an
        empty language frame (a robot without language paid a thread round trip per request for
        it). Skipped rows still count towards their task's every_rounds."""
        inst = self._instances.get(instance_id)
        if inst is None:
            return False
        if self._listeners:
            return True
        with inst.lock:
            if inst.manager.active():
                return True
        with self._lock:
            if any(self._pending.get(fr.robot_id) or self._task_question_due(fr) for fr in rows):
                return True
            for fr in rows:  # nothing starts: _due only counts this frame's round for each row
                self._due(fr)
            return False

    def _task_question_due(self, fr: FrameRobot) -> bool:
        """Under the lock: whether _due would start the task's own question on this row (it
        counts the round; this only looks)."""
        tcfg = self.tasks.get(fr.task_id)
        if tcfg is None or tcfg.every_rounds <= 0:
            return False
        n = self._rounds_since_task_q.get(fr.robot_id, tcfg.every_rounds - 1) + 1
        return n >= tcfg.every_rounds and fr.robot_id not in self._task_text

    def hold(self, instance_id: str, cache: Any, batch: Any, rows: Sequence[FrameRobot], actions_s: float) -> None:
        """The core ran a batch: keep its frame (cache, rows, action time) for
        run_held (called from the same instance thread once the chunks are out)."""
        self._held[instance_id] = (cache, batch, tuple(rows), actions_s)

    def is_holding(self, instance_id: str) -> bool:
        """A frame waits for run_held (asked from the instance's own thread, which holds it)."""
        return instance_id in self._held

    def run_held(self, instance_id: str) -> list[RobotTextData]:
        held = self._held.pop(instance_id, None)
        return [] if held is None else self.frame(instance_id, *held)

    def robot_ended(self, robot_id: str, why: str) -> None:
        """Called under the serving core's lock: cancelling waits for a decode, so it is queued."""
        self._ended.append((robot_id, why))

    def drain_ended(self) -> list[RobotTextData]:
        out: list[RobotTextData] = []
        while self._ended:
            robot, why = self._ended.popleft()
            out += self.cancel_robot(robot, why)
        return out

    # ---- robots leaving ------------------------------------------------------------------

    def cancel_robot(self, robot_id: str, why: str) -> list[RobotTextData]:
        """The robot was released or switched task: its texts end (cancelled), its waiting
        questions are dropped with an answer each."""
        now = self.clock()
        out = []
        with self._lock:
            for q in self._pending.pop(robot_id, ()):
                out.append(RobotTextData(robot_id, "", 0, q.request_id, q.question, q.source, (), "", 1, True,
                                         "cancelled", why, time.time()))
            self._rounds_since_task_q.pop(robot_id, None)
            self._task_text.discard(robot_id)
            self.gate.forget(robot_id)
        for inst in self._instances.values():
            with inst.lock:
                for mid in inst.manager.active(robot_id):
                    req = inst.manager.retrieve(mid)
                    inst.decoder.cancel(req)
                    t = inst.texts.pop(mid, None)
                    if t is not None:
                        out.append(self._update(t, req.tokens, "cancelled", why))
                inst.manager.remove_done()
        self._count(out, now)
        return out

    # ---- reporting -----------------------------------------------------------------------

    def _rate(self, robot: str, now: float) -> float:
        """Tokens/s over the last WINDOW_S (under the lock)."""
        return sum(n for t, n in self._tokens.get(robot, ()) if t >= now - WINDOW_S) / WINDOW_S

    def robot_diagnostics(self, robot_id: str) -> dict[str, Any]:
        """Per robot: tokens/s over the window, texts active, K/V memory, ends and refusals."""
        now = self.clock()
        with self._lock:
            rate = self._rate(robot_id, now)
            done = dict(self._done.get(robot_id, {}))
            refused = dict(self.gate.refused.get(robot_id, {}))
            pending = len(self._pending.get(robot_id, ()))
        active = sum(len(i.manager.active(robot_id)) for i in self._instances.values())
        kv = sum(i.manager.bytes_of(robot_id) for i in self._instances.values())
        return {"text_tokens_per_s": round(rate, 2), "text_active": active, "text_pending": pending,
                "text_kv_bytes": kv, "text_done": done, "text_questions_refused": refused}

    def fleet_diagnostics(self) -> dict[str, Any]:
        """Server-wide: tokens/s, texts active, K/V memory in use, and per instance the frame
        rate held against the floor (f_min) the texts' tasks ask for."""
        now = self.clock()
        with self._lock:
            rate = sum(self._rate(r, now) for r in self._tokens)
            refused = sum(sum(c.values()) for c in self.gate.refused.values())
        out: dict[str, Any] = {"text_tokens_per_s": round(rate, 2), "text_questions_refused": refused,
                               "text_active": sum(len(i.manager.active()) for i in self._instances.values()),
                               "text_kv_bytes": sum(i.manager.total_bytes() for i in self._instances.values())}
        for iid, inst in self._instances.items():
            with inst.lock:
                frames = [f for f in inst.frames if f[0] >= now - WINDOW_S]
                floors = [f[3] for f in frames if f[3] is not None]
                out[f"{iid}.frames_per_s"] = round(len(frames) / WINDOW_S, 2)
                out[f"{iid}.f_min_hz"] = max(floors) if floors else 0.0
                out[f"{iid}.tokens_per_frame"] = inst.last_k
                out[f"{iid}.frames_below_floor"] = inst.below_floor
                out[f"{iid}.frames_below_floor_by_text"] = inst.below_floor_text
                out[f"{iid}.cut_for_memory"] = inst.manager.stats["cut_for_memory"]
        return out
