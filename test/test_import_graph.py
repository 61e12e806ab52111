"""The package's import graph, read from the source with `ast` (nothing is imported), so a circle
or an upward import fails here, naming the import (file:line), instead of surfacing later as an
ImportError in one process start order or as a node dragged into a test that should not need ROS.

Checked, over every module under physai_ros/ (and kernels/, installed as physai_ros.kernels):
- no circle between modules through module-level imports (what runs at import time), nor through
  any import at all (function-level and `if TYPE_CHECKING:` ones included);
- no circle between packages (physai_ros.X -> physai_ros.Y -> physai_ros.X) through any import,
  function-level ones included: a deferred import hides a circle from Python, not from a reader;
- LAYERS: a package imports only packages of its own layer or below;
- rclpy is imported at module level only by the ROS glue (ros/), the nodes and the launcher, so
  everything else imports and tests without it.
- the robot side (client/, control/) imports nothing of the server (serving/, workers/, engine/);
- nodes import no model code (engine/): they adapt the serving and worker logic;
- nothing imports physai_lab (lab/), which a fleet's install does not carry.
"""
from __future__ import annotations

import ast
from collections import defaultdict
from dataclasses import dataclass
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
SOURCES = {"physai_ros": REPO / "physai_ros", "physai_ros.kernels": REPO / "kernels"}

# Bottom to top; a package may import its own layer and the layers below it. ros/ is ROS glue
# (message codecs, QoS, spin) over the logic below, nodes/ adapts that logic to ROS nodes, and
# fleet/ (the launcher) starts nodes and hosts the fleet monitor node. A new package must be
# placed here on purpose (test_every_package_has_a_layer).
LAYERS: list[tuple[str, tuple[str, ...]]] = [
    ("foundation", ("", "errors", "install_paths", "config_fields", "protocol", "kernels")),  # "": physai_ros/__init__
    ("logic", ("control", "scheduler", "engine", "security")),
    ("simulation, monitoring", ("sim", "monitoring")),
    # Task pipelines: pure logic, below the fleet.yaml schema, which parses their keys.
    ("pipeline", ("pipeline",)),
    ("fleet configuration", ("config",)),
    # The robot side (client/) and the server side (workers/, serving/) share a layer but not code:
    # test_robot_side_imports_nothing_of_the_server keeps them apart.
    ("robot side, server side", ("client", "workers", "serving")),
    ("ros glue", ("ros",)),
    ("nodes", ("nodes",)),
    ("launcher", ("fleet",)),
]
ROS_PACKAGES = ("ros", "nodes", "fleet")  # may import rclpy at module level


@dataclass(frozen=True)
class Import:
    source: str  # importing module, e.g. physai_ros.serving.serving_core
    target: str  # imported module (the longest module name that exists), or the raw name outside the tree
    path: Path
    line: int
    module_level: bool  # runs when the importing module is imported

    def where(self) -> str:
        return f"{self.path.relative_to(REPO)}:{self.line}"


def _modules() -> dict[str, tuple[Path, bool]]:
    """module name -> (file, is a package __init__)."""
    out = {}
    for pkg, root in SOURCES.items():
        for path in sorted(root.rglob("*.py")):
            parts = [pkg, *path.relative_to(root).with_suffix("").parts]
            is_pkg = parts[-1] == "__init__"
            out[".".join(parts[:-1] if is_pkg else parts)] = (path, is_pkg)
    return out


MODULES = _modules()


def _resolve(name: str) -> str:
    """The module that importing `name` names: itself, or its longest prefix in the tree."""
    probe = name
    while probe and probe not in MODULES:
        probe = probe.rpartition(".")[0]
    return probe or name


def _is_type_checking(test: ast.expr) -> bool:
    return (isinstance(test, ast.Name) and test.id == "TYPE_CHECKING") or \
        (isinstance(test, ast.Attribute) and test.attr == "TYPE_CHECKING")


