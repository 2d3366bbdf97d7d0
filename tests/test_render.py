"""Offscreen rendering (MUJOCO_GL=egl), videos, contact sheets and evaluation rollouts."""

from __future__ import annotations

import json
import math
import os

os.environ.setdefault("MUJOCO_GL", "egl")

import mujoco  # noqa: E402
import numpy as np  # noqa: E402
import pytest  # noqa: E402

from motionvl.render.camera import (FrameRenderer, RenderSettings, camera_intrinsics, frame_indices,  # noqa: E402
                                    render_trajectory)
from motionvl.render.rollout import rollout_policy, trajectory_from_poses  # noqa: E402
from motionvl.render.video import contact_sheet, read_video, save_png, select_evenly, video_info, write_mp4  # noqa: E402
from motionvl.robot import load_robot_config  # noqa: E402
from motionvl.sim.model import TRACKING_CAMERA, build_model  # noqa: E402
from motionvl.sim.trajectory import Trajectory  # noqa: E402

ROBOT = load_robot_config()
W, H = 160, 120


@pytest.fixture(scope="module")
def model():
    return build_model(ROBOT)


@pytest.fixture(scope="module")
def stand_traj():
    return rollout_policy(None, ROBOT, seconds=1.0)


def pose_trajectory(model, base_xy, seconds: float, dt: float = 0.02, yaw: float = 0.0) -> Trajectory:
    """The default pose carried along base_xy(t) (a kinematic 'walk' for the camera)."""
    n = int(round(seconds / dt)) + 1
    t = np.arange(n) * dt
    qpos = np.tile(model.key_qpos[0], (n, 1))
    qpos[:, 0:2] = np.array([base_xy(x) for x in t])
    qpos[:, 3:7] = [math.cos(yaw / 2), 0, 0, math.sin(yaw / 2)]
    z = np.zeros((n, 2, 3))
    return Trajectory(dt=dt, joint_names=ROBOT.joint_names, time=t, qpos=qpos, qvel=np.zeros((n, model.nv)),
                      foot_pos=z, foot_vel=z.copy(), foot_contact=np.ones((n, 2), bool), command=np.zeros((n, 3)),
                      fell=np.zeros(n, bool))


def robot_mask(renderer: FrameRenderer, qpos) -> np.ndarray:
    """Pixels showing a robot geom (segmentation rendering: object id and type per pixel)."""
    r = renderer.renderer
    renderer.render_qpos(qpos)  # set the pose and kinematics
    r.enable_segmentation_rendering()
    try:
        r.update_scene(renderer.data, camera=TRACKING_CAMERA)
        seg = r.render()
    finally:
        r.disable_segmentation_rendering()
    model = renderer.model
    is_geom = seg[:, :, 1] == int(mujoco.mjtObj.mjOBJ_GEOM)
    ids = np.clip(seg[:, :, 0], 0, model.ngeom - 1)
    return is_geom & (seg[:, :, 0] >= 0) & (model.geom_bodyid[ids] > 0)


def test_frames_have_the_right_shape_and_are_not_blank(model, stand_traj):
    frames, times = render_trajectory(model, stand_traj, every_s=0.1, width=W, height=H)
    assert len(frames) == 11 and times[0] == 0.0 and times[-1] == pytest.approx(1.0)
    np.testing.assert_allclose(np.diff(times), 0.1, atol=1e-6)
    for f in frames:
        assert f.shape == (H, W, 3) and f.dtype == np.uint8
        assert f.std() > 10.0  # floor, sky and robot: not a blank image
    # the robot is in the picture
    with FrameRenderer(model, W, H) as r:
        assert robot_mask(r, stand_traj.qpos[-1]).sum() > 200


def test_frame_sampling_at_a_fixed_interval():
    t = np.arange(501) * 0.02
    idx = frame_indices(t, 0.1)
    assert len(idx) == 101 and np.all(np.diff(idx) == 5)
    assert list(frame_indices(t[:6], 0.005)) == list(range(6))  # faster than the samples: each once
    with pytest.raises(ValueError):
        frame_indices(t, 0.0)


def test_camera_follows_the_robot_walking_forward(model):
    # 6 m forward in 6 s, then 2 m sideways: a fixed camera would lose it
    traj = pose_trajectory(model, lambda t: (t, 0.0) if t <= 6 else (6.0, t - 6.0), seconds=8.0)
    with FrameRenderer(model, W, H) as r:
        counts = []
        for i in frame_indices(traj.time, 1.0):
            mask = robot_mask(r, traj.qpos[i])
            ys, xs = np.nonzero(mask)
            counts.append(len(xs))
            assert len(xs) > 200, f"robot not visible at t={traj.time[i]:.1f}"
            cx, cy = xs.mean() / W, ys.mean() / H
            assert abs(cx - 0.5) < 0.15 and abs(cy - 0.5) < 0.25, f"robot centroid ({cx:.2f}, {cy:.2f}) off centre"
        assert max(counts) / min(counts) < 1.3  # same apparent size: the camera keeps its distance


def test_intrinsics_from_fovy(model):
    k = camera_intrinsics(model, TRACKING_CAMERA, 320, 240)
    fovy = float(model.cam_fovy[model.camera(TRACKING_CAMERA).id])
    assert k["fy"] == pytest.approx(120.0 / math.tan(math.radians(fovy) / 2))
    assert k["fx"] == k["fy"] and k["cx"] == pytest.approx(159.5) and k["cy"] == pytest.approx(119.5)
    with pytest.raises(ValueError, match="no camera"):
        camera_intrinsics(model, "nope", 320, 240)


