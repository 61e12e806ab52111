"""ros.robot_router with a real rclpy node and DDS in this process: namespaces and owners, one
publisher and one subscription per namespace and topic, misclaimed senders named, and chunks
published signed so that the robot's own check accepts them (and nothing published for a robot
the router does not serve)."""
from __future__ import annotations

import threading
import time

import numpy as np
import pytest
import rclpy
from physai_ros_interfaces.msg import ActionChunk
from rclpy.context import Context
from rclpy.executors import SingleThreadedExecutor
from std_msgs.msg import UInt64

from machine_load import Deadline
from physai_ros.protocol.chunk import STATUS_OK, ActionChunkData
from physai_ros.protocol.topics import ACTION_CHUNK_TOPIC, OBSERVATION_TOPIC, REFRESH_TOPIC
from physai_ros.ros.codecs.chunk import chunk_to_msg
from physai_ros.ros.message_digest import digest
from physai_ros.ros.qos import reliable_qos
from physai_ros.ros.robot_router import RobotRouter, namespace_prefix
from physai_ros.security.endpoints import CHUNK, RobotAuth, ServerAuth
from physai_ros.security.keystore import Identity, Keystore

pytestmark = [pytest.mark.ros]
SERVER = Identity("server", "policy_server")


@pytest.fixture
def node():
    context = Context()
    rclpy.init(context=context)
    n = rclpy.create_node("robot_router_test", context=context)
    executor = SingleThreadedExecutor(context=context)
    executor.add_node(n)
    stop = threading.Event()
    thread = threading.Thread(target=lambda: [executor.spin_once(timeout_sec=0.05) for _ in iter(stop.is_set, True)],
                              daemon=True)
    thread.start()
    yield n
    stop.set()
    thread.join(timeout=5)
    executor.shutdown()
    n.destroy_node()
    rclpy.try_shutdown(context=context)


def chunk(robot_id: str, round_id: int) -> ActionChunkData:
    return ActionChunkData(robot_id=robot_id, task_id="reach", round_id=round_id, stamp=1.0, status=STATUS_OK,
                           joint_names=("j0", "j1"), dt=0.02, actions=np.zeros((4, 2), np.float32), horizon=4)


def test_namespaces_owners_and_misclaims(node):
    assert namespace_prefix("robot_0") == namespace_prefix("/robot_0/") == "/robot_0"
    assert namespace_prefix("") == namespace_prefix("/") == ""
    router = RobotRouter(node)
    assert router.bind("robot_0", "robot_0/") == "/robot_0"
    router.bind("intruder", "/robot_0")  # a second robot on the same namespace does not take it
    assert router.owner("/robot_0") == "robot_0" and router.owner("/nobody") == "/nobody"
    assert router.misclaim("robot_0", "/robot_0", OBSERVATION_TOPIC) is None
    router.bind("robot_1", "robot_1")
    why = router.misclaim("robot_1", "/robot_0", OBSERVATION_TOPIC)
    assert why == "/robot_0/observation claims robot 'robot_1' (served on /robot_1)"
    assert router.misclaim("ghost", "/robot_0", OBSERVATION_TOPIC).endswith("claims robot 'ghost' (unknown)")


def test_one_publisher_and_one_subscription_per_namespace_and_topic(node):
    router = RobotRouter(node)
    ns = router.bind("robot_0", "robot_0")
    pub = router.publisher(ns, UInt64, REFRESH_TOPIC, reliable_qos())
    assert router.publisher(ns, UInt64, REFRESH_TOPIC, reliable_qos()) is pub
    assert pub.topic_name == "/robot_0/observation_refresh"
    got = []
    assert router.subscribe(ns, UInt64, "probe", lambda m, ns: got.append(ns), reliable_qos())
    assert not router.subscribe(ns, UInt64, "probe", lambda m, ns: got.append(("twice", ns)), reliable_qos())
    assert len([s for s in node.subscriptions if s.topic_name == "/robot_0/probe"]) == 1


def test_chunks_go_out_signed_to_the_robots_own_topic_only(node, tmp_path):
    ks = Keystore.init(tmp_path / "ks")
    ks.add(Identity("robot", "robot_0"))
    router = RobotRouter(node, ServerAuth(ks, SERVER))
    ns = router.bind("robot_0", "robot_0")
    router.publisher(ns, ActionChunk, ACTION_CHUNK_TOPIC, reliable_qos())
    received: list[ActionChunk] = []
    lock = threading.Lock()

    def on_chunk(msg):
        with lock:
            received.append(msg)
    node.create_subscription(ActionChunk, "/robot_0/action_chunk", on_chunk, reliable_qos())
    assert not router.publish("robot_9", ACTION_CHUNK_TOPIC, chunk_to_msg(chunk("robot_9", 1)), CHUNK)
    deadline = Deadline(30.0)
    round_id = 0
    while not received:  # until discovery has matched the two (a volatile publisher drops before)
        assert not deadline.expired(), f"no chunk arrived in {deadline.describe()}"
        round_id += 1
        assert router.publish("robot_0", ACTION_CHUNK_TOPIC, chunk_to_msg(chunk("robot_0", round_id)), CHUNK)
        time.sleep(0.1)
    with lock:
        msg = received[0]
    assert msg.robot_id == "robot_0" and len(msg.auth) > 0
    RobotAuth(ks, "robot_0", SERVER).check_chunk(digest(msg), msg.auth)  # the robot's own check passes
