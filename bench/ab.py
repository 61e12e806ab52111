"""Run one benchmark on two commits side by side and report new / old ratios.

The old commit is checked out into a temporary git worktree; the benchmark then runs
alternately from each tree (ABBA order, so a drift in the machine's load hits both alike), each
run as `python <tree>/<bench> ...` with PYTHONPATH=<tree> (the tree's own physai_ros, also in
the processes the benchmark starts). Every benchmark that prints one JSON object works; each
numeric leaf is reported as the median over the runs per tree and the ratio new / old.

  .venv/bin/python bench/ab.py --base <commit> --reps 3 -- bench/serving.py --json --cases 1robot_1views_224
  .venv/bin/python bench/ab.py --base <commit> --reps 3 -- bench/engine_worker.py --reps 15
"""
from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys
import tempfile
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]


def leaves(doc, prefix=""):
    """Flatten a JSON document to {"a.b.c": number}."""
    if isinstance(doc, dict):
        for k, v in doc.items():
            yield from leaves(v, f"{prefix}{k}.")
    elif isinstance(doc, list):
        for i, v in enumerate(doc):
            yield from leaves(v, f"{prefix}{i}.")
    elif isinstance(doc, (int, float)) and not isinstance(doc, bool):
        yield prefix[:-1], float(doc)


def run_once(tree: Path, cmd: list[str], timeout_s: float) -> dict:
    env = dict(os.environ, PYTHONPATH=str(tree))
    p = subprocess.run([sys.executable, str(tree / cmd[0]), *cmd[1:]], cwd=tree, env=env,
                       capture_output=True, text=True, timeout=timeout_s)
    if p.returncode != 0:
        raise SystemExit(f"{tree}: {' '.join(cmd)} failed ({p.returncode}):\n{p.stderr[-3000:]}")
    text = p.stdout
    return json.loads(text[text.index("{"):])


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--base", required=True, help="the old commit (the baseline)")
    ap.add_argument("--head", default=str(ROOT), help="the new tree (default: this checkout)")
    ap.add_argument("--reps", type=int, default=3, help="runs per tree")
    ap.add_argument("--timeout", type=float, default=900.0, help="seconds per run")
    ap.add_argument("cmd", nargs=argparse.REMAINDER, help="-- <bench script relative to the root> [args]")
    a = ap.parse_args(argv)
    cmd = a.cmd[1:] if a.cmd[:1] == ["--"] else a.cmd
    if not cmd:
        ap.error("give the benchmark after --")
    base_tree = Path(tempfile.mkdtemp(prefix="ab_base_")) / "tree"
    subprocess.run(["git", "-C", str(ROOT), "worktree", "add", "--detach", "-q", str(base_tree), a.base], check=True)
    runs: dict[str, list[dict]] = {"old": [], "new": []}
    loads = []
    try:
        for k in range(a.reps):
            order = [("old", base_tree), ("new", Path(a.head))]
            for name, tree in (order if k % 2 == 0 else order[::-1]):
                loads.append(os.getloadavg()[0])
                runs[name].append(dict(leaves(run_once(tree, cmd, a.timeout))))
                print(f"run {k + 1}/{a.reps} {name} done (load {loads[-1]:.2f})", file=sys.stderr, flush=True)
    finally:
        subprocess.run(["git", "-C", str(ROOT), "worktree", "remove", "--force", str(base_tree)], check=False)
    keys = sorted(set(runs["old"][0]) & set(runs["new"][0]))
    table = {}
    for key in keys:
        old = statistics.median(r[key] for r in runs["old"] if key in r)
        new = statistics.median(r[key] for r in runs["new"] if key in r)
        table[key] = {"old": old, "new": new, "new_over_old": (new / old) if old else None}
    print(json.dumps({"base": a.base, "cmd": cmd, "reps": a.reps, "load_average_1min": loads,
                      "metrics": table}, indent=1))
    return 0


if __name__ == "__main__":
    sys.exit(main())
