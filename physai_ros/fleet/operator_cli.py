"""physai-fleet operator: an operator's commands to a running fleet, signed with an operator
identity of the fleet's keystore (physai_ros.security.operator_commands).

    physai-fleet operator resume ROBOT [--note TEXT]         leave an SLO escalation's stop
    physai-fleet operator acknowledge ROBOT [--note TEXT]    clear a latched pipeline escalation
    physai-fleet operator ask ROBOT QUESTION [--max-tokens N] [--no-wait]

--fleet FILE (default: the embedded config/fleet.yaml) names the fleet, --as NAME the operator
identity (default "operator"; add one with `physai-fleet keys add-operator DIR NAME`; the `auto`
keystore of a one-host fleet makes it on first use). Exit status: 0 accepted (for ask: answered),
1 refused (the robot's or server's reason is printed), 2 an error here (no keystore or key, the
service not found within --timeout).
"""
from __future__ import annotations

import argparse
import sys
import time

from physai_ros.security.operator_commands import DEFAULT_OPERATOR

EXIT_ACCEPTED, EXIT_REFUSED, EXIT_ERROR = 0, 1, 2


def parse_args(argv):
    ap = argparse.ArgumentParser(prog="physai-fleet operator", description=__doc__.split("\n\n")[0])
    common = argparse.ArgumentParser(add_help=False)
    common.add_argument("robot", help="the robot's id in fleet.yaml")
    common.add_argument("--fleet", default=None, help="fleet.yaml (default: the embedded config/fleet.yaml)")
    common.add_argument("--as", dest="operator", default=DEFAULT_OPERATOR, help="the operator identity's name")
    common.add_argument("--keystore", default=None, help="overrides fleet.yaml's security.keystore")
    common.add_argument("--timeout", type=float, default=30.0, help="seconds to find the service and get an answer")
    sub = ap.add_subparsers(dest="command", required=True)
    for name, what in (("resume", "leave the STOPPED state of an SLO escalation"),
                       ("acknowledge", "clear a latched pipeline escalation")):
        p = sub.add_parser(name, parents=[common], help=what)
        p.add_argument("--note", default="", help="why (logged by the robot client with your name)")
    p = sub.add_parser("ask", parents=[common], help="a question for the robot's next frame (language stream)")
    p.add_argument("question")
    p.add_argument("--max-tokens", type=int, default=0, help="the answer's token budget (0: the task's)")
    p.add_argument("--no-wait", action="store_true", help="return once accepted, without waiting for the answer")
    return ap.parse_args(argv)


def _signer(fleet, args):
    """The operator's signer, or None for an insecure fleet."""
    import dataclasses

    from physai_ros.security.config import open_keystore
    from physai_ros.security.keystore import Identity
    from physai_ros.security.operator_commands import OperatorSigner
    from physai_ros.config.fleet import fleet_dir

    sec = fleet.security
    if sec.insecure:
        print("physai-fleet operator: the fleet runs insecure (security.insecure): the command goes unsigned",
              file=sys.stderr)
        return None
    if args.keystore:
        sec = dataclasses.replace(sec, keystore=args.keystore)
    ident = Identity("operator", args.operator)
    return OperatorSigner(open_keystore(sec, fleet_dir(fleet), [ident]), ident.name)


def _call(node, executor, client, request, deadline: float):
    import rclpy

    while not client.wait_for_service(timeout_sec=0.2):
        if time.monotonic() > deadline:
            return None
    fut = client.call_async(request)
    rclpy.spin_until_future_complete(node, fut, executor, timeout_sec=max(0.1, deadline - time.monotonic()))
    return fut.result() if fut.done() else None


