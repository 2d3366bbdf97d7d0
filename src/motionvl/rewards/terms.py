"""Library of named, batched reward terms (the hand-written building blocks of a reward spec).

Every term is a plain function of a `RewardState` plus keyword parameters and returns an (N,)
array normalised to roughly [0, 1]: tracking terms use exp kernels (1 = perfect), costs are
ratios to a limit or a reference scale, squared and clipped per element (1 = at or beyond it).
The prefix carries the sign: `_reward_<name>` adds, `_cost_<name>` subtracts. Because of the
normalisation a spec weight in [0, 1] means the same thing for every term.

`REGISTRY` maps each name to `LibraryTerm(fn, sign, params, doc)`; it is built from the
functions below, so a term's default parameters are its keyword defaults and its doc is the
first line of its docstring.

Gait convention (from `RewardState.gait_phase`): left foot in stance for phase < 0.5, right
foot for phase >= 0.5. With a (near) zero command both feet are expected in stance.
"""

from __future__ import annotations

import functools
import inspect
import sys
from typing import Callable, NamedTuple

import numpy as np

from motionvl import policy_io
from motionvl.rewards.state import RewardState
from motionvl.robot import leg_pair
from motionvl.sim.math import to_heading_frame, yaw_of


class LibraryTerm(NamedTuple):
    fn: Callable
    sign: int
    params: dict
    doc: str


STAND_BELOW = 0.1
"""Default command magnitude (m/s, rad/s) at or below which every component counts as standing: the gait
terms then ask for both feet down and the stepping feedforward (EnvConfig.gait_stand_below) rests."""


# ----------------------------------------------------------------------------- helpers
def _sq_ratio(x: np.ndarray, scale: float) -> np.ndarray:
    """(x / scale)^2 clipped to 1 per element."""
    return np.minimum(np.square(x / scale), 1.0)


@functools.lru_cache(maxsize=256)
def _select_joints(joint_names: tuple, joint_roles: tuple, patterns: tuple) -> np.ndarray:
    """Joints a selector names: 'all', a joint's name, or a part of its declared kind ('hip' is every hip joint)."""
    if "all" in patterns:
        return np.arange(len(joint_names))
    ids = [i for i, (name, (_, kind)) in enumerate(zip(joint_names, joint_roles))
           if any(p == name or (kind and p in kind) for p in patterns)]
    if not ids:
        kinds = sorted({k for _, k in joint_roles if k})
        raise ValueError(f"no joint is named or has a kind containing any of {list(patterns)}; joints are "
                         f"{list(joint_names)}, kinds {kinds}")
    return np.array(ids)


@functools.lru_cache(maxsize=64)
def _leg_pair(joint_roles: tuple, kind: str) -> np.ndarray:
    """Indices [left, right] of the joints of one kind, e.g. 'knee' -> (left knee, right knee), as declared."""
    return leg_pair(joint_roles, kind)


def _joint_pair(state: RewardState, kind: str) -> np.ndarray:
    """(N, 2) positions of the left and right joint of `kind`."""
    return state.joint_pos[:, _leg_pair(tuple(state.joint_roles), kind)]


def moving(state: RewardState, stand_below: float = STAND_BELOW) -> np.ndarray:
    """(N,) bool: the command asks for motion (any component above `stand_below`)."""
    return policy_io.moving(state.command, stand_below)


def expected_stance(state: RewardState, stand_below: float = STAND_BELOW) -> np.ndarray:
    """(N, 2) bool: which foot the gait clock puts in stance (both when standing)."""
    return policy_io.expected_stance(state.gait_phase, state.command, stand_below)


def swing_progress(state: RewardState) -> np.ndarray:
    """(N, 2) progress through the current half cycle in [0, 1) for each foot."""
    return policy_io.swing_progress(state.gait_phase)


def foot_height(state: RewardState) -> np.ndarray:
    """(N, 2) sole height above the lower sole.

    Relative to the other foot rather than the world so it works on rough terrain, where the
    state carries no ground height under the feet; on flat ground it equals the sole height
    whenever one foot stands.
    """
    z = state.foot_pos[:, :, 2]
    return z - z.min(axis=1, keepdims=True)


