"""Polling helper for tests that wait on other threads or DDS (imported by the test modules)."""

from __future__ import annotations

import time


def wait_for(predicate, timeout: float = 10.0, period: float = 0.02) -> bool:
    """True as soon as predicate() holds, False if it still does not after `timeout` seconds."""
    end = time.monotonic() + timeout
    while time.monotonic() < end:
        if predicate():
            return True
        time.sleep(period)
    return bool(predicate())
