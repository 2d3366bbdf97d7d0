"""Subscriptions a node's own real-time thread takes itself, through a wait set of its own.

rclpy's executors rebuild a wait set of every entity of the node on each spin and hand a message
to its callback on the executor's thread: for a 500 Hz loop that is a thread hop, a lock and
hundreds of microseconds of Python per message, paid before the loop even sees the state. The
deployment node's control loop and the simulator's stepping thread instead wait on their own few
subscriptions (and a guard condition that wakes them), take each message as it comes and handle it
in the same thread. Their subscriptions belong to `LoopOwned`, a callback group no executor runs,
so the executor never takes their messages; services, timers and the rest stay on the executor.
"""

from __future__ import annotations

import contextlib

from rclpy.callback_groups import CallbackGroup
from rclpy.impl.implementation_singleton import rclpy_implementation as _rclpy


class LoopOwned(CallbackGroup):
    """The callback group of subscriptions a node's own thread takes: no executor runs them."""

    def can_execute(self, entity) -> bool:
        return False

    def beginning_execution(self, entity) -> bool:
        return False

    def ending_execution(self, entity) -> None:
        pass


class OwnedSubscriptions:
    """Subscriptions of `node` that the calling thread waits on and takes (see the module docstring).

    `add` them (handler(msg) is called in the waiting thread for each message taken), then, in that
    thread, `with owned.opened():` and `owned.wait(timeout)` in its loop; another thread may `wake()` it.
    """

    def __init__(self, node, inbox=None):
        """inbox: a motionvl.ros.inbox.Inbox: a handler that raises has that message counted and logged
        there and the loop goes on (without one the exception reaches the waiting thread)."""
        self.node, self.inbox = node, inbox
        self.group = LoopOwned()
        self._entries: list = []  # (subscription, message type, handler, take every queued message)
        self._wake = _rclpy.GuardCondition(node.context.handle)
        self._wait_set = None

    def add(self, msg_type, topic: str, handler, qos, take_all: bool = False):
        """Subscribe; `take_all`: take every queued message at a wake (a deeper queue, e.g. an IMU on
        sensor-data QoS), else the one the queue holds (depth 1: the newest)."""
        sub = self.node.create_subscription(msg_type, topic, _never_called, qos, callback_group=self.group)
        if self.inbox is not None:
            handler = self.inbox.guard(sub.topic_name, msg_type, handler)
        self._entries.append((sub, msg_type, handler, take_all))
        return sub

    def wake(self) -> None:
        """Make the waiting thread's `wait` return now (from any thread)."""
        self._wake.trigger_guard_condition()

    @contextlib.contextmanager
    def opened(self):
        """Hold the handles for the waiting thread's loop (the node is destroyed only after it ends)."""
        with contextlib.ExitStack() as handles:
            for entity in (self.node.context.handle, self._wake, *(e[0].handle for e in self._entries)):
                handles.enter_context(entity)
            self._wait_set = _rclpy.WaitSet(len(self._entries), 1, 0, 0, 0, 0, self.node.context.handle)
            try:
                yield self
            finally:
                self._wait_set = None

    def wait(self, timeout: float) -> int:
        """Wait up to `timeout` s for a message (or a wake), hand every message taken to its handler;
        returns how many were handled."""
        wait_set = self._wait_set
        wait_set.clear_entities()
        for sub, *_ in self._entries:
            wait_set.add_subscription(sub.handle)
        wait_set.add_guard_condition(self._wake)
        wait_set.wait(max(0, int(timeout * 1e9)))
        ready = wait_set.get_ready_entities("subscription")
        handled = 0
        if ready:
            for sub, msg_type, handler, take_all in self._entries:
                if sub.handle.pointer not in ready:
                    continue
                while True:
                    taken = sub.handle.take_message(msg_type, False)
                    if taken is None:
                        break
                    handler(taken[0])
                    handled += 1
                    if not take_all:
                        break
        return handled


def _never_called(_msg) -> None:  # the subscription's callback: no executor runs a LoopOwned entity
    raise AssertionError("a loop-owned subscription's message reached an executor")
