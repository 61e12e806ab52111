"""Run a node until SIGINT or SIGTERM; the process is gone within 2 s of the signal, exit code 0.

ros2 launch stops a node with SIGINT and escalates to SIGTERM after 5 s (SIGKILL after 10 s);
process managers (systemd, physai-fleet) send SIGTERM. Both mean "stop now" and are handled
alike, whatever the node is doing when the signal comes:

  importing   (rclpy, numpy, torch: seconds on a loaded machine) guard_start_up(), called by
              physai_ros.nodes when this process runs a node, exits at the signal: nothing is
              open yet.
  constructing (rclpy.init and the node's __init__: model load, engine profiling and warm-up,
              62 s seen on a loaded machine) the handler raises KeyboardInterrupt in the main
              thread, which abandons the construction.
  running     the handler sets a flag that the spin_once loop sees within SPIN_TIMEOUT_S.
  teardown    node.close(timeout_s) gets what is left of STOP_BUDGET_S to stop its threads
              (their joins share that, never a fixed time), then destroy_node and rclpy
              shutdown, so DDS peers drop the node at once instead of after the lease. A thread
              still alive then (an engine thread inside a batch: nothing interrupts a torch op)
              is logged. The process leaves with os._exit(0) after flushing the logs: the
              interpreter's finalisation takes 0.6-1.3 s once torch is loaded and would tear
              modules down under such a thread.
  watchdog    a thread woken by the signal itself logs what is still running and calls
              os._exit(0) EXIT_DEADLINE_S after the first signal, and at once on a second one
              (a signal within SAME_STOP_S of the first is the same request delivered twice:
              systemd signals the whole cgroup while launch forwards its own SIGINT, and a
              terminal's Ctrl-C reaches the nodes and a noninteractive launch alike).
              It reads signal.set_wakeup_fd's pipe, which the C-level handler writes, so it
              wakes even while the main thread is inside a long C call (where no Python
              handler can run) and bounds teardown steps that hang (DDS, a join).

Where is it stuck? `kill -USR1 <pid>` writes every thread's Python stack to the node's output
(faulthandler, registered with guard_start_up): its C-level handler runs even while the main
thread sits in a DDS or torch call, so a node that hangs at start-up or in teardown says where.

Exit code 0 for a requested stop: launch reports any other code as "process has died" (an
error, and what respawn and OnProcessExit handlers react to), and systemd's Restart=on-failure
restarts the unit; a Ctrl-C is not a failure. A node that crashes still exits non-zero.

Limit: Python runs signal handlers, and other threads, only while the GIL is free; a C call
that holds it delays the stop until it returns (the dlopen inside `import torch` holds it for
0.2-0.4 s idle, 10 s of a 48 s import at load average 35).
"""
from __future__ import annotations

import faulthandler
import os
import select
import signal
import sys
import threading
import time
import traceback
from pathlib import Path
from typing import TYPE_CHECKING, Callable

from physai_ros.errors import UserInputError

if TYPE_CHECKING:
    from rclpy.node import Node

SPIN_TIMEOUT_S = 0.1  # how late the spin loop may notice a stop request
STOP_BUDGET_S = 1.5  # from the first signal to the end of node.close()
EXIT_DEADLINE_S = 1.8  # the watchdog's os._exit: the 2 s contract, with margin for the OS
SAME_STOP_S = 0.25  # a second signal sooner than this is a duplicate delivery, not an "exit now"
STOP_SIGNALS = (signal.SIGINT, signal.SIGTERM)
# Set, to its own pid, by a launcher that starts a node in a session of its own (the launch
# file, for every node): the node stops when that parent dies, as a terminal's hang-up no longer
# reaches it.
EXIT_WITH_PARENT_ENV = "PHYSAI_EXIT_WITH_PARENT_PID"
_PR_SET_PDEATHSIG = 1
_NODES_DIR = Path(__file__).resolve().parent.parent / "nodes"


# ---- pure helpers ---------------------------------------------------------------------------

def node_main_name(argv: list[str], orig_argv: list[str], node_modules: set[str]) -> str | None:
    """The node this process runs as its program, or None: "policy_server" for
    `python -m physai_ros.nodes.policy_server ...` (while runpy imports the package, argv[0] is
    "-m" and the module follows the first "-m" of orig_argv) and for the console script
    `.../policy_server`."""
    if argv and argv[0] == "-m":
        i = orig_argv.index("-m") if "-m" in orig_argv else -1
        pkg, _, name = (orig_argv[i + 1] if 0 <= i < len(orig_argv) - 1 else "").rpartition(".")
        return name if pkg == "physai_ros.nodes" and name in node_modules else None
    name = Path(argv[0]).stem if argv else ""
    return name if name in node_modules else None


