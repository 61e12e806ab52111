"""The summarisers of the serving, engine and policy entries (camera_frames, openpi_gateway,
serving, serving_auth, policy, demo, soak, rtc, engine_full_depth, streaming_rates,
streaming_fleet): each reads its entry's results file and returns the rows physai_bench.tables
prints, with the baseline of the same run and a verdict."""
from __future__ import annotations

import re
from dataclasses import replace

from physai_bench.rows import Row, headlines, num, pct, side_by_side


def camera_frames(doc: dict) -> list[Row]:
    return headlines([Row(f"Exact LeRobot image path, {c['frames']}: CPU ms per round",
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
    return headlines(rows, lambda i, r: i == 0)  # the README: one client; docs/results.md: every count


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
        if ours is None or ms is None:  # rows compare at equal model time: ours ran, anchors at 'engine'
            continue
        where = f"{views} view{'s' if views > 1 else ''} {size}, over ROS on this host, equal model time ({ms:g} ms)"
        if n == 1 and "openpi+engine" in med:
            o, f = med["openpi+engine"], med.get("rclpy+engine")
            p50, p99 = ours["overhead_beyond_policy_ms_p50"], ours["overhead_beyond_policy_ms_p99"]
            r50, r99 = p50 / o["overhead_ms_p50"], p99 / o["overhead_ms_p99"]
            rows.append(Row(
                f"Serving overhead beyond the policy (and its transforms), 1 robot, {where}: p50 / p99",
                f"{num(p50)} / {num(p99)} ms",
                f"openpi's websocket server {num(o['overhead_ms_p50'])} / {num(o['overhead_ms_p99'])} ms"
                + (f"; a bare rclpy echo {num(f['overhead_ms_p50'])} / {num(f['overhead_ms_p99'])} ms" if f else ""),
                f"{r50:.2f}x / {r99:.2f}x openpi's", "-", _ratio_verdict(r50, r99)))
        elif n > 1 and "rclpy+engine batch" in med:
            f = med["rclpy+engine batch"]
            whole = ours["overhead_beyond_policy_ms_p50"]
            outside = ours["overhead_beyond_batch_policy_excl_queue_ms_p50"]
            rw, ro = whole / f["overhead_ms_p50"], outside / f["overhead_excl_queue_ms_p50"]
            one = med.get("openpi")
            rows.append(Row(
                f"Serving overhead with {n} robots batched, {where}: p50 with the wait for the batch in flight, "
                "and outside it (beyond the batch's policy)",
                f"{num(whole)} ms, {num(outside)} ms outside the wait",
                f"a batching rclpy floor {num(f['overhead_ms_p50'])} ms, {num(f['overhead_excl_queue_ms_p50'])} ms"
                + (f"; openpi one at a time with no model {num(one['overhead_ms_p50'])} ms" if one else ""),
                f"{rw:.2f}x / {ro:.2f}x the floor", "-", _ratio_verdict(rw, ro)))
    # The README (kept short): the first one-robot case; docs/results.md has every case.
    return headlines(rows, lambda i, r: i == 0)


def serving_auth(doc: dict) -> list[Row]:
    """Authentication on over off, per case (medians of the alternated server runs)."""
    rows = []
    for case, c in doc["cases"].items():
        if "auth_on" not in c or "auth_off" not in c:
            continue
        n, views, size = case.split("_")
        n, views = int(n.removesuffix("robot")), int(views.removesuffix("views"))
        on, off = c["auth_on"], c["auth_off"]
        lost = sum(r["lost"] for m in (on, off) for r in m["runs"])
        r50, r99 = on["overhead_ms_p50"] / off["overhead_ms_p50"], on["overhead_ms_p99"] / off["overhead_ms_p99"]
        rows.append(Row(
            f"Authentication's cost, {n} robot{'s' if n > 1 else ''}, {views} view{'s' if views > 1 else ''} {size}, "
            "over ROS (this CPU): serving overhead p50 / p99 (batch wait included)",
            f"on {num(on['overhead_ms_p50'])} / {num(on['overhead_ms_p99'])} ms"
            + (f" ({lost} rounds lost)" if lost else ""),
            f"off {num(off['overhead_ms_p50'])} / {num(off['overhead_ms_p99'])} ms",
            f"{r50:.2f}x / {r99:.2f}x (client CPU {on['client_cpu_ms_per_obs'] / off['client_cpu_ms_per_obs']:.2f}x)",
            "-", "loss" if lost else _ratio_verdict(r50, r99)))
    # The README: the fleet's usual robot (1 robot, 2 views at 224); docs/results.md has every case.
    return headlines(rows, lambda i, r: r.question.startswith("Authentication's cost, 1 robot, 2 views 224"))


def policy(doc: dict) -> list[Row]:
    lat = doc["method"]["latency_ms"]
    rows = []
    for task, t in doc["tasks"].items():
        ours, exp, test = t.get("policy"), t.get("expert"), t.get("policy_vs_expert")
        if not ours or not exp:
            continue
        lo, hi = ours["success_ci95"]
        p = test["p_two_sided"]
        rows.append(Row(
            f"Closed-loop success, {task.replace('_', ' ')} ({t['robot']}, {t['views']} camera"
            f"{'s' if t['views'] > 1 else ''}, fleet.yaml horizon {t['horizon_policy']}), lockstep sim, {lat:g} ms "
            "modelled latency: successes",
            f"{ours['successes']}/{ours['episodes']} [{lo:.2f}, {hi:.2f}]",
            f"the scripted expert (privileged) {exp['successes']}/{exp['episodes']}",
            f"McNemar p {'< 0.0001' if p < 1e-4 else '= ' + str(p)}", "-",
            "tie" if p >= 0.05 else "win" if ours["successes"] > exp["successes"] else "loss"))
    dom = doc.get("dominance")
    if dom and dom["points"]:
        gains = [r["gain_vs_static"] for r in dom["points"] if r["gain_vs_static"] is not None]
        rows.append(Row(
            f"Kairos Figure 11 on {doc['tradeoff_task'].replace('_', ' ')}: confidence horizons (t) vs static H at the "
            f"same average horizon, {doc['episodes']} episodes per point",
            f"{dom['points_above_static_curve']} of {dom['points_inside_static_range']} t points above the static "
            f"curve, {dom['dominated_points']} of {len(dom['points'])} dominated by a static H",
            "the static-H sweep of the same run",
            f"{100 * min(gains):+.1f} to {100 * max(gains):+.1f} points at equal horizon" if gains else "-",
            "dominates on all six workloads, up to +30 % at equal horizon (10 trials a point)",
            # Dominance within the points' own intervals is not evidence: a tie.
            "win" if dom["significant"] else "tie" if dom["confidence_dominates"] else
            "mixed" if dom["points_above_static_curve"] else "loss"))
    # The README (kept short): the trade-off, the paper's comparison; docs/results.md has the tasks.
    return headlines(rows, lambda i, r: r.question.startswith("Kairos"))


def demo(doc: dict) -> list[Row]:
    """The default fleet over ROS: the busy runs beside the idle ones of the same run (summed over
    runs), overall and per task, with Fisher's exact test on the completed / ended counts."""
    from scipy.stats import fisher_exact

    def pooled(cond: str) -> dict:
        runs = [r for r in doc["runs"] if r["busy"] == (cond == "busy")]
        tasks: dict[str, list[int]] = {}
        for r in runs:
            for task, frac in r["per_task"].items():
                done, ended = map(int, frac.split("/"))
                tasks.setdefault(task, [0, 0])
                tasks[task][0] += done
                tasks[task][1] += ended
        lat = [r["latency_ms_p50"] for r in runs if r["latency_ms_p50"] is not None]
        return {"runs": runs, "tasks": tasks, "stopped": sum(r["clients_stopped"] for r in runs),
                "latency_p50": max(lat) if lat else None}

    idle, busy = pooled("idle"), pooled("busy")
    where = f"{doc['duration_s']:g} s served per run, 13 processes on this CPU"
    if not busy["runs"]:  # an idle-only run: success as measured, no baseline
        rows = [Row(f"The default fleet over ROS, {task.replace('_', ' ')}, idle, {where}: episodes completed / ended",
                    f"{d}/{e}", "-", "-", "-", "unmeasured") for task, (d, e) in idle["tasks"].items()]
        return headlines(rows, lambda i, r: i == 0)
    rows = []
    for task in sorted(set(idle["tasks"]) | set(busy["tasks"])):
        (di, ei), (db, eb) = idle["tasks"].get(task, [0, 0]), busy["tasks"].get(task, [0, 0])
        if not ei or not eb:
            continue
        p = fisher_exact([[db, eb - db], [di, ei - di]])[1]
        rows.append(Row(
            f"The default fleet over ROS with a CPU-heavy job beside it ({len(busy['runs'])} x {where}), "
            f"{task.replace('_', ' ')}: episodes completed / ended",
            f"{db}/{eb} = {db / eb:.2f} busy", f"{di}/{ei} = {di / ei:.2f} idle, same run",
            f"Fisher p = {p:.2g}", "-", "tie" if p >= 0.05 else "loss" if db / eb < di / ei else "win"))
    d_b = sum(v[0] for v in busy["tasks"].values())
    e_b = sum(v[1] for v in busy["tasks"].values())
    d_i = sum(v[0] for v in idle["tasks"].values())
    e_i = sum(v[1] for v in idle["tasks"].values())
    if e_b and e_i:
        p = fisher_exact([[d_b, e_b - d_b], [d_i, e_i - d_i]])[1]
        rows.insert(0, Row(
            f"The default fleet over ROS with a CPU-heavy job beside it ({len(busy['runs'])} x {where}): "
            "episodes completed / ended, all robots",
            f"{d_b}/{e_b} = {d_b / e_b:.2f} busy ({busy['stopped']} clients stopped, worst run's latency p50 "
            f"{num(busy['latency_p50'] or 0)} ms)",
            f"{d_i}/{e_i} = {d_i / e_i:.2f} idle ({idle['stopped']} stopped, worst p50 "
            f"{num(idle['latency_p50'] or 0)} ms)",
            f"Fisher p = {p:.2g}", "-", "tie" if p >= 0.05 else "loss" if d_b / e_b < d_i / e_i else "win"))
    return headlines(rows, lambda i, r: i == 0)


def soak(doc: dict) -> list[Row]:
    """Invariants without a baseline (pass / fail): no round lost or answered twice, every robot
    served, memory flat; and the latency of the last minute beside the first of the same run."""
    cfg, r = doc["config"], doc["rounds"]
    where = f"{cfg['robots']} robots for {cfg['minutes']:g} min over ROS (tiny pi0, reduced sensor rates, this CPU)"
    ok = r["lost"] == r["duplicated"] == 0 and r["robots_served"] == r["robots"] and doc["physai_fleet_rc"] == 0
    rows = [Row(f"Soak, {where}: rounds lost / answered twice, from every client's own ledger",
                f"{r['lost']} lost, {r['duplicated']} twice of {r['sent']} sent; {r['robots_served']}/{r['robots']} "
                "robots served", "-", "-", "-", "pass" if ok else "fail")]
    lat = doc["latency_by_minute"]
    if len(lat) > 1:
        first, last = lat[0], lat[-1]
        ratio = last["p99_ms"] / first["p99_ms"]
        rows.append(Row(f"Soak, {where}: capture -> chunk latency in the last minute vs the first",
                        f"p50 {num(last['p50_ms'])} ms, p99 {num(last['p99_ms'])} ms",
                        f"first minute p50 {num(first['p50_ms'])} ms, p99 {num(first['p99_ms'])} ms",
                        f"{ratio:.2f}x p99", "-", "tie" if abs(ratio - 1) <= 0.1 else "loss" if ratio > 1 else "win"))
    # Memory: flat when no process kind's resident memory grows, over the second half's slope,
    # by more than 2 % of its size across the run (start-up and registrations settle in the first).
    growth = {}
    for name, g in doc["memory"].items():
        kind = name.rsplit("/", 1)[-1]
        share = g["slope_second_half_mb_per_min"] * cfg["minutes"] / max(g["rss_mb_last"], 1.0)
        growth[kind] = max(growth.get(kind, share), share)
    if growth:
        worst = max(growth, key=growth.get)
        slopes = doc["memory_slope_second_half_mb_per_min_by_kind"]
        rows.append(Row(f"Soak, {where}: resident memory growth over the second half, per process kind (largest "
                        "slope)",
                        ", ".join(f"{k} {slopes[k]['max']:+.2f} MB/min" for k in sorted(slopes)),
                        "-", f"worst {worst}: {100 * growth[worst]:+.1f} % of its size over the run", "-",
                        "pass" if growth[worst] <= 0.02 else "fail"))
    return headlines(rows, lambda i, r: i == 0)


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
    rows = [replace(r, headline=False) for r in rows]
    return rows + _rtc_headline(rows, [t for t in doc["paired"] if t["merge"] == "rtc"
                                       and t["against"] == "vs_best_crossfade"])


def _rtc_headline(rows: list[Row], paired: list[dict]) -> list[Row]:
    """The README's one RTC row: every beta at every model-time share, the first beta's p-values."""
    by_beta: dict[float, list] = {}
    for r, t in zip(rows, paired):
        by_beta.setdefault(t["param"], []).append((r, t))
    if not by_beta:
        return []
    (beta0, first), *others = sorted(by_beta.items())
    t0 = first[0][1]
    shares = " / ".join(f"{t.get('compute_share', 1.0):g}" for _, t in first)

    def successes(cells):
        return " / ".join(r.ours.split("/")[0] for r, _ in cells)
    return [Row(f"RTC vs the best crossfade ({t0['against_param']:g} s), {t0['task']}, {t0['latency_ms']:g} ms latency, "
                f"{shares} of it model time: successes",
                f"beta {beta0:g}: {successes(first)} of {t0['success'][2]}"
                + "".join(f"; beta {b:g}: {successes(c)}" for b, c in others), first[0][0].baseline,
                f"beta {beta0:g}: McNemar " + " / ".join(r.ratio.removeprefix("McNemar ") for r, _ in first), "-",
                "/".join(r.verdict for r, _ in first))]


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
    return headlines(rows, lambda i, r: i == 0)  # the README: pi0; docs/results.md: pi0.5 too


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
        ceiling = f"one tick alone {num(alone['tick_ms_p50'])} ms: at most {num(alone['ceiling_hz'])} Hz"
        if ros.get("window_ae_hz") is None:  # the tick alone already answers: it cannot keep the rate
            rows.append(Row(q, f"not measured over ROS ({why})", ceiling,
                            f"at most {num(alone['ceiling_hz'] / target)}x the paper's rate", doc["paper"],
                            "loss" if alone["ceiling_hz"] < 0.95 * target else "unmeasured"))
            continue
        hz, missed = ros["window_ae_hz"], ros["window_missed_tick_fraction"]
        tuned = c.get("ros_tuned") or {}
        also = (f"; tuned (VLM process, {tuned['server_ae_scheduling']}): {num(tuned['window_ae_hz'])} Hz, "
                f"{pct(tuned['window_missed_tick_fraction'])} missed" if tuned.get("window_ae_hz") is not None else "")
        rows.append(Row(q, f"{num(hz)} Hz ({pct(missed)} of tick slots missed), VLM {num(ros['window_vlm_hz'])} Hz{also}",
                        ceiling, f"{num(hz / target)}x the paper's rate", doc["paper"],
                        "tie" if hz >= 0.95 * target and missed < 0.01 else "loss"))
    # The README: the tiny model (the best case) and the deepest preset measured, in one row.
    rows = [replace(r, headline=False) for r in rows]  # one per cell, in the cells' order
    ends = sorted({0, len(rows) - 1})
    presets = " / ".join(doc["cells"][i]["preset"] for i in ends)
    return rows + [side_by_side(f"Action-expert ticks/s for one robot at the paper's {target:g} Hz, {presets} "
                                "preset, default settings, over ROS (this CPU)", [rows[i] for i in ends])]


def streaming_fleet(doc: dict) -> list[Row]:
    """Each robot count against one robot on the same server, over ROS and in process."""
    rates = doc["configured"]
    rows = []
    for where, key, hz_key, missed_key in (("over ROS", "over_ros", "window_ae_hz", "window_missed_tick_fraction"),
                                           ("in process", "in_process", "ae_hz", "missed_tick_fraction")):
        cases = {c["robots"]: c for c in doc[key]}
        one = cases.get(1)
        for n, c in sorted(cases.items()):
            if n == 1 or one is None or c.get(hz_key) is None or not c.get("quick_loop_ms_p50"):
                continue

            def cell(x):
                return (f"AE {num(x[hz_key])} Hz ({pct(x[missed_key])} missed), wrench p50 "
                        f"{num(x['quick_loop_ms_p50'])} ms, frame p50 {num(x['slow_loop_ms_p50'])} ms")
            r_quick = c["quick_loop_ms_p50"] / one["quick_loop_ms_p50"]
            r_hz = one[hz_key] / c[hz_key]
            rows.append(Row(
                f"{n} streaming robots on one server, {where} (tiny, this CPU, VLM {rates['vlm_hz']:g} / AE "
                f"{rates['ae_hz']:g} Hz): per robot, wrench / frame to {'command' if key == 'over_ros' else 'segment'}",
                cell(c), "1 robot: " + cell(one), f"wrench loop {r_quick:.2f}x, AE rate {1 / r_hz:.2f}x one robot's",
                "-", _ratio_verdict(r_quick, r_hz)))
    # The README: the most robots over ROS (the fleet's case); docs/results.md has the rest.
    last_ros = max((i for i, r in enumerate(rows) if "over ROS" in r.question), default=0)
    return headlines(rows, lambda i, r: i == last_ros) if rows else [
        Row("Several streaming robots on one server", "not measured (no 1-robot baseline)", "-", "-", "-", "unmeasured")]
