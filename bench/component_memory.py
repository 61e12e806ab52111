"""Kairos's memory-aware dispatcher on the server's real component path, across K/V budgets and
loads: Kairos order + the time-slot dispatcher (`server.components.kv_budget_mb`) beside Kairos
order, shortest-first and FIFO without it, and FIFO with it (the dispatcher without the order).

The same rig as bench/component_order.py (the real ComponentService and VLA backbone backend,
tiny pi0 preset, random weights, robots in this process running pipeline steps). Every backend
call is metered: the K/V its batch will hold by its last token, summed from the backbone's own
`kv_demand` (the model the dispatcher admits by). A budget is given in questions' worth: B times
the K/V of one planner question (the largest of the three), so it binds at every load. Without
the dispatcher nothing stops a batch from holding more, which on a GPU is what preempts or runs
out of memory; here the share of batches over the budget and their largest K/V say how often and
by how much, and the dispatcher's cost is the step latency beside them.

One engine instance: the choice between instances (`placement: memory`) is covered by
test/serving/test_component_memory_dispatch.py, not measured here (two engine threads on two
cores would measure the cores).

  python bench/component_memory.py --robots 8,16 --budgets 2,4 --seconds 30 --json bench/results/component_memory.json
"""
from __future__ import annotations

import argparse
import json
from collections import defaultdict

import numpy as np

from component_order import HW, PROMPT, QUESTIONS, load_entry, run
from physai_bench import results

MB = 1 << 20


class Metered:
    """A component backend that records, per call, the K/V its batch will hold by its last token."""

    def __init__(self, inner, sink: list):
        self.inner, self.sink, self.name = inner, sink, inner.name

    def kv_demand(self, q):
        return self.inner.kv_demand(q)

    def answer(self, queries):
        d = [self.inner.kv_demand(q) for q in queries]
        self.sink.append(sum(x.prompt_bytes + x.answer_bytes for x in d))
        return self.inner.answer(queries)

    def close(self):
        self.inner.close()

    def forget(self, robot_id):
        self.inner.forget(robot_id)


def one_question_bytes() -> int:
    """One planner question's K/V by its last answer token, on the bench's model and frame."""
    from physai_ros.pipeline.backend import ComponentQuery
    from physai_ros.serving.pipeline.backends import load_backends
    from physai_ros.serving.startup.engine_builder import build_core
    from component_order import fleet

    cfg = fleet(1, "fifo")
    backends = load_backends(cfg, build_core(cfg, instance_id="memory_probe"))
    q, tokens = QUESTIONS["system2"]
    frame = (np.zeros((*HW, 3), np.uint8),)
    d = backends["vla"].kv_demand(ComponentQuery("r0", "system2", q.replace("{task}", PROMPT), PROMPT, frame,
                                                 np.zeros(5, np.float32), tokens))
    return d.prompt_bytes + d.answer_bytes


def conditions(budgets: list[int]) -> list[tuple[str, str, int | None]]:
    """(name, order, budget in questions' worth or None)."""
    out = [(f"kairos+dispatcher@{b}", "kairos", b) for b in budgets]
    out.append((f"fifo+dispatcher@{budgets[0]}", "fifo", budgets[0]))
    return out + [("kairos", "kairos", None), ("shortest", "shortest", None), ("fifo", "fifo", None)]


def measured(r: dict, sizes: list, question: int, budgets: list[int]) -> dict:
    a = np.array(sizes, float)
    r["batches"] = int(a.size)
    r["batch_kv_max_questions"] = round(float(a.max()) / question, 2) if a.size else None
    r["batches_over_budget"] = {str(b): round(float((a > b * question * (1 + 1e-9)).mean()), 3) if a.size else None
                                for b in budgets}
    return r


def main(argv=None) -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--robots", default="8,16")
    ap.add_argument("--budgets", default="2,4", help="K/V budgets, in planner questions' worth")
    ap.add_argument("--seconds", type=float, default=30.0)
    ap.add_argument("--reps", type=int, default=1)
    ap.add_argument("--checks", type=int, default=2)
    ap.add_argument("--pause-s", type=float, default=0.1)
    ap.add_argument("--quick", action="store_true", help="4 robots, budget 2, 6 s")
    ap.add_argument("--json", default="")
    args = ap.parse_args(argv)
    if args.quick:
        args.robots, args.budgets, args.seconds, args.reps = "4", "2", 6.0, 1
    import torch

    torch.set_num_threads(1)
    budgets = [int(b) for b in args.budgets.split(",")]
    question = one_question_bytes()
    run_info = results.start_run("tiny pi0 backbone (random weights) on CPU, one component backend, robots "
                                 "in-process, no ROS; K/V budgets in planner questions' worth", __file__, argv,
                                 quick=args.quick)
    report = {"question_kv_bytes": question, "budgets_questions": budgets, "loads": {}}
    conds = conditions(budgets)
    for n in (int(x) for x in args.robots.split(",")):
        runs = defaultdict(list)
        for rep in range(args.reps):
            k = rep % len(conds)
            for name, order, b in conds[k:] + conds[:k]:
                sizes: list = []  # the K/V of every batch of this run

                def wrap(backends, sizes=sizes):
                    metered = {id(v): Metered(v, sizes) for v in backends.values()}  # a shared backend stays one
                    return {key: metered[id(v)] for key, v in backends.items()}

                r = run(n, order, args.seconds, args.checks, args.pause_s,
                        kv_budget_mb=None if b is None else b * question / MB, wrap=wrap)
                runs[name].append(measured(r, sizes, question, budgets))
                print(n, name, json.dumps(runs[name][-1]), flush=True)
        report["loads"][f"{n}_robots"] = load_entry(runs)
    report = results.write_result(args.json, run_info, report)
    for load, e in report["loads"].items():
        print(load, e["step_mean_vs_fifo"])


if __name__ == "__main__":
    main()
