"""Train our pi0 on a recorded expert dataset with the flow-matching objective.

Inputs are built exactly as the serving path builds them (serving.action_runner): images
letterboxed to the model's size as bytes and scaled to [-1, 1] by the engine's own
engine.batching.model_pixels, the prompt through the fleet's tokenizer,
the joint positions mean/std-normalised and zero padded; targets are the normalised commands of
the next `chunk_size` action periods (dataset.chunk_indices). A share of samples masks the
second camera, since a one-camera robot sends one view (masking is the same as absence: padding
never moves RoPE positions).

With text_weight > 0 every observation also carries one of sim.narration's questions
and its recorded answer (text_data.TextTargets); the loss is flow matching + text_weight x the
answer's next-token cross-entropy through the VLM's tied LM head (text_loss), one prefix pass.
"""
from __future__ import annotations

import copy
import math
import time
from dataclasses import dataclass, field
from typing import Callable, Dict, List, Optional, Tuple

import numpy as np
import torch

from physai_ros.engine.batching import model_pixels
from physai_ros.engine.processor.tokenizer import PromptTokenizer
from physai_ros.engine.types import GemmaSpec, Pi0Config, VisionSpec
from physai_ros.sim.robot import ArmConfig

from physai_lab.training.dataset import LoadedDataset, target_chunks
from physai_lab.training.policy_model import TrainablePi0
from physai_lab.training.text_data import TextCodec, TextTargets

# Minimum std used for normalisation: a feature that never moves in the data (it happens in tiny
# datasets) must not blow a small deviation up into a huge normalised value at run time.
MIN_STD = 1e-2


@dataclass
class ModelSize:
    """Sizes kept inside what the serving loader infers with its defaults: one KV head, 16
    SigLIP heads; the action expert has the VLM's depth (layer i reads VLM layer i's cache)."""

    image_size: int = 96
    patch_size: int = 12
    vision_width: int = 128
    vision_depth: int = 2
    vlm_width: int = 192
    expert_width: int = 96
    depth: int = 3
    heads: int = 4
    head_dim: int = 32
    vocab_size: int = 512
    chunk_size: int = 10
    max_dim: int = 8
    max_tokens: int = 48

    def config(self) -> Pi0Config:
        return Pi0Config(
            vlm=GemmaSpec(self.vlm_width, self.depth, 2 * self.vlm_width, self.heads, 1, self.head_dim),
            expert=GemmaSpec(self.expert_width, self.depth, 2 * self.expert_width, self.heads, 1, self.head_dim),
            vision=VisionSpec(self.vision_width, self.vision_depth, 2 * self.vision_width, 16, self.patch_size,
                              self.image_size),
            vocab_size=self.vocab_size, chunk_size=self.chunk_size, max_state_dim=self.max_dim,
            max_action_dim=self.max_dim, max_tokens=self.max_tokens)


@dataclass
class TrainConfig:
    size: ModelSize = field(default_factory=ModelSize)
    steps: int = 8000
    batch_size: int = 32
    samples_per_obs: int = 4
    lr: float = 1e-3
    min_lr_frac: float = 0.05
    warmup: float = 0.03  # fraction of the run
    grad_clip: float = 1.0
    ema: float = 0.999
    single_view_prob: float = 0.25
    action_rate_hz: float = 10.0
    seed: int = 0
    threads: int = 2
    max_minutes: float = 0.0  # > 0: the run ends at this budget (or `steps`, whichever first)
    log_every: int = 50
    text_weight: float = 0.0  # > 0: co-train text answers (needs a dataset with text columns)
    component_weight: float = 0.1  # weight of the pipeline components' text loss (train(components=...))
    component_batch: int = 16  # text-only component samples per step (one more prefix pass)
    # Sim task -> relative weight of its share of action batches (unlisted: 1). Empty: every task
    # equally often, drawn exactly as before weights existed (older runs replay bit for bit).
    task_weights: Dict[str, float] = field(default_factory=dict)
    # Frames in the last chunk (a second at 10 Hz) before a release, where the target holds the
    # gripper closed and then opens it, are drawn this many times as often as their task's other
    # frames: the decision whose mistakes end most attempts (a drop off the pad) is about an
    # eighth of the shipped policy's training frames. 1: uniform, as before.
    release_frame_weight: float = 1.0
    # The gripper's action dim in the flow loss against 1 for each joint (normalised to average 1
    # over the dims, so the loss keeps its scale). 1: plain MSE, as before.
    gripper_loss_weight: float = 1.0


