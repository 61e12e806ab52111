"""The robot client's side of a task pipeline (client.pipeline), without ROS: scripted
component answers drive a real PipelineController over a real RobotClientCore; what the client
would publish (observations, hold chunks, queries, events) is checked."""
import copy

import numpy as np
import pytest
import yaml

from physai_ros.client.pipeline import ClientPipeline
from physai_ros.client.robot_client import RobotClientCore
from physai_ros.config.fleet import default_fleet_path, parse_fleet
from physai_ros.pipeline.backend import ComponentAnswer
from physai_ros.protocol.chunk import STATUS_OK, ActionChunkData
from physai_ros.protocol.registration import RegistrationResult

from observation_builders import make_image

PIPELINE = {
    "pipeline": {"action_period_ms": 500, "system2_to_system1_call_ratio": 2},
    "task_retry": {"max_task_retries": 1},
    "safety_and_slo_violation": {"max_consecutive_safety_replan": 2, "max_consecutive_slo_violation": 3},
    "components": {
        "system2": {"model": "vla", "prompt": "next step of: {task}", "slo_ms": 1000, "fallback": "use_last_plan"},
        "safety": {"model": "vla", "prompt": "is the workcell safe?", "freq_hz": 2, "slo_ms": 400},
        "monitor": {"model": "vla", "prompt": "ongoing, done, or failed?", "freq_hz": 1, "slo_ms": 1000},
    },
}


def _fleet(pipeline=PIPELINE):
    doc = yaml.safe_load(default_fleet_path().read_text())
    if pipeline is not None:
        doc["tasks"]["pick_place"].update(copy.deepcopy(pipeline))
    return parse_fleet(doc)


def _core(fleet):
    r = fleet.robots[0]
    c = RobotClientCore(r)
    for v in range(r.num_views):
        c.on_image(v, make_image(), 10.0)
    c.on_joint_state(list(r.joints), list(range(len(r.joints))))
    c.on_registered(RegistrationResult(True, "", "A"))
    return c


def _frames(c, stamp):
    for v in range(c.robot.num_views):
        c.on_image(v, make_image(), stamp)


def _chunk(c, round_id, stamp):
    return ActionChunkData(robot_id=c.robot.id, task_id=c.task.name, round_id=round_id, stamp=stamp,
                           status=STATUS_OK, joint_names=c.robot.joints, dt=0.1,
                           actions=np.zeros((10, len(c.robot.joints)), np.float32), horizon=10)


class Rig:
    def __init__(self, pipeline=PIPELINE):
        self.core = _core(_fleet(pipeline))
        self.resets = []
        self.p = ClientPipeline.for_robot(self.core, self.resets.append)
        self.events, self.holds = [], []
        self.open = {}  # component -> outgoing query

    def take(self, out):
        self.events += out.events
        self.holds += out.holds
        for q in out.queries:
            self.open[q.component] = q
        return out

    def step(self, now, keep=()):
        """One pipeline step; safety and monitor queries not in `keep` are answered at once
        ("safe", "ongoing"), so only what a test scripts changes anything."""
        out = self.take(self.p.step(now))
        for comp, text in (("safety", "safe"), ("monitor", "ongoing")):
            if comp in self.open and comp not in keep:
                self.answer(comp, text, now)
        return out

    def answer(self, component, text, now):
        q = self.open.pop(component)
        return self.take(self.p.on_answer(q.query_id, ComponentAnswer(text=text), now))

    def kinds(self, out=None):
        return [e.kind if e.kind != "hold" else f"hold:{e.source}" for e in (out.events if out else self.events)]


def test_a_task_without_a_pipeline_has_no_adapter_and_the_client_is_unchanged():
    fleet = _fleet(None)
    core = _core(fleet)
    assert fleet.robots[0].task.pipeline is None
    assert ClientPipeline.for_robot(core, lambda reason: None) is None
    obs = core.tick(10.0).observation
    assert obs is not None and obs.prompt == core.task.prompt
    assert core.prompt is None and core.pipeline_hold == ""


