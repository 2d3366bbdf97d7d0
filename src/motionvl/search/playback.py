"""Playing a candidate's policy back for the critic, and what deployability the playback measured.

`Playback.play(candidate_id, policy_path, out_dir) -> PlaybackResult`: one deterministic rollout at
the velocity command of the task, its trajectory (what the kinematic critic reads), frames every
`frame_interval_s` (what a VLM sees; a video and a contact sheet in out_dir) and the deployability
the gates check: a fault (a fall, a non-finite state or action) and the share of commands clipped
to the robot's limits.

`InProcessPlayback` runs the policy in this process on the simulator at the robot's own PD rate.
The orchestrator node's playback plays it on the simulator node through the deployment node.
"""

from __future__ import annotations

import dataclasses
import json
from pathlib import Path
from typing import Protocol

import numpy as np

from motionvl.search.config import PlaybackConfig

SUMMARY_FILE = "playback.json"


@dataclasses.dataclass
class PlaybackResult:
    candidate_id: str
    out_dir: Path
    fault: str | None
    """Why the playback ended early or cannot be trusted (a fall, a non-finite state or action), else None."""
    clipped_share: float
    """Share of (control step, joint) commands clipped to the robot's limits."""
    duration_s: float
    frame_times: list = dataclasses.field(default_factory=list)
    meta: dict = dataclasses.field(default_factory=dict)
    _frames: list | None = dataclasses.field(default=None, repr=False)
    _trajectory: object | None = dataclasses.field(default=None, repr=False)

    @property
    def trajectory_path(self) -> Path:
        return self.out_dir / "trajectory.npz"

    @property
    def video_path(self) -> Path | None:
        path = self.out_dir / "rollout.mp4"
        return path if path.exists() else None

    @property
    def contact_sheet_path(self) -> Path | None:
        path = self.out_dir / "contact_sheet.png"
        return path if path.exists() else None

    def trajectory(self):
        if self._trajectory is None:
            from motionvl.sim.trajectory import Trajectory

            self._trajectory = Trajectory.load(self.trajectory_path)
        return self._trajectory

    def frames(self) -> list:
        """The frames the critic sees (read back from the video after a resume); [] without rendering."""
        if self._frames is None:
            if self.video_path is None:
                self._frames = []
            else:
                from motionvl.render.video import read_video

                self._frames = read_video(self.video_path)
        return self._frames

    def summary(self) -> dict:
        return {"candidate_id": self.candidate_id, "out_dir": str(self.out_dir), "fault": self.fault,
                "clipped_share": self.clipped_share, "duration_s": self.duration_s,
                "frame_times": list(self.frame_times), "meta": self.meta,
                "video": str(self.video_path) if self.video_path else None,
                "contact_sheet": str(self.contact_sheet_path) if self.contact_sheet_path else None}

    @classmethod
    def from_summary(cls, data: dict) -> "PlaybackResult":
        return cls(candidate_id=data["candidate_id"], out_dir=Path(data["out_dir"]), fault=data["fault"],
                   clipped_share=float(data["clipped_share"]), duration_s=float(data["duration_s"]),
                   frame_times=list(data.get("frame_times") or []), meta=dict(data.get("meta") or {}))


class Playback(Protocol):
    name: str

    def play(self, candidate_id: str, policy_path: str | Path, out_dir: str | Path) -> PlaybackResult: ...


def clipped_share(joint_torque: np.ndarray | None, effort_limit: np.ndarray) -> float:
    """Share of (sample, joint) torques at the effort limit (the PD law asked for more than the motor gives)."""
    if joint_torque is None or len(joint_torque) == 0:
        return 0.0
    tau = np.abs(np.asarray(joint_torque, dtype=float))
    return float(np.mean(tau >= 0.999 * np.asarray(effort_limit, dtype=float)[None, :]))


def trajectory_fault(traj, actions_finite: bool = True) -> str | None:
    """A fall or a non-finite state in a trajectory (or a non-finite action), as the reason a playback failed."""
    if not actions_finite:
        return "the policy produced a non-finite action"
    if not (np.all(np.isfinite(traj.qpos)) and np.all(np.isfinite(traj.qvel))):
        return "non-finite state"
    fell = np.flatnonzero(np.asarray(traj.fell, dtype=bool))
    if len(fell):
        return f"fell at {float(traj.time[fell[0]]):.2f} s"
    return None


class InProcessPlayback:
    """The policy on this process's simulator at the robot's PD rate (no randomisation, a fixed command),
    rendered with the tracking camera. Deployability: falls and non-finite values are faults; the clipped
    share is the share of joint torques at their effort limit."""

    name = "in-process"

    def __init__(self, cfg: PlaybackConfig | None = None, robot=None):
        from motionvl.robot import load_robot_config

        self.cfg = cfg or PlaybackConfig()
        self.robot = robot or load_robot_config()

    def play(self, candidate_id: str, policy_path: str | Path, out_dir: str | Path) -> PlaybackResult:
        from motionvl.render.rollout import rollout_policy
        from motionvl.rl.export import load_policy

        out_dir = Path(out_dir)
        out_dir.mkdir(parents=True, exist_ok=True)
        policy = _FiniteActions(load_policy(policy_path))
        traj = rollout_policy(policy, self.robot, seconds=self.cfg.seconds, command=tuple(self.cfg.command))
        frames, times = [], []
        if self.cfg.render:
            from motionvl.render.camera import render_trajectory
            from motionvl.render.cli import write_outputs
            from motionvl.sim.model import TerrainConfig, build_model

            frames, times = render_trajectory(build_model(self.robot, TerrainConfig()), traj,
                                              every_s=self.cfg.frame_interval_s)
            write_outputs(out_dir, frames, times, traj, every=self.cfg.frame_interval_s)
        else:
            traj.save(out_dir / "trajectory.npz")
        result = PlaybackResult(candidate_id=candidate_id, out_dir=out_dir, fault=trajectory_fault(traj, policy.finite),
                                clipped_share=clipped_share(traj.joint_torque, self.robot.effort_limit),
                                duration_s=float(traj.time[-1]) if len(traj.time) else 0.0, frame_times=list(times),
                                meta={"playback": self.name, "command": list(self.cfg.command)},
                                _frames=frames, _trajectory=traj)
        (out_dir / SUMMARY_FILE).write_text(json.dumps(result.summary(), indent=1))
        return result


class _FiniteActions:
    """The policy with non-finite actions zeroed (so the rollout goes on) and remembered as a fault."""

    def __init__(self, policy):
        self.policy, self.finite = policy, True

    def __call__(self, obs):
        action = self.policy(obs)
        self.finite &= bool(np.all(np.isfinite(action)))
        return np.nan_to_num(action, nan=0.0, posinf=0.0, neginf=0.0)

    def __getattr__(self, name):  # num_obs, contract, obs_history, gait_period, ... as the policy's
        return getattr(self.policy, name)
