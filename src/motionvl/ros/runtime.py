"""Running nodes as a process: the one way in (start-up errors: exit 1) and the one way out.

Every node's `main()` is `return run_node(NodeClass, NODE_NAME, args, threads=...)`; a process
that composes several nodes calls `run_nodes([factory, ...], name, args)`. The path:

1. Signals. `catch_signals()` installs MotionVL's SIGINT and SIGTERM handlers and rclpy is
   initialised with `signal_handler_options=NO`, so rclpy installs none. A signal only
   *requests* the stop (a flag and a byte on a pipe); it never raises in the middle of what
   the main thread was doing. (rclpy's handler shuts the context down under running code and
   Python's raises KeyboardInterrupt anywhere: the causes of "the given context is not valid"
   during start-up, of a GL thread abandoned half-made (a segfault at exit) and of tracebacks
   on a second Ctrl-C.) The console scripts install the handlers before the node module's
   imports (`motionvl.ros.console`), so a signal during the first second is caught too.
2. Start-up: the node's `prepare` (heavy imports), rclpy.init, then the nodes are built. A
   signal before rclpy.init skips them (exit 0);
   a signal while a node is being built lets its constructor finish (threads it starts, such
   as a GL context, are never abandoned half-made), then goes to 4. A configuration error is
   logged as one line and the process exits 1.
3. Each node spins on its own executor thread; the main thread waits for a stop request: a
   signal, `request_stop()` (a node whose work is done ends its process this way), or an
   executor that ended because a callback raised (logged with its traceback; exit 1).
4. Stop, in this order, within one budget (`shutdown_timeout_s`, from the first signal):
   a. each executor stops taking callbacks and the callbacks in flight finish; the coroutines it
      will never resume (action goals still waiting for their work) are closed, outermost first;
   b. `node.destroy_node()`, nodes in reverse order of creation. A node's override is its last
      action while the context is still valid: stop and join its work threads (render/GL,
      training, critique), close its files (the recorder's bag), publish final commands (the
      deployment node's damping), then call `super().destroy_node()`;
   c. `rclpy.try_shutdown()`; the exit code is 0 (1 if a callback or a destroy_node raised).
   A second signal during 2-4 interrupts nothing: it cuts what is left of the budget to
   `HURRY_S`. The budget (4 s) ends before `ros2 launch` escalates (SIGTERM 5 s after its SIGINT,
   then SIGKILL 5 s later). If it runs out (a thread that does not stop), the process says what it
   was waiting for and leaves at once with `os._exit`, instead of tearing down the interpreter under a
   running thread: with exit code 1 when the budget ran out by itself (a stop that did not finish is a
   failure a supervisor must see), with the process's own when a second signal asked for the hurry.
   A node that chooses to leave work unfinished (a training iteration in flight: resume redoes it)
   says so with `abandon_work()`; the process then leaves the same way once the other steps are
   done, with its own exit code.

For nodes with long work loops: `stop_requested()` says whether the process is stopping (a loop
on a thread of the node's own can poll it; stopping it is still the job of destroy_node), and
`time_left()` how long its destroy_node may still wait.
A node whose constructor raised is destroyed as a bare rclpy node (its own destroy_node would
meet attributes it never set), before the context goes: the one line naming the cause stays the
only output.
In-process uses (tests, several nodes in one test) build the node classes directly and call
`destroy_node()` themselves: the same last action runs.
"""

from __future__ import annotations

import os
import select
import signal
import sys
import threading
import time
import traceback
from typing import TYPE_CHECKING, Callable, Sequence

if TYPE_CHECKING:  # rclpy is imported by run_nodes: the console scripts load this module before it
    from rclpy.node import Node

SHUTDOWN_TIMEOUT_S = 4.0
"""Seconds from the first signal to the end of the process when nothing hurries it: within launch's 5 s
grace before SIGTERM, with room for the interpreter's exit."""
HURRY_S = 1.0
"""Seconds left after a second signal."""
STOP_SIGNALS = (signal.SIGINT, signal.SIGTERM)