@dataclass
class TrainResult:
    weights: Dict[str, torch.Tensor]
    config: Pi0Config
    state_stats: Dict[str, np.ndarray]
    action_stats: Dict[str, np.ndarray]
    steps: int
    seconds: float
    loss_curve: List[tuple]  # (step, mean loss over the last log_every steps)
    prompts: Dict[str, List[str]]
    text_curve: List[tuple] = field(default_factory=list)  # (step, mean text loss) when co-training text
    component_curve: List[tuple] = field(default_factory=list)  # (step, mean component text loss)


def norm_stats(x: np.ndarray) -> Dict[str, np.ndarray]:
    return {"mean": x.mean(0).astype(np.float32), "std": np.maximum(x.std(0), MIN_STD).astype(np.float32)}


def _lr_at(p: float, tc: TrainConfig) -> float:
    """Linear warm-up over the first `warmup` fraction, then cosine to min_lr_frac * lr."""
    if p < tc.warmup:
        return tc.lr * max(p, 1e-3) / tc.warmup
    p = min(1.0, (p - tc.warmup) / (1 - tc.warmup))
    return tc.lr * (tc.min_lr_frac + (1 - tc.min_lr_frac) * 0.5 * (1 + math.cos(math.pi * p)))


class BatchMaker:
    """Samples training batches from a loaded dataset; tasks are drawn equally often."""

    def __init__(self, data: LoadedDataset, tc: TrainConfig, tokenizer: PromptTokenizer,
                 prompts: Dict[str, List[str]], gen: np.random.Generator,
                 stats: Optional[Dict[str, Dict[str, np.ndarray]]] = None):
        """stats ({"state": {mean, std}, "action": ...}) fixes the normalisation, as continuing
        from a checkpoint must: its weights were learnt against its own statistics."""
        self.tc, self.gen = tc, gen
        cfg = tc.size.config()
        self.chunk, self.maxd = cfg.chunk_size, cfg.max_state_dim
        self.dim = data.state.shape[1]
        self.images = torch.from_numpy(data.images)
        if stats is not None:
            self.state_stats, self.action_stats = stats["state"], stats["action"]
        else:
            self.state_stats, self.action_stats = norm_stats(data.state), norm_stats(data.action)
        self.state = (data.state - self.state_stats["mean"]) / (self.state_stats["std"] + 1e-8)
        targets = target_chunks(data, self.chunk, tc.action_rate_hz)
        # [N, chunk, D]: the normalised commands each frame's answer should hold.
        self.targets = ((targets - self.action_stats["mean"]) / (self.action_stats["std"] + 1e-8)).astype(np.float32)
        self.by_task = {t: np.flatnonzero(np.asarray(data.sim_task) == t) for t in sorted(set(data.sim_task))}
        unknown = sorted(set(tc.task_weights) - set(self.by_task))
        if unknown or any(not w > 0 for w in tc.task_weights.values()):
            raise ValueError(f"task_weights: {tc.task_weights} (weights must be > 0; the data's tasks are "
                             f"{sorted(self.by_task)})")
        w = np.array([float(tc.task_weights.get(t, 1.0)) for t in self.by_task])
        self.task_probs = w / w.sum() if tc.task_weights else None
        if not (tc.release_frame_weight > 0 and tc.gripper_loss_weight > 0):
            raise ValueError(f"release_frame_weight / gripper_loss_weight must be > 0 "
                             f"({tc.release_frame_weight}, {tc.gripper_loss_weight})")
        self.row_probs = None  # task -> draw probabilities over its rows; None: uniform
        if tc.release_frame_weight != 1.0:
            releasing = release_frames(targets)
            self.row_probs = {}
            for t, rows in self.by_task.items():
                rw = np.where(releasing[rows], tc.release_frame_weight, 1.0)
                self.row_probs[t] = rw / rw.sum()
        self.loss_dim_weights = None
        if tc.gripper_loss_weight != 1.0:
            dw = np.ones(self.dim, np.float32)
            dw[-1] = tc.gripper_loss_weight  # the gripper is the last dim (JointState order)
            self.loss_dim_weights = torch.from_numpy(dw * self.dim / dw.sum())
        # Every prompt a task may be asked with, tokenised as the server does (dataset's own first).
        self.task_prompts: Dict[str, List[int]] = {}
        encoded, self.prompt_list = [], []
        for t in self.by_task:
            mixed = sorted({data.prompts[int(i)] for i in self.by_task[t]})
            if len(mixed) > 1:  # one prompt per task: another would silently take the first's
                raise ValueError(f"task {t!r} has frames recorded with {len(mixed)} prompts {mixed}; "
                                 f"give each prompt its own task name")
            own = [data.prompts[int(self.by_task[t][0])]]
            for p in own + [p for p in prompts.get(t, []) if p not in own]:
                self.task_prompts.setdefault(t, []).append(len(self.prompt_list))
                self.prompt_list.append(p)
                encoded.append(tokenizer.encode(p))
        self.prompts_used = {t: [self.prompt_list[i] for i in ids] for t, ids in self.task_prompts.items()}
        # Padding is masked and RoPE counts valid tokens only, so trimming the common padding
        # changes nothing but the cost.
        n = max(int(e.mask.sum()) for e in encoded)
        self.tokens = torch.from_numpy(np.stack([e.tokens[:n] for e in encoded]))
        self.token_mask = torch.from_numpy(np.stack([e.mask[:n] for e in encoded]))
        self.text: Optional[TextTargets] = None
        if tc.text_weight > 0:
            if not any(data.subtask):
                raise ValueError("text_weight > 0 but the dataset has no text columns (record it again: "
                                 "sim.narration's subtask / scene answers are recorded per frame)")
            self.text = TextTargets(TextCodec(tokenizer), data.subtask, data.scene)

    def draw(self, b: int) -> Tuple[np.ndarray, List[str]]:
        """b frame rows and their tasks: a task by task_weights, then a frame of it."""
        g = self.gen
        tasks = list(self.by_task)
        pick = (g.integers(len(tasks), size=b) if self.task_probs is None
                else g.choice(len(tasks), size=b, p=self.task_probs))
        rows = np.array([g.choice(self.by_task[tasks[k]]) if self.row_probs is None
                         else g.choice(self.by_task[tasks[k]], p=self.row_probs[tasks[k]]) for k in pick])
        return rows, [tasks[k] for k in pick]

    def batch(self, b: int):
        g = self.gen
        rows, tasks = self.draw(b)
        prompt_ids = np.array([g.choice(self.task_prompts[t]) for t in tasks])
        img = model_pixels(self.images[torch.from_numpy(rows)])
        masks = torch.ones(b, img.shape[1], dtype=torch.bool)
        if img.shape[1] > 1:
            masks[:, 1:] = torch.from_numpy(g.random(b) >= self.tc.single_view_prob)[:, None]
        state = torch.zeros(b, self.maxd)
        state[:, : self.dim] = torch.from_numpy(self.state[rows])
        actions = torch.zeros(b, self.chunk, self.maxd)
        actions[:, :, : self.dim] = torch.from_numpy(self.targets[rows])
        pid = torch.from_numpy(prompt_ids)
        out = (img, masks, self.tokens[pid], self.token_mask[pid], state, actions)
        # Drawn after everything else, so a run without text keeps its batches as before.
        return out + (self.text.batch(rows, g) if self.text is not None else (None, None))


