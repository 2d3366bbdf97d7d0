"""The search's playback and pairwise judge on the ROS graph: every candidate is played on the simulator
node by the deployment node (simulation mode), filmed by camera_renderer and judged by vlm_critic, the
path a robot uses. Not a node: the adapters run on a host node (the orchestrator), called from the
search's thread while the host's executor delivers the answers.

`GraphPlayback` is a motionvl.search Playback that judges (`judges`); `GraphCritic` is the vlm_critic node
as the search's critic (its comparisons; its critiques come with the playbacks). Sequence per candidate,
each step bounded by `step_timeout_s` (a node missing or a step refused raises PlaybackError naming it:
that candidate's playback fails with the reason in the ledger, the search goes on):

  1  deployment ~/set_mode/damp
  2  simulator ~/reset: the standing pose, in the gantry (as the in-process playback starts); a simulator
     held since the last playback (`hold_until_reset`) steps and publishes from here; its answer names the
     simulated time of the reset
  3  deployment ~/load_policy with the candidate's ONNX file (the contract check); then, once the deployment node's /diagnostics show it
     has taken a joint state and an IMU reading stamped at or after the reset (so no state of the last
     candidate can reach its checks any more: an older one is dropped as out of order), ~/rearm
     (allow_rearm: a simulation-only graph) and a status without latched faults: the candidate is armed
     there, and its faults are those first seen after that status; ~/set_mode/passive
  4  cmd_vel at the playback's command from here on (COMMAND_PUBLISH_HZ); ~/set_mode/stand; the gantry
     lets go when the ramp completes; motionvl.deploy.playback.SETTLE_S of simulated time on the ground
  5  ~/set_mode/run; rollout/boundary START; `seconds` of simulated time in RUN (less when a fault ends
     it); rollout/boundary END; ~/set_mode/damp; simulator ~/hold (nothing runs between playbacks)
  6  (asked to critique) a Critique goal to vlm_critic naming this rollout's id (and r*'s feedback): its
     result is the rollout's feedback; a goal unanswered within critic_timeout_s is cancelled

Measured as the in-process playback measures it: the faults latched on deployment/status, the share of
clipped commands (the controller's clip counters on /diagnostics over the sequence, per joint and policy
step), and distance and falls from the rollout, recorded from joint_states, odom and camera/image_raw with
the collector vlm_critic uses (motionvl.critic.rollouts).

Host topics: publishes cmd_vel (Twist) and rollout/boundary (RolloutBoundary); subscribes deployment/status
(DeploymentStatus), /diagnostics, joint_states, odom and camera/image_raw, each through the host's
motionvl.ros.inbox (a bad message is counted, never fatal). Calls deployment/{set_mode/*, load_policy,
rearm} and simulator/{reset, hold}; sends vlm_critic/critique and vlm_critic/compare goals (motionvl/action/
Critique, Compare), whose results the search gets as the dicts it records (a result that does not decode
is an invalid answer saying why).
"""

from __future__ import annotations

import json
import math
import re
import shutil
import threading
import time
import uuid
from pathlib import Path

from diagnostic_msgs.msg import DiagnosticArray
from geometry_msgs.msg import Twist
from nav_msgs.msg import Odometry
from rclpy.qos import DurabilityPolicy, HistoryPolicy, QoSProfile, ReliabilityPolicy, qos_profile_sensor_data
from sensor_msgs.msg import Image, JointState
from action_msgs.msg import GoalStatus
from std_srvs.srv import Trigger

from motionvl.critic.rollouts import Boundary, CollectLimits, RolloutCollector
from motionvl.deploy.mapping import JointMapping
from motionvl.action import Compare, Critique
from motionvl.msg import DeploymentStatus, RolloutBoundary
from motionvl.ros.goals import ActionClient, goal_result
from motionvl.ros.inbox import Inbox
from motionvl.ros.messages import (BadMessage, boundary_msg, compare_goal, comparison_from_msg, critique_goal,
                                   deployment_status_from_msg, feedback_from_msg)
