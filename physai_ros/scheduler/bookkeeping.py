"""Per-task generation/execution history and the wait ratio (Kairos §3.2.1, Algorithm 1 l.1-6).

A task is a sequence of rounds; round j has a generation interval G_j (request dispatched ->
chunk produced) and an execution interval E_j (robot executes the chunk's actions). E_j is not
seen by the server directly: the request of round j+1 carries E_j's start and the number of
actions still queued, which with the control period gives E_j's end.

Wait between round j and j+1, by the dominant phase of round j:
    |G_j| >= |E_j|:  W_j = G_{j+1}.start - G_j.end   (generation side)
    otherwise:       W_j = E_{j+1}.start - E_j.end   (execution side)
wait ratio = sum_j W_j / (now - task start).

Open question of the paper, decided here (docs/scheduler.md): the round a pending request
belongs to has no successor yet, so its W is not recorded. We count the wait that is already
happening, with the same dominant-phase rule (the default, provisional_wait="paper"):
    generation side:  W = now - G_j.end          (the next generation could have started)
    execution side:   W = max(0, now - E_j.end)  (the robot has run dry and is waiting)
A robot that is still executing its previous chunk is not waiting, so nothing is counted for
it: the paper's definition of wait as delay relative to when the next chunk is needed (§3.2).
The earlier reading, provisional_wait="lookahead", counted the execution side from
E_j.end - |G_j| (the moment the next generation must start for the robot never to run dry);
it counts a robot that is busy executing as waiting, which the paper does not (the audit's
audit: 0.408 instead of 0.102 on its example). Kept as an option for the ablation.
The task's first request has no previous round, and Algorithm 1 only sums waits between
consecutive rounds, so by default its queueing delay is not a wait (count_first_wait=False).
With count_first_wait=True it counts as the wait of a zero-length round at task start; that
puts every new task in the top bucket, which measured worse in our simulator (docs/scheduler.md).
"""
from __future__ import annotations

from dataclasses import dataclass
from typing import Optional


@dataclass
class RoundRecord:
    round_id: int
    g_start: Optional[float] = None
    g_end: Optional[float] = None
    e_start: Optional[float] = None
    e_end: Optional[float] = None

    @property
    def g_len(self) -> Optional[float]:
        if self.g_start is None or self.g_end is None:
            return None
        return self.g_end - self.g_start

    @property
    def e_len(self) -> Optional[float]:
        if self.e_start is None or self.e_end is None:
            return None
        return self.e_end - self.e_start

    def generation_dominant(self) -> bool:
        """Dominant phase of this round; without execution info only the generation side is known."""
        g, e = self.g_len, self.e_len
        return e is None or (g is not None and g >= e)


# Tolerance when matching a piggybacked execution phase to the round whose chunk it executes:
# the robot starts a chunk shortly after the server produced it (transport, clock offsets).
_EXEC_MATCH_TOL_S = 0.05


