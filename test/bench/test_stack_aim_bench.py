"""bench/stack_aim.py on a few scenes with the shipped checkpoint: the policy is asked through the
serving logic, every scene gets a chunk, and the summary is complete. The release point is
checked against the arm's own forward kinematics on a made-up chunk. No policy quality is
asserted (three scenes say nothing about it)."""
import json

import numpy as np


def test_release_point_is_where_the_gripper_command_opens(bench_script):
    bench = bench_script("stack_aim")
    from physai_bench.stack_scenes import stack_snapshot
    from physai_ros.sim.robot import inverse_kinematics

    snap, world = stack_snapshot(3, (0.01, 0.0), (0.02, -0.01), held_lift=0.03)
    lower = snap.objects[0]
    over_lower = inverse_kinematics(world.arm.cfg, lower + [0, 0, 0.07], snap.positions[:-1])
    held, opened = [*snap.positions[:-1], 0.04], [*over_lower, 0.08]
    found = bench.aim(snap, world, np.array([held, held, opened, opened]))
    assert found["released"] and found["at"] == 2
    assert np.allclose(found["landing"], 0.0, atol=2e-3)  # over the lower cube
    assert np.allclose(found["move"], [-0.02, 0.01], atol=2e-3)
    kept = bench.aim(snap, world, np.array([held, held]))
    assert not kept["released"] and kept["at"] == 1 and np.allclose(kept["landing"], [0.02, -0.01], atol=2e-3)


def test_bench_asks_the_shipped_policy_and_writes_its_summary(tmp_path, bench_script):
    out = tmp_path / "aim.json"
    assert bench_script("stack_aim").main(["--scenes", "3", "--json", str(out)]) == 0
    summary = json.loads(out.read_text())["summary"]
    assert summary["scenes"] == 3 and summary["checkpoint"] == "sim_pi0_pipeline"
    assert set(summary["slope_of_move_on_offset"]) == {"x", "y"}
    assert 0.0 <= summary["lands_on_the_stack"] <= 1.0
