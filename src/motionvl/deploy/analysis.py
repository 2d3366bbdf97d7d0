"""`motionvl analyze`: what a deployment bag says (the paper's Fig. 3), without ROS.

    motionvl analyze BAG --out DIR [--robot-config YAML]
    motionvl analyze --compare BAG_A BAG_B --out DIR

Reads a bag of the deployment topics (`motionvl deploy-sim --record`, `deploy.launch.py
record:=true`, or a robot's) with `motionvl.bags.read_bag` and writes into DIR:
  joints.png    per joint, commanded target (drive-side PD) and measured position over time
  torques.png   per joint, measured torque (and the host-commanded torque) against the effort limits
  velocity.png  base velocity (odom, body frame) against the command, and the foot contact timeline
  timing.png    loop period and latency p50/p99 (diagnostics) with the mode changes
  metrics.json  tracking RMSE per joint, clipped commands, faults, falls, speeds, loop figures
  summary.md    the metrics and the figures
With --compare the two bags are overlaid (velocity, joints) and their metrics set side by side.
Joint states come from joint_states (joint space) or, in a robot's bag that has only the drives'
motor_states, from those; commands from low_command (motionvl/LowCommand) or joint_effort_commands.
Motor space (a hardware section) is mapped back to joint space with the robot config. Bags from before
the typed command (a 60-value Float64MultiArray on joint_drive_commands, joint_states in motor space)
read the same. Times are the bag's receive times, from the first message.
"""

from __future__ import annotations

import json
import math
from pathlib import Path

import numpy as np

from motionvl.deploy.commands import PD_FIELDS
from motionvl.deploy.mapping import JointMapping
from motionvl.deploy.modes import status_from_message
from motionvl.robot import RobotConfig, load_robot_config
from motionvl.sim.math import tilt_of

COMMAND_TOPICS = {"joint_drive_commands": "pd", "joint_effort_commands": "torque"}
"""The Float64MultiArray command topics: torques, and the drive commands of bags before motionvl/LowCommand."""
FALL_HEIGHT_M, FALL_TILT_RAD = 0.45, 1.0
"""A base lower than this, or tilted further, is a fall (SingleSim.upright's thresholds)."""
CONTACT_N = 5.0


