"""Tile table, partial split-K bookkeeping and the autotuner's choice logic (pure Python)."""
import pytest

from physai_ros.kernels import tiles, tuning
from physai_ros.kernels.tiles import TileConfig


def test_paper_partial_split_fills_128_sms_twice():
    # §4.3: 512x1152x1152 on 128 SMs: 64x64 tiles would give 144 programs; 1024 columns in
    # 64x64 tiles (128) plus the last 128 columns in 32x32 tiles split 2-way (128).
    cfg = tiles.lookup("sm_89", "linear", 512, 1152, 1152)
    assert cfg.split_region(1152) == 1024
    assert cfg.programs(512, 1152) == 128 + 128
    assert TileConfig(64, 64, 64).programs(512, 1152) == 144


def test_lookup_picks_expert_or_vlm_entry_by_tokens():
    small = tiles.lookup("sm_89", "linear", 64, 2048, 1024)
    assert (small.block_m, small.block_n, small.block_k) == (32, 32, 128)
    assert tiles.lookup("sm_89", "linear", 512, 2048, 2048).block_m == 128
    assert tiles.lookup("sm_89", "linear", 1, 32, 1024).block_m == 16
    assert tiles.lookup("sm_89", "linear", 512, 999, 7) is None
    assert tiles.lookup("sm_75", "linear", 512, 2048, 2048) is None
    assert tiles.lookup("interpreter", "gate", 3, 5, 8) is tiles.INTERPRETER_CONFIG
    with pytest.raises(ValueError):
        tiles.lookup("sm_89", "conv", 1, 1, 1)


def test_table_entries_are_valid_for_their_shapes():
    for arch, table in tiles.TABLES.items():
        for (op, k, n, _), cfg in table.items():
            assert op in tiles.OPS
            assert min(cfg.block_m, cfg.block_n, cfg.block_k) >= 16, (arch, op, k, n)
            if cfg.split_from_n is not None:
                assert op == "linear", "fused gate/qkv tiles cannot split K"
                assert cfg.split_from_n < n


def test_config_validation():
    with pytest.raises(ValueError):
        TileConfig(48, 64, 64)
    with pytest.raises(ValueError):
        TileConfig(64, 64, 64, split_k=0)
    with pytest.raises(ValueError):
        TileConfig(64, 64, 64, split_from_n=100)


def test_candidates_put_table_entry_first_and_skip_split_for_fused_ops():
    c = tiles.candidates("sm_89", "linear", 512, 4304, 1152)
    assert c[0] == tiles.lookup("sm_89", "linear", 512, 4304, 1152)
    assert len(c) == len(set(c))
    fused = tiles.candidates("sm_90", "gate", 64, 1024, 8192)
    assert all(cfg.split_from_n is None for cfg in fused)


def test_pick_fastest_skips_failing_configs():
    a, b, c = TileConfig(16, 16, 16), TileConfig(32, 32, 32), TileConfig(64, 64, 64)
    cost = {a: 3.0, c: 1.0}

    def measure(cfg):
        if cfg not in cost:
            raise RuntimeError("out of shared memory")
        return cost[cfg]

    best, times = tuning.pick_fastest([a, b, c], measure)
    assert best == c and set(times) == {a, c}
    with pytest.raises(RuntimeError, match="no tile config"):
        tuning.pick_fastest([b], measure)


def test_without_autotuning_the_first_config_that_launches_serves():
    """A table entry sized for bf16 can need more shared memory than the GPU has in fp32 (an H200
    refused 237568 bytes, limit 232448): the next candidate serves instead of the call failing."""
    big, small = TileConfig(128, 128, 64), TileConfig(32, 32, 32)
    tried = []

    def run(cfg):
        tried.append(cfg)
        if cfg is big:
            raise RuntimeError("out of resource: shared memory, Required: 237568, Hardware limit: 232448")

    assert tuning.first_that_runs([big, small], run) is small
    assert tried == [big, small]
    with pytest.raises(RuntimeError, match="no tile config could run"):
        tuning.first_that_runs([big], run)



def test_fp32_dots_keep_fp32_accuracy_unless_the_user_allows_tf32():
    import torch

    from physai_ros.kernels import _runtime

    before = torch.get_float32_matmul_precision()
    try:
        torch.set_float32_matmul_precision("highest")
        assert _runtime.dot_precision(torch.float32) == "tf32x3"
        assert _runtime.dot_precision(torch.bfloat16) == "tf32"
        torch.set_float32_matmul_precision("high")
        assert _runtime.dot_precision(torch.float32) == "tf32"
    finally:
        torch.set_float32_matmul_precision(before)
