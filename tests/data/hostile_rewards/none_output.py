# attack: forget to return anything
# expect: shape
# stage: run


def _reward_nothing(state):  # <- rejected here
    value = np.exp(-state.base_height)
