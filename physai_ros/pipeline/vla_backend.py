"""The VLA's own backbone as a pipeline component backend (on the language stream's decoder).

A component's question (System 2's "next subgoal?", safety's "is the workcell safe?", the
monitor's "ongoing, done or failed?") is decoded by the PaliGemma backbone of the served pi0 /
pi0.5 model, greedily, after a prefix of the robot's observation and task prompt, exactly as the
language stream decodes a text question (engine.language.decoder: the question's tokens appended after
the prompt, causal, not emitted). Two ways to get that prefix:

- shared (OxyGen's cross-task KV sharing, the cheap path): the robot ran a System 1 round less
  than `max_prefix_age_s` ago. The language stream offers every frame's prefix KV cache to this
  backend (`attach(stream)` registers `offer_frame` as a frame listener) and the question is
  decoded on the robot's row of it: no second prefill. The answer is about what System 1 saw at
  that round, with System 1's prompt of that round (meta: round_id, prefix_age_s, prefix_prompt);
- own: no fresh round (the robot is held after a safety stop, or the component runs between
  rounds at its own rate). The queries' observations go through serving's preprocessing
  (pipeline.vla_inputs) and are prefilled once, as one batch.

All of a batch's questions, shared and own, then decode together (one batched decode per model,
k = the largest max_tokens, each query ending at its own budget or <eos>). A bad query gets an
answer with `error` set and costs the others nothing; the batch's wall time is every answer's
latency_ms.
"""
from __future__ import annotations

import threading
import time
from dataclasses import dataclass
from typing import Any, Callable, Optional, Sequence

import numpy as np
import torch

from physai_ros.engine.batching import collate
from physai_ros.engine.language.decoder import SamplingParams, batch_requests
from physai_ros.pipeline.backend import ComponentAnswer, ComponentQuery, KVDemand
from physai_ros.pipeline.kept_prefix import KeptPrefix, KeptPrefixes
from physai_ros.pipeline.vla_inputs import QueryError, check_query, engine_input, question_ids

PATH_SHARED, PATH_OWN = "shared", "own"


@dataclass(frozen=True)
class VLABackendSettings:
    """max_prefix_age_s: how old a System 1 round may be and still answer (the sim fleet runs a
    round about every second; a held robot runs none). use_shared False: always prefill (tests,
    comparisons). max_question_tokens / max_answer_tokens bound a text's K/V as the language
    stream's operator questions are bounded."""

    max_prefix_age_s: float = 1.0
    use_shared: bool = True
    max_question_tokens: int = 64
    max_answer_tokens: int = 256


@dataclass
class VLABackendStats:
    batches: int = 0
    queries: int = 0
    errors: int = 0
    shared: int = 0  # answered on a kept System 1 prefix ...
    prefills_saved: int = 0  # ... each one an observation not prefilled again
    own: int = 0  # answered on this backend's own prefill
    prefills: int = 0  # own prefill calls (one per batch that needed one)
    prefill_rows: int = 0
    decodes: int = 0  # batched decodes run (one per model a batch's questions were on)
    last_batch_ms: float = 0.0


def _model_of(decoder: Any) -> int:
    """Decoders over the same weights (the stream's instance decoder and this backend's, on one
    engine) decode in one batch: FastLanguage keeps the model as .m, PlainLanguage the weights as .w."""
    return id(getattr(decoder, "m", None) or getattr(decoder, "w", None) or decoder)


@dataclass
class _Job:
    """One query on its way through a batch."""

    index: int
    query: ComponentQuery
    question: list[int]
    path: str = PATH_OWN
    kept: Optional[KeptPrefix] = None
    input: Any = None
    decoder: Any = None
    request: Any = None
    error: str = ""


