"""Does the policy aim the second cube at the first? Its chunks over a stack, against the offset.

bench/stack_offset_probe.py shows the policy's own vision tokens hold how far the upper cube is
off the lower one (about 7 mm at the median). This asks whether its actions use it. Scenes from
physai_bench.stack_scenes: the upper cube held 3 cm above the lower one, off it by (dx, dy) up to
3.5 cm on each axis, the arm posed to hold it; the policy is asked, through the serving logic a
robot meets (tokenizer, normalisation, engine; one observation each, static horizon), with the
second subgoal's prompt. From the chunk: where the tool is when the gripper command opens (or at
the chunk's end when it does not open), through the arm's forward kinematics. A policy that
aims moves the tool by about (-dx, -dy): the slope of its move on the offset is near -1 and the
cube ends over the lower one. One that ignores the offset has a slope near 0.

  python bench/stack_aim.py --json bench/results/stack_aim.json
  python bench/stack_aim.py --scenes 20                                   # quicker
"""
from __future__ import annotations

import argparse
from pathlib import Path

import numpy as np

from physai_bench import results
from physai_bench.stack_scenes import LOWER_OFF_M, TIP_OFF_M, UPPER_OFF_M, render, stack_snapshot
from physai_lab.training.closed_loop import serving_core, sim_observation, sim_registration
from physai_ros.install_paths import package_dir
from physai_ros.sim.multi_step import subgoal_text
from physai_ros.sim.robot import tool_point

SHIPPED = package_dir() / "assets" / "policy" / "sim_pi0_pipeline"
OPEN_MARGIN_M = 0.005  # a gripper command this much wider than the cube lets it go


def ask(core, clock: list, snap, world, k: int, prompt: str = "") -> np.ndarray:
    """The policy's chunk [C, joints + 1] for this scene (one registration per scene); the prompt
    a perfect planner gives now unless another is named."""
    views = render(snap, world)
    prompt = prompt or subgoal_text(snap)
    robot = f"stack_{k}"
    reg = sim_registration(robot, "place_in_order", prompt, world.arm.cfg.joint_names, len(views),
                           views[0].shape[0], views[0].shape[1], control_period=0.1)
    if not core.register(reg).accepted:
        raise RuntimeError(f"registration refused for {robot}")
    clock[0] += 1.0
    t = clock[0]
    obs = sim_observation(robot, "place_in_order", 2, t, views, snap, prompt, control_period=0.1, horizon=10)
    chunks = core.submit(obs, now=t) or core.step(now=t).chunks
    core.release(robot)
    return np.asarray(chunks[0].actions, dtype=float)


def aim(snap, world, actions: np.ndarray) -> dict:
    """Where the chunk lets the held cube go, relative to the lower cube (xy, m)."""
    size = world.scene.object_size
    opens = np.flatnonzero(actions[:, -1] > size + OPEN_MARGIN_M)
    at = int(opens[0]) if len(opens) else len(actions) - 1
    tool = tool_point(world.arm.cfg, actions[at, :-1])
    lower, upper = snap.objects
    return {"released": bool(len(opens)), "at": at, "move": tool[:2] - upper[:2], "landing": tool[:2] - lower[:2],
            "from_pad": tool[:2] - snap.goal[:2]}


def summarise(found: list[dict]) -> dict:
    """The scenes' aims (aim() plus each scene's offset and lower cube) as plain figures."""
    offsets, lowers, moves, landings, from_pad = (np.array([f[k] for f in found]) for k in
                                                  ("offset", "lower", "move", "landing", "from_pad"))

    def slope(x: np.ndarray, y: np.ndarray) -> dict:
        return {axis: round(float(np.polyfit(x[:, i], y[:, i], 1)[0]), 3) for i, axis in enumerate("xy")}

    return {"released_in_chunk": round(float(np.mean([f["released"] for f in found])), 3),
            "median_release_action": float(np.median([f["at"] for f in found])),
            "slope_of_move_on_offset": slope(offsets, moves),
            # A release point that follows the lower cube off the pad centre has slope 1 on the
            # lower cube's offset; one aimed at the pad centre, 0.
            "slope_of_release_on_lower_cube": slope(lowers, from_pad),
            "release_from_pad_centre_median_mm": round(float(np.median(np.linalg.norm(from_pad, axis=1))) * 1000, 2),
            "landing_median_abs_mm": round(float(np.median(np.abs(landings))) * 1000, 2),
            "lands_on_the_stack": round(float(np.mean(np.all(np.abs(landings) < TIP_OFF_M, axis=1))), 3),
            "would_land_on_it_unmoved": round(float(np.mean(np.all(np.abs(offsets) < TIP_OFF_M, axis=1))), 3)}


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--checkpoint", default=str(SHIPPED))
    ap.add_argument("--prompt", default="", help="System 1's prompt (default: the perfect planner's subgoal)")
    ap.add_argument("--scenes", type=int, default=300)
    ap.add_argument("--held-lift", type=float, default=0.03)
    ap.add_argument("--seed", type=int, default=0)
    ap.add_argument("--json", default="", help="results file")
    a = ap.parse_args(argv)
    run = results.start_run("the policy asked once per sim stack scene through ServingCore (one engine, CPU); "
                            "its chunk's release point by forward kinematics", __file__, argv)
    clock = [0.0]
    core = serving_core(Path(a.checkpoint), package_dir() / "assets" / "tokenizer.json", 48, lambda: clock[0])
    rng = np.random.default_rng(a.seed)
    found = []
    for k in range(a.scenes):
        offset, lower = rng.uniform(-UPPER_OFF_M, UPPER_OFF_M, 2), rng.uniform(-LOWER_OFF_M, LOWER_OFF_M, 2)
        snap, world = stack_snapshot(int(rng.integers(2**31)), lower, offset, held_lift=a.held_lift)
        found.append({**aim(snap, world, ask(core, clock, snap, world, k, a.prompt)), "offset": offset, "lower": lower})
    summary = {"scenes": a.scenes, **summarise(found), "checkpoint": Path(a.checkpoint).name,
               "held_lift_m": a.held_lift}
    move, follow = summary["slope_of_move_on_offset"], summary["slope_of_release_on_lower_cube"]
    print(f"{a.scenes} scenes: the tool's move on the offset, slope x {move['x']:+.2f}, y {move['y']:+.2f} "
          f"(aiming: -1, ignoring: 0); the release point on the lower cube's offset from the pad, x "
          f"{follow['x']:+.2f}, y {follow['y']:+.2f} (the cube: 1, the pad centre: 0), "
          f"{summary['release_from_pad_centre_median_mm']} mm from the pad centre at the median; within 2 cm of "
          f"the lower cube on both axes {summary['lands_on_the_stack']:.0%} (let go unmoved: "
          f"{summary['would_land_on_it_unmoved']:.0%}); the gripper opens within the chunk in "
          f"{summary['released_in_chunk']:.0%} (at action {summary['median_release_action']:g} at the median)")
    results.write_result(a.json or None, run, {"summary": summary})
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
