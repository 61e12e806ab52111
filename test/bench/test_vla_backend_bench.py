"""bench/vla_backend.py end to end with one repetition (tiny and the shipped sim_pi0, seconds):
both paths run, decode the same tokens (the bench asserts it) and the rows are complete. No
timing is asserted."""
import importlib.util
import json
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]


def test_bench_runs_end_to_end(tmp_path, capsys):
    spec = importlib.util.spec_from_file_location("vla_backend_bench", ROOT / "bench" / "vla_backend.py")
    bench = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(bench)
    out = tmp_path / "vla.json"
    assert bench.main(["--reps", "1", "--batches", "1,2", "--json", str(out)]) == 0
    rows = json.loads(out.read_text())["rows"]
    assert [(r["model"], r["robots"]) for r in rows] == [("tiny", 1), ("tiny", 2), ("sim_pi0", 1), ("sim_pi0", 2)]
    assert all(r["shared_batch_ms"] > 0 and r["own_batch_ms"] > 0 and r["own_prefill_ms"] > 0 for r in rows)
    assert len(capsys.readouterr().out.splitlines()) == 4