class VLABackboneBackend:
    """ComponentBackend on a Pi0Engine built with language=True (pi0 or pi0.5, fast or plain).

    engine: the served model (the server's own instance, or one loaded for the pipeline);
    runner: serving.action_runner.ActionModelRunner of that model (tokenizer, statistics, prompt
    style: the observation is preprocessed as System 1's is)."""

    def __init__(self, engine: Any, runner: Any, settings: VLABackendSettings = VLABackendSettings(),
                 name: str = "vla_backbone", clock: Callable[[], float] = time.monotonic):
        if runner.model_config is not engine.config and runner.model_config != engine.config:
            raise ValueError("runner: built for another model than the engine's")
        self.name, self.engine, self.runner, self.settings = name, engine, runner, settings
        self.config = engine.config
        self.decoder = engine.language_decoder()  # refuses a model without the LM head, by name
        self.tokenizer = runner.tokenizer
        self.kept = KeptPrefixes(settings.max_prefix_age_s, clock)
        self.stats = VLABackendStats()
        self._gen = torch.Generator().manual_seed(0)  # collate's noise: drawn, never used
        self._lock = threading.Lock()  # one batch at a time
        self._element_size = torch.empty((), dtype=engine.dtype).element_size()

    @classmethod
    def from_core(cls, core: Any, instance_id: Optional[str] = None, attach: bool = True,
                  **kw) -> "VLABackboneBackend":
        """On a serving core's local engine instance (its first by default), attached to the
        core's language stream when it has one and `attach` (otherwise every question takes the
        own path: a factory plan that puts the components on an instance of their own does not
        decode on System 1's prefix, which lives on another instance)."""
        slots = [s for s in core.engines.values() if not s.remote]
        slot = core.engines[instance_id] if instance_id is not None else (slots[0] if slots else None)
        if slot is None or slot.remote:
            raise ValueError("the VLA backbone backend needs a local engine instance (a remote worker keeps its weights)")
        if instance_id is not None:  # a placement someone chose: the answers say where they ran
            kw.setdefault("name", f"vla_backbone@{instance_id}")
        backend = cls(slot.engine, core.action_runner, **kw)
        if core.language is not None and attach:
            backend.attach(core.language)
        return backend

    # ---- the seam: the language stream's frames -----------------------------------------------

    def attach(self, stream: Any) -> None:
        """Hear every frame's prefix from a serving.language.stream.LanguageStream (its clock
        dates them, so ages are read on it too)."""
        self.kept.clock = stream.clock
        stream.add_frame_listener(self.offer_frame)

    def offer_frame(self, frame: Any) -> None:
        """A System 1 frame's prefix KV cache (serving.language.stream.PrefixFrame): its robots'
        component questions decode on it until their next round or max_prefix_age_s."""
        self.kept.offer(frame)

    def forget(self, robot_id: str) -> None:
        """The robot's kept prefix no longer shows its world (reset, released, stopped): its next
        questions prefill their own observation."""
        self.kept.forget(robot_id)

    # ---- ComponentBackend --------------------------------------------------------------------

    def answer(self, queries: Sequence[ComponentQuery]) -> list[ComponentAnswer]:
        with self._lock:
            t0 = time.perf_counter()
            jobs = [self._job(i, q) for i, q in enumerate(queries)]
            timings = self._run([j for j in jobs if not j.error])
            ms = (time.perf_counter() - t0) * 1e3
            st = self.stats
            st.batches += 1
            st.queries += len(jobs)
            st.last_batch_ms = ms
            out = []
            for j in jobs:
                if j.error:
                    st.errors += 1
                    out.append(ComponentAnswer(error=j.error, latency_ms=ms, meta={"path": j.path}))
                    continue
                if j.path == PATH_SHARED:
                    st.shared += 1
                    st.prefills_saved += 1
                else:
                    st.own += 1
                out.append(self._answer_of(j, ms, timings))
            return out

    def kv_demand(self, q: ComponentQuery) -> KVDemand:
        """The K/V one question will hold (serving.pipeline.memory_dispatch), as decoder.start
        copies it: the observation's prefix (its views' image tokens and the prompt's valid
        tokens, the whole prompt window for a prompt that cannot be read here), then the
        question's and the answer's tokens."""
        cfg = self.config
        per_token = 2 * cfg.vlm.depth * cfg.vlm.num_kv_heads * cfg.vlm.head_dim * self._element_size
        try:
            prompt = int(self.runner.tokens(q.task_prompt, np.asarray(q.state)).mask.sum())
        except Exception:  # the batch will say what is wrong with it; here only its size matters
            prompt = self.tokenizer.max_len
        try:
            question = len(question_ids(self.tokenizer, q.question, cfg.vocab_size, self.settings.max_question_tokens))
        except QueryError:
            question = self.settings.max_question_tokens
        prefix = len(q.images) * cfg.vision.num_tokens + prompt + question
        return KVDemand(prefix * per_token, int(q.max_tokens) * per_token)

    def close(self) -> None:
        """Nothing to release but the kept prefixes (the engine belongs to whoever built it)."""
        self.kept.clear()

    # ---- internals ---------------------------------------------------------------------------

    def _job(self, index: int, q: Any) -> _Job:
        s, cfg = self.settings, self.config
        try:
            check_query(q, cfg.max_views, cfg.max_state_dim, s.max_answer_tokens)
            job = _Job(index, q, question_ids(self.tokenizer, q.question, cfg.vocab_size, s.max_question_tokens))
            kept = self.kept.get(q.robot_id) if s.use_shared else None
            if kept is not None:
                job.path, job.kept = PATH_SHARED, kept
            else:
                job.input = engine_input(self.runner, cfg, q)
            return job
        except QueryError as e:
            return _Job(index, q, [], error=str(e))
        except Exception as e:  # anything unforeseen is still this query's problem only
            return _Job(index, q, [], error=f"{type(e).__name__}: {e}")

    def _params(self, q: ComponentQuery) -> SamplingParams:
        return SamplingParams(max_tokens=q.max_tokens, eos_id=self.tokenizer.eos_id)

    def _run(self, jobs: list[_Job]) -> dict:
        """Start every job's request (own ones after one batched prefill), then decode per model."""
        timings = {"prefill_ms": 0.0, "decode_ms": 0.0}
        own = [j for j in jobs if j.path == PATH_OWN]
        if own:
            t0 = time.perf_counter()
            try:
                self._prefill_own(own)
            except Exception as e:  # the batch's prefill failed: its queries get the reason
                for j in own:
                    j.error = f"prefill failed: {type(e).__name__}: {e}"
            timings["prefill_ms"] = (time.perf_counter() - t0) * 1e3
        for j in jobs:
            if j.path == PATH_SHARED:
                self._start(j, j.kept.frame.decoder, j.kept.frame.cache, j.kept.row, j.kept.last_prompt_token)
        t1 = time.perf_counter()
        groups: dict[int, tuple[Any, list[_Job]]] = {}
        for j in jobs:
            if not j.error:
                groups.setdefault(_model_of(j.decoder), (j.decoder, []))[1].append(j)
        for decoder, group in groups.values():
            try:
                k = max(j.query.max_tokens for j in group)
                self.stats.decodes += 1
                decoder.decode_batched(batch_requests([j.request for j in group], k), k)
            except Exception as e:
                for j in group:
                    j.error = f"decoding failed: {type(e).__name__}: {e}"
        timings["decode_ms"] = (time.perf_counter() - t1) * 1e3
        return timings

    def _prefill_own(self, own: list[_Job]) -> None:
        """One prefill for every own-path query of the batch (the engine's own model, as
        System 1 runs it; the action expert is not run)."""
        b = collate([j.input for j in own], self.config, self.engine.device, self.engine.dtype, generator=self._gen)
        with torch.inference_mode():
            cache = self.engine.model.prefix(b.images, b.image_masks, b.tokens, b.token_mask)
        self.stats.prefills += 1
        self.stats.prefill_rows += len(own)
        for row, j in enumerate(own):
            self._start(j, self.decoder, cache, row, int(b.tokens[row][b.token_mask[row]][-1]))

    def _start(self, j: _Job, decoder: Any, cache: Any, row: int, last_token: int) -> None:
        """The job's request on `row` of `cache` (a copy of that row: the cache stays as it was)."""
        try:
            j.decoder = decoder
            j.request = decoder.start(cache, row, last_token, self._params(j.query),
                                      f"{j.query.robot_id}/{j.query.component}", question=j.question)
        except Exception as e:
            j.error = f"{type(e).__name__}: {e}"

    def _answer_of(self, j: _Job, ms: float, timings: dict) -> ComponentAnswer:
        req = j.request
        tokens = tuple(int(t) for t in req.tokens)
        meta = {"path": j.path, "reason": req.reason, "token_ids": tokens, **timings}
        if j.kept is not None:
            meta.update(round_id=j.kept.round_id, task_id=j.kept.task_id, instance=j.kept.frame.instance_id,
                        prefix_age_s=round(j.kept.age_s(self.kept.clock()), 4),
                        prefix_prompt=j.kept.prompt(self.tokenizer))
        # Stripped: the byte-level BPE marks a word start with a space, which is no part of the answer
        # (training's text evaluation strips it too); the ids stay raw in meta.
        return ComponentAnswer(text=self.tokenizer.decode_ids(list(tokens)).strip(), tokens=len(tokens),
                               latency_ms=ms, meta=meta)
