"""Raw camera frames of real sizes and every encoding the server accepts, through the server's own
path (ActionModelRunner.prepare -> engine -> robot units), against LeRobot 0.6.1's own
preprocessor, policy and postprocessor run live on the same pictures (the `.venv-lerobot06`
route). Nothing of LeRobot's is substituted on our side: our frames are the robot's bytes.

The fixture checkpoints (test/fixtures/lerobot_pi05: pi0.5 and 0.6-format pi0, two cameras,
56x56 model images) make the model cheap; the frames are full size: 640x480, 1280x720,
480x640 (portrait), 96x128 beside 128x96 in one robot, and the model's own size (no resize).
Budget (the issue's): model-space actions within 1e-5, robot units within 1e-4 x each joint's
spread (std, or q99 - q01 for quantile normalisation).
"""
from __future__ import annotations

import json
import zlib

import numpy as np
import pytest
import torch
from safetensors.torch import load_file, save_file

from physai_ros.engine import Pi0Engine
from physai_ros.engine.camera_frames import robots_model_pixels
from physai_ros.engine.processor.normalizer import Normalizer
from physai_ros.engine.processor.prompt import prompt_style_for
from physai_ros.engine.processor.tokenizer import PromptTokenizer
from physai_ros.protocol.observation import ImageData, ObservationData
from physai_ros.serving.action_runner import ActionModelRunner

from test_lerobot_pi05_equivalence import FIXTURE, MANIFEST, run_reference

MODEL_TOL = 1e-5
ROBOT_TOL = 1e-4
TASKS = ["pick up the red cube", "open the drawer"]
# (cam0 height x width, cam1 height x width, cam0 encoding, cam1 encoding)
GEOMETRIES = {
    "640x480": ((480, 640), (480, 640), "rgb8", "bgr8"),
    "1280x720_beside_model_size": ((720, 1280), (56, 56), "rgba8", "rgb8"),
    "portrait": ((640, 480), (640, 480), "bgra8", "mono8"),
    "96x128_beside_128x96": ((128, 96), (96, 128), "rgb8", "bgr8"),
}
CHANNELS = {"rgb8": 3, "bgr8": 3, "rgba8": 4, "bgra8": 4, "mono8": 1}


def encode(rgb: np.ndarray, encoding: str) -> np.ndarray:
    """The bytes a camera driver publishes for this RGB picture."""
    alpha = np.full(rgb.shape[:2] + (1,), 255, np.uint8)
    return {"rgb8": rgb, "bgr8": rgb[..., ::-1], "rgba8": np.concatenate([rgb, alpha], -1),
            "bgra8": np.concatenate([rgb[..., ::-1], alpha], -1), "mono8": rgb[..., :1]}[encoding]


def picture(gen: np.random.Generator, hw, encoding: str) -> np.ndarray:
    rgb = gen.integers(0, 256, hw + (3,), dtype=np.uint8)
    return np.repeat(rgb[..., :1], 3, -1) if encoding == "mono8" else rgb  # a mono camera sees grey


def image(rgb: np.ndarray, encoding: str) -> ImageData:
    data = np.ascontiguousarray(encode(rgb, encoding))
    h, w = rgb.shape[:2]
    return ImageData(h, w, encoding, w * CHANNELS[encoding], data.tobytes())


def observation(robot: int, images, state: np.ndarray) -> ObservationData:
    return ObservationData(robot_id=f"robot_{robot}", task_id="t", round_id=1, stamp=0.0, images=tuple(images),
                           state=state, wrench=np.zeros(6, np.float32), wrench_stamp=0.0, prompt=TASKS[robot],
                           exec_phase_start=0.0, actions_remaining=0, control_period=0.1, horizon_policy="",
                           horizon_params=())


def spread(norm: Normalizer) -> np.ndarray:
    act = norm.action
    return {"QUANTILES": lambda: act.q99 - act.q01, "MIN_MAX": lambda: act.max - act.min}.get(
        act.mode, lambda: act.std)()


