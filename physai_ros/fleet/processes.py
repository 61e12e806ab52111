"""Start, watch and stop the fleet's ROS node processes, described as plain data.

A fleet is a list of ProcessSpec (name, module, namespace, parameters; physai_ros.fleet.plan
derives it from fleet.yaml, the launch file reads the same specs); ProcessGroup runs them, and
start_process / stop_processes are the one way to start and stop a child, for tests too.
Children run in their own session so a terminal's Ctrl-C reaches only the fleet, which then
stops them in reverse start order (SIGTERM, then SIGKILL after a grace period).
"""
from __future__ import annotations

import os
import signal
import subprocess
import sys
import time
from dataclasses import dataclass, field
from pathlib import Path


def _param_value(v: object, in_list: bool = False) -> str:
    if isinstance(v, bool):
        return "true" if v else "false"
    if isinstance(v, (list, tuple)):
        return "[" + ",".join(_param_value(x, in_list=True) for x in v) + "]"
    if isinstance(v, str) and _needs_quotes(v, in_list):
        # rcl parses `-p name:=value` as YAML: free text such as a prompt ("note: red first",
        # "yes", "") would arrive as a mapping, a bool or nothing and kill the node at its
        # declare_parameter. A single-quoted YAML scalar is always the string itself.
        return "'" + v.replace("'", "''") + "'"
    return str(v)


def _needs_quotes(text: str, in_list: bool) -> bool:
    """Whether YAML would not read `text` back as that very string (in a flow list, a comma or
    bracket would also split or nest it)."""
    import yaml

    if in_list and any(c in text for c in ",[]{}"):
        return True
    try:
        return yaml.safe_load(text) != text
    except yaml.YAMLError:
        return True


@dataclass(frozen=True)
class ProcessSpec:
    name: str  # unique within the fleet; names the log file
    module: str  # run as `python -m module`
    namespace: str = ""
    params: dict[str, object] = field(default_factory=dict)
    env: dict[str, str] = field(default_factory=dict)
    executable: str = ""  # the node's console script (setup.py), what `ros2 launch` starts
    enclave: str = ""  # SROS2 security enclave (--enclave), when fleet.yaml's security asks for one

    def argv(self, python: str = sys.executable) -> list[str]:
        cmd = [python, "-m", self.module, "--ros-args"]
        if self.namespace:
            cmd += ["-r", f"__ns:=/{self.namespace.lstrip('/')}"]
        if self.enclave:
            cmd += ["--enclave", self.enclave]
        for k, v in self.params.items():
            cmd += ["-p", f"{k}:={_param_value(v)}"]
        return cmd


def log_file(log_dir: str | Path, name: str) -> Path:
    """Where the output of process `name` goes ("/" in a namespaced name becomes "__")."""
    return Path(log_dir) / f"{name.replace('/', '__')}.log"


def start_process(spec: ProcessSpec, log_dir: str | Path | None = None,
                  env: dict[str, str] | None = None) -> subprocess.Popen:
    """Start one child in its own session (a terminal's Ctrl-C reaches only us; we stop the
    children in order, and a kill reaches their own children), output to log_dir/<name>.log."""
    out = subprocess.DEVNULL
    if log_dir is not None:
        Path(log_dir).mkdir(parents=True, exist_ok=True)
        out = open(log_file(log_dir, spec.name), "wb")
    try:
        return subprocess.Popen(spec.argv(), stdout=out, stderr=subprocess.STDOUT,
                                env={**(os.environ if env is None else env), **spec.env, "PYTHONUNBUFFERED": "1"},
                                start_new_session=True)
    finally:
        if out is not subprocess.DEVNULL:
            out.close()  # the child has its own copy


def stop_processes(popens: list[subprocess.Popen], grace_s: float = 5.0) -> None:
    """SIGTERM each (in the order given; the nodes shut down cleanly on it), then SIGKILL the
    session of whatever is still running after grace_s."""
    for p in popens:
        if p.poll() is None:
            try:
                p.send_signal(signal.SIGTERM)
            except ProcessLookupError:
                pass
    deadline = time.monotonic() + grace_s
    for p in popens:
        try:
            p.wait(timeout=max(0.0, deadline - time.monotonic()))
        except subprocess.TimeoutExpired:
            # A child ignoring SIGTERM: kill its whole session (it may have children). Said aloud:
            # a node killed while it held a Fast DDS shared-memory port leaves the port locked
            # for later nodes of its domain (docs/robot_side.md), so a later hang traces to here.
            try:
                os.killpg(p.pid, signal.SIGKILL)
                print(f"physai-fleet: pid {p.pid} ({_command_name(p)}) still running {grace_s:.0f} s after "
                      "SIGTERM: killed; its ROS domain may keep a locked shared-memory port "
                      "(docs/robot_side.md)", file=sys.stderr, flush=True)
            except ProcessLookupError:
                pass
            p.wait(timeout=5.0)


def _command_name(p: subprocess.Popen) -> str:
    args = p.args if isinstance(p.args, (list, tuple)) else [p.args]
    return " ".join(str(a) for a in args[:4])


@dataclass
class RunningProcess:
    spec: ProcessSpec
    popen: subprocess.Popen
    log_path: Path | None


class ProcessGroup:
    def __init__(self, log_dir: str | Path | None = None, env: dict[str, str] | None = None):
        self.log_dir = Path(log_dir) if log_dir else None
        self.env = dict(os.environ if env is None else env)
        self.procs: list[RunningProcess] = []

    def start(self, spec: ProcessSpec) -> RunningProcess:
        if any(p.spec.name == spec.name for p in self.procs):
            raise ValueError(f"duplicate process name {spec.name!r}")
        popen = start_process(spec, self.log_dir, self.env)
        proc = RunningProcess(spec, popen, log_file(self.log_dir, spec.name) if self.log_dir else None)
        self.procs.append(proc)
        return proc

    def start_all(self, specs: list[ProcessSpec]) -> None:
        for s in specs:
            self.start(s)

    def exited(self) -> list[tuple[str, int]]:
        """(name, return code) of every child that has ended."""
        return [(p.spec.name, p.popen.returncode) for p in self.procs if p.popen.poll() is not None]

    def stop(self, grace_s: float = 5.0) -> dict[str, int]:
        """Stop every child (reverse start order); returns their exit codes."""
        stop_processes([p.popen for p in reversed(self.procs)], grace_s)
        return {p.spec.name: p.popen.returncode for p in self.procs}

    def cpu_seconds(self) -> dict[str, float]:
        """User+system CPU seconds each live child has used so far (Linux /proc; {} elsewhere)."""
        out = {}
        tick = os.sysconf("SC_CLK_TCK") if hasattr(os, "sysconf") else 100
        for p in self.procs:
            try:
                fields = Path(f"/proc/{p.popen.pid}/stat").read_text().rsplit(")", 1)[1].split()
                out[p.spec.name] = (int(fields[11]) + int(fields[12])) / tick
            except (OSError, IndexError, ValueError):
                continue
        return out

    def log_path(self, name: str) -> Path | None:
        for p in self.procs:
            if p.spec.name == name:
                return p.log_path
        return None

    def log_tail(self, name: str, lines: int = 20) -> str:
        for p in self.procs:
            if p.spec.name == name and p.log_path and p.log_path.exists():
                return "\n".join(p.log_path.read_text(errors="replace").splitlines()[-lines:])
        return ""

    def __enter__(self) -> "ProcessGroup":
        return self

    def __exit__(self, *exc) -> None:
        self.stop()
