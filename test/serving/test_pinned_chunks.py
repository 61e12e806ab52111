"""End-to-end chunks pinned before the serving redesign (issue 15): the same observations must
give the same actions, horizons and confidences through every serving path, whatever the code
around the engine looks like.

Three paths, each from plain observations to what a robot receives:
- chunked: fleet.yaml's default model (the shipped checkpoint) through the serving core, one
  robot per batch and then all robots in one batch (each batch draws its noise in order);
- remote: the tiny preset through the serving core with its engine behind an engine worker
  (request encoded, served by the worker's core, result decoded: everything but DDS);
- streaming: the tiny preset's VLM and action-expert streams, ticked by hand on a virtual clock.

The pinned numbers are in test/fixtures/pinned_chunks.npz. Regenerate them only for a change
that is meant to alter the arithmetic (and say so in its commit):
    .venv/bin/python test/serving/test_pinned_chunks.py --write
"""
from __future__ import annotations

import dataclasses
import sys
from pathlib import Path

import numpy as np
import pytest
import torch

HERE = Path(__file__).resolve().parent
PINNED = HERE.parent / "fixtures" / "pinned_chunks.npz"
for extra in (HERE, HERE.parent / "streaming_ros"):
    if str(extra) not in sys.path:
        sys.path.insert(0, str(extra))

from physai_ros.protocol.chunk import STATUS_OK  # noqa: E402
from physai_ros.serving.client_core import RobotClientCore  # noqa: E402
from physai_ros.serving.config import load_fleet, parse_fleet  # noqa: E402
from physai_ros.serving.factory import build_core  # noqa: E402

from serving_helpers import make_image, make_obs  # noqa: E402

T0 = 1_000_000.0  # a fixed "now": observations are stamped just before it
# The arithmetic of these paths is meant to stay as it is: bit for bit. A change that alters it
# on purpose regenerates the pins (see above) and says so; 1e-6 is the bound for that.
ATOL = 0.0


def _fleet():
    fleet = load_fleet()
    return dataclasses.replace(fleet, server=dataclasses.replace(fleet.server, max_observation_age_s=30.0))


def _obs(robot, round_id, seed):
    images = tuple(make_image(robot.image_height, robot.image_width, seed=seed + v)
                   for v in range(robot.num_views))
    state = np.linspace(-0.4, 0.6, len(robot.joints)).astype(np.float32) + np.float32(0.01 * seed)
    return make_obs(robot, round_id, stamp=T0 - 0.05, images=images, state=state)


def _run_core(core, fleet, tag: str) -> dict[str, np.ndarray]:
    core.clock = lambda: T0
    out: dict[str, np.ndarray] = {}
    for r in fleet.robots:
        assert core.register(RobotClientCore(r).registration()).accepted

    def record(chunks, label):
        for c in chunks:
            assert c.status == STATUS_OK, c.error
            key = f"{tag}/{label}/{c.robot_id}/{c.round_id}"
            out[key + "/actions"] = np.asarray(c.actions, np.float32)
            out[key + "/confidence"] = np.asarray(c.confidence, np.float32)
            out[key + "/horizon"] = np.asarray([c.horizon], np.int64)

    for k, r in enumerate(fleet.robots):  # one robot per batch
        assert core.submit(_obs(r, 10, seed=k), now=T0) == []
        record(core.step(T0).chunks, "single")
    for k, r in enumerate(fleet.robots):  # all robots in one batch
        assert core.submit(_obs(r, 11, seed=10 + k), now=T0) == []
    chunks = []
    while core.pending():
        chunks += core.step(T0).chunks
    record(chunks, "batch")
    return out


def chunked_path() -> dict[str, np.ndarray]:
    fleet = _fleet()
    torch.manual_seed(0)
    return _run_core(build_core(fleet, instance_id="pin"), fleet, "chunked")


