"""A small fleet with a pipeline task on the tiny preset (the component service), and
query builders, shared by the in-process and the real-process component service tests."""
from __future__ import annotations

import copy
import threading

import numpy as np

from physai_ros.pipeline.backend import ComponentQuery
from physai_ros.protocol.component import ComponentRequest

IMAGE_HW = (32, 32)
JOINTS = ["joint_0", "joint_1", "joint_2", "joint_3", "gripper"]
PROMPT = "pick up the cube and place it on the goal"

_TASK = {"prompt": PROMPT, "action_rate_hz": 10, "horizon_policy": {"name": "static", "params": [8]},
         "slo_ms": 5000, "fallback": "hold", "max_consecutive_slo_violation": 100,
         "on_max_violation": "stop_and_call_human"}

DOC = {
    "server": {"model": {"preset": "tiny", "tokenizer": "package://physai_ros/assets/tokenizer.json",
                         "max_token_len": 48},
               "device": "cpu", "engine_instances": 1, "max_batch": 4, "scheduler": "fifo",
               "profile": False, "max_observation_age_s": 30.0},
    "tasks": {
        "inspect": dict(_TASK, pipeline={"system2_to_system1_call_ratio": 2}, components={
            "system2": {"model": "vla", "prompt": "next step? task: {task}", "slo_ms": 3000},
            "safety": {"model": "vla", "prompt": "is the workcell safe?", "freq_hz": 1, "slo_ms": 3000},
            "monitor": {"model": "vla", "prompt": "ongoing, done, or failed?", "freq_hz": 1, "slo_ms": 3000}}),
        "plain": dict(_TASK),
    },
}


def robot_entry(rid: str, task: str, seed: int = 0, views: int = 1) -> dict:
    return {"id": rid, "task": task, "sim": {"task": "pick_and_place", "num_joints": 4, "seed": seed},
            "cameras": [f"camera_{i}/image_raw" for i in range(views)], "image_height": IMAGE_HW[0],
            "image_width": IMAGE_HW[1], "joints": list(JOINTS), "control_rate_hz": 480, "simulated": True}


def fleet_doc(insecure: bool = True) -> dict:
    doc = copy.deepcopy(DOC)
    doc["robots"] = [robot_entry("r0", "inspect", 0), robot_entry("r1", "inspect", 1, views=2),
                     robot_entry("r2", "plain", 2)]
    if insecure:
        doc["security"] = {"insecure": True}
    return doc


def images(n: int = 1, hw=IMAGE_HW, seed: int = 0) -> tuple[np.ndarray, ...]:
    rng = np.random.default_rng(seed)
    return tuple(rng.integers(0, 256, (*hw, 3), dtype=np.uint8) for _ in range(n))


def request(robot="r0", component="safety", query_id=1, question="is the workcell safe?", views=1,
            max_tokens=4, task_id="inspect", state="ok", hw=IMAGE_HW, seed=0, prompt=PROMPT) -> ComponentRequest:
    st = np.linspace(-0.5, 0.5, len(JOINTS)).astype(np.float32) if state == "ok" else state
    q = ComponentQuery(robot, component, question, prompt, images(views, hw, seed), st, max_tokens)
    return ComponentRequest(query_id=query_id, task_id=task_id, query=q)


class Collector:
    """on_answers for a ComponentService: every answer kept, waited for by count."""

    def __init__(self):
        self.answers, self.cv = [], threading.Condition()

    def __call__(self, answers):
        with self.cv:
            self.answers.extend(answers)
            self.cv.notify_all()

    def by_id(self, query_id, robot="r0"):
        return [a for a in self.answers if a.query_id == query_id and a.robot_id == robot]

    def wait(self, n, timeout=30.0):
        with self.cv:
            assert self.cv.wait_for(lambda: len(self.answers) >= n, timeout), self.answers
            return list(self.answers)
