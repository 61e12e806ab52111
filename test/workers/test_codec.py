"""Messages <-> engine data: lossless round trips and clear errors for malformed messages."""
import array
import dataclasses

import numpy as np
import pytest
import torch
from physai_ros_interfaces.msg import EngineBatchRequest, EngineBatchResult

from physai_ros.engine.types import EngineInputError, EngineOutput, Pi0Config
from physai_ros.scheduler.types import LatencyProfile
from physai_ros.workers import codec

from worker_inputs import assert_same_inputs, make_inputs


def test_request_round_trip_is_exact_and_camera_images_travel_as_bytes(tiny):
    inputs = make_inputs(tiny, 4)
    msg = codec.encode_request(inputs, tiny, "b-1", "w")
    assert msg.image_encoding == EngineBatchRequest.IMAGES_U8 and len(msg.images_f32) == 0
    assert len(msg.images_u8) == sum(x.images.numel() for x in inputs)
    assert list(msg.has_noise) == [True, True, False, True]
    assert_same_inputs(codec.decode_request(msg, tiny), inputs)


def test_off_grid_images_fall_back_to_float32_and_stay_exact(tiny):
    inputs = make_inputs(tiny, 2, on_grid=False, noise=False)
    msg = codec.encode_request(inputs, tiny, "b-2")
    assert msg.image_encoding == EngineBatchRequest.IMAGES_F32 and len(msg.images_u8) == 0
    assert_same_inputs(codec.decode_request(msg, tiny), inputs)


def test_raw_camera_frames_travel_as_the_model_pixels_the_local_engine_makes(tiny):
    """A LeRobot checkpoint's views are the robot's frames, any size each: they are sent as the
    float pixels the local collation would make of them, so a worker computes the same chunk."""
    from physai_ros.engine.batching import collate

    inputs = make_inputs(tiny, 3)
    gen = torch.Generator().manual_seed(1)
    inputs[0] = dataclasses.replace(inputs[0], images=(torch.randint(0, 256, (3, 48, 64), dtype=torch.uint8,
                                                                     generator=gen),))
    inputs[2] = dataclasses.replace(inputs[2], images=tuple(torch.randint(0, 256, (3, h, w), dtype=torch.uint8,
                                                                          generator=gen)
                                                            for h, w in [(96, 128), (128, 96), (7, 5)][:len(inputs[2].images)]))
    msg = codec.encode_request(inputs, tiny, "b-3")
    assert msg.image_encoding == EngineBatchRequest.IMAGES_F32
    decoded = codec.decode_request(msg, tiny)
    local = collate(inputs, tiny, "cpu", torch.float32)
    remote = collate(decoded, tiny, "cpu", torch.float32)
    assert torch.equal(local.images, remote.images) and torch.equal(local.image_masks, remote.image_masks)


def test_a_batch_of_raw_frames_travels_as_the_robots_bytes_with_their_sizes(tiny):
    """All robots with raw frames (a LeRobot checkpoint's fleet): the bytes and each view's size
    travel, and the worker rebuilds the very frames; a size that does not fit the bytes, or an
    absurd one, is refused naming the field."""
    gen = torch.Generator().manual_seed(2)
    sizes = [[(48, 64)], [(96, 128), (128, 96)]]
    inputs = [dataclasses.replace(x, images=tuple(torch.randint(0, 256, (3, h, w), dtype=torch.uint8, generator=gen)
                                                  for h, w in hw), image_masks=torch.ones(len(hw), dtype=torch.bool))
              for x, hw in zip(make_inputs(tiny, 2, views=1), sizes)]
    msg = codec.encode_request(inputs, tiny, "b-4")
    assert msg.image_encoding == EngineBatchRequest.IMAGES_FRAMES and len(msg.images_f32) == 0
    assert list(msg.frame_heights) == [48, 96, 128] and list(msg.frame_widths) == [64, 128, 96]
    assert len(msg.images_u8) == 3 * (48 * 64 + 96 * 128 + 128 * 96)
    decoded = codec.decode_request(msg, tiny)
    for x, y in zip(inputs, decoded):
        assert isinstance(y.images, tuple) and all(torch.equal(a, b) for a, b in zip(x.images, y.images))
    msg.frame_widths = [64, 128, 95]
    with pytest.raises(codec.BadRequest, match="images_u8: expected"):
        codec.decode_request(msg, tiny)
    msg.frame_widths, msg.frame_heights = [64, 128, 96], [48, 96, 100000]
    with pytest.raises(codec.BadRequest, match="frame_heights/frame_widths: expected 1..8192"):
        codec.decode_request(msg, tiny)