class _WorkerLoopback:
    """The server's view of a remote engine without DDS: the batch is encoded as the engine
    worker's request message, served by a real WorkerCore, and its result message decoded."""

    def __init__(self, engine):
        from physai_ros.workers.core import WorkerCore

        self.config = engine.config
        self.worker = WorkerCore(engine, "w_pin", "edge", max_batch=8, model="tiny")
        self._n = 0

    def infer(self, inputs):
        from physai_ros.workers import codec

        self._n += 1
        req = codec.encode_request(inputs, self.config, f"b-{self._n}", "w_pin")
        res = self.worker.serve(req, received_at=self.worker.clock())
        return codec.decode_result(res, self.config, len(inputs))


def _tiny_fleet():
    import yaml

    from physai_ros.serving.config import default_fleet_path

    doc = yaml.safe_load(default_fleet_path().read_text())
    doc["server"]["model"] = {"preset": "tiny", "tokenizer": "package://physai_ros/assets/tokenizer.json",
                              "max_token_len": 48, "seed": 3}
    doc["server"]["max_observation_age_s"] = 30.0
    return parse_fleet(doc, source=str(default_fleet_path()))


def remote_path() -> dict[str, np.ndarray]:
    fleet = _tiny_fleet()
    core = build_core(fleet, instance_id="pin")
    for slot in core.engines.values():
        slot.engine = _WorkerLoopback(slot.engine)
    return _run_core(core, fleet, "remote")


def streaming_path() -> dict[str, np.ndarray]:
    from streaming_service_helpers import ROS_OFFSET, build_service, fleet as streaming_fleet, observation, registration

    fleet = streaming_fleet(slots=1, segment_rate_hz=480.0, robots=1)
    svc, clock, published = build_service(fleet)
    robot = fleet.robots[0]
    assert svc.admit(registration(robot), robot.task).streaming
    assert svc.on_observation(observation(robot, 2, clock() + ROS_OFFSET - 0.01, seed=5)) is None
    dt = 1.0 / 480.0
    for k in range(24):
        if k == 12:
            assert svc.on_observation(observation(robot, 3, clock() + ROS_OFFSET - 0.01, seed=6)) is None
        svc.engine.step(vlm=k % 16 == 0 or k == 12)
        clock.t += dt
    assert published, "the streams published no segment"
    out = {}
    for i, s in enumerate(published):
        key = f"streaming/{i}/round{s.round_id}"
        out[key + "/positions"] = np.asarray(s.positions, np.float32)
        out[key + "/committed"] = np.asarray(s.committed, bool)
    return out


PATHS = {"chunked": chunked_path, "remote": remote_path, "streaming": streaming_path}


def compute_all() -> dict[str, np.ndarray]:
    n = torch.get_num_threads()
    torch.set_num_threads(1)  # one thread: the same reduction order on any machine
    try:
        out = {}
        for fn in PATHS.values():
            out.update(fn())
        return out
    finally:
        torch.set_num_threads(n)


@pytest.fixture(scope="module")
def pinned():
    with np.load(PINNED) as z:
        return {k: z[k] for k in z.files}


@pytest.mark.parametrize("path", sorted(PATHS))
def test_chunks_match_the_pinned_ones(path, pinned):
    n = torch.get_num_threads()
    torch.set_num_threads(1)
    try:
        got = PATHS[path]()
    finally:
        torch.set_num_threads(n)
    want = {k: v for k, v in pinned.items() if k.startswith(path + "/")}
    assert want, f"nothing pinned for {path}"
    assert sorted(got) == sorted(want)
    for k, v in want.items():
        g = got[k]
        assert g.shape == v.shape, k
        if v.dtype == np.float32:
            np.testing.assert_allclose(g, v, rtol=0, atol=ATOL, err_msg=k)
        else:
            np.testing.assert_array_equal(g, v, err_msg=k)


if __name__ == "__main__":
    if sys.argv[1:] != ["--write"]:
        sys.exit(__doc__)
    data = compute_all()
    PINNED.parent.mkdir(parents=True, exist_ok=True)
    np.savez_compressed(PINNED, **data)
    print(f"wrote {len(data)} arrays to {PINNED}")
