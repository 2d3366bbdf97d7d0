"""Alternating gait that follows the gait clock, with enough air time per step."""

TARGET_AIR_TIME = 0.35
FEET = (0, 1)


def stance_expected(state, foot):
    # left foot (0) in stance for phase < 0.5, right foot (1) for phase >= 0.5
    left = state.gait_phase < 0.5
    return left if foot == 0 else np.logical_not(left)


def _reward_contact_matches_phase(state):
    score = np.zeros_like(state.base_height)
    for foot in FEET:
        match = stance_expected(state, foot) == state.foot_contact[:, foot]
        score += match.astype(float)
    return score / len(FEET)


def _reward_air_time(state):
    # paid on touchdown only, so the policy takes full steps instead of shuffling
    landing = state.first_contact.astype(float)
    err = np.abs(state.foot_air_time - TARGET_AIR_TIME)
    return np.sum(landing * np.exp(-err / 0.1), axis=1) / 2.0


def _cost_stance_slip(state):
    planar_speed = np.linalg_norm(state.foot_vel[:, :, :2], axis=2)
    return np.clip(np.sum(planar_speed * state.foot_contact, axis=1), 0.0, 1.0)


def _reward_swing_clearance(state):
    swing = np.logical_not(state.foot_contact)
    lifted = np.where(swing, np.minimum(state.foot_pos[:, :, 2] / 0.08, 1.0), 1.0)
    return np.mean(lifted, axis=1)
