"""Child process for the ProcessGroup tests: `python -m ros_test_child --ros-args -p mode:=...`.
polite: exits 0 on SIGTERM; stubborn: ignores SIGTERM; crash: exits 3 at once."""
import signal
import sys
import time

mode = next((a.split(":=", 1)[1] for a in sys.argv if a.startswith("mode:=")), "polite")
if mode == "crash":
    print("crashing on purpose", flush=True)
    sys.exit(3)
signal.signal(signal.SIGTERM, signal.SIG_IGN if mode == "stubborn" else (lambda *a: sys.exit(0)))
print("ready", flush=True)
for _ in range(600):
    time.sleep(0.1)