@pytest.mark.parametrize("geometry", sorted(GEOMETRIES))
@pytest.mark.parametrize("ckpt", ["pi05", "pi0_v06"])
def test_raw_frames_give_lerobots_actions(ckpt, geometry, tmp_path):
    spec = MANIFEST["checkpoints"][ckpt]
    cams = spec["cameras"][:2]  # pi0_v06 has a third camera: missing here, as LeRobot pads it
    (hw0, hw1, enc0, enc1) = GEOMETRIES[geometry]
    gen = np.random.default_rng(zlib.crc32(f"{ckpt} {geometry}".encode()))
    b = len(TASKS)
    pictures = [[picture(gen, hw0, enc0), picture(gen, hw1, enc1)] for _ in range(b)]
    state = gen.uniform(-1, 1, (b, spec["state_dim"])).astype(np.float32) * 3
    noise = torch.from_numpy(gen.standard_normal((b, spec["chunk_size"], spec["max_action_dim"])).astype(np.float32))

    # LeRobot: each camera's RGB frames as its robot path makes them (uint8 -> float32 / 255, CHW).
    lerobot_in = {cam: torch.stack([torch.from_numpy(p[v]).permute(2, 0, 1).float() / 255 for p in pictures])
                  for v, cam in enumerate(cams)}
    save_file({**{k: v.contiguous() for k, v in lerobot_in.items()}, "observation.state": torch.from_numpy(state),
               "noise": noise}, str(tmp_path / "in.safetensors"))
    run_reference("pipeline", "--checkpoint", str(FIXTURE / ckpt), "--inputs", str(tmp_path / "in.safetensors"),
                  "--out", str(tmp_path / "out.safetensors"), "--tasks", json.dumps(TASKS))
    ref = load_file(str(tmp_path / "out.safetensors"))

    # Ours: the robot's bytes in their encodings, through the server's runner and the engine,
    # on the plain and the fast path.
    norm = Normalizer.from_checkpoint(FIXTURE / ckpt)
    assert float(ref["model_actions"].abs().max()) > 0.1  # a real chunk, not zeros
    for fast in (False, True):
        eng = Pi0Engine.from_lerobot_checkpoint(FIXTURE / ckpt, fast=fast)
        style = prompt_style_for(eng.config.policy, eng.checkpoint_format.family)
        runner = ActionModelRunner(eng.config, PromptTokenizer(FIXTURE / "tokenizer" / "tokenizer.json",
                                                               eng.config.max_tokens, verbatim=style.verbatim),
                                   norm, style)
        inputs = []
        for i in range(b):
            obs = observation(i, [image(pictures[i][0], enc0), image(pictures[i][1], enc1)], state[i])
            x = runner.prepare(obs, None)
            assert isinstance(x.images, tuple) and [tuple(f.shape) for f in x.images] == [(3,) + hw0, (3,) + hw1]
            x.noise = noise[i]
            inputs.append(x)
        outs = eng.infer(inputs)
        dim = spec["action_dim"]
        model = torch.stack([o.actions[:, :dim] for o in outs])
        model_err = float((model - ref["model_actions"][..., :dim]).abs().max())
        robot = np.stack([runner.unnormalize(o.actions.numpy(), dim) for o in outs])
        robot_err = np.abs(robot - ref["actions"].numpy()[..., :dim]) / np.maximum(spread(norm), 1e-8)
        print(f"{ckpt} {'fast' if fast else 'plain'} {geometry}: model-space max error {model_err:.2e}, "
              f"robot units {robot_err.max():.2e} x spread")
        assert model_err <= MODEL_TOL
        assert robot_err.max() <= ROBOT_TOL


def test_frames_of_one_size_are_resized_together_without_changing_a_value():
    """Batching frames of equal size across robots (one interpolate call) gives each the values
    it gets alone; a frame at the model's size is only scaled."""
    gen = torch.Generator().manual_seed(0)
    frames = [(torch.randint(0, 256, (3, 48, 64), dtype=torch.uint8, generator=gen),
               torch.randint(0, 256, (3, 56, 56), dtype=torch.uint8, generator=gen)) for _ in range(3)]
    together = robots_model_pixels(frames, 56, "cpu")
    for f, views in zip(frames, together):
        alone = robots_model_pixels([f], 56, "cpu")[0]
        assert torch.equal(views, alone)
        assert torch.equal(views[1], f[1].float() / 255 * 2 - 1)
    boxed = together[0][0]  # 48x64 -> 42x56, rows 7..48: black (-1) above and below
    assert torch.all(boxed[:, :7] == -1) and torch.all(boxed[:, 49:] == -1)
    assert not torch.equal(boxed, torch.round((boxed + 1) * 127.5) / 127.5 - 1)  # not rounded to bytes


def test_a_png_camera_reaches_the_engine_as_the_picture_itself():
    """CompressedImage png (lossless): the robot client's decoding gives the picture's exact bytes,
    so the live comparison above holds for it too. (jpeg is lossy: LeRobot's own decoder of the
    same file was not compared.)"""
    import cv2
    from sensor_msgs.msg import CompressedImage

    from physai_ros.ros.codecs.observation import compressed_image_data

    rgb = picture(np.random.default_rng(5), (120, 160), "rgb8")
    ok, buf = cv2.imencode(".png", rgb[..., ::-1])
    assert ok
    msg = CompressedImage(format="png", data=buf.tobytes())
    eng = Pi0Engine.from_lerobot_checkpoint(FIXTURE / "pi05")
    style = prompt_style_for(eng.config.policy, eng.checkpoint_format.family)
    runner = ActionModelRunner(eng.config, PromptTokenizer(FIXTURE / "tokenizer" / "tokenizer.json",
                                                           eng.config.max_tokens, verbatim=style.verbatim),
                               Normalizer.from_checkpoint(FIXTURE / "pi05"), style)
    spec = MANIFEST["checkpoints"]["pi05"]
    obs = observation(0, [compressed_image_data(msg), image(rgb, "rgb8")], np.zeros(spec["state_dim"], np.float32))
    x = runner.prepare(obs, None)
    assert torch.equal(x.images[0], torch.from_numpy(rgb).permute(2, 0, 1))
    assert torch.equal(x.images[0], x.images[1])
