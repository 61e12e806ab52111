"""`make test`: the whole suite, isolated from other ROS 2 graphs on this host.

Every run gets its own ROS_DOMAIN_ID and keeps discovery on localhost, so parallel runs (or CI
next to a developer's session) never cross-talk and no discovery packet leaves the machine.
TRITON_INTERPRET=1 makes the Triton kernels run on CPU tensors through the interpreter.
"""
from __future__ import annotations

import os
import random
import sys
import time

import pytest


def main(argv: list[str]) -> int:
    os.environ.setdefault("ROS_AUTOMATIC_DISCOVERY_RANGE", "LOCALHOST")
    os.environ.setdefault("ROS_DOMAIN_ID", str(random.Random(os.getpid() ^ time.time_ns()).randint(1, 100)))
    os.environ.setdefault("TRITON_INTERPRET", "1")
    os.environ.setdefault("PYTHONUNBUFFERED", "1")
    print(f"run_tests: ROS_DOMAIN_ID={os.environ['ROS_DOMAIN_ID']} "
          f"ROS_AUTOMATIC_DISCOVERY_RANGE={os.environ['ROS_AUTOMATIC_DISCOVERY_RANGE']} "
          f"TRITON_INTERPRET={os.environ['TRITON_INTERPRET']}", flush=True)
    # pytest.ini's testpaths (test/) when no path is given; PYTEST_ARGS may name test files.
    return int(pytest.main(list(argv)))


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