def run(args, fleet, robot) -> int:
    import rclpy
    from rclpy.context import Context
    from rclpy.executors import SingleThreadedExecutor
    from rclpy.signals import SignalHandlerOptions

    from physai_ros.protocol.topics import OPERATOR_COMMAND_SERVICE, robot_topic
    from physai_ros.ros.message_digest import digest

    signer = _signer(fleet, args)
    ctx = Context()
    rclpy.init(context=ctx, signal_handler_options=SignalHandlerOptions.NO)
    try:
        node = rclpy.create_node(f"physai_operator_{args.operator}", context=ctx)
        executor = SingleThreadedExecutor(context=ctx)
        executor.add_node(node)
        deadline = time.monotonic() + args.timeout
        if args.command == "ask":
            return _ask(node, executor, robot, args, signer, deadline)
        from physai_ros_interfaces.srv import OperatorCommand

        service = robot_topic(robot.namespace, OPERATOR_COMMAND_SERVICE)
        client = node.create_client(OperatorCommand, service)
        req = OperatorCommand.Request(robot_id=robot.id, command=args.command, note=args.note,
                                      operator_name=args.operator)
        if signer is not None:
            req.auth = signer.sign(args.command, digest(req))
        resp = _call(node, executor, client, req, deadline)
        if resp is None:
            print(f"physai-fleet operator: no answer from {service} within {args.timeout:g} s "
                  "(is the robot client running, in this ROS domain?)", file=sys.stderr)
            return EXIT_ERROR
        if not resp.accepted:
            print(f"{robot.id}: {args.command} refused: {resp.reason}")
            return EXIT_REFUSED
        print(f"{robot.id}: {args.command} accepted" + (f", cleared: {resp.cleared}" if resp.cleared else ""))
        return EXIT_ACCEPTED
    finally:
        rclpy.try_shutdown(context=ctx)


def _ask(node, executor, robot, args, signer, deadline: float) -> int:
    from physai_ros_interfaces.msg import RobotText
    from physai_ros_interfaces.srv import AskRobot

    from physai_ros.protocol.text import ASK_SERVICE, TEXT_TOPIC
    from physai_ros.protocol.topics import robot_topic
    from physai_ros.ros.message_digest import digest
    from physai_ros.ros.qos import reliable_qos

    texts: list = []
    node.create_subscription(RobotText, robot_topic(robot.namespace, TEXT_TOPIC), texts.append, reliable_qos(depth=50))
    client = node.create_client(AskRobot, ASK_SERVICE)
    req = AskRobot.Request(robot_id=robot.id, question=args.question, max_tokens=args.max_tokens,
                           operator_name=args.operator)
    if signer is not None:
        req.auth = signer.sign("ask", digest(req))
    resp = _call(node, executor, client, req, deadline)
    if resp is None:
        print(f"physai-fleet operator: no answer from {ASK_SERVICE} within {args.timeout:g} s", file=sys.stderr)
        return EXIT_ERROR
    if not resp.accepted:
        print(f"{robot.id}: question refused: {resp.reason}")
        return EXIT_REFUSED
    print(f"{robot.id}: question accepted (request {resp.request_id})")
    if args.no_wait:
        return EXIT_ACCEPTED
    while time.monotonic() < deadline:
        executor.spin_once(timeout_sec=0.1)
        done = [t for t in texts if t.request_id == resp.request_id and t.done]
        if done:
            print(f"{robot.id}: {done[-1].text}" + (f" ({done[-1].reason})" if done[-1].reason else ""))
            return EXIT_ACCEPTED
    print(f"physai-fleet operator: no answer text within {args.timeout:g} s (request {resp.request_id})",
          file=sys.stderr)
    return EXIT_ERROR


def main(argv=None) -> int:
    from physai_ros.errors import UserInputError

    from physai_ros.config.fleet import load_fleet

    args = parse_args(argv)
    try:
        fleet = load_fleet(args.fleet)
        try:
            robot = fleet.resolve_robot(args.robot)
        except KeyError as e:  # a robot id the fleet does not have
            print(f"physai-fleet operator: {e.args[0] if e.args else e}", file=sys.stderr)
            return EXIT_ERROR
        return run(args, fleet, robot)
    except UserInputError as e:  # a keystore or key missing, a typo in fleet.yaml
        print(f"physai-fleet operator: {e}", file=sys.stderr)
        return EXIT_ERROR
