"""Collecting a rollout from streams (frames, joint states, odometry, commands) between two
boundaries, and turning it into the `Rollout` a critic judges (no ROS: the vlm_critic node feeds it).

`RolloutCollector` keeps the rollout being collected; `start` and `end` come from boundary
messages (rollout/boundary), the `add_*` calls from the streams, each with its time in seconds.
A finished rollout is a `CollectedRollout`; `CollectedRollout.rollout(model, robot)` pairs every
joint state with the odometry sample nearest in time and rebuilds the `Trajectory` (feet, contacts
and falls from the model's kinematics) as `motionvl.render.rollout.trajectory_from_poses` does.
"""

from __future__ import annotations

import dataclasses
import threading
from typing import Any, Callable

import numpy as np

from motionvl.critic.base import Rollout
from motionvl.render.rollout import trajectory_from_poses


@dataclasses.dataclass(frozen=True)
class Boundary:
    """A rollout boundary: where a rollout starts or ends, and what it is judged against."""

    event: str
    """"start" or "end"."""
    task: str = ""
    """The task sentence ("" = the receiver's default)."""
    rollout_id: Any = None
    """An identifier echoed in the answer (the orchestrator's candidate id)."""
    command: tuple | None = None
    """(vx, vy, yaw rate) in effect, overriding the recorded command stream."""
    previous_best: Any = None
    """The best feedback so far (a MotionFeedback dict) to judge this rollout against, if any."""


@dataclasses.dataclass
class CollectedRollout:
    """What was received for one rollout (stream samples with their times in seconds)."""

    task: str = ""
    rollout_id: Any = None
    command: tuple | None = None
    """(vx, vy, yaw rate) given with the boundary; None = from the command stream."""
    previous_best: Any = None
    frames: list = dataclasses.field(default_factory=list)
    frame_times: list = dataclasses.field(default_factory=list)
    joint_times: list = dataclasses.field(default_factory=list)
    joint_pos: list = dataclasses.field(default_factory=list)
    odom_times: list = dataclasses.field(default_factory=list)
    odom_pose: list = dataclasses.field(default_factory=list)
    """(x, y, z, qw, qx, qy, qz) per odometry sample."""
    command_times: list = dataclasses.field(default_factory=list)
    commands: list = dataclasses.field(default_factory=list)
    dropped_frames: int = 0
    dropped_samples: int = 0

    def copy(self) -> "CollectedRollout":
        return dataclasses.replace(self, **{f.name: list(getattr(self, f.name)) for f in dataclasses.fields(self)
                                            if isinstance(getattr(self, f.name), list)})

    def counts(self) -> dict:
        return {"frames": len(self.frames), "states": len(self.joint_times), "odom": len(self.odom_times)}

    def trajectory(self, model, robot):
        """The Trajectory from the joint states paired with the nearest odometry (None with too little data)."""
        if len(self.joint_times) < 2 or not self.odom_times:
            return None
        jt = np.asarray(self.joint_times)
        order = np.argsort(jt, kind="stable")
        jt, joints = jt[order], np.asarray(self.joint_pos)[order]
        ot = np.asarray(self.odom_times)
        odom_order = np.argsort(ot, kind="stable")
        ot, poses = ot[odom_order], np.asarray(self.odom_pose)[odom_order]
        k = np.clip(np.searchsorted(ot, jt), 0, len(ot) - 1)
        before = np.clip(k - 1, 0, len(ot) - 1)
        k = np.where(np.abs(ot[before] - jt) < np.abs(ot[k] - jt), before, k)
        keep = np.concatenate([[True], np.diff(jt) > 1e-9])  # duplicate stamps
        jt, joints, k = jt[keep], joints[keep], k[keep]
        if len(jt) < 2:
            return None
        if self.command is not None:
            command = np.tile(self.command, (len(jt), 1))
        elif self.command_times:
            ct = np.asarray(self.command_times)
            idx = np.clip(np.searchsorted(ct, jt, side="right") - 1, 0, len(ct) - 1)
            command = np.asarray(self.commands)[idx]
        else:
            command = None
        return trajectory_from_poses(model, robot, jt, poses[k, 0:3], poses[k, 3:7], joints, command)

    def rollout(self, model, robot) -> Rollout:
        """The critic's view: frames with times since the first frame, and the trajectory if states came."""
        times = [round(t - self.frame_times[0], 6) for t in self.frame_times]  # [] without frames
        return Rollout(list(self.frames), times, self.trajectory(model, robot))


