"""The README's performance summary and docs/results.md, generated from bench/results: each row is
read from one results file (a summariser per file below), names its regime, the baseline measured
beside it in the same run, the paper's figure at the same conditions where the paper has one, and
where we lose; each file's header (command, commit, date, machine, load) is printed with it. Run
by bench/suite.py (after a full run, or with --tables); a test keeps the committed text equal to
what the files give.
"""
from __future__ import annotations

import re
from dataclasses import dataclass, replace
from pathlib import Path
from typing import Callable

from physai_bench.results import REPO, read_result

README = REPO / "README.md"
RESULTS_DOC = REPO / "docs" / "results.md"
BEGIN, END = "<!-- results-table:begin (bench/suite.py --tables) -->", "<!-- results-table:end -->"


@dataclass(frozen=True)
class Row:
    question: str
    ours: str
    baseline: str
    ratio: str  # ours over the baseline, said which way is better
    paper: str  # the paper's figure at the same conditions ("-": the paper has none)
    verdict: str  # "win", "loss", "tie" or "mixed": said, not coloured
    headline: bool = True  # in the README's summary too (docs/results.md has every row)


def _headlines(rows: list[Row], keep) -> list[Row]:
    """Rows with `keep(index, row)` as the README's (the first one when none is kept)."""
    flags = [bool(keep(i, r)) for i, r in enumerate(rows)]
    if rows and not any(flags):
        flags[0] = True
    return [replace(r, headline=f) for r, f in zip(rows, flags)]


def _pct(x: float) -> str:
    return f"{100 * x:.1f} %"


def _num(x: float) -> str:
    """Three significant figures without an exponent (1458, 7.8, 0.0015)."""
    return f"{x:.0f}" if abs(x) >= 100 else f"{x:.3g}"


def _lower(reduction: float) -> str:
    """A latency reduction (0.3: 30 % less) in words."""
    return f"{reduction:.1%} lower" if reduction >= 0 else f"{-reduction:.1%} higher"


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
    return _headlines(rows, lambda i, r: r.question.startswith("Factory P4"))


def agents(doc: dict) -> list[Row]:
    rows = []
    for kv in doc["config"]["kv_tokens"]:
        cs = [c for c in doc["vs_fifo_rr"] if c["kv_tokens"] == kv and c["policy"] == "kairos"]
        ss = {c["rate_wf_s"]: c for c in doc["vs_spf_rr"] if c["kv_tokens"] == kv and c["policy"] == "kairos"}
        if not cs:
            continue
        lo, hi = min(cs, key=lambda c: c["mean_change"]), max(cs, key=lambda c: c["mean_change"])
        worst_p95 = max(cs, key=lambda c: c["p95_change"])
        spf = [ss[c["rate_wf_s"]]["mean_change"] for c in cs if c["rate_wf_s"] in ss]
        rows.append(Row(
            f"Kairos multi-agent, KV {kv // 1000}k tokens/instance, loads {cs[0]['rate_wf_s']:g}-"
            f"{cs[-1]['rate_wf_s']:g} workflows/s: mean end-to-end latency",
            f"{lo['mean_change']:+.1%} to {hi['mean_change']:+.1%} vs FIFO",
            "FIFO + round robin; shortest-predicted-first",
            f"P95 up to {worst_p95['p95_change']:+.1%} vs FIFO (load {worst_p95['rate_wf_s']:g}); "
            f"vs shortest-first {min(spf):+.1%} to {max(spf):+.1%}" if spf else "-",
            "-17.8 % to -28.4 % vs the state of the art (4x A40, its own benchmarks: not these conditions)",
            "win" if hi["mean_change"] < 0 and worst_p95["p95_change"] < 0 else "mixed"))
    return _headlines(rows, lambda i, r: i in (0, len(rows) - 1))  # the smallest and largest KV budgets


