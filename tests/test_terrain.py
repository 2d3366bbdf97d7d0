"""Terrain as a task dimension: the kinds and their level table, per-simulation levels, the curriculum,
heights above the terrain in the gait metrics, evaluation at a fixed level, and the nodes' parameters."""

from __future__ import annotations

import dataclasses
import json
import os
import subprocess
import sys
import uuid
from pathlib import Path

import mujoco
import numpy as np
import pytest

from gait_fixtures import walking_trajectory
from motionvl.envs.config import EnvConfig, RandomizationConfig, TerrainCurriculumConfig
from motionvl.envs.locomotion import LocomotionEnv
from motionvl.gait.metrics import analyse_gait
from motionvl.robot import ConfigError
from motionvl.sim.backend import MujocoBatchBackend
from motionvl.sim.model import FLOOR_CONTACT, TerrainConfig, build_model
from motionvl.sim.terrain import (DEFAULT_LEVEL, KINDS, LEVELS, NUM_LEVELS, PLATFORM_HALF_M, TREAD_M, LevelSelector,
                                  Terrain, ground_height)

ROOT = Path(__file__).resolve().parents[1]


def test_the_level_table_runs_from_easy_to_hard():
    steps = [lv.step_height_m for lv in LEVELS]
    assert len(LEVELS) == NUM_LEVELS == 10
    assert steps[0] == pytest.approx(0.02) and steps[-1] == pytest.approx(0.20) and np.all(np.diff(steps) > 0)
    assert LEVELS[0].slope_deg == 2.0 and LEVELS[-1].slope_deg == 20.0
    assert LEVELS[DEFAULT_LEVEL].step_height_m == pytest.approx(0.10), "the held-out stairs: 10 cm steps"


@pytest.mark.parametrize("kind", KINDS)
def test_each_kind_is_built_at_the_heights_its_level_table_says(robot, kind):
    """The compiled world (rays cast down onto its geoms) and Terrain.height agree everywhere, and both put
    the k-th step, the slope and the bumps where the level table says."""
    rng = np.random.default_rng(1)
    for level in (0, DEFAULT_LEVEL, NUM_LEVELS - 1):
        model = build_model(robot, TerrainConfig(kind=kind, level=level, seed=3))
        data = mujoco.MjData(model)
        mujoco.mj_kinematics(model, data)
        ground = Terrain(kind, seed=3)
        points = rng.uniform(-6.0, 6.0, (150, 2))
        rays = np.array([ground_height(model, data, x, y) for x, y in points])
        np.testing.assert_allclose(ground.height(points[:, 0], points[:, 1], level), rays, atol=1e-6)
        lv = LEVELS[level]
        assert ground_height(model, data, 0.0, 0.0) == pytest.approx(0.0, abs=1e-6), "every start is level at z 0"
        middle_of_step = [PLATFORM_HALF_M + (k + 0.5) * TREAD_M for k in range(10)]
        on_axis = np.array([ground_height(model, data, d, 0.0) for d in middle_of_step])
        if kind.startswith("stairs"):
            sign = 1.0 if kind == "stairs_up" else -1.0
            np.testing.assert_allclose(on_axis, sign * lv.step_height_m * np.arange(1, 11), atol=1e-6)
            np.testing.assert_allclose([ground_height(model, data, 0.0, -d) for d in middle_of_step], on_axis, atol=1e-6)
        elif kind.startswith("slope"):
            sign = 1.0 if kind == "slope_up" else -1.0
            grade = np.tan(np.radians(lv.slope_deg))
            np.testing.assert_allclose(on_axis, sign * grade * (np.array(middle_of_step) - PLATFORM_HALF_M), atol=1e-6)
        elif kind == "rough":
            tops = ground.height(points[:, 0], points[:, 1], level)
            assert tops.min() >= 0.0 and tops.max() <= lv.bump_height_m + 1e-9 and tops.max() > 0.8 * lv.bump_height_m
        else:
            assert not np.any(rays)


