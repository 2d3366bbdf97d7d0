"""`motionvl bench deploy`: the deployment loop's timing over DDS, idle and beside CPU hogs, with
and without real-time priority, against a minimal loop and the baseline in the same run.

Per condition, three controllers run in turn, each as its own process, and this process plays the
robot: a thread publishes motor_states and imu/data at the command rate on absolute monotonic
deadlines (with a sensor's noise, so that no value is frozen) and takes the commands.
  node      this tree's deployment node (`python -m motionvl.ros.deployment_node`, host-torque path
            at 500 Hz by default, a policy in RUN, `publish_cycle_stamps`)
  probe     the minimal rclpy + ONNX Runtime loop (`python -m motionvl.ros.deploy_bench probe`: one
            subscription callback computes the clipped PD torques, runs the policy every decimation
            states, publishes; no safety, no modes): what Python and DDS allow on this machine, the
            floor the node is compared with (notes/deploy-latency-probe.md)
  baseline  the deployment node of `--baseline` (a git revision of this repository, by default the
            one before the real-time rework), extracted to a temporary directory and run the same way
            (the robot hears its deployment/status in the type it publishes: typed, or the JSON string
            of the nodes before motionvl/DeploymentStatus)
  simulator the simulator node's own stream (hardware emulation at the command rate, nothing commanding
            it): the period error of its joint_states at the robot, as the drives' side of a sim-to-sim run
Figures (p50 / p99 / max, ms):
  end_to_end   from publishing a joint state to receiving the ~/cycle stamp that says which state the
               command just sent answered (published right after the command: an upper bound by
               the one extra small message's transit)
  period_error |interval between commands received - the command period|, at the robot
  node_latency the node's own take -> publish time (node_step_latency: of the cycles that ran a policy
               step), and its inference: ONNX Runtime per policy step
  lost         states that no command answered
Conditions: idle / `--hogs` busy processes; real-time off / SCHED_FIFO `--priority` (both processes,
memory locked) where the system grants it (else the figures say it was refused). Goals (issue 92),
torque path at 500 Hz under SCHED_FIFO, idle and beside the hogs: node end-to-end p99 < 2 ms and
<= the probe's p99 + 1 ms in the same run, period error p99 < 1 ms; without real-time priority the
figures are reported. `gil_wait_ms` measures how late a thread gets the GIL back while another thread
runs Python, at Python's default switch interval and at the node's. The policy is a random ONNX graph
with the robot's contract unless --policy names one (timing does not depend on the weights). Run it
on a quiet machine: the figures are the machine's. The summary (last line but one) says per
condition whether the goals hold; the JSON last line carries everything.
"""

from __future__ import annotations

import json
import os
import platform
import subprocess
import sys
import tempfile
import threading
import time
import uuid
from pathlib import Path

import numpy as np
from rclpy.node import Node

HOG = ("import os\nos.sched_setscheduler(0, os.SCHED_OTHER, os.sched_param(0))\nparent = os.getppid()\n"
       "while os.getppid() == parent:\n    pass")
"""A busy process (an ordinary one, whatever its parent's scheduling) that ends when the benchmark does,
however that ends."""
GOAL_END_TO_END_P99_MS = 2.0
GOAL_PERIOD_ERROR_P99_MS = 1.0
GOAL_OVER_PROBE_MS = 1.0
BASELINE_REF = "c8cdb8c"
"""main before the real-time rework of the deployment node (issue 92)."""
STATUS_TYPE = "motionvl/msg/DeploymentStatus"
LEGACY_STATUS_TYPE = "std_msgs/msg/String"
"""deployment/status as the nodes before the typed status published it (JSON, e.g. the baseline's)."""
STATUS_LOOK_EVERY = 50
"""Until subscribed, the stand-in robot looks for the status publisher every this many states (0.1 s at 500 Hz)."""
CONTROLLERS = ("probe", "baseline", "node", "simulator")
STARTUP_TIMEOUT_S = 60.0


