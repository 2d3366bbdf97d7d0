# attack: allocate through an allowed function by overriding its shape
# expect: keyword
# stage: static


def _reward_alloc(state):
    big = np.ones_like(state.base_height, shape=(10**10,))  # <- rejected here
    return state.base_height + big[0]
