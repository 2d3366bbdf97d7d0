"""Build the MuJoCo model of the robot from its URDF and robot config (MjSpec, no XML copies).

The URDF carries geometry, inertials and limits; the robot config (motionvl.robot) sets the
joints' dynamics, overriding the URDF's <dynamics>: armature, passive damping and friction loss.
This module adds what URDF cannot say: a floating base, PD position actuators (tau = Kp (target -
q) - Kd dq, clipped to the effort limit, evaluated every physics step), the IMU and sole sites and
sensors, contact filtering, the terrain (motionvl.sim.terrain), lights and a tracking camera.
"""

from __future__ import annotations

import dataclasses

import mujoco
import numpy as np

from motionvl.robot import ConfigError, RobotConfig
from motionvl.sim.terrain import DEFAULT_LEVEL, KINDS, TERRAIN_GROUP, Terrain, add_terrain, check_level

# Contact groups: feet touch the ground and each other; other body parts touch only the ground
# (to detect falls and knee/torso strikes) so upright walking costs few contacts.
_FLOOR = dict(contype=1, conaffinity=1)
_FOOT = dict(contype=2, conaffinity=3)
_BODY = dict(contype=4, conaffinity=1)

TRACKING_CAMERA = "track"
SIDE_CAMERA = "side"
"""Follows the robot from its right, square to the walking direction at knee-to-hip height: the sagittal view in
which knee and ankle angles read directly and both feet stay in the frame (what the critic's frames use)."""
IMU_SITE = "imu"
SOLE_SITES = ("left_sole", "right_sole")
SOLE_HALF_SIZE = (0.11, 0.05, 0.015)
ROUGH_CELLS = 201
ROUGH_FLOOR = "rough_floor"  # the height field's geom when the plane is "floor" too (terrain "mixed")
FLOOR_CONTACT = _FLOOR
"""contype and conaffinity of every terrain geom."""


@dataclasses.dataclass(frozen=True)
class TerrainConfig:
    kind: str = "flat"
    """One of motionvl.sim.terrain.KINDS, or 'mixed' (batched training only: the plane and a rough height
    field in one model, a batch burying one of them per env)."""
    level: int | None = None
    """The difficulty level (sim.terrain.LEVELS) the world is built at; None: DEFAULT_LEVEL."""
    every_level: bool = False
    """Build every level's pieces instead, each simulation of a batch selecting its own
    (sim.terrain.LevelSelector): the terrain curriculum's world."""
    friction: float = 1.0
    rough_height: float = 0.04  # 'mixed': peak-to-peak bump height of the rough height field, metres
    rough_size: float = 20.0  # 'mixed': half-extent of the height field's square, metres
    seed: int = 0
    """Seed of the random ground (rough blocks, 'mixed''s height field)."""


    def world_level(self) -> int | None:
        """The level the world is built at (None: every level, or a kind without levels)."""
        if self.every_level or self.kind in ("flat", "mixed"):
            return None
        return DEFAULT_LEVEL if self.level is None else check_level(self.level)


def ground_surface(terrain: TerrainConfig | None):
    """(x, y) -> ground height (m) of a world with one robot built from `terrain`; None for level ground at 0."""
    terrain = single_floor(terrain)
    if terrain is None or terrain.kind == "flat":
        return None
    ground, level = Terrain(terrain.kind, terrain.seed), terrain.world_level()
    return lambda x, y: ground.height(x, y, level)


def single_floor(terrain: TerrainConfig | None) -> TerrainConfig | None:
    """terrain, checked for a world with one robot (simulator, renderer, critic): 'mixed' keeps both
    floors in one place and relies on a batch burying one of them per env, so one robot on it would
    stand on two overlapping floors; a world of every level likewise."""
    if terrain is not None and (terrain.kind == "mixed" or terrain.every_level):
        raise ConfigError(f"terrain {'mixed' if terrain.kind == 'mixed' else 'of every level'} is for batched "
                          f"training (one floor per env); use one of {', '.join(KINDS)} at one level")
    return terrain


