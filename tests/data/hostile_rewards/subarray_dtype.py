# attack: a sub-array dtype multiplies every element by a million
# class: memory
# expect: dtype
# stage: static


def _reward_sub(state):
    big = state.base_height.astype("(1000,1000)f8")  # <- rejected here
    return state.base_height
