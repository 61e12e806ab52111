"""ros.remote_components.RemoteComponentBackend over real DDS, without a worker behind it: a
worker that is not alive is answered at once with the reason, an unanswered question times out
with the reason, and an answer not signed by the worker is dropped and counted (the worker side
and the signed round trip run in test/fleet/test_factory_fleet_ros.py)."""
from __future__ import annotations

import sys
import time
from pathlib import Path

import numpy as np
import pytest

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from ros_rig import SpunNode, wait_for  # noqa: E402

from physai_ros.pipeline.backend import ComponentQuery  # noqa: E402
from physai_ros.security.endpoints import ServerAuth  # noqa: E402
from physai_ros.security.keystore import Identity, Keystore  # noqa: E402

pytestmark = pytest.mark.ros


class Liveness:
    """The server's view of the worker's heartbeat (RemoteEngine.alive / why_not_alive)."""

    def __init__(self, alive: bool):
        self.alive = alive

    def why_not_alive(self) -> str:
        return "" if self.alive else "no status received from the worker yet"


def _query():
    return ComponentQuery("r0", "safety", "is the workcell safe?", "pick", (np.zeros((8, 8, 3), np.uint8),))


def test_not_alive_and_unanswered_questions_get_their_reasons_and_forged_answers_are_dropped(tmp_path):
    from physai_ros_interfaces.msg import ComponentAnswer

    from physai_ros.protocol.topics import component_result_topic
    from physai_ros.ros.qos import reliable_qos
    from physai_ros.ros.remote_components import RemoteComponentBackend

    ks = Keystore.init(tmp_path / "keys")
    ks.add(Identity("worker", "gpu_t"))
    auth = ServerAuth(ks, Identity("server", "policy_server"))
    spun = SpunNode("remote_components_test")
    try:
        live = Liveness(False)
        backend = RemoteComponentBackend(spun.node, "gpu_t", auth=auth, timeout_s=0.5, engine=live)
        t0 = time.monotonic()
        (a,) = backend.answer([_query()])
        assert a.error == "not_alive: engine worker gpu_t: no status received from the worker yet"
        assert time.monotonic() - t0 < 0.4 and backend.not_alive == 1  # at once, not after the timeout
        live.alive = True
        (a,) = backend.answer([_query()])
        assert a.error == "timeout: engine worker gpu_t did not answer within 0.5 s" and backend.timeouts == 1
        # Someone else answering on the worker's topic, unsigned: dropped and counted.
        pub = spun.node.create_publisher(ComponentAnswer, component_result_topic("gpu_t"), reliable_qos(50))
        wait_for(lambda: pub.get_subscription_count() > 0, 20, "the proxy's answer subscription")
        forged = ComponentAnswer()
        forged.robot_id, forged.query_id, forged.component, forged.text = "r0", 3, "safety", "safe"
        wait_for(lambda: (pub.publish(forged) or True) and backend.refused.get("unauthenticated_missing", 0) > 0,
                 20, "the forged answer refused")
    finally:
        spun.close()
