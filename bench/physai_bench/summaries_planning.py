"""The summarisers of the scheduling and planning entries (factory, agents, scheduling,
scheduling_synthetic, scheduling_recorded, language, factory_routing, component_order,
component_memory, pipeline_value, drop_watch, safety_stop): each reads its entry's results file and returns
the rows physai_bench.tables prints, with the baseline of the same run and a verdict."""
from __future__ import annotations

from physai_bench.rows import Row, headlines, lower, pct, side_by_side


def factory(doc: dict) -> list[Row]:
    rows = []
    rng = doc["paper_range"]
    paper_d, paper_s = doc["paper"]["ratios"]["vs best dedicated (max)"], doc["paper"]["ratios"]["headline vs shared"]
    for w in ("P4", "Mix2", "Mix4"):
        v = doc["within_paper_range"].get(w)
        if not v:
            continue
        p = v["peaks"]
        eq8 = v["equal_fleet"].get("8", {})
        # The paper's own pairing for its 12.06x: ROSA at 32 robots over one GPU per model per robot.
        at32 = next((r for r in doc["rows"] if r["workload"] == w and r["robots"] == 32 and r["gpus"] == rng["gpus"]),
                    None)
        pairing = ""
        if w == "P4" and at32:
            b2 = at32["systems"]["B2 GPU/model/robot"]["qualified_actions_per_s"]
            rosa32 = at32["systems"]["ROSA"]["qualified_actions_per_s"] or 0.0
            pairing = f"; ROSA at 32 robots over B2 (the paper's pairing) {rosa32 / b2:.1f}x" if b2 else ""
        rows.append(Row(
            f"Factory {w}, <= {rng['max_robots']} robots on {rng['gpus']} GPUs: qualified actions/s at each "
            "system's peak fleet",
            f"{p['ROSA']['qualified_actions_per_s']:.1f} ({p['ROSA']['robots']} robots)",
            f"dedicated {p['best dedicated']['qualified_actions_per_s']:.1f} ({p['best dedicated']['robots']}), "
            f"shared {p['best shared']['qualified_actions_per_s']:.1f} ({p['best shared']['robots']})",
            f"{v['rosa_peak_vs_dedicated_peak']}x / {v['rosa_peak_vs_shared_peak']}x (peaks); "
            f"{eq8.get('vs_dedicated')}x / {eq8.get('vs_shared')}x at 8 robots{pairing}",
            f"{paper_d}x dedicated (ROSA 89.4 at 32 robots over B2 7.4), {paper_s}x shared (best case)"
            if w == "P4" else
            f"{doc['paper']['ratios'].get(f'vs best shared, {w} peak', '-')}x shared",
            "mixed" if min(eq8.get("vs_dedicated") or 1, eq8.get("vs_shared") or 1) < 1 else "win"))
    return headlines(rows, lambda i, r: r.question.startswith("Factory P4"))


def agents(doc: dict) -> list[Row]:
    rows, parts = [], []
    for kv in doc["config"]["kv_tokens"]:
        cs = [c for c in doc["vs_fifo_rr"] if c["kv_tokens"] == kv and c["policy"] == "kairos"]
        ss = {c["rate_wf_s"]: c for c in doc["vs_spf_rr"] if c["kv_tokens"] == kv and c["policy"] == "kairos"}
        if not cs:
            continue
        lo, hi = min(cs, key=lambda c: c["mean_change"]), max(cs, key=lambda c: c["mean_change"])
        worst_p95 = max(cs, key=lambda c: c["p95_change"])
        spf = [ss[c["rate_wf_s"]]["mean_change"] for c in cs if c["rate_wf_s"] in ss]
        part = {"kv": f"{kv // 1000}k", "mean": f"{lo['mean_change']:+.1%} to {hi['mean_change']:+.1%}",
                "p95": f"{worst_p95['p95_change']:+.1%} (load {worst_p95['rate_wf_s']:g})",
                "spf": f"{min(spf):+.1%} to {max(spf):+.1%}" if spf else "",
                "verdict": "win" if hi["mean_change"] < 0 and worst_p95["p95_change"] < 0 else "mixed",
                "loads": f"{cs[0]['rate_wf_s']:g}-{cs[-1]['rate_wf_s']:g}"}
        parts.append(part)
        rows.append(Row(
            f"Kairos multi-agent, KV {part['kv']} tokens/instance, loads {part['loads']} workflows/s: mean end-to-end "
            "latency", f"{part['mean']} vs FIFO", "FIFO + round robin; shortest-predicted-first",
            f"P95 up to {part['p95']} vs FIFO; vs shortest-first {part['spf']}" if part["spf"] else "-",
            _AGENTS_PAPER, part["verdict"], headline=False))
    if len(parts) < 2:
        return headlines(rows, lambda i, r: True)
    # The README: the smallest and the largest KV budget in one row, side by side.
    parts = [parts[0], parts[-1]]
    both = " / ".join
    return rows + [Row(
        f"Kairos multi-agent, KV {both(p['kv'] for p in parts)} tokens/instance, loads {parts[0]['loads']} "
        "workflows/s: mean end-to-end latency", f"{both(p['mean'] for p in parts)} vs FIFO",
        "FIFO + round robin; shortest-predicted-first",
        f"P95 up to {both(p['p95'] for p in parts)} vs FIFO"
        + (f"; vs shortest-first {both(p['spf'] for p in parts)}" if all(p["spf"] for p in parts) else ""),
        _AGENTS_PAPER, "/".join(p["verdict"] for p in parts))]


