"""Local engine instances measure their latency-vs-batch profile at start-up (server.profile)."""
import dataclasses

from physai_ros.config.server import ProfileConfig
from physai_ros.serving.instances import default_profile
from physai_ros.serving.startup.engine_builder import build_core, profile_local_engines


class CountingEngine:
    """The real tiny engine; records the batch size of every call."""

    def __init__(self, engine):
        self.config, self._engine, self.calls = engine.config, engine, []

    def infer(self, inputs):
        self.calls.append(len(inputs))
        return self._engine.infer(inputs)


def test_start_up_profile_replaces_the_flat_default_and_sets_the_batch_cap(fleet):
    server = dataclasses.replace(fleet.server, engine_instances=2, max_batch=8,
                                 profile=ProfileConfig(reps=1, max_batch=3, views=1, tokens=8, cache=False))
    cfg = dataclasses.replace(fleet, server=server)
    core = build_core(cfg, instance_id="prof")
    for slot in core.engines.values():
        assert slot.profile == default_profile(8)
        slot.engine = CountingEngine(slot.engine)
    took = profile_local_engines(core, cfg)
    assert sorted(took) == ["engine_0", "engine_1"] and all(t > 0 for t in took.values())
    tol = core.scheduler.shared.saturation_tolerance  # the policy behind the per-instance queues
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


def test_a_later_start_takes_this_machine_s_measurement_after_one_warm_up_call(fleet, tmp_path, monkeypatch):
    """The profile is kept in the cache folder keyed by machine, model and measurement: the same
    settings reuse it (one warm-up call at batch 1), other settings or `cache: false` measure."""
    import json

    monkeypatch.setenv("PHYSAI_ROS_PROFILE_CACHE", str(tmp_path / "profiles"))

    def started(profile: ProfileConfig):
        cfg = dataclasses.replace(fleet, server=dataclasses.replace(fleet.server, max_batch=8, profile=profile))
        core = build_core(cfg, instance_id="cached")
        slot = core.engines["engine_0"]
        slot.engine = CountingEngine(slot.engine)
        profile_local_engines(core, cfg)
        return slot

    settings = ProfileConfig(reps=1, max_batch=3, views=1, tokens=8)
    first = started(settings)
    assert first.engine.calls == [1, 1, 2, 2, 3, 3]
    [entry] = list((tmp_path / "profiles").glob("*.json"))
    assert json.loads(entry.read_text())["profile"] == [list(p) for p in first.profile.to_pairs()]
    again = started(settings)
    assert again.engine.calls == [1] and again.profile == first.profile
    assert started(dataclasses.replace(settings, max_batch=2)).engine.calls == [1, 1, 2, 2]  # another key
    assert started(dataclasses.replace(settings, cache=False)).engine.calls == [1, 1, 2, 2, 3, 3]
    entry.write_text("{not json")  # a damaged entry is measured again
    assert started(settings).engine.calls == [1, 1, 2, 2, 3, 3]


def test_a_cached_profile_far_slower_than_this_start_s_warm_up_is_measured_again(fleet, tmp_path, monkeypatch):
    """The cache key cannot hold the load a measurement ran under: an entry whose batch-1
    latency is over WARM_UP_FACTOR times this start's warm-up call (measured under a benchmark's
    load) is measured again and replaced."""
    import json

    from physai_ros.serving.startup import profile_cache

    monkeypatch.setenv("PHYSAI_ROS_PROFILE_CACHE", str(tmp_path / "profiles"))
    settings = ProfileConfig(reps=1, max_batch=2, views=1, tokens=8)
    cfg = dataclasses.replace(fleet, server=dataclasses.replace(fleet.server, max_batch=8, profile=settings))

    def started():
        core = build_core(cfg, instance_id="stale")
        slot = core.engines["engine_0"]
        slot.engine = CountingEngine(slot.engine)
        profile_local_engines(core, cfg, progress=said.append)
        return slot

    said: list[str] = []
    measured = started()
    [entry] = list((tmp_path / "profiles").glob("*.json"))
    doc = json.loads(entry.read_text())
    doc["profile"] = [[1, 3600.0], [2, 3700.0]]  # an hour a call: never this start's warm-up
    entry.write_text(json.dumps(doc))
    again = started()
    assert again.engine.calls == [1, 1, 1, 2, 2] and again.profile.latency(1) < 3600.0
    assert any("measured on a busier machine" in line for line in said)
    assert json.loads(entry.read_text())["profile"] == [list(p) for p in again.profile.to_pairs()]
    # One that agrees is kept (the factor opened wide: this machine's load must not decide the test).
    monkeypatch.setattr(profile_cache, "WARM_UP_FACTOR", 1e6)
    kept = started()
    assert kept.engine.calls == [1] and kept.profile == again.profile and measured.profile.latency(1) < 3600.0
