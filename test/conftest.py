"""Suite-wide environment. Runs before any test module imports triton or rclpy."""
import os
import random

import pytest

# Must precede the first `import triton` in the process (see ENVIRONMENT.md).
os.environ.setdefault("TRITON_INTERPRET", "1")
os.environ.setdefault("ROS_AUTOMATIC_DISCOVERY_RANGE", "LOCALHOST")
os.environ.setdefault("ROS_DOMAIN_ID", str(random.randint(1, 100)))
# Fast DDS over loopback UDP only (config/fastdds_udp_only.xml says why): the fault tests SIGKILL
# processes mid-traffic, and one killed holding a shared-memory port's mutex blocks, for the rest
# of the run, every later participant of the run's domain that writes to that port (a policy
# server that never logged a line, 44 minutes into a CI run). Tests of the shared-memory path set
# their own profile.
os.environ.setdefault("FASTDDS_DEFAULT_PROFILES_FILE",
                      os.path.join(os.path.dirname(os.path.dirname(os.path.abspath(__file__))),
                                   "config", "fastdds_udp_only.xml"))
# Tiny models gain nothing from intra-op threads, and ROS tests run several processes at once on
# two cores: one torch thread per process avoids oversubscription (measured: test/engine 107 s ->
# 52 s on a loaded machine). Child processes inherit it.
os.environ.setdefault("OMP_NUM_THREADS", "1")
# The fleet's auto keystore (physai_ros.security.config) is a throwaway one per test session:
# identities tests create (junk robot ids included) never reach the user's own auto keystore.
if "PHYSAI_ROS_AUTO_KEYSTORE" not in os.environ:
    import atexit
    import shutil
    import tempfile

    _keys_dir = tempfile.mkdtemp(prefix="physai_keys_")
    atexit.register(shutil.rmtree, _keys_dir, True)
    os.environ["PHYSAI_ROS_AUTO_KEYSTORE"] = os.path.join(_keys_dir, "keystore")
# Start-up latency profiles (serving/startup/profile_cache.py) are kept per test session too: a test never
# takes the user's measurement, nor leaves its tiny-model ones in the user's cache.
if "PHYSAI_ROS_PROFILE_CACHE" not in os.environ:
    import atexit
    import shutil
    import tempfile

    _profiles_dir = tempfile.mkdtemp(prefix="physai_profiles_")
    atexit.register(shutil.rmtree, _profiles_dir, True)
    os.environ["PHYSAI_ROS_PROFILE_CACHE"] = _profiles_dir

# Marks the environment every child inherits; a process that outlives the session fails it.
from process_sweep import (no_process_outlives_the_session, pytest_runtest_teardown,  # noqa: E402,F401
                           pytest_sessionfinish)


@pytest.fixture(scope="session")
def fleet():
    """The shipped fleet.yaml, parsed (serving, client and config tests)."""
    from physai_ros.config.fleet import load_fleet

    return load_fleet()
