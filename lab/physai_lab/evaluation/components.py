"""Pipeline components of a checkpoint, judged on recorded frames of unseen seeds.

Each frame of a training.component_data recording (scripted expert, sim events on: intruder,
drop / knock, place_in_order) is asked the three component questions through the real
VLA-backbone backend (pipeline.vla_backend, own path: the observation goes through serving's
preprocessing and prefill, greedy decoding to <eos>), with the task prompt a fleet robot sends as
System 1's prompt, and the answer is parsed as the pipeline controller parses it
(pipeline.answers). Reported per component: accuracy and a confusion matrix (truth x answer, an
unparseable answer counted as "unparseable"), and for safety the detection delay: per intruder
visit, the sim time from its first frame with the hand over the table to the first "unsafe"
answer among the frames at which a safety component running at freq_hz asks (every 1/freq_hz s
of sim time since the cell started, as PipelineController schedules it), plus the false alarms
of those queries.
"""
from __future__ import annotations

import statistics
import time
from typing import Dict, List, Sequence

import numpy as np

from physai_ros.pipeline.answers import parse_answer
from physai_ros.pipeline.backend import ComponentQuery
from physai_ros.pipeline.config import fill_task
from physai_ros.sim.component_truth import LABELS, QUESTIONS

# The component names the pipeline uses for our question kinds.
PIPELINE_NAME = {"safety": "safety", "monitor": "monitor", "planner": "system2"}
# "unsafe" is 7 tokens of our byte-level BPE, "ongoing" 6: room for them and <eos>.
MAX_TOKENS = {"safety": 12, "monitor": 12, "planner": 32}
UNPARSEABLE = "unparseable"


def backend_for(checkpoint):
    """The VLA-backbone backend over a serving core built from fleet.yaml with `checkpoint` as its
    model (own-path prefills only: no System 1 rounds run here)."""
    from physai_lab.evaluation.sweep import fleet_for
    from physai_ros.pipeline.vla_backend import VLABackboneBackend, VLABackendSettings
    from physai_ros.serving.startup.engine_builder import build_core

    core = build_core(fleet_for(None, checkpoint=str(checkpoint)))
    return VLABackboneBackend.from_core(core, settings=VLABackendSettings(use_shared=False))


def robot_prompts(fleet_prompts: Dict[str, List[str]], tasks: Sequence[str]) -> Dict[str, str]:
    """The prompt a robot running each sim task sends: fleet.yaml's first, else the task's own."""
    from physai_ros.sim.tasks import make_task

    return {t: (fleet_prompts.get(t) or [make_task(t).prompt])[0] for t in tasks}


def frame_prompt(frames: Dict[str, np.ndarray], prompts: Dict[str, str], row: int) -> str:
    """The prompt the frame's robot sends: its recorded instruction where the task reads it
    (place_in_order's order), else the fleet's prompt for the task."""
    from physai_ros.sim.tasks import make_task

    task = str(frames["task"][row])
    own = str(frames["prompt"][row]) if "prompt" in frames else ""
    return own if own and make_task(task).reads_prompt else prompts[task]


def trained_questions(checkpoint) -> Dict[str, str]:
    """The wording each component was co-trained on, from the checkpoint's manifest (a checkpoint
    trained before the planner's question carried {task} is asked its own question); the
    current QUESTIONS where the manifest has none."""
    import json
    from pathlib import Path

    out = {c: qs[0] for c, qs in QUESTIONS.items()}
    try:
        recorded = json.loads((Path(checkpoint) / "manifest.json").read_text())["components"]["questions"]
    except (OSError, KeyError, TypeError, ValueError):
        return out
    out.update({c: qs[0] for c, qs in recorded.items() if c in out and qs})
    return out