def scheduling(doc: dict) -> list[Row]:
    t2 = doc["table2_at_highest_stable"]
    rate = doc["highest_stable_rate_per_s"]
    rows = []
    for label, key, paper in (("Kairos (wait ratio + dynamic horizon)", "kairos", "31.8-66.5 %"),
                              ("the wait-ratio scheduler alone (static horizon)", "kairos_wo_dynamic_horizon",
                               "10.9-39.3 %")):
        f, a = t2["vs_fifo"][key], t2["vs_autellix"][key]
        rows.append(Row(
            f"{label}, LIBERO-like tasks at the highest stable rate ({rate:g} tasks/s): average task latency",
            f"{_lower(f['avg_s'])} than FIFO, {_lower(a['avg_s'])} than Autellix",
            "FIFO and Autellix, static horizon", f"P95 {_lower(f['p95_s'])} than FIFO",
            f"{paper} lower average at peak load (its models and benchmarks)",
            "loss" if f["avg_s"] < 0.05 else "win"))
    return rows


def language(doc: dict) -> list[Row]:
    rows = []
    for cell in doc["cells"]:
        m, r = cell["modes"], cell["ratios"]
        if "continuous" not in m or "isolated" not in m:
            continue
        c = m["continuous"]
        rows.append(Row(
            f"Language stream, {cell['robots']} robot(s) x {cell['budget']}-token texts, f_min {doc['f_min_hz']:g} "
            "frames/s: frames/s (actions/s / chunk)",
            f"{c['frames_per_s']:.2f} ({c['tokens_per_s']:.0f} tokens/s{'' if c['holds_f_min'] else ', misses f_min'})",
            f"isolated {m['isolated']['frames_per_s']:.2f}, KV sharing alone "
            f"{m['shared']['frames_per_s']:.2f}" if "shared" in m else f"isolated {m['isolated']['frames_per_s']:.2f}",
            f"{r['continuous']['frames_per_s']}x isolated's frames/s, {r['continuous']['tokens_per_s']}x its tokens/s"
            + (f"; {c['frames_per_s'] / m['shared']['frames_per_s']:.2f}x sharing alone's frames/s"
               if "shared" in m else ""),
            "up to 3.7x isolated (pi0.5, RTX 4090, f_min 5 frames/s)", _language_verdict(r["continuous"], c)))
    # The README keeps a middle cell and the largest (where the floor is held by decoding less).
    return _headlines(rows, lambda i, r: r.question.startswith(("Language stream, 4 robot(s) x 64-token",
                                                                "Language stream, 16 robot(s) x 256-token")))


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
    return rows


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
    return _headlines(rows, lambda i, r: i == len(rows) - 1)  # the largest fleet


def safety_stop(doc: dict) -> list[Row]:
    m = doc["modes"]
    share = {k: v["moving_share_with_person"] for k, v in m.items()}
    if None in share.values():  # a run too short for a visit in some mode (a --quick one)
        return [Row("Arm moving while a person is in the cell (share of time)", "no visit in some mode", "-", "-",
                    "-", "tie")]
    ci = m["model"]["moving_share_with_person_ci95"] or [share["model"]] * 2
    return [Row("Arm moving while a person is in the cell (share of time)",
                f"{_pct(share['model'])} [{_pct(ci[0])}, {_pct(ci[1])}] with the checkpoint's safety model",
                f"{_pct(share['none'])} without safety; {_pct(share['truth'])} with a perfect model",
                f"{share['model'] / share['none']:.2f}x no safety", "-", "win")]


def camera_frames(doc: dict) -> list[Row]:
    return _headlines([Row(f"Exact LeRobot image path, {c['frames']}: CPU ms per round",
                           f"{c['lerobot_frames_ms']:.1f} ms",
                           f"uint8 approximation it replaced {c['bytes_bilinear_ms']:.1f} ms",
                           f"{c['lerobot_frames_over_bytes_bilinear']}x (the price of exactness)", "-", "loss")
                       for c in doc["cells"]], lambda i, r: i == 0)


