"""A small equivalent of ROS's diagnostic_updater, without rclpy.

Same conventions as the ROS package, so `rqt_robot_monitor` reads our /diagnostics the same way:
a status per named task, published as "<node name>: <task name>" with a hardware id, a level
(OK 0, WARN 1, ERROR 2, STALE 3), a one-line message and string key/value pairs. The class and
method names follow diagnostic_updater's Python API (`DiagnosticStatusWrapper.summary`,
`mergeSummary`, `add`, `FunctionDiagnosticTask`, `FrequencyStatus(FrequencyStatusParam(...))`),
so node code written against it runs on either implementation (the switch is
physai_ros/ros/diagnostics_updater.py).

Additions for this project are in monitoring.thresholds: `Thresholds` (levels from a
fleet.yaml-style mapping) and `MetricsTask` (a task that reports a mapping of numbers and grades
them), written to work with either implementation's status wrapper.

Nothing here touches rclpy or message types; physai_ros/ros/diagnostics_publisher.py converts to
DiagnosticArray.
"""
from __future__ import annotations

import math
import threading
import time
from collections import Counter
from dataclasses import dataclass
from typing import Callable

OK, WARN, ERROR, STALE = 0, 1, 2, 3
LEVEL_NAMES = {OK: "OK", WARN: "WARN", ERROR: "ERROR", STALE: "STALE"}


def as_level(level) -> int:
    """int 0-3, or the one-byte form DiagnosticStatus uses (b'\\x01'), -> int."""
    if isinstance(level, (bytes, bytearray)) and len(level) == 1:
        level = level[0]
    if isinstance(level, bool) or not isinstance(level, int) or level not in LEVEL_NAMES:
        raise ValueError(f"diagnostic level must be one of 0..3 (OK, WARN, ERROR, STALE), got {level!r}")
    return level


def level_byte(level) -> bytes:
    """The DiagnosticStatus.level form of a level (what diagnostic_updater's wrapper stores)."""
    return bytes([as_level(level)])


def format_number(value) -> str:
    if isinstance(value, float):
        return f"{value:.6g}"
    return str(value)


class DiagnosticStatusWrapper:
    """The fields of diagnostic_msgs/DiagnosticStatus, as plain Python (level held as int)."""

    def __init__(self, name: str = "", hardware_id: str = "", level=OK, message: str = ""):
        self.name = name
        self.hardware_id = hardware_id
        self._level = as_level(level)
        self.message = message
        self.values: list[tuple[str, str]] = []

    @property
    def level(self) -> int:
        return self._level

    @level.setter
    def level(self, value) -> None:
        self._level = as_level(value)

    def summary(self, *args) -> None:
        """summary(level, message), or summary(other_status) to copy its level and message."""
        if len(args) == 1:
            self.level, self.message = args[0].level, args[0].message
        elif len(args) == 2:
            self.level, self.message = args[0], str(args[1])
        else:
            raise TypeError("summary(level, message) or summary(status)")

    def clearSummary(self) -> None:
        self.summary(OK, "")

    def mergeSummary(self, *args) -> None:
        """Keep the worse level. Messages of the same kind (both OK or both not OK) are joined
        with '; '; a problem's message replaces an OK one; an OK message never hides a problem."""
        if len(args) == 1:
            level, message = as_level(args[0].level), args[0].message
        elif len(args) == 2:
            level, message = as_level(args[0]), str(args[1])
        else:
            raise TypeError("mergeSummary(level, message) or mergeSummary(status)")
        if (level > OK) == (self._level > OK):
            self.message = f"{self.message}; {message}" if self.message else message
        elif level > self._level:
            self.message = message
        self._level = max(self._level, level)

    def add(self, key: str, value) -> None:
        self.values.append((str(key), format_number(value)))

    # snake_case spellings for our own code
    clear_summary = clearSummary
    merge_summary = mergeSummary

    def to_dict(self) -> dict:
        return {"name": self.name, "hardware_id": self.hardware_id, "level": self._level,
                "message": self.message, "values": dict(self.values)}


class DiagnosticTask:
    def __init__(self, name: str):
        self.name = name

    def getName(self) -> str:
        return self.name

    def run(self, stat):
        return stat


class FunctionDiagnosticTask(DiagnosticTask):
    """A task whose run() is fn(stat) -> stat."""

    def __init__(self, name: str, fn: Callable):
        super().__init__(name)
        self.fn = fn

    def run(self, stat):
        return self.fn(stat)


