"""Tile configurations per GPU architecture for the pi0 GEMM shapes (realtime-vla Table 2).

A `TileConfig` describes one launch of the GEMM kernel. With `split_from_n` set, the output
columns [split_from_n, N) form a second region tiled with smaller tiles and split along K
(partial split-K, §4.3): a shape whose natural tile count does not divide the SM count keeps
big tiles where they divide evenly and fills the remaining SMs with the split tail.

Only the sm_89 (RTX 4090) entries come from measurements, the paper's; the others are untuned
starting points that the GPU autotuner (tuning.py) races against generic candidates. Under the
interpreter a single big-tile config is used: its cost grows with programs x loop iterations.
"""
from __future__ import annotations

from dataclasses import dataclass
from typing import Dict, List, Optional, Tuple


@dataclass(frozen=True)
class TileConfig:
    block_m: int  # rows (tokens) per tile
    block_n: int  # output features per tile
    block_k: int
    num_warps: int = 4
    num_stages: int = 3
    split_k: int = 1  # K partitions of the split region (1 = no split)
    split_from_n: Optional[int] = None  # first output column of the split region; None = none
    tail_block_m: int = 32
    tail_block_n: int = 32

    def __post_init__(self) -> None:
        for name in ("block_m", "block_n", "block_k", "tail_block_m", "tail_block_n"):
            v = getattr(self, name)
            if v < 1 or v & (v - 1):
                raise ValueError(f"{name}={v} must be a power of two")
        if self.split_k < 1:
            raise ValueError(f"split_k={self.split_k} must be >= 1")
        if self.split_from_n is not None:
            if self.split_from_n < 0 or self.split_from_n % self.block_n:
                raise ValueError(
                    f"split_from_n={self.split_from_n} must be a non-negative multiple of "
                    f"block_n={self.block_n}")

    def split_region(self, n: int) -> Optional[int]:
        """First column of the split region for an output of width n, or None if there is none."""
        if self.split_from_n is None or self.split_from_n >= n:
            return None
        return self.split_from_n

    def programs(self, m: int, n: int) -> int:
        """Programs one launch starts: the SM-balance quantity of §4.3."""
        start = self.split_region(n)
        main_n = n if start is None else start
        main = _cdiv(m, self.block_m) * _cdiv(main_n, self.block_n)
        if start is None:
            return main
        tail = _cdiv(m, self.tail_block_m) * _cdiv(n - start, self.tail_block_n)
        return main + tail * self.split_k


