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
        for executor, _, _ in self._running:
            executor.shutdown(timeout_sec=2.0)
        for _, _, thread in self._running:  # no callback may still be running when its node goes
            thread.join(timeout=5.0)
        for _, node, _ in self._running:
            node.destroy_node()
            destroy_actions(node)  # a test's own client nodes hold actions too
        self._running.clear()
