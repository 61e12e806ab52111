"""Where physai_ros's installed files are, for each way the package can be installed.

The Python package (with its assets/: tokenizer, trained policy) is always found by import. The
ROS share directory (launch/, config/, package.xml) is not: where it lies depends on the install.

- colcon / ament (a ROS 2 machine, `source install/setup.bash`): the ament index, i.e.
  `ament_index_python.get_package_share_directory("physai_ros")` over AMENT_PREFIX_PATH. The
  Python package then sits in `<prefix>/lib/pythonX.Y/site-packages`, nowhere near share/, so
  anything relative to the package or to sys.prefix is wrong (a user saw exactly that).
- editable (`make setup`: `pip install -e .` into .venv): the package is imported from a source
  checkout, and the checkout's own launch/ and config/ are the share directory (edits are live).
- pip (a wheel or `pip install .`): setup.py's data_files land in `<sys.prefix>/share/physai_ros`.

Which one applies is decided from where the imported package lives, never by trying paths until
one exists: a stale copy elsewhere must not be picked silently. Imports only physai_ros.errors,
so every layer (config, launch file, nodes, scripts) can use it without import circles.
"""
from __future__ import annotations

import os
import sys
from dataclasses import dataclass
from pathlib import Path

from physai_ros.errors import UserInputError

PACKAGE = "physai_ros"
PACKAGE_URL_PREFIX = f"package://{PACKAGE}/"


class InstallLayoutError(FileNotFoundError, UserInputError):
    """physai_ros's share directory (or a file in it) cannot be found; the message says where
    it looked and why."""


@dataclass(frozen=True)
class InstallLayout:
    kind: str  # "editable" | "ament" | "pip"
    package_dir: Path  # the imported physai_ros package (holds assets/)
    share_dir: Path  # launch/, config/, package.xml


def package_dir() -> Path:
    return Path(__file__).resolve().parent


def _checkout_root(pkg: Path) -> Path | None:
    """The source checkout the package is imported from, if it is one: a package.xml naming
    physai_ros beside a setup.py, one level up."""
    root = pkg.parent
    manifest = root / "package.xml"
    if (root / "setup.py").is_file() and manifest.is_file() \
            and f"<name>{PACKAGE}</name>" in manifest.read_text(errors="replace"):
        return root
    return None


def _ament_share_dir() -> Path | None:
    try:
        from ament_index_python.packages import (PackageNotFoundError,
                                                 get_package_share_directory)
    except ImportError:  # not a ROS install; the pip layout below still applies
        return None
    try:
        return Path(get_package_share_directory(PACKAGE))
    except (PackageNotFoundError, LookupError, OSError):  # OSError: AMENT_PREFIX_PATH unset
        return None


def install_layout(pkg: Path | None = None) -> InstallLayout:
    """How physai_ros is installed here; InstallLayoutError if no share directory exists."""
    pkg = pkg or package_dir()
    checkout = _checkout_root(pkg)
    if checkout is not None:
        return InstallLayout("editable", pkg, checkout)
    share = _ament_share_dir()
    if share is not None and share.is_dir():
        return InstallLayout("ament", pkg, share)
    pip_share = Path(sys.prefix) / "share" / PACKAGE
    if pip_share.is_dir():
        return InstallLayout("pip", pkg, pip_share)
    prefixes = os.environ.get("AMENT_PREFIX_PATH", "")
    raise InstallLayoutError(
        f"cannot find the {PACKAGE} share directory (launch/, config/): the package at {pkg} is "
        f"not a source checkout, the ament index (AMENT_PREFIX_PATH={prefixes or '<unset>'}) has "
        f"no {PACKAGE}, and {pip_share} does not exist. On a ROS 2 machine run "
        f"`source install/setup.bash` in the colcon workspace first.")


def share_dir() -> Path:
    return install_layout().share_dir


def resolve_package_url(url: str) -> Path:
    """`package://physai_ros/<rel>` -> the installed file: assets/ from the Python package,
    everything else (config/, launch/) from the share directory. The path is returned even if
    the file is missing, so the caller's error names the place it should be."""
    if not url.startswith(PACKAGE_URL_PREFIX):
        raise ValueError(f"not a {PACKAGE_URL_PREFIX} URL: {url!r}")
    rel = url[len(PACKAGE_URL_PREFIX):]
    if rel.split("/", 1)[0] == "assets":
        return package_dir() / rel
    return share_dir() / rel


def default_fleet_file() -> Path:
    return share_dir() / "config" / "fleet.yaml"


def fastdds_profile_file() -> Path:
    return share_dir() / "config" / "fastdds_shm.xml"
