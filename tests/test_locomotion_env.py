"""LocomotionEnv behaviour that training depends on: resets, observations, latency, contracts."""

from __future__ import annotations

import dataclasses

import mujoco
import numpy as np
import pytest

from motionvl.envs.config import CommandConfig, EnvConfig, RandomizationConfig
from motionvl.envs.locomotion import LocomotionEnv
from motionvl.robot import ConfigError, load_robot_config
from motionvl.sim.backend import MujocoBatchBackend
from motionvl.sim.math import quat_from_yaw, yaw_of
from motionvl.sim.model import build_model


@pytest.fixture(scope="module")
def robot():
    return load_robot_config()


def test_observation_layout_size_and_reading_is_pure(robot):
    env = LocomotionEnv(robot, EnvConfig(num_envs=4, obs_history=2, seed=3, heading_observation=False))
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


@pytest.mark.parametrize("start_time", [0.0, 16.0])
def test_native_latency_equals_substep_reference(robot, start_time):
    """MuJoCo's actuator delay switches each env to its new target after `latency` substeps, bit
    for bit as switching ctrl by hand between single substeps does; also from t = 16 s on, where
    the rounding of d.time exceeds MuJoCo's 1e-15 s exact-sample tolerance (a delay of exactly
    `latency` steps fails there)."""
    train_robot = dataclasses.replace(robot, sim_dt=0.005, decimation=4)
    # b, the reference, has no ctrl history at all: it switches ctrl itself between substeps
    a = MujocoBatchBackend(build_model(train_robot, ctrl_history=4), 6, 2)
    b = MujocoBatchBackend(build_model(train_robot), 6, 2)
    ids, latency = np.arange(6), np.array([0, 1, 2, 3, 4, 2])
    old = np.tile(robot.default_pose, (6, 1))
    for sim in (a, b):
        sim.reset()
        sim.batch.bind("time")[:] = start_time
        sim.ctrl[:] = old
    a.reset_ctrl_history(ids, old)
    a.set_ctrl_delay(ids, latency)
    rng = np.random.default_rng(0)
    for _ in range(5):
        new = robot.default_pose + rng.uniform(-0.3, 0.3, old.shape)
        a.ctrl[:] = new
        a.step(4)
        for k in range(4):
            b.ctrl[:] = np.where((latency <= k)[:, None], new, old)
            b.step(1)
        old = new
    assert np.array_equal(a.qpos, b.qpos) and np.array_equal(a.qvel, b.qvel)
    assert np.array_equal(a.sensordata, b.sensordata) and np.array_equal(a.actuator_force, b.actuator_force)
    assert not np.array_equal(a.qpos[0], a.qpos[4]), "different latencies give different motion"


def test_ctrl_history_reset_writes_what_mujoco_writes(robot):
    model = build_model(dataclasses.replace(robot, sim_dt=0.005, decimation=4), ctrl_history=4)
    sim = MujocoBatchBackend(model, 3, 1)
    sim.reset()
    ctrl = np.random.default_rng(1).uniform(-1, 1, (2, model.nu))
    sim.reset_ctrl_history(np.array([0, 2]), ctrl)
    data = mujoco.MjData(model)
    mujoco.mj_resetData(model, data)
    for i in range(model.nu):
        mujoco.mj_initCtrlHistory(model, data, i, None, np.full((4, 1), ctrl[1, i]))
    assert np.array_equal(sim.batch.bind("history")[2], data.history)
    with pytest.raises(ValueError, match="ctrl history"):
        sim.set_ctrl_delay(np.array([0]), np.array([5]))


def test_latency_is_drawn_in_robot_pd_steps(robot):
    env = LocomotionEnv(robot, EnvConfig(num_envs=256, seed=0))
    # 1..10 steps at the robot's 2 ms become 0..4 steps of the 5 ms training physics
    assert env.latency.min() >= 0 and env.latency.max() <= env.decimation
    assert len(np.unique(env.latency)) >= 4
    # each env's latency is MuJoCo's actuator delay: zero-order hold reads sample `latency` back
    delay = env.sim.per_env_model_field("actuator_delay") / env.sim_dt
    lat = env.latency[:, None]
    assert np.all(np.where(lat > 0, (delay > lat - 1) & (delay < lat), delay == 0))


