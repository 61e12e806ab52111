"""`make test`: the whole suite, isolated from other ROS 2 graphs on this host.

Every run gets its own ROS_DOMAIN_ID (and each test module the next one: test/conftest.py) and keeps
discovery on localhost, so parallel runs (or CI next to a developer's session) rarely cross-talk
and no discovery packet leaves the machine.
TRITON_INTERPRET=1 makes the Triton kernels run on CPU tensors through the interpreter.
"""
from __future__ import annotations

import os
import random
import sys
import time
from pathlib import Path

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
    code = int(pytest.main(list(argv)))
    print(f"run_tests: {ros2_tools_note()}", flush=True)
    return code


def ros2_tools_note() -> str:
    """Where the real ros2 launch / topic / rqt came from (test/ros2_tools.py, as the tests look):
    said last: without them those tests fail, or are skipped where PHYSAI_ROS2_TOOLS=skip asks."""
    sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "test"))
    from ros2_tools import locate, skipped_by_request

    tools = locate()
    if skipped_by_request():
        return "real ROS 2 tools NOT USED (PHYSAI_ROS2_TOOLS=skip): the ros2 launch / rqt / launch-file tests were SKIPPED"
    if tools is None:
        return ("real ROS 2 tools NOT FOUND (no ros2 on PATH, no ../shared/ros2_tools, no PHYSAI_ROS2_TOOLS): "
                "the ros2 launch / rqt / launch-file tests FAILED")
    return f"real ROS 2 tools (ros2 launch, ros2 topic, rqt) from {tools.where}"


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
