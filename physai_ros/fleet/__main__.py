"""`python -m physai_ros.fleet`: the physai-fleet CLI without the console script (how the tests,
benches and an uninstalled checkout start it)."""
import sys

from physai_ros.fleet.cli import main

sys.exit(main())