_AGENTS_PAPER = "-17.8 % to -28.4 % vs the state of the art (4x A40, its own benchmarks: not these conditions)"


def scheduling(doc: dict) -> list[Row]:
    t2 = doc["table2_at_highest_stable"]
    rate = doc["highest_stable_rate_per_s"]
    rows = []
    for label, key, paper in (("Kairos (wait ratio + dynamic horizon)", "kairos", "31.8-66.5 %"),
                              ("the wait-ratio scheduler alone (static horizon)", "kairos_wo_dynamic_horizon",
                               "10.9-39.3 %")):
        f, a = t2["vs_fifo"][key], t2["vs_autellix"][key]
        rows.append(_vs_fifo_and_autellix(
            f"{label}, LIBERO-like tasks at the highest stable rate ({rate:g} tasks/s): average task latency",
            f["avg_s"], a["avg_s"], f["p95_s"], f"{paper} lower average at peak load (its models and benchmarks)",
            "loss" if f["avg_s"] < 0.05 else "win"))
    # The README: Kairos as the paper runs it; the scheduler alone (a loss here) in docs/results.md
    # and the README's capability table.
    return headlines(rows, lambda i, r: i == 0)


def _vs_fifo_and_autellix(question: str, vs_fifo: float, vs_autellix: float, p95_vs_fifo: float, paper: str,
                          verdict: str, horizons: str = "static horizon") -> Row:
    """A scheduler row: its average latency reduction against FIFO and Autellix, P95 against FIFO."""
    return Row(question, f"{lower(vs_fifo)} than FIFO, {lower(vs_autellix)} than Autellix",
               f"FIFO and Autellix, {horizons}", f"P95 {lower(p95_vs_fifo)} than FIFO", paper, verdict)


def _verdict(reduction: float) -> str:
    return "win" if reduction >= 0.05 else "loss" if reduction <= -0.05 else "tie"


def scheduling_synthetic(doc: dict) -> list[Row]:
    red = doc["reductions_at_peak"]
    rate = doc["peak_rate_per_s"]
    rows = []
    for label, key_f, key_a in (("Kairos (wait ratio + dynamic horizon)", "kairos_vs_fifo", "kairos_vs_autellix"),
                                ("the wait-ratio scheduler alone (static horizon)", "scheduler_only_vs_fifo_static",
                                 "scheduler_only_vs_autellix_static")):
        f, a = red[key_f], red[key_a]
        rows.append(_vs_fifo_and_autellix(
            f"{label}, synthetic pi0 edge workload at {rate:g} tasks/s (its highest): average task latency",
            f["avg_s"], a["avg_s"], f["p95_s"],
            "31.8-66.5 % lower (its models and benchmarks)" if key_f == "kairos_vs_fifo" else "10.9-39.3 % lower",
            _verdict(f["avg_s"])))
    for n, cell in doc["by_fleet_size"].items():
        f = cell["reductions"]["kairos_vs_fifo"]
        rows.append(Row(f"Kairos, synthetic pi0 edge workload, {n} robots offline: average task latency",
                        f"{lower(f['avg_s'])} than FIFO", "FIFO, static horizon", f"P95 {lower(f['p95_s'])}",
                        "-", _verdict(f["avg_s"])))
    return headlines(rows, lambda i, r: i == 0)