class TaskBook:
    """History of one task. Keeps only the rounds whose wait is still open (at most 2-3),
    plus running sums, so memory and time per event are O(1) regardless of task length."""

    __slots__ = (
        "task_id", "t_start", "wait_sum", "attained_s", "count_first_wait", "lookahead",
        "last_exec_s", "last_gen_s", "_rounds", "_first_wait_open", "last_dispatched_round",
        "rounds_completed", "last_seen",
    )

    def __init__(self, task_id: str, t_start: float, count_first_wait: bool = False,
                 lookahead: bool = False) -> None:
        self.task_id = task_id
        self.t_start = t_start
        self.lookahead = lookahead   # provisional_wait="lookahead": execution side from E.end - |G|
        self.wait_sum = 0.0          # sum of closed W_j
        self.attained_s = 0.0        # accumulated generation service (Autellix's priority)
        self.count_first_wait = count_first_wait
        self.last_exec_s: Optional[float] = None
        self.last_gen_s: Optional[float] = None
        self.last_dispatched_round: Optional[int] = None
        self.rounds_completed = 0
        self.last_seen = t_start     # last event of this task (for forgetting abandoned tasks)
        self._rounds: dict[int, RoundRecord] = {}
        self._first_wait_open = True

    # ---- events -------------------------------------------------------------------------
    def on_request(self, round_id: int, arrival: float, exec_phase_start: Optional[float],
                   actions_remaining: int, control_period: float) -> None:
        """A request for `round_id` arrived with the robot's piggybacked execution info."""
        self.last_seen = max(self.last_seen, arrival)
        if exec_phase_start is None:
            return
        e_end = max(exec_phase_start, arrival + actions_remaining * control_period)
        rec = self._round_executing(exec_phase_start, before=round_id)
        if rec is None:
            return
        rec.e_start, rec.e_end = exec_phase_start, e_end
        self.last_exec_s = e_end - exec_phase_start
        self._close_waits()

    def on_dispatch(self, round_id: int, now: float) -> None:
        rec = self._rounds.get(round_id)
        if rec is None:
            rec = self._rounds[round_id] = RoundRecord(round_id)
        rec.g_start = now
        self.last_seen = max(self.last_seen, now)
        if self._first_wait_open:
            self._first_wait_open = False
            if self.count_first_wait:
                self.wait_sum += max(0.0, now - self.t_start)
        # A requeued (lost) older round dispatched again must not lower it: the task's newer
        # round was served, and a late refresh of that one would otherwise pass as new.
        last = self.last_dispatched_round
        self.last_dispatched_round = round_id if last is None else max(last, round_id)
        self._close_waits()

    def on_complete(self, round_id: int, now: float, generation_s: float) -> None:
        rec = self._rounds.get(round_id)
        if rec is None or rec.g_start is None:
            return
        rec.g_end = max(now, rec.g_start)
        self.last_seen = max(self.last_seen, now)
        self.last_gen_s = rec.g_end - rec.g_start
        self.attained_s += max(0.0, generation_s)
        self.rounds_completed += 1
        self._close_waits()

    # ---- queries ------------------------------------------------------------------------
    def ongoing_wait(self, now: float, round_id: int) -> float:
        """Provisional W of the round before `round_id`, as if `round_id` were dispatched now."""
        prev = self._previous_completed(round_id)
        if prev is None:
            if self._first_wait_open and self.count_first_wait:
                return max(0.0, now - self.t_start)
            return 0.0
        return max(0.0, now - self._anchor_of(prev))

    def wait_anchor(self, round_id: int) -> float:
        """Time from which the pending round's provisional wait grows: ongoing_wait(now) ==
        max(0, now - anchor). Constant while the request is queued (nothing else happens to
        the task meanwhile), which lets the scheduler compute ratios without this object."""
        prev = self._previous_completed(round_id)
        if prev is None:
            return self.t_start if (self._first_wait_open and self.count_first_wait) else float("inf")
        return self._anchor_of(prev)

    def _anchor_of(self, prev: RoundRecord) -> float:
        if prev.generation_dominant():
            return prev.g_end
        return prev.e_end - (prev.g_len or 0.0) if self.lookahead else prev.e_end

    def wait_ratio(self, now: float, round_id: int) -> float:
        """sum W / lifetime, including the pending round's provisional wait, clipped to [0, 1]."""
        w = self.wait_sum + self.ongoing_wait(now, round_id)
        life = now - self.t_start
        if life <= 0.0:
            return 1.0 if w > 0.0 else 0.0
        r = w / life
        return 1.0 if r > 1.0 else r

    # ---- internals ----------------------------------------------------------------------
    def _previous_completed(self, round_id: int) -> Optional[RoundRecord]:
        best = None
        for rid, rec in self._rounds.items():
            if rid < round_id and rec.g_end is not None and (best is None or rid > best.round_id):
                best = rec
        return best

    def _round_executing(self, exec_start: float, before: int) -> Optional[RoundRecord]:
        """The latest completed round (older than `before`) whose chunk existed when the
        reported execution phase started."""
        best = None
        for rid, rec in self._rounds.items():
            if rid < before and rec.g_end is not None and rec.g_end <= exec_start + _EXEC_MATCH_TOL_S:
                if best is None or rid > best.round_id:
                    best = rec
        return best

    def _close_waits(self) -> None:
        """Close every W_j whose successor value is now recorded; forget closed rounds."""
        ids = sorted(self._rounds)
        for a, b in zip(ids, ids[1:]):
            ra, rb = self._rounds[a], self._rounds[b]
            if ra.g_end is None:
                break
            if ra.generation_dominant():
                # E_j arrives with round j+1's request, before j+1 is dispatched, so at
                # G_{j+1}.start the dominant phase of round j is final.
                if rb.g_start is None:
                    break
                self.wait_sum += max(0.0, rb.g_start - ra.g_end)
            else:
                if rb.e_start is None:
                    break
                self.wait_sum += max(0.0, rb.e_start - ra.e_end)
            del self._rounds[a]