def time_left(deadline: float, now: float) -> float:
    return max(0.0, deadline - now)


def describe_threads(threads, frames: dict) -> str:
    """'serving_engine_0 in before_batch (fault_injection.py:61); ...': the innermost Python
    frame of each thread (frames: sys._current_frames()), so a log says what held the stop."""
    parts = []
    for t in threads:
        frame = frames.get(t.ident)
        where = ""
        if frame is not None:
            fs = traceback.extract_stack(frame)[-1]
            where = f" in {fs.name} ({Path(fs.filename).name}:{fs.lineno})"
        parts.append(f"{t.name}{where}")
    return "; ".join(parts) or "nothing"


# ---- process plumbing -----------------------------------------------------------------------

def _node_main() -> str | None:
    """node_main_name for this process, over the node modules in physai_ros/nodes."""
    nodes = {p.stem for p in _NODES_DIR.glob("*.py")} - {"__init__"}
    return node_main_name(sys.argv, getattr(sys, "orig_argv", []), nodes)


def _process_name() -> str:
    return _node_main() or Path(sys.argv[0] if sys.argv else "node").stem or "node"


def _log(name: str, msg: str, warn: bool = False, error: bool = False) -> None:
    try:
        from rclpy.logging import get_logger

        logger = get_logger(name)
        (logger.error if error else logger.warning if warn else logger.info)(msg)
    except Exception:  # rclpy not importable (yet): plain stderr, as launch captures it
        level = "ERROR" if error else "WARN" if warn else "INFO"
        print(f"[{level}] [{name}]: {msg}", file=sys.stderr, flush=True)


def _exit_now(name: str, msg: str = "", code: int = 0) -> None:
    """os._exit after flushing what could hold the last log lines. Skips the interpreter's
    finalisation: 0.6 s idle, 1.3 s loaded once torch is imported (measured), and it would tear
    modules down under any thread still inside a torch op or a DDS call."""
    if msg:
        _log(name, msg, warn=True)
    try:
        import logging

        logging.shutdown()
        for stream in (sys.stdout, sys.stderr):
            stream.flush()
        import ctypes

        ctypes.CDLL(None).fflush(None)  # C stdio (rcutils' console output), as exit() would
    except Exception:
        pass
    os._exit(code)


def _others(*exclude: threading.Thread) -> list[threading.Thread]:
    """Live Python threads besides the main thread and `exclude` (foreign threads that merely
    called into Python, _DummyThread, are not ours to wait for)."""
    main = threading.main_thread()
    return [t for t in threading.enumerate()
            if t is not main and t not in exclude and t.is_alive() and not isinstance(t, threading._DummyThread)]


def guard_start_up() -> None:
    """Exit 0 at once on SIGINT/SIGTERM while a node process is still importing (run_node
    replaces this handler). Does nothing unless this process runs a node as its program, so
    importing physai_ros.nodes elsewhere (tests, launch files) changes no signal handling."""
    if threading.current_thread() is not threading.main_thread():
        return
    name = _node_main()
    if name is None:
        return

    faulthandler.register(signal.SIGUSR1, all_threads=True)

    def leave(signum, frame):
        os.write(2, f"[INFO] [{name}]: {signal.Signals(signum).name} while starting (importing): exiting\n".encode())
        os._exit(0)
    for s in STOP_SIGNALS:
        signal.signal(s, leave)


class _Stop:
    """The stop request, written by the signal handler (main thread) and the watchdog."""

    def __init__(self):
        self.at: float | None = None  # monotonic time of the first signal
        self.signame = ""
        self.requested = False  # the handler has seen a signal
        self.constructing = True

    def mark(self, signum: int) -> None:
        if self.at is None:
            self.at, self.signame = time.monotonic(), signal.Signals(signum).name