from motionvl.search.config import PlaybackConfig
from motionvl.search.playback import SUMMARY_FILE, CritiqueRequest, PlaybackResult, clipped_share, deployment_fault
from motionvl.srv import LoadPolicy
from motionvl.task import DEFAULT_COMMAND

COMMAND_PUBLISH_HZ = 10.0
RETRY_PERIOD_S = 0.1
MODES = ("damp", "passive", "stand", "run")

COMMAND_QOS = QoSProfile(depth=1, reliability=ReliabilityPolicy.RELIABLE, history=HistoryPolicy.KEEP_LAST)
STATE_QOS = QoSProfile(depth=100, reliability=ReliabilityPolicy.RELIABLE, history=HistoryPolicy.KEEP_LAST)
REQUEST_QOS = QoSProfile(depth=10, reliability=ReliabilityPolicy.RELIABLE, history=HistoryPolicy.KEEP_LAST)
# the deployment node publishes a status per transition, several within a cycle or two: a queue deep enough that
# the executor takes each one (the node's latched history of one serves a late joiner)
STATUS_QOS = QoSProfile(depth=50, reliability=ReliabilityPolicy.RELIABLE, history=HistoryPolicy.KEEP_LAST,
                        durability=DurabilityPolicy.TRANSIENT_LOCAL)


class PlaybackError(RuntimeError):
    """A step of the graph playback failed (a node missing, a request refused, a timeout); the message says which."""


