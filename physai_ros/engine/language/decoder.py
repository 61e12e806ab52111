"""Language decoding on the action model's prefix KV cache (OxyGen §3: cross-task KV sharing),
plain path: the PaliGemma backbone of a pi0 / pi0.5 model continues the prompt as text, reading
the same per-layer K/V the action expert reads, so actions and text come from one prefill.

Semantics (PaliGemma is a prefix LM):
- the prefix (image tokens, prompt tokens) is bidirectional over its valid tokens; a generated
  token attends to every valid prefix token, the generated tokens before it and itself;
- RoPE positions continue after the valid prefix: generated token j sits at n_valid + j;
- a request may carry a question (token ids, e.g. "what is the current subtask?" asked at run
  time): it is appended after the valid prefix like generated text (causal, positions n_valid + j)
  but not emitted; its tokens but the last are prefilled in one block when the request starts, the
  last is the first decode step's input, and the answer starts from its logits. The prefix, and so
  the action's cache, is the same for every question;
- without a question, the first token's logits are the prefix's output at its last valid token. That output is
  recomputed here from the cache, not kept from the prefill: in a bidirectional prefix the last
  token attends to exactly the valid prefix K/V at every layer, so pushing its embedding through
  the layers against the cache (without appending it) gives its prefill output bit for bit, and
  the prefill itself (fast path: the VLM's last layer computes K/V only) need not change;
- logits = RMSNorm_(1 + w)(h) @ embed^T: the LM head is tied to the token embedding (PaliGemma,
  Gemma), so every pi0 / pi0.5 checkpoint that carries the VLM (embed_tokens or lm_head, and the
  final norm) can speak; a weight dict without them is refused by name.

A request holds its own compacted copy of the valid prefix K/V and its generated K/V, so it lives
across frames (the next frame's prefill replaces the action's cache, not the sentence being
said) and requests of different robots and frames decode together in one batch.
"""
from __future__ import annotations

import math
from dataclasses import dataclass, field
from typing import List, Optional, Sequence

import torch

from physai_ros.engine.checkpoint.params import Weights
from physai_ros.engine.pi0.modeling import apply_rope, attention, gemma_mlp, lin_nb, rms_norm, rope_cos_sin
from physai_ros.engine.types import Pi0Config, PrefixCache

DONE_EOS, DONE_BUDGET, DONE_STOP, DONE_CANCELLED = "eos", "budget", "stop", "cancelled"


@dataclass(frozen=True)
class SamplingParams:
    """max_tokens: budget of generated tokens; temperature 0 is greedy; top_p in (0, 1];
    eos_id ends the text (not emitted); stop_ids end it too (emitted); seed for sampling."""

    max_tokens: int = 32
    temperature: float = 0.0
    top_p: float = 1.0
    eos_id: Optional[int] = None
    stop_ids: tuple = ()
    seed: int = 0
    # Tokens this request may decode per frame (0: the frame's k). A task's k in fleet.yaml.
    tokens_per_frame: int = 0

    def validate(self) -> None:
        if isinstance(self.max_tokens, bool) or not isinstance(self.max_tokens, int) or self.max_tokens < 1:
            raise ValueError(f"max_tokens: expected an integer >= 1, got {self.max_tokens!r}")
        if not (math.isfinite(self.temperature) and self.temperature >= 0):
            raise ValueError(f"temperature: expected a finite number >= 0, got {self.temperature!r}")
        if not (0 < self.top_p <= 1):
            raise ValueError(f"top_p: expected 0 < top_p <= 1, got {self.top_p!r}")
        if isinstance(self.tokens_per_frame, bool) or not isinstance(self.tokens_per_frame, int) \
                or self.tokens_per_frame < 0:
            raise ValueError(f"tokens_per_frame: expected an integer >= 0, got {self.tokens_per_frame!r}")


