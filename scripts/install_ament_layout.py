"""Give the editable install (`make setup`: `pip install -e .` into .venv) the layout a colcon
install has, so ROS tools find physai_ros from the venv (AMENT_PREFIX_PATH=<venv>):

  <prefix>/share/ament_index/resource_index/packages/physai_ros   the ament index marker
  <prefix>/share/physai_ros/package.xml, {launch,config}/<file>    links into this checkout
  <prefix>/lib/physai_ros/<executable>                            links to the console scripts

The links point into the checkout (like `colcon build --symlink-install`), so edits to the launch
file or config/ are live, as the editable Python package is. Run with the venv's python; it
writes under sys.prefix only and replaces what an earlier run wrote.
"""
from __future__ import annotations

import sys
from importlib import metadata
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
PACKAGE = "physai_ros"
SHARED = ("package.xml", "launch", "config")


def _console_scripts() -> list[str]:
    """The console scripts of the installed physai_ros distribution (setup.py's entry points)."""
    dist = metadata.distribution(PACKAGE)
    return sorted(ep.name for ep in dist.entry_points if ep.group == "console_scripts")


def _link(link: Path, target: Path) -> None:
    if link.is_symlink() or link.is_file():
        link.unlink()
    link.symlink_to(target)


def install(prefix: Path = Path(sys.prefix)) -> list[Path]:
    made = []
    marker = prefix / "share" / "ament_index" / "resource_index" / "packages" / PACKAGE
    marker.parent.mkdir(parents=True, exist_ok=True)
    marker.write_text("")
    made.append(marker)
    share = prefix / "share" / PACKAGE
    share.mkdir(parents=True, exist_ok=True)
    for name in SHARED:
        target = ROOT / name
        if target.is_dir():
            # A folder of links to the files, not a link to the folder: `ros2 launch` finds launch
            # files with os.walk, which does not enter a linked folder ("file 'fleet.launch.py'
            # was not found in the share directory"). A file added later needs a new `make setup`.
            folder = share / name
            if folder.is_symlink():
                folder.unlink()
            folder.mkdir(exist_ok=True)
            for stale in folder.iterdir():
                if stale.is_symlink() and not stale.exists():
                    stale.unlink()
            for f in sorted(target.iterdir()):
                if f.is_file():
                    _link(folder / f.name, f)
                    made.append(folder / f.name)
        else:
            _link(share / name, target)
            made.append(share / name)
    lib = prefix / "lib" / PACKAGE
    lib.mkdir(parents=True, exist_ok=True)
    for exe in _console_scripts():
        script = prefix / "bin" / exe
        if not script.exists():
            raise SystemExit(f"install_ament_layout: {script} is missing: run `pip install -e .` first")
        _link(lib / exe, script)
        made.append(lib / exe)
    return made


if __name__ == "__main__":
    for path in install():
        print(f"install_ament_layout: {path}")
