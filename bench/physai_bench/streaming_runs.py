"""bench/streaming.py run in a process of its own, as the streaming entries (streaming_rates,
streaming_fleet) use it: one model per process (a full-depth pi0 takes 13 GB), its stderr relayed
as it comes, its one JSON line (stdout) returned."""
from __future__ import annotations

import json
import subprocess
import sys
import threading
from pathlib import Path

BENCH = Path(__file__).resolve().parents[1]


def run_streaming_bench(args: list[str], timeout_s: float) -> dict:
    """bench/streaming.py in its own process; its one JSON object (stdout)."""
    cmd = [sys.executable, str(BENCH / "streaming.py"), *args, "--json"]
    print("+", " ".join(cmd[1:]), file=sys.stderr, flush=True)
    with subprocess.Popen(cmd, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True) as proc:
        # stdout is one short JSON line at the end; relay stderr as it comes, keeping its last line
        # (the exception that ended a failed run) for the results file.
        timer = threading.Timer(timeout_s, proc.kill)
        timer.start()
        last = ""
        try:
            for line in proc.stderr:
                sys.stderr.write(line)
                last = line.strip() or last
            stdout = proc.stdout.read()
        finally:
            timer.cancel()
        rc = proc.wait()
    if rc != 0:
        raise RuntimeError(f"streaming.py exited {rc}: {last[-300:]}")
    return json.loads(stdout.strip().splitlines()[-1])
