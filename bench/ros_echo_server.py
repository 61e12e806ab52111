"""The rclpy floor for bench/serving_vs_openpi.py: the least a ROS 2 Python server can do per
observation. It subscribes to /<robot>/observation (physai_ros_interfaces/Observation, reliable)
for each robot named, and answers every message at once with an ActionChunk of the engine's
shape on /<robot>/action_chunk: no registration, validation, scheduling, engine or thread
hand-off; EventsExecutor, as the policy server. What remains is rclpy and DDS themselves.
--model-ms computes that long in the callback before answering, reported as inference_ms
(bench/physai_bench/model_time.py says why).

--batch is the floor for a server that batches robots, as ours does: the callback only queues the
observation, and one worker thread takes everything queued, computes --model-ms once for the
batch and answers each, reporting queue_ms (arrival to the batch's start) as our server does.
A batching server needs that hand-off: while the model computes, the executor must go on
receiving. What the worker adds beyond a callback is one Condition hand-off per batch.

  python bench/ros_echo_server.py --robots r0,r1 --horizon 50 --action-dim 5 [--model-ms 40] [--batch]
"""
from __future__ import annotations

import argparse
import array
import threading
import time

import numpy as np


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--robots", required=True)
    ap.add_argument("--horizon", type=int, default=50)
    ap.add_argument("--action-dim", type=int, default=5)
    ap.add_argument("--model-ms", type=float, default=0.0, help="model time to stand in for, per answer")
    ap.add_argument("--batch", action="store_true",
                    help="queue observations; a worker thread answers all queued ones after one model time")
    args = ap.parse_args()

    import rclpy
    from physai_ros_interfaces.msg import ActionChunk, Observation
    from rclpy.executors import ExternalShutdownException
    from rclpy.experimental import EventsExecutor

    from physai_ros.protocol.topics import ACTION_CHUNK_TOPIC, OBSERVATION_TOPIC, robot_topic
    from physai_ros.ros.qos import reliable_qos
    from physai_bench.model_time import compute_for

    rclpy.init()
    node = rclpy.create_node("bench_ros_echo")
    actions = array.array("f", np.zeros(args.horizon * args.action_dim, np.float32).tobytes())
    pubs = {}

    def chunk_for(msg: Observation) -> ActionChunk:
        out = ActionChunk(robot_id=msg.robot_id, task_id=msg.task_id, round_id=msg.round_id, status=0,
                          num_actions=args.horizon, action_dim=args.action_dim, horizon=args.horizon)
        out.header.stamp = msg.header.stamp
        out.actions = actions
        return out

    def answer(msg: Observation, rid: str) -> None:
        out = chunk_for(msg)
        out.inference_ms = compute_for(args.model_ms)
        pubs[rid].publish(out)

    queued: list[tuple[Observation, str, float]] = []
    ready = threading.Condition()

    def enqueue(msg: Observation, rid: str) -> None:
        with ready:
            queued.append((msg, rid, time.perf_counter()))
            ready.notify()

    def batch_worker() -> None:
        while True:
            with ready:
                while not queued:
                    ready.wait()
                batch = queued[:]
                queued.clear()
            start = time.perf_counter()
            ms = compute_for(args.model_ms)
            for msg, rid, arrived in batch:
                out = chunk_for(msg)
                out.inference_ms, out.queue_ms = ms, (start - arrived) * 1e3
                pubs[rid].publish(out)

    for rid in args.robots.split(","):
        pubs[rid] = node.create_publisher(ActionChunk, robot_topic("/" + rid, ACTION_CHUNK_TOPIC), reliable_qos())
        node.create_subscription(Observation, robot_topic("/" + rid, OBSERVATION_TOPIC),
                                 lambda m, r=rid: (enqueue if args.batch else answer)(m, r), reliable_qos())
    if args.batch:
        threading.Thread(target=batch_worker, daemon=True, name="batch_worker").start()
    executor = EventsExecutor()
    executor.add_node(node)
    print("ready", flush=True)
    # A spin_once loop, as physai_ros.ros.spin.run_node runs the policy server: EventsExecutor.spin()
    # delivered nothing here (rclpy 9.1.2 from PyPI).
    try:
        while rclpy.ok():
            executor.spin_once(timeout_sec=0.1)
    except (KeyboardInterrupt, ExternalShutdownException):
        pass
    finally:
        rclpy.try_shutdown()


if __name__ == "__main__":
    main()
