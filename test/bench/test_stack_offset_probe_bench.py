"""bench/stack_offset_probe.py at a small size: the scenes carry the offsets they were drawn with,
a ridge probe on an untrained tower's tokens reads the offset better than guessing a centred
stack (seeded, so the comparison is deterministic), and the results file is complete."""
import json

import numpy as np


def test_scenes_are_seeded_and_offsets_bounded(bench_script):
    bench = bench_script("stack_offset_probe")
    frames, offsets = bench.scenes(4, seed=3)
    again, same = bench.scenes(4, seed=3)
    assert np.array_equal(offsets, same) and all(bool((a[0] == b[0]).all()) for a, b in zip(frames, again))
    assert np.all(np.abs(offsets) <= bench.UPPER_OFF_M) and len(frames[0]) == 2
    assert frames[0][0].shape == (3, 224, 224)


def test_held_scenes_put_the_arm_over_the_stack(bench_script):
    bench = bench_script("stack_offset_probe")
    (resting,), _ = bench.scenes(1, seed=5)
    (held,), _ = bench.scenes(1, seed=5, held_lift=0.03)
    assert all(not bool((a == b).all()) for a, b in zip(resting, held))


def test_probe_beats_a_centred_guess_and_writes_its_results(tmp_path, bench_script):
    out = tmp_path / "probe.json"
    assert bench_script("stack_offset_probe").main(["--sizes", "96", "--train", "300", "--val", "50", "--test", "100", "--held-lift", "0.03",
                          "--json", str(out)]) == 0
    doc = json.loads(out.read_text())
    assert doc["command"].startswith("python bench/stack_offset_probe.py") and doc["machine"]
    rows = doc["rows"]
    assert [(r["scene"], r["encoder"], r["size"]) for r in rows] == [
        (scene, encoder, size) for scene in ("resting", "held 3 cm above") for encoder, size in
        (("none: guess a centred stack", 0), ("trained: sim_pi0_pipeline", 96), ("untrained", 96))]
    for guess, probe in ((rows[0], rows[2]), (rows[3], rows[5])):
        assert probe["median_abs_error_mm"] < guess["median_abs_error_mm"]
        assert probe["within_tolerance_per_axis"] > guess["within_tolerance_per_axis"]
