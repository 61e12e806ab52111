"""The language stream's plain data: one update of a robot's text, and an operator's
question. The ROS codec is physai_ros.ros.codecs.text; the serving side is
physai_ros.serving.language.stream."""
from __future__ import annotations

from dataclasses import dataclass

TEXT_TOPIC = "text"  # in the robot's namespace: policy_server -> anyone listening
ASK_SERVICE = "/policy_server/ask_robot"
SOURCE_TASK, SOURCE_OPERATOR = "task", "operator"
REASON_REFUSED = "refused"


@dataclass(frozen=True)
class RobotTextData:
    robot_id: str
    task_id: str
    round_id: int
    request_id: int
    question: str
    source: str
    tokens: tuple[int, ...]
    text: str
    seq: int
    done: bool = False
    reason: str = ""
    detail: str = ""
    stamp: float = 0.0


@dataclass(frozen=True)
class TextQuery:
    """A question for a robot's next frame. max_tokens 0: the task's budget. requester: the
    operator who signed it ("" on an insecure fleet): rates and waiting questions are per
    requester, so one cannot use up another's."""

    robot_id: str
    question: str
    max_tokens: int = 0
    source: str = SOURCE_OPERATOR
    requester: str = ""


@dataclass(frozen=True)
class QueryAnswer:
    accepted: bool
    reason: str = ""
    request_id: int = 0
