"""Spin each node of a test on its own executor thread, as each runs in its own process in use.

One MultiThreadedExecutor shared by every node of a test is not how the nodes run: rclpy's
multi-threaded wait loop spins hot while a long callback (a simulator tick) is still busy,
and that loop then competes for the GIL with the callback it waits on. Here every node gets
the executor kind its `main()` uses (`threads` as in `motionvl.ros.runtime.run_node`).
"""

from __future__ import annotations

import threading

from rclpy.executors import MultiThreadedExecutor, SingleThreadedExecutor

from motionvl.ros.goals import destroy_actions


class Spinners:
    def __init__(self, context):
        self.context = context
        self._running: list = []  # (executor, node, thread)

    def add(self, node, threads: int | None = 1):
        if threads == 1:
            executor = SingleThreadedExecutor(context=self.context)
        else:
            executor = MultiThreadedExecutor(num_threads=threads, context=self.context)
        executor.add_node(node)
        thread = threading.Thread(target=executor.spin, daemon=True, name=f"spin-{node.get_name()}")
        thread.start()
        self._running.append((executor, node, thread))
        return node

    def node(self, name: str):
        """The added node called `name`."""
        return next(node for _, node, _ in self._running if node.get_name() == name)

    def shutdown(self) -> None:
        running, self._running = self._running, []
        stop_spinning([(executor, thread) for executor, _, thread in running],
                      [node for _, node, _ in running], also=destroy_actions)  # a test's own client nodes hold actions


def stop_spinning(spinning, nodes, *, others=(), also=None, timeout: float = 30.0) -> None:
    """Stop each (executor, spin thread) of `spinning` and the `others` threads (a test's own publishers), then
    destroy `nodes` (and call `also(node)` on each). A node destroyed while a thread still waits on it or publishes
    through it can take the process down with a segmentation fault (the DDS layer frees what that thread uses), so
    when a thread has not ended within `timeout` s the nodes are left alone and the test fails naming the thread."""
    for executor, _ in spinning:
        executor.shutdown(timeout_sec=timeout)
    threads = [thread for _, thread in spinning] + list(others)
    for thread in threads:
        thread.join(timeout=timeout)
    alive = [thread.name for thread in threads if thread.is_alive()]
    if alive:
        raise AssertionError(f"threads {alive} still run {timeout:.0f} s after being stopped: their nodes are left "
                             "undestroyed (destroying them under a running thread can crash the process)")
    for node in nodes:
        node.destroy_node()
        if also is not None:
            also(node)
