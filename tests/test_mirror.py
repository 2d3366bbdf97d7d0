"""Left-right mirror maps (motionvl.envs.mirror) and rsl_rl's symmetry augmentation over them."""

from __future__ import annotations

import dataclasses

import numpy as np
import pytest
import torch

from motionvl.envs.config import EnvConfig, RandomizationConfig
from motionvl.envs.locomotion import LocomotionEnv
from motionvl.envs.mirror import EnvMirror, joint_mirror
from motionvl.rewards.spec import load_reward_spec
from motionvl.rl.config import TrainConfig
from motionvl.rl.mirror_loss import LeanMirrorLoss, compare_with_rsl_rl
from motionvl.rl.trainer import build_runner, run_iteration
from motionvl.rl.vecenv import LocomotionVecEnv, mirror_batch
from motionvl.robot import ConfigError, load_robot_config
from motionvl.sim.model import build_model, build_spec

ROBOT = load_robot_config()


def test_joint_mirror_pairs_sides_and_flips_roll_and_yaw():
    perm, sign = joint_mirror(build_model(ROBOT), ROBOT)
    names = list(ROBOT.joint_names)
    for i, name in enumerate(names):
        side, kind = ROBOT.joint_roles[i]
        assert ROBOT.joint_roles[perm[i]] == ({"left": "right", "right": "left"}[side], kind)
        assert sign[i] == (-1.0 if ("roll" in name or "yaw" in name) else 1.0), name
    # the joint limits of the robot file agree: a roll joint's range mirrors to its partner's
    lower, upper = np.asarray(ROBOT.lower), np.asarray(ROBOT.upper)
    mirrored = np.sort(np.stack([lower[perm] * sign, upper[perm] * sign]), axis=0)
    np.testing.assert_allclose(mirrored, np.stack([lower, upper]))


def test_an_asymmetric_robot_is_refused():
    spec = build_spec(ROBOT)
    joint = next(j for j in spec.joints if j.name == "right_hip_pitch")
    joint.axis = [0.0, 0.0, 1.0]  # a right hip that pitches about z: not the mirror image of the left
    with pytest.raises(ConfigError, match="axis of 'right_hip_pitch'"):
        joint_mirror(spec.compile(), ROBOT)
    # the partner comes from the declared roles, not the name: a right knee declared as something else
    joints = tuple(dataclasses.replace(j, kind="stifle") if j.name == "right_knee" else j for j in ROBOT.joints)
    with pytest.raises(ConfigError, match="'left_knee' \\(left knee\\) has no partner"):
        joint_mirror(build_model(ROBOT), dataclasses.replace(ROBOT, joints=joints))


def test_mirroring_refuses_different_action_scales_on_the_two_sides():
    joints = tuple(dataclasses.replace(j, action_scale=1.0) if j.name == "left_knee" else j for j in ROBOT.joints)
    env = LocomotionEnv(dataclasses.replace(ROBOT, joints=joints), EnvConfig(num_envs=2))
    with pytest.raises(ConfigError, match="action_scales differs between mirrored joints: left_knee 1 vs right_knee 0.5"):
        EnvMirror.of(env)


def _mirror_env_1_onto_env_0(env: LocomotionEnv, m: EnvMirror, half_period_steps: int) -> None:
    """Make env 1 the mirror image of env 0: the MuJoCo state, the env's own buffers, the gait clock."""
    q, v, j, jv = env.sim.qpos, env.sim.qvel, env._qp, env._qv
    q[1, 0:3] = q[0, 0:3] * [1, -1, 1]
    q[1, 3:7] = q[0, 3:7] * [1, -1, 1, -1]  # the reflected rotation of a quaternion (w, x, y, z)
    q[1, j] = m.action(q[0, j])
    v[1, 0:3] = v[0, 0:3] * [1, -1, 1]
    v[1, 3:6] = v[0, 3:6] * [-1, 1, -1]
    v[1, jv] = m.action(v[0, jv])
    env.sim.ctrl[1] = m.action(env.sim.ctrl[0] - env.default_pose) + env.default_pose
    env.sim.forward()
    env.episode_length[1] = env.episode_length[0] + half_period_steps
    env.command[0] = [0.5, 0.2, 0.3]
    env.command[1] = [0.5, -0.2, -0.3]
    env._yaw_rate_input[:] = [0.3, -0.3]
    env._heading_target[1] = -env._heading_target[0]  # the yaw of the reflected quaternion
    for buf in (env.action, env.last_action, env.last_joint_vel):
        buf[1] = m.action(buf[0])
    for buf in (env.feet_air_time, env.last_contact):
        buf[1] = buf[0, ::-1]
    env.vel_avg[1] = env.vel_avg[0] * [1, -1, -1]
    env.history[:] = 0.0  # past frames (obs_history) are rebuilt from mirrored steps
    env.state = env._compute_state(np.zeros((2, 2), bool))
    env._obs = env._build_observations()


