"""The real ROS 2 command-line and GUI tools for tests (ros2 launch, ros2 topic, rqt): a ROS
distribution's (`ros2` on PATH, its setup file sourced), else the folder PHYSAI_ROS2_TOOLS names,
else ../shared/ros2_tools beside the repository (the tools built unmodified from the official
sources for machines whose ROS 2 comes from PyPI: its README). Neither: the test FAILS, saying
what to install (CI has ../shared, so a lost tools folder must not pass as skipped tests). A
checkout that cannot have them (a clone elsewhere: no registry has them) sets
PHYSAI_ROS2_TOOLS=skip, and those tests are skipped, each saying NOT RUN, and `make test` ends
with a line saying so. The venv's prefix leads AMENT_PREFIX_PATH so the tools find physai_ros there.
"""
from __future__ import annotations

import os
import shutil
import sys
import tempfile
from dataclasses import dataclass
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[1]
MISSING = ("the real ROS 2 tools are needed (ros2 launch, ros2 topic, rqt): source a ROS 2 distribution "
           "(ros-<distro>-ros-base, ros-<distro>-rqt-robot-monitor), or set PHYSAI_ROS2_TOOLS to a folder "
           "laid out as ../shared/ros2_tools (prefix/bin/ros2, prefix/lib/python3.11/site-packages)")


@dataclass(frozen=True)
class Ros2Tools:
    where: str
    prefix: Path | None  # the tools' ament prefix (None: a sourced distribution)
    env: dict

    def ros2(self, *args: str) -> list[str]:
        if self.prefix is None:
            return ["ros2", *args]
        # The folder's scripts say `#!/usr/bin/env python3`: run them with the venv's python.
        return [sys.executable, str(self.prefix / "bin" / "ros2"), *args]

    def script(self, name: str) -> list[str]:
        return [sys.executable, str(self.prefix / "bin" / name)] if self.prefix is not None else [name]


def site_packages(prefix: Path) -> Path:
    return prefix / "lib" / f"python{sys.version_info.major}.{sys.version_info.minor}" / "site-packages"


def skipped_by_request() -> bool:
    return os.environ.get("PHYSAI_ROS2_TOOLS") == "skip"


def tools_missing(what: str) -> None:
    """Stop a test that needs the tools: a failure, or a skip where PHYSAI_ROS2_TOOLS=skip says so."""
    if skipped_by_request():
        pytest.skip(f"NOT RUN (PHYSAI_ROS2_TOOLS=skip): {what}")
    pytest.fail(f"{what} (PHYSAI_ROS2_TOOLS=skip skips these tests on a machine that cannot have them)",
                pytrace=False)


def tools_prefix() -> Path | None:
    """The tools folder's ament prefix: PHYSAI_ROS2_TOOLS's, else ../shared/ros2_tools's; None
    when neither has the tools."""
    if skipped_by_request():
        return None
    folders = [Path(os.environ["PHYSAI_ROS2_TOOLS"])] if os.environ.get("PHYSAI_ROS2_TOOLS") else []
    folders.append(REPO.parent / "shared" / "ros2_tools")
    return next((f / "prefix" for f in folders if (f / "prefix" / "bin" / "ros2").is_file()), None)


def _folder_env(prefix: Path) -> dict:
    env = dict(os.environ)
    site = site_packages(prefix)
    env["PYTHONPATH"] = os.pathsep.join(p for p in (str(site), env.get("PYTHONPATH", "")) if p)
    env["AMENT_PREFIX_PATH"] = os.pathsep.join(p for p in (sys.prefix, str(prefix), env.get("AMENT_PREFIX_PATH", ""))
                                               if p)
    env["PATH"] = os.pathsep.join([str(Path(sys.executable).parent), str(prefix / "bin"), env.get("PATH", "")])
    qt = _debian_pyqt5()
    if qt is not None:
        env["PYTHONPATH"] += os.pathsep + str(qt)
    return env


def _debian_pyqt5() -> Path | None:
    """A folder holding only Debian's PyQt5 (python3-pyqt5: Qt is not on PyPI for rqt's
    python_qt_binding), so the rest of dist-packages cannot shadow the venv's packages."""
    pyqt = Path("/usr/lib/python3/dist-packages/PyQt5")
    if not pyqt.is_dir():
        return None
    folder = Path(tempfile.gettempdir()) / f"physai_ros2_tools_qt_{os.getuid()}"
    folder.mkdir(exist_ok=True)
    link = folder / "PyQt5"
    if not link.is_symlink():
        link.symlink_to(pyqt)
    return folder


def locate() -> Ros2Tools | None:
    """The tools, from the folder (tools_prefix) or a sourced distribution; None without either."""
    if skipped_by_request():
        return None
    prefix = tools_prefix()
    if prefix is not None:
        return Ros2Tools(str(prefix.parent), prefix, _folder_env(prefix))
    if shutil.which("ros2"):
        env = dict(os.environ)
        env["AMENT_PREFIX_PATH"] = os.pathsep.join(p for p in (sys.prefix, env.get("AMENT_PREFIX_PATH", "")) if p)
        return Ros2Tools(shutil.which("ros2"), None, env)
    return None


def find_tools() -> Ros2Tools:
    tools = locate()
    if tools is None:
        tools_missing(MISSING)
    return tools
