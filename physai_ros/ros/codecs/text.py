"""physai_ros_interfaces/RobotText <-> protocol.text.RobotTextData, and the AskRobot service's
request/response <-> TextQuery / QueryAnswer."""
from __future__ import annotations

from physai_ros_interfaces.msg import RobotText

from physai_ros.protocol.text import QueryAnswer, RobotTextData, TextQuery
from physai_ros.ros.time_conv import time_from_sec, to_sec


def text_to_msg(t: RobotTextData) -> RobotText:
    msg = RobotText()
    msg.header.stamp = time_from_sec(t.stamp)
    msg.robot_id, msg.task_id = t.robot_id, t.task_id
    msg.round_id, msg.request_id = int(t.round_id), int(t.request_id)
    msg.question, msg.source = t.question, t.source
    msg.tokens = [int(x) for x in t.tokens]
    msg.text, msg.seq = t.text, int(t.seq)
    msg.done, msg.reason, msg.detail = bool(t.done), t.reason, t.detail
    return msg


def text_from_msg(msg: RobotText) -> RobotTextData:
    return RobotTextData(
        robot_id=msg.robot_id, task_id=msg.task_id, round_id=int(msg.round_id), request_id=int(msg.request_id),
        question=msg.question, source=msg.source, tokens=tuple(int(x) for x in msg.tokens), text=msg.text,
        seq=int(msg.seq), done=bool(msg.done), reason=msg.reason, detail=msg.detail, stamp=to_sec(msg.header.stamp))


def query_from_request(req) -> TextQuery:
    return TextQuery(robot_id=str(req.robot_id), question=str(req.question), max_tokens=int(req.max_tokens),
                     requester=str(req.operator_name)[:64])


def answer_to_response(a: QueryAnswer, response):
    response.accepted, response.reason, response.request_id = bool(a.accepted), a.reason, int(a.request_id)
    return response
