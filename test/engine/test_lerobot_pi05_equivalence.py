"""pi0.5 and 0.6-format pi0 against LeRobot 0.6.1 (its current release), read from checkpoints as
a user downloads them (config.json, model.safetensors, policy_pre/postprocessor.json and their
normaliser state files).

The committed fixture (test/fixtures/lerobot_pi05/, scripts/make_lerobot_pi05_fixture.py in
.venv-lerobot06) gives LeRobot's chunks for one view, two views, a missing camera and a batch of
three robots with different prompt lengths, plus the full raw-observation -> robot-unit pipeline.
The live tests run LeRobot 0.6.1 itself (scripts/lerobot_reference/reference_pi05.py) on inputs
drawn here, so the comparison is not only against stored numbers. Budget 1e-4 (the issue's),
measured ~1e-6.
"""
from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest
import torch
from safetensors.torch import load_file, save_file

from physai_ros.engine import Pi0Engine
from physai_ros.engine.batching import collate
from physai_ros.engine.camera_frames import robots_model_pixels
from physai_ros.engine.processor.normalizer import Normalizer
from physai_ros.engine.processor.prompt import prompt_style_for
from physai_ros.engine.processor.tokenizer import PromptTokenizer
from physai_ros.engine.types import EngineInput
from physai_ros.serving.action_runner import ActionModelRunner

ROOT = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(ROOT / "scripts" / "lerobot_reference"))
from reference_venvs import venv_python  # noqa: E402  (stdlib only)
FIXTURE = ROOT / "test" / "fixtures" / "lerobot_pi05"
MANIFEST = json.loads((FIXTURE / "manifest.json").read_text())
CASES = load_file(str(FIXTURE / "cases.safetensors"))
TOL = 1e-4
MODEL_CASES = ("one_view", "two_views", "missing_view", "batch3")
CKPTS = ("pi05", "pi0_v06")


def max_err(a, b) -> float:
    return float((torch.as_tensor(a).float() - torch.as_tensor(b).float()).abs().max())


@pytest.fixture(scope="module", params=[(c, fast) for c in CKPTS for fast in (False, True)],
                ids=lambda p: f"{p[0]}-{'fast' if p[1] else 'plain'}")
def engine(request):
    ckpt, fast = request.param
    return ckpt, Pi0Engine.from_lerobot_checkpoint(FIXTURE / ckpt, fast=fast)


def run_cases(eng, prefix: str):
    c = {k[len(prefix) + 1:]: v for k, v in CASES.items() if k.startswith(prefix + ".")}
    b = c["images"].shape[0]
    state = c.get("state", torch.zeros(b, eng.config.max_state_dim))
    cache = eng.model.prefix(c["images"], c["image_masks"], c["tokens"], c["token_mask"])
    actions, updates = eng.model.denoise(cache, state, c["noise"])
    return c, actions, updates


def test_format_policy_and_sizes_come_from_the_files(engine):
    ckpt, eng = engine
    spec = MANIFEST["checkpoints"][ckpt]
    fmt = eng.checkpoint_format
    assert (fmt.policy_type, fmt.family) == (spec["policy_type"], "lerobot>=0.4")
    cfg = eng.config
    assert (cfg.policy, cfg.time_schedule, cfg.rope_style) == (spec["policy_type"], "multiply", "multiply")
    assert cfg.step_times() == pytest.approx(MANIFEST["formulas"]["euler_times_float32"], abs=0)
    sizes = MANIFEST["sizes"]
    assert (cfg.vlm.width, cfg.expert.width, cfg.vlm.num_heads, cfg.vision.num_heads, cfg.vocab_size) == (
        sizes["vlm_width"], sizes["expert_width"], sizes["num_heads"], sizes["vision_heads"], sizes["vocab_size"])
    assert (cfg.chunk_size, cfg.max_state_dim, cfg.max_tokens) == (
        spec["chunk_size"], spec["max_state_dim"], spec["tokenizer_max_length"])


@pytest.mark.parametrize("case", MODEL_CASES)
def test_model_level_cases_match_lerobot(engine, case):
    ckpt, eng = engine
    c, actions, updates = run_cases(eng, f"{ckpt}.{case}")
    assert c["expected_actions"].abs().max() > 0.5
    assert max_err(actions, c["expected_actions"]) <= TOL
    assert max_err(updates, c["expected_updates"]) <= TOL


