# attack: not even Python
# expect: syntax
# stage: static


def _reward_broken(state):
    return np.exp(-(state.base_height - 0.8) ** 2 /  # <- rejected here