def test_critic_sees_the_randomization_draws_the_simulator_uses(robot):
    J = robot.num_joints
    rand = RandomizationConfig(added_mass=True)
    plain = LocomotionEnv(robot, EnvConfig(num_envs=8, num_threads=1, seed=2, randomization=rand,
                                           critic_sees_randomization=False))
    env = LocomotionEnv(robot, EnvConfig(num_envs=8, num_threads=1, seed=2, randomization=rand,
                                         critic_sees_randomization=True))
    assert plain.num_privileged == 6 and env.num_privileged == 6 + 2 * J + 4
    assert sum(n for _, n, _ in env.privileged_layout) == env.num_privileged
    for _ in range(3):
        env.step(np.zeros((8, J)))
    priv = env.privileged_observations()
    s = env.state
    np.testing.assert_allclose(priv[:, :6], np.column_stack([2 * s.base_lin_vel, s.base_height, s.foot_contact]))
    tail = priv[:, 6:]
    # each column read back from the per-env MuJoCo model, not from the draw buffers
    friction = env.sim.per_env_model_field("geom_friction")[:, 0, 0]
    np.testing.assert_allclose(tail[:, 0], friction - np.mean(rand.friction_range))
    kp = env.sim.per_env_model_field("actuator_gainprm")[:, :, 0]
    np.testing.assert_allclose(tail[:, 1:1 + J], np.log(kp / env.model.actuator_gainprm[:, 0]), atol=1e-12)
    frictionloss = env.sim.per_env_model_field("dof_frictionloss")[:, env._qvel_j]
    np.testing.assert_allclose(tail[:, 1 + J:1 + 2 * J], np.log(frictionloss / robot.joint_friction), atol=1e-12)
    delay = env.sim.per_env_model_field("actuator_delay")[:, 0] / env.sim_dt
    np.testing.assert_allclose(tail[:, 1 + 2 * J], np.ceil(delay - 1e-9) / env.decimation)
    mass = env.sim.per_env_model_field("body_mass")[:, env._base_body] - env.model.body_mass[env._base_body]
    np.testing.assert_allclose(tail[:, 2 + 2 * J], mass * 0.25)
    np.testing.assert_allclose(tail[:, 3 + 2 * J], 3 / env._push_steps)
    assert np.ptp(tail[:, 0]) > 0.1 and np.ptp(tail[:, 1:1 + J]) > 0.05, "draws differ between envs"


def test_training_dt_must_keep_the_control_period(robot):
    with pytest.raises(ConfigError, match="control period"):
        LocomotionEnv(robot, EnvConfig(num_envs=2, sim_dt=0.005, decimation=5))


def test_fixed_heading_and_disabled_randomization(robot):
    cfg = EnvConfig(num_envs=2, random_heading=False, randomization=RandomizationConfig.disabled())
    env = LocomotionEnv(robot, cfg)
    assert np.allclose(env.state.base_quat, [1, 0, 0, 0])
    assert np.all(env.latency == 0)


def test_command_curriculum_starts_forward_and_widens_only_while_tracking(robot):
    commands = CommandConfig(curriculum=True, standing_fraction=0.0, curriculum_window_s=0.04, curriculum_error=0.0)
    env = LocomotionEnv(robot, EnvConfig(num_envs=64, seed=2, commands=commands,
                                         randomization=RandomizationConfig.disabled()))
    assert env.command_level == 0.0
    lo, hi = np.array([commands.start_vx[0], commands.start_vy[0], commands.start_yaw_rate[0]]), \
        np.array([commands.start_vx[1], commands.start_vy[1], commands.start_yaw_rate[1]])
    assert np.all((env.command >= lo) & (env.command <= hi)), "level 0 samples the forward start ranges"
    assert env.window_tracking_error is None
    errors = []
    for _ in range(6):  # three windows; no error is below 0 m/s: the level must not move
        env.step(np.zeros((64, robot.num_joints)))
        errors.append(np.linalg.norm(env.command[:, :2] - env.state.base_lin_vel[:, :2], axis=1))
    assert env.command_level == 0.0
    assert env.window_tracking_error == pytest.approx(np.mean(errors[4:])), "the last window's mean error"

    env.cfg.commands.curriculum_error = 10.0  # every window now counts as tracking well
    for _ in range(6):
        env.step(np.zeros((64, robot.num_joints)))
    assert env.command_level == pytest.approx(3 * commands.curriculum_step)
    vx, vy, yaw = commands.ranges(1.0)
    assert (vx, vy, yaw) == (commands.vx, commands.vy, commands.yaw_rate)
    assert commands.ranges(0.5)[0] == pytest.approx(((0.3 - 0.5) / 2, (0.8 + 1.0) / 2))
    without = CommandConfig(curriculum=False)
    assert without.ranges(0.0) == (without.vx, without.vy, without.yaw_rate), "no curriculum: full ranges"