def test_batch_through_the_engine_api_equals_robots_alone(engine):
    """Pi0Engine.infer collates the robots itself (its own padding of prompts and views)."""
    ckpt, eng = engine
    c = {k.split(".", 2)[2]: v for k, v in CASES.items() if k.startswith(f"{ckpt}.batch3.")}
    inputs = []
    for i in range(3):
        n = int(c["token_mask"][i].sum())
        inputs.append(EngineInput(images=c["images"][i], image_masks=c["image_masks"][i], tokens=c["tokens"][i, :n],
                                  token_mask=c["token_mask"][i, :n],
                                  state=c["state"][i] if "state" in c else torch.zeros(eng.config.max_state_dim),
                                  noise=c["noise"][i]))
    outs = eng.infer(inputs)
    assert max_err(torch.stack([o.actions for o in outs]), c["expected_actions"]) <= TOL


def test_the_variant_is_not_cosmetic():
    """Running the 0.6-format pi0 with LeRobot 0.3's sampler variant (forced) moves the chunk by
    ~1e-5: small enough to pass a loose test, which is why the variant comes from the files and a
    contradicting override is refused."""
    from physai_ros.engine.checkpoint.format import CheckpointError

    with pytest.raises(CheckpointError, match="force_variant"):
        Pi0Engine.from_lerobot_checkpoint(FIXTURE / "pi0_v06", time_schedule="accumulate")
    wrong = Pi0Engine.from_lerobot_checkpoint(FIXTURE / "pi0_v06", time_schedule="accumulate",
                                              rope_style="divide", force_variant=True)
    c, actions, _ = run_cases(wrong, "pi0_v06.batch3")
    assert 1e-6 < max_err(actions, c["expected_actions"])


# ---------------------------------------------------------------- full pipeline: robot units

def _quantised_hwc(img_chw: torch.Tensor) -> np.ndarray:
    """A [0, 1] float camera frame as the robot sends it: uint8 HWC."""
    return np.clip(np.round(img_chw.permute(1, 2, 0).numpy() * 255.0), 0, 255).astype(np.uint8)


@pytest.mark.parametrize("ckpt,case", [("pi05", "pipe"), ("pi05", "pipe_one_camera"), ("pi0_v06", "pipe")])
def test_raw_observation_to_robot_unit_actions(ckpt, case):
    """What the server does with a raw observation, step by step against LeRobot's processors:
    normalised state, the prompt's tokens (pi0.5: state bins in the text), the letterboxed camera
    frames, then the chunk un-normalised to robot units."""
    spec = MANIFEST["checkpoints"][ckpt]
    info = MANIFEST["cases"][f"{ckpt}.{case}"]
    c = {k[len(ckpt) + len(case) + 2:]: v for k, v in CASES.items() if k.startswith(f"{ckpt}.{case}.")}
    eng = Pi0Engine.from_lerobot_checkpoint(FIXTURE / ckpt)
    norm = Normalizer.from_checkpoint(FIXTURE / ckpt)
    style = prompt_style_for(eng.config.policy, eng.checkpoint_format.family)
    tok = PromptTokenizer(FIXTURE / "tokenizer" / "tokenizer.json", eng.config.max_tokens, verbatim=style.verbatim)
    runner = ActionModelRunner(eng.config, tok, norm, style)
    raw_state = c["observation.state"].numpy()
    b = raw_state.shape[0]
    size = eng.config.vision.image_size
    inputs = []
    for i in range(b):
        ns = norm.normalize_state(raw_state[i], raw_state.shape[1])
        np.testing.assert_allclose(ns, c["expected_normalized_state"][i].numpy(), rtol=1e-6, atol=1e-6)
        enc = runner.tokens(info["tasks"][i], raw_state[i])
        n = int(c["expected_token_mask"][i].sum())
        assert enc.tokens[:n].tolist() == c["expected_tokens"][i, :n].tolist()
        assert int(enc.mask.sum()) == n
        # The robot's uint8 frame resized as the engine does (LeRobot's float resize-with-pad)
        # against LeRobot's of the fixture's float frame: only the frame's quantisation (half a
        # byte, x2 in model space) tells them apart. Exact on bytes: test_lerobot_camera_frames.
        for v, cam in enumerate(info["camera_order_in_model"]):
            key = f"observation.{cam.split('observation.', 1)[1]}"
            if key not in c:
                assert not bool(c["expected_model_image_masks"][i, v])
                continue
            frame = torch.from_numpy(_quantised_hwc(c[key][i])).permute(2, 0, 1).contiguous()
            ours = robots_model_pixels([(frame,)], size, "cpu")[0][0]
            assert max_err(ours, c["expected_model_images"][i, v]) <= 1 / 255 + 1e-6
        inputs.append(EngineInput(
            images=c["expected_model_images"][i], image_masks=c["expected_model_image_masks"][i],
            tokens=torch.from_numpy(enc.tokens), token_mask=torch.from_numpy(enc.mask),
            state=torch.from_numpy(norm.normalize_state(raw_state[i], eng.config.max_state_dim)),
            noise=c["noise"][i]))
    outs = eng.infer(inputs)
    model = torch.stack([o.actions[:, :spec["action_dim"]] for o in outs])
    assert max_err(model, c["expected_model_actions"]) <= TOL
    robot = np.stack([runner.unnormalize(o.actions.numpy(), spec["action_dim"]) for o in outs])
    expected = c["expected_actions"].numpy()
    act = norm.action
    span = (act.q99 - act.q01) if act.mode == "QUANTILES" else (act.max - act.min) if act.mode == "MIN_MAX" else act.std
    assert np.all(np.abs(robot - expected) <= TOL * np.maximum(span, 1e-8) + 1e-6)


