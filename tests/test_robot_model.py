"""The robot model: URDF and config agree, it compiles, stands under PD, is reproducible,
and bad configs fail with messages that say what is wrong."""

from __future__ import annotations

import xml.etree.ElementTree as ET
from pathlib import Path

import numpy as np
import pytest
import yaml

from motionvl.envs.config import EnvConfig
from motionvl.envs.locomotion import LocomotionEnv
from motionvl.policy_io import PolicyContract
from motionvl.robot import ConfigError, load_robot_config
from motionvl.sim.backend import MujocoBatchBackend
from motionvl.sim.model import SOLE_SITES, build_model
from motionvl.sim.single import stand

ROOT = Path(__file__).resolve().parents[1]
ROBOT_YAML = ROOT / "config" / "robot.yaml"


@pytest.fixture(scope="module")
def robot():
    return load_robot_config(ROBOT_YAML)


def test_model_compiles_with_actuators_and_sensors(robot):
    model = build_model(robot)
    assert model.nu == robot.num_joints == 12
    assert [model.actuator(i).name for i in range(model.nu)] == list(robot.joint_names)
    names = {model.sensor(i).name for i in range(model.nsensor)}
    assert {"imu_gyro", "imu_accel"} <= names
    assert {f"{s}_touch" for s in SOLE_SITES} <= names
    assert model.opt.timestep == pytest.approx(robot.sim_dt)
    # the actuators are the PD law with the config's gains and effort limits
    np.testing.assert_allclose(model.actuator_gainprm[:, 0], robot.kp)
    np.testing.assert_allclose(-model.actuator_biasprm[:, 2], robot.kd)
    np.testing.assert_allclose(model.actuator_forcerange[:, 1], robot.effort_limit)


def test_joint_order_and_limits_match_urdf(robot):
    urdf = ET.parse(robot.urdf).getroot()
    actuated = [j for j in urdf.findall("joint") if j.get("type") in ("revolute", "continuous", "prismatic")]
    assert [j.get("name") for j in actuated] == list(robot.joint_names)
    for joint, cfg in zip(actuated, robot.joints):
        limit = joint.find("limit")
        assert float(limit.get("lower")) == pytest.approx(cfg.lower), cfg.name
        assert float(limit.get("upper")) == pytest.approx(cfg.upper), cfg.name
        assert float(limit.get("effort")) == pytest.approx(cfg.effort), cfg.name
        assert float(limit.get("velocity")) == pytest.approx(cfg.velocity), cfg.name
    # and the compiled model carries the same ranges
    model = build_model(robot)
    ranges = np.array([model.jnt_range[model.joint(n).id] for n in robot.joint_names])
    np.testing.assert_allclose(ranges[:, 0], robot.lower)
    np.testing.assert_allclose(ranges[:, 1], robot.upper)


def test_stands_five_seconds_single_env(robot):
    summary, traj = stand(robot, 5.0)
    assert summary["upright"], summary
    assert summary["time"] == pytest.approx(5.0)
    assert summary["min_base_height"] > 0.75, summary
    assert traj.foot_contact[-1].all(), "both feet should be on the ground"
    assert np.abs(traj.joint_pos[-1] - robot.default_pose).max() < 0.1  # PD sag under gravity


