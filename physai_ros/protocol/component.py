"""A pipeline component's question and answer on the wire, as plain data: the robot
client asks the policy server's component service (serving.pipeline.service) on
/<ns>/component_query and hears the answer on /<ns>/component_answer. The ROS codec is
physai_ros.ros.codecs.component; the question itself is physai_ros.pipeline.backend.ComponentQuery
(carried here as `query`, so this foundation module does not import the pipeline layer).
"""
from __future__ import annotations

from dataclasses import dataclass
from typing import Any

# A task pipeline's components (docs/pipelines.md): System 1 is the VLA answering the robot's
# rounds; the others answer questions, asked in this order at each step.
COMPONENTS = ("system1", "system2", "safety", "monitor")
QUESTION_COMPONENTS = ("system2", "safety", "monitor")

COMPONENT_QUERY_TOPIC = "component_query"  # in the robot's namespace: robot_client -> policy_server
COMPONENT_ANSWER_TOPIC = "component_answer"  # in the robot's namespace: policy_server -> robot_client

# Refusal reasons of the component service (an answer's error is "<reason>: <detail>").
UNKNOWN_ROBOT = "unknown_robot"  # not registered with the serving core
WRONG_TASK = "wrong_task"  # the query's task_id is not the robot's registered task
UNKNOWN_COMPONENT = "unknown_component"  # not system2/safety/monitor, or the task's pipeline has none
BAD_QUESTION = "bad_question"  # empty, too long, control characters
BAD_IMAGES = "bad_images"  # count or size other than the robot registered
BAD_STATE = "bad_state"
MAX_TOKENS = "max_tokens"
BUSY = "busy"  # the backend's queue is full
SUPERSEDED = "superseded"  # a newer query of the same robot and component replaced it in the queue
CLOSED = "closed"  # the server is shutting down
UNREADABLE = "unreadable"  # the message could not be decoded (e.g. an image buffer of the wrong size)
ROBOT_ID_MISMATCH = "robot_id_mismatch"  # the query's robot_id is not the topic's robot (never answered)
BACKEND_ERROR = "backend_error"  # the model could not answer this query


@dataclass(frozen=True)
class ComponentRequest:
    """ComponentQuery.msg: the question (a pipeline.backend.ComponentQuery) and its envelope."""

    query_id: int
    task_id: str
    query: Any  # physai_ros.pipeline.backend.ComponentQuery
    stamp: float = 0.0

    @property
    def robot_id(self) -> str:
        return self.query.robot_id

    @property
    def component(self) -> str:
        return self.query.component


@dataclass(frozen=True)
class ComponentAnswerData:
    """ComponentAnswer.msg as plain data."""

    robot_id: str
    query_id: int
    component: str
    text: str = ""
    error: str = ""  # "" when text is the model's answer; else "<reason>: <detail>"
    tokens: int = 0
    latency_ms: float = 0.0  # the backend's time for the batch this answer was part of
    queue_ms: float = 0.0  # the time the query waited before its batch started
    backend: str = ""
    stamp: float = 0.0

    @property
    def ok(self) -> bool:
        return not self.error

    @property
    def reason(self) -> str:
        """The error's reason ("" for an answer)."""
        return self.error.partition(":")[0]


def refusal(robot_id: str, query_id: int, component: str, reason: str, detail: str, stamp: float = 0.0,
            backend: str = "") -> ComponentAnswerData:
    return ComponentAnswerData(robot_id=robot_id, query_id=int(query_id), component=component,
                               error=f"{reason}: {detail}", backend=backend, stamp=stamp)
