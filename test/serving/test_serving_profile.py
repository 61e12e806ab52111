"""Local engine instances measure their latency-vs-batch profile at start-up (server.profile)."""
import dataclasses

from physai_ros.serving.server_config import ProfileConfig
from physai_ros.serving.instances import default_profile
from physai_ros.serving.factory import build_core, profile_local_engines


class CountingEngine:
    """The real tiny engine; records the batch size of every call."""

    def __init__(self, engine):
        self.config, self._engine, self.calls = engine.config, engine, []

    def infer(self, inputs):
        self.calls.append(len(inputs))
        return self._engine.infer(inputs)


def test_start_up_profile_replaces_the_flat_default_and_sets_the_batch_cap(fleet):
    server = dataclasses.replace(fleet.server, engine_instances=2, max_batch=8,
                                 profile=ProfileConfig(reps=1, max_batch=3, views=1, tokens=8))
    cfg = dataclasses.replace(fleet, server=server)
    core = build_core(cfg, instance_id="prof")
    for slot in core.engines.values():
        assert slot.profile == default_profile(8)
        slot.engine = CountingEngine(slot.engine)
    took = profile_local_engines(core, cfg)
    assert sorted(took) == ["engine_0", "engine_1"] and all(t > 0 for t in took.values())
    tol = core.scheduler.saturation_tolerance
    diag = core.engine_diagnostics()
    for iid, slot in core.engines.items():
        # One warm-up plus `reps` timed calls per batch size 1..min(profile.max_batch, max_batch).
        assert slot.engine.calls == [1, 1, 2, 2, 3, 3]
        prof = slot.profile
        assert prof.batch_sizes == (1, 2, 3) and prof != default_profile(8)
        assert list(prof.latencies_s) == sorted(prof.latencies_s)
        # What the scheduler is told: the measured profile, and a cap at its saturation point.
        info = core.pool.info(slot, 0.0)
        assert info.profile is prof
        assert info.batch_cap(tol) == min(prof.saturation_batch(tol), slot.max_batch)
        assert diag[iid]["profile"] == prof.to_pairs()


def test_profile_false_keeps_the_flat_default(fleet):
    cfg = dataclasses.replace(fleet, server=dataclasses.replace(fleet.server, profile=None))
    core = build_core(cfg, instance_id="noprof")
    assert profile_local_engines(core, cfg) == {}
    assert core.engines["engine_0"].profile == default_profile(cfg.server.max_batch)
