"""EngineInput / EngineOutput / worker status <-> physai_ros_interfaces messages.

Pure data conversion, no rclpy node: both ends (engine_worker and the server's proxy) and the
tests use it. Decoding checks every size against the message's own counts and the model config
and raises BadRequest / BadResult naming the field, so a malformed message becomes an error
result instead of a crash or a silently misaligned batch.

Arrays are filled through array.array built from bytes: assigning numpy arrays or lists to
ROS sequence fields runs a per-element Python check (tens of ms for one image).
"""
from __future__ import annotations

import array
import dataclasses
import json
from dataclasses import dataclass
from typing import Optional, Sequence

import numpy as np
import torch
from physai_ros_interfaces.msg import EngineBatchRequest, EngineBatchResult, EngineWorkerStatus

from physai_ros.engine.batching import model_pixels, model_space_views
from physai_ros.engine.types import (EngineInput, EngineInputError, EngineOutput, GemmaSpec,
                                     Pi0Config, VisionSpec)
from physai_ros.scheduler.types import LatencyProfile

class BadRequest(EngineInputError):
    """An EngineBatchRequest that cannot be turned into engine inputs; the message names why."""


class BadResult(ValueError):
    """An EngineBatchResult that does not fit the request it answers."""


# ---- model config ------------------------------------------------------------------------

def config_to_json(config: Pi0Config) -> str:
    return json.dumps(dataclasses.asdict(config), sort_keys=True)


def config_from_json(text: str) -> Pi0Config:
    try:
        d = json.loads(text)
        return Pi0Config(vlm=GemmaSpec(**d.pop("vlm")), expert=GemmaSpec(**d.pop("expert")),
                         vision=VisionSpec(**d.pop("vision")), **d)
    except (ValueError, TypeError, KeyError, AttributeError) as e:
        raise ValueError(f"model_config: not a Pi0Config JSON ({type(e).__name__}: {e})") from e


# ---- helpers -------------------------------------------------------------------------------

def _f32(x) -> array.array:
    return array.array("f", np.ascontiguousarray(x, dtype=np.float32).tobytes())


def _u32(xs: Sequence[int]) -> array.array:
    return array.array("I", [int(x) for x in xs])


def _np(field, dtype) -> np.ndarray:
    return np.frombuffer(field, dtype=dtype) if len(field) else np.zeros(0, dtype)


def _check_len(name: str, got: int, want: int) -> None:
    if got != want:
        raise BadRequest(f"{name}: expected {want} values, got {got}")


# ---- requests ------------------------------------------------------------------------------

MAX_FRAME_SIDE = 8192  # a camera frame's height or width, at most (a bound on what a request allocates)


def _frames(m: EngineBatchRequest, n_views: int) -> tuple:
    """IMAGES_FRAMES: every view's raw frame, uint8 [3, h, w], in item-major order."""
    _check_len("frame_heights", len(m.frame_heights), n_views)
    _check_len("frame_widths", len(m.frame_widths), n_views)
    sizes = [(int(h), int(w)) for h, w in zip(m.frame_heights, m.frame_widths)]
    if any(not (1 <= h <= MAX_FRAME_SIDE and 1 <= w <= MAX_FRAME_SIDE) for h, w in sizes):
        raise BadRequest(f"frame_heights/frame_widths: expected 1..{MAX_FRAME_SIDE} each, got {sizes}")
    _check_len("images_u8", len(m.images_u8), sum(3 * h * w for h, w in sizes))
    data, out, at = _np(m.images_u8, np.uint8), [], 0
    for h, w in sizes:
        out.append(torch.from_numpy(data[at:at + 3 * h * w].reshape(3, h, w).copy()))
        at += 3 * h * w
    return tuple(out)