class BagData:
    """The deployment topics of one bag as arrays in joint space (times in s from the bag's start)."""

    def __init__(self, bag: str | Path, robot: RobotConfig):
        from motionvl.bags import read_bag

        self.path = Path(bag)
        self.robot = robot
        mapping = JointMapping(robot)
        rows = {"js": [], "cmd": [], "odom": [], "cmd_vel": [], "status": [], "diag": [], "feet": []}
        motor_states: list = []  # the drives' states: used when the bag has no joint_states
        self.path_kind = None
        t0 = None
        for topic, msgtype, stamp, msg in read_bag(self.path):
            t0 = stamp if t0 is None else t0
            t = (stamp - t0) * 1e-9
            if msgtype == "sensor_msgs/msg/JointState" and topic.endswith(("joint_states", "motor_states")):
                order = self._order(list(msg.name), mapping)
                if order is None:
                    continue
                idx, motor = order
                pos, vel, eff = (np.asarray(v, float)[idx] for v in (msg.position, msg.velocity, msg.effort))
                if motor:
                    pos, vel, eff = mapping.from_motor_position(pos), mapping.from_motor_signed(vel), \
                        mapping.from_motor_signed(eff)
                (rows["js"] if topic.endswith("joint_states") else motor_states).append((t, pos, vel, eff))
            elif msgtype == "motionvl/msg/LowCommand":
                self.path_kind = "pd"
                rows["cmd"].append((t, self._low_command(msg, mapping)))
            elif msgtype == "std_msgs/msg/Float64MultiArray" and topic.rsplit("/", 1)[-1] in COMMAND_TOPICS:
                self.path_kind = COMMAND_TOPICS[topic.rsplit("/", 1)[-1]]
                rows["cmd"].append((t, self._command(np.asarray(msg.data, float), mapping)))
            elif msgtype == "std_msgs/msg/Float64MultiArray" and topic.endswith("foot_forces"):
                rows["feet"].append((t, np.asarray(msg.data, float)))
            elif msgtype == "nav_msgs/msg/Odometry":
                p, o, v = msg.pose.pose.position, msg.pose.pose.orientation, msg.twist.twist
                rows["odom"].append((t, p.x, p.y, p.z, o.w, o.x, o.y, o.z, v.linear.x, v.linear.y, v.angular.z))
            elif msgtype == "geometry_msgs/msg/Twist":
                rows["cmd_vel"].append((t, msg.linear.x, msg.linear.y, msg.angular.z))
            elif msgtype == "std_msgs/msg/String" and topic.endswith("deployment/status"):  # bags before the types
                try:
                    rows["status"].append((t, json.loads(msg.data)))
                except ValueError:
                    pass
            elif msgtype == "motionvl/msg/DeploymentStatus":
                try:
                    rows["status"].append((t, status_from_message(msg)))
                except ValueError:
                    pass
            elif msgtype == "diagnostic_msgs/msg/DiagnosticArray":
                for status in msg.status:
                    if status.name.endswith("controller"):
                        rows["diag"].append((t, {kv.key: kv.value for kv in status.values}))
        rows["js"] = rows["js"] or motor_states
        self.rows = rows
        self.duration = max([r[0] for rs in rows.values() for r in rs] or [0.0])

    def _order(self, names: list, mapping: JointMapping):
        """(index into the message for each joint/motor, motor space?) or None for other joints."""
        for wanted, motor in ((list(self.robot.joint_names), False), (list(mapping.motor_names), True)):
            if all(n in names for n in wanted):
                return np.array([names.index(n) for n in wanted]), motor and not mapping.identity
        return None

    @staticmethod
    def _low_command(msg, mapping: JointMapping) -> dict:
        where = {str(n): i for i, n in enumerate(msg.motor_names)}
        drives = [msg.motor_cmd[where[n]] for n in mapping.motor_names]
        f = {k: np.array([getattr(d, k) for d in drives], dtype=float) for k in ("q", "kp", "kd")}
        return {"q": mapping.from_motor_position(f["q"]), "kp": mapping.from_motor_unsigned(f["kp"]),
                "kd": mapping.from_motor_unsigned(f["kd"])}

    def _command(self, data: np.ndarray, mapping: JointMapping) -> dict:
        J = self.robot.num_joints
        if data.size == J * len(PD_FIELDS):
            f = dict(zip(PD_FIELDS, data.reshape(J, len(PD_FIELDS)).T))
            return {"q": mapping.from_motor_position(f["q"]), "kp": mapping.from_motor_unsigned(f["kp"]),
                    "kd": mapping.from_motor_unsigned(f["kd"])}
        return {"tau": mapping.from_motor_signed(data)}

    # ------------------------------------------------------------------ arrays
    def joint_states(self):
        js = self.rows["js"]
        if not js:
            return np.zeros(0), np.zeros((0, self.robot.num_joints)), np.zeros((0, self.robot.num_joints))
        return np.array([r[0] for r in js]), np.array([r[1] for r in js]), np.array([r[3] for r in js])

    def commands(self, key: str):
        rows = [(t, c[key]) for t, c in self.rows["cmd"] if key in c]
        if not rows:
            return np.zeros(0), np.zeros((0, self.robot.num_joints))
        return np.array([r[0] for r in rows]), np.array([r[1] for r in rows])

    def odom(self) -> np.ndarray:
        return np.array(self.rows["odom"]) if self.rows["odom"] else np.zeros((0, 11))

    def mode_changes(self) -> list:
        out, last = [], None
        for t, s in self.rows["status"]:
            if s.get("mode") != last:
                out.append((t, s.get("mode"), (s.get("transition") or {}).get("why")))
                last = s.get("mode")
        return out