@pytest.mark.parametrize("kind", [k for k in KINDS if k != "flat"])
def test_each_simulation_of_a_batch_stands_on_its_own_level(robot, kind):
    """The curriculum's world holds every level; LevelSelector gives each simulation its own: a robot placed on
    the fourth step (or slope, or bumps) of each level comes to rest with its soles on that level's surface."""
    train_robot = dataclasses.replace(robot, sim_dt=0.005, decimation=4)
    model = build_model(train_robot, TerrainConfig(kind=kind, every_level=True, seed=1))
    ground = Terrain(kind, seed=1)
    batch = MujocoBatchBackend(model, NUM_LEVELS, 1)
    levels = np.arange(NUM_LEVELS)[::-1]
    LevelSelector(batch, ground.pieces(), **FLOOR_CONTACT).select(np.arange(NUM_LEVELS), levels)
    batch.reset(keyframe=0, forward=False)
    x = PLATFORM_HALF_M + 3.55 * TREAD_M if kind != "rough" else 1.6
    batch.qpos[:, 0] = x
    batch.qpos[:, 2] += ground.height(x, 0.0, levels) + 0.01
    batch.ctrl[:] = robot.default_pose
    batch.forward()
    for _ in range(25):
        batch.step(4)
    sole = np.array([batch.get_data(i).site("left_sole").xpos for i in range(NUM_LEVELS)])
    above = sole[:, 2] - ground.height(sole[:, 0], sole[:, 1], levels)
    np.testing.assert_allclose(above, 0.015, atol=0.01)  # the sole site sits 1.5 cm above the sole's face
    assert np.ptp(ground.height(sole[:, 0], sole[:, 1], levels)) > 0.02, "the levels differ where the robots stand"


def curriculum_env(robot, **curriculum) -> LocomotionEnv:
    cfg = EnvConfig(num_envs=6, num_threads=1, terrain="stairs_up", episode_length_s=1.0, seed=2,
                    terrain_curriculum=TerrainCurriculumConfig(**curriculum), random_heading=False,
                    randomization=RandomizationConfig.disabled())
    return LocomotionEnv(robot, cfg, iteration=0)


def test_the_curriculum_moves_envs_up_after_walking_out_and_down_after_failing(robot):
    env = curriculum_env(robot, start_level=6)
    assert env.terrain_curriculum and set(env.terrain_level) <= set(range(7)) and len(set(env.terrain_level)) > 1
    env.terrain_level[:] = [3, 3, 3, 3, 9, 0]  # the levels an episode ends on decide (the geometry comes at reset)
    before = env.terrain_level.copy()
    qpos = env.sim.qpos
    # 0 walked out of the terrain; 1 fell; 2 stood still under a walking command; 3 stood under a standing one;
    # 4 walked out of the top level; 5 fell on the lowest
    for i, x in ((0, 4.5), (4, 4.5)):
        qpos[i, 0] = x
        qpos[i, 2] += env.ground.height(x, 0.0, env.terrain_level[i])
    qpos[[1, 5], 2] = 0.2
    env.commanded_distance[:] = [3.0, 1.0, 3.0, 0.0, 3.0, 1.0]
    env.command[3] = 0.0
    env.episode_length[:] = env.max_episode_length - 1  # every episode ends at the next step
    env.sim.forward()
    _, _, terminated, truncated, _ = env.step(np.zeros((6, robot.num_joints)))
    assert list(terminated) == [False, True, False, False, False, True] and truncated[[0, 2, 3, 4]].all()
    assert list(env.terrain_level[[0, 1, 2, 3, 5]]) == [before[0] + 1, 2, 2, 3, 0]
    assert 0 <= env.terrain_level[4] < NUM_LEVELS, "past the top level: a random level, to keep visiting all"
    assert env.mean_terrain_level == pytest.approx(env.terrain_level.mean())
    # the reset puts every env at its new level's start: on the platform at z 0, its steps at the new height
    assert np.all(np.abs(env.state.base_height - env.sim.qpos[:, 2]) < 1e-9)
    step_top = env.ground.height(PLATFORM_HALF_M + 0.5 * TREAD_M, 0.0, env.terrain_level)
    np.testing.assert_allclose(step_top, [LEVELS[lv].step_height_m for lv in env.terrain_level])


def test_a_fixed_level_is_no_curriculum_and_levels_are_checked(robot):
    env = LocomotionEnv(robot, EnvConfig(num_envs=2, num_threads=1, terrain="slope_up", terrain_level=7))
    assert not env.terrain_curriculum and list(env.terrain_level) == [7, 7] and env.mean_terrain_level == 7.0
    flat = LocomotionEnv(robot, EnvConfig(num_envs=2, num_threads=1, terrain="flat"))
    assert flat.mean_terrain_level is None and flat.ground is None
    with pytest.raises(ConfigError, match="terrain level"):
        LocomotionEnv(robot, EnvConfig(num_envs=2, num_threads=1, terrain="stairs_up", terrain_level=10))
    with pytest.raises(ConfigError, match="unknown terrain"):
        LocomotionEnv(robot, EnvConfig(num_envs=2, num_threads=1, terrain="stairs"))


