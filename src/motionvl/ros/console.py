"""The nodes' console scripts (setup.py: `<name>_node = motionvl.ros.console:<name>_node`).

A node module imports rclpy, MuJoCo and more for about half a second; a SIGINT or SIGTERM in
that time would get Python's default action (a KeyboardInterrupt traceback, or death by
SIGTERM). Each console script therefore installs the stop handlers first
(`motionvl.ros.runtime.catch_signals`, standard library only), then imports
`motionvl.ros.<name>_node` and returns its `main()`, which finds a signal that came early and
exits 0.

A node also dies with its parent (`ros2 launch`, `motionvl train`, a shell): the kernel sends it
SIGTERM when the parent ends (Linux PR_SET_PDEATHSIG), which it takes as a stop request, so a
killed launcher leaves no node running (the deployment node damps on its way out).

`from motionvl.ros.console import simulator_node` gives that entry point for any node module
(PEP 562 module __getattr__), so a new node only needs its name in setup.py's NODES.
"""

from __future__ import annotations

import ctypes
import importlib
import importlib.util
import os
import signal

from motionvl.ros.runtime import STOP_SIGNALS, catch_signals


PR_SET_PDEATHSIG = 1


def die_with_parent() -> None:
    """Ask the kernel for SIGTERM when the parent process ends (Linux; elsewhere nothing happens)."""
    parent = os.getppid()
    try:
        ctypes.CDLL(None, use_errno=True).prctl(PR_SET_PDEATHSIG, signal.SIGTERM)
    except (OSError, AttributeError):
        return
    if os.getppid() != parent:  # the parent ended before the request took effect
        os.kill(os.getpid(), signal.SIGTERM)


def run(module: str, with_parent: bool = True) -> int:
    """Entry point of node module `motionvl.ros.<module>`: stop handlers first, then its main().
    with_parent=False keeps the death signal the parent set before exec (`motionvl train`'s trainer children die
    by SIGKILL: a stopped or hung trainer must not outlive a killed search)."""
    catch_signals()
    if with_parent:
        die_with_parent()
    try:
        return importlib.import_module(f"motionvl.ros.{module}").main()
    finally:
        # Leaving: the interpreter's teardown would put back the default actions of signals
        # with Python handlers (a late Ctrl-C would then kill the process); ignored ones stay.
        for signum in STOP_SIGNALS:
            signal.signal(signum, signal.SIG_IGN)


def __getattr__(name: str):
    if name.endswith("_node") and importlib.util.find_spec(f"motionvl.ros.{name}") is not None:
        def entry() -> int:
            return run(name)

        entry.__name__ = entry.__qualname__ = name
        return entry
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
