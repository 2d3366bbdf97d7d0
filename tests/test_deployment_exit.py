"""The deployment node as its own process damps on its way out: SIGINT in STAND, and the last
commands the drives receive are pure damping; the process exits 0. Also after a policy step that
hangs (exit 0, host-side Kd to the end of the window), when the shutdown budget runs out (exit 1,
damping sent all the same), and no RUN after the process was stopped longer than the watchdog."""

from __future__ import annotations

import signal
import subprocess
import sys
import threading
import time
import uuid

import numpy as np
import pytest

pytest.importorskip("rclpy")

from rclpy.executors import SingleThreadedExecutor  # noqa: E402

from motionvl.ros import runtime  # noqa: E402

if not hasattr(runtime, "catch_signals"):
    pytest.skip("the shared shutdown path (motionvl.ros.runtime.catch_signals) has not landed: rclpy's own signal "
                "handler invalidates the context before destroy_node can send the damping", allow_module_level=True)

from deploy_fixtures import ROBOT  # noqa: E402

J = ROBOT.num_joints
from spinning import stop_spinning  # noqa: E402
from test_deployment_node import Drives  # noqa: E402
from waiting import wait_for  # noqa: E402


@pytest.mark.parametrize("sig", [signal.SIGINT, signal.SIGTERM], ids=["SIGINT", "SIGTERM"])
def test_damping_after_a_signal(ros_context, sig):
    ns = f"/exit_{uuid.uuid4().hex[:8]}"
    node = subprocess.Popen(
        [sys.executable, "-m", "motionvl.ros.deployment_node", "--ros-args", "-r", f"__ns:={ns}",
         "-p", "realtime_priority:=0", "-p", "state_timeout:=60.0", "-p", "overrun_periods:=10000",
         "-p", "stand_seconds:=0.1",
         "-p", "writer_discovery_seconds:=0.0", "-p", "exit_damping_seconds:=0.2"],
        stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)
    drives = Drives(ros_context, ns, ROBOT, "pd")
    executor = SingleThreadedExecutor(context=ros_context)
    executor.add_node(drives.node)
    spin = threading.Thread(target=executor.spin, daemon=True)
    spin.start()
    try:
        assert wait_for(drives.connected, timeout=30.0), "no discovery of the node process"
        drives.step(ROBOT.default_pose)
        for _ in range(100):
            if drives.call("set_mode/stand").success:
                break
            drives.step(ROBOT.default_pose)
        for _ in range(100):  # the ramp is 5 cycles; a fault would end it
            if drives.status().get("stand_complete"):
                break
            drives.step(ROBOT.default_pose)
        running = drives.step(ROBOT.default_pose)
        assert np.all(running.kp > 0)
        before = drives.count()
        node.send_signal(sig)
        output, _ = node.communicate(timeout=30)
        assert node.returncode == 0, output[-3000:]
        assert wait_for(lambda: drives.count() > before and np.all(drives.command().kp == 0), timeout=5.0), \
            output[-3000:]
        last = drives.command()
        assert np.all(last.kd > 0) and np.all(last.tau_ff == 0) and np.all(last.dq == 0)
        assert "damping commands" in output
    finally:
        if node.poll() is None:
            node.kill()
            node.communicate()
        stop_spinning([(executor, spin)], [drives.node])


# ---------------------------------------------------------------------- hung policy, budget, stall
class StateStream:
    """The drives' own stream: joint states (with `dq`) and IMU readings at `rate_hz` on a thread of the
    test, whatever the test's main thread does (a robot's drives publish whether or not anyone listens)."""

    def __init__(self, drives, rate_hz: float, dq=None):
        self.drives, self.period, self.dq = drives, 1.0 / rate_hz, dq
        self.stop = threading.Event()
        self.thread = threading.Thread(target=self._run, daemon=True)
        self.thread.start()

    def _run(self) -> None:
        while not self.stop.wait(self.period):
            self.drives.publish(ROBOT.default_pose, self.dq, stamp=self.drives.stamp + self.period)

    def close(self) -> None:
        self.stop.set()