def encode_request(inputs: Sequence[EngineInput], config: Pi0Config, batch_id: str,
                   instance_id: str = "") -> EngineBatchRequest:
    """Validate the inputs against `config` (EngineInputError naming the robot and field, as the
    local engine raises) and pack them into one request."""
    if not isinstance(inputs, (list, tuple)) or not inputs:
        raise EngineInputError("empty batch: expected a non-empty list of EngineInput")
    for i, inp in enumerate(inputs):
        if not isinstance(inp, EngineInput):
            raise EngineInputError(f"robot {i}: expected EngineInput, got {type(inp).__name__}")
        try:
            inp.validate(config)
        except EngineInputError as e:
            raise EngineInputError(f"robot {i}: {e}") from e
        if getattr(inp, "rtc", None) is not None:  # refused rather than silently dropped
            raise EngineInputError(f"robot {i}: rtc: real-time chunking guides are not carried to engine workers")
    m = EngineBatchRequest()
    m.batch_id, m.instance_id, m.batch_size = batch_id, instance_id, len(inputs)
    m.image_size = config.vision.image_size
    m.num_views = _u32(len(x.images) for x in inputs)
    if all(isinstance(x.images, tuple) for x in inputs):
        # A LeRobot checkpoint's raw frames (any size per view) travel as the robot's bytes with
        # their sizes; the worker's engine resizes them, as a local engine would.
        frames = [f for x in inputs for f in x.images]
        m.frame_heights, m.frame_widths = _u32(f.shape[1] for f in frames), _u32(f.shape[2] for f in frames)
        q = np.concatenate([f.cpu().numpy().reshape(-1) for f in frames])
        m.image_encoding, m.images_u8 = EngineBatchRequest.IMAGES_FRAMES, array.array("B", q.tobytes())
    elif any(isinstance(x.images, tuple) for x in inputs):
        # Raw frames beside square views (a warm-up beside robots): all as the float pixels the
        # engine's collation would make of them (engine.camera_frames, the same values).
        views = model_space_views(inputs, config.vision.image_size)
        m.image_encoding, m.images_f32 = EngineBatchRequest.IMAGES_F32, _f32(
            np.concatenate([v.numpy().reshape(-1) for v in views]))
    elif all(x.images.dtype == torch.uint8 for x in inputs):
        # Camera pixels as the server prepared them: the bytes travel, the worker's engine
        # scales them (engine.batching.model_pixels), as a local engine would.
        q = np.concatenate([x.images.cpu().numpy().reshape(-1) for x in inputs])
        m.image_encoding, m.images_u8 = EngineBatchRequest.IMAGES_U8, array.array("B", q.tobytes())
    else:  # float images (already in model space) travel as they are
        images = np.concatenate([model_pixels(x.images).detach().cpu().float().numpy().reshape(-1) for x in inputs])
        m.image_encoding, m.images_f32 = EngineBatchRequest.IMAGES_F32, _f32(images)
    m.image_masks = [bool(v) for x in inputs for v in x.image_masks.tolist()]
    m.num_tokens = _u32(x.tokens.shape[0] for x in inputs)
    m.tokens = array.array("i", np.concatenate([x.tokens.cpu().numpy() for x in inputs]).astype(np.int32).tobytes())
    m.token_mask = [bool(v) for x in inputs for v in x.token_mask.tolist()]
    m.state_dim = config.max_state_dim
    m.state = _f32(np.stack([x.state.detach().cpu().float().numpy() for x in inputs]))
    m.has_noise = [x.noise is not None for x in inputs]
    m.chunk_size, m.action_dim = config.chunk_size, config.max_action_dim
    noise = [x.noise.detach().cpu().float().numpy() for x in inputs if x.noise is not None]
    if noise:
        m.noise = _f32(np.stack(noise))
    return m