def test_gait_metrics_measure_clearance_over_a_step_from_the_step():
    """A foot that swings from one step onto the next, 10 cm higher, clearing the step by 6 cm: clearance is
    over the terrain under the sole, not over z = 0 or the mean of the two steps."""
    traj = walking_trajectory(clearance=(0.06, 0.06), seconds=4.0)
    # every sole 10 cm higher per step along x (0.3 m treads), the pelvis rising with the ground under it
    step = lambda x: 0.1 * np.floor(x / 0.3)  # noqa: E731
    flat = analyse_gait(traj)
    traj.foot_pos[..., 2] += step(traj.foot_pos[..., 0])
    traj.qpos[:, 2] += step(traj.qpos[:, 0])
    without_terrain = analyse_gait(traj)
    traj.ground_height = np.concatenate([step(traj.qpos[:, 0:1]), step(traj.foot_pos[..., 0])], axis=1)
    over_terrain = analyse_gait(traj)
    assert over_terrain.get("swing_clearance_m") == pytest.approx(flat.get("swing_clearance_m"), abs=0.01)
    assert over_terrain.get("swing_clearance_m") == pytest.approx(0.06, abs=0.01)
    assert abs(without_terrain.get("swing_clearance_m") - 0.06) > 0.02, "z alone mixes in the rise"
    assert over_terrain.get("base_height_m") == pytest.approx(flat.get("base_height_m"), abs=1e-9)


def test_a_robot_down_a_flight_of_stairs_is_upright_and_rebuilt_poses_know_their_ground(robot):
    """One-robot worlds judge falls and heights from the terrain too: a robot standing 1.8 m below its start
    (stairs_down, level 8) is upright; poses streamed from such a world come back with the ground under them."""
    from motionvl.render.rollout import trajectory_from_poses
    from motionvl.sim.single import SingleSim

    terrain = TerrainConfig(kind="stairs_down", level=8)
    sim = SingleSim(robot, terrain)
    x = 3.85
    sim.data.qpos[0] = x
    sim.data.qpos[2] += Terrain("stairs_down").height(x, 0.0, 8)
    mujoco.mj_forward(sim.model, sim.data)
    sim.step(100)
    assert sim.data.qpos[2] < 0.0 and sim.upright()
    assert sim.base_height() == pytest.approx(0.84, abs=0.03)
    np.testing.assert_allclose(sim.ground_heights(), -1.8)
    n = 5
    base = np.tile([x, 0.0, sim.data.qpos[2]], (n, 1))
    traj = trajectory_from_poses(sim.model, robot, np.arange(n) * 0.02, base, np.tile(sim.data.qpos[3:7], (n, 1)),
                                 np.tile(robot.default_pose, (n, 1)))
    np.testing.assert_allclose(traj.ground_height, -1.8)
    assert not traj.fell.any()


def test_a_policy_evaluated_at_a_fixed_level_of_held_out_terrain(trained_run, robot):
    from motionvl.rl.evaluate import evaluate

    policy = trained_run[0] / "policy.onnx"
    result = evaluate(policy, seconds=0.4, episodes=2, terrain="stairs_down", terrain_level=2, seed=7, robot=robot,
                      return_trajectories=True)
    assert result["terrain"] == "stairs_down" and result["terrain_level"] == 2
    traj = result["trajectories"][0]
    ground = Terrain("stairs_down").height(traj.qpos[:, 0], traj.qpos[:, 1], 2)
    np.testing.assert_allclose(traj.ground_height[:, 0], ground)
    assert result["ground_rise_m"] == pytest.approx(np.mean([e["ground_rise_m"] for e in result["per_episode"]]))
    assert evaluate(policy, seconds=0.2, episodes=1, terrain="rough", robot=robot)["terrain_level"] == DEFAULT_LEVEL
    # as a user runs it
    env = {**os.environ, "PYTHONPATH": str(ROOT / "src")}
    proc = subprocess.run([sys.executable, "-m", "motionvl.cli", "eval", "--policy", str(policy), "--seconds", "0.2",
                           "--episodes", "1", "--terrain", "stairs_up", "--terrain-level", "4"],
                          capture_output=True, text=True, env=env, timeout=120, cwd=ROOT)
    assert proc.returncode == 0, proc.stderr
    out = json.loads(proc.stdout.strip().splitlines()[-1])
    assert (out["terrain"], out["terrain_level"]) == ("stairs_up", 4)
    with pytest.raises(ConfigError, match=r"terrain level must be an integer in \[0, 9\], got 12"):
        evaluate(policy, seconds=0.2, episodes=1, terrain="stairs_up", terrain_level=12, robot=robot)