def _imports_of(module: str, path: Path, is_pkg: bool) -> list[Import]:
    package = module if is_pkg else module.rpartition(".")[0]
    found: list[Import] = []

    def add(name: str, node: ast.stmt, module_level: bool) -> None:
        found.append(Import(module, _resolve(name), path, node.lineno, module_level))

    def visit(node: ast.AST, module_level: bool) -> None:
        for child in ast.iter_child_nodes(node):
            if isinstance(child, ast.Import):
                for alias in child.names:
                    add(alias.name, child, module_level)
            elif isinstance(child, ast.ImportFrom):
                if child.level:
                    base = package.split(".")[: len(package.split(".")) - (child.level - 1)]
                    target = ".".join(base + ([child.module] if child.module else []))
                else:
                    target = child.module or ""
                for alias in child.names:
                    sub = f"{target}.{alias.name}"  # `from pkg import submodule`
                    add(sub if sub in MODULES else target, child, module_level)
            elif isinstance(child, ast.If) and _is_type_checking(child.test):
                for stmt in child.body:
                    visit(ast.Module(body=[stmt], type_ignores=[]), False)
                for stmt in child.orelse:
                    visit(ast.Module(body=[stmt], type_ignores=[]), module_level)
            else:
                deferred = isinstance(child, (ast.FunctionDef, ast.AsyncFunctionDef, ast.Lambda))
                visit(child, module_level and not deferred)

    visit(ast.parse(path.read_text(), str(path)), True)
    return found


IMPORTS = [imp for mod, (path, is_pkg) in MODULES.items() for imp in _imports_of(mod, path, is_pkg)]
INTERNAL = [imp for imp in IMPORTS if imp.target in MODULES and imp.target != imp.source]


def package_of(module: str) -> str:
    """physai_ros.serving.serving_core -> "serving"; physai_ros.errors -> "errors"; physai_ros -> ""."""
    parts = module.split(".")
    return parts[1] if len(parts) > 1 else ""


def _cycles(edges: dict[str, set[str]]) -> list[list[str]]:
    """Strongly connected components with more than one node (Tarjan), each as a list of nodes."""
    index: dict[str, int] = {}
    low: dict[str, int] = {}
    stack: list[str] = []
    on_stack: set[str] = set()
    out: list[list[str]] = []

    def connect(v: str) -> None:
        index[v] = low[v] = len(index)
        stack.append(v)
        on_stack.add(v)
        for w in sorted(edges.get(v, ())):
            if w not in index:
                connect(w)
                low[v] = min(low[v], low[w])
            elif w in on_stack:
                low[v] = min(low[v], index[w])
        if low[v] == index[v]:
            comp = []
            while True:
                w = stack.pop()
                on_stack.discard(w)
                comp.append(w)
                if w == v:
                    break
            if len(comp) > 1:
                out.append(sorted(comp))

    for v in sorted(edges):
        if v not in index:
            connect(v)
    return out


def _describe_cycles(imports: list[Import], node_of) -> list[str]:
    edges: dict[str, set[str]] = defaultdict(set)
    by_edge: dict[tuple[str, str], list[Import]] = defaultdict(list)
    for imp in imports:
        a, b = node_of(imp.source), node_of(imp.target)
        if a != b:
            edges[a].add(b)
            by_edge[a, b].append(imp)
    lines = []
    for comp in _cycles(edges):
        members = set(comp)
        lines.append("circle between " + ", ".join(comp) + ":")
        for (a, b), imps in sorted(by_edge.items()):
            if a in members and b in members:
                lines += dict.fromkeys(f"  {imp.where()} {imp.source} imports {imp.target}" for imp in imps)
    return lines


def test_no_module_level_import_circle():
    problems = _describe_cycles([i for i in INTERNAL if i.module_level], lambda m: m)
    assert not problems, "\n".join(problems)


def test_no_module_circle_even_through_deferred_imports():
    """A function-level or type-only import that closes a circle hides it from Python, not from a
    reader: modules form no circle through any import."""
    problems = _describe_cycles(INTERNAL, lambda m: m)
    assert not problems, "\n".join(problems)