def build_spec(robot: RobotConfig, terrain: TerrainConfig | None = None, ctrl_history: int = 0) -> mujoco.MjSpec:
    """The robot's MjSpec. ctrl_history > 0 gives every actuator a ring buffer of that many past
    controls (MuJoCo's actuator nsample, zero-order hold) and no delay yet: a per-simulation
    actuator_delay can then hold back each new target inside mj_step (see
    MujocoBatchBackend.set_ctrl_delay), for delays of up to ctrl_history physics steps."""
    terrain = terrain or TerrainConfig()
    try:
        spec = mujoco.MjSpec.from_file(str(robot.urdf))
    except Exception as exc:  # mujoco raises ValueError with the parser's message
        raise ConfigError(f"cannot load URDF {robot.urdf}: {exc}") from exc

    spec.option.timestep = robot.sim_dt
    spec.option.integrator = mujoco.mjtIntegrator.mjINT_IMPLICITFAST
    spec.option.cone = mujoco.mjtCone.mjCONE_PYRAMIDAL
    spec.option.iterations = 10
    spec.option.ls_iterations = 10
    spec.visual.global_.offwidth = 1280
    spec.visual.global_.offheight = 720

    base = spec.body(robot.base_link)
    if base is None:
        raise ConfigError(f"URDF has no base link '{robot.base_link}'")
    base.add_freejoint(name="root")
    base.pos = [0.0, 0.0, robot.init_base_height]

    urdf_joints = {j.name: j for j in spec.joints if j.type == mujoco.mjtJoint.mjJNT_HINGE}
    missing = [n for n in robot.joint_names if n not in urdf_joints]
    if missing:
        raise ConfigError(f"joints in the robot config but not in {robot.urdf.name}: {missing}")
    extra = sorted(set(urdf_joints) - set(robot.joint_names))
    if extra:
        raise ConfigError(f"actuated joints in {robot.urdf.name} missing from the robot config: {extra}")
    for j in robot.joints:
        joint = urdf_joints[j.name]
        joint.armature = robot.armature
        damping = np.zeros_like(joint.damping)  # MuJoCo 4: linear coefficient first, higher orders after
        damping[0] = robot.joint_damping
        joint.damping = damping
        joint.frictionloss = robot.joint_friction
        act = spec.add_actuator(name=j.name, target=j.name, trntype=mujoco.mjtTrn.mjTRN_JOINT)
        act.set_to_position(kp=j.kp, kv=j.kd)
        act.forcelimited = mujoco.mjtLimited.mjLIMITED_TRUE
        act.forcerange = [-j.effort, j.effort]
        act.ctrllimited = mujoco.mjtLimited.mjLIMITED_FALSE
        if ctrl_history > 0:
            act.nsample, act.interp, act.delay = int(ctrl_history), 0, 0.0

    foot_bodies = [spec.body(name) for name in robot.feet]
    if any(b is None for b in foot_bodies):
        raise ConfigError(f"URDF lacks foot links {robot.feet}")
    missing = [name for name in robot.knee_bodies if spec.body(name) is None]
    if missing:
        raise ConfigError(f"knee_bodies {missing} of the robot config are not links of {robot.urdf.name}: falls "
                          "would go undetected (name the knee links, or [] to rely on base height and tilt)")
    foot_names = set(robot.feet)
    for geom in spec.geoms:
        if geom.contype == 0 and geom.conaffinity == 0:
            continue  # a URDF <visual>: drawn, never in contact
        body_name = geom.parent.name
        groups = _FOOT if body_name in foot_names else _BODY
        geom.contype, geom.conaffinity = groups["contype"], groups["conaffinity"]
        geom.condim = 3
        geom.friction = [terrain.friction, 0.005, 0.0001]

    imu_body = spec.body(robot.imu_link)
    imu_body.add_site(name=IMU_SITE, pos=[0, 0, 0])
    for body, site_name in zip(foot_bodies, SOLE_SITES):
        # The sole box matches the foot's collision box; the touch sensor sums contact normal
        # forces of contacts inside it.
        body.add_site(name=site_name, type=mujoco.mjtGeom.mjGEOM_BOX, pos=[0.03, 0, -0.045],
                      size=[SOLE_HALF_SIZE[0] + 0.005, SOLE_HALF_SIZE[1] + 0.005, SOLE_HALF_SIZE[2] + 0.01],
                      rgba=[0, 0, 0, 0])

    spec.add_sensor(name="imu_gyro", type=mujoco.mjtSensor.mjSENS_GYRO, objtype=mujoco.mjtObj.mjOBJ_SITE, objname=IMU_SITE)
    spec.add_sensor(name="imu_accel", type=mujoco.mjtSensor.mjSENS_ACCELEROMETER, objtype=mujoco.mjtObj.mjOBJ_SITE, objname=IMU_SITE)
    for site_name in SOLE_SITES:
        spec.add_sensor(name=f"{site_name}_touch", type=mujoco.mjtSensor.mjSENS_TOUCH, objtype=mujoco.mjtObj.mjOBJ_SITE, objname=site_name)
        spec.add_sensor(name=f"{site_name}_pos", type=mujoco.mjtSensor.mjSENS_FRAMEPOS, objtype=mujoco.mjtObj.mjOBJ_SITE, objname=site_name)
        spec.add_sensor(name=f"{site_name}_vel", type=mujoco.mjtSensor.mjSENS_FRAMELINVEL, objtype=mujoco.mjtObj.mjOBJ_SITE, objname=site_name)

    _add_scene(spec, robot, terrain)
    # keyframe "home": default standing pose
    qpos = np.concatenate([[0, 0, robot.init_base_height, 1, 0, 0, 0], robot.default_pose])
    spec.add_key(name="home", qpos=qpos.tolist(), ctrl=robot.default_pose.tolist())
    return spec


