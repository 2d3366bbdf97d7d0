"""JSON records on std_msgs/String topics, as the nodes' callbacks read them.

Anyone on the graph can publish on a topic (a typo in `ros2 topic pub`, a node of another version),
so a callback takes a message for a record only when it is a JSON object; anything else is dropped
with a warning naming the topic (at most one per topic every few seconds) instead of raising in the
executor, which would end the node and, for the orchestrator, the search. A node with a
motionvl.ros.inbox.Inbox (`node.inbox`) has the message counted and logged there.
"""

from __future__ import annotations

import json
import time

WARN_EVERY_S = 5.0
_last_warning: dict[tuple[str, str], float] = {}  # (node name, topic) -> monotonic time of its last warning


def json_record(node, msg, topic: str, inbox=None) -> dict | None:
    """`msg.data` decoded as a JSON object, or None (logged; counted in `inbox`, default `node.inbox`) when it
    is not one."""
    try:
        record = json.loads(msg.data)
    except (TypeError, ValueError) as exc:
        problem = f"not JSON ({exc})"
    else:
        if isinstance(record, dict):
            return record
        problem = f"a JSON {type(record).__name__}, not an object"
    inbox = inbox or getattr(node, "inbox", None)
    if inbox is not None:
        inbox.refuse(node.resolve_topic_name(topic), f"{problem}: {str(msg.data)[:80]!r}")
        return None
    key, now = (node.get_name(), topic), time.monotonic()
    if now - _last_warning.get(key, -WARN_EVERY_S) >= WARN_EVERY_S:
        _last_warning[key] = now
        node.get_logger().warning(f"{topic}: dropped a message that is {problem}: {str(msg.data)[:80]!r}")
    return None