def test_render_settings_and_limits(model):
    with FrameRenderer(model, W, H, settings=RenderSettings(shadows=False, reflection=False)) as r:
        assert r.render_qpos(model.key_qpos[0]).shape == (H, W, 3)
        with pytest.raises(ValueError):
            r.render_qpos(np.zeros(3))
    with pytest.raises(ValueError, match="offscreen buffer"):
        FrameRenderer(model, 2000, 100)
    assert model.vis.quality.shadowsize == 4096  # the model's own setting is given back


def test_mp4_reads_back_with_the_right_frame_count(tmp_path, model, stand_traj):
    frames, times = render_trajectory(model, stand_traj, every_s=0.1, width=W, height=H)
    path = write_mp4(frames, tmp_path / "v.mp4", fps=10)
    info = video_info(path)
    assert info == {"frames": 11, "width": W, "height": H, "fps": pytest.approx(10.0)}
    back = read_video(path)
    assert len(back) == 11 and back[0].shape == (H, W, 3)
    assert np.abs(back[5].astype(int) - frames[5].astype(int)).mean() < 12  # lossy, but the same picture
    with pytest.raises(ValueError):
        write_mp4([], tmp_path / "empty.mp4")


def test_contact_sheet_grid_and_timestamps(tmp_path):
    rng = np.random.default_rng(0)
    frames = [np.full((H, W, 3), 40 * i, np.uint8) for i in range(7)]
    times = [0.1 * i for i in range(7)]
    sheet = contact_sheet(frames, times, cols=3, gap=2)
    assert sheet.shape == (3 * H + 2 * 2, 3 * W + 2 * 2, 3) and sheet.dtype == np.uint8
    # tile (row 1, col 0) holds frame 3; its time stamp is drawn in the top-left corner only
    tile = sheet[H + 2: 2 * H + 2, 0:W]
    assert np.all(tile[H // 2:, W // 2:] == 120)
    assert (tile[:15, :50] != 120).any()
    assert np.all(sheet[2 * (H + 2):, W + 2:] == 0)  # unused cells stay black
    big = [rng.integers(0, 255, (H, W, 3), dtype=np.uint8) for _ in range(101)]
    thin = contact_sheet(big, [0.1 * i for i in range(101)], cols=7, max_tiles=21, tile_width=80, label=False)
    assert thin.shape == (3 * 60 + 2 * 2, 7 * 80 + 6 * 2, 3)
    assert list(select_evenly(101, 21)) == list(range(0, 101, 5))
    png = save_png(sheet, tmp_path / "sheet.png")
    assert png.exists() and png.stat().st_size > 1000


def test_rollout_stands_and_faces_forward(stand_traj):
    traj = stand_traj
    assert len(traj.time) == 51 and traj.dt == pytest.approx(ROBOT.control_dt)
    assert not traj.fell.any()
    np.testing.assert_allclose(traj.base_quat[0], [1, 0, 0, 0], atol=1e-9)
    assert traj.base_pos[-1, 2] > 0.75
    calls = []

    def zero_policy(obs):
        calls.append(obs.shape)
        return np.zeros((1, ROBOT.num_joints))

    same = rollout_policy(zero_policy, ROBOT, seconds=1.0)
    assert len(calls) == 50 and calls[0][0] == 1
    np.testing.assert_allclose(same.qpos, traj.qpos, atol=1e-9)  # zero actions = the PD stand, deterministic


def test_rollout_stops_at_a_fall():
    traj = rollout_policy(lambda obs: -np.ones((1, ROBOT.num_joints)), ROBOT, seconds=5.0)
    assert traj.fell[-1] and traj.fell.sum() == 1 and len(traj.time) < 251


def test_trajectory_rebuilt_from_poses_matches_the_recording(model, stand_traj):
    tr = stand_traj
    rebuilt = trajectory_from_poses(model, ROBOT, tr.time, tr.base_pos, tr.base_quat, tr.joint_pos,
                                    command=(0.0, 0.0, 0.0))
    np.testing.assert_allclose(rebuilt.foot_pos, tr.foot_pos, atol=1e-6)
    assert (rebuilt.foot_contact == tr.foot_contact).mean() > 0.9
    assert not rebuilt.fell.any() and rebuilt.dt == pytest.approx(tr.dt)


def test_render_cli_writes_video_sheet_and_trajectory(tmp_path, capsys):
    from motionvl.cli import main

    out = tmp_path / "r"
    assert main(["render", "--policy", "stand", "--seconds", "1", "--out", str(out), "--width", str(W),
                 "--height", str(H)]) == 0
    summary = json.loads(capsys.readouterr().out.strip().splitlines()[-1])
    assert summary["frames"] == 11 and summary["video_frames"] == 11 and not summary["fell"]
    assert video_info(out / "rollout.mp4")["frames"] == 11
    assert (out / "contact_sheet.png").stat().st_size > 1000
    assert len(Trajectory.load(out / "trajectory.npz").time) == 51


def test_render_bench_reports_both_paths(capsys):
    import argparse

    from motionvl.render.bench import add_render_bench_arguments, run_render_benchmark

    parser = argparse.ArgumentParser()
    add_render_bench_arguments(parser)
    result = run_render_benchmark(parser.parse_args(["--seconds", "0.5", "--width", "64", "--height", "48",
                                                     "--repeats", "1", "--critic-repeats", "2"]))
    for key in ("ours_fps", "raw_same_settings_fps", "raw_model_defaults_fps", "kinematic_critic_ms_per_rollout"):
        assert result[key] > 0, key
    assert result["frames"] == 6 and result["kinematic_critic_valid"]
