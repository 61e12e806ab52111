"""Pipeline components answered from the simulator's ground truth: a perfect System 2
planner, safety checker and progress monitor (sim.component_truth). Around the policy's System 1
it measures what System 1 makes of a plan with no planner error in the way
(bench/pipeline_shift.py --components truth): the ceiling a trained planner is judged against."""
from __future__ import annotations

from typing import Callable, Sequence

from physai_ros.pipeline.backend import ComponentAnswer, ComponentQuery
from physai_ros.sim.component_truth import truth
from physai_ros.sim.world import SimWorld

# The pipeline's component names -> component_truth's.
TRUTH_KEY = {"system2": "planner", "safety": "safety", "monitor": "monitor"}


class TruthBackend:
    name = "truth"

    def __init__(self, world_of: Callable[[str], SimWorld]):
        self.world_of = world_of  # robot id -> the world the robot lives in, read at answer time
        self.asked = 0

    def answer(self, queries: Sequence[ComponentQuery]) -> list[ComponentAnswer]:
        out = []
        for q in queries:
            self.asked += 1
            key = TRUTH_KEY.get(q.component)
            if key is None:
                out.append(ComponentAnswer(error=f"no ground truth for component {q.component!r}"))
                continue
            text = truth(self.world_of(q.robot_id).snapshot())[key]
            out.append(ComponentAnswer(text=text, tokens=len(text.split())))
        return out

    def close(self) -> None:
        pass