def scheduling_recorded(doc: dict) -> list[Row]:
    peak = doc["by_rate"][str(doc["peak_rate_per_s"])]
    ours, fifo, autellix = (peak[f"{n}/recorded"] for n in ("wait_ratio", "fifo", "autellix"))
    f, a = 1 - ours["avg_s"] / fifo["avg_s"], 1 - ours["avg_s"] / autellix["avg_s"]
    meta = doc["traces_meta"]
    return [_vs_fifo_and_autellix(
        f"The wait-ratio scheduler, {doc['tasks_in_file']} tasks recorded from our fleet ({meta['model']}), "
        f"replayed at {doc['peak_rate_per_s']:g} tasks/s: average task latency",
        f, a, 1 - ours["p95_s"] / fifo["p95_s"], "10.9-39.3 % lower (the scheduler alone)", _verdict(f),
        horizons="the recorded horizons")]


def language(doc: dict) -> list[Row]:
    rows, sizes = [], []  # sizes: each row's (robots, budget)
    for cell in doc["cells"]:
        m, r = cell["modes"], cell["ratios"]
        if "continuous" not in m or "isolated" not in m:
            continue
        c = m["continuous"]
        sizes.append((cell["robots"], cell["budget"]))
        rows.append(Row(
            f"Language stream, {cell['robots']} robot(s) x {cell['budget']}-token texts, f_min {doc['f_min_hz']:g} "
            "frames/s: frames/s (actions/s / chunk)",
            f"{c['frames_per_s']:.2f} ({c['tokens_per_s']:.0f} tokens/s{'' if c['holds_f_min'] else ', misses f_min'})",
            f"isolated {m['isolated']['frames_per_s']:.2f}, KV sharing alone "
            f"{m['shared']['frames_per_s']:.2f}" if "shared" in m else f"isolated {m['isolated']['frames_per_s']:.2f}",
            f"{r['continuous']['frames_per_s']}x isolated's frames/s, {r['continuous']['tokens_per_s']}x its tokens/s"
            + (f"; {c['frames_per_s'] / m['shared']['frames_per_s']:.2f}x sharing alone's frames/s"
               if "shared" in m else ""),
            "up to 3.7x isolated (pi0.5, RTX 4090, f_min 5 frames/s)", _language_verdict(r["continuous"], c),
            headline=False))
    # The README: a middle cell and the largest (where the floor is held by decoding less), in one row.
    cells = [(n, b, row) for (n, b), row in zip(sizes, rows)]
    picked = [(n, b, row) for n, b, row in cells if (n, b) in ((4, 64), (16, 256))] or cells[-1:]
    model = doc.get("model", "")  # "<checkpoint or preset>: <sizes>, ..., <pi0 | pi05>"
    model = f"{model.split(':')[0].rsplit('/', 1)[-1]}, {model.rsplit(', ', 1)[-1]}" if ":" in model else model
    readme = side_by_side(
        f"Language stream, {model}, f_min {doc['f_min_hz']:g} frames/s, "
        + " / ".join(f"{n} robots x {b}" for n, b, _ in picked) + "-token texts: frames/s",
        [row for _, _, row in picked])
    return rows + [readme]


def _language_verdict(ratio: dict, continuous: dict) -> str:
    frames, tokens = ratio["frames_per_s"], ratio["tokens_per_s"] or 0.0
    if not continuous["holds_f_min"] or frames < 0.95:
        return "loss"
    if tokens < 0.95:  # the floor held by decoding less: more actions, fewer words
        return "mixed"
    return "win" if frames > 1.05 else "tie"


def factory_routing(doc: dict) -> list[Row]:
    rows = []
    for name, e in doc["scenarios"].items():
        r = e["qualified_actions_ratio_vs_no_plan"]
        m = e["modes"]
        rows.append(Row(
            f"Plan routing in the real server ({name} classes): qualified actions/s",
            f"per-instance queues {m['enforced']['median_qualified_actions_per_s']:.0f}",
            f"no plan {m['no_plan']['median_qualified_actions_per_s']:.0f}",
            f"{r['enforced']}x (advisory routes {r['advisory']}x)", "-",
            "loss" if r["enforced"] < 0.98 else "tie" if r["enforced"] <= 1.02 else "win"))
    # The README: the scenario where enforcing the plan costs most; docs/results.md has each.
    worst = min(range(len(rows)), key=lambda i: list(doc["scenarios"].values())[i]
                ["qualified_actions_ratio_vs_no_plan"]["enforced"], default=0)
    return headlines(rows, lambda i, r: i == worst)


