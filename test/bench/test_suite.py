"""bench/suite.py at --quick size, as make test runs it: every entry runs as its own process, writes
a results file with the complete header (command, commit, date, machine, load, regime, quick), and
the tables build from those files. The figures of a quick run mean nothing and nothing here times
anything; what is checked is that the suite keeps working."""
import subprocess
import sys
from pathlib import Path

import pytest

from physai_bench import tables
from physai_bench.results import HEADER_KEYS, read_result

pytestmark = pytest.mark.slow
REPO = Path(__file__).resolve().parents[2]
SUITE = REPO / "bench" / "suite.py"


def _suite(*args, timeout=1800):
    return subprocess.run([sys.executable, str(SUITE), *args], capture_output=True, text=True, timeout=timeout,
                          cwd=REPO)


def test_every_entry_runs_quick_and_writes_a_complete_header(tmp_path):
    out = tmp_path / "quick"
    proc = _suite("--quick", "--out", str(out))
    assert proc.returncode == 0, proc.stdout[-4000:] + proc.stderr[-4000:]
    names = [line.split()[0] for line in _suite("--list").stdout.splitlines()]
    assert len(names) >= 7
    for name in names:
        doc = read_result(out / f"{name}.json")
        assert set(HEADER_KEYS) <= set(doc) and doc["quick"] is True, name
        assert doc["command"].startswith("python bench/") and "--quick" in doc["command"], doc["command"]
        assert doc["regime"] and doc["machine"] and len(doc["load_average"]["start"]) == 3
    # Every entry has a summariser, and the tables build from a quick run's files.
    assert set(names) == set(tables.SUMMARISERS)
    table = tables.readme_table(out)
    assert table.count("\n") >= len(names) + 1
    assert all(f"(docs/results.md#{n})" in table for n in names)


def test_quick_never_writes_over_the_committed_results():
    proc = _suite("--quick", "--only", "camera_frames")
    assert proc.returncode != 0 and "--quick needs --out" in proc.stderr
    proc = _suite("--quick", "--out", str(REPO / "bench" / "results"), "--only", "camera_frames")
    assert proc.returncode != 0 and "--quick needs --out" in proc.stderr


def test_an_unknown_entry_is_named():
    proc = _suite("--only", "factroy")
    assert proc.returncode == 2 and "factroy" in proc.stderr and "--list" in proc.stderr