def _add_scene(spec: mujoco.MjSpec, robot: RobotConfig, terrain: TerrainConfig) -> None:
    world = spec.worldbody
    spec.add_texture(name="sky", type=mujoco.mjtTexture.mjTEXTURE_SKYBOX, builtin=mujoco.mjtBuiltin.mjBUILTIN_GRADIENT,
                     rgb1=[0.55, 0.68, 0.82], rgb2=[0.1, 0.12, 0.16], width=256, height=256)
    spec.add_texture(name="grid", type=mujoco.mjtTexture.mjTEXTURE_2D, builtin=mujoco.mjtBuiltin.mjBUILTIN_CHECKER,
                     rgb1=[0.32, 0.36, 0.40], rgb2=[0.22, 0.25, 0.28], width=256, height=256, mark=mujoco.mjtMark.mjMARK_EDGE,
                     markrgb=[0.7, 0.7, 0.7])
    mat = spec.add_material(name="floor", texrepeat=[1, 1], texuniform=True, reflectance=0.05)
    mat.textures[mujoco.mjtTextureRole.mjTEXROLE_RGB] = "grid"
    friction = [terrain.friction, 0.005, 0.0001]
    if terrain.kind == "mixed":  # LocomotionEnv buries the floor an env does not walk on
        world.add_geom(name="floor", type=mujoco.mjtGeom.mjGEOM_PLANE, size=[0, 0, 0.05], material="floor",
                       friction=friction, group=TERRAIN_GROUP, **_FLOOR)
        spec.add_hfield(name="terrain", nrow=ROUGH_CELLS, ncol=ROUGH_CELLS,
                        size=[terrain.rough_size, terrain.rough_size, terrain.rough_height, 0.1],
                        userdata=_rough_heights(terrain.seed).ravel().tolist())
        world.add_geom(name=ROUGH_FLOOR, type=mujoco.mjtGeom.mjGEOM_HFIELD, hfieldname="terrain", material="floor",
                       pos=[0, 0, -terrain.rough_height / 2], friction=friction, group=TERRAIN_GROUP, **_FLOOR)
    else:
        if terrain.kind not in KINDS:
            raise ConfigError(f"unknown terrain {terrain.kind!r} (use one of {', '.join(KINDS)}, or 'mixed' to train)")
        add_terrain(spec, Terrain(terrain.kind, terrain.seed), terrain.world_level(), material="floor",
                    friction=friction, **_FLOOR)
    world.add_light(name="sun", pos=[0, 0, 4], dir=[0, 0, -1], type=mujoco.mjtLightType.mjLIGHT_DIRECTIONAL, diffuse=[0.7, 0.7, 0.7], castshadow=1)
    world.add_light(name="fill", pos=[2, -2, 3], dir=[-0.5, 0.5, -0.7], diffuse=[0.3, 0.3, 0.3], castshadow=0)
    # three-quarter front-side view that follows the pelvis
    base = spec.body(robot.base_link)
    cam_pos = np.array([1.6, -2.2, 0.35])
    base.add_camera(name=TRACKING_CAMERA, pos=cam_pos.tolist(), mode=mujoco.mjtCamLight.mjCAMLIGHT_TRACKCOM,
                    xyaxes=_look_at_xyaxes(cam_pos, np.array([0.0, 0.0, -0.1])))
    # side view: 2.2 m to the right of the pelvis, a little below it, looking level
    side_pos = np.array([0.0, -2.2, -0.2])
    base.add_camera(name=SIDE_CAMERA, pos=side_pos.tolist(), mode=mujoco.mjtCamLight.mjCAMLIGHT_TRACKCOM,
                    xyaxes=_look_at_xyaxes(side_pos, np.array([0.0, 0.0, -0.2])))


