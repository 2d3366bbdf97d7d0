# attack: an (N, 1) column instead of (N,)
# expect: shape
# stage: run


def _reward_column(state):  # <- rejected here
    return np.sum(state.foot_contact_force, axis=1, keepdims=True)
