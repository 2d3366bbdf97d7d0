"""The deployment node as its own process damps on its way out: SIGINT in STAND, and the last
commands the drives receive are pure damping; the process exits 0."""

from __future__ import annotations

import signal
import subprocess
import sys
import threading
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
        executor.shutdown(timeout_sec=2.0)
        spin.join(timeout=5.0)
        drives.node.destroy_node()
