"""Build the physai_ros_interfaces ament_cmake package into the running interpreter's prefix.

Run with the virtual environment's python. Installing into sys.prefix means nothing has to be
sourced or exported at run time: rclpy finds the generated types on the venv's site-packages
and the type-support libraries on the venv's lib/. Environment facts: ../shared/ENVIRONMENT.md.
"""
from __future__ import annotations

import os
import shutil
import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent


def main() -> int:
    build_dir = ROOT / "build" / "physai_ros_interfaces"
    if build_dir.exists():
        shutil.rmtree(build_dir)
    build_dir.mkdir(parents=True)
    env = dict(os.environ)
    env.pop("PYTHONPATH", None)
    env["AMENT_PREFIX_PATH"] = sys.prefix
    env["CMAKE_PREFIX_PATH"] = sys.prefix
    # cmake runs generator scripts with "python3"; make sure that is this interpreter.
    env["PATH"] = str(Path(sys.executable).parent) + os.pathsep + env.get("PATH", "")
    configure = [
        "cmake", str(ROOT / "interfaces"),
        f"-DCMAKE_INSTALL_PREFIX={sys.prefix}",
        f"-DPython3_EXECUTABLE={sys.executable}",
        "-DBUILD_TESTING=OFF",
        "-DCMAKE_BUILD_TYPE=Release",
    ]
    jobs = str(max(1, os.cpu_count() or 1))
    for cmd in (configure, ["cmake", "--build", ".", "-j", jobs], ["cmake", "--install", "."]):
        result = subprocess.run(cmd, cwd=build_dir, env=env)
        if result.returncode != 0:
            print(f"build_interfaces: '{' '.join(cmd)}' failed ({result.returncode})", file=sys.stderr)
            return result.returncode
    return 0


if __name__ == "__main__":
    sys.exit(main())
