import numpy as np

from physai_ros.pipeline.backend import ComponentQuery
from physai_lab.scripted_backend import NEVER, Scripted, ScriptedBackend


def q(robot="robot_0", component="safety", question="is the workcell safe?"):
    return ComponentQuery(robot_id=robot, component=component, question=question, task_prompt="t",
                          images=(np.zeros((4, 4, 3), np.uint8),))


def test_queues_then_function_then_default_then_error():
    b = ScriptedBackend(default_latency_ms=5.0)
    b.script("robot_0", "safety", "safe", Scripted("unsafe", latency_ms=300.0), Scripted(error="timeout"))
    answers = b.answer([q(), q(), q(), q(robot="robot_1")])
    assert [(a.text, a.error, a.latency_ms) for a in answers] == [
        ("safe", "", 5.0), ("unsafe", "", 300.0), ("", "timeout", 0.0),
        ("", "scripted: no answer for robot_1/safety", 5.0)]
    b.respond_with("robot_0", "safety", lambda query: "safe" if "safe" in query.question else "?")
    assert b.answer([q()])[0].text == "safe"
    b.respond_with("robot_0", "safety", lambda query: 1 / 0)
    assert b.answer([q()])[0].error.startswith("scripted function raised ZeroDivisionError")
    b.default("robot_0", "monitor", Scripted("ongoing", latency_ms=NEVER))
    assert b.answer([q(component="monitor")])[0].latency_ms == NEVER
    assert len(b.asked) == 7 and b.pending("robot_0", "safety") == 0
    b.close()
    assert b.closed
