"""Recording stand-ins for `launch` and `launch_ros` (the real packages are not installable from
PyPI or Debian here), to load launch/fleet.launch.py and assert on the nodes, namespaces and
parameters it declares. Used in-process by test/serving/test_fleet_launch.py and, as a script,
by test/packaging (run inside an install's environment: `python launch_stand_ins.py LAUNCH_FILE`
prints the declared defaults and the server's parameters as JSON).
"""
from __future__ import annotations

import contextlib
import importlib.util
import json
import sys
import types
from pathlib import Path


class Action:
    def __init__(self, *args, **kwargs):
        self.args, self.kwargs = args, kwargs


def stand_in_modules() -> dict[str, types.ModuleType]:
    launch = types.ModuleType("launch")
    actions = types.ModuleType("launch.actions")
    subs = types.ModuleType("launch.substitutions")
    launch_ros = types.ModuleType("launch_ros")
    ros_actions = types.ModuleType("launch_ros.actions")

    class LaunchDescription(Action):
        pass

    class LaunchConfiguration:
        def __init__(self, name):
            self.name = name

        def perform(self, context):
            return context.launch_configurations[self.name]

    for mod, names in ((actions, ["DeclareLaunchArgument", "GroupAction", "OpaqueFunction", "Shutdown",
                                  "TimerAction"]), (ros_actions, ["Node", "PushROSNamespace"])):
        for n in names:
            setattr(mod, n, type(n, (Action,), {}))
    launch.LaunchDescription = LaunchDescription
    subs.LaunchConfiguration = LaunchConfiguration
    launch.actions, launch.substitutions, launch_ros.actions = actions, subs, ros_actions
    return {"launch": launch, "launch.actions": actions, "launch.substitutions": subs,
            "launch_ros": launch_ros, "launch_ros.actions": ros_actions}


@contextlib.contextmanager
def stand_ins():
    saved = {name: sys.modules.get(name) for name in stand_in_modules()}
    sys.modules.update(stand_in_modules())
    try:
        yield
    finally:
        for name, mod in saved.items():
            if mod is None:
                sys.modules.pop(name, None)
            else:
                sys.modules[name] = mod


def load_launch_file(path: Path) -> types.ModuleType:
    """The launch file as a module, its `launch` imports bound to the stand-ins."""
    with stand_ins():
        spec = importlib.util.spec_from_file_location("fleet_launch_under_test", path)
        mod = importlib.util.module_from_spec(spec)
        spec.loader.exec_module(mod)
    return mod


def build(mod, **args):
    """(declared argument defaults, the actions the OpaqueFunction returns for these arguments)."""
    ld = mod.generate_launch_description()
    entities = ld.args[0]
    declared = {e.args[0]: e.kwargs["default_value"] for e in entities
                if type(e).__name__ == "DeclareLaunchArgument"}
    [opaque] = [e for e in entities if type(e).__name__ == "OpaqueFunction"]
    ctx = types.SimpleNamespace(launch_configurations={**declared, **args})
    return declared, opaque.kwargs["function"](ctx)


def groups(actions):
    """namespace -> {executable: Node kwargs} of every GroupAction (namespace pushed first)."""
    out = {}
    for a in actions:
        if type(a).__name__ == "GroupAction":
            ns = [x for x in a.kwargs["actions"] if type(x).__name__ == "PushROSNamespace"]
            nodes = [x for x in a.kwargs["actions"] if type(x).__name__ == "Node"]
            assert len(ns) == 1 and a.kwargs["actions"][0] is ns[0], "namespace pushed first"
            out[ns[0].args[0]] = {n.kwargs["executable"]: n.kwargs for n in nodes}
    return out


def main(argv: list[str]) -> int:
    declared, actions = build(load_launch_file(Path(argv[0])))
    [server] = [a for a in actions if type(a).__name__ == "Node" and a.kwargs["name"] == "policy_server"]
    print(json.dumps({"declared": declared, "server": server.kwargs["parameters"][0],
                      "groups": sorted(groups(actions))}))
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
