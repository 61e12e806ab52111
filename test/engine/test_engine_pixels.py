"""uint8 camera pixels scaled once, in the engine's collation: the same batch and the same
actions as the float inputs the server used to build (q * 2/255 - 1 in float32)."""
import numpy as np
import pytest
import torch

from physai_ros.engine.batching import collate, model_pixels
from physai_ros.engine.engine import Pi0Engine
from physai_ros.engine.types import EngineInput, EngineInputError, Pi0Config

CFG = Pi0Config.preset("tiny")


def _inputs(pixels_as_bytes: bool, seed: int = 0) -> list[EngineInput]:
    rng = np.random.default_rng(seed)
    s, out = CFG.vision.image_size, []
    for views, n_tokens in ((1, 5), (CFG.max_views, 9), (2, 7)):  # padding in views and tokens
        u8 = rng.integers(0, 256, (views, 3, s, s), dtype=np.uint8)
        img = torch.from_numpy(u8)
        if not pixels_as_bytes:  # what the server's preprocessing produced before
            f = u8.astype(np.float32) * np.float32(2.0 / 255.0)
            f -= np.float32(1.0)
            img = torch.from_numpy(f)
        mask = torch.ones(views, dtype=torch.bool)
        mask[-1] = views == 1 or bool(rng.integers(2))
        out.append(EngineInput(
            images=img, image_masks=mask,
            tokens=torch.from_numpy(rng.integers(0, CFG.vocab_size, n_tokens)),
            token_mask=torch.ones(n_tokens, dtype=torch.bool),
            state=torch.from_numpy(rng.normal(0, 0.3, CFG.max_state_dim).astype(np.float32)),
            noise=torch.from_numpy(rng.normal(0, 1, (CFG.chunk_size, CFG.max_action_dim)).astype(np.float32))))
    return out


def test_model_pixels_is_the_documented_map_and_leaves_floats_alone():
    q = torch.arange(256, dtype=torch.uint8)
    want = q.numpy().astype(np.float32) * np.float32(2.0 / 255.0) - np.float32(1.0)
    np.testing.assert_array_equal(model_pixels(q).numpy(), want)
    assert model_pixels(q)[0] == -1.0 and model_pixels(q)[-1] == 1.0
    f = torch.rand(3)
    assert model_pixels(f) is f


def test_byte_batch_equals_the_float_batch_bit_for_bit():
    a = collate(_inputs(True), CFG, "cpu", torch.float32, num_views=CFG.max_views)
    b = collate(_inputs(False), CFG, "cpu", torch.float32, num_views=CFG.max_views)
    assert a.images.dtype == torch.float32
    assert torch.equal(a.images, b.images)
    # Missing view slots are +0 exactly, as for float inputs (not -1 from a zero byte).
    assert (a.images[0, 1:] == 0).all() and not torch.signbit(a.images[0, 1:]).any()


def test_byte_and_float_inputs_give_the_same_actions():
    eng = Pi0Engine(CFG, seed=1)
    got = eng.infer(_inputs(True, seed=4))
    ref = eng.infer(_inputs(False, seed=4))
    for g, r in zip(got, ref):
        assert torch.equal(g.actions, r.actions) and torch.equal(g.updates, r.updates)


def test_a_mixed_batch_is_scaled_per_input():
    mixed = [_inputs(True, seed=2)[0], _inputs(False, seed=2)[1]]
    a = collate(mixed, CFG, "cpu", torch.float32)
    b = collate(_inputs(False, seed=2)[:2], CFG, "cpu", torch.float32)
    assert torch.equal(a.images, b.images)


def test_other_integer_images_are_refused():
    bad = _inputs(True)[0]
    bad.images = bad.images.to(torch.int16)
    with pytest.raises(EngineInputError, match="^images"):
        bad.validate(CFG)
