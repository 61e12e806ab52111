"""Plain data crossing the engine boundary: model sizes, one robot's input, one robot's output.

Shapes follow LeRobot's PI0 (lerobot 0.6.1 `modeling_pi0.py`): images in [-1, 1] at the vision
tower's resolution, right-padded prompt tokens with a mask, state and actions zero-padded to
`max_state_dim` / `max_action_dim` and in the policy's normalised space.
"""
from __future__ import annotations

import dataclasses
from dataclasses import dataclass, field
from typing import Optional, Tuple, Union

import numpy as np
import torch


class EngineInputError(ValueError):
    """An observation the engine cannot run; the message names the field and what was expected."""


@dataclass(frozen=True)
class GemmaSpec:
    """One Gemma decoder stack (the PaliGemma language model or the action expert)."""

    width: int
    depth: int
    mlp_dim: int
    num_heads: int
    num_kv_heads: int
    head_dim: int


@dataclass(frozen=True)
class VisionSpec:
    """SigLIP vision tower; `image_size // patch_size` squared is the number of image tokens."""

    width: int
    depth: int
    mlp_dim: int
    num_heads: int
    patch_size: int = 14
    image_size: int = 224

    @property
    def num_tokens(self) -> int:
        return (self.image_size // self.patch_size) ** 2


_GEMMA_2B = GemmaSpec(width=2048, depth=18, mlp_dim=16384, num_heads=8, num_kv_heads=1, head_dim=256)
_GEMMA_300M = GemmaSpec(width=1024, depth=18, mlp_dim=4096, num_heads=8, num_kv_heads=1, head_dim=256)
_SO400M = VisionSpec(width=1152, depth=27, mlp_dim=4304, num_heads=16, patch_size=14, image_size=224)


@dataclass(frozen=True)
class Pi0Config:
    """Sizes and constants of a pi0-family model. Build one with `Pi0Config.preset(name)`."""

    vlm: GemmaSpec
    expert: GemmaSpec
    vision: VisionSpec
    # Which member of the family: "pi0" (state token, action-time MLP) or "pi05" (the state is
    # written into the prompt as text, the flow time enters the expert through adaptive
    # RMSNorm). Read from the checkpoint's config.json `type`, never chosen by a flag.
    policy: str = "pi0"
    vocab_size: int = 257152
    chunk_size: int = 50
    max_state_dim: int = 32
    max_action_dim: int = 32
    num_steps: int = 10
    # Sin-cos time embedding periods (LeRobot PI0Config.min_period / max_period).
    min_period: float = 4e-3
    max_period: float = 4.0
    rms_eps: float = 1e-6
    layer_norm_eps: float = 1e-6
    rope_theta: float = 10000.0
    # How the Euler loop's flow times are formed. "accumulate": t starts at 1.0 and t += dt in
    # float32 (openpi JAX, LeRobot <= 0.3.x); "multiply": t = 1.0 + step * dt in float64, then
    # float32 (openpi PyTorch, LeRobot >= 0.4). They differ in the last float32 bits from step 2.
    time_schedule: str = "accumulate"
    # RoPE angle formula, float32: "divide" = pos / 10000**(2i/d) (openpi, LeRobot <= 0.3.x);
    # "multiply" = pos * (1 / 10000**(2i/d)) (transformers' Gemma rotary, LeRobot >= 0.4).
    rope_style: str = "divide"
    # Upper bounds used to size static buffers and RoPE tables; inputs beyond them are rejected.
    max_views: int = 3
    max_tokens: int = 256

    PRESETS = ("tiny", "tiny_mqa", "pi0", "pi0_2layer", "pi0_1layer")
    POLICIES = ("pi0", "pi05")

    @staticmethod
    def preset(name: str, **overrides) -> "Pi0Config":
        """Named sizes. `tiny` is for tests; `pi0` is the published model; `pi0_2layer` keeps the
        real widths with 2 layers per tower (benchmarks). Keyword overrides replace fields."""
        if name == "pi0":
            cfg = Pi0Config(vlm=_GEMMA_2B, expert=_GEMMA_300M, vision=_SO400M)
        elif name in ("pi0_2layer", "pi0_1layer"):
            d = 2 if name == "pi0_2layer" else 1
            cfg = Pi0Config(
                vlm=dataclasses.replace(_GEMMA_2B, depth=d),
                expert=dataclasses.replace(_GEMMA_300M, depth=d),
                vision=dataclasses.replace(_SO400M, depth=d),
            )
        elif name in ("tiny", "tiny_mqa"):
            # Several query heads per KV head (like pi0's 8:1) but small enough for CI; tiny_mqa
            # uses pi0's exact 8:1 head layout. Vocabulary stays small: the real one is 257152.
            heads, kv = (4, 2) if name == "tiny" else (8, 1)
            cfg = Pi0Config(
                vlm=GemmaSpec(width=64, depth=2, mlp_dim=128, num_heads=heads, num_kv_heads=kv, head_dim=16),
                expert=GemmaSpec(width=32, depth=2, mlp_dim=64, num_heads=heads, num_kv_heads=kv, head_dim=16),
                vision=VisionSpec(width=32, depth=2, mlp_dim=64, num_heads=2, patch_size=14, image_size=56),
                vocab_size=1024,
                chunk_size=8,
                max_state_dim=8,
                max_action_dim=8,
                max_tokens=64,
            )
        else:
            raise ValueError(f"unknown preset {name!r}; known presets: {', '.join(Pi0Config.PRESETS)}")
        return dataclasses.replace(cfg, **overrides) if overrides else cfg

    def validate(self) -> None:
        if self.vlm.num_kv_heads != self.expert.num_kv_heads or self.vlm.head_dim != self.expert.head_dim:
            raise ValueError(
                "the action expert attends to the VLM's KV cache, so num_kv_heads and head_dim must match: "
                f"vlm {self.vlm.num_kv_heads}x{self.vlm.head_dim}, expert {self.expert.num_kv_heads}x{self.expert.head_dim}"
            )
        for name, spec in (("vlm", self.vlm), ("expert", self.expert)):
            if spec.num_heads % spec.num_kv_heads:
                raise ValueError(f"{name}: num_heads {spec.num_heads} not a multiple of num_kv_heads {spec.num_kv_heads}")
        if self.vision.width % self.vision.num_heads:
            raise ValueError(f"vision width {self.vision.width} not divisible by {self.vision.num_heads} heads")
        if self.policy not in self.POLICIES:
            raise ValueError(f"policy {self.policy!r}: expected one of {', '.join(self.POLICIES)}")
        if self.time_schedule not in ("accumulate", "multiply"):
            raise ValueError(f"time_schedule {self.time_schedule!r}: expected 'accumulate' or 'multiply'")
        if self.rope_style not in ("divide", "multiply"):
            raise ValueError(f"rope_style {self.rope_style!r}: expected 'divide' or 'multiply'")
        if self.expert.width % 2:
            raise ValueError("the sin-cos time embedding needs an even expert width")

    @property
    def max_prefix_len(self) -> int:
        return self.max_views * self.vision.num_tokens + self.max_tokens

    @property
    def dt(self) -> float:
        return -1.0 / self.num_steps

    def step_times(self) -> list[float]:
        """Float32 flow time of each Euler step, formed as `time_schedule` says."""
        if self.time_schedule == "multiply":
            return [float(np.float32(1.0 + s * self.dt)) for s in range(self.num_steps)]
        if self.time_schedule != "accumulate":
            raise ValueError(f"time_schedule {self.time_schedule!r}: expected 'accumulate' or 'multiply'")
        t, dt, out = np.float32(1.0), np.float32(self.dt), []
        for _ in range(self.num_steps):
            out.append(float(t))
            t = np.float32(t + dt)
        return out


@dataclass
class EngineInput:
    """One robot's observation, already preprocessed (resized, normalised, tokenised, padded).

    images: uint8 [V, 3, S, S] camera pixels (as the server sends them; the engine's collation
        scales them to [-1, 1] once) or float [V, 3, S, S] already in [-1, 1] (training,
        reference tests); S = config.vision.image_size, 1 <= V <= max_views. Or a tuple of V
        raw frames, uint8 [3, H, W] RGB of any size each (a LeRobot checkpoint's cameras): the
        collation resizes them as LeRobot does (engine.camera_frames).
    image_masks: bool [V]; False marks a missing camera (its tokens are masked out).
    tokens: int64 [L]; token_mask: bool [L] (False = padding).
    state: float32 [max_state_dim], normalised and zero padded.
    noise: optional float32 [chunk_size, max_action_dim]; drawn from N(0, 1) when absent.
    rtc: optional real-time chunking guide (engine.rtc.RtcGuide): denoise this chunk so that it
        continues the previous one (docs/rtc.md); None: the ordinary sampler, unchanged.
    """

    images: Union[torch.Tensor, Tuple[torch.Tensor, ...]]
    image_masks: torch.Tensor
    tokens: torch.Tensor
    token_mask: torch.Tensor
    state: torch.Tensor
    noise: Optional[torch.Tensor] = None
    rtc: Optional[object] = None  # engine.rtc.RtcGuide (not imported here: rtc.py imports this module)

    def validate(self, config: Pi0Config) -> None:
        """Raise EngineInputError naming the first field that does not fit `config`."""
        s = config.vision.image_size
        if isinstance(self.images, tuple):
            from physai_ros.engine.camera_frames import check_frames

            why = check_frames(self.images, config.max_views)
            if why is not None:
                raise EngineInputError(f"images: {why}")
        else:
            _expect(self.images, "images", 4, lambda t: t.dtype == torch.uint8 or t.is_floating_point())
            if not 1 <= len(self.images) <= config.max_views or tuple(self.images.shape[1:]) != (3, s, s):
                raise EngineInputError(f"images: expected [V, 3, {s}, {s}] with 1 <= V <= {config.max_views}, "
                                       f"got {list(self.images.shape)}")
        v = len(self.images)
        _expect(self.image_masks, "image_masks", 1, lambda t: t.dtype == torch.bool, [v])
        if not bool(self.image_masks.any()):
            raise EngineInputError("image_masks: at least one camera view must be present")
        _expect(self.tokens, "tokens", 1, lambda t: t.dtype in (torch.int64, torch.int32))
        n = self.tokens.shape[0]
        if not 1 <= n <= config.max_tokens:
            raise EngineInputError(f"tokens: expected 1..{config.max_tokens} tokens, got {n}")
        _expect(self.token_mask, "token_mask", 1, lambda t: t.dtype == torch.bool, [n])
        valid = self.tokens[self.token_mask]
        if valid.numel() and (int(valid.min()) < 0 or int(valid.max()) >= config.vocab_size):
            raise EngineInputError(f"tokens: ids must lie in [0, {config.vocab_size}), got {int(valid.min())}..{int(valid.max())}")
        _expect(self.state, "state", 1, torch.is_floating_point, [config.max_state_dim])
        if self.noise is not None:
            _expect(self.noise, "noise", 2, torch.is_floating_point, [config.chunk_size, config.max_action_dim])
        for name in ("images", "state", "noise"):
            t = getattr(self, name)
            if isinstance(t, tuple):
                continue  # bytes are always finite
            if t is not None and not bool(torch.isfinite(t).all()):
                raise EngineInputError(f"{name}: contains NaN or Inf")
        if self.rtc is not None:
            # Any object with RtcGuide's validate(config) (engine.rtc imports this module, so the
            # class is not imported here); RtcGuide.validate checks every field.
            if not callable(getattr(self.rtc, "validate", None)):
                raise EngineInputError(f"rtc: expected an RtcGuide or None, got {type(self.rtc).__name__}")
            self.rtc.validate(config)


def _expect(t, name: str, ndim: int, dtype_ok, shape: Optional[list] = None) -> None:
    if not isinstance(t, torch.Tensor):
        raise EngineInputError(f"{name}: expected a torch.Tensor, got {type(t).__name__}")
    if t.ndim != ndim or not dtype_ok(t):
        raise EngineInputError(f"{name}: expected a {ndim}-d tensor of the right dtype, got {list(t.shape)} {t.dtype}")
    if shape is not None and list(t.shape) != shape:
        raise EngineInputError(f"{name}: expected shape {shape}, got {list(t.shape)}")


@dataclass
class EngineOutput:
    """One robot's sampled chunk.

    actions: float32 [chunk_size, max_action_dim], normalised space (unpad / unnormalise outside).
    updates: float32 [num_steps, chunk_size, max_action_dim], each Euler step's dt * v, so that
      noise + updates.sum(0) == actions (up to rounding). Horizon policies read these.
    """

    actions: torch.Tensor
    updates: torch.Tensor
    timings_ms: dict = field(default_factory=dict)


@dataclass
class PrefixCache:
    """What the action expert reads, computed once per observation batch.

    keys / values: one tensor per VLM layer, [B, T, num_kv_heads, head_dim] (the layout of
      physai_ros.kernels.ops), RoPE applied to the keys. T covers the VLM prefix (image tokens of every view slot, then prompt tokens). The
      state is not part of it, so a newer state (or force sample) can be denoised against an
      older cache (streaming).
    pad: bool [B, T], False where a key is padding (missing camera, padded prompt).
    next_pos: int64 [B], number of valid prefix tokens = RoPE position of the state token.
    """

    keys: list
    values: list
    pad: torch.Tensor
    next_pos: torch.Tensor

    @property
    def batch_size(self) -> int:
        return int(self.pad.shape[0])
