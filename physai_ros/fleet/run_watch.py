"""What physai-fleet follows while a fleet runs, besides the fleet monitor's own topics: each
robot client's status and pipeline events, and the task traces it records (--record-trace)."""
from __future__ import annotations

import argparse
import sys
from pathlib import Path

from physai_ros.fleet.arguments import fleet_config


def watch_clients(monitor, robots: dict[str, int]) -> dict[str, dict]:
    """Newest client_status JSON per robot (robot_client publishes it at 1 Hz)."""
    import json

    from std_msgs.msg import String

    from physai_ros.protocol.topics import CLIENT_STATUS_TOPIC, robot_topic
    from physai_ros.ros import qos

    status: dict[str, dict] = {}
    for ns in robots:
        monitor.create_subscription(String, robot_topic(ns, CLIENT_STATUS_TOPIC),
                                    lambda m, ns=ns: status.__setitem__(ns, json.loads(m.data)),
                                    qos.reliable_qos())
    return status


def watch_pipeline_events(monitor, robots: dict[str, int]):
    """PipelineEvents per robot (robot_client publishes one per pipeline decision), counted. Transient
    local, as the clients publish them: events from before discovery matched (a tiny model's
    first answers come within a second of registration) arrive once it does."""
    from physai_ros_interfaces.msg import PipelineEvent

    from physai_ros.monitoring.pipeline_report import EventTally
    from physai_ros.protocol.topics import PIPELINE_EVENT_TOPIC, robot_topic
    from physai_ros.ros import qos

    tally = EventTally()
    for ns in robots:
        monitor.create_subscription(PipelineEvent, robot_topic(ns, PIPELINE_EVENT_TOPIC),
                                    lambda m, ns=ns: tally.add_msg(ns, m), qos.latched_qos(100))
    return tally


def trace_meta(args: argparse.Namespace) -> dict:
    cfg = fleet_config(args.fleet, args.robots, args.checkpoint)
    m = cfg.server.model
    return {"source": "physai-fleet --record-trace", "fleet": args.fleet or "embedded config/fleet.yaml",
            "model": m.checkpoint or f"preset {m.preset} (random weights, seed {m.seed})",
            "device": cfg.server.device, "scheduler": cfg.server.scheduler,
            "engine_instances": cfg.server.engine_instances,
            "robots": {r.namespace: {"task": r.task.name, "horizon_policy": r.task.horizon_policy,
                                     "horizon_params": list(r.task.horizon_params),
                                     "action_rate_hz": r.task.action_rate_hz} for r in cfg.robots}}


def write_trace(capture, path: str, elapsed: float) -> bool:
    """Save the recorded traces; False (and a message) when no robot completed a round."""
    from physai_ros.sim.traces import save_traces

    traces = capture.trace_set()
    traces.meta["duration_s"] = round(elapsed, 3)
    if not traces.tasks:
        print(f"physai-fleet: no trace written: no robot completed a round (ignored messages "
              f"{traces.meta['ignored_messages']})", file=sys.stderr)
        return False
    Path(path).parent.mkdir(parents=True, exist_ok=True)
    save_traces(path, traces)
    rounds = ", ".join(f"{t.robot_id} {len(t.rounds)}" for t in traces.tasks)
    print(f"physai-fleet: trace {path} (rounds per robot: {rounds}; ignored messages "
          f"{traces.meta['ignored_messages']}, dropped rounds {traces.meta['dropped_rounds']})", flush=True)
    return True
