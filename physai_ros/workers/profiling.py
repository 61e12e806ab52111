"""The latency-vs-batch profile a worker measures on its own engine at start-up.

Measured, not configured: the scheduler's batching cap (saturation point) and edge/cloud
placement come from it, and only the worker knows its own hardware and load.
"""
from __future__ import annotations

import statistics
import time
from typing import Callable

import torch

from physai_ros.engine.types import EngineInput, Pi0Config
from physai_ros.scheduler.types import LatencyProfile


def synthetic_inputs(config: Pi0Config, batch: int, views: int, tokens: int, seed: int = 0,
                     frame_size: tuple[int, int] | None = None) -> list[EngineInput]:
    """Well-formed inputs of a typical shape, as the server sends them (uint8 camera pixels,
    so the profile includes the engine's pixel scaling; with frame_size (h, w), raw frames of that
    size, as a LeRobot checkpoint's cameras arrive, so it includes their resize too); content does
    not change pi0's compute."""
    g = torch.Generator().manual_seed(seed)
    s = config.vision.image_size
    views = max(1, min(views, config.max_views))
    tokens = max(1, min(tokens, config.max_tokens))

    def images():
        if frame_size is None:
            return torch.randint(0, 256, (views, 3, s, s), generator=g, dtype=torch.uint8)
        return tuple(torch.randint(0, 256, (3, *frame_size), generator=g, dtype=torch.uint8) for _ in range(views))

    return [EngineInput(
        images=images(),
        image_masks=torch.ones(views, dtype=torch.bool),
        tokens=torch.randint(0, config.vocab_size, (tokens,), generator=g),
        token_mask=torch.ones(tokens, dtype=torch.bool),
        state=torch.randn(config.max_state_dim, generator=g) * 0.1,
    ) for _ in range(batch)]


def measure_profile(infer: Callable[[list], object], config: Pi0Config, max_batch: int,
                    reps: int = 3, views: int = 2, tokens: int = 32,
                    clock: Callable[[], float] = time.perf_counter, frame_size: tuple[int, int] | None = None,
                    on_batch: Callable[[int, int, float], None] | None = None) -> LatencyProfile:
    """Median latency of `reps` timed calls (after one warm-up) at each batch size 1..max_batch.

    The result is made non-decreasing in batch size: on a noisy machine a bigger batch can
    time faster than a smaller one, which would make the scheduler's saturation point arbitrary.
    on_batch(b, max_batch, seconds_left): called after each batch size with an estimate of what
    is left (a start-up on a loaded CPU can take minutes; the user should see it progress).
    """
    if max_batch < 1 or reps < 1:
        raise ValueError(f"max_batch and reps must be >= 1, got {max_batch}, {reps}")
    lat = []
    with torch.inference_mode():
        for b in range(1, max_batch + 1):
            batch = synthetic_inputs(config, b, views, tokens, seed=b, frame_size=frame_size)
            infer(batch)  # warm-up: first-call allocations, lazy init
            times = []
            for _ in range(reps):
                t0 = clock()
                infer(batch)
                times.append(clock() - t0)
            lat.append(max(statistics.median(times), 1e-6))
            if on_batch is not None:
                on_batch(b, max_batch, remaining_profile_s(lat[-1], b, max_batch, reps))
    for i in range(1, len(lat)):
        lat[i] = max(lat[i], lat[i - 1])
    return LatencyProfile(tuple(range(1, max_batch + 1)), tuple(lat))


def remaining_profile_s(latency_s: float, batch: int, max_batch: int, reps: int) -> float:
    """Estimated seconds left after measuring `batch`: each later size b costs 1 + reps calls,
    each about latency_s * b / batch (compute grows about linearly with the batch on a CPU)."""
    return sum((1 + reps) * latency_s * b / batch for b in range(batch + 1, max_batch + 1))
