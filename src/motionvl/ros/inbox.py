"""Subscriptions that no message can break: a bad message is logged and counted, never fatal.

Any program on the domain may publish on a node's topics: a `std_msgs/String` "x" where JSON is
expected, NaN, a value out of range, an array of the wrong length. `Inbox.subscribe` wraps the
callback: whatever it raises for one message (motionvl.ros.messages.BadMessage, a KeyError, ...) is
counted for that topic (`inbox.bad[topic]`) and logged (the first per topic with its reason, then at
most every `LOG_PERIOD_S`), and the node goes on with the next message. A callback checks what it
uses and raises; it never has to catch.

A publisher of another type on a subscribed topic never reaches the callback (DDS does not match
them), so the inbox looks at the graph every `check_period_s` and reports each such publisher once
(`inbox.wrong_type[topic]`, an ERROR line naming the node and its type).
"""

from __future__ import annotations

import collections
import time

from rclpy.clock import Clock, ClockType


LOG_PERIOD_S = 5.0


def type_name(msg_type) -> str:
    """'std_msgs/msg/String' for std_msgs.msg.String."""
    package, kind = msg_type.__module__.split(".")[:2]
    return f"{package}/{kind}/{msg_type.__name__}"


class Inbox:
    def __init__(self, node, check_period_s: float = 2.0):
        self.node = node
        self.bad: collections.Counter = collections.Counter()
        self.wrong_type: dict[str, list[str]] = {}
        self.reasons: dict[str, str] = {}  # topic -> the last reason a message was refused
        self._expected: dict[str, str] = {}
        self._logged: dict[str, float] = {}
        # on the steady clock: a node on simulated time checks the graph whether or not /clock runs
        self._timer = node.create_timer(check_period_s, self.check_publishers, clock=Clock(
            clock_type=ClockType.STEADY_TIME)) if check_period_s > 0 else None

    def subscribe(self, msg_type, topic: str, callback, qos, **kwargs):
        """node.create_subscription with the callback guarded (see the module docstring)."""
        name = self.node.resolve_topic_name(topic)
        return self.node.create_subscription(msg_type, topic, self.guard(name, msg_type, callback), qos, **kwargs)

    def guard(self, topic: str, msg_type, callback):
        """`callback` guarded for messages of `topic` (resolved name), whose publishers must be of `msg_type`."""
        self._expected[topic] = type_name(msg_type)

        def guarded(msg) -> None:
            try:
                callback(msg)
            except Exception as exc:  # noqa: BLE001 - one message never ends the node: counted and logged
                self.refuse(topic, f"{type(exc).__name__}: {exc}")
        return guarded

    def refuse(self, topic: str, reason: str) -> None:
        """Count and log one unusable message on `topic` (also for callers that check before using)."""
        self.bad[topic] += 1
        self.reasons[topic] = reason
        now = time.monotonic()
        if now - self._logged.get(topic, -float("inf")) >= LOG_PERIOD_S:
            self._logged[topic] = now
            self.node.get_logger().warning(f"{topic}: dropped a message ({self.bad[topic]} so far): {reason[:300]}")

    def check_publishers(self) -> None:
        """Report publishers of another type than this node subscribes with (each set once)."""
        for topic, want in self._expected.items():
            try:
                infos = self.node.get_publishers_info_by_topic(topic)
            except Exception:  # noqa: BLE001 - the node is going away
                return
            wrong = sorted(f"{i.node_namespace.rstrip('/')}/{i.node_name} ({i.topic_type})"
                           for i in infos if i.topic_type != want)
            if wrong and wrong != self.wrong_type.get(topic):
                self.node.get_logger().error(f"{topic}: publisher(s) of another type than {want}, never heard: "
                                             f"{', '.join(wrong)}")
            if wrong:
                self.wrong_type[topic] = wrong
            else:
                self.wrong_type.pop(topic, None)

    def counts(self) -> dict:
        """{topic: refused messages} and the wrong-type publishers seen now (for logs, diagnostics, tests)."""
        return {"bad": dict(self.bad), "wrong_type": {t: list(v) for t, v in self.wrong_type.items()}}
