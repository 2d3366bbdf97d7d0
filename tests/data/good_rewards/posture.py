"""Straight knees, level pelvis, smooth actions: exercises loops, comprehensions, methods, joint names."""

KNEE_SIGMA = 0.3
HEIGHT_TARGET = 0.85
LEG_WEIGHTS = (1.0, 1.0, 0.5, 2.0, 0.5, 0.5)  # hip yaw, hip roll, hip pitch, knee, ankle pitch, ankle roll


def knee_bend(state):
    """Sum of squared knee angles, knees found by name."""
    bend = np.zeros_like(state.base_height)
    for i, name in enumerate(state.joint_names):
        if name.endswith("knee"):
            bend += np.square(state.joint_pos[:, i])
    return bend


def _reward_straight_knees(state: "RewardState") -> "np.ndarray":  # annotations are ignored
    return np.exp(-knee_bend(state) / KNEE_SIGMA)


def _reward_height(state):
    return np.exp(-np.abs(state.base_height - HEIGHT_TARGET) / 0.05)


def _cost_action_jerk(state):
    diff = state.action - state.last_action
    return np.mean(diff ** 2, axis=1).clip(0.0, 1.0)


def _cost_pose_deviation(state):
    weights = np.array(LEG_WEIGHTS + LEG_WEIGHTS)
    dev = np.abs(state.joint_pos - state.default_joint_pos) * weights
    return np.tanh(dev.sum(axis=1) / 10.0)


def _cost_near_joint_limits(state):
    span = state.joint_pos_upper - state.joint_pos_lower
    margin = 0.05 * span
    below = np.maximum(state.joint_pos_lower + margin - state.joint_pos, 0.0)
    above = np.maximum(state.joint_pos - (state.joint_pos_upper - margin), 0.0)
    total = 0.0
    for side in (below, above):
        total = total + np.sum(side / margin, axis=-1)
    return np.minimum(total, 1.0)


def _cost_body_contact(state):
    left_right = [state.foot_contact_force[:, k] for k in range(2)]
    heavy = (left_right[0] + left_right[1]) > 2000.0
    return np.logical_or(state.body_collision, heavy).astype(np.float64)