class _StopRequest:
    """Process-wide stop state. The signal handler only sets attributes and writes to a pipe:
    no lock is taken in it, so it cannot deadlock with the code it interrupted."""

    def __init__(self) -> None:
        self.installed = False
        self._read_fd, self._write_fd = os.pipe2(os.O_NONBLOCK | os.O_CLOEXEC)
        self.reset()

    def reset(self) -> None:
        self.requested_by: str | None = None  # "SIGINT", "SIGTERM" or the reason given to request_stop
        self.requested_at: float | None = None
        self.signals = 0
        self.hurried_at = 0.0  # monotonic time of the second signal
        self.exit_code = 0
        self.budget_s = SHUTDOWN_TIMEOUT_S  # the running process's budget (run_nodes sets it)
        self.abandoned: list[str] = []  # work a node chose to leave unfinished (abandon_work)

    def request(self, reason: str, exit_code: int = 0) -> None:
        if self.requested_by is None:
            self.requested_by, self.requested_at, self.exit_code = reason, time.monotonic(), exit_code
        self.wake()

    def wake(self) -> None:
        try:
            os.write(self._write_fd, b"x")
        except BlockingIOError:  # the pipe is full: the waiter is awake anyway
            pass

    def wait(self, timeout: float | None = None) -> bool:
        """Block the caller (the main thread) until a stop is requested or something woke it."""
        if self.requested_by is None:
            select.select([self._read_fd], [], [], timeout)
            try:
                os.read(self._read_fd, 4096)
            except BlockingIOError:
                pass
        return self.requested_by is not None

    def deadline(self, budget_s: float) -> float:
        """The monotonic time by which the process must be gone (shrinks after a second signal)."""
        start = self.requested_at if self.requested_at is not None else time.monotonic()
        end = start + budget_s
        if self.signals >= 2:
            end = min(end, self.hurried_at + HURRY_S)
        return end

    def on_signal(self, signum, _frame) -> None:
        self.signals += 1
        if self.signals == 2:
            self.hurried_at = time.monotonic()
        self.request(signal.Signals(signum).name)


_STOP = _StopRequest()


def catch_signals() -> dict | None:
    """Install the SIGINT/SIGTERM handlers that turn a signal into a stop request (main thread
    only). Returns the handlers they replaced, or None if they were installed already."""
    if _STOP.installed:
        return None
    _STOP.reset()
    previous = {signum: signal.signal(signum, _STOP.on_signal) for signum in STOP_SIGNALS}
    _STOP.installed = True
    return previous


def _restore_signals(previous: dict) -> None:
    for signum, handler in previous.items():
        signal.signal(signum, handler)
    _STOP.installed = False


def request_stop(reason: str = "requested", exit_code: int = 0) -> None:
    """Ask `run_node(s)` to stop the process as a signal would (callable from any thread)."""
    _STOP.request(reason, exit_code)


def stop_requested() -> bool:
    """Whether the process has been asked to stop (by a signal or `request_stop`)."""
    return _STOP.requested_by is not None


def time_left() -> float:
    """Seconds left of the shutdown budget (the whole budget before a stop was requested)."""
    if _STOP.requested_by is None:
        return _STOP.budget_s
    return max(0.0, _STOP.deadline(_STOP.budget_s) - time.monotonic())


def abandon_work(what: str) -> None:
    """Called from a node's destroy_node: `what` (a thread still working) is left unfinished and the
    process leaves without waiting for it (os._exit once the remaining shutdown steps are done)."""
    _STOP.abandoned.append(what)


def stop_requested_at() -> float | None:
    """Monotonic time of the first stop request (None: none). A node's own thread can start its last
    action at the signal, before the executors stop (the deployment node's exit damping does)."""
    return _STOP.requested_at


def run_node(factory: Callable[[], "Node"], name: str, args=None, threads: int | None = 1,
             startup_errors: tuple = (), shutdown_timeout_s: float = SHUTDOWN_TIMEOUT_S,
             prepare: Callable[[], None] | None = None) -> int:
    """Run one node until SIGINT/SIGTERM/request_stop; returns the exit code (see the module doc).

    threads: 1 spins single-threaded; None or n > 1 uses a MultiThreadedExecutor (a node whose
    callbacks must not block each other needs that).
    startup_errors: exception types of the constructor reported as one line (exit 1) besides
    ConfigError, ValueError and ParameterException.
    prepare: slow set-up before rclpy.init (heavy imports), with the signals already caught: a
    signal during it skips the node (exit 0) instead of eating the stop's budget in a constructor
    (a console script's process leaves at once; see `_prepared`).
    """
    return run_nodes([factory], name, args, threads=threads, startup_errors=startup_errors,
                     shutdown_timeout_s=shutdown_timeout_s, prepare=prepare)


