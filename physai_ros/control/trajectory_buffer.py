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

Every rejected input leaves the buffer exactly as it was; only the counters change. The checks
an input passes are in ``control.plan_checks``, the grid mapping in ``control.tick_grid``; this
module holds the plan, commits it as time passes and merges new plans into it.
"""
from __future__ import annotations

import collections
import enum
import math

import numpy as np

from physai_ros.control.plan_checks import InsertOutcome, PlanChecks, PlanRejected, RejectReason
from physai_ros.control.tick_grid import TickGrid
from physai_ros.control.types import ExecutionState, TrajectoryNodes
from physai_ros.protocol.chunk import ActionChunkData


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
        self._grid = TickGrid(rate_hz)
        self._checks = PlanChecks(names, max_dt=max_dt, max_span_s=max_span_s,
                                  future_tolerance_s=future_tolerance_s)

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
    def _check_position(self, position) -> np.ndarray:
        pos = np.asarray(position, dtype=np.float64).reshape(-1)
        if pos.shape != (self.dim,) or not np.all(np.isfinite(pos)):
            raise ValueError(f"a position needs {self.dim} finite values, got {position!r}")
        return pos.copy()

    def _first_free_tick(self, now: float) -> int:
        first = self._grid.floor(now) + 1
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
        dry = self._last_tick is None or self._last_tick < self._grid.floor(now)
        if dry and not self._dry and not self._stopped:
            self.underruns += 1
        self._dry = dry
        return self.last_command

    def _commit_until(self, now: float) -> None:
        n = int(np.searchsorted(self._ticks, self._grid.floor(now), side="right"))
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
        tick_now = self._grid.floor(now)
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
            checked = self._checks.chunk(chunk, now, self._last_round, self._last_capture)
            ticks, pos = self._grid.chunk_nodes(checked.actions[:checked.horizon], checked.stamp,
                                                checked.dt, self._first_free_tick(now), now)
        except PlanRejected as rej:
            self.chunks_rejected += 1
            return self._reject(rej)
        except Exception as exc:  # bad input must never take the controller down
            self.chunks_rejected += 1
            return self._reject(PlanRejected(RejectReason.MALFORMED, f"{type(exc).__name__}: {exc}"))
        self._merge_chunk(ticks, pos, int(chunk.round_id))
        self._last_round = int(chunk.round_id)
        self._last_capture = checked.stamp
        self._last_dt = checked.dt
        self._stopped = False
        self.chunks_accepted += 1
        return InsertOutcome(True, None, int(ticks.shape[0]))

    def _reject(self, rej: PlanRejected) -> InsertOutcome:
        self._rejections[rej.reason.value] += 1
        self.last_reject_reason = rej.reason.value
        self.last_reject_detail = rej.detail
        return InsertOutcome(False, rej.reason.value, 0, rej.detail)

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
            seg = self._checks.segment(start_time, dt, positions, committed_flags, round_id, now,
                                       joint_names, self._last_round)
            ticks, pos, locked = self._grid.segment_nodes(seg, self._first_free_tick(now), now)
        except PlanRejected as rej:
            self.segments_rejected += 1
            return self._reject(rej)
        except Exception as exc:
            self.segments_rejected += 1
            return self._reject(PlanRejected(RejectReason.MALFORMED, f"{type(exc).__name__}: {exc}"))
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
        self._last_dt = seg.dt
        self._stopped = False
        self.segments_accepted += 1
        return InsertOutcome(True, None, int(ticks.shape[0]))