@pytest.mark.parametrize("obs_history, heading, feedforward, stride, lateral",
                         [(0, False, 0.0, 0.0, 0.0), (2, True, 0.0, 0.0, 0.0), (0, True, 0.2, 0.0, 0.0),
                          (0, True, 0.2, 0.3, 0.0), (0, True, 0.2, 0.1, 0.4)])
def test_mirrored_physics_gives_mirrored_observations_and_equal_rewards(obs_history, heading, feedforward, stride,
                                                                         lateral):
    """The maps are checked against the simulator itself: a mirrored robot driven by mirrored actions
    must observe exactly the mirror image of what the original observes, and earn the same reward."""
    period = 0.72  # 36 control steps: half a gait period is a whole number of steps
    cfg = EnvConfig(num_envs=2, num_threads=1, terrain="flat", gait_period_s=period, random_heading=False,
                    obs_history=obs_history,
                    heading_observation=heading, gait_feedforward=feedforward, gait_stride_feedforward=stride,
                    gait_lateral_stride=lateral, gait_stand_below=-1.0,
                    randomization=RandomizationConfig.disabled())
    spec = load_reward_spec()
    env = LocomotionEnv(ROBOT, cfg, reward_fn=spec)
    m = EnvMirror.of(env)
    assert m.obs_index.size == env.num_obs and sorted(m.obs_index) == list(range(env.num_obs))
    rng = np.random.default_rng(0)
    for _ in range(20):  # an asymmetric state to start from: random actions on both robots
        env.step(rng.uniform(-0.3, 0.3, (2, env.num_joints)))
    _mirror_env_1_onto_env_0(env, m, half_period_steps=int(round(period / 2 / env.dt)))
    contacts = set()
    for k in range(40):
        obs = env.observations()
        critic = np.concatenate([obs, env.privileged_observations()], axis=1)
        np.testing.assert_allclose(obs[1], m.obs(obs[0]), atol=1e-9, err_msg=f"step {k}")
        np.testing.assert_allclose(critic[1], m.critic(critic[0]), atol=1e-9, err_msg=f"step {k}")
        contacts.add(tuple(env.state.foot_contact[0]))
        a = rng.uniform(-0.6, 0.6, env.num_joints)
        _, reward, terminated, _, _ = env.step(np.stack([a, m.action(a)]))
        assert reward[1] == pytest.approx(reward[0], abs=1e-9)
        assert terminated[1] == terminated[0]
        if terminated.any():  # the robot and its mirror image fall at the same step; resets then differ
            break
    assert k >= 20
    assert len(contacts) >= 2  # the feet touched down and lifted: contacts were mirrored, not just standing
    # the mirror is an involution
    x = rng.normal(size=(3, env.num_obs))
    np.testing.assert_array_equal(m.obs(m.obs(x)), x)


def test_mirror_of_the_randomization_draws_permutes_joint_scales_and_keeps_scalars():
    env = LocomotionEnv(ROBOT, EnvConfig(num_envs=2, num_threads=1, critic_sees_randomization=True))
    m = EnvMirror.of(env)
    total = env.num_obs + env.num_privileged
    assert sorted(m.critic_index) == list(range(total))
    perm, _ = joint_mirror(env.model, ROBOT)
    J = env.num_joints
    critic = np.concatenate([env.observations(), env.privileged_observations()], axis=1)
    mirrored = m.critic(critic[0])
    draws = slice(env.num_obs + 6, total)
    tail, tail_m = critic[0, draws], mirrored[draws]
    np.testing.assert_array_equal(tail_m[1:1 + J], tail[1:1 + J][perm])  # gain scales: the partner's, sign kept
    np.testing.assert_array_equal(tail_m[1 + J:1 + 2 * J], tail[1 + J:1 + 2 * J][perm])
    np.testing.assert_array_equal(tail_m[[0, -3, -2, -1]], tail[[0, -3, -2, -1]])
    assert np.any(tail[1:1 + J] != tail[1:1 + J][perm])