def run_nodes(factories: Sequence[Callable[[], "Node"]], name: str, args=None, threads: int | None = 1,
              startup_errors: tuple = (), shutdown_timeout_s: float = SHUTDOWN_TIMEOUT_S,
              prepare: Callable[[], None] | None = None) -> int:
    """Run several nodes in this process, each on an executor thread of its own (`threads` per node).

    Called in a process whose handlers the console script did not install (a test calling a
    node's main()), it installs them for the run and puts the previous ones back afterwards.
    """
    previous = catch_signals()
    try:
        if prepare is not None and not _prepared(prepare, own_process=previous is None):
            return _STOP.exit_code
        return _run(factories, name, args, threads, startup_errors, shutdown_timeout_s)
    finally:
        if previous is not None:  # an in-process run: leave no stop behind (nodes built after it keep their budget)
            _restore_signals(previous)
            _STOP.reset()


def _prepared(prepare: Callable[[], None], own_process: bool) -> bool:
    """Run `prepare` on a thread while the main thread waits for it or a stop request: True once it ended,
    False if a stop came first. What it raised is raised here. On a stop, a node's own process (its console
    script installed the handlers) leaves at once with `os._exit`: no waiting for seconds of imports, and no
    interpreter teardown under the thread doing them; an in-process caller (a test, `motionvl train`) waits
    for the preparation to end, then gets False."""
    raised: list = []

    def work() -> None:
        try:
            prepare()
        except BaseException as exc:  # noqa: BLE001 - handed to the main thread
            raised.append(exc)
        _STOP.wake()

    thread = threading.Thread(target=work, name="prepare", daemon=True)
    thread.start()
    while thread.is_alive() and not stop_requested():
        _STOP.wait(0.5)
    if thread.is_alive() and own_process:
        sys.stdout.flush()
        sys.stderr.flush()
        os._exit(_STOP.exit_code)
    thread.join()
    if raised:
        raise raised[0]
    return not stop_requested()


def _run(factories, name, args, threads, startup_errors, shutdown_timeout_s) -> int:
    import rclpy
    import rclpy.logging
    from rclpy.exceptions import ParameterException
    from rclpy.signals import SignalHandlerOptions

    from motionvl.robot import ConfigError

    logger = rclpy.logging.get_logger(name)
    _STOP.budget_s = shutdown_timeout_s
    if stop_requested():  # a signal before anything started: nothing to stop
        return _STOP.exit_code
    rclpy.init(args=args, signal_handler_options=SignalHandlerOptions.NO)
    nodes: list = []
    try:
        for factory in factories:
            if stop_requested():
                break
            nodes.append(factory())
    except (ConfigError, ValueError, ParameterException, *startup_errors) as exc:
        logger.error(f"cannot start: {exc}")
        _destroy_half_built(exc, nodes)
        _finish(nodes, [], logger, shutdown_timeout_s)
        return 1
    except BaseException as exc:
        _destroy_half_built(exc, nodes)
        _finish(nodes, [], logger, shutdown_timeout_s)
        raise

    spinners = [_Spinner(node, threads) for node in nodes]
    while not stop_requested() and not any(s.ended for s in spinners):
        _STOP.wait()
    if not stop_requested():  # an executor ended by itself: a callback raised or the context went away
        request_stop("executor ended", exit_code=1 if any(s.error for s in spinners) else 0)
    if _STOP.signals:
        logger.info(f"{_STOP.requested_by}: shutting down")
    return _finish(nodes, spinners, logger, shutdown_timeout_s)


def _destroy_half_built(exc: BaseException, built: list) -> None:
    """Destroy, as bare rclpy nodes, the nodes whose constructor raised `exc` (found as `self` in its
    traceback's frames): the context would otherwise call their own destroy_node when it shuts down."""
    from rclpy.node import Node

    from motionvl.ros.goals import destroy_actions

    tb, seen = exc.__traceback__, []
    while tb is not None:
        candidate = tb.tb_frame.f_locals.get("self")
        if isinstance(candidate, Node) and candidate not in built and all(candidate is not s for s in seen):
            seen.append(candidate)
        tb = tb.tb_next
    for node in seen:
        for destroy in (destroy_actions, Node.destroy_node):
            try:
                destroy(node)
            except Exception:  # noqa: BLE001 - a node that never got its handles has nothing to free
                pass


