"""Running one node as a process: start-up errors become a message and exit code 1."""

from __future__ import annotations

from typing import Callable

import rclpy
import rclpy.logging
from rclpy.exceptions import ParameterException
from rclpy.executors import ExternalShutdownException, MultiThreadedExecutor, SingleThreadedExecutor
from rclpy.node import Node

from motionvl.robot import ConfigError


def run_node(factory: Callable[[], Node], name: str, args=None, threads: int | None = 1,
             startup_errors: tuple = ()) -> int:
    """Init rclpy, build the node, spin until shutdown (Ctrl-C, SIGTERM via rclpy), clean up.

    threads: 1 spins single-threaded; None or n > 1 uses a MultiThreadedExecutor (a node whose
    callbacks must not block each other needs that).
    """
    rclpy.init(args=args)
    try:
        node = factory()
    except (ConfigError, ValueError, ParameterException, *startup_errors) as exc:
        rclpy.logging.get_logger(name).error(f"cannot start: {exc}")
        rclpy.try_shutdown()
        return 1
    executor = SingleThreadedExecutor() if threads == 1 else MultiThreadedExecutor(num_threads=threads)
    executor.add_node(node)
    try:
        executor.spin()
    except (KeyboardInterrupt, ExternalShutdownException):
        pass
    finally:
        executor.shutdown()
        node.destroy_node()
        rclpy.try_shutdown()
    return 0