def decode_request(m: EngineBatchRequest, config: Pi0Config, max_batch: Optional[int] = None) -> list[EngineInput]:
    """Rebuild the server's inputs exactly; BadRequest names the first inconsistent field."""
    b = int(m.batch_size)
    if b < 1:
        raise BadRequest("batch_size: expected >= 1, got 0")
    if max_batch is not None and b > max_batch:
        raise BadRequest(f"batch_size: {b} exceeds this worker's max_batch {max_batch}")
    s = config.vision.image_size
    if m.image_size != s:
        raise BadRequest(f"image_size: expected {s} (the worker's model), got {m.image_size}")
    for name in ("num_views", "num_tokens", "has_noise"):
        _check_len(name, len(getattr(m, name)), b)
    views = [int(v) for v in m.num_views]
    if any(not 1 <= v <= config.max_views for v in views):
        raise BadRequest(f"num_views: expected 1..{config.max_views} per item, got {views}")
    lengths = [int(n) for n in m.num_tokens]
    if any(not 1 <= n <= config.max_tokens for n in lengths):
        raise BadRequest(f"num_tokens: expected 1..{config.max_tokens} per item, got {lengths}")
    per_view = 3 * s * s
    n_px = sum(views) * per_view
    frames = None
    if m.image_encoding == EngineBatchRequest.IMAGES_FRAMES:
        frames = _frames(m, sum(views))
    elif m.frame_heights or m.frame_widths:
        raise BadRequest("frame_heights/frame_widths: only with image_encoding IMAGES_FRAMES")
    elif m.image_encoding == EngineBatchRequest.IMAGES_U8:
        _check_len("images_u8", len(m.images_u8), n_px)
        images = _np(m.images_u8, np.uint8)  # stays bytes: the engine scales them
    elif m.image_encoding == EngineBatchRequest.IMAGES_F32:
        _check_len("images_f32", len(m.images_f32), n_px)
        images = _np(m.images_f32, np.float32).copy()
    else:
        raise BadRequest(f"image_encoding: expected {EngineBatchRequest.IMAGES_U8} (u8), "
                         f"{EngineBatchRequest.IMAGES_F32} (f32) or {EngineBatchRequest.IMAGES_FRAMES} (frames), "
                         f"got {m.image_encoding}")
    _check_len("image_masks", len(m.image_masks), sum(views))
    _check_len("tokens", len(m.tokens), sum(lengths))
    _check_len("token_mask", len(m.token_mask), sum(lengths))
    if m.state_dim != config.max_state_dim:
        raise BadRequest(f"state_dim: expected {config.max_state_dim}, got {m.state_dim}")
    _check_len("state", len(m.state), b * config.max_state_dim)
    n_noise = sum(bool(x) for x in m.has_noise)
    if n_noise and (m.chunk_size, m.action_dim) != (config.chunk_size, config.max_action_dim):
        raise BadRequest(f"noise: expected chunk_size x action_dim = {config.chunk_size} x "
                         f"{config.max_action_dim}, got {m.chunk_size} x {m.action_dim}")
    noise_len = config.chunk_size * config.max_action_dim
    _check_len("noise", len(m.noise), n_noise * noise_len)
    tokens = _np(m.tokens, np.int32).astype(np.int64)
    masks = np.array(m.image_masks, dtype=bool)
    tmask = np.array(m.token_mask, dtype=bool)
    state = _np(m.state, np.float32).reshape(b, config.max_state_dim)
    noise = _np(m.noise, np.float32).reshape(n_noise, config.chunk_size, config.max_action_dim)
    out, v0, t0, k = [], 0, 0, 0
    for i in range(b):
        v, n = views[i], lengths[i]
        inp = EngineInput(
            images=frames[v0:v0 + v] if frames is not None else
            torch.from_numpy(images[v0 * per_view:(v0 + v) * per_view].reshape(v, 3, s, s).copy()),
            image_masks=torch.from_numpy(masks[v0:v0 + v].copy()),
            tokens=torch.from_numpy(tokens[t0:t0 + n].copy()),
            token_mask=torch.from_numpy(tmask[t0:t0 + n].copy()),
            state=torch.from_numpy(state[i].copy()),
            noise=torch.from_numpy(noise[k].copy()) if m.has_noise[i] else None)
        k += bool(m.has_noise[i])
        v0, t0 = v0 + v, t0 + n
        try:
            inp.validate(config)
        except EngineInputError as e:
            raise BadRequest(f"robot {i}: {e}") from e
        out.append(inp)
    return out


# ---- results -------------------------------------------------------------------------------

def encode_result(outputs: Sequence[EngineOutput], config: Pi0Config, batch_id: str,
                  instance_id: str, queue_ms: float = 0.0) -> EngineBatchResult:
    m = EngineBatchResult()
    m.batch_id, m.instance_id, m.status = batch_id, instance_id, EngineBatchResult.STATUS_OK
    m.batch_size = len(outputs)
    m.chunk_size, m.action_dim, m.num_steps = config.chunk_size, config.max_action_dim, config.num_steps
    if outputs:
        m.actions = _f32(np.stack([o.actions.detach().float().cpu().numpy() for o in outputs]))
        m.updates = _f32(np.stack([o.updates.detach().float().cpu().numpy() for o in outputs]))
        t = outputs[0].timings_ms
        m.prefix_ms = float(t.get("prefix_ms", 0.0))
        m.denoise_ms = float(t.get("denoise_ms", 0.0))
        m.total_ms = float(t.get("total_ms", 0.0))
    m.queue_ms = float(queue_ms)
    return m


