"""The pipeline components' questions and ground truth live in physai_ros.sim.component_truth
(evaluation imports them too, and evaluation must not import training: the packages' layers,
test/test_import_graph.py). Re-exported here for training's own modules."""
from physai_ros.sim.component_truth import (COMPONENTS, LABELS, MONITOR_QUESTION, PLANNER_QUESTION,  # noqa: F401
                                            QUESTIONS, SAFETY_QUESTION, truth)
