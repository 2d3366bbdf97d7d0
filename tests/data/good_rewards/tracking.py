"""Track the commanded forward speed and yaw rate; stay upright (hand-checked numbers in tests)."""

SIGMA_VX = 0.25  # m^2/s^2
SIGMA_YAW = 0.5


def forward_speed_error(state):
    """Squared error between body forward velocity and the command (a semantic state variable)."""
    return np.square(state.base_lin_vel[:, 0] - state.command[:, 0])


def _reward_track_forward_speed(state):
    return np.exp(-forward_speed_error(state) / SIGMA_VX)


def _reward_track_yaw_rate(state):
    return np.exp(-np.square(state.base_ang_vel[:, 2] - state.command[:, 2]) / SIGMA_YAW)


def _cost_tilt(state):
    # gravity leaves the body z axis when the pelvis tilts: 0 upright, 1 lying flat
    return np.clip(np.linalg_norm(state.projected_gravity[:, :2], axis=1), 0.0, 1.0)


def _cost_fall(state):
    return state.terminated  # bool array: accepted and converted to 0/1
