"""Text targets for co-training: narration's questions and a frame's recorded answers as token
blocks (text_loss.make_blocks).

Encoding is PromptTokenizer.encode_text (normalised like our checkpoints' prompts: strip,
lowercase; no BOS, no padding): the question continues the prefix, it does not start a
sequence. Answers end with the tokenizer's <eos> id, which the serving decoder takes as
SamplingParams.eos_id. The tokenizer file is the checkpoint's own
(assets/tokenizer.json); it is read, never rebuilt.
"""
from __future__ import annotations

from typing import Dict, List, Sequence, Tuple

import numpy as np
import torch

from physai_ros.engine.processor.tokenizer import PromptTokenizer
from physai_ros.sim.narration import SCENE_QUESTION, SUBTASK_QUESTION

from physai_lab.training.text_loss import make_blocks

QUESTIONS = {"subtask": SUBTASK_QUESTION, "scene": SCENE_QUESTION}


class TextCodec:
    """PromptTokenizer's text helpers (encode_text: no BOS, no padding; eos_id; decode_ids),
    with the answers' ids cached: a few dozen distinct strings recur over every batch."""

    def __init__(self, tokenizer: PromptTokenizer):
        if tokenizer.eos_id is None:
            raise ValueError(f"{tokenizer.path}: the tokenizer has no <eos> token to end an answer with")
        self.tok = tokenizer
        self.eos_id, self.pad_id = tokenizer.eos_id, tokenizer.pad_id
        self._cache: Dict[str, List[int]] = {}

    def encode(self, text: str) -> List[int]:
        ids = self._cache.get(text)
        if ids is None:
            ids = self._cache[text] = self.tok.encode_text(text)
        return list(ids)

    def decode(self, ids: Sequence[int]) -> str:
        return self.tok.decode_ids(list(ids)).strip()


class TextTargets:
    """Per frame answers (dataset.LoadedDataset.subtask / .scene) -> training blocks; each
    sample asks one of the two questions, drawn with equal odds. Frames without recorded text
    ("": datasets from before the narration columns) get no text loss."""

    def __init__(self, codec: TextCodec, subtask: Sequence[str], scene: Sequence[str]):
        self.codec = codec
        self.answers = {"subtask": list(subtask), "scene": list(scene)}
        self.question_ids = {k: codec.encode(q) for k, q in QUESTIONS.items()}
        self.has_text = np.array([bool(a and b) for a, b in zip(subtask, scene)])

    def batch(self, rows: np.ndarray, gen: np.random.Generator) -> Tuple[torch.Tensor, torch.Tensor]:
        """(block [B, T], loss_mask [B, T]); a frame without text keeps an all-False mask."""
        kinds = np.where(gen.random(len(rows)) < 0.5, "subtask", "scene")
        qs, ans, keep = [], [], []
        for r, kind in zip(rows, kinds):
            qs.append(self.question_ids[kind])
            ans.append(self.codec.encode(self.answers[kind][int(r)]) if self.has_text[r] else [])
            keep.append(bool(self.has_text[r]))
        block, mask = make_blocks(qs, ans, self.codec.eos_id, self.codec.pad_id)
        mask[~torch.tensor(keep)] = False
        return block, mask
