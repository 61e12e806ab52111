"""The action model's runner: observation -> engine input, engine output -> action chunk.

One runner per model kind (nano-vllm's model runner: prepare inputs, run the engine, finish
outputs). The chunked path (serving.serving_core) and the streaming path (serving.streaming.service)
both prepare their engine inputs here, so one observation becomes the same engine input
whichever path serves it. Components added later (planner, monitor, language) get runners of
their own beside this one, selected by the request's `component`.
"""
from __future__ import annotations

from dataclasses import dataclass
from typing import Any

import numpy as np

from physai_ros.engine.processor.images import image_to_rgb, to_model_pixels
from physai_ros.engine.processor.normalizer import Normalizer
from physai_ros.engine.processor.postprocess import decide_horizon
from physai_ros.engine.processor.prompt import PromptStyle
from physai_ros.engine.processor.tokenizer import PromptTokenizer
from physai_ros.protocol.chunk import STATUS_ERROR, STATUS_OK, STATUS_REFUSED, ActionChunkData
from physai_ros.protocol.observation import ObservationData
from physai_ros.protocol.registration import RobotRegistration
from physai_ros.scheduler.types import ACTION
from physai_ros.serving.starting_noise import StartingNoise
from physai_ros.serving.validation import Refusal, camera_slots


@dataclass(frozen=True)
class HostOutput:
    """One request's engine output on the host: actions float32 [chunk_size, max_action_dim] in
    the model's normalised space, updates float32 [num_steps, chunk_size, max_action_dim]."""

    actions: np.ndarray
    updates: np.ndarray