class DiagnosticTaskVector:
    """Named tasks run in order; the pure core of the Updater (no publishing here).

    A task that raises, or returns something other than a status, yields an ERROR status saying
    so (counted in `task_errors`): one broken task never stops the others being reported.
    """

    def __init__(self) -> None:
        self.tasks: list[tuple[str, Callable]] = []
        self.lock = threading.Lock()
        self.task_errors: Counter = Counter()

    def add(self, *args) -> None:
        """add(task) or add(name, fn)."""
        if len(args) == 1:
            name, fn = args[0].getName(), args[0].run
        elif len(args) == 2:
            name, fn = args
        else:
            raise TypeError("add(task) or add(name, fn)")
        if not isinstance(name, str) or not name:
            raise ValueError(f"a diagnostic task needs a non-empty name, got {name!r}")
        with self.lock:
            self.tasks.append((name, fn))

    def removeByName(self, name: str) -> bool:
        with self.lock:
            for i, (n, _) in enumerate(self.tasks):
                if n == name:
                    del self.tasks[i]
                    return True
        return False

    def run_tasks(self, node_name: str, hardware_id: str,
                  make_status: Callable[[], object] = DiagnosticStatusWrapper) -> list:
        out = []
        with self.lock:
            tasks = list(self.tasks)
        for name, fn in tasks:
            stat = make_status()
            stat.name, stat.hardware_id = name, hardware_id
            # diagnostic_updater's default: a task that forgets to report shows up as an error
            stat.summary(level_byte(ERROR), "No message was set")
            try:
                result = fn(stat)
                if result is None:
                    result = stat  # tolerate a task that fills stat in place and forgets to return it
                if not hasattr(result, "message") or not hasattr(result, "level"):
                    raise TypeError(f"returned {type(result).__name__}, not a status")
                stat = result
            except Exception as exc:  # a broken task is reported, never propagated
                self.task_errors[name] += 1
                stat = make_status()
                stat.hardware_id = hardware_id
                stat.summary(level_byte(ERROR), f"diagnostic task failed: {type(exc).__name__}: {exc}")
            stat.name = f"{node_name}: {name}"
            out.append(stat)
        return out


@dataclass
class FrequencyStatusParam:
    """freq_bound {'min': Hz, 'max': Hz} (max optional); the accepted band is
    [min*(1-tolerance), max*(1+tolerance)]; window_size = number of updates the rate spans."""
    freq_bound: dict
    tolerance: float = 0.1
    window_size: int = 5

    def __post_init__(self):
        if "min" not in self.freq_bound:
            raise ValueError("freq_bound needs a 'min' key (Hz)")
        lo, hi = self.freq_bound["min"], self.freq_bound.get("max", math.inf)
        if not (math.isfinite(lo) and lo >= 0 and hi >= lo):
            raise ValueError(f"bad frequency band min={lo!r} max={hi!r}")
        if not (0 <= self.tolerance < 1):
            raise ValueError(f"tolerance must be in [0, 1), got {self.tolerance!r}")
        if int(self.window_size) < 1:
            raise ValueError(f"window_size must be >= 1, got {self.window_size!r}")


class FrequencyStatus(DiagnosticTask):
    """Achieved rate of tick() calls against an expected band, like diagnostic_updater's.

    Each run() remembers (tick count, time); the rate is the ticks since the run `window_size`
    runs ago divided by the time since then, so at 1 Hz updates and window 5 it is the rate over
    the last ~5 s. ERROR when no tick arrived in the window, WARN outside the band, else OK.
    """

    def __init__(self, params: FrequencyStatusParam, name: str = "Frequency Status",
                 clock: Callable[[], float] = time.monotonic):
        super().__init__(name)
        self.params = params
        self.clock = clock
        self.lock = threading.Lock()
        self.clear()

    def clear(self) -> None:
        with self.lock:
            now = self.clock()
            self.count = 0
            n = int(self.params.window_size)
            self._hist = [(0, now)] * n
            self._idx = 0

    def tick(self) -> None:
        with self.lock:
            self.count += 1

    def achieved_hz(self) -> float:
        """The rate the next run() would report, without advancing the window."""
        with self.lock:
            seq, t0 = self._hist[self._idx]
            dt = self.clock() - t0
            return (self.count - seq) / dt if dt > 0 else 0.0

    def run(self, stat):
        with self.lock:
            now, count = self.clock(), self.count
            seq0, t0 = self._hist[self._idx]
            self._hist[self._idx] = (count, now)
            self._idx = (self._idx + 1) % len(self._hist)
        events, window = count - seq0, now - t0
        freq = events / window if window > 0 else 0.0
        lo = self.params.freq_bound["min"]
        hi = self.params.freq_bound.get("max", math.inf)
        tol = self.params.tolerance
        if events == 0:
            stat.summary(level_byte(ERROR), "No events recorded.")
        elif freq < lo * (1 - tol):
            stat.summary(level_byte(WARN), "Frequency too low.")
        elif freq > hi * (1 + tol):
            stat.summary(level_byte(WARN), "Frequency too high.")
        else:
            stat.summary(level_byte(OK), "Desired frequency met")
        stat.add("Events in window", str(events))
        stat.add("Events since startup", str(count))
        stat.add("Duration of window (s)", f"{window:.6f}")
        stat.add("Actual frequency (Hz)", f"{freq:.6f}")
        if lo == hi:
            stat.add("Target frequency (Hz)", f"{lo:.6f}")
        if lo > 0:
            stat.add("Minimum acceptable frequency (Hz)", f"{lo * (1 - tol):.6f}")
        if math.isfinite(hi):
            stat.add("Maximum acceptable frequency (Hz)", f"{hi * (1 + tol):.6f}")
        return stat