def openpi_gateway(doc: dict) -> list[Row]:
    rows = []
    for row in doc["rows"]:
        systems = [k for k in row if k.startswith("gateway@")]
        best = min(systems, key=lambda k: row[k]["p50_ms"])
        r, o = row["ratio_to_openpi"][best], row["openpi"]
        rows.append(Row(
            f"openpi clients, {row['clients']} at once, the shipped sim_pi0 on this CPU: round trip p50 and "
            "chunks/s",
            f"{row[best]['p50_ms']:.0f} ms, {row[best]['chunks_per_s']:.1f}/s ({best.replace('gateway@b', 'batch ')})",
            f"openpi's server {o['p50_ms']:.0f} ms, {o['chunks_per_s']:.1f}/s",
            f"{r['p50']}x p50, {r['chunks_per_s']}x chunks/s", "-",
            "loss" if r["p50"] > 1.05 or r["chunks_per_s"] < 0.95 else
            "win" if r["p50"] < 0.95 and r["chunks_per_s"] > 1.05 else "tie"))
    return _headlines(rows, lambda i, r: i in (0, len(rows) - 1))  # the fewest and the most clients


def _ratio_verdict(*ratios: float) -> str:
    """Ours over a baseline, lower is better: all within 5 % a tie, all better a win, all worse a loss."""
    if all(abs(r - 1) <= 0.05 for r in ratios):
        return "tie"
    return "win" if all(r < 0.95 for r in ratios) else "loss" if all(r > 1.05 for r in ratios) else "mixed"


def serving(doc: dict) -> list[Row]:
    rows = []
    for case, c in doc["cases"].items():
        n, views, size = case.split("_")
        n, views = int(n.removesuffix("robot")), int(views.removesuffix("views"))
        med, ms = c["median"], doc["engine_model_ms"].get(case)
        ours = med.get("physai")
        where = f"{views} view{'s' if views > 1 else ''} {size}, over ROS on this host, equal model time ({ms:g} ms)"
        if ours is None:
            continue
        if n == 1 and "openpi+engine" in med:
            o, f = med["openpi+engine"], med.get("rclpy+engine")
            p50, p99 = ours["overhead_beyond_policy_ms_p50"], ours["overhead_beyond_policy_ms_p99"]
            r50, r99 = p50 / o["overhead_ms_p50"], p99 / o["overhead_ms_p99"]
            rows.append(Row(
                f"Serving overhead beyond the policy (round trip minus model and its transforms), 1 robot, {where}: "
                "p50 / p99",
                f"{_num(p50)} / {_num(p99)} ms",
                f"openpi's websocket server {_num(o['overhead_ms_p50'])} / {_num(o['overhead_ms_p99'])} ms"
                + (f"; a bare rclpy echo {_num(f['overhead_ms_p50'])} / {_num(f['overhead_ms_p99'])} ms" if f else ""),
                f"{r50:.2f}x / {r99:.2f}x openpi's", "-", _ratio_verdict(r50, r99)))
        elif n > 1 and "rclpy+engine batch" in med:
            f = med["rclpy+engine batch"]
            whole, outside = ours["overhead_beyond_policy_ms_p50"], ours["overhead_beyond_batch_policy_excl_queue_ms_p50"]
            rw, ro = whole / f["overhead_ms_p50"], outside / f["overhead_excl_queue_ms_p50"]
            one = med.get("openpi")
            rows.append(Row(
                f"Serving overhead with {n} robots batched, {where}: p50 with the wait for the batch in flight, "
                "and outside it (beyond the batch's policy)",
                f"{_num(whole)} ms, {_num(outside)} ms outside the wait",
                f"a batching rclpy floor {_num(f['overhead_ms_p50'])} ms, {_num(f['overhead_excl_queue_ms_p50'])} ms"
                + (f"; openpi one at a time with no model {_num(one['overhead_ms_p50'])} ms" if one else ""),
                f"{rw:.2f}x / {ro:.2f}x the floor", "-", _ratio_verdict(rw, ro)))
    # The README: the first one-robot case and the first batched one.
    firsts = {next((i for i, r in enumerate(rows) if r.question.startswith(k)), -1)
              for k in ("Serving overhead beyond", "Serving overhead with")}
    return _headlines(rows, lambda i, r: i in firsts)


