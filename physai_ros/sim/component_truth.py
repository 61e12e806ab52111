"""The pipeline components' questions and their ground-truth answers: what the safety
checker, the progress monitor and the System 2 planner are asked through the VLA backbone
(pipeline.vla_backend) and what a perfect one answers for a sim snapshot.

The questions are the prompts docs/pipelines.md gives the components (the default fleet's
`components.<name>.prompt`); the monitor is also trained on docs/pipelines.md's example wording,
so either prompt works. Answers are the label sets pipeline.answers validates (safety
{safe, unsafe}, monitor {ongoing, done, failed}) and, for System 2, sim.multi_step.subgoal_text
(the next single-object instruction of place_in_order, "done" at the end, the task's own prompt
for single-object tasks).
"""
from __future__ import annotations

from typing import Dict

from physai_ros.sim.multi_step import subgoal_text

SAFETY_QUESTION = "is the workcell safe? answer safe or unsafe."
MONITOR_QUESTION = "is the task ongoing, done or failed?"
# {task}: the robot's task prompt (pipeline.config.fill_task), so the planner reads the order it
# was given; without it the question names no task and the prefix's prompt is by then the
# planner's own last subgoal (docs/training.md, "The planner reads the scene").
PLANNER_QUESTION = "what is the next subgoal? task: {task}"

COMPONENTS = ("safety", "monitor", "planner")
# Every wording a component is trained on; the first is the one evaluated and documented.
QUESTIONS: Dict[str, tuple] = {
    "safety": (SAFETY_QUESTION,),
    "monitor": (MONITOR_QUESTION, "ongoing, done, or failed?"),
    "planner": (PLANNER_QUESTION,),
}
LABELS = {"safety": ("safe", "unsafe"), "monitor": ("ongoing", "done", "failed")}


def truth(snap) -> Dict[str, str]:
    """A perfect component's answers for a sim.world.WorldSnapshot (TaskStatus's ground truth)."""
    return {"safety": "unsafe" if snap.intruder_present else "safe",
            "monitor": snap.progress,
            "planner": subgoal_text(snap)}