class _Watchdog:
    def __init__(self, stop: _Stop, name: str):
        self.stop, self.name = stop, name
        self._r, w = os.pipe()
        os.set_blocking(w, False)  # required by set_wakeup_fd: the C handler must never block
        signal.set_wakeup_fd(w, warn_on_full_buffer=False)
        self.thread = threading.Thread(target=self._run, name="stop_watchdog", daemon=True)
        self.thread.start()

    def _run(self) -> None:
        deadline = None
        while True:
            timeout = None if deadline is None else time_left(deadline, time.monotonic())
            if not select.select([self._r], [], [], timeout)[0]:
                main = threading.main_thread()
                _exit_now(self.name, f"still running {EXIT_DEADLINE_S:g} s after {self.stop.signame}: "
                           + describe_threads([main, *_others(self.thread)], sys._current_frames())
                           + "; exiting without waiting")
            for signum in os.read(self._r, 64):
                if signum not in STOP_SIGNALS:
                    continue
                if deadline is not None and time.monotonic() - self.stop.at >= SAME_STOP_S:
                    _exit_now(self.name, f"second stop signal ({signal.Signals(signum).name}): exiting at once")
                self.stop.mark(signum)
                deadline = self.stop.at + EXIT_DEADLINE_S


def stop_when_parent_dies() -> bool:
    """With EXIT_WITH_PARENT_ENV=<the launcher's pid> on Linux: SIGTERM to this process when its
    parent dies (prctl PR_SET_PDEATHSIG), and at once if the parent is already another process
    (the launcher died before the call). Whether it was armed."""
    try:
        launcher = int(os.environ.get(EXIT_WITH_PARENT_ENV, ""))
    except ValueError:
        return False
    if not sys.platform.startswith("linux"):
        return False
    import ctypes

    if ctypes.CDLL(None, use_errno=True).prctl(_PR_SET_PDEATHSIG, int(signal.SIGTERM), 0, 0, 0) != 0:
        return False
    if os.getppid() != launcher:
        os.kill(os.getpid(), signal.SIGTERM)
    return True


def run_node(factory: Callable[[], "Node"], args: list[str] | None = None) -> int:
    name = _process_name()
    stop = _Stop()

    def on_signal(signum, frame) -> None:
        stop.mark(signum)
        if not stop.requested:
            stop.requested = True
            if stop.constructing:
                raise KeyboardInterrupt  # abandons rclpy.init / the node's __init__ where it is

    watchdog = _Watchdog(stop, name)
    node = None
    failed = False
    try:
        try:
            # Handlers before rclpy.init: rclpy's own would turn a signal into an exception at a
            # point we do not choose (and background jobs started by a non-interactive shell
            # ignore SIGINT, which Python would otherwise inherit).
            for s in STOP_SIGNALS:
                signal.signal(s, on_signal)
            stop_when_parent_dies()
            import rclpy
            from rclpy.experimental import EventsExecutor  # fastest for 480 Hz streams (ENVIRONMENT.md)
            from rclpy.signals import SignalHandlerOptions

            rclpy.init(args=args if args is not None else sys.argv, signal_handler_options=SignalHandlerOptions.NO)
            node = factory()
            stop.constructing = False
        except KeyboardInterrupt:
            stop.constructing = False
        except UserInputError as e:
            # A bad fleet file or a missing checkpoint: the message names the key, the path and
            # the reason; a traceback would only bury it. Exit 1: launch reports the node died.
            stop.constructing = False
            _log(name, f"cannot start: {e}", error=True)
            failed = True
        if node is None:
            if not failed:
                _log(name, f"{stop.signame} while starting: construction abandoned, exiting")
        else:
            executor = EventsExecutor()
            executor.add_node(node)
            while not stop.requested and rclpy.ok():
                executor.spin_once(timeout_sec=SPIN_TIMEOUT_S)
    finally:
        stop.constructing = False  # (after an exception in the factory) a signal now must not raise
        if node is not None:
            close = getattr(node, "close", None)
            if callable(close):
                start = stop.at if stop.at is not None else time.monotonic()
                try:
                    close(timeout_s=time_left(start + STOP_BUDGET_S, time.monotonic()))
                except Exception as e:  # the rest of the teardown still runs
                    _log(name, f"close() failed: {type(e).__name__}: {e}", warn=True)
            node.destroy_node()
        if "rclpy" in sys.modules:
            sys.modules["rclpy"].try_shutdown()
    if failed:
        _exit_now(name, code=1)
    if stop.at is None:
        return 0  # the context was shut down from elsewhere: an ordinary return
    left = _others(watchdog.thread)
    if left and node is not None:  # (an abandoned construction's threads are no news)
        _log(name, "still running after teardown: " + describe_threads(left, sys._current_frames())
             + "; exiting without waiting for it", warn=True)
    _exit_now(name)
    return 0  # not reached