class GraphPlayback:
    """The deployment node plays a candidate on the simulator node (see the module docstring).

    Args:
        node: the host node (its executor must spin while play() runs on another thread).
        cfg: the playback's length and frame interval (the search's PlaybackConfig).
        robot: the robot config (the rollout's trajectory is rebuilt with its model).
        terrain: the simulator's floor (a TerrainConfig; default flat): foot contacts are found against it.
        deployment, simulator, critic: the three nodes' names (relative: resolved in the host's namespace).
        step_timeout_s: the longest one step may take (a service answer, the STAND ramp, a feedback).
        critic_timeout_s: how long to wait for vlm_critic's answer to one goal (a VLM may be slow).
    """

    name = "deployment node on the simulator node (ROS graph)"
    judges = True

    def __init__(self, node, cfg: PlaybackConfig | None = None, robot=None, *, terrain=None, deployment: str = "deployment",
                 simulator: str = "simulator", critic: str = "vlm_critic", step_timeout_s: float = 15.0,
                 critic_timeout_s: float = 600.0):
        from motionvl.robot import load_robot_config
        from motionvl.sim.model import TerrainConfig, build_model, single_floor

        self.node, self.cfg = node, cfg or PlaybackConfig()
        self.robot = robot or load_robot_config()
        self.mapping = JointMapping(self.robot)
        self.model = build_model(self.robot, single_floor(terrain or TerrainConfig()))
        self.deployment, self.simulator, self.critic = deployment, simulator, critic
        self.step_timeout_s, self.critic_timeout_s = float(step_timeout_s), float(critic_timeout_s)
        self.collector = RolloutCollector(CollectLimits(frame_interval_s=self.cfg.frame_interval_s))
        self._changed = threading.Condition()
        self._status: dict | None = None
        self._statuses: list = []  # every deployment status since the current sequence began
        self._diagnostics: tuple | None = None  # (wall time received, {key: value})
        self._sim_time: float | None = None
        self._frames_wanted = self._commanding = False
        self._command = Twist()

        self.mode_clients = {m: node.create_client(Trigger, f"{deployment}/set_mode/{m}") for m in MODES}
        self.load_client = node.create_client(LoadPolicy, f"{deployment}/load_policy")
        self.rearm_client = node.create_client(Trigger, f"{deployment}/rearm")
        self.reset_client = node.create_client(Trigger, f"{simulator}/reset")
        self.hold_client = node.create_client(Trigger, f"{simulator}/hold")
        self.cmd_pub = node.create_publisher(Twist, "cmd_vel", COMMAND_QOS)
        self.boundary_pub = node.create_publisher(RolloutBoundary, "rollout/boundary", REQUEST_QOS)
        group = getattr(node, "action_callbacks", None)  # the answers beside the executor's other callbacks
        self.critique_client = ActionClient(node, Critique, f"{critic}/critique", callback_group=group)
        self.compare_client = ActionClient(node, Compare, f"{critic}/compare", callback_group=group)
        inbox = self.inbox = getattr(node, "inbox", None) or Inbox(node)
        inbox.subscribe(DeploymentStatus, f"{deployment}/status", self._on_status, STATUS_QOS)
        inbox.subscribe(DiagnosticArray, "/diagnostics", self._on_diagnostics, REQUEST_QOS)
        inbox.subscribe(JointState, "joint_states", self._on_joint_state, STATE_QOS)
        inbox.subscribe(Odometry, "odom", self._on_odom, STATE_QOS)
        inbox.subscribe(Image, "camera/image_raw", self._on_image, qos_profile_sensor_data)

    # ------------------------------------------------------------------ graph input
    def _notify(self) -> None:
        with self._changed:
            self._changed.notify_all()

    def _on_status(self, msg: DeploymentStatus) -> None:
        status = deployment_status_from_msg(msg)
        with self._changed:
            self._status = status
            self._statuses.append(status)
            self._changed.notify_all()

    def _on_diagnostics(self, msg: DiagnosticArray) -> None:
        mine = f"{self.deployment.rsplit('/', 1)[-1]}: controller"
        for status in msg.status:
            if status.name == mine:
                with self._changed:
                    self._diagnostics = (time.monotonic(), {kv.key: kv.value for kv in status.values})
                    self._changed.notify_all()

    def _on_joint_state(self, msg: JointState) -> None:
        q = self.mapping.joint_positions(msg.name, msg.position)
        if q is None or not all(math.isfinite(v) for v in q):
            raise BadMessage("not one finite position for every joint, each named once")
        self.collector.add_joint_state(_stamp(msg.header.stamp), q.tolist())

    def _on_odom(self, msg: Odometry) -> None:
        p, o = msg.pose.pose.position, msg.pose.pose.orientation
        if not all(math.isfinite(v) for v in (p.x, p.y, p.z, o.w, o.x, o.y, o.z)):
            raise BadMessage("a pose that is not finite")
        t = _stamp(msg.header.stamp)
        self.collector.add_odometry(t, (p.x, p.y, p.z, o.w, o.x, o.y, o.z))
        with self._changed:
            self._sim_time = t
            self._changed.notify_all()

    def _on_image(self, msg: Image) -> None:
        if self._frames_wanted:
            from motionvl.ros.vlm_critic_node import image_to_rgb

            self.collector.add_frame(_stamp(msg.header.stamp), lambda: image_to_rgb(msg))

    # ------------------------------------------------------------------ waiting and calling
    def _wait(self, predicate, timeout_s: float, what: str):
        """predicate()'s first true value (checked as the graph's input arrives), publishing the velocity command
        meanwhile; PlaybackError(`what`) when `timeout_s` passes first."""
        end = time.monotonic() + timeout_s
        period = 1.0 / COMMAND_PUBLISH_HZ
        next_command = time.monotonic()
        while True:
            if self._commanding and time.monotonic() >= next_command:
                self.cmd_pub.publish(self._command)
                next_command = time.monotonic() + period
            with self._changed:
                value = predicate()
                if value:
                    return value
                now = time.monotonic()
                if now >= end:
                    raise PlaybackError(f"{what} within {timeout_s:g} s")
                self._changed.wait(min(end - now, period))  # at most a command period: time-based predicates too

    def _call(self, client, request, what: str):
        """The answer of one service call; PlaybackError when its server is missing or silent."""
        if not client.wait_for_service(timeout_sec=self.step_timeout_s):
            raise PlaybackError(f"{what}: no {client.srv_name} on the graph within {self.step_timeout_s:g} s "
                                "(is the node running?)")
        done = threading.Event()
        future = client.call_async(request)
        future.add_done_callback(lambda _: (done.set(), self._notify()))
        self._wait(done.is_set, self.step_timeout_s, f"{what}: {client.srv_name} did not answer")
        if future.exception() is not None:
            raise PlaybackError(f"{what}: {client.srv_name} failed: {future.exception()}")
        return future.result()

    def _trigger(self, client, what: str, retry_until_s: float = 0.0) -> str:
        """Call a Trigger service; a refusal raises PlaybackError with its reason (after retrying for
        `retry_until_s`: a request refused while the state stream catches up, e.g. right after a reset)."""
        end = time.monotonic() + retry_until_s
        while True:
            answer = self._call(client, Trigger.Request(), what)
            if answer.success:
                return answer.message
            if time.monotonic() >= end:
                raise PlaybackError(f"{what} refused: {answer.message}")
            again = time.monotonic() + RETRY_PERIOD_S
            self._wait(lambda again=again: time.monotonic() >= again, 1.0 + RETRY_PERIOD_S, what)

    def _statuses_from_clean(self) -> bool:
        """(Under self._changed) True once the newest status has no latched fault, keeping only it."""
        if self._status is None or _faults(self._status):
            return False
        self._statuses = [self._status]
        return True

    def _reset(self) -> float:
        """Reset the simulator; the simulated time of the reset (from its answer)."""
        answer = self._trigger(self.reset_client, "simulator ~/reset")
        found = re.search(r"\bt=(-?[0-9.]+) s", answer)
        if found is None:
            raise PlaybackError(f"simulator ~/reset answered without the time of the reset: {answer!r}")
        return float(found.group(1))

    def _state_after(self, stamp: float) -> dict:
        """The deployment node's first /diagnostics showing it has taken a joint state and an IMU reading stamped at
        or after `stamp` (simulated time): {state_stamp, imu_stamp}."""
        def taken():
            _, values = self._diagnostics or (0.0, {})
            stamps = {k: _float(values.get(k)) for k in ("state_stamp", "imu_stamp")}
            return stamps if all(v is not None and v >= stamp - 1e-9 for v in stamps.values()) else None
        return self._wait(taken, self.step_timeout_s, f"the deployment node took no state of the simulator's reset "
                                                       f"at t={stamp:.3f} s (its /diagnostics)")

    def _arm(self, reset_at: float) -> dict:
        """Re-arm the deployment node on the state of the reset (see the module docstring, step 3); what it was
        armed on: {reset_at_s, state_stamp, imu_stamp, rearm, armed_cycle}."""
        stamps = self._state_after(reset_at)
        with self._changed:
            before = (self._status or {}).get("cycle") or 0
        message = self._trigger(self.rearm_client, "deployment ~/rearm", retry_until_s=self.step_timeout_s)
        if message.startswith("re-armed"):  # faults were latched: armed at the status of this re-arm, not before
            def rearmed() -> bool:
                t = (self._status or {}).get("transition") or {}
                if str(t.get("why", "")).startswith("re-armed") and (t.get("cycle") or 0) >= before:
                    return self._statuses_from_clean()
                return False
            self._wait(rearmed, self.step_timeout_s, "no status of the deployment node's re-arm without latched faults")
        else:  # nothing was latched when the node took the reset's state: any clean status stands
            self._wait(self._statuses_from_clean, self.step_timeout_s, "the deployment node's status still shows "
                                                                        "latched faults after ~/rearm")
        with self._changed:
            armed = self._statuses[0].get("cycle")
        return {"reset_at_s": reset_at, **stamps, "rearm": message, "armed_cycle": armed}

    def _clip_counters(self, after: float) -> dict | None:
        """The controller's clip counters and policy steps from the first /diagnostics received after `after`
        (monotonic) in DAMP, None when none comes within step_timeout_s (the share is then unknown)."""
        def damping():
            received, values = self._diagnostics or (0.0, {})
            return self._diagnostics if received > after and values.get("mode") == "DAMP" else None
        try:
            _, values = self._wait(damping, self.step_timeout_s, "no /diagnostics from the deployment node")
        except PlaybackError:
            return None
        return {k: int(values.get(k, 0)) for k in ("clips_target", "clips_torque", "policy_steps")}

    # ------------------------------------------------------------------ the playback
    def play(self, candidate_id: str, policy_path: str | Path, out_dir: str | Path, render: bool = True,
             critique: CritiqueRequest | None = None, command=DEFAULT_COMMAND, terrain: str = "flat",
             terrain_level: int | None = None) -> PlaybackResult:
        """`command`: the task's velocity command. The floor is the simulator node's (its `terrain` parameter,
        which the graph sets from the task): `terrain` and `terrain_level` are only recorded."""
        out_dir = Path(out_dir)
        out_dir.mkdir(parents=True, exist_ok=True)
        policy_path = str(Path(policy_path).resolve())
        cfg, command = self.cfg, [float(c) for c in command]
        rollout_id = f"{candidate_id}@{uuid.uuid4().hex[:8]}"
        self._command = Twist()
        self._command.linear.x, self._command.linear.y, self._command.angular.z = command
        self._commanding, self._frames_wanted = False, bool(render)
        step = self.step_timeout_s
        try:
            self._trigger(self.mode_clients["damp"], "deployment ~/set_mode/damp")
            before = self._clip_counters(time.monotonic())
            reset_at = self._reset()  # a held simulator runs from here
            self._wait(lambda: self._sim_time is not None, step, "no odom from the simulator")
            answer = self._call(self.load_client, LoadPolicy.Request(path=policy_path), "deployment ~/load_policy")
            if not answer.success:
                raise PlaybackError(f"deployment ~/load_policy refused: {answer.message}")
            # this candidate's faults and transitions: from the status that armed it on the reset's state
            armed = self._arm(reset_at)
            self._trigger(self.mode_clients["passive"], "deployment ~/set_mode/passive")
            self._commanding = True
            self._trigger(self.mode_clients["stand"], "deployment ~/set_mode/stand", retry_until_s=step)
            self._wait(lambda: (self._status or {}).get("stand_complete") or _faults(self._status), step,
                       "the deployment node's STAND ramp did not complete")
            from motionvl.deploy.playback import SETTLE_S

            settled = self._sim_time + SETTLE_S
            self._wait(lambda: self._sim_time >= settled or _faults(self._status), step,
                       "the simulator did not advance (no odom)")
            if critique is not None:  # the critic must hear the rollout's start; without one the playback still counts
                try:
                    self._wait(lambda: self.boundary_pub.get_subscription_count() > 0, step, "no vlm_critic")
                except PlaybackError:
                    pass
            run = self._call(self.mode_clients["run"], Trigger.Request(), "deployment ~/set_mode/run")
            started_at = None
            if run.success:
                self._wait(lambda: (self._status or {}).get("mode") in ("RUN", "DAMP"), step,
                           "the deployment node's status did not report RUN")
                started_at = self._sim_time
                boundary = Boundary("start", critique.task if critique else "", rollout_id, tuple(command))
                self.collector.start(boundary)
                self._publish_boundary(boundary)
                self._wait(lambda: self._sim_time - started_at >= cfg.seconds
                           or (self._status or {}).get("mode") != "RUN",
                           cfg.seconds * 4 + step, f"{cfg.seconds:g} s of RUN (simulated time) did not pass")
                end = Boundary("end", critique.task if critique else "", rollout_id, tuple(command))
                self._publish_boundary(end)
                collected, _ = self.collector.end(end)
            self._commanding = False
            self._trigger(self.mode_clients["damp"], "deployment ~/set_mode/damp")
            after = self._clip_counters(time.monotonic())
            self._trigger(self.hold_client, "simulator ~/hold")  # the graph idles until the next playback
        except PlaybackError:
            for client in (self.mode_clients["damp"], self.hold_client):  # damped and held, without waiting
                if client.service_is_ready():
                    client.call_async(Trigger.Request())
            raise
        finally:
            self._commanding, self._frames_wanted = False, False
        with self._changed:
            statuses = list(self._statuses)
        rollout = collected.rollout(self.model, self.robot) if run.success else None
        traj = rollout.trajectory if rollout is not None else None
        frames, times = (rollout.frames, rollout.times) if rollout is not None else ([], [])
        summary = {"path": "ros graph", "seconds": float(cfg.seconds), "command": command, "terrain": terrain,
                   "terrain_level": terrain_level,
                   "reached_run": bool(run.success), "refusal": None if run.success else run.message,
                   "run_started_at_s": started_at, "rollout_id": rollout_id, "armed": armed,
                   "faults": sorted({f for s in statuses for f in s.get("faults") or []}),
                   "fault_log": _fault_log(statuses),
                   "transitions": _transitions(statuses), "fell": bool(traj is not None and traj.fell.any()),
                   "distance_m": _distance(traj, command), "samples": collected.counts() if run.success else {}}
        share = 0.0
        if before is not None and after is not None:
            clips = {k: after[f"clips_{k}"] - before[f"clips_{k}"] for k in ("target", "torque")}
            steps = after["policy_steps"] if run.success else 0  # the controller counts them from entering RUN
            summary.update(clips=clips, policy_steps=steps)
            share = clipped_share(clips, steps, self.robot.num_joints)
        else:
            summary.update(clips=None, clips_note="no /diagnostics from the deployment node: clipped share unknown")
        feedback = None
        if critique is not None and run.success:
            feedback = self._critic_feedback(rollout_id, critique)
        self._save(out_dir, frames, times, traj)
        result = PlaybackResult(candidate_id=candidate_id, out_dir=out_dir, fault=deployment_fault(summary, traj),
                                clipped_share=share, duration_s=float(traj.time[-1]) if traj is not None else 0.0,
                                frame_times=list(times), meta={"playback": self.name, **summary}, feedback=feedback,
                                _frames=list(frames), _trajectory=traj)
        (out_dir / SUMMARY_FILE).write_text(json.dumps(result.summary(), indent=1, default=str))
        return result

    def _publish_boundary(self, b: Boundary) -> None:
        self.boundary_pub.publish(boundary_msg(b))

    def _goal(self, client, goal, what: str):
        """The result of one goal (its server must be up within step_timeout_s): (status, result); PlaybackError
        when the server is missing, refuses the goal or does not answer within critic_timeout_s (then the goal
        is cancelled: motionvl.ros.goals.goal_result)."""
        if not client.wait_for_server(timeout_sec=self.step_timeout_s):
            raise PlaybackError(f"{what}: no {self.critic} action server on the graph within {self.step_timeout_s:g} s "
                                "(is the vlm_critic node running?)")
        try:
            return goal_result(client, goal, self.critic_timeout_s, self.critic)
        except (RuntimeError, TimeoutError) as exc:
            raise PlaybackError(f"{what}: {exc}") from None

    def _critic_feedback(self, rollout_id: str, critique: CritiqueRequest) -> dict:
        """vlm_critic's feedback on the rollout (a Critique goal), or an invalid one saying why none came."""
        from motionvl.critic.schema import MotionFeedback

        try:
            status, result = self._goal(self.critique_client, critique_goal(rollout_id, critique.task,
                                                                             critique.previous_best),
                                        f"critique of {rollout_id}")
            feedback = feedback_from_msg(result.feedback)
        except (PlaybackError, ValueError) as exc:  # BadMessage; a previous best the schema refuses
            return MotionFeedback.invalid("vlm_critic", critique.task, str(exc)).to_dict()
        if status != GoalStatus.STATUS_SUCCEEDED and feedback.valid:  # an answer that cannot stand
            return MotionFeedback.invalid(feedback.critic, critique.task, f"critique goal ended with status {status}"
                                          ).to_dict()
        return feedback.to_dict()

    def _save(self, out_dir: Path, frames, times, traj) -> None:
        if traj is None:
            return
        if frames:
            from motionvl.render.video import write_rollout_files

            write_rollout_files(out_dir, frames, times, traj, every=self.cfg.frame_interval_s)
        else:
            traj.save(out_dir / "trajectory.npz")

    # ------------------------------------------------------------------ comparisons
    def compare(self, first: Path, second: Path, task: str) -> dict:
        """vlm_critic's Comparison (a dict) of two saved rollouts (Rollout.save directories)."""
        from motionvl.critic.service import ComparisonRequest

        goal = compare_goal(ComparisonRequest(None, task, {"path": str(first)}, {"path": str(second)}))
        _, result = self._goal(self.compare_client, goal, "comparison")
        try:
            return comparison_from_msg(result.comparison).to_dict()
        except BadMessage as exc:
            raise PlaybackError(f"comparison: vlm_critic's result does not decode: {exc}") from None


