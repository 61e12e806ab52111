import math

import numpy as np
import pytest
import torch

from physai_ros.engine.streaming.schedule import ScheduleError, StaggeredSchedule, dense_nodes


def test_tau_runs_from_noise_to_final_and_nearer_tokens_finish_first():
    s = StaggeredSchedule(span_s=0.02, stagger_s=0.005, lead_s=0.001)
    s.validate(chunk_size=8)
    finish = s.finish_times(1.0, torch.arange(8))
    taus = torch.stack([s.tau(finish, t) for t in np.arange(0.95, 1.05, 0.001)])
    assert float(taus.max()) == 1.0 and float(taus.min()) == 0.0
    assert bool((taus[1:] <= taus[:-1]).all()), "tau never increases with time"
    assert bool((taus[:, 1:] >= taus[:, :-1]).all()), "a later token is never less denoised"
    first_final = [int(torch.nonzero(taus[:, a] == 0)[0]) for a in range(8)]
    assert first_final == sorted(first_final) and len(set(first_final)) == 8


def test_synchronous_schedule_gives_every_token_the_same_time():
    s = StaggeredSchedule.for_rates(480, 50, 10, stagger=False)
    s.validate(8)
    tau = s.tau(s.finish_times(1.0, torch.arange(8)), 1.0 - 3 / 480)
    assert torch.allclose(tau, torch.full((8,), 0.3, dtype=torch.float64))


@pytest.mark.parametrize("kw", [dict(span_s=0.0, stagger_s=0.01), dict(span_s=0.1, stagger_s=-1.0),
                                dict(span_s=math.nan, stagger_s=0.01), dict(span_s=0.1, stagger_s=0.01)])
def test_bad_schedules_are_refused(kw):
    with pytest.raises(ScheduleError):
        StaggeredSchedule(**kw).validate(chunk_size=8)  # the last: 7 * 0.01 < 0.1, no room to refill


def test_dense_nodes_interpolate_and_commit_only_between_final_tokens():
    due = np.array([0.0, 0.1, 0.2])
    vals = np.array([[0.0], [1.0], [3.0]])
    ticks, pos, committed = dense_nodes(due, vals, np.array([True, True, False]), node_hz=20, first_tick=0)
    assert list(ticks) == [0, 1, 2, 3, 4]
    assert np.allclose(pos[:, 0], [0.0, 0.5, 1.0, 2.0, 3.0])
    assert list(committed) == [True, True, True, False, False]
    ticks, _, _ = dense_nodes(due, vals, np.array([True, True, False]), node_hz=20, first_tick=3)
    assert list(ticks) == [3, 4]
    ticks, _, _ = dense_nodes(due, vals, np.array([True] * 3), node_hz=20, first_tick=9)
    assert ticks.size == 0
