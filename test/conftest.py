"""Suite-wide environment. Runs before any test module imports triton or rclpy."""
import os
import random

import pytest

# Must precede the first `import triton` in the process (see ENVIRONMENT.md).
os.environ.setdefault("TRITON_INTERPRET", "1")
os.environ.setdefault("ROS_AUTOMATIC_DISCOVERY_RANGE", "LOCALHOST")
os.environ.setdefault("ROS_DOMAIN_ID", str(random.randint(1, 100)))
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


# Each test module runs in a ROS domain of its own: the ROS_DOMAIN_ID every rclpy context reads
# and every process the module starts inherits. Fast DDS' shared-memory ports (their number from
# the domain) are guarded by named semaphores in /dev/shm; a process the fault tests SIGKILL while
# it writes to a live participant's port leaves that semaphore locked, and every later writer to
# the port blocks for good. With one domain for the whole run that reached later modules (a
# policy server that never logged a line, 44 minutes into a CI run: the likeliest cause, as no
# stack was left). UDP only (config/fastdds_udp_only.xml) would avoid the trap but test another
# transport than the fleet's default. The run's first domain is random (1..100), so
# parallel runs rarely meet; modules count up from it, within 1..232 (higher domains' ports pass
# 65535).
_FIRST_DOMAIN = int(os.environ["ROS_DOMAIN_ID"])
_modules_started = [0]


def _next_domain() -> str:
    _modules_started[0] += 1
    return str(1 + (_FIRST_DOMAIN - 1 + _modules_started[0]) % 232)


@pytest.fixture(scope="module", autouse=True)
def ros_domain_of_its_own():
    os.environ["ROS_DOMAIN_ID"] = _next_domain()
    yield


@pytest.fixture
def ros_domain_per_test():
    """A domain for this test alone, for modules whose tests each start a whole fleet as processes
    (no rclpy context of the module's): a child that physai-fleet had to SIGKILL in one test can
    leave a shared-memory port locked, and the next test's nodes in that domain would block on it."""
    module_domain = os.environ["ROS_DOMAIN_ID"]
    os.environ["ROS_DOMAIN_ID"] = _next_domain()
    yield
    os.environ["ROS_DOMAIN_ID"] = module_domain


@pytest.fixture(scope="session")
def fleet():
    """The shipped fleet.yaml, parsed (serving, client and config tests)."""
    from physai_ros.config.fleet import load_fleet

    return load_fleet()
