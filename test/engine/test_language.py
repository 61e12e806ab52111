"""Language decoding on the prefix KV cache (engine/language/decoder.py) against an independent full
recompute, across frames in one batch, and without touching the actions (OxyGen's equivalence
requirements)."""
import dataclasses
import math

import pytest
import torch

from physai_ros.engine import Pi0Config, random_weights
from physai_ros.engine.batching import collate
from physai_ros.engine.language.decoder import (DONE_BUDGET, DONE_CANCELLED, DONE_EOS, DONE_STOP, PlainLanguage,
                                                SamplingParams)
from physai_ros.engine.pi0.modeling import (PlainPi0, attention, embed_prefix, gemma_mlp, gemma_qkv, lin_nb, rms_norm,
                                            rope_cos_sin)
from physai_ros.engine.pi05.modeling import PlainPi05

from engine_helpers import make_input

CONFIGS = {
    "pi0": Pi0Config.preset("tiny"),
    "pi05": Pi0Config.preset("tiny", policy="pi05", time_schedule="multiply", rope_style="multiply"),
}


def _model(policy, seed=0):
    cfg = CONFIGS[policy]
    return (PlainPi05 if policy == "pi05" else PlainPi0)(cfg, random_weights(cfg, seed))


def _batch(cfg, seed=1):
    gen = torch.Generator().manual_seed(seed)
    inputs = [make_input(cfg, 2, 7, gen), make_input(cfg, 3, 4, gen, masked_views=[1]), make_input(cfg, 1, 11, gen)]
    return collate(inputs, cfg, "cpu", torch.float32)


def _last_prompt_token(b, row):
    return int(b.tokens[row][b.token_mask[row]][-1])


def full_recompute_logits(model, b, row, out):
    """The reference: the whole sequence [prefix; generated tokens `out`] through the VLM, prefix-LM
    mask (prefix bidirectional over valid tokens, generated tokens causal), logits at the end."""
    cfg, w, spec = model.cfg, model.w, model.cfg.vlm
    sl = slice(row, row + 1)
    x0, pad = embed_prefix(w, cfg, b.images[sl], b.image_masks[sl], b.tokens[sl], b.token_mask[sl])
    n_valid = int(pad.sum())
    g = len(out)
    gen = w["vlm.embed"][torch.tensor(out, dtype=torch.long)] * math.sqrt(spec.width)
    x = torch.cat([x0, gen[None]], dim=1)
    t = x.shape[1]
    p = x0.shape[1]
    allowed = torch.zeros(1, t, t, dtype=torch.bool)
    allowed[0, :p, :p] = pad[0][:, None] & pad[0][None, :]
    for j in range(g):
        allowed[0, p + j, :p] = pad[0]
        allowed[0, p + j, p: p + j + 1] = True
    pos = torch.cat([torch.cumsum(pad.long(), 1) - 1, n_valid + torch.arange(g)[None]], dim=1)
    cos, sin = rope_cos_sin(pos, cfg, x.dtype)
    for i in range(spec.depth):
        pre = f"vlm.layers.{i}."
        q, k, v = gemma_qkv(w, pre, spec, rms_norm(x, w[pre + "ln_attn"], cfg.rms_eps), cos, sin)
        x = x + lin_nb(attention(q, k, v, allowed, spec.head_dim**-0.5), w[pre + "o"])
        x = x + gemma_mlp(w, pre, rms_norm(x, w[pre + "ln_mlp"], cfg.rms_eps))
    last = (p + g - 1) if g else int(torch.nonzero(pad[0])[-1])
    h = rms_norm(x[0, last], w["vlm.norm"], cfg.rms_eps)
    return h @ w["vlm.embed"].T


