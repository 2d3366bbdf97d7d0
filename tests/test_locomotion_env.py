"""LocomotionEnv behaviour that training depends on: resets, observations, latency, contracts."""

from __future__ import annotations

import dataclasses

import mujoco
import numpy as np
import pytest

from motionvl.envs.config import EnvConfig, RandomizationConfig
from motionvl.envs.locomotion import LocomotionEnv
from motionvl.robot import ConfigError, load_robot_config
from motionvl.sim.backend import MujocoBatchBackend
from motionvl.sim.model import build_model


@pytest.fixture(scope="module")
def robot():
    return load_robot_config()


def test_observation_layout_size_and_reading_is_pure(robot):
    env = LocomotionEnv(robot, EnvConfig(num_envs=4, obs_history=2, seed=3))
    assert env.num_obs == 3 + 3 + 3 + 3 * robot.num_joints + 2 + 2 * (6 + 3 * robot.num_joints)
    first = env.observations().copy()
    assert np.array_equal(env.observations(), first), "reading observations must not advance the history"
    env.step(np.zeros((4, robot.num_joints)))
    obs = env.observations()
    base = 3 + 3 + 3 + 3 * robot.num_joints + 2
    newest_history = obs[:, base:base + 6 + 3 * robot.num_joints]
    # the newest history frame is the proprioception of the reset state, unscaled joint offsets included
    assert np.allclose(newest_history[:, 3:6], first[:, 3:6]), "history frame 0 holds the previous gravity reading"


def test_reset_envs_observe_their_new_state(robot):
    env = LocomotionEnv(robot, EnvConfig(num_envs=3, seed=1))
    for _ in range(5):
        env.step(np.full((3, robot.num_joints), 0.8))
    env.sim.qpos[1, 2] = 0.2  # drop env 1: the next step ends its episode
    env.sim.forward()
    obs, _, terminated, _, _ = env.step(np.zeros((3, robot.num_joints)))
    assert terminated[1]
    joint_offsets = obs[1, 9:9 + robot.num_joints]
    assert np.all(np.abs(joint_offsets) <= env.cfg.reset_joint_noise + 1e-9), "obs of env 1 describes its reset pose"
    assert env.episode_length[1] == 0 and env.state.base_height[1] > 0.7


def test_grouped_latency_equals_substep_reference(robot):
    model = build_model(dataclasses.replace(robot, sim_dt=0.005, decimation=4))
    a, b = MujocoBatchBackend(model, 6, 2), MujocoBatchBackend(model, 6, 2)
    a.reset()
    b.reset()
    rng = np.random.default_rng(0)
    old = np.tile(robot.default_pose, (6, 1))
    new = old + rng.uniform(-0.3, 0.3, old.shape)
    latency = np.array([0, 1, 2, 3, 4, 2])
    a.step_with_latency(old, new, latency, 4)
    b.ctrl[:] = old
    for k in range(4):
        b.ctrl[latency == k] = new[latency == k]
        b.batch.step(nstep=1, stage=mujoco.mjtStage.mjSTAGE_VEL)
    assert np.array_equal(a.qpos, b.qpos) and np.array_equal(a.sensordata, b.sensordata)
    assert not np.array_equal(a.qpos[0], a.qpos[4]), "different latencies give different motion"


def test_latency_is_drawn_in_robot_pd_steps(robot):
    env = LocomotionEnv(robot, EnvConfig(num_envs=256, seed=0))
    # 1..10 steps at the robot's 2 ms become 0..4 steps of the 5 ms training physics
    assert env.latency.min() >= 0 and env.latency.max() <= env.decimation
    assert len(np.unique(env.latency)) >= 4


def test_training_dt_must_keep_the_control_period(robot):
    with pytest.raises(ConfigError, match="control period"):
        LocomotionEnv(robot, EnvConfig(num_envs=2, sim_dt=0.005, decimation=5))


def test_fixed_heading_and_disabled_randomization(robot):
    cfg = EnvConfig(num_envs=2, random_heading=False, randomization=RandomizationConfig.disabled())
    env = LocomotionEnv(robot, cfg)
    assert np.allclose(env.state.base_quat, [1, 0, 0, 0])
    assert np.all(env.latency == 0)
