"""The whole fleet from one fleet.yaml: the policy server, and per robot a namespaced group with
sim_robot (simulated robots only), robot_client and trajectory_controller.

  ros2 launch physai_ros fleet.launch.py fleet_file:=/path/fleet.yaml num_robots:=8 duration:=60

Launch arguments: fleet_file (default: config/fleet.yaml in the package's share directory, found
through the ament index: physai_ros.install_paths), num_robots (0: the robots listed; N: the first
N, the last entry cloned as robot_<k> beyond the list), duration (seconds; 0: until Ctrl-C),
diagnostics_aggregator (true: start physai_ros's /diagnostics -> /diagnostics_agg aggregator,
which rqt_robot_monitor reads; false where ROS's C++ diagnostic_aggregator runs instead, with
config/diagnostics_analyzers.yaml).
The process plan is physai_ros.fleet.plan, the same one `physai-fleet` runs; the server is
told how many robots were started (its num_robots parameter). As physai-fleet does, the robots'
nodes start when the server logs that it serves: on a 2-core machine the twelve robot-side
processes of the default fleet, started with it, took 1.8 cores and stretched the server's
~10 s start to 35-40 s.
"""
import os

from launch import LaunchDescription
from launch.actions import DeclareLaunchArgument, GroupAction, OpaqueFunction, RegisterEventHandler, Shutdown, \
    TimerAction
from launch.event_handlers import OnProcessIO
from launch.substitutions import LaunchConfiguration
from launch_ros.actions import Node, PushROSNamespace

from physai_ros.config.fleet import load_fleet
from physai_ros.fleet.plan import aggregator_spec, gateway_specs, robot_specs, server_spec
from physai_ros.install_paths import default_fleet_file
from physai_ros.ros.spin import EXIT_WITH_PARENT_ENV
from physai_ros.serving.startup.preflight import SERVING_LOG_MARK

PACKAGE = "physai_ros"


def _node(spec, name):
    # spec.enclave: fleet.yaml's security.sros2_enclaves (DDS Security where the ROS install has it)
    # Each node in a session of its own, as physai-fleet starts them (`setsid` execs it, same pid:
    # launch still names and signals it): Linux's autogroup scheduler then shares the CPU per node,
    # not per thread of one session. In the launch's one session the robot side held the policy
    # server to 0.45 of 2 cores (physai-fleet: 0.7-0.9), and an idle 60 s launch had 54 SLO holds;
    # with the server alone in its own, 0 idle but all chunked robots stopped beside a busy job.
    # Out of the launch's session a closed terminal's hang-up no longer reaches a node: each
    # stops when the launch process dies instead (ros.spin.stop_when_parent_dies; _setup runs in
    # the launch process, whose pid is the parent's).
    return Node(package=PACKAGE, executable=spec.executable, name=name, exec_name=spec.executable,
                parameters=[dict(spec.params)], output="screen", emulate_tty=True,
                ros_arguments=["--enclave", spec.enclave] if spec.enclave else None, prefix="setsid",
                additional_env={EXIT_WITH_PARENT_ENV: str(os.getpid())})


class _OnceServing:
    """The robots' actions, returned once, for the server's output that completes its serving
    line (rclpy logs to stderr; stdout where RCUTILS_LOGGING_USE_STDOUT says so). Shared by both
    streams' callbacks, so the robots start once; the tail kept covers a line split across reads."""

    MARK = SERVING_LOG_MARK.encode()

    def __init__(self, actions):
        self.actions, self.started, self.tail = actions, False, b""

    def __call__(self, event):
        if self.started:
            return None
        seen = self.tail + event.text
        if self.MARK not in seen:
            self.tail = seen[-len(self.MARK):]
            return None
        self.started = True
        return self.actions


def _setup(context, *args, **kwargs):
    fleet_file = LaunchConfiguration("fleet_file").perform(context)
    num_robots = int(LaunchConfiguration("num_robots").perform(context) or 0)
    duration = float(LaunchConfiguration("duration").perform(context) or 0)
    cfg = load_fleet(fleet_file)  # FleetConfigError names the bad key: fail before starting anything
    if num_robots > 0:
        cfg = cfg.with_num_robots(num_robots)
    server = _node(server_spec(cfg), cfg.server.node_name)
    robots = [GroupAction(actions=[PushROSNamespace(robot.namespace)]
                          + [_node(spec, spec.executable) for spec in robot_specs(cfg, robot)])
              for robot in cfg.ros_robots()] + [_node(spec, spec.executable) for spec in gateway_specs(cfg)]
    start_robots = _OnceServing(robots)
    actions = [server, RegisterEventHandler(OnProcessIO(target_action=server, on_stdout=start_robots,
                                                        on_stderr=start_robots))]
    if LaunchConfiguration("diagnostics_aggregator").perform(context).lower() in ("true", "1", "yes"):
        actions.append(_node(aggregator_spec(), "diagnostics_aggregator"))
    if duration > 0:
        actions.append(TimerAction(period=duration, actions=[Shutdown(reason="duration elapsed")]))
    return actions


def generate_launch_description():
    return LaunchDescription([
        DeclareLaunchArgument("fleet_file", default_value=str(default_fleet_file()),
                              description="fleet description (server, tasks, robots)"),
        DeclareLaunchArgument("num_robots", default_value="0",
                              description="0: the robots listed in the fleet file; N: the first N "
                                          "(cloning the last entry beyond the list)"),
        DeclareLaunchArgument("duration", default_value="0",
                              description="seconds until shutdown; 0 runs until Ctrl-C"),
        DeclareLaunchArgument("diagnostics_aggregator", default_value="true",
                              description="start physai_ros's /diagnostics_agg aggregator (for rqt_robot_monitor); "
                                          "false where ROS's C++ diagnostic_aggregator runs"),
        OpaqueFunction(function=_setup),
    ])
