"""Observation builders for the serving and robot-client tests (plain data)."""
import time

import numpy as np

from physai_ros.protocol.observation import ImageData, ObservationData
def make_image(h=224, w=224, encoding="rgb8", value=None, seed=0):
    c = {"rgb8": 3, "bgr8": 3, "mono8": 1, "rgba8": 4}.get(encoding, 3)
    rng = np.random.default_rng(seed)
    arr = rng.integers(0, 256, (h, w, c), dtype=np.uint8) if value is None else np.full((h, w, c), value, np.uint8)
    return ImageData(h, w, encoding, w * c, arr.tobytes())


def make_obs(robot, round_id, stamp=None, **kw):
    fields = dict(
        robot_id=robot.id, task_id=robot.task.name, round_id=round_id,
        stamp=time.time() if stamp is None else stamp,
        images=tuple(make_image(*robot.camera_size(v), seed=round_id + v) for v in range(robot.num_views)),
        state=np.linspace(-0.5, 0.5, len(robot.joints)).astype(np.float32),
        wrench=np.zeros(6, np.float32), wrench_stamp=0.0, prompt=robot.task.prompt,
        exec_phase_start=0.0, actions_remaining=0, control_period=robot.task.action_period_s,
        horizon_policy=robot.task.horizon_policy, horizon_params=robot.task.horizon_params)
    fields.update(kw)
    return ObservationData(**fields)
