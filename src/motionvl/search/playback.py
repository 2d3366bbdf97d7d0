"""Playing a candidate's policy back for the critic, and what deployability the playback measured.

`Playback.play(candidate_id, policy_path, out_dir, command=, terrain=) -> PlaybackResult`: one deterministic
rollout at the velocity command of the task on its terrain, its trajectory (what the kinematic critic reads), frames
every `frame_interval_s` from the side camera (what a VLM sees; a video and a contact sheet in out_dir) and the
deployability the gates check: a fault (a fall, a non-finite state or action) and the share of commands the
deployment clipped (targets beyond those the policy was trained to send, torques at the effort limits).

`InProcessPlayback` plays the policy through the deployment controller (motionvl.deploy) on the simulator
in this process; on the graph `motionvl.ros.graph_playback.GraphPlayback` has the deployment node play it on
the simulator node the same way. A playback whose path has its own critic (`judges`: the graph's vlm_critic
watches the rollout as it is played) takes a `CritiqueRequest` and returns that critic's feedback with the
result; the search then records it instead of asking its own critic.
"""

from __future__ import annotations

import dataclasses
import json
from pathlib import Path
from typing import Protocol

import numpy as np

from motionvl.search.config import PlaybackConfig
from motionvl.task import DEFAULT_COMMAND

SUMMARY_FILE = "playback.json"


@dataclasses.dataclass
class PlaybackResult:
    candidate_id: str
    out_dir: Path
    fault: str | None
    """Why the playback ended early or cannot be trusted (a fall, a non-finite state or action), else None."""
    clipped_share: float
    """Share of (control step, joint) commands the deployment clipped (see GateConfig.max_clipped_share)."""
    duration_s: float
    frame_times: list = dataclasses.field(default_factory=list)
    meta: dict = dataclasses.field(default_factory=dict)
    feedback: dict | None = None
    """The feedback (MotionFeedback dict) of the critic on the playback's path, when it judges (see `judges`)."""
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
                "contact_sheet": str(self.contact_sheet_path) if self.contact_sheet_path else None,
                **({"feedback": self.feedback} if self.feedback is not None else {})}

    @classmethod
    def from_summary(cls, data: dict) -> "PlaybackResult":
        return cls(candidate_id=data["candidate_id"], out_dir=Path(data["out_dir"]), fault=data["fault"],
                   clipped_share=float(data["clipped_share"]), duration_s=float(data["duration_s"]),
                   frame_times=list(data.get("frame_times") or []), meta=dict(data.get("meta") or {}),
                   feedback=data.get("feedback"))


@dataclasses.dataclass(frozen=True)
class CritiqueRequest:
    """What a playback that judges (`Playback.judges`) asks its critic about the rollout."""

    task: str
    """The task sentence the rollout is judged against."""
    previous_best: dict | None = None
    """r*'s feedback (a MotionFeedback dict), so the critic says whether this rollout beats it; None at the start."""


class Playback(Protocol):
    name: str
    judges: bool
    """True when the playback's path has its own critic: play() with a CritiqueRequest returns its feedback."""

    def play(self, candidate_id: str, policy_path: str | Path, out_dir: str | Path, render: bool = True,
             critique: CritiqueRequest | None = None, command=DEFAULT_COMMAND, terrain: str = "flat",
             terrain_level: int | None = None) -> PlaybackResult:
        """Play the policy back at the task's velocity `command` on its `terrain` (and `terrain_level`); with
        `render` also film it (frames, video, contact sheet); with `critique` (a playback that judges) also have it
        critiqued (PlaybackResult.feedback)."""


def trajectory_fault(traj) -> str | None:
    """A fall or a non-finite state in a trajectory, as the reason a playback failed."""
    if not (np.all(np.isfinite(traj.qpos)) and np.all(np.isfinite(traj.qvel))):
        return "non-finite state"
    fell = np.flatnonzero(np.asarray(traj.fell, dtype=bool))
    if len(fell):
        return f"fell at {float(traj.time[fell[0]]):.2f} s"
    return None


