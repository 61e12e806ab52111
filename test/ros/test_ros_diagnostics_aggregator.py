"""The diagnostics aggregator as a real process over DDS: what nodes publish on /diagnostics
arrives on /diagnostics_agg as the whole tree with a status per level, and a node that falls
silent goes stale there (its group an error), as rqt_robot_monitor shows them."""
import time

import pytest
from diagnostic_msgs.msg import DiagnosticArray, DiagnosticStatus

from physai_ros.fleet.plan import aggregator_spec
from physai_ros.monitoring.diagnostics import ERROR, OK, STALE, level_byte
from physai_ros.monitoring.status_text import level_int
from physai_ros.ros.qos import reliable_qos
from ros_test_helpers import fail_with_logs

pytestmark = [pytest.mark.ros, pytest.mark.slow]
STARTUP_S = 60.0


def test_statuses_become_a_tree_and_a_silent_node_goes_stale(ros, procs):
    import dataclasses

    spec = aggregator_spec()
    procs.start(dataclasses.replace(spec, params={"stale_s": 2.0, "publish_hz": 4.0}))
    trees = []
    ros.node.create_subscription(DiagnosticArray, "/diagnostics_agg",
                                 lambda m: trees.append({s.name: (level_int(s.level), s.message) for s in m.status}),
                                 reliable_qos(10))
    pub = ros.node.create_publisher(DiagnosticArray, "/diagnostics", reliable_qos(10))

    def publish(*statuses):
        pub.publish(DiagnosticArray(status=[DiagnosticStatus(level=level_byte(lvl), name=n, message=m,
                                                             hardware_id="robot_9")
                                            for n, lvl, m in statuses]))

    client = ("robot_9/robot_client: client", ERROR, "stopped (2 consecutive SLO misses)")
    sim = ("robot_9/sim_robot: camera rate", OK, "30 Hz")

    def latest():
        return trees[-1] if trees else {}

    deadline = time.monotonic() + STARTUP_S
    while "/robot_9/robot_client/client" not in latest():
        publish(client, sim)
        if not ros.spin_until(lambda: "/robot_9/robot_client/client" in latest(), 0.5) and time.monotonic() > deadline:
            fail_with_logs(procs, f"nothing aggregated on /diagnostics_agg: {latest()}")
    tree = latest()
    assert tree["/robot_9"] == (ERROR, "Error") and tree["/robot_9/robot_client"] == (ERROR, "Error")
    assert tree["/robot_9/robot_client/client"] == client[1:] and tree["/robot_9/sim_robot"] == (OK, "OK")
    # The client keeps publishing, the sim falls silent: stale after 2 s, its group too.
    deadline = time.monotonic() + 30
    while latest().get("/robot_9/sim_robot/camera rate", (OK,))[0] != STALE:
        publish(client)
        ros.spin_for(0.25)
        if time.monotonic() > deadline:
            fail_with_logs(procs, f"the silent status did not go stale: {latest()}")
    tree = latest()
    assert tree["/robot_9/sim_robot"] == (STALE, "Stale") and tree["/robot_9/sim_robot/camera rate"][1].startswith("stale:")
    assert tree["/robot_9"][0] == ERROR