def release_frames(targets: np.ndarray) -> np.ndarray:
    """[N] bool: frames whose target chunk ([N, chunk, D], metres for the gripper, the last dim)
    starts with the gripper closed and opens it later: the last chunk before a release. Closed /
    open: below / above half the sim arm's opening."""
    half = 0.5 * ArmConfig().gripper_max_width
    grip = targets[:, :, -1]
    return (grip[:, 0] < half) & (grip[:, 1:].max(axis=1) > half)


def train(data: LoadedDataset, tc: TrainConfig, tokenizer: PromptTokenizer, prompts: Dict[str, List[str]],
          log: Callable[[str], None] = print, model: Optional[TrainablePi0] = None,
          snapshot: Optional[Callable[["TrainResult"], None]] = None, snapshot_every_s: float = 0.0,
          stats: Optional[Dict[str, Dict[str, np.ndarray]]] = None, components=None) -> TrainResult:
    """snapshot(result) is called every snapshot_every_s seconds with the EMA weights so far (an
    early checkpoint others can build on while training goes on). stats: see BatchMaker.
    components (component_text.ComponentTextBatches): each step also adds component_weight x the
    text loss of component_batch pipeline-component questions (text only, their own prefix pass)."""
    torch.set_num_threads(tc.threads)
    torch.manual_seed(tc.seed)
    cfg = tc.size.config()
    if tokenizer.vocab_size > cfg.vocab_size or tokenizer.max_len > cfg.max_tokens:
        raise ValueError(f"tokenizer ({tokenizer.vocab_size} ids, {tokenizer.max_len} tokens) does not fit the "
                         f"model (vocab {cfg.vocab_size}, max_tokens {cfg.max_tokens})")
    if data.images.shape[-1] != cfg.vision.image_size:
        raise ValueError(f"dataset images are {data.images.shape[-1]} px, the model takes {cfg.vision.image_size}")
    maker = BatchMaker(data, tc, tokenizer, prompts, np.random.default_rng(tc.seed), stats)
    model = model or TrainablePi0(cfg, seed=tc.seed)
    ema = copy.deepcopy(model.params) if tc.ema > 0 else None
    opt = torch.optim.AdamW(model.parameters(), lr=tc.lr, betas=(0.9, 0.95), weight_decay=1e-10)
    gen = torch.Generator().manual_seed(tc.seed)
    total, curve, window = tc.steps, [], []
    text_curve, text_window = [], []
    comp_curve, comp_window = [], []
    budget = tc.max_minutes * 60
    t0 = time.perf_counter()
    step = 0
    last_snap = t0

    def progress() -> float:
        # With a time budget the schedule follows the clock, so a contended CPU shortens the run
        # instead of cutting the learning-rate decay off halfway.
        p = step / total
        if budget > 0:
            p = max(p, (time.perf_counter() - t0) / budget)
        return min(p, 1.0)

    while progress() < 1.0:
        lr = _lr_at(progress(), tc)
        for group in opt.param_groups:
            group["lr"] = lr
        img, masks, tok, tmask, state, actions, block, bmask = maker.batch(tc.batch_size)
        flow, txt = model.losses(img, masks, tok, tmask, state, actions, maker.dim, tc.samples_per_obs, gen,
                                 block, bmask, dim_weights=maker.loss_dim_weights)
        loss = flow if txt is None else flow + tc.text_weight * txt
        if components is not None:
            ctxt = components.loss(model, components.batch(tc.component_batch))
            loss = loss + tc.component_weight * ctxt
            comp_window.append(ctxt.item())
        opt.zero_grad(set_to_none=True)
        loss.backward()
        torch.nn.utils.clip_grad_norm_(model.parameters(), tc.grad_clip)
        opt.step()
        if ema is not None:
            with torch.no_grad():
                d = min(tc.ema, (1 + step) / (10 + step))
                for k, p in model.params.items():
                    ema[k].lerp_(p, 1 - d)
        # loss_curve stays the flow-matching loss alone: comparable with action-only runs.
        window.append(flow.item())
        if txt is not None:
            text_window.append(txt.item())
        step += 1
        done = progress() >= 1.0
        if step % tc.log_every == 0 or done:
            curve.append((step, float(np.mean(window))))
            window = []
            extra = ""
            if text_window:
                text_curve.append((step, float(np.mean(text_window))))
                text_window = []
                extra = f" text {text_curve[-1][1]:.4f}"
            if comp_window:
                comp_curve.append((step, float(np.mean(comp_window))))
                comp_window = []
                extra += f" components {comp_curve[-1][1]:.4f}"
            log(f"step {step} loss {curve[-1][1]:.4f}{extra} lr {lr:.2e} {time.perf_counter() - t0:.0f} s")
        if snapshot is not None and snapshot_every_s > 0 and time.perf_counter() - last_snap >= snapshot_every_s:
            last_snap = time.perf_counter()
            src = ema if ema is not None else model.params
            snapshot(TrainResult({model._names[k]: p.detach().clone() for k, p in src.items()}, cfg,
                                 maker.state_stats, maker.action_stats, step, last_snap - t0, list(curve),
                                 maker.prompts_used, list(text_curve), list(comp_curve)))
    if ema is not None:
        with torch.no_grad():
            for k, p in model.params.items():
                p.copy_(ema[k])
    return TrainResult(model.export(), cfg, maker.state_stats, maker.action_stats, step,
                       time.perf_counter() - t0, curve, maker.prompts_used, text_curve, comp_curve)


def summarise_curve(curve: List[tuple], points: int = 12) -> dict:
    if not curve:
        return {}
    idx = np.unique(np.linspace(0, len(curve) - 1, min(points, len(curve))).round().astype(int))
    return {"first": curve[0][1], "last": curve[-1][1], "min": min(c[1] for c in curve),
            "points": [[int(curve[i][0]), round(curve[i][1], 5)] for i in idx]}

