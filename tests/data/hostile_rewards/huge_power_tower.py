# attack: 10**10**10 takes forever and unbounded memory
# expect: power
# stage: static


def _reward_alloc(state):
    big = 10**10**10  # <- rejected here
    return state.base_height + big
