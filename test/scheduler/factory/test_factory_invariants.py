"""Invariants every solved factory schedule must hold, checked from its routes alone with
ModelProfile.latency (not the solver's own tables) on seeded random small problems:
budget, routes per needed component, loads, SLOs at the predicted p99, eq. (4), F_min, eq. (1)."""
from __future__ import annotations

import random

import pytest

from physai_ros.scheduler.factory import (
    CONTINUOUS, STATIC, ComponentSpec, FactoryProblem, ModelProfile, ProfilePoint, ServerPool, TaskClass, solve,
)

HW = "gpu"


def curve(model: str, batches: list[int], base: float, cap_per_batch: float, batching: str) -> ModelProfile:
    pts = []
    for b in batches:
        cap = cap_per_batch * b ** 0.7
        for i in range(1, 11):
            u = i / 10
            p99 = base * (1 + 0.2 * b ** 0.5) * (1 + 1.5 * u * u)
            pts.append(ProfilePoint(b, cap * u, 0.8 * p99, p99))
    return ModelProfile(model, HW, batching, tuple(pts))


PROFILES = {
    ("s1", HW): curve("s1", [1, 2, 4, 8], 0.03, 12.0, STATIC),
    ("s2", HW): curve("s2", [1], 0.3, 10.0, CONTINUOUS),
    ("safe", HW): curve("safe", [1], 0.06, 30.0, CONTINUOUS),
    ("mon", HW): curve("mon", [1], 0.25, 15.0, CONTINUOUS),
}
SPECS = {
    "system1": ComponentSpec("system1", "s1", 0.2),
    "system2": ComponentSpec("system2", "s2", 2.0),
    "safety": ComponentSpec("safety", "safe", 0.5, freq_hz=2.0),
    "monitor": ComponentSpec("monitor", "mon", 2.0, freq_hz=0.5),
}


def random_problem(rng: random.Random) -> FactoryProblem:
    classes = []
    for c in range(rng.randint(1, 3)):
        comps = ["system1"] + [x for x in ("system2", "safety", "monitor") if rng.random() < 0.5]
        k = rng.randint(1, 12)
        classes.append(TaskClass(
            f"c{c}", tuple(f"c{c}r{i}" for i in range(k)), tuple(SPECS[x] for x in comps),
            action_period_s=rng.choice([0.02, 0.1, 0.2]), system2_ratio=rng.choice([1, 5, 10]),
            value_weight=rng.choice([0.5, 1.0, 2.0]), min_throughput=rng.choice([0.0, 0.0, 0.5 * k])))
    return FactoryProblem(tuple(classes), ServerPool(rng.randint(2, 10), HW, standby=rng.randint(0, 2)))


@pytest.mark.parametrize("seed", range(25))
def test_solved_schedule_holds_its_invariants(seed: int):
    problem = random_problem(random.Random(seed))
    sched = solve(problem, PROFILES)
    if not sched.feasible:
        assert sched.reason and not sched.routes
        return
    serving = {a.server: a for a in sched.assignments if a.standby_for is None}
    assert sorted(serving) == list(range(len(serving))) and len(serving) <= problem.servers.num_servers
    for a in sched.assignments:
        if a.standby_for is not None:
            assert a.standby_for in serving and not a.robot_ids
            assert not any(r.server == a.server for r in sched.routes)
    profile = {m: p for (m, _), p in PROFILES.items()}
    load = {s: sum(r.rate_hz for r in sched.routes if r.server == s) for s in serving}
    mean = {}
    for cls in problem.classes:
        f = sched.action_rate_hz[cls.name]
        assert cls.num_robots * f >= cls.min_throughput * (1 - 1e-9)  # F_min
        for robot in cls.robot_ids:
            for spec in cls.components:
                route = sched.route(robot, spec.component)
                a = serving[route.server]
                assert (a.component, a.model) == (spec.component, spec.model) and robot in a.robot_ids
                want = {"system1": f, "system2": f / cls.system2_ratio}.get(spec.component, spec.freq_hz)
                assert route.rate_hz == pytest.approx(want)
                p99 = profile[a.model].latency(a.batch, load[a.server], "p99")
                assert p99 <= spec.slo_s * (1 + 1e-9)  # the SLO at the server's real load
                assert a.predicted_p99_s == pytest.approx(p99)
                mean[(robot, spec.component)] = profile[a.model].latency(a.batch, load[a.server], "mean")
            loop = cls.action_period_s + mean.get((robot, "system1"), 0.0) + \
                mean.get((robot, "system2"), 0.0) / cls.system2_ratio
            assert f * loop <= 1 + 1e-9  # eq. (4)
    assert all(v == 1.0 for v in sched.predicted_slo_attainment.values())
    assert sched.weighted_objective == pytest.approx(
        sum(c.value_weight * c.num_robots * sched.action_rate_hz[c.name] for c in problem.classes))
