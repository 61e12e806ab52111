"""Engine inputs like the server builds them, for the worker tests."""
import numpy as np
import torch

from physai_ros.engine.types import EngineInput


def make_inputs(cfg, n, seed=0, on_grid=True, noise=True, views=None, tokens=None):
    """Inputs as the server builds them: uint8 camera pixels (on_grid) or arbitrary floats in
    [-1, 1]; view counts and prompt lengths vary per robot unless given."""
    rng = np.random.default_rng(seed)
    s = cfg.vision.image_size
    out = []
    for i in range(n):
        v = views or 1 + i % cfg.max_views
        L = tokens or 5 + 3 * i
        if on_grid:  # camera bytes, as the server's action runner prepares them
            img = rng.integers(0, 256, (v, 3, s, s), dtype=np.uint8)
        else:
            img = rng.uniform(-1, 1, (v, 3, s, s)).astype(np.float32)
        mask = np.ones(v, bool)
        if v > 1:
            mask[-1] = bool(i % 2)  # a missing camera now and then
        tok = rng.integers(0, cfg.vocab_size, L)
        tmask = np.ones(L, bool)
        tmask[L - 2:] = False  # right padding
        out.append(EngineInput(
            images=torch.from_numpy(img), image_masks=torch.from_numpy(mask),
            tokens=torch.from_numpy(tok), token_mask=torch.from_numpy(tmask),
            state=torch.from_numpy(rng.normal(0, 0.3, cfg.max_state_dim).astype(np.float32)),
            noise=(torch.from_numpy(rng.normal(0, 1, (cfg.chunk_size, cfg.max_action_dim)).astype(np.float32))
                   if noise and i % 3 != 2 else None)))
    return out


def assert_same_inputs(a, b):
    assert len(a) == len(b)
    for x, y in zip(a, b):
        for name in ("images", "image_masks", "tokens", "token_mask", "state"):
            assert torch.equal(getattr(x, name), getattr(y, name)), name
        assert (x.noise is None) == (y.noise is None)
        if x.noise is not None:
            assert torch.equal(x.noise, y.noise)