def error_result(batch_id: str, instance_id: str, error: str, queue_ms: float = 0.0) -> EngineBatchResult:
    m = EngineBatchResult()
    m.batch_id, m.instance_id = batch_id, instance_id
    m.status, m.error, m.queue_ms = EngineBatchResult.STATUS_ERROR, error, float(queue_ms)
    return m


def decode_result(m: EngineBatchResult, config: Pi0Config, batch_size: int) -> list[EngineOutput]:
    """Outputs of an OK result; BadResult when its sizes do not fit the request."""
    want = (batch_size, config.chunk_size, config.max_action_dim, config.num_steps)
    got = (m.batch_size, m.chunk_size, m.action_dim, m.num_steps)
    if got != want:
        raise BadResult(f"batch_size/chunk_size/action_dim/num_steps: expected {want}, got {got}")
    b, c, a, n = want
    if len(m.actions) != b * c * a or len(m.updates) != b * n * c * a:
        raise BadResult(f"actions/updates: expected {b * c * a}/{b * n * c * a} values, "
                        f"got {len(m.actions)}/{len(m.updates)}")
    actions = torch.from_numpy(_np(m.actions, np.float32).reshape(b, c, a).copy())
    updates = torch.from_numpy(_np(m.updates, np.float32).reshape(b, n, c, a).copy())
    timings = {"prefix_ms": m.prefix_ms, "denoise_ms": m.denoise_ms, "total_ms": m.total_ms,
               "worker_queue_ms": m.queue_ms, "batch": b}
    return [EngineOutput(actions=actions[i], updates=updates[i], timings_ms=dict(timings)) for i in range(b)]


# ---- status --------------------------------------------------------------------------------

@dataclass(frozen=True)
class WorkerStatus:
    """A worker's advertisement: who it is, what model it runs, how fast, how it is doing."""

    instance_id: str
    tier: str
    ready: bool
    max_batch: int
    profile: Optional[LatencyProfile]
    model_config: str  # config_to_json of the worker's Pi0Config
    model: str
    heartbeat_period_s: float
    batches_served: int = 0
    robots_served: int = 0
    errors: int = 0
    last_error: str = ""
    queue_depth: int = 0


def encode_status(st: WorkerStatus) -> EngineWorkerStatus:
    m = EngineWorkerStatus()
    m.instance_id, m.tier, m.max_batch = st.instance_id, st.tier, st.max_batch
    m.state = EngineWorkerStatus.STATE_READY if st.ready else EngineWorkerStatus.STATE_STARTING
    if st.profile is not None:
        m.profile_batch_sizes = _u32(st.profile.batch_sizes)
        m.profile_latencies_s = array.array("d", st.profile.latencies_s)
    m.model_config, m.model, m.heartbeat_period_s = st.model_config, st.model, st.heartbeat_period_s
    m.batches_served, m.robots_served, m.errors = st.batches_served, st.robots_served, st.errors
    m.last_error, m.queue_depth = st.last_error, st.queue_depth
    return m


def decode_status(m: EngineWorkerStatus) -> WorkerStatus:
    """ValueError when the advertisement is unusable (the proxy then treats the worker as down)."""
    if m.tier not in ("edge", "cloud"):
        raise ValueError(f"tier: expected 'edge' or 'cloud', got {m.tier!r}")
    if m.max_batch < 1:
        raise ValueError(f"max_batch: expected >= 1, got {m.max_batch}")
    profile = None
    if len(m.profile_batch_sizes):
        profile = LatencyProfile(tuple(int(b) for b in m.profile_batch_sizes),
                                 tuple(float(t) for t in m.profile_latencies_s))
    ready = m.state == EngineWorkerStatus.STATE_READY
    if ready and profile is None:
        raise ValueError("profile: a ready worker must advertise its latency profile")
    return WorkerStatus(m.instance_id, m.tier, ready, int(m.max_batch), profile, m.model_config,
                        m.model, float(m.heartbeat_period_s), int(m.batches_served),
                        int(m.robots_served), int(m.errors), m.last_error, int(m.queue_depth))
