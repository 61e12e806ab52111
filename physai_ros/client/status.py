"""A robot client's status as plain data (the 1 Hz client_status JSON, the fleet summary's
source): the core's state, counters, round ledger and latency percentiles. The node adds what
only it sees (unreadable messages, authentication refusals, its streaming, pipeline and operator
parts)."""
from __future__ import annotations

from typing import Any

import numpy as np


def core_status(core, now: float) -> dict[str, Any]:
    """core: a RobotClientCore; now: the ROS clock's seconds (the ledger's time base)."""
    c = core.counters
    lat = np.array(c.latencies_s[-2000:]) * 1e3
    ledger = core.ledger.summary(now)
    return {
        "robot_id": core.robot.id, "state": core.state.value,
        "server_instance": core.server_instance, "round_id": core.round_id,
        "sent": ledger.sent, "chunks_ok": c.chunks_ok, "refused": c.refused, "errors": c.errors,
        "slo_misses": c.slo_misses, "slo_startup_misses": c.slo_startup_misses, "fallbacks": dict(c.fallbacks),
        "registrations": c.registrations, "server_restarts": c.server_restarts,
        "latency_ms_p50": float(np.percentile(lat, 50)) if lat.size else None,
        "latency_ms_p99": float(np.percentile(lat, 99)) if lat.size else None,
        "round_ledger": ledger.as_dict(),
        # The factory schedule's word at registration (docs/factory.md); 0 / {} without one.
        "max_request_rate_hz": core.trigger.max_rate_hz,
        "routes": dict(core.routes),
    }