@dataclass
class LanguageRequest:
    """One text being generated. prefix_keys/values: per layer [n_prefix, KV, hd] (valid rows
    only, RoPE applied); gen_keys/values: per layer [G, KV, hd], the question's and the generated
    tokens' K/V; question: forced input ids after the prefix (not emitted); tokens: generated so
    far."""

    request_id: str
    params: SamplingParams
    prefix_keys: List[torch.Tensor]
    prefix_values: List[torch.Tensor]
    last_prompt_token: int
    gen_keys: List[torch.Tensor]
    gen_values: List[torch.Tensor]
    tokens: List[int] = field(default_factory=list)
    done: bool = False
    reason: str = ""
    generator: Optional[torch.Generator] = None
    question: List[int] = field(default_factory=list)

    @property
    def n_stream(self) -> int:
        """Inputs after the prefix so far: the question and the generated tokens."""
        return len(self.question) + len(self.tokens)

    def last_input(self) -> int:
        return self.tokens[-1] if self.tokens else self.question[-1]

    @property
    def n_prefix(self) -> int:
        return int(self.prefix_keys[0].shape[0])

    def kv_bytes(self) -> int:
        """Memory this request holds: its prefix copy and the generated K/V (a token's K/V is
        written when it is read back as the next input, so the newest has none yet)."""
        return sum(t.numel() * t.element_size()
                   for ts in (self.prefix_keys, self.prefix_values, self.gen_keys, self.gen_values) for t in ts)


