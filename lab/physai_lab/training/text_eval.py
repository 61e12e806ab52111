"""Accuracy of a checkpoint's text answers on recorded frames, against the ground truth
sim.narration recorded with them.

Each frame goes in as the server feeds it (both views letterboxed and scaled by the engine's
model_pixels, the prompt a robot running the task sends, tokenised by the checkpoint's
tokenizer); each of the two questions is answered greedily (text_loss.greedy_answers: the serving
decoder's greedy path, tested token for token against engine.language.decoder.PlainLanguage) and compared
with the recorded answer:
  subtask  exact match, per class, plus what each class was mistaken for;
  scene    exact match, and token accuracy: the teacher-forced argmax of every answer token and
           the final <eos> against the recorded one.

    .venv/bin/python -m physai_lab.training.text_eval --checkpoint out/sim_pi0_text \
        --data out/sim_text_eval/expert --data out/sim_text_eval/perturbed [--manifest]
"""
from __future__ import annotations

import argparse
import json
import time
from collections import Counter, defaultdict
from pathlib import Path
from typing import Dict, List, Sequence

import numpy as np
import torch

from physai_ros.engine.batching import model_pixels
from physai_ros.engine.pi0.modeling import PlainPi0
from physai_ros.engine.processor.tokenizer import PromptTokenizer
from physai_ros.install_paths import package_dir

from physai_lab.training.checkpoint import weights_from_safetensors_dir
from physai_lab.training.dataset import LoadedDataset, load_dataset, merge_datasets
from physai_lab.training.text_data import QUESTIONS, TextCodec
from physai_lab.training.text_loss import greedy_answers, make_blocks, teacher_forced_argmax


def evaluate_text(cfg, weights, data: LoadedDataset, tokenizer: PromptTokenizer, prompts: Dict[str, str],
                  batch: int = 64, max_tokens: int = 32) -> dict:
    """The accuracy report for every frame of `data` (all frames with recorded text)."""
    plain = PlainPi0(cfg, weights)
    codec = TextCodec(tokenizer)
    rows = np.flatnonzero([bool(s) for s in data.subtask])
    if not len(rows):
        raise ValueError("no frames with recorded text to evaluate")
    enc = {t: tokenizer.encode(p) for t, p in prompts.items()}
    subtask_hits: Dict[str, Counter] = defaultdict(Counter)  # (task, truth) -> Counter(answer)
    scene_exact, scene_n, tok_hits, tok_n = Counter(), Counter(), Counter(), Counter()
    examples: List[dict] = []
    for start in range(0, len(rows), batch):
        idx = rows[start: start + batch]
        tasks = [data.sim_task[i] for i in idx]
        img = model_pixels(torch.from_numpy(data.images[idx]))
        masks = torch.ones(len(idx), img.shape[1], dtype=torch.bool)
        tok = torch.from_numpy(np.stack([enc[t].tokens for t in tasks]))
        tmask = torch.from_numpy(np.stack([enc[t].mask for t in tasks]))
        with torch.no_grad():
            cache = plain.prefix(img, masks, tok, tmask)
        for kind, truth in (("subtask", data.subtask), ("scene", data.scene)):
            q = codec.encode(QUESTIONS[kind])
            said = [codec.decode(a) for a in greedy_answers(plain.w, cfg, cache, q, codec.eos_id, max_tokens)]
            for j, i in enumerate(idx):
                want, task = truth[i], tasks[j]
                if kind == "subtask":
                    subtask_hits[(task, want)][said[j]] += 1
                else:
                    scene_n[task] += 1
                    scene_exact[task] += int(said[j] == want)
                if said[j] != want and len(examples) < 12:
                    examples.append({"task": task, "question": kind, "truth": want, "said": said[j]})
            if kind == "scene":
                block, lmask = make_blocks([q] * len(idx), [codec.encode(truth[i]) for i in idx], codec.eos_id,
                                           codec.pad_id)
                pred, target = teacher_forced_argmax(plain.w, cfg, cache, block, lmask)
                per_row = lmask[:, :-1].sum(1).tolist()
                hits = (pred == target).split(per_row)
                for task, h in zip(tasks, hits):
                    tok_hits[task] += int(h.sum())
                    tok_n[task] += int(h.numel())
    subtask = {}
    for (task, want), said in sorted(subtask_hits.items()):
        n = sum(said.values())
        subtask.setdefault(task, {})[want] = {
            "frames": n, "exact": round(said[want] / n, 4),
            "mistaken_for": {k: v for k, v in said.most_common() if k != want}}
    total_sub = sum(sum(c.values()) for c in subtask_hits.values())
    return {
        "frames": int(len(rows)),
        "prompts": prompts,
        "subtask": subtask,
        "subtask_exact_overall": round(sum(c[w] for (_, w), c in subtask_hits.items()) / total_sub, 4),
        "scene": {t: {"frames": scene_n[t], "exact": round(scene_exact[t] / scene_n[t], 4),
                      "token_accuracy": round(tok_hits[t] / tok_n[t], 4)} for t in sorted(scene_n)},
        "scene_exact_overall": round(sum(scene_exact.values()) / sum(scene_n.values()), 4),
        "scene_token_accuracy_overall": round(sum(tok_hits.values()) / sum(tok_n.values()), 4),
        "mistakes_sample": examples,
    }