def test_a_share_of_the_commands_is_drawn_around_the_tasks_and_the_rest_over_the_ranges(robot):
    """The task's share (motionvl.task, CommandConfig.task_share) is drawn within task_spread of its command, outside
    the forward-first curriculum; without a task the draws are what they were."""
    task = (0.0, 0.0, 0.5)
    commands = CommandConfig(task=task, task_share=0.5, task_spread=(0.1, 0.05, 0.1), standing_fraction=0.0)
    env = LocomotionEnv(robot, EnvConfig(num_envs=256, seed=2, commands=commands,
                                         randomization=RandomizationConfig.disabled()))
    near = np.all(np.abs(env.command - task) <= np.array(commands.task_spread) + 1e-9, axis=1)
    assert 0.35 < near.mean() < 0.65, near.mean()
    assert np.all(env.command[~near, 0] >= commands.start_vx[0]), "the rest: the curriculum's forward start"
    exact = LocomotionEnv(robot, EnvConfig(num_envs=64, seed=2, randomization=RandomizationConfig.disabled(),
                                           commands=CommandConfig(task=(0.0, 0.0, 0.0), task_share=1.0,
                                                                  task_spread=(0.0, 0.0, 0.0))))
    assert np.all(exact.command == 0.0), "a standing task trains at its command exactly"
    plain = dict(num_envs=64, seed=2, randomization=RandomizationConfig.disabled())
    assert np.array_equal(LocomotionEnv(robot, EnvConfig(**plain)).command,
                          LocomotionEnv(robot, EnvConfig(**plain, commands=CommandConfig(task=task))).command), \
        "share 0 draws exactly what no task draws"


def test_push_times_are_when_step_pushes(robot):
    only_push = dataclasses.replace(RandomizationConfig.disabled(), push=True, push_interval_s=0.1, push_velocity=1.0)
    env = LocomotionEnv(robot, EnvConfig(num_envs=2, seed=5, terrain="flat", gait_feedforward=0.0,
                                         gait_stride_feedforward=0.0, randomization=only_push))  # standing robots
    pushed_at = []
    assert not env.last_push.any()
    for k in range(1, 16):
        before = env.sim.qvel[:, 0:2].copy()
        last_push = env.last_push.copy()
        env.step(np.zeros((2, robot.num_joints)))
        if np.abs(env.sim.qvel[:, 0:2] - before).max() > 0.2:  # standing robots drift by far less per step
            pushed_at.append(round(k * env.dt, 6))
            # last_push is the velocity change this step's push made (a standing robot's own change is small)
            np.testing.assert_allclose(env.sim.qvel[:, 0:2] - before, env.last_push, atol=0.1)
            assert not np.allclose(env.last_push, last_push)
        else:
            np.testing.assert_array_equal(env.last_push, last_push)
    assert pushed_at == pytest.approx(list(env.push_times(0.31)))
    env.reset()
    assert not env.last_push.any(), "a new episode has not been pushed yet"
    assert list(env.push_times(0.31)) == pytest.approx([0.1, 0.2, 0.3])
    assert env.push_times(0.09).size == 0
    assert LocomotionEnv(robot, EnvConfig(num_envs=1, randomization=RandomizationConfig.disabled())).push_times(10).size == 0


def test_pushes_follow_the_configured_push_velocity(robot):
    only_push = dataclasses.replace(RandomizationConfig.disabled(), push=True, push_interval_s=0.02, push_velocity=0.25)
    env = LocomotionEnv(robot, EnvConfig(num_envs=64, seed=2, randomization=only_push))
    env.step(np.zeros((64, robot.num_joints)))
    assert env.last_push.any() and np.abs(env.last_push).max() <= 0.25
    assert np.abs(env.last_push).max() > 0.2, "64 uniform draws per axis reach near the bound"


