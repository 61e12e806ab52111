"""Shared builders for the engine tests (tiny configs only)."""
from __future__ import annotations

import torch

from physai_ros.engine import EngineInput, Pi0Config


def make_input(cfg: Pi0Config, views: int, prompt_len: int, gen: torch.Generator, pad_to: int = 0,
               masked_views=()) -> EngineInput:
    s = cfg.vision.image_size
    n = max(prompt_len, pad_to)
    tokens = torch.zeros(n, dtype=torch.int64)
    tokens[:prompt_len] = torch.randint(0, cfg.vocab_size, (prompt_len,), generator=gen)
    mask = torch.zeros(n, dtype=torch.bool)
    mask[:prompt_len] = True
    image_masks = torch.ones(views, dtype=torch.bool)
    for v in masked_views:
        image_masks[v] = False
    return EngineInput(
        images=torch.rand(views, 3, s, s, generator=gen) * 2 - 1,
        image_masks=image_masks,
        tokens=tokens,
        token_mask=mask,
        state=torch.randn(cfg.max_state_dim, generator=gen),
        noise=torch.randn(cfg.chunk_size, cfg.max_action_dim, generator=gen),
    )


def mixed_batch(cfg: Pi0Config, gen: torch.Generator):
    """Three robots collated: 1, 2 and 3 views (the third with a missing camera), prompts of 5, 11
    and 2 tokens: every kind of padding the engine must mask."""
    from physai_ros.engine.batching import collate

    inputs = [make_input(cfg, 1, 5, gen), make_input(cfg, 2, 11, gen), make_input(cfg, 3, 2, gen, masked_views=[1])]
    return collate(inputs, cfg, "cpu", torch.float32)
