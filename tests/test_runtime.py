"""motionvl.ros.runtime: the one way a node process stops (the per-node signal soak is
test_node_shutdown.py). In-process where the process survives, in a child process where it must end."""

from __future__ import annotations

import signal
import subprocess
import sys
import textwrap
import time

import pytest

rclpy = pytest.importorskip("rclpy")
from rclpy.node import Node  # noqa: E402
from rclpy.duration import Duration  # noqa: E402
from rclpy.qos import DurabilityPolicy, QoSProfile, ReliabilityPolicy  # noqa: E402
from std_msgs.msg import String  # noqa: E402

from motionvl.ros import runtime  # noqa: E402
from spinning import Spinners  # noqa: E402
from waiting import wait_for  # noqa: E402

LAST_WORDS_QOS = QoSProfile(depth=1, reliability=ReliabilityPolicy.RELIABLE, durability=DurabilityPolicy.TRANSIENT_LOCAL)


class Ticker(Node):
    """Ticks; asks the process to stop once the listener is there; destroy_node is its last action."""

    def __init__(self, fail: bool = False):
        super().__init__("runtime_test_ticker")
        self.ticks = 0
        self.fail = fail
        self.events: list = []
        self.last_words = self.create_publisher(String, "runtime_test/last_words", LAST_WORDS_QOS)
        self.create_timer(0.01, self._tick)

    def _tick(self) -> None:
        self.ticks += 1
        if self.fail:
            raise RuntimeError("a callback bug")
        if self.ticks >= 3 and self.last_words.get_subscription_count() and not runtime.stop_requested():
            runtime.request_stop("done")

    def destroy_node(self):
        ticks = self.ticks
        self.events.append(("context valid", self.context.ok()))
        self.last_words.publish(String(data="damping"))  # e.g. the deployment node's final command
        self.events.append(("acked", self.last_words.wait_for_all_acked(Duration(seconds=5))))
        self.events.append(("no callback after the stop", self.ticks == ticks))
        return super().destroy_node()


def test_request_stop_runs_the_last_action_while_the_context_is_valid(ros_context):
    received = []
    spinners = Spinners(ros_context)
    listener = spinners.add(Node("runtime_test_listener", context=ros_context))
    listener.create_subscription(String, "runtime_test/last_words", lambda m: received.append(m.data), LAST_WORDS_QOS)
    made = []

    def factory():
        made.append(Ticker())
        return made[0]

    previous = signal.getsignal(signal.SIGINT)
    try:
        assert runtime.run_node(factory, "runtime_test", args=[]) == 0
        assert wait_for(lambda: received == ["damping"], timeout=10), f"got {received}"
    finally:
        spinners.shutdown()
    assert made[0].events == [("context valid", True), ("acked", True), ("no callback after the stop", True)]
    assert signal.getsignal(signal.SIGINT) is previous, "an in-process run puts the handlers back"
    assert not rclpy.ok(), "the default context is shut down"


def test_a_callback_that_raises_ends_the_process_with_exit_code_1(capfd):
    assert runtime.run_node(lambda: Ticker(fail=True), "runtime_test", args=[]) == 1
    assert "a callback bug" in capfd.readouterr().err


def _child(body: str, *args: str) -> subprocess.Popen:
    """A Python child running `body` with the runtime imported, its stderr piped."""
    script = "import os, signal, sys, time\nfrom rclpy.node import Node\nfrom motionvl.ros import runtime\n"
    return subprocess.Popen([sys.executable, "-c", script + textwrap.dedent(body), *args],
                            stderr=subprocess.PIPE, stdout=subprocess.DEVNULL, text=True)


def _wait_for_line(proc: subprocess.Popen, text: str) -> str:
    seen = ""
    for line in proc.stderr:
        seen += line
        if text in line:
            return seen
    raise AssertionError(f"{text!r} never printed; stderr:\n{seen}")


def _interrupt_after(proc: subprocess.Popen, line: str) -> str:
    """SIGINT the child once it printed `line`; its stderr after that (the child is gone either way)."""
    try:
        _wait_for_line(proc, line)
        proc.send_signal(signal.SIGINT)
        return proc.communicate(timeout=60)[1]
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.wait()


def test_a_signal_before_start_up_starts_nothing(tmp_path):
    marker = tmp_path / "built"
    proc = _child(f"""
        runtime.catch_signals()
        os.kill(os.getpid(), signal.SIGINT)  # as if Ctrl-C came during the imports
        def factory():
            open({str(marker)!r}, "w").close()
            return Node("never")
        sys.exit(runtime.run_node(factory, "early", args=[]))
    """)
    _, err = proc.communicate(timeout=60)
    assert proc.returncode == 0 and "Traceback" not in err, err
    assert not marker.exists(), "the node was not built"