def test_a_moved_first_push_keeps_the_interval_and_push_times_follows_each_env(robot):
    only_push = dataclasses.replace(RandomizationConfig.disabled(), push=True, push_interval_s=0.1, push_velocity=1.0)
    env = LocomotionEnv(robot, EnvConfig(num_envs=6, seed=3, randomization=only_push))
    env.push_offset[:] = np.arange(6) % env.push_interval_steps  # as the push recovery map moves the first push
    pushed_at = [[] for _ in range(env.num_envs)]
    for k in range(1, 16):
        before = env.sim.qvel[:, 0:2].copy()
        env.step(np.zeros((env.num_envs, robot.num_joints)))
        for i in np.flatnonzero(np.abs(env.sim.qvel[:, 0:2] - before).max(axis=1) > 0.2):
            pushed_at[i].append(round(k * env.dt, 6))
    for i, times in enumerate(pushed_at):
        assert times == pytest.approx(list(env.push_times(0.31, env_index=i)))
        assert 0.0 < times[0] <= 0.1 and np.allclose(np.diff(times), 0.1)
    assert len({times[0] for times in pushed_at}) > 1, "each env's first push where its offset puts it"


def test_heading_hold_steers_the_yaw_rate_command_back_to_the_course(robot):
    def env_with(gain: float, command=(0.5, 0.0, 0.0)) -> LocomotionEnv:
        return LocomotionEnv(robot, EnvConfig(num_envs=2, seed=3, random_heading=False,
                                              commands=CommandConfig(fixed=command, resample_s=1e9, heading_gain=gain),
                                              randomization=RandomizationConfig.disabled()))

    hold, open_loop = env_with(0.5), env_with(0.0)
    for env in (hold, open_loop):
        env.sim.qpos[0, 3:7] = quat_from_yaw(np.array([0.4]))[0]  # env 0 turned 0.4 rad left of its course
        env.sim.qpos[1, 3:7] = quat_from_yaw(np.array([-3.0]))[0]  # env 1 turned 3 rad right
        env.sim.forward(np.arange(2))
        env.step(np.zeros((2, robot.num_joints)))
    yaw_cmd = hold.command[:, 2]
    assert yaw_cmd[0] == pytest.approx(-0.5 * 0.4, abs=0.02)  # the robot may turn a little in one step
    assert yaw_cmd[1] == pytest.approx(1.0), "0.5 x 3 rad is clipped to the yaw-rate range"
    assert np.all(hold.command[:, :2] == [0.5, 0.0]) and np.all(open_loop.command == [0.5, 0.0, 0.0])
    names = [b.name for b in hold.contract.obs_layout]
    start = sum(b.size for b in hold.contract.obs_layout[:names.index("command")])
    scale = hold.contract.obs_layout[names.index("command")].scale
    assert np.allclose(hold.observations()[:, start:start + 3] / scale, hold.command), "the policy sees the held command"

    turning = env_with(0.5, command=(0.0, 0.0, 0.5))  # a commanded turn is the course: no correction at the start
    turning.step(np.zeros((2, robot.num_joints)))
    held = turning.command[:, 2] - 0.5
    assert np.all(held > 0), "a standing robot falls behind the turning heading target and is told to turn faster"
    assert np.allclose(held, 0.5 * (0.5 * turning.dt - yaw_of(turning.sim.qpos[:, 3:7])), atol=1e-9)


