"""Numeric topics for rqt_plot: std_msgs/Float64 on /<robot>/metrics/<name> and
/fleet/metrics/<name>.

Callers `set()` a metric as often as they like (from a 480 Hz loop too); the newest value of
each metric is published at most once per `period_s` by a timer, so plots stay light and the
last value is never lost to throttling. `MetricBoard` is the plain part (naming, validation,
pending values, counts); `MetricsPublisher` adds the publishers and the timer.
"""
from __future__ import annotations

import math
import re
from collections import Counter

FLEET = "fleet"
_TOKEN = re.compile(r"[A-Za-z_][A-Za-z0-9_]*\Z")


def _valid_name(name: str) -> bool:
    return isinstance(name, str) and bool(name) and all(_TOKEN.match(tok) for tok in name.split("/"))


def metric_topic(robot_id: str | None, name: str) -> str:
    """/<robot>/metrics/<name>, or /fleet/metrics/<name> for robot_id None. Raises ValueError on
    names that are not valid ROS topic tokens (letters, digits, '_'; '/' between tokens)."""
    scope = FLEET if robot_id is None else robot_id
    if robot_id == FLEET:
        raise ValueError(f"'{FLEET}' is reserved for fleet metrics; pass robot_id=None")
    if not isinstance(scope, str) or not _TOKEN.match(scope):
        raise ValueError(f"robot id {scope!r} is not a valid ROS name token")
    if not _valid_name(name):
        raise ValueError(f"metric name {name!r} is not a valid ROS topic name (tokens of [A-Za-z0-9_], "
                         f"not starting with a digit, separated by '/')")
    return f"/{scope}/metrics/{name}"


class MetricBoard:
    """Newest value per metric topic, waiting to be published."""

    def __init__(self) -> None:
        self._pending: dict[str, float] = {}
        self.topics: set[str] = set()
        self.refused: Counter = Counter()  # reason -> count
        self.last_refusal = ""
        self.accepted = 0

    def set(self, robot_id: str | None, name: str, value) -> bool:
        """Record a value; False (counted, with `last_refusal` saying why) for bad input."""
        try:
            topic = metric_topic(robot_id, name)
        except ValueError as exc:
            return self._refuse("bad_name", str(exc))
        if isinstance(value, bool) or not isinstance(value, (int, float)):
            return self._refuse("not_numeric", f"{name}: {type(value).__name__} is not a number")
        if not math.isfinite(value):
            # rqt_plot draws NaN/inf as gaps or blows up the axis; a missing point says the same
            return self._refuse("non_finite", f"{name}: {value}")
        self._pending[topic] = float(value)
        self.topics.add(topic)
        self.accepted += 1
        return True

    def set_many(self, robot_id: str | None, values: dict) -> int:
        return sum(self.set(robot_id, k, v) for k, v in values.items())

    def take_pending(self) -> list[tuple[str, float]]:
        out = sorted(self._pending.items())
        self._pending.clear()
        return out

    def _refuse(self, reason: str, detail: str) -> bool:
        self.refused[reason] += 1
        self.last_refusal = f"{reason}: {detail}"
        return False


class MetricsPublisher(MetricBoard):
    """A MetricBoard published from `node` every `period_s` (default 0.1 s: 10 Hz per metric)."""

    def __init__(self, node, period_s: float = 0.1, qos_depth: int = 10):
        super().__init__()
        from std_msgs.msg import Float64  # here, so MetricBoard stays importable without ROS

        if not period_s > 0:
            raise ValueError(f"period_s must be positive, got {period_s!r}")
        self._float64 = Float64
        self.node = node
        self.qos_depth = qos_depth
        self.publishers: dict[str, object] = {}
        self.published = 0
        self.timer = node.create_timer(period_s, self.flush)

    def flush(self) -> int:
        n = 0
        for topic, value in self.take_pending():
            pub = self.publishers.get(topic)
            if pub is None:
                pub = self.publishers[topic] = self.node.create_publisher(self._float64, topic, self.qos_depth)
            pub.publish(self._float64(data=value))
            n += 1
        self.published += n
        return n

    def destroy(self) -> None:
        self.node.destroy_timer(self.timer)
        for pub in self.publishers.values():
            self.node.destroy_publisher(pub)
        self.publishers.clear()
