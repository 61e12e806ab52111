"""launch/fleet.launch.py evaluated with the real `launch` and `launch_ros` (a ROS distribution's,
or the tools test/ros2_tools.py finds), starting nothing: the declared arguments' defaults and,
for given arguments, what it would start as plain data. Used in-process by
test/serving/test_fleet_launch.py and, as a script, by test/packaging (inside an install's
environment: `python launch_description.py LAUNCH_FILE` prints the declared defaults, the
server's parameters and the robot groups as JSON).
"""
from __future__ import annotations

import importlib.util
import json
import sys
from dataclasses import dataclass, field
from pathlib import Path


class LaunchToolsMissing(ImportError):
    """No real launch/launch_ros on this machine (tests stop with ros2_tools.tools_missing; the script exits 77)."""


def use_real_launch() -> None:
    """Make the real launch packages importable: already (a sourced distribution), or from the
    tools folder test/ros2_tools.py finds (its site-packages first on sys.path)."""
    import importlib.util as util

    from ros2_tools import site_packages, tools_prefix

    if util.find_spec("launch_ros") is not None:
        return
    prefix = tools_prefix()
    if prefix is not None and (site_packages(prefix) / "launch_ros").is_dir():
        sys.path.insert(0, str(site_packages(prefix)))
        return
    raise LaunchToolsMissing("the real launch and launch_ros are needed: source a ROS 2 distribution, "
                             "or set PHYSAI_ROS2_TOOLS to a folder laid out as ../shared/ros2_tools")


@dataclass
class LaunchedNode:
    namespace: str
    package: str
    executable: str
    name: str
    parameters: dict
    ros_arguments: list = field(default_factory=list)
    after_serving: bool = False  # started by the server's serving line, not with the launch
    prefix: str = ""  # the launch-prefix the node runs under ("setsid" for the server)


@dataclass
class Evaluated:
    declared: dict  # argument -> default
    nodes: list  # [LaunchedNode]
    shutdown_after_s: list  # periods of the TimerActions that shut the launch down

    def node(self, namespace: str, executable: str) -> LaunchedNode:
        return next(n for n in self.nodes if (n.namespace, n.executable) == (namespace, executable))

    def groups(self) -> dict:
        """namespace -> {executable: LaunchedNode} of the namespaced nodes."""
        out: dict = {}
        for n in self.nodes:
            if n.namespace:
                out.setdefault(n.namespace, {})[n.executable] = n
        return out


def load_launch_file(path: Path):
    use_real_launch()
    spec = importlib.util.spec_from_file_location("fleet_launch_under_test", path)
    mod = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(mod)
    return mod


def evaluate(mod, **args) -> Evaluated:
    """What launching `mod` with `args` (name=value strings) would start."""
    from launch import LaunchContext
    from launch.actions import DeclareLaunchArgument, GroupAction, OpaqueFunction, RegisterEventHandler, Shutdown, \
        TimerAction
    from launch.utilities import perform_substitutions
    from launch_ros.actions import Node, PushROSNamespace
    from launch_ros.utilities import evaluate_parameters

    ctx = LaunchContext()
    ld = mod.generate_launch_description()
    declared = {}
    for e in ld.entities:
        if isinstance(e, DeclareLaunchArgument):
            declared[e.name] = perform_substitutions(ctx, e.default_value)
    ctx.launch_configurations.update({**declared, **args})
    nodes, timers = [], []

    def text(value) -> str:  # a plain string, or substitutions to perform
        return value if isinstance(value, str) else perform_substitutions(ctx, value)

    def node(n, namespace: str, after_serving: bool) -> LaunchedNode:
        params = {}
        for p in evaluate_parameters(ctx, n._Node__parameters):  # the dicts Node was given
            params.update(p)
        ros_args = [text(a) for a in (n._Node__ros_arguments or [])]
        prefix = text(n.process_description.prefix)
        return LaunchedNode(namespace, text(n.node_package), text(n.node_executable), text(n._Node__node_name),
                            params, ros_args, after_serving, prefix)

    def serving_line_answer(handler) -> list:
        """What an event handler starts when the server logs its serving line (and not before)."""
        from launch.events.process import ProcessIO

        from physai_ros.serving.startup.preflight import SERVING_LOG_MARK

        def line(text: bytes):
            return ProcessIO(text=text, fd=2, action=None, name="policy_server", cmd=[], cwd=None, env=None, pid=0)

        assert handler.handle(line(b"[INFO] startup: loading\n"), ctx) is None, "started before the server served"
        return list(handler.handle(line(f"[INFO] {SERVING_LOG_MARK}sim_pi0 with 1 engine\n".encode()), ctx) or [])

    def visit(actions, after_serving: bool) -> None:
        for action in actions:
            if isinstance(action, Node):
                nodes.append(node(action, "", after_serving))
            elif isinstance(action, GroupAction):
                subs = action.get_sub_entities()
                pushed = [x for x in subs if isinstance(x, PushROSNamespace)]
                assert len(pushed) == 1, "one namespace per robot group"
                ns = text(pushed[0].namespace)
                nodes.extend(node(x, ns, after_serving) for x in subs if isinstance(x, Node))
            elif isinstance(action, RegisterEventHandler):
                visit(serving_line_answer(action.event_handler), True)
            elif isinstance(action, TimerAction):
                assert any(isinstance(a, Shutdown) for a in action.actions), "a timer that is not the duration"
                period = action.period  # a number, or substitutions
                timers.append(float(period if isinstance(period, (int, float)) else text(period)))

    for opaque in (e for e in ld.entities if isinstance(e, OpaqueFunction)):
        visit(opaque.execute(ctx) or [], False)
    return Evaluated(declared, nodes, timers)


def main(argv: list[str]) -> int:
    try:
        mod = load_launch_file(Path(argv[0]))
    except LaunchToolsMissing as e:
        print(e, file=sys.stderr)
        return 77
    ev = evaluate(mod)
    server = next(n for n in ev.nodes if n.name == "policy_server")
    print(json.dumps({"declared": ev.declared, "server": server.parameters, "groups": sorted(ev.groups())}))
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
