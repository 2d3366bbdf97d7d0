"""The read-only state that reward terms (built-in and generated) are computed from.

This is the one documented state API: the reward synthesizer puts `STATE_API_DOC` in its
prompt, the sandbox exposes exactly these names to generated code, and the locomotion
environment fills one `RewardState` per policy step. Every array is batched over N
environments; shapes below use N for that and J for the number of actuated joints (12).
Frames: "body" means the pelvis (base) frame, x forward, y left, z up; "world" is z up.
"""

from __future__ import annotations

import dataclasses

import numpy as np


@dataclasses.dataclass(frozen=True)
class RewardState:
    """Per-policy-step state of N environments (all float64 numpy arrays unless noted)."""

    dt: float
    """Policy step period in seconds (physics dt x decimation)."""
    base_pos: np.ndarray
    """(N, 3) pelvis position in the world frame, metres."""
    base_quat: np.ndarray
    """(N, 4) pelvis orientation, quaternion (w, x, y, z), world frame."""
    base_lin_vel: np.ndarray
    """(N, 3) pelvis linear velocity in the body frame, m/s."""
    base_ang_vel: np.ndarray
    """(N, 3) pelvis angular velocity in the body frame, rad/s."""
    base_vel_avg: np.ndarray
    """(N, 3) forward and lateral velocity (body frame, m/s) and yaw rate (rad/s), each averaged
    exponentially over one gait period: the sway within a stride averaged out, a steady drift or
    speed shortfall left in (zero at a reset)."""
    projected_gravity: np.ndarray
    """(N, 3) unit gravity vector in the body frame ((0, 0, -1) when upright)."""
    base_height: np.ndarray
    """(N,) pelvis height above the terrain under it, metres."""
    joint_pos: np.ndarray
    """(N, J) joint positions, rad, in robot-config joint order."""
    joint_vel: np.ndarray
    """(N, J) joint velocities, rad/s."""
    joint_acc: np.ndarray
    """(N, J) joint accelerations estimated over the last policy step, rad/s^2."""
    joint_torque: np.ndarray
    """(N, J) actuator torques applied at the end of the last policy step, N m."""
    default_joint_pos: np.ndarray
    """(J,) default standing pose, rad."""
    joint_pos_lower: np.ndarray
    """(J,) lower position limits, rad."""
    joint_pos_upper: np.ndarray
    """(J,) upper position limits, rad."""
    effort_limit: np.ndarray
    """(J,) torque limits, N m."""
    foot_pos: np.ndarray
    """(N, 2, 3) sole-centre positions (left, right) in the world frame, metres."""
    foot_vel: np.ndarray
    """(N, 2, 3) sole-centre linear velocities in the world frame, m/s."""
    foot_contact: np.ndarray
    """(N, 2) bool, sole touching the ground (normal force above a threshold)."""
    foot_contact_force: np.ndarray
    """(N, 2) normal contact force on each sole, N."""
    foot_air_time: np.ndarray
    """(N, 2) seconds each foot has been in the air (reset to 0 on touchdown)."""
    first_contact: np.ndarray
    """(N, 2) bool, the foot touched down during this step."""
    body_collision: np.ndarray
    """(N,) bool, a non-foot body part touched the ground."""
    command: np.ndarray
    """(N, 3) velocity command: forward m/s, lateral m/s, yaw rate rad/s (body frame)."""
    heading_error: np.ndarray
    """(N,) the heading the command asks for (the pelvis heading when the command was given plus
    the yaw-rate command integrated since) minus the pelvis heading, rad, wrapped to [-pi, pi):
    + = the robot has turned right of its course."""
    gait_phase: np.ndarray
    """(N,) gait clock in [0, 1): left foot should be in stance for phase < 0.5."""
    gait_period: float
    """Nominal gait period in seconds."""
    action: np.ndarray
    """(N, J) the policy's action for this step (unitless, clipped)."""
    last_action: np.ndarray
    """(N, J) the previous step's action."""
    terminated: np.ndarray
    """(N,) bool, the episode ended by a fall at this step (not by a time-out)."""
    joint_names: tuple
    """Joint names in order (left leg then right leg)."""
    joint_roles: tuple = ()
    """(side, kind) of each joint in order, as the robot config declares them: side 'left', 'right' or
    None (midline), kind e.g. 'hip_yaw', 'hip_roll', 'hip_pitch', 'knee', 'ankle_pitch', 'ankle_roll'."""

    @property
    def num_envs(self) -> int:
        return int(self.base_pos.shape[0])


PER_ROBOT_FIELDS = frozenset({"default_joint_pos", "joint_pos_lower", "joint_pos_upper", "effort_limit"})
"""The array fields that are one (J,) value for the whole batch; every other array field has N rows."""


def state_api_doc() -> str:
    """Readable doc of every RewardState field, built from the attribute docstrings in this file.

    The docstrings under each field are the single source of truth (they are not kept at run
    time, so the source is parsed); the text goes verbatim into the reward synthesizer's prompt.
    """
    import ast
    import inspect
    import sys

    docs: dict[str, tuple[str, str]] = {}  # field -> (annotation, docstring)
    module_doc = ""
    try:
        tree = ast.parse(inspect.getsource(sys.modules[__name__]))
    except (OSError, TypeError):  # no source available (e.g. bytecode-only install)
        tree = ast.Module(body=[], type_ignores=[])
    else:
        module_doc = ast.get_docstring(tree) or ""
    for node in tree.body:
        if isinstance(node, ast.ClassDef) and node.name == "RewardState":
            for field, doc in zip(node.body, node.body[1:]):
                if isinstance(field, ast.AnnAssign) and isinstance(field.target, ast.Name) \
                        and isinstance(doc, ast.Expr) and isinstance(doc.value, ast.Constant) \
                        and isinstance(doc.value.value, str):
                    docs[field.target.id] = (ast.unparse(field.annotation), inspect.cleandoc(doc.value.value))
    # The conventions paragraph of the module docstring (N, J, frames) heads the field list.
    conventions = module_doc[module_doc.find("Every array"):] if "Every array" in module_doc else ""
    lines = ["`state` is a read-only RewardState. " + " ".join(conventions.split())]
    for f in dataclasses.fields(RewardState):
        annotation, doc = docs.get(f.name, (str(f.type), "(undocumented)"))
        kind = {"float": "float", "tuple": "tuple of str"}.get(annotation, "array")
        lines.append(f"- state.{f.name} [{kind}]: {doc}")
    lines.append("- state.num_envs [int]: N, the number of environments in the batch.")
    return "\n".join(lines)


STATE_API_DOC = state_api_doc()