def add_deploy_bench_arguments(parser) -> None:
    parser.add_argument("--seconds", type=float, default=10.0, help="measured seconds of RUN per condition")
    parser.add_argument("--hogs", type=int, default=os.cpu_count() or 2, help="busy processes of the 'hog' condition")
    parser.add_argument("--priority", type=int, default=50, help="SCHED_FIFO priority of the real-time condition")
    parser.add_argument("--conditions", default="idle,hog", help="comma list: idle, hog")
    parser.add_argument("--realtime", default="off,on", help="comma list: off, on")
    parser.add_argument("--controllers", default=",".join(CONTROLLERS),
                        help="comma list: probe, baseline, node, simulator")
    parser.add_argument("--baseline", default=BASELINE_REF,
                        help="git revision of this repository whose deployment node is the baseline")
    parser.add_argument("--policy", help="ONNX policy (default: a random one with the robot's contract)")
    parser.add_argument("--path", choices=("torque", "pd"), default="torque",
                        help="torque: commands at the PD rate (500 Hz); pd: at the policy rate")


def run_deploy_benchmark(args) -> dict:
    from motionvl.deploy import DeployConfig
    from motionvl.deploy.random_policy import write_random_policy
    from motionvl.deploy.scheduling import SWITCH_INTERVAL_S, gil_wait
    from motionvl.robot import load_robot_config

    robot = load_robot_config()
    workdir = Path(tempfile.mkdtemp(prefix="motionvl_bench_deploy_"))
    policy = Path(args.policy) if args.policy else write_random_policy(workdir / "random.onnx")
    period = DeployConfig(path=args.path).command_period(robot)
    controllers = [c.strip() for c in args.controllers.split(",") if c.strip()]
    unknown = set(controllers) - set(CONTROLLERS)
    if unknown:
        raise SystemExit(f"--controllers: unknown {sorted(unknown)} (choose from {CONTROLLERS})")
    baseline = None
    if "baseline" in controllers:
        baseline = extract_baseline(args.baseline, workdir / "baseline")
        if isinstance(baseline, str):
            print(json.dumps({"baseline": "skipped", "why": baseline}), flush=True)
            controllers.remove("baseline")
            baseline = None
    gil = {f"{s * 1e3:g} ms{' (Python default)' if s == 0.005 else ' (the node)'}": gil_wait(s)
           for s in (0.005, SWITCH_INTERVAL_S)}
    print(json.dumps({"gil_wait_ms": gil}), flush=True)
    results = []
    for condition in [c.strip() for c in args.conditions.split(",") if c.strip()]:
        for realtime in [r.strip() == "on" for r in args.realtime.split(",") if r.strip()]:
            for controller in controllers:
                hogs = [subprocess.Popen([sys.executable, "-c", HOG])
                        for _ in range(args.hogs if condition == "hog" else 0)]
                try:
                    if controller == "simulator":
                        figures = measure_simulator(period, args.seconds, args.priority if realtime else 0)
                    else:
                        figures = measure(policy, args.path, period, args.seconds, args.priority if realtime else 0,
                                          controller=controller, baseline=baseline)
                finally:
                    for hog in hogs:
                        hog.kill()
                        hog.wait()
                figures.update(controller=controller, condition=condition, realtime_requested=realtime)
                print(json.dumps(figures), flush=True)
                results.append(figures)
    summary = summarize(results)
    for row in summary:
        print(json.dumps({"summary": row}), flush=True)
    return {"benchmark": "deploy", "machine": machine(), "path": args.path, "rate_hz": round(1.0 / period, 3),
            "policy": str(policy) if args.policy else "random (untrained) ONNX with the robot's contract",
            "seconds_per_condition": args.seconds, "baseline": args.baseline if baseline else None,
            "goals": {"end_to_end_p99_ms": GOAL_END_TO_END_P99_MS, "period_error_p99_ms": GOAL_PERIOD_ERROR_P99_MS,
                      "end_to_end_over_probe_p99_ms": GOAL_OVER_PROBE_MS},
            "gil_wait_ms": gil, "summary": summary, "conditions": results}