@pytest.mark.parametrize("policy", ["pi0", "pi05"])
def test_greedy_tokens_equal_a_full_recompute(policy):
    model = _model(policy)
    b = _batch(model.cfg)
    cache = model.prefix(b.images, b.image_masks, b.tokens, b.token_mask)
    lang = PlainLanguage(model.cfg, model.w)
    reqs = [lang.start(cache, r, _last_prompt_token(b, r), SamplingParams(max_tokens=6), f"r{r}") for r in range(3)]
    # Step by step, all robots in one batch: the logits (not only their argmax: a random model's
    # greedy text is too repetitive to show an off-by-one position) equal the full recompute's.
    while not all(r.done for r in reqs):
        logits = lang.next_logits(reqs)
        for r, (req, lg) in enumerate(zip(reqs, logits)):
            ref = full_recompute_logits(model, b, r, req.tokens)
            torch.testing.assert_close(lg, ref, rtol=0, atol=1e-4)
            req.tokens.append(int(torch.argmax(lg)))
            req.done = len(req.tokens) == 6
    # And step() samples exactly that greedy text.
    again = [lang.start(cache, r, _last_prompt_token(b, r), SamplingParams(max_tokens=6), f"s{r}") for r in range(3)]
    lang.generate(again)
    assert [a.tokens for a in again] == [r.tokens for r in reqs]
    assert all(a.reason == DONE_BUDGET for a in again)


def test_cross_frame_batching_equals_each_request_alone():
    """Requests from two frames (different caches), joining at different steps, decoded in one
    batch, give what each gives alone."""
    model = _model("pi0", seed=3)
    lang = PlainLanguage(model.cfg, model.w)
    b1, b2 = _batch(model.cfg, seed=4), _batch(model.cfg, seed=5)
    c1 = model.prefix(b1.images, b1.image_masks, b1.tokens, b1.token_mask)
    c2 = model.prefix(b2.images, b2.image_masks, b2.tokens, b2.token_mask)

    def fresh():
        return ([lang.start(c1, r, _last_prompt_token(b1, r), SamplingParams(max_tokens=5), f"a{r}") for r in (0, 2)],
                [lang.start(c2, r, _last_prompt_token(b2, r), SamplingParams(max_tokens=5), f"b{r}") for r in (1,)])

    frame1, frame2 = fresh()
    lang.step(frame1)
    lang.step(frame1)  # frame 2's request joins after two tokens
    lang.generate(frame1 + frame2)
    together = [r.tokens for r in frame1 + frame2]
    alone = []
    for req in sum(fresh(), []):
        lang.generate([req])
        alone.append(req.tokens)
    assert together == alone


def test_actions_are_bit_identical_with_the_language_stream_on():
    model = _model("pi05", seed=6)
    b = _batch(model.cfg, seed=7)
    cache = model.prefix(b.images, b.image_masks, b.tokens, b.token_mask)
    before = [k.clone() for k in cache.keys] + [v.clone() for v in cache.values]
    a_off, _ = model.denoise(cache, b.state, b.noise)
    lang = PlainLanguage(model.cfg, model.w)
    reqs = [lang.start(cache, r, _last_prompt_token(b, r), SamplingParams(max_tokens=4), str(r)) for r in range(3)]
    lang.step(reqs)
    a_on, _ = model.denoise(cache, b.state, b.noise)
    lang.generate(reqs)
    assert torch.equal(a_on, a_off)
    assert all(torch.equal(x, y) for x, y in zip(before, list(cache.keys) + list(cache.values)))


