"""The runner: a controller and a scripted backend over a simulated clock, end to end."""
from physai_ros.pipeline.controller import PipelineController
from physai_ros.pipeline.decisions import kinds
from physai_lab.pipeline_runner import PipelineRunner
from physai_lab.scripted_backend import NEVER, Scripted, ScriptedBackend

from pipeline_helpers import pipeline_config


def runner(backend, **changes):
    return PipelineRunner(PipelineController("robot_0", pipeline_config(**changes)), backend, tick_s=0.05)


def test_a_plan_an_intruder_and_done():
    b = ScriptedBackend(default_latency_ms=100.0)
    b.script("robot_0", "system2", "pick the red cube", "place it in bin A", "wait", "pick the red cube",
             "place it in bin A")
    b.default("robot_0", "system2", "place it in bin A")
    b.script("robot_0", "safety", "safe", "safe", "unsafe", "safe")
    b.default("robot_0", "safety", "safe")
    b.script("robot_0", "monitor", "ongoing", "ongoing")
    b.default("robot_0", "monitor", "done")
    r = runner(b)
    r.run_until(4.5)
    log = [(round(td.at, 2), k) for td, k in zip(r.log, kinds(r.decisions()))]
    assert log == [(0.0, "hold:system2"), (0.1, "set_prompt"), (0.1, "resume"),
                   # safety asked at 1.0 answers "unsafe" at 1.1: stop, drop the plan, replan at once
                   (1.1, "hold:safety"), (1.1, "drop_plan"), (1.1, "replan"), (1.1, "hold:system2"),
                   (1.2, "set_prompt"),  # the new plan; still held by safety
                   (1.6, "resume"),  # "safe" (asked at 1.5)
                   (2.7, "set_prompt"), (3.7, "set_prompt"),  # every 2 System 1 predictions (0.5 s apart)
                   (4.1, "end_task"), (4.1, "hold:system2"),  # monitor (asked at 4.0, 0.5 Hz): done
                   (4.2, "set_prompt"), (4.2, "resume")]  # the next episode's first plan
    assert [d.text for d in r.decisions() if d.kind == "set_prompt"] == [
        "pick the red cube", "place it in bin A", "wait", "pick the red cube", "place it in bin A"]
    cnt = r.controller.counters
    assert (cnt.safety_stops, cnt.replans, cnt.tasks_done, cnt.episodes, cnt.escalations) == (1, 1, 1, 2, 0)
    s = cnt.components["safety"]
    assert (s.asked, s.answered, s.on_time, s.slo_attainment) == (10, 9, 9, 1.0)  # the 10th answers after 4.5
    assert b.asked[0].question == "next subgoal for: inspect the package"


def test_a_dead_planner_escalates_after_three_slos_and_the_robot_stays_held():
    b = ScriptedBackend(default_latency_ms=10.0)
    b.default("robot_0", "system2", Scripted("never", latency_ms=NEVER))
    b.default("robot_0", "safety", "safe")
    b.default("robot_0", "monitor", "ongoing")
    r = runner(b)
    r.run_until(5.0)
    esc = [td for td in r.log if td.decision.kind == "escalate"]
    assert len(esc) == 1 and esc[0].decision.source == "system2"
    # Deadline 1.0: misses at the ticks 1.05, 2.1 (re-armed to 2.05) and 3.15 (re-armed to 3.1).
    assert round(esc[0].at, 2) == 3.15
    assert r.controller.held and r.controller.counters.system1_predictions == 0
    assert r.controller.counters.components["system2"].slo_misses == 3