def summarize(results: list) -> list:
    """Per condition: the node's p99s, the probe's and the baseline's end-to-end p99 of the same run, and
    whether the goals hold (None where a figure is missing)."""
    rows = []
    keys = sorted({(r["condition"], r["realtime_requested"]) for r in results},
                  key=lambda k: (k[0] != "idle", k[1]))
    for condition, realtime in keys:
        by = {r["controller"]: r for r in results if (r["condition"], r["realtime_requested"]) == (condition, realtime)}

        def p99(controller, figure="end_to_end_ms", by=by):
            return (by.get(controller) or {}).get(figure, {}).get("p99")

        node, probe, error = p99("node"), p99("probe"), p99("node", "period_error_ms")
        row = {"condition": condition, "realtime": realtime,
               "granted": (by.get("node") or {}).get("realtime", {}).get("deployment"),
               "node_end_to_end_p99_ms": node, "node_period_error_p99_ms": error,
               "probe_end_to_end_p99_ms": probe, "baseline_end_to_end_p99_ms": p99("baseline"),
               "baseline_period_error_p99_ms": p99("baseline", "period_error_ms"),
               "simulator_period_error_p99_ms": p99("simulator", "period_error_ms"),
               "node_lost": (by.get("node") or {}).get("lost"), "node_faults": (by.get("node") or {}).get("faults")}
        if node is not None and error is not None:
            row["goals_met"] = bool(node < GOAL_END_TO_END_P99_MS and error < GOAL_PERIOD_ERROR_P99_MS
                                    and (probe is None or node <= probe + GOAL_OVER_PROBE_MS))
        rows.append(row)
    return rows


def extract_baseline(ref: str, folder: Path) -> Path | str:
    """The package tree (src, config, urdf) of git revision `ref` of this repository in `folder`;
    a string saying why not (no git, not a checkout, unknown revision)."""
    from motionvl.robot import package_root

    root = package_root()
    folder.mkdir(parents=True, exist_ok=True)
    try:
        archive = subprocess.run(["git", "-C", str(root), "archive", "--format=tar", ref, "src", "config", "urdf"],
                                 capture_output=True, check=True)
        subprocess.run(["tar", "-x", "-C", str(folder)], input=archive.stdout, capture_output=True, check=True)
    except FileNotFoundError as exc:
        return f"{exc.filename} not found"
    except subprocess.CalledProcessError as exc:
        return f"git archive {ref} in {root}: {(exc.stderr or b'').decode(errors='replace').strip()[:300]}"
    return folder / "src"


def baseline_environment(src: Path) -> dict:
    """This process's environment with the baseline's package tree first on the path (and its config)."""
    env = dict(os.environ)
    env["PYTHONPATH"] = os.pathsep.join([str(src)] + [p for p in [env.get("PYTHONPATH")] if p])
    env["MOTIONVL_SHARE"] = str(Path(src).parent)
    return env


def machine() -> dict:
    model = ""
    try:
        model = next(line.split(":", 1)[1].strip() for line in Path("/proc/cpuinfo").read_text().splitlines()
                     if line.startswith("model name"))
    except (OSError, StopIteration):
        pass
    return {"cpu": model or platform.processor(), "cores": os.cpu_count(), "kernel": platform.release(),
            "python": platform.python_version()}


def percentiles_ms(values) -> dict:
    v = np.asarray(values, dtype=float)
    if v.size == 0:
        return {"p50": None, "p99": None, "max": None, "n": 0}
    return {"p50": round(float(np.percentile(v, 50)) * 1e3, 4), "p99": round(float(np.percentile(v, 99)) * 1e3, 4),
            "max": round(float(v.max()) * 1e3, 4), "n": int(v.size)}


def controller_command(controller: str, ns: str, policy: Path, path: str, priority: int) -> list:
    if controller == "probe":
        return [sys.executable, "-m", "motionvl.ros.deploy_bench", "probe", "--namespace", ns, "--policy", str(policy),
                "--path", path, "--priority", str(priority)]
    # (the baseline's node reads joint_states: the robot's motor_states under the name it knows)
    remap = ["-r", "joint_states:=motor_states"] if controller == "baseline" else []
    return [sys.executable, "-m", "motionvl.ros.deployment_node", "--ros-args", "-r", f"__ns:={ns}", *remap,
            "-p", f"policy:={policy}", "-p", f"path:={path}", "-p", "autostart:=run", "-p", "stand_seconds:=0.5",
            "-p", "publish_cycle_stamps:=true", "-p", f"realtime_priority:={priority}",
            "-p", "state_timeout:=0.5", "-p", "diagnostics_rate_hz:=1.0"]