def test_heading_error_is_the_course_minus_the_heading_and_the_actor_may_see_it(robot):
    def env_with(heading_observation: bool, yaw_rate: float) -> LocomotionEnv:
        return LocomotionEnv(robot, EnvConfig(num_envs=2, seed=3, random_heading=False, heading_observation=heading_observation,
                                              commands=CommandConfig(fixed=(0.0, 0.0, yaw_rate), resample_s=1e9),
                                              randomization=RandomizationConfig.disabled()))

    plain, seeing = env_with(False, 0.5), env_with(True, 0.5)
    assert seeing.num_obs == plain.num_obs + 1
    names = [b.name for b in seeing.contract.obs_layout]
    at = sum(b.size for b in seeing.contract.obs_layout[:names.index("heading_error")])
    assert names.index("heading_error") == names.index("command") + 1
    assert np.allclose(seeing.observations()[:, at], 0.0), "a new command starts on course"
    for env in (plain, seeing):
        for _ in range(25):  # 0.5 s of a 0.5 rad/s turn command while holding the standing pose
            env.step(np.zeros((2, robot.num_joints)))
    expected = 0.5 * 25 * seeing.dt - yaw_of(seeing.sim.qpos[:, 3:7])
    assert np.allclose(seeing.state.heading_error, expected, atol=1e-9)
    assert np.all(expected > 0.2), "standing still, the robot falls behind the turning course: + = turn left"
    assert np.allclose(seeing.observations()[:, at], expected), "unscaled, unclipped below 1 rad"
    without = np.delete(seeing.observations(), at, axis=1)
    assert np.allclose(without, plain.observations()), "the other inputs do not change"
    # the input saturates far off course, the state keeps the wrapped angle
    seeing.sim.qpos[0, 3:7] = quat_from_yaw(np.array([-2.5]))[0]
    seeing.sim.forward(np.arange(2))
    seeing.step(np.zeros((2, robot.num_joints)))
    assert seeing.observations()[0, at] == pytest.approx(1.0)
    assert -np.pi <= seeing.state.heading_error[0] < np.pi and seeing.state.heading_error[0] > 2.5
    # a reset starts a new course from the heading the robot has then
    seeing.reset(np.array([0]))
    assert seeing.observations()[0, at] == pytest.approx(0.0, abs=1e-12)


def test_velocity_average_follows_each_policy_step_and_restarts_at_reset(robot):
    env = LocomotionEnv(robot, EnvConfig(num_envs=3, seed=4, randomization=RandomizationConfig.disabled()))
    assert np.all(env.state.base_vel_avg == 0.0)
    alpha = env.dt / env.cfg.gait_period_s
    expected = np.zeros((3, 3))
    rng = np.random.default_rng(0)
    for _ in range(5):
        env.step(rng.uniform(-0.3, 0.3, (3, robot.num_joints)))
        now = np.column_stack([env.state.base_lin_vel[:, 0:2], env.state.base_ang_vel[:, 2]])
        expected += alpha * (now - expected)
        assert np.allclose(env.state.base_vel_avg, expected)
    assert np.abs(expected).max() > 1e-3, "the robots moved, the average must have too"
    env.reset(np.array([1]))  # resetting one env must neither advance the others nor keep its own
    assert np.allclose(env.state.base_vel_avg[[0, 2]], expected[[0, 2]])
    assert np.all(env.state.base_vel_avg[1] == 0.0)


def test_mixed_terrain_puts_each_env_on_its_own_floor(robot):
    """terrain 'mixed': one model, two floors; a robot on rough ground stands on the bumps, one on flat
    ground on the plane, side by side at the same (x, y), and base height is measured from each env's floor."""
    cfg = EnvConfig(num_envs=16, seed=4, terrain="mixed", rough_fraction=0.5, random_heading=False,
                    reset_joint_noise=0.0, reset_base_velocity_noise=0.0, randomization=RandomizationConfig.disabled())
    env = LocomotionEnv(robot, cfg)
    rough = env.on_rough.copy()
    assert 0 < rough.sum() < 16, "each reset draws an env's floor"
    # the centre of the 3 x 3 cells (0.4 m square) whose lowest point stands highest above the plane
    hf = env._hfield
    ground = hf.z0 + hf.data * hf.size[2]
    window_min = np.lib.stride_tricks.sliding_window_view(ground, (3, 3)).min(axis=(2, 3))
    row, col = np.unravel_index(np.argmax(window_min), window_min.shape)
    assert window_min[row, col] > 0.008
    x = -hf.size[0] + (col + 1) * 2 * hf.size[0] / (hf.ncol - 1)
    y = -hf.size[1] + (row + 1) * 2 * hf.size[1] / (hf.nrow - 1)
    bump = float(hf.height(np.array([x]), np.array([y]))[0])
    stand_z = env.sim.qpos[~rough, 2][0]  # flat envs start at the keyframe height
    qpos = env.sim.qpos
    qpos[:, 0], qpos[:, 1] = x, y
    qpos[:, 2] = stand_z + np.where(rough, bump, 0.0)
    env.sim.forward()
    for _ in range(25):  # 0.5 s holding the default pose
        env.step(np.zeros((16, robot.num_joints)))
    assert not env.state.terminated.any()
    sole_z = env.state.foot_pos[:, :, 2].min(axis=1)
    assert np.all(np.abs(sole_z[~rough] - sole_z[~rough].mean()) < 0.005)
    assert sole_z[rough].min() > sole_z[~rough].max() + 0.007, "rough-ground robots stand on the bumps"
    assert np.allclose(env.state.base_height[rough].mean(), env.state.base_height[~rough].mean(), atol=0.02)
    assert stand_z > 0.7
    # the draw follows rough_fraction and survives resets of other envs
    env.reset(np.arange(8))
    assert np.array_equal(env.on_rough[8:], rough[8:])
    all_rough = LocomotionEnv(robot, dataclasses.replace(cfg, num_envs=4, rough_fraction=1.0))
    assert all_rough.on_rough.all()
    with pytest.raises(ConfigError, match="rough_fraction"):
        LocomotionEnv(robot, dataclasses.replace(cfg, num_envs=2, rough_fraction=1.5))