def _stance_mean(values: np.ndarray, stance: np.ndarray) -> np.ndarray:
    """Mean of (N, 2) `values` over feet in stance; 0 when no foot is."""
    n = stance.sum(axis=1)
    return np.where(n > 0, (values * stance).sum(axis=1) / np.maximum(n, 1), 0.0)


# ----------------------------------------------------------------------------- task tracking
def _reward_tracking_lin_vel(state: RewardState, *, sigma: float = 0.25) -> np.ndarray:
    """exp(-|cmd_xy - v_xy|^2 / sigma): forward/lateral velocity tracking in the body frame."""
    err = np.sum(np.square(state.command[:, :2] - state.base_lin_vel[:, :2]), axis=1)
    return np.exp(-err / sigma)


def _cost_lin_vel_error(state: RewardState, *, scale: float = 1.0) -> np.ndarray:
    """|cmd_xy - v_xy| / scale clipped: the velocity error itself, linear (m/s, as evaluations report it).

    The exp kernel above is flat near its peak (0.08 m/s short of the command still earns 97 %),
    so costs that grow with speed settle a policy below the command; a linear error keeps the
    same pull at every error down to zero.
    """
    err = np.linalg.norm(state.command[:, :2] - state.base_lin_vel[:, :2], axis=1)
    return np.minimum(err / scale, 1.0)


def _cost_lin_vel_drift(state: RewardState, *, scale: float = 0.5) -> np.ndarray:
    """|cmd_xy - v_xy averaged over a gait period| / scale clipped: a steady speed shortfall or sideways drift.

    60-minute policies walked 0.05-0.1 m/s short of 0.3 m/s sideways commands and 0.03-0.06 short of
    1.0 m/s forward, in the stride average, under an in-stride sway of the pelvis of a similar size
    (measured): while the sway is larger than the shortfall, the mean |error| of single steps barely
    changes with it, so `lin_vel_error` hardly pulls; the stride average does (as `yaw_drift` for turns).
    """
    err = np.linalg.norm(state.command[:, :2] - state.base_vel_avg[:, :2], axis=1)
    return np.minimum(err / scale, 1.0)


def _reward_tracking_ang_vel(state: RewardState, *, sigma: float = 0.25) -> np.ndarray:
    """exp(-(cmd_yaw - w_z)^2 / sigma): yaw-rate tracking."""
    return np.exp(-np.square(state.command[:, 2] - state.base_ang_vel[:, 2]) / sigma)


def _cost_yaw_rate_error(state: RewardState, *, scale: float = 1.0) -> np.ndarray:
    """|cmd_yaw - w_z| / scale clipped: the yaw-rate error itself, linear (rad/s).

    The exp kernel above pays 96 % at 0.1 rad/s error, which integrates to ~30 deg of heading
    drift in 10 s at a zero yaw-rate command (measured on 60-minute policies).
    """
    return np.minimum(np.abs(state.command[:, 2] - state.base_ang_vel[:, 2]) / scale, 1.0)


def _cost_yaw_drift(state: RewardState, *, scale: float = 0.5) -> np.ndarray:
    """|cmd_yaw - yaw rate averaged over a gait period| / scale clipped: a steady turn not commanded.

    Policies turned 0.05-0.08 rad/s off a zero yaw-rate command, mostly one way (14-48 deg in
    10 s), under a stride-to-stride yaw sway of ~0.19 rad/s (measured): per step the sway hides
    such a bias from any kernel of the instantaneous error (even |error| grows only with its
    square while the sway is larger), the stride average does not.
    """
    return np.minimum(np.abs(state.command[:, 2] - state.base_vel_avg[:, 2]) / scale, 1.0)


