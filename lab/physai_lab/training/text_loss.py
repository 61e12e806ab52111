"""Text from the pi0 prefix KV cache, differentiable (co-training pi0.5-style).

The serving decoder (engine/language/decoder.py, PlainLanguage) continues a robot's prefix as text; this
is the same computation for a whole text block at once, teacher-forced, so it can be trained:
- the prefix (image + prompt tokens) is PlainPi0.prefix's cache, bidirectional over its valid
  tokens; nothing here changes it;
- the block [question..., answer..., <eos>] is causal: block token j sits at RoPE position
  n_valid + j and attends to every valid prefix token and to block tokens 0..j;
- logits = RMSNorm_(1 + w)(h, vlm.norm) @ vlm.embed^T (the LM head tied to the embedding);
- the loss is next-token cross-entropy on the answer tokens and the final <eos>: the logits at
  question[-1] predict answer[0].
The layer loop is PlainPi0.velocity's own (engine.pi0.modeling.gemma_over_cache) with the VLM's
weights and a causal block, so there is one definition of the math; test_text_loss checks it
against the engine's own decoder token by token.
"""
from __future__ import annotations

import math
from typing import List, Mapping, Sequence, Tuple

import torch
import torch.nn.functional as F

from physai_ros.engine.pi0.modeling import gemma_over_cache, rms_norm, rope_cos_sin
from physai_ros.engine.types import Pi0Config, PrefixCache


def text_logits(w: Mapping[str, torch.Tensor], cfg: Pi0Config, cache: PrefixCache, block: torch.Tensor) -> torch.Tensor:
    """Logits [B, T, vocab] after each token of the text blocks `block` [B, T] (int64), each row
    continuing its row of `cache`. Rows may be right-padded: the block is causal, so padding
    after a row's end changes nothing before it."""
    spec = cfg.vlm
    b, t = block.shape
    table = w["vlm.embed"]
    x = table[block] * torch.tensor(math.sqrt(spec.width), dtype=table.dtype)
    pos = cache.next_pos[:, None] + torch.arange(t, device=block.device)[None]
    cos, sin = rope_cos_sin(pos, cfg, x.dtype)
    causal = torch.ones(t, t, dtype=torch.bool, device=block.device).tril()
    allowed = torch.cat([cache.pad[:, None, :].expand(b, t, -1), causal.expand(b, t, t)], dim=2)
    x = gemma_over_cache(w, "vlm", spec, cfg, x, cache, allowed, cos, sin)
    return rms_norm(x, w["vlm.norm"], cfg.rms_eps) @ table.T


def make_blocks(questions: Sequence[Sequence[int]], answers: Sequence[Sequence[int]], eos_id: int,
                pad_id: int = 0) -> Tuple[torch.Tensor, torch.Tensor]:
    """(block [B, T], loss_mask [B, T]) for question + answer + <eos> rows, right-padded.
    loss_mask[j] marks the positions whose logits predict a target (answer tokens, <eos>): the
    last question token through the last answer token."""
    rows = [list(q) + list(a) + [eos_id] for q, a in zip(questions, answers)]
    if any(not q for q in questions):
        raise ValueError("a question needs at least one token (its last token's logits predict the answer)")
    t = max(len(r) for r in rows)
    block = torch.full((len(rows), t), pad_id, dtype=torch.int64)
    mask = torch.zeros(len(rows), t, dtype=torch.bool)
    for i, (r, q) in enumerate(zip(rows, questions)):
        block[i, : len(r)] = torch.tensor(r)
        mask[i, len(q) - 1: len(r) - 1] = True
    return block, mask


def text_loss(logits: torch.Tensor, block: torch.Tensor, loss_mask: torch.Tensor) -> torch.Tensor:
    """Mean next-token cross-entropy over the masked positions (target: the block's next token)."""
    pred = logits[:, :-1][loss_mask[:, :-1]]
    target = block[:, 1:][loss_mask[:, :-1]]
    return F.cross_entropy(pred.float(), target)


@torch.no_grad()
def teacher_forced_argmax(w, cfg: Pi0Config, cache: PrefixCache, block: torch.Tensor,
                          loss_mask: torch.Tensor) -> Tuple[torch.Tensor, torch.Tensor]:
    """(predicted, target) next tokens at the masked positions, row-major: token accuracy."""
    pred = text_logits(w, cfg, cache, block)[:, :-1].argmax(-1)
    m = loss_mask[:, :-1]
    return pred[m], block[:, 1:][m]


@torch.no_grad()
def greedy_answers(w, cfg: Pi0Config, cache: PrefixCache, question: Sequence[int], eos_id: int,
                   max_tokens: int = 32) -> List[List[int]]:
    """Greedy continuation of `question` for every row of the cache, up to <eos> (not included)
    or max_tokens: what the serving decoder's greedy sampling emits. Recomputes the block each
    step (short texts, a tiny model: simpler than keeping K/V, and the same math)."""
    b = cache.pad.shape[0]
    block = torch.tensor(list(question), dtype=torch.int64)[None].repeat(b, 1)
    out: List[List[int]] = [[] for _ in range(b)]
    done = [False] * b
    for _ in range(max_tokens):
        nxt = text_logits(w, cfg, cache, block)[:, -1].argmax(-1)
        for i in range(b):
            if not done[i]:
                if int(nxt[i]) == eos_id:
                    done[i] = True
                else:
                    out[i].append(int(nxt[i]))
        if all(done):
            break
        block = torch.cat([block, nxt[:, None]], dim=1)
    return out
