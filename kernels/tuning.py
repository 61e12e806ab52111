"""Pick a tile config per (GPU, op, shape): the table's under the interpreter or during CUDA
graph capture, otherwise the fastest of the table's entry and the generic candidates, timed once
on first use and cached for the process (autotuning on GPU).

Tuning launches kernels and synchronizes, so the first call of each shape must happen before
CUDA graph capture (the engine's warm-up run does that); during capture the table's entry or
the first candidate is used without timing.
"""
from __future__ import annotations

import os
from typing import Callable, Dict, Iterable, Optional, Tuple

import torch

from physai_ros.kernels import _runtime
from physai_ros.kernels.tiles import INTERPRETER_CONFIG, TileConfig, candidates

_chosen: Dict[Tuple, TileConfig] = {}


def autotune_enabled() -> bool:
    return os.environ.get("PHYSAI_KERNELS_AUTOTUNE", "1") != "0"


def pick_fastest(configs: Iterable[TileConfig], measure: Callable[[TileConfig], float]
                 ) -> Tuple[TileConfig, Dict[TileConfig, float]]:
    """The config with the lowest measured time; configs whose launch fails (e.g. too much
    shared memory on this GPU) are skipped. Raises if none of them runs."""
    times: Dict[TileConfig, float] = {}
    errors = []
    for cfg in configs:
        try:
            times[cfg] = float(measure(cfg))
        except Exception as exc:  # a config that cannot compile here is simply not a candidate
            errors.append(f"{cfg}: {exc}")
    if not times:
        raise RuntimeError("no tile config could run:\n" + "\n".join(errors))
    return min(times, key=times.__getitem__), times


def _time_on_gpu(run: Callable[[TileConfig], None]) -> Callable[[TileConfig], float]:
    import triton.testing

    return lambda cfg: triton.testing.do_bench(lambda: run(cfg), warmup=5, rep=20)


def select(op: str, x: torch.Tensor, m: int, k: int, n: int,
           run: Callable[[TileConfig], None]) -> TileConfig:
    arch = _runtime.device_arch(x)
    if arch == "interpreter":
        return INTERPRETER_CONFIG
    key = (arch, op, m, k, n, x.dtype)
    hit: Optional[TileConfig] = _chosen.get(key)
    if hit is not None:
        return hit
    cands = candidates(arch, op, m, k, n)
    if torch.cuda.is_current_stream_capturing():
        return cands[0]  # nothing may launch untimed here; the warm-up before capture chose
    if autotune_enabled():
        best, _ = pick_fastest(cands, _time_on_gpu(run))
    else:
        best = first_that_runs(cands, run)
    _chosen[key] = best
    return best


def first_that_runs(configs: Iterable[TileConfig], run: Callable[[TileConfig], None]) -> TileConfig:
    """The first config whose launch succeeds, in table order. A table entry sized for bf16
    tiles can ask for more shared memory than the GPU has in fp32 (seen on an H200: 237568
    bytes against 232448); the next candidate then serves instead of the call failing."""
    errors = []
    for cfg in configs:
        try:
            run(cfg)
        except Exception as exc:  # too much shared memory, registers: not a candidate here
            errors.append(f"{cfg}: {type(exc).__name__}: {exc}")
            continue
        return cfg
    raise RuntimeError("no tile config could run:\n" + "\n".join(errors))


def chosen() -> Dict[Tuple, TileConfig]:
    """Configs picked so far in this process (for reports and the bench)."""
    return dict(_chosen)