def metrics(data: BagData) -> dict:
    """The numbers of one bag (JSON-able)."""
    robot = data.robot
    t_js, q, effort = data.joint_states()
    t_cmd, q_cmd = data.commands("q")
    rmse = {}
    if len(t_cmd) and len(t_js) > 1:
        measured = np.stack([np.interp(t_cmd, t_js, q[:, j]) for j in range(robot.num_joints)], axis=1)
        running = [k for k, (t, c) in enumerate((t, c) for t, c in data.rows["cmd"] if "q" in c)
                   if np.any(c["kp"] > 0)]
        if running:
            err = measured[running] - q_cmd[running]
            rmse = {n: round(float(np.sqrt(np.mean(err[:, j] ** 2))), 5) for j, n in enumerate(robot.joint_names)}
    odom = data.odom()
    falls, fell_at = 0, None
    if len(odom):
        tilt = tilt_of(odom[:, 4:8])
        down = (odom[:, 3] < FALL_HEIGHT_M) | (tilt > FALL_TILT_RAD)
        falls = int(np.sum(down[1:] & ~down[:-1]) + (1 if down[0] else 0))
        fell_at = float(odom[np.argmax(down), 0]) if down.any() else None
    last_diag = data.rows["diag"][-1][1] if data.rows["diag"] else {}
    statuses = [s for _, s in data.rows["status"]]
    faults = sorted({f for s in statuses for f in s.get("faults", [])})
    over_limit = int(np.sum(np.abs(effort) > robot.effort_limit * (1 + 1e-9))) if len(effort) else 0
    cmd_vel = np.array(data.rows["cmd_vel"]) if data.rows["cmd_vel"] else np.zeros((0, 4))
    run = [(t, m) for t, m, _ in data.mode_changes()]
    return {
        "bag": str(data.path), "path": data.path_kind, "duration_s": round(data.duration, 3),
        "joint_states": len(t_js), "commands": len(data.rows["cmd"]),
        "tracking_rmse_rad": rmse, "tracking_rmse_mean_rad": round(float(np.mean(list(rmse.values()))), 5) if rmse else None,
        "clipped_commands": {k[len("clips_"):]: _number(v) for k, v in last_diag.items() if k.startswith("clips_")},
        "torque_samples_over_limit": over_limit, "faults": faults, "falls": falls, "fell_at_s": fell_at,
        "mode_changes": [f"{t:.2f}s {m}" for t, m in run],
        "mean_forward_speed_mps": round(float(np.mean(odom[:, 8])), 4) if len(odom) else None,
        "mean_command_vx_mps": round(float(np.mean(cmd_vel[:, 1])), 4) if len(cmd_vel) else None,
        "loop": {k: _number(v) for k, v in last_diag.items() if k.endswith("_ms") or k in ("overruns", "cycles",
                                                                                            "lost_cycles", "realtime")},
    }


def _number(value: str):
    try:
        return int(value)
    except ValueError:
        try:
            return float(value)
        except ValueError:
            return value


# ---------------------------------------------------------------------- figures
def _grid(plt, robot: RobotConfig, title: str):
    cols = 3
    rows = math.ceil(robot.num_joints / cols)
    fig, axes = plt.subplots(rows, cols, figsize=(13, 2.2 * rows), sharex=True)
    fig.suptitle(title)
    return fig, axes.reshape(-1)


def _mark_modes(ax, data: BagData) -> None:
    for t, mode, _ in data.mode_changes():
        ax.axvline(t, color="grey", lw=0.6, ls=":")
        ax.text(t, 1.0, mode, transform=ax.get_xaxis_transform(), fontsize=6, rotation=90, va="top")


