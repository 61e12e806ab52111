"""Start, watch and stop the fleet's ROS node processes, described as plain data.

A fleet is a list of ProcessSpec (name, module, namespace, parameters); other parts of the
project extend it by appending specs (a policy server, robot clients) and reuse ProcessGroup.
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


def _param_value(v: object) -> str:
    if isinstance(v, bool):
        return "true" if v else "false"
    if isinstance(v, (list, tuple)):
        return "[" + ",".join(_param_value(x) for x in v) + "]"
    return str(v)


@dataclass(frozen=True)
class ProcessSpec:
    name: str  # unique within the fleet; names the log file
    module: str  # run as `python -m module`
    namespace: str = ""
    params: dict[str, object] = field(default_factory=dict)
    env: dict[str, str] = field(default_factory=dict)

    def argv(self, python: str = sys.executable) -> list[str]:
        cmd = [python, "-m", self.module, "--ros-args"]
        if self.namespace:
            cmd += ["-r", f"__ns:=/{self.namespace.lstrip('/')}"]
        for k, v in self.params.items():
            cmd += ["-p", f"{k}:={_param_value(v)}"]
        return cmd


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
        log_path = None
        if self.log_dir is not None:
            self.log_dir.mkdir(parents=True, exist_ok=True)
            log_path = self.log_dir / f"{spec.name.replace('/', '_')}.log"
            out = open(log_path, "wb")
        else:
            out = subprocess.DEVNULL
        env = {**self.env, **spec.env, "PYTHONUNBUFFERED": "1"}
        try:
            popen = subprocess.Popen(spec.argv(), stdout=out, stderr=subprocess.STDOUT, env=env,
                                     start_new_session=True)
        finally:
            if out is not subprocess.DEVNULL:
                out.close()
        proc = RunningProcess(spec, popen, log_path)
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
        for p in reversed(self.procs):
            if p.popen.poll() is None:
                try:
                    p.popen.send_signal(signal.SIGTERM)
                except ProcessLookupError:
                    pass
        deadline = time.monotonic() + grace_s
        for p in self.procs:
            try:
                p.popen.wait(timeout=max(0.0, deadline - time.monotonic()))
            except subprocess.TimeoutExpired:
                # A child ignoring SIGTERM: kill its whole session (it may have children).
                try:
                    os.killpg(p.popen.pid, signal.SIGKILL)
                except ProcessLookupError:
                    pass
                p.popen.wait(timeout=5.0)
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
