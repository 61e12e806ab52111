"""bench/view_resolution.py at tiny sizes: the stack's tolerance is measured in the model's own
pixels (it grows with the view's size, and at the shipped 96 px it is a couple of pixels, less
than the 12 px patch), and the step timing runs. No timing is asserted."""
import json


def test_tolerance_in_model_pixels_grows_with_the_view(bench_script):
    rows = {(r["size"], r["view"]): r for r in bench_script("view_resolution").resolution([48, 96, 192], views=2)}
    for view in ("front", "top"):
        small, shipped, large = (rows[(s, view)] for s in (48, 96, 192))
        for axis in ("tolerance_x_px", "tolerance_y_px"):
            assert small[axis] < shipped[axis] < large[axis]
            assert 1.0 < shipped[axis] < 4.0  # half a cube, seen from 0.8-1 m at 96 px
        assert shipped["cube_width_px"] < 12  # a cube is smaller than one patch


def test_bench_writes_its_results(tmp_path, bench_script):
    out = tmp_path / "view.json"
    assert bench_script("view_resolution").main(["--sizes", "24,48", "--steps", "1", "--batch", "2", "--json", str(out)]) == 0
    doc = json.loads(out.read_text())
    assert doc["command"].startswith("python bench/view_resolution.py") and doc["machine"]
    assert [(r["size"], r["view"]) for r in doc["views"]] == [(24, "front"), (24, "top"), (48, "front"), (48, "top")]
    assert set(doc["step_seconds"]) == {"24", "48"} and all(t > 0 for t in doc["step_seconds"].values())