def measure(policy: Path, path: str, period: float, seconds: float, priority: int, controller: str = "node",
            baseline: Path | None = None) -> dict:
    import rclpy
    from rclpy.executors import SingleThreadedExecutor

    from motionvl.deploy.scheduling import release_realtime, request_realtime

    ns = f"/bench_{uuid.uuid4().hex[:8]}"
    env = baseline_environment(baseline) if controller == "baseline" else None
    process = subprocess.Popen(controller_command(controller, ns, policy, path, priority), stdout=subprocess.PIPE,
                               stderr=subprocess.STDOUT, text=True, env=env)
    context = rclpy.Context()
    rclpy.init(context=context)
    robot = Robot(context, ns, path, period)
    executor = SingleThreadedExecutor(context=context)
    executor.add_node(robot)
    spin = threading.Thread(target=executor.spin, daemon=True)
    spin.start()
    rt = request_realtime(priority) if priority else None
    failure = None
    try:
        robot.run(seconds, wait_for_diagnostics=controller != "probe")
    except RuntimeError as exc:
        failure = str(exc)
    finally:
        if rt is not None:  # before anything is started again: children inherit the scheduling
            release_realtime()
        executor.shutdown(timeout_sec=2.0)
        spin.join(timeout=5.0)
        figures = robot.figures()
        robot.destroy_node()
        rclpy.try_shutdown(context=context)
        output = interrupt(process)
    if failure:
        figures["error"] = failure
        figures["output"] = output.strip().splitlines()[-5:]
    figures["realtime"] = {"robot": rt.describe() if rt else "not requested",
                           "deployment": next((line.split("real-time scheduling", 1)[1].strip(" :")
                                               for line in output.splitlines() if "real-time scheduling" in line),
                                              "not requested")}
    return figures


def interrupt(process) -> str:
    """SIGINT to a measured process, then its output (killed if it does not end)."""
    process.send_signal(2)
    try:
        return process.communicate(timeout=15)[0]
    except subprocess.TimeoutExpired:
        process.kill()
        return process.communicate()[0]


def measure_simulator(period: float, seconds: float, priority: int) -> dict:
    """The simulator node (hardware emulation, publishing at 1 / period, SCHED_FIFO `priority` when > 0) as
    its own process; the period error of its joint_states as they arrive here, and of their stamps."""
    import rclpy
    from rclpy.executors import SingleThreadedExecutor
    from rclpy.qos import QoSProfile, ReliabilityPolicy
    from sensor_msgs.msg import JointState

    from motionvl.deploy.scheduling import release_realtime, request_realtime

    ns = f"/bench_{uuid.uuid4().hex[:8]}"
    process = subprocess.Popen([sys.executable, "-m", "motionvl.ros.simulator_node", "--ros-args", "-r", f"__ns:={ns}",
                                "-p", "mode:=effort", "-p", f"publish_rate_hz:={1.0 / period}",
                                "-p", f"realtime_priority:={priority}"],
                               stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)
    context = rclpy.Context()
    rclpy.init(context=context)
    node = Node(f"bench_listener_{uuid.uuid4().hex[:6]}", namespace=ns, context=context)
    arrivals, stamps, measuring = [], [], threading.Event()

    def on_state(msg) -> None:
        if measuring.is_set():
            arrivals.append(time.monotonic())
            stamps.append(msg.header.stamp.sec + msg.header.stamp.nanosec * 1e-9)

    node.create_subscription(JointState, "joint_states", on_state,
                             QoSProfile(depth=1000, reliability=ReliabilityPolicy.RELIABLE))
    executor = SingleThreadedExecutor(context=context)
    executor.add_node(node)
    spin = threading.Thread(target=executor.spin, daemon=True)
    spin.start()
    rt = request_realtime(priority) if priority else None
    try:
        end = time.monotonic() + STARTUP_TIMEOUT_S
        while node.count_publishers(f"{ns}/joint_states") == 0 and time.monotonic() < end:
            time.sleep(0.05)
        time.sleep(1.0)  # past start-up
        measuring.set()
        time.sleep(seconds)
        measuring.clear()
    finally:
        if rt is not None:
            release_realtime()
        executor.shutdown(timeout_sec=2.0)
        spin.join(timeout=5.0)
        node.destroy_node()
        rclpy.try_shutdown(context=context)
        output = interrupt(process)
    a, t = np.asarray(arrivals), np.asarray(stamps)
    return {"period_error_ms": percentiles_ms(np.abs(np.diff(a) - period) if a.size > 1 else []),
            "stamp_step_error_ms": percentiles_ms(np.abs(np.diff(t) - period) if t.size > 1 else []),
            "states": int(a.size), "expected_states": int(round(seconds / period)),
            "realtime": {"robot": rt.describe() if rt else "not requested",
                         "simulator": next((line.split("real-time scheduling", 1)[1].strip(" :")
                                            for line in output.splitlines() if "real-time scheduling" in line),
                                           "not requested")}}


