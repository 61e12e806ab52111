"""/diagnostics as the tree rqt_robot_monitor builds: every level has a status, parents carry
the worst child, silent statuses go stale, and every publication is the whole tree."""
from physai_ros.monitoring.aggregation import DiagnosticsAggregator, Status, top_level, tree_path
from physai_ros.monitoring.diagnostics import ERROR, OK, STALE, WARN


def statuses():
    return [Status("robot_0/robot_client: client", ERROR, "stopped (3 consecutive SLO misses)", "robot_0",
                   (("state", "stopped"),)),
            Status("robot_0/sim_robot: camera rate", WARN, "camera 12 Hz of 30", "robot_0"),
            Status("robot_1/robot_client: client", OK, "running", "robot_1"),
            Status("policy_server: language", OK, "0 tokens/s"),
            Status("some_driver", WARN, "hot")]


def by_name(tree):
    return {s.name: s for s in tree}


def test_names_become_paths():
    assert tree_path("robot_0/robot_client: client") == ("robot_0", "robot_client", "client")
    assert tree_path("/policy_server: language") == ("policy_server", "language")
    assert tree_path("policy_server: K/V memory") == ("policy_server", "K|V memory")
    assert tree_path("some_driver") == ("other", "some_driver")
    assert tree_path("") == ("other", "(unnamed)")


def test_every_level_has_a_status_with_the_worst_child():
    agg = DiagnosticsAggregator(stale_s=5.0)
    agg.update(statuses(), now=0.0)
    tree = by_name(agg.aggregate(now=1.0))
    assert list(tree) == sorted(tree)  # parents before children
    assert {n: (s.level, s.message) for n, s in tree.items() if n.count("/") < 3 and n != "/policy_server/language"
            and n != "/other/some_driver"} == {
        "/other": (WARN, "Warning"), "/policy_server": (OK, "OK"),
        "/robot_0": (ERROR, "Error"), "/robot_0/robot_client": (ERROR, "Error"),
        "/robot_0/sim_robot": (WARN, "Warning"), "/robot_1": (OK, "OK"), "/robot_1/robot_client": (OK, "OK")}
    leaf = tree["/robot_0/robot_client/client"]
    assert (leaf.level, leaf.message, leaf.hardware_id, leaf.values) == (
        ERROR, "stopped (3 consecutive SLO misses)", "robot_0", (("state", "stopped"),))
    assert top_level(agg.aggregate(now=1.0)).level == ERROR


def test_a_silent_node_goes_stale_and_its_group_says_so():
    agg = DiagnosticsAggregator(stale_s=5.0)
    agg.update(statuses(), now=0.0)
    agg.update([s for s in statuses() if not s.name.startswith("robot_1")], now=10.0)
    tree = by_name(agg.aggregate(now=10.5))
    stale = tree["/robot_1/robot_client/client"]
    assert stale.level == STALE and stale.message.startswith("stale: no update for 10 s (last: running)")
    assert tree["/robot_1/robot_client"].level == STALE and tree["/robot_1"].message == "Stale"
    # A group with one stale child among live ones is an error, as ROS's aggregator grades it.
    agg.update([Status("robot_0/sim_robot: joints", OK, "100 Hz")], now=10.5)
    agg.update([Status("robot_0/sim_robot: camera rate", OK, "30 Hz")], now=20.0)
    tree = by_name(agg.aggregate(now=20.0))
    assert tree["/robot_0/sim_robot/joints"].level == STALE and tree["/robot_0/sim_robot"].level == ERROR
    # Statuses stay in the tree (an operator must see a dead node), every publication whole.
    assert len(agg.aggregate(now=100.0)) == len(tree)