class LanguageDecoder:
    """Requests, sampling and end rules; a subclass supplies its model path's layers (`_layers`)
    and LM head (`_logits`)."""

    cfg: Pi0Config

    # ---------------------------------------------------------------- requests
    def start(self, cache: PrefixCache, row: int, last_prompt_token: int, params: SamplingParams,
              request_id: str, question: Sequence[int] = ()) -> LanguageRequest:
        """A request continuing robot `row`'s prompt, with its own copy of that row's valid K/V,
        answering `question` (token ids appended after the prompt; empty: continue the prompt)."""
        params.validate()
        question = [int(t) for t in question]
        bad = [t for t in question if not 0 <= t < self.cfg.vocab_size]
        if bad:
            raise ValueError(f"question: token ids {bad[:4]} outside the vocabulary (0..{self.cfg.vocab_size - 1})")
        valid = cache.pad[row]
        with torch.inference_mode(False):
            keys = [k[row][valid].clone() for k in cache.keys]
            values = [v[row][valid].clone() for v in cache.values]
        empty = [k[:0] for k in keys]
        gen = torch.Generator().manual_seed(params.seed) if params.temperature > 0 else None
        req = LanguageRequest(request_id, params, keys, values, int(last_prompt_token), list(empty),
                              [v[:0] for v in values], generator=gen, question=question)
        if len(question) > 1:
            with torch.inference_mode(False):
                self._prefill(req, question[:-1])
        return req

    @torch.no_grad()
    def _prefill(self, req: LanguageRequest, ids: List[int]) -> None:
        """The question's leading tokens in one causal block after the prefix, their K/V appended
        to the request (the last question token is the first decode step's input)."""
        n, t = req.n_prefix, len(ids)
        dev = req.prefix_keys[0].device  # the model's: masks and ids live beside the K/V
        allowed = torch.ones(1, t, n + t, dtype=torch.bool, device=dev)
        allowed[0, :, n:] = torch.tril(torch.ones(t, t, dtype=torch.bool, device=dev))

        def sink_of(li):
            def sink(k, v):
                req.gen_keys[li] = torch.cat([req.gen_keys[li], k[0]])
                req.gen_values[li] = torch.cat([req.gen_values[li], v[0]])
                return (torch.cat([req.prefix_keys[li], req.gen_keys[li]])[None],
                        torch.cat([req.prefix_values[li], req.gen_values[li]])[None], allowed)
            return sink

        self._layers(torch.tensor([ids], device=dev), (n + torch.arange(t, device=dev))[None], sink_of)

    @staticmethod
    def cancel(req: LanguageRequest) -> None:
        if not req.done:
            req.done, req.reason = True, DONE_CANCELLED

    @torch.no_grad()
    def step(self, requests: Sequence[LanguageRequest]) -> List[Optional[int]]:
        """One token for every active request, decoded together; returns the token each emitted
        (None for a request that ended without emitting one, or was already done)."""
        active = [r for r in requests if not r.done]
        out: dict = {}
        if active:
            logits = self.next_logits(active).cpu()
            for r, lg in zip(active, logits):
                out[id(r)] = self._accept(r, self._sample(r, lg))
        return [out.get(id(r)) for r in requests]

    @torch.no_grad()
    def decode_batched(self, state, k: int) -> List[List[int]]:
        """Algorithm 1's BATCHEDLANGUAGEDECODE: up to k tokens for every request of a batched
        state (batch_requests, or KVCacheManager.batch), writing their K/V into its buffers;
        unbatch_requests hands them back. Returns the tokens each request emitted."""
        emitted: List[List[int]] = [[] for _ in state.requests]
        # A request's own tokens_per_frame (its task's k) can be below the frame's k: it sits out
        # the remaining steps (frozen like a finished one: no K/V written, no token taken).
        limits = [min(k, r.params.tokens_per_frame or k) for r in state.requests]
        for step in range(k):
            live = [not r.done and step < lim for r, lim in zip(state.requests, limits)]
            if not any(live):
                break
            # One transfer per step: sampling and the end rules run on the host.
            logits = self._forward(state.requests, state, live).cpu()
            for j, (r, lg) in enumerate(zip(state.requests, logits)):
                if live[j]:
                    tok = self._accept(r, self._sample(r, lg))
                    if tok is not None:
                        emitted[j].append(tok)
        return emitted

    def generate(self, requests: Sequence[LanguageRequest], max_steps: int = 1 << 20) -> None:
        """Decode until every request is done (tests, offline use)."""
        for _ in range(max_steps):
            if all(r.done for r in requests):
                return
            self.step(requests)

    # ---------------------------------------------------------------- internals
    def _accept(self, r: LanguageRequest, tok: int) -> Optional[int]:
        p = r.params
        if p.eos_id is not None and tok == p.eos_id:
            r.done, r.reason = True, DONE_EOS
            return None
        r.tokens.append(tok)
        if tok in p.stop_ids:
            r.done, r.reason = True, DONE_STOP
        elif len(r.tokens) >= p.max_tokens:
            r.done, r.reason = True, DONE_BUDGET
        return tok

    @staticmethod
    def _sample(r: LanguageRequest, logits: torch.Tensor) -> int:
        p = r.params
        if p.temperature == 0:
            return int(torch.argmax(logits))
        probs = torch.softmax(logits.double() / p.temperature, dim=-1)
        if p.top_p < 1:
            sorted_p, idx = torch.sort(probs, descending=True)
            # Keep the smallest head whose mass reaches top_p (the first token always).
            keep = torch.cumsum(sorted_p, 0) - sorted_p < p.top_p
            probs = torch.zeros_like(probs).scatter_(0, idx[keep], sorted_p[keep])
        return int(torch.multinomial(probs, 1, generator=r.generator))

    @staticmethod
    def _attend_to(live: List[bool], first: List[bool], layer: int, k: torch.Tensor,
                   v: torch.Tensor, allowed: torch.Tensor, batched: "BatchedState"):
        """Write each generated input's new K/V [B, 1, KV, hd] into the batched buffers at this
        layer and return the keys/values [B, L, KV, hd] to attend over with the mask [B, 1, L].
        Requests not live this step (finished, or past their per-frame k) are frozen: nothing added."""
        for j, (on, f) in enumerate(zip(live, first)):
            if on and not f:
                n = int(batched.lengths[j])
                batched.keys[layer][j, n] = k[j, 0]
                batched.values[layer][j, n] = v[j, 0]
        return batched.keys[layer], batched.values[layer], allowed

    @staticmethod
    def _inputs(reqs: List[LanguageRequest], batched: "BatchedState"):
        """(first-step flags, input token ids [B], positions [B], attention mask [B, 1, L])."""
        first = [r.n_stream == 0 for r in reqs]
        dev = batched.keys[0].device
        ids = torch.tensor([r.last_prompt_token if f else r.last_input() for r, f in zip(reqs, first)], device=dev)
        pos = torch.tensor([r.n_prefix - 1 if f else r.n_prefix + r.n_stream - 1 for r, f in zip(reqs, first)],
                           device=dev)
        # Keys each token attends to: the valid prefix, the question and every generated token's
        # K/V, its own included (appended as the layers run; without a question the first step's
        # input is already in the prefix).
        lengths = [r.n_prefix + r.n_stream for r in reqs]
        allowed = torch.zeros(len(reqs), 1, batched.keys[0].shape[1], dtype=torch.bool, device=dev)
        for i, n in enumerate(lengths):
            allowed[i, 0, :n] = True
        return first, ids, pos, allowed

    @staticmethod
    def _advance(batched: "BatchedState", live: List[bool], first: List[bool]) -> None:
        for j, (on, f) in enumerate(zip(live, first)):
            if on and not f:
                batched.lengths[j] += 1

    @torch.no_grad()
    def next_logits(self, reqs: List[LanguageRequest], batched: Optional["BatchedState"] = None) -> torch.Tensor:
        """Logits [B, vocab] for each request's next token (step() samples from them). The
        newest generated token's K/V is written as it is read back, so each call must be followed
        by each request accepting a token. With `batched` (batch_requests of these requests) the
        K/V go to its buffers; without, the requests are batched for this one step and handed
        their K/V back. A request with no generated token yet re-reads its last prompt token
        against the cache (not appended: it is there)."""
        own = batched is None
        if own:
            batched = batch_requests(reqs, 1)
        logits = self._forward(reqs, batched, [not r.done for r in reqs])
        if own:
            unbatch_requests(batched)
        return logits

    def _forward(self, reqs: List[LanguageRequest], batched: "BatchedState", live: List[bool]) -> torch.Tensor:
        """One decode step of every request (B inputs of one token each) -> logits [B, vocab]."""
        first, ids, pos, allowed = self._inputs(reqs, batched)

        def sink_of(li):
            return lambda k, v: self._attend_to(live, first, li, k, v, allowed, batched)

        h = self._layers(ids[:, None], pos[:, None], sink_of)
        self._advance(batched, live, first)
        return self._logits(h[:, 0])

    def _layers(self, ids: torch.Tensor, pos: torch.Tensor, sink_of) -> torch.Tensor:
        """The VLM's layers over input ids [B, T] at RoPE positions [B, T]; sink_of(layer)(k, v)
        stores that layer's K/V [B, T, KV, hd] and returns (keys, values [B, L, KV, hd], mask
        [B, T, L]) to attend over. Returns the last layer's output [B, T, width]."""
        raise NotImplementedError

    def _logits(self, h: torch.Tensor) -> torch.Tensor:
        """Final norm and the tied LM head: [B, width] -> float logits [B, vocab]."""
        raise NotImplementedError


