# attack: allocate 80 GB with np.zeros
# expect: np-name
# stage: static


def _reward_alloc(state):
    big = np.zeros(10**10)  # <- rejected here
    return state.base_height + big[0]