def test_training_logs_the_terrain_level_and_a_resumed_run_keeps_each_envs_level(robot, tmp_path):
    from motionvl.rl.trainer import train_policy
    from rl_fixtures import PlaceholderReward, history_without_timings, tiny_config

    from motionvl.rl.config import SelectionConfig

    cfg = tiny_config(terrain="stairs_up", terrain_curriculum=TerrainCurriculumConfig(start_level=5, up_distance_m=0.02))
    cfg.save_interval = 2
    cfg.selection = SelectionConfig(iterations=4, every=4, episodes=1, seconds=0.2, seed=11)
    result = train_policy(tmp_path / "one_go", PlaceholderReward(), cfg, max_iterations=4, progress=False, robot=robot)
    stopped = tmp_path / "stopped"
    train_policy(stopped, PlaceholderReward(), cfg, max_iterations=4, progress=False, robot=robot,
                 on_iteration=lambda record: record["iteration"] < 2)
    train_policy(stopped, PlaceholderReward(), None, resume=True, max_iterations=4, progress=False, robot=robot)
    one_go = history_without_timings(tmp_path / "one_go")
    levels = [r["terrain_level"] for r in one_go]
    assert all(0.0 <= lv <= 9.0 for lv in levels) and len(set(levels)) > 1, "the levels move as episodes end"
    assert history_without_timings(stopped) == one_go
    assert result.term_stats["terrain_level"]["last"] == levels[-1]
    # the exported policy is chosen on the run's terrain, at the level evaluation uses
    validated = json.loads((tmp_path / "one_go" / "selection.json").read_text())
    assert (validated["config"]["terrain"], validated["config"]["terrain_level"]) == ("stairs_up", DEFAULT_LEVEL)
    assert validated["candidates"]
    # a run warm-started from it goes on at the parent's terrain levels, not from its own start_level
    import torch

    parent = torch.load(tmp_path / "one_go" / "checkpoints" / "latest.pt", weights_only=False)["infos"]["terrain_levels"]
    child_cfg = dataclasses.replace(cfg, env=dataclasses.replace(cfg.env, terrain_curriculum=TerrainCurriculumConfig()))
    child = train_policy(tmp_path / "child", PlaceholderReward(), child_cfg, max_iterations=1, progress=False,
                         robot=robot, warm_start=tmp_path / "one_go")
    reached = child.term_stats["terrain_level"]["last"]
    # an env moves at most a level per episode, and no episode of 0.2 s ends twice in an iteration of 0.16 s:
    # from level 0 the child could not pass level 1
    assert abs(reached - np.mean(parent)) <= 1.0 and reached > 1.0


def test_nodes_build_the_tasks_terrain_at_its_level(ros_context):
    from rclpy.parameter import Parameter

    from motionvl.ros.camera_renderer_node import CameraRendererNode
    from motionvl.ros.simulator_node import SimulatorNode
    from motionvl.ros.vlm_critic_node import VlmCriticNode

    def start(node_class, **values):
        return node_class(context=ros_context, namespace=f"/t{uuid.uuid4().hex[:8]}",
                          parameter_overrides=[Parameter(k, value=v) for k, v in values.items()])

    on_step = PLATFORM_HALF_M + 2.5 * TREAD_M  # the third step
    sim = start(SimulatorNode, terrain="stairs_up", terrain_level=3, realtime=False)
    cam = start(CameraRendererNode, terrain="stairs_up", terrain_level=3)
    critic = start(VlmCriticNode, terrain="stairs_up", terrain_level=3, backend="kinematic")
    default = start(CameraRendererNode, terrain="slope_down")
    try:
        for model in (sim.sim.model, cam.model, critic.service.model):
            data = mujoco.MjData(model)
            mujoco.mj_kinematics(model, data)
            assert ground_height(model, data, on_step, 0.0) == pytest.approx(3 * LEVELS[3].step_height_m)
        data = mujoco.MjData(default.model)
        mujoco.mj_kinematics(default.model, data)
        grade = np.tan(np.radians(LEVELS[DEFAULT_LEVEL].slope_deg))
        assert ground_height(default.model, data, 2.0, 0.0) == pytest.approx(-grade * (2.0 - PLATFORM_HALF_M))
    finally:
        for node in (sim, cam, critic, default):
            node.destroy_node()
    for values, message in (({"terrain": "stairs_up", "terrain_level": 10}, "terrain level"),
                            ({"terrain": "stairs"}, "parameter terrain must be one of")):
        with pytest.raises(ConfigError, match=message):
            start(SimulatorNode, **values)