class PlainLanguage(LanguageDecoder):
    """Decoding with the VLM of a plain weight dict (PlainPi0 / PlainPi05 `.w`): the reference."""

    def __init__(self, config: Pi0Config, weights: Weights):
        missing = [n for n in ("vlm.embed", "vlm.norm") if n not in weights]
        if missing:
            raise ValueError(f"language decoding needs the VLM's token embedding and final norm; missing {missing} "
                             "(the checkpoint has no LM head to speak with)")
        self.cfg, self.w = config, weights

    def _layers(self, ids, pos, sink_of):
        cfg, w, spec = self.cfg, self.w, self.cfg.vlm
        b, t = ids.shape
        table = w["vlm.embed"]
        x = table[ids] * torch.tensor(math.sqrt(spec.width), dtype=table.dtype, device=table.device)
        cos, sin = rope_cos_sin(pos, cfg, x.dtype)
        for li in range(spec.depth):
            p = f"vlm.layers.{li}."
            h = rms_norm(x, w[p + "ln_attn"], cfg.rms_eps)
            q = lin_nb(h, w[p + "q"]).view(b, t, spec.num_heads, spec.head_dim).transpose(1, 2)
            k = lin_nb(h, w[p + "k"]).view(b, t, spec.num_kv_heads, spec.head_dim)
            v = lin_nb(h, w[p + "v"]).view(b, t, spec.num_kv_heads, spec.head_dim)
            q = apply_rope(q, cos, sin)
            k = apply_rope(k.transpose(1, 2), cos, sin).transpose(1, 2)
            kk, vv, mask = sink_of(li)(k, v)
            a = attention(q, kk.transpose(1, 2), vv.transpose(1, 2), mask, spec.head_dim**-0.5)
            x = x + lin_nb(a, w[p + "o"])
            x = x + gemma_mlp(w, p, rms_norm(x, w[p + "ln_mlp"], cfg.rms_eps))
        return x

    def _logits(self, h):
        return (rms_norm(h, self.w["vlm.norm"], self.cfg.rms_eps) @ self.w["vlm.embed"].T).float()