def test_a_signal_during_a_long_preparation_leaves_at_once(tmp_path):
    """A node's `prepare` (the trainer's five seconds of imports) runs with the signals caught: a signal
    during it ends the node's process (its console script caught the signals first) promptly with exit code 0
    and builds nothing."""
    marker = tmp_path / "built"
    proc = _child(f"""
        runtime.catch_signals()  # as the console script does
        def prepare():
            print("preparing", file=sys.stderr, flush=True)
            time.sleep(3600)
        def factory():
            open({str(marker)!r}, "w").close()
            return Node("never")
        sys.exit(runtime.run_node(factory, "slow", args=[], prepare=prepare))
    """)
    sent = time.monotonic()
    err = _interrupt_after(proc, "preparing")
    assert proc.returncode == 0 and "Traceback" not in err, err
    assert time.monotonic() - sent < 10.0, "the process waited for its preparation"
    assert not marker.exists(), "the node was built"


def test_a_preparation_runs_before_the_node_and_its_error_is_raised():
    """In process: the node is built after its preparation; a stop during the preparation waits for it to end
    (the caller's process goes on) and builds nothing; what the preparation raised reaches the caller."""
    order: list = []

    def node():
        order.append("node")
        runtime.request_stop("done")
        return Ticker()

    assert runtime.run_node(node, "prepared", args=[], prepare=lambda: order.append("prepare")) == 0
    assert order == ["prepare", "node"]

    def broken():
        raise ImportError("no such package")

    with pytest.raises(ImportError, match="no such package"):
        runtime.run_node(node, "prepared", args=[], prepare=broken)

    def stopped_meanwhile():
        runtime.request_stop("stopped while preparing")
        time.sleep(0.3)
        order.append("prepared to the end")

    order.clear()
    assert runtime.run_node(node, "prepared", args=[], prepare=stopped_meanwhile) == 0
    assert order == ["prepared to the end"], "the preparation ended; no node was built"


@pytest.mark.parametrize("second", [None, signal.SIGTERM])
def test_a_stuck_last_action_is_abandoned_when_the_budget_ends_or_a_second_signal_hurries(second):
    """A destroy_node that never returns: the process leaves, saying what it waited for, after the budget
    (1 s here) with exit code 1 (a stop that did not finish), or after a second signal with a budget too
    long to wait for with exit code 0 (the hurry was asked for)."""
    budget = "1.0" if second is None else "600.0"
    proc = _child(f"""
        class Stuck(Node):
            def __init__(self):
                super().__init__("stuck")
                self.get_logger().info("started")

            def destroy_node(self):
                time.sleep(3600)

        sys.exit(runtime.run_node(Stuck, "stuck", args=[], shutdown_timeout_s={budget}))
    """)
    try:
        _wait_for_line(proc, "started")
        proc.send_signal(signal.SIGINT)
        _wait_for_line(proc, "SIGINT: shutting down")
        if second is not None:
            proc.send_signal(second)
        err = proc.communicate(timeout=60)[1]
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.wait()
    assert proc.returncode == (1 if second is None else 0), err
    assert "stuck.destroy_node() did not finish" in err and "Traceback" not in err, err


def test_a_goal_still_waiting_at_the_stop_is_closed_before_the_process_leaves():
    """An action goal whose coroutine awaits work that never came: the stopped executor will not resume it,
    so the runtime closes it, outermost coroutine first, before run_node returns. Left to the garbage
    collector at exit, an inner coroutine finalized first could free the outer one mid-close, and rclpy's
    action server printed "coroutine already executing" with a traceback (seen once in CI's signal test)."""
    proc = _child("""
        from rclpy.action import ActionServer
        from motionvl.ros.goals import ActionClient
        from rclpy.callback_groups import ReentrantCallbackGroup
        from motionvl.action import Synthesize
        from motionvl.ros.goals import QueuedGoal

        class Waiting(Node):
            def __init__(self):
                super().__init__("runtime_test_waiting")
                group = ReentrantCallbackGroup()
                self.server = ActionServer(self, Synthesize, "runtime_test_wait", self._execute, callback_group=group)
                self.client = ActionClient(self, Synthesize, "runtime_test_wait", callback_group=group)
                self.sent = False
                self.create_timer(0.05, self._send_once, callback_group=group)

            def _send_once(self):
                if not self.sent and self.client.server_is_ready():
                    self.sent = True
                    self.client.send_goal_async(Synthesize.Goal())

            async def _execute(self, handle):
                goal = QueuedGoal(handle, self.executor)
                self.get_logger().info("goal waiting")
                try:
                    return await goal.done
                except GeneratorExit:
                    print("goal closed", file=sys.stderr, flush=True)
                    raise

        code = runtime.run_node(Waiting, "runtime_test_waiting", args=[], threads=2)
        print("run_node returned", file=sys.stderr, flush=True)
        sys.exit(code)
    """)
    err = _interrupt_after(proc, "goal waiting")
    assert proc.returncode == 0 and "Traceback" not in err, err
    assert "goal closed" in err and err.index("goal closed") < err.index("run_node returned"), err
