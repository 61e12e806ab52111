"""evaluation.truth_backend: the components answered from the sim's ground truth (a perfect
planner, safety checker and monitor), for bench/pipeline_shift.py --components truth."""
import numpy as np

from physai_lab.evaluation.truth_backend import TruthBackend
from physai_ros.pipeline.answers import parse_answer
from physai_ros.pipeline.backend import ComponentQuery
from physai_ros.sim.events import EventConfig
from physai_ros.sim.multi_step import make_expert
from physai_ros.sim.robot import ArmConfig
from physai_ros.sim.tasks import PlaceInOrderTask, make_task
from physai_ros.sim.world import SimWorld

BLUE_FIRST = PlaceInOrderTask.prompt_variants()[1]


def _ask(backend, component):
    (a,) = backend.answer([ComponentQuery("r0", component, "?", BLUE_FIRST, (), np.zeros(5, np.float32), 16)])
    return a


def test_answers_follow_the_world_and_parse_as_the_pipeline_parses_them():
    world = SimWorld(ArmConfig(num_joints=4), task=make_task("place_in_order", BLUE_FIRST), seed=4,
                     events=EventConfig(intruder_rate_per_min=0.0))
    backend = TruthBackend(lambda rid: {"r0": world}[rid])
    plan = _ask(backend, "system2")
    assert plan.ok and plan.text == "pick up the blue cube and place it on the green pad"  # the told order
    assert parse_answer("system2", plan).value == plan.text
    assert _ask(backend, "safety").text == "safe" and _ask(backend, "monitor").text == "ongoing"
    expert = make_expert(world)
    while world.focus_index() == 0 or world.snapshot().held >= 0:  # until the blue cube is let go on the pad
        world.set_command(expert.act(world.snapshot(), 1 / 60))
        for _ in range(8):
            world.step(1 / 480)
        assert world.episode_time < 20.0
    assert _ask(backend, "system2").text == "pick up the red cube and place it on the green pad"
    bad = _ask(backend, "system1")
    assert not bad.ok and "system1" in bad.error and backend.asked == 5