def test_end_reasons_sampling_and_memory():
    model = _model("pi0", seed=8)
    b = _batch(model.cfg, seed=9)
    cache = model.prefix(b.images, b.image_masks, b.tokens, b.token_mask)
    lang = PlainLanguage(model.cfg, model.w)
    tok = _last_prompt_token(b, 0)
    greedy = lang.start(cache, 0, tok, SamplingParams(max_tokens=4), "g")
    lang.generate([greedy])
    first = greedy.tokens[0]
    eos = lang.start(cache, 0, tok, SamplingParams(max_tokens=4, eos_id=first), "e")
    lang.generate([eos])
    assert (eos.reason, eos.tokens) == (DONE_EOS, [])
    stop = lang.start(cache, 0, tok, SamplingParams(max_tokens=4, stop_ids=(first,)), "s")
    lang.generate([stop])
    assert (stop.reason, stop.tokens) == (DONE_STOP, [first])  # a stop token is emitted, then ends
    cancelled = lang.start(cache, 0, tok, SamplingParams(max_tokens=4), "c")
    lang.step([cancelled])
    PlainLanguage.cancel(cancelled)
    assert lang.step([cancelled]) == [None] and cancelled.reason == DONE_CANCELLED and len(cancelled.tokens) == 1
    # A vanishing top_p keeps only the most likely token: greedy. Sampling is reproducible by seed.
    nucleus = lang.start(cache, 0, tok, SamplingParams(max_tokens=4, temperature=1.0, top_p=1e-9), "n")
    lang.generate([nucleus])
    assert nucleus.tokens == greedy.tokens
    s1, s2 = (lang.start(cache, 0, tok, SamplingParams(max_tokens=6, temperature=2.0, seed=5), x) for x in "xy")
    lang.generate([s1, s2])
    assert s1.tokens == s2.tokens
    # Memory: the valid prefix rows plus one K/V row per layer for each generated token read back
    # as an input (all but the newest).
    spec = model.cfg.vlm
    row_bytes = 2 * spec.depth * spec.num_kv_heads * spec.head_dim * 4
    assert greedy.kv_bytes() == row_bytes * (int(cache.pad[0].sum()) + len(greedy.tokens) - 1)


def test_bad_params_and_missing_lm_weights_are_refused():
    model = _model("pi0")
    with pytest.raises(ValueError, match="vlm.norm"):
        PlainLanguage(model.cfg, {k: v for k, v in model.w.items() if k != "vlm.norm"})
    lang = PlainLanguage(model.cfg, model.w)
    b = _batch(model.cfg)
    cache = model.prefix(b.images, b.image_masks, b.tokens, b.token_mask)
    for bad, match in ((dataclasses.replace(SamplingParams(), max_tokens=0), "max_tokens"),
                       (SamplingParams(top_p=0.0), "top_p"), (SamplingParams(temperature=-1.0), "temperature")):
        with pytest.raises(ValueError, match=match):
            lang.start(cache, 0, 1, bad, "x")


@pytest.mark.parametrize("policy", ["pi0", "pi05"])
def test_fast_path_decodes_as_the_plain_path_and_keeps_its_actions(policy):
    """Pi0Engine(language=True): the fast model keeps the VLM's final norm and its last layer whole
    for text, while the prefix still runs that layer K/V-only: the same chunks bit for bit as an
    engine without language, and the same logits as the plain decoder (fp32 reordering only)."""
    from physai_ros.engine import Pi0Engine

    from engine_helpers import make_input as mk

    cfg = CONFIGS[policy]
    w = random_weights(cfg, 10)
    with_text = Pi0Engine(cfg, {k: v.clone() for k, v in w.items()}, language=True)
    without = Pi0Engine(cfg, {k: v.clone() for k, v in w.items()})
    plain = Pi0Engine(cfg, {k: v.clone() for k, v in w.items()}, fast=False)
    gen = torch.Generator().manual_seed(11)
    inputs = [mk(cfg, 2, 6, gen), mk(cfg, 1, 9, gen)]
    a, b0 = with_text.infer(inputs), without.infer(inputs)
    assert all(torch.equal(x.actions, y.actions) for x, y in zip(a, b0))
    b = collate(inputs, cfg, "cpu", torch.float32)
    decoders = (with_text.language_decoder(), plain.language_decoder())
    caches = [e.model.prefix(b.images, b.image_masks, b.tokens, b.token_mask) for e in (with_text, plain)]
    reqs = [[d.start(c, r, _last_prompt_token(b, r), SamplingParams(max_tokens=5), str(r)) for r in range(2)]
            for d, c in zip(decoders, caches)]
    for _ in range(5):
        lf, lp = decoders[0].next_logits(reqs[0]), decoders[1].next_logits(reqs[1])
        torch.testing.assert_close(lf, lp, rtol=0, atol=1e-4)
        for rs in reqs:  # feed both the plain path's choice, so they stay on one text
            for r, lg in zip(rs, lp):
                r.tokens.append(int(torch.argmax(lg)))
    with pytest.raises(ValueError, match="language=True"):
        without.language_decoder()


