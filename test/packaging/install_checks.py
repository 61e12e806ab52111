"""Run inside an install's environment (a sourced colcon setup.bash, or the venv): print as JSON
where physai_ros and its default files resolve, so test/packaging can compare them with the
install's layout. Loads the default fleet the way the nodes do."""
import json
import sys
from pathlib import Path

import physai_ros
import physai_ros_interfaces
from physai_ros.config.fleet import load_fleet, tokenizer_path
from physai_ros.fleet.cli import fastdds_profile_path
from physai_ros.install_paths import install_layout
from physai_ros.serving.startup.preflight import check_server_files, checkpoint_dir


def main() -> int:
    layout = install_layout()
    cfg = load_fleet(None)
    check_server_files(cfg)  # raises, naming the file, if the checkpoint or tokenizer is missing
    print(json.dumps({
        "package": physai_ros.__file__,
        "interfaces": physai_ros_interfaces.__file__,
        "kind": layout.kind,
        "share": str(layout.share_dir),
        "fleet_file": cfg.source,
        "robots": len(cfg.robots),
        "checkpoint": str(checkpoint_dir(cfg)),
        "tokenizer": str(tokenizer_path(cfg)),
        "fastdds_profile": str(fastdds_profile_path()),
        "cwd": str(Path.cwd()),
    }))
    return 0


if __name__ == "__main__":
    sys.exit(main())