def evaluate_checkpoint_text(checkpoint, data_dirs: Sequence, tokenizer_path, prompts: Dict[str, str] | None = None,
                             every: int = 1) -> dict:
    """Load a checkpoint and the recorded frames (every `every`-th) and evaluate. prompts default
    to the last prompt the checkpoint's manifest lists per task (fleet.yaml's, after the sim
    task's own)."""
    from physai_lab.training.train import ModelSize

    ckpt = Path(checkpoint)
    manifest = json.loads((ckpt / "manifest.json").read_text())
    cfg = ModelSize(**manifest["model"]).config()  # our checkpoints record their sizes
    prompts = prompts or {t: ps[-1] for t, ps in manifest["prompts"].items()}
    parts = [load_dataset(d, cfg.vision.image_size) for d in data_dirs]
    data = merge_datasets(parts, cfg.chunk_size, 10.0) if len(parts) > 1 else parts[0]
    if every > 1:
        keep = np.zeros(len(data), bool)
        keep[::every] = True
        data.subtask = [s if k else "" for s, k in zip(data.subtask, keep)]
    tokenizer = PromptTokenizer(tokenizer_path, cfg.max_tokens)
    t0 = time.perf_counter()
    report = evaluate_text(cfg, weights_from_safetensors_dir(ckpt), data, tokenizer, prompts)
    report.update({"checkpoint": str(ckpt), "data": [str(d) for d in data_dirs], "every_nth_frame": every,
                   "seconds": round(time.perf_counter() - t0, 1)})
    return report


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--checkpoint", required=True)
    ap.add_argument("--data", action="append", required=True, help="recorded dataset with text columns")
    ap.add_argument("--tokenizer", default=str(package_dir() / "assets" / "tokenizer.json"))
    ap.add_argument("--every", type=int, default=1, help="evaluate every n-th frame")
    ap.add_argument("--threads", type=int, default=2)
    ap.add_argument("--out", default="", help="also write the report (JSON) here")
    ap.add_argument("--manifest", action="store_true", help="store the report in the checkpoint's manifest.json")
    a = ap.parse_args(argv)
    torch.set_num_threads(a.threads)
    report = evaluate_checkpoint_text(a.checkpoint, a.data, a.tokenizer, every=a.every)
    text = json.dumps(report, indent=2)
    print(text)
    if a.out:
        Path(a.out).write_text(text)
    if a.manifest:
        p = Path(a.checkpoint) / "manifest.json"
        m = json.loads(p.read_text())
        m.setdefault("text", {})["accuracy_unseen_seeds"] = report
        p.write_text(json.dumps(m, indent=2))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
