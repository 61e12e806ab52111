"""Test helper process: count Image messages on a topic (best effort) for a while, print JSON.

Run: python test/ros/ros_frame_counter.py <topic> <seconds>
A separate process, so that a Fast DDS profile given through FASTDDS_DEFAULT_PROFILES_FILE
applies to the receiving participant too."""
import json
import sys
import time

import rclpy
from rclpy.executors import SingleThreadedExecutor
from sensor_msgs.msg import Image

from physai_ros.ros.qos import sensor_data_qos


def main() -> None:
    topic, seconds = sys.argv[1], float(sys.argv[2])
    first_frame_s = float(sys.argv[3]) if len(sys.argv) > 3 else 30.0  # the test scales it to the machine
    rclpy.init()
    node = rclpy.create_node("frame_counter")
    stats = {"count": 0, "shape": None, "first": None, "last": None, "bytes_ok": True}

    def cb(msg: Image) -> None:
        now = time.monotonic()
        stats["first"] = stats["first"] or now
        stats["last"] = now
        stats["count"] += 1
        stats["shape"] = [msg.height, msg.width, msg.encoding]
        stats["bytes_ok"] &= len(msg.data) == msg.height * msg.step

    node.create_subscription(Image, topic, cb, sensor_data_qos())
    ex = SingleThreadedExecutor()
    ex.add_node(node)
    end = time.monotonic() + seconds + first_frame_s  # wait for the first frame, then count `seconds`
    while time.monotonic() < end:
        ex.spin_once(timeout_sec=0.05)
        if stats["first"] is not None:
            end = min(end, stats["first"] + seconds)
    print(json.dumps({k: stats[k] for k in ("count", "shape", "bytes_ok")}
                     | {"span": (stats["last"] - stats["first"]) if stats["first"] else 0.0}), flush=True)
    node.destroy_node()
    rclpy.try_shutdown()


if __name__ == "__main__":
    main()
