"""Text co-training batches for the pipeline components: safety, monitor and planner
questions over component_data's frames, asked after the same prefix the serving path builds
(images + a prompt the robot may be serving), with the frame's ground-truth answer.

The frames carry no action targets, so these samples add text loss only: one more prefix pass per
step (`loss`), beside train.BatchMaker's action + narration batch, whose data and sampling stay
as they were. Sampling: a component uniformly, then one of that component's answers, then a frame
with that answer uniformly. An answer is drawn with probability proportional to its frame count
raised to the component's `answer_temper`: 0 (the default) draws them uniformly (so "unsafe" is as
frequent as "safe"), 1 as often as the frames show them. Uniform answers teach a classifier
equal priors; where one frame cannot tell two answers apart (a cube that just slipped back onto
the table looks like one about to be picked), that makes the rare answer win half the ambiguous
frames, so a component whose false alarm is costly (the monitor's "failed" resets the episode)
is better trained at the frames' own frequencies. The prefix prompt is one the frame's task
may run with: the sim task's own prompt, the fleet.yaml prompts of robots running it, and for a
multi-step task its subgoals too (System 1's prompt while a plan is being executed, which is the
prefix a shared-path component question is decoded on). A question's `{task}` (the planner's) is
filled with the task prompt the frame's robot sends: the frame's own instruction where the task
reads it (place_in_order's order), so the answer can follow the instruction, not only the scene.
"""
from __future__ import annotations

from typing import Dict, List, Optional, Tuple

import numpy as np
import torch

from physai_ros.engine.batching import model_pixels
from physai_ros.engine.processor.tokenizer import PromptTokenizer
from physai_ros.pipeline.config import fill_task
from physai_ros.sim.multi_step import DONE_SUBGOAL, subgoal_sequence

from physai_lab.training.component_questions import COMPONENTS, QUESTIONS
from physai_lab.training.text_data import TextCodec
from physai_lab.training.text_loss import make_blocks, text_logits, text_loss


def frame_prompts(task: str, instruction: str, fleet_prompts: Dict[str, List[str]]) -> Tuple[List[str], List[str]]:
    """(task prompts, prefix prompts) for a frame of `task` recorded with `instruction` ("": the
    task's own). Task prompts fill the question's {task}: what a robot running the task sends
    (the instruction itself where the task reads it: place_in_order's order is in it; otherwise
    the sim's prompt and fleet.yaml's). Prefix prompts add a multi-step task's subgoals (System
    1's prompt while a plan runs); fleet.yaml's prompts are left out where they would name
    another order than the frame's."""
    from physai_ros.sim.tasks import make_task

    t = make_task(task, instruction or None)
    if t.reads_prompt:
        asked = [t.prompt] + [p for p in fleet_prompts.get(task, []) if _same_goal(task, p, t.prompt)]
    else:
        asked = [t.prompt] + list(fleet_prompts.get(task, []))
    asked = list(dict.fromkeys(asked))
    seq = subgoal_sequence(task, t.prompt)
    prefix = asked + ([s for s in seq if s != DONE_SUBGOAL] if len(seq) > 1 else [])
    return asked, list(dict.fromkeys(prefix))


def _same_goal(task: str, prompt: str, instruction: str) -> bool:
    from physai_ros.sim.tasks import make_task

    try:
        return make_task(task, prompt).object_names == make_task(task, instruction).object_names
    except ValueError:
        return False