def component_order(doc: dict) -> list[Row]:
    rows = []
    for load, e in doc["loads"].items():
        r = e["step_mean_vs_fifo"]
        rows.append(Row(
            f"Kairos order of pipeline component steps, {load.replace('_', ' ')}: mean step latency",
            f"{e['kairos']['median_step_mean_ms']:.0f} ms",
            f"FIFO {e['fifo']['median_step_mean_ms']:.0f} ms, "
            f"shortest-first {e['shortest']['median_step_mean_ms']:.0f} ms",
            f"{r['kairos']}x FIFO (shortest-first {r['shortest']}x)", "-",
            "loss" if r["kairos"] > 1.02 else "tie" if r["kairos"] >= 0.98 else
            "win" if r["kairos"] <= r["shortest"] else "mixed"))
    return headlines(rows, lambda i, r: i == len(rows) - 1)  # the largest fleet


def component_memory(doc: dict) -> list[Row]:
    """Per load and budget: the dispatcher's batches over the budget and its step latency, beside
    Kairos order without it (how often its batches exceed the budget)."""
    rows = []
    for load, e in doc["loads"].items():
        free = e["kairos"]
        for b in doc["budgets_questions"]:
            ours = e[f"kairos+dispatcher@{b}"]
            over = [r["batches_over_budget"][str(b)] for r in free["runs"]]
            largest = max(r["batch_kv_max_questions"] for r in free["runs"])
            held = max(r["batch_kv_max_questions"] for r in ours["runs"])
            ours_over = round(sum(r["batches_over_budget"][str(b)] * r["batches"] for r in ours["runs"]))
            ratio = ours["median_step_mean_ms"] / free["median_step_mean_ms"]
            fifo = e["fifo"]["median_step_mean_ms"]
            rows.append(Row(
                f"Kairos memory dispatcher, {load.replace('_', ' ')}, K/V budget of {b} questions: batches over "
                "it, mean step",
                f"{ours_over} of {sum(r['batches'] for r in ours['runs'])} (largest {held:g}); "
                f"{ours['median_step_mean_ms']:.0f} ms",
                f"Kairos order alone: {pct(float(sum(over) / len(over)))} over (largest {largest:g}), "
                f"{free['median_step_mean_ms']:.0f} ms; FIFO {fifo:.0f} ms",
                f"{ratio:.2f}x Kairos alone's step latency", "-",
                # A budget Kairos alone never exceeds holds nothing back: a tie at equal latency.
                "loss" if ours_over else "tie" if not any(over) and ratio <= 1.05 else
                "win" if ratio <= 1.02 else "mixed"))
    return headlines(rows, lambda i, r: i == len(rows) - len(doc["budgets_questions"]))  # largest load, tightest


def pipeline_value(doc: dict) -> list[Row]:
    """Per task: tasks per hour with the trained pipeline, beside System 1 alone and the perfect
    pipeline, with the paired test on the same seeds; then false dones and the arm moving with a
    person in the cell, summed over the tasks."""
    rows = []
    for task, e in doc["tasks"].items():
        ours, alone, perfect = e["pipeline"], e["system1"], e["perfect"]
        vs, pv = e["paired_completed"]["pipeline_vs_system1"], e["paired_completed"]["perfect_vs_system1"]

        def rate(x: dict) -> str:
            lo, hi = x["completed_per_hour_ci95"]
            return f"{x['completed_per_hour']:.0f} [{lo:.0f}, {hi:.0f}]"
        rows.append(Row(
            f"Task pipeline, {task}, {ours['shifts']} x {doc['shift']['shift_s']:g} s shifts, same seeds: "
            "tasks completed per hour",
            f"{rate(ours)} (trained components)", f"System 1 alone {rate(alone)}; perfect components {rate(perfect)}",
            f"{vs['mean_diff']:+.2f} tasks/shift vs alone [{vs['ci95'][0]:+.2f}, {vs['ci95'][1]:+.2f}], Wilcoxon "
            f"p = {vs['wilcoxon_p']:.2g} (perfect {pv['mean_diff']:+.2f}, p = {pv['wilcoxon_p']:.2g})", "-",
            "win" if vs["ci95"][0] > 0 and vs["wilcoxon_p"] < 0.05 else
            "loss" if vs["ci95"][1] < 0 and vs["wilcoxon_p"] < 0.05 else "tie"))
    tot = {s: {k: sum(e[s][k] for e in doc["tasks"].values()) for k in ("false_dones", "dones", "intruder_s",
                                                                         "moving_with_intruder_s", "hours")}
           for s in ("system1", "pipeline", "perfect")}
    # Results written before false_done_attempts was counted lack it: the row then leaves it out.
    for s, t in tot.items():
        t["false_done_attempts"] = sum(e[s].get("false_done_attempts", 0) for e in doc["tasks"].values())
    attempts = (f", in {tot['pipeline']['false_done_attempts']} attempts"
                if any("false_done_attempts" in e["pipeline"] for e in doc["tasks"].values()) else "")

    def share(s: str) -> str:
        t = tot[s]
        return pct(t["moving_with_intruder_s"] / t["intruder_s"]) if t["intruder_s"] else "no visit"
    rows.append(Row(
        "Task pipeline, every task's shifts: false dones per hour, arm moving while a person is in the cell",
        f"{tot['pipeline']['false_dones'] / max(tot['pipeline']['hours'], 1e-9):.1f} per hour "
        f"({tot['pipeline']['false_dones']} of {tot['pipeline']['dones']} dones{attempts}); moving {share('pipeline')}",
        f"System 1 alone: no monitor, moving {share('system1')}; perfect components: "
        f"{tot['perfect']['false_dones']} false dones, moving {share('perfect')}", "-", "-",
        "win" if tot["pipeline"]["intruder_s"] and tot["system1"]["intruder_s"] and
        tot["pipeline"]["moving_with_intruder_s"] / tot["pipeline"]["intruder_s"] <
        tot["system1"]["moving_with_intruder_s"] / tot["system1"]["intruder_s"] else "tie"))
    return headlines(rows, lambda i, r: "place_in_order," in r.question)  # the two-step task's row


