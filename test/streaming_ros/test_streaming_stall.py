"""The streams after a stall longer than the whole window (a loaded CPU): the fresh tokens are
re-anchored to the tick's time, so the stream catches up instead of sending only late nodes."""
import numpy as np
import torch

from physai_ros.engine.streaming.expert import StreamingExpert
from physai_ros.engine.streaming.streams import StreamingConfig, StreamingCore

from streaming_service_helpers import CFG, one_torch_thread  # noqa: F401 (autouse)
from streaming_service_helpers import fleet


def _core():
    engine, expert = StreamingExpert.build(CFG, force="random", seed=0)
    # 8 tokens 0.1 s apart: the window reaches 0.8 s ahead; 4 ticks per token at 120 Hz.
    return StreamingCore(engine, expert, StreamingConfig(vlm_hz=10, ae_hz=120, action_hz=10, steps_per_token=4),
                         clock=lambda: 0.0)


def test_after_a_stall_longer_than_the_window_the_stream_has_future_nodes_again():
    core = _core()
    robot = fleet().robots[0]
    from physai_ros.engine.processor.tokenizer import PromptTokenizer
    from physai_ros.config.fleet import tokenizer_path
    from physai_ros.engine.types import EngineInput

    enc = PromptTokenizer(tokenizer_path(fleet()), 48).encode(robot.task.prompt)
    s = CFG.vision.image_size
    inp = EngineInput(images=torch.zeros(1, 3, s, s), image_masks=torch.ones(1, dtype=torch.bool),
                      tokens=torch.from_numpy(enc.tokens), token_mask=torch.from_numpy(enc.mask),
                      state=torch.zeros(CFG.max_state_dim))
    core.add_robot("r", inp, action_dim=5)
    t, period = 1.0, 1 / 120
    core.vlm_pass(t)
    sent = []  # (tick, committed node ticks, all node ticks)
    for _ in range(60):
        for seg in core.tick(t):
            sent.append((t, seg))
        t += period
    assert core.stats.late_nodes == 0
    t += 2.0  # a stall of 2 s: 2.5 windows; this tick finishes (late) what the window held ...
    [stalled] = core.tick(t)
    late_at_stall = core.stats.late_nodes
    assert late_at_stall > 0 and stalled.committed.all()
    # ... and the fresh tokens start from the tick's time: the next tick has a future again.
    t += period
    [seg] = core.tick(t)
    assert np.any(seg.node_times()[~seg.committed] > t), "tentative nodes lie ahead"
    # Back on schedule: no more late nodes, every node committed once and in time order.
    allsegs = [s for _, s in sent] + [stalled, seg]
    for _ in range(120):
        allsegs += core.tick(t + period)
        t += period
    assert core.stats.late_nodes == late_at_stall
    committed = np.concatenate([s.node_times()[s.committed] for s in allsegs])
    assert np.all(np.diff(committed) > 0)
