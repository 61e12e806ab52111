"""The robot-side trajectory buffer (realtime-vla section 6.2, Kairos section 2.1).

Nodes sit on a fixed grid of ``rate_hz`` ticks of the robot clock (tick ``k`` is due at
``k / rate_hz``), so two chunks always land on the same node times and merging is a per-node
operation. A node whose time has come is *committed* by :meth:`TrajectoryBuffer.advance` and is
never written again; later nodes are *tentative* and may be merged with newer chunks.

Chunk action ``k`` is due at ``stamp + k * dt`` (``stamp``: the capture time of the observation
it answers) and is interpolated linearly onto the grid; the last executed action is held for one
``dt``, so a chunk executed for ``H`` actions covers ``[stamp, stamp + H * dt)``. Nodes whose
time has already passed are dropped (latency compensation). A newer chunk supersedes every
tentative node from its first node on: the overlap is merged by the rule and the older plan's
tail beyond the newer chunk is dropped, because it answers an older observation.

Every rejected input leaves the buffer exactly as it was; only the counters change.
"""
from __future__ import annotations

import collections
import enum
import math
from dataclasses import dataclass

import numpy as np

from physai_ros.control.types import ExecutionState, TrajectoryNodes
from physai_ros.protocol.chunk import ActionChunkData

# Slack, in ticks, for float rounding when mapping times onto the grid: a time within a
# millionth of a tick of a node is that node.
_TICK_EPS = 1e-6


class MergeRule(enum.Enum):
    REPLACE = "replace"
    CROSSFADE = "crossfade"
    WEIGHTED_AVERAGE = "weighted_average"

    @classmethod
    def parse(cls, value: "MergeRule | str") -> "MergeRule":
        if isinstance(value, MergeRule):
            return value
        try:
            return cls(str(value).strip().lower())
        except ValueError:
            names = ", ".join(m.value for m in cls)
            raise ValueError(f"unknown merge rule {value!r}; expected one of: {names}") from None


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


class _Rejected(Exception):
    def __init__(self, reason: RejectReason, detail: str):
        super().__init__(detail)
        self.reason = reason
        self.detail = detail


