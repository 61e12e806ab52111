"""Builders for the streaming-service tests: tiny pi0 streams, a virtual clock, fleet data."""
from __future__ import annotations

import copy
import dataclasses
import threading

import numpy as np
import pytest
import torch
import yaml

from physai_ros.config.fleet import default_fleet_path, parse_fleet, tokenizer_path
from physai_ros.engine.processor.tokenizer import PromptTokenizer
from physai_ros.engine.streaming.expert import StreamingExpert
from physai_ros.engine.streaming.streams import StreamingConfig, StreamingCore
from physai_ros.engine.types import Pi0Config
from physai_ros.protocol.observation import ImageData
from physai_ros.protocol.registration import RobotRegistration
from physai_ros.serving.action_runner import ActionModelRunner
from physai_ros.serving.streaming.service import StreamingService

from observation_builders import make_obs

CFG = Pi0Config.preset("tiny")
ROS_OFFSET = 1_000.0  # ROS clock = virtual stream clock + this (the service must convert)


@pytest.fixture(autouse=True)
def one_torch_thread():
    n = torch.get_num_threads()
    torch.set_num_threads(1)
    yield
    torch.set_num_threads(n)


def fleet_doc(slots=1, when_full="chunked", segment_rate_hz=120.0, robots=3):
    doc = yaml.safe_load(default_fleet_path().read_text())
    # The random-weight tiny pi0 (the embedded default may be a trained checkpoint): fast to build.
    doc["server"]["model"] = {"preset": "tiny", "tokenizer": "package://physai_ros/assets/tokenizer.json",
                              "max_token_len": 48, "seed": 0}
    doc["server"]["streaming"] = {"slots": slots, "vlm_hz": 30, "ae_hz": 480, "action_hz": 240,
                                  "steps_per_token": 10, "force": "random", "when_full": when_full,
                                  "timeout_s": 1.0}
    doc["tasks"]["stream_task"] = dict(copy.deepcopy(doc["tasks"]["pick_place"]), mode="streaming",
                                       segment_rate_hz=segment_rate_hz)
    doc["tasks"]["stream_task"].pop("language", None)  # refused on a streaming task (no prefix cache for text)
    base = doc["robots"][0]
    doc["robots"] = [dict(copy.deepcopy(base), id=f"robot_{k}", task="stream_task", cameras=["camera_0/image_raw"],
                          image_height=64, image_width=64, sim={"task": "pick_and_place", "num_joints": 4, "seed": k})
                     for k in range(robots)]
    return doc


class VirtualClock:
    def __init__(self):
        self.t = 10.0

    def __call__(self):
        return self.t


class ManualStreams:
    """Drives the real StreamingCore tick by tick at virtual times, as StreamingEngine's threads
    would (on_segment under the robot-table lock); the thread driver itself is tested in
    test/engine/test_streaming_threads.py and below with the real StreamingEngine."""

    def __init__(self, core, on_segment=None):
        self.core, self.on_segment = core, on_segment
        self.running = False
        self.started_at = None
        self.error_count = 0
        self.starts = 0

    def start(self):
        self.running, self.started_at = True, self.core.clock()
        self.starts += 1
        self.core.restart_robots()

    def stop(self):
        self.running = False

    def metrics(self):
        return {"vlm_hz": 0.0, "ae_hz": 0.0, "missed_tick_fraction": 0.0}

    def step(self, vlm: bool):
        now = self.core.clock()
        if vlm:
            self.core.vlm_pass(now)
        segs = self.core.tick(now)
        with self.core._lock:
            for s in segs:
                if s.robot_id in self.core._robots:
                    self.on_segment(s)
        return segs


def build_service(fleet, clock=None, manual=True, normalizer=None, published=None):
    clock = clock or VirtualClock()
    sc = fleet.server.streaming
    engine, expert = StreamingExpert.build(CFG, force="random", seed=0)
    core = StreamingCore(engine, expert, StreamingConfig(vlm_hz=sc.vlm_hz, ae_hz=sc.ae_hz, action_hz=sc.action_hz,
                                                         steps_per_token=sc.steps_per_token, max_robots=sc.slots),
                         clock=clock)
    published = [] if published is None else published
    lock = threading.Lock()

    def publish(out):
        with lock:
            published.append(out)

    runner = ActionModelRunner(CFG, PromptTokenizer(tokenizer_path(fleet), 48), normalizer)
    svc = StreamingService(core, sc, publish, runner, max_observation_age_s=fleet.server.max_observation_age_s,
                           ros_clock=lambda: clock() + ROS_OFFSET,
                           engine_factory=ManualStreams if manual else None, log=lambda m: None)
    return svc, clock, published


def registration(robot, last_round_id=0, streaming=True):
    return RobotRegistration(robot_id=robot.id, task_id=robot.task.name, robot_namespace="/" + robot.namespace,
                             prompt=robot.task.prompt, camera_topics=robot.camera_topics, num_views=robot.num_views,
                             image_height=robot.image_height, image_width=robot.image_width,
                             joint_names=robot.joints, state_dim=len(robot.joints), action_dim=len(robot.joints),
                             control_period=robot.task.action_period_s, streaming=streaming,
                             last_round_id=last_round_id)


def observation(robot, round_id, stamp, seed=0, **kw):
    """observation_builders.make_obs with the views drawn from one generator seeded by `seed`."""
    rng = np.random.default_rng(seed)
    h, w = robot.image_height, robot.image_width
    images = tuple(ImageData(h, w, "rgb8", w * 3, rng.integers(0, 256, (h, w, 3), dtype=np.uint8).tobytes())
                   for _ in range(robot.num_views))
    return make_obs(robot, round_id, stamp, **{"images": images, **kw})


def fleet(**kw):
    return parse_fleet(fleet_doc(**kw), source=str(default_fleet_path()))


def replace_task(robot, **kw):
    return dataclasses.replace(robot, task=dataclasses.replace(robot.task, **kw))