@pytest.mark.parametrize("policy", ["pi0", "pi05"])
def test_a_question_is_answered_as_a_full_recompute_with_it_appended(policy):
    """A question (token ids after the prompt, not emitted) prefilled in one block at start, then
    decoded: every step's logits equal the full recompute of [prefix; question; answer so far],
    for requests with and without questions of different lengths decoded in one batch, and the
    fast path answers as the plain path."""
    from physai_ros.engine import Pi0Engine

    model = _model(policy, seed=12)
    b = _batch(model.cfg, seed=13)
    cache = model.prefix(b.images, b.image_masks, b.tokens, b.token_mask)
    lang = PlainLanguage(model.cfg, model.w)
    questions = [[5, 9, 17, 3], [], [42]]
    reqs = [lang.start(cache, r, _last_prompt_token(b, r), SamplingParams(max_tokens=5), f"q{r}", question=q)
            for r, q in enumerate(questions)]
    assert [r.gen_keys[0].shape[0] for r in reqs] == [3, 0, 0]  # all question tokens but the last
    while not all(r.done for r in reqs):
        logits = lang.next_logits(reqs)
        for r, (req, lg, q) in enumerate(zip(reqs, logits, questions)):
            if req.done:
                continue
            ref = full_recompute_logits(model, b, r, q + req.tokens)
            torch.testing.assert_close(lg, ref, rtol=0, atol=1e-4)
            req.tokens.append(int(torch.argmax(lg)))
            req.done = len(req.tokens) == 5
    fast = Pi0Engine(model.cfg, {k: v.clone() for k, v in model.w.items()}, language=True)
    fcache = fast.model.prefix(b.images, b.image_masks, b.tokens, b.token_mask)
    fdec = fast.language_decoder()
    again = [fdec.start(fcache, r, _last_prompt_token(b, r), SamplingParams(max_tokens=5), f"f{r}", question=q)
             for r, q in enumerate(questions)]
    fdec.generate(again)
    assert [a.tokens for a in again] == [r.tokens for r in reqs]
    with pytest.raises(ValueError, match="question"):
        lang.start(cache, 0, 1, SamplingParams(), "bad", question=[model.cfg.vocab_size])


def test_a_request_decodes_at_most_its_own_tokens_per_frame():
    """A task's k below the frame's: the request sits the remaining steps out (no token, no K/V)
    and its text is still the one it gives alone."""
    from physai_ros.engine.language.decoder import batch_requests, unbatch_requests

    model = _model("pi0", seed=14)
    b = _batch(model.cfg, seed=15)
    cache = model.prefix(b.images, b.image_masks, b.tokens, b.token_mask)
    lang = PlainLanguage(model.cfg, model.w)

    def fresh():
        return [lang.start(cache, r, _last_prompt_token(b, r), SamplingParams(max_tokens=6, tokens_per_frame=tpf),
                           f"t{r}", question=[7, 8]) for r, tpf in ((0, 1), (1, 0), (2, 2))]

    reqs = fresh()
    state = batch_requests(reqs, 3)
    emitted = lang.decode_batched(state, 3)
    unbatch_requests(state)
    assert [len(e) for e in emitted] == [1, 3, 2]
    assert [r.gen_keys[0].shape[0] for r in reqs] == [2, 4, 3]  # question (2) + tokens read back
    while not all(r.done for r in reqs):
        state = batch_requests(reqs, 3)
        lang.decode_batched(state, 3)
        unbatch_requests(state)
    alone = fresh()
    for a in alone:
        lang.generate([a])
    assert [a.tokens for a in alone] == [r.tokens for r in reqs]
    with pytest.raises(ValueError, match="tokens_per_frame"):
        SamplingParams(tokens_per_frame=-1).validate()