def _reward_tracking_heading(state: RewardState, *, sigma: float = 0.1) -> np.ndarray:
    """exp(-heading_error^2 / sigma): stay on the course the command asks for (rad^2; 0.1 pays 90 % at 6 deg).

    The rate terms above leave a steady turn of a few degrees per second almost unpaid; this one
    grows with the heading it costs. A policy can only hold it with `heading_observation` on
    (without, the error is not in what it sees).
    """
    return np.exp(-np.square(state.heading_error) / sigma)


def _reward_alive(state: RewardState) -> np.ndarray:
    """1 every step the robot has not fallen (survival bonus)."""
    return (~state.terminated).astype(np.float64)


def _cost_termination(state: RewardState) -> np.ndarray:
    """1 on the step the episode ends by a fall (not by time-out)."""
    return state.terminated.astype(np.float64)


# ----------------------------------------------------------------------------- base
def _cost_orientation(state: RewardState, *, tilt_scale: float = 0.4) -> np.ndarray:
    """Base tilt: |gravity_xy|^2 / sin(tilt_scale)^2, clipped to 1 (flat pelvis)."""
    return np.minimum(np.sum(np.square(state.projected_gravity[:, :2]), axis=1) / np.sin(tilt_scale) ** 2, 1.0)


def _cost_base_height(state: RewardState, *, target: float = 0.82, scale: float = 0.1) -> np.ndarray:
    """((h - target) / scale)^2 clipped: pelvis height above the ground."""
    return _sq_ratio(state.base_height - target, scale)


def _cost_lin_vel_z(state: RewardState, *, scale: float = 0.5) -> np.ndarray:
    """(v_z / scale)^2 clipped: vertical bouncing of the pelvis."""
    return _sq_ratio(state.base_lin_vel[:, 2], scale)


def _cost_ang_vel_xy(state: RewardState, *, scale: float = 2.0) -> np.ndarray:
    """Mean over roll/pitch rates of (w / scale)^2 clipped: pelvis wobble."""
    return _sq_ratio(state.base_ang_vel[:, :2], scale).mean(axis=1)


# ----------------------------------------------------------------------------- feet and gait
def _reward_contact_phase(state: RewardState, *, double_support: float = 0.1,
                          stand_below: float = STAND_BELOW) -> np.ndarray:
    """Fraction of feet whose contact matches the gait clock (1 = in phase, 0 = swapped).

    The swing foot may still touch the ground in the first and last `double_support` fraction
    of its swing (lift-off lag, early touchdown), so a real gait with short double support can
    reach 1.
    """
    stance = expected_stance(state, stand_below)
    progress = swing_progress(state)
    lenient = ~stance & ((progress < double_support) | (progress > 1.0 - double_support))
    match = (state.foot_contact == stance) | lenient
    return match.mean(axis=1)


def _reward_feet_clearance(state: RewardState, *, height: float = 0.06, stand_below: float = STAND_BELOW) -> np.ndarray:
    """Clock's swing foot lift vs height: 0 dragging, 1 from height to 2x height, 0 again at 3x.

    A ramp, not a reference arc: an arc pays a dragging foot near the swing's ends and punishes
    lifting early, which kept a trained policy in a sliding shuffle. The fall-off above 2x
    stops high marching (18 cm swings when the action range allowed them). When standing the
    score is how well both feet stay down. The default 0.06 m is within reach of mvl_biped's
    flat foot even at action_scale 0.25 (~5 cm there, 8 cm toe-down); specs may ask for more.
    """
    r = foot_height(state) / height
    lift = np.clip(np.minimum(r, 3.0 - r), 0.0, 1.0)
    stance = expected_stance(state, stand_below)
    swing_lift = np.where(stance, 0.0, lift).sum(axis=1)
    return np.where(moving(state, stand_below), swing_lift, 1.0 - np.minimum(r, 1.0).mean(axis=1))


