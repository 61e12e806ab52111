"""A small fleet.yaml for the fault tests (tiny model, 32x32 frames, one view) and plain-data
builders, shared by the in-process and the real-process fault tests."""
from __future__ import annotations

import copy
import json
import time

import numpy as np
import yaml

from physai_ros.protocol.observation import ImageData, ObservationData

IMAGE_HW = (32, 32)
JOINTS = ["joint_0", "joint_1", "joint_2", "joint_3", "gripper"]

BASE = {
    "server": {
        "model": {"preset": "tiny", "tokenizer": "package://physai_ros/assets/tokenizer.json",
                  "max_token_len": 48},
        "device": "cpu", "engine_instances": 1, "max_batch": 4, "scheduler": "fifo",
        "profile": False, "max_observation_age_s": 30.0,
    },
    "tasks": {
        "pick_place": {
            "prompt": "pick up the cube and place it on the goal", "action_rate_hz": 10,
            "horizon_policy": {"name": "static", "params": [8]}, "slo_ms": 5000,
            "fallback": "hold", "max_consecutive_slo_violation": 100,
            "on_max_violation": "stop_and_call_human",
        },
    },
}


def robot_entry(rid: str, seed: int = 0, **over) -> dict:
    d = {"id": rid, "task": "pick_place", "sim": {"task": "pick_and_place", "num_joints": 4, "seed": seed},
         "cameras": ["camera_0/image_raw"], "image_height": IMAGE_HW[0], "image_width": IMAGE_HW[1],
         "joints": list(JOINTS), "control_rate_hz": 480, "simulated": True}
    d.update(over)
    return d


def fleet_doc(robots=("r0", "r1", "r2"), server=None, tasks=None) -> dict:
    doc = copy.deepcopy(BASE)
    doc["server"].update(server or {})
    for name, t in (tasks or {}).items():
        doc["tasks"][name] = dict(doc["tasks"]["pick_place"], **t)
    doc["robots"] = [robot_entry(r, i) if isinstance(r, str) else r for i, r in enumerate(robots)]
    return doc


def write_fleet(path, **kw) -> str:
    path.write_text(yaml.safe_dump(fleet_doc(**kw)))
    return str(path)


def write_factory_fleet(d, robots, **factory) -> str:
    """d/fleet.yaml for the factory process tests: two engine instances with System 1 measured at
    start-up, a factory block planning two pick_place robots on two servers (`factory` overrides
    its keys), and the profile file it names (d/profiles.json). Returns the fleet file's path."""
    from physai_ros.scheduler.factory.profiling import profile_from_service_times

    profile = profile_from_service_times("tiny", "cpu", {1: 0.05, 2: 0.08}, requests=600)
    (d / "profiles.json").write_text(json.dumps({"profiles": [profile.to_dict()]}))
    doc = fleet_doc(robots=robots, server={"engine_instances": 2, "max_batch": 2, "scheduler": "wait_ratio",
                                           "profile": {"reps": 1, "max_batch": 2, "views": 1}})
    doc["tasks"]["pick_place"]["pipeline"] = {"action_period_ms": 100}
    doc["factory"] = {"servers": 2, "hardware": "cpu", "profiles": "profiles.json", "models": {"system1": "tiny"},
                      "robots": {"pick_place": 2}, "apply": True, **factory}
    (d / "fleet.yaml").write_text(yaml.safe_dump(doc))
    return str(d / "fleet.yaml")


def image(seed: int = 0) -> ImageData:
    rng = np.random.default_rng(seed)
    arr = rng.integers(0, 256, (*IMAGE_HW, 3), dtype=np.uint8)
    return ImageData(IMAGE_HW[0], IMAGE_HW[1], "rgb8", IMAGE_HW[1] * 3, arr.tobytes())


def obs(robot_id: str, round_id: int, stamp: float | None = None) -> ObservationData:
    return ObservationData(
        robot_id=robot_id, task_id="pick_place", round_id=round_id,
        stamp=time.time() if stamp is None else stamp, images=(image(round_id),),
        state=np.linspace(-0.5, 0.5, len(JOINTS)).astype(np.float32), wrench=np.zeros(6, np.float32),
        wrench_stamp=0.0, prompt="pick up the cube and place it on the goal", exec_phase_start=0.0,
        actions_remaining=0, control_period=0.1, horizon_policy="static", horizon_params=(8.0,))