def test_joint_targets_use_each_joints_action_scale(robot):
    scales = {"left_knee": 1.0, "right_knee": 1.0, "left_ankle_pitch": 0.7, "right_ankle_pitch": 0.7}
    joints = tuple(dataclasses.replace(j, action_scale=scales.get(j.name)) for j in robot.joints)
    env = LocomotionEnv(dataclasses.replace(robot, joints=joints),
                        EnvConfig(num_envs=2, gait_feedforward=0.0, gait_stride_feedforward=0.0,
                                  randomization=RandomizationConfig.disabled()))
    env.reset()
    actions = np.full((2, env.num_joints), 0.8)
    actions[1] *= -1
    env.step(actions)
    unclipped = robot.default_pose + np.array([scales.get(n, robot.action_scale) for n in robot.joint_names]) * actions
    expected = np.clip(unclipped, *robot.target_limits())  # training clips where the deployment does
    np.testing.assert_allclose(env.sim.ctrl, expected)
    assert (expected != np.clip(unclipped, robot.lower, robot.upper)).any(), "a target reaches the margin"
    knee = robot.joint_names.index("left_knee")
    assert env.sim.ctrl[0, knee] == pytest.approx(robot.default_pose[knee] + 0.8)  # not the robot's 0.5 x 0.8


def test_gait_feedforward_folds_the_clocks_swing_leg_under_the_policys_action(robot):
    from motionvl.rewards.terms import reference_gait_joint_indices, reference_gait_offsets

    def env_with(feedforward: float, command, stand_below: float = 0.1) -> LocomotionEnv:
        return LocomotionEnv(robot, EnvConfig(num_envs=3, num_threads=1, seed=2, gait_feedforward=feedforward,
                                              gait_stride_feedforward=0.0, gait_stand_below=stand_below,
                                              commands=CommandConfig(fixed=command, resample_s=1e9),
                                              randomization=RandomizationConfig.disabled()))

    idx = reference_gait_joint_indices(robot.joint_roles)
    actions = np.random.default_rng(0).uniform(-0.3, 0.3, (3, robot.num_joints))
    plain, fed = env_with(0.0, (0.6, 0.0, 0.0)), env_with(0.35, (0.6, 0.0, 0.0))
    for step in range(12):  # into the first swing: the fold is 0 at lift-off
        observed = fed.state
        plain.step(actions)
        fed.step(actions)
        expected = np.zeros((3, robot.num_joints))
        expected[:, idx] = reference_gait_offsets(observed, 0.35)
        target = np.clip(robot.default_pose + robot.action_scales * actions + expected, *robot.target_limits())
        np.testing.assert_allclose(fed.sim.ctrl, target, atol=1e-12)
        if step == 0:
            np.testing.assert_allclose(fed.sim.ctrl, plain.sim.ctrl, atol=1e-12)  # same start, phase 0: no fold yet
    assert np.abs(expected).max() > 0.1, "mid-swing the fold is well away from the default pose"
    assert not np.allclose(fed.sim.qpos, plain.sim.qpos)
    standing = env_with(0.35, (0.0, 0.0, 0.0))
    for _ in range(12):
        standing.step(actions)
    np.testing.assert_allclose(standing.sim.ctrl, np.clip(robot.default_pose + robot.action_scales * actions,
                                                          *robot.target_limits()), atol=1e-12)
    # a negative gait_stand_below keeps the fold stepping in place at a standing command
    in_place, walking = env_with(0.35, (0.0, 0.0, 0.0), stand_below=-1.0), env_with(0.35, (0.6, 0.0, 0.0))
    for _ in range(12):
        in_place.step(actions)
        walking.step(actions)
    np.testing.assert_allclose(in_place.sim.ctrl, walking.sim.ctrl, atol=1e-12)
    with pytest.raises(ConfigError, match="gait_feedforward"):
        env_with(-0.1, (0.6, 0.0, 0.0))
    with pytest.raises(ConfigError, match="gait_feedforward"):
        LocomotionEnv(dataclasses.replace(robot, action_mode="relative"), EnvConfig(num_envs=1, gait_feedforward=0.2))


