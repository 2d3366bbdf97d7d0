# attack: allocate a 10 GB string
# expect: repetition
# stage: static


def _reward_alloc(state):
    big = "a" * 10**10  # <- rejected here
    return state.base_height + len(big)
