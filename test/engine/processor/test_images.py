"""Tokenizer, letterboxing and normalisation."""
import json

import numpy as np
import pytest
import torch

from physai_ros.config.fleet import load_fleet, tokenizer_path
from physai_ros.engine.batching import model_pixels
from physai_ros.engine.processor.images import image_to_rgb, letterbox, to_model_pixels
from physai_ros.engine.processor.normalizer import Normalizer
from physai_ros.engine.processor.tokenizer import PromptTokenizer, build_default_tokenizer


@pytest.fixture(scope="module")
def tok():
    return PromptTokenizer(tokenizer_path(load_fleet()), max_len=16)


def test_shipped_tokenizer_round_trips_prompts_and_pads(tok):
    enc = tok.encode("Pick up the red cube")
    assert enc.tokens.shape == (16,) and enc.tokens.dtype == np.int64
    n = int(enc.mask.sum())
    assert enc.mask[:n].all() and not enc.mask[n:].any() and (enc.tokens[n:] == tok.pad_id).all()
    assert tok.decode(enc.tokens, enc.mask).strip() == "pick up the red cube"
    # Words outside the training corpus still encode (byte-level), never to an unknown token.
    odd = tok.encode("zebra ✓")
    assert tok.decode(odd.tokens, odd.mask).strip() == "zebra ✓"
    assert enc.tokens.max() < tok.vocab_size


def test_different_prompts_give_different_tokens_and_long_ones_truncate(tok):
    a, b = tok.encode("wipe the table"), tok.encode("open the drawer")
    assert not np.array_equal(a.tokens, b.tokens)
    long = tok.encode(" ".join(["pick up the cube"] * 20))
    assert long.truncated and long.mask.all()


def test_shipped_tokenizer_matches_builder(tok):
    fresh = build_default_tokenizer()
    assert fresh.get_vocab() == tok._tok.get_vocab()


def test_missing_tokenizer_file_is_a_clear_error(tmp_path):
    with pytest.raises(FileNotFoundError, match="tokenizer file not found"):
        PromptTokenizer(tmp_path / "nope.json", 8)


def test_letterbox_keeps_aspect_ratio_and_pads_black():
    img = np.full((480, 640, 3), 200, np.uint8)
    out = letterbox(img, 224)
    assert out.shape == (224, 224, 3)
    # 640 -> 224 wide, 480 -> 168 high: 28 black rows above and below.
    assert (out[:28] == 0).all() and (out[-28:] == 0).all()
    assert (out[28:196] == 200).all()
    tall = letterbox(np.full((100, 50, 3), 9, np.uint8), 224)
    assert (tall[:, :56] == 0).all() and (tall[:, 56:168] == 9).all()


def test_model_pixels_layout_range_and_encodings():
    rgb = np.zeros((2, 2, 3), np.uint8)
    rgb[..., 0] = 255
    out = to_model_pixels(rgb, 2)
    assert out.shape == (3, 2, 2) and out.dtype == np.uint8  # bytes until the engine collates
    assert (out[0] == 255).all() and (out[1:] == 0).all()
    scaled = model_pixels(torch.from_numpy(out))  # the engine's input stage: [-1, 1], float32
    assert scaled.dtype == torch.float32
    np.testing.assert_allclose(scaled[0].numpy(), 1.0)
    np.testing.assert_allclose(scaled[1:].numpy(), -1.0)
    grid = torch.arange(256, dtype=torch.uint8)
    expected = grid.numpy().astype(np.float32) * np.float32(2.0 / 255.0) - np.float32(1.0)
    np.testing.assert_array_equal(model_pixels(grid).numpy(), expected)  # exactly q*(2/255)-1
    bgr = rgb[..., ::-1].copy()
    np.testing.assert_array_equal(image_to_rgb(bgr, "bgr8"), rgb)
    mono = np.full((2, 2, 1), 7, np.uint8)
    assert (image_to_rgb(mono, "mono8") == 7).all() and image_to_rgb(mono, "mono8").shape == (2, 2, 3)
    with pytest.raises(ValueError, match="unsupported image encoding"):
        image_to_rgb(rgb, "yuv422")


def test_normalizer_identity_without_stats_and_round_trip_with_stats(tmp_path):
    state = np.array([1.0, 2.0, 3.0], np.float32)
    ident = Normalizer.from_file(None)
    np.testing.assert_array_equal(ident.normalize_state(state, 5), [1, 2, 3, 0, 0])
    p = tmp_path / "stats.json"
    p.write_text(json.dumps({"state": {"mean": [1, 1, 1], "std": [2, 2, 2]},
                             "action": {"mean": [10, 20], "std": [0.5, 4]}}))
    n = Normalizer.from_file(p)
    np.testing.assert_allclose(n.normalize_state(state, 4), [0, 0.5, 1, 0], atol=1e-6)
    acts = np.array([[0.0, 0.0, 9.0], [2.0, -1.0, 9.0]], np.float32)
    np.testing.assert_allclose(n.unnormalize_actions(acts, 2), [[10, 20], [11, 16]], atol=1e-5)
    with pytest.raises(ValueError, match="at most 2"):
        n.normalize_state(state, 2)