def test_subgoal_handoff_changes_the_prompt_of_the_next_observation():
    r = Rig()
    out = r.step(10.0, keep=("safety", "monitor"))
    # Held for the first plan: no System 1 round, but all three components are asked with the
    # robot's newest images and joint positions.
    assert "hold:system2" in r.kinds(out) and r.core.pipeline_hold
    assert sorted(q.component for q in out.queries) == ["monitor", "safety", "system2"]
    q = r.open["system2"]
    assert q.question == "next step of: " + r.core.task.prompt and len(q.images) == r.core.robot.num_views
    np.testing.assert_array_equal(q.state, np.arange(len(r.core.robot.joints)))
    assert r.core.tick(10.01).observation is None
    out = r.answer("system2", "grasp the red cube", 10.1)
    assert r.kinds(out) == ["set_prompt", "resume"] and out.events[0].text == "grasp the red cube"
    assert out.events[0].source == "system2" and not out.events[0].escalated
    _frames(r.core, 10.15)
    obs = r.core.tick(10.2).observation
    assert obs is not None and obs.prompt == "grasp the red cube"
    # Two System 1 predictions (the call ratio) make System 2 due again; its next subgoal is the
    # prompt of the observation after it.
    r.core.on_chunk(_chunk(r.core, obs.round_id, obs.stamp), 10.3)
    r.p.on_chunk_taken(10.3)
    r.core.on_exec_info(10.3, 0, 0.1, 10.3)
    _frames(r.core, 10.35)
    obs2 = r.core.tick(10.4).observation
    r.core.on_chunk(_chunk(r.core, obs2.round_id, obs2.stamp), 10.5)
    r.p.on_chunk_taken(10.5)
    assert r.p.counters.system1_predictions == 2
    assert "system2" in [q.component for q in r.step(10.5).queries]
    r.answer("system2", "place it on the pad", 10.6)
    r.core.on_exec_info(10.6, 0, 0.1, 10.6)
    _frames(r.core, 10.65)
    assert r.core.tick(10.7).observation.prompt == "place it on the pad"


def _running(r, now=10.0):
    r.step(now)
    r.answer("system2", "grasp the red cube", now + 0.05)
    _frames(r.core, now + 0.06)
    obs = r.core.tick(now + 0.07).observation
    assert obs is not None
    return obs


def test_safety_unsafe_holds_at_once_and_drops_the_plan():
    r = Rig()
    obs = _running(r)
    r.step(10.5, keep=("safety",))  # the next safety period (2 Hz)
    before = len(r.holds)
    out = r.answer("safety", "unsafe", 10.55)
    # Within the one call: a hold event, the plan dropped and a give-up hold chunk for the controller.
    assert r.kinds(out)[:3] == ["hold:safety", "drop_plan", "replan"] and "hold:system2" in r.kinds(out)
    assert len(r.holds) == before + 1
    hold = r.holds[-1]
    assert hold.round_id > obs.round_id  # the awaited round is refused by the controller
    assert r.core.pipeline_hold.startswith("safety: unsafe")
    _frames(r.core, 10.6)
    assert r.core.tick(10.61).observation is None  # no System 1 round while held
    # The awaited round's chunk, when it comes, is not a System 1 prediction and no SLO miss counts.
    r.core.tick(13.0)
    assert r.core.counters.slo_misses == 0
    r.core.on_chunk(_chunk(r.core, obs.round_id, obs.stamp), 13.0)
    r.p.on_chunk_taken(13.0)
    assert r.p.counters.system1_predictions == 0
    # Safe again and a new plan: System 1 resumes with a fresh observation.
    r.step(13.0, keep=("safety",))
    r.answer("system2", "grasp the red cube again", 13.05)
    assert r.core.pipeline_hold  # still unsafe
    r.answer("safety", "safe", 13.06)
    assert r.kinds()[-1] == "resume" and not r.core.pipeline_hold
    _frames(r.core, 13.1)
    obs3 = r.core.tick(13.11).observation
    assert obs3 is not None and obs3.round_id > hold.round_id and obs3.prompt == "grasp the red cube again"


def test_monitor_failed_requests_a_reset_and_counts_a_retry_then_escalates():
    r = Rig()
    _running(r)
    r.step(11.0, keep=("monitor",))  # 1 Hz
    out = r.answer("monitor", "failed", 11.2)
    assert r.resets and r.resets[0].startswith("monitor: failed (retry 1 of 1)")
    ev = [e for e in out.events if e.kind == "reset_episode"]
    assert ev and ev[0].retry == 1 and ev[0].source == "monitor"
    assert r.p.counters.retries == 1 and r.p.resets_requested == 1
    assert "hold:system2" in r.kinds(out)  # a new episode waits for its first plan
    # The failure after max_task_retries escalates: latched, held, no reset.
    r.step(11.5)
    r.answer("system2", "grasp the red cube", 11.55)
    r.step(12.0, keep=("monitor",))
    out = r.answer("monitor", "failed", 12.1)
    assert "escalate" in r.kinds(out) and len(r.resets) == 1
    assert r.p.escalated.startswith("task failed 2 times") and r.core.pipeline_hold