def plot_bag(data: BagData, out: Path) -> list:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    robot, files = data.robot, []
    t_js, q, effort = data.joint_states()
    t_cmd, q_cmd = data.commands("q")
    t_tau, tau = data.commands("tau")
    fig, axes = _grid(plt, robot, f"joint positions: commanded vs measured ({data.path.name})")
    for j, ax in enumerate(axes[:robot.num_joints]):
        ax.plot(t_js, q[:, j], lw=0.8, label="measured")
        if len(t_cmd):
            ax.step(t_cmd, q_cmd[:, j], where="post", lw=0.8, label="commanded")
        ax.axhline(robot.lower[j], color="r", lw=0.5)
        ax.axhline(robot.upper[j], color="r", lw=0.5)
        ax.set_title(robot.joint_names[j], fontsize=8)
    axes[0].legend(fontsize=6)
    files.append(_save(fig, out / "joints.png", plt))

    fig, axes = _grid(plt, robot, "joint torques against the effort limits (N m)")
    for j, ax in enumerate(axes[:robot.num_joints]):
        ax.plot(t_js, effort[:, j], lw=0.8, label="measured")
        if len(t_tau):
            ax.plot(t_tau, tau[:, j], lw=0.6, label="commanded")
        ax.axhline(robot.effort_limit[j], color="r", lw=0.5)
        ax.axhline(-robot.effort_limit[j], color="r", lw=0.5)
        ax.set_title(robot.joint_names[j], fontsize=8)
    axes[0].legend(fontsize=6)
    files.append(_save(fig, out / "torques.png", plt))

    odom = data.odom()
    cmd_vel = np.array(data.rows["cmd_vel"]) if data.rows["cmd_vel"] else np.zeros((0, 4))
    fig, axes = plt.subplots(4, 1, figsize=(11, 8), sharex=True)
    for ax, col, ccol, label in ((axes[0], 8, 1, "vx (m/s)"), (axes[1], 9, 2, "vy (m/s)"), (axes[2], 10, 3, "yaw rate (rad/s)")):
        if len(odom):
            ax.plot(odom[:, 0], odom[:, col], lw=0.8, label="base (odom)")
        if len(cmd_vel):
            ax.step(cmd_vel[:, 0], cmd_vel[:, ccol], where="post", lw=0.8, label="command")
        ax.set_ylabel(label)
        _mark_modes(ax, data)
    axes[0].legend(fontsize=7)
    feet = data.rows["feet"]
    if feet:
        t_f = np.array([r[0] for r in feet])
        force = np.array([r[1] for r in feet])
        for k, side in enumerate(("left", "right")):
            contact = force[:, k] > CONTACT_N
            axes[3].fill_between(t_f, k, k + 0.8 * contact, step="post", label=side)
        axes[3].set_yticks([0.4, 1.4], ["left", "right"])
        axes[3].set_ylabel("foot contact")
    else:
        axes[3].text(0.5, 0.5, "no foot_forces topic in the bag", ha="center", transform=axes[3].transAxes)
    axes[3].set_xlabel("time (s)")
    files.append(_save(fig, out / "velocity.png", plt))

    diag = data.rows["diag"]
    fig, axes = plt.subplots(2, 1, figsize=(11, 5), sharex=True)
    if diag:
        t_d = [t for t, _ in diag]
        for ax, what in ((axes[0], "period"), (axes[1], "latency")):
            for stat in ("p50", "p99", "max"):
                ax.plot(t_d, [_float(d.get(f"{what}_{stat}_ms")) for _, d in diag], lw=0.8, label=stat)
            ax.set_ylabel(f"{what} (ms)")
            ax.legend(fontsize=7)
            _mark_modes(ax, data)
    axes[1].set_xlabel("time (s)")
    files.append(_save(fig, out / "timing.png", plt))
    return files


def _float(value) -> float:
    try:
        return float(value)
    except (TypeError, ValueError):
        return float("nan")


def _save(fig, path: Path, plt) -> Path:
    fig.tight_layout()
    fig.savefig(path, dpi=90)
    plt.close(fig)
    return path