def rtc(doc: dict) -> list[Row]:
    rows = []
    for t in doc["paired"]:
        if t["merge"] != "rtc" or t["against"] != "vs_best_crossfade":
            continue
        ours, base, n = t["success"]
        share = t.get("compute_share", 1.0)
        rows.append(Row(
            f"RTC (beta {t['param']:g}) vs the best crossfade ({t['against_param']:g} s), {t['task']}, "
            f"{t['latency_ms']:g} ms latency, {share:g} of it model time (guided: "
            f"{t.get('charged_latency_ms', t['latency_ms']):g} ms): successes",
            f"{ours}/{n}", f"{base}/{n}",
            f"McNemar p {'< 0.0001' if t['p_two_sided'] < 1e-4 else '= ' + str(t['p_two_sided'])}", "-",
            "tie" if t["p_two_sided"] >= 0.05 else "win" if ours > base else "loss"))
    return _headlines(rows, lambda i, r: r.question.startswith("RTC (beta 5)"))


def engine_full_depth(doc: dict) -> list[Row]:
    rows = []
    for c in doc["cells"]:
        name = {"pi0": "pi0", "pi05": "pi0.5"}[c["policy"]]
        case, row = next(iter(c["cases"].items()))
        b, v = case[1:].split("_v")
        ours = f"{row['ours']['total_ms'] / 1e3:.1f} s"
        depth = "at full depth" if c["preset"] == "pi0" else f"at the {c['preset']} preset's sizes"
        q = (f"A {name} chunk {depth} (batch {b}, {v} views, fp32, {doc['threads']} CPU threads): "
             f"prefix + 10 denoise steps")
        if "lerobot_over_ours" not in row:
            rows.append(Row(q, ours, f"{c['reference']}: not measured ({row.get('error', '')[:80]})", "-", "-", "unmeasured"))
            continue
        x = row["lerobot_over_ours"]
        rows.append(Row(q, ours, f"{c['reference']} {row['lerobot']['total_ms'] / 1e3:.1f} s",
                        f"{x:.2f}x faster (prefix {row.get('prefix_lerobot_over_ours', 0):.2f}x, "
                        f"denoise {row.get('denoise_lerobot_over_ours', 0):.2f}x)", "-",
                        "win" if x >= 1.05 else "loss" if x <= 0.95 else "tie"))
    return rows


def streaming_rates(doc: dict) -> list[Row]:
    target = doc["configured"]["ae_hz"]
    rows = []
    for c in doc["cells"]:
        q = (f"Action-expert ticks/s for one robot at the paper's {target:g} Hz, {c['preset']} preset, "
             "default settings, over ROS (this CPU)")
        ros, alone = c.get("ros") or {}, c.get("alone")
        # The reason a measurement failed, without the exception chain and the temporary log path.
        why = re.sub(r" \(logs in [^)]*\)", "", c.get("error", "no server figure").split(": ")[-1])
        why = why.replace("exited -9", "was killed (SIGKILL)")[:90]
        if not alone:
            rows.append(Row(q, f"not measured ({why})", "-", "-", doc["paper"], "unmeasured"))
            continue
        ceiling = f"one tick alone {_num(alone['tick_ms_p50'])} ms: at most {_num(alone['ceiling_hz'])} Hz"
        if ros.get("window_ae_hz") is None:  # the tick alone already answers: it cannot keep the rate
            rows.append(Row(q, f"not measured over ROS ({why})", ceiling,
                            f"at most {_num(alone['ceiling_hz'] / target)}x the paper's rate", doc["paper"],
                            "loss" if alone["ceiling_hz"] < 0.95 * target else "unmeasured"))
            continue
        hz, missed = ros["window_ae_hz"], ros["window_missed_tick_fraction"]
        tuned = c.get("ros_tuned") or {}
        also = (f"; tuned (VLM process, {tuned['server_ae_scheduling']}): {_num(tuned['window_ae_hz'])} Hz, "
                f"{_pct(tuned['window_missed_tick_fraction'])} missed" if tuned.get("window_ae_hz") is not None else "")
        rows.append(Row(q, f"{_num(hz)} Hz ({_pct(missed)} of tick slots missed), VLM {_num(ros['window_vlm_hz'])} Hz{also}",
                        ceiling, f"{_num(hz / target)}x the paper's rate", doc["paper"],
                        "tie" if hz >= 0.95 * target and missed < 0.01 else "loss"))
    # The README: the tiny model (the best case) and the deepest preset measured.
    return _headlines(rows, lambda i, r: i in (0, len(rows) - 1))


