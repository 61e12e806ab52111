"""bench/gpu_check.py, the prepared GPU check, kept from rotting between the rare GPU runs: its
--cpu-dry-run runs every step at tiny size on the CPU (the same code, device "cpu"); a step that
outruns its time box is reported as stopped while the others still run; the table lists errors."""
import json
import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(ROOT / "bench" / "gpu_steps"))

from report import markdown  # noqa: E402

STEPS = ("correctness", "engine_timing", "streaming", "language", "serving", "chunk_profile")


def _run(tmp_path, *args, timeout=900):
    proc = subprocess.run([sys.executable, str(ROOT / "bench" / "gpu_check.py"), "--cpu-dry-run", "--out", str(tmp_path),
                           *args], capture_output=True, text=True, timeout=timeout)
    assert proc.returncode == 0, proc.stderr[-3000:]
    (report,) = tmp_path.glob("gpu_check_dryrun_*.json")
    return json.loads(report.read_text()), proc.stdout


def _leaves(d, path=""):
    for k, v in d.items():
        if isinstance(v, dict):
            yield from _leaves(v, f"{path}{k}/")
            yield f"{path}{k}", v


def test_every_step_runs_at_tiny_size_on_the_cpu(tmp_path):
    report, table = _run(tmp_path)
    assert list(report["steps"]) == list(STEPS)
    for step, res in report["steps"].items():
        assert res["status"] == "done", (step, res["status"], (tmp_path / "steps" / f"{step}.log").read_text()[-2000:])
        errors = [k for k, v in _leaves(res["result"]) if "error" in v]
        assert not errors, (step, errors)
    checks = [v for k, v in _leaves(report["steps"]["correctness"]["result"]) if "ok" in v]
    assert len(checks) > 30 and all(v["ok"] for v in checks)
    tick = report["steps"]["correctness"]["result"]["streaming_tick"]["fp32"]  # StaticTick on the CPU
    assert (tick["captures"], tick["replays"], tick["rel_err"]) == (2, 5, 0.0)
    timing = report["steps"]["engine_timing"]["result"]
    assert timing["pi0/fast/b1v2"]["p50_ms"] > 0 and timing["pi0/fast+graphs"]["skipped"]
    assert report["steps"]["serving"]["result"]["robots_4"]["ok"]
    assert report["steps"]["streaming"]["result"]["robots_1"]["ok"]
    stamp = report["stamp"]
    assert stamp["commit"] and stamp["torch"] and stamp["mode"].startswith("cpu dry run")
    assert "## correctness" in table and "## serving" in table and "| pi0/fast |" in table


def test_a_step_past_its_box_is_reported_and_the_next_still_runs(tmp_path):
    report, table = _run(tmp_path, "--steps", "language,serving", "--box", "language=0.5")
    assert report["steps"]["language"]["status"].startswith("stopped at its")
    assert report["steps"]["serving"]["status"] == "done"
    assert "| language | stopped at its" in table


def test_the_table_lists_each_failed_case_with_its_error():
    report = {"stamp": {"date_utc": "d", "mode": "gpu", "commit": "c", "gpu": "G", "gpu_memory_gb": 1, "driver": "x",
                        "cuda_runtime": "13", "torch": "t", "triton": "tr", "python": "3", "cpu_count": 1,
                        "load_avg_start": [0, 0, 0]},
              "steps": {"correctness": {"status": "done", "seconds": 1, "result": {"engine_pi0": {
                  "pi0/bf16/fast": {"rel_err": 0.5, "tol": 0.06, "ok": False},
                  "pi0/fp32/triton": {"error": "OutOfResources: shared memory"}}}}}}
    table = markdown(report)
    assert "`engine_pi0/pi0/fp32/triton`: OutOfResources: shared memory" in table
    assert "| engine_pi0 | pi0/bf16/fast | 0.5 | 0.06 | **NO** |" in table
