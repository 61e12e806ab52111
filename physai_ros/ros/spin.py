"""Run a node until SIGINT or SIGTERM, then shut down cleanly.

Our own handlers replace rclpy's: a stop request sets a flag that a spin_once loop checks every
0.1 s, so a node exits promptly under either signal (process managers send SIGTERM; background
jobs started by a non-interactive shell ignore SIGINT, which Python would otherwise inherit).
"""
from __future__ import annotations

import signal
import sys
from typing import Callable

import rclpy
from rclpy.node import Node
from rclpy.signals import SignalHandlerOptions


def run_node(factory: Callable[[], Node], args: list[str] | None = None) -> int:
    stop = False

    def request_stop(signum, frame) -> None:
        nonlocal stop
        stop = True

    rclpy.init(args=args if args is not None else sys.argv, signal_handler_options=SignalHandlerOptions.NO)
    signal.signal(signal.SIGINT, request_stop)
    signal.signal(signal.SIGTERM, request_stop)
    node = None
    try:
        from rclpy.experimental import EventsExecutor  # fastest executor for 480 Hz streams (ENVIRONMENT.md)

        node = factory()
        executor = EventsExecutor()
        executor.add_node(node)
        while not stop and rclpy.ok():
            executor.spin_once(timeout_sec=0.1)
    except KeyboardInterrupt:
        pass
    finally:
        if node is not None:
            close = getattr(node, "close", None)
            if callable(close):
                close()
            node.destroy_node()
        rclpy.try_shutdown()
    return 0
