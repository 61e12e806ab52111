"""Builders for the streaming tests: tiny pi0, a virtual clock, deterministic robots."""
from __future__ import annotations

import pytest
import torch

from physai_ros.engine import Pi0Config
from physai_ros.engine.streaming.expert import StreamingExpert
from physai_ros.engine.streaming.streams import StreamingConfig, StreamingCore

from engine_helpers import make_input


@pytest.fixture(autouse=True)
def one_torch_thread():
    """Tiny tensors: a second intra-op thread only adds hand-offs (and on a loaded 2-core
    machine each one can wait a scheduler slice). Restored after the test."""
    n = torch.get_num_threads()
    torch.set_num_threads(1)
    yield
    torch.set_num_threads(n)


CFG = Pi0Config.preset("tiny")  # chunk 8, 10 steps
# 8 tokens at 240 Hz finishing one per 2 ticks at 480 Hz, 10 steps per token: 7 * 2 >= 10 ticks.
FAST = dict(ae_hz=480.0, action_hz=240.0, node_hz=480.0, steps_per_token=10)


def build(force=None, seed: int = 0, **overrides):
    engine, expert = StreamingExpert.build(CFG, force=force, seed=seed)
    cfg = StreamingConfig(**{**FAST, **overrides})
    return StreamingCore(engine, expert, cfg, clock=lambda: 0.0)


def robot_input(seed: int, views: int = 2, prompt: int = 6):
    return make_input(CFG, views, prompt, torch.Generator().manual_seed(seed))


def run_ticks(core, n: int, t0: float = 0.0, period: float = 1 / 480, vlm_every: int = 0, on_tick=None):
    """n ticks at nominal times; returns the list of per-tick segment lists."""
    out = []
    for k in range(n):
        now = t0 + k * period
        if on_tick is not None:
            on_tick(k, now)
        if vlm_every and k % vlm_every == 0:
            core.vlm_pass(now)
        out.append(core.tick(now))
    return out