SUMMARISERS: dict[str, Callable[[dict], list[Row]]] = {
    "factory": factory, "agents": agents, "scheduling": scheduling, "language": language,
    "factory_routing": factory_routing, "component_order": component_order, "safety_stop": safety_stop,
    "camera_frames": camera_frames, "openpi_gateway": openpi_gateway, "serving": serving, "rtc": rtc,
    "engine_full_depth": engine_full_depth, "streaming_rates": streaming_rates}


def _run_line(name: str, doc: dict) -> str:
    load = doc["load_average"]
    return (f"`{doc['command']}` at {doc['commit']}{'' if doc['tree_clean'] else ' (with uncommitted changes)'}, "
            f"{doc['date']}, {doc['machine']}, load {load['start'][0]:g} -> {load['end'][0]:g}, "
            f"{doc['wall_s']:.0f} s")


def collect(results_dir: Path) -> list[tuple[str, dict, list[Row]]]:
    out = []
    for name, summarise in SUMMARISERS.items():
        path = results_dir / f"{name}.json"
        if path.exists():
            doc = read_result(path)
            out.append((name, doc, summarise(doc)))
    return out


def readme_table(results_dir: Path) -> str:
    """The headline rows; the verdict links the run's section in docs/results.md (its command,
    commit, machine and load)."""
    lines = ["| Question (regime) | Ours | Baseline (same run) | Ratio | Paper, same conditions | Verdict |",
             "|---|---|---|---|---|---|"]
    for name, doc, rows in collect(results_dir):
        lines += [f"| {r.question} | {r.ours} | {r.baseline} | {r.ratio} | {r.paper} "
                  f"| [{r.verdict}](docs/results.md#{name}) |" for r in rows if r.headline]
    return "\n".join(lines)


def results_doc(results_dir: Path) -> str:
    lines = ["# Measured results", "",
             "Generated by `python bench/suite.py --tables` from the files in bench/results; do not edit by hand.",
             "Each section: the run (command, commit, date, machine, load average at start and end, wall time),",
             "its regime, and the rows the README's summary takes from it. The files hold every figure.", ""]
    for name, doc, rows in collect(results_dir):
        lines += [f"## {name}", "", f"- Run: {_run_line(name, doc)}", f"- Regime: {doc['regime']}",
                  f"- File: bench/results/{name}.json", "",
                  "| Question | Ours | Baseline | Ratio | Paper | Verdict |", "|---|---|---|---|---|---|"]
        lines += [f"| {r.question} | {r.ours} | {r.baseline} | {r.ratio} | {r.paper} | {r.verdict} |" for r in rows]
        lines.append("")
    return "\n".join(lines)


def readme_with_table(text: str, table: str) -> str:
    if BEGIN not in text or END not in text:
        raise ValueError(f"README.md lacks the markers {BEGIN!r} ... {END!r}")
    head, rest = text.split(BEGIN, 1)
    _, tail = rest.split(END, 1)
    return f"{head}{BEGIN}\n{table}\n{END}{tail}"


def write_all(results_dir: Path) -> None:
    README.write_text(readme_with_table(README.read_text(), readme_table(results_dir)))
    RESULTS_DOC.write_text(results_doc(results_dir))