class TrajectoryBuffer:
    """Timestamped joint-position nodes with commit semantics.

    Not thread-safe: the owning node calls it from one executor thread.
    """

    def __init__(
        self,
        joint_names,
        rate_hz: float = 480.0,
        merge: MergeRule | str = MergeRule.REPLACE,
        crossfade_s: float = 0.05,
        hold_position=None,
        *,
        average_weight: float = 0.5,
        history_s: float = 2.0,
        max_dt: float = 1.0,
        max_span_s: float = 30.0,
        future_tolerance_s: float = 0.5,
    ):
        names = tuple(str(n) for n in joint_names)
        if not names:
            raise ValueError("joint_names must name at least one joint")
        if len(set(names)) != len(names):
            raise ValueError(f"joint_names has duplicates: {names}")
        if not (math.isfinite(rate_hz) and rate_hz > 0):
            raise ValueError(f"rate_hz must be a positive finite number, got {rate_hz!r}")
        if not (math.isfinite(crossfade_s) and crossfade_s >= 0):
            raise ValueError(f"crossfade_s must be >= 0, got {crossfade_s!r}")
        if not (0.0 <= average_weight <= 1.0):
            raise ValueError(f"average_weight must lie in [0, 1], got {average_weight!r}")
        self.joint_names = names
        self.dim = len(names)
        self.rate_hz = float(rate_hz)
        self.period = 1.0 / self.rate_hz
        self.merge = MergeRule.parse(merge)
        self.crossfade_s = float(crossfade_s)
        self.average_weight = float(average_weight)
        self.max_dt = float(max_dt)
        self.max_span_s = float(max_span_s)
        self.future_tolerance_s = float(future_tolerance_s)
        self._index = {n: i for i, n in enumerate(names)}

        self._hold = None if hold_position is None else self._check_position(hold_position)
        # Tentative nodes, sorted by tick.
        self._ticks = np.zeros(0, dtype=np.int64)
        self._pos = np.zeros((0, self.dim))
        self._rounds = np.zeros(0, dtype=np.int64)
        self._locked = np.zeros(0, dtype=bool)
        # Committed nodes: the newest few seconds are kept for inspection and plotting.
        self._history: collections.deque = collections.deque(
            maxlen=max(1, int(round(history_s * self.rate_hz))))
        self._last_tick: int | None = None
        self._last_pos: np.ndarray | None = None

        self._last_round = 0
        self._last_capture = -math.inf
        self._last_dt = self.period
        self._exec_round = 0
        self._exec_phase_start = 0.0
        self._dry = True
        self._stopped = False  # a deliberate stop: running dry afterwards is not an underrun

        self.underruns = 0
        self.chunks_accepted = 0
        self.chunks_rejected = 0
        self.segments_accepted = 0
        self.segments_rejected = 0
        self.last_reject_reason = ""
        self.last_reject_detail = ""
        self._rejections: collections.Counter = collections.Counter()

    # ------------------------------------------------------------------ grid helpers
    def _tick_floor(self, t: float) -> int:
        return math.floor(t * self.rate_hz + _TICK_EPS)

    def _tick_ceil(self, t: float) -> int:
        return math.ceil(t * self.rate_hz - _TICK_EPS)

    def _check_position(self, position) -> np.ndarray:
        pos = np.asarray(position, dtype=np.float64).reshape(-1)
        if pos.shape != (self.dim,) or not np.all(np.isfinite(pos)):
            raise ValueError(f"a position needs {self.dim} finite values, got {position!r}")
        return pos.copy()

    def _first_free_tick(self, now: float) -> int:
        first = self._tick_floor(now) + 1
        if self._last_tick is not None:
            first = max(first, self._last_tick + 1)
        return first

    # ------------------------------------------------------------------ public state
    @property
    def last_round_id(self) -> int:
        return self._last_round

    @property
    def rejections(self) -> dict[str, int]:
        return dict(self._rejections)

    @property
    def last_command(self) -> np.ndarray | None:
        pos = self._last_pos if self._last_pos is not None else self._hold
        return None if pos is None else pos.copy()

    def set_hold_position(self, position) -> None:
        """The position to hold before any node was committed (e.g. the measured joints)."""
        self._hold = self._check_position(position)

    def committed_nodes(self) -> TrajectoryNodes:
        if not self._history:
            return TrajectoryNodes(np.zeros(0), np.zeros((0, self.dim)), np.zeros(0, np.int64))
        ticks = np.fromiter((h[0] for h in self._history), dtype=np.int64, count=len(self._history))
        pos = np.stack([h[1] for h in self._history])
        rounds = np.fromiter((h[2] for h in self._history), dtype=np.int64,
                             count=len(self._history))
        return TrajectoryNodes(ticks / self.rate_hz, pos, rounds)

    def tentative_nodes(self) -> TrajectoryNodes:
        return TrajectoryNodes(self._ticks / self.rate_hz, self._pos.copy(), self._rounds.copy())

    def tentative_locked(self) -> np.ndarray:
        """Which tentative nodes a streamed segment marked as final (see insert_segment)."""
        return self._locked.copy()

    # ------------------------------------------------------------------ time passing
    def advance(self, now: float) -> np.ndarray | None:
        """Commit every node due by ``now`` and return the command for ``now``.

        The command is the newest committed node. When no node is due at ``now`` the buffer
        is dry and the last commanded position is held (or ``hold_position`` when nothing was
        ever commanded; ``None`` if neither is known).
        """
        self._commit_until(now)
        # A call with an older ``now`` (clock jitter) still has a node: not dry.
        dry = self._last_tick is None or self._last_tick < self._tick_floor(now)
        if dry and not self._dry and not self._stopped:
            self.underruns += 1
        self._dry = dry
        return self.last_command

    def _commit_until(self, now: float) -> None:
        n = int(np.searchsorted(self._ticks, self._tick_floor(now), side="right"))
        if n == 0:
            return
        for i in range(n):
            tick = int(self._ticks[i])
            rnd = int(self._rounds[i])
            row = self._pos[i].copy()
            if rnd != self._exec_round:
                # Phase start is when this round's first node became due (Kairos E_i start).
                self._exec_round = rnd
                self._exec_phase_start = tick / self.rate_hz
            self._history.append((tick, row, rnd))
        self._last_tick = int(self._ticks[n - 1])
        self._last_pos = self._history[-1][1]
        self._ticks = self._ticks[n:]
        self._pos = self._pos[n:]
        self._rounds = self._rounds[n:]
        self._locked = self._locked[n:]

    def stop(self, now: float, refuse_through_round: int | None = None) -> int:
        """Safety stop: commit what is due, drop every tentative node, hold position.

        ``refuse_through_round``: also treat every round up to it as stale from now on, so the
        late answer to a request the client gave up on is refused (``stale_round``) while
        answers to later observations, whatever their capture time, are still taken.
        Returns the number of dropped nodes. Running dry after a stop is not an underrun.
        """
        if refuse_through_round is not None:
            self._last_round = max(self._last_round, int(refuse_through_round))
        self._commit_until(now)
        dropped = int(self._ticks.shape[0])
        self._ticks = self._ticks[:0]
        self._pos = self._pos[:0]
        self._rounds = self._rounds[:0]
        self._locked = self._locked[:0]
        self._stopped = True
        return dropped

    def execution_state(self, now: float) -> ExecutionState:
        tick_now = self._tick_floor(now)
        remaining = int(self._ticks.shape[0] - np.searchsorted(self._ticks, tick_now, "right"))
        has_node = (self._last_tick is not None and self._last_tick >= tick_now) or bool(
            self._ticks.size and np.any(self._ticks == tick_now))
        dt = self._last_dt
        actions = math.ceil(remaining * self.period / dt - 1e-9) if remaining else 0
        return ExecutionState(
            executing_round_id=self._exec_round,
            exec_phase_start=self._exec_phase_start,
            actions_remaining=actions,
            control_period=dt,
            buffer_nodes=int(self._ticks.shape[0]),
            buffer_dry=not has_node,
            underruns=self.underruns,
            chunks_accepted=self.chunks_accepted,
            chunks_rejected=self.chunks_rejected,
            last_reject_reason=self.last_reject_reason,
        )

    # ------------------------------------------------------------------ chunks
    def insert(self, chunk: ActionChunkData, now: float) -> InsertOutcome:
        try:
            actions, horizon, dt, t0 = self._validate_chunk(chunk, now)
            ticks, pos = self._chunk_to_grid(actions[:horizon], t0, dt, now)
        except _Rejected as rej:
            self.chunks_rejected += 1
            return self._reject(rej)
        except Exception as exc:  # bad input must never take the controller down
            self.chunks_rejected += 1
            return self._reject(_Rejected(RejectReason.MALFORMED, f"{type(exc).__name__}: {exc}"))
        self._merge_chunk(ticks, pos, int(chunk.round_id))
        self._last_round = int(chunk.round_id)
        self._last_capture = t0
        self._last_dt = dt
        self._stopped = False
        self.chunks_accepted += 1
        return InsertOutcome(True, None, int(ticks.shape[0]))

    def _reject(self, rej: _Rejected) -> InsertOutcome:
        self._rejections[rej.reason.value] += 1
        self.last_reject_reason = rej.reason.value
        self.last_reject_detail = rej.detail
        return InsertOutcome(False, rej.reason.value, 0, rej.detail)

    def _plan_matrix(self, values, what: str, empty_message: str) -> np.ndarray:
        """`values` as a float64 [N, D] array with N >= 1 and D = the buffer's joints, or a
        rejection (shared by chunks and streamed segments)."""
        arr = np.asarray(values, dtype=np.float64)
        if arr.ndim != 2:
            raise _Rejected(RejectReason.WRONG_DIMENSION, f"{what} must be [N, D], got shape {arr.shape}")
        if arr.shape[0] == 0:
            raise _Rejected(RejectReason.EMPTY, empty_message)
        if arr.shape[1] != self.dim:
            raise _Rejected(RejectReason.WRONG_DIMENSION,
                            f"{what} have {arr.shape[1]} columns, buffer has {self.dim} joints")
        return arr

    def _validate_chunk(self, chunk: ActionChunkData, now: float):
        if not isinstance(chunk, ActionChunkData):
            raise _Rejected(RejectReason.MALFORMED, f"expected ActionChunkData, got {type(chunk)}")
        if not math.isfinite(float(now)):
            raise _Rejected(RejectReason.BAD_TIME, f"now={now!r} is not finite")
        actions = self._plan_matrix(chunk.actions, "actions", "chunk has no actions")
        actions = self._reorder(actions, tuple(chunk.joint_names))
        if not np.all(np.isfinite(actions)):
            bad = int(np.count_nonzero(~np.isfinite(actions)))
            raise _Rejected(RejectReason.NON_FINITE, f"{bad} action values are NaN or inf")
        t0 = float(chunk.stamp)
        if not math.isfinite(t0):
            raise _Rejected(RejectReason.BAD_TIME, f"stamp={chunk.stamp!r}")
        dt = float(chunk.dt)
        if not (math.isfinite(dt) and 0.0 < dt <= self.max_dt):
            raise _Rejected(RejectReason.BAD_DT, f"dt={chunk.dt!r} not in (0, {self.max_dt}]")
        horizon = chunk.horizon
        if isinstance(horizon, (bool, np.bool_)) or int(horizon) != horizon:
            raise _Rejected(RejectReason.BAD_HORIZON, f"horizon={horizon!r} is not an integer")
        horizon = int(horizon)
        if not 1 <= horizon <= actions.shape[0]:
            raise _Rejected(RejectReason.BAD_HORIZON,
                            f"horizon={horizon} not in [1, {actions.shape[0]}]")
        if chunk.confidence is not None and np.size(chunk.confidence):  # empty: none sent
            conf = np.asarray(chunk.confidence, dtype=np.float64)
            if conf.shape != (actions.shape[0],):
                raise _Rejected(RejectReason.BAD_CONFIDENCE,
                                f"confidence shape {conf.shape}, expected ({actions.shape[0]},)")
            if not np.all(np.isfinite(conf)):
                raise _Rejected(RejectReason.NON_FINITE, "confidence has NaN or inf")
        rnd = chunk.round_id
        if isinstance(rnd, (bool, np.bool_)) or int(rnd) != rnd:
            raise _Rejected(RejectReason.MALFORMED, f"round_id={rnd!r} is not an integer")
        if int(rnd) <= self._last_round:
            raise _Rejected(RejectReason.STALE_ROUND,
                            f"round {int(rnd)} <= last accepted round {self._last_round}")
        if t0 < self._last_capture:
            raise _Rejected(RejectReason.TIME_BACKWARDS,
                            f"stamp {t0:.6f} older than last accepted "
                            f"{self._last_capture:.6f}")
        if t0 > now + self.future_tolerance_s:
            raise _Rejected(RejectReason.CAPTURE_IN_FUTURE,
                            f"stamp {t0:.6f} is {t0 - now:.3f} s ahead of now")
        if horizon * dt > self.max_span_s:
            raise _Rejected(RejectReason.TOO_LONG,
                            f"horizon*dt = {horizon * dt:.3f} s > {self.max_span_s} s")
        return actions, horizon, dt, t0

    def _reorder(self, values: np.ndarray, names: tuple[str, ...]) -> np.ndarray:
        """Columns in the buffer's joint order; an empty name list means already in order."""
        if not names:
            return values
        if len(names) != self.dim:
            raise _Rejected(RejectReason.WRONG_DIMENSION,
                            f"{len(names)} joint names for a {self.dim}-joint buffer")
        unknown = [n for n in names if n not in self._index]
        if unknown:
            raise _Rejected(RejectReason.UNKNOWN_JOINT, f"unknown joints {unknown}")
        if len(set(names)) != len(names):
            raise _Rejected(RejectReason.DUPLICATE_JOINT, f"duplicate joints in {list(names)}")
        if names == self.joint_names:
            return values
        out = np.empty_like(values)
        out[:, [self._index[n] for n in names]] = values
        return out

    def _chunk_to_grid(self, actions: np.ndarray, t0: float, dt: float, now: float):
        h = actions.shape[0]
        first = max(self._tick_ceil(t0), self._first_free_tick(now))
        last = self._tick_ceil(t0 + h * dt) - 1
        if last < first:
            raise _Rejected(RejectReason.EXPIRED,
                            f"every action of the horizon is due before now={now:.6f}")
        ticks = np.arange(first, last + 1, dtype=np.int64)
        s = (ticks / self.rate_hz - t0) / dt
        return ticks, _interp_rows(s, actions)

    def _merge_chunk(self, ticks: np.ndarray, pos: np.ndarray, round_id: int) -> None:
        start = int(ticks[0])
        keep = int(np.searchsorted(self._ticks, start, "left"))
        old_ticks, old_pos = self._ticks[keep:], self._pos[keep:]
        old_locked = self._locked[keep:]
        new_pos = pos.copy()
        new_locked = np.zeros(ticks.shape[0], dtype=bool)
        # Old nodes that the new chunk also covers (both sorted, both unique).
        _, new_i, old_i = np.intersect1d(ticks, old_ticks, assume_unique=True,
                                         return_indices=True)
        if self.merge is MergeRule.CROSSFADE:
            self._crossfade(ticks, pos, new_pos, keep, old_ticks, old_pos)
        elif self.merge is MergeRule.WEIGHTED_AVERAGE and new_i.size:
            w = self.average_weight
            new_pos[new_i] = (1.0 - w) * old_pos[old_i] + w * pos[new_i]
        # A node the stream marked final keeps its value whatever the rule.
        rounds = np.full(ticks.shape[0], round_id, dtype=np.int64)
        lk = old_locked[old_i]
        if np.any(lk):
            new_pos[new_i[lk]] = old_pos[old_i[lk]]
            new_locked[new_i[lk]] = True
            rounds[new_i[lk]] = self._rounds[keep:][old_i[lk]]
        # The older plan's tail beyond the new chunk goes, except nodes the stream made final.
        tail = keep + np.flatnonzero((old_ticks > ticks[-1]) & old_locked)
        self._ticks = np.concatenate([self._ticks[:keep], ticks, self._ticks[tail]])
        self._pos = np.concatenate([self._pos[:keep], new_pos, self._pos[tail]])
        self._rounds = np.concatenate([self._rounds[:keep], rounds, self._rounds[tail]])
        self._locked = np.concatenate([self._locked[:keep], new_locked, self._locked[tail]])

    def _crossfade(self, ticks, pos, new_pos, keep, old_ticks, old_pos) -> None:
        """Blend the window's first nodes from the old track into the new chunk.

        The old track is the old plan where it has nodes and otherwise its last value held
        (starting from the node before the new chunk, or the last commanded position), so a
        chunk that follows a short plan, a gap or a dry spell also starts smoothly from where
        the robot is commanded to be.
        """
        window = max(1, int(round(self.crossfade_s * self.rate_hz)))
        m = min(window, ticks.shape[0])
        cur = self._pos[keep - 1] if keep > 0 else self.last_command
        start = int(ticks[0])
        j = 0  # walks old_ticks alongside ticks
        for i in range(m):
            t = int(ticks[i])
            while j < old_ticks.shape[0] and old_ticks[j] < t:
                cur = old_pos[j]
                j += 1
            if j < old_ticks.shape[0] and old_ticks[j] == t:
                cur = old_pos[j]
            if cur is None:
                continue
            w = (t - start + 1) / (window + 1.0)
            new_pos[i] = (1.0 - w) * cur + w * pos[i]

    # ------------------------------------------------------------------ streamed segments
    def insert_segment(self, start_time: float, dt: float, positions, committed_flags,
                       round_id: int, now: float, joint_names=()) -> InsertOutcome:
        """Insert a dense streamed segment: node ``i`` is due at ``start_time + i * dt``.

        Segment nodes are points (no hold after the last one). Grid nodes in the segment's span
        replace tentative ones; nodes outside it are kept, since a stream updates a window of
        the future, not the whole plan. A grid node between two segment nodes the server marked
        committed is locked: later segments and chunks leave it as it is. ``round_id`` may repeat
        (several segments per round) but may not decrease.
        """
        try:
            ticks, pos, locked, seg_dt = self._segment_to_grid(
                start_time, dt, positions, committed_flags, round_id, now, joint_names)
        except _Rejected as rej:
            self.segments_rejected += 1
            return self._reject(rej)
        except Exception as exc:
            self.segments_rejected += 1
            return self._reject(_Rejected(RejectReason.MALFORMED, f"{type(exc).__name__}: {exc}"))
        lo = int(np.searchsorted(self._ticks, ticks[0], "left"))
        hi = int(np.searchsorted(self._ticks, ticks[-1], "right"))
        old_ticks, old_pos, old_locked = self._ticks[lo:hi], self._pos[lo:hi], self._locked[lo:hi]
        _, new_i, old_i = np.intersect1d(ticks, old_ticks, assume_unique=True,
                                         return_indices=True)
        lk = old_locked[old_i]
        pos[new_i[lk]] = old_pos[old_i[lk]]
        locked[new_i[lk]] = True
        rounds = np.full(ticks.shape[0], int(round_id), dtype=np.int64)
        # Old nodes between the segment's first and last tick are all superseded (the
        # segment covers its span densely); keep the original round on locked ones.
        rounds[new_i[lk]] = self._rounds[lo:hi][old_i[lk]]
        self._ticks = np.concatenate([self._ticks[:lo], ticks, self._ticks[hi:]])
        self._pos = np.concatenate([self._pos[:lo], pos, self._pos[hi:]])
        self._rounds = np.concatenate([self._rounds[:lo], rounds, self._rounds[hi:]])
        self._locked = np.concatenate([self._locked[:lo], locked, self._locked[hi:]])
        self._last_round = int(round_id)
        self._last_dt = seg_dt
        self._stopped = False
        self.segments_accepted += 1
        return InsertOutcome(True, None, int(ticks.shape[0]))

    def _segment_to_grid(self, start_time, dt, positions, committed_flags, round_id, now,
                         joint_names):
        if not math.isfinite(float(now)):
            raise _Rejected(RejectReason.BAD_TIME, f"now={now!r} is not finite")
        pos = self._plan_matrix(positions, "positions", "segment has no nodes")
        pos = self._reorder(pos, tuple(joint_names))
        if not np.all(np.isfinite(pos)):
            raise _Rejected(RejectReason.NON_FINITE, "segment positions have NaN or inf")
        flags = np.asarray(committed_flags, dtype=bool).reshape(-1)
        if flags.shape != (pos.shape[0],):
            raise _Rejected(RejectReason.WRONG_DIMENSION,
                            f"{flags.shape[0]} committed flags for {pos.shape[0]} nodes")
        t0 = float(start_time)
        if not math.isfinite(t0):
            raise _Rejected(RejectReason.BAD_TIME, f"start_time={start_time!r}")
        dt = float(dt)
        if not (math.isfinite(dt) and 0.0 < dt <= self.max_dt):
            raise _Rejected(RejectReason.BAD_DT, f"dt={dt!r} not in (0, {self.max_dt}]")
        if isinstance(round_id, (bool, np.bool_)) or int(round_id) != round_id:
            raise _Rejected(RejectReason.MALFORMED, f"round_id={round_id!r} is not an integer")
        if int(round_id) < self._last_round:
            raise _Rejected(RejectReason.STALE_ROUND,
                            f"round {int(round_id)} < last round {self._last_round}")
        if t0 > now + self.future_tolerance_s + self.max_span_s:
            raise _Rejected(RejectReason.CAPTURE_IN_FUTURE,
                            f"start_time {t0:.6f} is {t0 - now:.3f} s ahead of now")
        n = pos.shape[0]
        if (n - 1) * dt > self.max_span_s:
            raise _Rejected(RejectReason.TOO_LONG, f"segment spans {(n - 1) * dt:.3f} s")
        first = max(self._tick_ceil(t0), self._first_free_tick(now))
        last = self._tick_floor(t0 + (n - 1) * dt)
        if last < first:
            raise _Rejected(RejectReason.EXPIRED, f"no segment node is due after now={now:.6f}")
        ticks = np.arange(first, last + 1, dtype=np.int64)
        s = np.clip((ticks / self.rate_hz - t0) / dt, 0.0, n - 1)
        grid_pos = _interp_rows(s, pos)
        # Snap s that is a node index up to float noise, so on-grid nodes keep their own flag.
        lo = np.clip(np.floor(s + _TICK_EPS).astype(np.int64), 0, n - 1)
        hi = np.clip(np.ceil(s - _TICK_EPS).astype(np.int64), 0, n - 1)
        locked = flags[lo] & flags[hi]
        return ticks, grid_pos, locked, dt


def _interp_rows(s: np.ndarray, rows: np.ndarray) -> np.ndarray:
    """Linear interpolation of ``rows`` (indexed 0..N-1) at fractional indices ``s``, held at
    the ends."""
    idx = np.arange(rows.shape[0], dtype=np.float64)
    out = np.empty((s.shape[0], rows.shape[1]))
    for j in range(rows.shape[1]):
        out[:, j] = np.interp(s, idx, rows[:, j])
    return out