def test_stands_five_seconds_batched(robot):
    model = build_model(robot)
    sim = MujocoBatchBackend(model, num_envs=8, num_threads=2)
    sim.reset(keyframe=model.key("home").id)
    sim.ctrl[:] = robot.default_pose
    sim.forward()
    steps = int(round(5.0 / robot.sim_dt))
    min_height = np.full(8, np.inf)
    for _ in range(steps // robot.decimation):
        sim.step(robot.decimation)
        min_height = np.minimum(min_height, sim.qpos[:, 2])
    assert (min_height > 0.75).all(), min_height
    upright_cos = 1.0 - 2.0 * (sim.qpos[:, 4] ** 2 + sim.qpos[:, 5] ** 2)
    assert (upright_cos > np.cos(0.2)).all()
    # identical copies of one model stay identical
    np.testing.assert_array_equal(sim.qpos[0], sim.qpos[-1])


def _rollout(robot, seed: int, steps: int = 50) -> dict:
    cfg = EnvConfig(num_envs=6, num_threads=2, seed=seed)  # domain randomisation on (the defaults)
    assert cfg.randomization.friction and cfg.randomization.gain_scale and cfg.randomization.latency
    env = LocomotionEnv(robot, cfg)
    rng = np.random.default_rng(123)
    out = {"obs": [], "qpos": [], "done": []}
    for _ in range(steps):
        obs, _, terminated, truncated, _ = env.step(rng.uniform(-1.0, 1.0, (env.num_envs, env.num_joints)))
        out["obs"].append(obs.copy())
        out["qpos"].append(env.sim.qpos.copy())
        out["done"].append(terminated | truncated)
    return {k: np.array(v) for k, v in out.items()}


def test_same_seed_gives_identical_trajectory(robot):
    a, b = _rollout(robot, seed=7), _rollout(robot, seed=7)
    for key in a:
        np.testing.assert_array_equal(a[key], b[key], err_msg=key)
    c = _rollout(robot, seed=8, steps=5)
    assert not np.array_equal(a["qpos"][:5], c["qpos"]), "a different seed must give a different rollout"


# ---------------------------------------------------------------- bad configs
def _write_config(tmp_path: Path, mutate=None, text: str | None = None) -> Path:
    raw = yaml.safe_load(ROBOT_YAML.read_text())
    raw["urdf"] = str(ROOT / "urdf" / "mvl_biped.urdf")
    if mutate:
        mutate(raw)
    path = tmp_path / "robot.yaml"
    path.write_text(text if text is not None else yaml.safe_dump(raw))
    return path


def test_missing_config_file(tmp_path):
    with pytest.raises(ConfigError, match="robot config not found: .*nope.yaml"):
        load_robot_config(tmp_path / "nope.yaml")


def test_bad_yaml(tmp_path):
    path = _write_config(tmp_path, text="name: [unclosed\njoints: {")
    with pytest.raises(ConfigError, match="not valid YAML"):
        load_robot_config(path)


def test_joint_count_differs_from_urdf(tmp_path):
    path = _write_config(tmp_path, mutate=lambda raw: raw["joints"].pop())  # drop right_ankle_roll
    robot = load_robot_config(path)
    assert robot.num_joints == 11
    with pytest.raises(ConfigError, match="missing from the robot config: \\['right_ankle_roll'\\]"):
        build_model(robot)


def test_unknown_joint_in_config(tmp_path):
    def rename(raw):
        raw["joints"][0]["name"] = "left_hip_twist"

    with pytest.raises(ConfigError, match="left_hip_twist"):
        build_model(load_robot_config(_write_config(tmp_path, mutate=rename)))


def test_missing_urdf(tmp_path):
    def bad_urdf(raw):
        raw["urdf"] = str(tmp_path / "missing.urdf")

    with pytest.raises(ConfigError, match="URDF not found: .*missing.urdf"):
        load_robot_config(_write_config(tmp_path, mutate=bad_urdf))


def test_missing_key_names_the_key(tmp_path):
    with pytest.raises(ConfigError, match="missing required key 'sim_dt'"):
        load_robot_config(_write_config(tmp_path, mutate=lambda raw: raw.pop("sim_dt")))


def test_a_joint_may_set_its_own_action_scale(tmp_path):
    def knee_scale(raw):
        for j in raw["joints"]:
            if j["name"].endswith("knee"):
                j["action_scale"] = 1.0

    robot = load_robot_config(_write_config(tmp_path, mutate=knee_scale))
    knees = [i for i, n in enumerate(robot.joint_names) if n.endswith("knee")]
    expected = np.full(robot.num_joints, robot.action_scale)
    expected[knees] = 1.0
    np.testing.assert_array_equal(robot.action_scales, expected)
    # the policy contract stores one value per joint
    assert PolicyContract.for_training(robot, EnvConfig()).action_scale == tuple(expected)


@pytest.mark.parametrize("where", ["robot", "joint"])
def test_action_scale_must_be_positive(tmp_path, where):
    def zero(raw):
        if where == "robot":
            raw["action_scale"] = 0.0
        else:
            raw["joints"][3]["action_scale"] = -0.5

    match = "action_scale must be > 0" if where == "robot" else "left_knee.*action_scale must be > 0"
    with pytest.raises(ConfigError, match=match):
        load_robot_config(_write_config(tmp_path, mutate=zero))


@pytest.mark.parametrize("value, match", [(0.0, r"target_limit_factor must be in \(0, 1\], got 0.0"),
                                          (1.5, r"target_limit_factor must be in \(0, 1\], got 1.5"),
                                          ("most", "target_limit_factor must be a number, got 'most'"),
                                          (0.5, r"default pose of \['left_knee', 'right_knee'\] outside")])
def test_target_limit_factor_is_validated(tmp_path, value, match):
    with pytest.raises(ConfigError, match=match):
        load_robot_config(_write_config(tmp_path, mutate=lambda raw: raw.update(target_limit_factor=value)))


def test_a_robot_config_without_target_limit_factor_keeps_targets_off_the_hard_stops(tmp_path):
    robot = load_robot_config(_write_config(tmp_path, mutate=lambda raw: raw.pop("target_limit_factor")))
    assert robot.target_limit_factor == 0.95


def test_target_limits_are_the_middle_share_of_each_range():
    robot = load_robot_config()
    assert 0 < robot.target_limit_factor < 1  # the shipped robot keeps its targets off the hard stops
    lower, upper = robot.target_limits()
    mid, half = (robot.lower + robot.upper) / 2, (robot.upper - robot.lower) / 2
    np.testing.assert_allclose(upper - mid, robot.target_limit_factor * half)
    np.testing.assert_allclose(mid - lower, robot.target_limit_factor * half)
    tighter = robot.target_limits(0.5)
    np.testing.assert_allclose(tighter[1] - mid, 0.5 * robot.target_limit_factor * half)


# ---------------------------------------------------------------- robot.yaml as the single source
def test_joint_damping_and_friction_of_the_config_are_in_the_model(tmp_path):
    """The URDF's <dynamics> (0.1 / 0.1) is overridden by robot.yaml."""
    def dynamics(raw):
        raw["joint_damping"], raw["joint_friction"] = 0.7, 0.35

    robot = load_robot_config(_write_config(tmp_path, mutate=dynamics))
    model = build_model(robot)
    dofs = [model.jnt_dofadr[model.joint(n).id] for n in robot.joint_names]
    np.testing.assert_array_equal(model.dof_damping[dofs], 0.7)
    np.testing.assert_array_equal(model.dof_frictionloss[dofs], 0.35)
    shipped = load_robot_config(ROBOT_YAML)
    np.testing.assert_array_equal(build_model(shipped).dof_damping[dofs], shipped.joint_damping)


def test_joint_roles_come_from_the_config_not_the_names(tmp_path):
    def rename(raw):  # names that say nothing; the roles stay declared
        for k, joint in enumerate(raw["joints"]):
            joint["name"] = f"j{k}"

    robot = load_robot_config(_write_config(tmp_path, mutate=rename))
    assert robot.joint_index("left", "knee") == 3 and robot.leg_pair("hip_pitch").tolist() == [2, 8]
    assert robot.mirror_partner(3) == 9 and robot.joint_roles[9] == ("right", "knee")
    from motionvl.policy_io import robot_feedforward_joints
    assert robot_feedforward_joints(robot) == (("j2", "j3", "j4"), ("j8", "j9", "j10"))
    undeclared = load_robot_config(_write_config(tmp_path, mutate=lambda raw: raw["joints"][9].pop("kind")))
    with pytest.raises(ConfigError, match="no joint is declared as the right knee"):
        undeclared.leg_pair("knee")


@pytest.mark.parametrize("mutate, message", [
    (lambda raw: raw["joints"][0].update(side="port"), "side must be 'left' or 'right'"),
    (lambda raw: raw["joints"][1].update(kind="hip_yaw"), "more than one joint declared as \\['left hip_yaw'\\]"),
    (lambda raw: raw.pop("knee_bodies"), "missing required key 'knee_bodies'"),
])
def test_bad_roles_are_refused(tmp_path, mutate, message):
    with pytest.raises(ConfigError, match=message):
        load_robot_config(_write_config(tmp_path, mutate=mutate))


def test_fall_detection_needs_the_declared_knee_bodies(tmp_path):
    """A robot whose knee links are named otherwise gets a clear error, not a silent loss of the knee check."""
    robot = load_robot_config(_write_config(tmp_path, mutate=lambda raw: raw.update(knee_bodies=["left_calf", "right_shank"])))
    with pytest.raises(ConfigError, match="knee_bodies \\['left_calf'\\] .* not links"):
        build_model(robot)
    declared_none = load_robot_config(_write_config(tmp_path, mutate=lambda raw: raw.update(knee_bodies=[])))
    env = LocomotionEnv(declared_none, EnvConfig(num_envs=1, num_threads=1))
    assert env._knee_bodies.size == 0
    assert LocomotionEnv(load_robot_config(ROBOT_YAML), EnvConfig(num_envs=1, num_threads=1))._knee_bodies.size == 2
