"""A real engine_worker process for the worker tests (the in-test node and waits: test/ros_rig.py)."""
from __future__ import annotations

from physai_ros.fleet.processes import ProcessSpec

# Process start-up (imports, engine build, profile measurement, discovery) on a loaded 2-core box.
STARTUP_S = 90


def worker_spec(instance_id: str, **params) -> ProcessSpec:
    p = {"instance_id": instance_id, "preset": "tiny", "seed": 7, "max_batch": 3,
         "profile_reps": 1, "profile_views": 1, "profile_tokens": 8, "heartbeat_period_s": 0.2}
    p.update(params)
    return ProcessSpec(f"engine_worker_{instance_id}", "physai_ros.nodes.engine_worker", "", p,
                       executable="engine_worker")
