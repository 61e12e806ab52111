"""bench/physai_bench/roofline.py against realtime-vla Table 2 and §5.1."""
import json
import subprocess
import sys
from pathlib import Path

import pytest

from physai_bench import roofline

BENCH = Path(__file__).resolve().parents[2] / "bench"

# Table 2's "Roofline" column (RTX 4090, 2 views, no prompt), in the table's row order.
TABLE2 = [0.004, 0.602, 0.178, 0.201, 0.750, 0.750,
          0.013, 0.529, 0.200, 0.399, 6.391, 3.195,
          0.000, 0.001, 0.021, 0.934, 0.149, 0.149, 0.747, 2.990, 1.495, 0.001]
TABLE2_PARTS = {"vision": 2.485, "vlm": 10.727, "expert": 6.486, "total": 19.698}


def test_every_table2_row():
    gpu = roofline.GPUS["rtx4090"]
    rows = roofline.pi0_rows(2)
    assert len(rows) == len(TABLE2)
    for row, want in zip(rows, TABLE2):
        assert roofline.row_ms(row, gpu) == pytest.approx(want, abs=6e-4), row.label


def test_table2_subtotals():
    parts = roofline.total_ms(roofline.GPUS["rtx4090"], 2)
    for part, want in TABLE2_PARTS.items():
        assert parts[part] == pytest.approx(want, abs=2e-3), part


def test_views_totals_match_section_5_1():
    # The paper prints 12.8 / 19.7 / 26.7 ms. 2 and 3 views agree to that digit; 1 view gives
    # 12.87 here, 0.5% above, consistent with the paper truncating (see docs/kernels.md).
    got = {v: roofline.total_ms(roofline.GPUS["rtx4090"], v)["total"] for v in (1, 2, 3)}
    assert got[2] == pytest.approx(19.7, abs=0.05)
    assert got[3] == pytest.approx(26.7, abs=0.05)
    assert got[1] == pytest.approx(12.8, abs=0.1)
    # Plus the measured 0.86 ms of synchronization, §5.2 prints 13.7 / 20.6 / 27.6.
    for v, want in ((1, 13.7), (2, 20.6), (3, 27.6)):
        assert got[v] + roofline.RTX4090_SYNC_MS == pytest.approx(want, abs=0.1)


def test_memory_and_compute_terms():
    slow_memory = roofline.Gpu("toy", bandwidth=1.0, macs=1e9)
    slow_compute = roofline.Gpu("toy", bandwidth=1e9, macs=1.0)
    row = roofline.Row("x", 1, 10, 30, 5, "")
    assert row.seconds(slow_memory) == 2 * 30 * 5  # the weight's bytes
    assert row.seconds(slow_compute) == 10 * 30 * 5  # the MACs
    attn = roofline.Row("x", 1, 4, 4, 2, "", attention_heads=3)
    assert attn.seconds(slow_memory) == 2 * 3 * 16 * 2 / 1e9  # no weight traffic, QK^T + PV


def test_cli_json():
    out = subprocess.run([sys.executable, str(BENCH / "physai_bench" / "roofline.py"), "--json"],
                         capture_output=True, text=True, check=True, timeout=60)
    rep = json.loads(out.stdout)
    assert set(rep["rtx4090_ms"]) == {"1", "2", "3"}
    assert rep["rtx4090_ms"]["2"] == pytest.approx(19.7, abs=0.05)
    for key in ("h100_sxm_ms", "h200_ms"):
        ms = rep[key]
        # Faster GPUs, lower bounds, growing with the number of views.
        assert 0 < ms["1"] < ms["2"] < ms["3"] < rep["rtx4090_ms"]["1"]