def plot_compare(a: BagData, b: BagData, out: Path) -> list:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    fig, axes = plt.subplots(2, 1, figsize=(11, 6), sharex=True)
    for data, style in ((a, "-"), (b, "--")):
        odom = data.odom()
        if len(odom):
            axes[0].plot(odom[:, 0], odom[:, 8], style, lw=0.8, label=data.path.name)
            axes[1].plot(odom[:, 0], odom[:, 1], style, lw=0.8, label=data.path.name)
    axes[0].set_ylabel("vx (m/s)")
    axes[1].set_ylabel("x (m)")
    axes[1].set_xlabel("time (s)")
    axes[0].legend(fontsize=7)
    files = [_save(fig, out / "compare_velocity.png", plt)]
    fig, axes = _grid(plt, a.robot, f"measured joint positions: {a.path.name} vs {b.path.name}")
    for data, style in ((a, "-"), (b, "--")):
        t, q, _ = data.joint_states()
        for j, ax in enumerate(axes[:a.robot.num_joints]):
            ax.plot(t, q[:, j], style, lw=0.7, label=data.path.name)
            ax.set_title(a.robot.joint_names[j], fontsize=8)
    axes[0].legend(fontsize=6)
    files.append(_save(fig, out / "compare_joints.png", plt))
    return files


# ---------------------------------------------------------------------- CLI
def add_arguments(parser) -> None:
    parser.add_argument("bag", nargs="?", help="a bag directory (or .mcap / .db3)")
    parser.add_argument("--compare", nargs=2, metavar=("BAG_A", "BAG_B"), help="overlay two runs")
    parser.add_argument("--out", required=True, help="output directory (PNGs, metrics.json, summary.md)")
    parser.add_argument("--robot-config", default="", help="robot YAML of the run (default: the package's)")


def run(args) -> int:
    import sys

    from motionvl.bags import BagError

    if bool(args.bag) == bool(args.compare):
        print("motionvl analyze: give one BAG, or --compare BAG_A BAG_B", file=sys.stderr)
        return 2
    robot = load_robot_config(args.robot_config or None)
    out = Path(args.out)
    out.mkdir(parents=True, exist_ok=True)
    try:
        bags = [BagData(p, robot) for p in ([args.bag] if args.bag else args.compare)]
    except BagError as exc:
        print(f"motionvl analyze: {exc}", file=sys.stderr)
        return 1
    if args.bag:
        result = metrics(bags[0])
        figures = plot_bag(bags[0], out)
    else:
        result = {"a": metrics(bags[0]), "b": metrics(bags[1])}
        figures = plot_compare(*bags, out)
    (out / "metrics.json").write_text(json.dumps(result, indent=2) + "\n")
    (out / "summary.md").write_text(summary(result, figures, compare=not args.bag))
    print(json.dumps({"out": str(out), "figures": [f.name for f in figures],
                      **({"falls": result["falls"], "faults": result["faults"]} if args.bag else {})}))
    return 0


def summary(result: dict, figures: list, compare: bool) -> str:
    lines = ["# Deployment run" + (" comparison" if compare else ""), ""]
    runs = [("", result)] if not compare else [("A: ", result["a"]), ("B: ", result["b"])]
    for prefix, m in runs:
        lines += [f"## {prefix}{m['bag']}", "", "| metric | value |", "|---|---|"]
        for key in ("path", "duration_s", "commands", "tracking_rmse_mean_rad", "falls", "fell_at_s",
                    "mean_forward_speed_mps", "mean_command_vx_mps", "torque_samples_over_limit"):
            lines.append(f"| {key} | {m[key]} |")
        lines.append(f"| clipped_commands | {m['clipped_commands']} |")
        lines.append(f"| faults | {'; '.join(m['faults']) or 'none'} |")
        lines.append(f"| mode changes | {', '.join(m['mode_changes'])} |")
        lines.append("")
    lines += [f"![{f.stem}]({f.name})" for f in figures]
    return "\n".join(lines) + "\n"
