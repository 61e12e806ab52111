"""Pipeline components of two checkpoints side by side, in-process, on unseen seeds:
safety / monitor / System 2 planner answers through the VLA backbone (accuracy, confusion
matrices, safety detection delay at the component's freq_hz) and, optionally, closed-loop action
success on bench/policy_eval.py's evaluation seeds (training.compare_policies, paired by seed).

    .venv/bin/python -m physai_lab.training.component_data --out out/components/eval.npz \
        --cells pick_and_place=15,reach=8,place_in_order=12 --seed-base 900000   # unseen seeds
    .venv/bin/python bench/pipeline_components.py --old physai_ros/assets/policy/sim_pi0 \
        --new out/sim_pi0_pipeline --data out/components/eval.npz --action-episodes 100 \
        --out out/components/compare.json
"""
from __future__ import annotations

import argparse
import json
import os
import sys
import time
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]


def table(docs: dict) -> str:
    """Markdown: one row per figure, one column per checkpoint."""
    names = list(docs)
    lines = ["| figure | " + " | ".join(names) + " |", "|---|" + "---|" * len(names)]

    def row(label, fn):
        vals = []
        for n in names:
            try:
                vals.append(str(fn(docs[n])))
            except (KeyError, TypeError):
                vals.append("-")
        lines.append(f"| {label} | " + " | ".join(vals) + " |")

    row("safety accuracy", lambda d: d["safety"]["accuracy"])
    for lab in ("safe", "unsafe"):
        row(f"safety truth {lab}: answers safe/unsafe/unparseable",
            lambda d, lab=lab: "/".join(str(d["safety"]["matrix"][lab][c]) for c in ("safe", "unsafe", "unparseable")))
    row("safety visits detected (at freq_hz)", lambda d: f"{d['safety']['detection']['detected']}/{d['safety']['detection']['visits']}")
    row("safety detection delay median / p90 / max (s)",
        lambda d: "{median} / {p90} / {max}".format(**d["safety"]["detection"]["delay_s"]))
    row("safety false alarms (queries)", lambda d: f"{d['safety']['detection']['false_alarms']}/{d['safety']['detection']['safe_queries']}")
    row("safety latency, batch 1, median ms", lambda d: d["safety"]["latency_ms_batch1"]["median"])
    row("monitor accuracy", lambda d: d["monitor"]["accuracy"])
    for lab in ("ongoing", "done", "failed"):
        row(f"monitor truth {lab}: ongoing/done/failed/unparseable",
            lambda d, lab=lab: "/".join(str(d["monitor"]["matrix"][lab][c])
                                        for c in ("ongoing", "done", "failed", "unparseable")))
    row("monitor failed recall by reason", lambda d: d["monitor"]["failed_recall_by_reason"])
    row("planner exact match", lambda d: d["planner"]["exact_match"])
    for ans in sorted({a for d in docs.values() if "planner" in d for a in d["planner"]["per_answer"]}):
        row(f"planner '{ans}'", lambda d, ans=ans: "{exact_match} of {frames}".format(**d["planner"]["per_answer"][ans]))
    for p in sorted({p for d in docs.values() if "planner" in d for p in d["planner"].get("by_prompt", {})}):
        row(f"planner exact, robot told '{p}'", lambda d, p=p: "{exact_match} of {frames}".format(**d["planner"]["by_prompt"][p]))
    return "\n".join(lines)


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--old", default=str(REPO / "physai_ros/assets/policy/sim_pi0"))
    ap.add_argument("--new", default="")
    ap.add_argument("--data", default=str(REPO / "out/components/eval.npz"), help="training.component_data frames (unseen seeds)")
    ap.add_argument("--safety-hz", type=float, default=2.0, help="the safety component's freq_hz (docs/pipelines.md)")
    ap.add_argument("--every", type=int, default=1, help="monitor / planner on every N-th frame")
    ap.add_argument("--threads", type=int, default=2)
    ap.add_argument("--action-episodes", type=int, default=0,
                    help="> 0: also closed-loop action success, old vs new, this many seeds per setting")
    ap.add_argument("--robot", action="append", default=["pick_and_place=robot_2"], metavar="TASK=ROBOT_ID")
    ap.add_argument("--reuse", default="", help="a previous --out JSON: take checkpoints already evaluated there")
    ap.add_argument("--out", default="")
    a = ap.parse_args(argv)

    import torch

    from physai_lab.evaluation.components import evaluate
    from physai_lab.training.component_data import load_components

    torch.set_num_threads(a.threads)
    sys.path.insert(0, str(REPO / "scripts"))
    from train_policy import fleet_prompts

    frames = load_components(a.data)
    prompts = fleet_prompts(REPO / "config/fleet.yaml")
    prior = json.loads(Path(a.reuse).read_text())["components"] if a.reuse else {}
    doc: dict = {"data": a.data, "frames": int(len(frames["task"])), "components": {}, "load_average": {}}
    for name, ck in (("old", a.old), ("new", a.new)):
        if not ck:
            continue
        if name in prior and prior[name]["checkpoint"] == str(ck):
            doc["components"][name] = prior[name]
            continue
        doc["load_average"][f"{name}_start"] = os.getloadavg()
        doc["components"][name] = evaluate(ck, frames, prompts, a.safety_hz, a.every)
        doc["load_average"][f"{name}_end"] = os.getloadavg()
    print(table(doc["components"]), flush=True)
    if a.action_episodes > 0 and a.new:
        from physai_lab.training.compare_policies import compare

        settings = [("pick_and_place", ""), ("reach", "")] + [tuple(x.split("=", 1)) for x in a.robot]
        t0 = time.perf_counter()
        doc["load_average"]["actions_start"] = os.getloadavg()
        doc["actions"] = compare(a.old, a.new, settings, a.action_episodes)
        doc["actions"]["seconds"] = round(time.perf_counter() - t0, 1)
        doc["load_average"]["actions_end"] = os.getloadavg()
    doc["finished_utc"] = time.strftime("%Y-%m-%d %H:%M:%S", time.gmtime())
    if a.out:
        Path(a.out).parent.mkdir(parents=True, exist_ok=True)
        Path(a.out).write_text(json.dumps(doc, indent=1))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