class ActionModelRunner:
    component = ACTION

    def __init__(self, model_config: Any, tokenizer: PromptTokenizer, normalizer: Normalizer | None = None,
                 prompt_style: PromptStyle | None = None, cameras: tuple[str, ...] = ()):
        if tokenizer.max_len > model_config.max_tokens or tokenizer.vocab_size > model_config.vocab_size:
            raise ValueError(
                f"tokenizer ({tokenizer.vocab_size} ids, {tokenizer.max_len} tokens) does not fit the "
                f"model (vocab {model_config.vocab_size}, max_tokens {model_config.max_tokens})")
        self.model_config = model_config
        self.cameras = cameras  # a LeRobot checkpoint's image features, in the order its model reads them
        self.tokenizer = tokenizer
        self.normalizer = normalizer or Normalizer()
        self.image_size = model_config.vision.image_size
        self.max_state_dim = model_config.max_state_dim
        self.starting_noise = StartingNoise()  # per task (fleet.yaml noise_scale); the server's builder sets it
        # pi0.5 reads the state as text in its prompt: the style follows the model, always.
        self.prompt_style = prompt_style or PromptStyle(
            "lerobot_pi05" if getattr(model_config, "policy", "pi0") == "pi05" else "ours")
        if getattr(model_config, "policy", "pi0") == "pi05" and not self.prompt_style.reads_state:
            raise ValueError(f"a pi0.5 model needs the state in its prompt, not prompt style {self.prompt_style.name!r}")

    # ---- inputs ------------------------------------------------------------------------

    def warm(self, reg: RobotRegistration) -> None:
        """Tokenise the robot's prompt at registration, off the hot path (the result is cached;
        a pi0.5 prompt carries the state, so it is built per observation instead)."""
        if not self.prompt_style.reads_state:
            self.tokenizer.encode(self.prompt_style.text(reg.prompt))

    def tokens(self, task: str, state: np.ndarray):
        """The prompt's tokens for one observation (state in robot units)."""
        style = self.prompt_style
        if not style.reads_state:
            return self.tokenizer.encode(style.text(task))
        normalized = self.normalizer.normalized_state(state)
        enc = self.tokenizer.encode(style.text(task, normalized), cache=False)
        if enc.truncated:
            # The cut would drop "Action: " and the state's tail: a prompt the model never saw.
            raise ValueError(f"prompt: the pi0.5 prompt with the state needs more than {self.tokenizer.max_len} "
                             "tokens (server.model.max_token_len)")
        return enc

    def prepare(self, obs: ObservationData, reg: RobotRegistration) -> Any:
        """The engine input of one observation: the camera views as bytes (the engine scales
        them), the prompt's tokens, the normalised, zero-padded state. ValueError/KeyError on an
        input that cannot be converted (a refusal or an error chunk for that robot only).

        A LeRobot checkpoint's views go as the robot's RGB frames, whatever their size: the
        engine resizes them in float as LeRobot does (engine.camera_frames). Our checkpoints'
        views are letterboxed to uint8 here, the path they were trained on (engine.processor.images)."""
        import torch

        from physai_ros.engine.types import EngineInput

        s = self.image_size
        views = obs.images
        if reg is not None and reg.camera_features:  # into the checkpoint's camera order
            slots = camera_slots(reg.camera_features, len(views), self.cameras)
            if isinstance(slots, str):
                raise ValueError(f"cameras: {slots}")
            views = tuple(views[slots.index(k)] for k in range(len(views)))
        if self.prompt_style.verbatim:
            images = tuple(torch.from_numpy(np.ascontiguousarray(image_to_rgb(im.array(), im.encoding).transpose(2, 0, 1)))
                           for im in views)
        else:
            imgs = np.empty((len(views), 3, s, s), dtype=np.uint8)
            for i, im in enumerate(views):
                to_model_pixels(image_to_rgb(im.array(), im.encoding), s, out=imgs[i])
            images = torch.from_numpy(imgs)
        enc = self.tokens(obs.prompt or reg.prompt, obs.state)
        state = self.normalizer.normalize_state(obs.state, self.max_state_dim)
        noise = self.starting_noise.draw(obs.task_id, self.model_config.chunk_size, self.model_config.max_action_dim)
        return EngineInput(
            images=images, image_masks=torch.ones(len(obs.images), dtype=torch.bool),
            tokens=torch.from_numpy(enc.tokens), token_mask=torch.from_numpy(enc.mask),
            state=torch.from_numpy(state), noise=noise)

    def blank_input(self, views: int = 1) -> Any:
        """A black-frame input of the model's sizes, for warming an engine up."""
        import torch

        from physai_ros.engine.types import EngineInput

        s, n = self.image_size, self.tokenizer.max_len
        return EngineInput(
            images=torch.zeros(views, 3, s, s, dtype=torch.uint8), image_masks=torch.ones(views, dtype=torch.bool),
            tokens=torch.zeros(n, dtype=torch.int64), token_mask=torch.ones(n, dtype=torch.bool),
            state=torch.zeros(self.max_state_dim))

    def warm_up(self, engines: Any, views: int = 1) -> float:
        """One inference per engine on a blank input, so the first robot's first round does not
        pay for lazy initialisation (and miss its SLO). Returns the slowest, s."""
        import time

        blank = self.blank_input(views)
        worst = 0.0
        for engine in engines:
            t0 = time.perf_counter()
            self.execute(engine, [blank])
            worst = max(worst, time.perf_counter() - t0)
        return worst

    @staticmethod
    def execute(engine: Any, inputs: list) -> list:
        import torch

        with torch.inference_mode():
            return engine.infer(inputs)

    # ---- outputs -----------------------------------------------------------------------

    @staticmethod
    def to_host(output: Any) -> "HostOutput":
        """An engine output's tensors as numpy, once per request: the chunk, the horizon policy
        and real-time chunking's memory all read these same arrays."""
        return HostOutput(output.actions.detach().float().cpu().numpy(),
                          output.updates.detach().float().cpu().numpy())

    def unnormalize(self, actions: np.ndarray, action_dim: int) -> np.ndarray:
        """[T, max_action_dim] model actions -> [T, action_dim] in robot units."""
        return self.normalizer.unnormalize_actions(actions, action_dim)

    def finish(self, obs: ObservationData, reg: RobotRegistration, output: Any, instance_id: str,
               queue_ms: float, inference_ms: float) -> ActionChunkData:
        """The chunk a robot receives (output: to_host's arrays): robot-unit actions and the
        horizon its policy chose. A user-supplied horizon policy that fails gives an ERROR chunk
        for that robot only."""
        actions = self.unnormalize(output.actions, reg.action_dim)
        updates = output.updates
        name = obs.horizon_policy or "static"
        params = tuple(obs.horizon_params) if obs.horizon_policy else (actions.shape[0],)
        try:
            decision = decide_horizon(name, params, updates, reg.action_dim)
        except Exception as e:  # a user-supplied policy failing is that robot's problem only
            return self.error(obs, reg, f"horizon policy {name!r} failed: {e}", instance_id)
        return ActionChunkData(
            robot_id=obs.robot_id, task_id=obs.task_id, round_id=obs.round_id, stamp=obs.stamp,
            status=STATUS_OK, joint_names=reg.joint_names, dt=reg.control_period,
            actions=actions, horizon=int(decision.horizon),
            confidence=np.asarray(decision.confidence, dtype=np.float32),
            queue_ms=queue_ms, inference_ms=inference_ms, engine_instance=instance_id)

    @staticmethod
    def error(obs: ObservationData, reg: RobotRegistration | None, msg: str, instance_id: str) -> ActionChunkData:
        return ActionChunkData(robot_id=obs.robot_id, task_id=obs.task_id, round_id=obs.round_id,
                               stamp=obs.stamp, status=STATUS_ERROR, error=msg,
                               joint_names=reg.joint_names if reg else (), engine_instance=instance_id)

    @staticmethod
    def refused(obs: ObservationData, reg: RobotRegistration | None, refusal: Refusal) -> ActionChunkData:
        return ActionChunkData(robot_id=obs.robot_id, task_id=obs.task_id, round_id=obs.round_id,
                               stamp=obs.stamp, status=STATUS_REFUSED, error=str(refusal),
                               joint_names=reg.joint_names if reg else ())
