"""Per-query cost of the VLA-backbone component backend (physai_ros.pipeline.vla_backend):
a component question answered on the prefix a System 1 round kept (shared) vs on the backend's
own prefill (own), for the random `tiny` preset and the shipped sim_pi0 (the default fleet's
model), batches of 1 and 4 robots, "what is the current subtask?" with 12 tokens at most.

Each repetition runs a System 1 round for the robots (engine.infer + the language stream's frame,
which offers the prefix to the backend), then asks the batch on the shared path, then the same
batch on the own path (use_shared off); the medians are reported. Both paths decode the same
token ids (the tests check it), so the difference is the prefill the shared path does not run.

    flock /tmp/physai_heavy.lock .venv/bin/python bench/vla_backend.py [--reps 30] [--json out.json]
"""
from __future__ import annotations

import argparse
import json
import statistics
import time
from pathlib import Path

import numpy as np
import torch

import physai_ros
from physai_ros.config.language import LanguageServerConfig
from physai_ros.engine import Pi0Config
from physai_ros.engine.engine import Pi0Engine
from physai_ros.engine.processor.tokenizer import PromptTokenizer
from physai_ros.pipeline.backend import ComponentQuery
from physai_ros.pipeline.vla_backend import VLABackboneBackend, VLABackendSettings
from physai_ros.protocol.observation import ImageData, ObservationData
from physai_ros.serving.action_runner import ActionModelRunner
from physai_ros.serving.language.stream import FrameRobot, LanguageStream

QUESTION = "what is the current subtask?"
PROMPT = "pick up the cube and place it on the goal"


def _queries(n: int, seed: int) -> list[ComponentQuery]:
    rng = np.random.default_rng(seed)
    return [ComponentQuery(f"robot_{i}", "monitor", QUESTION, PROMPT,
                           tuple(rng.integers(0, 256, (224, 224, 3), dtype=np.uint8) for _ in range(2)),
                           rng.uniform(-1, 1, 5).astype(np.float32), 12) for i in range(n)]


def _obs(q: ComponentQuery) -> ObservationData:
    views = tuple(ImageData(224, 224, "rgb8", 224 * 3, im.tobytes()) for im in q.images)
    return ObservationData(q.robot_id, "task", 1, 0.0, views, q.state, np.zeros(6, np.float32), 0.0, PROMPT,
                           0.0, 0, 0.1, "", ())


def measure(name: str, engine, runner, batches, reps: int) -> list[dict]:
    stream = LanguageStream(LanguageServerConfig(), {}, runner.tokenizer)
    stream.attach("engine_0", engine)
    shared = VLABackboneBackend(engine, runner, VLABackendSettings(max_prefix_age_s=60.0))
    shared.attach(stream)
    own = VLABackboneBackend(engine, runner, VLABackendSettings(use_shared=False))
    rows = []
    for n in batches:
        t_round, t_shared, t_own, t_prefill, toks = [], [], [], [], []
        for rep in range(reps + 2):  # two warm-up repetitions
            qs = _queries(n, rep)
            t0 = time.perf_counter()
            with torch.inference_mode():
                engine.infer([runner.prepare(_obs(q), None) for q in qs])
            cache, b = engine.take_prefix()
            stream.frame("engine_0", cache, b, [FrameRobot(q.robot_id, "task", rep) for q in qs], 0.0)
            r = time.perf_counter() - t0
            a_sh = shared.answer(qs)
            a_own = own.answer(qs)
            assert all(a.meta["path"] == "shared" for a in a_sh) and all(a.meta["path"] == "own" for a in a_own)
            assert [a.meta["token_ids"] for a in a_sh] == [a.meta["token_ids"] for a in a_own]
            if rep >= 2:
                t_round.append(r * 1e3)
                t_shared.append(a_sh[0].latency_ms)
                t_own.append(a_own[0].latency_ms)
                t_prefill.append(a_own[0].meta["prefill_ms"])
                toks.append(statistics.mean(a.tokens for a in a_sh))
        med = statistics.median
        row = {"model": name, "robots": n, "reps": reps, "tokens_mean": round(statistics.mean(toks), 2),
               "system1_round_ms": round(med(t_round), 2),
               "shared_batch_ms": round(med(t_shared), 2), "own_batch_ms": round(med(t_own), 2),
               "own_prefill_ms": round(med(t_prefill), 2),
               "shared_per_query_ms": round(med(t_shared) / n, 2), "own_per_query_ms": round(med(t_own) / n, 2),
               "own_over_shared": round(med(t_own) / med(t_shared), 2)}
        print(json.dumps(row), flush=True)
        rows.append(row)
    return rows


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--reps", type=int, default=30)
    ap.add_argument("--batches", default="1,4")
    ap.add_argument("--threads", type=int, default=1)
    ap.add_argument("--json", default="")
    a = ap.parse_args(argv)
    torch.set_num_threads(a.threads)
    batches = [int(x) for x in a.batches.split(",")]
    tok_path = Path(physai_ros.__file__).parent / "assets" / "tokenizer.json"
    rows = []
    cfg = Pi0Config.preset("tiny")
    rows += measure("tiny", Pi0Engine(cfg, seed=3, language=True),
                    ActionModelRunner(cfg, PromptTokenizer(tok_path, 48)), batches, a.reps)
    from physai_ros.config.fleet import load_fleet
    from physai_ros.serving.startup.engine_builder import build_core

    core = build_core(load_fleet())  # the shipped sim_pi0, loaded and preprocessed as the server does
    rows += measure("sim_pi0", core.engines["engine_0"].engine, core.action_runner, batches, a.reps)
    if a.json:
        Path(a.json).parent.mkdir(parents=True, exist_ok=True)
        Path(a.json).write_text(json.dumps({"threads": a.threads, "rows": rows}, indent=1))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
