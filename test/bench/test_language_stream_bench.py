"""bench/language_stream.py end to end on the tiny config (real engine and decoder, seconds): the
three modes run, their token counts are the workload's (every text runs its full budget; in
steady state cross-frame batching emits R * N tokens per frame, like the per-frame modes), and
the roofline prediction is the model it says it is. No timing is asserted."""
import importlib.util
from pathlib import Path

from physai_bench.results import read_result

ROOT = Path(__file__).resolve().parents[2]


def _load(name):
    spec = importlib.util.spec_from_file_location(name, ROOT / "bench" / f"{name}.py")
    mod = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(mod)
    return mod


def test_bench_runs_end_to_end_on_tiny(tmp_path):
    bench = _load("language_stream")
    out = tmp_path / "ls.json"
    # f_min far below any frame rate: the floor never lowers k, so the steady state is exact.
    rc = bench.main(["--preset", "tiny", "--robots", "1,2", "--budgets", "4,8", "--k", "4", "--f-min", "0.001",
                     "--frames", "2", "--cell-seconds", "0", "--threads", "1", "--json", str(out)])
    assert rc == 0
    res = read_result(out)
    assert res["quick"] is False and res["command"].startswith("python bench/language_stream.py")
    assert [(c["robots"], c["budget"]) for c in res["cells"]] == [(1, 4), (1, 8), (2, 4), (2, 8)]
    for cell in res["cells"]:
        r, n = cell["robots"], cell["budget"]
        assert set(cell["modes"]) == {"isolated", "shared", "continuous"}
        for mode, c in cell["modes"].items():
            assert c["frames"] >= 2 and c["refused"] == 0
            assert c["tokens"] == c["frames"] * r * n, mode
            assert c["frames_per_s"] > 0 and c["p99_ms"] >= c["p50_ms"] > 0
        assert cell["modes"]["continuous"]["batch_mean"] == r * n // 4  # R * ceil(N / k) live requests
        assert cell["modes"]["isolated"]["split_ms_per_frame"]["text_prefill_ms"] > 0
        assert cell["modes"]["isolated"]["batch_mean"] == r  # a batching server's baseline: the frame's texts together
        assert set(cell["ratios"]) == {"shared", "continuous"}
    pred = res["gpu_prediction"]
    assert "roofline lower bound" in pred["label"] and len(pred["rows"]) == 4


def test_decode_each_and_a_mode_subset(tmp_path):
    bench = _load("language_stream")
    out = tmp_path / "ls.json"
    bench.main(["--preset", "tiny", "--robots", "2", "--budgets", "4", "--modes", "isolated,shared",
                "--shared-decode", "each", "--isolated-decode", "each", "--frames", "1", "--cell-seconds", "0",
                "--threads", "1", "--no-prediction", "--json", str(out)])
    res = read_result(out)
    for mode in ("shared", "isolated"):
        m = res["cells"][0]["modes"][mode]
        assert m["batch_mean"] == 1 and m["tokens"] == m["frames"] * 2 * 4, mode
    assert "gpu_prediction" not in res


def test_roofline_decode_step_is_the_weight_read_at_batch_one():
    from physai_bench import language_roofline as lr
    gpu = lr.GPUS["h100_sxm"]
    weights = lr.LAYERS * (lr.WIDTH * (lr.HEADS + 2) * lr.HEAD_DIM + lr.HEADS * lr.HEAD_DIM * lr.WIDTH
                           + 3 * lr.WIDTH * lr.MLP) + lr.WIDTH * lr.VOCAB
    # Batch 1, no context: memory-bound, every bf16 weight read once.
    assert abs(lr.decode_step_ms(gpu, 1, 0) - 2 * weights / gpu.bandwidth * 1e3) < 1e-9
    # Batching shares that read: 32 requests cost far less than 32 single steps.
    assert lr.decode_step_ms(gpu, 32, 600) < 4 * lr.decode_step_ms(gpu, 1, 600)
    cell = lr.predict_cell(gpu, 4, 64, 8, 2, 48)
    assert cell["continuous"]["frames_per_s"] > cell["shared"]["frames_per_s"] > cell["isolated"]["frames_per_s"]