class Robot(Node):
    """The drives' side: joint states and IMU at the command rate on deadlines; records commands and stamps."""

    def __init__(self, context, namespace: str, path: str, period: float):
        from diagnostic_msgs.msg import DiagnosticArray
        from rclpy.qos import DurabilityPolicy, QoSProfile, ReliabilityPolicy
        from sensor_msgs.msg import Imu, JointState
        from std_msgs.msg import Float64MultiArray, Header

        from motionvl.deploy.mapping import JointMapping
        from motionvl.robot import load_robot_config
        from motionvl.ros.deployment_node import COMMAND_TYPES, DEFAULT_COMMAND_TOPICS, STATE_TOPIC

        super().__init__(f"bench_robot_{uuid.uuid4().hex[:6]}", namespace=namespace, context=context)
        self.robot = load_robot_config()
        self.mapping = JointMapping(self.robot)
        self.period = period
        self.lock = threading.Lock()
        self.published: dict = {}  # stamp ns -> monotonic publish time
        self.answers: list = []  # (stamp ns, arrival, mode)
        self.command_arrivals: list = []
        self.mode = None
        self.why = ""  # the controller's last transition and latched faults, for a controller that never ran
        self.diagnostics: dict = {}
        self.diagnostics_at = 0.0
        deep = QoSProfile(depth=1000, reliability=ReliabilityPolicy.RELIABLE)
        self.state_pub = self.create_publisher(JointState, STATE_TOPIC, 10)
        self.imu_pub = self.create_publisher(Imu, "imu/data", 10)
        self.create_subscription(COMMAND_TYPES[path], DEFAULT_COMMAND_TOPICS[path], self._on_command, deep)
        if path == "pd":  # a baseline from before motionvl/LowCommand sends the 60-value array here
            self.create_subscription(Float64MultiArray, "joint_drive_commands", self._on_command, deep)
        self.create_subscription(Header, "deployment/cycle", self._on_cycle, deep)
        self.create_subscription(DiagnosticArray, "/diagnostics", self._on_diagnostics, 10)
        self.status_qos = QoSProfile(depth=1, reliability=ReliabilityPolicy.RELIABLE,
                                     durability=DurabilityPolicy.TRANSIENT_LOCAL)
        self.status_sub = None  # subscribed once the controller's status publisher shows its type
        self.js = JointState(name=list(self.mapping.motor_names))
        self.js.position = [float(v) for v in self.mapping.to_motor_position(self.robot.default_pose)]
        self.js.velocity = [0.0] * self.robot.num_joints
        self.imu = Imu()
        self.imu.orientation.w = 1.0
        self.measuring = False
        self.answered_any = False
        self.stamp_ns = 10**9
        self.count = 0

    def _on_command(self, msg) -> None:
        if self.measuring:
            self.command_arrivals.append(time.monotonic())

    def _on_cycle(self, msg) -> None:
        now = time.monotonic()
        self.answered_any = True
        if self.measuring:
            self.answers.append((msg.stamp.sec * 10**9 + msg.stamp.nanosec, now, msg.frame_id.split(" ")[0]))

    def follow_status(self) -> bool:
        """Subscribe to deployment/status in the type its publisher speaks: motionvl/DeploymentStatus, or the
        std_msgs/String JSON of a controller from before the typed status (a baseline revision). One type
        only: a DDS participant holds one type per topic name. True once subscribed."""
        if self.status_sub is None:
            topic = self.resolve_topic_name("deployment/status")
            kinds = {i.topic_type for i in self.get_publishers_info_by_topic(topic)}
            if STATUS_TYPE in kinds:
                from motionvl.msg import DeploymentStatus

                self.status_sub = self.create_subscription(DeploymentStatus, topic, self._on_status, self.status_qos)
            elif LEGACY_STATUS_TYPE in kinds:
                from std_msgs.msg import String

                self.status_sub = self.create_subscription(String, topic, self._on_legacy_status, self.status_qos)
        return self.status_sub is not None

    def _on_status(self, msg) -> None:
        self.mode = msg.mode_name
        self._explain(msg.transition_from, msg.transition_to, msg.transition_why, list(msg.faults))

    def _explain(self, source, target, why, faults) -> None:
        self.why = "; ".join(filter(None, [f"{source} -> {target}: {why}" if target else "",
                                           f"faults: {', '.join(map(str, faults))}" if faults else ""]))

    def _on_legacy_status(self, msg) -> None:
        from motionvl.ros.records import json_record

        record = json_record(self, msg, "deployment/status")
        if record is not None:
            self.mode = record.get("mode")
            last = record.get("transition") if isinstance(record.get("transition"), dict) else {}
            faults = record.get("faults") if isinstance(record.get("faults"), list) else []
            self._explain(last.get("from"), last.get("to"), last.get("why"), faults)

    def _on_diagnostics(self, msg) -> None:
        for status in msg.status:
            if status.name.endswith("controller") and status.hardware_id == self.robot.name:
                self.diagnostics = {kv.key: kv.value for kv in status.values}
                self.diagnostics_at = time.monotonic()

    def run(self, seconds: float, wait_for_diagnostics: bool = True) -> None:
        """Publish on deadlines until RUN, then `seconds` more while measuring."""
        from motionvl.deploy.scheduling import DeadlineClock

        clock, stop = DeadlineClock(self.period), threading.Event()
        end, started = None, time.monotonic()
        while True:
            clock.wait(stop)
            if end is None and self.status_sub is None and self.count % STATUS_LOOK_EVERY == 0:
                self.follow_status()
            if self.mode == "RUN" and self.answered_any and end is None:
                self.measuring, end = True, time.monotonic() + seconds
            if end is not None and time.monotonic() >= end:
                self.measuring = False
                since = time.monotonic()  # then keep the stream up until the node reports from after the end
                while wait_for_diagnostics and self.diagnostics_at < since and time.monotonic() < since + 3.0:
                    clock.wait(stop)
                    self._publish_state()
                return
            if end is None and time.monotonic() - started > STARTUP_TIMEOUT_S:
                if self.mode == "RUN":
                    raise RuntimeError(f"the controller is in RUN but answered no state in {STARTUP_TIMEOUT_S:g} s")
                raise RuntimeError(f"the controller did not reach RUN in {STARTUP_TIMEOUT_S:g} s (mode {self.mode}"
                                   + (f"; {self.why})" if self.why else ")"))
            self._publish_state()

    def _publish_state(self) -> None:
        self.stamp_ns += int(round(self.period * 1e9))
        self.count += 1
        sec, nsec = divmod(self.stamp_ns, 10**9)
        noise = 1e-9 * (self.count % 2)  # a sensor's noise: no stream is bit-identical twice in a row
        self.imu.angular_velocity.z = noise
        self.js.velocity[0] = noise
        self.imu.header.stamp.sec, self.imu.header.stamp.nanosec = sec, nsec
        self.js.header.stamp.sec, self.js.header.stamp.nanosec = sec, nsec
        self.imu_pub.publish(self.imu)
        t = time.monotonic()
        self.state_pub.publish(self.js)
        if self.measuring:
            self.published[self.stamp_ns] = t

    def figures(self) -> dict:
        latency = [arrival - self.published[s] for s, arrival, _ in self.answers if s in self.published]
        answered = {s for s, _, _ in self.answers}
        arrivals = np.asarray(self.command_arrivals)
        error = np.abs(np.diff(arrivals) - self.period) if arrivals.size > 1 else []
        d = self.diagnostics

        def node(name):
            return {stat: _float(d.get(f"{name}_{stat}_ms")) for stat in ("p50", "p99", "max")}

        return {"end_to_end_ms": percentiles_ms(latency), "period_error_ms": percentiles_ms(error),
                "states": len(self.published), "lost": len(set(self.published) - answered),
                "node_latency_ms": node("latency"), "node_step_latency_ms": node("step_latency"),
                "node_period_error_ms": node("period_error"),
                "inference_ms": node("inference"), "overruns": d.get("overruns"),
                "late_cycles": d.get("late_cycles"), "faults": d.get("faults")}