@pytest.mark.parametrize("on_lost", ["ignore", "replan"])
def test_the_grasp_watch_sees_a_slip_in_the_joint_states_and_reports_it(on_lost):
    """The client feeds its newest joint positions to the grasp watch at every step: the gripper
    (the last joint) held at a cube's width, then closing past it, is a "grasp_lost" event from
    the monitor; with on_lost replan the plan is dropped (a give-up hold chunk), not the episode."""
    pipeline = copy.deepcopy(PIPELINE)
    pipeline["task_retry"]["grasp_watch"] = {"on_lost": on_lost}
    r = Rig(pipeline)
    _running(r)
    joints = list(r.core.robot.joints)

    def gripper(width, now, lift=0.0):
        r.core.on_joint_state(joints, [lift] + [0.0] * (len(joints) - 2) + [width])
        r.step(now)

    for i in range(20):  # 0.4 s at the pipeline's 50 Hz: held still at 4 cm, then lifted
        gripper(0.04, 10.2 + 0.02 * i, lift=0.01 * max(0, i - 12))
    holds = len(r.holds)
    gripper(0.02, 10.62, lift=0.07)
    lost = [e for e in r.events if e.kind == "grasp_lost"]
    assert len(lost) == 1 and lost[0].source == "monitor" and lost[0].reason.startswith("grasp watch")
    assert r.p.status()["pipeline"]["grasp_losses"] == 1 and r.p.status()["pipeline"]["grasp_watch"]["lost"] == 1
    assert len(r.holds) == holds + (on_lost == "replan") and not r.resets
    gripper(0.0, 10.64, lift=0.07)
    assert len([e for e in r.events if e.kind == "grasp_lost"]) == 1  # one loss, one report


def test_a_reset_the_pipeline_asked_for_is_no_lost_grasp():
    """The monitor's "failed" while the cube is held: the reset takes it out of the fingers, and
    their closing afterwards is not reported as a lost grasp."""
    r = Rig()
    _running(r)
    joints = list(r.core.robot.joints)

    def gripper(width, now):
        r.core.on_joint_state(joints, [0.0] * (len(joints) - 1) + [width])
        r.step(now, keep=("monitor",))

    for i in range(41):  # held from 10.2 s to the monitor's next question at 11.0 s (1 Hz)
        gripper(0.04, 10.2 + 0.02 * i)
    r.answer("monitor", "failed", 11.01)
    assert r.resets and r.p.grasp_watch.counts["grasped"] == 1
    for i, width in enumerate((0.03, 0.01, 0.0, 0.0)):
        gripper(width, 11.02 + 0.02 * i)
    assert not [e for e in r.events if e.kind == "grasp_lost"] and r.p.counters.grasp_losses == 0


def test_escalation_latches_until_acknowledged():
    r = Rig()
    _running(r)
    assert not r.p.acknowledge(10.1).accepted  # nothing to clear
    for i in range(3):  # max_consecutive_safety_replan 2: the third unsafe in a row escalates
        t = 10.5 + 0.5 * i
        r.step(t, keep=("safety",))
        out = r.answer("safety", "unsafe", t + 0.01)
    esc = [e for e in out.events if e.kind == "escalate"]
    assert esc and esc[0].source == "safety" and esc[0].escalated
    reason = r.p.escalated
    assert reason and r.core.pipeline_hold
    # Latched: nothing is asked, the robot stays held.
    assert r.step(30.0).queries == [] and r.core.tick(30.0).observation is None
    ack = r.p.acknowledge(30.1)
    assert ack.accepted and ack.cleared == reason and not r.p.escalated
    kinds = r.kinds(ack.output)
    assert kinds[:2] == ["acknowledged", "drop_plan"] and "hold:system2" in kinds
    assert not ack.output.events[-1].escalated
    # The safety hold stays until a "safe" answer; the plan comes back through System 2.
    queries = r.step(30.2, keep=("safety",)).queries
    assert {"system2", "safety", "monitor"} <= {q.component for q in queries}
    r.answer("system2", "grasp the red cube", 30.3)
    r.answer("safety", "safe", 30.3)
    assert not r.core.pipeline_hold


def test_system1_escalation_is_latched_in_the_pipeline_and_cleared_with_it():
    r = Rig()
    _running(r)
    r.core.state = r.core.state.STOPPED
    r.core.escalations.append("3 consecutive SLO misses")
    out = r.step(10.2)
    assert "escalate" in r.kinds(out) and r.p.escalated == "3 consecutive SLO misses"
    ack = r.p.acknowledge(10.3)
    assert ack.accepted and not r.core.stopped and not r.p.escalated


def test_answers_before_start_or_unknown_are_ignored():
    r = Rig()
    assert r.p.on_answer(5, ComponentAnswer(text="unsafe"), 9.0).events == []
    r.step(10.0)
    assert r.p.on_answer(999, ComponentAnswer(text="unsafe"), 10.1).events == []
    assert r.p.counters.unknown_answers == 1


@pytest.mark.parametrize("registered", [False, True])
def test_the_pipeline_starts_once_the_client_is_registered(registered):
    fleet = _fleet()
    core = RobotClientCore(fleet.robots[0])
    p = ClientPipeline.for_robot(core)
    assert p.step(10.0).queries == [] and not p.started
    for v in range(core.robot.num_views):
        core.on_image(v, make_image(), 10.0)
    core.on_joint_state(list(core.robot.joints), [0.0] * len(core.robot.joints))
    if registered:
        core.on_registered(RegistrationResult(True, "", "A"))
    assert bool(p.step(10.1).queries) == registered and p.started == registered