class InProcessPlayback:
    """The policy played through the deployment controller (motionvl.deploy: modes, faults, soft ramp, the joint
    mapping, the command limits) against the single-robot simulator's hardware emulation in this process, as
    the deployment node would play it on the simulator node: PASSIVE -> STAND -> RUN at the task's command.
    Deployability: a latched fault, a fall or a refused RUN is a fault; the clipped share is the controller's
    clipped joint targets and torques per joint and policy step. Frames are rendered from the RUN rollout."""

    name = "deployment controller (in-process)"
    judges = False

    def __init__(self, cfg: PlaybackConfig | None = None, robot=None):
        from motionvl.robot import load_robot_config

        self.cfg = cfg or PlaybackConfig()
        self.robot = robot or load_robot_config()

    def play(self, candidate_id: str, policy_path: str | Path, out_dir: str | Path, render: bool = True,
             critique: CritiqueRequest | None = None, command=DEFAULT_COMMAND, terrain: str = "flat",
             terrain_level: int | None = None) -> PlaybackResult:
        from motionvl.sim.model import TerrainConfig

        out_dir = Path(out_dir)
        out_dir.mkdir(parents=True, exist_ok=True)
        floor = TerrainConfig(kind=terrain, level=terrain_level)
        kwargs = {"seconds": self.cfg.seconds, "command": tuple(float(c) for c in command), "robot": self.robot,
                  "terrain": floor}
        try:
            from motionvl.deploy.playback import play

            summary = play(str(policy_path), **kwargs)
        except ImportError as exc:  # the controller's own dependencies are missing from this installation
            summary = _simulator_rollout(str(policy_path), **kwargs)
            summary["playback_note"] = f"simulator rollout: the deployment controller cannot load ({exc})"
        traj = summary.pop("trajectory")
        frames, times = [], []
        if traj is not None and render:
            from motionvl.render.camera import render_trajectory
            from motionvl.render.video import write_rollout_files
            from motionvl.sim.model import build_model

            frames, times = render_trajectory(build_model(self.robot, floor), traj,
                                              every_s=self.cfg.frame_interval_s, width=self.cfg.width,
                                              height=self.cfg.height, camera=self.cfg.camera)
            write_rollout_files(out_dir, frames, times, traj, every=self.cfg.frame_interval_s)
        elif traj is not None:
            traj.save(out_dir / "trajectory.npz")
        result = PlaybackResult(candidate_id=candidate_id, out_dir=out_dir, fault=deployment_fault(summary, traj),
                                clipped_share=clipped_share(summary.get("clips") or {}, summary.get("policy_steps"),
                                                            self.robot.num_joints),
                                duration_s=float(traj.time[-1]) if traj is not None and len(traj.time) else 0.0,
                                frame_times=list(times), meta={"playback": self.name, "terrain": terrain,
                                                               "terrain_level": terrain_level, **summary},
                                _frames=frames, _trajectory=traj)
        (out_dir / SUMMARY_FILE).write_text(json.dumps(result.summary(), indent=1, default=str))
        return result


def _simulator_rollout(policy_path: str, *, seconds: float, command, robot, terrain=None) -> dict:
    """The deployment controller's playback summary approximated by a rollout of the evaluation environment at the
    robot's PD rate (clips: PD torques at the effort limit; not the targets a deployment would clip beyond those the
    policy was trained to send), for an installation whose controller cannot load."""
    from motionvl.render.rollout import rollout_policy
    from motionvl.rl.export import load_policy

    traj = rollout_policy(load_policy(policy_path), robot, seconds=seconds, command=command,
                          terrain=terrain if terrain is not None else "flat")
    tau = np.abs(np.asarray(traj.joint_torque if traj.joint_torque is not None else np.zeros((0, robot.num_joints))))
    clipped = int(np.count_nonzero(tau >= 0.999 * robot.effort_limit[None, :]))
    return {"reached_run": True, "faults": [], "fell": bool(np.any(traj.fell)), "clips": {"torque": clipped},
            "policy_steps": max(len(traj.time) - 1, 0), "trajectory": traj}


def clipped_share(clips: dict, policy_steps, num_joints: int) -> float:
    """Share of (policy step, joint) commands the deployment controller clipped (its target and torque clips)."""
    steps = max(1, int(policy_steps or 0)) * num_joints
    return (int(clips.get("target", 0)) + int(clips.get("torque", 0))) / steps


def deployment_fault(summary: dict, traj) -> str | None:
    """Why a deployment-controller playback (motionvl.deploy.playback.play's summary) cannot count, else None."""
    if not summary.get("reached_run"):
        return f"the controller refused RUN: {summary.get('refusal')}"
    if summary.get("faults"):
        return "fault: " + "; ".join(summary["faults"])
    if summary.get("fell"):
        return "fell"
    return trajectory_fault(traj) if traj is not None else "no rollout recorded"


def fall_only(fault: str) -> bool:
    """Whether a playback fault (deployment_fault, trajectory_fault) is the robot falling and nothing else."""
    text = fault[len("fault: "):] if fault.startswith("fault: ") else fault
    parts = [part.strip() for part in text.split(";") if part.strip()]
    return bool(parts) and all(part.startswith(("fall", "fell")) for part in parts)
