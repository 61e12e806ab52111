"""Retrain the embedded sim policy: record expert data, train, record recovery rounds (DAgger and
perturbed-expert episodes labelled by the expert), train on everything, write the checkpoint.

    .venv/bin/python scripts/train_policy.py --out physai_ros/assets/policy/sim_pi0

From scratch that is --first-minutes of expert-only training, then per --dagger-rounds a
recording driven by the policy so far and --minutes of training on all data. With --init the
given checkpoint is the first driver (and its normalisation is kept). With --text-weight > 0 the
same model is co-trained to answer sim.narration's questions (current subtask, scene) from the
recorded ground truth; --text-eval-data measures its answers afterwards. With --component-data
(training.component_data frames) it is also co-trained to answer the pipeline components'
questions (safety, monitor, planner). See docs/training.md.
"""
from __future__ import annotations

import argparse
import dataclasses
import json
import shutil
import sys
import time
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]


def fleet_prompts(fleet_yaml: Path) -> dict:
    """{sim task: [prompts fleet.yaml's tasks use for robots running it]}: what robots will send."""
    import yaml

    doc = yaml.safe_load(fleet_yaml.read_text())
    out: dict = {}
    for robot in doc.get("robots", []):
        sim_task = (robot.get("sim") or {}).get("task")
        prompt = (doc.get("tasks", {}).get(robot.get("task")) or {}).get("prompt")
        if sim_task and prompt and prompt not in out.setdefault(sim_task, []):
            out[sim_task].append(prompt)
    return out


def interface(a, tc, cells, prompts) -> dict:
    """What a client of the checkpoint must match (bench/policy_eval.py reads it)."""
    seeds: dict = {}
    for c in cells:
        lo, hi = seeds.get(c.task, (c.seed, c.seed + 1))
        seeds[c.task] = (min(lo, c.seed), max(hi, c.seed + 1))
    return {
        "training_cell_seeds": {t: {"range": list(r), "episodes_per_seed": a.episodes_per_cell,
                                    "note": "SimWorld(seed) then reset(keep_arm=True) between episodes"}
                                for t, r in seeds.items()},
        "prompts": prompts,
        "num_views": cells[0].num_views, "camera_resolution": [cells[0].image_height, cells[0].image_width],
        "model_image_size": tc.size.image_size, "action_rate_hz": tc.action_rate_hz,
        "chunk_size": tc.size.chunk_size, "state": "joint positions then gripper opening (5)",
        "wrench_input": False, "single_view_training_share": tc.single_view_prob,
    }


def per_task(text: str) -> dict:
    """"pick_and_place=100,reach=50" -> {"pick_and_place": 100, "reach": 50}."""
    out = {}
    for item in filter(None, (x.strip() for x in text.split(","))):
        task, sep, n = item.partition("=")
        if not sep or task not in ("pick_and_place", "reach") or not n.isdigit():
            raise ValueError(f"expected task=count (tasks pick_and_place, reach), got {item!r}")
        out[task] = int(n)
    return out


def parse_temper(text: str) -> dict:
    """"monitor=1,safety=0.5" -> {"monitor": 1.0, "safety": 0.5} (ComponentTextBatches checks the names)."""
    return parse_weights(text, "--component-answer-temper")


def parse_weights(text: str, option: str) -> dict:
    """"a=1,b=0.5" -> {"a": 1.0, "b": 0.5}; ValueError naming the option otherwise."""
    out = {}
    for item in filter(None, (x.strip() for x in text.split(","))):
        comp, sep, value = item.partition("=")
        try:
            out[comp.strip()] = float(value) if sep else float("nan")
        except ValueError:
            out[comp.strip()] = float("nan")
        if not out[comp.strip()] == out[comp.strip()]:  # NaN: no number given
            raise ValueError(f"{option}: expected name=number, got {item!r}")
    return out


def rollout_jobs(round_index: int, dagger_n: dict, perturbed_n: dict, seed: int) -> list:
    """Seeds of round r: their own blocks above the expert cells' (which end below 200000) and
    far below the evaluation's (10 000 000 up), so no episode is seen twice."""
    from physai_lab.training.rollouts import RolloutJob

    jobs = []
    for d, (driver, counts) in enumerate((("policy", dagger_n), ("perturbed_expert", perturbed_n))):
        for t, task in enumerate(("pick_and_place", "reach")):
            n = counts.get(task, 0)
            base = 300_000 + round_index * 40_000 + (2 * d + t) * 10_000
            if n:
                jobs.append(RolloutJob(task, driver, tuple(range(base, base + n)), seed=seed * 100 + round_index))
    return jobs