def start_node(ns: str, *params: str, script: str | None = None):
    """The deployment node as its own process (or `script` run with the same ROS arguments)."""
    args = ["--ros-args", "-r", f"__ns:={ns}", "-p", "realtime_priority:=0", "-p", "writer_discovery_seconds:=0.0",
            "-p", "state_timeout:=60.0", "-p", "stand_seconds:=0.1", "-p", "exit_damping_seconds:=0.2",
            "-p", "publish_cycle_stamps:=true", *[a for p in params for a in ("-p", p)]]
    command = [sys.executable, "-c", script, *args] if script else \
        [sys.executable, "-m", "motionvl.ros.deployment_node", *args]
    return subprocess.Popen(command, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)


def spin(ros_context, drives):
    executor = SingleThreadedExecutor(context=ros_context)
    executor.add_node(drives.node)
    thread = threading.Thread(target=executor.spin, daemon=True)
    thread.start()
    return executor, thread


def finish(node, executor, thread, drives, stream=None) -> None:
    if stream is not None:
        stream.close()
    if node.poll() is None:
        node.kill()
        node.communicate()
    stop_spinning([(executor, thread)], [drives.node], others=[stream.thread] if stream is not None else [])


def test_exit_damping_after_a_hung_policy_step_keeps_kd_on_the_torque_path(ros_context, tmp_path):
    """A policy step that never ends (an ONNX graph spinning ~1e15 loop iterations once the observation is
    not zero) in RUN on the torque path: commands keep coming on schedule (damping, RUN kept); SIGINT then
    ends the process with exit code 0 and damping commands for the whole exit window, each -Kd dq of
    the velocity the drives keep reporting (host-side damping needs fresh states to the end)."""
    from deploy_fixtures import write_random_policy

    policy = write_random_policy(tmp_path / "hang.onnx", kind="hang")
    ns = f"/hung_{uuid.uuid4().hex[:8]}"
    node = start_node(ns, f"policy:={policy}", "path:=torque", "autostart:=run", "overrun_periods:=1000000",
                      "watchdog_periods:=1000000", "frozen_samples:=0")
    drives = Drives(ros_context, ns, ROBOT, "torque")
    executor, thread = spin(ros_context, drives)
    dq = np.full(J, 0.5)
    stream = None
    try:
        assert wait_for(drives.connected, timeout=30.0), "no discovery of the node process"
        stream = StateStream(drives, 250.0, dq)
        assert wait_for(lambda: drives.status().get("mode") == "RUN", timeout=60.0), drives.status()
        ran = len(drives.cycles)
        assert wait_for(lambda: len(drives.cycles) >= ran + 50, timeout=60.0), "commands stopped while the step hung"
        with drives.lock:
            assert {mode for _, mode in drives.cycles[ran + 1:ran + 50]} == {"DAMP"}  # late: damping on schedule
        assert drives.status().get("mode") == "RUN" and not drives.status().get("faults")
        before = drives.count()
        node.send_signal(signal.SIGINT)
        output, _ = node.communicate(timeout=30)
        assert node.returncode == 0, output[-3000:]
        exit_commands = int(output.rsplit("exit: sent ", 1)[1].split()[0])
        assert exit_commands == round(0.2 / ROBOT.sim_dt), output[-2000:]
        assert wait_for(lambda: drives.count() >= before + exit_commands, timeout=10.0)
        want = drives.mapping.to_motor_signed(np.clip(-ROBOT.kd * dq, -ROBOT.effort_limit, ROBOT.effort_limit))
        with drives.lock:
            last = [np.asarray(m.data) for m in drives.commands[-exit_commands:]]
        fresh = [np.allclose(tau, want) for tau in last]
        assert all(f or np.all(tau == 0) for f, tau in zip(fresh, last)), "an exit command that is not damping"
        assert any(fresh[-exit_commands // 4:]), "Kd gone before the end of the exit window"
    finally:
        finish(node, executor, thread, drives, stream)


BUDGET_SCRIPT = """
import sys, time
from rclpy.node import Node
from motionvl.ros import runtime
from motionvl.ros.deployment_node import DeploymentNode

class Stuck(Node):
    def __init__(self):
        super().__init__("stuck")

    def destroy_node(self):  # a last action that never ends: the budget runs out here
        time.sleep(3600)

sys.exit(runtime.run_nodes([DeploymentNode, Stuck], "deployment", args=sys.argv, shutdown_timeout_s=2.0))
"""


def test_exit_damping_also_when_the_shutdown_budget_runs_out(ros_context):
    """Another node of the process never finishes its destroy_node: the budget runs out and the process
    leaves with exit code 1, and the deployment node's damping (started by the signal, not by its own
    destroy_node, which never runs) has gone out for the whole exit window, the last commands."""
    ns = f"/budget_{uuid.uuid4().hex[:8]}"
    node = start_node(ns, script=BUDGET_SCRIPT)
    drives = Drives(ros_context, ns, ROBOT, "pd")
    executor, thread = spin(ros_context, drives)
    try:
        assert wait_for(drives.connected, timeout=30.0), "no discovery of the node process"
        drives.step(ROBOT.default_pose)
        for _ in range(100):
            if drives.call("set_mode/stand").success:
                break
            drives.step(ROBOT.default_pose)
        for _ in range(100):  # the ramp is 5 cycles
            if drives.status().get("stand_complete"):
                break
            drives.step(ROBOT.default_pose)
        assert np.all(drives.step(ROBOT.default_pose).kp > 0)
        before = drives.count()
        node.send_signal(signal.SIGINT)
        output, _ = node.communicate(timeout=30)
        assert node.returncode == 1, output[-3000:]
        assert "stuck.destroy_node() did not finish" in output, output[-3000:]
        window = round(0.2 / ROBOT.control_dt)
        assert wait_for(lambda: drives.count() >= before + window, timeout=10.0), output[-3000:]
        with drives.lock:
            after = drives.commands[before:]
        damping = [all(d.kp == 0 and d.kd > 0 for d in m.motor_cmd) for m in after]
        assert all(damping) and len(after) >= window, f"{len(after)} commands after the signal"
    finally:
        finish(node, executor, thread, drives)


def test_no_run_after_a_stall_longer_than_the_watchdog(ros_context, tmp_path):
    """SIGSTOP of the node in RUN for five watchdogs, SIGCONT, the drives' stream never stopping: the first
    cycle after the stall latches the watchdog fault, and no cycle from then on commands RUN (cycle
    indices from ~/cycle; a RUN command built before the stop may still be in flight)."""
    from deploy_fixtures import write_random_policy

    policy = write_random_policy(tmp_path / "p.onnx")
    ns = f"/stall_{uuid.uuid4().hex[:8]}"
    watchdog = 25  # policy periods: 0.5 s, longer than a loaded test machine stalls a process by itself
    node = start_node(ns, f"policy:={policy}", "autostart:=run", "overrun_periods:=1000000", "frozen_samples:=0",
                      f"watchdog_periods:={watchdog}")
    drives = Drives(ros_context, ns, ROBOT, "pd")
    executor, thread = spin(ros_context, drives)
    stream = None
    try:
        assert wait_for(drives.connected, timeout=30.0), "no discovery of the node process"
        stream = StateStream(drives, 50.0)
        assert wait_for(lambda: drives.status().get("mode") == "RUN", timeout=60.0), drives.status()
        running = len(drives.cycles)
        assert wait_for(lambda: len(drives.cycles) >= running + 5, timeout=30.0)
        assert not drives.status().get("faults"), drives.status()
        node.send_signal(signal.SIGSTOP)
        try:
            time.sleep(5 * watchdog * ROBOT.control_dt)
            stopped = len(drives.cycles)
        finally:
            node.send_signal(signal.SIGCONT)
        assert wait_for(lambda: drives.status().get("faults"), timeout=30.0), "no fault after the stall"
        transition = drives.status()["transition"]
        assert transition["to"] == "DAMP" and transition["why"].startswith("watchdog:"), transition
        faulted_at = transition["cycle"]
        assert wait_for(lambda: len(drives.cycles) >= stopped + 5, timeout=30.0), "no cycles after the stall"
        with drives.lock:
            after = drives.cycles[stopped:]
        assert all(mode == "DAMP" for index, mode in after if index >= faulted_at), after
        assert sum(mode == "RUN" for _, mode in after) <= 1, after  # at most the one in flight at the stop
    finally:
        finish(node, executor, thread, drives, stream)