def ask(backend, frames: Dict[str, np.ndarray], component: str, prompts: Dict[str, str],
        rows: Sequence[int], batch: int = 32, question: str = "") -> List[str]:
    """Parsed answers (a label / subgoal text, or UNPARSEABLE) for the given frame rows; the
    question's {task} is the frame's robot prompt."""
    q = question or QUESTIONS[component][0]
    name = PIPELINE_NAME[component]
    out: List[str] = []
    for i in range(0, len(rows), batch):
        chunk = rows[i:i + batch]
        told = [frame_prompt(frames, prompts, r) for r in chunk]
        queries = [ComponentQuery(f"robot_{r}", name, fill_task(q, p), p,
                                  tuple(np.ascontiguousarray(v.transpose(1, 2, 0)) for v in frames["images"][r]),
                                  None, MAX_TOKENS[component]) for r, p in zip(chunk, told)]
        for a in backend.answer(queries):
            p = parse_answer(name, a)
            out.append(str(p.value) if hasattr(p, "value") else UNPARSEABLE)
    return out


def confusion(truth: Sequence[str], said: Sequence[str], labels: Sequence[str]) -> dict:
    cols = list(labels) + [UNPARSEABLE]
    m = {t: {c: 0 for c in cols} for t in labels}
    other = 0
    for t, s in zip(truth, said):
        m[t][s if s in m[t] else UNPARSEABLE] += 1
        other += s not in labels and s != UNPARSEABLE
    n = len(truth)
    return {"frames": n, "accuracy": round(sum(t == s for t, s in zip(truth, said)) / max(n, 1), 4),
            "per_class_recall": {t: round(m[t][t] / max(sum(m[t].values()), 1), 4) for t in labels},
            "matrix": m, "rows": "truth", "columns": "answer", "other_text_answers": other}


def planner_report(truth: Sequence[str], said: Sequence[str]) -> dict:
    labels = sorted(set(truth))
    rep = {"frames": len(truth), "exact_match": round(sum(t == s for t, s in zip(truth, said)) / max(len(truth), 1), 4),
           "per_answer": {}}
    for lab in labels:
        idx = [i for i, t in enumerate(truth) if t == lab]
        alt: Dict[str, int] = {}
        for i in idx:
            if said[i] != lab:
                alt[said[i]] = alt.get(said[i], 0) + 1
        rep["per_answer"][lab] = {"frames": len(idx), "exact_match": round(sum(said[i] == lab for i in idx) / len(idx), 4),
                                  "said_instead": dict(sorted(alt.items(), key=lambda x: -x[1])[:4])}
    return rep


def detection_delay(frames: Dict[str, np.ndarray], said: Sequence[str], freq_hz: float) -> dict:
    """said: the safety answer of every frame (in recording order). Per cell (seed), a query at
    every multiple q of 1/freq_hz of sim time reads the newest frame at or before q (frames are
    1/fps apart but not on a fixed grid: a new episode starts at any control step). A visit is
    detected at the first query at or after its first frame whose frame is in the visit and is
    answered "unsafe"; the delay is that query's time minus the visit's first frame's time."""
    seeds, times, truth = frames["seed"], frames["time"], frames["safety"]
    period = 1.0 / freq_hz
    delays, missed, false_alarms, safe_queries = [], 0, 0, 0
    for s in np.unique(seeds):
        idx = np.flatnonzero(seeds == s)
        t = times[idx]
        unsafe = truth[idx] == "unsafe"
        said_unsafe = np.array([said[i] == "unsafe" for i in idx])
        q_times = np.arange(np.ceil(t[0] / period - 1e-9), np.floor(t[-1] / period + 1e-9) + 1) * period
        q_frame = np.searchsorted(t, q_times + 1e-9, side="right") - 1
        safe_queries += int(np.sum(~unsafe[q_frame]))
        false_alarms += int(np.sum(~unsafe[q_frame] & said_unsafe[q_frame]))
        k = 0
        while k < len(idx):
            if not unsafe[k]:
                k += 1
                continue
            end = k
            while end < len(idx) and unsafe[end]:
                end += 1
            hit = [q for q, f in zip(q_times, q_frame) if k <= f < end and said_unsafe[f]]
            if hit:
                delays.append(float(hit[0] - t[k]))
            else:
                missed += 1
            k = end
    d = sorted(delays)
    return {"freq_hz": freq_hz, "visits": len(d) + missed, "detected": len(d), "missed": missed,
            "delay_s": {"median": round(statistics.median(d), 3), "mean": round(statistics.fmean(d), 3),
                        "p90": round(d[int(0.9 * (len(d) - 1))], 3), "max": round(d[-1], 3)} if d else None,
            "false_alarms": false_alarms, "safe_queries": safe_queries,
            "false_alarm_rate": round(false_alarms / max(safe_queries, 1), 4)}