def _rough_heights(seed: int) -> np.ndarray:
    """'mixed''s (ROUGH_CELLS, ROUGH_CELLS) height field in [0, 1]: uniform noise smoothed over 3 cells (0.2 m apart on the
    default 40 m square, so bumps ~0.6 m across), with a level patch at the start."""
    n = ROUGH_CELLS
    heights = np.random.default_rng(seed).uniform(0.0, 1.0, size=(n, n))
    kernel = np.ones(3) / 3.0
    for axis in (0, 1):
        heights = np.apply_along_axis(lambda r: np.convolve(r, kernel, mode="same"), axis, heights)
    heights = (heights - heights.min()) / max(np.ptp(heights), 1e-9)
    centre = slice(n // 2 - 3, n // 2 + 4)
    heights[centre, centre] = heights[centre, centre].mean()
    return heights


def _look_at_xyaxes(eye: np.ndarray, target: np.ndarray) -> list:
    forward = target - eye
    forward /= np.linalg.norm(forward)
    x = np.cross(forward, [0, 0, 1.0])
    x /= np.linalg.norm(x)
    y = np.cross(x, forward)
    return np.concatenate([x, y]).tolist()


def build_model(robot: RobotConfig, terrain: TerrainConfig | None = None, ctrl_history: int = 0) -> mujoco.MjModel:
    spec = build_spec(robot, terrain, ctrl_history)
    try:
        return spec.compile()
    except Exception as exc:
        raise ConfigError(f"MuJoCo could not compile the robot model: {exc}") from exc


@dataclasses.dataclass(frozen=True)
class ModelIndex:
    """Addresses into qpos/qvel/ctrl/sensordata, resolved once by name."""

    qpos_joints: np.ndarray
    qvel_joints: np.ndarray
    actuators: np.ndarray
    sensor: dict  # sensor name -> slice into sensordata
    foot_body_ids: tuple
    base_body_id: int
    terrain_geom_ids: frozenset
    """The world's terrain geoms (sim.terrain.TERRAIN_GROUP): what a foot touches when it is on the ground."""

    @classmethod
    def from_model(cls, model: mujoco.MjModel, robot: RobotConfig) -> "ModelIndex":
        qpos = np.array([model.jnt_qposadr[model.joint(n).id] for n in robot.joint_names])
        qvel = np.array([model.jnt_dofadr[model.joint(n).id] for n in robot.joint_names])
        acts = np.array([model.actuator(n).id for n in robot.joint_names])
        sensors = {}
        for i in range(model.nsensor):
            s = model.sensor(i)
            sensors[s.name] = slice(int(model.sensor_adr[i]), int(model.sensor_adr[i] + model.sensor_dim[i]))
        return cls(qpos, qvel, acts, sensors, tuple(model.body(n).id for n in robot.feet),
                   model.body(robot.base_link).id, terrain_geom_ids(model))


def terrain_geom_ids(model: mujoco.MjModel) -> frozenset:
    """Ids of the terrain geoms of `model` (the world's floor, steps, blocks and slopes)."""
    return frozenset(np.flatnonzero((model.geom_group == TERRAIN_GROUP) & (model.geom_bodyid == 0)).tolist())