def test_mirror_batch_appends_the_mirror_image():
    env = LocomotionEnv(ROBOT, EnvConfig(num_envs=4, num_threads=1))
    vec = LocomotionVecEnv(env)
    m = EnvMirror.of(env)
    obs = vec.get_observations()
    actions = torch.randn(4, env.num_joints)
    obs2, actions2 = mirror_batch(vec, obs=obs, actions=actions)
    assert obs2.batch_size[0] == 8 and actions2.shape == (8, env.num_joints)
    assert torch.equal(obs2["policy"][:4], obs["policy"]) and torch.equal(actions2[:4], actions)
    np.testing.assert_allclose(obs2["policy"][4:].numpy(), m.obs(obs["policy"].numpy()), atol=1e-6)
    np.testing.assert_allclose(obs2["critic"][4:].numpy(), m.critic(obs["critic"].numpy()), atol=1e-6)
    np.testing.assert_allclose(actions2[4:].numpy(), m.action(actions.numpy()), atol=1e-6)
    assert mirror_batch(vec, obs=None, actions=actions)[0] is None


def test_ppo_with_symmetry_augmentation_and_mirror_loss_trains():
    cfg = TrainConfig.from_dict({"env": {"num_envs": 8, "num_threads": 1},
                                 "ppo": {"num_steps_per_env": 4, "num_mini_batches": 2, "num_learning_epochs": 1,
                                         "actor_hidden_dims": [16], "critic_hidden_dims": [16],
                                         "symmetry_augmentation": True, "mirror_loss_coeff": 0.5}})
    sym = cfg.to_rsl_rl()["algorithm"]["symmetry_cfg"]
    assert sym["use_data_augmentation"] and sym["use_mirror_loss"] and sym["mirror_loss_coeff"] == 0.5
    assert TrainConfig.from_dict({}).to_rsl_rl()["algorithm"]["symmetry_cfg"] is None  # off by default
    vec, runner = build_runner(cfg, load_reward_spec(), robot=ROBOT, device="cpu")
    assert runner.alg.symmetry is not None
    before = [p.detach().clone() for p in runner.alg.actor.parameters()]
    info = run_iteration(runner, vec)
    assert np.isfinite(info["losses"]["symmetry"]) and info["losses"]["symmetry"] >= 0
    assert any(not torch.equal(a, b) for a, b in zip(before, runner.alg.actor.parameters()))
    with pytest.raises(ConfigError, match="mirror_loss_coeff"):
        TrainConfig.from_dict({"ppo": {"mirror_loss_coeff": -1.0}})


@pytest.mark.parametrize("velocity_estimator", [False, True])
def test_lean_mirror_loss_matches_rsl_rl_loss_and_gradient(velocity_estimator):
    cfg = TrainConfig.from_dict({"env": {"num_envs": 8, "num_threads": 1},
                                 "ppo": {"num_steps_per_env": 4, "num_mini_batches": 2, "num_learning_epochs": 1,
                                         "actor_hidden_dims": [16], "critic_hidden_dims": [16],
                                         "mirror_loss_coeff": 0.5, "velocity_estimator": velocity_estimator}})
    vec, runner = build_runner(cfg, load_reward_spec(), robot=ROBOT, device="cpu")
    alg = runner.alg
    assert isinstance(alg.symmetry, LeanMirrorLoss) and alg.symmetry.mirror_loss_coeff == 0.5
    info = run_iteration(runner, vec)  # fills the rollout storage (left in place after the update)
    assert np.isfinite(info["losses"]["symmetry"]) and info["losses"]["symmetry"] > 0
    batch = next(alg.storage.mini_batch_generator(2, 1))
    observations = batch.observations.clone()
    alg.symmetry.compute_loss(alg.actor, batch, batch.observations.batch_size[0])
    assert torch.equal(batch.observations["policy"], observations["policy"])  # the batch is left as given
    agreement = compare_with_rsl_rl(alg.symmetry, alg.actor, batch)
    assert agreement["loss_lean"] > 1e-6  # an untrained actor is not symmetric: the comparison is not 0 == 0
    assert agreement["loss_lean"] == pytest.approx(agreement["loss_rsl_rl"], rel=1e-5)
    assert agreement["max_abs_gradient_difference"] < 1e-6