def test_encode_rejects_bad_inputs_like_the_local_engine(tiny):
    inputs = make_inputs(tiny, 2)
    inputs[1].tokens[0] = tiny.vocab_size
    with pytest.raises(EngineInputError, match="^robot 1: tokens"):
        codec.encode_request(inputs, tiny, "b")
    with pytest.raises(EngineInputError, match="empty batch"):
        codec.encode_request([], tiny, "b")


def _broken(tiny, **fields):
    msg = codec.encode_request(make_inputs(tiny, 2), tiny, "b")  # prompts of 5 and 8 tokens
    for k, v in fields.items():
        setattr(msg, k, v)
    return msg


@pytest.mark.parametrize("fields, match", [
    (dict(batch_size=0), "^batch_size: expected >= 1"),
    (dict(batch_size=3), "^num_views: expected 3 values"),
    (dict(image_size=224), "^image_size: expected 56"),
    (dict(images_u8=array.array("B", b"\x00" * 10)), "^images_u8: expected"),
    (dict(image_encoding=7), "^image_encoding"),
    (dict(num_views=array.array("I", [1, 9])), "^num_views: expected 1..3"),
    (dict(token_mask=[True]), "^token_mask: expected"),
    (dict(state_dim=3), "^state_dim: expected 8"),
    (dict(noise=array.array("f", [0.0])), "^noise: expected"),
    (dict(tokens=array.array("i", [5000] * 13)), "^robot 0: tokens: ids must lie"),
    (dict(image_masks=[False] * 3), "^robot 0: image_masks: at least one"),
])
def test_malformed_requests_name_the_field(tiny, fields, match):
    with pytest.raises(codec.BadRequest, match=match):
        codec.decode_request(_broken(tiny, **fields), tiny)


def test_request_larger_than_the_worker_allows(tiny):
    msg = codec.encode_request(make_inputs(tiny, 3), tiny, "b")
    with pytest.raises(codec.BadRequest, match="exceeds this worker's max_batch 2"):
        codec.decode_request(msg, tiny, max_batch=2)


def test_result_round_trip_and_size_checks(tiny):
    g = torch.Generator().manual_seed(0)
    outs = [EngineOutput(torch.randn(tiny.chunk_size, tiny.max_action_dim, generator=g),
                         torch.randn(tiny.num_steps, tiny.chunk_size, tiny.max_action_dim, generator=g),
                         {"prefix_ms": 1.0, "denoise_ms": 2.0, "total_ms": 3.0}) for _ in range(3)]
    msg = codec.encode_result(outs, tiny, "b-9", "w", queue_ms=4.0)
    back = codec.decode_result(msg, tiny, 3)
    for o, b in zip(outs, back):
        assert torch.equal(o.actions, b.actions) and torch.equal(o.updates, b.updates)
        assert b.timings_ms["total_ms"] == 3.0 and b.timings_ms["worker_queue_ms"] == 4.0
    with pytest.raises(codec.BadResult, match="expected \\(2,"):
        codec.decode_result(msg, tiny, 2)
    msg.actions = array.array("f", [0.0])
    with pytest.raises(codec.BadResult, match="^actions/updates"):
        codec.decode_result(msg, tiny, 3)
    err = codec.error_result("b-9", "w", "boom")
    assert err.status == EngineBatchResult.STATUS_ERROR and err.error == "boom"


def test_status_and_model_config_round_trip(tiny):
    st = codec.WorkerStatus("w", "cloud", True, 4, LatencyProfile((1, 2, 3, 4), (0.1, 0.15, 0.2, 0.3)),
                            codec.config_to_json(tiny), "tiny", 0.5, 3, 9, 1, "x", 2)
    assert codec.decode_status(codec.encode_status(st)) == st
    assert codec.config_from_json(st.model_config) == tiny
    other = Pi0Config.preset("tiny", chunk_size=4)
    assert codec.config_from_json(codec.config_to_json(other)) != tiny
    with pytest.raises(ValueError, match="model_config"):
        codec.config_from_json("{}")
    bad = codec.encode_status(dataclasses.replace(st, profile=None))
    with pytest.raises(ValueError, match="^profile: a ready worker"):
        codec.decode_status(bad)
    bad = codec.encode_status(dataclasses.replace(st, tier="moon"))
    with pytest.raises(ValueError, match="^tier"):
        codec.decode_status(bad)
