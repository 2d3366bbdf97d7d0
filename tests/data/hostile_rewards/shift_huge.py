# attack: a left shift builds a billion-bit integer
# expect: operator
# stage: static


def _reward_shift(state):
    big = 1 << 1000000000  # <- rejected here
    return state.base_height + big
