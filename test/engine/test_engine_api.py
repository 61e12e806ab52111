"""Pi0Engine's public behaviour: batching, padding, input errors, the prefix/denoise split."""
import dataclasses

import pytest
import torch

from physai_ros.engine import EngineInputError, Pi0Config, Pi0Engine

from engine_helpers import make_input

CFG = Pi0Config.preset("tiny")


@pytest.fixture(scope="module")
def engine():
    return Pi0Engine(CFG, seed=0)


def test_presets_have_the_published_sizes():
    p = Pi0Config.preset("pi0")
    assert (p.vlm.width, p.vlm.depth, p.vlm.mlp_dim, p.vlm.num_heads, p.vlm.num_kv_heads, p.vlm.head_dim) == (2048, 18, 16384, 8, 1, 256)
    assert (p.expert.width, p.expert.depth, p.expert.mlp_dim) == (1024, 18, 4096)
    assert (p.vision.width, p.vision.depth, p.vision.mlp_dim, p.vision.num_heads, p.vision.num_tokens) == (1152, 27, 4304, 16, 256)
    assert (p.chunk_size, p.max_state_dim, p.max_action_dim, p.num_steps, p.vocab_size) == (50, 32, 32, 10, 257152)
    two = Pi0Config.preset("pi0_2layer")
    assert two.vlm.depth == two.expert.depth == two.vision.depth == 2 and two.vlm.width == 2048
    assert Pi0Config.preset("tiny", chunk_size=4).chunk_size == 4
    with pytest.raises(ValueError, match="unknown preset"):
        Pi0Config.preset("huge")
    with pytest.raises(ValueError, match="num_kv_heads and head_dim must match"):
        dataclasses.replace(CFG, expert=dataclasses.replace(CFG.expert, head_dim=8)).validate()


def test_batched_equals_alone_with_different_prompts_views_noise(engine):
    gen = torch.Generator().manual_seed(1)
    batch = [make_input(CFG, 1, 3, gen), make_input(CFG, 3, 12, gen), make_input(CFG, 2, 7, gen, pad_to=10)]
    together = engine.infer(batch)
    for inp, out in zip(batch, together):
        alone = engine.infer([inp])[0]
        torch.testing.assert_close(out.actions, alone.actions, rtol=0, atol=1e-5)
        torch.testing.assert_close(out.updates, alone.updates, rtol=0, atol=1e-5)
    assert (together[0].actions - together[1].actions).abs().max() > 1e-2  # robots really differ


def test_missing_camera_equals_camera_left_out(engine):
    gen = torch.Generator().manual_seed(2)
    full = make_input(CFG, 2, 5, gen, masked_views=[1])
    fewer = dataclasses.replace(full, images=full.images[:1], image_masks=full.image_masks[:1])
    a, b = engine.infer([full])[0], engine.infer([fewer])[0]
    torch.testing.assert_close(a.actions, b.actions, rtol=0, atol=1e-5)


def test_noise_drawn_when_absent_and_updates_sum_to_chunk(engine):
    inp = dataclasses.replace(make_input(CFG, 1, 4, torch.Generator().manual_seed(3)), noise=None)
    o1, o2 = engine.infer([inp])[0], engine.infer([inp])[0]
    assert not torch.equal(o1.actions, o2.actions)  # fresh noise per call
    assert o1.actions.shape == (CFG.chunk_size, CFG.max_action_dim)
    assert o1.updates.shape == (CFG.num_steps, CFG.chunk_size, CFG.max_action_dim)
    assert set(o1.timings_ms) >= {"prefix_ms", "denoise_ms", "total_ms"}


def test_restarted_noise_repeats_the_draws_made_after_construction():
    inp = dataclasses.replace(make_input(CFG, 1, 4, torch.Generator().manual_seed(3)), noise=None)
    engine = Pi0Engine(CFG, seed=5)
    first = [engine.infer([inp])[0].actions for _ in range(2)]
    engine.restart_noise()
    again = [engine.infer([inp])[0].actions for _ in range(2)]
    assert not torch.equal(first[0], first[1])
    for a, b in zip(first, again):
        torch.testing.assert_close(a, b, rtol=0, atol=1e-6)


def test_prefix_then_denoise_matches_infer_and_accepts_a_newer_state(engine):
    gen = torch.Generator().manual_seed(4)
    batch = [make_input(CFG, 2, 6, gen), make_input(CFG, 1, 9, gen)]
    cache = engine.prefix(batch)
    state = torch.stack([b.state for b in batch])
    noise = torch.stack([b.noise for b in batch])
    actions, updates = engine.denoise(cache, state, noise)
    ref = engine.infer(batch)
    for i in range(2):
        torch.testing.assert_close(actions[i], ref[i].actions, rtol=0, atol=1e-6)
    # Streaming: the same VLM cache, a newer state -> a different chunk, no recompute of the prefix.
    newer, _ = engine.denoise(cache, state + 0.5, noise)
    assert (newer - actions).abs().max() > 1e-3
    with pytest.raises(EngineInputError, match="state"):
        engine.denoise(cache, state[:1], noise)


@pytest.mark.parametrize("field,value,match", [
    ("images", torch.zeros(1, 3, 8, 8), "images: expected"),
    ("images", torch.full((1, 3, 56, 56), float("nan")), "NaN"),
    ("image_masks", torch.zeros(1, dtype=torch.bool), "at least one camera"),
    ("tokens", torch.full((4,), 5000), "ids must lie"),
    ("token_mask", torch.ones(3, dtype=torch.bool), "token_mask"),
    ("state", torch.zeros(3), "state: expected shape"),
    ("noise", torch.zeros(2, 2), "noise"),
    ("tokens", [1, 2, 3], "expected a torch.Tensor"),
])
def test_bad_input_is_rejected_named_and_counted(engine, field, value, match):
    good = make_input(CFG, 1, 4, torch.Generator().manual_seed(5))
    bad = dataclasses.replace(good, **{field: value})
    before = engine.stats.rejected
    with pytest.raises(EngineInputError, match=match) as e:
        engine.infer([good, bad])
    assert "robot 1" in str(e.value)
    assert engine.stats.rejected == before + 1
    assert engine.check(good) is None
    engine.infer([good])  # the engine still works afterwards


def test_empty_batch_and_wrong_type(engine):
    with pytest.raises(EngineInputError, match="empty"):
        engine.infer([])
    with pytest.raises(EngineInputError, match="EngineInput"):
        engine.infer([{"images": None}])
