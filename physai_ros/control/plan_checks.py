"""What the trajectory buffer refuses, and why: the checks an action chunk or a streamed segment
passes before it may touch the plan.

Every check raises :class:`PlanRejected` with a named :class:`RejectReason`, so the buffer
counts refusals by reason and leaves its plan exactly as it was. The checks read the buffer's
ordering state (the last accepted round and capture time) but never change it.
"""
from __future__ import annotations

import enum
import math
from dataclasses import dataclass

import numpy as np

from physai_ros.protocol.chunk import ActionChunkData


class RejectReason(str, enum.Enum):
    """Named reasons an input is refused. Members compare equal to their string value."""

    MALFORMED = "malformed"
    EMPTY = "empty"
    WRONG_DIMENSION = "wrong_dimension"
    UNKNOWN_JOINT = "unknown_joint"
    DUPLICATE_JOINT = "duplicate_joint"
    NON_FINITE = "non_finite"
    BAD_TIME = "bad_time"
    BAD_DT = "bad_dt"
    BAD_HORIZON = "bad_horizon"
    BAD_CONFIDENCE = "bad_confidence"
    STALE_ROUND = "stale_round"
    TIME_BACKWARDS = "time_backwards"
    CAPTURE_IN_FUTURE = "capture_in_future"
    TOO_LONG = "too_long"
    EXPIRED = "expired"

    def __str__(self) -> str:
        return self.value


@dataclass(frozen=True)
class InsertOutcome:
    accepted: bool
    reason: str | None
    nodes_added: int
    detail: str = ""


class PlanRejected(Exception):
    def __init__(self, reason: RejectReason, detail: str):
        super().__init__(detail)
        self.reason = reason
        self.detail = detail


@dataclass(frozen=True)
class CheckedChunk:
    actions: np.ndarray  # [N, D] float64 in the buffer's joint order
    horizon: int
    dt: float
    stamp: float


@dataclass(frozen=True)
class CheckedSegment:
    positions: np.ndarray  # [N, D] float64 in the buffer's joint order
    committed: np.ndarray  # [N] bool
    start_time: float
    dt: float