def _cdiv(a: int, b: int) -> int:
    return -(-a // b)


# Ops sharing the GEMM kernel family. "gate" is the fused gated FFN, whose N is the width of
# gate+up together (Table 2 lists it that way).
OPS = ("linear", "gate", "qkv")

INTERPRETER_CONFIG = TileConfig(64, 64, 64, num_warps=4, num_stages=1)


def _t(bm, bn, bk, warps=4, stages=3, **kw) -> TileConfig:
    return TileConfig(bm, bn, bk, num_warps=warps, num_stages=stages, **kw)


# (op, K, N, max_M) -> config. Shapes are pi0's (tokens x in x out); max_M separates the
# 256*views-token VLM passes from the 64-token action-expert passes.
_SM89: Dict[Tuple[str, int, int, int], TileConfig] = {
    # SigLIP vision tower
    ("linear", 588, 1152, 1 << 20): _t(64, 64, 32),
    ("linear", 1152, 3456, 1 << 20): _t(64, 64, 32),
    # 512x1152x1152: 1024 columns in 64x64 tiles (128 tiles for 128 SMs), the last 128 columns
    # in 32x32 tiles split 2-way along K (another 128 programs), §4.3.
    ("linear", 1152, 1152, 1 << 20): _t(64, 64, 64, split_k=2, split_from_n=1024,
                                         tail_block_m=32, tail_block_n=32),
    ("linear", 1152, 4304, 1 << 20): _t(64, 64, 64),
    ("linear", 4304, 1152, 1 << 20): _t(64, 64, 64, split_k=4, split_from_n=0,
                                         tail_block_m=64, tail_block_n=64),
    # Gemma-2B VLM
    ("linear", 1152, 2048, 1 << 20): _t(64, 64, 64),
    ("qkv", 2048, 2560, 1 << 20): _t(64, 64, 64),
    ("linear", 2048, 2048, 1 << 20): _t(128, 64, 64, warps=8),
    ("gate", 2048, 32768, 1 << 20): _t(128, 64, 64, warps=8),
    ("linear", 16384, 2048, 1 << 20): _t(128, 64, 64, warps=8),
    # Gemma-300M action expert (64 tokens per step)
    ("linear", 32, 1024, 16): _t(16, 16, 32),
    ("linear", 32, 1024, 64): _t(32, 32, 32),
    ("linear", 1024, 1024, 64): _t(32, 32, 64),
    ("qkv", 1024, 2560, 64): _t(64, 32, 64),
    ("linear", 2048, 1024, 64): _t(32, 32, 128),
    ("gate", 1024, 8192, 64): _t(32, 32, 64),
    ("linear", 4096, 1024, 64): _t(16, 32, 256),
    ("linear", 1024, 32, 64): _t(16, 16, 256),
}

# H100/H200 (132 SMs, larger shared memory): untuned starting points. Compute-bound VLM GEMMs
# get 128x128 tiles; the bandwidth-bound expert GEMMs split K to put more SMs on the weights.
_SM90: Dict[Tuple[str, int, int, int], TileConfig] = {
    ("linear", 588, 1152, 1 << 20): _t(64, 128, 32, warps=4, stages=4),
    ("linear", 1152, 3456, 1 << 20): _t(128, 128, 64, warps=8, stages=3),
    ("linear", 1152, 1152, 1 << 20): _t(64, 128, 64, warps=4, stages=4),
    ("linear", 1152, 4304, 1 << 20): _t(128, 128, 64, warps=8, stages=3),
    ("linear", 4304, 1152, 1 << 20): _t(64, 128, 64, warps=4, stages=4, split_k=2,
                                         split_from_n=0, tail_block_m=64, tail_block_n=128),
    ("linear", 1152, 2048, 1 << 20): _t(64, 128, 64, warps=4, stages=4),
    ("qkv", 2048, 2560, 1 << 20): _t(128, 64, 64, warps=8, stages=3),
    ("linear", 2048, 2048, 1 << 20): _t(128, 128, 64, warps=8, stages=3),
    ("gate", 2048, 32768, 1 << 20): _t(128, 64, 64, warps=8, stages=3),
    ("linear", 16384, 2048, 1 << 20): _t(128, 128, 64, warps=8, stages=3),
    ("linear", 32, 1024, 16): _t(16, 32, 32, stages=2),
    ("linear", 32, 1024, 64): _t(64, 32, 32, stages=2),
    ("linear", 1024, 1024, 64): _t(64, 32, 64, split_k=2, split_from_n=0,
                                   tail_block_m=64, tail_block_n=32),
    ("qkv", 1024, 2560, 64): _t(64, 32, 64, stages=4),
    ("linear", 2048, 1024, 64): _t(64, 32, 128, split_k=2, split_from_n=0,
                                   tail_block_m=64, tail_block_n=32),
    ("gate", 1024, 8192, 64): _t(64, 32, 64, stages=4),
    ("linear", 4096, 1024, 64): _t(64, 32, 128, split_k=4, split_from_n=0,
                                   tail_block_m=64, tail_block_n=32),
    ("linear", 1024, 32, 64): _t(64, 16, 256, stages=2, split_k=4, split_from_n=0,
                                 tail_block_m=64, tail_block_n=16),
}

TABLES: Dict[str, Dict[Tuple[str, int, int, int], TileConfig]] = {
    "sm_89": _SM89,
    "sm_90": _SM90,
}

# Generic candidates raced by the autotuner for shapes outside the table.
GENERIC_CANDIDATES: List[TileConfig] = [
    _t(16, 32, 128, stages=4),
    _t(32, 32, 64, stages=4),
    _t(64, 64, 32, stages=4),
    _t(64, 64, 64, stages=3),
    _t(128, 64, 64, warps=8, stages=3),
    _t(128, 128, 64, warps=8, stages=3),
    _t(64, 64, 64, stages=3, split_k=4, split_from_n=0, tail_block_m=64, tail_block_n=64),
]


def lookup(arch: str, op: str, m: int, k: int, n: int) -> Optional[TileConfig]:
    """The table's config for this shape on `arch`, or None when the table has no entry."""
    if op not in OPS:
        raise ValueError(f"unknown op {op!r}; expected one of {OPS}")
    if arch == "interpreter":
        return INTERPRETER_CONFIG
    table = TABLES.get(arch)
    if table is None:
        return None
    fits = [(max_m, cfg) for (o, kk, nn, max_m), cfg in table.items()
            if o == op and kk == k and nn == n and m <= max_m]
    if not fits:
        return None
    return min(fits, key=lambda e: e[0])[1]


def candidates(arch: str, op: str, m: int, k: int, n: int) -> List[TileConfig]:
    """Configs worth timing for a shape: the table's entry first, then the generic ones.

    The fused ops (gate, qkv) keep both halves of their output in one tile, so the split-K
    candidates only apply to plain linear layers.
    """
    first = lookup(arch, op, m, k, n)
    out = [first] if first is not None else []
    for cfg in GENERIC_CANDIDATES:
        if op != "linear" and cfg.split_from_n is not None:
            continue
        if cfg not in out:
            out.append(cfg)
    return out