# ---------------------------------------------------------------- live LeRobot 0.6.1

def run_reference(*args: str) -> str:
    py = venv_python("0.6.1")
    assert py.exists(), (f"LeRobot 0.6.1 reference environment missing ({py}): `make test` builds it with "
                         "scripts/lerobot_reference/setup_venv06.sh (docs/lerobot_reference.md)")
    env = {k: v for k, v in os.environ.items() if not k.startswith(("PYTHON", "VIRTUAL_ENV"))}
    env["OMP_NUM_THREADS"] = "1"
    proc = subprocess.run([str(py), str(ROOT / "scripts" / "lerobot_reference" / "reference_pi05.py"), *args],
                          capture_output=True, text=True, timeout=600, env=env, cwd=ROOT)
    assert proc.returncode == 0, proc.stdout[-2000:] + proc.stderr[-4000:]
    return proc.stdout


@pytest.mark.parametrize("ckpt", CKPTS)
def test_live_lerobot_on_fresh_inputs(ckpt, tmp_path):
    """New random robots (three views, one missing; prompt lengths 3..40) sampled by LeRobot
    0.6.1 now, and by our plain and fast paths."""
    gen = torch.Generator().manual_seed(123)
    eng_fast = Pi0Engine.from_lerobot_checkpoint(FIXTURE / ckpt)
    eng_plain = Pi0Engine.from_lerobot_checkpoint(FIXTURE / ckpt, fast=False)
    cfg = eng_fast.config
    views = len(MANIFEST["checkpoints"][ckpt]["cameras"])
    lengths = [3, 40, 17, 9]
    b, s, L = len(lengths), cfg.vision.image_size, max(lengths)
    images = torch.rand(b, views, 3, s, s, generator=gen) * 2 - 1
    masks = torch.ones(b, views, dtype=torch.bool)
    masks[1, -1] = False
    images[1, -1] = -1.0
    tokens = torch.zeros(b, L, dtype=torch.int64)
    tmask = torch.zeros(b, L, dtype=torch.bool)
    for i, n in enumerate(lengths):
        tokens[i, :n] = torch.randint(3, cfg.vocab_size, (n,), generator=gen)
        tmask[i, :n] = True
    noise = torch.randn(b, cfg.chunk_size, cfg.max_action_dim, generator=gen)
    state = torch.randn(b, cfg.max_state_dim, generator=gen)
    inputs = {"images": images, "image_masks": masks, "tokens": tokens, "token_mask": tmask, "noise": noise}
    if ckpt == "pi0_v06":
        inputs["state"] = state
    save_file(inputs, str(tmp_path / "in.safetensors"))
    run_reference("sample", "--checkpoint", str(FIXTURE / ckpt), "--inputs", str(tmp_path / "in.safetensors"),
                  "--out", str(tmp_path / "out.safetensors"))
    ref = load_file(str(tmp_path / "out.safetensors"))
    assert ref["actions"].abs().max() > 0.5
    for eng in (eng_plain, eng_fast):
        batch = collate([EngineInput(images=images[i], image_masks=masks[i], tokens=tokens[i, :n],
                                     token_mask=tmask[i, :n], state=state[i], noise=noise[i])
                         for i, n in enumerate(lengths)], cfg, "cpu", torch.float32)
        actions, updates = eng.model.denoise(eng.model.prefix(batch.images, batch.image_masks, batch.tokens,
                                                              batch.token_mask), batch.state, batch.noise)
        assert max_err(actions, ref["actions"]) <= TOL
        assert max_err(updates, ref["updates"]) <= TOL
