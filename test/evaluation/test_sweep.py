"""The benchmarks' fleet overrides (physai_lab.evaluation.sweep): a horizon policy given on the
command line reaches every chunked task and each robot's copy of it, checked as fleet.yaml is."""
import pytest

from physai_lab.evaluation.sweep import with_horizon_policy
from physai_ros.config.fleet import FleetConfigError, load_fleet


@pytest.fixture(scope="module")
def cfg():
    return load_fleet(None)


def test_a_static_horizon_replaces_every_chunked_tasks_policy(cfg):
    out = with_horizon_policy(cfg, "static:3")
    for name, task in out.tasks.items():
        before = cfg.tasks[name]
        if before.mode == "chunked":
            assert (task.horizon_policy, task.horizon_params) == ("static", (3.0,))
        else:  # a streaming task has no chunks to cut
            assert (task.horizon_policy, task.horizon_params) == (before.horizon_policy, before.horizon_params)
    assert all(r.task == out.tasks[r.task.name] for r in out.robots)


def test_confidence_parameters_are_read_in_order(cfg):
    task = next(t for t in with_horizon_policy(cfg, "confidence:0.2,4").tasks.values() if t.mode == "chunked")
    assert (task.horizon_policy, task.horizon_params) == ("confidence", (0.2, 4.0))


@pytest.mark.parametrize("spec", ["static:0", "static:2.5", "static", "confidence:0.1", "sideways:3"])
def test_a_spec_fleet_yaml_would_refuse_is_refused(cfg, spec):
    with pytest.raises(FleetConfigError, match="--horizon"):
        with_horizon_policy(cfg, spec)