class FastLanguage(LanguageDecoder):
    """Decoding with a prepared fast model (FastPi0 / FastPi05 built with language=True): its
    folded VLM layers and kernels backend, K/V through the same per-request caches."""

    def __init__(self, model):
        if not getattr(model, "language", False):
            raise ValueError("language decoding on the fast path needs the model prepared with language=True "
                             "(Pi0Engine(..., language=True)): it keeps the VLM's last layer whole and its final norm")
        self.cfg, self.m = model.cfg, model

    def _layers(self, ids, pos, sink_of):
        m, cfg, spec = self.m, self.cfg, self.cfg.vlm
        x = m.embed[ids] * m.embed_scale
        cos, sin = rope_cos_sin(pos, cfg, x.dtype)
        for li, layer in enumerate(m.vlm_layers[:-1] + [m.vlm_last_full]):
            x = m.gemma_block(layer, spec, x, cos, sin, sink_of(li))
        return x

    def _logits(self, h):
        return (rms_norm(h, self.m.vlm_norm, self.cfg.rms_eps) @ self.m.embed.T).float()


@dataclass
class BatchedState:
    """Requests stacked for decoding (OxyGen's BATCH): per layer keys/values [m, L_max + k, KV, hd]
    with each request's rows at the front, `lengths` [m] the rows filled so far (prefix +
    generated K/V), `ids` the manager's request ids when it made the batch."""

    requests: List[LanguageRequest]
    keys: List[torch.Tensor]
    values: List[torch.Tensor]
    lengths: torch.Tensor
    filled_at_batch: List[int]
    ids: List[int] = field(default_factory=list)


def batch_requests(reqs: Sequence[LanguageRequest], k: int) -> BatchedState:
    """Stack the requests' K/V (prefix copy + generated) into padded buffers with room for k more
    tokens each."""
    reqs = list(reqs)
    filled = [r.n_prefix + r.gen_keys[0].shape[0] for r in reqs]
    lmax = max(filled) + k
    keys, values = [], []
    for layer in range(len(reqs[0].prefix_keys)):
        ref = reqs[0].prefix_keys[layer]
        kb = torch.zeros(len(reqs), lmax, *ref.shape[1:], dtype=ref.dtype, device=ref.device)
        vb = torch.zeros_like(kb)
        for j, r in enumerate(reqs):
            n, g = r.n_prefix, r.gen_keys[layer].shape[0]
            kb[j, :n], vb[j, :n] = r.prefix_keys[layer], r.prefix_values[layer]
            kb[j, n: n + g], vb[j, n: n + g] = r.gen_keys[layer], r.gen_values[layer]
        keys.append(kb)
        values.append(vb)
    return BatchedState(reqs, keys, values, torch.tensor(filled), list(filled))


def unbatch_requests(state: BatchedState) -> None:
    """Hand each request the K/V rows its decoding added to the batch (OxyGen's UNBATCH)."""
    for j, r in enumerate(state.requests):
        start, end = state.filled_at_batch[j], int(state.lengths[j])
        for layer in range(len(state.keys)):
            r.gen_keys[layer] = torch.cat([r.gen_keys[layer], state.keys[layer][j, start:end]])
            r.gen_values[layer] = torch.cat([r.gen_values[layer], state.values[layer][j, start:end]])
