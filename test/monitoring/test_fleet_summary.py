"""physai-fleet's summary logic without rclpy: the series' time base and the robots' serving
fields (the first 8-robot run showed 0 rounds, "client unregistered" and a 220 s axis for a
40 s run)."""
from physai_ros.fleet.report import rebase_series
from physai_ros.fleet.startup import clients_answered


def _status(**kw):
    """A robot_client client_status as it publishes it before the server has answered."""
    st = {"robot_id": "robot_0", "state": "unregistered", "server_instance": "", "round_id": 0, "sent": 0,
          "chunks_ok": 0, "refused": 0, "errors": 0, "slo_misses": 0, "registrations": 0, "server_restarts": 0}
    return {**st, **kw}


def test_the_run_starts_when_a_client_got_an_answer():
    # The first 8-robot run started its 40 s when the register service appeared; the server
    # was still constructing (74 s more) and every status the run saw was this one.
    waiting = {f"robot_{k}": _status(robot_id=f"robot_{k}") for k in range(8)}
    assert not clients_answered(waiting)
    assert not clients_answered({})
    served = dict(waiting, robot_6=_status(robot_id="robot_6", state="running", server_instance="fa4e6574b331",
                                           registrations=1))
    assert clients_answered(served)
    # a refusal (admission: the fleet is full) is an answer too: the server serves
    assert clients_answered(dict(waiting, robot_7=_status(robot_id="robot_7", refused=1)))


def test_series_count_from_server_up():
    # The monitor started 182 s before the policy server served; the run then lasted 40 s.
    series = {"stream_rates_hz": {"robot_0/camera": {"t": [6.0, 181.0, 222.0], "v": [0.0, 4.5, 5.0]}},
              "wait_ratio": {"robot_0": {"t": [183.5, 221.9], "v": [0.1, 0.2]}}, "queue_depth": {}}
    out = rebase_series(series, 182.0)
    assert out["stream_rates_hz"]["robot_0/camera"] == {"t": [-176.0, -1.0, 40.0], "v": [0.0, 4.5, 5.0]}
    assert out["wait_ratio"]["robot_0"]["t"] == [1.5, 39.9]
    assert out["queue_depth"] == {}
    assert series["wait_ratio"]["robot_0"]["t"] == [183.5, 221.9]  # the monitor's own data untouched
