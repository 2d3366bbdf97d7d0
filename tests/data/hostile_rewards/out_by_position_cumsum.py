# attack: fake the base velocity a library term scores, through cumsum's out argument by position
# class: writable-state
# expect: signature
# stage: run


def _reward_speed(state):
    state.base_lin_vel.cumsum(0, None, state.base_lin_vel)  # <- rejected here
    return np.exp(-np.abs(state.base_lin_vel[:, 0] - state.command[:, 0]))
