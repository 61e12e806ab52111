"""Each benchmark's result as one JSON file whose header says how to read it: the command as typed,
the commit (and whether the tree had uncommitted changes), the date, the machine (CPU model, cores,
memory, GPU), the load average at the start and the end (a busy machine slows everything measured
in wall time), the regime (model and sizes, hardware, what is measured and what is simulated) and
whether it was the --quick size. bench/suite.py runs the entry points; physai_bench.tables turns the
files into the README's tables, so no figure there lacks its command and conditions.
"""
from __future__ import annotations

import json
import os
import platform
import shlex
import subprocess
import sys
import time
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any, Mapping

REPO = Path(__file__).resolve().parents[2]
HEADER_KEYS = ("command", "commit", "tree_clean", "date", "machine", "load_average", "regime", "quick", "wall_s")


def _git(*args: str) -> str:
    try:
        out = subprocess.run(["git", *args], cwd=REPO, capture_output=True, text=True, timeout=30)
    except (OSError, subprocess.TimeoutExpired):
        return ""
    return out.stdout.strip() if out.returncode == 0 else ""


def machine() -> str:
    """'AMD EPYC 7B13, 2 cores, 24 GB' (plus, when torch is loaded, its GPU and CPU kernel set)."""
    model = platform.processor() or platform.machine()
    try:
        for line in Path("/proc/cpuinfo").read_text().splitlines():
            if line.startswith("model name"):
                model = line.split(":", 1)[1].strip()
                break
    except OSError:
        pass
    memory = ""
    try:
        kb = int(Path("/proc/meminfo").read_text().split("MemTotal:")[1].split()[0])
        memory = f", {kb / 2**20:.0f} GB"
    except (OSError, IndexError, ValueError):
        pass
    extra = ""
    if "torch" in sys.modules:  # never import torch only to say there is no GPU
        torch = sys.modules["torch"]
        if torch.cuda.is_available():
            extra = f", {torch.cuda.get_device_name(0)}"
        # The CPU kernels torch picked (AVX2, AVX512, ...): their rounding differs, and a lockstep
        # rollout carries any difference forward, so an exact repeat needs the same set.
        extra += f", torch CPU kernels {torch.backends.cpu.get_cpu_capability()}"
    return f"{model}, {os.cpu_count()} cores{memory}{extra}"


def _load() -> list[float]:
    return [round(x, 2) for x in os.getloadavg()]


@dataclass
class Run:
    """One benchmark run, from its start (start_run) to its file (write_result)."""
    command: str
    regime: str
    quick: bool
    commit: str = field(default_factory=lambda: _git("rev-parse", "--short", "HEAD"))
    # Results files are outputs, not code: a suite run rewriting them leaves the tree clean.
    tree_clean: bool = field(default_factory=lambda: _git("status", "--porcelain", "--untracked-files=no", "--",
                                                          ".", ":(exclude)bench/results") == "")
    date: str = field(default_factory=lambda: time.strftime("%Y-%m-%d %H:%M UTC", time.gmtime()))
    load_start: list = field(default_factory=_load)
    started: float = field(default_factory=time.monotonic)

    def header(self) -> dict:
        return {"command": self.command, "commit": self.commit, "tree_clean": self.tree_clean, "date": self.date,
                "machine": machine(), "load_average": {"start": self.load_start, "end": _load()},
                "regime": self.regime, "quick": self.quick, "wall_s": round(time.monotonic() - self.started, 1)}


def from_repo(arg: str) -> str:
    """A path inside the repository as seen from its root (other arguments as they are)."""
    if not arg.startswith("/"):
        return arg
    try:
        return str(Path(arg).resolve().relative_to(REPO))
    except ValueError:
        return arg


def command_line(script: str | Path, args: list[str] | None = None) -> str:
    """The command as a user types it from the repository's root (args: sys.argv[1:] when None)."""
    return shlex.join(["python", from_repo(str(script)), *map(from_repo, sys.argv[1:] if args is None else args)])


def start_run(regime: str, script: str | Path, args: list[str] | None = None, quick: bool = False) -> Run:
    """script: the entry point's __file__; args: what its main() parsed (None: the command line)."""
    return Run(command=command_line(script, args), regime=regime, quick=quick)


def write_result(path: str | Path | None, run: Run, results: Mapping[str, Any]) -> dict:
    """The header and the results as one document, written to `path` (if any) and returned."""
    clash = set(HEADER_KEYS) & set(results)
    if clash:
        raise ValueError(f"results may not use the header's keys: {sorted(clash)}")
    doc = {**run.header(), **results}
    if path:
        path = Path(path)
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text(json.dumps(doc, indent=1, default=_plain) + "\n")
    return doc


def _plain(x: Any) -> Any:
    if hasattr(x, "item"):  # numpy scalars
        return x.item()
    if hasattr(x, "tolist"):
        return x.tolist()
    if hasattr(x, "__dataclass_fields__"):
        return asdict(x)
    raise TypeError(f"not JSON: {type(x).__name__}")


def read_result(path: str | Path) -> dict:
    """A results file; ValueError naming the file when its header is incomplete."""
    doc = json.loads(Path(path).read_text())
    missing = [k for k in HEADER_KEYS if k not in doc]
    if missing:
        raise ValueError(f"{path}: the results header lacks {missing}")
    return doc