def test_stride_feedforward_sweeps_the_hips_as_the_forward_command_asks(robot):
    from motionvl.rewards.terms import reference_gait_joint_indices, reference_gait_offsets

    def env_with(stride: float, command) -> LocomotionEnv:
        return LocomotionEnv(robot, EnvConfig(num_envs=2, num_threads=1, seed=2, gait_feedforward=0.3,
                                              gait_stride_feedforward=stride, gait_stand_below=-1.0,
                                              commands=CommandConfig(fixed=command, resample_s=1e9),
                                              randomization=RandomizationConfig.disabled()))

    idx = reference_gait_joint_indices(robot.joint_roles)  # [left, right] x (hip pitch, knee, ankle pitch)
    actions = np.zeros((2, robot.num_joints))
    fold_only, swept = env_with(0.0, (0.5, 0.0, 0.0)), env_with(0.4, (0.5, 0.0, 0.0))
    sweeps, phases = [], []
    for _ in range(40):  # more than a gait period (0.7 s = 35 policy steps)
        observed = swept.state
        phases.append(observed.gait_phase[0])
        fold_only.step(actions)
        swept.step(actions)
        delta = swept.sim.ctrl[:, idx] - fold_only.sim.ctrl[:, idx]  # the sweep alone (the pose stays within limits)
        np.testing.assert_allclose(delta[:, :, 1], 0.0, atol=1e-12)  # the knee does not sweep
        np.testing.assert_allclose(delta[:, :, 2], -delta[:, :, 0], atol=1e-12)  # the ankle keeps the sole level
        np.testing.assert_allclose(swept.sim.ctrl[:, idx] - robot.default_pose[idx],
                                   reference_gait_offsets(observed, 0.3, -1.0, 0.4), atol=1e-12)
        sweeps.append(delta[0, :, 0])
    sweeps, phases = np.array(sweeps), np.array(phases)
    reach = 0.4 * 0.5
    assert np.abs(sweeps).max() == pytest.approx(reach, abs=0.02)
    left_stance = phases < 0.5
    # the stance hip moves back (towards +reach, foot behind) and the swing hip forward, one after the other
    assert np.all(np.diff(sweeps[:, 0][left_stance][:10]) > 0) and np.all(np.diff(sweeps[:, 1][left_stance][:10]) < 0)
    np.testing.assert_allclose(sweeps[:, 0] + sweeps[:, 1], 0.0, atol=1e-12)  # the legs sweep against each other
    # walking backwards sweeps the other way; turning in place (no forward command) does not sweep
    pairs = {"backwards": (env_with(0.4, (-0.5, 0.0, 0.0)), env_with(0.0, (-0.5, 0.0, 0.0))),
             "turning": (env_with(0.4, (0.0, 0.0, 0.5)), env_with(0.0, (0.0, 0.0, 0.5)))}
    for step in range(12):
        delta = {}
        for name, (with_stride, without) in pairs.items():
            with_stride.step(actions)
            without.step(actions)
            delta[name] = with_stride.sim.ctrl[:, idx] - without.sim.ctrl[:, idx]
        np.testing.assert_allclose(delta["backwards"][0, :, 0], -sweeps[step], atol=1e-12)
        np.testing.assert_allclose(delta["turning"], 0.0, atol=1e-12)
    with pytest.raises(ConfigError, match="gait_stride_feedforward"):
        env_with(-0.1, (0.5, 0.0, 0.0))