class PlanChecks:
    """The buffer's joints and limits, and the checks that apply them."""

    def __init__(self, joint_names: tuple[str, ...], *, max_dt: float, max_span_s: float,
                 future_tolerance_s: float):
        self.joint_names = joint_names
        self.dim = len(joint_names)
        self.max_dt = float(max_dt)
        self.max_span_s = float(max_span_s)
        self.future_tolerance_s = float(future_tolerance_s)
        self._index = {n: i for i, n in enumerate(joint_names)}

    def chunk(self, chunk: ActionChunkData, now: float, last_round: int,
              last_capture: float) -> CheckedChunk:
        """A chunk is refused unless it is newer than the last one (round and capture time),
        not from the future, and no longer than the buffer takes."""
        if not isinstance(chunk, ActionChunkData):
            raise PlanRejected(RejectReason.MALFORMED, f"expected ActionChunkData, got {type(chunk)}")
        _check_now(now)
        actions = self._matrix(chunk.actions, "actions", "chunk has no actions")
        actions = self._reorder(actions, tuple(chunk.joint_names))
        if not np.all(np.isfinite(actions)):
            bad = int(np.count_nonzero(~np.isfinite(actions)))
            raise PlanRejected(RejectReason.NON_FINITE, f"{bad} action values are NaN or inf")
        t0 = float(chunk.stamp)
        if not math.isfinite(t0):
            raise PlanRejected(RejectReason.BAD_TIME, f"stamp={chunk.stamp!r}")
        dt = self._dt(chunk.dt)
        horizon = chunk.horizon
        if isinstance(horizon, (bool, np.bool_)) or int(horizon) != horizon:
            raise PlanRejected(RejectReason.BAD_HORIZON, f"horizon={horizon!r} is not an integer")
        horizon = int(horizon)
        if not 1 <= horizon <= actions.shape[0]:
            raise PlanRejected(RejectReason.BAD_HORIZON, f"horizon={horizon} not in [1, {actions.shape[0]}]")
        if chunk.confidence is not None and np.size(chunk.confidence):  # empty: none sent
            conf = np.asarray(chunk.confidence, dtype=np.float64)
            if conf.shape != (actions.shape[0],):
                raise PlanRejected(RejectReason.BAD_CONFIDENCE,
                                   f"confidence shape {conf.shape}, expected ({actions.shape[0]},)")
            if not np.all(np.isfinite(conf)):
                raise PlanRejected(RejectReason.NON_FINITE, "confidence has NaN or inf")
        rnd = _round_id(chunk.round_id)
        if rnd <= last_round:
            raise PlanRejected(RejectReason.STALE_ROUND, f"round {rnd} <= last accepted round {last_round}")
        if t0 < last_capture:
            raise PlanRejected(RejectReason.TIME_BACKWARDS,
                               f"stamp {t0:.6f} older than last accepted {last_capture:.6f}")
        if t0 > now + self.future_tolerance_s:
            raise PlanRejected(RejectReason.CAPTURE_IN_FUTURE, f"stamp {t0:.6f} is {t0 - now:.3f} s ahead of now")
        if horizon * dt > self.max_span_s:
            raise PlanRejected(RejectReason.TOO_LONG, f"horizon*dt = {horizon * dt:.3f} s > {self.max_span_s} s")
        return CheckedChunk(actions, horizon, dt, t0)

    def segment(self, start_time, dt, positions, committed_flags, round_id, now, joint_names,
                last_round: int) -> CheckedSegment:
        """A streamed segment may repeat the last round (several segments per round) but not go
        back, and may start up to a whole span ahead (it updates a window of the future)."""
        _check_now(now)
        pos = self._matrix(positions, "positions", "segment has no nodes")
        pos = self._reorder(pos, tuple(joint_names))
        if not np.all(np.isfinite(pos)):
            raise PlanRejected(RejectReason.NON_FINITE, "segment positions have NaN or inf")
        flags = np.asarray(committed_flags, dtype=bool).reshape(-1)
        if flags.shape != (pos.shape[0],):
            raise PlanRejected(RejectReason.WRONG_DIMENSION,
                               f"{flags.shape[0]} committed flags for {pos.shape[0]} nodes")
        t0 = float(start_time)
        if not math.isfinite(t0):
            raise PlanRejected(RejectReason.BAD_TIME, f"start_time={start_time!r}")
        dt = self._dt(dt)
        rnd = _round_id(round_id)
        if rnd < last_round:
            raise PlanRejected(RejectReason.STALE_ROUND, f"round {rnd} < last round {last_round}")
        if t0 > now + self.future_tolerance_s + self.max_span_s:
            raise PlanRejected(RejectReason.CAPTURE_IN_FUTURE,
                               f"start_time {t0:.6f} is {t0 - now:.3f} s ahead of now")
        if (pos.shape[0] - 1) * dt > self.max_span_s:
            raise PlanRejected(RejectReason.TOO_LONG, f"segment spans {(pos.shape[0] - 1) * dt:.3f} s")
        return CheckedSegment(pos, flags, t0, dt)

    def _dt(self, value) -> float:
        dt = float(value)
        if not (math.isfinite(dt) and 0.0 < dt <= self.max_dt):
            raise PlanRejected(RejectReason.BAD_DT, f"dt={value!r} not in (0, {self.max_dt}]")
        return dt

    def _matrix(self, values, what: str, empty_message: str) -> np.ndarray:
        """`values` as a float64 [N, D] array with N >= 1 and D = the buffer's joints."""
        arr = np.asarray(values, dtype=np.float64)
        if arr.ndim != 2:
            raise PlanRejected(RejectReason.WRONG_DIMENSION, f"{what} must be [N, D], got shape {arr.shape}")
        if arr.shape[0] == 0:
            raise PlanRejected(RejectReason.EMPTY, empty_message)
        if arr.shape[1] != self.dim:
            raise PlanRejected(RejectReason.WRONG_DIMENSION,
                               f"{what} have {arr.shape[1]} columns, buffer has {self.dim} joints")
        return arr

    def _reorder(self, values: np.ndarray, names: tuple[str, ...]) -> np.ndarray:
        """Columns in the buffer's joint order; an empty name list means already in order."""
        if not names:
            return values
        if len(names) != self.dim:
            raise PlanRejected(RejectReason.WRONG_DIMENSION, f"{len(names)} joint names for a {self.dim}-joint buffer")
        unknown = [n for n in names if n not in self._index]
        if unknown:
            raise PlanRejected(RejectReason.UNKNOWN_JOINT, f"unknown joints {unknown}")
        if len(set(names)) != len(names):
            raise PlanRejected(RejectReason.DUPLICATE_JOINT, f"duplicate joints in {list(names)}")
        if names == self.joint_names:
            return values
        out = np.empty_like(values)
        out[:, [self._index[n] for n in names]] = values
        return out


def _check_now(now) -> None:
    if not math.isfinite(float(now)):
        raise PlanRejected(RejectReason.BAD_TIME, f"now={now!r} is not finite")


def _round_id(value) -> int:
    if isinstance(value, (bool, np.bool_)) or int(value) != value:
        raise PlanRejected(RejectReason.MALFORMED, f"round_id={value!r} is not an integer")
    return int(value)
