"""physai_ros_interfaces/ActionChunk <-> protocol.chunk.ActionChunkData.

`chunk_from_msg` reads every chunk (answers, refusals, holds) for the robot client and the
observers; `executable_chunk_from_msg` is the trajectory controller's stricter reading, which
refuses a message that cannot be executed at all (the buffer validates the content).
"""
from __future__ import annotations

import numpy as np
from physai_ros_interfaces.msg import ActionChunk

from physai_ros.protocol.chunk import STATUS_OK, ActionChunkData
from physai_ros.ros.codecs._arrays import f32_field, f32_values, safe_time
from physai_ros.ros.time_conv import to_sec


class ChunkMessageError(ValueError):
    """The message cannot be read as an executable chunk at all."""


def chunk_to_msg(c: ActionChunkData, frame_id: str = "") -> ActionChunk:
    a = np.ascontiguousarray(c.actions, dtype=np.float32)
    if a.size and a.ndim != 2:
        raise ValueError(f"actions must be [N, D], got shape {a.shape}")
    msg = ActionChunk()
    msg.header.stamp = safe_time(c.stamp)
    msg.header.frame_id = frame_id
    msg.robot_id, msg.task_id, msg.round_id = c.robot_id, c.task_id, int(c.round_id)
    msg.status = int(c.status)
    msg.error = c.error
    msg.joint_names = list(c.joint_names)
    msg.dt = float(c.dt)
    if a.size:
        msg.num_actions, msg.action_dim = int(a.shape[0]), int(a.shape[1])
        msg.actions = f32_field(a)
    msg.horizon = int(c.horizon)
    if c.confidence is not None and np.size(c.confidence):
        msg.confidence = f32_field(c.confidence)
    msg.queue_ms, msg.inference_ms, msg.prepare_ms = float(c.queue_ms), float(c.inference_ms), float(c.prepare_ms)
    msg.engine_instance = c.engine_instance
    return msg


def chunk_from_msg(msg: ActionChunk) -> ActionChunkData:
    """Every field; actions whose count does not match num_actions x action_dim read as none."""
    n, d = int(msg.num_actions), int(msg.action_dim)
    flat = f32_values(msg.actions)
    actions = flat.reshape(n, d) if n * d == flat.size else np.zeros((0, 0), np.float32)
    return ActionChunkData(
        robot_id=msg.robot_id, task_id=msg.task_id, round_id=int(msg.round_id),
        stamp=to_sec(msg.header.stamp), status=int(msg.status), error=msg.error,
        joint_names=tuple(msg.joint_names), dt=float(msg.dt), actions=actions,
        horizon=int(msg.horizon), confidence=f32_values(msg.confidence),
        queue_ms=float(msg.queue_ms), inference_ms=float(msg.inference_ms), prepare_ms=float(msg.prepare_ms),
        engine_instance=msg.engine_instance)


def executable_chunk_from_msg(msg: ActionChunk) -> ActionChunkData:
    """The chunk, or ChunkMessageError for a message that is no answer to execute: not OK,
    actions that do not fill num_actions x action_dim, a confidence of the wrong length."""
    if msg.status != STATUS_OK:
        raise ChunkMessageError(f"chunk status {msg.status} ({msg.error or 'no reason given'})")
    n, d = int(msg.num_actions), int(msg.action_dim)
    size = len(msg.actions)
    if n * d != size or n == 0 or d == 0:
        raise ChunkMessageError(f"actions hold {size} values, not num_actions x action_dim = {n}x{d}")
    if len(msg.confidence) and len(msg.confidence) != n:
        raise ChunkMessageError(f"confidence has {len(msg.confidence)} values for {n} actions")
    return chunk_from_msg(msg)