def _reward_feet_air_time(state: RewardState, *, target_air_time: float | None = None,
                          stand_below: float = STAND_BELOW) -> np.ndarray:
    """On touchdown, (air time / target)^2 capped at 1 (target default 0.4 x gait period).

    Squared so that many short shuffling steps earn less than fewer full steps.
    """
    target = 0.4 * state.gait_period if target_air_time is None else target_air_time
    per_foot = np.square(np.minimum(state.foot_air_time / target, 1.0)) * state.first_contact
    return np.minimum(per_foot.sum(axis=1), 1.0) * moving(state, stand_below)


def _cost_foot_slip(state: RewardState, *, speed_scale: float = 0.5) -> np.ndarray:
    """Mean over feet of contact x |v_xy foot| / speed_scale (clipped): sliding stance feet.

    Linear, not squared, so that small slips near zero still cost something.
    """
    speed = np.linalg.norm(state.foot_vel[:, :, :2], axis=2)
    return (state.foot_contact * np.minimum(speed / speed_scale, 1.0)).mean(axis=1)


def _cost_touchdown_speed(state: RewardState, *, speed_scale: float = 1.5) -> np.ndarray:
    """Max over feet of first_contact x |v_xy foot| / speed_scale (clipped): hard, sliding landings.

    Only the landing sample: feet of the trained policies touched down at 1.1-1.5 m/s horizontal
    speed and stopped within one policy period, a jolt the mid-stance foot_slip average hardly
    sees. The scale keeps the cost linear over those speeds; max, not mean, over feet because
    landings are single-foot events (a mean would halve every landing's cost).
    """
    speed = np.linalg.norm(state.foot_vel[:, :, :2], axis=2)
    return (state.first_contact * np.minimum(speed / speed_scale, 1.0)).max(axis=1)


def _cost_feet_contact_forces(state: RewardState, *, limit: float = 500.0) -> np.ndarray:
    """Mean over feet of (F - limit) / limit, clipped to [0, 1]: hard impacts (robot weighs ~385 N)."""
    excess = np.clip((state.foot_contact_force - limit) / limit, 0.0, 1.0)
    return excess.mean(axis=1)


def _cost_feet_distance(state: RewardState, *, min_dist: float = 0.12, max_dist: float = 0.30,
                        tolerance: float = 0.1) -> np.ndarray:
    """Lateral sole spacing (heading frame) outside [min_dist, max_dist], / tolerance, clipped."""
    d = state.foot_pos[:, 0, :2] - state.foot_pos[:, 1, :2]
    lateral = to_heading_frame(d, yaw_of(state.base_quat))[:, 1]
    out = np.maximum(min_dist - lateral, 0.0) + np.maximum(lateral - max_dist, 0.0)
    return np.minimum(out / tolerance, 1.0)


def _cost_knee_distance(state: RewardState, *, min_dist: float = 0.12, max_dist: float = 0.30,
                        tolerance: float = 0.1, hip_width: float = 0.18,
                        thigh_length: float = 0.34) -> np.ndarray:
    """Estimated lateral knee spacing outside [min_dist, max_dist], / tolerance, clipped.

    Knee positions are not in the state: spacing ~ hip_width + thigh_length * (sin(left hip
    roll) - sin(right hip roll)) (both roll axes +x, so +roll moves a leg to the left), which
    ignores the small hip-yaw coupling of a bent knee. Defaults match urdf/mvl_biped.urdf.
    """
    roll = _joint_pair(state, "hip_roll")
    spacing = hip_width + thigh_length * (np.sin(roll[:, 0]) - np.sin(roll[:, 1]))
    out = np.maximum(min_dist - spacing, 0.0) + np.maximum(spacing - max_dist, 0.0)
    return np.minimum(out / tolerance, 1.0)


# ----------------------------------------------------------------------------- posture and gait style
def _cost_default_pose(state: RewardState, *, joints: tuple = ("hip_yaw", "hip_roll"), scale: float = 0.3) -> np.ndarray:
    """Mean over `joints` (kinds or parts of them, joint names, or 'all') of ((q - q_default) / scale)^2 clipped."""
    ids = _select_joints(tuple(state.joint_names), tuple(state.joint_roles), tuple(joints))
    return _sq_ratio(state.joint_pos[:, ids] - state.default_joint_pos[ids], scale).mean(axis=1)


