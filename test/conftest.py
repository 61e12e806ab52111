"""Suite-wide environment. Runs before any test module imports triton or rclpy."""
import os
import random

# Must precede the first `import triton` in the process (see ENVIRONMENT.md).
os.environ.setdefault("TRITON_INTERPRET", "1")
os.environ.setdefault("ROS_AUTOMATIC_DISCOVERY_RANGE", "LOCALHOST")
os.environ.setdefault("ROS_DOMAIN_ID", str(random.randint(1, 100)))
# Two cores: keep torch from oversubscribing when several test processes run.
os.environ.setdefault("OMP_NUM_THREADS", "2")
