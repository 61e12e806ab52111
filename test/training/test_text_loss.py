"""The training module's text forward (training/text_loss.py) is what the serving decoder runs
(engine/language/decoder.py with a question): on small random weights the engine's greedy decode, plain
and fast path, emits the argmax tokens of the teacher-forced training logits, step for step; the
loss reads exactly the answer and <eos> targets; co-training lowers the text loss."""
from __future__ import annotations

import numpy as np
import pytest
import torch
import torch.nn.functional as F

from physai_ros.config.fleet import default_fleet_path
from physai_ros.engine import Pi0Engine
from physai_ros.engine.checkpoint.params import random_weights
from physai_ros.engine.language.decoder import PlainLanguage, SamplingParams
from physai_ros.engine.processor.tokenizer import PromptTokenizer
from physai_ros.sim.narration import SCENE_QUESTION, SUBTASK_QUESTION
from physai_lab.training.policy_model import TrainablePi0
from physai_lab.training.text_loss import greedy_answers, make_blocks, text_logits, text_loss
from physai_lab.training.train import ModelSize

TOKENIZER = str(default_fleet_path().parents[1] / "physai_ros" / "assets" / "tokenizer.json")
TINY = ModelSize(image_size=28, patch_size=14, vision_width=32, vision_depth=1, vlm_width=32, expert_width=32,
                 depth=2, heads=2, head_dim=16, chunk_size=4)
STEPS = 8


def _observations(cfg, tok: PromptTokenizer):
    """Three robots: different prompt lengths, one without its second camera (padding inside the
    prefix must not move the text's RoPE positions)."""
    gen = torch.Generator().manual_seed(3)
    prompts = ["pick up the blue cube and place it on the green pad", "move the gripper to the red marker", "grasp"]
    enc = [tok.encode(p) for p in prompts]
    n = max(int(e.mask.sum()) for e in enc)
    tokens = torch.from_numpy(np.stack([e.tokens[:n] for e in enc]))
    mask = torch.from_numpy(np.stack([e.mask[:n] for e in enc]))
    s = cfg.vision.image_size
    images = torch.rand(3, 2, 3, s, s, generator=gen) * 2 - 1
    image_masks = torch.tensor([[True, True], [True, False], [True, True]])
    return images, image_masks, tokens, mask


@pytest.mark.parametrize("question", [SUBTASK_QUESTION, SCENE_QUESTION])
def test_engine_greedy_decode_emits_the_training_logits_argmax(question):
    cfg = TINY.config()
    tok = PromptTokenizer(TOKENIZER, cfg.max_tokens)
    # random_weights (random norms too, unlike training_init) so every weight the text reads matters.
    model = TrainablePi0(cfg, weights=random_weights(cfg, seed=4))
    images, image_masks, tokens, mask = _observations(cfg, tok)
    q = tok.encode_text(question)
    assert q and tok.bos_id not in q and tok.pad_id not in q  # continues the prompt: no BOS, no padding

    with torch.no_grad():
        cache = model.prefix(images, image_masks, tokens, mask)
    w = model.export()
    lang = PlainLanguage(cfg, w)
    last = [int(tokens[r][mask[r]][-1]) for r in range(3)]
    reqs = [lang.start(cache, r, last[r], SamplingParams(max_tokens=STEPS), f"r{r}", question=q) for r in range(3)]
    engine_logits = [[] for _ in range(3)]
    while not all(r.done for r in reqs):
        for r, lg in zip(reqs, lang.next_logits(reqs)):
            engine_logits[reqs.index(r)].append(lg)
            lang._accept(r, int(torch.argmax(lg)))
    said = [r.tokens for r in reqs]
    assert all(len(s) == STEPS for s in said)

    # Teacher-forced: the block [question, engine's answer] in one causal pass of the training
    # forward (live Parameters, as in training); its logits at question[-1] onwards are the
    # engine's step logits, so their argmax is what the engine emitted.
    block = torch.tensor([q + s for s in said])
    cache_t = model.prefix(images, image_masks, tokens, mask)
    logits = text_logits(model.weights(), cfg, cache_t, block)
    assert logits.requires_grad
    for r in range(3):
        at = logits[r, len(q) - 1: len(q) - 1 + STEPS].detach()
        torch.testing.assert_close(at, torch.stack(engine_logits[r]), rtol=0, atol=1e-4)
        assert at.argmax(-1).tolist() == said[r]
    # The training module's own greedy decoder (used by text_eval) says the same.
    assert greedy_answers(w, cfg, cache, q, eos_id=-1, max_tokens=STEPS) == said

    # The fast path (the server's engine) answers as the plain path.
    fast = Pi0Engine(cfg, {k: v.clone() for k, v in w.items()}, language=True)
    fdec = fast.language_decoder()
    fcache = fast.model.prefix(images, image_masks, tokens, mask)
    again = [fdec.start(fcache, r, last[r], SamplingParams(max_tokens=STEPS), f"f{r}", question=q) for r in range(3)]
    fdec.generate(again)
    assert [a.tokens for a in again] == said


def test_blocks_put_the_loss_on_the_answer_and_eos_only():
    block, mask = make_blocks([[5, 6, 7], [8]], [[9, 10], [11, 12, 13]], eos_id=2, pad_id=0)
    assert block.tolist() == [[5, 6, 7, 9, 10, 2], [8, 11, 12, 13, 2, 0]]
    # Position j's logits predict block[j + 1]: from the last question token to the last answer token.
    assert mask.tolist() == [[False, False, True, True, True, False], [True, True, True, True, False, False]]
    logits = torch.randn(2, 6, 16)
    want = F.cross_entropy(torch.cat([logits[0, 2:5], logits[1, 0:4]]), torch.tensor([9, 10, 2, 11, 12, 13, 2]))
    torch.testing.assert_close(text_loss(logits, block, mask), want)
    with pytest.raises(ValueError, match="question"):
        make_blocks([[]], [[1]], eos_id=2)