def _reward_knee_extension(state: RewardState, *, min_angle: float = 0.0, max_angle: float = 0.2,
                           sigma: float = 0.2) -> np.ndarray:
    """Stance knees within [min_angle, max_angle] rad (straight-leg walking); exp kernel outside, 0 if airborne."""
    knee = _joint_pair(state, "knee")
    outside = np.maximum(knee - max_angle, 0.0) + np.maximum(min_angle - knee, 0.0)
    return _stance_mean(np.exp(-np.square(outside / sigma)), state.foot_contact)


def _reward_ankle_stance(state: RewardState, *, sigma: float = 0.15) -> np.ndarray:
    """Stance feet flat: exp(-(foot pitch^2 + roll^2) / sigma^2), 0 if airborne.

    Foot orientation is not in the state; it is estimated from the sagittal and frontal joint
    chains (pitch = base pitch + hip pitch + knee + ankle pitch, roll = base roll + hip roll +
    ankle roll, all parallel axes on this robot), within a few hundredths of a rad for moderate
    hip yaw. The default pose has a flat foot.
    """
    g = state.projected_gravity
    pitch = np.arcsin(np.clip(g[:, 0:1], -1, 1)) + _joint_pair(state, "hip_pitch") + _joint_pair(state, "knee") \
        + _joint_pair(state, "ankle_pitch")
    roll = -np.arcsin(np.clip(g[:, 1:2], -1, 1)) + _joint_pair(state, "hip_roll") + _joint_pair(state, "ankle_roll")
    return _stance_mean(np.exp(-(np.square(pitch) + np.square(roll)) / sigma ** 2), state.foot_contact)


def _reward_toe_direction(state: RewardState, *, toe_out: float = 0.0, sigma: float = 0.15) -> np.ndarray:
    """Feet point along the base heading: exp(-mean((hip yaw - target)^2) / sigma^2).

    Foot yaw relative to the pelvis is taken as the hip yaw angle (foot orientation is not in
    the state). `toe_out` > 0 asks for toes turned outward by that angle on both feet.
    """
    yaw = _joint_pair(state, "hip_yaw")
    err = np.square(yaw[:, 0] - toe_out) + np.square(yaw[:, 1] + toe_out)
    return np.exp(-0.5 * err / sigma ** 2)


def reference_gait_joint_indices(joint_roles) -> np.ndarray:
    """(2, 3) joint indices [left, right] x policy_io.FEEDFORWARD_KINDS, the layout of `reference_gait_offsets`."""
    return np.stack([_leg_pair(tuple(joint_roles), kind) for kind in policy_io.FEEDFORWARD_KINDS], axis=1)


def reference_gait_offsets(state: RewardState, amplitude: float = 0.35, stand_below: float = STAND_BELOW,
                           stride: float = 0.0) -> np.ndarray:
    """(N, 2, 3) reference offsets from the default pose of (hip pitch, knee, ankle pitch), left and right:
    the gait feed-forward of the action law (`motionvl.policy_io.gait_feedforward_offsets`) at the
    state's command and clock."""
    return policy_io.gait_feedforward_offsets(state.command, state.gait_phase, amplitude, stand_below, stride)


def _reward_reference_gait(state: RewardState, *, amplitude: float = 0.35, sigma: float = 0.3,
                           stand_below: float = STAND_BELOW) -> np.ndarray:
    """Sagittal leg joints follow a clock-driven stepping reference: exp(-mean(err^2) / sigma^2).

    The reference (`reference_gait_offsets`) lifts the swing foot by folding hip, knee and ankle
    and holds the stance leg at the default pose; err is over both legs' hip pitch, knee and
    ankle pitch. A dense hint towards stepping on the clock (joint-space, unlike the contact
    schedule of contact_phase); it does not ask for the stance leg's sweep, so keep its weight
    below the velocity tracking terms'.
    """
    idx = reference_gait_joint_indices(state.joint_roles)
    err = state.joint_pos[:, idx] - state.default_joint_pos[idx] - reference_gait_offsets(state, amplitude, stand_below)
    return np.exp(-np.square(err).mean(axis=(1, 2)) / sigma ** 2)