def evaluate(checkpoint, frames: Dict[str, np.ndarray], fleet_prompts: Dict[str, List[str]],
             safety_hz: float = 2.0, every: int = 1, log=print) -> dict:
    """Every component on every `every`-th frame (safety on all frames: the delay needs them)."""
    t0 = time.perf_counter()
    backend = backend_for(checkpoint)
    prompts = robot_prompts(fleet_prompts, sorted(set(frames["task"].tolist())))
    n = len(frames["task"])
    sub = list(range(0, n, every))
    questions = trained_questions(checkpoint)
    out: dict = {"checkpoint": str(checkpoint), "prompts": prompts, "questions": questions, "frames": n, "every": every}
    safety = ask(backend, frames, "safety", prompts, list(range(n)), question=questions["safety"])
    out["safety"] = confusion(frames["safety"][sub], [safety[i] for i in sub], LABELS["safety"])
    out["safety"]["detection"] = detection_delay(frames, safety, safety_hz)
    log(f"{checkpoint}: safety {out['safety']['accuracy']} ({time.perf_counter() - t0:.0f} s)")
    monitor = ask(backend, frames, "monitor", prompts, sub, question=questions["monitor"])
    out["monitor"] = confusion(frames["monitor"][sub], monitor, LABELS["monitor"])
    fails = [i for i, r in enumerate(sub) if frames["monitor"][r] == "failed"]
    out["monitor"]["failed_recall_by_reason"] = {
        reason: round(float(np.mean([monitor[i] == "failed" for i in fails if frames["failure"][sub[i]] == reason])), 4)
        for reason in sorted({str(frames["failure"][sub[i]]) for i in fails})}
    log(f"{checkpoint}: monitor {out['monitor']['accuracy']} ({time.perf_counter() - t0:.0f} s)")
    planner = ask(backend, frames, "planner", prompts, sub, question=questions["planner"])
    out["planner"] = planner_report(frames["planner"][sub].tolist(), planner)
    # Per instruction of a task that reads it (place_in_order's two orders): does it follow the order?
    from physai_ros.sim.tasks import make_task

    reads = {t: make_task(t).reads_prompt for t in prompts}
    told = [frame_prompt(frames, prompts, r) if reads[str(frames["task"][r])] else None for r in sub]
    out["planner"]["by_prompt"] = {
        p: planner_report([str(frames["planner"][r]) for r, q in zip(sub, told) if q == p],
                          [a for a, q in zip(planner, told) if q == p])
        for p in sorted({q for q in told if q is not None})}
    log(f"{checkpoint}: planner {out['planner']['exact_match']} ({time.perf_counter() - t0:.0f} s)")
    # One-query latency (the backend's batch wall time for a batch of one), a few frames.
    lat = []
    for r in sub[:: max(1, len(sub) // 20)][:20]:
        q = ComponentQuery("robot_lat", "safety", questions["safety"], frame_prompt(frames, prompts, r),
                           tuple(np.ascontiguousarray(v.transpose(1, 2, 0)) for v in frames["images"][r]), None,
                           MAX_TOKENS["safety"])
        lat.append(backend.answer([q])[0].latency_ms)
    out["safety"]["latency_ms_batch1"] = {"median": round(statistics.median(lat), 1), "max": round(max(lat), 1)}
    out["seconds"] = round(time.perf_counter() - t0, 1)
    return out