def publish(tmp: Path, out: Path) -> None:
    """Swap a freshly written checkpoint into place (readers never see a half-written one)."""
    old = out.with_name(out.name + ".old")
    shutil.rmtree(old, ignore_errors=True)
    if out.exists():
        out.rename(old)
    tmp.rename(out)
    shutil.rmtree(old, ignore_errors=True)


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--out", default=str(REPO / "physai_ros/assets/policy/sim_pi0"))
    ap.add_argument("--data", default=str(REPO / "out/sim_expert_data"), help="dataset directory (LeRobot layout)")
    ap.add_argument("--reuse-data", action="store_true", help="train on an existing --data instead of recording")
    ap.add_argument("--cells-per-task", type=int, default=100)
    ap.add_argument("--episodes-per-cell", type=int, default=5)
    ap.add_argument("--workers", type=int, default=2)
    ap.add_argument("--fps", type=int, default=10, help="recorded frame rate (a multiple of the 10 Hz action rate)")
    ap.add_argument("--steps", type=int, default=100000, help="upper bound; --minutes usually ends the run")
    ap.add_argument("--minutes", type=float, default=40.0, help="training time budget (0: run all --steps)")
    ap.add_argument("--batch-size", type=int, default=32)
    ap.add_argument("--seed", type=int, default=0)
    ap.add_argument("--snapshot-minutes", type=float, default=0.0,
                    help="> 0: also publish the checkpoint so far every this many minutes")
    ap.add_argument("--fleet", default=str(REPO / "config/fleet.yaml"), help="prompts robots will send")
    ap.add_argument("--tokenizer", default=str(REPO / "physai_ros/assets/tokenizer.json"))
    ap.add_argument("--eval-episodes", type=int, default=4, help="in-process closed-loop check per task")
    ap.add_argument("--init", default="", help="start from this checkpoint's weights (continue training) "
                    "instead of the seeded random init")
    ap.add_argument("--status-file", default="", help="append a line here whenever the checkpoint changes")
    ap.add_argument("--dagger-rounds", type=int, default=1,
                    help="recovery rounds (0: expert demonstrations only, trained --minutes)")
    ap.add_argument("--first-minutes", type=float, default=35.0,
                    help="from scratch with --dagger-rounds > 0: expert-only training before round 1")
    ap.add_argument("--rollout-data", default=str(REPO / "out/sim_recovery_data"),
                    help="recovery datasets, one directory per round")
    ap.add_argument("--reuse-rollouts", action="store_true", help="use the rounds already in --rollout-data")
    ap.add_argument("--dagger-episodes", default="pick_and_place=100,reach=100",
                    help="policy-driven episodes per task and round")
    ap.add_argument("--perturbed-episodes", default="pick_and_place=200,reach=100",
                    help="perturbed-expert episodes per task and round")
    ap.add_argument("--extra-data", action="append", default=[], metavar="DIR",
                    help="more recorded datasets to train on (e.g. earlier recovery rounds); repeatable")
    ap.add_argument("--text-weight", type=float, default=0.1,
                    help="weight of the text loss (narration answers through the VLM's LM head); 0: actions only")
    ap.add_argument("--text-eval-data", action="append", default=[], metavar="DIR",
                    help="recorded datasets of unseen seeds: text accuracy stored in the manifest; repeatable")
    ap.add_argument("--component-data", default="", metavar="NPZ",
                    help="training.component_data frames: also co-train the safety / monitor / planner answers")
    ap.add_argument("--component-weight", type=float, default=0.1, help="weight of the components' text loss")
    ap.add_argument("--component-batch", type=int, default=16, help="component questions per step (text only)")
    ap.add_argument("--component-answer-temper", default="", metavar="COMP=A,...",
                    help="per component, draw its answers in proportion to count**A (0: uniform, the default; "
                         "1: as often as the frames show them), e.g. monitor=1")
    ap.add_argument("--task-weights", default="", metavar="TASK=W,...",
                    help="relative share of action batches per sim task (unlisted: 1; default: all equal), "
                         "e.g. place_in_order.step1=0.5,place_in_order.step2=0.5")
    ap.add_argument("--release-frame-weight", type=float, default=1.0,
                    help="draw the frames of the last chunk before a release (gripper closed, then opened) "
                         "this many times as often (1: uniform)")
    ap.add_argument("--gripper-loss-weight", type=float, default=1.0,
                    help="the gripper dim's weight in the flow loss, against 1 per joint (1: plain MSE)")
    ap.add_argument("--threads", type=int, default=2, help="torch threads")
    a = ap.parse_args(argv)
    if a.dagger_rounds < 0:
        ap.error("--dagger-rounds must be >= 0")
    if not (a.release_frame_weight > 0 and a.gripper_loss_weight > 0):
        ap.error("--release-frame-weight and --gripper-loss-weight must be > 0")
    try:
        dagger_n, perturbed_n = per_task(a.dagger_episodes), per_task(a.perturbed_episodes)
        from physai_lab.training.component_questions import COMPONENTS

        parse_weights(a.task_weights, "--task-weights")
        unknown = sorted(set(parse_temper(a.component_answer_temper)) - set(COMPONENTS))
        if unknown:  # before minutes of data loading, not after
            raise ValueError(f"--component-answer-temper: unknown components {unknown}; known: {list(COMPONENTS)}")
    except ValueError as e:
        ap.error(str(e))

    import torch

    from physai_ros.engine.processor.tokenizer import PromptTokenizer
    from physai_lab.training.checkpoint import (git_commit, save_policy, stats_from_checkpoint,
                                                weights_from_safetensors_dir)
    from physai_lab.training.dataset import load_dataset, merge_datasets, read_info
    from physai_lab.training.policy_model import TrainablePi0
    from physai_lab.training.rollouts import record_rollouts
    from physai_lab.training.expert_data import RecordConfig
    from physai_lab.training.record import plan_cells, record_dataset
    from physai_lab.training.train import TrainConfig, summarise_curve, train

    torch.set_num_threads(a.threads)
    t_start = time.perf_counter()
    data_dir, out = Path(a.data), Path(a.out)
    record_summary = None
    cells = plan_cells(("pick_and_place", "reach"), a.cells_per_task, a.episodes_per_cell, a.seed,
                       base=RecordConfig(fps=a.fps))
    if not a.reuse_data:
        shutil.rmtree(data_dir, ignore_errors=True)
        record_summary = record_dataset(data_dir, cells, workers=a.workers)
    info = read_info(data_dir)
    tc = TrainConfig(steps=a.steps, batch_size=a.batch_size, seed=a.seed, max_minutes=a.minutes,
                     text_weight=a.text_weight, threads=a.threads, component_weight=a.component_weight,
                     component_batch=a.component_batch, task_weights=parse_weights(a.task_weights, "--task-weights"),
                     release_frame_weight=a.release_frame_weight, gripper_loss_weight=a.gripper_loss_weight)
    t0 = time.perf_counter()
    parts = [load_dataset(data_dir, tc.size.image_size)]
    print(f"loaded {len(parts[0])} frames of {parts[0].episodes_used} episodes ({parts[0].episodes_skipped} "
          f"unsuccessful skipped) in {time.perf_counter() - t0:.0f} s", flush=True)
    demo_frames, demo_episodes = len(parts[0]), parts[0].episodes_used
    extra = []
    for d in a.extra_data:
        parts.append(load_dataset(d, tc.size.image_size))
        eps = [json.loads(x) for x in (Path(d) / "meta" / "episodes.jsonl").read_text().splitlines() if x]
        seeds = [int(e["seed"]) for e in eps]
        # Named "seed_range" so evaluation.sweep.training_seeds keeps evaluation episodes off them.
        extra.append({"path": str(d), "frames": len(parts[-1]), "with_text": any(parts[-1].subtask),
                      "drivers": sorted({e.get("driver", "expert") for e in eps}),
                      "seed_range": [min(seeds), max(seeds) + 1]})
        print(f"loaded {len(parts[-1])} frames of {d}", flush=True)
    tokenizer = PromptTokenizer(a.tokenizer, tc.size.max_tokens)
    prompts = fleet_prompts(Path(a.fleet))
    views = sorted(k for k, f in info["features"].items() if f["dtype"] == "image")
    joint_names = info["features"]["observation.state"]["names"]
    components, component_info = None, {"co_trained": False}
    if a.component_data:
        from physai_lab.training.component_data import load_components
        from physai_lab.training.component_questions import LABELS, QUESTIONS
        from physai_lab.training.component_text import ComponentTextBatches

        temper = parse_temper(a.component_answer_temper)
        components = ComponentTextBatches(load_components(a.component_data), tokenizer, prompts,
                                          tc.single_view_prob, seed=a.seed + 1, answer_temper=temper)
        summary_path = Path(a.component_data + ".json")
        rec = json.loads(summary_path.read_text()) if summary_path.is_file() else {}
        # "cell_seeds" ranges are [lo, hi): evaluation.sweep.training_seeds keeps evaluation off them.
        component_info = {"co_trained": True, "weight": a.component_weight, "batch": a.component_batch,
                          "data": {"path": a.component_data, "frames": int(len(components.task)),
                                   "cell_seed_ranges": rec.get("cell_seeds"), "events": rec.get("events")},
                          "questions": {k: list(v) for k, v in QUESTIONS.items()}, "labels": LABELS,
                          "planner_answers": "sim.multi_step.subgoal_text", "prefix_prompts": components.prompts,
                          "answer_counts": components.counts(),
                          "answer_temper": components.answer_temper,
                          "sampling": "component uniform, then an answer with p ~ count**answer_temper "
                                      "(0: uniform), then frame uniform; text loss only"}
        print(f"component frames: {len(components.task)}; {components.counts()['safety']} "
              f"{components.counts()['monitor']}", flush=True)
    command = " ".join([Path(sys.executable).name, *sys.argv]) if argv is None else "train_policy.main(...)"
    stages: list = []
    rollouts: list = []

    def write(res, final: bool) -> None:
        manifest = {
            "policy": "pi0 (physai_ros engine), trained from scratch on scripted-expert demonstrations"
                      + (" and expert-labelled recovery rounds (DAgger, perturbed expert)" if rollouts else ""),
            "final": final,
            "command": command,
            "git_commit": git_commit(REPO),
            "seed": a.seed,
            "steps": res.steps,
            "training_seconds": round(res.seconds, 1),
            "total_seconds": round(time.perf_counter() - t_start, 1),
            "torch_threads": torch.get_num_threads(),
            "data": {"path": str(data_dir), "format": "LeRobot dataset v2.1 (parquet + PNG)", "recording": record_summary,
                     "frames": demo_frames, "episodes": demo_episodes, "fps": info["fps"],
                     "cells_per_task": a.cells_per_task, "episodes_per_cell": a.episodes_per_cell,
                     "extra": extra},
            "recovery_rounds": rollouts,
            "stages": stages,
            "prompts": res.prompts,
            "interface": {**interface(a, tc, cells, prompts),
                          "rollout_seeds": {f"round_{r['round']}": {f"{j['driver']}_{j['task']}": {"range": j["range"]}
                                                                    for j in r["jobs"]} for r in rollouts}},
            "model": dataclasses.asdict(tc.size),
            "train": {k: v for k, v in dataclasses.asdict(tc).items() if k != "size"},
            "continued_from": continued_from,
            "objective": "flow matching: x_t = t noise + (1-t) a, target noise - a, t ~ Beta(1.5,1)*0.999+0.001",
            "loss": summarise_curve(res.loss_curve),
            "text": text_block(res),
            "components": {**component_info, "loss": summarise_curve(res.component_curve)}
            if component_info["co_trained"] else component_info,
        }
        tmp = out.with_name(out.name + ".tmp")
        shutil.rmtree(tmp, ignore_errors=True)
        save_policy(tmp, res.config, res.weights, res.state_stats, res.action_stats, joint_names, views,
                    tc.size.image_size, manifest)
        publish(tmp, out)
        line = (f"{time.strftime('%H:%M:%S', time.gmtime())} UTC {'final' if final else 'snapshot'} checkpoint "
                f"at {out}: step {res.steps}, loss {manifest['loss'].get('last', float('nan')):.4f}")
        print(line, flush=True)
        if a.status_file:
            with open(a.status_file, "a") as f:
                f.write(line + "\n")

    def text_block(res) -> dict:
        if a.text_weight <= 0:
            return {"co_trained": False}
        from physai_ros.sim.narration import SCENE_QUESTION, SUBTASK_QUESTION, SUBTASKS

        return {"co_trained": True, "weight": a.text_weight,
                "objective": "next-token cross-entropy of answer + <eos> after the question, causal block on the "
                             "prefix KV cache, logits = rms_norm(h, vlm.norm) @ vlm.embed^T (engine/language/decoder.py)",
                "questions": {"subtask": SUBTASK_QUESTION, "scene": SCENE_QUESTION},
                "encoding": "PromptTokenizer.encode_text (lowercase, no BOS, no padding); answer ends with <eos> "
                            f"(id {tokenizer.eos_id})",
                "subtask_labels": {t: list(v) for t, v in SUBTASKS.items()},
                "scene_template": "sim.narration.scene_description",
                "loss": summarise_curve(res.text_curve)}

    def run_stage(name: str, minutes: float, model, stats, final: bool):
        data = merge_datasets(parts, tc.size.chunk_size, tc.action_rate_hz)
        if final:
            for p in parts:  # the merged copy holds every frame; halve the memory for the last stage
                p.images = None
        stage_tc = dataclasses.replace(tc, max_minutes=minutes)
        res = train(data, stage_tc, tokenizer, prompts, log=lambda m: print(m, flush=True), model=model,
                    snapshot=(lambda r: write(r, False)) if a.snapshot_minutes > 0 else None,
                    snapshot_every_s=a.snapshot_minutes * 60, stats=stats, components=components)
        by_driver = {d: data.driver.count(d) for d in sorted(set(data.driver))}
        stages.append({"stage": name, "frames": by_driver, "steps": res.steps, "training_seconds": round(res.seconds, 1),
                       "minutes_budget": minutes, "loss": summarise_curve(res.loss_curve)})
        write(res, final)
        return res

    model, stats, driver, continued_from = None, None, None, None
    if a.init:
        model = TrainablePi0(tc.size.config(), weights=weights_from_safetensors_dir(a.init))
        stats = stats_from_checkpoint(a.init)
        prior = json.loads((Path(a.init) / "manifest.json").read_text())
        continued_from = {k: prior.get(k) for k in ("command", "steps", "training_seconds", "loss", "seed",
                                                     "stages", "continued_from")}
        # The driver of round 1 must not change under us (--out may be --init): a copy.
        driver = Path(a.rollout_data) / "driver_init"
        shutil.rmtree(driver, ignore_errors=True)
        shutil.copytree(a.init, driver)
    elif a.dagger_rounds > 0:
        res = run_stage("expert demonstrations", a.first_minutes, None, None, False)
        model = TrainablePi0(tc.size.config(), weights=res.weights)
        stats = {"state": res.state_stats, "action": res.action_stats}
        driver = out
    res = None
    for r in range(a.dagger_rounds):
        round_dir = Path(a.rollout_data) / f"round_{r}"
        jobs = rollout_jobs(r, dagger_n, perturbed_n, a.seed)
        summary = None
        if not (a.reuse_rollouts and (round_dir / "meta" / "info.json").is_file()):
            shutil.rmtree(round_dir, ignore_errors=True)
            summary = record_rollouts(round_dir, jobs, Path(a.fleet), checkpoint=driver, workers=a.workers,
                                      joint_names=joint_names, log=lambda m: print(m, flush=True))
        parts.append(load_dataset(round_dir, tc.size.image_size))
        rollouts.append({"round": r, "path": str(round_dir), "driver_checkpoint": str(driver), "recording": summary,
                         "frames": len(parts[-1]),
                         "jobs": [{"driver": j.driver, "task": j.task, "range": [j.seeds[0], j.seeds[-1] + 1]}
                                  for j in jobs]})
        res = run_stage(f"recovery round {r + 1}", a.minutes, model, stats, r == a.dagger_rounds - 1)
        model = TrainablePi0(tc.size.config(), weights=res.weights)
        driver = out
    if res is None:
        run_stage("expert demonstrations" + (" and --extra-data" if extra else ""), a.minutes, model, stats, True)
    if a.eval_episodes > 0:
        from physai_lab.training.closed_loop import evaluate_checkpoint

        report = evaluate_checkpoint(out, episodes=a.eval_episodes, fleet_prompts=prompts, seed=10_000 + a.seed)
        print(json.dumps(report, indent=2), flush=True)
        m = json.loads((out / "manifest.json").read_text())
        m["closed_loop_check"] = report
        (out / "manifest.json").write_text(json.dumps(m, indent=2))
    if a.text_eval_data and a.text_weight > 0:
        from physai_lab.training.text_eval import evaluate_checkpoint_text

        report = evaluate_checkpoint_text(out, a.text_eval_data, a.tokenizer)
        print(json.dumps(report, indent=2), flush=True)
        m = json.loads((out / "manifest.json").read_text())
        m["text"]["accuracy_unseen_seeds"] = report
        (out / "manifest.json").write_text(json.dumps(m, indent=2))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