class GraphCritic:
    """The vlm_critic node as the search's critic: its feedback comes with GraphPlayback's results (it judges a
    rollout as it is played); compare() saves the two rollouts under `work_dir` (default: the system's temporary
    directory; vlm_critic must be able to read it) for a Compare goal. `name`: the node's backend."""

    def __init__(self, playback: GraphPlayback, name: str, work_dir: str | Path | None = None):
        import tempfile

        self.playback, self.name = playback, name
        self.work_dir = Path(work_dir) if work_dir else Path(tempfile.gettempdir()) / "motionvl-compare"

    def critique(self, frames, times, task: str, previous_best=None, **kwargs):
        from motionvl.critic.schema import MotionFeedback

        return MotionFeedback.invalid(f"vlm_critic ({self.name})", task, "the vlm_critic node judges a rollout while "
                                      "it is played; this playback was not judged there")

    def compare(self, first, second, task: str):
        from motionvl.critic.schema import Comparison

        folder = self.work_dir / f"compare-{uuid.uuid4().hex[:8]}"
        try:
            paths = [rollout.save(folder / which) for which, rollout in (("first", first), ("second", second))]
            answer = self.playback.compare(paths[0], paths[1], task)
        except PlaybackError as exc:
            return Comparison.invalid(f"vlm_critic ({self.name})", task, str(exc))
        finally:
            shutil.rmtree(folder, ignore_errors=True)
        return Comparison.from_dict(answer)


# ----------------------------------------------------------------------------- helpers
def _stamp(stamp) -> float:
    return float(stamp.sec) + float(stamp.nanosec) * 1e-9


def _faults(status: dict | None) -> list:
    return list((status or {}).get("faults") or [])


def _float(value) -> float | None:
    try:
        return float(value)
    except (TypeError, ValueError):
        return None


def _fault_log(statuses: list) -> list:
    """Each fault of a candidate's statuses with the status cycle it was first seen in, in order."""
    seen, out = set(), []
    for s in statuses:
        for fault in s.get("faults") or []:
            if fault not in seen:
                seen.add(fault)
                out.append({"fault": fault, "cycle": s.get("cycle")})
    return out


def _transitions(statuses: list) -> list:
    seen = []
    for s in statuses:
        t = s.get("transition")
        if t and (not seen or seen[-1] != t):
            seen.append(t)
    return [f"{t['from']}->{t['to']}" + ("" if t["why"] == "requested" else f" ({t['why']})") for t in seen]


def _distance(traj, command) -> float:
    if traj is None or len(traj.time) < 2:
        return 0.0
    from motionvl.deploy.playback import forward_distance

    return float(forward_distance(traj.base_pos, traj.base_quat, command))