class ComponentTextBatches:
    def __init__(self, frames: Dict[str, np.ndarray], tokenizer: PromptTokenizer,
                 fleet_prompts: Dict[str, List[str]], single_view_prob: float = 0.25, seed: int = 1,
                 answer_temper: Optional[Dict[str, float]] = None):
        unknown = sorted(set(answer_temper or {}) - set(COMPONENTS))
        if unknown:
            raise ValueError(f"answer_temper: unknown components {unknown}; known: {list(COMPONENTS)}")
        if any(not 0.0 <= float(v) <= 1.0 for v in (answer_temper or {}).values()):
            raise ValueError(f"answer_temper: each value must be within 0..1, got {answer_temper}")
        self.answer_temper = {c: float((answer_temper or {}).get(c, 0.0)) for c in COMPONENTS}
        self.codec = TextCodec(tokenizer)
        self.gen = np.random.default_rng(seed)
        self.single_view_prob = single_view_prob
        self.images = torch.from_numpy(frames["images"])
        self.task = frames["task"]
        self.answers = {c: frames[c] for c in COMPONENTS}
        # component -> [(answer, frame rows)]
        self.by_answer = {c: [(str(a), np.flatnonzero(self.answers[c] == a)) for a in np.unique(self.answers[c])]
                          for c in COMPONENTS}
        self.answer_probs = {}
        for c, groups in self.by_answer.items():
            w = np.array([len(r) for _, r in groups], float) ** self.answer_temper[c]
            self.answer_probs[c] = w / w.sum()
        self.questions = {c: list(qs) for c, qs in QUESTIONS.items()}  # templates: {task} filled per sample
        # A frame's prompts follow its task and the instruction it was recorded with.
        instr = frames["prompt"] if "prompt" in frames else np.full(len(self.task), "")
        self.key = np.array([f"{t}\x00{p}" for t, p in zip(self.task, instr)])
        self.asked: Dict[str, List[str]] = {}
        self.prompt_list: List[str] = []
        self.prompt_ids: Dict[str, List[int]] = {}
        encoded = []
        for k in sorted(set(self.key.tolist())):
            task, instruction = k.split("\x00")
            self.asked[k], prefix = frame_prompts(task, instruction, fleet_prompts)
            for p in prefix:
                if p not in self.prompt_list:
                    self.prompt_list.append(p)
                    encoded.append(tokenizer.encode(p))
                self.prompt_ids.setdefault(k, []).append(self.prompt_list.index(p))
        n = max(int(e.mask.sum()) for e in encoded)
        self.tokens = torch.from_numpy(np.stack([e.tokens[:n] for e in encoded]))
        self.token_mask = torch.from_numpy(np.stack([e.mask[:n] for e in encoded]))
        self.prompts = {k.replace("\x00", ": ").rstrip(": "): [self.prompt_list[i] for i in ids]
                        for k, ids in self.prompt_ids.items()}

    def counts(self) -> Dict[str, Dict[str, int]]:
        return {c: {a: int(len(r)) for a, r in groups} for c, groups in self.by_answer.items()}

    def batch(self, b: int) -> Tuple[torch.Tensor, ...]:
        """(images, image_masks, tokens, token_mask, block, loss_mask) for b samples."""
        g = self.gen
        rows, qs, ans = [], [], []
        for _ in range(b):
            comp = COMPONENTS[g.integers(len(COMPONENTS))]
            groups = self.by_answer[comp]
            answer, members = groups[g.choice(len(groups), p=self.answer_probs[comp])]
            row = int(members[g.integers(len(members))])
            rows.append(row)
            options = self.questions[comp]
            template = options[g.integers(len(options))]
            asked = self.asked[str(self.key[row])]
            qs.append(self.codec.encode(fill_task(template, asked[g.integers(len(asked))])))
            ans.append(self.codec.encode(answer))
        rows_t = torch.tensor(rows)
        img = model_pixels(self.images[rows_t])
        masks = torch.ones(b, img.shape[1], dtype=torch.bool)
        if img.shape[1] > 1:
            masks[:, 1:] = torch.from_numpy(g.random(b) >= self.single_view_prob)[:, None]
        pid = torch.tensor([int(g.choice(self.prompt_ids[str(self.key[r])])) for r in rows])
        block, mask = make_blocks(qs, ans, self.codec.eos_id, self.codec.pad_id)
        return img, masks, self.tokens[pid], self.token_mask[pid], block, mask

    @staticmethod
    def loss(model, batch) -> torch.Tensor:
        """Answer + <eos> cross-entropy after the batch's prefix (model: policy_model.TrainablePi0)."""
        img, masks, tok, tmask, block, bmask = batch
        cache = model.prefix(img, masks, tok, tmask)
        return text_loss(text_logits(model.weights(), model.cfg, cache, block), block, bmask)
