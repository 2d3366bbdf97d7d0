# attack: allocate a billion-element list
# expect: repetition
# stage: static


def _reward_alloc(state):
    big = [0] * 10**9  # <- rejected here
    return state.base_height + len(big)