class _Spinner:
    """One node's executor, spinning on its own thread until `stop()`."""

    def __init__(self, node: "Node", threads: int | None):
        from rclpy.executors import MultiThreadedExecutor, SingleThreadedExecutor
        from rclpy.task import Future

        self.node = node
        self.error: BaseException | None = None
        self.ended = False  # set before the main thread is woken: no race with the thread's end
        self.executor = (SingleThreadedExecutor(context=node.context) if threads == 1
                         else MultiThreadedExecutor(num_threads=threads, context=node.context))
        self.executor.add_node(node)
        self._stop = Future()
        self.thread = threading.Thread(target=self._spin, name=f"spin-{node.get_name()}", daemon=True)
        self.thread.start()

    def _spin(self) -> None:
        from rclpy.executors import ExternalShutdownException

        try:
            self.executor.spin_until_future_complete(self._stop)
        except ExternalShutdownException:
            pass
        except BaseException as exc:  # a callback raised: report it, stop the process with exit code 1
            self.error = exc
            self.node.get_logger().error(f"a callback raised; stopping:\n{traceback.format_exc()}")
        finally:
            self.ended = True
            _STOP.wake()

    def stop(self) -> None:
        """Take no new callbacks; the spin thread returns (wakes the executor's wait)."""
        if not self._stop.done():
            self._stop.set_result(True)

    def close_waiting(self) -> None:
        """Close the tasks the stopped executor will never resume (a goal's coroutine awaiting its work), each
        from its outermost coroutine in. Left to the garbage collector at exit they are finalized in any order:
        an inner coroutine closed first can free the last reference to the executor (a goal holds it), which
        frees the outer coroutine mid-close, and "coroutine already executing" is thrown into it (rclpy's
        action server logs it with a traceback). `_tasks` is rclpy's list of the executor's tasks."""
        for task, _entity, _node in list(getattr(self.executor, "_tasks", ())):
            if not task.done():
                task.cancel()


def _finish(nodes: list, spinners: list, logger, budget_s: float) -> int:
    """Step 4 of the module doc: executors, then nodes (reverse order), then the context."""
    import rclpy

    exit_code = _STOP.exit_code
    for spinner in spinners:
        spinner.stop()
    steps: list = [(f"the executor of {s.node.get_name()} to stop", s.thread.join) for s in spinners]
    steps += [(f"the callbacks of {s.node.get_name()} in flight", s.executor.shutdown) for s in spinners]
    steps += [(f"the goals {s.node.get_name()} left waiting", s.close_waiting) for s in spinners]
    steps += [(f"{node.get_name()}.destroy_node()", node.destroy_node) for node in reversed(nodes)]
    steps.append(("rclpy.try_shutdown()", rclpy.try_shutdown))
    for what, step in steps:
        outcome = _within(step, _STOP.deadline(budget_s))
        if outcome is _TIMED_OUT:
            logger.warning(f"{what} did not finish within the shutdown budget ({budget_s:g} s, "
                           f"{HURRY_S:g} s after a second signal); leaving without it")
            sys.stdout.flush()
            sys.stderr.flush()
            os._exit(exit_code or (0 if _STOP.signals >= 2 else 1))
        if isinstance(outcome, BaseException):
            logger.error(f"{what} raised:\n" + "".join(traceback.format_exception(outcome)))
            exit_code = 1
    if _STOP.abandoned:  # a thread still works: leave without tearing the interpreter down under it
        logger.info(f"left unfinished: {'; '.join(_STOP.abandoned)}")
        sys.stdout.flush()
        sys.stderr.flush()
        os._exit(exit_code)
    return exit_code


_TIMED_OUT = object()


def _within(step: Callable[[], object], deadline: float):
    """Run step on a helper thread; wait until it ends or `deadline` (re-read, so a second signal
    shortens the wait). Returns None, the exception it raised, or _TIMED_OUT."""
    raised: list = []

    def run() -> None:
        try:
            step()
        except BaseException as exc:  # reported by the caller
            raised.append(exc)

    helper = threading.Thread(target=run, name="shutdown-step", daemon=True)
    helper.start()
    while helper.is_alive():
        left = deadline - time.monotonic()
        if left <= 0:
            return _TIMED_OUT
        helper.join(min(left, 0.05))
        deadline = min(deadline, _STOP.deadline(float("inf")))
    return raised[0] if raised else None