def test_no_package_circle():
    problems = _describe_cycles(INTERNAL, package_of)
    assert not problems, "\n".join(problems)


LAYER_OF = {pkg: k for k, (_, pkgs) in enumerate(LAYERS) for pkg in pkgs}


def test_every_package_has_a_layer():
    missing = sorted({package_of(m) for m in MODULES} - set(LAYER_OF))
    assert not missing, f"packages without a layer in LAYERS: {missing}"


def test_no_import_from_a_higher_layer():
    problems = []
    for imp in INTERNAL:
        src, dst = package_of(imp.source), package_of(imp.target)
        if src in LAYER_OF and dst in LAYER_OF and LAYER_OF[dst] > LAYER_OF[src]:
            problems.append(f"{imp.where()} {imp.source} imports {imp.target}: "
                            f"{src or 'physai_ros'} ({LAYERS[LAYER_OF[src]][0]}) -> "
                            f"{dst} ({LAYERS[LAYER_OF[dst]][0]}), a higher layer")
    assert not problems, "upward imports:\n" + "\n".join(dict.fromkeys(problems))


def test_rclpy_only_in_ros_glue_nodes_and_launcher():
    problems = [f"{imp.where()} {imp.source} imports {imp.target} at module level"
                for imp in IMPORTS
                if imp.module_level and (imp.target == "rclpy" or imp.target.startswith("rclpy."))
                and package_of(imp.source) not in ROS_PACKAGES]
    assert not problems, ("rclpy at module level outside " + ", ".join(f"physai_ros/{p}/" for p in ROS_PACKAGES)
                          + ":\n" + "\n".join(dict.fromkeys(problems)))


SERVER_SIDE = ("serving", "workers", "engine")


def test_robot_side_imports_nothing_of_the_server():
    """A robot's processes (client logic, controller, sim) load no server code: no torch, no model,
    nothing that a change on the server side could break on the robot."""
    problems = [f"{imp.where()} {imp.source} imports {imp.target}"
                for imp in INTERNAL
                if package_of(imp.source) in ("client", "control") and package_of(imp.target) in SERVER_SIDE]
    assert not problems, "the robot side imports the server's code:\n" + "\n".join(dict.fromkeys(problems))


def test_nodes_import_no_model_code():
    """Nodes adapt logic to ROS; the models (engine/) are reached through the serving and worker
    logic they build, never from a node module itself."""
    problems = [f"{imp.where()} {imp.source} imports {imp.target}"
                for imp in INTERNAL if package_of(imp.source) == "nodes" and package_of(imp.target) == "engine"]
    assert not problems, "nodes importing model code:\n" + "\n".join(dict.fromkeys(problems))


def test_the_package_imports_nothing_of_the_lab():
    """physai_lab (lab/: training, evaluation, simulators) is not installed with a fleet: the
    package never imports it, not even lazily."""
    problems = [f"{imp.where()} {imp.source} imports {imp.target}"
                for imp in IMPORTS if imp.target == "physai_lab" or imp.target.startswith("physai_lab.")]
    assert not problems, "physai_ros imports physai_lab:\n" + "\n".join(dict.fromkeys(problems))


def test_the_graph_sees_the_tree():
    """The checks above are only as good as the parse: known imports of each kind are found."""
    def has(source: str, target: str, module_level: bool) -> bool:
        return any(i.source == source and i.target == target and i.module_level == module_level for i in IMPORTS)

    assert len(MODULES) > 100 and "physai_ros.kernels" in MODULES
    assert has("physai_ros.fleet.cli", "physai_ros.fleet.processes", True)  # absolute, module level
    assert has("physai_ros.fleet.cli", "physai_ros.nodes.fleet_monitor", False)  # inside main()
    assert has("physai_ros.ros.spin", "rclpy.node", False)  # under `if TYPE_CHECKING:`
