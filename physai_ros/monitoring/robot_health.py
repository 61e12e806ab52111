"""What the robot-side nodes report on /diagnostics, as plain logic (no rclpy).

Each class turns plain counters into a level and a one-line message on a status wrapper
(ours or diagnostic_updater's: only ``summary(level, message)`` and ``add(key, value)`` are
called, with one-byte levels). The nodes register them with the monitoring Updater; the
Updater names them "<node>: <task>".
"""
from __future__ import annotations

from collections import Counter
from typing import Mapping

from physai_ros.control.types import ExecutionState
from physai_ros.monitoring.diagnostics import ERROR, OK, WARN, level_byte

# Refusals that say an answer came too late or out of order: the network or the server is
# slow, the pipeline is fine. Everything else means a producer sends wrong data (a model or
# config bug) and is an error.
TIMING_REASONS = frozenset({"stale_round", "time_backwards", "expired", "capture_in_future"})


def _worst(levels) -> int:
    return max(levels, default=OK)


class RejectionHealth:
    """Refused inputs by reason; the level follows what was refused since the previous update,
    so the status recovers once bad input stops (totals stay in the values)."""

    def __init__(self) -> None:
        self._prev: Counter = Counter()

    @staticmethod
    def level_of(reason: str) -> int:
        return WARN if reason in TIMING_REASONS else ERROR

    def run(self, stat, totals: Mapping[str, int]):
        now = Counter({k: int(v) for k, v in totals.items() if v})
        new = now - self._prev
        self._prev = now
        if new:
            level = _worst(self.level_of(r) for r in new)
            parts = ", ".join(f"{r} {n}" for r, n in sorted(new.items()))
            stat.summary(level_byte(level), f"{sum(new.values())} refused since last update: {parts}")
        else:
            stat.summary(level_byte(OK), f"no refusals since last update ({sum(now.values())} in total)")
        stat.add("rejected_total", str(sum(now.values())))
        for reason, n in sorted(now.items()):
            stat.add(f"rejected.{reason}", str(n))
        return stat


class BufferHealth:
    """The trajectory buffer as an operator sees it.

    OK while executing (or holding the start position before the first chunk); WARN while
    waiting for joint_states, while a robot_client hold is in effect, when underruns happened
    since the last update or while the buffer is dry; ERROR once it has stayed dry, with no
    hold asked for, for ``dry_error_s`` (the chunk source is gone).
    """

    def __init__(self, rate_hz: float, dry_error_s: float = 2.0) -> None:
        self.rate_hz = float(rate_hz)
        self.dry_error_s = float(dry_error_s)
        self._prev_underruns = 0
        self._dry_since: float | None = None

    def run(self, stat, now: float, st: ExecutionState, *, have_start: bool, seen_chunk: bool,
               holding_round: int | None, holds: Mapping[str, int], client_answers: Mapping[str, int]):
        new_underruns = st.underruns - self._prev_underruns
        self._prev_underruns = st.underruns
        dry_after_chunk = st.buffer_dry and seen_chunk and holding_round is None
        if dry_after_chunk:
            if self._dry_since is None:
                self._dry_since = now
        else:
            self._dry_since = None
        dry_for = 0.0 if self._dry_since is None else now - self._dry_since
        if not seen_chunk and not have_start:
            level, message = WARN, "waiting for joint_states (nothing safe to command)"
        elif holding_round is not None and st.buffer_dry:
            level, message = WARN, f"holding for robot_client (rounds <= {holding_round} refused)"
        elif dry_after_chunk and dry_for >= self.dry_error_s:
            level, message = ERROR, f"buffer dry for {dry_for:.1f} s: no chunks arrive, holding last position"
        elif dry_after_chunk:
            level, message = WARN, "buffer dry: holding last position"
        elif new_underruns > 0:
            level, message = WARN, f"{new_underruns} underrun(s) since last update"
        elif not seen_chunk:
            level, message = OK, "idle: holding the start position"
        else:
            level, message = OK, f"executing round {st.executing_round_id}, {st.buffer_nodes / self.rate_hz:.2f} s planned"
        stat.summary(level_byte(level), message)
        for key, value in (
                ("buffer_nodes", st.buffer_nodes), ("planned_s", f"{st.buffer_nodes / self.rate_hz:.3f}"),
                ("actions_remaining", st.actions_remaining), ("executing_round_id", st.executing_round_id),
                ("buffer_dry", st.buffer_dry), ("underruns", st.underruns),
                ("underruns_since_last_update", new_underruns), ("chunks_accepted", st.chunks_accepted),
                ("holds_applied", holds.get("applied", 0)), ("holds_ignored", holds.get("ignored", 0)),
                # The server's refusals / errors for the robot client: not executed, not rejections.
                ("server_refusals_seen", client_answers.get("refused", 0)),
                ("server_errors_seen", client_answers.get("error", 0))):
            stat.add(key, str(value))
        return stat


class CommandHealth:
    """sim_robot's view of the joint_trajectory commands it follows."""

    def __init__(self) -> None:
        self._prev_received = 0
        self._prev_rejected = 0

    def run(self, stat, received: int, rejected: int, last_error: str):
        new_rx, new_rej = received - self._prev_received, rejected - self._prev_rejected
        self._prev_received, self._prev_rejected = received, rejected
        if new_rej > 0:
            stat.summary(level_byte(ERROR), f"{new_rej} joint_trajectory refused since last update: {last_error}")
        elif received == 0:
            stat.summary(level_byte(WARN), "no joint_trajectory yet: holding the initial pose")
        elif new_rx == 0:
            stat.summary(level_byte(WARN), "no joint_trajectory since last update: holding the last command")
        else:
            stat.summary(level_byte(OK), "following joint_trajectory")
        for key, value in (("received", received), ("received_since_last_update", new_rx),
                           ("rejected", rejected), ("last_error", last_error)):
            stat.add(key, str(value))
        return stat


def episode_status(stat, status: Mapping):
    """The task's progress (TaskStatus fields): always OK, timeouts are a task outcome."""
    stat.summary(level_byte(OK), f"{status['task']} episode {status['episode']}: "
                                 f"{status['successes']} done, {status['timeouts']} timed out")
    for key in ("task", "episode", "episode_time", "episodes_finished", "successes", "timeouts", "grasped"):
        stat.add(key, str(status[key]))
    return stat
