"""physai_ros_interfaces/ActionChunk <-> control.types.ActionChunkData."""
from __future__ import annotations

import numpy as np
from physai_ros_interfaces.msg import ActionChunk

from physai_ros.control.types import ActionChunkData
from physai_ros.ros.time_conv import time_from_sec, to_sec


class ChunkMessageError(ValueError):
    """The message cannot be read as a chunk at all (the buffer validates the content)."""


def chunk_from_msg(msg: ActionChunk) -> ActionChunkData:
    if msg.status != ActionChunk.STATUS_OK:
        raise ChunkMessageError(f"chunk status {msg.status} ({msg.error or 'no reason given'})")
    n, d = int(msg.num_actions), int(msg.action_dim)
    flat = np.asarray(msg.actions, dtype=np.float64)
    if n * d != flat.size or n == 0 or d == 0:
        raise ChunkMessageError(f"actions hold {flat.size} values, not num_actions x action_dim = {n}x{d}")
    conf = np.asarray(msg.confidence, dtype=np.float64) if len(msg.confidence) else None
    if conf is not None and conf.size != n:
        raise ChunkMessageError(f"confidence has {conf.size} values for {n} actions")
    return ActionChunkData(
        robot_id=msg.robot_id, task_id=msg.task_id, round_id=int(msg.round_id),
        capture_time=to_sec(msg.header.stamp), dt=float(msg.dt), joint_names=tuple(msg.joint_names),
        actions=flat.reshape(n, d), horizon=int(msg.horizon), confidence=conf)


def chunk_to_msg(chunk: ActionChunkData, frame_id: str = "") -> ActionChunk:
    actions = np.ascontiguousarray(chunk.actions, dtype=np.float32)
    if actions.ndim != 2:
        raise ValueError(f"actions must be [N, D], got shape {actions.shape}")
    msg = ActionChunk()
    msg.header.stamp = time_from_sec(chunk.capture_time)
    msg.header.frame_id = frame_id
    msg.robot_id, msg.task_id, msg.round_id = chunk.robot_id, chunk.task_id, int(chunk.round_id)
    msg.status = ActionChunk.STATUS_OK
    msg.joint_names = list(chunk.joint_names)
    msg.dt = float(chunk.dt)
    msg.num_actions, msg.action_dim = actions.shape
    # float32[] fields keep an array.array('f') as is; a list is checked element by element.
    msg.actions = _f32(actions)
    msg.horizon = int(chunk.horizon)
    if chunk.confidence is not None:
        msg.confidence = _f32(np.asarray(chunk.confidence, dtype=np.float32))
    return msg


def _f32(a: np.ndarray):
    import array

    return array.array("f", np.ascontiguousarray(a, dtype=np.float32).tobytes())