@dataclasses.dataclass(frozen=True)
class CollectLimits:
    """How much of one rollout is kept."""

    frame_interval_s: float = 0.1
    """Keep at most one camera frame per this many seconds of stamp time (the paper's 0.1)."""
    max_frames: int = 600
    """Most frames kept per rollout; later ones are dropped and counted (the VLM backends thin further)."""
    max_samples: int = 30000
    """Most joint-state samples kept per rollout (10 min at 50 Hz); later ones are dropped and counted."""


class RolloutCollector:
    """The rollout being collected between boundaries; thread-safe (streams arrive on several threads)."""

    def __init__(self, limits: CollectLimits = CollectLimits()):
        self.limits = limits
        self._lock = threading.Lock()
        self._collecting = False
        self._current = CollectedRollout()
        self.last_finished: CollectedRollout | None = None

    def status(self) -> dict:
        """collecting, task and how many frames, states and odometry samples the current rollout has."""
        with self._lock:
            return {"collecting": self._collecting, "task": self._current.task, **self._current.counts()}

    def collecting_id(self):
        """The id of the rollout being collected (None when none is, or it has none)."""
        with self._lock:
            return self._current.rollout_id if self._collecting else None

    def start(self, boundary: Boundary) -> bool:
        """Begin a new rollout; True when an unfinished one was dropped for it."""
        with self._lock:
            dropped = self._collecting
            self._current = CollectedRollout(task=boundary.task, rollout_id=boundary.rollout_id,
                                             command=boundary.command, previous_best=boundary.previous_best)
            self._collecting = True
            return dropped

    def end(self, boundary: Boundary) -> tuple[CollectedRollout, bool]:
        """Stop collecting: (the finished rollout, whether a start preceded it). The end's task, command,
        id and previous best, where given, win over the start's."""
        with self._lock:
            started = self._collecting
            done = self._current if started else CollectedRollout()
            for name, value in (("task", boundary.task), ("command", boundary.command),
                                ("rollout_id", boundary.rollout_id), ("previous_best", boundary.previous_best)):
                if value if name == "task" else value is not None:
                    setattr(done, name, value)
            self._collecting = False
            self._current = CollectedRollout()
            self.last_finished = done
            return done, started

    def snapshot(self) -> CollectedRollout | None:
        """A copy of the rollout being collected, else of the last finished one (None before any)."""
        with self._lock:
            source = self._current if self._collecting else self.last_finished
            return None if source is None else source.copy()

    def _frame_slot(self, t: float) -> bool:
        current = self._current
        if not self._collecting:
            return False
        if current.frame_times and t - current.frame_times[-1] < 0.9 * self.limits.frame_interval_s:
            return False
        if len(current.frames) >= self.limits.max_frames:
            current.dropped_frames += 1
            return False
        return True

    def add_frame(self, t: float, frame: np.ndarray | Callable[[], np.ndarray]) -> bool:
        """Keep a frame (an RGB array, or a callable decoding one) if the rollout wants it; True if kept."""
        with self._lock:
            if not self._frame_slot(t):
                return False
            current = self._current
        image = frame() if callable(frame) else frame  # decoded outside the lock
        with self._lock:
            if not (self._collecting and current is self._current):
                return False
            current.frames.append(image)
            current.frame_times.append(t)
            return True

    def add_joint_state(self, t: float, joint_pos) -> None:
        with self._lock:
            if not self._collecting:
                return
            if len(self._current.joint_times) >= self.limits.max_samples:
                self._current.dropped_samples += 1
                return
            self._current.joint_times.append(t)
            self._current.joint_pos.append(list(joint_pos))

    def add_odometry(self, t: float, pose) -> None:
        """pose: (x, y, z, qw, qx, qy, qz)."""
        with self._lock:
            if self._collecting:
                self._current.odom_times.append(t)
                self._current.odom_pose.append(tuple(pose))

    def add_command(self, t: float, command) -> None:
        """command: (vx, vy, yaw rate)."""
        with self._lock:
            if self._collecting:
                self._current.command_times.append(t)
                self._current.commands.append(tuple(command))