def _float(value):
    try:
        return float(value)
    except (TypeError, ValueError):
        return None


# ---------------------------------------------------------------------- the minimal loop
def probe_main(argv=None) -> int:
    """The minimal controller (see the module docstring): `python -m motionvl.ros.deploy_bench probe ...`."""
    import argparse

    import onnxruntime as ort
    import rclpy
    from rclpy.executors import SingleThreadedExecutor
    from rclpy.qos import DurabilityPolicy, HistoryPolicy, QoSProfile, ReliabilityPolicy
    from sensor_msgs.msg import JointState
    from std_msgs.msg import Float64MultiArray, Header

    from motionvl.msg import DeploymentStatus, LowCommand

    from motionvl.deploy import DeployConfig
    from motionvl.deploy.scheduling import request_realtime
    from motionvl.robot import load_robot_config
    from motionvl.ros.deployment_node import COMMAND_TYPES, DEFAULT_COMMAND_TOPICS, STATE_TOPIC
    from motionvl.ros.messages import DriveCommandWriter

    parser = argparse.ArgumentParser(prog="deploy_bench probe")
    parser.add_argument("--namespace", required=True)
    parser.add_argument("--policy", required=True)
    parser.add_argument("--path", default="torque")
    parser.add_argument("--priority", type=int, default=0)
    args = parser.parse_args(argv)
    robot = load_robot_config()
    decimation = DeployConfig(path=args.path).decimation(robot)
    opts = ort.SessionOptions()
    opts.intra_op_num_threads = opts.inter_op_num_threads = 1
    session = ort.InferenceSession(args.policy, opts, providers=["CPUExecutionProvider"])
    name, width = session.get_inputs()[0].name, session.get_inputs()[0].shape[-1]
    obs = np.zeros((1, width), dtype=np.float32)
    kp, kd, effort, default, scales = robot.kp, robot.kd, robot.effort_limit, robot.default_pose, robot.action_scales
    J = robot.num_joints

    rclpy.init()
    rt = request_realtime(args.priority) if args.priority else None
    node = rclpy.create_node("deployment", namespace=args.namespace)
    reliable = QoSProfile(depth=1, reliability=ReliabilityPolicy.RELIABLE, history=HistoryPolicy.KEEP_LAST)
    command_pub = node.create_publisher(COMMAND_TYPES[args.path], DEFAULT_COMMAND_TOPICS[args.path], reliable)
    cycle_pub = node.create_publisher(Header, "deployment/cycle", reliable)
    status_pub = node.create_publisher(DeploymentStatus, "deployment/status", QoSProfile(
        depth=1, reliability=ReliabilityPolicy.RELIABLE, durability=DurabilityPolicy.TRANSIENT_LOCAL))
    state = {"count": 0, "target": default.copy()}
    out = Float64MultiArray()
    low = DriveCommandWriter(LowCommand, robot.joint_names)  # pd: the drives run the PD (identity hardware)
    zeros = np.zeros(J)

    def on_state(msg) -> None:
        q = np.asarray(msg.position, dtype=np.float64)[:J]
        dq = np.asarray(msg.velocity, dtype=np.float64)[:J]
        if state["count"] % decimation == 0:
            obs[0, :J] = q
            action = session.run(None, {name: obs})[0][0]
            state["target"] = default + scales * action
        state["count"] += 1
        if args.path == "pd":
            command_pub.publish(low.fill(state["target"], zeros, kp, kd, zeros))
        else:
            out.data = np.clip(kp * (state["target"] - q) - kd * dq, -effort, effort).tolist()
            command_pub.publish(out)
        cycle_pub.publish(Header(stamp=msg.header.stamp, frame_id="RUN"))

    node.create_subscription(JointState, STATE_TOPIC, on_state, reliable)
    status_pub.publish(DeploymentStatus(mode=DeploymentStatus.MODE_RUN, mode_name="RUN"))
    if rt is not None:
        print(f"real-time scheduling: {rt.describe()}", flush=True)
    executor = SingleThreadedExecutor()
    executor.add_node(node)
    try:
        executor.spin()
    except (KeyboardInterrupt, rclpy.executors.ExternalShutdownException):
        pass
    finally:
        node.destroy_node()
        rclpy.try_shutdown()
    return 0


if __name__ == "__main__":
    if sys.argv[1:2] == ["probe"]:
        sys.exit(probe_main(sys.argv[2:]))
    sys.exit(f"usage: python -m {__spec__.name} probe --namespace NS --policy FILE [--path torque|pd] [--priority N]")