# ----------------------------------------------------------------------------- smoothness and limits
def _cost_action_rate(state: RewardState, *, scale: float = 0.5) -> np.ndarray:
    """Mean over joints of ((a - a_prev) / scale)^2 clipped: action smoothness."""
    return _sq_ratio(state.action - state.last_action, scale).mean(axis=1)


def _cost_torques(state: RewardState) -> np.ndarray:
    """Mean over joints of (torque / effort limit)^2."""
    return np.minimum(np.square(state.joint_torque / state.effort_limit), 1.0).mean(axis=1)


def _cost_joint_vel(state: RewardState, *, scale: float = 10.0) -> np.ndarray:
    """Mean over joints of (qdot / scale)^2 clipped."""
    return _sq_ratio(state.joint_vel, scale).mean(axis=1)


def _cost_joint_acc(state: RewardState, *, scale: float = 300.0) -> np.ndarray:
    """Mean over joints of (qddot / scale)^2 clipped."""
    return _sq_ratio(state.joint_acc, scale).mean(axis=1)


def _cost_joint_limits(state: RewardState, *, soft_fraction: float = 0.9) -> np.ndarray:
    """Mean over joints of how far past the soft range (soft_fraction of the hard range) a joint is, 1 at the hard limit."""
    mid = 0.5 * (state.joint_pos_upper + state.joint_pos_lower)
    half = 0.5 * (state.joint_pos_upper - state.joint_pos_lower)
    margin = np.maximum((1.0 - soft_fraction) * half, 1e-6)
    over = np.maximum(np.abs(state.joint_pos - mid) - soft_fraction * half, 0.0)
    return np.minimum(over / margin, 1.0).mean(axis=1)


def _cost_collision(state: RewardState) -> np.ndarray:
    """1 when a non-foot body part touches the ground."""
    return state.body_collision.astype(np.float64)


# ----------------------------------------------------------------------------- registry
def _build_registry() -> dict:
    registry = {}
    for fn_name, fn in vars(sys.modules[__name__]).items():
        for prefix, sign in (("_reward_", 1), ("_cost_", -1)):
            if fn_name.startswith(prefix) and callable(fn):
                params = {p.name: p.default for p in inspect.signature(fn).parameters.values()
                          if p.kind is inspect.Parameter.KEYWORD_ONLY}
                doc = (fn.__doc__ or "").strip().splitlines()[0]
                registry[fn_name[len(prefix):]] = LibraryTerm(fn, sign, params, doc)
    return registry


REGISTRY: dict[str, LibraryTerm] = _build_registry()
"""name -> LibraryTerm(fn, sign (+1 reward / -1 cost), default params, one-line doc)."""

ALIASES = {
    "feet_contact": "contact_phase",
    "feet_swing_height": "feet_clearance",
    "survival": "alive",
    "body_collision": "collision",
    "dof_pos_limits": "joint_limits",
    "hip_pos": "default_pose",
    "feet_slip": "foot_slip",
    "straight_knees": "knee_extension",
    "flat_foot": "ankle_stance",
}
"""Names used in other code bases / the paper, resolved to library names by the spec loader."""

POSITIVE_PARAMS = frozenset({"sigma", "scale", "tilt_scale", "height", "speed_scale", "limit", "tolerance",
                             "target_air_time", "hip_width", "thigh_length", "target"})
"""Parameters that divide or set a length: they must be > 0."""


def describe_library() -> str:
    """One line per library term (sign, name, default params, doc) for the LLM prompt."""
    lines = []
    for name, t in REGISTRY.items():
        params = ", ".join(f"{k}={v!r}" for k, v in t.params.items())
        lines.append(f"{'+' if t.sign > 0 else '-'} {name}({params}): {t.doc}")
    return "\n".join(lines)