def drop_watch(doc: dict) -> list[Row]:
    """Per task: what the grasp watch saw of the sim's drops (recall by cause, precision, delay)
    beside the trained monitor's resets on drops in the same shifts; then acting on it (replan)
    against reporting only, tasks per hour paired on seeds."""
    rows = []
    for task, e in doc["tasks"].items():
        d, tot = e["watch"]["detection"], e["watch"]["totals"]
        seen = {c: f"{d['detected'].get(c, 0)}/{d['drops'].get(c, 0)}" for c in ("slip", "released")}
        delay = (f" in {1e3 * d['delay_s']['median']:.0f} ms median (max {1e3 * d['delay_s']['max']:.0f})"
                 if d["delay_s"] else "")
        precision = f"{d['precision']:.2f}" if d["precision"] is not None else "-"
        after = sum(d.get("false_alarms_after_sim_reset", {}).values())
        rows.append(Row(
            f"Grasp watch, {task}, {tot['shifts']} x {doc['shift']['shift_s']:g} s shifts: drops seen",
            f"{seen['slip']} slips{delay}; off-pad releases {seen['released']}; precision {precision}"
            + (f" ({after} false just after a sim reset)" if after else ""),
            f"trained monitor: {e['watch']['totals']['monitor_resets_on_drops']} resets on a drop", "-", "-",
            "win" if d["precision"] is not None and d["precision"] >= 0.9 and d["recall"].get("slip", 0) >= 0.9
            else "mixed"))
        vs, rp, wt = e["paired_completed"], e["replan"]["totals"], tot
        rows.append(Row(
            f"Grasp watch, {task}: tasks per hour when a lost grasp drops the plan",
            f"{rp['completed']} tasks ({rp['completed_per_hour_ci95'][0]:.0f}-{rp['completed_per_hour_ci95'][1]:.0f}"
            " per hour)", f"reporting only: {wt['completed']} tasks",
            f"{vs['mean_diff']:+.2f} tasks/shift [{vs['ci95'][0]:+.2f}, {vs['ci95'][1]:+.2f}], "
            f"p = {vs['wilcoxon_p']:.2g}", "-",
            "win" if vs["ci95"][0] > 0 and vs["wilcoxon_p"] < 0.05 else
            "loss" if vs["ci95"][1] < 0 and vs["wilcoxon_p"] < 0.05 else "tie"))
    return headlines(rows, lambda i, r: i == 0)  # the first task's drops seen


def safety_stop(doc: dict) -> list[Row]:
    m = doc["modes"]
    share = {k: v["moving_share_with_person"] for k, v in m.items()}
    if None in share.values():  # a run too short for a visit in some mode (a --quick one)
        return [Row("Arm moving while a person is in the cell (share of time)", "no visit in some mode", "-", "-",
                    "-", "tie")]
    ci = m["model"]["moving_share_with_person_ci95"] or [share["model"]] * 2
    return [Row("Arm moving while a person is in the cell (share of time)",
                f"{pct(share['model'])} [{pct(ci[0])}, {pct(ci[1])}] with the checkpoint's safety model",
                f"{pct(share['none'])} without safety; {pct(share['truth'])} with a perfect model",
                f"{share['model'] / share['none']:.2f}x no safety", "-", "win")]
