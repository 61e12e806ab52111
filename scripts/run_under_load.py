"""Runs a command beside a CPU-burning load: `make test-stress` runs the suite this way.

The load is BURNERS_PER_CORE busy processes per core (2 by default: a machine with load average
~3x its cores, as a shared CI host or a developer's laptop building something gets). They run at
the niceness given by --nice: 0 (the default) competes with the tests as another user's job would;
a positive value makes a milder load that leaves the tests most of the CPU. The burners die with
this process (PR_SET_PDEATHSIG), also when it is killed, so nothing outlives the run.

    python scripts/run_under_load.py [--per-core 2] [--nice 0] -- COMMAND...
"""
from __future__ import annotations

import argparse
import ctypes
import os
import signal
import subprocess
import sys
import time

_PR_SET_PDEATHSIG = 1
_BURN = "while True: pass"


def _die_with_parent(nice: int):
    def prepare() -> None:
        libc = ctypes.CDLL(None, use_errno=True)
        libc.prctl(_PR_SET_PDEATHSIG, signal.SIGKILL)
        if nice:
            os.nice(nice)
    return prepare


def start_burners(count: int, nice: int) -> list[subprocess.Popen]:
    return [subprocess.Popen([sys.executable, "-c", _BURN], preexec_fn=_die_with_parent(nice),
                             stdin=subprocess.DEVNULL) for _ in range(count)]


def stop_burners(burners: list[subprocess.Popen]) -> None:
    for p in burners:
        p.kill()
    for p in burners:
        p.wait()


def main(argv: list[str]) -> int:
    if "--" not in argv:
        sys.exit(__doc__)
    split = argv.index("--")
    ap = argparse.ArgumentParser(description="run a command beside a CPU-burning load")
    ap.add_argument("--per-core", type=float, default=2.0, help="busy processes per core (default 2)")
    ap.add_argument("--nice", type=int, default=0, help="niceness of the busy processes (default 0)")
    args = ap.parse_args(argv[:split])
    command = argv[split + 1:]
    if not command:
        sys.exit("run_under_load: no command after --")
    count = max(1, round(args.per_core * (os.cpu_count() or 1)))
    burners = start_burners(count, args.nice)
    print(f"run_under_load: {count} busy processes (nice {args.nice}) beside: {' '.join(command)}", flush=True)
    t0 = time.monotonic()
    try:
        # The command in its own session would escape a Ctrl-C; it shares ours, so one Ctrl-C
        # reaches it and we stop the burners on the way out.
        rc = subprocess.call(command)
    except KeyboardInterrupt:
        rc = 130
    finally:
        stop_burners(burners)
    load = ", ".join(f"{v:.1f}" for v in os.getloadavg())
    print(f"run_under_load: exit {rc} after {time.monotonic() - t0:.0f} s; load average now {load}", flush=True)
    return rc


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
