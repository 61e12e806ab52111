"""An action batch's frame handed to the language stream (OxyGen, docs/language.md): the same
prefill that produced the chunks feeds the robots' texts.

ServingCore asks this at three points of a batch and knows nothing else of the language stream:
after the engine call (`capture`: the prefix the engine kept), once the chunks are made
(`keep`: whether the frame has text work) and when the batch completes under the core's lock
(`hold`: the instance stays busy until the core's run_language has decoded the frame's text).
"""
from __future__ import annotations

from typing import Any

from physai_ros.serving.language.stream import FrameRobot
from physai_ros.serving.work import BatchRun


class FrameHold:
    def __init__(self, stream: Any):
        self.stream = stream  # serving.language.stream.LanguageStream

    def capture(self, run: BatchRun) -> None:
        """Right after a successful engine call, on the instance's thread: the frame's prefix
        cache, taken from the engine that kept it (only instances the stream speaks on keep one)."""
        slot = run.slot
        if self.stream.speaks_on(slot.instance_id, slot.engine):
            run.frame = slot.engine.take_prefix()

    def keep(self, run: BatchRun) -> None:
        """The frame stays on the run only if it has text work; otherwise the instance is freed
        with the chunks rather than held for a run_language that may never come."""
        run.rows = [FrameRobot(r.robot_id, r.payload.task_id, r.round_id) for r in run.ok]
        if run.frame is not None and (run.frame[0] is None
                                      or not self.stream.wants_frame(run.slot.instance_id, run.rows)):
            run.frame = None

    def hold(self, run: BatchRun) -> bool:
        """Under the core's lock: hand the kept frame to the stream. Returns whether the instance
        stays held (a batch that failed or answered nobody frees it at once)."""
        held = run.frame is not None and bool(run.ok) and run.fatal is None
        if held:
            self.stream.hold(run.slot.instance_id, run.frame[0], run.frame[1], run.rows, run.t1 - run.t0)
        return held

    def holding(self, instance_id: str) -> bool:
        """A frame waits for decode (asked from the instance's own thread, which holds it)."""
        return self.stream.is_holding(instance_id)

    def decode(self, instance_id: str) -> tuple[list, str]:
        """The held frame's texts, and why it failed ("" if it did not): text failing must not
        take the actions down, so nothing raises out of here."""
        try:
            return self.stream.run_held(instance_id), ""
        except Exception as e:
            return [], f"language frame on {instance_id} failed: {type(e).__name__}: {e}"
